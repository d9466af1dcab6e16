"""``.index``: 8-byte entries (offset relative to the segment base int32, file position int32)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from strata.log.errors import CorruptIndexError, InvalidOffsetError
from strata.log.index import IndexFile


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(IndexFile):
    """Sparse map offset → byte position of the append that contains it."""

    entry_size = 8
    _entry = struct.Struct(">ii")

    def entry(self, n: int) -> OffsetPosition:
        rel, position = self.raw_entry(n)
        return OffsetPosition(self.base_offset + rel, position)

    @property
    def last_offset(self) -> int:
        tail = self.last_raw_entry()
        return self.base_offset + tail[0] if tail is not None else self.base_offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry at or below ``target_offset``, else ``(base_offset, 0)``."""
        i = self._bisect(0, target_offset, relative=True)
        return self.entry(i) if i >= 0 else OffsetPosition(self.base_offset, 0)

    def lookup_by_position(self, position: int) -> OffsetPosition | None:
        """The last entry whose position is at or below ``position`` (positions grow with offsets)."""
        i = self._bisect(1, position, relative=False)
        return self.entry(i) if i >= 0 else None

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= 0x7FFFFFFF

    def append(self, offset: int, position: int) -> None:
        tail = self.last_raw_entry()
        if tail is not None and offset <= self.base_offset + tail[0]:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} at position {position} to {self.path.name}, "
                f"no larger than the last offset {self.last_offset}"
            )
        if not self.can_append_offset(offset):
            raise InvalidOffsetError(f"offset {offset} does not fit a segment based at {self.base_offset}")
        self._write_entry(offset - self.base_offset, position)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at or above ``offset``."""
        i = self._bisect(0, offset, relative=True)
        if i >= 0 and self.entry(i).offset >= offset:
            i -= 1
        self._truncate_to_entries(i + 1)

    def sanity_check(self, log_size: int | None = None) -> None:
        self._check_length()
        if not self.entries:
            return
        last = self.entry(self.entries - 1)
        if last.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index {self.path}: last offset {last.offset} below base offset {self.base_offset}"
            )
        if last.position < 0:
            raise CorruptIndexError(f"corrupt index {self.path}: negative last entry position {last.position}")
        if log_size is not None and last.position >= max(log_size, 1):
            raise CorruptIndexError(
                f"corrupt index {self.path}: last entry position {last.position} past the log size {log_size}"
            )
        first = self.entry(0)
        if first.offset > last.offset or first.position > last.position:
            raise CorruptIndexError(f"corrupt index {self.path}: entries are not increasing")
