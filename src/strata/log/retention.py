"""Which local segments may be deleted: pure functions over a snapshot of the log's state.

Kafka's ``UnifiedLog.deletableSegments`` walks segments oldest first and stops at the first one
that must stay. A segment may go only if (1) the high watermark has passed its end (nothing a
consumer has not been allowed to see is deleted), (2) the rule at hand says so, (3) it is not the
last, empty segment, and (4) with tiering on, its last offset is already in remote storage or the
whole segment is below the log start (Kafka's ``isSegmentEligibleForDeletion``).
Tiered logs apply ``local.retention.*`` here (remote expiry applies ``retention.*``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strata.config import LogConfig
from strata.log.segment import LogSegment

Predicate = Callable[[LogSegment, "LogSegment | None"], bool]


@dataclass(frozen=True, slots=True)
class RetentionView:
    segments: list[LogSegment]
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    local_log_start_offset: int
    config: LogConfig
    remote_log_enabled: bool = False
    highest_offset_in_remote_storage: int = -1

    @property
    def retention_ms(self) -> int:
        """``local.retention.ms`` while segments are copied; with copying off (KIP-950), ``retention.ms``."""
        return self.config.local_retention_ms_effective if self.copy_enabled else self.config.retention_ms

    @property
    def retention_bytes(self) -> int:
        return self.config.local_retention_bytes_effective if self.copy_enabled else self.config.retention_bytes

    @property
    def copy_enabled(self) -> bool:
        return self.remote_log_enabled and not self.config.remote_log_copy_disable


def deletable_segments(view: RetentionView, predicate: Predicate) -> list[LogSegment]:
    out = []
    segments = view.segments
    for i, segment in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper_bound = nxt.base_offset if nxt is not None else view.log_end_offset
        is_last_and_empty = nxt is None and segment.size == 0
        # Kafka's isSegmentEligibleForDeletion: uploaded, or wholly below the log start. A segment that
        # DeleteRecords put below the log start before it was uploaded is never copied (the copy task
        # starts at the log start), so without the second rule it would stay on disk for ever.
        below_log_start = nxt is not None and nxt.base_offset <= view.log_start_offset
        tiered = not view.copy_enabled or 0 < upper_bound <= view.highest_offset_in_remote_storage + 1 \
            or below_log_start
        if view.high_watermark >= upper_bound and not is_last_and_empty and tiered and predicate(segment, nxt):
            out.append(segment)
        else:
            break
    return out


def time_breached(view: RetentionView, now_ms: int) -> list[LogSegment]:
    retention_ms = view.retention_ms
    if retention_ms < 0:
        return []
    return deletable_segments(view, lambda s, _n: now_ms - s.largest_timestamp > retention_ms)


def size_breached(view: RetentionView) -> list[LogSegment]:
    retention_bytes = view.retention_bytes
    if retention_bytes < 0:
        return []
    diff = sum(s.size for s in view.segments) - retention_bytes
    if diff <= 0:
        return []

    def predicate(segment: LogSegment, _next: LogSegment | None) -> bool:
        nonlocal diff
        if diff - segment.size >= 0:
            diff -= segment.size
            return True
        return False

    return deletable_segments(view, predicate)


def log_start_breached(view: RetentionView) -> list[LogSegment]:
    """Segments entirely below the log start (local log start when tiered)."""
    start = view.local_log_start_offset if view.remote_log_enabled else view.log_start_offset
    return deletable_segments(view, lambda _s, n: n is not None and n.base_offset <= start)


def should_roll_active_for_offload(view: RetentionView, now_ms: int) -> bool:
    """Kafka's RollAndOffloadActiveSegment: a tiered log whose *active* segment breaches local
    retention rolls it, so the next copy run uploads it and the next retention run deletes it.

    Only when retention would have reached the active segment: every older segment is deletable
    (already uploaded), everything in it is committed, and it is not empty.
    """
    if not view.copy_enabled or not view.segments:
        return False
    active = view.segments[-1]
    older = view.segments[:-1]
    if active.size == 0 or view.high_watermark < view.log_end_offset:
        return False
    if older and active.base_offset - 1 > view.highest_offset_in_remote_storage:
        return False
    if view.retention_ms >= 0 and now_ms - active.largest_timestamp > view.retention_ms:
        return True
    if view.retention_bytes >= 0:
        remaining = sum(s.size for s in view.segments) - view.retention_bytes - sum(s.size for s in older)
        return remaining - active.size >= 0
    return False
