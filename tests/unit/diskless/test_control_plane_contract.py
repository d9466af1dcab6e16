"""The ControlPlane contract, run against the in-memory and the SQLite coordinator alike.

Modelled on Inkless's ``AbstractControlPlaneTest`` (commit, find, list offsets, delete records,
retention, topic deletion, the file cleaner), plus its ``CommitFileJobTest`` idempotence matrix, the
coalescing cases and Strata's own transaction state (LSO, aborted transactions, markers).
"""

from __future__ import annotations

import time

import pytest
from tests.unit.diskless.cp_helpers import (
    NOW,
    RC,
    T1,
    T2,
    Gap,
    batch,
    commit,
    create,
    find,
    list_offset,
    log_info,
    marker,
    offsets,
    wal,
)

from strata.diskless.coordinator.api import (
    AbortedTxn,
    AdvanceLogStartRequest,
    AdvanceLogStartResponse,
    CommitBatchRequest,
    ControlPlane,
    ControlRecordType,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FileAlreadyCommittedError,
    FindBatchRequest,
    InitDisklessLogRequest,
    InitDisklessLogResponse,
    InitProducer,
    InvalidCommitError,
    PruneBatchesRequest,
    PruneBatchesResponse,
    TimestampType,
    TopicIdPartition,
)
from strata.diskless.coordinator.rules import INT32_MAX
from strata.errors import ErrorCode

E = ErrorCode
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT
LAT = TimestampType.LOG_APPEND_TIME


def delete_records(cp: ControlPlane, offset: int, partition: int = 0, now: int = NOW) -> DeleteRecordsResponse:
    return cp.delete_records([DeleteRecordsRequest(T1, partition, offset)], now_ms=now)[0]


def retention(cp: ControlPlane, rbytes: int = -1, rms: int = -1, *, now: int = NOW,
              cap: int = 0) -> EnforceRetentionResponse:
    return cp.enforce_retention([EnforceRetentionRequest(T1, 0, rbytes, rms)], now_ms=now,
                                max_batches_per_partition=cap)[0]


def deletable(cp: ControlPlane, now: int = NOW + 10**9, grace: int = 0) -> list[str]:
    return [f.object_key for f in cp.files_to_delete(now_ms=now, grace_period_ms=grace)]


# -- commit and find ---------------------------------------------------------------------------


def test_empty_commit_registers_a_file_that_is_deleting_at_once(cp: ControlPlane) -> None:
    create(cp)
    assert commit(cp, key="empty") == []
    assert not cp.is_safe_to_delete_file("empty")
    assert deletable(cp) == ["empty"]
    assert log_info(cp).high_watermark == 0


def test_commit_assigns_offsets_and_find_returns_the_coordinates(cp: ControlPlane) -> None:
    create(cp)
    r = commit(cp, batch(0, 3, size=50, ts=NOW - 5), Gap(7), batch(1, 2, size=60), now=NOW + 1, key="k1")
    assert [(x.error, x.assigned_base_offset, x.batch_timestamp, x.log_start_offset) for x in r] == [
        (E.NONE, 0, NOW - 5, 0), (E.NONE, 0, NOW - 1000, 0)]
    f = find(cp, 0)
    assert f.error is E.NONE and (f.log_start_offset, f.high_watermark, f.last_stable_offset) == (0, 3, 3)
    (b,) = f.batches
    assert (b.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset) == ("k1", 0, 50, 0, 2)
    assert (b.log_append_timestamp, b.batch_max_timestamp, b.timestamp_type, b.magic) == (NOW + 1, NOW - 5, 0, 2)
    assert (find(cp, 1).batches[0].byte_offset, find(cp, 1).high_watermark) == (57, 2)
    info = log_info(cp, 1)
    assert (info.topic_name, info.byte_size, info.earliest_batch_timestamp) == ("topic-1", 60, NOW - 1000)


def test_offsets_are_contiguous_across_files(cp: ControlPlane) -> None:
    create(cp)
    bases = [commit(cp, batch(0, n))[0].assigned_base_offset for n in (3, 1, 4)]
    assert bases == [0, 3, 4]
    assert offsets(find(cp)) == [(0, 2), (3, 3), (4, 7)]
    assert log_info(cp).high_watermark == 8


def test_unknown_partition_is_rejected_per_batch(cp: ControlPlane) -> None:
    create(cp, partitions=1)
    r = commit(cp, batch(0), batch(5), batch(0, topic=T2), key="mixed")
    assert [x.error for x in r] == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert r[1].assigned_base_offset == -1 and r[1].log_start_offset == -1
    assert deletable(cp) == []  # one batch still refers to it
    assert commit(cp, batch(3), key="none")[0].error is E.UNKNOWN_TOPIC_OR_PARTITION
    assert deletable(cp) == ["none"]


def test_log_append_time_batches_take_the_commit_time(cp: ControlPlane) -> None:
    create(cp)
    r = commit(cp, batch(0, ts=5, ts_type=LAT), batch(1, ts=5), now=NOW + 7)
    assert [x.batch_timestamp for x in r] == [NOW + 7, 5]
    assert find(cp).batches[0].effective_timestamp == NOW + 7


@pytest.mark.parametrize("size", [0, -1])
def test_zero_size_batch_fails_the_whole_commit(cp: ControlPlane, size: int) -> None:
    create(cp)
    request = wal(batch(0), batch(0, size=size), key="bad")
    with pytest.raises(InvalidCommitError):
        cp.commit_file(request, now_ms=NOW)
    assert log_info(cp).high_watermark == 0 and cp.is_safe_to_delete_file("bad")


def test_batch_outside_the_object_fails_the_commit(cp: ControlPlane) -> None:
    create(cp)
    request = wal(batch(0), key="short")
    with pytest.raises(InvalidCommitError):
        cp.commit_file(type(request)("short", 1, 99, request.batches), now_ms=NOW)
    assert cp.is_safe_to_delete_file("short")


def test_committing_a_key_twice_fails_and_changes_nothing(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0), key="k")
    with pytest.raises(FileAlreadyCommittedError):
        commit(cp, batch(0), key="k")
    assert log_info(cp).high_watermark == 1


def test_find_at_the_high_watermark_and_before_any_commit_is_empty(cp: ControlPlane) -> None:
    create(cp)
    empty = find(cp, 0, 0)
    assert (empty.error, empty.batches, empty.high_watermark) == (E.NONE, (), 0)
    commit(cp, batch(0, 2))
    at_hwm = find(cp, 0, 2)
    assert (at_hwm.error, at_hwm.batches, at_hwm.high_watermark) == (E.NONE, (), 2)


@pytest.mark.parametrize("offset", [3, 100, -1])
def test_find_out_of_range_reports_the_real_bounds(cp: ControlPlane, offset: int) -> None:
    create(cp)
    commit(cp, batch(0, 2))
    f = find(cp, 0, offset)
    assert (f.error, f.batches, f.log_start_offset, f.high_watermark) == (E.OFFSET_OUT_OF_RANGE, (), 0, 2)


def test_find_below_the_log_start_is_out_of_range(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 2), Gap(1), batch(0, 2))
    delete_records(cp, 3)
    assert find(cp, 0, 2).error is E.OFFSET_OUT_OF_RANGE
    assert offsets(find(cp, 0, 3)) == [(2, 3)]  # the straddling batch: the reader skips its head


def test_find_unknown_partition(cp: ControlPlane) -> None:
    f = find(cp, 0, topic=T2)
    assert (f.error, f.log_start_offset, f.high_watermark) == (E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)


def test_find_from_the_middle_returns_the_covering_batch_on(cp: ControlPlane) -> None:
    create(cp)
    for n in (5, 5, 5):
        commit(cp, batch(0, n))
    assert offsets(find(cp, 0, 7)) == [(5, 9), (10, 14)]


def test_partition_budget_leaves_out_the_crossing_batch(cp: ControlPlane) -> None:
    create(cp)
    for _ in range(4):
        commit(cp, batch(0, size=100))
    assert len(find(cp, max_bytes=250).batches) == 2
    assert len(find(cp, max_bytes=300).batches) == 3
    assert len(find(cp, max_batches=1).batches) == 1


def test_fetch_budget_is_shared_and_min_one_message_applies_once(cp: ControlPlane) -> None:
    create(cp)
    for p in (0, 1):
        commit(cp, batch(p, size=100), Gap(1), batch(p, size=100))
    reqs = [FindBatchRequest(T1, 0, 0, 1 << 20), FindBatchRequest(T1, 1, 0, 1 << 20)]
    r = cp.find_batches(reqs, fetch_max_bytes=300)
    assert [len(x.batches) for x in r] == [2, 1]
    r = cp.find_batches(reqs, fetch_max_bytes=50)  # oversized: only the request's first batch is sent
    assert [len(x.batches) for x in r] == [1, 0]
    assert r[1].high_watermark == 2 and r[1].error is E.NONE
    r = cp.find_batches(list(reversed(reqs)), fetch_max_bytes=50)  # the caller rotates for fairness
    assert [(x.partition, len(x.batches)) for x in r] == [(1, 1), (0, 0)]
    r = cp.find_batches(reqs, fetch_max_bytes=1 << 20, max_batches_per_partition=1)
    assert [len(x.batches) for x in r] == [1, 1]


def test_min_one_message_per_request_not_per_partition(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, size=500), batch(1, size=500))
    reqs = [FindBatchRequest(T1, 0, 0, 100), FindBatchRequest(T1, 1, 0, 100)]
    assert [len(x.batches) for x in cp.find_batches(reqs, fetch_max_bytes=1 << 20)] == [1, 0]
    reqs = [FindBatchRequest(T1, 0, 1, 100), FindBatchRequest(T1, 1, 0, 100)]  # partition 0 has nothing new
    assert [len(x.batches) for x in cp.find_batches(reqs, fetch_max_bytes=1 << 20)] == [0, 1]


# -- list offsets ------------------------------------------------------------------------------


def test_list_offsets_special_timestamps(cp: ControlPlane) -> None:
    create(cp)
    assert [(list_offset(cp, t).timestamp, list_offset(cp, t).offset) for t in (-1, -2, -3, -4, -5)] == [
        (-1, 0), (-1, 0), (-1, -1), (-1, 0), (-1, -1)]
    commit(cp, batch(0, 2, ts=100), batch(0, 3, ts=300), batch(0, 1, ts=300), batch(0, 1, ts=200), Gap(1),
           batch(0, 1, ts=50))
    delete_records(cp, 1)
    got = {t: (list_offset(cp, t).timestamp, list_offset(cp, t).offset) for t in (-1, -2, -3, -4, -5)}
    assert got == {-1: (-1, 8), -2: (-1, 1), -3: (300, 6), -4: (-1, 1), -5: (-1, -1)}
    assert list_offset(cp, -6).error is E.INVALID_REQUEST
    assert list_offset(cp, -1, topic=T2).error is E.UNKNOWN_TOPIC_OR_PARTITION


def test_max_timestamp_takes_the_first_row_among_ties(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 2, ts=300))
    commit(cp, batch(0, 2, ts=300))
    assert (list_offset(cp, -3).timestamp, list_offset(cp, -3).offset) == (300, 1)


def test_list_offsets_by_timestamp(cp: ControlPlane) -> None:
    create(cp)
    for ts in (100, 300, 200, 400):
        commit(cp, batch(0, 2, ts=ts))
    assert [list_offset(cp, t).offset for t in (0, 100, 101, 250, 400, 401)] == [0, 0, 2, 2, 6, -1]
    assert list_offset(cp, 250).timestamp == 300
    delete_records(cp, 1)
    assert list_offset(cp, 0).offset == 1  # raised to the log start
    commit(cp, batch(0, ts=5, ts_type=LAT), now=NOW)
    assert (list_offset(cp, NOW).timestamp, list_offset(cp, NOW).offset) == (NOW, 8)


def test_earliest_is_the_cross_tier_start_which_only_moves_forward(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 10))
    delete_records(cp, 6)

    def advance(offset: int) -> AdvanceLogStartResponse:
        return cp.advance_cross_tier_log_start([AdvanceLogStartRequest(T1, 0, offset)], now_ms=NOW)[0]

    assert (advance(2).error, advance(2).remote_log_start_offset) == (E.NONE, 2)
    assert (list_offset(cp, -2).offset, list_offset(cp, -4).offset) == (2, 6)
    assert advance(1).remote_log_start_offset == 2
    assert advance(11).error is E.OFFSET_OUT_OF_RANGE
    assert advance(4).remote_log_start_offset == 4 and log_info(cp).remote_log_start_offset == 4
    assert cp.advance_cross_tier_log_start([AdvanceLogStartRequest(T2, 0, 1)], now_ms=NOW)[0].error is \
        E.UNKNOWN_TOPIC_OR_PARTITION


# -- delete records, retention, topics, the cleaner ----------------------------------------------


def test_delete_records_keeps_a_straddling_batch_and_frees_emptied_files(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 2, size=10), key="a")
    commit(cp, batch(0, 2, size=20), batch(1, 1, size=5), key="b")
    commit(cp, batch(0, 2, size=30), key="c")
    r = delete_records(cp, 3)
    assert (r.error, r.log_start_offset) == (E.NONE, 3)
    assert offsets(find(cp, 0, 3)) == [(2, 3), (4, 5)]
    assert (log_info(cp).byte_size, log_info(cp).earliest_batch_timestamp) == (50, NOW - 1000)
    assert deletable(cp) == ["a"]
    r = delete_records(cp, -1)  # the high watermark
    assert r.log_start_offset == 6 and log_info(cp).byte_size == 0 and log_info(cp).earliest_batch_timestamp is None
    assert sorted(deletable(cp)) == ["a", "c"]  # "b" still holds partition 1's batch
    assert find(cp, 0, 6).batches == ()


def test_delete_records_out_of_range_and_never_backwards(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 5))
    assert delete_records(cp, 6).error is E.OFFSET_OUT_OF_RANGE
    assert delete_records(cp, -2).error is E.OFFSET_OUT_OF_RANGE
    assert delete_records(cp, 4).log_start_offset == 4
    assert delete_records(cp, 2).log_start_offset == 4
    assert log_info(cp).log_start_offset == 4
    assert cp.delete_records([DeleteRecordsRequest(T2, 0, 0)], now_ms=NOW)[0].error is E.UNKNOWN_TOPIC_OR_PARTITION


def test_retention_by_size(cp: ControlPlane) -> None:
    create(cp)
    for _ in range(5):
        commit(cp, batch(0, 2, size=100))
    assert retention(cp, rbytes=500).batches_deleted == 0
    r = retention(cp, rbytes=250)
    assert (r.batches_deleted, r.bytes_deleted, r.log_start_offset) == (3, 300, 6)
    assert log_info(cp).byte_size == 200
    assert retention(cp, rbytes=0).log_start_offset == 10 and find(cp, 0, 10).batches == ()


def test_retention_by_time_stops_at_the_first_new_enough_batch(cp: ControlPlane) -> None:
    create(cp)
    for ts in (NOW - 500, NOW - 400, NOW - 100, NOW - 450, NOW + 10_000):
        commit(cp, batch(0, ts=ts))
    r = retention(cp, rms=300)
    assert (r.batches_deleted, r.log_start_offset) == (2, 2)
    assert retention(cp, rms=0, now=NOW + 5000).log_start_offset == 4  # the future batch is kept
    assert offsets(find(cp, 0, 4)) == [(4, 4)]


def test_retention_by_size_and_time_together_and_with_a_cap(cp: ControlPlane) -> None:
    create(cp)
    for ts in (NOW - 500, NOW - 400, NOW - 300, NOW - 200):
        commit(cp, batch(0, ts=ts, size=100))
    assert retention(cp, rbytes=350, rms=350).log_start_offset == 2  # time is the stricter
    assert retention(cp, rbytes=100, rms=10_000, cap=0).log_start_offset == 3  # size is the stricter
    assert retention(cp, rbytes=0, cap=0).log_start_offset == 4
    create(cp, T2, 1)
    for _ in range(5):
        commit(cp, batch(0, topic=T2))
    capped = cp.enforce_retention([EnforceRetentionRequest(T2, 0, 0, -1)], now_ms=NOW, max_batches_per_partition=2)
    assert (capped[0].batches_deleted, capped[0].log_start_offset) == (2, 2)


def test_retention_uses_the_commit_time_for_log_append_time(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, ts=NOW + 10**6, ts_type=LAT), now=NOW - 1000)
    commit(cp, batch(0, ts=0, ts_type=LAT), now=NOW)
    assert retention(cp, rms=500).log_start_offset == 1
    unknown = cp.enforce_retention([EnforceRetentionRequest(T2, 0, 0, 0)], now_ms=NOW)[0]
    assert unknown.error is E.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topic_frees_files_other_topics_do_not_use(cp: ControlPlane) -> None:
    create(cp)
    create(cp, T2, 1)
    commit(cp, batch(0), batch(1), key="t1-only")
    commit(cp, batch(0), batch(0, topic=T2), key="shared")
    cp.delete_topic(T1, now_ms=NOW)
    assert log_info(cp).error is E.UNKNOWN_TOPIC_OR_PARTITION
    assert find(cp, 0).error is E.UNKNOWN_TOPIC_OR_PARTITION
    assert deletable(cp) == ["t1-only"]
    cp.delete_topic(T1, now_ms=NOW)  # idempotent
    create(cp)  # re-created empty, no producer state left behind
    assert log_info(cp).high_watermark == 0
    assert commit(cp, batch(0, pid=1, epoch=0, seq=0))[0].error is E.NONE


def test_cleaner_grace_period_and_confirmed_deletes(cp: ControlPlane) -> None:
    create(cp)
    for key in ("a", "b", "c"):
        commit(cp, batch(0), key=key)
    delete_records(cp, 2, now=NOW + 100)
    delete_records(cp, 3, now=NOW + 200)
    assert deletable(cp, now=NOW + 150, grace=60) == []
    assert deletable(cp, now=NOW + 160, grace=60) == ["a", "b"]
    assert [(f.object_key, f.marked_for_deletion_at) for f in
            cp.files_to_delete(now_ms=NOW + 10**6, grace_period_ms=60, max_files=1)] == [("a", NOW + 100)]
    cp.delete_files(["a", "unknown"], now_ms=NOW + 300)  # "b" was not confirmed by the object store
    assert deletable(cp) == ["b", "c"]
    assert cp.is_safe_to_delete_file("a") and not cp.is_safe_to_delete_file("b")
    commit(cp, batch(0), key="live")
    cp.delete_files(["live"], now_ms=NOW)  # never a file batches still refer to
    assert not cp.is_safe_to_delete_file("live") and find(cp, 0, 3).batches[0].object_key == "live"


# -- idempotence -------------------------------------------------------------------------------


def test_in_sequence_batches_and_duplicates_get_the_original_answer(cp: ControlPlane) -> None:
    create(cp)
    first = commit(cp, batch(0, 2, pid=7, epoch=0, seq=0, ts=11), batch(0, 3, pid=7, epoch=0, seq=2, ts=12))
    assert [x.assigned_base_offset for x in first] == [0, 2]
    again = commit(cp, batch(0, 3, pid=7, epoch=0, seq=2, ts=99), batch(0, 1, pid=7, epoch=0, seq=5), now=NOW + 5)
    assert (again[0].error, again[0].is_duplicate, again[0].assigned_base_offset, again[0].batch_timestamp) == (
        E.NONE, True, 2, 12)
    assert (again[1].is_duplicate, again[1].assigned_base_offset) == (False, 5)
    assert log_info(cp).high_watermark == 6


def test_duplicate_window_is_the_last_five_batches(cp: ControlPlane) -> None:
    create(cp)
    for seq in range(6):
        commit(cp, batch(0, pid=1, epoch=0, seq=seq))
    assert commit(cp, batch(0, pid=1, epoch=0, seq=1))[0].assigned_base_offset == 1
    assert commit(cp, batch(0, pid=1, epoch=0, seq=0))[0].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.parametrize("seqs", [(0, 2), (1,), (0, 0, 3), (0, 1, 1)])
def test_out_of_order_sequences(cp: ControlPlane, seqs: tuple[int, ...]) -> None:
    create(cp)
    errors = [commit(cp, batch(0, pid=1, epoch=0, seq=s))[0] for s in seqs]
    if seqs == (0, 1, 1):  # the retry of the last batch
        assert errors[-1].is_duplicate and errors[-1].assigned_base_offset == 1
    elif seqs == (0, 0, 3):
        assert errors[1].is_duplicate and errors[2].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    else:
        assert errors[-1].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert errors[-1].assigned_base_offset == -1 and errors[-1].log_start_offset == 0


def test_epochs_fence_and_restart_the_sequence(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, pid=1, epoch=3, seq=0), batch(0, pid=1, epoch=3, seq=1))
    assert commit(cp, batch(0, pid=1, epoch=4, seq=2))[0].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit(cp, batch(0, pid=1, epoch=4, seq=0))[0].assigned_base_offset == 2
    assert commit(cp, batch(0, pid=1, epoch=3, seq=2))[0].error is E.INVALID_PRODUCER_EPOCH
    assert commit(cp, batch(0, pid=1, epoch=3, seq=1))[0].error is E.INVALID_PRODUCER_EPOCH  # even a "retry"
    assert commit(cp, batch(0, pid=1, epoch=4, seq=1))[0].assigned_base_offset == 3


def test_sequence_wraps_from_int32_max_to_zero(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, pid=1, epoch=0, seq=0))
    # A fresh epoch would have to start at 0, so reach the top of the range by records, not batches.
    r = commit(cp, batch(0, INT32_MAX, pid=1, epoch=0, seq=1, size=10))  # sequences 1 .. Int32.MAX
    assert (r[0].error, r[0].assigned_base_offset) == (E.NONE, 1)
    wrapped = commit(cp, batch(0, 2, pid=1, epoch=0, seq=0))[0]
    assert (wrapped.error, wrapped.is_duplicate, wrapped.assigned_base_offset) == (E.NONE, False, INT32_MAX + 1)
    assert commit(cp, batch(0, pid=1, epoch=0, seq=2))[0].assigned_base_offset == INT32_MAX + 3
    assert commit(cp, batch(0, 2, pid=1, epoch=0, seq=0))[0].is_duplicate


def test_producer_state_is_per_partition_and_non_idempotent_batches_are_not_checked(cp: ControlPlane) -> None:
    create(cp)
    r = commit(cp, batch(0, pid=1, epoch=0, seq=0), batch(1, pid=1, epoch=0, seq=0), batch(1), batch(1))
    assert [x.assigned_base_offset for x in r] == [0, 0, 1, 2]
    assert not any(x.is_duplicate for x in r)


# -- coalescing --------------------------------------------------------------------------------


def test_byte_adjacent_batches_coalesce_into_one_row(cp: ControlPlane) -> None:
    create(cp)
    r = commit(cp, batch(0, 2, size=10, ts=5), batch(0, 3, size=20, ts=9), batch(0, 1, size=30, ts=7),
               batch(1, 1, size=5), key="k")
    assert [x.assigned_base_offset for x in r] == [0, 2, 5, 0]
    (row,) = find(cp).batches
    assert (row.byte_offset, row.byte_size, row.base_offset, row.last_offset, row.batch_max_timestamp) == (
        0, 60, 0, 5, 9)
    assert find(cp, 0, 3).batches == (row,)
    assert retention(cp, rbytes=10).log_start_offset == 6  # a coalesced row goes as a whole


def test_rejected_bytes_gaps_and_other_formats_break_runs(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, pid=1, epoch=0, seq=0))
    commit(cp, batch(0, size=10), batch(0, pid=1, epoch=0, seq=0, size=10), batch(0, size=10), Gap(3),
           batch(0, size=10), batch(0, size=10, ts_type=LAT), batch(0, size=10, magic=1))
    assert [(b.byte_offset, b.byte_size) for b in find(cp, 0, 1).batches] == [(0, 10), (20, 10), (33, 10), (43, 10),
                                                                            (53, 10)]
    commit(cp, batch(0, size=10))  # never across objects
    assert len(find(cp, 0, 1).batches) == 6


# -- transactions ------------------------------------------------------------------------------


def txn_batch(partition: int, pid: int, seq: int, records: int = 1, epoch: int = 0,
              size: int = 100) -> CommitBatchRequest:
    return batch(partition, records, pid=pid, epoch=epoch, seq=seq, txn=True, size=size)


def test_ongoing_transaction_holds_the_last_stable_offset(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 2))
    r = commit(cp, batch(0, size=10), txn_batch(0, 9, 0, 2), batch(0, 3, ts=NOW))
    assert [x.assigned_base_offset for x in r] == [2, 3, 5]
    info = log_info(cp)
    assert (info.last_stable_offset, info.high_watermark) == (3, 8)
    assert offsets(find(cp, isolation=RC)) == [(0, 1), (2, 2)]  # the transaction's batch starts a row
    uncommitted = find(cp)
    assert offsets(uncommitted)[-1][1] == 7 and uncommitted.last_stable_offset == 3
    assert find(cp, 0, 3, isolation=RC).batches == ()
    assert list_offset(cp, -1, isolation=RC).offset == 3 and list_offset(cp, -1).offset == 8
    assert list_offset(cp, -3, isolation=RC).offset == -1  # the max-timestamp row ends past the LSO
    assert list_offset(cp, -3).offset == 7


def test_commit_marker_releases_the_last_stable_offset(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, txn_batch(0, 9, 0), txn_batch(1, 9, 0))
    r = commit(cp, marker(0, 9, 0, COMMIT), marker(1, 9, 0, COMMIT))
    assert [x.assigned_base_offset for x in r] == [1, 1]
    assert [(i.last_stable_offset, i.high_watermark) for i in cp.get_logs(
        [TopicIdPartition(T1, 0), TopicIdPartition(T1, 1)])] == [(2, 2), (2, 2)]
    f = find(cp, isolation=RC)
    assert offsets(f) == [(0, 0), (1, 1)] and f.aborted_transactions == ()


def test_abort_marker_records_the_aborted_range_for_read_committed(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 2), txn_batch(0, 5, 0, 3), txn_batch(0, 6, 0, 1))
    commit(cp, txn_batch(0, 5, 3, 2))
    commit(cp, marker(0, 5, 0, ABORT))  # offset 8
    assert log_info(cp).last_stable_offset == 5  # producer 6 is still open at offset 5
    commit(cp, marker(0, 6, 0, COMMIT))  # offset 9
    assert log_info(cp).last_stable_offset == 10
    f = find(cp, isolation=RC)
    assert f.aborted_transactions == (AbortedTxn(5, 2, 8),)
    assert find(cp).aborted_transactions == ()  # read_uncommitted gets no list
    assert find(cp, 0, 9, isolation=RC).aborted_transactions == ()  # no overlap with [9, 10)
    assert find(cp, 0, 0, isolation=RC, max_batches=1).aborted_transactions == ()  # answered range is [0, 2)


def test_interleaved_transactions_and_a_marker_without_a_transaction(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, txn_batch(0, 1, 0), txn_batch(0, 2, 0), txn_batch(0, 1, 1))
    assert log_info(cp).last_stable_offset == 0
    commit(cp, marker(0, 1, 0, ABORT))
    assert log_info(cp).last_stable_offset == 1
    r = commit(cp, marker(0, 1, 0, ABORT), marker(0, 3, 0, ABORT))  # a retried marker, an empty transaction
    assert [x.error for x in r] == [E.NONE, E.NONE]
    commit(cp, marker(0, 2, 0, COMMIT))
    assert log_info(cp).last_stable_offset == log_info(cp).high_watermark == 7
    assert find(cp, isolation=RC).aborted_transactions == (AbortedTxn(1, 0, 3),)
    assert commit(cp, txn_batch(0, 1, 2))[0].assigned_base_offset == 7  # the next transaction
    assert log_info(cp).last_stable_offset == 7


def test_transactional_batch_checks(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, txn_batch(0, 1, 0))
    assert commit(cp, batch(0, pid=1, epoch=0, seq=1))[0].error is E.INVALID_TXN_STATE
    assert commit(cp, batch(0, txn=True))[0].error is E.INVALID_REQUEST
    assert commit(cp, marker(0, -1, -1))[0].error is E.INVALID_REQUEST
    dup = commit(cp, txn_batch(0, 1, 0))[0]
    assert dup.is_duplicate and log_info(cp).last_stable_offset == 0


def test_markers_are_fenced_by_producer_and_coordinator_epochs(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, txn_batch(0, 1, 0, epoch=2), marker(0, 1, 2, COMMIT, coordinator_epoch=5))
    commit(cp, txn_batch(0, 1, 1, epoch=2))
    assert commit(cp, marker(0, 1, 1, COMMIT, coordinator_epoch=5))[0].error is E.INVALID_PRODUCER_EPOCH
    assert commit(cp, marker(0, 1, 2, COMMIT, coordinator_epoch=4))[0].error is E.TRANSACTION_COORDINATOR_FENCED
    # A coordinator fencing the producer aborts with a bumped epoch; the new epoch starts at sequence 0.
    assert commit(cp, marker(0, 1, 3, ABORT, coordinator_epoch=6))[0].assigned_base_offset == 3
    assert find(cp, isolation=RC).aborted_transactions == (AbortedTxn(1, 2, 3),)
    assert commit(cp, txn_batch(0, 1, 2, epoch=2))[0].error is E.INVALID_PRODUCER_EPOCH
    assert commit(cp, txn_batch(0, 1, 2, epoch=3))[0].error is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert commit(cp, txn_batch(0, 1, 0, epoch=3))[0].assigned_base_offset == 4


def test_moving_the_log_start_drops_aborted_transactions_wholly_below_it(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, txn_batch(0, 1, 0, 2), marker(0, 1, 0, ABORT))  # [0, 2]
    commit(cp, txn_batch(0, 2, 0, 2), batch(0), marker(0, 2, 0, ABORT))  # [3, 6]
    delete_records(cp, 3)
    assert find(cp, 0, 3, isolation=RC).aborted_transactions == (AbortedTxn(2, 3, 6),)
    delete_records(cp, 5)
    assert find(cp, 0, 5, isolation=RC).aborted_transactions == (AbortedTxn(2, 3, 6),)  # straddles: kept
    retention(cp, rbytes=0)
    commit(cp, batch(0))
    assert find(cp, 0, 7, isolation=RC).aborted_transactions == ()


def test_log_start_past_an_open_transaction_raises_the_last_stable_offset(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, txn_batch(0, 1, 0), batch(0, 3))
    delete_records(cp, 2)
    assert log_info(cp).last_stable_offset == 2
    commit(cp, marker(0, 1, 0, ABORT))
    assert log_info(cp).last_stable_offset == 5
    assert find(cp, 0, 2, isolation=RC).aborted_transactions == (AbortedTxn(1, 0, 4),)


# -- tiered storage: pruning ---------------------------------------------------------------------


def test_prune_batches_below_the_highest_tiered_offset(cp: ControlPlane) -> None:
    create(cp)
    commit(cp, batch(0, 3), key="a")
    commit(cp, batch(0, 3), key="b")

    def prune(offset: int) -> PruneBatchesResponse:
        return cp.prune_batches_below_highest_tiered_offset([PruneBatchesRequest(T1, 0, offset)], now_ms=NOW)[0]

    assert (prune(1).batches_deleted, prune(1).log_start_offset) == (0, 0)
    r = prune(2)
    assert (r.batches_deleted, r.log_start_offset, deletable(cp)) == (1, 3, ["a"])
    assert prune(0).log_start_offset == 3  # forward only
    r = prune(10)  # past the high watermark: the start stops there
    assert (r.batches_deleted, r.log_start_offset, log_info(cp).byte_size) == (1, 6, 0)
    empty = prune(3)
    assert (empty.batches_deleted, empty.log_start_offset) == (0, 6)
    unknown = cp.prune_batches_below_highest_tiered_offset([PruneBatchesRequest(T2, 0, 0)], now_ms=NOW)[0]
    assert unknown.error is E.UNKNOWN_TOPIC_OR_PARTITION


# -- determinism -------------------------------------------------------------------------------


def test_no_operation_reads_the_wall_clock(cp: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden() -> float:
        raise AssertionError("the coordinator must take time from the command")

    for name in ("time", "time_ns", "monotonic", "monotonic_ns"):
        monkeypatch.setattr(time, name, forbidden)
    create(cp)
    commit(cp, batch(0, ts_type=LAT), txn_batch(1, 1, 0))
    commit(cp, marker(1, 1, 0, ABORT))
    delete_records(cp, 1)
    retention(cp, rbytes=0, rms=0)
    cp.prune_batches_below_highest_tiered_offset([PruneBatchesRequest(T1, 1, 0)], now_ms=NOW)
    find(cp, 1, 1, isolation=RC)
    list_offset(cp, 0)
    deletable(cp)
    cp.delete_topic(T1, now_ms=NOW)


# -- the classic-to-diskless switch (init at the seal) -----------------------------------------


def init(cp: ControlPlane, seal: int, *, start: int = 0, epoch: int = 4, partition: int = 0,
         producers: tuple[InitProducer, ...] = ()) -> InitDisklessLogResponse:
    return cp.init_diskless_log([InitDisklessLogRequest(T1, "topic-1", partition, seal, start, epoch, producers)],
                                now_ms=NOW)[0]


def test_a_switched_partition_starts_at_its_seal_and_serves_its_epoch(cp: ControlPlane) -> None:
    assert init(cp, 120, start=20).created
    info = log_info(cp)
    assert (info.log_start_offset, info.high_watermark, info.last_stable_offset) == (120, 120, 120)
    assert (info.diskless_start_offset, info.remote_log_start_offset, info.leader_epoch) == (120, 20, 4)
    assert list_offset(cp, -2).offset == 20  # the partition starts in its classic (tiered) part
    assert [x.assigned_base_offset for x in commit(cp, batch(0, 3))] == [120]
    f = find(cp, 0, 120)
    assert offsets(f) == [(120, 122)] and f.leader_epoch == 4
    assert find(cp, 0, 119).error == E.OFFSET_OUT_OF_RANGE  # below the seal: the classic log serves it
    # a second init (another broker, a retry) changes nothing
    assert not init(cp, 500, epoch=9).created
    assert (log_info(cp).high_watermark, log_info(cp).leader_epoch) == (123, 4)


def test_classic_producers_carry_on_across_the_seal(cp: ControlPlane) -> None:
    producers = (InitProducer(7, 2, 0, ((0, 4, 90, 11), (5, 9, 95, 12))),  # idempotent, sequences 0-9
                 InitProducer(8, 1, 3, ((0, 0, 100, 13),), txn_first_offset=100))  # an open transaction
    init(cp, 101, producers=producers)
    assert log_info(cp).last_stable_offset == 100  # held by the open transaction from the classic part
    dup = commit(cp, batch(0, 5, pid=7, epoch=2, seq=5))[0]  # a retry of the last classic batch
    assert (dup.is_duplicate, dup.assigned_base_offset, dup.batch_timestamp) == (True, 95, 12)
    assert commit(cp, batch(0, 2, pid=7, epoch=2, seq=10))[0].assigned_base_offset == 101  # the next sequence
    assert commit(cp, batch(0, 1, pid=7, epoch=2, seq=20))[0].error == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    r = commit(cp, marker(0, 8, 1, ABORT, coordinator_epoch=3))[0]
    assert r.error == E.NONE
    info = log_info(cp)
    assert info.last_stable_offset == info.high_watermark == 104
    assert find(cp, 0, 101, isolation=RC).aborted_transactions == (AbortedTxn(8, 100, 103),)
