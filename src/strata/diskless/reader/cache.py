"""``ObjectCache``: the per-broker cache of WAL-object bytes that serves the hot tail of diskless partitions.

Why a cache at all: one WAL object holds batches of many partitions, and every consumer of every one of
those partitions that keeps up with the tail asks for bytes of the same few, newest objects. Without a
cache each of those fetches is a ranged GET; with it, a broker GETs each object about once (Inkless's
``consume/cache``, a Caffeine cache, §1.7 of ``diskless.md``). AZ-affine routing is what makes a per-broker
cache pay off.

Rules, and why:

* **Fixed block alignment.** Entries are ``(object_key, block_start)`` with ``block_start`` a multiple of
  ``block_bytes`` (default 16 MiB). WAL objects are ~8 MiB, so an object is one block and the first miss
  caches all of it: every other partition in that object then hits. A block shorter than ``block_bytes``
  is the object's last (objects are immutable, so that stays true).
* **Byte bound, then LRU.** Memory is what runs out, so the bound is in bytes (``max_bytes``), with an
  entry-count bound (``max_entries``, Inkless's ``max.count`` of 1000) as a backstop. Inkless uses
  Caffeine's W-TinyLFU; plain LRU is close enough for a tail cache and makes eviction order testable.
  A block larger than the whole budget is served but not kept.
* **TTL from the write** (``lifespan_s``, Inkless's ``expiration.lifespan.sec`` = 60). The tail moves on;
  an object older than the lifespan is read by lagging consumers, which bypass the cache (see
  ``reader.py``), so keeping it longer only crowds out the tail. Because every entry lives the same
  time, write order is expiry order, and expired entries are purged from the front of one ordered map.
* **Merged misses.** Two fetches missing the same block issue one GET: the second awaits the first's
  load (Caffeine's ``computeIfAbsent``). The load runs as its own task and waiters ``shield`` it, so a
  cancelled fetch (a client gone, a long-poll ended) does not abort a GET others are waiting for.
  Failures are not cached: the next fetch tries again.
* **Prefill.** The writer puts the objects it just uploaded into the cache (Inkless does), so a consumer
  at the tail of a partition this broker produces to never GETs at all.

Threading: the cache belongs to one event loop and is not thread-safe; all its state is touched only
from that loop. Store GETs block, so they run in worker threads (the injected executor, or the loop's
default one), at most ``max_concurrent_loads`` at a time. A caller on another thread (an upload
completion callback) must hop onto the loop (``loop.call_soon_threadsafe(cache.prefill, key, data)``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import NamedTuple

from strata.common.clock import Clock, SystemClock
from strata.tiered.api import ObjectStore

log = logging.getLogger(__name__)

MiB = 1 << 20
DEFAULT_BLOCK_BYTES = 16 * MiB
DEFAULT_MAX_BYTES = 256 * MiB
DEFAULT_MAX_ENTRIES = 1000
DEFAULT_LIFESPAN_S = 60.0
DEFAULT_MAX_CONCURRENT_LOADS = 32  # Inkless's inkless.fetch.data.thread.pool.size

Buffer = bytes | memoryview


class BlockKey(NamedTuple):
    object_key: str
    block_start: int


class _Entry(NamedTuple):
    data: Buffer
    expires_at_ms: int


@dataclass(slots=True)
class CacheStats:
    """Counters for metrics. ``misses`` counts loads started (= store GETs issued by the cache); a fetch
    that joined a load already in flight counts as ``merged``, not as a miss."""

    hits: int = 0
    misses: int = 0
    merged: int = 0
    load_failures: int = 0
    evictions: int = 0  # pushed out by the byte or entry bound
    expirations: int = 0  # outlived the lifespan
    prefills: int = 0


class ObjectCache:
    """A byte-bounded LRU of WAL-object blocks with a write TTL and merged concurrent misses."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        lifespan_s: float = DEFAULT_LIFESPAN_S,
        clock: Clock | None = None,
        executor: Executor | None = None,
        max_concurrent_loads: int = DEFAULT_MAX_CONCURRENT_LOADS,
    ) -> None:
        if block_bytes <= 0 or max_bytes < 0 or max_entries < 0 or lifespan_s <= 0 or max_concurrent_loads <= 0:
            raise ValueError("block_bytes, lifespan_s and max_concurrent_loads must be positive; the bounds >= 0")
        self._store = store
        self._block_bytes = block_bytes
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self._lifespan_ms = int(lifespan_s * 1000)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._executor = executor
        self._loads = asyncio.Semaphore(max_concurrent_loads)
        self._lru: OrderedDict[BlockKey, _Entry] = OrderedDict()  # least recently used first
        self._by_write: OrderedDict[BlockKey, None] = OrderedDict()  # oldest write first = first to expire
        self._bytes = 0
        self._inflight: dict[BlockKey, asyncio.Task[Buffer]] = {}
        self.stats = CacheStats()

    # -- properties --------------------------------------------------------------------------------

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def block_bytes(self) -> int:
        return self._block_bytes

    @property
    def lifespan_ms(self) -> int:
        return self._lifespan_ms

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._lru)

    def block_starts(self, start: int, end: int) -> range:
        """The starts of the blocks covering bytes ``[start, end)``."""
        if end <= start:
            return range(0)
        bb = self._block_bytes
        return range(start - start % bb, end, bb)

    # -- reads -----------------------------------------------------------------------------------

    def peek(self, object_key: str, block_start: int) -> Buffer | None:
        """The cached block, if present and fresh, without touching LRU order or the hit/miss counters
        (for tests and diagnostics; expired entries are purged as on every access)."""
        self._expire()
        entry = self._lru.get(BlockKey(object_key, block_start))
        return None if entry is None else entry.data

    async def get_block(self, object_key: str, block_start: int) -> Buffer:
        """The block at ``block_start`` (a multiple of ``block_bytes``); shorter at the object's end.

        Raises what the store raises (``RemoteResourceNotFoundError`` for a missing object); nothing is
        cached then.
        """
        if block_start % self._block_bytes:
            raise ValueError(f"block start {block_start} is not a multiple of {self._block_bytes}")
        key = BlockKey(object_key, block_start)
        self._expire()
        entry = self._lru.get(key)
        if entry is not None:
            self._lru.move_to_end(key)
            self.stats.hits += 1
            return entry.data
        task = self._inflight.get(key)
        if task is None:
            self.stats.misses += 1
            task = asyncio.get_running_loop().create_task(self._load(key))
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._load_done, key))
        else:
            self.stats.merged += 1
        return await asyncio.shield(task)

    async def get_range(self, object_key: str, start: int, end: int) -> Buffer:
        """Bytes ``[start, end)`` of an object, through the cache (fewer when the object is shorter).

        A range inside one block comes back as a view of the cached block, without a copy.
        """
        starts = self.block_starts(start, end)
        blocks = await asyncio.gather(*(self.get_block(object_key, s) for s in starts))
        pieces: list[Buffer] = []
        for block_start, data in zip(starts, blocks, strict=True):
            lo = max(start - block_start, 0)
            hi = min(end - block_start, len(data))
            if lo >= hi:
                break
            pieces.append(memoryview(data)[lo:hi])
            if len(data) < self._block_bytes:  # the object ends in this block
                break
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)

    # -- writes ----------------------------------------------------------------------------------

    def prefill(self, object_key: str, data: bytes | bytearray | memoryview) -> None:
        """Cache a whole object the caller holds already (the writer, right after uploading it).

        ``data`` is copied unless it is ``bytes``, so the writer may reuse its buffer.
        """
        bb = self._block_bytes
        for block_start in range(0, len(data), bb):
            chunk = data[block_start:block_start + bb]
            self._insert(BlockKey(object_key, block_start), chunk if isinstance(chunk, bytes) else bytes(chunk))
            self.stats.prefills += 1

    def invalidate(self, object_key: str) -> None:
        """Forget every block of an object (it was deleted); a load in flight still completes."""
        for key in [k for k in self._lru if k.object_key == object_key]:
            self._remove(key)

    # -- internals -------------------------------------------------------------------------------

    async def _load(self, key: BlockKey) -> Buffer:
        async with self._loads:
            loop = asyncio.get_running_loop()
            data: Buffer = await loop.run_in_executor(
                self._executor, self._store.get_object_range, key.object_key, key.block_start,
                key.block_start + self._block_bytes)
        if len(data):
            self._insert(key, data)
        return data

    def _load_done(self, key: BlockKey, task: asyncio.Task[Buffer]) -> None:
        """Unregister the load; retrieving its exception here keeps an unawaited failure (every waiter
        cancelled) from being logged as "never retrieved"."""
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled() and task.exception() is not None:
            self.stats.load_failures += 1

    def _insert(self, key: BlockKey, data: Buffer) -> None:
        size = len(data)
        if key in self._lru:
            self._remove(key)
        if size > self._max_bytes or self._max_entries == 0:
            return  # larger than the whole budget: serve it, do not keep it
        self._expire()
        self._lru[key] = _Entry(data, self._clock.monotonic_ms() + self._lifespan_ms)
        self._by_write[key] = None
        self._bytes += size
        while self._bytes > self._max_bytes or len(self._lru) > self._max_entries:
            victim = next(iter(self._lru))
            self._remove(victim)
            self.stats.evictions += 1

    def _expire(self) -> None:
        now = self._clock.monotonic_ms()
        while self._by_write:
            key = next(iter(self._by_write))
            if self._lru[key].expires_at_ms > now:
                break
            self._remove(key)
            self.stats.expirations += 1

    def _remove(self, key: BlockKey) -> None:
        entry = self._lru.pop(key)
        del self._by_write[key]
        self._bytes -= len(entry.data)
