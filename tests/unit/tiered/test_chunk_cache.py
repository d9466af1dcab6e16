"""The remote chunk cache (``strata.tiered.chunk_cache``): ranges answered from cached chunks are the store's
bytes exactly, a cached chunk is never read from the store again, the bounds (bytes, retention) hold, a
failed load is not cached, concurrent readers load a chunk once, and bad configs are refused by name.

The store here is ``DictRSM`` (a dict that records every ranged read); the broker-level proofs, with the
real local and S3 stores and a real consumer, are in ``tests/tiered/test_chunk_cache_broker.py``.
"""

from __future__ import annotations

import io
import os
import threading
import uuid
from pathlib import Path
from typing import BinaryIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.tiered.test_read_ahead import log_of
from tests.unit.tiered.test_remote_reader import TP, DictRLMM, DictRSM, Tiered, tier

from strata.tiered.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState, uuid_to_str
from strata.tiered.chunk_cache import (
    CachedSegmentReads,
    ChunkCache,
    DiskChunkCache,
    MemoryChunkCache,
    chunk_cache_config,
)
from strata.tiered.index_cache import RemoteIndexCache
from strata.tiered.reader import RemoteLogReader
from strata.tiered.segment_bytes import fetch_remote_segment_bytes

CHUNK = 1000


def segment(rsm: DictRSM, size: int, seed: int = 1) -> tuple[RemoteLogSegmentMetadata, bytes]:
    data = bytes((i * 7 + seed) % 251 for i in range(size))
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TP), 0, 9, 0, 0, 0, size, {0: 0},
                                  RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    rsm.objects[(md.remote_log_segment_id.id, "log")] = data
    return md, data


def read(reads: CachedSegmentReads, md: RemoteLogSegmentMetadata, start: int, end: int | None) -> bytes:
    stream = reads.fetch_log_segment(md, start, end)
    try:
        return stream.read()
    finally:
        stream.close()


@pytest.fixture(params=["memory", "disk"])
def cache(request: pytest.FixtureRequest, tmp_path: Path) -> ChunkCache:
    if request.param == "memory":
        return MemoryChunkCache(CHUNK, 10 * CHUNK, -1)
    return DiskChunkCache(tmp_path / "cache", CHUNK, 10 * CHUNK, -1)


@settings(max_examples=60, deadline=None)
@given(ranges=st.lists(st.tuples(st.integers(0, 5200), st.one_of(st.none(), st.integers(0, 6000))),
                       min_size=1, max_size=8))
def test_any_range_is_the_stores_bytes_and_each_chunk_is_loaded_once(ranges: list[tuple[int, int | None]]) -> None:
    rsm = DictRSM()
    md, data = segment(rsm, 4321)
    reads = CachedSegmentReads(rsm, MemoryChunkCache(CHUNK, -1, -1))
    for start, end in ranges:
        if end is not None and end < start:
            start, end = end, start
        assert read(reads, md, start, end) == data[start:None if end is None else end + 1]
    loaded = [(s, e) for _, s, e in rsm.segment_fetches]
    chunks = [n for s, e in loaded for n in range(s // CHUNK, (e or 4320) // CHUNK + 1)]
    assert len(chunks) == len(set(chunks))  # no chunk read from the store twice
    assert all(s % CHUNK == 0 for s, _ in loaded)  # loads are chunk-aligned


def test_a_cached_range_is_served_without_the_store_as_a_read_only_view(cache: ChunkCache) -> None:
    rsm = DictRSM()
    md, data = segment(rsm, 3500)
    reads = CachedSegmentReads(rsm, cache)
    assert read(reads, md, 100, 2499) == data[100:2500]
    assert [(s, e) for _, s, e in rsm.segment_fetches] == [(0, 2999)]  # chunks 0-2, one ranged read
    assert read(reads, md, 0, 2999) == data[:3000]
    assert read(reads, md, 2999, None) == data[2999:]  # chunk 3 (short, the segment's end) loaded alone
    assert [(s, e) for _, s, e in rsm.segment_fetches] == [(0, 2999), (3000, 3499)]
    stream = reads.fetch_log_segment(md, 1200, 1800)
    view = stream.read_view(601)  # type: ignore[attr-defined]
    assert bytes(view) == data[1200:1801] and view.readonly
    assert cache.hits >= 5 and cache.misses == 4


def test_the_cache_holds_at_most_its_size_least_recently_used_out_first(cache: ChunkCache) -> None:
    rsm = DictRSM()
    md, data = segment(rsm, 30 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    for n in range(12):  # 12 chunks into a cache of 10
        assert read(reads, md, n * CHUNK, n * CHUNK + 10) == data[n * CHUNK:n * CHUNK + 11]
    assert cache.bytes == 10 * CHUNK and cache.evictions == 2
    before = len(rsm.segment_fetches)
    read(reads, md, 11 * CHUNK, 11 * CHUNK + 5)  # still cached
    assert len(rsm.segment_fetches) == before
    read(reads, md, 0, 5)  # evicted first: read again
    assert len(rsm.segment_fetches) == before + 1
    if isinstance(cache, DiskChunkCache):
        files = [p for p in cache.directory.iterdir() if p.is_file()]
        assert len(files) == 10 and sum(p.stat().st_size for p in files) == 10 * CHUNK


def test_a_chunk_untouched_for_the_retention_is_dropped(tmp_path: Path) -> None:
    now = [0.0]
    cache = DiskChunkCache(tmp_path / "c", CHUNK, -1, 1000, clock=lambda: now[0])
    rsm = DictRSM()
    md, data = segment(rsm, 2 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    read(reads, md, 0, 10)
    now[0] = 0.9
    read(reads, md, 0, 10)  # a hit renews it
    now[0] = 1.8
    read(reads, md, 0, 10)
    assert len(rsm.segment_fetches) == 1
    now[0] = 3.0
    assert read(reads, md, 0, 10) == data[:11]
    assert len(rsm.segment_fetches) == 2 and cache.evictions == 0  # expired on access: a miss, not an eviction


def test_forget_drops_one_segments_chunks_only(cache: ChunkCache) -> None:
    rsm = DictRSM()
    md1, _ = segment(rsm, 2 * CHUNK, seed=1)
    md2, data2 = segment(rsm, 2 * CHUNK, seed=2)
    reads = CachedSegmentReads(rsm, cache)
    read(reads, md1, 0, None)
    read(reads, md2, 0, None)
    reads.forget(md1.remote_log_segment_id.id)
    assert cache.bytes == 2 * CHUNK
    assert read(reads, md2, 0, None) == data2
    assert len(rsm.segment_fetches) == 2
    read(reads, md1, 0, None)
    assert len(rsm.segment_fetches) == 3


class FlakyRSM(DictRSM):
    """Fails the first ``failures`` segment reads, then serves."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        if self.failures:
            self.failures -= 1
            raise OSError("store unreachable")
        return super().fetch_log_segment(metadata, start_position, end_position)


def test_a_failed_load_is_not_cached(cache: ChunkCache) -> None:
    rsm = FlakyRSM(failures=1)
    md, data = segment(rsm, 2 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    with pytest.raises(OSError, match="unreachable"):
        read(reads, md, 0, 10)
    assert cache.bytes == 0
    assert read(reads, md, 0, 10) == data[:11]


class ShortRSM(DictRSM):
    """An object shorter than its metadata says (truncated in the store)."""

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        data = self.objects[(metadata.remote_log_segment_id.id, "log")][:1500]
        self.segment_fetches.append((metadata.remote_log_segment_id.id, start_position, end_position))
        return io.BytesIO(data[start_position:None if end_position is None else end_position + 1])


def test_a_short_chunk_from_a_truncated_object_is_served_short_and_not_cached(cache: ChunkCache) -> None:
    rsm = ShortRSM()
    md, data = segment(rsm, 2 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    assert read(reads, md, 0, None) == data[:1500]
    assert cache.bytes == CHUNK  # chunk 0 whole, chunk 1 short: not kept
    assert read(reads, md, 1000, None) == data[1000:1500]
    assert len(rsm.segment_fetches) == 2


class GatedRSM(DictRSM):
    """Holds every segment read until the gate opens, counting the readers waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        self.entered.release()
        assert self.gate.wait(10)
        return super().fetch_log_segment(metadata, start_position, end_position)


def test_concurrent_readers_of_one_chunk_load_it_once(cache: ChunkCache) -> None:
    rsm = GatedRSM()
    md, data = segment(rsm, 3 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(read(reads, md, 500, 2500))) for _ in range(4)]
    for t in threads:
        t.start()
    assert rsm.entered.acquire(timeout=10)
    rsm.gate.set()
    for t in threads:
        t.join(10)
    assert results == [data[500:2501]] * 4
    assert len(rsm.segment_fetches) == 1


def test_the_disk_cache_starts_empty_and_survives_a_write_failure(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    directory.mkdir()
    (directory / "left-over").write_bytes(b"x" * 10)
    cache = DiskChunkCache(directory, CHUNK, -1, -1)
    assert [p.name for p in directory.iterdir()] == ["tmp"]
    rsm = DictRSM()
    md, data = segment(rsm, 2 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    (directory / "tmp").rmdir()  # writes now fail: reads still served, from the store
    assert read(reads, md, 0, None) == data
    assert read(reads, md, 0, None) == data
    assert cache.bytes == 0 and len(rsm.segment_fetches) == 2
    cache.close()
    assert not directory.exists()


def test_an_evicted_chunk_still_being_read_keeps_its_bytes(tmp_path: Path) -> None:
    cache = DiskChunkCache(tmp_path / "c", CHUNK, CHUNK, -1)
    rsm = DictRSM()
    md, data = segment(rsm, 2 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    read(reads, md, 0, 10)
    stream = reads.fetch_log_segment(md, 0, 999)  # a hit: a mapping of chunk 0's file
    read(reads, md, 1000, 1010)  # evicts chunk 0: its file is unlinked
    assert not (cache.directory / f"{md.remote_log_segment_id.id}-0").exists()
    assert stream.read() == data[:1000]


@pytest.mark.parametrize(("props", "message"), [
    ({"fetch.chunk.cache.class": "disk"}, "'fetch.chunk.cache.size'"),
    ({"fetch.chunk.cache.class": "lru", "fetch.chunk.cache.size": "-1"}, "'fetch.chunk.cache.class'"),
    ({"fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "100"}, "at least one chunk"),
    ({"fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "-1",
      "fetch.chunk.cache.prefetch.max.size": "1000"}, "remote.log.reader.prefetch"),
    ({"fetch.chunk.cache.class": "memory", "fetch.chunk.cache.size": "-1", "fetch.chunk.cache.path": "/x"},
     "disk cache only"),
    ({"fetch.chunk.cache.size": "1000000000"}, "needs 'fetch.chunk.cache.class'"),
    ({"fetch.chunk.cache.colour": "red"}, "unknown config 'fetch.chunk.cache.colour'"),
    ({"fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "-1", "fetch.chunk.cache.retention.ms": "x"},
     "'fetch.chunk.cache.retention.ms' must be an integer"),
])
def test_bad_configs_are_refused_naming_the_key(tmp_path: Path, props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        chunk_cache_config(props, tmp_path)


def test_configs_with_aivens_names_and_defaults(tmp_path: Path) -> None:
    assert chunk_cache_config({}, tmp_path) is None
    assert chunk_cache_config({"fetch.chunk.cache.class": "none"}, tmp_path) is None
    cfg = chunk_cache_config({"fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache",
                              "fetch.chunk.cache.size": "1073741824"}, tmp_path)
    assert cfg is not None and cfg.kind == "disk" and cfg.path == tmp_path / "remote-chunk-cache"
    assert cfg.chunk_size == 4 * 1024 * 1024 and cfg.retention_ms == 600_000 and cfg.max_bytes == 1 << 30
    cfg = chunk_cache_config({"fetch.chunk.cache.class": "MEMORY", "fetch.chunk.cache.size": "-1",
                              "chunk.size": "65536", "fetch.chunk.cache.retention.ms": "-1"}, tmp_path)
    assert cfg is not None and cfg.kind == "memory" and cfg.chunk_size == 65536 and cfg.retention_ms == -1
    assert isinstance(cfg.build(), MemoryChunkCache)


def test_segment_ids_do_not_collide_in_file_names(tmp_path: Path) -> None:
    cache = DiskChunkCache(tmp_path / "c", CHUNK, -1, -1)
    a, b = uuid.uuid4(), uuid.uuid4()
    cache.put((a, 1), memoryview(b"a" * 10))
    cache.put((b, 1), memoryview(b"b" * 10))
    assert bytes(cache.get((a, 1)) or b"") == b"a" * 10 and bytes(cache.get((b, 1)) or b"") == b"b" * 10


def test_second_access_admission_keeps_only_chunks_read_again(tmp_path: Path) -> None:
    """A one-off scan leaves the cache as it was; a chunk read again within the retention is kept."""
    now = [0.0]
    cache = DiskChunkCache(tmp_path / "c", CHUNK, 3 * CHUNK, 1000, clock=lambda: now[0], admission="second-access")
    rsm = DictRSM()
    md, data = segment(rsm, 10 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    hot = read(reads, md, 0, CHUNK - 1)  # chunk 0, seen once: not kept
    assert cache.bytes == 0 and cache.rejected == 1
    read(reads, md, 0, CHUNK - 1)  # read again: kept
    assert cache.bytes == CHUNK
    assert read(reads, md, 0, None) == data  # a scan of the whole segment: chunks 1-9 seen once, not kept
    assert cache.bytes == CHUNK and cache.evictions == 0
    before = len(rsm.segment_fetches)
    assert read(reads, md, 0, CHUNK - 1) == hot  # the hot chunk survived the scan
    assert len(rsm.segment_fetches) == before
    now[0] = 5.0  # past the retention: chunk 5's first sighting is forgotten
    read(reads, md, 5 * CHUNK, 5 * CHUNK + 1)
    assert (md.remote_log_segment_id.id, 5) not in dict(cache._entries)


def test_admission_config(tmp_path: Path) -> None:
    cfg = chunk_cache_config({"fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "-1",
                              "fetch.chunk.cache.admission": "second-access"}, tmp_path)
    assert cfg is not None and cfg.admission == "second-access"
    with pytest.raises(ValueError, match="'fetch.chunk.cache.admission' must be one of always, second-access"):
        chunk_cache_config({"fetch.chunk.cache.class": "disk", "fetch.chunk.cache.size": "-1",
                            "fetch.chunk.cache.admission": "lfu"}, tmp_path)


def test_a_cache_file_cut_short_by_hand_is_a_miss(tmp_path: Path) -> None:
    """No mapping of cache files, so never a SIGBUS: a file shorter than the chunk it held is a miss, read
    from the store again."""
    cache = DiskChunkCache(tmp_path / "c", CHUNK, -1, -1)
    rsm = DictRSM()
    md, data = segment(rsm, 3 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    read(reads, md, 0, None)
    os.truncate(cache.directory / f"{uuid_to_str(md.remote_log_segment_id.id)}-1", 100)
    assert read(reads, md, 0, None) == data
    assert [(s, e) for _, s, e in rsm.segment_fetches] == [(0, 3 * CHUNK - 1), (CHUNK, 2 * CHUNK - 1)]


def test_a_hit_inside_one_cached_file_is_one_pread_into_a_buffer_of_its_own(tmp_path: Path) -> None:
    """The reader's window for a read inside one chunk on disk comes from one ``pread`` (no zero-filled
    buffer to read into first); a read across chunks is joined into one buffer; a file cut short between
    the lookup and the read ends the stream there."""
    cache = DiskChunkCache(tmp_path / "c", CHUNK, -1, -1)
    rsm = DictRSM()
    md, data = segment(rsm, 3 * CHUNK)
    reads = CachedSegmentReads(rsm, cache)
    read(reads, md, 0, None)
    before = len(rsm.segment_fetches)
    assert bytes(fetch_remote_segment_bytes(reads, md, CHUNK + 5, 2 * CHUNK - 7)) == data[CHUNK + 5:2 * CHUNK - 7]
    assert bytes(fetch_remote_segment_bytes(reads, md, 10, 2 * CHUNK + 10)) == data[10:2 * CHUNK + 10]
    assert len(rsm.segment_fetches) == before  # all hits
    stream = reads.fetch_log_segment(md, CHUNK, 2 * CHUNK - 1)
    os.truncate(cache.directory / f"{uuid_to_str(md.remote_log_segment_id.id)}-1", 100)
    assert bytes(stream.read_view(CHUNK)) == data[CHUNK:CHUNK + 100] and bytes(stream.read_view(CHUNK)) == b""


def test_a_cached_chunk_gone_bad_on_disk_is_read_again_from_the_store(open_log, tmp_path: Path) -> None:
    """Through the remote reader: a flipped byte in a cache file fails batch validation, the reader drops the
    segment's chunks before its fresh retry, and the fetch is answered from the store, not marked corrupt."""
    plog = log_of(open_log, [16 * 1024] * 20, segment_bytes=1 << 20)
    rsm, rlmm = DictRSM(), DictRLMM()
    mds = tier(plog, rsm, rlmm)
    cache = DiskChunkCache(tmp_path / "chunks", 64 * 1024, -1, -1)
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, tmp_path / "idx", 1 << 20), chunk_cache=cache)
    t = Tiered(plog, rsm, rlmm, reader.index_cache, reader, mds)
    assert t.read(0, 1 << 20).records == t.local(0, 1 << 20)
    path = cache.directory / f"{uuid_to_str(mds[0].remote_log_segment_id.id)}-0"
    damaged = bytearray(path.read_bytes())
    damaged[200] ^= 0xFF  # inside the first batch's records: its CRC fails
    path.write_bytes(bytes(damaged))
    before = len(rsm.segment_fetches)
    assert t.read(0, 1 << 20).records == t.local(0, 1 << 20)
    assert len(rsm.segment_fetches) > before and not reader.corrupt_segments()
