"""The exactly-once sink (``transactional=true``): every row once in the topic, read with read_committed.

- A batch write whose task dies (``os._exit`` of its Python worker) mid-write, after records of its
  open transaction reached the broker: Spark retries the task (a child Spark on ``local[2,4]``:
  the tests' shared session does not retry tasks), the retry fences the dead attempt and its
  records are aborted, so the topic holds them only in an aborted transaction.
- A streaming query crashes after the Kafka commit of a micro-batch but before Spark records the
  batch in the checkpoint's commit log (the commit log entry is removed, as if the driver had died
  right before writing it) and restarts: Spark replays the batch, which the sink skips, once
  through the driver's batch marker and once through each task's own marker.
- A replay that reaches the tasks partitioned differently from the attempt that committed fails
  with ``StrataExactlyOnceError`` and writes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from pyspark.errors import StreamingQueryException
from tests.transactions.clients import until_end_confluent

from strata.spark.options import StrataOptionError, parse_sink_options
from strata.spark.transactional import Progress

WAIT_S = 180.0
PAD = 500
REPO = Path(__file__).resolve().parents[2]


def new_topic(broker: Any, partitions: int) -> str:
    name = f"txn-sink-{uuid.uuid4().hex[:10]}"
    futures = broker.admin().create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)
    futures[name].result(timeout=60)
    return name


def read(broker: Any, topic: str, partitions: int, isolation: str = "read_committed") -> Counter[bytes]:
    return Counter(until_end_confluent(broker.bootstrap, topic, partitions, isolation, timeout_s=60))


def test_options_of_the_transactional_sink() -> None:
    boot = {"kafka.bootstrap.servers": "h:1"}
    o = parse_sink_options({**boot, "topic": "t", "transactional": "true", "transactional.id.prefix": "job"})
    assert (o.transactional, o.transactional_id_prefix, o.marker_topic) == (True, "job", "t")
    o = parse_sink_options({**boot, "transactional": "true", "transactional.id.prefix": "job",
                            "transactional.marker.topic": "m"})
    assert (o.topic, o.marker_topic) == (None, "m")
    for options, message in [
        ({"topic": "t", "transactional": "true"}, "'transactional.id.prefix' must be set"),
        ({"transactional": "true", "transactional.id.prefix": "j"}, "'transactional.marker.topic' must name"),
        ({"topic": "t", "transactional.id.prefix": "j"}, "'transactional' is not 'true'"),
        ({"topic": "t", "transactional": "true", "transactional.id.prefix": "a b"}, "whitespace"),
        ({"topic": "t", "kafka.transactional.id": "x"}, "every task needs its own"),
    ]:
        with pytest.raises(StrataOptionError, match=message):
            parse_sink_options({**boot, **options})


def test_progress_markers_round_trip_and_foreign_metadata_is_ignored() -> None:
    p = Progress("run-1", 7, 1000, 2**64 - 1)
    assert Progress.parse(p.metadata()) == p
    assert Progress.parse(Progress("q", 3).metadata()) == Progress("q", 3)
    for foreign in (None, "", "not json", '{"batch": 1}', "[1]", '{"strata": 2, "run": "x", "batch": 1}'):
        assert Progress.parse(foreign) is None


# -- a batch write whose task dies mid-write -------------------------------------------------------


def _child_batch_write(bootstrap: str, topic: str, prefix: str, rows: int, tasks: int) -> None:
    """Run in a child process: a Spark that retries tasks (``local[2,4]``), and a write whose task 1
    dies on its first attempt once records of its open transaction are in the topic."""
    from pyspark.sql import functions as F

    from strata.spark import local_session

    per_task = rows // tasks
    spark = local_session("strata-txn-sink-child", master="local[2,4]",
                          **{"spark.sql.execution.arrow.maxRecordsPerBatch": "500"})

    def die_once_mid_write(batches: Any) -> Any:
        import os
        import time

        from pyspark import TaskContext

        from strata.client.cluster import KafkaCluster

        ctx = TaskContext.get()
        doomed = ctx.partitionId() == 1 and ctx.attemptNumber() == 0
        sent = 0
        for batch in batches:
            yield batch
            sent += batch.num_rows
            if doomed and sent >= per_task // 2:
                # Wait (bounded) until the sink's records are in the log, inside its open transaction.
                deadline = time.monotonic() + 60
                with KafkaCluster(bootstrap) as cluster:
                    while cluster.list_offsets({(topic, 1): -1})[(topic, 1)] < per_task // 4:
                        if time.monotonic() > deadline:
                            raise AssertionError("the sink's records never reached the broker")
                        time.sleep(0.05)
                os._exit(17)  # the Python worker dies: no abort, no close; Spark retries the task

    df = (spark.range(0, rows, numPartitions=tasks)
          # ~0.5 KiB rows: each Arrow batch of 500 fills the Python worker's 64 KiB output buffer, so
          # the batches reach the sink while the function waits (a smaller one could sit in the buffer).
          .selectExpr("CAST(id AS STRING) AS key",
                      f"CAST(concat('value-', CAST(id AS STRING), '-', repeat('x', {PAD})) AS BINARY) AS value")
          .withColumn("partition", F.spark_partition_id())
          .mapInArrow(die_once_mid_write, "key string, value binary, partition int"))
    (df.write.format("strata").mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("transactional", "true").option("transactional.id.prefix", prefix).save())
    spark.stop()


def test_batch_write_with_a_task_dying_mid_write_has_every_row_once(txn_broker: Any, tmp_path: Path) -> None:
    rows, tasks = 20_000, 4
    topic = new_topic(txn_broker, tasks)
    args = json.dumps([txn_broker.bootstrap, topic, f"batch-{topic}", rows, tasks])
    code = f"import json; from tests.spark.test_txn_sink import _child_batch_write as run; run(*json.loads({args!r}))"
    log = tmp_path / "child.log"
    with log.open("wb") as out:
        child = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                               timeout=600, check=False)
    assert child.returncode == 0, log.read_text()[-5000:]

    committed = read(txn_broker, topic, tasks)
    assert committed == Counter(f"value-{i}-{'x' * PAD}".encode() for i in range(rows))  # each row exactly once
    everything = read(txn_broker, topic, tasks, "read_uncommitted")
    duplicated = {v: n for v, n in everything.items() if n > 1}
    # The dead attempt's records are in the log, in a transaction its retry aborted; only task 1's.
    per_task = rows // tasks
    assert len(duplicated) >= per_task // 4, len(duplicated)
    assert all(per_task <= int(v.split(b"-")[1]) < 2 * per_task and n == 2 for v, n in duplicated.items())
    assert set(everything) == set(committed)


def test_a_zombie_attempt_is_fenced_and_its_open_transaction_aborted(spark: Any, txn_broker: Any) -> None:
    """An earlier attempt of task 1 that hangs with its transaction open (a lost executor): the new
    attempt's init_transactions fences it, the coordinator aborts what it wrote, its commit fails."""
    topic, prefix = new_topic(txn_broker, 2), f"zombie-{uuid.uuid4().hex[:8]}"
    zombie = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": f"{prefix}-1",
                       "transaction.timeout.ms": 300_000, "linger.ms": 0})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(50):
        zombie.produce(topic, f"zombie-{i}".encode(), partition=i % 2)
    assert zombie.flush(30) == 0

    df = spark.range(0, 1000, numPartitions=2).selectExpr("CAST(id AS STRING) AS key",
                                                          "CAST(concat('v', CAST(id AS STRING)) AS BINARY) AS value")
    (df.write.format("strata").mode("append").option("kafka.bootstrap.servers", txn_broker.bootstrap)
     .option("topic", topic).option("transactional", "true").option("transactional.id.prefix", prefix).save())

    with pytest.raises(KafkaException, match="fenced"):
        zombie.commit_transaction(30)
    rows = Counter(f"v{i}".encode() for i in range(1000))
    assert read(txn_broker, topic, 2) == rows
    assert read(txn_broker, topic, 2, "read_uncommitted") == rows + Counter(f"zombie-{i}".encode() for i in range(50))

    # Each task committed its progress marker with its rows: one run, batch 0, the rows it wrote.
    markers = []
    for task in (0, 1):
        c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": f"{prefix}-{task}",
                      "isolation.level": "read_committed"})
        try:
            tp = c.committed([TopicPartition(topic, 0)], 30)[0]
        finally:
            c.close()
        assert tp.offset == 1
        markers.append(Progress.parse(tp.metadata))
    assert markers[0] is not None and markers[1] is not None
    assert markers[0].run == markers[1].run and markers[0].batch == markers[1].batch == 0
    assert (markers[0].rows or 0) + (markers[1].rows or 0) == 1000


# -- streaming: a micro-batch replayed after the Kafka commit ---------------------------------------


def _files(src: Path, *names: int, rows: int = 200) -> None:
    for f in names:
        ids = range(f * rows, (f + 1) * rows)
        pq.write_table(pa.table({"key": [f"k{i}" for i in ids], "value": [f"v{i}".encode() for i in ids]}),
                       src / f"part-{f:03d}.parquet")


def _run(spark: Any, broker: Any, src: Path, checkpoint: Path, topic: str, prefix: str,
         by: str = "key") -> Any:
    query = (spark.readStream.schema("key STRING, value BINARY").option("maxFilesPerTrigger", 1).parquet(str(src))
             .repartition(3, by)
             .writeStream.format("strata").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", topic).option("transactional", "true").option("transactional.id.prefix", prefix)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        finished = query.awaitTermination(WAIT_S)
    except StreamingQueryException:  # the query failed: query.exception() says why
        finished = True
    finally:
        query.stop()
    assert finished, "the availableNow query did not finish in time"
    return query


def _crash_before_commit_log(checkpoint: Path, batch: int) -> None:
    """The state after a driver that died between the sink's commit and Spark's commit log entry."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def _rewind_batch_marker(broker: Any, prefix: str, topic: str, run: str, batch: int) -> None:
    """The state after a driver that died before the sink's own commit (the tasks had all committed)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": prefix, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, batch, metadata=Progress(run, batch - 1).metadata())],
                 asynchronous=False)
    finally:
        c.close()


def _replayed(query: Any, batch: int, rows: int) -> bool:
    return any(p["batchId"] == batch and p["numInputRows"] == rows for p in query.recentProgress)


def test_streaming_batches_replayed_after_the_kafka_commit_are_written_once(spark: Any, txn_broker: Any,
                                                                            tmp_path: Path) -> None:
    topic, prefix = new_topic(txn_broker, 2), f"stream-{uuid.uuid4().hex[:8]}"
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    src.mkdir()
    _files(src, 0, 1, 2)
    first = _run(spark, txn_broker, src, checkpoint, topic, prefix)
    assert first.exception() is None
    assert first.lastProgress["batchId"] == 2
    assert read(txn_broker, topic, 2) == Counter(f"v{i}".encode() for i in range(600))

    # Batch 2 committed in Kafka (tasks and batch marker), not in Spark's commit log: replayed, skipped.
    _crash_before_commit_log(checkpoint, 2)
    _files(src, 3)
    second = _run(spark, txn_broker, src, checkpoint, topic, prefix)
    assert second.exception() is None
    assert second.id == first.id  # the run id of the markers: the query's id, kept in the checkpoint
    assert _replayed(second, 2, 200) and _replayed(second, 3, 200)
    expected = Counter(f"v{i}".encode() for i in range(800))
    assert read(txn_broker, topic, 2) == expected
    assert read(txn_broker, topic, 2, "read_uncommitted") == expected  # the replay wrote nothing at all

    # Batch 3 committed by every task, but the driver died before its batch marker: each task finds its
    # own marker of this batch with the same rows (hash partitioning: the same layout), and skips.
    _crash_before_commit_log(checkpoint, 3)
    _rewind_batch_marker(txn_broker, prefix, topic, first.id, 3)
    _files(src, 4)
    third = _run(spark, txn_broker, src, checkpoint, topic, prefix)
    assert third.exception() is None
    assert _replayed(third, 3, 200) and _replayed(third, 4, 200)
    expected = Counter(f"v{i}".encode() for i in range(1000))
    assert read(txn_broker, topic, 2) == expected
    assert read(txn_broker, topic, 2, "read_uncommitted") == expected


def test_foreach_batch_writes_are_exactly_once_across_a_replay(spark: Any, txn_broker: Any, tmp_path: Path) -> None:
    """A batch write inside foreachBatch takes the micro-batch's identity (query id, batch id) from the
    job's properties, so the replay of a batch finds the markers its first run committed."""
    topic, prefix = new_topic(txn_broker, 2), f"foreach-{uuid.uuid4().hex[:8]}"
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    src.mkdir()

    def write(batch: Any, batch_id: int) -> None:
        (batch.write.format("strata").mode("append").option("kafka.bootstrap.servers", txn_broker.bootstrap)
         .option("topic", topic).option("transactional", "true").option("transactional.id.prefix", prefix).save())

    def run() -> Any:
        query = (spark.readStream.schema("key STRING, value BINARY").option("maxFilesPerTrigger", 1)
                 .parquet(str(src)).writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(WAIT_S), "the availableNow query did not finish in time"
        finally:
            query.stop()
        assert query.exception() is None
        return query

    _files(src, 0, 1)
    first = run()
    _crash_before_commit_log(checkpoint, 1)
    _files(src, 2)
    second = run()
    assert second.id == first.id and _replayed(second, 1, 200) and _replayed(second, 2, 200)
    expected = Counter(f"v{i}".encode() for i in range(600))
    assert read(txn_broker, topic, 2) == expected
    assert read(txn_broker, topic, 2, "read_uncommitted") == expected


def test_a_replay_partitioned_differently_fails_instead_of_writing_twice(spark: Any, txn_broker: Any,
                                                                         tmp_path: Path) -> None:
    topic, prefix = new_topic(txn_broker, 2), f"layout-{uuid.uuid4().hex[:8]}"
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    src.mkdir()
    _files(src, 0)
    first = _run(spark, txn_broker, src, checkpoint, topic, prefix, by="key")
    assert first.exception() is None
    _crash_before_commit_log(checkpoint, 0)
    _rewind_batch_marker(txn_broker, prefix, topic, first.id, 0)

    replay = _run(spark, txn_broker, src, checkpoint, topic, prefix, by="value")  # the rows move between tasks
    assert replay.exception() is not None
    assert "StrataExactlyOnceError" in str(replay.exception())
    assert "partitioned differently" in str(replay.exception())
    expected = Counter(f"v{i}".encode() for i in range(200))
    assert read(txn_broker, topic, 2, "read_uncommitted") == expected  # nothing written twice


# -- streaming: the driver killed at a random point, restarted from its checkpoint ------------------


def _child_stream(bootstrap: str, topic: str, prefix: str, src: str, checkpoint: str) -> None:
    """Run in a child process: the streaming query of ``_run`` on its own Spark, to the end of its input."""
    from strata.spark import local_session

    spark = local_session("strata-txn-stream-child")
    query = (spark.readStream.schema("key STRING, value BINARY").option("maxFilesPerTrigger", 1).parquet(src)
             .repartition(3, "key")
             .writeStream.format("strata").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
             .option("transactional", "true").option("transactional.id.prefix", prefix)
             .option("kafka.transaction.timeout.ms", "30000")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    spark.stop()


def _marker_batch(broker: Any, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        tp = c.committed([TopicPartition(topic, 0)], 30)[0]
    finally:
        c.close()
    marker = Progress.parse(tp.metadata) if tp.offset >= 0 else None
    return -1 if marker is None else marker.batch


@pytest.mark.slow  # ~45 s (a Spark driver and its JVM killed and restarted): in `make soak`
def test_a_streaming_query_killed_mid_stream_writes_every_row_once_after_its_restart(txn_broker: Any,
                                                                                     tmp_path: Path) -> None:
    import os
    import signal
    import time

    topic, prefix = new_topic(txn_broker, 2), f"killed-{uuid.uuid4().hex[:8]}"
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    src.mkdir()
    files = 12
    _files(src, *range(files))
    args = json.dumps([txn_broker.bootstrap, topic, prefix, str(src), str(checkpoint)])
    code = f"import json; from tests.spark.test_txn_sink import _child_stream as run; run(*json.loads({args!r}))"

    def start(log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # its own group: the JVM dies with it

    first = start(tmp_path / "first.log")
    try:
        deadline = time.monotonic() + WAIT_S
        while _marker_batch(txn_broker, f"{prefix}-0", topic) < 2:  # some micro-batches committed in Kafka
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no micro-batch committed in time"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, wherever they are in a batch
        first.wait(30)

    second = start(tmp_path / "second.log")
    try:
        assert second.wait(600) == 0, (tmp_path / "second.log").read_text()[-5000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)
    assert read(txn_broker, topic, 2) == Counter(f"v{i}".encode() for i in range(files * 200))

