"""TransactionCoordinator and TransactionStateManager over in-memory fakes, ported from Kafka's
``TransactionCoordinatorTest`` and ``TransactionStateManagerTest`` (transaction version 0).

Kafka's tests mock the state manager and check the calls; here the real state manager runs over a fake
``__transaction_state`` (:class:`~tests.unit.coordinator.txn_fakes.FakeTxnLog`), so each case checks what
the client gets, what is written to the log and the metadata left in the cache. Where Kafka hands the
coordinator a metadata in some state, the same metadata is put in the cache.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.unit.coordinator.txn_fakes import (
    START_MS,
    Harness,
    async_test,
    fast_marker_backoff,
    log_value,
    metadata,
    settle,
    tp,
    wait_until,
)

from strata.config.transaction_config import TransactionConfig
from strata.coordinator.transaction.coordinator import InitProducerIdResult
from strata.coordinator.transaction.log_records import TransactionState, encode_key
from strata.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
)
from strata.errors import ErrorCode

S = TransactionState
E = ErrorCode
TXN = "txn"
PID = 500
EPOCH = 3
TIMEOUT = 60_000
T1 = tp("topic1")


@pytest.fixture(autouse=True)
def _fast_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    fast_marker_backoff(monkeypatch)


def _name(state: S) -> str:
    return state.kafka_name


def failed(code: int) -> InitProducerIdResult:
    return InitProducerIdResult(code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)


async def begin(h: Harness, tid: str = TXN, partitions: tuple = (T1,), timeout_ms: int = TIMEOUT) -> tuple[int, int]:
    """InitProducerId then AddPartitionsToTxn: an Ongoing transaction; (producer id, epoch)."""
    r = await h.c.init_producer_id(tid, timeout_ms)
    assert r.error_code == E.NONE, r
    assert await h.c.add_partitions(tid, r.producer_id, r.producer_epoch, partitions) == E.NONE
    return r.producer_id, r.producer_epoch


async def completed(h: Harness, tid: str = TXN, state: S = S.COMPLETE_COMMIT) -> None:
    await wait_until(lambda: (md := h.md(tid)) is not None and md.state is state and not md.pending, what=state.name)


# =====================================================================================================================
# InitProducerId
# =====================================================================================================================

@async_test
async def test_init_producer_id_with_empty_transactional_id_is_invalid_request() -> None:
    async with Harness() as h:
        assert await h.c.init_producer_id("", TIMEOUT) == failed(E.INVALID_REQUEST)
        assert await h.c.init_producer_id("", TIMEOUT) == failed(E.INVALID_REQUEST)
        assert h.pids.issued == [] and h.log.attempts == 0


@async_test
async def test_init_producer_id_with_null_transactional_id_returns_the_next_producer_id() -> None:
    async with Harness() as h:
        assert await h.c.init_producer_id(None, TIMEOUT) == InitProducerIdResult(E.NONE, 1000, 0)
        assert await h.c.init_producer_id(None, TIMEOUT) == InitProducerIdResult(E.NONE, 1001, 0)
        assert h.log.attempts == 0  # an idempotent producer leaves nothing in __transaction_state


@async_test
async def test_init_producer_id_when_producer_ids_are_unavailable() -> None:
    async with Harness() as h:
        h.pids.fail_next(E.COORDINATOR_LOAD_IN_PROGRESS)
        assert await h.c.init_producer_id(None, TIMEOUT) == failed(E.COORDINATOR_LOAD_IN_PROGRESS)
        h.pids.fail_next(E.COORDINATOR_NOT_AVAILABLE)
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.COORDINATOR_NOT_AVAILABLE)
        assert h.md(TXN) is None and h.log.attempts == 0


@pytest.mark.parametrize(("timeout_ms", "ok"), [(1, True), (900_000, True), (900_001, False), (0, False),
                                                (-1, False)])
@async_test
async def test_init_producer_id_transaction_timeout_is_validated(timeout_ms: int, ok: bool) -> None:
    async with Harness() as h:
        r = await h.c.init_producer_id(TXN, timeout_ms)
        if ok:
            assert r.error_code == E.NONE
        else:
            assert r == failed(E.INVALID_TRANSACTION_TIMEOUT)
            assert h.md(TXN) is None and h.log.attempts == 0


@async_test
async def test_init_producer_id_with_epoch_zero_for_new_transactional_id() -> None:
    async with Harness() as h:
        assert await h.c.init_producer_id(TXN, TIMEOUT) == InitProducerIdResult(E.NONE, 1000, 0)
        (record,) = h.log.records_of(TXN)
        assert record == log_value(S.EMPTY, producer_id=1000, producer_epoch=0, timeout_ms=TIMEOUT, start_ms=-1,
                                   update_ms=START_MS)
        assert h.log.appended[0].partition == h.partition_of(TXN)
        md = h.md(TXN)
        assert md is not None and (md.producer_id, md.producer_epoch, md.state) == (1000, 0, S.EMPTY)


@async_test
async def test_init_producer_id_generates_new_producer_id_if_no_state_and_producer_id_and_epoch_provided() -> None:
    async with Harness() as h:
        # KIP-360: a producer re-initialising with (id, epoch) the coordinator does not know (the id expired)
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, 7)) == InitProducerIdResult(E.NONE, 1000, 0)


@async_test
async def test_init_producer_id_generates_new_producer_id_if_epochs_exhausted() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, MAX_PRODUCER_EPOCH - 1, S.EMPTY, last_producer_epoch=MAX_PRODUCER_EPOCH - 2))
        r = await h.c.init_producer_id(TXN, TIMEOUT)
        assert r == InitProducerIdResult(E.NONE, 1000, 0)
        md = h.md(TXN)
        assert md is not None and (md.producer_id, md.last_producer_id, md.producer_epoch) == (1000, PID, 0)
        assert md.last_producer_epoch == NO_PRODUCER_EPOCH  # no expected epoch given
        assert h.log.records_of(TXN)[-1].producer_id == 1000


@async_test
async def test_init_producer_id_when_not_coordinator() -> None:
    h = Harness(num_partitions=3)  # nothing elected
    try:
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.NOT_COORDINATOR)
        h.elect_all()
        assert (await h.c.init_producer_id(TXN, TIMEOUT)).error_code == E.NONE
        h.c.on_resignation(h.partition_of(TXN))
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.NOT_COORDINATOR)
        assert h.pids.issued == [1000]
    finally:
        await h.close()


@async_test
async def test_init_producer_id_while_coordinator_loading() -> None:
    async with Harness() as h:
        h.c.state.begin_loading(h.partition_of(TXN))
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.COORDINATOR_LOAD_IN_PROGRESS)
        assert h.pids.issued == [] and h.log.attempts == 0


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT], ids=_name)
@async_test
async def test_init_producer_id_increments_epoch_and_updates_metadata(state: S) -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, EPOCH, state, start_ms=START_MS - 50, update_ms=START_MS - 50))
        h.clock.advance(1234)
        assert await h.c.init_producer_id(TXN, 10) == InitProducerIdResult(E.NONE, PID, EPOCH + 1)
        md = h.md(TXN)
        assert md is not None
        assert (md.producer_id, md.producer_epoch, md.txn_timeout_ms) == (PID, EPOCH + 1, 10)
        assert md.txn_last_update_timestamp == h.clock()
        assert md.state is S.EMPTY
        assert h.log.records_of(TXN) == [log_value(S.EMPTY, PID, EPOCH + 1, timeout_ms=10, start_ms=-1,
                                                   update_ms=h.clock())]
        assert h.pids.issued == []


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT], ids=_name)
@async_test
async def test_init_producer_id_waits_for_prepared_transaction_to_complete(state: S) -> None:
    async with Harness() as h:
        h.put(metadata(TXN, 0, 0, state, partitions=[tp("topic", 1)], start_ms=0, update_ms=0))
        assert await h.c.init_producer_id(TXN, 10) == failed(E.CONCURRENT_TRANSACTIONS)
        assert h.log.attempts == 0
        md = h.md(TXN)
        assert md is not None and (md.state, md.producer_epoch, md.pending_state) == (state, 0, None)


@async_test
async def test_init_producer_id_aborts_ongoing_transaction_under_bumped_epoch() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH, S.ONGOING, [T1], last_producer_epoch=EPOCH - 1, timeout_ms=TIMEOUT,
                            start_ms=START_MS, update_ms=START_MS))
        h.clock.advance(10)
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.CONCURRENT_TRANSACTIONS)
        # Kafka: PrepareAbort of the same transaction under epoch + 1, last epoch reset
        assert h.log.records_of(TXN)[0] == log_value(S.PREPARE_ABORT, PID, EPOCH + 1, [T1], TIMEOUT,
                                                     start_ms=START_MS, update_ms=START_MS + 10)
        assert (md.producer_epoch, md.last_producer_epoch) == (EPOCH + 1, NO_PRODUCER_EPOCH)
        # the abort markers carry the bumped epoch, then the abort completes
        await completed(h, state=S.COMPLETE_ABORT)
        (call,) = h.writer.calls
        assert (call.producer_id, call.producer_epoch, call.commit, call.partitions) == (PID, EPOCH + 1, False, [T1])
        assert h.log.states_of(TXN) == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
        # the retry then succeeds with yet another epoch; the old producer is fenced
        assert await h.c.init_producer_id(TXN, TIMEOUT) == InitProducerIdResult(E.NONE, PID, EPOCH + 2)
        assert await h.c.end_txn(TXN, PID, EPOCH, True) == E.PRODUCER_FENCED


@async_test
async def test_init_producer_id_during_ongoing_transaction_does_not_repeatedly_bump_epoch_if_append_fails() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH, S.ONGOING, [T1], start_ms=START_MS))
        h.log.fail_next(E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS)
        for _ in range(2):
            # Kafka's appendTransactionToLog maps NOT_ENOUGH_REPLICAS to COORDINATOR_NOT_AVAILABLE
            assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.COORDINATOR_NOT_AVAILABLE)
            assert md.producer_epoch == EPOCH + 1
            assert md.has_failed_epoch_fence
            assert (md.state, md.pending_state) == (S.ONGOING, None)
        assert h.log.appended == []
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.CONCURRENT_TRANSACTIONS)
        assert md.producer_epoch == EPOCH + 1
        await completed(h, state=S.COMPLETE_ABORT)
        assert not md.has_failed_epoch_fence
        assert [v.producer_epoch for v in h.log.records_of(TXN)] == [EPOCH + 1, EPOCH + 1]
        assert h.log.attempts == 4


@async_test
async def test_init_producer_id_uses_last_epoch_to_fence_when_epochs_are_exhausted() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, MAX_PRODUCER_EPOCH - 1, S.ONGOING, [T1],
                            last_producer_epoch=MAX_PRODUCER_EPOCH - 2, start_ms=START_MS))
        assert md.epoch_exhausted
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.CONCURRENT_TRANSACTIONS)
        assert md.producer_epoch == MAX_PRODUCER_EPOCH
        assert h.log.records_of(TXN)[0] == log_value(S.PREPARE_ABORT, PID, MAX_PRODUCER_EPOCH, [T1], TIMEOUT,
                                                     start_ms=START_MS, update_ms=START_MS)
        await completed(h, state=S.COMPLETE_ABORT)
        assert h.writer.calls[0].producer_epoch == MAX_PRODUCER_EPOCH
        # the retry finds the epochs exhausted: a new producer id
        assert await h.c.init_producer_id(TXN, TIMEOUT) == InitProducerIdResult(E.NONE, 1000, 0)
        assert md.last_producer_id == PID


@async_test
async def test_init_producer_id_with_no_last_producer_data_fences() -> None:
    async with Harness() as h:
        # written by a broker that does not keep the previous producer data: a retry cannot be recognised
        h.put(metadata(TXN, PID, EPOCH + 1, S.EMPTY, [T1]))
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, EPOCH)) == failed(E.PRODUCER_FENCED)
        assert h.log.attempts == 0


@async_test
async def test_init_producer_id_fences_producer_when_mapping_exists_with_different_producer_id() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID + 1, EPOCH, S.EMPTY, last_producer_id=PID, last_producer_epoch=EPOCH - 1))
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, EPOCH)) == failed(E.PRODUCER_FENCED)
        assert h.log.attempts == 0


@async_test
async def test_init_producer_id_with_current_epoch_provided() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, 10, S.EMPTY, last_producer_id=PID, last_producer_epoch=9))
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, 10)) == InitProducerIdResult(E.NONE, PID, 11)
        # the producer retries, having missed the answer: the same epoch, not bumped again
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, 10)) == InitProducerIdResult(E.NONE, PID, 11)


@async_test
async def test_init_producer_id_with_stale_current_epoch_is_fenced() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, 10, S.EMPTY, last_producer_id=PID, last_producer_epoch=9))
        # a new producer takes the id over: epoch 11, last epoch forgotten
        assert await h.c.init_producer_id(TXN, TIMEOUT) == InitProducerIdResult(E.NONE, PID, 11)
        # the old producer tries to continue from epoch 10
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, 10)) == failed(E.PRODUCER_FENCED)
        assert len(h.log.appended) == 1


@async_test
async def test_retry_init_producer_id_after_producer_id_rotation() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, MAX_PRODUCER_EPOCH - 1, S.EMPTY, [T1], last_producer_id=PID,
                       last_producer_epoch=MAX_PRODUCER_EPOCH - 2))
        expected = (PID, MAX_PRODUCER_EPOCH - 1)
        assert await h.c.init_producer_id(TXN, TIMEOUT, expected) == InitProducerIdResult(E.NONE, 1000, 0)
        # the producer retries the old request after the rotation
        assert await h.c.init_producer_id(TXN, TIMEOUT, expected) == InitProducerIdResult(E.NONE, 1000, 0)
        assert h.pids.issued == [1000]


@async_test
async def test_init_producer_id_with_invalid_epoch_after_producer_id_rotation() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, MAX_PRODUCER_EPOCH - 1, S.EMPTY, [T1], last_producer_id=PID,
                       last_producer_epoch=MAX_PRODUCER_EPOCH - 2))
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, MAX_PRODUCER_EPOCH - 1)) == \
            InitProducerIdResult(E.NONE, 1000, 0)
        # the old producer id with a stale epoch
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, MAX_PRODUCER_EPOCH - 2)) == failed(E.PRODUCER_FENCED)


async def _reinit_after_fence_at_max_epoch(h: Harness) -> InitProducerIdResult | None:
    # the transaction of epoch Short.MaxValue - 1 was aborted under Short.MaxValue (a fence); its producer,
    # still at Short.MaxValue - 1, re-initialises with its id and epoch (KIP-360)
    h.put(metadata(TXN, PID, MAX_PRODUCER_EPOCH, S.COMPLETE_ABORT, start_ms=START_MS))
    try:
        return await h.c.init_producer_id(TXN, TIMEOUT, (PID, MAX_PRODUCER_EPOCH - 1))
    except IllegalTransitionError:
        return None


@async_test
async def test_init_producer_id_with_stale_epoch_on_exhausted_epochs_does_not_rotate() -> None:
    async with Harness() as h:
        r = await _reinit_after_fence_at_max_epoch(h)
        assert r is None or r == failed(E.PRODUCER_FENCED)
        assert h.pids.issued == [] and h.log.attempts == 0  # the fenced producer gets no new producer id
        assert h.md(TXN).pending_state is None  # type: ignore[union-attr]


@async_test
async def test_init_producer_id_with_stale_epoch_on_exhausted_epochs_is_fenced() -> None:
    async with Harness() as h:
        assert await _reinit_after_fence_at_max_epoch(h) == failed(E.PRODUCER_FENCED)


@async_test
async def test_init_producer_id_does_not_bump_epoch_with_pending_transition() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, 10, S.ONGOING, [T1], start_ms=START_MS))
        md.prepare_abort_or_commit(S.PREPARE_COMMIT, START_MS)
        assert await h.c.init_producer_id(TXN, TIMEOUT, (PID, 10)) == failed(E.CONCURRENT_TRANSACTIONS)
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.CONCURRENT_TRANSACTIONS)
        assert (md.producer_epoch, md.pending_state, h.log.attempts) == (10, S.PREPARE_COMMIT, 0)


@async_test
async def test_init_producer_id_while_another_init_is_being_written() -> None:
    async with Harness() as h:
        h.log.hold()
        first = asyncio.create_task(h.c.init_producer_id(TXN, TIMEOUT))
        await settle()
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.CONCURRENT_TRANSACTIONS)
        h.log.release_all()
        assert await first == InitProducerIdResult(E.NONE, 1000, 0)


@async_test
async def test_init_producer_id_write_failure_leaves_new_metadata_uninitialised() -> None:
    async with Harness() as h:
        h.log.fail_next(E.NOT_LEADER_OR_FOLLOWER)
        assert await h.c.init_producer_id(TXN, TIMEOUT) == failed(E.NOT_COORDINATOR)
        md = h.md(TXN)
        assert md is not None and (md.producer_id, md.producer_epoch, md.pending_state) == (1000, -1, None)
        # the retry uses the cached producer id
        assert await h.c.init_producer_id(TXN, TIMEOUT) == InitProducerIdResult(E.NONE, 1000, 0)
        assert h.pids.issued == [1000]


@async_test
async def test_init_producer_id_rotation_after_reelection_writes_nothing() -> None:
    h = Harness()
    h.log.write(0, TXN, log_value(S.COMPLETE_COMMIT, PID, MAX_PRODUCER_EPOCH - 1))
    async with h:
        h.pids.hold()
        init = asyncio.create_task(h.c.init_producer_id(TXN, TIMEOUT))
        await settle()
        h.c.on_election(0, h.coordinator_epoch + 1)  # reloaded: another metadata object, another epoch
        h.pids.release_all()
        assert (await init).error_code == E.NOT_COORDINATOR
        assert h.log.appended == []  # the new coordinator's cache and the log still agree


@async_test
async def test_init_producer_id_rotation_racing_expiration() -> None:
    h = Harness()
    h.log.write(0, TXN, log_value(S.COMPLETE_COMMIT, PID, MAX_PRODUCER_EPOCH - 1))
    async with h:
        h.clock.advance(h.config.transactional_id_expiration_ms + 1)
        h.pids.hold()
        init = asyncio.create_task(h.c.init_producer_id(TXN, TIMEOUT))
        await settle()
        await h.c.remove_expired_transactions()
        h.pids.release_all()
        r = await init
        assert r.error_code in (E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR, E.NONE)


# =====================================================================================================================
# AddPartitionsToTxn and the KIP-890 verification
# =====================================================================================================================

@async_test
async def test_add_partitions_with_unknown_transactional_id() -> None:
    async with Harness() as h:
        assert await h.c.add_partitions(TXN, 0, 1, [T1]) == E.INVALID_PRODUCER_ID_MAPPING


@pytest.mark.parametrize("tid", ["", None])
@async_test
async def test_add_partitions_with_empty_or_null_transactional_id(tid: str | None) -> None:
    async with Harness() as h:
        assert await h.c.add_partitions(tid, 0, 1, [T1]) == E.INVALID_REQUEST


@async_test
async def test_add_partitions_when_not_coordinator_or_loading() -> None:
    h = Harness()
    try:
        assert await h.c.add_partitions(TXN, 0, 1, [T1]) == E.NOT_COORDINATOR
        h.c.state.begin_loading(0)
        assert await h.c.add_partitions(TXN, 0, 1, [T1]) == E.COORDINATOR_LOAD_IN_PROGRESS
    finally:
        await h.close()


@async_test
async def test_add_partitions_with_wrong_producer_id() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, EPOCH))
        assert await h.c.add_partitions(TXN, PID + 1, EPOCH, [T1]) == E.INVALID_PRODUCER_ID_MAPPING
        assert h.log.attempts == 0


@async_test
async def test_add_partitions_with_different_epoch_is_fenced() -> None:
    async with Harness() as h:
        # the epoch is checked before the state (here PrepareCommit)
        h.put(metadata(TXN, 0, 10, S.PREPARE_COMMIT, last_producer_epoch=9, start_ms=0))
        assert await h.c.add_partitions(TXN, 0, 0, [T1]) == E.PRODUCER_FENCED
        assert await h.c.add_partitions(TXN, 0, 11, [T1]) == E.PRODUCER_FENCED


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT], ids=_name)
@async_test
async def test_add_partitions_while_prepared_is_concurrent_transactions(state: S) -> None:
    async with Harness() as h:
        h.put(metadata(TXN, 0, 0, state, start_ms=0, update_ms=0))
        assert await h.c.add_partitions(TXN, 0, 0, [T1]) == E.CONCURRENT_TRANSACTIONS
        assert h.log.attempts == 0


@async_test
async def test_add_partitions_while_a_transition_is_pending() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h)
        h.log.hold()
        first = asyncio.create_task(h.c.add_partitions(TXN, pid, epoch, [tp("topic2")]))
        await settle()
        assert await h.c.add_partitions(TXN, pid, epoch, [tp("topic3")]) == E.CONCURRENT_TRANSACTIONS
        h.log.release_all()
        assert await first == E.NONE


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT], ids=_name)
@async_test
async def test_add_partitions_appends_new_metadata(state: S) -> None:
    async with Harness() as h:
        before = [tp("topic0")] if state is S.ONGOING else []
        md = h.put(metadata(TXN, PID, EPOCH, state, before, last_producer_epoch=EPOCH - 1,
                            start_ms=START_MS - 100, update_ms=START_MS - 100))
        h.clock.advance(7)
        assert await h.c.add_partitions(TXN, PID, EPOCH, [T1]) == E.NONE
        start = START_MS - 100 if state is S.ONGOING else h.clock()  # a new transaction starts its timer
        assert h.log.records_of(TXN) == [log_value(S.ONGOING, PID, EPOCH, [*before, T1], TIMEOUT, start_ms=start,
                                                   update_ms=h.clock())]
        assert (md.state, md.partitions, md.txn_start_timestamp) == (S.ONGOING, {*before, T1}, start)
        assert (md.producer_epoch, md.pending_state) == (EPOCH, None)


@async_test
async def test_add_partitions_already_in_ongoing_transaction_answers_without_a_write() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, 0, 0, S.ONGOING, [T1, tp("topic2")], start_ms=0, update_ms=0))
        assert await h.c.add_partitions(TXN, 0, 0, [T1]) == E.NONE
        assert await h.c.add_partitions(TXN, 0, 0, []) == E.NONE
        assert h.log.attempts == 0


@pytest.mark.parametrize(("code", "mapped"), [(E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
                                              (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
                                              (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR)])
@async_test
async def test_add_partitions_write_failure_leaves_metadata_unchanged(code: int, mapped: int) -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH, S.EMPTY))
        h.log.fail_next(code)
        assert await h.c.add_partitions(TXN, PID, EPOCH, [T1]) == mapped
        assert (md.state, md.partitions, md.pending_state, md.txn_start_timestamp) == (S.EMPTY, set(), None, -1)
        assert await h.c.add_partitions(TXN, PID, EPOCH, [T1]) == E.NONE


@async_test
async def test_verify_partition_handling() -> None:
    async with Harness() as h:
        # wrong producer id
        h.put(metadata(TXN, 1, 0, S.PREPARE_COMMIT, [T1], start_ms=0, update_ms=0))
        assert h.c.verify_partitions(TXN, 0, 0, [T1]) == {T1: E.INVALID_PRODUCER_ID_MAPPING}
        # wrong epoch
        h.c.on_election(0, h.coordinator_epoch)  # empty cache again
        h.put(metadata(TXN, 0, 0, S.PREPARE_COMMIT, [T1], start_ms=0, update_ms=0))
        assert h.c.verify_partitions(TXN, 0, 1, [T1]) == {T1: E.PRODUCER_FENCED}
        # prepared: CONCURRENT_TRANSACTIONS
        assert h.c.verify_partitions(TXN, 0, 0, [T1]) == {T1: E.CONCURRENT_TRANSACTIONS}
        # a pending transition does not matter; a partition not in the transaction is refused (INVALID_TXN_STATE,
        # Kafka 3.9's code for a produce request; its verify-only AddPartitionsToTxn says TRANSACTION_ABORTABLE)
        h.c.on_election(0, h.coordinator_epoch)
        md = h.put(metadata(TXN, 0, 0, S.ONGOING, [], start_ms=0, update_ms=0))
        md.pending_state = S.ONGOING
        assert h.c.verify_partitions(TXN, 0, 0, [T1]) == {T1: E.INVALID_TXN_STATE}
        assert h.c.verify_partitions("", 0, 0, [T1]) == {T1: E.INVALID_REQUEST}
        assert h.c.verify_partitions("unknown", 0, 0, [T1]) == {T1: E.INVALID_PRODUCER_ID_MAPPING}


@async_test
async def test_verify_partitions_in_ongoing_transaction() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, 0, 0, S.ONGOING, [T1], start_ms=0, update_ms=0))
        assert h.c.verify_partitions(TXN, 0, 0, [T1]) == {T1: E.NONE}
        t2 = tp("topic2")
        assert h.c.verify_partitions(TXN, 0, 0, [T1, t2]) == {T1: E.NONE, t2: E.INVALID_TXN_STATE}
        assert h.log.attempts == 0


@async_test
async def test_verify_partitions_when_not_coordinator_or_loading() -> None:
    h = Harness()
    try:
        assert h.c.verify_partitions(TXN, 0, 0, [T1]) == {T1: E.NOT_COORDINATOR}
        h.c.state.begin_loading(0)
        assert h.c.verify_partitions(TXN, 0, 0, [T1]) == {T1: E.COORDINATOR_LOAD_IN_PROGRESS}
    finally:
        await h.close()


# =====================================================================================================================
# EndTxn
# =====================================================================================================================

@pytest.mark.parametrize("commit", [True, False])
@async_test
async def test_end_txn_with_unknown_transactional_id(commit: bool) -> None:
    async with Harness() as h:
        assert await h.c.end_txn(TXN, 0, 0, commit) == E.INVALID_PRODUCER_ID_MAPPING


@async_test
async def test_end_txn_when_producer_id_does_not_match_mapped() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, 10, 0, S.ONGOING, start_ms=0))
        assert await h.c.end_txn(TXN, 0, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
        assert h.log.attempts == 0


@async_test
async def test_end_txn_when_epoch_is_not_the_transactions() -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, EPOCH, S.ONGOING, last_producer_epoch=EPOCH - 1, start_ms=0))
        assert await h.c.end_txn(TXN, PID, 0, True) == E.PRODUCER_FENCED
        assert await h.c.end_txn(TXN, PID, EPOCH + 1, False) == E.PRODUCER_FENCED  # a larger one too
        assert h.log.attempts == 0


@pytest.mark.parametrize(("metadata_epoch", "request_epoch"), [(1, 2), (2, 1)], ids=["larger", "smaller"])
@async_test
async def test_end_txn_invalid_epoch(metadata_epoch: int, request_epoch: int) -> None:
    async with Harness() as h:
        h.put(metadata(TXN, PID, metadata_epoch, S.COMPLETE_COMMIT, last_producer_epoch=1, start_ms=0))
        assert await h.c.end_txn(TXN, PID, request_epoch, True) == E.PRODUCER_FENCED


END_TXN_CASES = [
    (S.COMPLETE_COMMIT, True, E.NONE), (S.COMPLETE_COMMIT, False, E.NONE),  # an abort with no partition added
    (S.COMPLETE_ABORT, False, E.NONE), (S.COMPLETE_ABORT, True, E.INVALID_TXN_STATE),
    # markers being written: retriable either way (Kafka has CompleteX pending then)
    (S.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_COMMIT, False, E.CONCURRENT_TRANSACTIONS),
    (S.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS), (S.PREPARE_ABORT, True, E.CONCURRENT_TRANSACTIONS),
    (S.EMPTY, True, E.INVALID_TXN_STATE), (S.EMPTY, False, E.NONE),
]


@pytest.mark.parametrize(("state", "commit", "code"), END_TXN_CASES,
                         ids=[f"{s.kafka_name}-{'commit' if c else 'abort'}" for s, c, _ in END_TXN_CASES])
@async_test
async def test_end_txn_by_state_without_a_write(state: S, commit: bool, code: int) -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH, state, last_producer_epoch=EPOCH - 1, timeout_ms=1, start_ms=0))
        assert await h.c.end_txn(TXN, PID, EPOCH, commit) == code
        assert h.log.attempts == 0 and h.writer.calls == []
        assert (md.state, md.pending_state, md.producer_epoch) == (state, None, EPOCH)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
@async_test
async def test_end_txn_on_ongoing_appends_prepare_then_writes_markers_then_completes(commit: bool) -> None:
    async with Harness() as h:
        parts = [tp("topic1", 0), tp("topic1", 1), tp("topic2", 0)]
        md = h.put(metadata(TXN, PID, EPOCH, S.ONGOING, parts, timeout_ms=TIMEOUT, start_ms=START_MS - 5))
        h.clock.advance(3)
        prepared = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        h.writer.hold()
        assert await h.c.end_txn(TXN, PID, EPOCH, commit) == E.NONE  # answered once PrepareX is written
        assert h.log.records_of(TXN) == [log_value(prepared, PID, EPOCH, parts, TIMEOUT, start_ms=START_MS - 5,
                                                   update_ms=START_MS + 3)]
        assert md.state is prepared
        await settle()
        (call,) = h.writer.calls
        assert (call.producer_id, call.producer_epoch, call.commit) == (PID, EPOCH, commit)
        assert (call.coordinator_epoch, sorted(call.partitions)) == (h.coordinator_epoch, sorted(parts))
        h.clock.advance(4)
        h.writer.release_all()
        await completed(h, state=done)
        assert h.log.records_of(TXN)[1] == log_value(done, PID, EPOCH, [], TIMEOUT, start_ms=START_MS - 5,
                                                     update_ms=START_MS + 7)
        assert (md.producer_id, md.producer_epoch, md.partitions) == (PID, EPOCH, set())


@pytest.mark.parametrize("tid", ["", None])
@async_test
async def test_end_txn_with_empty_or_null_transactional_id(tid: str | None) -> None:
    async with Harness() as h:
        assert await h.c.end_txn(tid, 0, 0, True) == E.INVALID_REQUEST


@async_test
async def test_end_txn_when_not_coordinator_or_loading() -> None:
    h = Harness()
    try:
        assert await h.c.end_txn(TXN, 0, 0, True) == E.NOT_COORDINATOR
        h.c.state.begin_loading(0)
        assert await h.c.end_txn(TXN, 0, 0, True) == E.COORDINATOR_LOAD_IN_PROGRESS
    finally:
        await h.close()


@async_test
async def test_end_txn_retried_commit_after_completion() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h)
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.NONE
        # a retry while the markers are written
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.CONCURRENT_TRANSACTIONS
        await completed(h)
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.NONE
        assert h.log.states_of(TXN) == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        # and the next transaction starts from CompleteCommit
        assert await h.c.add_partitions(TXN, pid, epoch, [tp("other")]) == E.NONE
        assert h.md(TXN).partitions == {tp("other")}  # type: ignore[union-attr]


@async_test
async def test_abort_of_a_transaction_whose_partitions_never_joined_succeeds() -> None:
    """librdkafka's sequence (a CI failure): commit; begin; its AddPartitionsToTxn is answered
    CONCURRENT_TRANSACTIONS while the commit's markers are written; the application aborts before the retry,
    and librdkafka sends EndTxn(abort). INVALID_TXN_STATE there is fatal to the producer."""
    async with Harness() as h:
        pid, epoch = await begin(h)
        h.writer.hold()
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.NONE
        await settle()
        assert await h.c.add_partitions(TXN, pid, epoch, [tp("other")]) == E.CONCURRENT_TRANSACTIONS
        assert await h.c.end_txn(TXN, pid, epoch, False) == E.CONCURRENT_TRANSACTIONS  # retried by the client
        h.writer.release_all()
        await completed(h)
        assert await h.c.end_txn(TXN, pid, epoch, False) == E.NONE  # nothing joined: nothing to abort
        assert h.log.states_of(TXN) == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        assert await h.c.add_partitions(TXN, pid, epoch, [tp("other")]) == E.NONE  # the next transaction
        assert await h.c.end_txn(TXN, pid, epoch, False) == E.NONE
        await completed(h, state=S.COMPLETE_ABORT)


@pytest.mark.parametrize(("code", "mapped"), [
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE), (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE), (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR), (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR), (E.INVALID_REQUIRED_ACKS, E.INVALID_REQUIRED_ACKS),
])
@async_test
async def test_end_txn_log_write_failure(code: int, mapped: int) -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH, S.ONGOING, [T1], start_ms=START_MS))
        h.log.fail_next(code)
        assert await h.c.end_txn(TXN, PID, EPOCH, True) == mapped
        assert (md.state, md.pending_state, md.producer_epoch, md.partitions) == (S.ONGOING, None, EPOCH, {T1})
        assert not md.has_failed_epoch_fence
        await settle()
        assert h.writer.calls == []
        # the client retries
        assert await h.c.end_txn(TXN, PID, EPOCH, True) == E.NONE
        await completed(h)


@async_test
async def test_end_txn_when_coordinator_epoch_changes_during_the_write() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h)
        h.log.hold()
        end = asyncio.create_task(h.c.end_txn(TXN, pid, epoch, True))
        await settle()
        old = h.md(TXN)
        # the partition is elected again (a new leader epoch) while PrepareCommit waits for the ISR
        h.c.on_election(0, h.coordinator_epoch + 1)
        h.log.release_all()
        assert await end == E.NOT_COORDINATOR
        assert old is not None and (old.state, old.pending_state) == (S.ONGOING, None)
        # the new coordinator loaded the PrepareCommit and completes it, under its own epoch
        await completed(h)
        assert [c.coordinator_epoch for c in h.writer.calls] == [h.coordinator_epoch + 1]
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.NONE


@async_test
async def test_end_txn_when_coordinator_resigns_during_the_write() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h)
        h.log.hold()
        end = asyncio.create_task(h.c.end_txn(TXN, pid, epoch, False))
        await settle()
        h.c.on_resignation(0)
        h.log.release_all()
        assert await end == E.NOT_COORDINATOR
        await settle()
        assert h.writer.calls == []
        assert await h.c.end_txn(TXN, pid, epoch, False) == E.NOT_COORDINATOR


@async_test
async def test_end_txn_while_a_transition_is_pending() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h)
        h.log.hold()
        add = asyncio.create_task(h.c.add_partitions(TXN, pid, epoch, [tp("topic9")]))
        await settle()
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.CONCURRENT_TRANSACTIONS
        h.log.release_all()
        assert await add == E.NONE


# =====================================================================================================================
# Timed-out transactions
# =====================================================================================================================

@async_test
async def test_abort_timed_out_transaction_in_ongoing_state_and_bump_epoch() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h, timeout_ms=1000)
        started = h.clock()
        h.clock.advance(1001)
        await h.c.abort_timed_out_transactions()
        await completed(h, state=S.COMPLETE_ABORT)
        prepare = h.log.records_of(TXN)[2]
        assert prepare == log_value(S.PREPARE_ABORT, pid, epoch + 1, [T1], 1000, start_ms=started,
                                    update_ms=h.clock())
        (call,) = h.writer.calls
        assert (call.producer_epoch, call.commit) == (epoch + 1, False)
        assert h.c.timed_out_aborts == 1
        # the producer is fenced from now on
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.PRODUCER_FENCED
        assert await h.c.add_partitions(TXN, pid, epoch, [T1]) == E.PRODUCER_FENCED
        assert (await h.c.init_producer_id(TXN, 1000, (pid, epoch))).error_code == E.PRODUCER_FENCED


@async_test
async def test_transaction_not_timed_out_until_its_timeout_has_passed() -> None:
    async with Harness() as h:
        await begin(h, timeout_ms=1000)
        h.clock.advance(1000)  # Kafka: txnStartTimestamp + txnTimeoutMs < now
        await h.c.abort_timed_out_transactions()
        await settle()
        assert h.md(TXN).state is S.ONGOING  # type: ignore[union-attr]
        assert h.log.states_of(TXN) == [S.EMPTY, S.ONGOING]


@async_test
async def test_not_abort_timed_out_transactions_that_have_a_pending_state_transition() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH, S.ONGOING, [T1], timeout_ms=10, start_ms=START_MS))
        md.prepare_abort_or_commit(S.PREPARE_COMMIT, START_MS)
        h.clock.advance(1000)
        await h.c.abort_timed_out_transactions()
        await settle()
        assert h.log.attempts == 0 and md.producer_epoch == EPOCH and h.c.timed_out_aborts == 0


@async_test
async def test_not_bump_epoch_again_when_aborting_timed_out_transaction_whose_append_failed() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH, S.ONGOING, [T1], timeout_ms=10, start_ms=START_MS))
        h.clock.advance(100)
        h.log.fail_next(E.NOT_ENOUGH_REPLICAS)
        await h.c.abort_timed_out_transactions()
        await settle()
        assert h.log.appended == []
        assert (md.state, md.producer_epoch, md.pending_state) == (S.ONGOING, EPOCH + 1, None)
        assert md.has_failed_epoch_fence
        # the next run aborts under the same bumped epoch
        await h.c.abort_timed_out_transactions()
        await completed(h, state=S.COMPLETE_ABORT)
        assert [v.producer_epoch for v in h.log.records_of(TXN)] == [EPOCH + 1, EPOCH + 1]


@async_test
async def test_only_ongoing_transactions_are_considered_timed_out() -> None:
    async with Harness(num_partitions=4) as h:
        for i, (tid, state) in enumerate([("ongoing", S.ONGOING), ("prepare-commit", S.PREPARE_COMMIT),
                                          ("prepare-abort", S.PREPARE_ABORT), ("complete-commit", S.COMPLETE_COMMIT),
                                          ("complete-abort", S.COMPLETE_ABORT), ("empty", S.EMPTY)]):
            h.put(metadata(tid, i, 0, state, timeout_ms=1000, start_ms=START_MS))
        h.put(metadata("not-expiring", 9, 0, S.ONGOING, timeout_ms=10_000, start_ms=START_MS))
        h.clock.advance(2000)
        assert [md.transactional_id for md in h.c.state.timed_out(h.clock())] == ["ongoing"]


@async_test
async def test_timer_aborts_timed_out_transactions_once_started() -> None:
    config = TransactionConfig(abort_timed_out_interval_ms=1, remove_expired_interval_ms=3_600_000)
    async with Harness(config=config) as h:
        pid, epoch = await begin(h, timeout_ms=1000)
        h.clock.advance(5000)
        h.c.start()
        await completed(h, state=S.COMPLETE_ABORT)
        assert h.md(TXN).producer_epoch == epoch + 1  # type: ignore[union-attr]


@async_test
async def test_end_txn_commit_racing_a_timed_out_abort() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h, timeout_ms=1000)
        h.clock.advance(2000)
        await h.c.abort_timed_out_transactions()  # the abort task is scheduled, not run yet
        code = await h.c.end_txn(TXN, pid, epoch, True)
        assert code in (E.PRODUCER_FENCED, E.CONCURRENT_TRANSACTIONS)
        await completed(h, state=S.COMPLETE_ABORT)
        assert h.md(TXN).producer_epoch == epoch + 1  # type: ignore[union-attr]


# =====================================================================================================================
# transactional.id expiration
# =====================================================================================================================

EXPIRATION_MS = TransactionConfig().transactional_id_expiration_ms


async def _expire(h: Harness, state: S, fail: int = E.NONE) -> None:
    h.put(metadata("expiring", 1, 0, state, [T1] if state is not S.EMPTY else [], start_ms=START_MS,
                   update_ms=START_MS - EXPIRATION_MS))
    h.put(metadata("fresh", 2, 0, S.EMPTY, update_ms=START_MS))
    if fail:
        h.log.fail_next(fail)
    await h.c.remove_expired_transactions()


async def _usable(h: Harness, tid: str) -> None:
    md = h.md(tid)
    assert md is not None and md.pending_state is None
    r = await h.c.init_producer_id(tid, TIMEOUT)
    assert r == InitProducerIdResult(E.NONE, md.producer_id, 1)


@pytest.mark.parametrize("state", [S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.EMPTY], ids=_name)
@async_test
async def test_remove_expired_transactional_ids(state: S) -> None:
    async with Harness(num_partitions=3) as h:
        await _expire(h, state)
        (tombstone,) = h.log.appended
        assert (tombstone.partition, tombstone.key, tombstone.value) == (h.partition_of("expiring"),
                                                                       encode_key("expiring"), None)
        assert h.md("expiring") is None
        await _usable(h, "fresh")
        # a producer of the expired id starts over with a new producer id
        assert await h.c.init_producer_id("expiring", TIMEOUT) == InitProducerIdResult(E.NONE, 1000, 0)


@async_test
async def test_not_remove_expired_transactional_ids_if_log_append_fails() -> None:
    async with Harness() as h:
        await _expire(h, S.COMPLETE_ABORT, fail=E.NOT_ENOUGH_REPLICAS)
        assert h.log.appended == []
        await _usable(h, "expiring")
        await _usable(h, "fresh")


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT], ids=_name)
@async_test
async def test_not_remove_transactional_ids_with_open_transaction(state: S) -> None:
    async with Harness() as h:
        await _expire(h, state)
        assert h.log.attempts == 0
        md = h.md("expiring")
        assert md is not None and md.state is state


@async_test
async def test_expiration_boundary_and_pending_state() -> None:
    async with Harness() as h:
        md = h.put(metadata("a", 1, 0, S.EMPTY, update_ms=START_MS - EXPIRATION_MS + 1))
        await h.c.remove_expired_transactions()
        assert h.log.attempts == 0  # one millisecond short
        h.clock.advance(1)
        md.prepare_add_partitions({T1}, h.clock())  # a transition in flight: not expired
        await h.c.remove_expired_transactions()
        assert h.log.attempts == 0
        md.abort_transition()
        await h.c.remove_expired_transactions()  # lastUpdate <= now - expiration
        assert h.log.states_of("a") == [None] and h.md("a") is None


@async_test
async def test_id_used_while_tombstones_are_written_is_not_expired() -> None:
    async with Harness() as h:
        h.put(metadata("a", 1, 0, S.EMPTY, update_ms=START_MS - EXPIRATION_MS))
        b = h.put(metadata("b", 2, 0, S.EMPTY, update_ms=START_MS - EXPIRATION_MS))
        h.log.hold()
        expiring = asyncio.create_task(h.c.remove_expired_transactions())
        await settle()  # a's tombstone waits for the ISR
        add = asyncio.create_task(h.c.add_partitions("b", 2, 0, [T1]))  # b starts a transaction meanwhile
        await settle()
        assert b.pending_state is S.ONGOING
        h.log.release_all()
        await expiring
        assert await add == E.NONE
        assert h.log.states_of("a") == [None] and h.md("a") is None
        assert h.log.states_of("b") == [S.ONGOING] and h.md("b") is b and b.state is S.ONGOING


@async_test
async def test_expiration_of_uninitialised_transaction_metadata() -> None:
    async with Harness() as h:
        # the first InitProducerId's write failed: the metadata stays with epoch -1, and must still expire
        h.log.fail_next(E.NOT_ENOUGH_REPLICAS)
        assert (await h.c.init_producer_id(TXN, TIMEOUT)).error_code == E.COORDINATOR_NOT_AVAILABLE
        assert h.md(TXN).producer_epoch == NO_PRODUCER_EPOCH  # type: ignore[union-attr]
        h.clock.advance(EXPIRATION_MS)
        await h.c.remove_expired_transactions()
        assert h.log.states_of(TXN) == [None] and h.md(TXN) is None


@async_test
async def test_describe_and_list_skip_an_id_being_expired() -> None:
    async with Harness() as h:
        h.c.start()
        h.put(metadata(TXN, PID, EPOCH, S.EMPTY, update_ms=START_MS - EXPIRATION_MS))
        h.log.hold()
        expiring = asyncio.create_task(h.c.remove_expired_transactions())
        await settle()
        assert h.md(TXN).pending_state is S.DEAD  # type: ignore[union-attr]
        h.log.release_all()
        await expiring
        assert h.c.describe(TXN)["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
        assert h.c.list_transactions(set(), set()) == (E.NONE, [], [])


@async_test
async def test_remove_expired_after_reload_does_not_drop_an_id_in_use() -> None:
    h = Harness()
    h.log.write(0, "a", log_value(S.EMPTY, producer_id=1, producer_epoch=0, update_ms=START_MS))
    h.log.write(0, "b", log_value(S.EMPTY, producer_id=2, producer_epoch=0, update_ms=START_MS))
    async with h:
        h.clock.advance(EXPIRATION_MS)
        h.log.hold()
        expiring = asyncio.create_task(h.c.remove_expired_transactions())  # a's tombstone in flight
        await settle()
        h.c.on_election(0, h.coordinator_epoch + 1)  # reloaded meanwhile
        init = asyncio.create_task(h.c.init_producer_id("b", TIMEOUT))  # "b" is used again
        await settle()
        h.log.release_all()
        r = await init
        await expiring
        assert r == InitProducerIdResult(E.NONE, 2, 1)
        assert h.md("b") is not None
        assert await h.c.add_partitions("b", 2, 1, [T1]) == E.NONE


# =====================================================================================================================
# Loading, election and resignation (TransactionStateManagerTest)
# =====================================================================================================================

@async_test
async def test_validate_transaction_timeout() -> None:
    async with Harness() as h:
        st = h.c.state
        assert st.validate_timeout(1)
        assert not st.validate_timeout(-1)
        assert not st.validate_timeout(0)
        assert st.validate_timeout(h.config.max_timeout_ms)
        assert not st.validate_timeout(h.config.max_timeout_ms + 1)


@async_test
async def test_add_get_transactional_ids() -> None:
    async with Harness() as h:
        st = h.c.state
        assert st.get("one") is None
        md1 = metadata("one", 1)
        found = st.put_if_absent(md1)
        assert not isinstance(found, int) and (found.coordinator_epoch, found.metadata) == (h.coordinator_epoch, md1)
        again = st.put_if_absent(metadata("one", 99))  # present: the cached one wins
        assert not isinstance(again, int) and again.metadata is md1
        got = st.get("one")
        assert got is not None and not isinstance(got, int) and got.metadata is md1


@async_test
async def test_not_coordinator_if_transactional_id_partition_not_owned() -> None:
    h = Harness(num_partitions=2)
    try:
        assert h.c.state.get(TXN) == E.NOT_COORDINATOR
        assert h.c.state.put_if_absent(metadata(TXN)) == E.NOT_COORDINATOR
    finally:
        await h.close()


@async_test
async def test_delete_partition() -> None:
    async with Harness(num_partitions=2) as h:
        ids = {p: next(f"id{i}" for i in range(100) if h.partition_of(f"id{i}") == p) for p in (0, 1)}
        h.put(metadata(ids[0], 5))
        h.put(metadata(ids[1], 10))
        h.c.on_resignation(0)
        assert h.c.state.get(ids[0]) == E.NOT_COORDINATOR
        assert h.md(ids[1]).producer_id == 10  # type: ignore[union-attr]


@async_test
async def test_load_and_remove_transactions_for_partition() -> None:
    h = Harness()
    t1, t2 = "txn-1", "txn-2"
    p11, p12 = tp("topic1", 0), tp("topic1", 1)
    more = [tp("topic2", 0), tp("topic2", 1), tp("topic2", 2)]
    h.log.write(0, t1, log_value(S.ONGOING, 1, 1, [p11, p12]))
    h.log.write(0, t1, log_value(S.ONGOING, 1, 1, [p11, p12, *more]))
    h.log.write(0, t1, log_value(S.PREPARE_COMMIT, 1, 1, [p11, p12, *more]))
    p3 = [tp("topic3", 0), tp("topic3", 1), tp("topic3", 2)]
    h.log.write(0, t2, log_value(S.ONGOING, 2, 1, p3))
    h.log.write(0, t2, log_value(S.PREPARE_ABORT, 2, 1, p3))
    h.log.write(0, t2, log_value(S.COMPLETE_ABORT, 2, 1))
    h.log.write(0, t2, log_value(S.EMPTY, 2, 2, timeout_ms=123, start_ms=-1, update_ms=START_MS + 9))
    try:
        assert h.c.state.get(t1) == E.NOT_COORDINATOR
        h.writer.hold()  # t1 is to be completed: keep its markers in flight
        h.elect_all()
        md1, md2 = h.md(t1), h.md(t2)
        assert md1 is not None and md2 is not None
        assert (md1.state, md1.producer_id, md1.producer_epoch) == (S.PREPARE_COMMIT, 1, 1)
        assert md1.partitions == {p11, p12, *more}
        assert (md2.state, md2.producer_epoch, md2.partitions, md2.txn_timeout_ms) == (S.EMPTY, 2, set(), 123)
        assert md2.txn_last_update_timestamp == START_MS + 9
        h.c.on_resignation(0)
        assert h.c.state.get(t1) == E.NOT_COORDINATOR
        assert h.c.state.get(t2) == E.NOT_COORDINATOR
        assert h.c.markers.pending() == 0
    finally:
        await h.close()


@async_test
async def test_load_applies_tombstones_and_skips_unreadable_records() -> None:
    h = Harness()
    h.log.write(0, "gone", log_value(S.EMPTY, 1, 0))
    h.log.write(0, "gone", None)  # expired
    h.log.write_raw(0, None, b"no key")
    h.log.write_raw(0, b"\x00\x01\x00\x01x", b"unknown key version")  # Kafka skips unknown key versions too
    h.log.write_raw(0, encode_key("corrupt"), b"\x00\x00\x01")
    h.log.write(0, "kept", log_value(S.COMPLETE_COMMIT, 3, 4))
    async with h:
        assert h.md("gone") is None
        assert h.md("corrupt") is None
        kept = h.md("kept")
        assert kept is not None and (kept.state, kept.producer_id, kept.producer_epoch) == (S.COMPLETE_COMMIT, 3, 4)


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT], ids=_name)
@async_test
async def test_election_writes_markers_for_transaction_in_prepared_state(state: S) -> None:
    h = Harness()
    parts = [tp("topic1", 0), tp("topic1", 1)]
    h.log.write(0, TXN, log_value(state, PID, EPOCH, parts, start_ms=START_MS - 9))
    async with h:
        commit = state is S.PREPARE_COMMIT
        await completed(h, state=S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
        (call,) = h.writer.calls
        assert (call.producer_id, call.producer_epoch, call.commit, call.coordinator_epoch) == \
            (PID, EPOCH, commit, h.coordinator_epoch)
        assert sorted(call.partitions) == parts
        assert h.log.states_of(TXN) == [S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT]


@async_test
async def test_successful_reimmigration() -> None:
    h = Harness()
    h.log.write(0, TXN, log_value(S.PREPARE_COMMIT, PID, EPOCH, [tp("topic1", 0), tp("topic1", 1)]))
    h.writer.hold()
    try:
        h.c.on_election(0, 0)
        assert not h.c.state.loading
        # elected again at epoch 1 without having resigned
        h.c.on_election(0, 1)
        assert not h.c.state.loading and h.c.state.owned == {0: 1}
        await settle()
        # the markers of epoch 0 were cancelled; only epoch 1 sends
        assert h.c.markers.pending() == 1
        h.writer.release_all()
        await completed(h)
        assert [c.coordinator_epoch for c in h.writer.calls] == [1]
        assert h.log.states_of(TXN) == [S.COMPLETE_COMMIT]
    finally:
        await h.close()


@async_test
async def test_remove_transactions_and_markers_for_partition_on_emigration() -> None:
    async with Harness() as h:
        pid, epoch = await begin(h)
        h.writer.hold()
        assert await h.c.end_txn(TXN, pid, epoch, True) == E.NONE
        await settle()
        assert h.c.markers.pending() == 1
        h.c.on_resignation(0)
        assert h.c.markers.pending() == 0
        assert h.c.state.get(TXN) == E.NOT_COORDINATOR
        h.writer.release_all()
        await settle()
        assert h.log.states_of(TXN) == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT]


# -- appendTransactionToLog -------------------------------------------------------------------------------------------

@async_test
async def test_complete_transition_when_append_succeeded() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH))
        transit = md.prepare_add_partitions({tp("topic1", 0), tp("topic1", 1)}, h.clock())
        assert await h.c.state.append(TXN, h.coordinator_epoch, md, transit) == E.NONE
        assert (md.state, md.pending_state, md.partitions) == (S.ONGOING, None, {tp("topic1", 0), tp("topic1", 1)})
        assert h.md(TXN) is md


@pytest.mark.parametrize(("code", "mapped"), [
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE), (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE), (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR), (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
])
@async_test
async def test_append_failure_mapping(code: int, mapped: int) -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH))
        transit = md.prepare_add_partitions({tp("topic2")}, h.clock())
        h.log.fail_next(code)
        assert await h.c.state.append(TXN, h.coordinator_epoch, md, transit) == mapped
        assert (md.state, md.pending_state, md.partitions) == (S.EMPTY, None, set())
        assert h.md(TXN) is md


@async_test
async def test_append_when_coordinator_epoch_changed_or_resigned() -> None:
    async with Harness() as h:
        md = h.put(metadata(TXN, PID, EPOCH))
        # resigned while the write was in flight
        h.log.hold()
        write = asyncio.create_task(h.c.state.append(TXN, h.coordinator_epoch, md,
                                                     md.prepare_add_partitions({T1}, h.clock())))
        await settle()
        h.c.on_resignation(0)
        h.log.release_all()
        assert await write == E.NOT_COORDINATOR
        assert (md.state, md.pending_state) == (S.EMPTY, None)
        # elected again under a newer epoch: a write of the old epoch is not applied
        h.c.on_election(0, h.coordinator_epoch + 1)
        assert await h.c.state.append(TXN, h.coordinator_epoch, md, md.prepare_add_partitions({T1}, 0)) == \
            E.NOT_COORDINATOR
        assert (md.state, md.pending_state) == (S.EMPTY, None)


# =====================================================================================================================
# DescribeTransactions and ListTransactions
# =====================================================================================================================

@async_test
async def test_describe_transactions() -> None:
    async with Harness() as h:
        h.c.start()
        parts = [tp("topic1", 1), tp("topic1", 0), tp("topic2", 4)]
        h.put(metadata(TXN, PID, EPOCH, S.ONGOING, parts, timeout_ms=TIMEOUT, start_ms=START_MS - 3))
        assert h.c.describe(TXN) == {
            "transactional_id": TXN, "error_code": E.NONE, "producer_id": PID, "producer_epoch": EPOCH,
            "transaction_state": "Ongoing", "transaction_timeout_ms": TIMEOUT,
            "transaction_start_time_ms": START_MS - 3,
            "topics": [{"topic": "topic1", "partitions": [0, 1]}, {"topic": "topic2", "partitions": [4]}]}


@async_test
async def test_describe_transactions_errors() -> None:
    async with Harness(num_partitions=2) as h:
        defaults = {"producer_id": 0, "producer_epoch": 0, "transaction_state": "", "transaction_timeout_ms": 0,
                    "transaction_start_time_ms": 0, "topics": []}
        assert h.c.describe(TXN) == {"transactional_id": TXN, "error_code": E.COORDINATOR_NOT_AVAILABLE, **defaults}
        h.c.start()
        assert h.c.describe("") == {"transactional_id": "", "error_code": E.INVALID_REQUEST, **defaults}
        assert h.c.describe(TXN)["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
        h.put(metadata(TXN, PID, EPOCH, S.DEAD))  # being expired
        assert h.c.describe(TXN)["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
        h.c.state.begin_loading(h.partition_of(TXN))
        assert h.c.describe(TXN) == {"transactional_id": TXN, "error_code": E.COORDINATOR_LOAD_IN_PROGRESS,
                                     **defaults}
        h.c.on_resignation(h.partition_of(TXN))
        assert h.c.describe(TXN)["error_code"] == E.NOT_COORDINATOR


def _list_ids(h: Harness, pids: set[int] | None = None, states: set[str] | None = None,
              duration: int = -1) -> tuple[set[str], list[str]]:
    code, unknown, listed = h.c.list_transactions(states or set(), pids or set(), duration)
    assert code == E.NONE
    return {t["transactional_id"] for t in listed}, unknown


async def _listing(h: Harness) -> None:
    h.c.start()
    for tid, pid, state, started in [("t0", 0, S.ONGOING, 0), ("t1", 1, S.ONGOING, 0),
                                     ("t2", 2, S.PREPARE_COMMIT, 1000), ("t3", 3, S.PREPARE_ABORT, 1000),
                                     ("t4", 4, S.COMPLETE_COMMIT, 2000), ("t5", 5, S.COMPLETE_ABORT, 2000),
                                     ("t6", 6, S.COMPLETE_ABORT, 2000), ("t7", 7, S.PREPARE_EPOCH_FENCE, 2000),
                                     ("t8", 8, S.DEAD, 3000)]:
        h.put(metadata(tid, pid, 0, state, start_ms=START_MS + started, update_ms=START_MS + started))
    h.clock.advance(3000)


@async_test
async def test_list_transactions_filtering() -> None:
    async with Harness(num_partitions=4) as h:
        await _listing(h)
        # Dead (being expired) is never listed
        assert _list_ids(h) == ({f"t{i}" for i in range(8)}, [])
        assert _list_ids(h, states={"Ongoing"}) == ({"t0", "t1"}, [])
        assert _list_ids(h, states={"Ongoing", "UnknownState"}) == ({"t0", "t1"}, ["UnknownState"])
        assert _list_ids(h, states={"PrepareCommit", "CompleteCommit"}) == ({"t2", "t4"}, [])
        assert _list_ids(h, states={"UnknownState"}) == (set(), ["UnknownState"])
        assert _list_ids(h, pids={5}) == ({"t5"}, [])
        assert _list_ids(h, pids={5, 6, 8, 9}) == ({"t5", "t6"}, [])
        assert _list_ids(h, pids={4, 5}, states={"CompleteCommit"}) == ({"t4"}, [])
        assert _list_ids(h, pids={4, 5}, states={"CompleteCommit", "CompleteAbort"}) == ({"t4", "t5"}, [])
        assert _list_ids(h, pids={3, 6}, states={"UnknownState"}) == (set(), ["UnknownState"])
        assert _list_ids(h, pids={10}, states={"CompleteCommit"}) == (set(), [])
        assert _list_ids(h, states={"Dead"}) == (set(), [])
        # the duration filter on Ongoing transactions
        assert _list_ids(h, duration=2000)[0] == {"t0", "t1"}
        assert "t0" not in _list_ids(h, duration=3001)[0]
        code, unknown, listed = h.c.list_transactions(set(), {0}, -1)
        assert (code, unknown, listed) == (E.NONE, [], [{"transactional_id": "t0", "producer_id": 0,
                                                         "transaction_state": "Ongoing"}])


@async_test
async def test_list_transactions_duration_filter_as_kafka() -> None:
    async with Harness(num_partitions=4) as h:
        await _listing(h)
        assert _list_ids(h, duration=0)[0] == {f"t{i}" for i in range(8)}
        assert _list_ids(h, duration=1000)[0] == {"t0", "t1", "t2", "t3"}
        assert _list_ids(h, duration=2000)[0] == {"t0", "t1"}
        assert _list_ids(h, duration=3000)[0] == set()


@async_test
async def test_list_transactions_while_loading_or_inactive() -> None:
    async with Harness(num_partitions=2) as h:
        assert h.c.list_transactions(set(), set()) == (E.COORDINATOR_NOT_AVAILABLE, [], [])
        h.c.start()
        h.c.state.begin_loading(1)
        assert h.c.list_transactions(set(), set()) == (E.COORDINATOR_LOAD_IN_PROGRESS, [], [])
        h.c.on_election(1, h.coordinator_epoch)
        assert h.c.list_transactions(set(), set()) == (E.NONE, [], [])
