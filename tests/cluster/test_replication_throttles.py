"""KIP-73 replication throttles in a real cluster: a reassignment throttled the way ``kafka-reassign-partitions
--throttle`` sets it up copies at the configured rate, an unthrottled partition moving beside it at once, and
removing the throttle lets the copy finish at full speed.

The setup is the tool's: ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` as
dynamic broker configs, and on the topic the moving partition's current replicas as throttled leaders
(``0:1``) and its new replica as a throttled follower (``0:3``).
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.cluster.test_cluster_metrics import scrape

TIMEOUT_S = 15
VALUE = b"v" * 10_000
# Fetches of 256 KiB per partition: the first one, which a rate measured from nothing lets through at once,
# is a small part of the copy (Kafka's default of 1 MiB would be an eighth of it).
PROPS = {"replica.fetch.max.bytes": "262144", "metrics.port": "0"}
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def _produce(bootstrap: str, topic: str, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 5, "acks": "all",
                         "batch.size": 65536})
    for _ in range(size // len(VALUE)):
        producer.produce(topic, value=VALUE, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def _log_bytes(cluster: Cluster, broker_id: int, topic: str) -> int:
    """The record bytes of ``topic``-0 on one broker: the sizes of its segment files."""
    return sum(f.stat().st_size for f in (cluster.brokers[broker_id].data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _admin_of(cluster: Cluster, broker_id: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap, "log_level": 3})


def _alter(admin: AdminClient, rtype: ResourceType, name: str, configs: dict[str, str | None]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                           else AlterConfigOpType.DELETE) for k, v in configs.items()]
    res = ConfigResource(rtype, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)


def _alter_cluster_default(cluster: Cluster, configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs (API 44) on the BROKER resource "" (confluent-kafka cannot name it)."""
    with WireClient(cluster.brokers[1].bootstrap) as w:
        r = w.call(44, 1, validate_only=False, resources=[{"resource_type": 4, "resource_name": "", "configs": [
            {"name": k, "config_operation": 0 if v is not None else 1, "value": v} for k, v in configs.items()]}])
    assert all(int(res.error_code) == 0 for res in r.responses), r


def _throttle_topic(cluster: Cluster, topic: str, leaders: str, followers: str, brokers: list[int]) -> None:
    """The topic's throttled replica lists, seen by every broker in ``brokers`` before the copy starts."""
    _alter(cluster.admin(), ResourceType.TOPIC, topic, {"leader.replication.throttled.replicas": leaders,
                                                         "follower.replication.throttled.replicas": followers})
    for b in brokers:
        admin = _admin_of(cluster, b)
        res = ConfigResource(ResourceType.TOPIC, topic)

        def seen(admin: AdminClient = admin, res: ConfigResource = res) -> bool:
            got = admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
            return (got["leader.replication.throttled.replicas"].value == leaders
                    and got["follower.replication.throttled.replicas"].value == followers)
        wait_until(seen, TIMEOUT_S, f"broker {b} seeing the throttled replicas of {topic}")


def _reassign(cluster: Cluster, moves: dict[str, list[int]]) -> None:
    """One AlterPartitionReassignments (API 45) to the controller for partition 0 of each topic."""
    controller = cluster.admin().list_topics(timeout=10).controller_id
    with WireClient(cluster.brokers[controller].bootstrap) as w:
        r = w.call(45, 0, timeout=30_000, topics=[
            {"name": t, "partitions": [{"partition_index": 0, "replicas": replicas}]} for t, replicas in moves.items()])
    assert r.error_code == 0 and all(p.error_code == 0 for t in r.responses for p in t.partitions), r


def _isr(cluster: Cluster) -> dict[str, list[int]]:
    topics = cluster.admin().list_topics(timeout=10).topics
    return {name: sorted(t.partitions[0].isrs) for name, t in topics.items() if 0 in t.partitions}


def test_a_throttled_reassignment_copies_at_the_rate_beside_an_unthrottled_one(zk_connect: str,
                                                                                tmp_path: Path) -> None:
    rate, size = 1_000_000, 8_000_000
    with running_cluster(zk_connect, tmp_path, 3, PROPS) as cluster:
        admin = cluster.admin()
        for topic in ("slow", "fast"):
            admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])])[topic].result(TIMEOUT_S)
        for topic in ("slow", "fast"):
            _produce(cluster.bootstrap, topic, size)
        copied = _log_bytes(cluster, 1, "slow")
        assert copied >= size
        # kafka-reassign-partitions --throttle: both rates on every broker the move involves, per broker
        for b in (1, 3):
            _alter(_admin_of(cluster, b), ResourceType.BROKER, str(b), dict.fromkeys(RATES, str(rate)))
        _throttle_topic(cluster, "slow", "0:1", "0:3", [1, 3])

        started = time.monotonic()
        _reassign(cluster, {"slow": [1, 3], "fast": [1, 3]})
        done: dict[str, float] = {}
        rates: dict[str, float] = {}

        def copied_both() -> bool:
            for topic, isr in _isr(cluster).items():
                if topic in ("slow", "fast") and 3 in isr and topic not in done:
                    done[topic] = time.monotonic() - started
            if not rates and time.monotonic() - started > 4:  # mid-copy: the quotas' byte-rate metrics
                rates["leader"] = scrape(cluster.brokers[1])["kafka_server_LeaderReplication_byte_rate"]
                rates["follower"] = scrape(cluster.brokers[3])["kafka_server_FollowerReplication_byte_rate"]
            return len(done) == 2

        expected = copied / rate
        wait_until(copied_both, expected * 2 + 10, "both new replicas in the ISR", interval_s=0.05)
        # the unthrottled partition on the same fetcher copies at full speed meanwhile
        assert done["fast"] < 0.25 * expected, done
        # the throttled one at the configured rate, within 20%
        assert 0.8 * expected <= done["slow"] <= 1.2 * expected, (done, expected)
        for side in ("leader", "follower"):
            assert 0.5 * rate <= rates[side] <= 1.5 * rate, rates
        assert _log_bytes(cluster, 3, "slow") == copied


def test_removing_the_throttle_lets_the_copy_finish_at_full_speed(zk_connect: str, tmp_path: Path) -> None:
    rate, size = 500_000, 6_000_000
    with running_cluster(zk_connect, tmp_path, 2, PROPS) as cluster:
        admin = cluster.admin()
        admin.create_topics([NewTopic("moving", 1, replica_assignment=[[1]])])["moving"].result(TIMEOUT_S)
        _produce(cluster.bootstrap, "moving", size)
        total = _log_bytes(cluster, 1, "moving")
        # a cluster-wide default this time (``/config/brokers/<default>``): in force on every broker
        _alter_cluster_default(cluster, dict.fromkeys(RATES, str(rate)))
        for b in (1, 2):
            wait_until(lambda b=b: _describe_rate(cluster, b) == str(rate), TIMEOUT_S, f"broker {b} throttled")
        _throttle_topic(cluster, "moving", "0:1", "0:2", [1, 2])

        started = time.monotonic()
        _reassign(cluster, {"moving": [1, 2]})
        wait_until(lambda: time.monotonic() - started >= 2.5, 5, "the copy under way")
        assert 2 not in _isr(cluster)["moving"]
        part_copied = _log_bytes(cluster, 2, "moving")
        # 2.5 s at 500 KB/s, the first fetch of 256 KiB and perhaps one more at the check: about a quarter
        assert 0 < part_copied < 0.35 * total, part_copied

        removed = time.monotonic()
        _alter_cluster_default(cluster, dict.fromkeys(RATES))  # what kafka-reassign-partitions --verify does
        wait_until(lambda: 2 in _isr(cluster)["moving"], TIMEOUT_S, "the new replica in the ISR", interval_s=0.05)
        finished_in = time.monotonic() - removed
        # what was left would have taken (total - part_copied) / rate, over 6 s, at the throttled rate
        assert finished_in < 0.3 * (total - part_copied) / rate, finished_in
        assert _log_bytes(cluster, 2, "moving") == total


def _describe_rate(cluster: Cluster, broker_id: int) -> str | None:
    res = ConfigResource(ResourceType.BROKER, str(broker_id))
    admin = _admin_of(cluster, broker_id)  # kept until the answer is in (a dropped client cancels its futures)
    got = admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
    entry = got.get("follower.replication.throttled.rate")
    return entry.value if entry is not None else None
