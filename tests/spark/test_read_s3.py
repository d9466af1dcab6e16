"""The same reads on the ``s3`` backend (SeaweedFS): executors read segments straight from the bucket.

The Spark workers are not given the AWS environment: the store's endpoint and bucket come from the
broker (DescribeConfigs), the credentials from the query's ``rsm.config.*`` options, as a job
on a cluster that holds its own keys would pass them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import functions as F
from tests.spark.datasets import Dataset, create_topic, produce, wait_tiered
from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS
from tests.tiered.harness import S3TieredBroker

from strata.spark import explain

TOPIC = "spark-s3"
PARTITIONS = 3
RECORDS = 500_000


@pytest.fixture(scope="module")
def s3_broker(tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedFS) -> Iterator[S3TieredBroker]:
    b = S3TieredBroker(tmp_path_factory.mktemp("spark-s3"), seaweedfs,
                       key_prefix=f"spark-{uuid.uuid4().hex[:8]}/").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def dataset(s3_broker: S3TieredBroker) -> Dataset:
    create_topic(s3_broker.admin(), TOPIC, PARTITIONS, **{"remote.storage.enable": "true", "retention.ms": "-1",
                                                          "segment.bytes": str(1 << 20), "local.retention.bytes": "1"})
    ds = produce(s3_broker.bootstrap, TOPIC, PARTITIONS, RECORDS)
    wait_tiered(s3_broker.bootstrap, ds, min_fraction=0.8)
    return ds


def options(b: S3TieredBroker, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": b.bootstrap, "subscribe": TOPIC,
            "rsm.config.aws.access.key.id": ACCESS_KEY, "rsm.config.aws.secret.access.key": SECRET_KEY, **extra}


def per_partition(df: Any) -> dict[int, tuple[int, int, int, int]]:
    rows = df.groupBy("partition").agg(F.count("*").alias("n"), F.min("offset").alias("lo"),
                                       F.max("offset").alias("hi"), F.sum(F.crc32("value")).alias("crc")).collect()
    return {r["partition"]: (r["n"], r["lo"], r["hi"], r["crc"]) for r in rows}


def test_whole_topic_from_the_bucket(spark: Any, s3_broker: S3TieredBroker, dataset: Dataset) -> None:
    summary = explain(options(s3_broker))
    segments = sum(len(s3_broker.segment_objects(TOPIC, p)) for p in range(PARTITIONS))
    assert summary.remote_segments == segments and summary.remote_offsets >= 0.8 * RECORDS
    df = spark.read.format("strata").options(**options(s3_broker)).load()
    assert df.rdd.getNumPartitions() == summary.input_partitions
    n = {p: len(dataset.indexes[p]) for p in range(PARTITIONS)}
    assert per_partition(df) == {p: (n[p], 0, n[p] - 1, dataset.crc_sum(p)) for p in range(PARTITIONS)}


def test_offsets_and_filters_on_s3(spark: Any, s3_broker: S3TieredBroker, dataset: Dataset) -> None:
    starting = json.dumps({TOPIC: {"0": 12_345, "1": -2, "2": 100_000}})
    ending = json.dumps({TOPIC: {"0": 150_000, "1": 777, "2": -1}})
    df = spark.read.format("strata").options(**options(s3_broker, startingOffsets=starting,
                                                        endingOffsets=ending)).load()
    got = per_partition(df.where(F.col("offset") < 160_000))
    end2 = min(len(dataset.indexes[2]), 160_000)
    assert got == {0: (150_000 - 12_345, 12_345, 149_999, dataset.crc_sum(0, 12_345, 150_000)),
                   1: (777, 0, 776, dataset.crc_sum(1, 0, 777)),
                   2: (end2 - 100_000, 100_000, end2 - 1, dataset.crc_sum(2, 100_000, end2))}


def test_without_credentials_the_read_fails_clearly(spark: Any, s3_broker: S3TieredBroker, dataset: Dataset,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    opts = {k: v for k, v in options(s3_broker).items() if "aws" not in k}
    opts["rsm.config.aws.access.key.id"] = "wrong"
    opts["rsm.config.aws.secret.access.key"] = "wrong"
    with pytest.raises(Exception, match="(?i)access|denied|forbidden|signature|credential|storage"):
        spark.read.format("strata").options(**opts).load().count()
