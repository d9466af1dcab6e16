"""An upload counts only once the metadata shows it COPY_SEGMENT_FINISHED (found by the nemesis).

A leader that did not yet know it had been replaced took the new leader's upload in flight for a dangling one
and wrote DELETE_SEGMENT_STARTED for it; the new leader's COPY_SEGMENT_FINISHED that followed was dropped by
the metadata's state machine, yet the new leader counted the segment as copied, and its local retention then
deleted offsets that existed nowhere else: a hole in the log. ``_copy_sync`` now confirms the FINISHED state
and otherwise fails the copy, which the next run repeats.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.unit.tiered.test_delete_remote_partitions import FakeRSM, _rlm, _rlmm

from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from strata.tiered.manager import UploadAbandonedError
from strata.tiered.metadata.memory import InMemoryMetadataTopic

S = RemoteLogSegmentState


class UploadingRSM(FakeRSM):
    def copy_log_segment_data(self, metadata: Any, data: Any) -> bytes | None:
        return None


def _segment(tip: TopicIdPartition) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), 0, 9, -1, 1, 1000, 100, {0: 0})


def test_an_upload_another_broker_started_deleting_is_not_counted(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rlmm = _rlmm(tmp_path, InMemoryMetadataTopic())
    rlm = _rlm(tmp_path, UploadingRSM(), rlmm)
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    rlmm.on_partition_leadership_changes({tip}, set())
    md = _segment(tip)
    checked = rlm._abandon_if_taken_over

    def then_deleted_by_another_broker(m: RemoteLogSegmentMetadata) -> None:
        checked(m)  # still COPY_SEGMENT_STARTED when checked; the other broker's delete lands right after
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            m.remote_log_segment_id, 1500, None, S.DELETE_SEGMENT_STARTED, 2))

    monkeypatch.setattr(rlm, "_abandon_if_taken_over", then_deleted_by_another_broker)
    with pytest.raises(UploadAbandonedError):
        rlm._copy_sync(md, None)


def test_a_confirmed_upload_counts(tmp_path: Path) -> None:
    rlmm = _rlmm(tmp_path, InMemoryMetadataTopic())
    rlm = _rlm(tmp_path, UploadingRSM(), rlmm)
    tip = TopicIdPartition(uuid.uuid4(), "t", 0)
    rlmm.on_partition_leadership_changes({tip}, set())
    md = _segment(tip)
    rlm._copy_sync(md, None)
    states = {m.remote_log_segment_id: m.state for m in rlmm.list_remote_log_segments(tip)}
    assert states == {md.remote_log_segment_id: S.COPY_SEGMENT_FINISHED}
