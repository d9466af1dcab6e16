"""Producer id allocation for idempotent producers, durable across restarts.

Kafka's controller hands out blocks of 1000 ids and records each block in the metadata log
before any id in it is used. A single node writes the block's end (atomically) to
``strata-producer-ids`` before the block is used, so a restart, even after ``kill -9``, never
reissues an id a producer may still hold: it skips to the next block instead. In a cluster the
blocks come from ZooKeeper's ``/latest_producer_id_block`` (``ZkProducerIdManager``), advanced with
a conditional write, so no two brokers ever hand out the same id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

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
    """Producer ids from blocks allocated in ZooKeeper; ``allocate`` returns (first id, size)."""

    def __init__(self, allocate: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._allocate = allocate
        self._next = 0
        self._block_end = 0

    async def next_id(self) -> int:
        if self._next >= self._block_end:
            first, size = await self._allocate()
            self._next, self._block_end = first, first + size
        pid = self._next
        self._next += 1
        return pid
