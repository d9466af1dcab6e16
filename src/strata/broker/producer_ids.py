"""Producer id allocation for idempotent producers, durable across restarts.

Kafka's controller hands out blocks of 1000 ids and records each block in the metadata log
before any id in it is used. A single node writes the block's end (atomically) to
``strata-producer-ids`` before the block is used, so a restart, even after ``kill -9``, never
reissues an id a producer may still hold: it skips to the next block instead. In a cluster the
blocks come from ZooKeeper's ``/latest_producer_id_block`` (``ZkProducerIdManager``), advanced with
a conditional write, so no two brokers ever hand out the same id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from strata.errors import ApiError, ErrorCode, KafkaError
from strata.log.checkpoints import atomic_write

BLOCK_SIZE = 1000
FILE_NAME = "strata-producer-ids"


class ProducerIdManager:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self._next = 0
        self._block_end = 0
        if self.path.exists():
            text = self.path.read_text().strip()
            self._next = self._block_end = int(text.split("=", 1)[1]) if "=" in text else int(text)

    async def next_id(self) -> int:
        return self.generate()

    def generate(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK_SIZE
            atomic_write(self.path, f"next.block.start={self._block_end}\n".encode())
        pid = self._next
        self._next += 1
        return pid


class ClusterProducerIdManager:
    """Producer ids from blocks allocated in ZooKeeper; ``allocate`` returns (first id, size).

    As Kafka's ``RPCProducerIdManager``: the next block is fetched in the background once the current one is
    90% used, and a request that finds no id ready waits at most ``wait_s`` and then answers
    COORDINATOR_LOAD_IN_PROGRESS, which every client retries (on any broker). Waiting for the allocation
    instead held InitProducerId for as long as ZooKeeper was unreachable: a broker cut off from it kept an
    idempotent producer from starting for the whole fault, although other brokers could have served it."""

    PREFETCH_LEFT = 10  # fetch the next block when a tenth of the current one is left

    def __init__(self, allocate: Callable[[], Awaitable[tuple[int, int]]], wait_s: float = 1.0) -> None:
        self._allocate = allocate
        self._wait_s = wait_s
        self._next = 0
        self._block_end = 0
        self._block_size = 0
        self._ready: tuple[int, int] | None = None  # the next block, fetched ahead
        self._pending: asyncio.Task[tuple[int, int]] | None = None

    async def next_id(self) -> int:
        if self._next >= self._block_end:
            if self._ready is None:
                await self._wait_for_block()
            if self._next >= self._block_end:  # else a racing request installed it meanwhile
                if self._ready is None:
                    raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "no producer id block yet")
                (first, size), self._ready = self._ready, None
                self._next, self._block_end, self._block_size = first, first + size, size
        pid = self._next
        self._next += 1
        if self._ready is None and self._block_end - self._next <= self._block_size // self.PREFETCH_LEFT:
            self._fetch()
        return pid

    async def _wait_for_block(self) -> None:
        task = self._fetch()
        try:
            # the task's own done-callback (registered first, so run first) files the block in _ready
            await asyncio.wait_for(asyncio.shield(task), self._wait_s)
        except TimeoutError:
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           "no producer id block yet (ZooKeeper is slow or unreachable)") from None
        except KafkaError:
            raise
        except Exception as e:  # noqa: BLE001 - the client retries; the next request fetches again
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"allocating a producer id block: {e!r}") from e

    def _fetch(self) -> asyncio.Task[tuple[int, int]]:
        """The allocation in flight, started if there is none (one at a time)."""
        if self._pending is None:
            self._pending = asyncio.get_running_loop().create_task(self._allocate())
            self._pending.add_done_callback(self._fetched)
        return self._pending

    def _fetched(self, task: asyncio.Task[tuple[int, int]]) -> None:
        if self._pending is task:
            self._pending = None
        if task.cancelled() or task.exception() is not None:  # retrieved here; a request reports it
            return
        if self._ready is None:
            self._ready = task.result()
