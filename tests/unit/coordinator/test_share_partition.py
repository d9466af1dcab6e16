"""The KIP-932 share-partition state machine (``strata.coordinator.share.share_partition``).

The unit tests pin the behaviours Kafka's ``SharePartitionTest`` checks (acquire, acknowledge, lock timeout,
delivery-count limit, in-flight cap, member release, log-start moves, throttling, persistence hand-off);
the stateful test drives random operations against a naive per-offset model and checks every record's
state, the SPSO/SPEO, the next fetch offset, the delivery-complete count and the next lock deadline after
every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from strata.coordinator.share.records import StateBatch
from strata.coordinator.share.share_partition import (
    INVALID_RECORD_STATE,
    AcquiredRecords,
    PendingUpdate,
    RecordState,
    SharePartition,
)
from strata.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                               RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
NONE = int(ErrorCode.NONE)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
LOCK = 1000


def _sp(start: int = 0, batches: list[StateBatch] | None = None, **kw: int) -> SharePartition:
    kw.setdefault("lock_duration_ms", LOCK)
    sp = SharePartition("g", "topic-id", 0, **kw)
    sp.initialize(start, batches or [], state_epoch=3, leader_epoch=7)
    return sp


def _log(*sizes: int, start: int = 0) -> list[tuple[int, int]]:
    """Contiguous log batches of the given record counts."""
    out = []
    for n in sizes:
        out.append((start, start + n - 1))
        start += n
    return out


def _read(log: list[tuple[int, int]], offset: int, n: int = 100) -> list[tuple[int, int]]:
    return [b for b in log if b[1] >= offset][:n]


def _states(sp: SharePartition) -> dict[int, tuple[RecordState, int, str]]:
    return {r.offset: (r.state, r.delivery_count, r.member_id) for r in sp.records()}


def _ok(result: tuple[int, PendingUpdate | None]) -> PendingUpdate:
    code, update = result
    assert code == NONE and update is not None, code
    return update


def _ack_commit(sp: SharePartition, member: str, batches: list[tuple[int, int, list[int]]], now: int = 0) -> None:
    sp.commit(_ok(sp.acknowledge(member, batches, now)))


# ---------------------------------------------------------------------------------------------- acquire


def test_new_records_split_at_log_batch_boundaries_by_batch_size() -> None:
    sp = _sp()
    log = _log(10, 10, 10, 10, 5)
    got = sp.acquire("m", log, max_records=500, batch_size=20, now_ms=0)
    assert got == [AcquiredRecords(0, 19, 1), AcquiredRecords(20, 39, 1), AcquiredRecords(40, 44, 1)]
    assert (sp.start_offset, sp.end_offset, sp.in_flight_count) == (0, 44, 45)
    assert sp.next_fetch_offset() == 45
    assert sp.cached_batch_count == 3
    assert all(s == (ACQUIRED, 1, "m") for s in _states(sp).values())


def test_max_records_is_a_soft_cap_at_log_batch_end() -> None:
    sp = _sp()
    got = sp.acquire("m", _log(10, 10), max_records=3, batch_size=500, now_ms=0)
    assert got == [AcquiredRecords(0, 9, 1)]
    assert sp.next_fetch_offset() == 10


def test_max_records_stops_after_the_cached_batch_that_reaches_it() -> None:
    sp = _sp()
    log = _log(5, 5, 5)
    sp.acquire("m", log, 100, 5, 0)
    _ack_commit(sp, "m", [(0, 14, [RELEASE])])
    assert sp.acquire("n", log, 3, 5, 0) == [AcquiredRecords(0, 4, 2)]
    assert sp.acquire("n", log, 6, 5, 0) == [AcquiredRecords(5, 9, 2), AcquiredRecords(10, 14, 2)]


def test_record_limit_mode_is_exact_and_caches_the_rest_as_available() -> None:
    sp = _sp()
    log = _log(10, 10)
    assert sp.acquire("m", log, 3, 500, 0, record_limit_mode=True) == [AcquiredRecords(0, 2, 1)]
    assert sp.end_offset == 9
    assert sp.next_fetch_offset() == 3
    assert _states(sp)[5] == (AVAILABLE, 0, "")
    # The rest goes out on the next fetch, delivered for the first time.
    assert sp.acquire("n", _read(log, 3), 4, 500, 0, record_limit_mode=True, fetch_offset=3) == [
        AcquiredRecords(3, 6, 1)]
    assert sp.acquire("n", _read(log, 7), 100, 500, 0, record_limit_mode=True, fetch_offset=7) == [
        AcquiredRecords(7, 9, 1), AcquiredRecords(10, 19, 1)]


def test_nothing_acquired_below_spso_or_twice() -> None:
    sp = _sp(start=5)
    assert sp.acquire("m", [(0, 9)], 100, 100, 0, fetch_offset=5) == [AcquiredRecords(5, 9, 1)]
    # Same read again: everything is held.
    assert sp.acquire("n", [(0, 9)], 100, 100, 0, fetch_offset=5) == []
    assert sp.acquire("m", [(0, 3)], 100, 100, 0) == []


def test_acquire_before_initialize_is_an_error() -> None:
    sp = SharePartition("g", "t", 0)
    with pytest.raises(RuntimeError):
        sp.acquire("m", [(0, 1)], 10, 10, 0)


# ---------------------------------------------------------------------------------------------- acknowledge


def test_accept_commits_and_advances_spso_past_terminal_only() -> None:
    sp = _sp()
    sp.acquire("m", _log(10, 10), 100, 10, 0)
    update = _ok(sp.acknowledge("m", [(0, 4, [ACCEPT])], 1))
    # Visible at once, but the SPSO waits for the write.
    assert update.state_batches == (StateBatch(0, 4, int(ACKNOWLEDGED), 1),)
    assert update.start_offset == 0 and update.delivery_complete_count == 5
    assert (update.state_epoch, update.leader_epoch) == (3, 7)
    assert sp.start_offset == 0
    sp.commit(update)
    assert sp.start_offset == 5 and sp.delivery_complete_count == 0
    # Offsets 12-19 finished but 10-11 are not: the SPSO stops at 10.
    _ack_commit(sp, "m", [(5, 9, [REJECT]), (12, 19, [ACCEPT])])
    assert sp.start_offset == 10
    assert sp.delivery_complete_count == 8
    _ack_commit(sp, "m", [(10, 11, [GAP])])
    assert (sp.start_offset, sp.end_offset, sp.cached_batch_count) == (20, 19, 0)
    assert sp.next_fetch_offset() == 20 and sp.delivery_complete_count == 0


def test_acknowledge_errors() -> None:
    sp = _sp()
    log = _log(10, 10)
    sp.acquire("m", log[:1], 100, 100, 0)
    assert sp.acknowledge("x", [(0, 9, [ACCEPT])], 0) == (INVALID_RECORD_STATE, None)  # not the owner
    assert sp.acknowledge("m", [(0, 10, [ACCEPT])], 0) == (INVALID_REQUEST, None)  # past the cache
    assert sp.acknowledge("m", [(15, 16, [ACCEPT])], 0) == (INVALID_REQUEST, None)
    assert sp.acknowledge("m", [(0, 9, [5])], 0) == (INVALID_REQUEST, None)  # unknown type
    assert sp.acknowledge("m", [(0, 9, [1, 1])], 0) == (INVALID_REQUEST, None)  # types do not match the range
    assert sp.acknowledge("m", [(3, 2, [1])], 0) == (INVALID_REQUEST, None)
    assert sp.acknowledge("m", [(0, 3, [1]), (3, 4, [1])], 0) == (INVALID_REQUEST, None)  # overlap
    assert sp.acknowledge("m", [(0, 3, [])], 0) == (INVALID_REQUEST, None)
    # One bad offset fails the whole request and changes nothing.
    _ack_commit(sp, "m", [(5, 5, [RELEASE])])
    before = _states(sp)
    assert sp.acknowledge("m", [(0, 4, [ACCEPT]), (5, 6, [ACCEPT])], 0) == (INVALID_RECORD_STATE, None)
    assert _states(sp) == before
    assert sp.outstanding_updates == 0
    # Empty cache: nothing there to acknowledge.
    empty = _sp(start=100)
    assert empty.acknowledge("m", [(100, 101, [ACCEPT])], 0) == (INVALID_RECORD_STATE, None)


def test_ranges_below_spso_are_ignored_and_straddling_ranges_clipped() -> None:
    sp = _sp()
    sp.acquire("m", _log(10), 100, 100, 0)
    _ack_commit(sp, "m", [(0, 4, [ACCEPT])])
    assert sp.start_offset == 5
    update = _ok(sp.acknowledge("m", [(0, 3, [ACCEPT]), (4, 7, [REJECT])], 0))
    assert update.state_batches == (StateBatch(5, 7, int(ARCHIVED), 1),)
    sp.commit(update)
    assert sp.start_offset == 8


def test_per_offset_types_and_coalesced_state_batches() -> None:
    sp = _sp()
    sp.acquire("m", _log(6), 100, 100, 0)
    update = _ok(sp.acknowledge("m", [(0, 5, [ACCEPT, ACCEPT, GAP, REJECT, RELEASE, ACCEPT])], 0))
    assert update.state_batches == (
        StateBatch(0, 1, int(ACKNOWLEDGED), 1), StateBatch(2, 3, int(ARCHIVED), 1),
        StateBatch(4, 4, int(AVAILABLE), 1), StateBatch(5, 5, int(ACKNOWLEDGED), 1))
    sp.commit(update)
    assert sp.start_offset == 4 and sp.next_fetch_offset() == 4
    # Identical per-offset types act as one type: the batch stays whole.
    sp2 = _sp()
    sp2.acquire("m", _log(6), 100, 100, 0)
    _ack_commit(sp2, "m", [(0, 5, [ACCEPT] * 6)])
    assert sp2.start_offset == 6


def test_in_transition_records_cannot_be_acknowledged_or_acquired() -> None:
    sp = _sp()
    log = _log(10)
    sp.acquire("m", log, 100, 100, 0)
    update = _ok(sp.acknowledge("m", [(0, 9, [RELEASE])], 0))
    assert sp.acknowledge("m", [(0, 9, [ACCEPT])], 0) == (INVALID_RECORD_STATE, None)
    assert sp.next_fetch_offset() == 10
    assert sp.acquire("n", log, 100, 100, 0) == []
    sp.commit(update)
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("n", log, 100, 100, 0) == [AcquiredRecords(0, 9, 2)]


def test_rollback_restores_exactly() -> None:
    sp = _sp()
    sp.acquire("m", _log(10, 10), 100, 10, 0)
    before = _states(sp)
    deadline = sp.next_lock_deadline()
    update = _ok(sp.acknowledge("m", [(2, 12, [ACCEPT]), (14, 15, [RELEASE, REJECT])], 5))
    assert _states(sp) != before
    sp.rollback(update, now_ms=10)
    assert _states(sp) == before
    assert sp.delivery_complete_count == 0 and sp.start_offset == 0
    assert sp.next_lock_deadline() == deadline
    # And the records can be acknowledged again.
    _ack_commit(sp, "m", [(0, 19, [ACCEPT])], 20)
    assert sp.start_offset == 20
    with pytest.raises(ValueError):
        sp.commit(update)


def test_rollback_after_lock_expiry_releases_or_archives() -> None:
    sp = _sp(delivery_count_limit=2)
    log = _log(4)
    sp.acquire("m", log, 100, 100, 0)
    update = _ok(sp.acknowledge("m", [(0, 3, [ACCEPT])], 10))
    assert sp.expire_locks(LOCK + 1) is None  # nothing ACQUIRED: the records are in transition
    sp.rollback(update, now_ms=LOCK + 1)
    assert all(s == (AVAILABLE, 1, "") for s in _states(sp).values())
    sp.acquire("m", log, 100, 100, LOCK + 1)
    update = _ok(sp.acknowledge("m", [(0, 3, [ACCEPT])], LOCK + 2))
    sp.rollback(update, now_ms=10 * LOCK)  # the second delivery was the last
    assert (sp.start_offset, sp.cached_batch_count) == (4, 0)


def test_release_makes_available_and_redelivers_with_higher_count() -> None:
    sp = _sp(delivery_count_limit=2)
    log = _log(5)
    assert sp.acquire("m", log, 100, 100, 0) == [AcquiredRecords(0, 4, 1)]
    _ack_commit(sp, "m", [(0, 4, [RELEASE])])
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("n", log, 100, 100, 0) == [AcquiredRecords(0, 4, 2)]
    update = _ok(sp.acknowledge("n", [(0, 4, [RELEASE])], 0))
    assert update.state_batches == (StateBatch(0, 4, int(ARCHIVED), 2),)  # at the limit: archived
    sp.commit(update)
    assert sp.start_offset == 5 and sp.next_fetch_offset() == 5


def test_acknowledge_after_lock_deadline_fails_even_before_expiry_runs() -> None:
    sp = _sp()
    sp.acquire("m", _log(3), 100, 100, 0)
    assert sp.acknowledge("m", [(0, 2, [ACCEPT])], LOCK) == (INVALID_RECORD_STATE, None)
    assert sp.acknowledge("m", [(0, 2, [ACCEPT])], LOCK - 1)[0] == NONE


# ---------------------------------------------------------------------------------------------- locks


def test_lock_expiry_redelivers_to_another_member() -> None:
    sp = _sp()
    log = _log(5, 5)
    sp.acquire("m", log[:1], 100, 100, 0)
    sp.acquire("m", log[1:], 100, 100, 500)
    assert sp.next_lock_deadline() == LOCK
    assert sp.expire_locks(LOCK - 1) is None
    update = sp.expire_locks(LOCK)
    assert update is not None
    assert update.state_batches == (StateBatch(0, 4, int(AVAILABLE), 1),)
    assert _states(sp)[0] == (AVAILABLE, 1, "")  # applied at once
    sp.commit(update)
    assert sp.next_lock_deadline() == LOCK + 500
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("n", _read(log, 0), 100, 100, LOCK) == [AcquiredRecords(0, 4, 2)]
    assert sp.acknowledge("m", [(0, 4, [ACCEPT])], LOCK) == (INVALID_RECORD_STATE, None)
    _ack_commit(sp, "n", [(0, 4, [ACCEPT])], LOCK)


def test_renew_restarts_the_lock_without_a_write() -> None:
    sp = _sp()
    sp.acquire("m", _log(6), 100, 100, 0)
    update = _ok(sp.acknowledge("m", [(0, 5, [RENEW])], 600))
    assert not update.needs_write and update.in_transition == ()
    sp.commit(update)
    assert sp.next_lock_deadline() == 600 + LOCK
    assert sp.expire_locks(LOCK) is None
    # Renewing part of a batch splits it.
    _ok(sp.acknowledge("m", [(2, 3, [RENEW])], 900))
    assert sp.next_lock_deadline() == 600 + LOCK
    update = sp.expire_locks(600 + LOCK)
    assert update is not None
    assert update.state_batches == (StateBatch(0, 1, 0, 1), StateBatch(4, 5, 0, 1))
    assert sp.next_lock_deadline() == 900 + LOCK


def test_delivery_count_limit_archives_after_repeated_timeouts() -> None:
    limit = 3
    sp = _sp(delivery_count_limit=limit)
    log = _log(1)
    now = 0
    for delivery in range(1, limit + 1):
        assert sp.acquire(f"m{delivery}", log, 10, 10, now) == [AcquiredRecords(0, 0, delivery)]
        now += LOCK
        update = sp.expire_locks(now)
        assert update is not None
        sp.commit(update)
    assert sp.start_offset == 1 and sp.cached_batch_count == 0
    assert sp.acquire("m", log, 10, 10, now) == []


def test_expiry_update_rollback_keeps_the_change() -> None:
    sp = _sp(delivery_count_limit=1)
    sp.acquire("m", _log(3), 10, 10, 0)
    update = sp.expire_locks(LOCK)
    assert update is not None and update.state_batches == (StateBatch(0, 2, int(ARCHIVED), 1),)
    sp.rollback(update, LOCK)
    assert sp.start_offset == 3


# ---------------------------------------------------------------------------------------------- cap, release, log start


def test_in_flight_cap() -> None:
    # The cap limits new records to the end of the log batch holding the last one allowed (a soft cap).
    sp = _sp(max_in_flight=10)
    assert sp.acquire("m", _log(7, 7, 7), 100, 5, 0) == [AcquiredRecords(0, 6, 1), AcquiredRecords(7, 13, 1)]
    assert sp.in_flight_count == 14 and not sp.can_acquire()
    log = _log(5, 5, 5, 5)
    sp2 = _sp(max_in_flight=10)
    assert sp2.acquire("m", log[:2], 100, 5, 0) == [AcquiredRecords(0, 4, 1), AcquiredRecords(5, 9, 1)]
    assert not sp2.can_acquire()
    assert sp2.acquire("m", _read(log, 10), 100, 5, 0, fetch_offset=10) == []
    _ack_commit(sp2, "m", [(5, 9, [RELEASE])])
    assert sp2.can_acquire()
    # At the cap only [fetch offset, SPEO] can go out again, even if the read returned more.
    assert sp2.acquire("n", _read(log, 5), 100, 5, 0, fetch_offset=5) == [AcquiredRecords(5, 9, 2)]
    assert sp2.end_offset == 9
    # Finishing records below frees room.
    _ack_commit(sp2, "m", [(0, 4, [ACCEPT])])
    assert sp2.in_flight_count == 5
    assert sp2.acquire("n", _read(log, 10), 100, 100, 0, fetch_offset=10) == [AcquiredRecords(10, 14, 1)]


def test_release_member_gives_back_only_its_records() -> None:
    sp = _sp(delivery_count_limit=2)
    log = _log(4, 4, 4)
    sp.acquire("a", log[:1], 100, 100, 0)
    sp.acquire("b", log[1:2], 100, 100, 0)
    sp.acquire("a", log[2:], 100, 100, 0)
    _ack_commit(sp, "a", [(8, 8, [ACCEPT])])
    update = sp.release_member("a")
    assert update.state_batches == (StateBatch(0, 3, 0, 1), StateBatch(9, 11, 0, 1))
    sp.commit(update)
    states = _states(sp)
    assert states[0] == (AVAILABLE, 1, "") and states[4] == (ACQUIRED, 1, "b") and states[8][0] == ACKNOWLEDGED
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("c", log, 100, 100, 0) == [AcquiredRecords(0, 3, 2), AcquiredRecords(9, 11, 2)]
    update = sp.release_member("c")
    assert {b.delivery_state for b in update.state_batches} == {int(ARCHIVED)}
    sp.commit(update)
    assert sp.start_offset == 4
    assert not sp.release_member("nobody").needs_write


def test_log_start_move_drops_records_and_moves_spso() -> None:
    sp = _sp()
    log = _log(10, 10)
    sp.acquire("m", log, 100, 10, 0)
    _ack_commit(sp, "m", [(0, 9, [RELEASE]), (12, 13, [ACCEPT])])
    pending = _ok(sp.acknowledge("m", [(10, 10, [ACCEPT])], 0))
    sp.update_log_start(12)
    assert sp.start_offset == 14  # 12-13 were finished already
    assert sp.next_fetch_offset() == 20
    assert sp.delivery_complete_count == 0
    sp.commit(pending)  # its record is gone: nothing to do
    # Acknowledging dropped offsets is ignored; the rest is checked as usual.
    _ack_commit(sp, "m", [(5, 15, [ACCEPT])])
    assert sp.start_offset == 16
    sp.update_log_start(10)  # backwards: ignored
    sp.update_log_start(100)
    assert (sp.start_offset, sp.end_offset, sp.cached_batch_count) == (100, 99, 0)
    assert sp.next_fetch_offset() == 100
    assert sp.acquire("m", [(95, 105)], 100, 100, 0, fetch_offset=100) == [AcquiredRecords(100, 105, 1)]


# ---------------------------------------------------------------------------------------------- throttling


def _release_all(sp: SharePartition, member: str, got: list[AcquiredRecords]) -> None:
    _ack_commit(sp, member, [(r.first_offset, r.last_offset, [RELEASE]) for r in got])


def test_throttled_acquisition_of_high_delivery_count_records() -> None:
    sp = _sp(delivery_count_limit=5)  # throttle limit max(2, ceil(5/2)) = 3
    assert sp.throttle_limit == 3
    log = _log(8, 4)
    assert sp.acquire("m", log, 100, 8, 0) == [AcquiredRecords(0, 7, 1), AcquiredRecords(8, 11, 1)]
    _release_all(sp, "m", [AcquiredRecords(0, 7, 1)])
    assert sp.acquire("m", log, 100, 100, 0) == [AcquiredRecords(0, 7, 2)]
    _release_all(sp, "m", [AcquiredRecords(0, 7, 2)])
    assert sp.acquire("m", log, 100, 100, 0) == [AcquiredRecords(0, 7, 3)]
    _release_all(sp, "m", [AcquiredRecords(0, 7, 3)])
    # Delivered 3 times: 8 >> 1 = 4 records at a time, and nothing after them.
    got = sp.acquire("m", log + _log(5, start=12), 100, 100, 0)
    assert got == [AcquiredRecords(0, 3, 4)]
    assert sp.acquire("m", _read(log, 4), 100, 100, 0, fetch_offset=4) == [AcquiredRecords(4, 7, 4)]
    _release_all(sp, "m", [AcquiredRecords(0, 7, 4)])
    # On the last attempt each record goes out alone.
    for offset in range(8):
        assert sp.acquire("m", log, 100, 100, 0, fetch_offset=offset) == [AcquiredRecords(offset, offset, 5)]
    update = _ok(sp.acknowledge("m", [(0, 7, [RELEASE])], 0))
    assert update.state_batches == (StateBatch(0, 7, int(ARCHIVED), 5),)
    sp.commit(update)
    assert sp.start_offset == 8


def test_throttled_batch_is_not_acquired_after_other_records() -> None:
    log = _log(3, 3)
    # 0-2 delivered twice (at the throttle limit 2 of limit 4), 3-5 once.
    sp = _sp(delivery_count_limit=4)
    sp.acquire("m", log, 100, 3, 0)
    _ack_commit(sp, "m", [(0, 5, [RELEASE])])
    assert sp.acquire("m", log[:1], 100, 3, 0) == [AcquiredRecords(0, 2, 2)]
    _ack_commit(sp, "m", [(0, 2, [RELEASE])])
    # The throttled batch comes first: 3 >> 1 = 1 record of it, then nothing else.
    assert sp.acquire("x", log, 100, 3, 0) == [AcquiredRecords(0, 0, 3)]
    # 0-2 once, 3-5 twice: 0-2 go out and the throttled 3-5 wait for a fetch of their own.
    sp2 = _sp(delivery_count_limit=4)
    sp2.acquire("m", log, 100, 3, 0)
    _ack_commit(sp2, "m", [(0, 5, [RELEASE])])
    assert sp2.acquire("m", _read(log, 3), 100, 3, 0, fetch_offset=3) == [AcquiredRecords(3, 5, 2)]
    _ack_commit(sp2, "m", [(3, 5, [RELEASE])])
    assert sp2.acquire("x", log + _log(3, start=6), 100, 3, 0) == [AcquiredRecords(0, 2, 2)]
    assert sp2.acquire("x", _read(log, 3), 100, 3, 0, fetch_offset=3) == [AcquiredRecords(3, 3, 3)]


def test_record_on_its_last_attempt_waits_for_a_fetch_of_its_own() -> None:
    sp = _sp(delivery_count_limit=5)
    log = _log(2)
    sp.acquire("m", log, 10, 10, 0)
    # Offset 0 stays held (renewed), offset 1 goes round three more times.
    _ack_commit(sp, "m", [(0, 1, [RENEW, RELEASE])])
    for delivery in (2, 3, 4):
        assert sp.acquire("x", log, 10, 10, 0) == [AcquiredRecords(1, 1, delivery)]
        _ack_commit(sp, "x", [(1, 1, [RELEASE])])
    _ack_commit(sp, "m", [(0, 0, [RELEASE])])
    # Offset 0 (once delivered) goes out, offset 1 (four times) does not go with it.
    assert sp.acquire("y", log, 10, 10, 0) == [AcquiredRecords(0, 0, 2)]
    assert sp.acquire("y", log, 10, 10, 0, fetch_offset=1) == [AcquiredRecords(1, 1, 5)]


def test_record_archived_in_transition_stays_archived_on_rollback() -> None:
    sp = _sp()
    sp.acquire("m", [(0, 4), (5, 9)], 100, 100, 0)
    update = _ok(sp.acknowledge("m", [(0, 9, [RELEASE])], 0))
    assert sp.archive(3, 6) == 4  # an abort seen by another fetch
    sp.rollback(update, now_ms=1)
    states = _states(sp)
    assert [states[o][0] for o in range(10)] == [ACQUIRED] * 3 + [ARCHIVED] * 4 + [ACQUIRED] * 3
    assert sp.delivery_complete_count == 4
    _ack_commit(sp, "m", [(0, 2, [ACCEPT]), (7, 9, [ACCEPT])])
    assert (sp.start_offset, sp.cached_batch_count) == (10, 0)


def test_many_small_batches_are_pruned() -> None:
    sp = _sp()
    log = _log(*[1] * 300)
    assert len(sp.acquire("m", log, 1000, 1, 0)) == 300
    assert sp.cached_batch_count == 300
    for offset in range(0, 300, 2):
        _ack_commit(sp, "m", [(offset, offset + 1, [ACCEPT, REJECT])])
        assert sp.start_offset == offset + 2 and sp.cached_batch_count == 298 - offset
        assert sp.next_fetch_offset() == 300
    assert sp.acquire("m", [(300, 300)], 10, 10, 0, fetch_offset=300) == [AcquiredRecords(300, 300, 1)]


# ------------------------------------------------------------------------------------- transactions, compaction


def test_aborted_batches_are_archived_and_left_out() -> None:
    sp = _sp()
    log = [(0, 4), (5, 9), (10, 10), (11, 14)]  # 5-9 aborted, 10 its abort marker
    got = sp.acquire("m", log, 100, 100, 0, aborted=[(5, 9)])
    assert got == [AcquiredRecords(0, 4, 1), AcquiredRecords(10, 14, 1)]
    assert {o: s[0] for o, s in _states(sp).items() if 5 <= o <= 9} == dict.fromkeys(range(5, 10), ARCHIVED)
    _ack_commit(sp, "m", [(0, 4, [ACCEPT]), (10, 10, [GAP])])
    assert sp.start_offset == 11
    assert sp.archive(12, 13) == 2 and sp.archive(12, 13) == 0
    assert sp.acknowledge("m", [(11, 14, [ACCEPT])], 0) == (INVALID_RECORD_STATE, None)
    # Archiving the head moves the SPSO; acknowledgements below it are ignored.
    assert sp.archive(11, 11) == 1 and sp.start_offset == 14
    _ack_commit(sp, "m", [(11, 14, [ACCEPT])])
    assert sp.start_offset == 15


def test_stale_cached_records_the_log_lost_are_archived() -> None:
    sp = _sp()
    sp.acquire("m", _log(5, 5, 5), 100, 5, 0)
    _ack_commit(sp, "m", [(0, 14, [RELEASE])])
    # Compaction removed 0-7: a read from 0 returns batches from 8 on.
    got = sp.acquire("n", [(8, 9), (10, 14)], 100, 100, 0, fetch_offset=0)
    assert got == [AcquiredRecords(8, 9, 2), AcquiredRecords(10, 14, 2)]
    assert sp.start_offset == 8
    # New records after a hole: with nothing in flight the SPSO moves to them.
    _ack_commit(sp, "n", [(8, 14, [ACCEPT])])
    assert sp.acquire("n", [(20, 24)], 100, 100, 0, fetch_offset=15) == [AcquiredRecords(20, 24, 1)]
    assert sp.start_offset == 20
    # With records in flight the hole stays until the SPSO passes it.
    assert sp.acquire("n", [(30, 34)], 100, 100, 0, fetch_offset=25) == [AcquiredRecords(30, 34, 1)]
    assert sp.in_flight_count == 15
    assert sp.acknowledge("n", [(15, 27, [ACCEPT])], 0) == (INVALID_REQUEST, None)  # 25-27: past a batch end
    _ack_commit(sp, "n", [(15, 24, [ACCEPT])])
    assert sp.start_offset == 30
    _ack_commit(sp, "n", [(30, 34, [ACCEPT])])
    assert (sp.start_offset, sp.cached_batch_count) == (35, 0)


def test_acknowledgement_across_a_hole_in_front_of_the_cache() -> None:
    sp = _sp()
    sp.acquire("m", [(0, 4)], 100, 100, 0)
    assert sp.acquire("m", [(10, 14)], 100, 100, 0, fetch_offset=5) == [AcquiredRecords(10, 14, 1)]
    sp.update_log_start(7)  # 5-9 never existed; 0-4 are gone
    assert sp.start_offset == 7
    assert sp.acknowledge("m", [(7, 8, [ACCEPT])], 0) == (INVALID_RECORD_STATE, None)
    _ack_commit(sp, "m", [(0, 14, [ACCEPT])])
    assert (sp.start_offset, sp.cached_batch_count) == (15, 0)


# ---------------------------------------------------------------------------------------------- persistence


def test_initialize_fills_gaps_and_skips_the_finished_prefix() -> None:
    sp = _sp(start=10, batches=[StateBatch(10, 14, int(ACKNOWLEDGED), 1), StateBatch(20, 24, int(AVAILABLE), 2),
                                StateBatch(25, 29, int(ARCHIVED), 5), StateBatch(30, 31, int(ACQUIRED), 1)])
    assert (sp.start_offset, sp.end_offset) == (15, 31)
    assert sp.delivery_complete_count == 5
    assert sp.next_fetch_offset() == 15
    states = _states(sp)
    assert states[15] == (AVAILABLE, 0, "") and states[30] == (AVAILABLE, 1, "")
    log = _log(5, 5, 5, 5, 5, start=15)
    assert sp.acquire("m", log, 100, 100, 0, fetch_offset=15) == [
        AcquiredRecords(15, 19, 1), AcquiredRecords(20, 24, 3), AcquiredRecords(30, 31, 2), AcquiredRecords(32, 39, 1)]
    with pytest.raises(ValueError):
        _sp(start=10, batches=[StateBatch(5, 12, 0, 1)])
    with pytest.raises(ValueError):
        _sp(start=0, batches=[StateBatch(0, 5, 0, 1), StateBatch(5, 6, 0, 1)])
    with pytest.raises(ValueError):
        _sp(start=-1)
    with pytest.raises(RuntimeError):
        sp.initialize(0, [], 0, 0)


def test_snapshot_reports_committed_state() -> None:
    sp = _sp()
    sp.acquire("m", _log(10, 10, 10), 100, 10, 0)
    _ack_commit(sp, "m", [(0, 4, [ACCEPT]), (10, 19, [RELEASE])])
    _ok(sp.acknowledge("m", [(5, 9, [ACCEPT])], 0))  # not written yet
    snap = sp.snapshot()
    assert snap.start_offset == 5
    # 5-9 in transition and 20-29 acquired count as delivered once and available, like the released 10-19.
    assert snap.state_batches == (StateBatch(5, 29, int(AVAILABLE), 1),)
    assert snap.delivery_complete_count == 0
    assert sp.delivery_complete_count == 5  # the visible count includes the transition
    assert sp.state_batches() == list(snap.state_batches)
    # A record held on its last delivery is recorded as a release would leave it: archived.
    last = _sp(delivery_count_limit=1)
    last.acquire("m", _log(3), 10, 10, 0)
    assert last.snapshot().state_batches == (StateBatch(0, 2, int(ARCHIVED), 1),)


def test_large_batches_stay_whole() -> None:
    sp = _sp(max_in_flight=10_000_000)
    log = _log(*[1000] * 1000)
    got = sp.acquire("m", log, 10_000_000, 500_000, 0)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 499_999), (500_000, 999_999)]
    update = _ok(sp.acknowledge("m", [(0, 999_999, [ACCEPT])], 1))
    assert update.state_batches == (StateBatch(0, 999_999, int(ACKNOWLEDGED), 1),)
    assert sp.cached_batch_count == 2
    sp.commit(update)
    assert (sp.start_offset, sp.cached_batch_count) == (1_000_000, 0)


# ---------------------------------------------------------------------------------------------- model test


@dataclass
class _Rec:
    state: RecordState
    dc: int
    member: str = ""
    deadline: int | None = None
    pending: int | None = None
    prev: tuple[RecordState, str, int | None] | None = None
    sticky: bool = False


MEMBERS = ("a", "b", "c")


class SharePartitionMachine(RuleBasedStateMachine):
    """Random operations against a naive per-offset model of the same rules."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.log: list[tuple[int, int]] = []
        self.log_start = 0
        self.outstanding: list[PendingUpdate] = []

    @initialize(limit=st.integers(1, 6), cap=st.sampled_from([4, 12, 1000]), start=st.integers(0, 3))
    def setup(self, limit: int, cap: int, start: int) -> None:
        self.limit, self.cap = limit, cap
        self.sp = SharePartition("g", "t", 0, delivery_count_limit=limit, max_in_flight=cap, lock_duration_ms=LOCK)
        self.sp.initialize(start, [], 0, 0)
        self.start = start
        self.log_start = start
        self.log = [(0, start - 1)] if start else []
        self.cache: dict[int, _Rec] = {}

    # -- model helpers

    def end(self) -> int:
        return max(self.cache) if self.cache else self.start - 1

    def log_end(self) -> int:
        return self.log[-1][1] if self.log else -1

    def next_fetch(self) -> int:
        avail = [o for o, r in self.cache.items() if r.state == AVAILABLE and r.pending is None]
        return min(avail) if avail else self.end() + 1

    def advance(self) -> None:
        """Pop the finished prefix; past it, the SPSO skips offsets the log never had (compaction)."""
        moved = False
        while self.cache:
            first = min(self.cache)
            r = self.cache[first]
            if r.pending is not None or r.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            del self.cache[first]
            self.start, moved = first + 1, True
        if moved and self.cache and min(self.cache) > self.start:
            self.start = min(self.cache)

    def released(self, r: _Rec) -> RecordState:
        return ARCHIVED if r.dc >= self.limit else AVAILABLE

    def begin(self, r: _Rec, target: RecordState, uid: int) -> None:
        if target == AVAILABLE and r.dc >= self.limit:
            target = ARCHIVED
        r.prev = (r.state, r.member, r.deadline)
        r.pending, r.state, r.member, r.deadline = uid, target, "", None

    def check_update(self, update: PendingUpdate, expected: dict[int, tuple[int, int]]) -> None:
        got = {o: (b.delivery_state, b.delivery_count) for b in update.state_batches
               for o in range(b.first_offset, b.last_offset + 1)}
        assert got == expected
        assert update.start_offset == self.start
        assert update.delivery_complete_count == self.complete()

    def complete(self) -> int:
        return sum(r.state in (ACKNOWLEDGED, ARCHIVED) for r in self.cache.values())

    # -- rules

    @rule(n=st.integers(1, 8), compacted=st.sampled_from([0, 0, 0, 1, 3]))
    def produce(self, n: int, compacted: int) -> None:
        """Append a log batch, after ``compacted`` offsets the log no longer has."""
        first = self.log_end() + 1 + compacted
        self.log.append((first, first + n - 1))

    @rule(ms=st.integers(1, 700))
    def tick(self, ms: int) -> None:
        self.now += ms

    @precondition(lambda self: self.log_end() >= 0)
    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 12), batch_size=st.integers(1, 10),
          record_limit=st.booleans(), nbatches=st.integers(1, 4))
    def fetch(self, member: str, max_records: int, batch_size: int, record_limit: bool, nbatches: int) -> None:
        fetch_offset = self.sp.next_fetch_offset()
        read = [b for b in self.log if b[1] >= fetch_offset][:nbatches]
        if not read:
            return
        old_end, in_flight, was_empty = self.end(), self.end() - self.start + 1, not self.cache
        fetchable = self.cache.get(fetch_offset)
        live = fetch_offset <= read[-1][1] and (
            (fetchable is not None and fetchable.state == AVAILABLE and fetchable.pending is None
             and read[0][0] <= fetch_offset)
            or (fetch_offset > old_end and in_flight < self.cap))
        # Cached records the log does not have before its first batch are archived.
        archived = 0
        for o in range(fetch_offset, read[0][0]):
            r = self.cache.get(o)
            if r is not None and r.state == AVAILABLE:
                r.state, r.sticky = ARCHIVED, r.pending is not None
                archived += 1
        got = self.sp.acquire(member, read, max_records, batch_size, self.now, record_limit,
                              fetch_offset=fetch_offset)
        offsets: list[int] = []
        prior: dict[int, int] = {}
        for r in got:
            assert r.first_offset <= r.last_offset
            assert not offsets or r.first_offset > offsets[-1]
            for o in range(r.first_offset, r.last_offset + 1):
                assert self.start <= o <= read[-1][1]
                rec = self.cache.get(o)
                if rec is None:
                    assert o > old_end and r.delivery_count == 1
                    prior[o] = 0
                else:
                    assert rec.state == AVAILABLE and rec.pending is None  # never handed out twice
                    assert r.delivery_count == rec.dc + 1
                    prior[o] = rec.dc
                assert r.delivery_count <= self.limit
                offsets.append(o)
        total = len(offsets)
        new = [o for o in offsets if o > old_end]
        if record_limit:
            assert total <= max_records
        if in_flight >= self.cap:
            assert not new
        throttle = max(2, -(-self.limit // 2))
        if any(c >= throttle for c in prior.values()):
            assert not new
        if self.limit > 2 and any(c == self.limit - 1 for c in prior.values()):
            assert total == 1
        if live:
            assert total >= 1  # progress
        for o in offsets:
            rec = self.cache.setdefault(o, _Rec(AVAILABLE, 0))
            rec.state, rec.dc, rec.member, rec.deadline = ACQUIRED, rec.dc + 1, member, self.now + LOCK
        if new:
            assert new[0] >= read[0][0]
            if was_empty:
                self.start = new[0]  # nothing in flight: the SPSO moves to the first new record
            # New records are one contiguous stretch; what was not handed out is the rest of a log batch.
            for o in range(new[0], self.sp.end_offset + 1):
                if o not in self.cache:
                    assert record_limit and o > new[-1]
                    self.cache[o] = _Rec(AVAILABLE, 0)
        else:
            assert self.sp.end_offset == old_end or (was_empty and self.sp.end_offset == self.start - 1)
        if archived:
            self.advance()

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge(self, member: str, data: st.DataObject) -> None:
        held = sorted(o for o, r in self.cache.items() if r.member == member)
        lo_bound = max(0, self.start - 3)
        hi_bound = self.end() + 3
        batches: list[tuple[int, int, list[int]]] = []
        cursor = lo_bound
        for _ in range(data.draw(st.integers(1, 3))):
            if held and data.draw(st.booleans()):
                first = data.draw(st.sampled_from(held))
                last = data.draw(st.integers(first, first + 4))
            else:
                first = data.draw(st.integers(cursor, max(cursor, hi_bound + 1)))
                last = data.draw(st.integers(first - 1, first + 5))
            n = max(1, last - first + 1)
            if data.draw(st.booleans()):
                types = [data.draw(st.sampled_from([GAP, ACCEPT, RELEASE, REJECT, RENEW, 9]))]
            else:
                types = data.draw(st.lists(st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW, GAP]),
                                           min_size=n, max_size=n))
            batches.append((first, last, types))
            cursor = last + 1
        expected_code = self.expected_ack(member, batches)
        code, update = self.sp.acknowledge(member, batches, self.now)
        assert code == expected_code, (batches, self.cache)
        if code != NONE:
            assert update is None
            return
        assert update is not None
        expected: dict[int, tuple[int, int]] = {}
        targets = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, RELEASE: AVAILABLE, REJECT: ARCHIVED}
        for first, last, types in batches:
            for o in range(max(first, self.start), last + 1):
                ack = types[0] if len(types) == 1 else types[o - first]
                r = self.cache.get(o)
                if r is None:
                    continue  # an offset the log does not have
                if ack == RENEW:
                    r.deadline = self.now + LOCK
                else:
                    self.begin(r, targets[ack], update.update_id)
                    expected[o] = (int(r.state), r.dc)
        self.check_update(update, expected)
        self.outstanding.append(update)

    def expected_ack(self, member: str, batches: list[tuple[int, int, list[int]]]) -> int:
        previous = None
        for first, last, types in batches:
            if (first > last or not types or (len(types) > 1 and len(types) != last - first + 1)
                    or (previous is not None and first <= previous) or any(t not in range(5) for t in types)):
                return INVALID_REQUEST
            previous = last
        for first, last, _ in batches:
            if last < self.start:
                continue
            lo = max(first, self.start)
            if not self.cache or (min(self.cache) > lo and min(self.cache) > last):
                return INVALID_RECORD_STATE
            cached = [o for o in range(lo, last + 1) if o in self.cache]
            if not cached or last not in self.cache:
                return INVALID_REQUEST
            for o in cached:
                r = self.cache[o]
                if (r.state != ACQUIRED or r.member != member or r.pending is not None
                        or (r.deadline is not None and r.deadline <= self.now)):
                    return INVALID_RECORD_STATE
        return NONE

    @precondition(lambda self: self.outstanding)
    @rule(data=st.data(), ok=st.booleans())
    def finish(self, data: st.DataObject, ok: bool) -> None:
        update = self.outstanding.pop(data.draw(st.integers(0, len(self.outstanding) - 1)))
        uid = update.update_id
        for r in self.cache.values():
            if r.pending != uid:
                continue
            prev = r.prev
            assert prev is not None
            r.pending, r.prev = None, None
            if ok or r.sticky:
                r.sticky = False
            elif prev[2] is not None and prev[2] <= self.now:
                r.state, r.member, r.deadline = self.released(r), "", None
            else:
                r.state, r.member, r.deadline = prev
        if ok:
            self.sp.commit(update)
        else:
            self.sp.rollback(update, self.now)
        self.advance()

    @rule()
    def expire(self) -> None:
        expected: dict[int, tuple[int, int]] = {}
        for o, r in self.cache.items():
            if r.state == ACQUIRED and r.deadline is not None and r.deadline <= self.now:
                r.state, r.member, r.deadline = self.released(r), "", None
                expected[o] = (int(r.state), r.dc)
        update = self.sp.expire_locks(self.now)
        if not expected:
            assert update is None
            return
        assert update is not None
        self.check_update(update, expected)
        self.outstanding.append(update)

    @rule(member=st.sampled_from(MEMBERS))
    def release(self, member: str) -> None:
        update = self.sp.release_member(member)
        expected: dict[int, tuple[int, int]] = {}
        for o, r in sorted(self.cache.items()):
            if r.state == ACQUIRED and r.member == member and r.pending is None:
                self.begin(r, AVAILABLE, update.update_id)
                expected[o] = (int(r.state), r.dc)
        self.check_update(update, expected)
        self.outstanding.append(update)

    @precondition(lambda self: self.log_end() >= 0)
    @rule(data=st.data())
    def move_log_start(self, data: st.DataObject) -> None:
        new_start = data.draw(st.integers(self.log_start, self.log_end() + 1))
        self.log_start = new_start
        self.sp.update_log_start(new_start)
        if new_start > self.start:
            self.cache = {o: r for o, r in self.cache.items() if o >= new_start}
            self.start = new_start
            self.advance()

    @rule(data=st.data())
    def archive(self, data: st.DataObject) -> None:
        first = data.draw(st.integers(max(0, self.start - 2), self.end() + 2))
        last = data.draw(st.integers(first, first + 5))
        expected = 0
        for o in range(first, last + 1):
            r = self.cache.get(o)
            if r is not None and r.state in (AVAILABLE, ACQUIRED):
                r.state, r.member, r.deadline = ARCHIVED, "", None
                r.sticky = r.pending is not None
                expected += 1
        assert self.sp.archive(first, last) == expected
        if expected:
            self.advance()

    @rule()
    def failover(self) -> None:
        """A new leader loads the committed state; outstanding writes are lost."""
        snap = self.sp.snapshot()
        committed: dict[int, tuple[RecordState, int]] = {}
        for o, r in self.cache.items():
            state = r.prev[0] if r.pending is not None and not r.sticky and r.prev else r.state
            committed[o] = (self.released(r) if state == ACQUIRED else state, r.dc)
        assert snap.start_offset == self.start
        assert snap.delivery_complete_count == sum(s in (ACKNOWLEDGED, ARCHIVED) for s, _ in committed.values())
        persisted = {o: v for o, v in committed.items() if v != (AVAILABLE, 0)}
        self.cache = {}
        if persisted:
            for o in range(self.start, max(persisted) + 1):
                state, dc = persisted.get(o, (AVAILABLE, 0))
                self.cache[o] = _Rec(state, dc)
        self.sp = SharePartition("g", "t", 0, delivery_count_limit=self.limit, max_in_flight=self.cap,
                                 lock_duration_ms=LOCK)
        self.sp.initialize(snap.start_offset, snap.state_batches, 1, 1)
        self.outstanding.clear()
        self.advance()

    # -- invariants

    @invariant()
    def matches_model(self) -> None:
        sp = self.sp
        assert (sp.start_offset, sp.end_offset) == (self.start, self.end())
        assert all(o >= self.start for o in self.cache)
        view = [(r.offset, r.state, r.delivery_count, r.member_id, r.in_transition) for r in sp.records()]
        model = [(o, r.state, r.dc, r.member, r.pending is not None) for o, r in sorted(self.cache.items())]
        assert view == model
        assert sp.delivery_complete_count == self.complete()
        assert sp.next_fetch_offset() == self.next_fetch()
        deadlines = [r.deadline for r in self.cache.values() if r.state == ACQUIRED and r.deadline is not None]
        assert sp.next_lock_deadline() == (min(deadlines) if deadlines else None)
        assert sp.outstanding_updates == len(self.outstanding)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_share_partition_model = SharePartitionMachine.TestCase
