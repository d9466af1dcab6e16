"""An in-memory ``MetadataTopic``: the ``__remote_log_metadata`` topic as lists of keyed records.

Why: the RLMM's replay, snapshot and read-your-writes logic can be tested (and benchmarked) without
a broker or a disk. It honours the same contract as the broker's implementation: offsets start at 0
and grow by one per append, ``delete_records`` moves the start offset the way retention does,
``compact`` removes records the way the log cleaner does (leaving offset gaps), and ``read`` yields
``(offset, key, value)`` from ``max(from_offset, start_offset)`` to the end at the time of the call,
tombstones (null values) included, then ``(end - 1, None, None)`` if the last records were compacted
away (the broker's position marker).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from strata.tiered.metadata.keys import new_topic_configs

__all__ = ["InMemoryMetadataTopic"]

Record = tuple[bytes | None, bytes | None]  # (key, value)


class InMemoryMetadataTopic:
    def __init__(self, num_partitions: int | None = None) -> None:
        """``num_partitions`` pre-creates the topic (to test a count mismatch); else ensure_created does."""
        self._lock = threading.Lock()
        # Per partition, the record at offset _start[p] + i; None where the cleaner removed one.
        self._values: list[list[Record | None]] | None = None
        self._start: list[int] = []  # offset of _values[p][0]
        self.retention_ms: int | None = None
        self.configs: dict[str, str] = {}
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
                self.configs = new_topic_configs(retention_ms)
            assert self._values is not None
            return len(self._values)

    def _partition(self, partition: int) -> list[Record | None]:
        if self._values is None:
            raise RuntimeError("the metadata topic does not exist")
        if not 0 <= partition < len(self._values):
            raise ValueError(f"no partition {partition} in the metadata topic ({len(self._values)} partitions)")
        return self._values[partition]

    def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        if value is None and key is None:
            raise ValueError("a record needs a key or a value")
        with self._lock:
            records = self._partition(partition)
            records.append((None if key is None else bytes(key), None if value is None else bytes(value)))
            self.appends += 1
            return self._start[partition] + len(records) - 1

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        with self._lock:
            records = self._partition(partition)
            start = self._start[partition]
            first = max(from_offset, start)
            chunk = [(offset, *record) for offset, record in enumerate(records[first - start:], first)
                     if record is not None]
            end = start + len(records)
        if end - 1 > (chunk[-1][0] if chunk else first - 1):  # the tail was compacted away: the read got past it
            chunk.append((end - 1, None, None))
        return iter(chunk)

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
            records = self._partition(partition)
            start = self._start[partition]
            n = min(max(0, before_offset - start), len(records))
            del records[:n]
            self._start[partition] = start + n

    def compact(self, partition: int | None = None, below: int | None = None, drop_tombstones: bool = True) -> int:
        """One cleaning of the records below ``below`` (all when None), the log cleaner's rule: its key map
        covers that range only, and a record stays only if no later record of the range has its key;
        null-key records go (Kafka's cleaner counts them invalid); tombstones go too with
        ``drop_tombstones`` (their ``delete.retention.ms`` has passed). The end offset never moves.
        Returns how many records were removed."""
        removed = 0
        with self._lock:
            for p in range(self.num_partitions) if partition is None else [partition]:
                records = self._partition(p)
                start = self._start[p]
                limit = len(records) if below is None else min(len(records), max(0, below - start))
                latest = {r[0]: i for i, r in enumerate(records[:limit]) if r is not None and r[0] is not None}
                for i in range(limit):
                    record = records[i]
                    if record is None:
                        continue
                    key, value = record
                    if key is None or latest[key] != i or (value is None and drop_tombstones):
                        records[i] = None
                        removed += 1
        return removed

    def total_records(self) -> int:
        with self._lock:
            return sum(1 for v in self._values or [] for r in v if r is not None)

    def total_bytes(self) -> int:
        """Key and value bytes of the records the topic holds."""
        with self._lock:
            return sum(len(r[0] or b"") + len(r[1] or b"") for v in self._values or [] for r in v if r is not None)
