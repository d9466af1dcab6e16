"""TransactionMetadata's state machine, ported from Kafka's ``TransactionMetadataTest`` (transaction version 0).

Kafka's test constructs a metadata in a state, calls one ``prepare*`` and ``completeTransitionTo`` and checks
the producer id, epochs and timestamps; the same is done here. The TV2 cases (``testEpochBumpOnEndTxn*``: an
epoch bump at every EndTxn) do not apply to a coordinator speaking transaction version 0 only.
"""

from __future__ import annotations

import pytest
from tests.unit.coordinator.txn_fakes import START_MS, metadata, tp

from strata.common import TopicPartition
from strata.coordinator.transaction.log_records import TransactionLogValue, TransactionState
from strata.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)

S = TransactionState
PRODUCER_ID = 23423
NOW = START_MS


def _name(state: S) -> str:
    return state.kafka_name


def _md(state: S = S.EMPTY, epoch: int = 1, last_epoch: int = NO_PRODUCER_EPOCH, start_ms: int = -1,
        partitions: tuple[TopicPartition, ...] = (), **kw: object) -> TransactionMetadata:
    return metadata("txnlId", PRODUCER_ID, epoch, state, partitions, last_producer_epoch=last_epoch,
                    timeout_ms=30_000, start_ms=start_ms, update_ms=NOW, **kw)  # type: ignore[arg-type]


def _bump(md: TransactionMetadata, expected: int | None, now: int = NOW) -> TxnTransitMetadata:
    transit = md.prepare_increment_producer_epoch(30_000, expected, now)
    assert transit is not None, "prepare_increment_producer_epoch fenced the producer"
    return transit


# -- InitProducerId: epoch bumps (testInitializeEpoch, testNormalEpochBump, ...) --------------------------------

def test_initialize_epoch() -> None:
    md = _md(epoch=NO_PRODUCER_EPOCH)
    md.complete_transition(_bump(md, None))
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 0, NO_PRODUCER_EPOCH)
    assert md.state is S.EMPTY and md.pending_state is None


def test_normal_epoch_bump() -> None:
    md = _md(epoch=735)
    md.complete_transition(_bump(md, None))
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 736, NO_PRODUCER_EPOCH)


def test_bump_epoch_not_allowed_if_epochs_exhausted() -> None:
    md = _md(epoch=MAX_PRODUCER_EPOCH - 1)
    assert md.epoch_exhausted
    with pytest.raises(IllegalTransitionError):
        md.prepare_increment_producer_epoch(30_000, None, NOW)
    assert md.pending_state is None


def test_epoch_exhaustion_threshold() -> None:
    # Kafka keeps Short.MaxValue for fencing: an epoch of Short.MaxValue - 1 is already exhausted
    assert not is_epoch_exhausted(MAX_PRODUCER_EPOCH - 2)
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH - 1)
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH)
    assert not _md(epoch=MAX_PRODUCER_EPOCH - 2).epoch_exhausted


def test_tolerate_update_time_shift_during_epoch_bump() -> None:
    md = _md(epoch=1, start_ms=1)
    md.complete_transition(_bump(md, 1, now=NOW - 1))  # the clock went back
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 2, 1)
    assert md.txn_last_update_timestamp == NOW - 1
    # Kafka also keeps the old txnStartTimestamp (1) in memory here; the record it writes has -1, which is
    # what this metadata holds (see the report: not asserted).


def test_tolerate_update_time_reset_during_producer_id_rotation() -> None:
    md = _md(epoch=1, start_ms=1)
    md.complete_transition(md.prepare_producer_id_rotation(PRODUCER_ID + 1, 30_000, NOW - 1, record_last_epoch=True))
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID + 1, 0, 1)
    assert md.txn_last_update_timestamp == NOW - 1


def test_tolerate_time_shift_during_add_partitions() -> None:
    md = _md(epoch=1, start_ms=NOW)
    # from Empty the start time becomes the update time, even an earlier one
    md.complete_transition(md.prepare_add_partitions({tp("topic1")}, NOW - 1))
    assert md.partitions == {tp("topic1")}
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 1, NO_PRODUCER_EPOCH)
    assert (md.txn_start_timestamp, md.txn_last_update_timestamp) == (NOW - 1, NOW - 1)
    assert md.state is S.ONGOING
    # in Ongoing the start time stays
    md.complete_transition(md.prepare_add_partitions({tp("topic2")}, NOW - 2))
    assert md.partitions == {tp("topic1"), tp("topic2")}
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 1, NO_PRODUCER_EPOCH)
    assert (md.txn_start_timestamp, md.txn_last_update_timestamp) == (NOW - 1, NOW - 2)


@pytest.mark.parametrize("target", [S.PREPARE_COMMIT, S.PREPARE_ABORT], ids=_name)
def test_tolerate_time_shift_during_prepare_commit_or_abort(target: S) -> None:
    md = _md(S.ONGOING, epoch=1, start_ms=1)
    md.complete_transition(md.prepare_abort_or_commit(target, NOW - 1))
    assert md.state is target
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 1, NO_PRODUCER_EPOCH)
    assert (md.txn_start_timestamp, md.txn_last_update_timestamp) == (1, NOW - 1)


@pytest.mark.parametrize(("prepared", "completed"), [(S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
                                                     (S.PREPARE_ABORT, S.COMPLETE_ABORT)], ids=["commit", "abort"])
def test_tolerate_time_shift_during_complete(prepared: S, completed: S) -> None:
    md = _md(prepared, epoch=1, start_ms=1, partitions=(tp("topic1"),))
    transit = md.prepare_complete(NOW - 1)
    assert transit.state is completed
    md.complete_transition(transit)
    assert md.state is completed
    # prepare_complete keeps the producer id and epoch (transaction version 0 bumps only at InitProducerId)
    assert (md.producer_id, md.producer_epoch) == (PRODUCER_ID, 1)
    assert (md.txn_start_timestamp, md.txn_last_update_timestamp) == (1, NOW - 1)
    assert md.partitions == set()


@pytest.mark.parametrize("prepared", [S.PREPARE_COMMIT, S.PREPARE_ABORT], ids=_name)
def test_complete_keeps_last_producer_epoch(prepared: S) -> None:
    md = _md(prepared, epoch=1, start_ms=1)
    md.complete_transition(md.prepare_complete(NOW - 1))
    assert md.last_producer_epoch == NO_PRODUCER_EPOCH


# -- fencing (testFenceProducerAfterEpochsExhausted, testFenceProducerNotAllowedIfItWouldOverflow) -----------------

def test_fence_producer_after_epochs_exhausted() -> None:
    md = _md(S.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1, start_ms=NOW)
    assert md.epoch_exhausted
    fence = md.prepare_fence_producer_epoch()
    assert fence.producer_epoch == MAX_PRODUCER_EPOCH
    assert fence.last_producer_epoch == NO_PRODUCER_EPOCH
    assert fence.state is S.PREPARE_EPOCH_FENCE
    assert md.pending_state is S.PREPARE_EPOCH_FENCE
    # what the coordinator does next: clear the pending fence and abort under the bumped epoch
    md.pending_state = None
    md.producer_epoch = fence.producer_epoch
    transit = md.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    md.complete_transition(transit)
    assert transit.producer_id == PRODUCER_ID
    assert (md.state, md.producer_epoch) == (S.PREPARE_ABORT, MAX_PRODUCER_EPOCH)


def test_fence_producer_not_allowed_if_it_would_overflow() -> None:
    md = _md(S.ONGOING, epoch=MAX_PRODUCER_EPOCH, start_ms=NOW)
    assert md.epoch_exhausted
    with pytest.raises(IllegalTransitionError):
        md.prepare_fence_producer_epoch()
    assert md.pending_state is None


def test_fence_bumps_the_epoch_and_keeps_the_transaction() -> None:
    md = _md(S.ONGOING, epoch=7, last_epoch=6, start_ms=NOW - 5, partitions=(tp("a"), tp("b")))
    fence = md.prepare_fence_producer_epoch()
    assert (fence.producer_id, fence.producer_epoch, fence.last_producer_epoch) == (PRODUCER_ID, 8, NO_PRODUCER_EPOCH)
    assert fence.partitions == frozenset({tp("a"), tp("b")})
    assert (fence.txn_start_timestamp, fence.txn_last_update_timestamp) == (NOW - 5, NOW)
    # completing a fence (never written in Kafka) only moves the epoch: the transaction stays open
    md.complete_transition(fence)
    assert (md.state, md.producer_epoch, md.last_producer_epoch, md.pending_state) == (S.ONGOING, 8, -1, None)
    assert md.partitions == {tp("a"), tp("b")}


def test_fence_after_a_failed_fence_does_not_bump_again() -> None:
    md = _md(S.ONGOING, epoch=7, start_ms=NOW)
    md.producer_epoch = 8  # the first fence's epoch, kept although its write failed
    md.has_failed_epoch_fence = True
    assert md.prepare_fence_producer_epoch().producer_epoch == 8


def test_prepare_complete_clears_the_failed_fence_flag() -> None:
    md = _md(S.PREPARE_ABORT, epoch=8, start_ms=NOW)
    md.has_failed_epoch_fence = True
    md.prepare_complete(NOW)
    assert not md.has_failed_epoch_fence


# -- producer id rotation (testRotateProducerId, testRotateProducerIdIn*State) -------------------------------------

def test_rotate_producer_id() -> None:
    md = _md(epoch=MAX_PRODUCER_EPOCH - 1)
    md.complete_transition(md.prepare_producer_id_rotation(9893, 30_000, NOW, record_last_epoch=True))
    assert md.producer_id == 9893
    assert md.last_producer_id == PRODUCER_ID
    assert md.producer_epoch == 0
    assert md.last_producer_epoch == MAX_PRODUCER_EPOCH - 1


def test_rotate_producer_id_without_recording_the_last_epoch() -> None:
    md = _md(S.COMPLETE_COMMIT, epoch=MAX_PRODUCER_EPOCH - 1, start_ms=NOW)
    md.complete_transition(md.prepare_producer_id_rotation(9893, 30_000, NOW, record_last_epoch=False))
    assert (md.producer_id, md.last_producer_id, md.producer_epoch) == (9893, PRODUCER_ID, 0)
    assert md.last_producer_epoch == NO_PRODUCER_EPOCH
    assert md.state is S.EMPTY


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT], ids=_name)
def test_rotate_producer_id_in_open_transaction_state(state: S) -> None:
    md = _md(state, epoch=MAX_PRODUCER_EPOCH - 1, start_ms=NOW)
    with pytest.raises(IllegalTransitionError):
        md.prepare_producer_id_rotation(9893, 30_000, NOW, record_last_epoch=False)
    assert md.pending_state is None


# -- KIP-360: the expected epoch of a re-initialising producer ------------------------------------------------------

def test_attempted_epoch_bump_with_newly_created_metadata() -> None:
    md = _md(epoch=NO_PRODUCER_EPOCH)
    md.complete_transition(_bump(md, 735))
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 0, NO_PRODUCER_EPOCH)


def test_epoch_bump_with_current_epoch_provided() -> None:
    md = _md(epoch=735)
    md.complete_transition(_bump(md, 735))
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 736, 735)


def test_attempted_epoch_bump_with_last_epoch() -> None:
    # a retry of an InitProducerId that already bumped: the current epoch again, no second bump
    md = _md(epoch=735, last_epoch=734)
    md.complete_transition(_bump(md, 734))
    assert (md.producer_id, md.producer_epoch, md.last_producer_epoch) == (PRODUCER_ID, 735, 734)


def test_attempted_epoch_bump_with_fenced_epoch() -> None:
    md = _md(epoch=735, last_epoch=734, last_producer_id=PRODUCER_ID)
    assert md.prepare_increment_producer_epoch(30_000, 733, NOW) is None  # Left(PRODUCER_FENCED)
    assert md.pending_state is None


# -- the transition table (Kafka's TransactionState.validPreviousStates) ------------------------------------------

# Written out from Kafka's TransactionState.scala, not taken from the module under test.
KAFKA_VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def _prepare_to(md: TransactionMetadata, target: S) -> TxnTransitMetadata:
    if target is S.EMPTY:
        t = md.prepare_increment_producer_epoch(30_000, None, NOW)
        assert t is not None
        return t
    if target is S.ONGOING:
        return md.prepare_add_partitions({tp("x")}, NOW)
    if target in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return md.prepare_abort_or_commit(target, NOW)
    if target is S.DEAD:
        return md.prepare_dead()
    if target is S.PREPARE_EPOCH_FENCE:
        return md.prepare_fence_producer_epoch()
    transit = md.prepare_complete(NOW)  # its target follows from the current state
    if transit.state is not target:
        raise IllegalTransitionError(f"prepare_complete chose {transit.state.name}")
    return transit


@pytest.mark.parametrize("target", [s for s in S if s not in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)],
                         ids=_name)
@pytest.mark.parametrize("current", list(S), ids=_name)
def test_transition_table(current: S, target: S) -> None:
    md = _md(current, epoch=3, start_ms=NOW, partitions=(tp("a"),) if current is not S.EMPTY else ())
    if current in KAFKA_VALID_PREVIOUS[target]:
        transit = _prepare_to(md, target)
        assert transit.state is target
        assert md.pending_state is target
        assert md.state is current  # nothing applied before the write
    else:
        with pytest.raises(IllegalTransitionError):
            _prepare_to(md, target)
        assert md.pending_state is None


@pytest.mark.parametrize("current", list(S), ids=_name)
def test_prepare_complete_only_from_prepare_states(current: S) -> None:
    md = _md(current, epoch=3, start_ms=NOW)
    if current in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        transit = md.prepare_complete(NOW)
        assert transit.state is (S.COMPLETE_COMMIT if current is S.PREPARE_COMMIT else S.COMPLETE_ABORT)
    else:
        with pytest.raises(IllegalTransitionError):
            md.prepare_complete(NOW)
        assert md.pending_state is None


def test_prepare_while_pending_raises() -> None:
    md = _md(S.ONGOING, epoch=3, start_ms=NOW, partitions=(tp("a"),))
    md.prepare_add_partitions({tp("b")}, NOW)
    with pytest.raises(IllegalTransitionError):
        md.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    with pytest.raises(IllegalTransitionError):
        md.prepare_fence_producer_epoch()
    assert md.pending_state is S.ONGOING


def test_illegal_producer_id_or_epoch_raises() -> None:
    md = _md(epoch=3)
    with pytest.raises(IllegalTransitionError):
        md.prepare_producer_id_rotation(-1, 30_000, NOW, record_last_epoch=False)
    fresh = _md(S.ONGOING, epoch=NO_PRODUCER_EPOCH, start_ms=NOW)
    with pytest.raises(IllegalTransitionError):  # Ongoing under epoch -1
        fresh.prepare_add_partitions({tp("a")}, NOW)
    assert md.pending_state is None and fresh.pending_state is None


def test_dead_is_allowed_with_no_epoch() -> None:
    # KAFKA-14880: an id whose first InitProducerId write failed still has epoch -1 and must expire
    md = _md(epoch=NO_PRODUCER_EPOCH)
    assert md.prepare_dead().state is S.DEAD


def test_complete_transition_requires_the_pending_state() -> None:
    md = _md(S.ONGOING, epoch=3, start_ms=NOW, partitions=(tp("a"),))
    commit = md.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    md.abort_transition()
    with pytest.raises(IllegalTransitionError):  # nothing pending any more
        md.complete_transition(commit)
    abort = md.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    with pytest.raises(IllegalTransitionError):  # PrepareAbort is pending, not PrepareCommit
        md.complete_transition(commit)
    md.complete_transition(abort)
    assert md.state is S.PREPARE_ABORT


def test_abort_transition_leaves_the_metadata_as_it_was() -> None:
    md = _md(S.ONGOING, epoch=3, start_ms=NOW - 10, partitions=(tp("a"),))
    before = (md.producer_id, md.producer_epoch, md.state, set(md.partitions), md.txn_start_timestamp,
              md.txn_last_update_timestamp)
    md.prepare_add_partitions({tp("b")}, NOW + 5)
    md.abort_transition()
    assert md.pending_state is None
    assert (md.producer_id, md.producer_epoch, md.state, md.partitions, md.txn_start_timestamp,
            md.txn_last_update_timestamp) == before


# -- the partitions through the states ------------------------------------------------------------------------------

def test_partitions_through_a_transaction() -> None:
    md = _md(S.EMPTY, epoch=0)
    md.complete_transition(md.prepare_add_partitions({tp("a", 0), tp("a", 1)}, NOW))
    md.complete_transition(md.prepare_add_partitions({tp("b", 0), tp("a", 0)}, NOW + 1))
    assert md.partitions == {tp("a", 0), tp("a", 1), tp("b", 0)}
    prepare = md.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 2)
    assert prepare.partitions == frozenset(md.partitions)
    md.complete_transition(prepare)
    assert md.partitions == {tp("a", 0), tp("a", 1), tp("b", 0)}
    # markers written: each partition leaves the set
    md.remove_partition(tp("a", 1))
    md.remove_partition(tp("a", 1))  # twice is harmless
    assert md.partitions == {tp("a", 0), tp("b", 0)}
    complete = md.prepare_complete(NOW + 3)
    assert complete.partitions == frozenset()
    md.complete_transition(complete)
    assert (md.state, md.partitions) == (S.COMPLETE_COMMIT, set())
    # the next transaction starts from nothing, with a new start time
    md.complete_transition(md.prepare_add_partitions({tp("c")}, NOW + 4))
    assert (md.partitions, md.txn_start_timestamp) == ({tp("c")}, NOW + 4)


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT], ids=_name)
def test_remove_partition_only_while_markers_are_written(state: S) -> None:
    md = _md(state, epoch=1, start_ms=NOW, partitions=(tp("a"),))
    with pytest.raises(IllegalTransitionError):
        md.remove_partition(tp("a"))


def test_pending_transaction_states() -> None:
    open_states = {s for s in S if _md(s, start_ms=NOW).has_pending_transaction}
    assert open_states == {S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT}


# -- what is written and read back ------------------------------------------------------------------------------------

def test_transit_to_log_value_groups_partitions_by_topic() -> None:
    md = _md(S.ONGOING, epoch=4, start_ms=NOW - 7, partitions=(tp("b", 1), tp("a", 2), tp("b", 0)))
    value = md.prepare_abort_or_commit(S.PREPARE_ABORT, NOW).to_log_value()
    assert value == TransactionLogValue(producer_id=PRODUCER_ID, producer_epoch=4, transaction_timeout_ms=30_000,
                                        state=S.PREPARE_ABORT, partitions=(("a", (2,)), ("b", (0, 1))),
                                        last_update_timestamp_ms=NOW, start_timestamp_ms=NOW - 7)


def test_from_log() -> None:
    value = TransactionLogValue(producer_id=77, producer_epoch=9, transaction_timeout_ms=12_345,
                                state=S.PREPARE_COMMIT, partitions=(("a", (0, 1)), ("b", (3,))),
                                last_update_timestamp_ms=NOW, start_timestamp_ms=NOW - 100)
    md = TransactionMetadata.from_log("loaded", value)
    assert (md.transactional_id, md.producer_id, md.producer_epoch, md.txn_timeout_ms) == ("loaded", 77, 9, 12_345)
    assert md.state is S.PREPARE_COMMIT
    assert md.partitions == {tp("a", 0), tp("a", 1), tp("b", 3)}
    assert (md.txn_start_timestamp, md.txn_last_update_timestamp) == (NOW - 100, NOW)
    # transaction log value v0 has neither: Kafka loads them as -1 too
    assert (md.last_producer_id, md.last_producer_epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    assert md.pending_state is None and not md.has_failed_epoch_fence


# -- testTransactionStateIdAndNameMapping / testAllTransactionStatesAreMapped ------------------------------------------

def test_transaction_state_ids_and_names() -> None:
    expected = {S.EMPTY: (0, "Empty"), S.ONGOING: (1, "Ongoing"), S.PREPARE_COMMIT: (2, "PrepareCommit"),
                S.PREPARE_ABORT: (3, "PrepareAbort"), S.COMPLETE_COMMIT: (4, "CompleteCommit"),
                S.COMPLETE_ABORT: (5, "CompleteAbort"), S.DEAD: (6, "Dead"),
                S.PREPARE_EPOCH_FENCE: (7, "PrepareEpochFence")}
    assert set(S) == set(expected)
    for state, (state_id, name) in expected.items():
        assert S(state_id) is state
        assert state.kafka_name == name
        assert S.from_kafka_name(name) is state
