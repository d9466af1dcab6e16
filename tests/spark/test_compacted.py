"""``format("strata")`` on compacted topics: offsets with gaps, and ``latestPerKey``.

After compaction a partition's offsets have gaps: records removed inside batches (a batch keeps
its base and last offset), whole batches removed (the next one starts later), and possibly no
record at all for the last offsets before the high watermark. None of that is data loss.

The first tests need no broker: the broker-tail reader runs against a fake cluster that serves a
hand-built compacted log with every kind of gap and answers Fetch as Kafka does (the batches from
the first one whose last offset is at or after the fetch offset, up to the high watermark; empty
when nothing is left). The last ones run a real broker with the log cleaner and a local Spark.
"""

from __future__ import annotations

import functools
import json
import logging
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan
from tests.broker.harness import BrokerProcess

import strata.spark.reading as reading
from strata.client.cluster import EARLIEST, EARLIEST_LOCAL, LATEST, OFFSET_OUT_OF_RANGE, FetchedPartition
from strata.protocol.records import parse_header
from strata.protocol.records.batch import reseal_crc
from strata.protocol.records.builder import BatchBuilder
from strata.protocol.records.compression import CompressionType
from strata.protocol.records.filtering import empty_batch
from strata.spark.columnar import decode_batches
from strata.spark.latest import read_latest_per_key
from strata.spark.options import StrataOptionError, parse_source_options
from strata.spark.planning import BrokerSlice, PartitionSlices, ReadSettings, StrataDataLossError, by_partition
from strata.spark.source import StrataPushdownBatchReader

T0 = 1_700_000_000_000
TOPIC = "fake-compacted"
LAST_OFFSET_DELTA_AT = 23  # base offset 8, length 4, leader epoch 4, magic 1, crc 4, attributes 2

Rec = tuple[int, bytes | None, bytes | None]  # offset, key, value


# -- a compacted log, built by hand ----------------------------------------------------------------

def batch(base: int, last: int, records: list[Rec], codec: CompressionType = CompressionType.NONE) -> bytes:
    """A batch of offsets [base, last] holding only ``records``, as the cleaner leaves it."""
    if not records:  # a producer's last batch, kept empty so its sequence survives
        full = BatchBuilder(base_offset=base, producer_id=7, producer_epoch=0, base_sequence=0)
        full.append(b"x", key=b"x", timestamp=T0, offset_delta=last - base)
        return empty_batch(parse_header(full.build(), 0))
    b = BatchBuilder(base_offset=base, compression=codec)
    for offset, key, value in records:
        b.append(value, key=key, timestamp=T0 + offset, offset_delta=offset - base)
    data = bytearray(b.build())
    struct.pack_into(">i", data, LAST_OFFSET_DELTA_AT, last - base)  # the last records removed: it stays
    reseal_crc(data, 0, len(data))
    return bytes(data)


def r(offset: int, key: str | None = None, value: str | None = "v") -> Rec:
    k = None if key is None else key.encode()
    v = None if value is None else (value if value != "v" else f"v{offset}").encode()
    return offset, k, v


# Offsets 0-39, high watermark 40. Kept: 0 2 3 | 10 12 | 17 18 19 | 30 31. Gone: 1 and 4 inside the first
# batch (4 was its last record), the whole batch 5-9, 11 and 13-14 inside an lz4 batch, an empty batch
# 15-16, batches 20-29, and 32-39 entirely: no batch at all before the high watermark.
LOG = [
    (0, 4, [r(0), r(2), r(3)], CompressionType.NONE),
    (10, 14, [r(10), r(12)], CompressionType.LZ4),
    (15, 16, [], CompressionType.NONE),
    (17, 19, [r(17), r(18), r(19)], CompressionType.ZSTD),
    (30, 31, [r(30), r(31)], CompressionType.NONE),
]
KEPT = [0, 2, 3, 10, 12, 17, 18, 19, 30, 31]
HW = 40


class FakeLog:
    """One partition's batches, answered the way a Kafka broker answers Fetch and ListOffsets."""

    def __init__(self, batches: list[tuple[int, int, list[Rec], CompressionType]], high_watermark: int,
                 log_start: int = 0, local_start: int | None = None, remote_misses: int = 0) -> None:
        self.batches = [(base, last, batch(base, last, recs, codec)) for base, last, recs, codec in batches]
        self.high_watermark = high_watermark
        self.log_start = log_start
        self.local_start = log_start if local_start is None else local_start
        self.remote_misses = remote_misses  # remote reads that run out of remote.fetch.max.wait.ms first
        self.fetches = 0

    def fetch(self, offset: int, max_bytes: int) -> FetchedPartition:
        self.fetches += 1
        if offset < self.log_start or offset > self.high_watermark:
            return FetchedPartition(OFFSET_OUT_OF_RANGE, -1, -1, -1, (), b"")
        if offset < self.local_start and self.remote_misses:
            self.remote_misses -= 1
            return self._answer(b"")
        out = bytearray()
        for _, last, data in self.batches:
            if last < offset or last >= self.high_watermark:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return self._answer(bytes(out))

    def _answer(self, records: bytes) -> FetchedPartition:
        return FetchedPartition(0, self.high_watermark, self.high_watermark, self.log_start, (), records)


class FakeCluster:
    """Stands in for :class:`FailoverCluster` in the broker-tail reader."""

    def __init__(self, log: FakeLog) -> None:
        self.log = log
        self.retries = 0

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 8 << 20,
              isolation_level: int = 0, max_wait_ms: int = 500) -> FetchedPartition:
        return self.log.fetch(offset, max_bytes)

    def list_offsets(self, queries: dict[tuple[str, int], int], isolation_level: int = 0) -> dict[tuple[str, int], int]:
        special = {EARLIEST: self.log.log_start, EARLIEST_LOCAL: self.log.local_start,
                   LATEST: self.log.high_watermark}
        return {k: special[v] for k, v in queries.items()}

    def cached_leader(self, topic: str, partition: int) -> int:
        return 1

    def forget_leaders(self) -> None:
        pass


@pytest.fixture
def fake_log(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeLog]:
    """``fake_log(batches, hw, ...)`` makes the reader fetch from that log."""
    def install(batches: list[tuple[int, int, list[Rec], CompressionType]] = LOG, high_watermark: int = HW,
                **kwargs: int) -> FakeLog:
        log = FakeLog(batches, high_watermark, **kwargs)
        monkeypatch.setattr(reading, "FailoverCluster", lambda *a, **k: FakeCluster(log))
        return log
    return install


def settings(fail_on_data_loss: bool = True, fetch_max_bytes: int = 1 << 20) -> ReadSettings:
    return ReadSettings("fake:9092", include_headers=False, fail_on_data_loss=fail_on_data_loss, isolation_level=0,
                        fetch_max_bytes=fetch_max_bytes, timeout_s=5.0)


def read(start: int, end: int, **kw: Any) -> list[Rec]:
    rows: list[Rec] = []
    for b in reading.read_slice(BrokerSlice(TOPIC, 0, start, end, settings(**kw))):
        rows.extend(zip(b.column("offset").to_pylist(), b.column("key").to_pylist(), b.column("value").to_pylist(),
                        strict=True))
    return rows


def offsets(rows: list[Rec]) -> list[int]:
    return [o for o, _, _ in rows]


# -- gaps, no broker -------------------------------------------------------------------------------

def test_decoder_takes_offsets_from_batches_not_from_record_counts() -> None:
    data = b"".join(batch(base, last, recs, codec) for base, last, recs, codec in LOG)
    result = decode_batches(data, topic=TOPIC, partition=0)
    assert [o for b in result.batches for o in b.column("offset").to_pylist()] == KEPT
    assert result.rows == len(KEPT) and result.next_offset == 32  # after the last batch's last offset
    cut = decode_batches(data, topic=TOPIC, partition=0, start_offset=1, end_offset=4)  # inside the first batch
    assert [o for b in cut.batches for o in b.column("offset").to_pylist()] == [2, 3] and cut.next_offset == 5
    ahead = decode_batches(data[len(batch(*LOG[0][:3])):], topic=TOPIC, partition=0, start_offset=5, end_offset=9)
    assert ahead.rows == 0 and ahead.end_reached  # the next batch starts at 10: nothing of 5-8 is left


def test_a_range_with_gaps_reads_exactly_the_records_left(fake_log: Callable[..., FakeLog],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    log = fake_log()
    with caplog.at_level(logging.WARNING):
        rows = read(0, HW)  # failOnDataLoss=true
    assert offsets(rows) == KEPT
    assert rows[1] == (2, None, b"v2")
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    # one fetch of everything, and one empty answer for 32-39 (which ends the range: no retries)
    assert log.fetches == 2


def test_every_cut_of_the_range_ends_where_its_broker_position_reaches_the_end(
        fake_log: Callable[..., FakeLog]) -> None:
    """Ranges starting and ending in every kind of gap (inside a batch, a removed batch, an empty
    batch, the end before the high watermark), one batch per Fetch: each ends without retries and
    together they read every record once."""
    log = fake_log()
    for width in (1, 2, 3, 7):
        got: list[int] = []
        for lo in range(0, HW, width):
            before = log.fetches
            got += offsets(read(lo, min(HW, lo + width), fetch_max_bytes=1))
            assert log.fetches - before <= width + 2, f"[{lo}, {lo + width}) fetched again and again"
        assert got == KEPT, width
    assert read(32, HW) == [] and read(5, 10) == [] and read(15, 17) == []


def test_the_last_offsets_missing_before_the_high_watermark(fake_log: Callable[..., FakeLog]) -> None:
    # a batch whose last records were removed keeps its last offset: the range ends with that batch
    fake_log([(0, 9, [r(0), r(1)], CompressionType.NONE)], 10)
    assert offsets(read(0, 10)) == [0, 1]
    # and when the last batches are gone entirely, the empty answer below the high watermark ends it
    log = fake_log([(0, 3, [r(0), r(3)], CompressionType.GZIP)], 10)
    assert offsets(read(0, 10)) == [0, 3] and log.fetches == 2


def test_an_empty_remote_answer_is_not_taken_for_a_gap(fake_log: Callable[..., FakeLog]) -> None:
    """Below the local log start a Fetch is a remote read, which the broker answers empty when it
    runs out of remote.fetch.max.wait.ms: the reader asks again instead of ending the range."""
    log = fake_log(local_start=17, remote_misses=2)
    assert offsets(read(0, HW)) == KEPT
    assert log.remote_misses == 0


def test_a_start_below_the_log_start_is_still_data_loss(fake_log: Callable[..., FakeLog]) -> None:
    fake_log(log_start=10)
    with pytest.raises(StrataDataLossError, match="offsets 2-9 .* deleted"):
        read(2, HW)
    assert offsets(read(2, HW, fail_on_data_loss=False)) == KEPT[3:]


# -- latestPerKey, no broker -----------------------------------------------------------------------

KEYED = [
    (0, 5, [r(0, "a", "a0"), r(1, "b", "b1"), r(3, "c", "c3"), r(4, None, "nokey")], CompressionType.NONE),
    (8, 12, [r(8, "a", "a8"), r(9, "c", None), r(12, "d", "d12")], CompressionType.SNAPPY),  # c: tombstone
    (13, 13, [], CompressionType.NONE),
    (20, 24, [r(20, "b", None), r(21, "b", "b21"), r(23, "d", None), r(24, "e", "e24")], CompressionType.ZSTD),
    (25, 27, [r(26, "c", "c26"), r(27, "a", None)], CompressionType.NONE),  # c back, a deleted
]
KEYED_HW = 30  # 28-29 gone


def latest_rows(group: PartitionSlices) -> list[tuple[int, bytes, bytes]]:
    table = pa.Table.from_batches(list(read_latest_per_key(group)))
    return list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist(), strict=True))


@pytest.mark.parametrize("cuts", [[0, KEYED_HW], [0, 9, KEYED_HW], [0, 2, 5, 9, 14, 21, 25, 27, KEYED_HW],
                                  list(range(KEYED_HW + 1))])
def test_latest_per_key_reduces_across_the_slices_of_a_partition(fake_log: Callable[..., FakeLog],
                                                                 cuts: list[int]) -> None:
    """However the partition is cut into slices, a key's latest record wins, a tombstone in a later slice
    removes an earlier value, and a value after a tombstone brings the key back."""
    fake_log(KEYED, KEYED_HW)
    slices = [BrokerSlice(TOPIC, 0, lo, hi, settings(fetch_max_bytes=1)) for lo, hi in zip(cuts, cuts[1:],
                                                                                             strict=False)]
    groups = by_partition(list(reversed(slices)))
    assert len(groups) == 1 and [s.start_offset for s in groups[0].slices] == cuts[:-1]
    # a: deleted at 27; b: deleted at 20, back at 21; c: deleted at 9, back at 26; d: deleted at 23;
    # the record without a key is not a row
    assert latest_rows(groups[0]) == [(21, b"b", b"b21"), (24, b"e", b"e24"), (26, b"c", b"c26")]


def test_latest_per_key_is_refused_for_streaming_and_keeps_only_safe_pushdown() -> None:
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "latestPerKey": "true"}
    with pytest.raises(StrataOptionError, match="'latestPerKey' is not supported by streaming queries"):
        parse_source_options(opts, streaming=True)
    assert parse_source_options(opts).latest_per_key
    assert not parse_source_options({**opts, "latestPerKey": "false"}, streaming=True).latest_per_key
    filters = [EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 3), LessThan(("offset",), 10)]
    plain = StrataPushdownBatchReader({k: v for k, v in opts.items() if k != "latestPerKey"})
    plain.pushFilters(filters)
    assert plain.pushdown is not None and (plain.pushdown.min_offset, plain.pushdown.max_offset) == (3, 10)
    latest = StrataPushdownBatchReader(opts)
    latest.pushFilters(filters)  # an upper bound would select older versions of keys
    assert latest.pushdown is not None and latest.pushdown.partitions == {1}
    assert (latest.pushdown.min_offset, latest.pushdown.max_offset) == (3, None)


# -- a real broker, its log cleaner, and Spark ------------------------------------------------------

COMPACTED = "users"
PARTITIONS = 2
KEYS = 240
UPDATES = 25  # per key, on average
CLEANER = {"log.cleaner.backoff.ms": "200"}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "0", "retention.ms": "-1"}
WAIT_S = 90.0


@pytest.fixture(scope="module")
def cleaning_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark-compacted-broker"), CLEANER).start()
    try:
        yield b
    finally:
        b.stop()


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record from offset 0 to the high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {p: c.get_watermark_offsets(CkTopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([CkTopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        todo = {p for p in range(partitions) if ends[p] > 0}
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        todo.discard(m.partition())
                    continue
                out.append((int(m.partition() or 0), int(m.offset() or 0), m.key(), m.value()))
        assert not todo, f"partitions {todo} not read to their end"
        return sorted(out)
    finally:
        c.close()


def produce_updates(bootstrap: str) -> tuple[int, dict[bytes, bytes | None]]:
    """Several updates per key and some tombstones, half plain and half lz4 (batches the cleaner
    rebuilds with their codec); returns how many were sent and the last value per key."""
    import random

    rng = random.Random(16)
    last: dict[bytes, bytes | None] = {}
    sent = 0
    for codec in ("none", "lz4"):
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                      "compression.type": codec, "linger.ms": 5, "batch.size": 4096})
        if codec == "none":
            # Keys written once, first: they outlive the cleaning at low offsets, so every partition keeps
            # records below the removed ones - gaps inside the read range, whatever the hot keys did (they
            # may all be updated again in the active segment, which is never cleaned).
            for i in range(40):
                key = b"cold-%d" % i
                value = b"%s=%d|" % (key, sent)
                p.produce(COMPACTED, key=key, value=value)
                last[key] = value
                sent += 1
        for _ in range(KEYS * UPDATES // 2):
            key = b"key-%d" % rng.randrange(KEYS)
            value = None if rng.random() < 0.08 else b"%s=%d|" % (key, sent) + b"x" * rng.randrange(60)
            p.produce(COMPACTED, key=key, value=value)  # the default partitioner: a key keeps its partition
            last[key] = value
            sent += 1
            if sent % 1000 == 0:
                p.poll(0)
        assert p.flush(30) == 0  # order per partition across the two producers
    return sent, last


def wait_compacted(bootstrap: str, produced: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Poll until the cleaner has compacted most of the topic (a consumer from offset 0 reads far
    fewer records than were produced), then return what a consumer reads."""
    deadline = time.monotonic() + WAIT_S
    while True:
        got = consume_all(bootstrap, COMPACTED, PARTITIONS)
        if len(got) < produced // 3:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing compacted after {WAIT_S:g} s: a consumer from offset 0 still reads "
                                 f"{len(got)} of the {produced} records produced")
        time.sleep(0.5)


def stable(bootstrap: str, read: Callable[[], Any]) -> tuple[list[tuple[int, int, bytes | None, bytes | None]], Any]:
    """``read()`` between two equal consumer reads: the cleaner may still remove tombstones (delete.retention.ms
    is 0) while a read runs, so a comparison counts only when the log did not change during it."""
    deadline = time.monotonic() + WAIT_S
    while True:
        before = consume_all(bootstrap, COMPACTED, PARTITIONS)
        result = read()
        if consume_all(bootstrap, COMPACTED, PARTITIONS) == before:
            return before, result
        assert time.monotonic() < deadline, "the log kept changing under the reads"


@pytest.fixture(scope="module")
def compacted(cleaning_broker: BrokerProcess) -> tuple[int, dict[bytes, bytes | None]]:
    admin = AdminClient({"bootstrap.servers": cleaning_broker.bootstrap})
    admin.create_topics([NewTopic(COMPACTED, PARTITIONS, 1, config=TOPIC_CONFIG)])[COMPACTED].result(30)
    sent, last = produce_updates(cleaning_broker.bootstrap)
    got = wait_compacted(cleaning_broker.bootstrap, sent)
    for p in range(PARTITIONS):  # gaps inside every partition, not only a shorter log
        offs = [o for q, o, _, _ in got if q == p]
        assert offs and offs[-1] + 1 - offs[0] > len(offs), f"partition {p} has no gaps"
    return sent, last


def strata_options(b: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": b.bootstrap, "subscribe": COMPACTED, **extra}


def spark_rows(df: Any) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return sorted((r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                   None if r["value"] is None else bytes(r["value"]))
                  for r in df.select("partition", "offset", "key", "value").collect())


def test_a_compacted_topic_reads_exactly_the_records_left(spark: Any, cleaning_broker: BrokerProcess,
                                                          compacted: Any) -> None:
    # failOnDataLoss is true (the default); minPartitions cuts each partition's range into pieces that
    # start and end in gaps
    for extra in ({}, {"minPartitions": "16"}):
        df = spark.read.format("strata").options(**strata_options(cleaning_broker, **extra)).load()
        want, got = stable(cleaning_broker.bootstrap, functools.partial(spark_rows, df))
        assert got == want, extra


def test_offsets_in_gaps_start_and_end_a_read(spark: Any, cleaning_broker: BrokerProcess, compacted: Any) -> None:
    def read_between() -> tuple[dict[int, tuple[int, int]], list[Any]]:
        got = consume_all(cleaning_broker.bootstrap, COMPACTED, PARTITIONS)
        bounds = {}
        for p in range(PARTITIONS):  # the first and the last missing offset of each partition's range
            present = {o for q, o, _, _ in got if q == p}
            missing = [o for o in range(max(present)) if o not in present]
            bounds[p] = (missing[0], missing[-1])
        offsets_json = {COMPACTED: {str(p): lo for p, (lo, _) in bounds.items()}}
        ending_json = {COMPACTED: {str(p): hi for p, (_, hi) in bounds.items()}}
        df = spark.read.format("strata").options(**strata_options(
            cleaning_broker, startingOffsets=json.dumps(offsets_json), endingOffsets=json.dumps(ending_json))).load()
        return bounds, spark_rows(df)

    everything, (bounds, got) = stable(cleaning_broker.bootstrap, read_between)
    assert got == [row for row in everything if bounds[row[0]][0] <= row[1] < bounds[row[0]][1]]


def test_latest_per_key_is_the_table_the_topic_represents(spark: Any, cleaning_broker: BrokerProcess,
                                                           compacted: tuple[int, dict[bytes, bytes | None]]) -> None:
    _, last = compacted
    bootstrap = cleaning_broker.bootstrap
    table = (spark.read.format("strata")
             .option("kafka.bootstrap.servers", bootstrap).option("subscribe", "users")
             .option("latestPerKey", "true")          # each live key's latest record, tombstones dropped
             .load())
    assert [f.name for f in table.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                     "timestampType"]
    assert table.rdd.getNumPartitions() == PARTITIONS  # one task per topic partition
    everything, rows = stable(cleaning_broker.bootstrap, lambda: spark_rows(table))
    model = {k: v for k, v in last.items() if v is not None}
    assert {k: v for _, _, k, v in rows} == model and len(rows) == len(model)
    # each row is its key's last record in the log, at its offset
    newest = {k: (p, o, v) for p, o, k, v in everything}
    assert rows == sorted((p, o, k, v) for k, (p, o, v) in newest.items() if v is not None)
    # a lower offset bound is pushed down; the rows are still each key's latest
    late = table.where("offset >= 100").collect()
    assert sorted((r["partition"], r["offset"]) for r in late) == [(p, o) for p, o, _, _ in rows if o >= 100]


def test_streaming_over_gaps_and_latest_per_key_refused(spark: Any, cleaning_broker: BrokerProcess,
                                                        compacted: Any, tmp_path: Path) -> None:
    # micro-batches of 800 offsets: most of their ends fall in gaps, and the last one ends at the HW
    def run() -> list[tuple[int, int, bytes | None, bytes | None]]:
        out, cp = tmp_path / f"out-{time.monotonic_ns()}", tmp_path / f"cp-{time.monotonic_ns()}"
        stream = (spark.readStream.format("strata").options(**strata_options(
            cleaning_broker, startingOffsets="earliest", maxOffsetsPerTrigger="800")).load()
            .select("partition", "offset", "key", "value"))
        query = (stream.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(cp))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180), "availableNow query did not finish"
        assert query.exception() is None
        return spark_rows(spark.read.parquet(str(out)))

    want, got = stable(cleaning_broker.bootstrap, run)
    assert got == want

    with pytest.raises(Exception, match="'latestPerKey' is not supported by streaming queries"):  # noqa: PT011
        stream = spark.readStream.format("strata").options(**strata_options(cleaning_broker, latestPerKey="true"))
        stream.load().writeStream.format("memory").queryName("refused").start().awaitTermination(30)
