"""The object-per-segment ``RemoteLogMetadataCache`` Strata had before issue 28, verbatim: the model the
columnar cache is held to (test_rlmm_segment_store.py). One ``RemoteLogSegmentMetadata`` per segment in
a dict, one :class:`RemoteLogLeaderEpochState` per epoch: Kafka's classes as written."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping

from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
)
from strata.tiered.metadata.cache import EpochStateSnapshot, RemoteLogLeaderEpochState

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


def _epoch_end_offset(md: RemoteLogSegmentMetadata, leader_epoch: int) -> int:
    """Last offset of ``leader_epoch`` within the segment: the next epoch's start - 1, else the segment end."""
    for epoch, start in md.segment_leader_epochs.items():  # ascending epochs
        if epoch > leader_epoch:
            return start - 1
    return md.end_offset


def _start_offset(md: RemoteLogSegmentMetadata) -> int:
    return md.start_offset


class ReferenceCache:
    """The segments of one user partition, with Kafka's lineage rules across leader epochs."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._id_to_segment_metadata: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._leader_epoch_entries: dict[int, RemoteLogLeaderEpochState] = {}
        self._initialized = threading.Event()

    # -- initialisation barrier (Kafka's CountDownLatch) --

    def mark_initialized(self) -> None:
        self._initialized.set()

    def is_initialized(self) -> bool:
        return self._initialized.is_set()

    # -- reads --

    def remote_log_segment_metadata(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` within ``leader_epoch``, else None."""
        with self._lock:
            return self._segment_for(leader_epoch, offset)

    def _segment_for(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        state = self._leader_epoch_entries.get(leader_epoch)
        if state is None:
            return None
        segment_id = state.floor_entry(offset)
        if segment_id is None:  # below the first offset of the epoch's segments
            return None
        md = self._id_to_segment_metadata[segment_id]
        return md if offset <= _epoch_end_offset(md, leader_epoch) else None

    def next_segment_with_txn_index(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """KIP-1058: from the segment holding ``offset``, the first one in the epoch with a non-empty txn index."""
        with self._lock:
            md = self._segment_for(leader_epoch, offset)
            while md is not None and md.txn_idx_empty:
                md = self._segment_for(leader_epoch, md.end_offset + 1)
            return md

    def list_all_remote_log_segments(self) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment not DELETE_SEGMENT_FINISHED, unsorted (Kafka iterates a hash map)."""
        with self._lock:
            return iter(list(self._id_to_segment_metadata.values()))

    def list_remote_log_segments(self, leader_epoch: int) -> Iterator[RemoteLogSegmentMetadata]:
        """The segments holding ``leader_epoch`` (any state but DELETE_FINISHED), by start offset."""
        with self._lock:
            state = self._leader_epoch_entries.get(leader_epoch)
            if state is None:
                return iter(())
            return iter(state.list_all_remote_log_segments(self._id_to_segment_metadata))

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """Highest offset of ``leader_epoch`` over segments that reached COPY_SEGMENT_FINISHED (never lowered)."""
        with self._lock:
            state = self._leader_epoch_entries.get(leader_epoch)
            return state.highest_log_offset if state is not None else None

    def remote_log_size(self, leader_epoch: int) -> int:
        """KIP-852: bytes of the segments listed for ``leader_epoch`` (STARTED and DELETE_STARTED included)."""
        with self._lock:
            return sum(md.segment_size_in_bytes for md in self.list_remote_log_segments(leader_epoch))

    def segment_metadata(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            return self._id_to_segment_metadata.get(segment_id)

    def __len__(self) -> int:
        return len(self._id_to_segment_metadata)

    # -- transitions --

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> None:
        """Track a COPY_SEGMENT_STARTED segment: listed, not readable, until COPY_SEGMENT_FINISHED."""
        if md.state is not _S.COPY_SEGMENT_STARTED:
            raise ValueError(f"Given remoteLogSegmentMetadata:{md} should have state as "
                             f"{_S.COPY_SEGMENT_STARTED.name} but it contains state as: {md.state.name}")
        with self._lock:
            segment_id = md.remote_log_segment_id
            existing = self._id_to_segment_metadata.get(segment_id)
            if not self._check_state_transition(existing.state if existing else None, md.state, segment_id):
                return
            for epoch in md.segment_leader_epochs:
                self._epoch_state(epoch).handle_segment_with_copy_segment_started_state(segment_id)
            self._id_to_segment_metadata[segment_id] = md

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a segment forward; an unknown segment raises RemoteResourceNotFoundError once initialised."""
        with self._lock:
            segment_id = update.remote_log_segment_id
            existing = self._id_to_segment_metadata.get(segment_id)
            if existing is None:
                if not self.is_initialized():
                    # Replaying: the segment's earlier events may be gone with the topic's retention.
                    log.debug("Dropping the event: %s as the base-metadata about the segment was already removed",
                              update)
                    return
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{segment_id}")
            if not self._check_state_transition(existing.state, update.state, segment_id):
                return
            target = update.state
            if target is _S.COPY_SEGMENT_STARTED:
                raise ValueError(f"metadataUpdate: {update} with state {_S.COPY_SEGMENT_STARTED.name} "
                                 "can not be updated")
            md = existing.create_with_updates(update)
            if target is _S.COPY_SEGMENT_FINISHED:
                self._handle_segment_with_copy_segment_finished_state(md)
            elif target is _S.DELETE_SEGMENT_STARTED:
                self._handle_segment_with_delete_segment_started_state(md)
            else:
                self._handle_segment_with_delete_segment_finished_state(md)

    def _handle_segment_with_copy_segment_finished_state(self, md: RemoteLogSegmentMetadata) -> None:
        segment_id = md.remote_log_segment_id
        epochs = list(md.segment_leader_epochs.items())
        for i, (epoch, start) in enumerate(epochs):
            epoch_end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else md.end_offset
            self._epoch_state(epoch).handle_segment_with_copy_segment_finished_state(start, segment_id, epoch_end)
        self._id_to_segment_metadata[segment_id] = md

    def _handle_segment_with_delete_segment_started_state(self, md: RemoteLogSegmentMetadata) -> None:
        segment_id = md.remote_log_segment_id
        for epoch, start in md.segment_leader_epochs.items():
            self._epoch_state(epoch).handle_segment_with_delete_segment_started_state(start, segment_id)
        self._id_to_segment_metadata[segment_id] = md

    def _handle_segment_with_delete_segment_finished_state(self, md: RemoteLogSegmentMetadata) -> None:
        segment_id = md.remote_log_segment_id
        for epoch in md.segment_leader_epochs:
            self._epoch_state(epoch).handle_segment_with_delete_segment_finished_state(segment_id)
        del self._id_to_segment_metadata[segment_id]

    def _epoch_state(self, epoch: int) -> RemoteLogLeaderEpochState:
        state = self._leader_epoch_entries.get(epoch)
        if state is None:
            state = self._leader_epoch_entries[epoch] = RemoteLogLeaderEpochState()
        return state

    @staticmethod
    def _check_state_transition(existing: RemoteLogSegmentState | None, target: RemoteLogSegmentState,
                                segment_id: RemoteLogSegmentId) -> bool:
        valid = RemoteLogSegmentState.is_valid_transition(existing, target)
        if not valid:
            log.error("Current state: %s can not be transitioned to target state: %s, segmentId: %s. "
                      "Dropping the event", existing.name if existing is not None else None, target.name, segment_id)
        return valid

    # -- exact export and import, for the RLMM's snapshot file --

    def snapshot(self) -> tuple[list[RemoteLogSegmentMetadata], dict[int, EpochStateSnapshot]]:
        """A consistent copy: the segments in insertion order and every epoch state."""
        with self._lock:
            return (list(self._id_to_segment_metadata.values()),
                    {epoch: state.snapshot() for epoch, state in self._leader_epoch_entries.items()})

    @classmethod
    def restore(cls, segments: list[RemoteLogSegmentMetadata],
                epochs: Mapping[int, EpochStateSnapshot]) -> ReferenceCache:
        cache = cls()
        cache._id_to_segment_metadata = {md.remote_log_segment_id: md for md in segments}
        cache._leader_epoch_entries = {epoch: RemoteLogLeaderEpochState.restore(s) for epoch, s in epochs.items()}
        return cache
