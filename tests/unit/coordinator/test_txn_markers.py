"""TransactionMarkerChannelManager over a fake MarkerWriter, ported from Kafka's
``TransactionMarkerChannelManagerTest`` and ``TransactionMarkerRequestCompletionHandlerTest``.

Kafka queues markers per destination broker and completes them from WriteTxnMarkers responses; Strata
has one sender task per transaction that asks the :class:`MarkerWriter` for every partition still to
be written, so the cases here drive the writer's answers per partition and check what is resent, when
CompleteCommit/CompleteAbort is written, and when sending stops.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from tests.unit.coordinator.txn_fakes import (
    Harness,
    async_test,
    fast_marker_backoff,
    log_value,
    settle,
    tp,
    wait_until,
)

from strata.coordinator.transaction.log_records import TransactionState
from strata.errors import ErrorCode

S = TransactionState
E = ErrorCode
TXN = "txn"
A0, A1, B0 = tp("a", 0), tp("a", 1), tp("b", 0)


@pytest.fixture(autouse=True)
def _fast_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    fast_marker_backoff(monkeypatch)


async def decided(h: Harness, commit: bool = True, tid: str = TXN, partitions: tuple = (A0, A1, B0)) -> tuple[int, int]:
    """A transaction whose EndTxn was answered: PrepareCommit/PrepareAbort is in the log."""
    r = await h.c.init_producer_id(tid, 60_000)
    assert r.error_code == E.NONE
    assert await h.c.add_partitions(tid, r.producer_id, r.producer_epoch, partitions) == E.NONE
    assert await h.c.end_txn(tid, r.producer_id, r.producer_epoch, commit) == E.NONE
    return r.producer_id, r.producer_epoch


async def done(h: Harness, tid: str = TXN, state: S = S.COMPLETE_COMMIT) -> None:
    await wait_until(lambda: (md := h.md(tid)) is not None and md.state is state and not md.pending, what=state.name)
    await wait_until(lambda: h.c.markers.pending() == 0, what="the sender to finish")


def completions(h: Harness, tid: str = TXN) -> list[S | None]:
    return [s for s in h.log.states_of(tid) if s in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)]


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
@async_test
async def test_complete_append_to_log_when_send_markers_succeed(commit: bool, caplog: pytest.LogCaptureFixture
                                                               ) -> None:
    caplog.set_level(logging.INFO, "strata.coordinator.transaction")
    async with Harness(coordinator_epoch=7) as h:
        pid, epoch = await decided(h, commit)
        await done(h, state=S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
        (call,) = h.writer.calls
        assert (call.producer_id, call.producer_epoch, call.commit, call.coordinator_epoch) == (pid, epoch, commit, 7)
        assert call.partitions == [A0, A1, B0]
        # written once, only after the markers
        assert completions(h) == [S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT]
        assert h.c.markers.markers_written == 3
        md = h.md(TXN)
        assert md is not None and md.partitions == set()
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []  # the sender ended cleanly


@async_test
async def test_transaction_without_partitions_completes_without_markers() -> None:
    async with Harness() as h:
        r = await h.c.init_producer_id(TXN, 60_000)
        assert await h.c.add_partitions(TXN, r.producer_id, r.producer_epoch, []) == E.NONE
        assert await h.c.end_txn(TXN, r.producer_id, r.producer_epoch, True) == E.NONE
        await done(h)
        assert h.writer.calls == []


@pytest.mark.parametrize("code", [E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                  E.REQUEST_TIMED_OUT, E.KAFKA_STORAGE_ERROR, E.UNKNOWN_TOPIC_OR_PARTITION,
                                  E.LEADER_NOT_AVAILABLE, E.NETWORK_EXCEPTION],
                         ids=lambda c: c.name)
@async_test
async def test_retry_partition_on_retriable_error(code: ErrorCode) -> None:
    async with Harness() as h:
        h.writer.script(A1, code, code)  # a partition that exists: UNKNOWN_TOPIC_OR_PARTITION is retried too
        await decided(h)
        await done(h)
        # only the failed partition is sent again
        assert [c.partitions for c in h.writer.calls] == [[A0, A1, B0], [A1], [A1]]
        assert completions(h) == [S.COMPLETE_COMMIT]
        assert h.c.markers.markers_written == 3


@async_test
async def test_partition_missing_from_the_answer_is_retried() -> None:
    async with Harness() as h:
        h.writer.script(B0, None)
        await decided(h)
        await done(h)
        assert [c.partitions for c in h.writer.calls] == [[A0, A1, B0], [B0]]


@async_test
async def test_complete_written_only_after_every_partition_succeeded() -> None:
    async with Harness() as h:
        h.writer.script(B0, *[E.NOT_ENOUGH_REPLICAS] * 1000)
        await decided(h)
        await wait_until(lambda: len(h.writer.calls) >= 5, what="retries")
        md = h.md(TXN)
        assert md is not None
        assert (md.state, md.partitions) == (S.PREPARE_COMMIT, {B0})
        assert completions(h) == []
        # the producer waits meanwhile
        assert await h.c.add_partitions(TXN, md.producer_id, md.producer_epoch, [A0]) == E.CONCURRENT_TRANSACTIONS
        assert (await h.c.init_producer_id(TXN, 60_000)).error_code == E.CONCURRENT_TRANSACTIONS
        h.writer.scripts[B0].clear()
        await done(h)
        assert completions(h) == [S.COMPLETE_COMMIT]


@async_test
async def test_partition_of_deleted_topic_is_dropped() -> None:
    async with Harness() as h:
        h.writer.deleted.add(B0)
        h.writer.script(B0, E.UNKNOWN_TOPIC_OR_PARTITION)
        await decided(h)
        await done(h)
        assert len(h.writer.calls) == 1
        assert completions(h) == [S.COMPLETE_COMMIT]
        assert h.c.markers.markers_written == 2  # A0 and A1


@pytest.mark.parametrize("code", [E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED, E.PRODUCER_FENCED],
                         ids=lambda c: c.name)
@async_test
async def test_fenced_error_stops_sending(code: ErrorCode) -> None:
    async with Harness() as h:
        h.writer.script(A1, code)
        await decided(h)
        await wait_until(lambda: h.c.markers.pending() == 0, what="the sender to stop")
        await asyncio.sleep(0.01)  # several backoffs: nothing more
        assert len(h.writer.calls) == 1
        assert completions(h) == []
        md = h.md(TXN)
        assert md is not None and md.state is S.PREPARE_COMMIT and A1 in md.partitions


@async_test
async def test_nothing_sent_after_resignation() -> None:
    async with Harness() as h:
        h.writer.hold()
        await decided(h)
        await settle()
        assert len(h.writer.calls) == 1
        md = h.md(TXN)
        h.c.on_resignation(0)
        assert h.c.markers.pending() == 0
        h.writer.release_all()
        await asyncio.sleep(0.01)
        assert len(h.writer.calls) == 1
        assert completions(h) == []
        assert md is not None and md.partitions == {A0, A1, B0}  # the answer was not applied


@async_test
async def test_answer_arriving_after_resignation_is_ignored() -> None:
    async with Harness() as h:
        h.writer.hold()
        h.writer.script(A0, E.NOT_LEADER_OR_FOLLOWER)
        await decided(h)
        await settle()
        md = h.md(TXN)
        # not cancelled: the sender still runs, but the partition is no longer owned when the answer comes
        h.c.state.unload(0)
        h.writer.release_all()
        await wait_until(lambda: h.c.markers.pending() == 0, what="the sender to stop")
        assert len(h.writer.calls) == 1
        assert completions(h) == []
        assert md is not None and md.partitions == {A0, A1, B0}


@async_test
async def test_remove_markers_only_for_the_emigrated_partition() -> None:
    async with Harness(num_partitions=2) as h:
        first = next(f"id{i}" for i in range(100) if h.partition_of(f"id{i}") == 0)
        second = next(f"id{i}" for i in range(100) if h.partition_of(f"id{i}") == 1)
        h.writer.hold()
        await decided(h, tid=first, partitions=(A0,))
        await decided(h, tid=second, partitions=(B0,))
        await settle()
        assert h.c.markers.pending() == 2
        h.c.on_resignation(0)
        assert h.c.markers.pending() == 1
        h.writer.release_all()
        await done(h, tid=second)
        assert completions(h, first) == []
        assert completions(h, second) == [S.COMPLETE_COMMIT]


@async_test
async def test_txn_completion_not_lost_after_load() -> None:
    async with Harness(coordinator_epoch=1) as h:
        h.writer.hold()
        await decided(h)
        await settle()
        # the partition is loaded again (a new leader epoch) while the markers of epoch 1 are in flight
        h.c.on_election(0, 2)
        await settle()
        h.writer.release_all()
        await done(h)
        assert [c.coordinator_epoch for c in h.writer.calls] == [1, 2]
        assert completions(h) == [S.COMPLETE_COMMIT]  # once, by the coordinator of epoch 2


@async_test
async def test_reload_at_the_same_coordinator_epoch_completes_once() -> None:
    async with Harness(coordinator_epoch=4) as h:
        h.writer.hold()
        await decided(h)
        await settle()
        # loaded again under the same epoch: the sender of the replaced metadata must not go on
        h.c.on_election(0, 4)
        await settle()
        assert h.c.markers.pending() == 1
        h.writer.release_all()
        await done(h)
        await asyncio.sleep(0.01)
        assert completions(h) == [S.COMPLETE_COMMIT]


@async_test
async def test_election_resends_markers_of_prepared_transactions() -> None:
    h = Harness(num_partitions=1, coordinator_epoch=9)
    h.log.write(0, "c", log_value(S.PREPARE_COMMIT, 10, 2, [A0, B0]))
    h.log.write(0, "a", log_value(S.PREPARE_ABORT, 11, 4, [A1]))
    h.log.write(0, "o", log_value(S.ONGOING, 12, 0, [A0]))
    async with h:
        await done(h, "c", S.COMPLETE_COMMIT)
        await done(h, "a", S.COMPLETE_ABORT)
        sent = {(c.producer_id, c.producer_epoch, c.commit, c.coordinator_epoch, tuple(c.partitions))
                for c in h.writer.calls}
        assert sent == {(10, 2, True, 9, (A0, B0)), (11, 4, False, 9, (A1,))}
        assert h.md("o").state is S.ONGOING  # type: ignore[union-attr]


@pytest.mark.parametrize("code", [E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR], ids=lambda c: c.name)
@async_test
async def test_complete_not_retried_on_not_coordinator(code: ErrorCode) -> None:
    async with Harness() as h:
        h.writer.hold()
        await decided(h)
        attempts = h.log.attempts
        h.log.fail_next(code)  # NOT_COORDINATOR for the CompleteCommit
        h.writer.release_all()
        await wait_until(lambda: h.c.markers.pending() == 0, what="the sender to stop")
        await asyncio.sleep(0.01)
        assert h.log.attempts == attempts + 1
        md = h.md(TXN)
        assert md is not None and (md.state, md.pending_state, md.partitions) == (S.PREPARE_COMMIT, None, set())
        assert completions(h) == []


@pytest.mark.parametrize("code", [E.NOT_ENOUGH_REPLICAS, E.REQUEST_TIMED_OUT, E.UNKNOWN_TOPIC_OR_PARTITION],
                         ids=lambda c: c.name)
@async_test
async def test_complete_retried_when_coordinator_not_available(code: ErrorCode) -> None:
    async with Harness() as h:
        h.writer.hold()
        await decided(h)
        attempts = h.log.attempts
        h.log.fail_next(code, code)
        h.writer.release_all()
        await done(h)
        assert h.log.attempts == attempts + 3
        assert completions(h) == [S.COMPLETE_COMMIT]
        assert len(h.writer.calls) == 1  # the markers are not written again


@async_test
async def test_complete_retries_stop_when_the_coordinator_resigns() -> None:
    async with Harness() as h:
        h.writer.hold()
        await decided(h)
        h.log.fail_next(*[E.NOT_ENOUGH_REPLICAS] * 1000)
        h.writer.release_all()
        await wait_until(lambda: h.log.attempts >= 8, what="complete retries")
        h.c.on_resignation(0)
        await wait_until(lambda: h.c.markers.pending() == 0, what="the sender to stop")
        attempts = h.log.attempts
        await asyncio.sleep(0.01)
        assert h.log.attempts == attempts
        assert completions(h) == []


@async_test
async def test_stop_cancels_senders() -> None:
    h = Harness()
    h.elect_all()
    h.writer.hold()
    await decided(h)
    await settle()
    assert h.c.markers.pending() == 1
    await h.c.stop()
    assert h.c.markers.pending() == 0
    h.writer.release_all()
    await settle()
    assert completions(h) == []
