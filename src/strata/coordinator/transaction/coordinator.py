"""Kafka's ``TransactionCoordinator``: InitProducerId, AddPartitionsToTxn, EndTxn and the timers.

The request logic and error codes follow Kafka 3.9 (transaction version 0) case by case; the
callbacks of Kafka's Scala code are awaits here. Nothing between a ``prepare_*`` and its write
awaits, so the pending-state check is what serialises requests for one transactional id (Kafka takes
the metadata's lock for the same span).

- InitProducerId bumps the epoch (fencing every older producer of the id), rotates the producer id
  when the epoch is exhausted, and aborts an open transaction first: the transaction's epoch is bumped
  (PrepareEpochFence) and it is aborted under it, the caller getting CONCURRENT_TRANSACTIONS until the
  abort completes (clients retry).
- AddPartitionsToTxn (and AddOffsetsToTxn, which adds the group's ``__consumer_offsets`` partition)
  moves the id to Ongoing and starts the transaction timer.
- EndTxn writes PrepareCommit/PrepareAbort, answers, then has the markers written
  (:mod:`strata.coordinator.transaction.markers`), after which CompleteCommit/CompleteAbort is written.
- Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` open transactions past their
  timeout are fenced and aborted; every ``transaction.remove.expired.transaction.cleanup.interval.ms``
  ids idle for ``transactional.id.expiration.ms`` are removed (a tombstone).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from strata.common import TopicPartition
from strata.common.crashpoints import crash_point
from strata.config.transaction_config import TransactionConfig
from strata.coordinator.transaction.log_records import TransactionState
from strata.coordinator.transaction.markers import MarkerWriter, TransactionMarkerChannelManager
from strata.coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from strata.coordinator.transaction.state_manager import TransactionStateManager, TxnLogStorage
from strata.errors import ErrorCode, KafkaError

log = logging.getLogger("strata.coordinator.transaction")

_PREPARE = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
_IDLE = (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class _PreparedEnd:
    """An EndTxn (or a coordinator's abort) checked and transitioned, its write still to be made."""

    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    transit: TxnTransitMetadata
    commit: bool
    fencing: bool


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    def __init__(self, storage: TxnLogStorage, markers: MarkerWriter, next_producer_id: Callable[[], Awaitable[int]],
                 now_ms: Callable[[], int], config: TransactionConfig, num_partitions: int) -> None:
        self.config = config
        self.now_ms = now_ms
        self.next_producer_id = next_producer_id
        self.state = TransactionStateManager(storage, num_partitions, config.max_timeout_ms)
        self.markers = TransactionMarkerChannelManager(markers, self.state, now_ms)
        self._timers: list[asyncio.Task[None]] = []
        self._aborts: set[asyncio.Task[Any]] = set()
        self.active = False
        self.timed_out_aborts = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._timers = [
            loop.create_task(self._every(self.config.abort_timed_out_interval_ms, self.abort_timed_out_transactions),
                             name="txn-abort-timed-out"),
            loop.create_task(self._every(self.config.remove_expired_interval_ms, self.remove_expired_transactions),
                             name="txn-remove-expired"),
        ]
        self.active = True

    async def stop(self) -> None:
        self.active = False
        tasks = [*self._timers, *self._aborts]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._timers.clear()
        await self.markers.close()

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[Any]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except Exception:
                log.exception("transaction coordinator task %s failed", getattr(fn, "__name__", fn))

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """This broker leads ``__transaction_state-partition``: load it, then finish decided transactions."""
        self.markers.remove_markers_for_partition(partition)
        self.state.begin_loading(partition)
        for md in self.state.load(partition, coordinator_epoch):
            self.markers.add_txn_markers_to_send(coordinator_epoch, md.state is TransactionState.PREPARE_COMMIT, md)

    def on_resignation(self, partition: int) -> None:
        n = self.state.unload(partition)
        self.markers.remove_markers_for_partition(partition)
        if n:
            log.info("no longer coordinating the %d transactional ids of __transaction_state-%d", n, partition)

    def partition_for(self, transactional_id: str) -> int:
        return self.state.partition_for(transactional_id)

    # -- InitProducerId -------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str | None, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> InitProducerIdResult:
        """``expected`` is KIP-360's (producer id, epoch) of a producer re-initialising, or None."""
        if transactional_id is None:
            try:
                return InitProducerIdResult(ErrorCode.NONE, await self.next_producer_id(), 0)
            except KafkaError as e:
                return InitProducerIdResult(e.error_code)
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not self.state.validate_timeout(timeout_ms):
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        found = self.state.get(transactional_id)
        if isinstance(found, int):
            return InitProducerIdResult(found)
        if found is None:
            try:
                pid = await self.next_producer_id()
            except KafkaError as e:
                return InitProducerIdResult(e.error_code)
            created = self.state.put_if_absent(TransactionMetadata(
                transactional_id, pid, txn_timeout_ms=timeout_ms, txn_last_update_timestamp=self.now_ms()))
            if isinstance(created, int):
                return InitProducerIdResult(created)
            found = created
        coordinator_epoch, md = found.coordinator_epoch, found.metadata
        new_pid = None
        if md.state in _IDLE and md.epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
            try:
                new_pid = await self.next_producer_id()  # before preparing: nothing awaits in between
            except KafkaError as e:
                return InitProducerIdResult(e.error_code)
            # The wait let other requests, a re-election or an expiry run: look again.
            again = self.state.get(transactional_id)
            if isinstance(again, int):
                return InitProducerIdResult(again)
            if again is not None and again.coordinator_epoch != coordinator_epoch:
                return InitProducerIdResult(ErrorCode.NOT_COORDINATOR)  # reloaded: the client looks it up again
            if again is None or again.metadata is not md or md.state is TransactionState.DEAD:
                return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)  # the client retries
            coordinator_epoch = again.coordinator_epoch
        if md.pending:
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (md.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == md.producer_id or (
                expected[0] == md.last_producer_id and is_epoch_exhausted(expected[1]))):
            return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
        if md.state in _PREPARE:
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.state is TransactionState.ONGOING:
            # a new producer takes the id over: abort the open transaction under a bumped epoch first
            fence = md.prepare_fence_producer_epoch()
            code = await self._end_transaction(transactional_id, fence.producer_id, fence.producer_epoch, False,
                                               from_client=False)
            return InitProducerIdResult(code if code != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.state not in _IDLE:  # Dead: expired meanwhile; PrepareEpochFence is never a settled state
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if md.epoch_exhausted and new_pid is None:
            # An exhausted epoch is only ever followed by a new producer id, and the caller's expected epoch
            # was not the current one: it is fenced (Kafka 3.9 throws here instead).
            return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
        transit: TxnTransitMetadata | None
        if new_pid is not None and md.epoch_exhausted:
            transit = md.prepare_producer_id_rotation(new_pid, timeout_ms, self.now_ms(), expected is not None)
        else:
            transit = md.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1],
                                                          self.now_ms())
            if transit is None:
                return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
        code = await self.state.append(transactional_id, coordinator_epoch, md, transit)
        if code != ErrorCode.NONE:
            return InitProducerIdResult(code)
        log.info("initialized transactional id %s with producer id %d and epoch %d", transactional_id,
                 md.producer_id, md.producer_epoch)
        return InitProducerIdResult(ErrorCode.NONE, md.producer_id, md.producer_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------

    def _check_member(self, transactional_id: str, producer_id: int, producer_epoch: int
                      ) -> tuple[int, TransactionMetadata] | int:
        found = self.state.get(transactional_id)
        if isinstance(found, int):
            return found
        if found is None or found.metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if found.metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return found.coordinator_epoch, found.metadata

    async def add_partitions(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> int:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        checked = self._check_member(transactional_id, producer_id, producer_epoch)
        if isinstance(checked, int):
            return checked
        coordinator_epoch, md = checked
        wanted = set(partitions)
        if md.pending or md.state in _PREPARE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if md.state is TransactionState.ONGOING and wanted <= md.partitions:
            return ErrorCode.NONE
        return await self.state.append(transactional_id, coordinator_epoch, md,
                                       md.prepare_add_partitions(wanted, self.now_ms()))

    def verify_partitions(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """KIP-890's server-side check (AddPartitionsToTxn v4 ``verify_only``, and a local produce): is the
        partition in the producer's open transaction? Error codes as Kafka 3.9 gives them."""
        tps = list(partitions)
        if not transactional_id:
            return dict.fromkeys(tps, ErrorCode.INVALID_REQUEST)
        checked = self._check_member(transactional_id, producer_id, producer_epoch)
        if isinstance(checked, int):
            return dict.fromkeys(tps, checked)
        md = checked[1]
        if md.state in _PREPARE:
            return dict.fromkeys(tps, ErrorCode.CONCURRENT_TRANSACTIONS)
        return {tp: ErrorCode.NONE if tp in md.partitions and md.state is TransactionState.ONGOING
                else ErrorCode.INVALID_TXN_STATE for tp in tps}

    # -- EndTxn ---------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      commit: bool) -> int:
        return await self._end_transaction(transactional_id, producer_id, producer_epoch, commit, from_client=True)

    async def _end_transaction(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                               commit: bool, from_client: bool) -> int:
        prepared = self._prepare_end(transactional_id, producer_id, producer_epoch, commit, from_client)
        if isinstance(prepared, int):
            return prepared
        return await self._write_end(prepared)

    def _prepare_end(self, transactional_id: str | None, producer_id: int, producer_epoch: int, commit: bool,
                     from_client: bool) -> _PreparedEnd | int:
        """Kafka's checks of ``endTransaction`` and the PrepareCommit/PrepareAbort transition, without awaiting:
        the metadata is pending when this returns, so nothing can interleave before the write."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        found = self.state.get(transactional_id)
        if isinstance(found, int):
            return found
        if found is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        coordinator_epoch, md = found.coordinator_epoch, found.metadata
        fencing = md.pending_state is TransactionState.PREPARE_EPOCH_FENCE
        if md.producer_id != producer_id:
            return self._undo_fence(md, fencing, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not ((not from_client or producer_epoch == md.producer_epoch) and producer_epoch >= md.producer_epoch):
            return self._undo_fence(md, fencing, ErrorCode.PRODUCER_FENCED)
        if md.pending and (not fencing or from_client):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = md.state
        if state is TransactionState.ONGOING:
            if fencing and not commit:
                md.pending_state = None
                md.producer_epoch = producer_epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = md.prepare_abort_or_commit(
                TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT, self.now_ms())
            return _PreparedEnd(transactional_id, coordinator_epoch, md, transit, commit, fencing)
        if state in _PREPARE:
            # the markers are being written: Kafka's coordinator has CompleteX pending then and answers every
            # EndTxn with the retriable CONCURRENT_TRANSACTIONS, whichever way it asks to end
            code = ErrorCode.CONCURRENT_TRANSACTIONS
        elif state is TransactionState.COMPLETE_ABORT:
            code = ErrorCode.NONE if not commit else ErrorCode.INVALID_TXN_STATE
        elif not commit and from_client:
            # Empty or CompleteCommit: no partition joined this transaction. An abort of it has nothing to undo
            # and succeeds, as in Kafka 4's coordinator (KIP-890). librdkafka sends this EndTxn when its
            # AddPartitionsToTxn was answered CONCURRENT_TRANSACTIONS (the previous commit's markers still
            # being written) and the application aborted before the retry: INVALID_TXN_STATE would be fatal
            code = ErrorCode.NONE
        elif state is TransactionState.COMPLETE_COMMIT:
            code = ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        else:  # Empty: no transaction to commit
            code = ErrorCode.INVALID_TXN_STATE
        return self._undo_fence(md, fencing, code)

    async def _write_end(self, e: _PreparedEnd) -> int:
        md = e.metadata
        code = await self.state.append(e.transactional_id, e.coordinator_epoch, md, e.transit)
        if code != ErrorCode.NONE:
            if e.fencing and self.state.owns_epoch(e.transactional_id, e.coordinator_epoch):
                md.has_failed_epoch_fence = True  # the epoch stays bumped: a retried fence must not bump again
            return code
        crash_point("txn.after_prepare")  # decided and durable, no marker written yet
        log.info("%s: %s of producer %d epoch %d decided; writing markers on %d partitions", e.transactional_id,
                 "commit" if e.commit else "abort", md.producer_id, md.producer_epoch, len(md.partitions))
        self.markers.add_txn_markers_to_send(e.coordinator_epoch, e.commit, md)
        return ErrorCode.NONE

    @staticmethod
    def _undo_fence(md: TransactionMetadata, fencing: bool, code: int) -> int:
        if fencing:
            md.pending_state = None
        return code

    # -- timers ---------------------------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> None:
        """Fence and abort every transaction open past its timeout. The fence and the PrepareAbort transition
        are prepared here, for all of them, before any write is awaited: a client's EndTxn arriving meanwhile
        finds the transaction pending (CONCURRENT_TRANSACTIONS) and, retried, fenced."""
        for md in self.state.timed_out(self.now_ms()):
            if md.pending:
                continue
            fence = md.prepare_fence_producer_epoch()
            prepared = self._prepare_end(md.transactional_id, fence.producer_id, fence.producer_epoch, False,
                                         from_client=False)
            if isinstance(prepared, int):
                log.warning("%s: aborting the timed-out transaction failed: %s", md.transactional_id,
                            ErrorCode(prepared).name)
                continue
            log.info("%s: transaction of producer %d open for more than %d ms: aborting it", md.transactional_id,
                     md.producer_id, md.txn_timeout_ms)
            self.timed_out_aborts += 1
            task = asyncio.get_running_loop().create_task(self._write_end(prepared))
            self._aborts.add(task)
            task.add_done_callback(self._aborts.discard)

    async def remove_expired_transactions(self) -> None:
        now = self.now_ms()
        for md in self.state.expirable(now, self.config.transactional_id_expiration_ms):
            found = self.state.get(md.transactional_id)
            # each write awaits: the id may have been reloaded (a new metadata object), used or expired since
            if isinstance(found, int) or found is None or found.metadata is not md or md.pending \
                    or md not in self.state.expirable(self.now_ms(), self.config.transactional_id_expiration_ms):
                continue
            code = await self.state.append(md.transactional_id, found.coordinator_epoch, md, md.prepare_dead())
            if code == ErrorCode.NONE:
                log.info("transactional id %s expired (idle for %d ms)", md.transactional_id,
                         now - md.txn_last_update_timestamp)

    # -- admin ----------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> dict[str, Any]:
        # Kafka fills an error entry with the schema's defaults (zeros), not with -1
        out: dict[str, Any] = {"transactional_id": transactional_id, "producer_id": 0, "producer_epoch": 0,
                               "transaction_state": "", "transaction_timeout_ms": 0,
                               "transaction_start_time_ms": 0, "topics": []}
        if not self.active:
            return {**out, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        if not transactional_id:
            return {**out, "error_code": ErrorCode.INVALID_REQUEST}
        found = self.state.get(transactional_id)
        if isinstance(found, int):
            return {**out, "error_code": found}
        if found is None or found.metadata.state is TransactionState.DEAD:
            return {**out, "error_code": ErrorCode.TRANSACTIONAL_ID_NOT_FOUND}
        md = found.metadata
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(md.partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return {**out, "error_code": ErrorCode.NONE, "producer_id": md.producer_id,
                "producer_epoch": md.producer_epoch, "transaction_state": md.state.kafka_name,
                "transaction_timeout_ms": md.txn_timeout_ms, "transaction_start_time_ms": md.txn_start_timestamp,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

    def list_transactions(self, states: set[str], producer_ids: set[int], min_duration_ms: int = -1
                          ) -> tuple[int, list[str], list[dict[str, Any]]]:
        """(error code, unknown state filters, transaction states) as ListTransactions answers."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        if self.state.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        known = {s.kafka_name for s in TransactionState}
        unknown = sorted(s for s in states if s not in known)
        now = self.now_ms()
        out = []
        for md in self.state.all_metadata():
            if md.state is TransactionState.DEAD:
                continue
            if states and md.state.kafka_name not in states:
                continue
            if producer_ids and md.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and now - md.txn_start_timestamp <= min_duration_ms:  # Kafka's KIP-994 rule
                continue
            out.append({"transactional_id": md.transactional_id, "producer_id": md.producer_id,
                        "transaction_state": md.state.kafka_name})
        return ErrorCode.NONE, unknown, out
