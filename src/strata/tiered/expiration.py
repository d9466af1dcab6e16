"""Remote retention (Kafka's ``RLMExpirationTask``): which remote segments to delete, and the new
log start offset. Planning is a pure function of the partition's metadata and a snapshot of its
log state taken on the event loop, so it can run on the expiration pool and be unit tested.

``retention.ms`` and ``retention.bytes`` apply across both tiers: the size counted is the local
data not yet uploaded plus the remote data, and segments go oldest first. Segments wholly below
the log start offset (DeleteRecords, or local data dropped past total retention) always go.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from strata.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState
from strata.tiered.lineage import build_filtered_leader_epoch_map, is_remote_segment_within_leader_epochs

S = RemoteLogSegmentState


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """What expiration needs from the log, read on the event loop."""

    epoch_entries: list[tuple[int, int]]
    log_end_offset: int
    log_start_offset: int
    only_local_size: int  # bytes of local segments not yet in remote storage
    retention_ms: int
    retention_bytes: int
    now_ms: int


@dataclass(slots=True)
class ExpirationPlan:
    to_delete: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    new_log_start_offset: int | None = None
    metadata_count: int = 0
    remote_size: int = 0  # COPY_FINISHED + DELETE_STARTED bytes (Kafka's RemoteLogSizeBytes)


def plan_expiration(segments: Iterable[RemoteLogSegmentMetadata], snap: LogSnapshot) -> ExpirationPlan:
    """Kafka's ``cleanupExpiredRemoteLogSegments`` over one listing of the partition's segments."""
    plan = ExpirationPlan()
    alive = [md for md in segments if md.state is not S.DELETE_SEGMENT_FINISHED]
    plan.metadata_count = len(alive)
    plan.remote_size = sum(md.segment_size_in_bytes for md in alive
                           if md.state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED))
    if not alive:
        return plan
    lineage = build_filtered_leader_epoch_map(snap.epoch_entries)
    valid_finished = [md for md in alive if md.state is S.COPY_SEGMENT_FINISHED
                      and is_remote_segment_within_leader_epochs(md, snap.log_end_offset, lineage)]
    cleanup_until = snap.now_ms - snap.retention_ms if snap.retention_ms > -1 else None
    remaining = 0
    if snap.retention_bytes >= 0:
        # Only what the log still holds counts: a segment wholly below the log start is deleted in this
        # pass anyway (a pass that moved the log start and then crashed, or failed, before its deletes
        # leaves such segments FINISHED). Kafka counts them too, so retention.bytes then deletes live data
        # the log had to keep (the crash suite saw fewer than retention.bytes bytes kept after a restart).
        total = snap.only_local_size + sum(md.segment_size_in_bytes for md in valid_finished
                                           if md.end_offset >= snap.log_start_offset)
        remaining = max(0, total - snap.retention_bytes)
    chosen: dict[object, RemoteLogSegmentMetadata] = {}
    log_start = snap.log_start_offset
    new_start = None
    stop = False
    for md in sorted(alive, key=lambda m: (m.start_offset, m.end_offset)):
        sid = md.remote_log_segment_id
        if md.state is S.DELETE_SEGMENT_STARTED:
            chosen[sid] = md  # a delete that failed half way: retry it
            continue
        if md.state is S.COPY_SEGMENT_STARTED:
            continue  # being copied, or dangling after a crash: the copy task owns these
        if md.end_offset < log_start:
            chosen[sid] = md
            continue
        if stop:
            continue
        valid = is_remote_segment_within_leader_epochs(md, snap.log_end_offset, lineage)
        delete = False
        if valid:
            if cleanup_until is not None and md.max_timestamp_ms < cleanup_until:
                delete = True
            elif remaining > 0 and remaining - md.segment_size_in_bytes >= 0:
                remaining -= md.segment_size_in_bytes
                delete = True
            if delete:
                new_start = max(new_start or 0, md.end_offset + 1)
                chosen[sid] = md
        if not delete and valid:
            stop = True  # retention stops at the first valid segment it keeps
    earliest_epoch = min(lineage) if lineage else None
    if earliest_epoch is not None:  # epochs an unclean election left behind
        for md in alive:
            if md.state is S.COPY_SEGMENT_FINISHED and max(md.segment_leader_epochs) < earliest_epoch:
                chosen.setdefault(md.remote_log_segment_id, md)
    plan.to_delete = list(chosen.values())
    if new_start is not None and new_start > snap.log_start_offset:
        plan.new_log_start_offset = new_start
    return plan
