"""Producer id allocation for idempotent producers, durable across restarts.

Kafka's controller hands out blocks of 1000 ids and records each block in the metadata log
before any id in it is used. Here the block's end is written (atomically) to
``strata-producer-ids`` before the block is used, so a restart, even after ``kill -9``, never
reissues an id a producer may still hold: it skips to the next block instead.
"""

from __future__ import annotations

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

    def generate(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK_SIZE
            atomic_write(self.path, f"next.block.start={self._block_end}\n".encode())
        pid = self._next
        self._next += 1
        return pid
