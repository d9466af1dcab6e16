"""Batch reads of a tiered topic with ``format("strata")``: exact rows, right plans, pruned reads.

One 510k-record topic over 3 partitions (1 MiB segments, ``local.retention.bytes=1``, so all but
the active segment of each partition lives only in the remote tier), produced with every codec;
the ``local`` backend's event history shows which remote segments the executors fetched.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import functions as F
from tests.spark.datasets import T0, Dataset, create_topic, headers_of, produce, value_of, wait_tiered

from strata.client.cluster import KafkaCluster
from strata.spark import explain
from strata.tiered.storage.local import read_events

TOPIC = "spark-read"
PARTITIONS = 3
RECORDS = 510_000


@pytest.fixture(scope="module")
def dataset(broker: Any) -> Iterator[Dataset]:
    create_topic(broker.admin(), TOPIC, PARTITIONS, **{"remote.storage.enable": "true", "segment.bytes": str(1 << 20),
                                                       "retention.ms": "-1",  # the records are stamped in 2023
                                                       "local.retention.bytes": "1"})
    ds = produce(broker.bootstrap, TOPIC, PARTITIONS, RECORDS)
    wait_tiered(broker.bootstrap, ds, min_fraction=0.8)
    yield ds


def options(broker: Any, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": TOPIC, **extra}


def load(spark: Any, broker: Any, **extra: str) -> Any:
    return spark.read.format("strata").options(**options(broker, **extra)).load()


def per_partition(df: Any) -> dict[int, tuple[int, int, int, int]]:
    rows = df.groupBy("partition").agg(F.count("*").alias("n"), F.min("offset").alias("lo"),
                                       F.max("offset").alias("hi"), F.sum(F.crc32("value")).alias("crc")).collect()
    return {r["partition"]: (r["n"], r["lo"], r["hi"], r["crc"]) for r in rows}


def expected(ds: Dataset, partition: int, start: int = 0, end: int | None = None) -> tuple[int, int, int, int]:
    end = len(ds.indexes[partition]) if end is None else end
    return (end - start, start, end - 1, ds.crc_sum(partition, start, end))


def copied_segments(broker: Any) -> list[dict[str, Any]]:
    """The topic's remote segments as the store saw them: copied and not deleted (event history)."""
    copied = {e["segment_id"]: e for e in read_events(broker.remote_dir, "COPY_SEGMENT")
              if e["topic"] == TOPIC and not e.get("error")}
    for e in read_events(broker.remote_dir, "DELETE_SEGMENT"):
        copied.pop(e["segment_id"], None)
    return list(copied.values())


def fetched_segments(broker: Any, since: int) -> set[str]:
    """Segments Spark's executors read from the store (the broker's own reads carry its broker id)."""
    return {e["segment_id"] for e in read_events(broker.remote_dir, "FETCH_SEGMENT")[since:]
            if e["topic"] == TOPIC and e["broker_id"] == -1}


def fetch_events(broker: Any) -> int:
    return len(read_events(broker.remote_dir, "FETCH_SEGMENT"))


def test_whole_topic_reads_exactly_what_was_produced(spark: Any, broker: Any, dataset: Dataset) -> None:
    df = load(spark, broker)
    assert per_partition(df) == {p: expected(dataset, p) for p in range(PARTITIONS)}
    keys = df.agg(F.sum(F.crc32("key"))).collect()[0][0]
    assert keys == sum(zlib.crc32(b"k%d" % i) for i in range(RECORDS))
    # the remote segments of each partition packed into one input partition (they add up to far less than
    # maxBytesPerPartition), plus one tail per partition that has records not yet uploaded
    remote = copied_segments(broker)
    with KafkaCluster(broker.bootstrap) as c:
        tiered = c.list_offsets({(TOPIC, p): -5 for p in range(PARTITIONS)})
        ends = c.list_offsets({(TOPIC, p): -1 for p in range(PARTITIONS)})
    tails = sum(1 for k in ends if ends[k] > tiered[k] + 1)
    assert len(remote) > PARTITIONS
    assert df.rdd.getNumPartitions() == len({e["partition"] for e in remote}) + tails
    summary = explain(options(broker))
    assert summary.remote_segments == len(remote)
    assert summary.remote_offsets >= 0.8 * RECORDS  # most of the topic read straight from the store


def test_every_remote_segment_is_fetched_from_the_store(spark: Any, broker: Any, dataset: Dataset) -> None:
    since = fetch_events(broker)
    assert load(spark, broker).count() == RECORDS
    assert fetched_segments(broker, since) == {e["segment_id"] for e in copied_segments(broker)}


def test_starting_and_ending_offsets_json(spark: Any, broker: Any, dataset: Dataset) -> None:
    starting = {TOPIC: {"0": 1000, "1": -2, "2": 150_000}}
    ending = {TOPIC: {"0": 90_000, "1": 2000, "2": -1}}
    df = load(spark, broker, startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending))
    assert per_partition(df) == {0: expected(dataset, 0, 1000, 90_000), 1: expected(dataset, 1, 0, 2000),
                                 2: expected(dataset, 2, 150_000)}


def test_specific_offsets_must_name_every_partition(spark: Any, broker: Any, dataset: Dataset) -> None:
    df = load(spark, broker, startingOffsets=json.dumps({TOPIC: {"0": 5}}))
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        df.count()


def test_starting_and_ending_timestamps(spark: Any, broker: Any, dataset: Dataset) -> None:
    # record i has timestamp T0 + i and sits at offset i // 3 of partition i % 3
    df = load(spark, broker, startingTimestamp=str(T0 + 300_000), endingTimestamp=str(T0 + 450_000))
    assert per_partition(df) == {p: expected(dataset, p, 100_000, 150_000) for p in range(PARTITIONS)}
    by_partition = {TOPIC: {"0": T0 + 3, "1": T0 + 30_001, "2": T0 + 509_999}}
    df = load(spark, broker, startingOffsetsByTimestamp=json.dumps(by_partition))
    assert per_partition(df) == {0: expected(dataset, 0, 1), 1: expected(dataset, 1, 10_000),
                                 2: expected(dataset, 2, 169_999)}


def test_headers_and_timestamps_come_through(spark: Any, broker: Any, dataset: Dataset) -> None:
    df = load(spark, broker, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    rows = df.where(F.size("headers") > 0).select("partition", "offset", "headers").collect()
    want = {(i % 3, i // 3): headers_of(i) for i in range(0, RECORDS, 50)}
    got = {(r["partition"], r["offset"]): [(h["key"], h["value"]) for h in r["headers"]] for r in rows}
    assert got == want
    sample = df.where("partition = 1 and offset = 123457").collect()[0]
    i = 123457 * 3 + 1
    assert (bytes(sample["key"]), bytes(sample["value"])) == (b"k%d" % i, value_of(i))
    assert sample["timestamp"].timestamp() * 1000 == T0 + i and sample["timestampType"] == 0
    assert sample["topic"] == TOPIC


def test_offset_filter_reads_only_the_segments_it_needs(spark: Any, broker: Any, dataset: Dataset) -> None:
    # a start half-way through what partition 1 has in the remote tier: the fixture waits for 80% of every
    # partition to be tiered, not more, so a fixed 150,000 (88%) could lie past the tier and need no segment
    ends = sorted(e["end_offset"] for e in copied_segments(broker) if e["partition"] == 1)
    assert len(ends) >= 2, ends
    start = ends[len(ends) // 2] + 1  # the segments ending at or after it are needed, the others are not
    since = fetch_events(broker)
    n = load(spark, broker).where((F.col("partition") == 1) & (F.col("offset") >= start)).count()
    assert n == len(dataset.indexes[1]) - start
    needed = {e["segment_id"] for e in copied_segments(broker) if e["partition"] == 1 and e["end_offset"] >= start}
    assert needed and fetched_segments(broker, since) == needed


def test_timestamp_filter_reads_only_the_segments_it_needs(spark: Any, broker: Any, dataset: Dataset) -> None:
    since = fetch_events(broker)
    n = load(spark, broker).where(F.col("timestamp") >= F.timestamp_millis(F.lit(T0 + 400_000))).count()
    first = 400_000  # the first record index with timestamp >= T0 + 400 000 ms
    assert n == RECORDS - first
    needed = {e["segment_id"] for e in copied_segments(broker) if e["end_offset"] >= (first - e["partition"] + 2) // 3}
    assert needed and fetched_segments(broker, since) == needed


def test_big_segments_are_split_into_several_input_partitions(spark: Any, broker: Any, dataset: Dataset) -> None:
    df = load(spark, broker, maxBytesPerPartition=str(256 << 10))
    assert df.rdd.getNumPartitions() > 2 * len(copied_segments(broker))
    assert per_partition(df) == {p: expected(dataset, p) for p in range(PARTITIONS)}


def test_min_partitions_keeps_small_segments_apart(spark: Any, broker: Any, dataset: Dataset) -> None:
    """Packing never leaves fewer input partitions than minPartitions asks for."""
    remote = copied_segments(broker)
    df = load(spark, broker, minPartitions=str(len(remote)))
    assert df.rdd.getNumPartitions() >= len(remote)
    assert per_partition(df) == {p: expected(dataset, p) for p in range(PARTITIONS)}


def test_through_the_broker_only_gives_the_same_rows(spark: Any, broker: Any, dataset: Dataset) -> None:
    since = fetch_events(broker)
    df = load(spark, broker, directRemoteReads="false", startingOffsets=json.dumps(
        {TOPIC: {"0": 160_000, "1": 160_000, "2": 160_000}}))
    assert per_partition(df) == {p: expected(dataset, p, 160_000) for p in range(PARTITIONS)}
    assert all(e["broker_id"] != -1 for e in read_events(broker.remote_dir, "FETCH_SEGMENT")[since:])


def test_fail_on_data_loss(spark: Any, broker: Any) -> None:
    topic = "spark-loss"
    create_topic(broker.admin(), topic, 1, **{"retention.ms": "-1"})
    produce(broker.bootstrap, topic, 1, 1000)
    broker.delete_records(topic, 0, 400)
    opts = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
            "startingOffsets": json.dumps({topic: {"0": 100}})}
    with pytest.raises(Exception, match="failOnDataLoss"):
        spark.read.format("strata").options(**opts).load().count()
    df = spark.read.format("strata").options(**opts, failOnDataLoss="false").load()
    assert df.agg(F.count("*"), F.min("offset")).collect()[0][:] == (600, 400)
    assert spark.read.format("strata").options(**{**opts, "startingOffsets": "earliest"}).load().count() == 600
