"""``.timeindex``: 12-byte entries (timestamp int64, offset relative to the segment base int32).

An entry maps the largest timestamp seen so far to the offset of the batch holding it, and is
written only when the timestamp grows, so lookups are a floor search on monotonic keys. One slot
is reserved (``is_full`` at ``max_entries - 1``) for the final entry written when the segment rolls.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from strata.log.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from strata.log.index import IndexFile

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(IndexFile):
    entry_size = 12
    _entry = struct.Struct(">qi")

    def entry(self, n: int) -> TimestampOffset:
        ts, rel = self.raw_entry(n)
        return TimestampOffset(ts, self.base_offset + rel)

    @property
    def last_entry(self) -> TimestampOffset:
        tail = self.last_raw_entry()
        if tail is None:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(tail[0], self.base_offset + tail[1])

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp at or below the target, else ``(-1, base_offset)``."""
        i = self._bisect(0, target_timestamp, relative=False)
        return self.entry(i) if i >= 0 else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Kafka's ``maybeAppend``: an entry only when the timestamp grows (called once per indexed batch)."""
        entries = self._entries if self._mm is not None else self.entries
        if not skip_full_check and entries >= self._max_entries - 1:
            raise IndexFullError(f"attempt to append to a full time index (size = {entries})")
        tail = self.last_raw_entry()
        if tail is not None:
            last_timestamp, last_offset = tail[0], self.base_offset + tail[1]
            if offset < last_offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to {self.path.name}, below the last offset {last_offset}"
                )
            if timestamp <= last_timestamp:
                if timestamp < last_timestamp:
                    raise InvalidOffsetError(
                        f"attempt to append timestamp {timestamp} to {self.path.name}, below the last "
                        f"{last_timestamp}"
                    )
                return
        elif timestamp <= NO_TIMESTAMP:
            return
        self._write_entry(timestamp, offset - self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is at or above ``offset``."""
        n = self.entries
        while n > 0 and self.entry(n - 1).offset >= offset:
            n -= 1
        self._truncate_to_entries(n)

    def sanity_check(self) -> None:
        self._check_length()
        if not self.entries:
            return
        last = self.last_entry
        first = self.entry(0)
        if last.timestamp < first.timestamp:
            raise CorruptIndexError(
                f"corrupt time index {self.path}: last timestamp {last.timestamp} below first {first.timestamp}"
            )
        if last.offset < self.base_offset or first.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt time index {self.path}: offset {last.offset} below base offset {self.base_offset}"
            )
