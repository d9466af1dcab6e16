"""Kafka's replication and controller metrics on each broker's ``/metrics``, through a broker failure."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.broker.harness import BrokerProcess
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.unit.test_metrics import samples

RM = "kafka_server_ReplicaManager_"
BTM = "kafka_server_BrokerTopicMetrics_"
KC = "kafka_controller_KafkaController_"
_METRICS_LINE = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")


def scrape(b: BrokerProcess) -> dict[str, float]:
    """The broker's metrics (the port is the one its last start logged: metrics.port=0 picks a new one)."""
    found = _METRICS_LINE.findall(b.log_path.read_text(errors="replace"))
    assert found, f"no metrics line in {b.log_path}"
    host, port = found[-1]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{host}:{port}/metrics", timeout=10) as resp:
        return samples(resp.read().decode())


def total(cluster: Cluster, name: str, ids: list[int] | None = None) -> float:
    return sum(scrape(cluster.brokers[i]).get(name, 0) for i in (ids or list(cluster.brokers)))


def test_replica_manager_and_controller_metrics(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, 3, {"metrics.port": "0"}) as cluster:
        cluster.admin().create_topics([NewTopic("m", 3, 3)])["m"].result(30)
        cluster.wait_full_isr("m")
        topics = cluster.admin().list_topics(timeout=10).topics
        partitions = sum(len(t.partitions) for t in topics.values())
        replicas = sum(len(p.replicas) for t in topics.values() for p in t.partitions.values())
        assert partitions >= 3

        wait_until(lambda: total(cluster, RM + "LeaderCount") == partitions, 20, "every leader counted")
        assert total(cluster, RM + "PartitionCount") == replicas
        assert total(cluster, RM + "UnderReplicatedPartitions") == 0
        assert total(cluster, KC + "ActiveControllerCount") == 1
        assert total(cluster, KC + "GlobalPartitionCount") == partitions
        assert total(cluster, KC + "OfflinePartitionsCount") == 0
        for b in cluster.brokers.values():
            got = scrape(b)
            assert 'kafka_server_ReplicaFetcherManager_MaxLag{clientId="Replica"}' in got
            assert sum(1 for k in got if k.startswith("kafka_server_FetcherLagMetrics_ConsumerLag{")) == \
                got[RM + "PartitionCount"] - got[RM + "LeaderCount"]  # one lag series per followed partition

        # Kafka's replication byte meters: what the followers appended of "m" is what the leaders sent them,
        # twice what producers appended (RF 3), and none of it counts as BytesOutPerSec (consumers' bytes)
        out_before = total(cluster, BTM + "BytesOutPerSec_total")
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(300):
            p.produce("m", value=b"%04d" % i * 100, partition=i % 3)
        assert p.flush(30) == 0
        produced = total(cluster, BTM + 'BytesInPerSec_total{topic="m"}')
        assert produced >= 300 * 400
        wait_until(lambda: total(cluster, BTM + 'ReplicationBytesInPerSec_total{topic="m"}') == 2 * produced, 20,
                   "both followers' copies counted")
        assert total(cluster, BTM + 'ReplicationBytesOutPerSec_total{topic="m"}') == 2 * produced
        assert total(cluster, BTM + "ReplicationBytesInPerSec_total") >= 2 * produced  # the aggregate series
        assert total(cluster, BTM + "BytesOutPerSec_total") == out_before

        # a broker dies: its replicas leave the ISRs, every partition is under-replicated on its leader
        victim = 3
        cluster.brokers[victim].kill()
        survivors = [i for i in cluster.brokers if i != victim]
        wait_until(lambda: total(cluster, RM + "UnderReplicatedPartitions", survivors) == partitions, 30,
                   "every partition under-replicated on the survivors")
        wait_until(lambda: total(cluster, KC + "ActiveControllerCount", survivors) == 1, 30,
                   "one active controller among the survivors")
        assert total(cluster, RM + "LeaderCount", survivors) == partitions
        expands_before = total(cluster, RM + "IsrExpandsPerSec_total", survivors)

        # it returns: the leaders add it back to their ISRs and count the expansions
        cluster.brokers[victim].start()
        cluster.wait_full_isr("m")
        wait_until(lambda: total(cluster, RM + "UnderReplicatedPartitions") == 0, 30, "no under-replicated partition")
        wait_until(lambda: total(cluster, RM + "IsrExpandsPerSec_total", survivors) >= expands_before + partitions,
                   10, "an ISR expansion counted per partition")
        assert total(cluster, KC + "ActiveControllerCount") == 1
        assert total(cluster, RM + "PartitionCount") == replicas
