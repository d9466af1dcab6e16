"""``num.replica.fetchers`` in a real cluster: that many fetchers (each its own connection and fetch loop)
per leader, partitions spread over them by Kafka's ``getFetcherId``, and a dynamic change resizing them.

Which fetcher fetches a partition is visible in the follower's metrics, labelled like Kafka's: the
partition's ``FetcherLagMetrics`` series carries its fetcher's name ``ReplicaFetcherThread-<id>-<leader>``,
and every fetcher has its own ``FetcherStats`` (requests sent, bytes appended). The connections are counted
from the follower's process to the leader's port.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from tests.broker.harness import BrokerProcess
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.cluster.test_cluster_metrics import scrape

TIMEOUT_S = 15
TOPIC, PARTITIONS = "nf", 6
LAG = "kafka_server_FetcherLagMetrics_ConsumerLag"
REQUESTS = "kafka_server_FetcherStats_RequestsPerSec_total"
BYTES = "kafka_server_FetcherStats_BytesPerSec_total"
# Kafka's fetcher ids of nf-0..5, Utils.abs(31 * "nf".hashCode() + partition) % n, computed with Java
KAFKA_FETCHER_IDS = {2: [0, 1, 0, 1, 0, 1], 4: [0, 1, 2, 3, 0, 1]}
_LAG_SERIES = re.compile(r'clientId="ReplicaFetcherThread-(\d+)-(\d+)",partition="(\d+)",topic="([^"]+)"')
_ESTABLISHED = "01"  # TCP_ESTABLISHED in /proc/net/tcp
_STATS_SERIES = re.compile(r'brokerHost="[^"]*",brokerPort="(\d+)",clientId="ReplicaFetcherThread-(\d+)-(\d+)"')


def _produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 5, "acks": "all"})
    for i in range(count):
        for p in range(PARTITIONS):
            producer.produce(TOPIC, value=b"x" * 1000, partition=p, key=str(i).encode())
    assert producer.flush(30) == 0


def _fetcher_of_partitions(metrics: dict[str, float]) -> dict[int, int]:
    """partition -> fetcher id, from the follower's lag series of the topic (the leader is broker 1)."""
    out = {}
    for key in metrics:
        if key.startswith(LAG) and (m := _LAG_SERIES.search(key)) and m.group(4) == TOPIC:
            assert m.group(2) == "1", key
            out[int(m.group(3))] = int(m.group(1))
    return out


def _fetcher_stats(metrics: dict[str, float], name: str) -> dict[int, float]:
    """fetcher id -> the FetcherStats counter ``name`` of the follower's fetchers from broker 1."""
    return {int(m.group(2)): value for key, value in metrics.items()
            if key.startswith(name + "{") and (m := _STATS_SERIES.search(key)) and m.group(3) == "1"}


def _connections(follower: BrokerProcess, leader: BrokerProcess) -> int:
    """Established TCP connections from the follower's process to the leader's listener (Linux ``/proc``: the
    process's socket inodes, matched against the kernel's TCP table)."""
    inodes = set()
    for fd in Path(f"/proc/{follower.pid()}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port, state, inode = int(fields[2].rsplit(":", 1)[1], 16), fields[3], fields[9]
            count += state == _ESTABLISHED and remote_port == leader.port and inode in inodes
    return count


def _set_fetchers(cluster: Cluster, broker_id: int, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap, "log_level": 3})
    res = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[
        ConfigEntry("num.replica.fetchers", str(n), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)


def _spread_as_kafka(cluster: Cluster, n: int) -> dict[str, float]:
    """Wait until the follower fetches every partition with Kafka's fetcher for ``n`` fetchers, each of
    those fetchers has sent fetches, and no other fetcher is left; its metrics then."""
    expected = dict(enumerate(KAFKA_FETCHER_IDS[n]))
    found: dict[str, float] = {}

    def spread() -> bool:
        found.clear()
        found.update(scrape(cluster.brokers[2]))
        requests = _fetcher_stats(found, REQUESTS)
        return (_fetcher_of_partitions(found) == expected and set(requests) == set(expected.values())
                and all(v > 0 for v in requests.values()))
    wait_until(spread, TIMEOUT_S, f"the partitions spread over {n} fetchers as Kafka spreads them")
    return found


def test_partitions_spread_over_the_fetchers_and_a_dynamic_change_resizes_them(zk_connect: str,
                                                                               tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, 2, {"metrics.port": "0", "num.replica.fetchers": "2"}) as cluster:
        admin = cluster.admin()
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, replica_assignment=[[1, 2]] * PARTITIONS)])[
            TOPIC].result(TIMEOUT_S)
        cluster.wait_full_isr(TOPIC)
        _produce(cluster.bootstrap, 50)
        follower, leader = cluster.brokers[2], cluster.brokers[1]

        metrics = _spread_as_kafka(cluster, 2)
        assert set(_fetcher_stats(metrics, BYTES)) == {0, 1}
        wait_until(lambda: _connections(follower, leader) == 2, TIMEOUT_S, "two fetcher connections to broker 1")

        # num.replica.fetchers is dynamic (Kafka's DynamicThreadPool): up to double at a time
        _set_fetchers(cluster, 2, 4)
        metrics = _spread_as_kafka(cluster, 4)
        wait_until(lambda: _connections(follower, leader) == 4, TIMEOUT_S, "four fetcher connections to broker 1")
        before = _fetcher_stats(metrics, BYTES)
        _produce(cluster.bootstrap, 50)  # the new fetchers replicate: each appends its partitions' records
        wait_until(lambda: all(v > before.get(f, 0) for f, v in _fetcher_stats(scrape(follower), BYTES).items()),
                   TIMEOUT_S, "every fetcher appending")
        cluster.wait_full_isr(TOPIC)

        _set_fetchers(cluster, 2, 2)  # back down: fetchers 2 and 3 stop, their partitions move back
        _spread_as_kafka(cluster, 2)
        wait_until(lambda: _connections(follower, leader) == 2, TIMEOUT_S, "two fetcher connections again")
        cluster.wait_full_isr(TOPIC)
