"""Read-ahead of remote segments (``ReadAhead``): a sequential consumer's next fetch is served from a
window read in the background, never from stale or wrong bytes, within the memory budget.

Every answer is checked against the local log (the oracle, as in ``test_remote_reader.py``). Store
reads are counted with ``DictRSM.segment_fetches`` or ``LocalTieredStorage``'s event history. The
pool is a ``ManualPool`` where the test decides when queued read-ahead runs, so "served without a
store read" is exact: a fetch that finds its window ready makes no ``fetch_log_segment`` call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from tests.unit.tiered.test_remote_reader import (
    TP,
    DictRLMM,
    DictRSM,
    Tiered,
    batch_offsets,
    tier,
    write_batches,
)

from strata.common.metrics import Registry, remote_storage_metrics
from strata.config import LogConfig
from strata.config.broker_config import BrokerConfig
from strata.errors import OffsetOutOfRangeError
from strata.log.partition_log import PartitionLog
from strata.tiered.api import RemoteLogSegmentMetadata, RemoteStorageManager, RetriableRemoteStorageError
from strata.tiered.index_cache import RemoteIndexCache
from strata.tiered.reader import PREFETCH_IDLE_EVICT_S, RemoteFetchResult, RemoteLogReader

KiB = 1024
MiB = 1024 * KiB


class ManualPool:
    """``Executor.submit`` that only queues; ``run()`` runs what is queued (and what that queues)."""

    def __init__(self) -> None:
        self.queued: list[Callable[[], None]] = []

    def submit(self, fn: Callable[[], None]) -> None:
        self.queued.append(fn)

    def run(self) -> int:
        ran = 0
        while self.queued:
            self.queued.pop(0)()
            ran += 1
        return ran


def make(plog: PartitionLog, tmp_path: Path, rsm: RemoteStorageManager | None = None, *,
         total: int = 64 * MiB, windows: int = 2, window: int = MiB,
         submit: Callable[[Callable[[], None]], Any] | None = None) -> tuple[Tiered, ManualPool]:
    """Windows of at least 1 MiB unless ``window`` says otherwise (the broker's default is 8 MiB)."""
    pool = ManualPool()
    rsm = rsm if rsm is not None else DictRSM()
    rlmm = DictRLMM()
    mds = tier(plog, rsm, rlmm)
    cache = RemoteIndexCache(rsm, tmp_path / "cache-dir", 64 * MiB)
    reader = RemoteLogReader(rsm, rlmm, cache, prefetch_total_bytes=total, prefetch_windows=windows,
                             prefetch_window_bytes=window, prefetch_submit=submit or pool.submit)
    return Tiered(plog, rsm if isinstance(rsm, DictRSM) else DictRSM(), rlmm, cache, reader, mds), pool


def log_of(open_log: Any, batches: list[int], segment_bytes: int) -> PartitionLog:
    plog = open_log(LogConfig(segment_bytes=segment_bytes))  # default index.interval.bytes (4 KiB)
    write_batches(plog, batches)
    plog.roll()
    return plog


def read(t: Tiered, offset: int, max_bytes: int) -> tuple[RemoteFetchResult, int]:
    """The read, checked against the local log, and the store reads it made itself.

    A fetch served from a window may stop at the window's end: whole batches, a prefix of the local
    answer, never empty when that is not.
    """
    rsm = t.reader.rsm
    assert isinstance(rsm, DictRSM)
    before = len(rsm.segment_fetches)
    result = t.read(offset, max_bytes)
    expected = t.local(offset, max_bytes)
    if result.read_ahead_hit:
        assert expected[:len(result.records)] == result.records and bool(result.records) == bool(expected), offset
    else:
        assert result.records == expected, offset
    return result, len(rsm.segment_fetches) - before


def test_the_next_sequential_read_is_served_from_the_read_ahead_without_a_store_read(open_log, tmp_path):
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path)
    rsm = t.reader.rsm
    assert isinstance(rsm, DictRSM)
    first, reads = read(t, 0, MiB)
    assert reads == 1 and first.read_ahead_hit is False
    assert len(pool.queued) == 1  # the next window, queued on the pool: not read yet
    assert pool.run() == 2  # it, and once it arrived, the window after it (2 windows ahead)
    second, reads = read(t, first.upper_bound_offset, MiB)
    assert reads == 0 and second.read_ahead_hit is True
    assert second.first_batch_offset == first.upper_bound_offset
    # the windows were exactly where the consumer went on: [end, end + 1 MiB) of the same segment
    key = t.mds[0].remote_log_segment_id.id
    end = first.start_position + len(first.records)
    assert rsm.segment_fetches[1] == (key, end, end + MiB - 1)
    assert t.reader.read_ahead is not None and t.reader.read_ahead.hits == 1
    t.cache.close()


def test_a_whole_consume_makes_one_store_read_per_fetch_and_hits_after_the_first(open_log, tmp_path):
    """Fetch after fetch over several segments, the pool running between fetches as a consumer's
    think time lets it: every fetch but the first is a hit, every window is read once."""
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path)
    rsm = t.reader.rsm
    assert isinstance(rsm, DictRSM)
    assert len(t.mds) >= 2
    offset, results = 0, []
    while offset <= t.mds[-1].end_offset:
        result, reads = read(t, offset, MiB)
        results.append((result, reads))
        offset = result.upper_bound_offset
        pool.run()
    assert [r.read_ahead_hit for r, _ in results] == [False] + [True] * (len(results) - 1)
    assert [n for _, n in results] == [1] + [0] * (len(results) - 1)
    segments = {r.remote_segment.remote_log_segment_id for r, _ in results if r.remote_segment is not None}
    assert segments == {md.remote_log_segment_id for md in t.mds}  # crossed segment boundaries
    # nothing read twice, nothing read for nothing (reads past the last segment are not queued)
    assert len(rsm.segment_fetches) == len(results)
    assert len(set(rsm.segment_fetches)) == len(rsm.segment_fetches)
    t.cache.close()


def test_a_segment_read_to_its_end_reads_ahead_the_start_of_the_next_segments(open_log, tmp_path):
    """The benchmark's shape: each fetch takes a whole segment; the next two segments are read ahead
    at once (a window that ends its segment says where the next one starts without its bytes)."""
    plog = log_of(open_log, [64 * KiB] * 60, segment_bytes=MiB)
    t, pool = make(plog, tmp_path)
    rsm = t.reader.rsm
    assert isinstance(rsm, DictRSM)
    assert len(t.mds) >= 4
    first, _ = read(t, 0, 2 * MiB)
    assert first.upper_bound_offset == t.mds[1].start_offset  # the whole first segment
    ids = [md.remote_log_segment_id.id for md in t.mds]
    assert len(pool.queued) == 2  # segments 1 and 2, both queued right away
    pool.run()
    assert [(k, s) for k, s, _ in rsm.segment_fetches[1:]] == [(ids[1], 0), (ids[2], 0)]
    for md in t.mds[1:3]:
        result, reads = read(t, md.start_offset, 2 * MiB)
        assert reads == 0 and result.remote_segment == md and result.upper_bound_offset == md.end_offset + 1
    t.cache.close()


def test_a_fetch_starting_inside_a_window_is_served_from_it(open_log, tmp_path):
    """The consumer skipped a few batches (a seek forward): the offset index points into the window."""
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path)
    first, _ = read(t, 0, MiB)
    pool.run()
    later = first.upper_bound_offset + 4 * 5  # 5 batches of 4 records further
    result, reads = read(t, later, 256 * KiB)
    assert reads == 0 and result.read_ahead_hit is True
    assert batch_offsets(result.records)[0][0] <= later <= batch_offsets(result.records)[0][1]
    t.cache.close()


def test_an_earlier_offset_never_uses_a_later_window(open_log, tmp_path):
    """A window only holds batches after its start: a fetch of an offset before it reads the store."""
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path)
    first, _ = read(t, 0, MiB)
    pool.run()
    for offset in (0, 1, first.upper_bound_offset - 1):
        result, reads = read(t, offset, MiB)
        assert reads == 1 and result.read_ahead_hit is False, offset
    t.cache.close()


def test_a_smaller_fetch_leaves_the_rest_of_the_window_for_the_next_one(open_log, tmp_path):
    """Windows are at least 1 MiB; 200 KiB fetches are served from the window, then from what is left
    of it (kept as an entry of its own, a slice of the same buffer), with no store read."""
    plog = log_of(open_log, [16 * KiB] * 300, segment_bytes=4 * MiB)
    t, pool = make(plog, tmp_path)
    first, _ = read(t, 0, 200 * KiB)
    pool.run()
    offset, buffers = first.upper_bound_offset, set()
    for _ in range(4):
        result, reads = read(t, offset, 200 * KiB)
        assert reads == 0 and result.read_ahead_hit is True and 0 < len(result.records) <= 200 * KiB
        assert isinstance(result.records, memoryview)
        buffers.add(id(result.records.obj))
        offset = result.upper_bound_offset
        pool.run()
    assert len(buffers) == 1  # all four from the first window's one buffer
    t.cache.close()


def test_windows_larger_than_the_fetches_pay_the_store_round_trip_once_per_window(open_log, tmp_path):
    """The broker's default: 8 MiB windows (clipped to the 3 MiB segments here) for 1 MiB fetches.
    Every fetch after the first is served from memory; the store is read about once per segment."""
    plog = log_of(open_log, [64 * KiB] * 200, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path, window=8 * MiB)
    rsm = t.reader.rsm
    assert isinstance(rsm, DictRSM)
    offset, results = 0, []
    while offset <= t.mds[-1].end_offset:
        result, reads = read(t, offset, MiB)
        results.append((result, reads))
        offset = result.upper_bound_offset
        pool.run()
    assert [n for _, n in results] == [1] + [0] * (len(results) - 1)
    assert len(results) > 2 * len(t.mds)
    assert len(rsm.segment_fetches) <= len(t.mds) + 1  # the first fetch's own read, then one per window
    assert all(end is None or end - start + 1 <= 3 * MiB for _, start, end in rsm.segment_fetches)
    t.cache.close()


def test_a_window_still_queued_is_read_by_the_fetch_itself_once(open_log, tmp_path):
    """A saturated pool has not run the read-ahead yet: the fetch claims the window and reads it (one
    store read, as without read-ahead: a miss); the pool's task then finds it taken and reads nothing."""
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path)
    rsm = t.reader.rsm
    assert isinstance(rsm, DictRSM)
    first, _ = read(t, 0, MiB)
    second, reads = read(t, first.upper_bound_offset, MiB)
    assert reads == 1 and second.read_ahead_hit is False
    key = t.mds[0].remote_log_segment_id.id
    end = first.start_position + len(first.records)
    assert rsm.segment_fetches[-1] == (key, end, end + MiB - 1)  # the queued window's range, not a fetch's own
    before = len(rsm.segment_fetches)
    pool.run()  # the claimed task does nothing; the window after the second fetch is read
    assert [s for _, s, _ in rsm.segment_fetches[before:]][:1] == [second.start_position + len(second.records)]
    assert len(set(rsm.segment_fetches)) == len(rsm.segment_fetches)
    t.cache.close()


class GatedRSM(DictRSM):
    """Every fetch but the first blocks until ``gate`` is set (a slow store); ``started`` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        self.calls = 0

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        self.started.release()
        if not first:
            assert self.gate.wait(10)
        return super().fetch_log_segment(metadata, start_position, end_position)


def test_a_window_being_read_is_waited_for_not_read_twice(open_log, tmp_path):
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    rsm = GatedRSM()
    with ThreadPoolExecutor(4) as pool:
        t, _ = make(plog, tmp_path, rsm, windows=1, submit=pool.submit)
        first = t.read(0, MiB)
        assert rsm.started.acquire(timeout=10)  # the first read's
        assert rsm.started.acquire(timeout=10)  # the read-ahead's, now blocked in the store
        done: list[RemoteFetchResult] = []
        fetcher = threading.Thread(target=lambda: done.append(t.read(first.upper_bound_offset, MiB)))
        fetcher.start()
        fetcher.join(0.2)
        assert fetcher.is_alive() and not done  # waiting for the window in flight
        assert rsm.calls == 2  # the waiting fetch made no read of its own
        rsm.gate.set()
        fetcher.join(10)
        assert done and done[0].read_ahead_hit is True
        assert done[0].records == t.local(first.upper_bound_offset, MiB)
    assert len(set(rsm.segment_fetches)) == len(rsm.segment_fetches)  # no window read twice
    t.cache.close()


class FailingRSM(DictRSM):
    """Fails the next ``fail`` segment fetches with a retriable error (the store hiccups)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        if self.fail:
            self.fail -= 1
            raise RetriableRemoteStorageError("store hiccup")
        return super().fetch_log_segment(metadata, start_position, end_position)


def test_a_failed_read_ahead_is_dropped_and_the_fetch_reads_the_store(open_log, tmp_path):
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    rsm = FailingRSM()
    t, pool = make(plog, tmp_path, rsm)
    first = t.read(0, MiB)
    rsm.fail = 1
    pool.run()  # the read-ahead fails: nothing cached, nothing queued after it
    ahead = t.reader.read_ahead
    assert ahead is not None and ahead.failures == 1 and len(ahead) == 0 and ahead.bytes == 0
    before = len(rsm.segment_fetches)
    second = t.read(first.upper_bound_offset, MiB)
    assert second.read_ahead_hit is False and len(rsm.segment_fetches) == before + 1
    assert second.records == t.local(first.upper_bound_offset, MiB)
    t.cache.close()


def test_a_store_error_during_a_claimed_read_ahead_falls_back_to_the_fetchs_own_read(open_log, tmp_path):
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    rsm = FailingRSM()
    t, _ = make(plog, tmp_path, rsm)
    first = t.read(0, MiB)
    rsm.fail = 1  # the claimed window's read fails; the fetch's own read succeeds
    second = t.read(first.upper_bound_offset, MiB)
    assert second.read_ahead_hit is False
    assert second.records == t.local(first.upper_bound_offset, MiB)
    t.cache.close()


def test_a_deleted_segment_drops_its_windows(open_log, tmp_path):
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path)
    t.read(0, MiB)
    pool.run()
    ahead = t.reader.read_ahead
    assert ahead is not None and len(ahead) == 2 and ahead.bytes == 2 * MiB
    t.reader.forget_segment(t.mds[0].remote_log_segment_id.id)
    assert len(ahead) == 0 and ahead.bytes == 0
    t.cache.close()


def test_memory_stays_within_the_budget(open_log, tmp_path):
    """Two consumers far apart, a budget of three 1 MiB windows: never more than that is held or in
    flight, windows in use are not evicted for the other consumer's (it goes without), answers stay right."""
    plog = log_of(open_log, [64 * KiB] * 150, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path, total=3 * MiB)
    ahead = t.reader.read_ahead
    assert ahead is not None
    offsets = [0, t.mds[1].start_offset]
    peak = 0
    for _ in range(6):
        for i, offset in enumerate(offsets):
            result, _ = read(t, offset, MiB)
            offsets[i] = result.upper_bound_offset
            peak = max(peak, ahead.bytes)
            pool.run()
            peak = max(peak, ahead.bytes)
    assert peak <= 3 * MiB
    assert ahead.hits > 0 and ahead.skipped > 0 and ahead.evictions == 0
    t.cache.close()


def test_idle_windows_are_evicted_for_an_active_reader(open_log, tmp_path):
    """A consumer that stopped leaves its windows behind; once they are idle they make room."""
    plog = log_of(open_log, [64 * KiB] * 150, segment_bytes=3 * MiB)
    now = [1000.0]
    t, pool = make(plog, tmp_path, total=2 * MiB)
    ahead = t.reader.read_ahead
    assert ahead is not None
    ahead._clock = lambda: now[0]  # noqa: SLF001 - a test clock
    read(t, 0, MiB)
    pool.run()
    assert ahead.bytes == 2 * MiB  # the stopped consumer's two windows fill the budget
    other, _ = read(t, t.mds[2].start_offset, MiB)
    assert pool.queued == [] and ahead.skipped == 1  # still fresh: not evicted
    now[0] += PREFETCH_IDLE_EVICT_S + 0.1
    after, _ = read(t, other.upper_bound_offset, MiB)
    assert ahead.evictions >= 1 and pool.run() >= 1
    result, reads = read(t, after.upper_bound_offset, MiB)
    assert result.read_ahead_hit is True and reads == 0
    t.cache.close()


def test_windows_are_clipped_to_the_budget(open_log, tmp_path):
    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    t, pool = make(plog, tmp_path, total=MiB, windows=2)
    rsm = t.reader.rsm
    assert isinstance(rsm, DictRSM)
    first, _ = read(t, 0, MiB)
    pool.run()
    assert all(end - start + 1 <= MiB // 2 for _, start, end in rsm.segment_fetches[1:] if end is not None)
    result, reads = read(t, first.upper_bound_offset, MiB)  # a shorter answer, from the window
    assert reads == 0 and 0 < len(result.records) <= MiB // 2
    t.cache.close()


def test_read_ahead_through_local_tiered_storage_events(open_log, tmp_path):
    """Real files and a real pool: FETCH_SEGMENT events per fetch, as the benchmark counts them."""
    from strata.tiered.storage.local import EventType, LocalTieredStorage

    plog = log_of(open_log, [64 * KiB] * 100, segment_bytes=3 * MiB)
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "bucket"), "events.log.enable": "false"})
    with ThreadPoolExecutor(2) as pool:
        t, _ = make(plog, tmp_path, rsm, submit=pool.submit)
        offset, hits, fetches = 0, [], 0
        while offset <= t.mds[-1].end_offset:
            result = t.read(offset, MiB)
            assert result.records == t.local(offset, MiB), offset
            hits.append(result.read_ahead_hit)
            offset, fetches = result.upper_bound_offset, fetches + 1
    # a window the pool had not started yet is read by the fetch itself (a miss): rare, not impossible
    assert hits[0] is False and hits.count(True) >= (fetches - 1) // 2
    events = rsm.events(EventType.FETCH_SEGMENT)
    assert len(events) == fetches  # one store read per fetch, the first one's own, the rest read ahead
    t.cache.close()
    rsm.close()


def test_read_ahead_is_off_without_a_pool_or_budget(open_log, tmp_path):
    plog = log_of(open_log, [64 * KiB] * 20, segment_bytes=3 * MiB)
    rsm, rlmm = DictRSM(), DictRLMM()
    tier(plog, rsm, rlmm)
    cache = RemoteIndexCache(rsm, tmp_path / "cache-dir", MiB)
    assert RemoteLogReader(rsm, rlmm, cache).read_ahead is None
    assert RemoteLogReader(rsm, rlmm, cache, prefetch_total_bytes=0, prefetch_submit=lambda fn: None).read_ahead is None
    reader = RemoteLogReader(rsm, rlmm, cache)
    assert reader.read(TP, [(0, 0)], 0, MiB, True, False).read_ahead_hit is None
    cache.close()


def test_config_keys_and_metric_names():
    config = BrokerConfig.from_props({})
    assert config.remote.reader_prefetch_total_size_bytes == 128 * MiB
    assert config.remote.reader_prefetch_windows == 2
    assert config.remote.reader_prefetch_window_bytes == 8 * MiB
    off = BrokerConfig.from_props({"remote.log.reader.prefetch.total.size.bytes": "0"})
    assert off.remote.reader_prefetch_total_size_bytes == 0
    registry = Registry()
    metrics = remote_storage_metrics(registry)
    metrics.RemoteLogReaderPrefetchHitsPerSec.mark()
    metrics.RemoteLogReaderPrefetchMissesPerSec.mark(2)
    metrics.RemoteLogReaderPrefetchBytes.set_function(lambda: 5)
    text = registry.render()
    prefix = "kafka_log_remote_RemoteLogManager_RemoteLogReaderPrefetch"
    assert f"{prefix}HitsPerSec_total 1" in text
    assert f"{prefix}MissesPerSec_total 2" in text
    assert f"{prefix}Bytes 5" in text


def test_store_error_is_set_by_a_failed_read_and_cleared_only_by_a_read_started_after_it(open_log, tmp_path):
    """What an expired remote fetch answers: KAFKA_STORAGE_ERROR while ``store_error`` is set."""
    plog = log_of(open_log, [64 * KiB] * 40, segment_bytes=3 * MiB)
    rsm = FailingRSM()
    t, _ = make(plog, tmp_path, rsm, total=0)  # no read-ahead: every read goes to the store
    reader = t.reader
    assert reader.store_error is None
    rsm.fail = 1
    with pytest.raises(RetriableRemoteStorageError):
        t.read(0, MiB)
    assert reader.store_error is not None and "store hiccup" in reader.store_error
    reader._store_answered(reader._store_error_at - 1.0)  # a read that began before the failure, done late
    assert reader.store_error is not None
    with pytest.raises(OffsetOutOfRangeError):  # about the offsets asked for: says nothing of the store
        t.read(10**9, MiB)
    assert reader.store_error is not None
    assert t.read(0, MiB).records  # a read begun after the failure succeeds: the store works again
    assert reader.store_error is None
    t.cache.close()
