"""The diskless fetch path: WAL objects of real v2 batches, committed to the in-memory coordinator, read back.

Each test builds objects byte by byte from ``BatchBuilder`` batches (base offset 0, as the writer uploads
them), commits their coordinates, asks ``find_batches`` and reads; the output is parsed as a client would
(``iter_batches`` with CRC checks, ``decode_batch``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from strata.common.clock import ManualClock
from strata.diskless.coordinator import InMemoryControlPlane
from strata.diskless.coordinator.api import (
    AbortedTxn,
    CommitBatchRequest,
    CommitFileRequest,
    ControlRecordType,
    CreatePartitionsRequest,
    FindBatchRequest,
    FindBatchResponse,
    IsolationLevel,
    TimestampType,
)
from strata.diskless.reader import ObjectBytes, ObjectCache, PartitionRead, Reader
from strata.diskless.reader.plan import merge_ranges, plan_reads
from strata.errors import ErrorCode
from strata.protocol.records.batch import TimestampType as BatchTimestampType
from strata.protocol.records.batch import iter_batches, parse_header
from strata.protocol.records.builder import BatchBuilder, build_control_batch
from strata.protocol.records.record import ControlRecordType as RecordControlType
from strata.protocol.records.record import decode_batch
from strata.tiered.api import RemoteStorageError
from strata.tiered.storage.memory_objects import MemoryObjectStore

T = uuid.UUID(int=7)
T_NAME = "events"
NOW = 1_700_000_000_000
CREATE_TS = NOW - 5_000


# -- building WAL objects --------------------------------------------------------------------------


def records(partition: int, count: int, *, tag: str = "", ts: int = CREATE_TS, lat: bool = False,
            pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    """A batch of ``count`` records valued ``p<partition>-<tag><i>``, base offset 0."""
    builder = BatchBuilder(timestamp_type=BatchTimestampType.LOG_APPEND_TIME if lat else BatchTimestampType.CREATE_TIME,
                           log_append_time=ts if lat else None, producer_id=pid, producer_epoch=epoch,
                           base_sequence=seq, transactional=txn)
    for i in range(count):
        builder.append(f"p{partition}-{tag}{i}".encode(), key=f"k{i}".encode(), timestamp=ts + i)
    return builder.build()


@dataclass
class Item:
    """One batch placed in a WAL object, with what the writer would tell the coordinator about it."""

    partition: int
    data: bytes
    control: ControlRecordType | None = None
    commit_overrides: dict[str, Any] = field(default_factory=dict)


def item(partition: int, data: bytes, **overrides: Any) -> Item:
    return Item(partition, data, commit_overrides=overrides)


def wal(key: str, items: Sequence[Item | bytes]) -> tuple[bytes, CommitFileRequest]:
    """Concatenate the batches (a plain ``bytes`` item is unreferenced filler) and describe them."""
    out, batches = bytearray(), []
    for it in items:
        if isinstance(it, bytes):
            out += it
            continue
        h = parse_header(it.data)
        request = CommitBatchRequest(
            T, T_NAME, it.partition, byte_offset=len(out), byte_size=len(it.data), base_offset=0,
            last_offset=h.last_offset_delta, batch_max_timestamp=h.max_timestamp,
            timestamp_type=TimestampType(int(h.timestamp_type)), producer_id=h.producer_id,
            producer_epoch=h.producer_epoch, base_sequence=h.base_sequence, last_sequence=h.last_sequence,
            is_transactional=h.is_transactional, is_control=h.is_control, control_type=it.control)
        batches.append(dataclasses.replace(request, **it.commit_overrides))
        out += it.data
    return bytes(out), CommitFileRequest(key, 1, len(out), tuple(batches))


class Cluster:
    """A coordinator, a store and the helpers to upload, commit and find."""

    def __init__(self, partitions: int = 4) -> None:
        self.cp = InMemoryControlPlane()
        self.cp.create_partitions([CreatePartitionsRequest(T, T_NAME, partitions)], now_ms=NOW)
        self.store = MemoryObjectStore()

    def produce(self, key: str, items: Sequence[Item | bytes], *, now: int = NOW, upload: bool = True) -> bytes:
        data, request = wal(key, items)
        if upload:
            self.store.put_object(key, data)
        responses = self.cp.commit_file(request, now_ms=now)
        assert all(r.error is ErrorCode.NONE for r in responses), responses
        return data

    def find(self, *partitions: int, offset: int = 0,
             isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> list[FindBatchResponse]:
        return self.cp.find_batches([FindBatchRequest(T, p, offset, 1 << 30) for p in partitions],
                                    fetch_max_bytes=1 << 30, isolation_level=isolation)


def read(reader: Reader, responses: Sequence[FindBatchResponse], now: int = NOW + 1000) -> list[PartitionRead]:
    return asyncio.run(reader.read(responses, now))


def batches_of(pr: PartitionRead) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch, CRCs checked as a client checks them."""
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(pr.records, verify_crc=True)]


def values_of(pr: PartitionRead) -> list[tuple[int, bytes | None]]:
    out = []
    for position, _ in iter_batches(pr.records, verify_crc=True):
        out += [(r.offset, r.value) for r in decode_batch(pr.records, position).records]
    return out


class SlowStore(MemoryObjectStore):
    """GETs take ``delay_s`` in the worker thread; tracks the most GETs in flight at once."""

    def __init__(self, delay_s: float = 0.05) -> None:
        super().__init__()
        self.delay_s = delay_s
        self._gate = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.fail_with: Exception | None = None

    def get_object_range(self, key: str, start: int, end: int) -> bytes:
        with self._gate:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
            if self.fail_with is not None:
                with self._lock:
                    self.calls["get"] += 1
                raise self.fail_with
            return super().get_object_range(key, start, end)
        finally:
            with self._gate:
                self.in_flight -= 1


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def new_reader(store: MemoryObjectStore, **cache_kwargs: Any) -> Reader:
    return Reader(ObjectCache(store, **cache_kwargs))


# -- offsets, contents, timestamps -----------------------------------------------------------------


def test_offsets_are_injected_per_partition_and_contents_survive(cluster: Cluster) -> None:
    cluster.produce("wal/a", [item(0, records(0, 3, tag="a")), item(1, records(1, 2, tag="a"))])
    cluster.produce("wal/b", [item(0, records(0, 2, tag="c")), item(1, records(1, 1, tag="c"))])
    reader = new_reader(cluster.store)
    p0, p1 = read(reader, cluster.find(0, 1))
    assert p0.error is ErrorCode.NONE and p1.error is ErrorCode.NONE
    assert batches_of(p0) == [(0, 2), (3, 4)]
    assert batches_of(p1) == [(0, 1), (2, 2)]
    assert values_of(p0) == [(0, b"p0-a0"), (1, b"p0-a1"), (2, b"p0-a2"), (3, b"p0-c0"), (4, b"p0-c1")]
    assert values_of(p1) == [(0, b"p1-a0"), (1, b"p1-a1"), (2, b"p1-c0")]
    assert (p0.high_watermark, p0.last_stable_offset, p0.log_start_offset) == (5, 5, 0)
    assert (p1.high_watermark, p1.last_stable_offset, p1.log_start_offset) == (3, 3, 0)
    assert p0.stop_error is ErrorCode.NONE and p0.aborted_transactions == ()
    assert isinstance(p0.records, bytes)


def test_reading_from_a_middle_offset_starts_at_the_batch_holding_it(cluster: Cluster) -> None:
    cluster.produce("wal/a", [item(0, records(0, 3))])
    cluster.produce("wal/b", [item(0, records(0, 3, tag="x"))])
    (p0,) = read(new_reader(cluster.store), cluster.find(0, offset=4))
    assert batches_of(p0) == [(3, 5)]


def test_a_coalesced_run_is_walked_batch_by_batch(cluster: Cluster) -> None:
    # Byte-adjacent batches of one partition in one commit become one coordinator row.
    cluster.produce("wal/a", [item(0, records(0, 3, tag="a")), item(0, records(0, 2, tag="b")),
                              item(0, records(0, 4, tag="c")), item(1, records(1, 1))])
    (f0, f1) = cluster.find(0, 1)
    assert len(f0.batches) == 1 and (f0.batches[0].base_offset, f0.batches[0].last_offset) == (0, 8)
    p0, p1 = read(new_reader(cluster.store), [f0, f1])
    assert batches_of(p0) == [(0, 2), (3, 4), (5, 8)]
    assert [o for o, _ in values_of(p0)] == list(range(9))
    assert values_of(p0)[3] == (3, b"p0-b0")
    assert batches_of(p1) == [(0, 0)]


def test_a_run_whose_batches_disagree_with_the_coordinator_is_not_served(cluster: Cluster) -> None:
    cluster.produce("wal/a", [item(0, records(0, 2))])
    cluster.produce("wal/b", [item(0, records(0, 2), last_offset=4)])  # claims 5 records, holds 2
    (p0,) = read(new_reader(cluster.store), cluster.find(0))
    assert p0.error is ErrorCode.NONE and batches_of(p0) == [(0, 1)]
    assert p0.stop_error is ErrorCode.UNKNOWN_SERVER_ERROR and "coordinator says 6" in (p0.message or "")
    (alone,) = read(new_reader(cluster.store), cluster.find(0, offset=2))
    assert alone.error is ErrorCode.UNKNOWN_SERVER_ERROR and alone.records == b""


def test_log_append_time_batches_get_the_commit_time_and_a_fresh_crc(cluster: Cluster) -> None:
    commit_ms = NOW + 777
    cluster.produce("wal/a", [item(0, records(0, 3, lat=True, ts=CREATE_TS)), item(1, records(1, 2))],
                    now=commit_ms)
    p0, p1 = read(new_reader(cluster.store), cluster.find(0, 1), now=commit_ms + 10)
    ((_, h0),) = list(iter_batches(p0.records, verify_crc=True))
    assert h0.timestamp_type is BatchTimestampType.LOG_APPEND_TIME and h0.max_timestamp == commit_ms
    assert {r.timestamp for r in decode_batch(p0.records).records} == {commit_ms}
    ((_, h1),) = list(iter_batches(p1.records, verify_crc=True))  # CreateTime is left alone
    assert h1.timestamp_type is BatchTimestampType.CREATE_TIME and h1.max_timestamp == CREATE_TS + 1


def test_an_error_answer_passes_through_without_reads(cluster: Cluster) -> None:
    cluster.produce("wal/a", [item(0, records(0, 2))])
    (f,) = cluster.find(0, offset=9)
    assert f.error is ErrorCode.OFFSET_OUT_OF_RANGE
    before = cluster.store.calls["get"]
    (p0,) = read(new_reader(cluster.store), [f])
    assert (p0.error, p0.records, p0.high_watermark, p0.log_start_offset) == (
        ErrorCode.OFFSET_OUT_OF_RANGE, b"", 2, 0)
    assert cluster.store.calls["get"] == before


def test_a_partition_at_its_high_watermark_gets_no_records(cluster: Cluster) -> None:
    cluster.produce("wal/a", [item(0, records(0, 2))])
    (p0,) = read(new_reader(cluster.store), cluster.find(0, offset=2))
    assert (p0.error, p0.records, p0.high_watermark) == (ErrorCode.NONE, b"", 2)


def test_unreferenced_bytes_between_batches_are_skipped(cluster: Cluster) -> None:
    # A batch the coordinator rejected (or any junk) stays in the object unreferenced.
    cluster.produce("wal/a", [item(0, records(0, 1)), b"\xff" * 37, item(0, records(0, 2, tag="z"))])
    (p0,) = read(new_reader(cluster.store), cluster.find(0))
    assert batches_of(p0) == [(0, 0), (1, 2)]


# -- failures ----------------------------------------------------------------------------------------


def test_a_missing_object_fails_only_its_partitions_and_keeps_prefixes(cluster: Cluster) -> None:
    cluster.produce("wal/a", [item(0, records(0, 2)), item(2, records(2, 2))])
    cluster.produce("wal/gone", [item(1, records(1, 1)), item(2, records(2, 3, tag="g"))], upload=False)
    cluster.produce("wal/c", [item(2, records(2, 1, tag="c")), item(3, records(3, 1))])
    p0, p1, p2, p3 = read(new_reader(cluster.store), cluster.find(0, 1, 2, 3))
    assert p0.error is ErrorCode.NONE and batches_of(p0) == [(0, 1)]
    assert p1.error is ErrorCode.KAFKA_STORAGE_ERROR and p1.records == b""
    assert p1.high_watermark == 1  # the coordinator's answer still goes out
    # p2: the prefix before the missing object is served; the batches after it wait for the next fetch.
    assert p2.error is ErrorCode.NONE and batches_of(p2) == [(0, 1)]
    assert p2.stop_error is ErrorCode.KAFKA_STORAGE_ERROR and "wal/gone" in (p2.message or "")
    assert p3.error is ErrorCode.NONE and batches_of(p3) == [(0, 0)]


def test_a_lagging_read_of_a_missing_object_is_isolated_too(cluster: Cluster) -> None:
    cluster.produce("wal/gone", [item(0, records(0, 1))], upload=False)
    cluster.produce("wal/b", [item(1, records(1, 1))])
    reader = new_reader(cluster.store)
    p0, p1 = read(reader, cluster.find(0, 1), now=NOW + 3_600_000)
    assert p0.error is ErrorCode.KAFKA_STORAGE_ERROR and p1.error is ErrorCode.NONE
    assert reader.stats.lagging_objects == 2 and reader.stats.object_read_failures == 1


def test_a_failing_store_is_a_storage_error(cluster: Cluster) -> None:
    store = SlowStore(0)
    data, request = wal("wal/a", [item(0, records(0, 1))])
    store.put_object("wal/a", data)
    cluster.cp.commit_file(request, now_ms=NOW)
    store.fail_with = RemoteStorageError("throttled")
    reader = new_reader(store)
    (p0,) = read(reader, cluster.find(0))
    assert p0.error is ErrorCode.KAFKA_STORAGE_ERROR and "throttled" in (p0.message or "")
    assert len(reader._cache) == 0 and reader._cache.stats.load_failures == 1
    store.fail_with = None  # failures are not cached: the next fetch GETs again
    (p0,) = read(reader, cluster.find(0))
    assert batches_of(p0) == [(0, 0)] and store.calls["get"] == 2


def corrupt(store: MemoryObjectStore, key: str, position: int) -> None:
    data = bytearray(store.get_object_range(key, 0, 1 << 30))
    data[position] ^= 0xFF
    store.put_object(key, data)


def test_a_corrupt_batch_stops_the_partition_and_keeps_the_prefix(cluster: Cluster) -> None:
    first, second = records(0, 2), records(0, 3, tag="x")
    cluster.produce("wal/a", [item(0, first), item(1, records(1, 1)), item(0, second)])  # two rows for p0
    cluster.produce("wal/b", [item(0, records(0, 1, tag="y"))])
    corrupt(cluster.store, "wal/a", len(first) + len(records(1, 1)) + len(second) - 1)  # a record byte
    p0, p1 = read(new_reader(cluster.store), cluster.find(0, 1))
    assert p0.error is ErrorCode.NONE and batches_of(p0) == [(0, 1)]
    assert p0.stop_error is ErrorCode.CORRUPT_MESSAGE and "CRC" in (p0.message or "")
    assert p1.error is ErrorCode.NONE and batches_of(p1) == [(0, 0)]  # same object, other bytes: fine
    (at_bad,) = read(new_reader(cluster.store), cluster.find(0, offset=2))  # the consumer's next fetch
    assert at_bad.error is ErrorCode.CORRUPT_MESSAGE and at_bad.records == b""


def test_corruption_inside_a_coalesced_run_keeps_the_good_batches_before_it(cluster: Cluster) -> None:
    a, b, c = records(0, 2), records(0, 1, tag="b"), records(0, 2, tag="c")
    cluster.produce("wal/a", [item(0, a), item(0, b), item(0, c)])
    assert len(cluster.find(0)[0].batches) == 1
    corrupt(cluster.store, "wal/a", len(a) + len(b) + 30)  # inside c's header, in the CRC'd range
    (p0,) = read(new_reader(cluster.store), cluster.find(0))
    assert batches_of(p0) == [(0, 1), (2, 2)] and p0.stop_error is ErrorCode.CORRUPT_MESSAGE


def test_a_truncated_object_is_a_storage_error(cluster: Cluster) -> None:
    data = cluster.produce("wal/a", [item(0, records(0, 2)), item(1, records(1, 2))])
    cluster.store.put_object("wal/a", data[: len(data) - 5])
    p0, p1 = read(new_reader(cluster.store), cluster.find(0, 1))
    assert p0.error is ErrorCode.NONE and batches_of(p0) == [(0, 1)]
    assert p1.error is ErrorCode.KAFKA_STORAGE_ERROR


# -- transactions ------------------------------------------------------------------------------------


def test_read_committed_gets_the_aborted_transactions_and_the_last_stable_offset(cluster: Cluster) -> None:
    pid, epoch = 42, 0
    cluster.produce("wal/a", [item(0, records(0, 2, pid=pid, epoch=epoch, seq=0, txn=True))])
    abort = build_control_batch(RecordControlType.ABORT, producer_id=pid, producer_epoch=epoch, timestamp=NOW)
    cluster.produce("wal/b", [Item(0, abort, ControlRecordType.ABORT), item(0, records(0, 1, tag="plain"))])
    cluster.produce("wal/c", [item(0, records(0, 1, pid=7, epoch=0, seq=0, txn=True))])  # still open
    (rc,) = read(new_reader(cluster.store), cluster.find(0, isolation=IsolationLevel.READ_COMMITTED))
    assert rc.aborted_transactions == (AbortedTxn(pid, 0, 2),)
    assert (rc.last_stable_offset, rc.high_watermark) == (4, 5)
    assert batches_of(rc) == [(0, 1), (2, 2), (3, 3)]  # read_committed stops at the LSO
    headers = [h for _, h in iter_batches(rc.records)]
    assert headers[0].is_transactional and headers[1].is_control and headers[1].producer_id == pid
    (ru,) = read(new_reader(cluster.store), cluster.find(0))
    assert ru.aborted_transactions == () and batches_of(ru)[-1] == (4, 4)


# -- the cache ---------------------------------------------------------------------------------------


def test_concurrent_reads_of_a_cold_object_issue_one_get(cluster: Cluster) -> None:
    store = SlowStore(0.05)
    data, request = wal("wal/a", [item(0, records(0, 2)), item(1, records(1, 2))])
    store.put_object("wal/a", data)
    cluster.cp.commit_file(request, now_ms=NOW)
    reader = new_reader(store)

    async def both() -> tuple[list[PartitionRead], list[PartitionRead]]:
        return await asyncio.gather(reader.read(cluster.find(0), NOW), reader.read(cluster.find(1), NOW))

    (p0,), (p1,) = asyncio.run(both())
    assert batches_of(p0) == [(0, 1)] and batches_of(p1) == [(0, 1)]
    assert store.calls["get"] == 1
    stats = reader._cache.stats
    assert (stats.misses, stats.merged, stats.hits) == (1, 1, 0)


def test_a_hot_object_is_served_from_the_cache_after_the_first_read(cluster: Cluster) -> None:
    cluster.produce("wal/a", [item(0, records(0, 2)), item(1, records(1, 2))])
    reader = new_reader(cluster.store)
    read(reader, cluster.find(0))
    assert cluster.store.calls["get"] == 1 and reader._cache.peek("wal/a", 0) is not None
    (p1,) = read(reader, cluster.find(1))
    assert batches_of(p1) == [(0, 1)]
    assert cluster.store.calls["get"] == 1 and reader._cache.stats.hits == 1
    assert reader.stats.hot_objects == 2 and reader.stats.lagging_objects == 0


def test_prefilled_objects_are_never_fetched(cluster: Cluster) -> None:
    data = cluster.produce("wal/a", [item(0, records(0, 2))])
    reader = new_reader(cluster.store)
    reader._cache.prefill("wal/a", bytearray(data))
    (p0,) = read(reader, cluster.find(0))
    assert batches_of(p0) == [(0, 1)] and cluster.store.calls["get"] == 0


def test_a_lagging_read_bypasses_the_cache_and_evicts_nothing(cluster: Cluster) -> None:
    cluster.produce("wal/old", [item(0, records(0, 2)), item(1, records(1, 1)), item(0, records(0, 1))],
                    now=NOW - 600_000)
    cluster.produce("wal/hot", [item(2, records(2, 2))], now=NOW)
    data_old = cluster.store.get_object_range("wal/old", 0, 1 << 30)
    cluster.store.calls.clear()
    # Room for the hot object only: a lagging read through the cache would have to evict it.
    reader = new_reader(cluster.store, max_bytes=len(data_old) - 1)
    read(reader, cluster.find(2), now=NOW)
    cache = reader._cache
    assert len(cache) == 1 and cluster.store.calls["get"] == 1
    p0, p1 = read(reader, cluster.find(0, 1), now=NOW)
    assert batches_of(p0) == [(0, 1), (2, 2)] and batches_of(p1) == [(0, 0)]
    assert cluster.store.calls["get"] == 2  # one bounding GET for both partitions' ranges
    assert reader.stats.lagging_gets == 1 and reader.stats.lagging_objects == 1
    assert cache.peek("wal/old", 0) is None and cache.peek("wal/hot", 0) is not None
    assert (cache.stats.evictions, cache.stats.misses) == (0, 1)
    read(reader, cluster.find(0), now=NOW)  # lagging reads are never cached: GET again
    assert cluster.store.calls["get"] == 3


def test_the_lagging_threshold_defaults_to_the_cache_lifespan(cluster: Cluster) -> None:
    reader = Reader(ObjectCache(cluster.store, lifespan_s=5))
    assert reader.lagging_threshold_ms == 5000
    cluster.produce("wal/a", [item(0, records(0, 1))], now=NOW)
    read(reader, cluster.find(0), now=NOW + 5000)
    assert reader.stats.hot_objects == 1
    read(reader, cluster.find(0), now=NOW + 5001)
    assert reader.stats.lagging_objects == 1


def test_lagging_gets_are_bounded_by_their_own_semaphore(cluster: Cluster) -> None:
    store = SlowStore(0.03)
    for i in range(6):
        data, request = wal(f"wal/{i}", [item(0, records(0, 1, tag=str(i)))])
        store.put_object(f"wal/{i}", data)
        cluster.cp.commit_file(request, now_ms=NOW)
    with ThreadPoolExecutor(8) as pool:
        reader = Reader(ObjectCache(store), lagging_concurrency=2, lagging_executor=pool)
        (p0,) = read(reader, cluster.find(0), now=NOW + 3_600_000)
    assert [o for o, _ in values_of(p0)] == list(range(6))
    assert store.calls["get"] == 6 and store.max_in_flight == 2


def test_the_byte_bound_evicts_the_least_recently_used_block() -> None:
    store = MemoryObjectStore()
    for name in "abc":
        store.put_object(name, name.encode() * 100)
    cache = ObjectCache(store, max_bytes=250)

    async def run() -> None:
        await cache.get_block("a", 0)
        await cache.get_block("b", 0)
        await cache.get_block("a", 0)  # a is now the most recently used
        await cache.get_block("c", 0)

    asyncio.run(run())
    assert cache.peek("a", 0) is not None and cache.peek("b", 0) is None and cache.peek("c", 0) is not None
    assert cache.size_bytes == 200 and cache.stats.evictions == 1
    cache.prefill("huge", b"x" * 251)  # larger than the whole budget: not kept, nothing evicted
    assert cache.peek("huge", 0) is None and len(cache) == 2


def test_the_entry_bound_evicts_too() -> None:
    cache = ObjectCache(MemoryObjectStore(), max_entries=2)
    for name in "abc":
        cache.prefill(name, b"x")
    assert [cache.peek(n, 0) is not None for n in "abc"] == [False, True, True]


def test_entries_expire_after_their_lifespan(cluster: Cluster) -> None:
    clock = ManualClock(0)
    cluster.produce("wal/a", [item(0, records(0, 1))])
    reader = Reader(ObjectCache(cluster.store, lifespan_s=60, clock=clock), lagging_threshold_ms=10**9)
    read(reader, cluster.find(0))
    clock.advance(59_999)
    read(reader, cluster.find(0))
    assert cluster.store.calls["get"] == 1  # a hit does not extend the lifespan (expire after write)
    clock.advance(1)
    assert reader._cache.peek("wal/a", 0) is None and reader._cache.stats.expirations == 1
    assert reader._cache.size_bytes == 0
    read(reader, cluster.find(0))
    assert cluster.store.calls["get"] == 2


def test_small_blocks_are_fetched_separately_and_straddling_batches_joined(cluster: Cluster) -> None:
    batches = [records(p % 2, 2, tag=str(p)) for p in range(6)]  # ~90 bytes each
    data = cluster.produce("wal/a", [item(p % 2, b) for p, b in enumerate(batches)])
    block = 128
    reader = new_reader(cluster.store, block_bytes=block)
    p0, p1 = read(reader, cluster.find(0, 1))
    assert [o for o, _ in values_of(p0)] == list(range(6)) and [o for o, _ in values_of(p1)] == list(range(6))
    n_blocks = -(-len(data) // block)
    assert cluster.store.calls["get"] == n_blocks and len(reader._cache) == n_blocks
    assert reader._cache.peek("wal/a", (n_blocks - 1) * block) == data[(n_blocks - 1) * block:]  # short tail


def test_get_range_joins_blocks_and_stops_at_the_object_end() -> None:
    store = MemoryObjectStore()
    store.put_object("o", bytes(range(250)))
    cache = ObjectCache(store, block_bytes=100)
    assert bytes(asyncio.run(cache.get_range("o", 90, 110))) == bytes(range(90, 110))
    assert bytes(asyncio.run(cache.get_range("o", 240, 400))) == bytes(range(240, 250))
    assert bytes(asyncio.run(cache.get_range("o", 10, 20))) == bytes(range(10, 20))
    with pytest.raises(ValueError):
        asyncio.run(cache.get_block("o", 5))


def test_a_cancelled_waiter_does_not_abort_the_shared_load() -> None:
    store = SlowStore(0.05)
    store.put_object("o", b"abc")
    cache = ObjectCache(store)

    async def run() -> bytes | memoryview:
        first = asyncio.create_task(cache.get_block("o", 0))
        await asyncio.sleep(0)
        second = asyncio.create_task(cache.get_block("o", 0))
        await asyncio.sleep(0.01)
        first.cancel()
        return await second

    assert bytes(asyncio.run(run())) == b"abc"
    assert store.calls["get"] == 1 and cache.peek("o", 0) == b"abc"


def test_invalidate_forgets_an_object() -> None:
    cache = ObjectCache(MemoryObjectStore(), block_bytes=4)
    cache.prefill("o", b"0123456789")
    cache.prefill("p", b"x")
    assert len(cache) == 4 and cache.size_bytes == 11
    cache.invalidate("o")
    assert len(cache) == 1 and cache.size_bytes == 1


# -- the pieces --------------------------------------------------------------------------------------


def test_object_bytes_views_need_full_coverage() -> None:
    ob = ObjectBytes([(100, b"b" * 100), (0, b"a" * 100), (300, b"d" * 10)])
    assert bytes(ob.view(10, 20) or b"") == b"a" * 10
    assert ob.view(90, 110) == b"a" * 10 + b"b" * 10
    assert ob.view(190, 210) is None  # 200..300 was never read
    assert ob.view(305, 311) is None  # past the end
    assert ObjectBytes([]).view(0, 1) is None


def test_merge_ranges() -> None:
    assert merge_ranges([(50, 60), (0, 10), (10, 20), (15, 18), (30, 40)]) == ((0, 20), (30, 40), (50, 60))


def test_plan_groups_by_object_and_classifies_by_commit_time(cluster: Cluster) -> None:
    cluster.produce("wal/old", [item(0, records(0, 1)), item(1, records(1, 1))], now=NOW - 100_000)
    cluster.produce("wal/new", [item(0, records(0, 1)), item(1, records(1, 1))], now=NOW)
    plans = plan_reads(cluster.find(0, 1), now_ms=NOW + 1, lagging_threshold_ms=60_000)
    assert [(p.object_key, p.lagging, len(p.ranges)) for p in plans] == [("wal/old", True, 1), ("wal/new", False, 1)]
    assert plans[0].bounds == (0, plans[0].byte_count)

