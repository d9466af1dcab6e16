"""``LogSegment``: one ``.log`` file with its offset, time and transaction indexes.

Kafka's rules kept here, byte for byte: index entries every ``index.interval.bytes`` per batch
(keyed by the batch's last offset, pointing at its start, as ``LogSegment.append`` in Kafka 4.x);
roll on size, age (``segment.ms`` minus per-segment jitter), full indexes or relative-offset
overflow; on becoming inactive a final time-index entry and trimmed index files.

A segment is owned by one thread (the event loop for the active one); rolled segments are
immutable and safe to read from worker threads.
"""

from __future__ import annotations

import logging
import os
import random
from bisect import bisect_left
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from strata.common import Clock
from strata.common.crashpoints import crash_point
from strata.config import LogConfig
from strata.errors import (
    CorruptRecordError,
    KafkaStorageError,
    UnsupportedForMessageFormatError,
)
from strata.log.errors import CorruptIndexError
from strata.log.file_records import FetchDataInfo, FileRecords, FileSlice, LogOffsetMetadata
from strata.log.files import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file_name,
)
from strata.log.offset_index import OffsetIndex
from strata.log.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from strata.log.txn_index import AbortedTxn, TransactionIndex
from strata.protocol.records import BatchHeader, decode_batch

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF

BatchList = Sequence[tuple[int, BatchHeader]]
Records = bytes | bytearray | memoryview | list[bytes | bytearray | memoryview]  # a list is written with pwritev
RecoverCallback = Callable[["LogSegment", BatchHeader, memoryview], None]
INVALID_DATA = (CorruptRecordError, UnsupportedForMessageFormatError)
TAIL_BATCHES = 64  # the last batches an active segment keeps the positions of (see LogSegment._tail)
"""What bytes that are not a valid batch raise. On disk a magic other than 2 is corruption too (Strata
never writes v0/v1 message sets): a flip of bit 1 of the magic byte turns 2 into 0."""


class LogOffsetPosition(NamedTuple):
    """The batch that holds an offset: its base offset, byte position and size."""

    offset: int
    position: int
    size: int


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int | None


class RollParams(NamedTuple):
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        clock: Clock,
        *,
        create: bool = False,
        rolling_jitter_ms: int | None = None,
        suffix: str = "",
    ) -> None:
        """``suffix``: appended to every file name (``.cleaned`` for a segment the log cleaner writes,
        ``.swap`` for one whose swap a crash interrupted)."""
        self.dir = directory
        self.base_offset = base_offset
        self.config = config
        self._clock = clock
        stem = offset_file_name(base_offset)
        self.log = FileRecords(directory / f"{stem}{LOG_SUFFIX}{suffix}", create=create)
        self.offset_index = OffsetIndex(directory / f"{stem}{INDEX_SUFFIX}{suffix}", base_offset,
                                        config.segment_index_bytes, writable=create)
        self.time_index = TimeIndex(directory / f"{stem}{TIME_INDEX_SUFFIX}{suffix}", base_offset,
                                    config.segment_index_bytes, writable=create)
        self.txn_index = TransactionIndex(directory / f"{stem}{TXN_INDEX_SUFFIX}{suffix}", base_offset)
        if rolling_jitter_ms is None:
            jitter_cap = min(config.segment_jitter_ms, config.max_segment_ms)
            rolling_jitter_ms = random.randrange(jitter_cap) if jitter_cap > 0 else 0
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = clock.milliseconds()
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._rolling_based_loaded = create
        self._max_ts: TimestampOffset | None = TimestampOffset(NO_TIMESTAMP, base_offset) if create else None
        # The batches appended last, while the segment is active: (last offset) and (base offset, position,
        # size), ascending. Followers and consumers at the log end read from a batch appended a moment ago;
        # found here, their read skips the index lookup and the header scan after it (one pread per batch
        # between the sparse index entry and the batch: on small batches the hot path's largest cost).
        # One attribute, rebound whole, so a reader on another thread never pairs lists of different ages;
        # appends add to the second list first, so the first is never the longer.
        self._tail: tuple[list[int], list[tuple[int, int, int]]] = ([], [])

    @staticmethod
    def file_paths(directory: Path, base_offset: int) -> list[Path]:
        stem = offset_file_name(base_offset)
        return [directory / f"{stem}{suffix}" for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX,
                                                               TXN_INDEX_SUFFIX)]

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"

    # -- state ---------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size

    @property
    def max_timestamp_and_offset_so_far(self) -> TimestampOffset:
        """Largest batch max-timestamp in the segment and the last offset of that batch."""
        if self._max_ts is None:
            self._max_ts = self.time_index.last_entry
        return self._max_ts

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far.timestamp

    @property
    def largest_timestamp(self) -> int:
        """What time retention compares against: the max timestamp, else the file's mtime."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return int(os.stat(self.log.path).st_mtime * 1000)

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # -- append --------------------------------------------------------------------------------

    def append(self, records: Records, batches: BatchList) -> None:
        """Append already validated batches (``batches`` are their positions in ``records``)."""
        if not batches:
            return
        largest_offset = batches[-1][1].last_offset
        if not self.can_convert_to_relative_offset(largest_offset):
            raise KafkaStorageError(
                f"offset {largest_offset} overflows segment {self.base_offset}: it should have been rolled"
            )
        # Disk blocks for the index entries first: a full disk fails here, before the .log changes.
        self.offset_index.reserve(len(batches))
        self.time_index.reserve(len(batches))
        physical_position = self.log.size
        if physical_position == 0:
            self._rolling_based_timestamp = max(h.max_timestamp for _, h in batches)
            self._rolling_based_loaded = True
        tail_last, tail = self._tail
        self._forget_tail()  # until the batches are in: a failure below leaves the tail empty, not stale
        start = physical_position
        self.log.append(records)
        crash_point("log.append.after_write")  # the .log has the batches, the indexes not yet
        max_ts = self.max_timestamp_and_offset_so_far
        interval = self.config.index_interval_bytes
        for _, header in batches:
            if header.max_timestamp > max_ts.timestamp:
                max_ts = TimestampOffset(header.max_timestamp, header.last_offset)
            if self._bytes_since_last_index_entry > interval:
                self.offset_index.append(header.last_offset, physical_position)
                self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                self._bytes_since_last_index_entry = 0
            physical_position += header.size
            self._bytes_since_last_index_entry += header.size
        self._max_ts = max_ts
        for _, header in batches:
            tail.append((header.base_offset, start, header.size))
            tail_last.append(header.last_offset)
            start += header.size
        self._tail = (tail_last[-TAIL_BATCHES:], tail[-TAIL_BATCHES:]) if len(tail) > 2 * TAIL_BATCHES \
            else (tail_last, tail)

    def update_txn_index(self, producer_id: int, first_offset: int, last_offset: int,
                         last_stable_offset: int) -> None:
        self.txn_index.append(AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset))

    # -- roll ----------------------------------------------------------------------------------

    def _load_rolling_based_timestamp(self) -> int | None:
        if not self._rolling_based_loaded:
            self._rolling_based_loaded = True
            if self.size > 0:
                self._rolling_based_timestamp = self.log.read_header(0).max_timestamp
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self._load_rolling_based_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(self, params: RollParams) -> bool:
        config = self.config
        reached_roll_ms = (
            self.time_waited_for_roll(params.now_ms, params.max_timestamp_in_messages)
            > config.max_segment_ms - self.rolling_jitter_ms
        )
        return (
            self.size > config.segment_bytes - params.messages_size
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_convert_to_relative_offset(params.max_offset_in_messages)
        )

    def on_become_inactive_segment(self) -> None:
        """Final time-index entry, then trim both indexes to their entries (Kafka's roll)."""
        self._forget_tail()
        ts = self.max_timestamp_and_offset_so_far
        self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size(sync=False)  # fsynced with the segment, in the background
        self.time_index.trim_to_valid_size(sync=False)

    def resize_indexes(self, max_index_size: int) -> None:
        """Reopen the indexes for appends: the segment is (again) the active one."""
        self.offset_index.resize(max_index_size)
        self.time_index.resize(max_index_size)
        self._max_ts = self.time_index.last_entry if self._max_ts is None else self._max_ts

    # -- read ----------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is >= ``offset``, found from the sparse index.

        If the index points at something that is not a batch boundary, or at a batch that starts after
        the entry's offset (a corrupt index that slipped past the sanity check: the scan would skip
        the wanted offsets), fall back to a scan from the start of the file rather than serve wrong data.
        """
        tail_last, tail = self._tail
        if tail_last:
            if offset > tail_last[-1]:  # the tail ends the segment: nothing holds the offset
                return None
            i = bisect_left(tail_last, offset)
            base, position, size = tail[i]
            # batch i is the first with last offset >= offset when batch i-1 is in the tail too, or when the
            # offset is inside batch i; else an older batch may hold it: the index finds that one
            if (i > 0 or offset >= base) and position >= starting_position:
                return LogOffsetPosition(base, position, size)
        hint = self.offset_index.lookup(offset)
        position = max(hint.position, starting_position)
        try:
            return self._search_from(offset, position, hint.offset if position > starting_position else None)
        except INVALID_DATA:
            if position == starting_position:
                raise
            log.warning("offset index %s does not point at the batch of offset %d; scanning %s from the start",
                        self.offset_index.path, offset, self.log.path)
            return self._search_from(offset, starting_position)

    def _forget_tail(self) -> None:
        self._tail = ([], [])

    def _search_from(self, offset: int, position: int, entry_offset: int | None = None) -> LogOffsetPosition | None:
        """``entry_offset``: the index entry ``position`` came from; the batch there must not start after it."""
        for pos, header in self.log.iter_headers(position):
            if entry_offset is not None:
                if header.base_offset > entry_offset:
                    raise CorruptRecordError(f"index entry for offset {entry_offset} points at a batch starting "
                                             f"at offset {header.base_offset}", pos)
                entry_offset = None
            if header.last_offset >= offset:
                return LogOffsetPosition(header.base_offset, pos, header.size)
        return None

    def _whole_batches_end(self, start: int, limit: int) -> int:
        """The largest batch boundary in ``(start, limit]``, or ``start`` if the first batch is larger."""
        end = start
        hint = self.offset_index.lookup_by_position(limit)
        if hint is not None and start < hint.position <= limit:
            end = hint.position
        try:
            for pos, header in self.log.iter_headers(end):
                if pos + header.size > limit:
                    break
                end = pos + header.size
        except INVALID_DATA:
            if end == start:
                raise
            # A corrupt index entry pointed inside a batch: scan from the first batch instead.
            log.warning("offset index %s has a position inside a batch; scanning %s from position %d",
                        self.offset_index.path, self.log.path, start)
            end = start
            for pos, header in self.log.iter_headers(start):
                if pos + header.size > limit:
                    break
                end = pos + header.size
        return end

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False
    ) -> FetchDataInfo | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        ``max_position`` caps the read (the high watermark's position for consumers). With
        ``min_one_message`` the first batch is returned even when it alone exceeds ``max_size``
        (so a consumer never stalls on a large batch). ``None`` means the offset is past this
        segment's data.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment {self.log.path}")
        max_position = self.size if max_position is None else min(max_position, self.size)
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self.base_offset, start.position)
        if start.position >= max_position:
            return FetchDataInfo(metadata, FileSlice(self.log, start.position, 0))
        limit = min(start.position + max_size, max_position)
        end = self._whole_batches_end(start.position, limit)
        if end == start.position and min_one_message and start.position + start.size <= max_position:
            end = start.position + start.size
        return FetchDataInfo(metadata, FileSlice(self.log, start.position, end - start.position))

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset if the segment is empty)."""
        last = self.offset_index.entry(self.offset_index.entries - 1) if self.offset_index.entries else None
        next_offset = self.base_offset
        for _, header in self.log.iter_headers(last.position if last else 0):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        """The first record with ``timestamp`` >= the target and offset >= ``starting_offset``.

        Only the one batch that holds the answer is decoded (ListOffsets is not a hot path).
        """
        ts_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_offset.offset, starting_offset)).position
        for pos, header in self.log.iter_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            batch = decode_batch(self.log.read(pos, header.size), verify_crc=False)
            for record in batch.records:
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    epoch = header.partition_leader_epoch
                    return TimestampAndOffset(record.timestamp, record.offset, epoch if epoch >= 0 else None)
        return None

    # -- recovery and truncation ---------------------------------------------------------------

    def sanity_check(self) -> None:
        """Cheap checks of index files against the log (Kafka's sanityCheck, plus a boundary check)."""
        for path in (self.offset_index.path, self.time_index.path):
            if not path.exists():
                raise CorruptIndexError(f"missing index file {path}")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()
        if self.offset_index.entries:
            last = self.offset_index.entry(self.offset_index.entries - 1)
            try:
                header = self.log.read_header(last.position)
            except INVALID_DATA as e:
                raise CorruptIndexError(f"{self.offset_index.path}: last entry is not a batch: {e}") from e
            if not header.base_offset <= last.offset <= header.last_offset:
                raise CorruptIndexError(
                    f"{self.offset_index.path}: last entry offset {last.offset} is not in the batch "
                    f"[{header.base_offset}, {header.last_offset}] at position {last.position}"
                )

    def recover(self, on_batch: RecoverCallback | None = None) -> int:
        """Rebuild all indexes from the ``.log`` and cut it after the last valid batch.

        Returns the number of bytes truncated (a torn write or a corrupt tail). ``on_batch`` lets
        the owner rebuild producer state and leader epochs from the same single pass.
        """
        self._forget_tail()
        self.offset_index.resize(self.config.segment_index_bytes)
        self.time_index.resize(self.config.segment_index_bytes)
        self.offset_index.truncate()
        self.time_index.truncate()
        self.txn_index.reset()
        valid_bytes = 0
        last_index_entry = 0
        max_ts = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        previous_last_offset = self.base_offset - 1
        # Without compaction a segment's batches are contiguous from its base offset (the file is named
        # after the first batch); a compacted log only has increasing offsets.
        contiguous = "compact" not in self.config.cleanup_policy
        try:
            for position, header, batch in self.log.iter_batches(0, verify_crc=True):
                # The base offset lies outside the CRC: a flipped bit there passes the CRC check, and
                # would then either crash the index rebuild (an offset not above the last entry) or
                # serve records under wrong offsets. Offsets must follow on and fit the segment.
                follows = header.base_offset == previous_last_offset + 1 if contiguous \
                    else header.base_offset > previous_last_offset
                if not follows or header.last_offset - self.base_offset > INT32_MAX:
                    raise CorruptRecordError(
                        f"batch offsets [{header.base_offset}, {header.last_offset}] do not follow offset "
                        f"{previous_last_offset} in segment {self.base_offset}", position)
                previous_last_offset = header.last_offset
                if header.max_timestamp > max_ts.timestamp:
                    max_ts = TimestampOffset(header.max_timestamp, header.last_offset)
                # A sparse index may stay sparser: entries are placed differently after a reopen (and
                # segment.index.bytes may have shrunk), so the rebuilt ones need not fit - skip, never fail.
                if valid_bytes - last_index_entry > self.config.index_interval_bytes \
                        and not self.offset_index.is_full and not self.time_index.is_full:
                    self.offset_index.append(header.last_offset, position)
                    self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                    last_index_entry = valid_bytes
                valid_bytes += header.size
                if on_batch is not None:
                    on_batch(self, header, batch)
        except INVALID_DATA as e:  # TruncatedBatchError is a CorruptRecordError
            log.warning("found invalid data in %s after %d valid bytes: %s", self.log.path, valid_bytes, e)
        truncated = self.log.size - valid_bytes
        if truncated:
            self.log.truncate_to(valid_bytes)
        self._max_ts = max_ts
        self._bytes_since_last_index_entry = valid_bytes - last_index_entry
        self._rolling_based_loaded = False
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Drop everything at or above ``offset`` (which must start a batch); returns bytes removed."""
        mapping = self.translate_offset(offset)
        self._forget_tail()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if mapping is None:
            return 0
        removed = self.log.truncate_to(mapping.position)
        self._bytes_since_last_index_entry = 0
        if self.size == 0:
            self.created_ms = self._clock.milliseconds()
            self._rolling_based_timestamp = None
            self._rolling_based_loaded = True
        else:
            self._rolling_based_loaded = False
        self._max_ts = self._scan_max_timestamp()
        return removed

    def _scan_max_timestamp(self) -> TimestampOffset:
        best = self.time_index.last_entry
        start = self.offset_index.lookup(best.offset).position if self.time_index.entries else 0
        for _, header in self.log.iter_headers(start):
            if header.max_timestamp > best.timestamp:
                best = TimestampOffset(header.max_timestamp, header.last_offset)
        return best

    # -- lifecycle -----------------------------------------------------------------------------

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Clean close: final time-index entry and trimmed indexes, so reopen needs no scan."""
        if self.time_index.writable:
            ts = self.max_timestamp_and_offset_so_far
            self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.flush()
        self.log.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def close_handlers(self) -> None:
        """Release file handles without writing anything (a log directory that failed)."""
        self.log.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def _all_files(self) -> list[tuple[str, object]]:
        return [("log", self.log), ("index", self.offset_index), ("timeindex", self.time_index),
                ("txnindex", self.txn_index)]

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment, e.g. to ``.deleted`` before asynchronous removal."""
        for _, f in self._all_files():
            path: Path = f.path  # type: ignore[attr-defined]
            name = path.name
            if old_suffix and not name.endswith(old_suffix):
                continue
            base = name[: len(name) - len(old_suffix)] if old_suffix else name
            f.rename_to(path.with_name(base + new_suffix))  # type: ignore[attr-defined]

    def mark_deleted(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()  # reopened from its new path by a reader that still needs it
        self.change_file_suffixes("", DELETED_SUFFIX)

    def delete_if_exists(self) -> None:
        for _, f in self._all_files():
            try:
                f.delete_if_exists()  # type: ignore[attr-defined]
            except OSError as e:
                raise KafkaStorageError(f"cannot delete {f.path}: {e}") from e  # type: ignore[attr-defined]
