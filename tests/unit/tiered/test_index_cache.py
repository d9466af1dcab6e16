"""RemoteIndexCache, ported from Kafka's RemoteIndexCacheTest onto real uploaded segments."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pytest
from tests.unit.tiered.test_remote_reader import (
    DictRLMM,
    DictRSM,
    abort,
    plain_batch,
    tier,
    txn_batch,
    write_log,
)

from strata.config import LogConfig
from strata.log.errors import CorruptIndexError
from strata.log.partition_log import PartitionLog
from strata.log.segment import LogSegment
from strata.tiered.api import IndexType, RemoteLogSegmentMetadata, RetriableRemoteStorageError, uuid_to_str
from strata.tiered.index_cache import DIR_NAME, RemoteIndexCache, RemoteIndexCacheClosedError

T0 = 1_700_000_000_000 - 1_000_000


@dataclass
class Uploaded:
    plog: PartitionLog
    rsm: DictRSM
    mds: list[RemoteLogSegmentMetadata]
    cache_root: Path

    def local(self, md: RemoteLogSegmentMetadata) -> LogSegment:
        return next(s for s in self.plog.segments if s.base_offset == md.start_offset)

    def cache(self, max_bytes: int = 1024 * 1024) -> RemoteIndexCache:
        return RemoteIndexCache(self.rsm, self.cache_root, max_bytes)

    def weight(self, md: RemoteLogSegmentMetadata) -> int:
        segment = self.local(md)
        txn = segment.txn_index.path.stat().st_size if segment.txn_index.path.exists() else 0
        return segment.offset_index.path.stat().st_size + segment.time_index.path.stat().st_size + txn


@pytest.fixture
def up(open_log, tmp_path) -> Uploaded:
    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog)
    rsm = DictRSM()
    return Uploaded(plog, rsm, tier(plog, rsm, DictRLMM()), tmp_path / "logdir")


@pytest.fixture
def txn_up(open_log, tmp_path) -> Uploaded:
    """Every segment holds one aborted transaction whose marker lands in it."""
    plog = open_log(LogConfig(segment_bytes=100_000))
    for i in range(6):
        plog.append_as_leader(plain_batch(T0 + 3 * i), leader_epoch=0)
        plog.append_as_leader(txn_batch(100 + i, 0, T0 + 3 * i + 1), leader_epoch=0)
        abort(plog, 100 + i, T0 + 3 * i + 2)
        plog.roll()
    rsm = DictRSM()
    return Uploaded(plog, rsm, tier(plog, rsm, DictRLMM()), tmp_path / "logdir")


@pytest.fixture
def cache(up) -> Iterator[RemoteIndexCache]:
    c = up.cache()
    yield c
    c.close()


def cache_files(up: Uploaded) -> list[str]:
    return sorted(p.name for p in (up.cache_root / DIR_NAME).iterdir())


def names(md: RemoteLogSegmentMetadata) -> list[str]:
    stem = f"{md.start_offset}_{uuid_to_str(md.remote_log_segment_id.id)}"
    return sorted(stem + s for s in (".index", ".timeindex", ".txnindex"))


# -- loading and lookups -----------------------------------------------------------------------------


def test_index_file_name_and_location_on_disk(up, cache):
    md = up.mds[1]
    cache.lookup_offset(md, md.start_offset)
    assert md.start_offset > 0  # not zero-padded
    assert cache_files(up) == names(md)
    for name in names(md)[:2]:  # offset and time index: the uploaded bytes, verbatim
        kind = IndexType.OFFSET if name.endswith(".index") else IndexType.TIMESTAMP
        assert (up.cache_root / DIR_NAME / name).read_bytes() == up.rsm.objects[(md.remote_log_segment_id.id,
                                                                                  kind.name)]


def test_indexes_are_fetched_once_then_served_from_the_cache(up, cache):
    md = up.mds[2]
    cache.lookup_offset(md, md.start_offset)
    assert up.rsm.index_fetch_count(md, IndexType.OFFSET) == 1
    assert up.rsm.index_fetch_count(md, IndexType.TIMESTAMP) == 1
    assert (cache.miss_count, cache.hit_count, cache.load_count) == (1, 0, 1)
    for offset in range(md.start_offset, md.end_offset + 1):
        cache.lookup_offset(md, offset)
        cache.lookup_timestamp(md, T0, offset)
        cache.collect_aborted_txns(md, offset, offset + 1)
    assert up.rsm.index_fetch_count(md) == 2  # the txn index is flagged empty (KIP-1058): never asked for
    assert cache.miss_count == 1 and cache.hit_count == 3 * (md.end_offset - md.start_offset + 1)
    assert cache.size_bytes == up.weight(md) and len(cache) == 1 and md.remote_log_segment_id.id in cache


def test_lookups_match_the_local_indexes(up, cache):
    for md in up.mds:
        segment = up.local(md)
        for offset in range(md.start_offset - 1, md.end_offset + 2):
            assert cache.lookup_offset(md, offset).position == segment.offset_index.lookup(offset).position
        for ts in range(T0 - 5, T0 + 400, 3):
            for start in (0, md.start_offset, md.end_offset):
                expected = segment.offset_index.lookup(max(start, segment.time_index.lookup(ts).offset)).position
                assert cache.lookup_timestamp(md, ts, start) == expected


def test_lookup_also_gives_the_next_entrys_position(up, cache):
    """Entries are keyed by a batch's last offset, so the lookup for a batch's base offset finds the
    previous batch; the next entry bounds where the wanted batch starts (the reader sizes its one
    ranged read with it). Checked against the local segment's index and batches."""
    checked_boundaries = 0
    for md in up.mds:
        segment = up.local(md)
        index = segment.offset_index
        entries = [index.entry(i) for i in range(index.entries)]
        batches = list(segment.log.iter_headers())
        for offset in range(md.start_offset, md.end_offset + 1):
            found = cache.lookup_offset(md, offset)
            later = [e for e in entries if e.offset > offset]
            assert found.position == index.lookup(offset).position
            assert found.next_position == (later[0].position if later else None)
            holder = next(pos for pos, h in batches if h.last_offset >= offset)
            assert found.position <= holder
            if found.next_position is not None:
                assert holder <= found.next_position
                if any(h.base_offset == offset for _, h in batches) and holder > found.position:
                    checked_boundaries += 1  # a batch boundary: the lookup found an earlier batch
    assert checked_boundaries > 0


def test_position_below_the_first_entry_is_zero(up, cache):
    md = up.mds[3]
    assert up.local(md).offset_index.entries > 0
    assert cache.lookup_offset(md, md.start_offset).position == 0
    assert cache.lookup_offset(md, 0).position == 0


def test_missing_transaction_index_becomes_an_empty_file(up, cache):
    md = up.mds[0]
    md = RemoteLogSegmentMetadata(**{f: getattr(md, f) for f in md.__slots__ if f != "txn_idx_empty"})  # unknown
    assert cache.collect_aborted_txns(md, 0, 100) == ([], False)
    assert up.rsm.index_fetch_count(md, IndexType.TRANSACTION) == 1  # asked, got RemoteResourceNotFoundError
    txn = up.cache_root / DIR_NAME / names(md)[2]
    assert txn.exists() and txn.stat().st_size == 0


def test_collect_aborted_txns_matches_the_local_index(txn_up):
    cache = txn_up.cache()
    for md in txn_up.mds:
        local = txn_up.local(md).txn_index
        assert not md.txn_idx_empty and local.all_aborted_txns()
        for start in range(md.start_offset, md.end_offset + 1):
            for bound in range(start + 1, md.end_offset + 3):
                assert cache.collect_aborted_txns(md, start, bound) == local.collect_aborted_txns(start, bound)
    cache.close()


# -- eviction, removal, resize ----------------------------------------------------------------------


def test_size_bound_evicts_least_recently_used_and_deletes_files(up):
    a, b, c = up.mds[:3]
    cache = up.cache(up.weight(a) + up.weight(b) + up.weight(c) - 1)
    cache.lookup_offset(a, 0)
    cache.lookup_offset(b, b.start_offset)
    cache.lookup_offset(a, 1)  # a is now the most recently used
    cache.lookup_offset(c, c.start_offset)  # over budget: b goes
    assert cache.cached_ids() == [a.remote_log_segment_id.id, c.remote_log_segment_id.id]
    assert cache.eviction_count == 1 and cache.size_bytes == up.weight(a) + up.weight(c)
    assert cache_files(up) == sorted(names(a) + names(c))  # b's files renamed .deleted, then removed
    cache.lookup_offset(b, b.start_offset)  # a miss again: refetched
    assert up.rsm.index_fetch_count(b, IndexType.OFFSET) == 2
    cache.close()


def test_an_entry_larger_than_the_budget_is_served_then_dropped(up):
    md = up.mds[0]
    cache = up.cache(1)
    assert cache.lookup_offset(md, 5).position == up.local(md).offset_index.lookup(5).position
    assert len(cache) == 0 and cache_files(up) == []
    cache.close()


def test_remove_deletes_entries_and_files(up, cache):
    for md in up.mds[:4]:
        cache.lookup_offset(md, md.start_offset)
    cache.remove(up.mds[0].remote_log_segment_id.id)
    assert up.mds[0].remote_log_segment_id.id not in cache and len(cache) == 3
    cache.remove_all([up.mds[1].remote_log_segment_id.id, up.mds[2].remote_log_segment_id.id])
    cache.remove(up.mds[9].remote_log_segment_id.id)  # never cached: nothing happens
    assert cache.cached_ids() == [up.mds[3].remote_log_segment_id.id]
    assert cache_files(up) == names(up.mds[3])
    assert cache.size_bytes == up.weight(up.mds[3])


def test_resize_evicts_to_the_new_budget(up, cache):
    for md in up.mds[:5]:
        cache.lookup_offset(md, md.start_offset)
    keep = up.mds[3:5]
    cache.resize(sum(up.weight(md) for md in keep))
    assert cache.cached_ids() == [md.remote_log_segment_id.id for md in keep]
    assert cache_files(up) == sorted(names(keep[0]) + names(keep[1]))
    cache.resize(10 * 1024 * 1024)
    cache.lookup_offset(up.mds[0], 0)
    assert len(cache) == 3 and cache.max_size_bytes == 10 * 1024 * 1024
    cache.resize(0)
    assert len(cache) == 0 and cache_files(up) == [] and cache.size_bytes == 0


def test_an_entry_in_use_keeps_its_files_until_released(txn_up):
    """Kafka's testConcurrentRemoveReadForCache, made deterministic with the reference API."""
    cache = txn_up.cache()
    md = txn_up.mds[0]
    expected = txn_up.local(md).txn_index.collect_aborted_txns(0, 100)
    entry = cache._acquire(md)
    cache.remove(md.remote_log_segment_id.id)
    assert md.remote_log_segment_id.id not in cache
    assert all(p.exists() for p in entry.paths)  # still readable by the holder
    assert entry.txn_index.collect_aborted_txns(0, 100) == expected
    # a lookup meanwhile revives the entry instead of refetching over files about to go
    assert cache.collect_aborted_txns(md, 0, 100) == expected
    assert txn_up.rsm.index_fetch_count(md, IndexType.TRANSACTION) == 1
    cache.remove(md.remote_log_segment_id.id)
    cache._release(entry)
    assert not any(p.exists() for p in entry.paths)
    assert cache_files(txn_up) == []
    cache.close()


# -- close and restart ---------------------------------------------------------------------------


def test_use_after_close_fails_and_close_is_idempotent(up):
    cache = up.cache()
    md = up.mds[0]
    cache.lookup_offset(md, 0)
    cache.close()
    cache.close()
    assert cache.closed
    for call in (lambda: cache.lookup_offset(md, 0), lambda: cache.lookup_timestamp(md, T0, 0),
                 lambda: cache.collect_aborted_txns(md, 0, 1), lambda: cache.resize(10)):
        with pytest.raises(RemoteIndexCacheClosedError):
            call()
    cache.remove(md.remote_log_segment_id.id)  # shutdown racing a deletion is not an error
    assert cache_files(up) == names(md)  # close keeps the files


def test_reload_after_close(up):
    cache = up.cache()
    for md in up.mds[:3]:
        cache.lookup_offset(md, md.start_offset)
    cache.close()
    fetches = len(up.rsm.index_fetches)
    reopened = up.cache()
    assert sorted(reopened.cached_ids()) == sorted(md.remote_log_segment_id.id for md in up.mds[:3])
    assert reopened.size_bytes == sum(up.weight(md) for md in up.mds[:3])
    for md in up.mds[:3]:
        segment = up.local(md)
        for offset in range(md.start_offset, md.end_offset + 1):
            assert reopened.lookup_offset(md, offset).position == segment.offset_index.lookup(offset).position
    assert len(up.rsm.index_fetches) == fetches and reopened.miss_count == 0
    reopened.close()


def test_startup_deletes_leftovers_and_incomplete_triples(up):
    cache = up.cache()
    for md in up.mds[:3]:
        cache.lookup_offset(md, md.start_offset)
    cache.close()
    directory = up.cache_root / DIR_NAME
    (directory / "7_abc.index.deleted").write_bytes(b"x")
    (directory / "7_abc.index.tmp").write_bytes(b"x")
    (directory / "README").write_text("not ours")
    (directory / names(up.mds[1])[1]).unlink()  # the time index of the second segment
    reopened = up.cache()
    assert reopened.cached_ids() == [up.mds[0].remote_log_segment_id.id, up.mds[2].remote_log_segment_id.id]
    assert cache_files(up) == sorted(["README", *names(up.mds[0]), *names(up.mds[2])])
    reopened.close()


def test_startup_evicts_down_to_the_budget(up):
    cache = up.cache()
    for md in up.mds[:4]:
        cache.lookup_offset(md, md.start_offset)
    cache.close()
    reopened = up.cache(up.weight(up.mds[0]))
    assert len(reopened) <= 1 and reopened.size_bytes <= up.weight(up.mds[0])
    assert len(cache_files(up)) == 3 * len(reopened)
    reopened.close()


# -- corruption --------------------------------------------------------------------------------------


def test_corrupt_file_found_at_startup_is_refetched(up):
    cache = up.cache()
    md = up.mds[1]
    cache.lookup_offset(md, md.start_offset)
    cache.close()
    with open(up.cache_root / DIR_NAME / names(md)[0], "ab") as f:  # .index: no longer whole entries
        f.write(b"\x01\x02\x03")
    reopened = up.cache()
    assert len(reopened) == 0 and cache_files(up) == []
    expected = up.local(md).offset_index.lookup(md.end_offset).position
    assert reopened.lookup_offset(md, md.end_offset).position == expected
    assert up.rsm.index_fetch_count(md, IndexType.OFFSET) == 2
    reopened.close()


def test_corrupt_file_on_disk_but_not_in_cache_is_refetched(up, cache):
    md = up.mds[2]
    directory = up.cache_root / DIR_NAME
    (directory / names(md)[0]).write_bytes(b"\x00" * 5)  # .index
    valid_time_index = up.rsm.objects[(md.remote_log_segment_id.id, IndexType.TIMESTAMP.name)]
    (directory / names(md)[1]).write_bytes(valid_time_index)  # .timeindex: valid, reused
    assert cache.lookup_offset(md, md.end_offset).position == up.local(md).offset_index.lookup(md.end_offset).position
    assert up.rsm.index_fetch_count(md, IndexType.OFFSET) == 1
    assert up.rsm.index_fetch_count(md, IndexType.TIMESTAMP) == 0
    assert (directory / names(md)[0]).read_bytes() == up.rsm.objects[(md.remote_log_segment_id.id,
                                                                      IndexType.OFFSET.name)]


def test_rsm_returning_a_corrupt_index_raises_and_keeps_nothing(up, cache):
    md = up.mds[0]
    key = (md.remote_log_segment_id.id, IndexType.OFFSET.name)
    good = up.rsm.objects[key]
    up.rsm.objects[key] = good + b"\x00\x00\x00"
    with pytest.raises(CorruptIndexError):
        cache.lookup_offset(md, 0)
    assert len(cache) == 0 and not any(n.endswith((".index", ".tmp")) for n in cache_files(up))
    up.rsm.objects[key] = good
    assert cache.lookup_offset(md, 0).position == 0  # the next lookup tries again


# -- concurrency -------------------------------------------------------------------------------------


class SlowRSM(DictRSM):
    """Index fetches take a while, so concurrent misses overlap; can be told to fail."""

    def __init__(self, inner: DictRSM, delay: float = 0.05) -> None:
        super().__init__()
        self.objects = inner.objects
        self.delay = delay
        self.fail: Exception | None = None

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        time.sleep(self.delay)
        if self.fail is not None:
            with self.lock:
                self.index_fetches.append((metadata.remote_log_segment_id.id, index_type))
            raise self.fail
        return super().fetch_index(metadata, index_type)


def run_threads(n: int, target) -> list[BaseException]:  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_concurrent_lookups_load_each_segment_once(up):
    rsm = SlowRSM(up.rsm)
    cache = RemoteIndexCache(rsm, up.cache_root, 1024 * 1024)
    md = up.mds[4]
    expected = up.local(md).offset_index.lookup(md.end_offset).position
    results: list[int] = []
    assert run_threads(16, lambda i: results.append(cache.lookup_offset(md, md.end_offset).position)) == []
    assert results == [expected] * 16
    assert rsm.index_fetch_count(md, IndexType.OFFSET) == 1 and rsm.index_fetch_count(md) == 2
    assert (cache.miss_count, cache.load_count, cache.hit_count) == (1, 1, 15)  # waiters then hit
    cache.close()


def test_a_failed_load_fails_every_waiter_and_is_retried(up):
    rsm = SlowRSM(up.rsm)
    rsm.fail = RetriableRemoteStorageError("store unreachable")
    cache = RemoteIndexCache(rsm, up.cache_root, 1024 * 1024)
    md = up.mds[0]
    errors = run_threads(8, lambda i: cache.lookup_offset(md, 0))
    assert len(errors) == 8 and all(isinstance(e, RetriableRemoteStorageError) for e in errors)
    assert rsm.index_fetch_count(md) == 1 and len(cache) == 0
    assert not any(n.endswith(".tmp") for n in cache_files(up))
    rsm.fail = None
    assert cache.lookup_offset(md, 0).position == 0
    cache.close()


def test_concurrent_reads_with_constant_eviction_always_see_their_files(txn_up):
    """Kafka's testConcurrentCacheDeletedFileExists: a budget of about one entry, so every lookup
    evicts; a transaction index deleted under a reader would silently answer "no aborted txns"."""
    rsm = SlowRSM(txn_up.rsm, delay=0.001)
    mds = txn_up.mds
    cache = RemoteIndexCache(rsm, txn_up.cache_root, txn_up.weight(mds[0]))
    expected = {md.remote_log_segment_id.id: txn_up.local(md).txn_index.collect_aborted_txns(0, 10_000)
                for md in mds}
    positions = {md.remote_log_segment_id.id: txn_up.local(md).offset_index.lookup(md.end_offset).position
                 for md in mds}

    def work(i: int) -> None:
        rng = random.Random(i)
        for _ in range(40):
            md = rng.choice(mds)
            key = md.remote_log_segment_id.id
            assert cache.collect_aborted_txns(md, 0, 10_000) == expected[key]
            assert cache.lookup_offset(md, md.end_offset).position == positions[key]
            if rng.random() < 0.1:
                cache.remove(key)

    assert run_threads(8, work) == []
    assert cache.eviction_count > 0
    assert sorted(cache_files(txn_up)) == sorted(n for k in cache.cached_ids() for md in mds
                                                 if md.remote_log_segment_id.id == k for n in names(md))
    cache.close()
