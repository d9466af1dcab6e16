"""One transactional id's state and its transitions: Kafka's ``TransactionMetadata``.

Every change is two steps, as in Kafka: ``prepare_*`` checks the transition and returns the state to
write (a :class:`TxnTransitMetadata`) while marking the metadata *pending*; once the record is in
``__transaction_state`` (acks=all), :meth:`TransactionMetadata.complete_transition` applies it, or
:meth:`TransactionMetadata.abort_transition` forgets it when the write failed. While a transition is
pending, every other request for the id gets CONCURRENT_TRANSACTIONS, so two requests racing for one
transactional id can never interleave their writes, although the coordinator awaits each write.

Only Kafka's transaction version 0 is spoken (the protocol of Kafka 3.9 and of every client that does
not negotiate KIP-890 part 2): the coordinator bumps the producer epoch at InitProducerId, never at
EndTxn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.common import TopicPartition
from strata.coordinator.transaction.log_records import TransactionLogValue, TransactionState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue

_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.EMPTY: frozenset({TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                                       TransactionState.COMPLETE_ABORT}),
    TransactionState.ONGOING: frozenset({TransactionState.ONGOING, TransactionState.EMPTY,
                                         TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT}),
    TransactionState.PREPARE_COMMIT: frozenset({TransactionState.ONGOING}),
    TransactionState.PREPARE_ABORT: frozenset({TransactionState.ONGOING, TransactionState.PREPARE_EPOCH_FENCE}),
    TransactionState.COMPLETE_COMMIT: frozenset({TransactionState.PREPARE_COMMIT}),
    TransactionState.COMPLETE_ABORT: frozenset({TransactionState.PREPARE_ABORT}),
    TransactionState.DEAD: frozenset({TransactionState.EMPTY, TransactionState.COMPLETE_ABORT,
                                      TransactionState.COMPLETE_COMMIT}),
    TransactionState.PREPARE_EPOCH_FENCE: frozenset({TransactionState.ONGOING}),
}


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for markers: an epoch of ``Short.MaxValue - 1`` rotates the producer id."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class IllegalTransitionError(RuntimeError):
    """A transition Kafka's state machine forbids: a coordinator bug, never a client error."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The state a transition writes: what goes to the log and, once there, into the metadata."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def to_log_value(self) -> TransactionLogValue:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(self.partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return TransactionLogValue(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms, state=self.state,
            partitions=tuple((t, tuple(ps)) for t, ps in by_topic.items()),
            last_update_timestamp_ms=self.txn_last_update_timestamp, start_timestamp_ms=self.txn_start_timestamp)


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    # An epoch fence whose write failed keeps its bumped epoch, so a retried fence does not bump again.
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_log(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        """Loaded from ``__transaction_state`` (the last record of the id wins)."""
        return cls(transactional_id, value.producer_id, NO_PRODUCER_ID, value.producer_epoch, NO_PRODUCER_EPOCH,
                   value.transaction_timeout_ms, value.state,
                   {TopicPartition(t, p) for t, ps in value.partitions for p in ps},
                   value.start_timestamp_ms, value.last_update_timestamp_ms)

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (TransactionState.ONGOING, TransactionState.PREPARE_ABORT,
                              TransactionState.PREPARE_COMMIT)

    # -- transitions ----------------------------------------------------------------------------

    def _prepare(self, state: TransactionState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: frozenset[TopicPartition], start_ms: int, now_ms: int) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: preparing {state.name} while "
                                         f"{self.pending_state.name} is pending")
        if producer_id < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: illegal producer id {producer_id}")
        if state is not TransactionState.DEAD and epoch < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: illegal producer epoch {epoch}")
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.name} -> {state.name} is not a "
                                         "valid transition")
        self.pending_state = state
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, state, partitions,
                                  start_ms, now_ms)

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> TxnTransitMetadata | None:
        """InitProducerId on an idle id: the next epoch fences every older producer. ``None`` when the
        caller's expected epoch (KIP-360: a producer re-initialising after an abortable error) is neither
        the current nor the previous one: it is fenced."""
        if self.epoch_exhausted:
            raise IllegalTransitionError(f"{self.transactional_id}: producer epochs of {self.producer_id} exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:  # a retry of an InitProducerId that already bumped
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(TransactionState.EMPTY, self.producer_id, epoch, last, timeout_ms, frozenset(), -1,
                             now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        if self.has_pending_transaction:
            raise IllegalTransitionError(f"{self.transactional_id}: rotating the producer id of an open transaction")
        return self._prepare(TransactionState.EMPTY, new_producer_id, 0,
                             self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH, timeout_ms,
                             frozenset(), -1, now_ms)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """An open transaction is aborted under a bumped epoch (a new producer took the id over, or the
        transaction timed out): the old producer's next request is fenced."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(TransactionState.PREPARE_EPOCH_FENCE, self.producer_id, epoch, NO_PRODUCER_EPOCH,
                             self.txn_timeout_ms, frozenset(self.partitions), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> TxnTransitMetadata:
        start = now_ms if self.state in (TransactionState.EMPTY, TransactionState.COMPLETE_ABORT,
                                         TransactionState.COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare(TransactionState.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, frozenset(self.partitions | added), start,
                             now_ms)

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TxnTransitMetadata:
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.partitions), self.txn_start_timestamp, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        state = TransactionState.COMPLETE_COMMIT if self.state is TransactionState.PREPARE_COMMIT \
            else TransactionState.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now_ms)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(TransactionState.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp,
                             self.txn_last_update_timestamp)

    def complete_transition(self, t: TxnTransitMetadata) -> None:
        """Apply a transition whose record is in the log (Kafka's ``completeTransitionTo``)."""
        if self.pending_state is not t.state:
            raise IllegalTransitionError(f"{self.transactional_id}: completing {t.state.name} while "
                                         f"{self.pending_state.name if self.pending_state else 'nothing'} is pending")
        if t.state is TransactionState.PREPARE_EPOCH_FENCE:
            # never written: the abort that follows carries the bumped epoch
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = NO_PRODUCER_EPOCH
            self.pending_state = None
            return
        if t.producer_id != self.producer_id:
            self.last_producer_id = self.producer_id
        self.producer_id = t.producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.partitions = set(t.partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.state = t.state
        self.pending_state = None

    def abort_transition(self) -> None:
        """The write failed: the metadata stays as it was, and the next request may try again."""
        self.pending_state = None

    def remove_partition(self, tp: TopicPartition) -> None:
        """A marker was written (or its partition is gone): it leaves the set still to be sent."""
        if self.state not in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            raise IllegalTransitionError(f"{self.transactional_id}: removing {tp} in state {self.state.name}")
        self.partitions.discard(tp)
