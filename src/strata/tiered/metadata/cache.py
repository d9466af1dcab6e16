"""Kafka's ``RemoteLogMetadataCache``, ``RemoteLogLeaderEpochState`` and ``RemotePartitionMetadataStore``.

The cache is the RLMM's answer to every read, so its semantics are Kafka's exactly, quirks included
(a reader can cross-reference the Java classes method by method):

* ``id_to_segment_metadata`` holds every segment not yet DELETE_SEGMENT_FINISHED;
* per leader epoch, a :class:`RemoteLogLeaderEpochState` maps the epoch's start offset within each
  COPY_SEGMENT_FINISHED segment to its id ("referenced"), and keeps the other live segments of the
  epoch (COPY_STARTED, DELETE_STARTED, superseded) as "unreferenced", so list calls still return
  them for cleanup. Epoch entries are never removed (Kafka's TODO KAFKA-12641);
* a COPY_SEGMENT_FINISHED segment supersedes the referenced segments at or after its epoch start
  while the epoch's highest offset does not exceed the new segment's end for that epoch (an upload by
  a new leader that covers what a lagging previous leader uploaded);
* invalid state transitions are logged and dropped, never raised, because they come from the
  metadata topic, where a retried or duplicated event is normal.

Visibility by state (Kafka's javadoc table)::

    method                              COPY_STARTED  COPY_FINISHED  DELETE_STARTED  DELETE_FINISHED
    remote_log_segment_metadata(e, o)   no            yes            no              no
    list_remote_log_segments(e)         yes           yes            yes             no
    list_all_remote_log_segments()      yes           yes            yes             no

Threading: the broker reads from several threads while the RLMM applies events, and one transition
touches several structures, so every public method of the cache takes the cache's lock; readers get
lists, never live views. Python has no sorted map, so the ``offsetToId`` NavigableMap is a sorted
key list (bisect) plus a dict; uploads arrive in offset order, so inserts are appends in practice.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from strata.tiered.api import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    RemoteStorageNotReadyError,
    TopicIdPartition,
)

__all__ = ["EpochStateSnapshot", "RemoteLogLeaderEpochState", "RemoteLogMetadataCache",
           "RemotePartitionMetadataStore"]

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


def _epoch_end_offset(md: RemoteLogSegmentMetadata, leader_epoch: int) -> int:
    """Last offset of ``leader_epoch`` within the segment: the next epoch's start - 1, else the segment end."""
    for epoch, start in md.segment_leader_epochs.items():  # ascending epochs
        if epoch > leader_epoch:
            return start - 1
    return md.end_offset


@dataclass(slots=True)
class EpochStateSnapshot:
    """The exact content of one :class:`RemoteLogLeaderEpochState`, for the RLMM's snapshot file."""

    highest_log_offset: int | None
    referenced_offsets: list[int] = field(default_factory=list)  # ascending start offsets ...
    referenced: list[RemoteLogSegmentId] = field(default_factory=list)  # ... and the segment at each
    unreferenced: list[RemoteLogSegmentId] = field(default_factory=list)  # insertion order


class RemoteLogLeaderEpochState:
    """Segments of one leader epoch: referenced (offset -> id) and unreferenced ids, plus the highest offset."""

    __slots__ = ("_offsets", "_offset_to_id", "_unreferenced", "_highest_log_offset")

    def __init__(self) -> None:
        self._offsets: list[int] = []  # sorted keys of _offset_to_id
        self._offset_to_id: dict[int, RemoteLogSegmentId] = {}  # COPY_SEGMENT_FINISHED only
        self._unreferenced: dict[RemoteLogSegmentId, None] = {}  # an ordered set: stable list order
        self._highest_log_offset: int | None = None

    def list_all_remote_log_segments(
            self, id_to_segment_metadata: Mapping[RemoteLogSegmentId, RemoteLogSegmentMetadata],
    ) -> list[RemoteLogSegmentMetadata]:
        """Referenced then unreferenced segments, stably sorted by start offset (Kafka's order on ties)."""
        result = [self._lookup(self._offset_to_id[o], id_to_segment_metadata) for o in self._offsets]
        if self._unreferenced:
            result.extend(self._lookup(i, id_to_segment_metadata) for i in self._unreferenced)
            result.sort(key=_start_offset)
        return result

    @staticmethod
    def _lookup(segment_id: RemoteLogSegmentId, id_to_segment_metadata: Mapping[RemoteLogSegmentId,
                RemoteLogSegmentMetadata]) -> RemoteLogSegmentMetadata:
        md = id_to_segment_metadata.get(segment_id)
        if md is None:
            raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{segment_id}")
        return md

    def handle_segment_with_copy_segment_started_state(self, segment_id: RemoteLogSegmentId) -> None:
        self._unreferenced[segment_id] = None

    def handle_segment_with_copy_segment_finished_state(self, start_offset: int, segment_id: RemoteLogSegmentId,
                                                        leader_epoch_end_offset: int) -> None:
        # A new leader may upload a segment that covers (duplicate) or overlaps segments a lagging
        # previous leader uploaded for this epoch: those become unreferenced, so reads go to the new one.
        offsets, offset_to_id = self._offsets, self._offset_to_id
        while offsets and offsets[-1] >= start_offset and \
                self._highest_log_offset is not None and self._highest_log_offset <= leader_epoch_end_offset:
            superseded = offset_to_id.pop(offsets.pop())
            self._unreferenced[superseded] = None
        if start_offset not in offset_to_id:
            bisect.insort(offsets, start_offset)
        offset_to_id[start_offset] = segment_id  # an entry left at this key is replaced, as in Kafka's put
        self._unreferenced.pop(segment_id, None)
        if self._highest_log_offset is None or leader_epoch_end_offset > self._highest_log_offset:
            self._highest_log_offset = leader_epoch_end_offset

    def handle_segment_with_delete_segment_started_state(self, start_offset: int,
                                                         segment_id: RemoteLogSegmentId) -> None:
        if self._offset_to_id.get(start_offset) == segment_id:  # NavigableMap.remove(key, value)
            del self._offset_to_id[start_offset]
            del self._offsets[bisect.bisect_left(self._offsets, start_offset)]
        # Stays listed as unreferenced so a failed deletion is retried from the list calls.
        self._unreferenced[segment_id] = None

    def handle_segment_with_delete_segment_finished_state(self, segment_id: RemoteLogSegmentId) -> None:
        self._unreferenced.pop(segment_id, None)

    @property
    def highest_log_offset(self) -> int | None:
        return self._highest_log_offset

    def floor_entry(self, offset: int) -> RemoteLogSegmentId | None:
        """The id mapped to the greatest start offset <= ``offset``."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._offset_to_id[self._offsets[i - 1]] if i else None

    def referenced_segment_ids(self) -> list[RemoteLogSegmentId]:
        return [self._offset_to_id[o] for o in self._offsets]

    def unreferenced_segment_ids(self) -> list[RemoteLogSegmentId]:
        return list(self._unreferenced)

    def snapshot(self) -> EpochStateSnapshot:
        return EpochStateSnapshot(self._highest_log_offset, list(self._offsets),
                                  [self._offset_to_id[o] for o in self._offsets], list(self._unreferenced))

    @classmethod
    def restore(cls, snap: EpochStateSnapshot) -> RemoteLogLeaderEpochState:
        offsets = snap.referenced_offsets
        if len(offsets) != len(snap.referenced) or any(a >= b for a, b in zip(offsets, offsets[1:], strict=False)):
            raise ValueError("referenced offsets must be strictly ascending, one per referenced segment")
        if offsets and snap.highest_log_offset is None:
            raise ValueError("an epoch with referenced segments must have a highest offset")
        state = cls()
        state._highest_log_offset = snap.highest_log_offset
        state._offsets = list(offsets)
        state._offset_to_id = dict(zip(offsets, snap.referenced, strict=True))
        state._unreferenced = dict.fromkeys(snap.unreferenced)
        return state


def _start_offset(md: RemoteLogSegmentMetadata) -> int:
    return md.start_offset


class RemoteLogMetadataCache:
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
                epochs: Mapping[int, EpochStateSnapshot]) -> RemoteLogMetadataCache:
        cache = cls()
        cache._id_to_segment_metadata = {md.remote_log_segment_id: md for md in segments}
        cache._leader_epoch_entries = {epoch: RemoteLogLeaderEpochState.restore(s) for epoch, s in epochs.items()}
        return cache


class RemotePartitionMetadataStore:
    """The caches of all user partitions plus their partition-delete state (Kafka's class of that name).

    Kafka applies an event only for user partitions assigned to the broker; a single Strata broker
    holds every partition found in the topic, so a cache is created on first sight. Callers apply
    events from one thread at a time (the RLMM's apply lock); readers only ``get`` a cache.
    """

    def __init__(self) -> None:
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._partition_delete_metadata: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    def handle_remote_log_metadata(self, md: RemoteLogMetadata) -> None:
        if isinstance(md, RemoteLogSegmentMetadata):
            self.handle_remote_log_segment_metadata(md)
        elif isinstance(md, RemoteLogSegmentMetadataUpdate):
            self.handle_remote_log_segment_metadata_update(md)
        elif isinstance(md, RemotePartitionDeleteMetadata):
            self.handle_remote_partition_delete_metadata(md)
        else:
            raise ValueError(f"remoteLogMetadata: {md} is not supported.")

    def handle_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        log.debug("Adding remote log segment : [%s]", md)
        self.maybe_load_partition(md.topic_id_partition).add_copy_in_progress_segment(md)

    def handle_remote_log_segment_metadata_update(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        log.debug("Updating remote log segment: [%s]", update)
        try:
            self.maybe_load_partition(update.topic_id_partition).update_remote_log_segment_metadata(update)
        except RemoteResourceNotFoundError as e:
            log.warning("Error occurred while updating the remote log segment: %s", e)

    def handle_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        log.debug("Received partition delete state with: [%s]", md)
        tp = md.topic_id_partition
        self._partition_delete_metadata[tp] = md
        if md.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            self._caches.pop(tp, None)
            self._partition_delete_metadata.pop(tp, None)

    def maybe_load_partition(self, tp: TopicIdPartition, initialized: bool = False) -> RemoteLogMetadataCache:
        cache = self._caches.get(tp)
        if cache is None:
            cache = self._caches[tp] = RemoteLogMetadataCache()
            if initialized:
                cache.mark_initialized()
        return cache

    def put_cache(self, tp: TopicIdPartition, cache: RemoteLogMetadataCache) -> None:
        self._caches[tp] = cache

    def clear_topic_partition(self, tp: TopicIdPartition) -> None:
        self._caches.pop(tp, None)
        self._partition_delete_metadata.pop(tp, None)

    def get(self, tp: TopicIdPartition) -> RemoteLogMetadataCache | None:
        return self._caches.get(tp)

    def cache_for_read(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        """Kafka's ``getRemoteLogMetadataCache``: not found, or not ready while still loading."""
        cache = self._caches.get(tp)
        if cache is None:
            raise RemoteResourceNotFoundError(f"No resource found for partition: {tp}")
        if not cache.is_initialized():
            raise RemoteStorageNotReadyError(f"Remote log metadata cache is not initialized for partition: {tp}")
        return cache

    def partition_delete_metadata(self, tp: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        return self._partition_delete_metadata.get(tp)

    def partitions(self) -> list[TopicIdPartition]:
        return list(self._caches)

    def items(self) -> list[tuple[TopicIdPartition, RemoteLogMetadataCache]]:
        return list(self._caches.items())

    def delete_metadata_items(self) -> list[RemotePartitionDeleteMetadata]:
        return list(self._partition_delete_metadata.values())

    def is_initialized(self, tp: TopicIdPartition) -> bool:
        cache = self._caches.get(tp)
        return cache is not None and cache.is_initialized()
