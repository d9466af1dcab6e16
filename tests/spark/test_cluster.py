"""``format("strata")`` against a replicated tiered topic on a real cluster, with leaders killed.

Two brokers on ZooKeeper, one local-directory store shared by both (tests/cluster/tiered_harness.py),
topics of 3 partitions with replication factor 2 and 64 KiB segments, most of each partition only in
the remote tier. What a consumer reads is the reference: Spark must return the same rows (partition,
offset, key, value), whichever broker led when a segment was copied, and whichever broker leads when
the tail is fetched, through ``kill -9`` of leaders between and during reads.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.cluster.tiered_harness import produce, tiered_props, tiered_topic_config, value
from tests.spark import gated

from strata.spark import explain
from strata.spark.failover import FailoverCluster
from strata.tiered.storage.local import read_events

PARTITIONS = 3
WAIT_S = 90.0
Row = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value

pytestmark = pytest.mark.timeout(600)


def create_topic(cluster: Cluster, topic: str) -> None:
    cluster.admin().create_topics([NewTopic(topic, PARTITIONS, 2, config=tiered_topic_config())])[topic].result(30)
    cluster.wait_full_isr(topic)


def produce_round(cluster: Cluster, topic: str, start: int, count: int) -> None:
    """Offsets ``start`` .. ``start + count - 1`` of every partition: key ``b"%d" % offset``, ``value(offset)``."""
    for p in range(PARTITIONS):
        produce(cluster.bootstrap, topic, start, count, partition=p)


def tiered_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The highest offset of each partition in the remote tier (ListOffsets -5; -1 when none)."""
    with FailoverCluster(bootstrap, timeout_s=30) as c:
        return {p: o for (_, p), o in c.list_offsets({(topic, p): -5 for p in range(PARTITIONS)}).items()}


def wait_tiered(cluster: Cluster, topic: str, at_least: int) -> None:
    wait_until(lambda: min(tiered_offsets(cluster.bootstrap, topic).values()) >= at_least, WAIT_S,
               f"offset {at_least} of every partition of {topic} in the remote tier")


def consumer_rows(bootstrap: str, topic: str, partitions: list[int] | None = None) -> list[Row]:
    """Every record of the partitions up to their high watermarks, as librdkafka reads them."""
    partitions = list(range(PARTITIONS)) if partitions is None else partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        rows: list[Row] = []
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + WAIT_S
        while pending:
            assert time.monotonic() < deadline, f"timed out reading {topic}: {pending} not at their end"
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    continue  # partition EOF
                if msg.offset() < ends[msg.partition()]:
                    rows.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
                if msg.offset() + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
    finally:
        consumer.close()
    assert len(rows) == sum(ends.values())
    return sorted(rows)


def spark_rows(df: Any) -> list[Row]:
    def b(v: Any) -> bytes | None:
        return None if v is None else bytes(v)

    return sorted((r["partition"], r["offset"], b(r["key"]), b(r["value"]))
                  for r in df.select("partition", "offset", "key", "value").collect())


def expected_rows(partitions: range | list[int], end: int) -> list[Row]:
    return [(p, o, b"%d" % o, value(o)) for p in partitions for o in range(end)]


def kill(cluster: Cluster, broker_id: int) -> None:
    cluster.brokers[broker_id].kill()  # SIGKILL


def test_batch_read_across_leaders_equals_a_consumer_and_survives_a_leader_kill(
        spark: Any, zk_connect: str, tmp_path: Path) -> None:
    topic, store = "spark-cluster-batch", tmp_path / "store"
    with running_cluster(zk_connect, tmp_path, 2, tiered_props(store)) as cluster:
        create_topic(cluster, topic)
        produce_round(cluster, topic, 0, 600)
        wait_tiered(cluster, topic, 300)

        # Partition 0's leader dies: the other broker leads it and uploads what comes next, so its remote
        # chain is made of segments copied by two brokers.
        first_leader = cluster.leader_of(topic, 0)
        kill(cluster, first_leader)
        wait_until(lambda: cluster.leader_of(topic, 0) not in (-1, first_leader), 30, "a new leader of partition 0")
        second_leader = cluster.leader_of(topic, 0)
        produce_round(cluster, topic, 600, 600)
        wait_tiered(cluster, topic, 900)
        cluster.brokers[first_leader].start()
        cluster.wait_full_isr(topic, 60)

        options = {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic}
        summary = explain(options)
        assert summary.remote_offsets > 0.6 * PARTITIONS * 1200, summary  # most of the data is remote
        since = len(read_events(store, "FETCH_SEGMENT"))
        want = consumer_rows(cluster.bootstrap, topic)
        assert want == expected_rows(range(PARTITIONS), 1200)
        assert spark_rows(spark.read.format("strata").options(**options).load()) == want

        # The executors (broker id -1 in the store's events) read segments copied by both leaders of partition 0.
        copied_by = {e["segment_id"]: e["broker_id"] for e in read_events(store, "COPY_SEGMENT")
                     if e["topic"] == topic and e["partition"] == 0 and not e.get("error")}
        fetched = {e["segment_id"] for e in read_events(store, "FETCH_SEGMENT")[since:]
                   if e["topic"] == topic and e["partition"] == 0 and e["broker_id"] == -1}
        assert {copied_by[s] for s in fetched if s in copied_by} == {first_leader, second_leader}

        # The leader dies during a read: the executor has the first Fetch's records (64 KiB of 1200 offsets,
        # everything through the broker), the leader is killed, and the read goes on from the new leader,
        # which serves the rest from its local log and from the store.
        gate = tmp_path / "gate"
        gate.mkdir()
        gated.register(spark)
        leader = cluster.leader_of(topic, 0)
        df = (spark.read.format("strata_gated")
              .options(**{"kafka.bootstrap.servers": cluster.bootstrap, "assign": json.dumps({topic: [0]}),
                          "directRemoteReads": "false", "kafka.fetch.max.bytes": str(64 << 10),
                          gated.GATE_OPTION: str(gate)}).load())
        result: dict[str, Any] = {}

        def collect() -> None:
            try:
                result["rows"] = spark_rows(df)
            except BaseException as e:  # noqa: BLE001 - re-raised by the test thread
                result["error"] = e

        reader = threading.Thread(target=collect, daemon=True)
        reader.start()
        wait_until(lambda: (gate / "paused-0-0").exists(), 120, "the first batch of partition 0 read")
        kill(cluster, leader)
        (gate / "go").touch()
        reader.join(240)
        assert not reader.is_alive(), "the read did not finish after the leader was killed"
        assert "error" not in result, result.get("error")
        assert cluster.leader_of(topic, 0) not in (-1, leader)
        assert result["rows"] == [r for r in want if r[0] == 0]


def run_available_now(spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path) -> Any:
    stream = (spark.readStream.format("strata").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .select("partition", "offset", "key", "value"))
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(240), "availableNow query did not finish"
    assert query.exception() is None
    return query


def test_available_now_twice_with_the_leaders_killed_in_between(spark: Any, zk_connect: str,
                                                                tmp_path: Path) -> None:
    topic, store = "spark-cluster-stream", tmp_path / "store"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    with running_cluster(zk_connect, tmp_path, 2, tiered_props(store)) as cluster:
        create_topic(cluster, topic)
        produce_round(cluster, topic, 0, 600)
        wait_tiered(cluster, topic, 300)
        run_available_now(spark, cluster.bootstrap, topic, out, checkpoint)
        assert spark_rows(spark.read.parquet(str(out))) == expected_rows(range(PARTITIONS), 600)

        produce_round(cluster, topic, 600, 400)
        victim = cluster.leader_of(topic, 0)
        kill(cluster, victim)  # at once: the next run plans while the cluster still names it leader
        run_available_now(spark, cluster.bootstrap, topic, out, checkpoint)
        rows = spark_rows(spark.read.parquet(str(out)))
        assert len(rows) == len({(p, o) for p, o, _, _ in rows}), "a record was read twice"
        assert rows == expected_rows(range(PARTITIONS), 1000)
        assert all(cluster.leader_of(topic, p) not in (-1, victim) for p in range(PARTITIONS))

        offsets_dir = checkpoint / "offsets"
        last = max((f for f in offsets_dir.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
        assert json.loads(last.read_text().splitlines()[-1]) == {topic: {str(p): 1000 for p in range(PARTITIONS)}}
