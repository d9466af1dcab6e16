"""``Reader``: serve a diskless fetch from the coordinator's answer (``find_batches``) and the object store.

Steps (Inkless's ``consume/Reader``; ``diskless.md`` §1.7): plan the reads per object (``plan.py``), read
every object concurrently, hot objects block by block through the per-broker :class:`ObjectCache`,
lagging ones with one bounding ranged GET that bypasses it, then complete each partition in order
(``complete.py``).

Why the lagging path is separate in every respect (no cache, its own concurrency bound, optionally its
own executor and store client): a consumer catching up from hours back can ask for many objects at
once. Through the cache it would evict the tail every live consumer is hitting; sharing the hot path's
slots it would queue live fetches behind its GETs. Bounding it separately keeps a backfill from
turning into a tail-latency incident.

Failure isolation: an object that cannot be read fails only the partitions that need it, and each of
those keeps the records it had assembled before reaching it. Nothing here raises for a store failure.
The caller (the broker's fetch handler) owns what is around this: calling ``find_batches`` (its failure
answers every partition ``UNKNOWN_SERVER_ERROR``), long-polling, and read-your-own-writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from strata.diskless.coordinator.api import FindBatchResponse
from strata.diskless.reader.cache import ObjectCache
from strata.diskless.reader.complete import ObjectBytes, PartitionRead, complete_partition
from strata.diskless.reader.plan import ObjectPlan, plan_reads
from strata.tiered.api import ObjectStore

log = logging.getLogger(__name__)

DEFAULT_LAGGING_CONCURRENCY = 16  # Inkless's inkless.fetch.lagging.consumer.thread.pool.size


@dataclass(slots=True)
class ReaderStats:
    """Counters for metrics: objects planned per path, lagging GETs and bytes, failed object reads."""

    hot_objects: int = 0
    lagging_objects: int = 0
    lagging_gets: int = 0
    lagging_bytes: int = 0
    object_read_failures: int = 0


class Reader:
    """Reads the batches the coordinator located and returns each partition's Fetch records."""

    def __init__(
        self,
        cache: ObjectCache,
        *,
        lagging_store: ObjectStore | None = None,
        lagging_threshold_ms: int | None = None,
        lagging_concurrency: int = DEFAULT_LAGGING_CONCURRENCY,
        lagging_executor: Executor | None = None,
    ) -> None:
        """``lagging_store`` defaults to the cache's store (Inkless gives the lagging path its own client);
        ``lagging_threshold_ms`` to the cache lifespan (Inkless's -1); ``lagging_executor`` to the loop's
        default executor."""
        if lagging_threshold_ms is not None and lagging_threshold_ms < 0:
            raise ValueError(f"lagging_threshold_ms must be >= 0 (None = the cache lifespan), not "
                             f"{lagging_threshold_ms}")
        if lagging_concurrency <= 0:
            raise ValueError(f"lagging_concurrency must be positive, not {lagging_concurrency}")
        self._cache = cache
        self._lagging_store = lagging_store if lagging_store is not None else cache.store
        self._lagging_threshold_ms = cache.lifespan_ms if lagging_threshold_ms is None else lagging_threshold_ms
        self._lagging_slots = asyncio.Semaphore(lagging_concurrency)
        self._lagging_executor = lagging_executor
        self.stats = ReaderStats()

    @property
    def lagging_threshold_ms(self) -> int:
        return self._lagging_threshold_ms

    async def read(self, responses: Sequence[FindBatchResponse], now_ms: int) -> list[PartitionRead]:
        """One :class:`PartitionRead` per answer, in order. ``now_ms`` is the wall clock, compared with
        commit times to tell lagging objects from hot ones."""
        plans = plan_reads(responses, now_ms=now_ms, lagging_threshold_ms=self._lagging_threshold_ms)
        results = await asyncio.gather(*(self._read_object(p) for p in plans))
        objects = {p.object_key: r for p, r in zip(plans, results, strict=True)}
        return [complete_partition(resp, objects) for resp in responses]

    async def _read_object(self, plan: ObjectPlan) -> ObjectBytes:
        if plan.lagging:
            self.stats.lagging_objects += 1
            return await self._read_lagging(plan)
        self.stats.hot_objects += 1
        return await self._read_hot(plan)

    async def _read_hot(self, plan: ObjectPlan) -> ObjectBytes:
        """Every cache block the ranges touch; a failed block leaves a hole, not a failed object, so
        partitions whose batches lie in other blocks are still served."""
        starts = sorted({s for start, end in plan.ranges for s in self._cache.block_starts(start, end)})
        blocks = await asyncio.gather(*(self._cache.get_block(plan.object_key, s) for s in starts),
                                      return_exceptions=True)
        pieces, error = [], None
        for start, block in zip(starts, blocks, strict=True):
            if isinstance(block, BaseException):
                if not isinstance(block, Exception):
                    raise block  # cancellation and friends are not store failures
                error = error or block
            else:
                pieces.append((start, block))
        if error is not None:
            self._failed(plan, error)
        return ObjectBytes(pieces, error)

    async def _read_lagging(self, plan: ObjectPlan) -> ObjectBytes:
        """One bounding ranged GET around the cache: fewer requests beat fewer bytes on object stores."""
        start, end = plan.bounds
        try:
            async with self._lagging_slots:
                self.stats.lagging_gets += 1
                data = await asyncio.get_running_loop().run_in_executor(
                    self._lagging_executor, self._lagging_store.get_object_range, plan.object_key, start, end)
        except Exception as e:  # any store failure fails only the partitions needing this object
            self._failed(plan, e)
            return ObjectBytes.failed(e)
        self.stats.lagging_bytes += len(data)
        return ObjectBytes([(start, data)])

    def _failed(self, plan: ObjectPlan, error: Exception) -> None:
        self.stats.object_read_failures += 1
        log.warning("diskless read of object %s (%s) failed: %r", plan.object_key,
                    "lagging" if plan.lagging else "hot", error)
