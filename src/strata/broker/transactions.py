"""The transaction coordinator on this broker: ``__transaction_state`` over the replicas, markers over the wire.

:class:`strata.coordinator.transaction.coordinator.TransactionCoordinator` holds the protocol; this
module gives it what it needs from a broker, through two narrow interfaces:

- ``TxnLogStorage``: an append to a ``__transaction_state`` partition led here (origin COORDINATOR,
  acks=all in a cluster: the answer waits until the ISR has it) and a replay of one partition;
- ``MarkerWriter``: a COMMIT/ABORT marker on each partition of a transaction, appended locally when
  this broker leads the partition and sent as WriteTxnMarkers to the leader otherwise.

``__transaction_state`` is created on first use, as Kafka does (the first FindCoordinator or
InitProducerId for a transactional id): compacted, ``transaction.state.log.num.partitions`` partitions,
replicated ``transaction.state.log.replication.factor`` times in a cluster. On a single node this broker
leads every partition and loads them all when it starts; in a cluster it coordinates the transactional
ids of the partitions it leads, with the partition's leader epoch as coordinator epoch.

Markers written here also complete transactional offset commits: a marker on a ``__consumer_offsets``
partition makes the group coordinator apply (commit) or drop (abort) the producer's pending offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from strata.broker.cluster_services import ClusterView, TopicAdmin
from strata.broker.inter_broker import inter_broker_security
from strata.broker.topics import TopicRegistry
from strata.client.async_wire import AsyncBrokerConnection
from strata.client.wire import ADMIN_CLIENT_ID, WireError
from strata.common import TopicPartition
from strata.config.broker_config import BrokerConfig
from strata.coordinator.transaction.coordinator import TransactionCoordinator
from strata.coordinator.transaction.log_records import TRANSACTION_STATE_TOPIC, TransactionState
from strata.errors import ApiError, ErrorCode, KafkaError, KafkaStorageError
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_records
from strata.protocol.records import BatchBuilder, ControlRecordType, build_control_batch
from strata.replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.broker.transactions")

WRITE_TXN_MARKERS = 27
ADD_PARTITIONS_TO_TXN = 24
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
VERIFICATION_KEY = "transaction.partition.verification.enable"
_TRANSACTIONAL = 0x10  # batch attributes bit 4
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
APPEND_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for coordinator writes and markers
MARKER_REQUEST_TIMEOUT_S = 35.0

TxnCompletion = Callable[[int, int, bool], None]  # (__consumer_offsets partition, producer id, commit)
# (partitions, producer id, producer epoch, commit, coordinator epoch) -> one error code per partition
DisklessMarkers = Callable[[list[TopicPartition], int, int, bool, int], Awaitable[list[int]]]


class TransactionService:
    """Owns the coordinator and the broker-side pieces it runs on."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, topics: TopicRegistry, view: ClusterView,
                 admin: TopicAdmin, next_producer_id: Callable[[], Awaitable[int]], now_ms: Callable[[], int],
                 clustered: bool, create_local_topic: Callable[[str, int, dict[str, str]], Any],
                 current_config: Callable[[], BrokerConfig] | None = None) -> None:
        self.config = config
        self._current_config = current_config or (lambda: config)
        self.now_ms = now_ms
        self.hanging_aborted = 0
        self.replicas = replicas
        self.topics = topics
        self.view = view
        self.admin = admin
        self.clustered = clustered
        self._create_local_topic = create_local_topic
        self.on_offsets_marker: TxnCompletion | None = None  # the group coordinator's completion hook
        # diskless partitions: their markers go through the diskless service (set by the broker)
        self.diskless_markers: DisklessMarkers | None = None
        self.is_diskless: Callable[[str], bool] = lambda _topic: False
        info = topics.get(TRANSACTION_STATE_TOPIC)
        partitions = info.partitions if info is not None else config.transactions.num_partitions
        self.coordinator = TransactionCoordinator(self, self, next_producer_id, now_ms, config.transactions,
                                                  partitions)
        self._connections: dict[int, tuple[AsyncBrokerConnection, asyncio.Lock]] = {}
        self._creating: asyncio.Lock | None = None
        self._hanging_task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.coordinator.start()
        self._hanging_task = asyncio.get_running_loop().create_task(self._abort_hanging_periodically(),
                                                                    name="txn-abort-hanging")
        if not self.clustered and self.topics.get(TRANSACTION_STATE_TOPIC) is not None:
            self._load_all_local()
        elif self.clustered:  # partitions led before the coordinator started
            for tp, part in list(self.replicas.partitions.items()):
                if tp.topic == TRANSACTION_STATE_TOPIC and part.is_leader:
                    self.on_leader(tp.partition, part.leader_epoch)

    async def stop(self) -> None:
        if self._hanging_task is not None:
            self._hanging_task.cancel()
            await asyncio.gather(self._hanging_task, return_exceptions=True)
        await self.coordinator.stop()
        for conn, _ in self._connections.values():
            conn.close()
        self._connections.clear()

    def topic_configs(self) -> dict[str, str]:
        tc = self.config.transactions
        return {"cleanup.policy": "compact", "segment.bytes": str(tc.segment_bytes),
                "min.insync.replicas": str(min(tc.min_isr, tc.replication_factor)),
                "unclean.leader.election.enable": "false", "compression.type": "uncompressed"}

    async def ensure_topic(self) -> bool:
        """Create ``__transaction_state`` on first use; False while it cannot be made yet (too few brokers)."""
        if self.topics.get(TRANSACTION_STATE_TOPIC) is not None:
            return True
        if self._creating is None:
            self._creating = asyncio.Lock()
        async with self._creating:
            if self.topics.get(TRANSACTION_STATE_TOPIC) is not None:
                return True
            tc = self.config.transactions
            if not self.clustered:
                self._create_local_topic(TRANSACTION_STATE_TOPIC, tc.num_partitions, self.topic_configs())
                self._load_all_local()
                return True
            if self.admin.max_replication_factor() < tc.replication_factor:
                log.info("not creating %s yet: %d live brokers, transaction.state.log.replication.factor=%d",
                         TRANSACTION_STATE_TOPIC, self.admin.max_replication_factor(), tc.replication_factor)
                return False
            try:
                await self.admin.create_topic(TRANSACTION_STATE_TOPIC, tc.num_partitions, tc.replication_factor,
                                              self.topic_configs())
            except KafkaError as e:
                if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.warning("creating %s failed: %s", TRANSACTION_STATE_TOPIC, e)
                    return False
            return self.topics.get(TRANSACTION_STATE_TOPIC) is not None

    def _load_all_local(self) -> None:
        info = self.topics.get(TRANSACTION_STATE_TOPIC)
        assert info is not None
        self.coordinator.state.num_partitions = info.partitions
        for p in range(info.partitions):
            tp = TopicPartition(TRANSACTION_STATE_TOPIC, p)
            plog = self.replicas.get_log(tp)
            # the only replica: everything in the log is committed (a stale checkpointed HW after kill -9)
            plog.update_high_watermark(plog.log_end_offset)
            self.coordinator.on_election(p, self.replicas.leader_epoch(tp))

    def coordinator_node(self, transactional_id: str, listener: str | None = None) -> dict[str, Any] | None:
        """The broker coordinating ``transactional_id`` (FindCoordinator, with its address on the client's
        ``listener``), None when it has no leader."""
        if not self.clustered:
            return None
        view = self.view.partition(TRANSACTION_STATE_TOPIC, self.coordinator.partition_for(transactional_id))
        return self.view.broker(view.leader, listener) if view.leader >= 0 else None

    # -- cluster mode: leadership of __transaction_state partitions ------------------------------

    def on_leader(self, partition: int, leader_epoch: int) -> None:
        info = self.topics.get(TRANSACTION_STATE_TOPIC)
        if info is not None:
            self.coordinator.state.num_partitions = info.partitions
        self.coordinator.on_election(partition, leader_epoch)

    def on_not_leader(self, partition: int) -> None:
        self.coordinator.on_resignation(partition)

    # -- TxnLogStorage --------------------------------------------------------------------------

    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        builder = BatchBuilder()
        builder.append(value, key=key)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
        try:
            info = self.replicas.append(tp, builder.build(), AppendOrigin.COORDINATOR,
                                        required_acks=-1 if self.clustered else 1)
        except OSError as e:
            raise KafkaStorageError(f"append to {tp} failed: {e}") from e
        if self.clustered:
            code = await self.replicas.wait_for_replication(tp, info.last_offset + 1, APPEND_TIMEOUT_S)
            if code:
                raise ApiError(code, f"{tp}: the write was not replicated ({ErrorCode(code).name})")

    def read(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        plog = self.replicas.local_log(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        if plog is None:
            return
        for record in iter_log_records(plog, plog.log_start_offset, plog.log_end_offset):
            yield record.offset, record.key, record.value

    # -- KIP-890: a transactional batch only on a partition of the producer's open transaction ----

    @staticmethod
    def transactional_producer(records: bytes) -> tuple[int, int] | None:
        """(producer id, epoch) of the first batch when it is transactional (its header, never decoded)."""
        if len(records) < 61 or records[16] != 2 or not records[22] & _TRANSACTIONAL:
            return None
        return int.from_bytes(records[43:51], "big", signed=True), int.from_bytes(records[51:53], "big", signed=True)

    async def verify_for_append(self, tp: TopicPartition, transactional_id: str | None, producer_id: int,
                                producer_epoch: int) -> tuple[int, str | None]:
        """Kafka's transaction verification before a transactional append (KIP-890 part 1): the first
        batch of a transaction on a partition is taken only if the coordinator has the partition in the
        producer's open transaction, so a stray transactional batch (a producer that never called
        AddPartitionsToTxn, a zombie, a late retry after an abort) cannot open a transaction no marker
        will ever close - which would pin the partition's LSO forever. (error code, message)."""
        if not self.verification_enabled():
            return ErrorCode.NONE, None
        if transactional_id is None:
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, \
                "A transactional batch needs the produce request's transactional.id"
        part = self.replicas.partitions.get(tp)
        entry = part.log.producer_state.last_entry(producer_id) if part is not None else None
        if entry is not None and entry.producer_epoch == producer_epoch and entry.current_txn_first_offset is not None:
            return ErrorCode.NONE, None  # the transaction is already open here: verified at its first batch
        code = await self._verify(tp, transactional_id, producer_id, producer_epoch)
        if code == ErrorCode.NONE:
            return code, None
        if code == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        if code == ErrorCode.INVALID_TXN_STATE:
            return code, f"Partition {tp} was not added to the transaction of {transactional_id}"
        if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
            return ErrorCode.NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added to the "
                                                   f"transaction. Underlying error: {ErrorCode(code).name}")
        return code, None

    def verification_enabled(self) -> bool:
        """``transaction.partition.verification.enable`` as it is now (a dynamic broker config)."""
        cfg = self._current_config()
        for level in (cfg.dynamic_broker_configs, cfg.dynamic_default_configs, cfg.raw):
            if VERIFICATION_KEY in level:
                return str(level[VERIFICATION_KEY]).strip().lower() == "true"
        return True

    # -- transactions no coordinator knows: abort them -----------------------------------------

    async def _abort_hanging_periodically(self) -> None:
        interval = self.config.transactions.abort_timed_out_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.abort_hanging_transactions()
            except Exception:
                log.exception("checking for hanging transactions failed")

    async def abort_hanging_transactions(self) -> int:
        """Abort open transactions on partitions led here that no coordinator knows (hanging ones).

        A transaction the coordinator knows ends by itself: committed, aborted, or aborted at its timeout.
        One it does not know - written before verification existed, with verification turned off, or
        left behind when ``__transaction_state`` lost its state - would hold the partition's LSO for ever:
        read_committed consumers stall and the partition stops tiering. Kafka leaves that to an operator
        (``kafka-transactions.sh find-hanging`` then ``abort``); here the leader does it itself once the
        producer has been silent for longer than any transaction may last (``transaction.max.timeout.ms``)
        and no coordinator lists an open transaction of that producer on the partition. Returns how many
        transactions it aborted."""
        now = self.now_ms()
        max_timeout = self.config.transactions.max_timeout_ms
        suspects: list[tuple[TopicPartition, int, int, int]] = []
        for tp, part in list(self.replicas.partitions.items()):
            if not part.is_leader:
                continue
            for pid, entry in list(part.log.producer_state.producers.items()):
                if entry.current_txn_first_offset is not None and now - entry.last_timestamp > max_timeout:
                    suspects.append((tp, pid, entry.producer_epoch, max(entry.coordinator_epoch, 0)))
        aborted = 0
        for tp, pid, epoch, coordinator_epoch in suspects:
            if await self._known_to_a_coordinator(tp, pid):
                continue
            code = await self.write_marker(tp, pid, epoch, False, coordinator_epoch)
            if code == ErrorCode.NONE:
                aborted += 1
                self.hanging_aborted += 1
                log.warning("%s: aborted a hanging transaction of producer %d (epoch %d): no coordinator knows it "
                            "and it has been silent for more than transaction.max.timeout.ms (%d ms)", tp, pid,
                            epoch, max_timeout)
            else:
                log.warning("%s: aborting the hanging transaction of producer %d failed: %s", tp, pid,
                            ErrorCode(code).name)
        return aborted

    async def _known_to_a_coordinator(self, tp: TopicPartition, producer_id: int) -> bool:
        """Does any coordinator have an open transaction of ``producer_id`` including ``tp``? Errors count as
        yes: aborting a live transaction would be far worse than waiting for the next check."""
        open_states = (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
        if self.coordinator.state.loading:
            return True
        for md in self.coordinator.state.all_metadata():
            if md.producer_id == producer_id and md.state in open_states and tp in md.partitions:
                return True
        if not self.clustered:
            return False
        for broker in self.view.brokers():
            node = broker["node_id"]
            if node == self.config.node_id:
                continue
            try:
                listed = await self._request(node, LIST_TRANSACTIONS, 0, state_filters=[],
                                             producer_id_filters=[producer_id])
                if listed.error_code:
                    return True
                ids = [t.transactional_id for t in listed.transaction_states
                       if t.transaction_state in {s.kafka_name for s in open_states}]
                if not ids:
                    continue
                described = await self._request(node, DESCRIBE_TRANSACTIONS, 0, transactional_ids=ids)
            except (TimeoutError, WireError, OSError):
                self._drop_connection(node)
                return True
            for t in described.transaction_states:
                if t.error_code or any(tp.topic == d.topic and tp.partition in d.partitions for d in t.topics):
                    return True
        return False

    async def _verify(self, tp: TopicPartition, transactional_id: str, producer_id: int, producer_epoch: int) -> int:
        local = self.coordinator.state.get(transactional_id)
        if not isinstance(local, int) or local != ErrorCode.NOT_COORDINATOR or not self.clustered:
            return self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])[tp]
        node = self.coordinator_node(transactional_id)
        if node is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            response = await self._request(node["node_id"], ADD_PARTITIONS_TO_TXN, 4, transactions=[{
                "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
                "verify_only": True, "topics": [{"name": tp.topic, "partitions": [tp.partition]}]}])
        except (TimeoutError, WireError, OSError) as e:
            log.info("verifying %s with the coordinator on broker %d failed: %s", tp, node["node_id"], e)
            self._drop_connection(node["node_id"])
            return ErrorCode.NETWORK_EXCEPTION
        if response.error_code:
            return ErrorCode.INVALID_TXN_STATE if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED \
                else int(response.error_code)
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    return int(p.partition_error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    # -- MarkerWriter ---------------------------------------------------------------------------

    def partition_exists(self, tp: TopicPartition) -> bool:
        info = self.topics.get(tp.topic)
        return info is not None and 0 <= tp.partition < info.partitions

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_leader: dict[int, list[TopicPartition]] = {}
        out: dict[TopicPartition, int] = {}
        diskless: list[TopicPartition] = []
        for tp in partitions:
            if not self.partition_exists(tp):
                out[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if self.diskless_markers is not None and self.is_diskless(tp.topic):
                diskless.append(tp)  # leaderless: committed through this broker's WAL
                continue
            leader = self.view.partition(tp.topic, tp.partition).leader if self.clustered else self.config.node_id
            if leader < 0:
                out[tp] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                by_leader.setdefault(leader, []).append(tp)

        async def to_leader(leader: int, tps: list[TopicPartition]) -> None:
            if leader == self.config.node_id:
                results = await asyncio.gather(*(self.write_marker(tp, producer_id, producer_epoch, commit,
                                                                   coordinator_epoch) for tp in tps))
                out.update(zip(tps, results, strict=True))
            else:
                out.update(await self._send_markers(leader, producer_id, producer_epoch, commit, coordinator_epoch,
                                                    tps))

        async def to_diskless() -> None:
            assert self.diskless_markers is not None
            codes = await self.diskless_markers(diskless, producer_id, producer_epoch, commit, coordinator_epoch)
            out.update(zip(diskless, codes, strict=True))

        await asyncio.gather(*(to_leader(leader, tps) for leader, tps in by_leader.items()),
                             *([to_diskless()] if diskless else []))
        return out

    async def write_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int) -> int:
        """Append one marker as this partition's leader (WriteTxnMarkers, or the local coordinator) and
        wait until the ISR has it; an error code. A ``__consumer_offsets`` marker completes the
        producer's transactional offset commits there."""
        marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = build_control_batch(marker, producer_id=producer_id, producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch)
        try:
            info = self.replicas.append(tp, batch, AppendOrigin.COORDINATOR,
                                        required_acks=-1 if self.clustered else 1)
        except KafkaError as e:
            return e.error_code
        except OSError as e:
            log.error("writing a transaction marker on %s failed: %s", tp, e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        if self.clustered:
            code = await self.replicas.wait_for_replication(tp, info.last_offset + 1, APPEND_TIMEOUT_S)
            if code:
                return code
        if self.on_offsets_marker is not None and tp.topic == "__consumer_offsets":
            self.on_offsets_marker(tp.partition, producer_id, commit)
        return ErrorCode.NONE

    async def _send_markers(self, leader: int, producer_id: int, producer_epoch: int, commit: bool,
                            coordinator_epoch: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        try:
            response = await self._request(leader, WRITE_TXN_MARKERS, 1, markers=[{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                "coordinator_epoch": coordinator_epoch}])
        except (TimeoutError, WireError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, e)
            self._drop_connection(leader)
            return dict.fromkeys(tps, ErrorCode.NETWORK_EXCEPTION)
        out = dict.fromkeys(tps, ErrorCode.UNKNOWN_SERVER_ERROR)
        for m in response.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[TopicPartition(t.name, p.partition_index)] = p.error_code
        return out

    async def _request(self, broker_id: int, api_key: int, version: int, **fields: Any) -> Any:
        entry = self._connections.get(broker_id)
        if entry is None:
            broker = self.view.broker(broker_id)
            if broker is None:
                raise WireError(f"broker {broker_id} is not registered")
            conn = AsyncBrokerConnection(broker["host"], broker["port"], client_id=ADMIN_CLIENT_ID,
                                         timeout_s=MARKER_REQUEST_TIMEOUT_S,
                                         security=inter_broker_security(self.config))
            entry = self._connections[broker_id] = (conn, asyncio.Lock())
        conn, lock = entry
        async with lock:
            return await conn.call(api_key, version, timeout_s=MARKER_REQUEST_TIMEOUT_S, **fields)

    def _drop_connection(self, broker_id: int) -> None:
        entry = self._connections.pop(broker_id, None)
        if entry is not None:
            entry[0].close()
