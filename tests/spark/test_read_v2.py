"""``format("strata")`` over a topic whose remote segments are object format v2 (issue 29): executors read the
compressed, encrypted segments straight from the store with the private key the job passes as an option (PEM
text: the executors have no key file, and the broker never reports its private key's location); without it the
read fails with a message naming the key pair, and the key never shows in the query's plan.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from tests.spark.datasets import Dataset, create_topic, produce, wait_tiered
from tests.support.keys import v2_broker_props
from tests.tiered.harness import TieredBroker

from strata.spark import explain

TOPIC = "spark-v2"
PARTITIONS = 2
RECORDS = 60_000


@pytest.fixture(scope="module")
def v2_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredBroker]:
    tmp = tmp_path_factory.mktemp("spark-v2")
    b = TieredBroker(tmp, **v2_broker_props(tmp / "keys", chunk_size=64 * 1024)).start()
    b.keys_dir = tmp / "keys"  # type: ignore[attr-defined]
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def dataset(v2_broker: TieredBroker) -> Dataset:
    create_topic(v2_broker.admin(), TOPIC, PARTITIONS, **{
        "remote.storage.enable": "true", "retention.ms": "-1", "segment.bytes": str(256 << 10),
        "local.retention.bytes": "1"})
    ds = produce(v2_broker.bootstrap, TOPIC, PARTITIONS, RECORDS)
    wait_tiered(v2_broker.bootstrap, ds, min_fraction=0.5)
    return ds


def private_key_option(b: TieredBroker) -> dict[str, str]:
    pem = (Path(b.keys_dir) / "k1.pem").read_text()  # type: ignore[attr-defined]
    return {"rsm.config.encryption.key.pairs.k1.private.key": pem}


def per_partition(df: Any) -> dict[int, tuple[int, int, int, int]]:
    rows = df.groupBy("partition").agg(F.count("*").alias("n"), F.min("offset").alias("lo"),
                                       F.max("offset").alias("hi"), F.sum(F.crc32("value")).alias("crc")).collect()
    return {r["partition"]: (r["n"], r["lo"], r["hi"], r["crc"]) for r in rows}


def test_executors_read_encrypted_segments_with_the_key_the_job_passes(spark: Any, v2_broker: TieredBroker,
                                                                      dataset: Dataset) -> None:
    opts = {"kafka.bootstrap.servers": v2_broker.bootstrap, "subscribe": TOPIC, **private_key_option(v2_broker)}
    summary = explain(opts)
    assert summary.remote_segments > 0 and summary.remote_offsets >= 0.5 * RECORDS
    df = spark.read.format("strata").options(**opts).load()
    n = {p: len(dataset.indexes[p]) for p in range(PARTITIONS)}
    assert per_partition(df) == {p: (n[p], 0, n[p] - 1, dataset.crc_sum(p)) for p in range(PARTITIONS)}
    plan = io.StringIO()
    with redirect_stdout(plan):
        df.explain(True)
    assert "PRIVATE KEY" not in plan.getvalue()


def test_without_the_private_key_the_read_fails_naming_the_key_pair(spark: Any, v2_broker: TieredBroker,
                                                                   dataset: Dataset) -> None:
    opts = {"kafka.bootstrap.servers": v2_broker.bootstrap, "subscribe": TOPIC}
    with pytest.raises(Exception, match="key pair 'k1'"):
        spark.read.format("strata").options(**opts).load().count()
