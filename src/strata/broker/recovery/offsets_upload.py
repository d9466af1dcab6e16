"""``offsets.remote.upload.interval.ms``: the group coordinators' committed offsets, copied to the remote store.

A bucket that outlives its cluster holds the topics' records; without the groups' positions, every consumer of a
restored topic would start over from the beginning or the end. Each broker periodically writes, for every
``__consumer_offsets`` partition it coordinates, one object with the committed offsets of that partition's groups
(``docs/bucket-format.md``); ``strata bucket restore`` commits them again in the new cluster. An object is
written only when its content changed, so an idle cluster writes nothing; a failed write is retried at the
next interval (the copy is a convenience, never in the way of commits).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strata.tiered.api import ObjectStore, RemoteStorageError
from strata.tiered.recovery import GroupOffsets, encode_offsets, offsets_key

log = logging.getLogger("strata.recovery")


class ConsumerOffsetsUploader:
    def __init__(self, store: ObjectStore, snapshot: Callable[[], dict[int, GroupOffsets]], interval_ms: int,
                 broker_id: int, clock_ms: Callable[[], int]) -> None:
        self._store = store
        self._snapshot = snapshot
        self._interval_s = interval_ms / 1000
        self._broker_id = broker_id
        self._clock_ms = clock_ms
        self._written: dict[int, GroupOffsets] = {}  # partition -> what its object holds (as this broker wrote it)
        self.task: asyncio.Task[None] | None = None
        self._failures = 0

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="consumer-offsets-upload")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                n = await self.upload_once()
                if n:
                    log.debug("copied the committed offsets of %d __consumer_offsets partitions to the remote store",
                              n)
                if self._failures:
                    log.info("copying committed offsets to the remote store works again")
                self._failures = 0
            except (RemoteStorageError, OSError) as e:
                self._failures += 1
                if self._failures in (1, 10) or self._failures % 100 == 0:
                    log.warning("copying committed offsets to the remote store failed (%d times; retried every "
                                "%.0f s): %s", self._failures, self._interval_s, e)

    async def upload_once(self) -> int:
        """Write the objects whose groups' offsets changed; how many."""
        # (a partition without offsets is written only to empty an object written before)
        changed = {p: groups for p, groups in self._snapshot().items() if self._written.get(p, {}) != groups}
        loop = asyncio.get_running_loop()
        for partition, groups in changed.items():
            data = encode_offsets(partition, groups, self._broker_id, self._clock_ms())
            await loop.run_in_executor(None, self._store.put_object, offsets_key(partition), data)
            self._written[partition] = groups
        return len(changed)
