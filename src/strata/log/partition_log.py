"""``PartitionLog``: the UnifiedLog role. One partition's log with every offset Kafka tracks.

    log_start_offset <= local_log_start_offset <= high_watermark <= log_end_offset
         (both tiers)       (first local offset)     (visible to consumers)

``last_stable_offset`` further bounds ``read_committed`` readers while transactions are open, and
``highest_offset_in_remote_storage`` (set by the tiering layer) gates local deletion: with tiering
on, a segment leaves the local disk only once its last offset is in remote storage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING

from strata.common import Clock, Scheduler, TopicPartition
from strata.common.crashpoints import crash_point
from strata.config import LogConfig
from strata.errors import OffsetOutOfRangeError, RecordBatchTooLargeError
from strata.log import retention
from strata.log.checkpoints import fsync_dir, fsync_file_and_dir
from strata.log.errors import CleaningAbortedError
from strata.log.file_records import FetchDataInfo, LogOffsetMetadata
from strata.log.files import CLEANED_SUFFIX, SWAP_SUFFIX
from strata.log.leader_epoch import LeaderEpochFileCache
from strata.log.local_log import LocalLog
from strata.log.producer_state import AppendOrigin, ProducerStateManager
from strata.log.producers import apply_producer_updates, rebuild_producer_state, validate_producers
from strata.log.segment import LogSegment, RollParams, TimestampAndOffset
from strata.log.txn_index import AbortedTxn
from strata.log.validator import (
    LogAppendInfo,
    analyze_and_validate,
    assign_offsets,
    fast_plain_append,
    header_append_info,
    recompress_to_target,
)
from strata.protocol.records.batch import BatchHeader

if TYPE_CHECKING:
    from strata.log.cleaner.remote import RemoteTierCleaning

log = logging.getLogger(__name__)


class FetchIsolation(IntEnum):
    LOG_END = 0  # followers and internal readers
    HIGH_WATERMARK = 1  # read_uncommitted consumers
    TXN_COMMITTED = 2  # read_committed consumers


class ListOffsetsSpec(IntEnum):
    """Kafka's special ListOffsets timestamps."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL = -4
    LATEST_TIERED = -5


class PartitionLog:
    def __init__(
        self,
        topic_partition: TopicPartition,
        local_log: LocalLog,
        log_start_offset: int,
        producer_state: ProducerStateManager,
        leader_epoch_cache: LeaderEpochFileCache,
        clock: Clock,
        scheduler: Scheduler,
        *,
        high_watermark: int | None = None,
        remote_log_enabled: bool = False,
    ) -> None:
        self.topic_partition = topic_partition
        self.local_log = local_log
        self.producer_state = producer_state
        self.leader_epoch_cache = leader_epoch_cache
        self._clock = clock
        self._scheduler = scheduler
        self.remote_log_enabled = remote_log_enabled
        # remote.recovery: this leader's log is about to start where the remote tier ends; until then appends
        # are refused (their offsets would collide with the restored records)
        self.remote_restore_pending = False
        first_local = local_log.segments.active.base_offset if not local_log.segments.first else \
            local_log.segments.first.base_offset  # type: ignore[union-attr]
        self.log_start_offset = log_start_offset if remote_log_enabled else max(log_start_offset, first_local)
        self.local_log_start_offset = max(first_local, self.log_start_offset)
        self.highest_offset_in_remote_storage = -1
        self._high_watermark = LogOffsetMetadata(self.log_start_offset)
        self.update_high_watermark(self.log_end_offset if high_watermark is None else high_watermark)
        self._unflushed_messages = 0
        # Called with (topic partition, offset) after a truncation: the log manager's hook, so the
        # log cleaner aborts a cleaning of the truncated range and its clean offset stays within the log.
        self.on_truncated: Callable[[TopicPartition, int], None] | None = None
        # A tiered compacted log: its remote tier as the log cleaner sees it (set by the tiering layer while
        # this broker leads or follows the partition; None: the cleaner cleans the local segments only).
        self.remote_cleaning: RemoteTierCleaning | None = None

    # -- offsets -------------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self.local_log.dir

    @property
    def config(self) -> LogConfig:
        return self.local_log.config

    @property
    def log_end_offset(self) -> int:
        return self.local_log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark.message_offset

    @property
    def recovery_point(self) -> int:
        return self.local_log.recovery_point

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return min(first_unstable, self.high_watermark)

    @property
    def size_in_bytes(self) -> int:
        return self.local_log.segments.size_in_bytes()

    @property
    def segments(self) -> list[LogSegment]:
        return list(self.local_log.segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to ``[log_start_offset, log_end_offset]``; returns the value kept."""
        bounded = max(self.log_start_offset, min(offset, self.log_end_offset))
        self._high_watermark = LogOffsetMetadata(bounded)
        return bounded

    def update_config(self, config: LogConfig) -> None:
        self.local_log.update_config(config)

    # -- append --------------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate, assign offsets, append; the HW is left to the caller (replication decides it)."""
        now = self._clock.milliseconds()
        if origin is AppendOrigin.CLIENT:
            info = fast_plain_append(records, self.log_end_offset, leader_epoch, self.config, now)
            if info is not None:
                return self._append(records, info, origin, now, plain=True)
        batches = analyze_and_validate(records, self.config, origin, now, self.topic_partition)
        records, batches = recompress_to_target(records, batches, self.config, now, self.topic_partition)
        info = assign_offsets(records, batches, self.log_end_offset, leader_epoch, self.config, now)
        return self._append(records, info, origin, now)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches whose offsets are already assigned (replication, tools, recovery tests)."""
        now = self._clock.milliseconds()
        batches = analyze_and_validate(records, self.config, AppendOrigin.REPLICATION, now)
        first = batches[0][1].base_offset
        if first < self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"out of order append at {first} to {self.topic_partition}: log end offset is {self.log_end_offset}"
            )
        segment_bytes = self.config.segment_bytes
        if len(records) <= segment_bytes or len(batches) == 1:
            return self._append(records, header_append_info(records, batches, len(records)),
                                AppendOrigin.REPLICATION, now)
        # A fetch answer (up to replica.fetch.max.bytes) holds many batches; appended as one it would land in one
        # segment, past segment.bytes. Appended in runs of whole batches that each fit, the follower rolls where
        # the size says, as the leader did (Kafka's follower refuses such a chunk with RecordBatchTooLarge).
        view = memoryview(records)
        info = None
        for start, end, run in _runs_within(batches, len(records), segment_bytes):
            part = view[start:end]
            rebased = [(pos - start, header) for pos, header in run]
            appended = self._append(part, header_append_info(part, rebased, end - start), AppendOrigin.REPLICATION,
                                    now)
            if info is None:
                info = appended
            else:
                info.last_offset = appended.last_offset
                info.valid_bytes += appended.valid_bytes
                info.batches.extend((pos + start, h) for pos, h in appended.batches)
                if appended.max_timestamp > info.max_timestamp:
                    info.max_timestamp = appended.max_timestamp
                    info.offset_of_max_timestamp = appended.offset_of_max_timestamp
        assert info is not None
        info.chunks = [records]
        return info

    def _append(self, buf: bytes | bytearray | memoryview, info: LogAppendInfo, origin: AppendOrigin,
                now_ms: int, plain: bool = False) -> LogAppendInfo:
        """``plain``: batches without a producer id, so there is no producer state to check or update."""
        updates = None if plain else validate_producers(self.producer_state, buf, info.batches, origin)
        if updates is not None and updates.duplicate is not None:
            dup = updates.duplicate
            info.first_offset = dup.last_offset - dup.offset_delta
            info.last_offset = dup.last_offset
            info.max_timestamp = dup.timestamp
            info.duplicate = True
            info.log_start_offset = self.log_start_offset
            return info
        if info.valid_bytes > self.config.segment_bytes and origin is not AppendOrigin.REPLICATION:
            # Kafka's UnifiedLog.append: one segment must be able to hold an append, or segment.bytes would be
            # silently exceeded by every oversized batch (each one rolled into a segment of its own)
            raise RecordBatchTooLargeError(
                f"Message batch size is {info.valid_bytes} bytes in append to partition {self.topic_partition}, "
                f"which exceeds the maximum configured segment size of {self.config.segment_bytes}.")
        self._maybe_roll(info.valid_bytes, info, now_ms)
        segment = self.local_log.segments.active
        self.local_log.append(info.last_offset, info.chunks, info.batches)
        latest_epoch = self.leader_epoch_cache.latest_epoch
        for _, header in info.batches:
            if header.partition_leader_epoch >= 0 and header.partition_leader_epoch != latest_epoch:
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
                latest_epoch = self.leader_epoch_cache.latest_epoch
        if updates is not None and updates.infos:
            apply_producer_updates(self.producer_state, updates, segment)
        self.producer_state.update_map_end_offset(info.last_offset + 1)
        info.log_start_offset = self.log_start_offset
        self._unflushed_messages += info.num_messages
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return info

    def _maybe_roll(self, messages_size: int, info: LogAppendInfo, now_ms: int) -> None:
        segment = self.local_log.segments.active
        params = RollParams(info.max_timestamp, info.last_offset, messages_size, now_ms)
        if segment.should_roll(params):
            self.roll(info.first_offset)

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """New active segment; snapshot producer state at its base; flush the old one in the background.

        The snapshot is fsynced with the old segment, on the scheduler's thread, not here (Kafka 3.7,
        KAFKA-15046): under a heavy write load an fsync on the event loop stalled every request of the
        broker for up to 300 ms at each roll. A crash before that flush loses at most this snapshot
        (recovery then rebuilds the producer state from the one before and the segment)."""
        new_segment = self.local_log.roll(expected_next_offset)
        crash_point("log.roll.before_snapshot")  # new segment created, no producer snapshot at its base yet
        self.producer_state.update_map_end_offset(new_segment.base_offset)
        snapshot = self.producer_state.take_snapshot(durable=False)
        base = new_segment.base_offset
        self._scheduler.schedule(f"flush-{self.topic_partition}", lambda: self._flush_quietly(base, snapshot))
        return new_segment

    # -- read ----------------------------------------------------------------------------------

    def read(self, start_offset: int, max_length: int, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
             min_one_message: bool = True, upper_bound: int | None = None) -> FetchDataInfo:
        """Local read; an offset below ``local_log_start_offset`` raises OffsetOutOfRangeError. ``upper_bound``:
        an offset the read stops at besides the isolation's (a switched partition's classic end)."""
        if isolation is FetchIsolation.LOG_END:
            max_metadata = self.local_log.log_end_offset_metadata
        else:
            bound = self.high_watermark if isolation is FetchIsolation.HIGH_WATERMARK else self.last_stable_offset
            max_metadata = LogOffsetMetadata(bound)
        if upper_bound is not None and upper_bound < max_metadata.message_offset:
            max_metadata = LogOffsetMetadata(upper_bound)
        return self.local_log.read(start_offset, max_length, min_one_message, max_metadata,
                                   self.local_log_start_offset)

    def aborted_transactions_upper_bound(self, segment_base_offset: int) -> int:
        """The bound of the aborted transactions a read needs, given the segment that served it (a read
        returns batches of one segment): that segment's successor's base offset, or the LSO from the last
        segment. Kafka bounds it the same way (``LocalLog.addAbortedTransactions``); the LSO for every read
        made each read_committed fetch scan the transaction index of every later segment and return every
        later abort."""
        following = self.local_log.segments.higher(segment_base_offset)
        bound = following.base_offset if following is not None else self.last_stable_offset
        return min(bound, self.last_stable_offset)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        aborted: list[AbortedTxn] = []
        for segment in self.local_log.segments.values_from(start_offset):
            found, complete = segment.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
            aborted.extend(found)
            if complete:
                break
        return aborted

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets for one partition (the special values of :class:`ListOffsetsSpec` included)."""
        epoch_of = self.leader_epoch_cache.epoch_for_offset
        if timestamp == ListOffsetsSpec.EARLIEST:
            return TimestampAndOffset(-1, self.log_start_offset, epoch_of(self.log_start_offset))
        if timestamp == ListOffsetsSpec.EARLIEST_LOCAL:
            return TimestampAndOffset(-1, self.local_log_start_offset, epoch_of(self.local_log_start_offset))
        if timestamp == ListOffsetsSpec.LATEST:
            return TimestampAndOffset(-1, self.log_end_offset, self.leader_epoch_cache.latest_epoch)
        if timestamp == ListOffsetsSpec.LATEST_TIERED:
            offset = self.highest_offset_in_remote_storage
            return TimestampAndOffset(-1, offset, epoch_of(offset) if offset >= 0 else None)
        if timestamp == ListOffsetsSpec.MAX_TIMESTAMP:
            return self._max_timestamp_offset()
        for segment in self.local_log.segments:
            if segment.largest_timestamp >= timestamp and segment.size > 0:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def _max_timestamp_offset(self) -> TimestampAndOffset | None:
        """MAX_TIMESTAMP (-3) over the *local* segments: the first record holding the largest timestamp
        (the earliest segment with it, then the first such record in it, as Kafka answers), with the
        leader epoch of its batch; None when no local segment holds records.

        With tiering the largest timestamp may sit in a remote-only segment (KAFKA-17552): the ListOffsets
        handler compares this answer with the remote segments' (``RemoteLogManager.find_max_timestamp``),
        which needs a store read and so cannot happen here, under the synchronous log.

        A segment whose maximum belongs to a record below the log start (DeleteRecords inside it) yields
        nothing: the segment with the next largest maximum is tried, as the remote search does (the first
        segment's records above the log start are not rescanned for a lower maximum).
        """
        candidates = sorted((s for s in self.local_log.segments if s.size),
                            key=lambda s: (-s.max_timestamp_so_far, s.base_offset))
        if not candidates:
            return None
        for segment in candidates:
            found = segment.find_offset_by_timestamp(segment.max_timestamp_so_far, self.log_start_offset)
            if found is not None:
                return found
        # No record at or above the log start (DeleteRecords up to the log end): the time index's entry,
        # as this method always answered then.
        ts = candidates[0].max_timestamp_and_offset_so_far
        return TimestampAndOffset(ts.timestamp, ts.offset, self.leader_epoch_cache.epoch_for_offset(ts.offset))

    # -- retention and log start ---------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Apply ``retention.ms``, ``retention.bytes`` (local variants when tiered) and the log start."""
        now = self._clock.milliseconds()
        if "delete" not in self.config.cleanup_policy:
            deleted = self._delete_segments(retention.log_start_breached(self._retention_view()), "log start")
            if self.remote_log_enabled and not self.config.remote_log_copy_disable:
                # A tiered compacted log (KIP-1272): nothing expires, but the local copies of uploaded
                # segments go by local.retention.* like any tiered log's (the remote copy stays).
                deleted += self._delete_segments(retention.time_breached(self._retention_view(), now),
                                                 "local retention time breach")
                deleted += self._delete_segments(retention.size_breached(self._retention_view()),
                                                 "local retention size breach")
            return deleted
        view = self._retention_view()
        deleted = self._delete_segments(retention.time_breached(view, now), "retention time breach")
        deleted += self._delete_segments(retention.size_breached(self._retention_view()), "retention size breach")
        deleted += self._delete_segments(retention.log_start_breached(self._retention_view()),
                                         "log start offset breach")
        if self.remote_log_enabled:
            deleted += self._delete_beyond_total_retention(now)
            if retention.should_roll_active_for_offload(self._retention_view(), now):
                log.info("rolling the active segment of %s: it breaches local retention, so it is offloaded",
                         self.topic_partition)
                self.roll()
        return deleted

    def _delete_beyond_total_retention(self, now_ms: int) -> int:
        """Tiered logs: drop local segments that ``retention.ms``/``retention.bytes`` expire in *both* tiers.

        Kafka keeps every segment that is not yet uploaded, so an object store outage fills the local
        disk without bound (KAFKA-19952). Data past the total retention would be expired from the
        remote tier right after its upload anyway: deleting it here, uploaded or not, and moving the
        log start past it, bounds the disk by the same rule users already set.
        """
        total = retention.RetentionView(
            segments=list(self.local_log.segments), log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark, log_start_offset=self.log_start_offset,
            local_log_start_offset=self.local_log_start_offset, config=self.config)
        deletable = retention.time_breached(total, now_ms) or retention.size_breached(total)
        if not deletable:
            return 0
        not_uploaded = [s for s in deletable if s.base_offset > self.highest_offset_in_remote_storage]
        if not_uploaded:
            log.warning("%s: deleting %d local segments never uploaded to remote storage: they are past "
                        "retention.ms/retention.bytes (is the remote store unavailable?)", self.topic_partition,
                        len(not_uploaded))
        count = self._delete_segments(deletable, "total retention breach", move_log_start=True)
        return count

    def _retention_view(self) -> retention.RetentionView:
        return retention.RetentionView(
            segments=list(self.local_log.segments), log_end_offset=self.log_end_offset,
            high_watermark=self.high_watermark, log_start_offset=self.log_start_offset,
            local_log_start_offset=self.local_log_start_offset, config=self.config,
            remote_log_enabled=self.remote_log_enabled,
            highest_offset_in_remote_storage=self.highest_offset_in_remote_storage,
        )

    def _delete_segments(self, deletable: list[LogSegment], reason: str, move_log_start: bool = False) -> int:
        if not deletable:
            return 0
        if len(deletable) == len(self.local_log.segments):
            new_segment = self.roll()  # a log always keeps one (active) segment
            if deletable[-1].base_offset == new_segment.base_offset:
                deletable = deletable[:-1]
        self.local_log.remove_and_delete_segments(deletable, reason)
        for segment in deletable:
            marked = self.producer_state.remove_and_mark_snapshot_for_deletion(segment.base_offset)
            if marked is not None:
                self._scheduler.schedule(f"delete-{marked.name}", lambda p=marked: p.unlink(missing_ok=True),
                                         self.config.file_delete_delay_ms)
        first = self.local_log.segments.active.base_offset if self.local_log.segments.first is None else \
            self.local_log.segments.first.base_offset
        self.local_log_start_offset = max(self.local_log_start_offset, first)
        copy_enabled = self.remote_log_enabled and not self.config.remote_log_copy_disable
        if move_log_start or not copy_enabled:  # only uploads keep the data below a local deletion
            self._increment_log_start_offset(first)
        return len(deletable)

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start to ``offset`` (at most the HW); returns the new log start."""
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot increment the log start offset of {self.topic_partition} to {offset}: it is "
                f"above the high watermark {self.high_watermark}"
            )
        self._increment_log_start_offset(offset)
        self._delete_segments(retention.log_start_breached(self._retention_view()), "log start offset breach")
        return self.log_start_offset

    # -- replication: follower truncation and log start (Kafka ``UnifiedLog.truncateTo`` ...) -----

    def truncate_to(self, offset: int) -> bool:
        """Drop every record at or above ``offset`` (a follower diverged from its leader, KIP-101).

        The leader-epoch cache loses its entries at or above ``offset`` and the producer state is
        rebuilt from the newest snapshot below it, so a producer's sequence continues from the
        records that are kept. Returns whether anything was dropped.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic_partition} to a negative offset {offset}")
        if offset >= self.log_end_offset:
            # Nothing to drop, but an epoch this replica led without writing may start at the end:
            # it must go, or OffsetForLeaderEpoch keeps answering from it (Kafka trims here too).
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset < self.local_log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        log.info("truncating %s to %d (log end %d)", self.topic_partition, offset, self.log_end_offset)
        self._notify_truncated(offset)
        self.local_log.truncate_to(offset)
        self.leader_epoch_cache.truncate_from_end(offset)
        rebuild_producer_state(self.local_log, self.producer_state, self.log_start_offset)
        if self.high_watermark > offset:
            self.update_high_watermark(offset)
        return True

    def _notify_truncated(self, offset: int) -> None:
        if self.on_truncated is not None:
            self.on_truncated(self.topic_partition, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the local log and restart it at ``offset`` (a follower far behind its leader's log
        start, or a replica built from the remote tier)."""
        log.info("truncating %s fully, restarting at %d", self.topic_partition, offset)
        self._notify_truncated(offset)
        self.local_log.truncate_full_and_start_at(offset)
        self.leader_epoch_cache.clear_and_flush()
        self.producer_state.truncate_full_and_start_at(offset)
        self.log_start_offset = offset
        self.local_log_start_offset = offset
        self._high_watermark = LogOffsetMetadata(offset)

    def restore_from_remote_tier(self, next_offset: int, log_start_offset: int, epochs: list[tuple[int, int]],
                                 producer_snapshot: bytes) -> None:
        """A follower below its leader's local log start (Kafka's ``buildRemoteLogAuxState``): the local log
        restarts empty at ``next_offset``, the offsets below it live in remote storage only (log start
        ``log_start_offset``), and the leader-epoch history and producer state at ``next_offset`` come from
        the remote segment ending just before it - so this replica can become leader, serve the remote
        tier and check producers' sequences without ever copying the data below."""
        self.truncate_fully_and_start_at(next_offset)
        for epoch, start in epochs:
            if start < next_offset:
                self.leader_epoch_cache.assign(epoch, start)
        self.producer_state.load_snapshot_at(next_offset, producer_snapshot)
        if self.remote_log_enabled:
            self.log_start_offset = min(max(log_start_offset, 0), next_offset)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._high_watermark = LogOffsetMetadata(next_offset)

    def restart_above_remote_tier(self, next_offset: int, log_start_offset: int, leader_epoch: int) -> None:
        """A diskless replica behind its WAL's start (a wiped disk, a new replica): the local log restarts
        empty at ``next_offset``; below it, from ``log_start_offset``, the data is in the remote tier. There
        is no producer state to rebuild (the coordinator, not this log, checks producers), and one leader
        epoch, ``leader_epoch``, covers everything from the log start (the remote segments' lineage)."""
        self.truncate_fully_and_start_at(next_offset)
        if self.remote_log_enabled:
            self.log_start_offset = min(max(log_start_offset, 0), next_offset)
        self.leader_epoch_cache.assign(leader_epoch, self.log_start_offset)

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """A follower learns its leader's log start (DeleteRecords, retention) through Fetch."""
        if offset > self.log_start_offset:
            self._increment_log_start_offset(min(offset, self.high_watermark))
            self._delete_segments(retention.log_start_breached(self._retention_view()), "log start offset breach")

    # -- log cleaner (Kafka ``UnifiedLog.replaceSegments``) -------------------------------------

    def check_segments_unchanged(self, old: list[LogSegment], sizes: list[int]) -> None:
        """Raise CleaningAbortedError unless ``old`` are still this log's non-active segments, unchanged."""
        segments = self.local_log.segments
        active = segments.active
        for segment, size in zip(old, sizes, strict=True):
            if segments.get(segment.base_offset) is not segment or segment.size != size or segment is active:
                raise CleaningAbortedError(f"{self.topic_partition}: segment {segment.base_offset} changed while "
                                           "it was cleaned")

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment], sizes: list[int]) -> None:
        """Swap ``cleaned`` (files ``.cleaned``) in for ``old``, on the log's thread, crash-safely.

        The cleaner read ``old`` with these ``sizes``; if the log has changed them since (retention
        deleted one, a follower truncated into one, the log was moved or deleted), the cleaning is
        void: raises CleaningAbortedError and leaves the log as it is. Otherwise Kafka's protocol:
        ``.cleaned`` -> ``.swap`` (from here a crash completes the swap at load), the new segment in
        the map, the old ones renamed ``.deleted`` (removed after ``file.delete.delay.ms``, so a read
        in flight finishes), ``.swap`` -> live names, then an fsync of the directory.
        """
        self.check_segments_unchanged(old, sizes)
        segments = self.local_log.segments
        cleaned.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        crash_point("cleaner.swap.after_swap_suffix")  # .swap and the old segments both on disk
        segments.add(cleaned)
        for segment in old:
            if segment.base_offset != cleaned.base_offset:
                segments.remove(segment.base_offset)
        deleted_not_replaced = [s for s in old if s.base_offset != cleaned.base_offset]
        for segment in old:
            segment.mark_deleted()
            crash_point("cleaner.swap.after_delete_old")  # some old segments renamed .deleted, .swap not final
            self._scheduler.schedule(f"delete-{segment.log.path.name}", segment.delete_if_exists,
                                     self.config.file_delete_delay_ms)
        cleaned.change_file_suffixes(SWAP_SUFFIX, "")
        fsync_dir(self.dir)  # the renames durable (Kafka's Utils.flushDir)
        for segment in deleted_not_replaced:
            marked = self.producer_state.remove_and_mark_snapshot_for_deletion(segment.base_offset)
            if marked is not None:
                self._scheduler.schedule(f"delete-{marked.name}", lambda p=marked: p.unlink(missing_ok=True),
                                         self.config.file_delete_delay_ms)

    # -- tiering hooks (called by the RemoteLogManager, on the event loop) -----------------------

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Only forward: a lower value would re-gate segments already known to be uploaded."""
        if offset > self.highest_offset_in_remote_storage:
            self.highest_offset_in_remote_storage = offset

    def update_log_start_offset_from_remote_tier(self, offset: int) -> None:
        """Remote retention expired data below ``offset`` (Kafka ``updateLogStartOffsetFromRemoteTier``)."""
        if self.remote_log_enabled:
            self._increment_log_start_offset(min(offset, self.high_watermark))

    def set_remote_log_enabled(self, enabled: bool) -> None:
        """KIP-950: tiering turned on, or off with its remote data deleted (the log start becomes local)."""
        self.remote_log_enabled = enabled
        if not enabled:
            self._increment_log_start_offset(self.local_log_start_offset)
            self.highest_offset_in_remote_storage = -1

    def _increment_log_start_offset(self, offset: int) -> None:
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        if not self.remote_log_enabled or offset > self.local_log_start_offset:
            self.local_log_start_offset = max(self.local_log_start_offset, offset)
        self.leader_epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)
        if self._high_watermark.message_offset < offset:
            self.update_high_watermark(offset)

    # -- flush and lifecycle -------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        self.local_log.flush(self.log_end_offset if offset is None else offset)
        self._unflushed_messages = 0

    def _flush_quietly(self, offset: int, snapshot: Path | None = None) -> None:
        if snapshot is not None:
            try:
                fsync_file_and_dir(snapshot)
            except FileNotFoundError:
                pass  # deleted meanwhile (truncation, retention): nothing left to make durable
            except OSError as e:
                log.warning("background fsync of producer snapshot %s failed: %s", snapshot, e)
        try:
            self.local_log.flush(offset)
        except OSError as e:  # the segment may have been deleted meanwhile
            log.warning("background flush of %s to %d failed: %s", self.topic_partition, offset, e)

    def close(self) -> None:
        """Clean close: producer snapshot at the log end, final index entries, trimmed indexes."""
        self.producer_state.update_map_end_offset(self.log_end_offset)
        self.producer_state.take_snapshot()
        self.flush()
        self.local_log.close()


def _runs_within(batches: list[tuple[int, BatchHeader]], total: int,
                 limit: int) -> Iterator[tuple[int, int, list[tuple[int, BatchHeader]]]]:
    """Consecutive runs of whole batches, each at most ``limit`` bytes (a larger batch is a run of its own):
    ``(start, end, batches)`` with positions into the buffer the batches were parsed from."""
    run: list[tuple[int, BatchHeader]] = []
    start = 0
    for i, (pos, header) in enumerate(batches):
        end = batches[i + 1][0] if i + 1 < len(batches) else total
        if run and end - start > limit:
            yield start, pos, run
            run, start = [], pos
        run.append((pos, header))
    if run:
        yield start, total, run
