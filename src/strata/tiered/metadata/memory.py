"""An in-memory ``MetadataTopic``: the ``__remote_log_metadata`` topic as lists of values.

Why: the RLMM's replay, snapshot and read-your-writes logic can be tested (and benchmarked) without
a broker or a disk. It honours the same contract as the broker's implementation: offsets start at 0
and grow by one per append, ``delete_records`` moves the start offset the way retention does, and
``read`` yields from ``max(from_offset, start_offset)`` to the end at the time of the call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

__all__ = ["InMemoryMetadataTopic"]


class InMemoryMetadataTopic:
    def __init__(self, num_partitions: int | None = None) -> None:
        """``num_partitions`` pre-creates the topic (to test a count mismatch); else ensure_created does."""
        self._lock = threading.Lock()
        self._values: list[list[bytes]] | None = None
        self._start: list[int] = []  # offset of _values[p][0]
        self.retention_ms: int | None = None
        self.create_calls = 0
        self.appends = 0
        if num_partitions is not None:
            self._create(num_partitions)

    def _create(self, num_partitions: int) -> None:
        self._values = [[] for _ in range(num_partitions)]
        self._start = [0] * num_partitions

    def ensure_created(self, num_partitions: int, retention_ms: int, replication_factor: int = 1) -> int:
        with self._lock:
            self.create_calls += 1
            if self._values is None:
                self._create(num_partitions)
                self.retention_ms = retention_ms
            assert self._values is not None
            return len(self._values)

    def _partition(self, partition: int) -> list[bytes]:
        if self._values is None:
            raise RuntimeError("the metadata topic does not exist")
        if not 0 <= partition < len(self._values):
            raise ValueError(f"no partition {partition} in the metadata topic ({len(self._values)} partitions)")
        return self._values[partition]

    def append(self, partition: int, value: bytes) -> int:
        with self._lock:
            values = self._partition(partition)
            values.append(bytes(value))
            self.appends += 1
            return self._start[partition] + len(values) - 1

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes]]:
        with self._lock:
            values = self._partition(partition)
            start = self._start[partition]
            first = max(from_offset, start)
            chunk = values[first - start:]
        return zip(range(first, first + len(chunk)), chunk, strict=True)

    def end_offset(self, partition: int) -> int:
        with self._lock:
            return self._start[partition] + len(self._partition(partition))

    def start_offset(self, partition: int) -> int:
        with self._lock:
            self._partition(partition)
            return self._start[partition]

    @property
    def num_partitions(self) -> int:
        return len(self._values) if self._values is not None else 0

    def delete_records(self, partition: int, before_offset: int) -> None:
        """Drop the records below ``before_offset``, as retention (or DeleteRecords) would."""
        with self._lock:
            values = self._partition(partition)
            start = self._start[partition]
            n = min(max(0, before_offset - start), len(values))
            del values[:n]
            self._start[partition] = start + n

    def total_records(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._values or [])

    def total_bytes(self) -> int:
        with self._lock:
            return sum(len(x) for v in self._values or [] for x in v)
