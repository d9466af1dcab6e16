"""Open a partition directory: Kafka's ``LogLoader``.

1. Remove leftovers: ``.deleted`` files (deletion was already decided), ``.cleaned`` files (a
   cleaning that had not begun its swap), ``.tmp`` checkpoint halves and index files with no
   ``.log``; complete a swap a crash interrupted (``.swap`` files, Kafka's protocol).
2. Open every segment; one whose indexes are missing or fail the sanity check is rebuilt.
3. After an unclean shutdown, recover every segment from the recovery point: re-check every
   batch's CRC, rebuild the indexes, cut a torn tail, and drop any segment after a corrupt one
   (its offsets could no longer be contiguous).
4. Rebuild producer state from the newest snapshot by replaying what follows it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from strata.common import Clock, Scheduler, TopicPartition
from strata.config import LogConfig
from strata.errors import KafkaStorageError
from strata.log.checkpoints import LeaderEpochCheckpointFile
from strata.log.errors import CorruptCheckpointError, CorruptIndexError, LogStateError
from strata.log.file_records import FileRecords
from strata.log.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_from_file_name,
)
from strata.log.leader_epoch import LeaderEpochFileCache
from strata.log.local_log import LocalLog
from strata.log.partition_log import PartitionLog
from strata.log.producer_state import ProducerStateManager
from strata.log.producers import rebuild_producer_state
from strata.log.segment import INVALID_DATA, LogSegment
from strata.log.segments import LogSegments
from strata.protocol.records import BatchHeader

log = logging.getLogger(__name__)


def load_partition_log(
    directory: Path,
    topic_partition: TopicPartition,
    config: LogConfig,
    clock: Clock,
    scheduler: Scheduler,
    *,
    log_start_offset: int = 0,
    recovery_point: int = 0,
    high_watermark: int | None = None,
    had_clean_shutdown: bool = False,
    remote_log_enabled: bool = False,
    producer_id_expiration_ms: int = 86_400_000,
) -> PartitionLog:
    directory.mkdir(parents=True, exist_ok=True)
    _remove_temporary_files(directory)
    epochs, epochs_lost = _open_leader_epochs(directory)
    producer_state = ProducerStateManager(directory, clock, producer_id_expiration_ms)
    segments = _open_segments(directory, config, clock, None if had_clean_shutdown else recovery_point)
    recovered: set[int] = set()
    if not had_clean_shutdown and len(segments):
        recovered = _recover_unflushed(segments, recovery_point, epochs, producer_state)
    if not len(segments):
        segments.add(LogSegment(directory, log_start_offset, config, clock, create=True))
    active = segments.active
    if not active.offset_index.writable:
        active.resize_indexes(config.segment_index_bytes)
    next_offset = active.read_next_offset()
    if recovered:
        for segment in segments:
            if segment.base_offset in recovered:
                segment.flush()
        recovery_point = next_offset
    recovery_point = min(recovery_point, next_offset) if not had_clean_shutdown else next_offset
    first_base = segments.first.base_offset  # type: ignore[union-attr]
    effective_start = log_start_offset if remote_log_enabled else max(log_start_offset, first_base)
    if epochs_lost:
        _rebuild_leader_epochs(epochs, segments, effective_start)
    epochs.truncate_from_end(next_offset)
    epochs.truncate_from_start(effective_start)
    local_log = LocalLog(directory, config, segments, recovery_point, next_offset, clock, scheduler)
    rebuild_producer_state(local_log, producer_state, effective_start, recovered)
    return PartitionLog(topic_partition, local_log, effective_start, producer_state, epochs, clock, scheduler,
                        high_watermark=high_watermark, remote_log_enabled=remote_log_enabled)


def _open_leader_epochs(directory: Path) -> tuple[LeaderEpochFileCache, bool]:
    """The partition's leader-epoch cache; a corrupt ``leader-epoch-checkpoint`` gives an empty one and True.

    Kafka fails the log directory here. Every batch carries the epoch that wrote it, so the history can
    be rebuilt from the segments instead (``_rebuild_leader_epochs``) without losing anything; the file
    is rewritten by the first assignment.
    """
    checkpoint = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
    try:
        return LeaderEpochFileCache(checkpoint), False
    except (CorruptCheckpointError, LogStateError) as e:
        log.warning("ignoring corrupt leader epoch checkpoint %s (%s): rebuilding it from the log's batches",
                    checkpoint.path, e)
        return LeaderEpochFileCache(checkpoint, load=False), True


def _rebuild_leader_epochs(epochs: LeaderEpochFileCache, segments: LogSegments, log_start_offset: int) -> None:
    """Replace the epoch history with the one the local batches carry (after recovery, so they are valid).

    The first epoch found is taken to start at the log start offset: for a tiered partition the offsets
    below the local log live in remote segments, whose epochs the log layer cannot see. In Strata's
    single-node broker the leader epoch never changes, so this is exact; with several epochs it keeps
    remote reads working for the epoch in force at the local log start.
    """
    epochs.clear()
    for segment in segments:
        for _, header in segment.log.iter_headers(0):
            if header.partition_leader_epoch >= 0:
                if epochs.is_empty:
                    epochs.assign(header.partition_leader_epoch, min(log_start_offset, header.base_offset))
                else:
                    epochs.assign(header.partition_leader_epoch, header.base_offset)
    log.info("rebuilt leader epochs of %s: %s", epochs.checkpoint.path.parent.name if epochs.checkpoint else "?",
             epochs.epoch_entries())


def _remove_temporary_files(directory: Path) -> None:
    """Leftovers of interrupted work, as Kafka's ``LogLoader`` treats them.

    ``.deleted``: a deletion already decided. ``.cleaned``: a cleaning that had not begun its swap - the
    old segments are intact, so the new ones go (and so does any ``.swap`` at or above the lowest of them,
    the rest of that same unfinished swap). The remaining ``.swap`` files are a swap that had begun:
    every old segment it replaces (any segment file with a base offset in the swap's offset range) is
    deleted and the ``.swap`` files take their live names, completing it.
    """
    cleaned_bases: list[int] = []
    swaps: list[Path] = []
    for path in directory.iterdir():
        name = path.name
        if name.endswith((DELETED_SUFFIX, ".tmp")):
            log.info("removing leftover file %s", path)
            path.unlink(missing_ok=True)
        elif name.endswith(CLEANED_SUFFIX):
            with contextlib.suppress(ValueError):
                cleaned_bases.append(offset_from_file_name(name))
            log.info("removing %s: a cleaning interrupted before its swap", path)
            path.unlink(missing_ok=True)
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(path)
    min_cleaned = min(cleaned_bases, default=None)
    kept = []
    for path in swaps:
        if min_cleaned is not None and offset_from_file_name(path.name) >= min_cleaned:
            log.info("removing %s: part of a swap interrupted before it began", path)
            path.unlink(missing_ok=True)
        else:
            kept.append(path)
    if kept:
        _complete_swaps(directory, kept)
    logs = {p.name[: -len(LOG_SUFFIX)] for p in directory.glob(f"*{LOG_SUFFIX}")}
    for path in directory.iterdir():
        name = path.name
        if name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)) and name.split(".")[0] not in logs:
            log.warning("removing index file %s that has no log file", path)
            path.unlink(missing_ok=True)


def _complete_swaps(directory: Path, swaps: list[Path]) -> None:
    low, high = None, None
    for path in swaps:
        if not path.name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = offset_from_file_name(path.name)
        end = base
        records = FileRecords(path)
        try:
            with contextlib.suppress(*INVALID_DATA):
                for _, header in records.iter_headers(0):
                    end = header.next_offset
        finally:
            records.close()
        low = base if low is None else min(low, base)
        high = end if high is None else max(high, end)
    if low is not None and high is not None:
        for path in directory.iterdir():
            if path.name.endswith(SWAP_SUFFIX) or not path.is_file():
                continue
            try:
                offset = offset_from_file_name(path.name)
            except ValueError:
                continue
            if low <= offset < high:
                log.info("deleting %s: a cleaning replaced it, its swap was interrupted", path)
                path.unlink(missing_ok=True)
    for path in swaps:
        final = path.with_name(path.name[: -len(SWAP_SUFFIX)])
        log.info("completing the interrupted swap of %s", final.name)
        os.replace(path, final)


def _open_segments(directory: Path, config: LogConfig, clock: Clock, recovery_point: int | None) -> LogSegments:
    """Open every segment; check the indexes of those recovery will not rebuild anyway.

    After an unclean shutdown every segment from the one holding ``recovery_point`` is recovered,
    and the active one's index is still preallocated (zero-filled), so checking it would only
    report a false corruption and rebuild it twice.
    """
    segments = LogSegments()
    bases = []
    for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        try:
            bases.append((offset_from_file_name(path.name), path))
        except ValueError:
            log.warning("ignoring %s: not named after an offset", path)
    first_recovered = None
    if recovery_point is not None and bases:
        first_recovered = max((b for b, _ in bases if b <= recovery_point), default=bases[0][0])
    for base, path in bases:
        segment = LogSegment(directory, base, config, clock)
        if first_recovered is not None and base >= first_recovered:
            segments.add(segment)
            continue
        try:
            segment.sanity_check()
        except (CorruptIndexError, KafkaStorageError) as e:
            log.warning("rebuilding the indexes of %s: %s", path, e)
            truncated = segment.recover()
            if truncated:
                log.warning("truncated %d invalid bytes from %s while rebuilding its indexes", truncated, path)
        segments.add(segment)
    return segments


def _recover_unflushed(segments: LogSegments, recovery_point: int, epochs: LeaderEpochFileCache,
                       producer_state: ProducerStateManager) -> set[int]:
    """Recover segments from the one holding the recovery point; returns their base offsets."""
    unflushed = segments.values_from(recovery_point)
    if not unflushed:
        return set()
    first_base = unflushed[0].base_offset
    # Snapshots newer than the first recovered offset describe data we are about to re-check:
    # rebuild that state from the recovered log instead (Kafka deletes them the same way).
    for offset in producer_state.snapshot_offsets():
        if offset > first_base:
            marked = producer_state.remove_and_mark_snapshot_for_deletion(offset)
            if marked is not None:
                marked.unlink(missing_ok=True)
    epochs.truncate_from_end(first_base)

    def assign_epoch(_segment: LogSegment, header: BatchHeader, _batch: memoryview) -> None:
        if header.partition_leader_epoch >= 0:
            epochs.assign(header.partition_leader_epoch, header.base_offset)

    recovered = set()
    for i, segment in enumerate(unflushed):
        log.info("recovering unflushed segment %d of %s", segment.base_offset, segment.dir.name)
        truncated = segment.recover(assign_epoch)
        recovered.add(segment.base_offset)
        if not truncated and i + 1 < len(unflushed):
            # Whole batches, but fewer than the next segment's name promises: the file lost its tail at a
            # batch boundary. The later segments are intact, so they stay (deleting them would lose more);
            # the offsets in between are gone, which an operator must hear about.
            end, following = segment.read_next_offset(), unflushed[i + 1].base_offset
            if end < following and "compact" not in segment.config.cleanup_policy:  # compaction leaves gaps
                log.warning("segment %d of %s ends at offset %d, the next starts at %d: offsets %d to %d are "
                            "missing", segment.base_offset, segment.dir.name, end, following, end, following - 1)
        if truncated:
            log.warning("truncated %d bytes of invalid data from segment %d of %s",
                        truncated, segment.base_offset, segment.dir.name)
            for later in unflushed[i + 1:]:
                log.warning("deleting segment %d after the corrupt one", later.base_offset)
                segments.remove(later.base_offset)
                later.delete_if_exists()
            break
    return recovered
