"""``df.write.format("strata")`` and ``writeStream.format("strata")``: records read back with librdkafka.

Every check reads the topics back with a confluent-kafka consumer, up to the partitions' high
watermarks (so the count is exact: no loss, no duplicates), with a deadline.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from strata.spark.options import parse_sink_options
from strata.spark.sink import producer_config
from strata.tiered.metadata.partitioner import murmur2, to_positive

WAIT_S = 60.0


def new_topic(broker: Any, partitions: int = 1) -> str:
    name = f"sink-{uuid.uuid4().hex[:10]}"
    futures = broker.admin().create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)
    futures[name].result(timeout=WAIT_S)
    return name


def consume_all(broker: Any, topic: str, partitions: int) -> list[Any]:
    """Every record of ``topic`` (messages, in partition order), up to the high watermarks."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Any] = []
        pending = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + WAIT_S
        while pending:
            assert time.monotonic() < deadline, f"timed out reading {topic}: partitions {pending} not at their end"
            for msg in consumer.consume(10_000, timeout=0.5):
                if msg.error():
                    continue  # partition EOF, or retriable errors the client retries
                out.append(msg)
                if msg.offset() + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
        assert len(out) == sum(ends.values())
        return out
    finally:
        consumer.close()


def writer(df: Any, broker: Any, topic: str | None = None) -> Any:
    w = df.write.format("strata").mode("append").option("kafka.bootstrap.servers", broker.bootstrap)
    return w.option("topic", topic) if topic else w


def test_batch_write_100k_records_exactly_once_each(spark: Any, broker: Any) -> None:
    topic = new_topic(broker, partitions=3)
    n = 100_000
    df = spark.range(0, n, numPartitions=4).selectExpr(
        "CAST(id AS STRING) AS key",
        "CAST(concat(lpad(CAST(id AS STRING), 10, '0'), repeat('v', 90)) AS BINARY) AS value")
    writer(df, broker, topic).save()

    got = [(m.key(), m.value()) for m in consume_all(broker, topic, 3)]
    assert len(got) == n
    assert len(set(got)) == n  # no duplicates
    expected = {(str(i).encode(), f"{i:010d}".encode() + b"v" * 90) for i in range(n)}
    assert set(got) == expected


def test_topic_and_partition_columns_route_records(spark: Any, broker: Any) -> None:
    a, b = new_topic(broker, partitions=2), new_topic(broker, partitions=2)
    df = spark.range(40, numPartitions=2).selectExpr(
        f"IF(id % 2 = 0, '{a}', '{b}') AS topic",
        "CAST(id DIV 2 % 2 AS INT) AS partition",
        "CAST(id AS STRING) AS key",
        "CAST(CAST(id AS STRING) AS BINARY) AS value")
    writer(df, broker).save()

    for topic, parity in ((a, 0), (b, 1)):
        got = {(int(m.value()), m.partition()) for m in consume_all(broker, topic, 2)}
        assert got == {(i, i // 2 % 2) for i in range(40) if i % 2 == parity}


def test_topic_option_overrides_the_column_and_null_partition_uses_the_partitioner(spark: Any, broker: Any) -> None:
    topic = new_topic(broker, partitions=4)
    df = spark.range(200).selectExpr(
        "'not-this-topic' AS topic", "CAST(NULL AS INT) AS partition",
        "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    writer(df, broker, topic).save()

    got = consume_all(broker, topic, 4)
    assert sorted(int(m.value()) for m in got) == list(range(200))
    # keyed records go where the Java client (Spark's Kafka sink) puts them: murmur2(key) % partitions
    assert all(m.partition() == to_positive(murmur2(m.key())) % 4 for m in got)
    assert len({m.partition() for m in got}) == 4


def test_headers_round_trip(spark: Any, broker: Any) -> None:
    topic = new_topic(broker)
    df = spark.sql("""
        SELECT * FROM VALUES
          ('k1', array(named_struct('key', 'a', 'value', X'0102'), named_struct('key', 'b', 'value', NULL))),
          ('k2', CAST(NULL AS ARRAY<STRUCT<key: STRING, value: BINARY>>)),
          ('k3', array(named_struct('key', 'a', 'value', X''), named_struct('key', 'a', 'value', X'ff')))
        AS t(value, headers)""")
    writer(df, broker, topic).save()

    got = {m.value(): m.headers() for m in consume_all(broker, topic, 1)}
    assert got == {
        b"k1": [("a", b"\x01\x02"), ("b", None)],
        b"k2": None,
        b"k3": [("a", b""), ("a", b"\xff")],
    }


def test_string_key_and_value_nulls_and_tombstones(spark: Any, broker: Any) -> None:
    topic = new_topic(broker)
    df = spark.sql("""
        SELECT * FROM VALUES ('k-é', 'välue ✓'), (NULL, 'no key'), ('tombstone', NULL) AS t(key, value)""")
    writer(df, broker, topic).save()

    got = {(m.key(), m.value()) for m in consume_all(broker, topic, 1)}
    assert got == {("k-é".encode(), "välue ✓".encode()), (None, b"no key"), (b"tombstone", None)}


@pytest.mark.parametrize(("columns", "topic", "message"), [
    (["CAST(id AS STRING) AS key"], "t", "Required attribute 'value' not found"),
    (["CAST(id AS STRING) AS value"], None, "topic option required when no 'topic' attribute is present"),
    (["id AS value"], "t", "value attribute unsupported type bigint. value must be a(n) string or binary"),
    (["id AS key", "'v' AS value"], "t", "key attribute unsupported type bigint. key must be a(n) string or binary"),
    (["1 AS topic", "'v' AS value"], None, "topic attribute unsupported type int. topic must be a(n) string"),
    (["id AS partition", "'v' AS value"], "t", "partition attribute unsupported type bigint. partition must be "
     "a(n) int"),
    (["array('h') AS headers", "'v' AS value"], "t", "headers must be a(n) array<struct<key:string,value:binary>>"),
])
def test_bad_schema_fails_before_writing(spark: Any, columns: list[str], topic: str | None, message: str) -> None:
    df = spark.range(1).selectExpr(*columns)
    w = df.write.format("strata").mode("append").option("kafka.bootstrap.servers", "127.0.0.1:1")
    if topic:
        w = w.option("topic", topic)
    with pytest.raises(Exception, match=r"(?s)StrataSinkSchemaError.*" + message.replace("(", r"\(")
                       .replace(")", r"\)").replace("[", r"\[")):
        w.save()


def test_bad_producer_option_fails_before_writing(spark: Any) -> None:
    df = spark.range(1).selectExpr("'v' AS value")
    w = (df.write.format("strata").mode("append").option("kafka.bootstrap.servers", "127.0.0.1:1")
         .option("topic", "t").option("kafka.partitioner.class", "org.example.MyPartitioner"))
    with pytest.raises(Exception, match='(?s)StrataOptionError.*No such configuration property: "partitioner.class"'):
        w.save()


@pytest.mark.parametrize(("column", "use_option", "message"), [
    # librdkafka refuses the record in produce() once it has the topic's metadata, else in a delivery report:
    # both name the partition and the reason
    ("7 AS partition", True, r"(3 record\(s\) could not be written to Kafka:|cannot produce a record to) "
                             r"sink-\w+\[7\]: (Unable to produce message: )?Local: Unknown partition"),
    ("IF(id = 1, NULL, 'x') AS topic", False, "null topic present in the data"),
])
def test_unwritable_records_fail_the_write(spark: Any, broker: Any, column: str, use_option: bool,
                                           message: str) -> None:
    topic = new_topic(broker)
    df = spark.range(3, numPartitions=1).selectExpr(column, "CAST(id AS STRING) AS value")
    with pytest.raises(Exception, match="(?s)StrataWriteError: " + message):
        writer(df, broker, topic if use_option else None).save()


def test_streaming_write_from_files(spark: Any, broker: Any, tmp_path: Path) -> None:
    topic = new_topic(broker, partitions=2)
    src = tmp_path / "in"
    src.mkdir()
    for f in range(2):
        ids = range(f * 100, (f + 1) * 100)
        pq.write_table(pa.table({"key": [str(i) for i in ids], "value": [f"v{i}".encode() for i in ids]}),
                       src / f"part-{f}.parquet")
    stream = (spark.readStream.schema("key STRING, value BINARY").option("maxFilesPerTrigger", 1).parquet(str(src))
              .writeStream.format("strata").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("topic", topic).option("checkpointLocation", str(tmp_path / "checkpoint"))
              .trigger(availableNow=True).start())
    try:
        assert stream.awaitTermination(WAIT_S), "the availableNow query did not finish in time"
        assert stream.exception() is None
        assert stream.lastProgress["batchId"] == 1  # one micro-batch per file
    finally:
        stream.stop()

    got = sorted((m.key(), m.value()) for m in consume_all(broker, topic, 2))
    assert got == sorted((str(i).encode(), f"v{i}".encode()) for i in range(200))


def test_producer_config_defaults_and_overrides() -> None:
    conf = producer_config(parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "20",
                                               "kafka.delivery.timeout.ms": "5000", "topic": " t "}))
    assert conf == {"enable.idempotence": "true", "acks": "all", "partitioner": "murmur2_random",
                    "linger.ms": "20", "delivery.timeout.ms": "5000", "bootstrap.servers": "h:1"}
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": " "}).topic is None
