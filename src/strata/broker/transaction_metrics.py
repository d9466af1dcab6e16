"""Transaction coordinator and producer-state metrics, under Kafka's names where Kafka has the metric.

Kafka's (the names the Prometheus JMX exporter gives its MBeans, :func:`prometheus_name`):

* ``kafka.coordinator.transaction:type=TransactionMarkerChannelManager,name=UnknownDestinationQueueSize``
  (gauge): markers of decided transactions waiting for a partition whose leader is not known (Kafka
  queues them until the metadata names a leader; here the marker sender retries them);
* ``kafka.coordinator.transaction:type=TransactionMarkerChannelManager,name=LogAppendRetryQueueSize``
  (gauge): decided transactions whose every marker is written and whose CompleteCommit/CompleteAbort is
  still to be written to ``__transaction_state``. Kafka counts only the completions queued for a retry
  after a failed write; here a completion being written counts too (the sender retries it in place);
* ``kafka.server:type=ReplicaManager,name=ProducerIdCount`` (gauge, KIP-847): producer ids in the producer
  state of every partition hosted here, leader or follower;
* ``kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount`` (gauge, KIP-664):
  partitions led here whose oldest open transaction's producer has not written for longer than
  ``transaction.max.timeout.ms`` + 5 minutes (Kafka's ``ProducerStateManager.LATE_TRANSACTION_BUFFER_MS``):
  a transaction its coordinator should have aborted long ago, holding the last stable offset.

Kafka's ``transaction-coordinator-metrics`` (``partition-load-time-max`` / ``-avg``) are not exported: the
coordinator does not time the loading of a ``__transaction_state`` partition.

Strata's own, in the same style (Apache Kafka has no equivalent; Confluent Server has a timeout count):

* ``strata.coordinator.transaction:type=TransactionCoordinator,name=`` ``OngoingTransactions`` (gauge:
  transactional ids coordinated here in state Ongoing), ``TransactionalIdCount`` (gauge: ids coordinated
  here, any state but Dead) and ``TimedOutTransactionsAbortedPerSec`` (meter: transactions the coordinator
  aborted because they outlived their ``transaction.timeout.ms``);
* ``strata.coordinator.transaction:type=TransactionMarkerChannelManager,name=`` ``PendingMarkers`` (gauge:
  partitions of decided transactions still without their COMMIT/ABORT marker), ``TransactionsWithPendingMarkers``
  (gauge: decided transactions not yet complete) and ``MarkersWrittenPerSec`` (meter: markers acknowledged);
* ``strata.broker:type=TransactionService,name=HangingTransactionsAbortedPerSec`` (meter: open transactions
  no coordinator knew, aborted by their partition's leader).

Everything is read at scrape time from ``broker.transactions`` and ``broker.replicas`` (the admin HTTP
endpoint renders on the event loop, the only thread that changes them). Before the broker has started its
transaction service (``broker.transactions`` is None) the coordinator series are absent. The meters mirror
counters the coordinator keeps: they are brought up to date when the first gauge here is read, which the
registry does before it reads the meters (registration order is render order), as the cluster metrics do.
"""

from __future__ import annotations

from typing import Any, Protocol

from strata.common.metrics import Meter, Number, Registry, prometheus_name
from strata.coordinator.transaction.log_records import TransactionState
from strata.log.producer_state import ProducerStateManager
from strata.replication.replica_manager import ReplicaManager

LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000  # Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS


def _marker_channel(name: str) -> str:
    return prometheus_name(f"kafka.coordinator.transaction:type=TransactionMarkerChannelManager,name={name}")


def _replica_manager(name: str) -> str:
    return prometheus_name(f"kafka.server:type=ReplicaManager,name={name}")


def _strata_coordinator(name: str) -> str:
    return prometheus_name(f"strata.coordinator.transaction:type=TransactionCoordinator,name={name}")


def _strata_markers(name: str) -> str:
    return prometheus_name(f"strata.coordinator.transaction:type=TransactionMarkerChannelManager,name={name}")


UNKNOWN_DESTINATION_QUEUE_SIZE = _marker_channel("UnknownDestinationQueueSize")
LOG_APPEND_RETRY_QUEUE_SIZE = _marker_channel("LogAppendRetryQueueSize")
PRODUCER_ID_COUNT = _replica_manager("ProducerIdCount")
LATE_TRANSACTIONS = _replica_manager("PartitionsWithLateTransactionsCount")
ONGOING_TRANSACTIONS = _strata_coordinator("OngoingTransactions")
TRANSACTIONAL_ID_COUNT = _strata_coordinator("TransactionalIdCount")
TIMED_OUT_ABORTS = _strata_coordinator("TimedOutTransactionsAbortedPerSec")
PENDING_MARKERS = _strata_markers("PendingMarkers")
TRANSACTIONS_WITH_PENDING_MARKERS = _strata_markers("TransactionsWithPendingMarkers")
MARKERS_WRITTEN = _strata_markers("MarkersWrittenPerSec")
HANGING_ABORTS = prometheus_name("strata.broker:type=TransactionService,name=HangingTransactionsAbortedPerSec")

_DECIDED = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


class BrokerLike(Protocol):
    """What the metrics read: the transaction service (None until the broker starts it) and the replicas."""

    transactions: Any
    replicas: ReplicaManager


def oldest_open_transaction_timestamp(state: ProducerStateManager) -> int | None:
    """The last timestamp of the producer whose open transaction began first (Kafka's
    ``oldestTxnLastTimestamp``), or None when no transaction is open on the partition."""
    oldest: tuple[int, int] | None = None
    for entry in list(state.producers.values()):
        first = entry.current_txn_first_offset
        if first is not None and (oldest is None or first < oldest[0]):
            oldest = (first, entry.last_timestamp)
    return None if oldest is None else oldest[1]


def has_late_transaction(state: ProducerStateManager, now_ms: int, max_timeout_ms: int) -> bool:
    """Kafka's ``ProducerStateManager.hasLateTransaction``."""
    last = oldest_open_transaction_timestamp(state)
    return last is not None and last > 0 and now_ms - last > max_timeout_ms + LATE_TRANSACTION_BUFFER_MS


class _Mirror:
    """A meter that follows a counter kept elsewhere (an int attribute read at scrape time)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.seen = 0
        self.source: object = None

    def sync(self, source: object, count: int) -> None:
        if source is not self.source:  # a new coordinator object: its count starts again from 0
            self.source, self.seen = source, 0
        if count > self.seen:
            self.meter.mark(count - self.seen)
            self.seen = count


class TransactionMetrics:
    """The registered metrics; :func:`register_transaction_metrics` builds it (the broker may keep it)."""

    def __init__(self, registry: Registry, broker: BrokerLike) -> None:
        self.registry = registry
        self.broker = broker
        # the first family: reading it brings the mirrored meters (registered last) up to date
        registry.gauge(UNKNOWN_DESTINATION_QUEUE_SIZE,
                       "Markers of decided transactions waiting for a partition leader to be known.",
                       fn=self._unknown_destination)
        registry.gauge(LOG_APPEND_RETRY_QUEUE_SIZE,
                       "Decided transactions with every marker written whose completion is still being "
                       "written to __transaction_state.", fn=self._completions_pending)
        registry.gauge(PRODUCER_ID_COUNT, "Producer ids in the producer state of the partitions hosted here.",
                       fn=self._producer_id_count)
        registry.gauge(LATE_TRANSACTIONS,
                       "Partitions led here with a transaction open longer than transaction.max.timeout.ms + 5 min.",
                       fn=self._late_transactions)
        registry.gauge(ONGOING_TRANSACTIONS, "Transactional ids coordinated here in state Ongoing.",
                       fn=lambda: self._count_ids(lambda s: s is TransactionState.ONGOING))
        registry.gauge(TRANSACTIONAL_ID_COUNT, "Transactional ids coordinated here.",
                       fn=lambda: self._count_ids(lambda s: s is not TransactionState.DEAD))
        registry.gauge(PENDING_MARKERS, "Partitions of decided transactions still without their marker.",
                       fn=self._pending_markers)
        registry.gauge(TRANSACTIONS_WITH_PENDING_MARKERS,
                       "Decided transactions whose markers or completion are still being written.",
                       fn=self._transactions_with_pending_markers)
        self.timed_out_aborts = _Mirror(registry.meter(
            TIMED_OUT_ABORTS, "Transactions aborted by the coordinator after their transaction.timeout.ms."))
        self.markers_written = _Mirror(registry.meter(
            MARKERS_WRITTEN, "Transaction markers written and acknowledged by their partition's ISR."))
        self.hanging_aborts = _Mirror(registry.meter(
            HANGING_ABORTS, "Open transactions no coordinator knew, aborted by their partition's leader."))

    # -- reading -------------------------------------------------------------------------------

    def sync(self) -> None:
        """Bring the meters up to the coordinator's counters."""
        txns = self.broker.transactions
        if txns is None:
            return
        coordinator = txns.coordinator
        self.timed_out_aborts.sync(coordinator, int(coordinator.timed_out_aborts))
        self.markers_written.sync(coordinator.markers, int(coordinator.markers.markers_written))
        self.hanging_aborts.sync(txns, int(getattr(txns, "hanging_aborted", 0)))

    def _metadata(self) -> list[Any] | None:
        txns = self.broker.transactions
        if txns is None:
            return None
        return list(txns.coordinator.state.all_metadata())

    def _count_ids(self, predicate: Any) -> Number | None:
        mds = self._metadata()
        return None if mds is None else sum(1 for md in mds if predicate(md.state))

    def _decided(self) -> list[Any] | None:
        mds = self._metadata()
        return None if mds is None else [md for md in mds if md.state in _DECIDED]

    def _unknown_destination(self) -> Number | None:
        self.sync()
        txns = self.broker.transactions
        decided = self._decided()
        if txns is None or decided is None:
            return None
        if not txns.clustered:
            return 0  # a single node leads every partition itself
        count = 0
        for md in decided:
            for tp in list(md.partitions):
                if txns.partition_exists(tp) and txns.view.partition(tp.topic, tp.partition).leader < 0:
                    count += 1
        return count

    def _completions_pending(self) -> Number | None:
        decided = self._decided()
        return None if decided is None else sum(1 for md in decided if not md.partitions)

    def _pending_markers(self) -> Number | None:
        decided = self._decided()
        return None if decided is None else sum(len(md.partitions) for md in decided)

    def _transactions_with_pending_markers(self) -> Number | None:
        txns = self.broker.transactions
        return None if txns is None else txns.coordinator.markers.pending()

    def _producer_id_count(self) -> Number:
        return sum(len(p.log.producer_state.producers) for p in list(self.broker.replicas.partitions.values()))

    def _late_transactions(self) -> Number | None:
        txns = self.broker.transactions
        if txns is None:
            return None
        now = txns.now_ms()
        max_timeout = txns.config.transactions.max_timeout_ms
        return sum(1 for p in list(self.broker.replicas.partitions.values())
                   if p.is_leader and has_late_transaction(p.log.producer_state, now, max_timeout))


def register_transaction_metrics(registry: Registry, broker: BrokerLike) -> TransactionMetrics:
    """Register the transaction metrics of ``broker`` (its ``transactions`` may still be None: they are
    read at each scrape). Call once per registry."""
    return TransactionMetrics(registry, broker)
