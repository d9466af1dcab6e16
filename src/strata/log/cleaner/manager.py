"""Kafka's ``LogCleanerManager``: which compacted log to clean next, and how far each one is clean.

Per log directory the ``cleaner-offset-checkpoint`` (Kafka's format) holds, per partition, the
offset below which the log is clean (the *first dirty offset*). A log is cleanable from there up to
its first *uncleanable* offset: never the active segment, never past the last stable offset (open
transactions stay as they are) and never a segment holding a record younger than
``min.compaction.lag.ms``. The filthiest log (largest share of cleanable bytes) above its
``min.cleanable.dirty.ratio`` is cleaned first; a log holding a record older than
``max.compaction.lag.ms`` is cleaned whatever its ratio, and so - a Strata addition - is a log whose
tombstones' delete horizon has passed (Kafka waits for new dirty data, so with no new writes its
tombstones stay for ever).

Selection reads live log state, so it runs on the log's thread (the event loop); the cleaner threads
call in through :meth:`grab_filthiest_compacted_log`. The state below is shared with them under a lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from strata.common import TopicPartition
from strata.errors import KafkaStorageError
from strata.log.checkpoints import OffsetCheckpointFile
from strata.log.cleaner.cleaner import LogToClean
from strata.log.cleaner.remote import RemoteSegmentRef
from strata.log.errors import CleaningAbortedError, CorruptCheckpointError
from strata.log.partition_log import PartitionLog

log = logging.getLogger("strata.log.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def cleanable_offsets(plog: PartitionLog, last_clean_offset: int | None, now_ms: int,
                      remote: Sequence[RemoteSegmentRef] = ()) -> OffsetsToClean:
    """Kafka's ``LogCleanerManager.cleanableOffsets``, across both tiers for a tiered log.

    A tiered log is cleaned only below its highest remote offset: a segment is uploaded as it is, never
    while the cleaner rewrites it, and the remote copy is then cleaned like the local one. ``remote``
    (the leader of a tiered compacted log): its remote segments, whose clean offset (reset when this
    broker became leader) may pull the first dirty offset down into the remote tier, and whose max
    timestamps count for ``min.compaction.lag.ms``."""
    log_start = plog.log_start_offset
    checkpointed = last_clean_offset if last_clean_offset is not None else log_start
    tier = plog.remote_cleaning
    if remote and tier is not None:
        checkpointed = max(log_start, min(checkpointed, tier.clean_offset))
    force = False
    if checkpointed < log_start:
        first_dirty, force = log_start, True
    elif checkpointed > plog.log_end_offset:
        log.warning("%s: the cleaner's checkpointed offset %d is past the log end %d (truncated?): cleaning from "
                    "the log start %d", plog.topic_partition, checkpointed, plog.log_end_offset, log_start)
        first_dirty, force = log_start, True
    else:
        first_dirty = checkpointed
    segments = plog.segments
    active = segments[-1]
    bounds = [plog.last_stable_offset, active.base_offset]
    if plog.remote_log_enabled:
        bounds.append(plog.highest_offset_in_remote_storage + 1)
    lag_ms = max(plog.config.min_compaction_lag_ms, 0)
    if lag_ms > 0:
        for ref in remote:
            if ref.end_offset >= first_dirty and ref.start_offset < plog.local_log_start_offset \
                    and ref.max_timestamp_ms > now_ms - lag_ms:
                bounds.append(ref.start_offset)
                break
        for segment in _non_active_from(segments, first_dirty):
            if segment.largest_timestamp > now_ms - lag_ms:
                bounds.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, min(bounds), force)


def max_compaction_delay_ms(plog: PartitionLog, first_dirty_offset: int, now_ms: int) -> int:
    """How far past ``max.compaction.lag.ms`` the oldest dirty record is (0: not yet)."""
    lag_ms = max(plog.config.max_compaction_lag_ms, 0)
    if lag_ms >= now_ms:  # the default (Long.MAX_VALUE): no segment can be that old, no header to read
        return 0
    firsts = []
    for segment in _non_active_from(plog.segments, first_dirty_offset):
        if segment.size:
            ts = segment.log.read_header(0).max_timestamp
            if ts > 0:
                firsts.append(ts)
    if not firsts:
        return 0
    clean_until = now_ms - lag_ms
    earliest = min(firsts)
    return clean_until - earliest if earliest < clean_until else 0


def _non_active_from(segments: list, offset: int) -> list:  # type: ignore[type-arg]
    """Kafka's ``nonActiveLogSegmentsFrom``: from the segment holding ``offset``, the active one excluded."""
    start = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= offset:
            start = i
    return segments[start:-1]


def build_log_to_clean(plog: PartitionLog, first_dirty: int, uncleanable: int,
                       need_compaction_now: bool, remote: Sequence[RemoteSegmentRef] = ()) -> LogToClean:
    """Kafka's ``LogToClean`` with ``calculateCleanableBytes``: the uncleanable bound moves down to the
    base of the segment holding it; clean bytes are the segments starting below the first dirty offset,
    cleanable bytes those overlapping ``[first dirty, first uncleanable)``. The remote segments below the
    local log start count too (``remote``, a tiered log's leader), so ``min.cleanable.dirty.ratio`` keeps
    its meaning across tiers."""
    segments = plog.segments
    non_active = _non_active_from(segments, uncleanable)
    first_uncleanable = non_active[0].base_offset if non_active else segments[-1].base_offset
    if uncleanable <= plog.local_log_start_offset:  # a bound inside the remote tier (min.compaction.lag.ms)
        first_uncleanable = min(first_uncleanable, uncleanable)
    low = min(first_dirty, first_uncleanable)
    clean_bytes = cleanable = 0
    local_start = plog.local_log_start_offset
    for ref in remote:
        if ref.start_offset >= local_start:
            break
        if ref.end_offset < first_dirty:
            clean_bytes += ref.size
        elif ref.start_offset < first_uncleanable:
            cleanable += ref.size
    for i, s in enumerate(segments):
        if s.base_offset < first_dirty:
            clean_bytes += s.size
        reaches_low = i + 1 == len(segments) or segments[i + 1].base_offset > low
        if s.base_offset < first_uncleanable and reaches_low:
            cleanable += s.size
    return LogToClean(plog, first_dirty, first_uncleanable, clean_bytes, cleanable, need_compaction_now, segments,
                      list(remote), local_start)


class LogCleanerManager:
    def __init__(self, log_dirs: list[Path], logs: Callable[[], Mapping[TopicPartition, PartitionLog]],
                 dir_of: Callable[[TopicPartition], Path | None]) -> None:
        self._lock = threading.Lock()
        self._logs = logs
        self._dir_of = dir_of
        self._checkpoints = {d: OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT) for d in log_dirs}
        self._offsets: dict[Path, dict[TopicPartition, int]] = {d: self._read(f) for d, f in self._checkpoints.items()}
        self._in_progress: set[TopicPartition] = set()
        self._aborted: set[TopicPartition] = set()
        self._uncleanable: dict[TopicPartition, Path] = {}
        self._horizons: dict[TopicPartition, int] = {}
        # what the metrics report
        self.dirtiest_ratio = 0.0
        self.time_of_last_run_ms = 0
        self.max_compaction_delay_ms = 0

    def log_of(self, tp: TopicPartition) -> PartitionLog | None:
        return self._logs().get(tp)

    @staticmethod
    def _read(checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        try:
            return checkpoint.read()
        except CorruptCheckpointError as e:  # only speeds cleaning up: the logs are cleaned from their start
            log.warning("ignoring corrupt cleaner checkpoint %s: %s", checkpoint.path, e)
            return {}

    # -- checkpoints ----------------------------------------------------------------------------

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: o for offsets in self._offsets.values() for tp, o in offsets.items()}

    def _write(self, log_dir: Path) -> None:
        """Under the lock. A failed write keeps the offsets in memory: the next write retries."""
        checkpoint = self._checkpoints.get(log_dir)
        if checkpoint is None:
            return
        try:
            checkpoint.write(dict(self._offsets[log_dir]))
        except (OSError, KafkaStorageError) as e:
            log.error("cannot write %s: %s", checkpoint.path, e)

    def update_checkpoint(self, tp: TopicPartition, offset: int | None) -> None:
        """Set (or with None remove) the clean offset of ``tp`` in its directory's checkpoint."""
        log_dir = self._dir_of(tp)
        with self._lock:
            dirs = [log_dir] if log_dir is not None else list(self._offsets)
            for d in dirs:
                offsets = self._offsets.get(d)
                if offsets is None:
                    continue
                if offset is None:
                    if offsets.pop(tp, None) is None:
                        continue
                else:
                    offsets[tp] = offset
                self._write(d)

    def maybe_truncate_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        """A truncated log: its clean offset may not stay past the new end (Kafka ``maybeTruncateCheckpoint``)."""
        with self._lock:
            current = next((o[tp] for o in self._offsets.values() if tp in o), None)
        if current is not None and current > offset:
            self.update_checkpoint(tp, offset)

    def remove_partition(self, tp: TopicPartition) -> None:
        """The log is gone (deleted, or moved away): forget its state; a cleaning in progress aborts."""
        self.abort_cleaning(tp)
        with self._lock:
            self._uncleanable.pop(tp, None)
            self._horizons.pop(tp, None)
            for d, offsets in self._offsets.items():
                if offsets.pop(tp, None) is not None:
                    self._write(d)

    # -- choosing -------------------------------------------------------------------------------

    def grab_filthiest_compacted_log(self, now_ms: int) -> LogToClean | None:
        """On the log's thread. Marks the chosen log in progress; the caller must call :meth:`done_cleaning`."""
        checkpoints = self.all_cleaner_checkpoints()
        with self._lock:
            self.time_of_last_run_ms = now_ms
            busy = set(self._in_progress) | set(self._uncleanable)
            horizons = dict(self._horizons)
        candidates: list[LogToClean] = []
        max_delay = 0
        for tp, plog in self._logs().items():
            if "compact" not in plog.config.cleanup_policy or tp in busy:
                continue
            tier = plog.remote_cleaning
            remote: list[RemoteSegmentRef] = []
            if plog.remote_log_enabled and tier is not None and tier.can_rewrite():
                try:
                    remote = tier.segments()
                except Exception as e:  # noqa: BLE001 - the metadata still loading, say: next round
                    log.debug("%s: remote segments not available to the cleaner yet: %s", tp, e)
                    continue
            offsets = cleanable_offsets(plog, checkpoints.get(tp), now_ms, remote)
            if offsets.force_update_checkpoint:
                self.update_checkpoint(tp, offsets.first_dirty_offset)
            delay = max_compaction_delay_ms(plog, offsets.first_dirty_offset, now_ms)
            max_delay = max(max_delay, delay)
            horizon_passed = tp in horizons and horizons[tp] <= now_ms
            ltc = build_log_to_clean(plog, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset,
                                     delay > 0 or horizon_passed, remote)
            if ltc.total_bytes > 0:
                candidates.append(ltc)
        self.max_compaction_delay_ms = max_delay
        self.dirtiest_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
        cleanable = [c for c in candidates
                     if (c.need_compaction_now and (c.cleanable_bytes > 0 or c.log.topic_partition in horizons))
                     or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio]
        if not cleanable:
            return None
        filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
        tp = filthiest.log.topic_partition
        with self._lock:
            self._in_progress.add(tp)
            self._aborted.discard(tp)
            self._horizons.pop(tp, None)
        return filthiest

    def done_cleaning(self, tp: TopicPartition, end_offset: int | None, delete_horizon_ms: int | None) -> None:
        """The cleaning of ``tp`` ended; ``end_offset``: the log is clean below it (None: no progress)."""
        with self._lock:
            self._in_progress.discard(tp)
            aborted = tp in self._aborted
            self._aborted.discard(tp)
            if delete_horizon_ms is not None and not aborted:
                self._horizons[tp] = delete_horizon_ms
        if end_offset is not None and not aborted:
            self.update_checkpoint(tp, end_offset)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Ask a cleaning of ``tp`` in progress to stop (its swap would be refused anyway)."""
        with self._lock:
            if tp in self._in_progress:
                self._aborted.add(tp)

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._lock:
            if tp in self._aborted:
                raise CleaningAbortedError(f"the cleaning of {tp} was aborted")

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        log_dir = self._dir_of(tp)
        with self._lock:
            if log_dir is not None:
                self._uncleanable[tp] = log_dir

    def uncleanable(self) -> dict[TopicPartition, Path]:
        with self._lock:
            return dict(self._uncleanable)
