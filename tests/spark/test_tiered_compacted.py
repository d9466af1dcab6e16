"""``format("strata")`` on a compacted topic in tiered storage (KIP-1272): the log cleaner rewrote its remote
segments, which Spark reads straight from the store, offset gaps and all.

The same updates as ``test_compacted.py`` on a broker that tiers the topic and keeps almost nothing locally
(``local.retention.bytes=1``): the exact batch read and ``latestPerKey`` must equal what a consumer reads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.spark.test_compacted import (
    COMPACTED,
    PARTITIONS,
    TOPIC_CONFIG,
    produce_updates,
    spark_rows,
    stable,
    wait_compacted,
)
from tests.tiered.harness import TieredBroker

TIERED_CONFIG = {**TOPIC_CONFIG, "remote.storage.enable": "true", "local.retention.bytes": "1"}


@pytest.fixture(scope="module")
def tiered_compacted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TieredBroker, dict[bytes, Any]]]:
    b = TieredBroker(tmp_path_factory.mktemp("spark-tiered-compacted"), **{"log.cleaner.backoff.ms": "200"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(COMPACTED, PARTITIONS, 1, config=TIERED_CONFIG)])[COMPACTED].result(30)
        sent, last = produce_updates(b.bootstrap)
        wait_compacted(b.bootstrap, sent)
        for p in range(PARTITIONS):  # most of each partition is remote
            hw = b.list_offsets(COMPACTED, p, -1)[0]
            assert b.list_offsets(COMPACTED, p, -4)[0] > hw // 2, "the compacted data should be mostly remote"
        yield b, last
    finally:
        b.stop()


def test_batch_and_latest_per_key_reads_of_a_tiered_compacted_topic(
        spark: Any, tiered_compacted: tuple[TieredBroker, dict[bytes, Any]]) -> None:
    b, last = tiered_compacted
    options = {"kafka.bootstrap.servers": b.bootstrap, "subscribe": COMPACTED}
    df = spark.read.format("strata").options(**options, minPartitions="8").load()  # cuts that land in gaps
    want, got = stable(b.bootstrap, functools.partial(spark_rows, df))
    assert got == want
    table = spark.read.format("strata").options(**options, latestPerKey="true").load()
    everything, rows = stable(b.bootstrap, lambda: spark_rows(table))
    model = {k: v for k, v in last.items() if v is not None}
    assert {k: v for _, _, k, v in rows} == model and len(rows) == len(model)
    newest = {k: (p, o, v) for p, o, k, v in everything}
    assert rows == sorted((p, o, k, v) for k, (p, o, v) in newest.items() if v is not None)
