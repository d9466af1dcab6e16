"""Kafka's RemoteLogManagerTest vectors for lineage checks, highest remote offset and retention planning."""

from __future__ import annotations

import uuid

import pytest

from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from strata.tiered.expiration import LogSnapshot, plan_expiration
from strata.tiered.lineage import (
    build_filtered_leader_epoch_map,
    find_highest_remote_offset,
    is_remote_segment_within_leader_epochs,
)

TP = TopicIdPartition(uuid.UUID(int=7), "t", 0)
S = RemoteLogSegmentState


def seg(start: int, end: int, epochs: dict[int, int], state: S = S.COPY_SEGMENT_FINISHED, size: int = 100,
        max_ts: int = 1000) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TP), start, end, max_ts, 1, 0, size, epochs,
                                    state)


def test_filtered_leader_epoch_map_drops_epochs_without_records() -> None:
    raw = {0: 0, 1: 0, 2: 0, 3: 30, 4: 40, 5: 60, 6: 60, 7: 70, 8: 70}
    assert build_filtered_leader_epoch_map(raw) == {2: 0, 3: 30, 4: 40, 6: 60, 8: 70}


LINEAGE = {0: 0, 1: 10, 2: 20, 3: 30, 4: 40, 5: 50, 7: 70}


@pytest.mark.parametrize(("start", "end", "epochs", "expected"), [
    (15, 35, {1: 15, 2: 20, 3: 30}, True),
    (15, 19, {1: 15}, True),
    (0, 5, {0: 0}, True),
    (70, 75, {7: 70}, True),
    (15, 29, {1: 15, 2: 20}, True),
    (55, 85, {5: 55, 6: 60, 7: 70}, False),  # epoch 6 is not in the lineage
    (85, 95, {7: 85}, False),  # ends at or past the log end offset
])
def test_remote_segment_within_leader_epochs(start: int, end: int, epochs: dict[int, int], expected: bool) -> None:
    assert is_remote_segment_within_leader_epochs(seg(start, end, epochs), 90, LINEAGE) is expected


def test_find_highest_remote_offset() -> None:
    entries = [(0, 0), (1, 50), (2, 100)]
    assert find_highest_remote_offset(entries, 150, lambda e: None) == (-1, -1)
    assert find_highest_remote_offset(entries, 150, {0: 49, 1: 80}.get) == (80, 1)
    # unclean election: epoch 1 ended at 90 locally but remote holds up to 95 for it
    assert find_highest_remote_offset([(0, 0), (1, 50), (2, 90)], 150, {1: 95}.get) == (89, 1)


def snapshot(**kw: int) -> LogSnapshot:
    base = {"epoch_entries": [(0, 0)], "log_end_offset": 100, "log_start_offset": 0, "only_local_size": 0,
            "retention_ms": -1, "retention_bytes": -1, "now_ms": 10_000}
    base.update(kw)
    return LogSnapshot(**base)  # type: ignore[arg-type]


def test_time_retention_deletes_oldest_and_moves_log_start() -> None:
    segments = [seg(0, 9, {0: 0}, max_ts=100), seg(10, 19, {0: 10}, max_ts=200), seg(20, 29, {0: 20}, max_ts=9000)]
    plan = plan_expiration(segments, snapshot(retention_ms=5000))
    assert sorted(md.start_offset for md in plan.to_delete) == [0, 10]
    assert plan.new_log_start_offset == 20
    assert plan.metadata_count == 3 and plan.remote_size == 300


def test_size_retention_counts_local_data_too() -> None:
    segments = [seg(0, 9, {0: 0}), seg(10, 19, {0: 10}), seg(20, 29, {0: 20})]
    plan = plan_expiration(segments, snapshot(retention_bytes=250, only_local_size=100))
    # 300 remote + 100 local - 250 = 150 over: one 100-byte segment goes, the next would overshoot
    assert [md.start_offset for md in plan.to_delete] == [0]
    assert plan.new_log_start_offset == 10


def test_size_retention_ignores_segments_below_the_log_start() -> None:
    """A pass that moved the log start to 10 and died before deleting [0, 9]: the next pass deletes that
    segment for the log start, and keeps 250 bytes of what the log holds (counting [0, 9] in the size
    would delete [10, 19] too and keep 200)."""
    segments = [seg(0, 9, {0: 0}), seg(10, 19, {0: 10}), seg(20, 29, {0: 20})]
    plan = plan_expiration(segments, snapshot(retention_bytes=250, only_local_size=100, log_start_offset=10))
    assert [md.start_offset for md in plan.to_delete] == [0]
    assert plan.new_log_start_offset is None


def test_log_start_breach_and_retries_and_copy_in_progress() -> None:
    below = seg(0, 9, {0: 0})
    half_deleted = seg(10, 19, {0: 10}, state=S.DELETE_SEGMENT_STARTED)
    copying = seg(30, 39, {0: 30}, state=S.COPY_SEGMENT_STARTED)
    kept = seg(20, 29, {0: 20})
    plan = plan_expiration([below, half_deleted, kept, copying], snapshot(log_start_offset=15))
    assert {md.start_offset for md in plan.to_delete} == {0, 10}
    assert plan.new_log_start_offset is None


def test_nothing_to_plan_without_segments() -> None:
    plan = plan_expiration([], snapshot(retention_ms=1))
    assert plan.to_delete == [] and plan.metadata_count == 0
