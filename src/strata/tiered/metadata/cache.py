"""Kafka's ``RemoteLogMetadataCache``, ``RemoteLogLeaderEpochState`` and ``RemotePartitionMetadataStore``.

The cache is the RLMM's answer to every read, so its semantics are Kafka's exactly, quirks included
(a reader can cross-reference the Java classes method by method):

* the cache holds every segment not yet DELETE_SEGMENT_FINISHED (Kafka's ``idToSegmentMetadata``);
* per leader epoch, a ``RemoteLogLeaderEpochState`` maps the epoch's start offset within each
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

Storage (issue 28): one row of numpy columns per segment and two arrays per epoch's referenced map,
objects built only when a method returns them - ~80 bytes a segment instead of ~670-860, and a snapshot
that loads as arrays (``segments.py`` says how, ``snapshot.py`` the file). What is Kafka's stays
Kafka's: the per-epoch referenced/unreferenced state, the supersede and replace rules, the order of
every list, the dropped transitions and the errors are those of the Java classes; the old
object-per-segment implementation is kept in the unit tests as the model the property tests hold
this one to.

Threading: the broker reads from several threads while the RLMM applies events, and one transition
touches several structures, so every public method of the cache takes the cache's lock; readers get
copies (the rows they asked for, copied under the lock, turned into objects as they iterate), never
live views.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

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
from strata.tiered.metadata.segments import CacheColumns, EpochRefs, SegmentTable

__all__ = ["EpochStateSnapshot", "RemoteLogLeaderEpochState", "RemoteLogMetadataCache",
           "RemotePartitionMetadataStore"]

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# An epoch without a highest offset, in the columns. Not -1 (version 1's "none"): an epoch that starts
# where the next one starts within a segment ends at start - 1, so -1 is a real highest offset.
NO_HIGHEST = _INT64_MIN


@dataclass(slots=True)
class EpochStateSnapshot:
    """The exact content of one :class:`RemoteLogLeaderEpochState`, for the RLMM's snapshot file."""

    highest_log_offset: int | None
    referenced_offsets: list[int] = field(default_factory=list)  # ascending start offsets ...
    referenced: list[RemoteLogSegmentId] = field(default_factory=list)  # ... and the segment at each
    unreferenced: list[RemoteLogSegmentId] = field(default_factory=list)  # insertion order


class RemoteLogLeaderEpochState:
    """Segments of one leader epoch: referenced (offset -> id) and unreferenced ids, plus the highest offset.

    Kafka's class over objects, kept as its port and its tests' subject; the cache itself keeps the
    same state in arrays (:class:`~strata.tiered.metadata.segments.EpochRefs`).
    """

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
    """The segments of one user partition, with Kafka's lineage rules across leader epochs.

    Stored in columns (``segments.py``): a :class:`SegmentTable` row per segment and an
    :class:`EpochRefs` per leader epoch; ``RemoteLogSegmentMetadata`` objects are built only when a
    method returns them (equal to the ones the old object-per-segment cache held).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._table = SegmentTable()
        self._leader_epoch_entries: dict[int, EpochRefs] = {}
        self._initialized = False  # Kafka's CountDownLatch, set once; nothing waits on it (readers test it)
        self._borrowed = False  # arrays adopted by from_columns (views of a mapped snapshot file)

    # -- initialisation barrier (Kafka's CountDownLatch) --

    def mark_initialized(self) -> None:
        self._initialized = True

    def is_initialized(self) -> bool:
        return self._initialized

    # -- reads --

    def remote_log_segment_metadata(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` within ``leader_epoch``, else None."""
        with self._lock:
            row = self._segment_row(leader_epoch, offset)
            return self._table.materialize(row) if row >= 0 else None

    def _segment_row(self, leader_epoch: int, offset: int) -> int:
        state = self._leader_epoch_entries.get(leader_epoch)
        if state is None:
            return -1
        row = state.floor_row(max(_INT64_MIN, min(offset, _INT64_MAX)))  # numpy's range
        if row < 0:  # below the first offset of the epoch's segments
            return -1
        return row if offset <= self._table.epoch_end(row, leader_epoch) else -1

    def next_segment_with_txn_index(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """KIP-1058: from the segment holding ``offset``, the first one in the epoch with a non-empty txn index."""
        with self._lock:
            table = self._table
            row = self._segment_row(leader_epoch, offset)
            while row >= 0 and table.txn_idx_empty(row):
                row = self._segment_row(leader_epoch, table.end.item(row) + 1)
            return table.materialize(row) if row >= 0 else None

    def list_all_remote_log_segments(self) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment not DELETE_SEGMENT_FINISHED, unsorted (Kafka iterates a hash map; here: insertion order)."""
        with self._lock:
            return iter(self._table.gather(self._table.live_rows()))

    def list_remote_log_segments(self, leader_epoch: int) -> Iterator[RemoteLogSegmentMetadata]:
        """The segments holding ``leader_epoch`` (any state but DELETE_FINISHED), by start offset."""
        with self._lock:
            rows = self._epoch_rows(leader_epoch)
            return iter(self._table.gather(rows)) if rows is not None else iter(())

    def _epoch_rows(self, leader_epoch: int) -> np.ndarray | None:
        """Referenced then unreferenced rows, stably sorted by start offset (Kafka's order on ties)."""
        state = self._leader_epoch_entries.get(leader_epoch)
        if state is None:
            return None
        rows = state.ref_rows()
        if not state.unreferenced:
            return rows.copy()
        extra = []
        for segment_id in state.unreferenced:
            row = self._table.find(segment_id)
            if row < 0:
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{segment_id}")
            extra.append(row)
        rows = np.concatenate((rows, np.array(extra, dtype=rows.dtype)))
        return rows[np.argsort(self._table.start[rows], kind="stable")]

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """Highest offset of ``leader_epoch`` over segments that reached COPY_SEGMENT_FINISHED (never lowered)."""
        with self._lock:
            state = self._leader_epoch_entries.get(leader_epoch)
            return state.highest if state is not None else None

    def remote_log_size(self, leader_epoch: int) -> int:
        """KIP-852: bytes of the segments listed for ``leader_epoch`` (STARTED and DELETE_STARTED included)."""
        with self._lock:
            rows = self._epoch_rows(leader_epoch)
            return int(self._table.size[rows].sum(dtype=np.int64)) if rows is not None else 0

    def segment_metadata(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            row = self._table.find(segment_id)
            return self._table.materialize(row) if row >= 0 else None

    def __len__(self) -> int:
        return self._table.live

    # -- transitions --

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> None:
        """Track a COPY_SEGMENT_STARTED segment: listed, not readable, until COPY_SEGMENT_FINISHED."""
        if md.state is not _S.COPY_SEGMENT_STARTED:
            raise ValueError(f"Given remoteLogSegmentMetadata:{md} should have state as "
                             f"{_S.COPY_SEGMENT_STARTED.name} but it contains state as: {md.state.name}")
        with self._lock:
            table = self._table
            segment_id = md.remote_log_segment_id
            row = table.find(segment_id)
            if not self._check_state_transition(table.state_of(row) if row >= 0 else None, md.state, segment_id):
                return
            encoded = table.encode(md)  # ValueError before anything changes
            for epoch in md.segment_leader_epochs:
                self._epoch_state(epoch).unreferenced[segment_id] = None
            if row < 0:
                table.append(encoded)
            else:
                table.overwrite(row, encoded)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a segment forward; an unknown segment raises RemoteResourceNotFoundError once initialised."""
        with self._lock:
            table = self._table
            segment_id = update.remote_log_segment_id
            row = table.find(segment_id)
            if row < 0:
                if not self.is_initialized():
                    # Replaying: the segment's earlier events may be gone with the topic's retention.
                    log.debug("Dropping the event: %s as the base-metadata about the segment was already removed",
                              update)
                    return
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{segment_id}")
            if not self._check_state_transition(table.state_of(row), update.state, segment_id):
                return
            target = update.state
            if target is _S.COPY_SEGMENT_STARTED:
                raise ValueError(f"metadataUpdate: {update} with state {_S.COPY_SEGMENT_STARTED.name} "
                                 "can not be updated")
            table.check_update(update)
            epochs = table.epochs_of(row)
            if target is _S.COPY_SEGMENT_FINISHED:
                end = table.end.item(row)
                for i, (epoch, start) in enumerate(epochs):
                    epoch_end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else end
                    self._epoch_state(epoch).copy_segment_finished(start, row, segment_id, epoch_end, table)
                table.apply_update(row, update)
            elif target is _S.DELETE_SEGMENT_STARTED:
                for epoch, start in epochs:
                    self._epoch_state(epoch).delete_segment_started(start, row, segment_id)
                table.apply_update(row, update)
            else:
                for epoch, _ in epochs:
                    self._epoch_state(epoch).unreferenced.pop(segment_id, None)
                table.kill(row)
                if table.should_compact():
                    new_index = table.compact()
                    for state in self._leader_epoch_entries.values():
                        state.remap(new_index)

    def _epoch_state(self, epoch: int) -> EpochRefs:
        state = self._leader_epoch_entries.get(epoch)
        if state is None:
            state = self._leader_epoch_entries[epoch] = EpochRefs()
        return state

    @staticmethod
    def _check_state_transition(existing: RemoteLogSegmentState | None, target: RemoteLogSegmentState,
                                segment_id: RemoteLogSegmentId) -> bool:
        valid = RemoteLogSegmentState.is_valid_transition(existing, target)
        if not valid:
            log.error("Current state: %s can not be transitioned to target state: %s, segmentId: %s. "
                      "Dropping the event", existing.name if existing is not None else None, target.name, segment_id)
        return valid

    # -- exact export and import as objects (tests, the version-1 snapshot file) --

    def snapshot(self) -> tuple[list[RemoteLogSegmentMetadata], dict[int, EpochStateSnapshot]]:
        """A consistent copy: the segments in insertion order and every epoch state."""
        with self._lock:
            table = self._table
            segments = list(table.gather(table.live_rows()))
            epochs = {epoch: EpochStateSnapshot(state.highest, state.ref_keys().tolist(),
                                                [table.segment_id(r) for r in state.ref_rows().tolist()],
                                                list(state.unreferenced))
                      for epoch, state in self._leader_epoch_entries.items()}
            return segments, epochs

    @classmethod
    def restore(cls, segments: list[RemoteLogSegmentMetadata],
                epochs: Mapping[int, EpochStateSnapshot]) -> RemoteLogMetadataCache:
        """The cache ``snapshot()`` exported; ValueError if the epoch states are inconsistent."""
        cache = cls()
        cache._table, row_of = SegmentTable.from_segments(segments)
        for epoch, snap in epochs.items():
            offsets = snap.referenced_offsets
            if len(offsets) != len(snap.referenced) or any(a >= b for a, b in zip(offsets, offsets[1:],
                                                                                    strict=False)):
                raise ValueError("referenced offsets must be strictly ascending, one per referenced segment")
            if offsets and snap.highest_log_offset is None:
                raise ValueError("an epoch with referenced segments must have a highest offset")
            rows = [row_of.get(segment_id, -1) for segment_id in snap.referenced]
            if any(r < 0 for r in rows):
                raise ValueError(f"epoch {epoch} references a segment that is not in the snapshot")
            cache._leader_epoch_entries[epoch] = EpochRefs(
                np.array(offsets, dtype=np.int64), np.array(rows, dtype=np.int32), dict.fromkeys(snap.unreferenced),
                snap.highest_log_offset)
        return cache

    # -- exact export and import as columns (the version-2 snapshot file) --

    def export_columns(self) -> CacheColumns:
        """A consistent columnar copy of the whole cache (the live rows compacted)."""
        with self._lock:
            table = self._table
            columns, ext_row, ext_epoch, ext_start, custom, new_index = table.export()
            n_epochs = len(self._leader_epoch_entries)
            epoch_ids = np.empty(n_epochs, dtype=np.int32)
            highest = np.empty(n_epochs, dtype=np.int64)
            ref_count = np.empty(n_epochs, dtype=np.uint32)
            unref_count = np.empty(n_epochs, dtype=np.uint32)
            keys, rows, unref = [], [], []
            orphans: dict[RemoteLogSegmentId, int] = {}
            n_rows = len(columns["start"])
            for i, (epoch, state) in enumerate(self._leader_epoch_entries.items()):
                epoch_ids[i] = epoch
                highest[i] = NO_HIGHEST if state.highest is None else state.highest
                ref_count[i] = len(state)
                unref_count[i] = len(state.unreferenced)
                keys.append(state.ref_keys())
                rows.append(new_index[state.ref_rows()])
                for segment_id in state.unreferenced:
                    row = table.find(segment_id)
                    if row >= 0:
                        unref.append(int(new_index[row]))
                    else:
                        unref.append(n_rows + orphans.setdefault(segment_id, len(orphans)))
            return CacheColumns(
                columns, ext_row, ext_epoch, ext_start, custom, epoch_ids, highest, ref_count, unref_count,
                np.concatenate(keys) if keys else np.empty(0, dtype=np.int64),
                np.concatenate(rows).astype(np.int32) if rows else np.empty(0, dtype=np.int32),
                np.array(unref, dtype=np.uint32), [segment_id.id for segment_id in orphans])

    @classmethod
    def from_columns(cls, tp: TopicIdPartition, data: CacheColumns) -> RemoteLogMetadataCache:
        """The cache ``export_columns()`` exported, adopting its arrays (no copy: they may be views of the
        mapped snapshot file, written in place copy-on-write); ValueError if they are inconsistent."""
        cache = cls()
        table = cache._table = SegmentTable.from_columns(tp, data.columns, data.ext_row, data.ext_epoch,
                                                         data.ext_start, data.custom)
        n_rows = table.n
        ref_count = data.epoch_ref_count.astype(np.int64)
        unref_count = data.epoch_unref_count.astype(np.int64)
        if int(ref_count.sum()) != len(data.ref_keys) or len(data.ref_rows) != len(data.ref_keys) \
                or int(unref_count.sum()) != len(data.unref_index):
            raise ValueError("epoch entry counts do not add up")
        if len(data.ref_rows) and (int(data.ref_rows.min()) < 0 or int(data.ref_rows.max()) >= n_rows):
            raise ValueError("a referenced segment index is out of range")
        if len(data.unref_index) and int(data.unref_index.max()) >= n_rows + len(data.orphans):
            raise ValueError(f"a segment index is out of range ({n_rows + len(data.orphans)} ids)")
        ref_ends = np.cumsum(ref_count)
        unref_ends = np.cumsum(unref_count)
        unref_index = data.unref_index.tolist()
        entries = cache._leader_epoch_entries
        for i, epoch in enumerate(data.epoch_ids.tolist()):
            a, b = int(ref_ends[i] - ref_count[i]), int(ref_ends[i])
            keys = data.ref_keys[a:b]
            if len(keys) > 1 and np.any(keys[1:] <= keys[:-1]):
                raise ValueError("referenced offsets must be strictly ascending, one per referenced segment")
            highest = data.epoch_highest.item(i)
            if b > a and highest == NO_HIGHEST:
                raise ValueError("an epoch with referenced segments must have a highest offset")
            unreferenced = {}
            for index in unref_index[int(unref_ends[i] - unref_count[i]):int(unref_ends[i])]:
                unreferenced[table.segment_id(index) if index < n_rows else
                             RemoteLogSegmentId(tp, data.orphans[index - n_rows])] = None
            if epoch in entries:
                raise ValueError(f"epoch {epoch} appears twice")
            entries[epoch] = EpochRefs(keys, data.ref_rows[a:b], unreferenced,
                                       None if highest == NO_HIGHEST else highest)
        cache._borrowed = True
        return cache

    def detach(self) -> None:
        """Move arrays adopted by ``from_columns`` into memory of the cache's own: the RLMM calls this once a
        newer snapshot replaced the file they map (whose blocks stay allocated while it is mapped)."""
        with self._lock:
            if self._borrowed:
                self._table.detach()
                for state in self._leader_epoch_entries.values():
                    state.detach()
                self._borrowed = False

    def memory_bytes(self) -> int:
        """Bytes of the cache's numpy buffers (the benchmark's per-segment figure; Python objects not counted)."""
        with self._lock:
            return self._table.nbytes() + sum(s.nbytes() for s in self._leader_epoch_entries.values())


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
