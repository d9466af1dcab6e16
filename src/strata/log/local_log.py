"""``LocalLog``: one partition directory of segments; append, roll, read, truncate, delete.

It knows nothing of producers, epochs or tiers (that is :mod:`strata.log.partition_log`); it
keeps the segment map, the log end offset and the recovery point, and deletes segments Kafka's
way: rename every file to ``.deleted`` at once (so a crash cannot resurrect half a segment), then
remove them after ``file.delete.delay.ms`` so readers holding a slice finish first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from strata.common import Clock, Scheduler
from strata.common.crashpoints import crash_point
from strata.config import LogConfig
from strata.errors import KafkaStorageError, OffsetOutOfRangeError
from strata.log.file_records import FetchDataInfo, FileSlice, LogOffsetMetadata
from strata.log.segment import BatchList, LogSegment, Records
from strata.log.segments import LogSegments

log = logging.getLogger(__name__)


class LocalLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        recovery_point: int,
        next_offset: int,
        clock: Clock,
        scheduler: Scheduler,
    ) -> None:
        self.dir = directory
        self.config = config
        self.segments = segments
        self.recovery_point = recovery_point
        self._clock = clock
        self._scheduler = scheduler
        self._next_offset = next_offset
        self.last_flush_ms = clock.milliseconds()

    # -- offsets -------------------------------------------------------------------------------

    def _metadata_for_end(self, next_offset: int) -> LogOffsetMetadata:
        active = self.segments.active
        return LogOffsetMetadata(next_offset, active.base_offset, active.size)

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._metadata_for_end(self._next_offset)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.config = config

    # -- append and roll -----------------------------------------------------------------------

    def append(self, last_offset: int, records: Records, batches: BatchList) -> None:
        self.segments.active.append(records, batches)
        self._next_offset = last_offset + 1

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, log end offset)``."""
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self.segments.active
        if active.base_offset == new_base and active.size == 0:
            # An empty active segment already sits at this offset (KAFKA-6388): reuse it.
            log.warning("trying to roll a new segment at %d, but the empty active segment is already there",
                        new_base)
            return active
        if new_base in self.segments:
            raise KafkaStorageError(
                f"trying to roll a new segment at {new_base} but a segment with that base offset exists"
            )
        for stale in LogSegment.file_paths(self.dir, new_base):
            if stale.exists():  # leftovers of an earlier crash with nothing valid in them
                log.warning("deleting stale file %s before rolling", stale)
                stale.unlink()
        active.on_become_inactive_segment()
        crash_point("log.roll.before_new_segment")  # old indexes trimmed, no new segment yet
        segment = LogSegment(self.dir, new_base, self.config, self._clock, create=True)
        self.segments.add(segment)
        log.info("rolled new log segment at offset %d in %s", new_base, self.dir.name)
        return segment

    # -- read ----------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_length: int,
        min_one_message: bool,
        max_offset_metadata: LogOffsetMetadata,
        local_log_start_offset: int,
    ) -> FetchDataInfo:
        """Whole batches from ``start_offset`` up to ``max_offset_metadata`` (exclusive)."""
        end = self.log_end_offset_metadata
        if start_offset == end.message_offset or start_offset == max_offset_metadata.message_offset:
            return FetchDataInfo(LogOffsetMetadata(start_offset, end.segment_base_offset, end.relative_position),
                                 None)
        if start_offset > end.message_offset or start_offset < local_log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.dir.name}: local log is "
                f"[{local_log_start_offset}, {end.message_offset})"
            )
        max_offset = max_offset_metadata.message_offset
        segment = self.segments.floor(start_offset)
        while segment is not None:
            if segment.base_offset >= max_offset and segment.base_offset > start_offset:
                break
            max_position = self._max_position(segment, max_offset)
            info = segment.read(start_offset, max_length, max_position, min_one_message)
            if info is not None:
                return info
            segment = self.segments.higher(segment.base_offset)
        return FetchDataInfo(LogOffsetMetadata(start_offset), None)

    def _max_position(self, segment: LogSegment, max_offset: int) -> int:
        """Byte position in ``segment`` where offsets reach ``max_offset`` (HW/LSO bound)."""
        nxt = self.segments.higher(segment.base_offset)
        if nxt is not None and nxt.base_offset <= max_offset:
            return segment.size
        if max_offset >= self.log_end_offset:
            return segment.size
        found = segment.translate_offset(max_offset)
        return found.position if found is not None else segment.size

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Segment and byte position of ``offset`` (for the HW and LSO)."""
        if offset >= self.log_end_offset:
            return self.log_end_offset_metadata
        segment = self.segments.floor(offset)
        if segment is None:
            return LogOffsetMetadata(offset)
        found = segment.translate_offset(offset)
        return LogOffsetMetadata(offset, segment.base_offset, found.position if found else segment.size)

    def slice_of(self, segment: LogSegment) -> FileSlice:
        return FileSlice(segment.log, 0, segment.size)

    # -- flush ---------------------------------------------------------------------------------

    def flush(self, offset: int) -> None:
        """fsync every segment holding offsets in [recovery point, ``offset``) and move the point."""
        if offset <= self.recovery_point:
            return
        for segment in self.segments.values_from(self.recovery_point, offset):
            segment.flush()
        self.recovery_point = offset
        self.last_flush_ms = self._clock.milliseconds()

    # -- deletion and truncation ---------------------------------------------------------------

    def remove_and_delete_segments(self, segments: Iterable[LogSegment], reason: str) -> None:
        for segment in list(segments):
            self.segments.remove(segment.base_offset)
            log.info("deleting segment %s of %s: %s", segment.base_offset, self.dir.name, reason)
            segment.mark_deleted()
            crash_point("log.delete.after_rename")  # files renamed .deleted, log start not yet moved
            self._scheduler.schedule(f"delete-{segment.log.path.name}", segment.delete_if_exists,
                                     self.config.file_delete_delay_ms)

    def truncate_to(self, offset: int) -> list[LogSegment]:
        """Remove everything at or above ``offset``; returns the segments deleted whole."""
        doomed = [s for s in self.segments if s.base_offset > offset]
        self.remove_and_delete_segments(doomed, f"truncation to {offset}")
        active = self.segments.active
        active.truncate_to(offset)
        if not active.offset_index.writable:
            active.resize_indexes(self.config.segment_index_bytes)
        self._next_offset = offset
        self.recovery_point = min(self.recovery_point, offset)
        return doomed

    def truncate_full_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (e.g. a log start past the end)."""
        doomed = list(self.segments)
        new_segment = LogSegment(self.dir, offset, self.config, self._clock, create=True) \
            if offset not in self.segments else None
        self.remove_and_delete_segments([s for s in doomed if s.base_offset != offset], "full truncation")
        if new_segment is None:
            existing = self.segments.active
            existing.truncate_to(existing.base_offset)
        else:
            self.segments.add(new_segment)
        self._next_offset = offset
        self.recovery_point = offset

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def close_handlers(self) -> None:
        for segment in self.segments:
            segment.close_handlers()
