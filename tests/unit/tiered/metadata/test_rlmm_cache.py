"""RemoteLogMetadataCache / RemoteLogLeaderEpochState: ports of Kafka's RemoteLogLeaderEpochStateTest,
RemoteLogMetadataCacheTest and the cache half of RemoteLogSegmentLifecycleTest, plus the snapshot export."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest

from strata.tiered.api import (
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
from strata.tiered.metadata.cache import (
    RemoteLogLeaderEpochState,
    RemoteLogMetadataCache,
    RemotePartitionMetadataStore,
)

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.uuid4(), "foo", 0)
SEG_SIZE = 1048576


def new_id() -> RemoteLogSegmentId:
    return RemoteLogSegmentId.generate_new(TP)


def segment(epochs: dict[int, int], start: int, end: int, *, size: int = SEG_SIZE,
            txn_idx_empty: bool = False) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(new_id(), start, end, -1, 0, 1000, size, epochs, txn_idx_empty=txn_idx_empty)


def update(md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2000, None, state, 1)


def upsert(cache: RemoteLogMetadataCache, md: RemoteLogSegmentMetadata,
           state: RemoteLogSegmentState) -> RemoteLogSegmentMetadata:
    cache.add_copy_in_progress_segment(md)
    u = update(md, state)
    cache.update_remote_log_segment_metadata(u)
    return md.create_with_updates(u)


@pytest.fixture
def cache() -> RemoteLogMetadataCache:
    c = RemoteLogMetadataCache()
    c.mark_initialized()
    return c


# -- RemoteLogLeaderEpochStateTest ----------------------------------------------------------------------


class TestRemoteLogLeaderEpochState:
    def setup_method(self) -> None:
        self.state = RemoteLogLeaderEpochState()

    def test_list_all_on_empty(self):
        assert self.state.list_all_remote_log_segments({}) == []

    def test_list_all_unknown_segment_id_raises(self):
        self.state.handle_segment_with_copy_segment_finished_state(0, new_id(), 10)
        with pytest.raises(RemoteResourceNotFoundError):
            self.state.list_all_remote_log_segments({})

    def test_list_all_returns_sorted_segments(self):
        ids = {}
        s1 = new_id()  # copy started, never finished: unreferenced
        self.state.handle_segment_with_copy_segment_started_state(s1)
        ids[s1] = 0
        s2 = new_id()
        self.state.handle_segment_with_copy_segment_finished_state(5, s2, 10)
        ids[s2] = 5
        s3 = new_id()  # finished, then superseded by s4: unreferenced
        self.state.handle_segment_with_copy_segment_finished_state(11, s3, 100)
        ids[s3] = 11
        s4 = new_id()
        self.state.handle_segment_with_copy_segment_finished_state(9, s4, 150)
        ids[s4] = 9
        mds = {i: RemoteLogSegmentMetadata(i, start, start + 1, -1, 0, 0, 1, {0: start}) for i, start in ids.items()}
        listed = [md.remote_log_segment_id for md in self.state.list_all_remote_log_segments(mds)]
        assert listed == [s1, s2, s4, s3]

    def test_copy_segment_started(self):
        s = new_id()
        self.state.handle_segment_with_copy_segment_started_state(s)
        assert self.state.unreferenced_segment_ids() == [s]

    def test_copy_segment_finished(self):
        s1, s2 = new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_copy_segment_finished_state(101, s2, 200)
        assert self.state.referenced_segment_ids() == [s1, s2]
        assert self.state.floor_entry(90) == s1
        assert self.state.floor_entry(150) == s2
        assert self.state.floor_entry(9) is None
        assert self.state.unreferenced_segment_ids() == []
        assert self.state.highest_log_offset == 200

    def test_overlapping_segments(self):
        s1, s2 = new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_copy_segment_finished_state(5, s2, 150)
        assert self.state.referenced_segment_ids() == [s2]
        assert self.state.floor_entry(11) == s2
        assert self.state.unreferenced_segment_ids() == [s1]
        assert self.state.highest_log_offset == 150

    def test_multiple_overlapping_segments(self):
        s1, s2, s3, s4 = new_id(), new_id(), new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_copy_segment_finished_state(5, s2, 150)
        self.state.handle_segment_with_copy_segment_finished_state(148, s3, 155)
        self.state.handle_segment_with_copy_segment_finished_state(4, s4, 200)
        assert self.state.referenced_segment_ids() == [s4]
        assert self.state.floor_entry(11) == s4
        assert set(self.state.unreferenced_segment_ids()) == {s1, s2, s3}
        assert self.state.highest_log_offset == 200

    def test_duplicate_segments(self):
        s1, s2 = new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_copy_segment_finished_state(10, s2, 100)
        assert self.state.floor_entry(11) == s2
        assert self.state.unreferenced_segment_ids() == [s1]
        assert self.state.highest_log_offset == 100

    def test_segments_with_same_start_offset(self):
        s1, s2 = new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_copy_segment_finished_state(10, s2, 150)
        assert self.state.floor_entry(11) == s2
        assert self.state.floor_entry(111) == s2
        assert self.state.unreferenced_segment_ids() == [s1]
        assert self.state.highest_log_offset == 150

    def test_an_earlier_shorter_upload_does_not_supersede(self):
        # highestLogOffset (200) > the new segment's epoch end (150): the later entries stay referenced, and
        # Kafka's put at an existing key (10) replaces that entry without marking it unreferenced.
        s1, s2, s3 = new_id(), new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_copy_segment_finished_state(101, s2, 200)
        self.state.handle_segment_with_copy_segment_finished_state(10, s3, 150)
        assert self.state.referenced_segment_ids() == [s3, s2]
        assert self.state.unreferenced_segment_ids() == []
        assert self.state.highest_log_offset == 200

    def test_delete_segment_started(self):
        s1, s2 = new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_copy_segment_finished_state(101, s2, 200)
        self.state.handle_segment_with_delete_segment_started_state(10, s1)
        self.state.handle_segment_with_delete_segment_started_state(101, s2)
        assert self.state.referenced_segment_ids() == []
        assert set(self.state.unreferenced_segment_ids()) == {s1, s2}
        assert self.state.highest_log_offset == 200  # never lowered

    def test_delete_started_removes_only_the_matching_mapping(self):
        s1, s2 = new_id(), new_id()
        self.state.handle_segment_with_copy_segment_finished_state(10, s1, 100)
        self.state.handle_segment_with_delete_segment_started_state(10, s2)  # NavigableMap.remove(key, value)
        assert self.state.referenced_segment_ids() == [s1]

    def test_delete_segment_finished(self):
        s = new_id()
        self.state.handle_segment_with_copy_segment_started_state(s)
        self.state.handle_segment_with_delete_segment_finished_state(s)
        assert self.state.unreferenced_segment_ids() == []


# -- RemoteLogMetadataCacheTest -------------------------------------------------------------------------


def test_add_rejects_states_other_than_copy_started(cache):
    for state in S:
        if state is S.COPY_SEGMENT_STARTED:
            continue
        md = segment({0: 0}, 0, 100)
        with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
            cache.add_copy_in_progress_segment(md.create_with_updates(update(md, state)))


@pytest.mark.parametrize("initialized", [True, False])
def test_update_of_unknown_segment(initialized):
    cache = RemoteLogMetadataCache()
    if initialized:
        cache.mark_initialized()
    for state in S:
        if state is S.COPY_SEGMENT_STARTED:
            continue
        u = RemoteLogSegmentMetadataUpdate(new_id(), 1, None, state, 1)
        if initialized:
            with pytest.raises(RemoteResourceNotFoundError):
                cache.update_remote_log_segment_metadata(u)
        else:
            cache.update_remote_log_segment_metadata(u)  # replaying: dropped quietly


def test_drop_event_on_invalid_state_transition(cache, caplog):
    epoch = 5
    md = segment({epoch: 10}, 10, 100)
    cache.add_copy_in_progress_segment(md)

    def apply_and_check(state: RemoteLogSegmentState, expected: RemoteLogSegmentState | None) -> None:
        cache.update_remote_log_segment_metadata(update(md, state))
        listed = list(cache.list_remote_log_segments(epoch))
        if expected is None:
            assert listed == []
        else:
            assert [m.state for m in listed] == [expected]

    with caplog.at_level(logging.ERROR):
        apply_and_check(S.DELETE_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED)   # invalid, dropped
    assert "can not be transitioned" in caplog.text
    apply_and_check(S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED)        # valid
    apply_and_check(S.DELETE_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED)      # invalid
    apply_and_check(S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED)         # invalid
    apply_and_check(S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)      # valid
    apply_and_check(S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)       # invalid
    apply_and_check(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)        # invalid
    apply_and_check(S.DELETE_SEGMENT_FINISHED, None)                         # valid: gone
    assert len(cache) == 0


def test_update_to_copy_started_self_transition_is_rejected(cache):
    md = segment({0: 0}, 0, 10)
    cache.add_copy_in_progress_segment(md)
    with pytest.raises(ValueError, match="can not be updated"):
        cache.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_STARTED))


def test_re_adding_a_finished_segment_is_dropped(cache):
    md = segment({0: 0}, 0, 10)
    finished = upsert(cache, md, S.COPY_SEGMENT_FINISHED)
    cache.add_copy_in_progress_segment(md)  # FINISHED -> STARTED: invalid, logged and dropped
    assert cache.remote_log_segment_metadata(0, 5) == finished


# -- RemoteLogSegmentLifecycleTest (cache level) ---------------------------------------------------------


def test_segment_lifecycle(cache):
    seg0 = segment({0: 0, 1: 20, 2: 80}, 0, 100)
    cache.add_copy_in_progress_segment(seg0)
    assert cache.remote_log_segment_metadata(1, 40) is None  # still copying
    for epoch in (0, 1, 2):
        assert cache.highest_offset_for_epoch(epoch) is None
    u0 = update(seg0, S.COPY_SEGMENT_FINISHED)
    cache.update_remote_log_segment_metadata(u0)
    seg0 = seg0.create_with_updates(u0)
    seg1 = upsert(cache, segment({2: 101}, 101, 200), S.COPY_SEGMENT_FINISHED)
    seg2 = upsert(cache, segment({2: 201, 3: 240}, 201, 300), S.COPY_SEGMENT_FINISHED)
    seg3 = upsert(cache, segment({3: 250, 4: 370}, 250, 400), S.COPY_SEGMENT_FINISHED)

    expected = {(1, 40): seg0, (2, 110): seg1, (3, 240): seg2, (3, 250): seg3, (4, 375): seg3,
                (1, 110): None, (4, 401): None, (5, 301): None}
    for (epoch, offset), md in expected.items():
        assert cache.remote_log_segment_metadata(epoch, offset) == md, (epoch, offset)

    cache.update_remote_log_segment_metadata(update(seg0, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 10) is None
    cache.update_remote_log_segment_metadata(update(seg0, S.DELETE_SEGMENT_FINISHED))
    assert cache.remote_log_segment_metadata(0, 10) is None

    for epoch, highest in {0: 19, 1: 79, 2: 239, 3: 369, 4: 400}.items():
        assert cache.highest_offset_for_epoch(epoch) == highest
    assert cache.highest_offset_for_epoch(5) is None


@pytest.mark.parametrize(("state", "readable"), [
    (S.COPY_SEGMENT_STARTED, False), (S.COPY_SEGMENT_FINISHED, True), (S.DELETE_SEGMENT_STARTED, False),
    (S.DELETE_SEGMENT_FINISHED, False),
])
def test_visibility_table(cache, state, readable):
    md = segment({0: 101}, 101, 200)
    cache.add_copy_in_progress_segment(md)
    if state is S.DELETE_SEGMENT_FINISHED:
        cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
    if state is not S.COPY_SEGMENT_STARTED:
        cache.update_remote_log_segment_metadata(update(md, state))
    expected = md if state is S.COPY_SEGMENT_STARTED else md.create_with_updates(update(md, state))
    assert cache.remote_log_segment_metadata(0, 150) == (expected if readable else None)
    listed = [] if state is S.DELETE_SEGMENT_FINISHED else [expected]
    assert list(cache.list_remote_log_segments(0)) == listed
    assert list(cache.list_all_remote_log_segments()) == listed


def test_offset_beyond_epoch_end_within_segment(cache):
    md = upsert(cache, segment({0: 0, 1: 50}, 0, 100), S.COPY_SEGMENT_FINISHED)
    assert cache.remote_log_segment_metadata(0, 49) == md
    assert cache.remote_log_segment_metadata(0, 50) is None  # offset 50 belongs to epoch 1
    assert cache.remote_log_segment_metadata(1, 100) == md
    assert cache.remote_log_segment_metadata(1, 101) is None


def test_remote_log_size_counts_every_state_but_delete_finished(cache):
    a = upsert(cache, segment({0: 0}, 0, 99, size=10), S.COPY_SEGMENT_FINISHED)
    upsert(cache, segment({0: 100}, 100, 199, size=20), S.DELETE_SEGMENT_STARTED)
    cache.add_copy_in_progress_segment(segment({0: 200, 1: 250}, 200, 299, size=40))
    gone = upsert(cache, segment({0: 300}, 300, 399, size=80), S.DELETE_SEGMENT_STARTED)
    cache.update_remote_log_segment_metadata(update(gone, S.DELETE_SEGMENT_FINISHED))
    assert cache.remote_log_size(0) == 70
    assert cache.remote_log_size(1) == 40
    assert cache.remote_log_size(7) == 0
    assert [m.start_offset for m in cache.list_remote_log_segments(0)] == [0, 100, 200]
    assert a in list(cache.list_all_remote_log_segments())


def test_highest_offset_is_not_lowered_by_deletion(cache):
    md = upsert(cache, segment({0: 0}, 0, 99), S.COPY_SEGMENT_FINISHED)
    cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
    cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    assert cache.highest_offset_for_epoch(0) == 99
    assert list(cache.list_remote_log_segments(0)) == []


def test_next_segment_with_txn_index(cache):
    upsert(cache, segment({0: 0}, 0, 99, txn_idx_empty=True), S.COPY_SEGMENT_FINISHED)
    upsert(cache, segment({0: 100}, 100, 199, txn_idx_empty=True), S.COPY_SEGMENT_FINISHED)
    with_txn = upsert(cache, segment({0: 200, 1: 250}, 200, 299), S.COPY_SEGMENT_FINISHED)
    assert cache.next_segment_with_txn_index(0, 5) == with_txn
    assert cache.next_segment_with_txn_index(0, 260) is None  # 260 is in epoch 1
    assert cache.next_segment_with_txn_index(1, 260) == with_txn
    assert cache.next_segment_with_txn_index(2, 0) is None


def test_next_segment_with_txn_index_stops_at_a_gap(cache):
    upsert(cache, segment({0: 0}, 0, 99, txn_idx_empty=True), S.COPY_SEGMENT_FINISHED)
    upsert(cache, segment({0: 150}, 150, 199), S.COPY_SEGMENT_FINISHED)  # 100..149 not uploaded
    assert cache.next_segment_with_txn_index(0, 0) is None


def test_snapshot_restore_is_exact(cache):
    seg0 = upsert(cache, segment({0: 0, 1: 20, 2: 80}, 0, 100), S.COPY_SEGMENT_FINISHED)
    upsert(cache, segment({2: 101}, 101, 200), S.COPY_SEGMENT_FINISHED)
    upsert(cache, segment({2: 50}, 50, 220), S.COPY_SEGMENT_FINISHED)  # supersedes in epoch 2
    cache.add_copy_in_progress_segment(segment({2: 221}, 221, 300))
    cache.update_remote_log_segment_metadata(update(seg0, S.DELETE_SEGMENT_STARTED))
    segments, epochs = cache.snapshot()
    restored = RemoteLogMetadataCache.restore(segments, epochs)
    assert not restored.is_initialized()
    assert restored.snapshot() == (segments, epochs)
    for epoch in range(4):
        assert list(restored.list_remote_log_segments(epoch)) == list(cache.list_remote_log_segments(epoch))
        assert restored.highest_offset_for_epoch(epoch) == cache.highest_offset_for_epoch(epoch)
        for offset in range(0, 310, 7):
            assert restored.remote_log_segment_metadata(epoch, offset) == cache.remote_log_segment_metadata(epoch,
                                                                                                          offset)


def test_concurrent_readers_see_consistent_lists(cache):
    """Readers run while segments are added, finished and deleted; every list is a consistent cut."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                listed = list(cache.list_remote_log_segments(0))
                assert [m.start_offset for m in listed] == sorted(m.start_offset for m in listed)
                cache.remote_log_segment_metadata(0, 500)
                cache.remote_log_size(0)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(300):
            md = upsert(cache, segment({0: i * 10}, i * 10, i * 10 + 9), S.COPY_SEGMENT_FINISHED)
            if i % 3 == 0:
                cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
                cache.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert len(cache) == 200


# -- RemotePartitionMetadataStore ---------------------------------------------------------------------------


def test_store_readiness_and_partition_delete():
    store = RemotePartitionMetadataStore()
    with pytest.raises(RemoteResourceNotFoundError, match="No resource found for partition"):
        store.cache_for_read(TP)
    md = segment({0: 0}, 0, 9)
    store.handle_remote_log_metadata(md)
    with pytest.raises(RemoteStorageNotReadyError):
        store.cache_for_read(TP)
    store.get(TP).mark_initialized()
    assert list(store.cache_for_read(TP).list_all_remote_log_segments()) == [md]
    store.handle_remote_log_metadata(RemoteLogSegmentMetadataUpdate(new_id(), 1, None, S.COPY_SEGMENT_FINISHED, 0))
    marked = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 0)
    store.handle_remote_log_metadata(marked)
    assert store.partition_delete_metadata(TP) == marked
    store.handle_remote_log_metadata(
        RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 2, 0))
    assert store.get(TP) is None
    assert store.partition_delete_metadata(TP) is None
    with pytest.raises(ValueError, match="not supported"):
        store.handle_remote_log_metadata("nope")  # type: ignore[arg-type]
