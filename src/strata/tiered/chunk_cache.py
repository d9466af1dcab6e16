"""The remote tier's chunk cache: fixed-size chunks of remote segments kept on local disk (or in memory),
so that a consumer re-reading the hot part of the tier is served at local speed instead of the store's.

Aiven's design (``peer-systems.md`` §1.6, its ``DiskChunkCache`` / ``MemoryChunkCache``) and Aiven's config
names, under the RSM prefix (``rsm.config.``) as there:

* ``fetch.chunk.cache.class``: ``none`` (the default: reads go to the store), ``disk``, ``memory``, or
  Aiven's class names (``io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache`` / ``MemoryChunkCache``).
* ``fetch.chunk.cache.size``: bytes the cache may hold (required with a cache; ``-1`` unbounded, as in
  Aiven); at least one chunk.
* ``fetch.chunk.cache.retention.ms``: a chunk untouched this long is dropped (600000; ``-1`` never).
* ``fetch.chunk.cache.path``: the disk cache's directory (default ``remote-chunk-cache`` under the first
  log dir). Its contents are wiped at start: derived data, and a directory left by a crash may hold anything.
* ``chunk.size``: the chunk size, the object format's (4 MiB).
* ``fetch.chunk.cache.admission`` (Strata's): ``always`` (the default, Aiven's behaviour: every chunk read is
  kept) or ``second-access``: a chunk is kept only when it is read again within the retention, so a one-off
  scan (a consumer catching up on the whole tier once, a backfill job) neither evicts the chunks others
  re-read nor pays the cache's writes. The chunks seen once are remembered by key only (a bounded set, as
  many keys as the cache holds chunks, at least 1024).

Any other ``fetch.chunk.cache.*`` key is refused, naming it: Aiven's ``prefetch.max.size`` because
Strata's read-ahead (``remote.log.reader.prefetch.*``) crosses segment boundaries, which Aiven's cannot, and
``get.timeout.ms`` / ``thread.pool.size`` because chunks are loaded on the reader thread that asks for them.

Design:

* **Chunks of the segment's original bytes** (the ``.log`` as the broker wrote it), so the cache serves
  plain (v1) objects and the chunked, compressed, encrypted objects of format v2 alike: a v2 chunk is
  decrypted and decompressed once, when it is loaded. Keyed by ``(remote segment id, chunk number)``: a
  segment's bytes never change under its id, so an entry is never stale; a deleted segment's chunks are
  dropped (:meth:`ChunkCache.forget`) to free the space early.
* **One ranged GET per run of missing chunks**, chunk-aligned (so a miss of a 1 MiB fetch loads its whole
  4 MiB chunk), and the fetch is answered from the bytes just loaded. A chunk another thread is loading is
  waited for, not loaded twice; a thread loads what it claimed before it waits for others' (no deadlock).
  A failed load is not cached (Aiven PR #453): its waiters load again themselves.
* **The disk cache writes a chunk to a temporary file and renames it into place** (Aiven's atomic move);
  a hit is the open file (:class:`FileChunk`), read with one ``pread`` into a new buffer that becomes the
  reader's window (``preadv`` into one buffer when a read spans chunks): one copy from the page cache. (A
  read-only ``mmap`` per hit was tried first: the broker spent more on mapping, faulting and unmapping 4 MiB
  chunks than a copy costs, 6.5% of its samples in the unmap alone.) An evicted chunk's file is unlinked; a
  hit still being read keeps its bytes through the open file. A file cut short by hand is a miss (its size is
  checked at each hit); one cut while being read ends the stream early, which the reader reports as a
  truncated segment: no mapping, so no SIGBUS.
* **Bounded by bytes**, least recently used first, and by ``retention.ms`` since the last access.
* **Bad bytes are not served twice**: the remote reader drops a segment's chunks before its fresh retry
  of a read that failed validation (:meth:`CachedSegmentReads.forget`), so a transfer that went bad is
  read from the store again and only data that is corrupt in the store is reported corrupt.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from strata.tiered.api import RemoteLogSegmentMetadata, RemoteStorageManager, uuid_to_str
from strata.tiered.segment_bytes import fetch_remote_segment_bytes
from strata.tiered.storage.common import BufferReader, check_positions, config_int, config_str

log = logging.getLogger(__name__)

ChunkKey = tuple[uuid.UUID, int]

CACHE_PREFIX = "fetch.chunk.cache."
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
DEFAULT_RETENTION_MS = 600_000
DEFAULT_DIR_NAME = "remote-chunk-cache"
_CLASSES = {
    "none": "none", "": "none",
    "disk": "disk", "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache": "disk",
    "memory": "memory", "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache": "memory",
}
_KEYS = {"class", "size", "retention.ms", "path", "admission"}
ADMISSIONS = ("always", "second-access")
_REFUSED = {
    "prefetch.max.size": "Strata reads ahead with remote.log.reader.prefetch.* (across segment boundaries)",
    "get.timeout.ms": "chunks are loaded by the reader thread that asks for them",
    "thread.pool.size": "chunks are loaded by the reader thread that asks for them",
}


class _OpenFile:
    """A file descriptor closed when the last :class:`FileChunk` slice of it goes (slices of one hit outlive
    the call that opened it: they are read when the reader's window is filled)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class FileChunk:
    """A cached chunk on disk, or a slice of one: its open file, where the bytes start and how many.
    Slicing is free; :meth:`readinto` ``preadv``s into the caller's buffer, :meth:`pread` into a new one."""

    __slots__ = ("_file", "length", "offset")

    def __init__(self, file: Any, offset: int, length: int) -> None:
        self._file = file  # kept open while any slice is alive: an evicted (unlinked) chunk stays readable
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, s: slice) -> FileChunk:
        start, stop, _ = s.indices(self.length)
        return FileChunk(self._file, self.offset + start, max(0, stop - start))

    def readinto(self, target: memoryview) -> int:
        """Up to ``len(target)`` bytes; fewer only if the file was cut short under the cache."""
        want = min(len(target), self.length)
        got = 0
        while got < want:
            n = os.preadv(self._file.fileno(), [target[got:want]], self.offset + got)
            if n <= 0:
                break
            got += n
        return got

    def pread(self, size: int) -> bytes:
        """Up to ``size`` bytes from the start in a new ``bytes``; fewer only if the file was cut short."""
        want = min(size, self.length)
        data = os.pread(self._file.fileno(), want, self.offset)
        while 0 < len(data) < want:  # a short read before the end: rare with regular files
            more = os.pread(self._file.fileno(), want - len(data), self.offset + len(data))
            if not more:
                break
            data += more
        return data

    def __bytes__(self) -> bytes:
        return self.pread(self.length)


Chunk = memoryview | FileChunk


class ChunkCache:
    """What both caches share: LRU by bytes with expiry after access, hit and miss counters."""

    def __init__(self, chunk_size: int, max_bytes: int, retention_ms: int,
                 clock: Callable[[], float] = time.monotonic, admission: str = "always") -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk size must be positive, got {chunk_size}")
        if admission not in ADMISSIONS:
            raise ValueError(f"admission must be one of {ADMISSIONS}, got {admission!r}")
        self.admission = admission
        # second-access: keys read once (when last), oldest first; bounded like the cache itself
        self._seen: OrderedDict[ChunkKey, float] = OrderedDict()
        self._seen_max = max(1024, max_bytes // chunk_size if max_bytes >= 0 else 1 << 16)
        self.rejected = 0
        self.chunk_size = chunk_size
        self.max_bytes = max_bytes  # < 0: unbounded
        self.retention_s = retention_ms / 1000 if retention_ms >= 0 else None
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[ChunkKey, tuple[int, float]] = OrderedDict()  # key -> (size, last access)
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    # -- what subclasses store ------------------------------------------------------------------

    def _load(self, key: ChunkKey) -> Chunk | None:
        raise NotImplementedError

    def _store(self, key: ChunkKey, data: memoryview) -> bool:
        raise NotImplementedError

    def _drop(self, key: ChunkKey) -> None:
        raise NotImplementedError

    # -- the cache ------------------------------------------------------------------------------

    def get(self, key: ChunkKey) -> Chunk | None:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and self._expired(entry[1], now):
                self._remove(key)
                entry = None
            if entry is None:
                self.misses += 1
                return None
            self._entries[key] = (entry[0], now)
            self._entries.move_to_end(key)
        data = self._load(key)
        with self._lock:
            if data is None or len(data) != entry[0]:  # its file went away or was cut short (by hand): a miss
                data = None
                if key in self._entries:
                    self._remove(key)
                self.misses += 1
                return None
            self.hits += 1
        return data

    def admit(self, key: ChunkKey) -> bool:
        """Whether a chunk just loaded should be kept: always, or (``second-access``) when it was loaded
        before within the retention."""
        if self.admission == "always":
            return True
        now = self._clock()
        with self._lock:
            seen = self._seen.pop(key, None)
            if seen is not None and not self._expired(seen, now):
                return True
            self._seen[key] = now
            while len(self._seen) > self._seen_max:
                self._seen.popitem(last=False)
            self.rejected += 1
            return False

    def put(self, key: ChunkKey, data: memoryview) -> None:
        size = len(data)
        if 0 <= self.max_bytes < size:
            return
        now = self._clock()
        with self._lock:
            if key in self._entries:
                return
            self._evict(size, now)
        if not self._store(key, data):
            return
        with self._lock:
            if key in self._entries:
                return
            self._evict(size, now)
            self._entries[key] = (size, now)
            self.bytes += size

    def forget(self, segment_id: uuid.UUID) -> None:
        """Drop every chunk of one segment (deleted, or its bytes failed validation)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == segment_id]:
                self._remove(key)
            for key in [k for k in self._seen if k[0] == segment_id]:
                del self._seen[key]

    def clear(self) -> None:
        with self._lock:
            for key in list(self._entries):
                self._remove(key)

    def close(self) -> None:
        self.clear()

    def _expired(self, last_access: float, now: float) -> bool:
        return self.retention_s is not None and now - last_access > self.retention_s

    def _evict(self, incoming: int, now: float) -> None:
        """Expired chunks first, then the least recently used until ``incoming`` fits (lock held)."""
        if self.retention_s is not None:
            for key, (_, last) in list(self._entries.items()):
                if not self._expired(last, now):
                    break  # ordered by access: the rest are newer
                self._remove(key)
                self.evictions += 1
        while self.max_bytes >= 0 and self._entries and self.bytes + incoming > self.max_bytes:
            self._remove(next(iter(self._entries)))
            self.evictions += 1

    def _remove(self, key: ChunkKey) -> None:
        size, _ = self._entries.pop(key)
        self.bytes -= size
        self._drop(key)


class MemoryChunkCache(ChunkCache):
    """Chunks as ``bytes`` in this process (tests, and brokers with memory to spare and no disk)."""

    def __init__(self, chunk_size: int, max_bytes: int, retention_ms: int,
                 clock: Callable[[], float] = time.monotonic, admission: str = "always") -> None:
        super().__init__(chunk_size, max_bytes, retention_ms, clock, admission)
        self._data: dict[ChunkKey, bytes] = {}

    def _load(self, key: ChunkKey) -> memoryview | None:
        data = self._data.get(key)
        return None if data is None else memoryview(data)

    def _store(self, key: ChunkKey, data: memoryview) -> bool:
        self._data[key] = bytes(data)
        return True

    def _drop(self, key: ChunkKey) -> None:
        self._data.pop(key, None)


class DiskChunkCache(ChunkCache):
    """Chunks as files ``<segment id>-<chunk number>`` in one directory, written through ``tmp/``."""

    def __init__(self, directory: Path, chunk_size: int, max_bytes: int, retention_ms: int,
                 clock: Callable[[], float] = time.monotonic, admission: str = "always") -> None:
        super().__init__(chunk_size, max_bytes, retention_ms, clock, admission)
        self.directory = directory
        if directory.exists():
            shutil.rmtree(directory)
        self._tmp = directory / "tmp"
        self._tmp.mkdir(parents=True)
        self._write_failed = False

    def _path(self, key: ChunkKey) -> Path:
        return self.directory / f"{uuid_to_str(key[0])}-{key[1]}"

    def _load(self, key: ChunkKey) -> Chunk | None:
        try:
            f = _OpenFile(os.open(self._path(key), os.O_RDONLY | os.O_CLOEXEC))
        except FileNotFoundError:
            return None
        return FileChunk(f, 0, os.fstat(f.fd).st_size)

    def _store(self, key: ChunkKey, data: memoryview) -> bool:
        tmp = self._tmp / f"{uuid_to_str(key[0])}-{key[1]}.{threading.get_ident()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self._path(key))
        except OSError as e:  # a full or failing disk: serve from the store, say so once
            tmp.unlink(missing_ok=True)
            if not self._write_failed:
                self._write_failed = True
                log.warning("remote chunk cache %s: cannot write a chunk (%s); reads go to the store until "
                            "writes succeed again", self.directory, e)
            return False
        self._write_failed = False
        return True

    def _drop(self, key: ChunkKey) -> None:
        self._path(key).unlink(missing_ok=True)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass(frozen=True)
class ChunkCacheConfig:
    """``fetch.chunk.cache.*`` as parsed: checked when the broker starts, built when the reader starts."""

    kind: str  # "disk" or "memory"
    chunk_size: int
    max_bytes: int
    retention_ms: int
    path: Path | None
    admission: str = "always"

    def build(self) -> ChunkCache:
        if self.kind == "memory":
            return MemoryChunkCache(self.chunk_size, self.max_bytes, self.retention_ms, admission=self.admission)
        assert self.path is not None
        try:
            return DiskChunkCache(self.path, self.chunk_size, self.max_bytes, self.retention_ms,
                                  admission=self.admission)
        except OSError as e:
            raise ValueError(f"config {CACHE_PREFIX + 'path'!r}: cannot use {str(self.path)!r} ({e.strerror})") \
                from None


def chunk_cache_config(configs: Mapping[str, Any], first_log_dir: Path) -> ChunkCacheConfig | None:
    """The cache the RSM props ask for (None: ``fetch.chunk.cache.class`` unset or ``none``); a bad or
    unsupported key raises ValueError naming it."""
    for key in configs:
        if key.startswith(CACHE_PREFIX):
            name = key[len(CACHE_PREFIX):]
            if name in _REFUSED:
                raise ValueError(f"config {key!r} is not supported: {_REFUSED[name]}")
            if name not in _KEYS:
                raise ValueError(f"unknown config {key!r} (known: "
                                 f"{', '.join(CACHE_PREFIX + k for k in sorted(_KEYS))})")
    raw_class = config_str(configs, CACHE_PREFIX + "class", "none").strip()
    kind = _CLASSES.get(raw_class) or _CLASSES.get(raw_class.lower())
    if kind is None:
        raise ValueError(f"config {CACHE_PREFIX + 'class'!r} must be none, disk or memory (or Aiven's "
                         f"DiskChunkCache / MemoryChunkCache class), got {raw_class!r}")
    if kind == "none":
        for name in ("size", "retention.ms", "path", "admission"):
            if CACHE_PREFIX + name in configs:
                raise ValueError(f"config {CACHE_PREFIX + name!r} needs {CACHE_PREFIX + 'class'!r} "
                                 f"set to disk or memory")
        return None
    chunk_size = config_int(configs, "chunk.size", DEFAULT_CHUNK_SIZE, minimum=1)
    if CACHE_PREFIX + "size" not in configs:
        raise ValueError(f"missing required config {CACHE_PREFIX + 'size'!r} (bytes, or -1 for unbounded)")
    size = config_int(configs, CACHE_PREFIX + "size", -1, minimum=-1)
    if 0 <= size < chunk_size:
        raise ValueError(f"config {CACHE_PREFIX + 'size'!r} must be -1 or at least one chunk "
                         f"(chunk.size={chunk_size}), got {size}")
    retention_ms = config_int(configs, CACHE_PREFIX + "retention.ms", DEFAULT_RETENTION_MS, minimum=-1)
    admission = config_str(configs, CACHE_PREFIX + "admission", "always").strip().lower()
    if admission not in ADMISSIONS:
        raise ValueError(f"config {CACHE_PREFIX + 'admission'!r} must be one of {', '.join(ADMISSIONS)}, "
                         f"got {admission!r}")
    if kind == "memory":
        if CACHE_PREFIX + "path" in configs:
            raise ValueError(f"config {CACHE_PREFIX + 'path'!r} applies to the disk cache only")
        return ChunkCacheConfig(kind, chunk_size, size, retention_ms, None, admission)
    path = Path(config_str(configs, CACHE_PREFIX + "path", str(first_log_dir / DEFAULT_DIR_NAME)))
    return ChunkCacheConfig(kind, chunk_size, size, retention_ms, path, admission)


class _ChunksReader(BufferReader):
    """A stream over the pieces of several chunks: ``read_view`` serves a piece in memory as it is (no copy:
    a read inside one chunk just loaded, or of the memory cache); ``readinto`` copies across pieces, a chunk
    on disk with one ``preadv``."""

    def __init__(self, pieces: list[Chunk]) -> None:
        super().__init__(b"")
        self._pieces = pieces
        self._index = 0

    def read_view(self, size: int) -> memoryview:
        if self._index >= len(self._pieces):
            return memoryview(b"")
        piece = self._pieces[self._index]
        if len(self._pieces) - self._index == 1 or size <= len(piece):
            if isinstance(piece, memoryview):
                view = piece[:max(size, 0)]
            else:  # one ``pread`` into a new ``bytes``: no zero-filled ``bytearray`` to read into first
                view = memoryview(piece.pread(max(size, 0)))
                if len(view) < min(size, len(piece)):  # cut short under the cache: the stream ends
                    self._pieces = self._pieces[:self._index]
                    return view
            self._advance(len(view))
            return view
        out = bytearray(min(size, sum(len(p) for p in self._pieces[self._index:])))
        n = self.readinto(out)
        return memoryview(out).toreadonly()[:n]

    def _advance(self, n: int) -> None:
        while n > 0 and self._index < len(self._pieces):
            piece = self._pieces[self._index]
            if n < len(piece):
                self._pieces[self._index] = piece[n:]
                return
            n -= len(piece)
            self._index += 1

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as raw, raw.cast("B") as target:
            got = 0
            while got < len(target) and self._index < len(self._pieces):
                piece = self._pieces[self._index]
                k = min(len(piece), len(target) - got)
                if isinstance(piece, memoryview):
                    target[got:got + k] = piece[:k]
                elif piece.readinto(target[got:got + k]) < k:  # cut short under the cache: the stream ends
                    self._pieces = self._pieces[:self._index]
                    break
                got += k
                self._advance(k)
        return got

    def read(self, size: int | None = -1) -> bytes:
        total = sum(len(p) for p in self._pieces[self._index:])
        n = total if size is None or size < 0 else min(size, total)
        out = bytearray(n)
        return bytes(out[:self.readinto(out)])

    def close(self) -> None:
        self._pieces = []
        super().close()


class CachedSegmentReads:
    """The remote reader's view of the RSM through a chunk cache: ``fetch_log_segment`` as the RSM's,
    answered from cached chunks and loading the missing ones in chunk-aligned ranged reads."""

    def __init__(self, rsm: RemoteStorageManager, cache: ChunkCache) -> None:
        self.rsm = rsm
        self.cache = cache
        self._lock = threading.Lock()
        self._loading: dict[ChunkKey, Future[memoryview]] = {}

    def forget(self, segment_id: uuid.UUID) -> None:
        self.cache.forget(segment_id)

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        check_positions(start_position, end_position)
        size = metadata.segment_size_in_bytes
        last = size - 1 if end_position is None else min(end_position, size - 1)
        if start_position > last:
            return cast(BinaryIO, BufferReader(b""))
        c = self.cache.chunk_size
        chunks = self._chunks(metadata, start_position // c, last // c)
        pieces = []
        for number, data in chunks:
            lo = max(start_position - number * c, 0)
            hi = min(last + 1 - number * c, len(data))
            if hi > lo:
                pieces.append(data[lo:hi])
        return cast(BinaryIO, _ChunksReader(pieces))

    def _chunks(self, md: RemoteLogSegmentMetadata, first: int, last: int) -> list[tuple[int, Chunk]]:
        segment_id = md.remote_log_segment_id.id
        found: dict[int, Chunk] = {}
        mine: list[int] = []
        theirs: dict[int, Future[memoryview]] = {}
        for number in range(first, last + 1):
            data = self.cache.get((segment_id, number))
            if data is not None:
                found[number] = data
                continue
            with self._lock:
                pending = self._loading.get((segment_id, number))
                if pending is None:
                    self._loading[(segment_id, number)] = Future()
                    mine.append(number)
                else:
                    theirs[number] = pending
        try:
            for run in _runs(mine):
                found.update(self._load(md, run))
        except BaseException as e:
            self._settle(segment_id, [n for n in mine if n not in found], error=e)
            raise
        for number, pending in theirs.items():
            try:
                found[number] = pending.result()
            except Exception:  # the loader failed: load it here (a failed load is not cached)
                found.update(self._load(md, [number]))
        return sorted(found.items())

    def _load(self, md: RemoteLogSegmentMetadata, run: list[int]) -> dict[int, memoryview]:
        """One ranged read of the chunks ``run`` (consecutive numbers), stored and handed to waiters."""
        c = self.cache.chunk_size
        segment_id = md.remote_log_segment_id.id
        start = run[0] * c
        end = min((run[-1] + 1) * c, md.segment_size_in_bytes)
        data = fetch_remote_segment_bytes(self.rsm, md, start, end)
        out: dict[int, memoryview] = {}
        for number in run:
            lo = (number - run[0]) * c
            piece = data[lo:lo + c]
            if not len(piece):
                break
            out[number] = piece
            whole = len(piece) == c or start + lo + len(piece) == md.segment_size_in_bytes
            # a short read (the store's object shorter than its metadata) is not cached
            if whole and self.cache.admit((segment_id, number)):
                self.cache.put((segment_id, number), piece)
        self._settle(segment_id, run, out)
        return out

    def _settle(self, segment_id: uuid.UUID, numbers: list[int], loaded: dict[int, memoryview] | None = None,
                error: BaseException | None = None) -> None:
        with self._lock:
            for number in numbers:
                pending = self._loading.pop((segment_id, number), None)
                if pending is None:
                    continue
                if loaded is not None and number in loaded:
                    pending.set_result(loaded[number])
                else:
                    pending.set_exception(error or EOFError(f"chunk {number} of {segment_id} is past its end"))


def _runs(numbers: list[int]) -> list[list[int]]:
    """Consecutive runs of ascending chunk numbers: one ranged read each."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][-1] == n - 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs
