"""``LogSegments``: the segments of one partition ordered by base offset (Kafka's skip-list map)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from strata.log.segment import LogSegment


class LogSegments:
    def __init__(self) -> None:
        self._bases: list[int] = []
        self._by_base: dict[int, LogSegment] = {}

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        return (self._by_base[b] for b in list(self._bases))

    def __contains__(self, base_offset: object) -> bool:
        return base_offset in self._by_base

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Insert or replace the segment with this base offset; returns the replaced one."""
        old = self._by_base.get(segment.base_offset)
        if old is None:
            bisect.insort(self._bases, segment.base_offset)
        self._by_base[segment.base_offset] = segment
        return old

    def remove(self, base_offset: int) -> None:
        if self._by_base.pop(base_offset, None) is not None:
            del self._bases[bisect.bisect_left(self._bases, base_offset)]

    def clear(self) -> None:
        self._bases.clear()
        self._by_base.clear()

    def get(self, base_offset: int) -> LogSegment | None:
        return self._by_base.get(base_offset)

    @property
    def first(self) -> LogSegment | None:
        return self._by_base[self._bases[0]] if self._bases else None

    @property
    def last(self) -> LogSegment | None:
        return self._by_base[self._bases[-1]] if self._bases else None

    @property
    def active(self) -> LogSegment:
        if not self._bases:
            raise LookupError("log has no segments")
        return self._by_base[self._bases[-1]]

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset``."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._by_base[self._bases[i]] if i >= 0 else None

    def higher(self, base_offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._bases, base_offset)
        return self._by_base[self._bases[i]] if i < len(self._bases) else None

    def lower(self, base_offset: int) -> LogSegment | None:
        i = bisect.bisect_left(self._bases, base_offset) - 1
        return self._by_base[self._bases[i]] if i >= 0 else None

    def values_from(self, from_offset: int, to_offset: int | None = None) -> list[LogSegment]:
        """Segments that may hold offsets in ``[from_offset, to_offset)`` (Kafka's ``values(from, to)``)."""
        start = max(bisect.bisect_right(self._bases, from_offset) - 1, 0)
        stop = len(self._bases) if to_offset is None else bisect.bisect_left(self._bases, to_offset)
        return [self._by_base[b] for b in self._bases[start:stop]]

    def non_active(self) -> list[LogSegment]:
        return [self._by_base[b] for b in self._bases[:-1]]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._by_base.values())

    def base_offsets(self) -> list[int]:
        return list(self._bases)
