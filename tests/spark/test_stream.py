"""Streaming reads: ``availableNow`` runs resume from their checkpoint and read only what is new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F
from tests.spark.datasets import create_topic, produce, wait_tiered

from strata.spark.streaming import rate_limit

TOPIC = "spark-stream"
PARTITIONS = 3
TIMEOUT_S = 180


def run_available_now(spark: Any, broker: Any, out: Path, checkpoint: Path, **extra: str) -> None:
    stream = (spark.readStream.format("strata").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", TOPIC).option("startingOffsets", "earliest").options(**extra).load()
              .select("partition", "offset", F.crc32("value").alias("crc")))
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None


def test_available_now_twice_reads_exactly_the_new_records(spark: Any, broker: Any, tmp_path: Path) -> None:
    # 128 KiB segments: a partition holds ~1 MiB (of which ~0.75 MiB uncompressed), so its active
    # segment is always a small part of it and at least half of its records roll and tier. With 1 MiB
    # segments a partition could end a few bytes short of rolling and never tier (a flaky wait).
    create_topic(broker.admin(), TOPIC, PARTITIONS, **{"remote.storage.enable": "true",
                                                       "segment.bytes": str(128 << 10), "retention.ms": "-1",
                                                       "local.retention.bytes": "1"})
    ds = produce(broker.bootstrap, TOPIC, PARTITIONS, 60_000)
    wait_tiered(broker.bootstrap, ds, min_fraction=0.5)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, broker, out, checkpoint)
    first = spark.read.parquet(str(out)).count()
    assert first == 60_000

    produce(broker.bootstrap, TOPIC, PARTITIONS, 30_000, start=60_000, dataset=ds)
    run_available_now(spark, broker, out, checkpoint)
    rows = spark.read.parquet(str(out))
    assert rows.count() == 90_000
    assert rows.select("partition", "offset").distinct().count() == 90_000  # nothing read twice
    got = {r["partition"]: (r["n"], r["hi"], r["crc"]) for r in rows.groupBy("partition").agg(
        F.count("*").alias("n"), F.max("offset").alias("hi"), F.sum("crc").alias("crc")).collect()}
    assert got == {p: (30_000, 29_999, ds.crc_sum(p)) for p in range(PARTITIONS)}

    # the checkpoint's offsets are Spark's Kafka source offsets
    offsets_dir = checkpoint / "offsets"
    last = max((f for f in offsets_dir.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {TOPIC: {str(p): 30_000 for p in range(PARTITIONS)}}


def test_max_offsets_per_trigger_splits_the_backlog(spark: Any, broker: Any, tmp_path: Path) -> None:
    topic = "spark-stream-rate"
    create_topic(broker.admin(), topic, 2, **{"retention.ms": "-1"})
    produce(broker.bootstrap, topic, 2, 10_000)
    stream = (spark.readStream.format("strata").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "3000").load().select("partition", "offset"))
    query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT_S)
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in progress] == [3000, 3000, 3000, 1000]
    assert spark.read.parquet(str(tmp_path / "out")).distinct().count() == 10_000


def test_rate_limit_shares_the_limit_like_spark() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    end = {("t", 0): 1000, ("t", 1): 400, ("t", 2): 10}
    assert rate_limit(start, end, 130) == {("t", 0): 100, ("t", 1): 130, ("t", 2): 10}
    assert rate_limit(start, end, 10_000) == end
