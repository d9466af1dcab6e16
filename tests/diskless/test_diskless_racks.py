"""Rack-aware reads of a diskless topic in a 3-broker ZooKeeper cluster, one broker per rack (``broker.rack``).

A consumer naming its rack with Inkless's ``diskless_az=`` in ``client.id`` is told, in Metadata, that the replica
in its rack leads every diskless partition; a consumer with ``client.rack`` is sent there by the brokers of the
other racks (``preferred_read_replica``, KIP-392). Either way every record comes from the broker in its rack,
measured by each broker's ``BytesOutPerSec``, and by the partitions' fetching broker in the client's statistics.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import Cluster, wait_until
from tests.cluster.test_cluster_metrics import scrape

RACKS = {1: "az-a", 2: "az-b", 3: "az-c"}
LOCAL = 2  # the clients run in broker 2's rack
PARTITIONS = 6
PER_PARTITION = 300
PAD = b"x" * 1000
DATA_BYTES = PARTITIONS * PER_PARTITION * len(PAD)
BYTES_OUT = "kafka_server_BrokerTopicMetrics_BytesOutPerSec_total"


def _bytes_out(cluster: Cluster) -> dict[int, float]:
    """Record bytes each broker sent in Fetch answers (consumers and replica fetchers)."""
    return {i: sum(v for k, v in scrape(b).items() if k.startswith(BYTES_OUT)) for i, b in cluster.brokers.items()}


def _consume_all(consumer: Consumer, expected: dict[int, list[bytes]], stats: list[dict[str, Any]],
                 timeout_s: float = 90) -> None:
    """Every record of every partition exactly once, in order; then one more statistics report."""
    consumer.assign([CkTopicPartition("dl", p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    total = sum(len(v) for v in expected.values())
    deadline = time.monotonic() + timeout_s
    while sum(len(v) for v in got.values()) < total and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None or m.error():
            continue
        got[m.partition()].append((m.offset(), m.value()))
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(len(expected[p]))), f"partition {p}"
        assert [v for _, v in got[p]] == expected[p], f"partition {p}"
    seen = len(stats)
    wait_until(lambda: consumer.poll(0.2) is None and len(stats) > seen, 10, "a statistics report")


def _fetching_brokers(stats: list[dict[str, Any]]) -> dict[int, int]:
    """Partition -> the broker librdkafka fetches it from, per its last statistics report."""
    parts = stats[-1]["topics"]["dl"]["partitions"]
    return {p: parts[str(p)]["broker"] for p in range(PARTITIONS)}


def _consumer(stats: list[dict[str, Any]], **conf: str) -> Consumer:
    return Consumer({"group.id": f"g-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "statistics.interval.ms": 500,
                     "stats_cb": lambda s: stats.append(json.loads(s)), **conf})


def test_consumers_read_from_the_replica_in_their_rack(zk_connect: str, tmp_path: Path) -> None:
    props = {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "local",
             "rsm.config.dir": str(tmp_path / "store"), "diskless.produce.commit.interval.ms": "50",
             "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
             "rlmm.config.remote.log.metadata.topic.num.partitions": "2", "metrics.port": "0",
             "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
             "diskless.consolidation.interval.ms": "100", "diskless.consolidation.prune.interval.ms": "300",
             "diskless.file.cleaner.interval.ms": "300", "diskless.file.cleaner.retention.period.ms": "0"}
    cluster = Cluster(zk_connect, tmp_path, 3, props)
    for broker_id, b in cluster.brokers.items():
        b.props["broker.rack"] = RACKS[broker_id]
    try:
        cluster.start()
        _run(cluster)
    except BaseException:
        for broker_id, b in cluster.brokers.items():
            print(f"---- broker {broker_id} ({b.log_path}) ----\n{b.tail(6000)}")
        raise
    finally:
        cluster.stop()


def _run(cluster: Cluster) -> None:
    admin = cluster.admin()
    # consolidated, tiered and trimmed locally: the replica in the client's rack (a follower of most
    # partitions) serves their first offsets from the remote tier
    futures = admin.create_topics([NewTopic("dl", PARTITIONS, 3, config={
        "diskless.enable": "true", "segment.bytes": "65536", "local.retention.ms": "1000"}),
        NewTopic("classic", 3, 3)])
    for f in futures.values():
        f.result(60)
    cluster.wait_full_isr("classic")
    assert {n.id: n.rack for n in admin.describe_cluster().result(10).nodes} == RACKS

    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    expected = {part: [b"%d-%d-" % (part, i) + PAD for i in range(PER_PARTITION)] for part in range(PARTITIONS)}
    for i in range(PER_PARTITION):
        for part in range(PARTITIONS):
            p.produce("dl", value=expected[part][i], partition=part)
        p.poll(0)
    assert p.flush(60) == 0
    local = cluster.brokers[LOCAL].data_dir / "logs"
    wait_until(lambda: all(not (local / f"dl-{part}" / "00000000000000000000.log").exists()
                           for part in range(PARTITIONS)), 90,
               "the first segments tiered and deleted locally on the broker in the client's rack")

    # the classic leaders, as a client without a rack sees them: each partition's first replica, spread
    plain = cluster.metadata("dl")
    classic_leaders = {part: plain.partitions[part].leader for part in range(PARTITIONS)}
    assert classic_leaders == {part: plain.partitions[part].replicas[0] for part in range(PARTITIONS)}
    assert set(classic_leaders.values()) == {1, 2, 3}
    classic_topic = {part: q.leader for part, q in cluster.metadata("classic").partitions.items()}

    # diskless_az=: Metadata names the replica in the client's rack for every diskless partition
    stats: list[dict[str, Any]] = []
    az = _consumer(stats, **{"bootstrap.servers": cluster.bootstrap, "client.id": f"app,diskless_az={RACKS[LOCAL]}"})
    try:
        topics = az.list_topics(timeout=10).topics
        seen = topics["dl"].partitions
        assert {part: seen[part].leader for part in range(PARTITIONS)} == dict.fromkeys(range(PARTITIONS), LOCAL)
        assert {part: seen[part].replicas for part in range(PARTITIONS)} == {
            part: plain.partitions[part].replicas for part in range(PARTITIONS)}
        assert {part: q.leader for part, q in topics["classic"].partitions.items()} == classic_topic  # unchanged
        before = _bytes_out(cluster)
        _consume_all(az, expected, stats)
        after = _bytes_out(cluster)
        assert _fetching_brokers(stats) == dict.fromkeys(range(PARTITIONS), LOCAL)
    finally:
        az.close()
    _assert_served_by_local(before, after)

    # client.rack: Metadata gives the classic leaders; the leaders in other racks answer preferred_read_replica
    stats = []
    rack = _consumer(stats, **{"bootstrap.servers": cluster.bootstrap, "client.id": "app",
                               "client.rack": RACKS[LOCAL]})
    try:
        seen = rack.list_topics("dl", timeout=10).topics["dl"].partitions
        assert {part: seen[part].leader for part in range(PARTITIONS)} == classic_leaders
        before = _bytes_out(cluster)
        _consume_all(rack, expected, stats)
        after = _bytes_out(cluster)
        assert _fetching_brokers(stats) == dict.fromkeys(range(PARTITIONS), LOCAL)
    finally:
        rack.close()
    _assert_served_by_local(before, after)


def _assert_served_by_local(before: dict[int, float], after: dict[int, float]) -> None:
    sent = {i: after[i] - before[i] for i in before}
    print(f"bytes sent in Fetch answers while consuming {DATA_BYTES} bytes: {sent}")
    assert sent[LOCAL] >= DATA_BYTES, sent
    for i in sent:
        if i != LOCAL:  # what else they sent: replica fetchers' bytes of the internal topics, a few kB
            assert sent[i] < 0.05 * DATA_BYTES, sent
