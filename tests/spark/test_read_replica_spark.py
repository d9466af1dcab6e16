"""``format("strata")`` over a read replica (issue 29, part 5): a job pointed at the replica cluster reads the
topic its origin writes to the shared bucket - the replica's metadata plans it, the executors read the segments
straight from the bucket - and gets exactly the origin's records up to what the origin has tiered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic
from pyspark.sql import functions as F
from tests.spark.datasets import create_topic, produce, wait_tiered
from tests.support.keys import v2_broker_props
from tests.tiered.harness import WAIT_S, TieredBroker, wait_until

TOPIC = "mirrored"
PARTITIONS = 2
RECORDS = 20_000


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TieredBroker, TieredBroker, Path]]:
    tmp = tmp_path_factory.mktemp("read-replica")
    props = v2_broker_props(tmp / "keys", chunk_size=64 * 1024)
    origin = TieredBroker(tmp / "origin", **props).start()
    replica = TieredBroker(tmp / "replica", **{**props, "rsm.config.dir": str(origin.remote_dir)})
    try:
        replica.start()
        yield origin, replica, tmp / "keys"
    finally:
        replica.stop()
        origin.stop()


def per_partition(df: Any) -> dict[int, tuple[int, int, int, int]]:
    rows = df.groupBy("partition").agg(F.count("*").alias("n"), F.min("offset").alias("lo"),
                                       F.max("offset").alias("hi"), F.sum(F.crc32("value")).alias("crc")).collect()
    return {r["partition"]: (r["n"], r["lo"], r["hi"], r["crc"]) for r in rows}


def test_spark_reads_a_read_replica_exactly_as_its_origin_up_to_the_tiered_end(
        spark: Any, pair: tuple[TieredBroker, TieredBroker, Path]) -> None:
    origin, replica, keys = pair
    create_topic(origin.admin(), TOPIC, PARTITIONS, **{
        "remote.storage.enable": "true", "retention.ms": "-1", "segment.bytes": str(256 << 10),
        "local.retention.bytes": "1"})
    ds = produce(origin.bootstrap, TOPIC, PARTITIONS, RECORDS)
    wait_tiered(origin.bootstrap, ds, min_fraction=0.5)
    replica.admin().create_topics([NewTopic(TOPIC, -1, -1, config={"remote.read.replica": "true"})])[TOPIC].result(
        timeout=WAIT_S)
    ends = {p: wait_until(f"replica {TOPIC}-{p}", lambda p=p: (e := replica.list_offsets(TOPIC, p, -1)[0]) > 0 and e)
            for p in range(PARTITIONS)}
    key = {"rsm.config.encryption.key.pairs.k1.private.key": (keys / "k1.pem").read_text()}
    mirrored = spark.read.format("strata").options(**{"kafka.bootstrap.servers": replica.bootstrap,
                                                       "subscribe": TOPIC, **key}).load()
    source = spark.read.format("strata").options(**{"kafka.bootstrap.servers": origin.bootstrap,
                                                     "subscribe": TOPIC, **key}).load()
    below = F.lit(False)
    for p, end in ends.items():
        below = below | ((F.col("partition") == p) & (F.col("offset") < end))
    got = per_partition(mirrored)
    assert got == per_partition(source.where(below))
    assert all(got[p][0] == ends[p] >= RECORDS // PARTITIONS // 2 for p in range(PARTITIONS))
