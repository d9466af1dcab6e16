"""The group coordinator: ``__consumer_offsets`` on this broker, and the group state machine above it.

A single node coordinates every group, so there is no partition ownership to move: at start the
coordinator creates ``__consumer_offsets`` if it is missing (``offsets.topic.num.partitions``
partitions, compacted, ``offsets.topic.segment.bytes`` segments), then loads every partition from
its log start to its high watermark (first raised to the log end: this node is the whole ISR) and
replays the records into memory (last write per key wins, a null value deletes). Only then does
the broker start listening, so no client ever sees a half-loaded coordinator (Kafka answers
COORDINATOR_LOAD_IN_PROGRESS in that window instead).

Records go to partition ``abs(hashCode(group)) % partitions`` (Kafka's ``partitionFor``), each
operation's records in one batch appended with ``AppendOrigin.COORDINATOR``: the append is
synchronous on the event loop, so "acknowledge after the write" is simply "answer after append
returned". Offsets older than ``offsets.retention.minutes`` are expired every
``offsets.retention.check.interval.ms``.

In a cluster (``zookeeper.connect`` set) each broker coordinates the groups whose partition it
leads, as Kafka does: the topic is created (replicated, ``offsets.topic.replication.factor``) by the
first FindCoordinator that needs it; a broker that becomes leader of partition ``p`` replays it
(to its log end: as the new leader everything it has will be committed) and then answers for its
groups; a broker that loses ``p`` unloads them (parked requests answer NOT_COORDINATOR) and their
clients find the new coordinator. Writes wait until the ISR has them (acks=all) before the
commit or the assignment is acknowledged, so a coordinator's death loses no acknowledged offset.

Transactional offset commits (TxnOffsetCommit) are appended as one transactional batch of the
producer (``AppendOrigin.COORDINATOR``, so the log fences a stale producer epoch) and stay pending
until the transaction marker for that producer is appended to the same partition: the marker path
then calls :meth:`GroupCoordinator.complete_transaction`. Loading therefore reads batches, not only
records: a transactional batch's offsets become pending for its producer, a later COMMIT/ABORT
marker of that producer completes them, and what is still pending at the log end stays pending
(its transaction is open; its marker comes later).

The protocol logic itself lives in :class:`strata.coordinator.group.manager.GroupMetadataManager`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from strata.common import TopicPartition
from strata.config.broker_config import BROKER_CONFIG_DEF
from strata.config.group_config import GroupSettings, group_settings
from strata.coordinator.group.manager import NO_PRODUCER_ID, GroupConfig, GroupMetadataManager, Record, TxnProducer
from strata.coordinator.group.records import partition_for
from strata.coordinator.group.share_manager import ShareGroupSettings
from strata.coordinator.group.timer import LoopTimer
from strata.errors import CorruptRecordError, ErrorCode, KafkaError, KafkaStorageError
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_batches
from strata.protocol.records import (
    NO_SEQUENCE,
    BatchBuilder,
    ControlRecordType,
)

if TYPE_CHECKING:
    from strata.common import Clock
    from strata.config.broker_config import BrokerConfig
    from strata.log.partition_log import PartitionLog
    from strata.replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.coordinator.group")

OFFSETS_TOPIC = "__consumer_offsets"


def _config_value(raw: Mapping[str, str], name: str) -> int:
    """A broker key that ``BrokerConfig`` does not expose as a field, parsed by its ConfigKey."""
    key = BROKER_CONFIG_DEF.keys[name]
    return int(key.parse(raw[name]) if name in raw else key.default)


class TopicSize(Protocol):
    @property
    def partitions(self) -> int: ...


class TopicLookup(Protocol):
    def get(self, name: str) -> TopicSize | None: ...


class TopicFacts(Protocol):
    name: str
    topic_id: UUID
    partitions: int


class TopicCatalog(Protocol):
    """What KIP-848 groups need beyond sizes: ids, and every name (regular expressions)."""

    def get(self, name: str) -> TopicFacts | None: ...

    def by_id(self, topic_id: UUID) -> TopicFacts | None: ...

    def __iter__(self) -> Iterator[TopicFacts]: ...


class GroupSettingsSource(Protocol):
    def settings(self, group_id: str) -> GroupSettings: ...


class CatalogTopics:
    """:class:`strata.coordinator.group.consumer_manager.TopicsView` over the broker's topic registry."""

    def __init__(self, topics: TopicCatalog) -> None:
        self._topics = topics

    def topic(self, name: str) -> tuple[UUID, int] | None:
        info = self._topics.get(name)
        return (info.topic_id, info.partitions) if info is not None else None

    def name_of(self, topic_id: UUID) -> str | None:
        info = self._topics.by_id(topic_id)
        return info.name if info is not None else None

    def names(self) -> list[str]:
        return [t.name for t in self._topics]


class OffsetsTopicAdmin(Protocol):
    """Cluster mode: how the coordinator creates a replicated ``__consumer_offsets``."""

    def max_replication_factor(self) -> int: ...

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str]) -> TopicSize: ...


class GroupCoordinatorHost(Protocol):
    """The part of a broker the group coordinator uses, and all of it: its configuration and clock, the
    topic registry (to size ``__consumer_offsets``), the replica manager (to append, replay and wait for the
    ISR) and the topic creators. Why a protocol: the coordinator sits below the wire layer, so it names
    what it needs instead of importing the broker (the broker satisfies this structurally; unit tests pass
    a small object)."""

    config: BrokerConfig
    clock: Clock
    replicas: ReplicaManager
    topics: TopicLookup
    admin: OffsetsTopicAdmin

    @property
    def clustered(self) -> bool: ...

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicSize: ...


class ShareStateInitializer(Protocol):
    """KIP-932: where a share group's partitions get their state (the broker's share persister)."""

    async def initialize(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int,
                         start_offset: int) -> int: ...


SHARE_STATE_WAIT_S = 10.0  # at startup, how long a pending initialization waits for the share persister


class GroupCoordinator:
    def __init__(self, broker: GroupCoordinatorHost) -> None:
        self.broker = broker
        self.partitions = broker.config.offsets_topic_num_partitions
        self.manager: GroupMetadataManager | None = None
        self._timer: LoopTimer | None = None
        self._expiry: asyncio.Task[None] | None = None
        self.clustered = broker.clustered
        self.loaded: set[int] = set()  # cluster mode: the __consumer_offsets partitions led and loaded here
        self._last_write: dict[int, int] = {}  # partition -> next offset after this broker's last write
        self._creating: asyncio.Task[None] | None = None
        # KIP-932: set by the broker once its share persister and share-partition manager run
        self.share_state: ShareStateInitializer | None = None
        self._share_tasks: dict[str, set[asyncio.Task[None]]] = {}  # group id -> initializations under way

    def _group_settings(self, group_id: str) -> GroupSettings:
        source: GroupSettingsSource | None = getattr(self.broker, "group_configs", None)
        if source is not None:
            return source.settings(group_id)
        return group_settings(self.broker.config.consumer_groups, {}, self.broker.config.share_groups)

    def owns(self, group_id: str) -> bool:
        return not self.clustered or self.partition_for(group_id) in self.loaded

    @property
    def active(self) -> bool:
        return self.manager is not None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        broker = self.broker
        cfg = broker.config
        info = broker.topics.get(OFFSETS_TOPIC)
        if info is None and not self.clustered:
            info = broker.create_topic(OFFSETS_TOPIC, cfg.offsets_topic_num_partitions, self.topic_configs())
        if info is not None:
            self.partitions = info.partitions
        loop = asyncio.get_running_loop()
        self._timer = LoopTimer(loop)
        manager = GroupMetadataManager(
            GroupConfig(
                min_session_timeout_ms=cfg.group_min_session_timeout_ms,
                max_session_timeout_ms=cfg.group_max_session_timeout_ms,
                max_size=cfg.group_max_size,
                initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
                offsets_retention_ms=cfg.offsets_retention_ms,
            ),
            self._timer, broker.clock, self._write, consumer_config=cfg.consumer_groups,
            topics=CatalogTopics(broker.topics),  # type: ignore[arg-type]
            group_settings=self._group_settings,
            share_settings=ShareGroupSettings(
                session_timeout_ms=cfg.share_groups.session_timeout_ms,
                heartbeat_interval_ms=cfg.share_groups.heartbeat_interval_ms,
                max_size=cfg.share_groups.max_size,
                initialize_retry_interval_ms=cfg.share_groups.initialize_retry_interval_ms),
            share_initializer=self._initialize_share_partitions)
        if not self.clustered:
            self._load(manager)
            manager.on_loaded()
        self.manager = manager
        if self.clustered:  # partitions led before the coordinator started
            for tp, part in list(broker.replicas.partitions.items()):
                if tp.topic == OFFSETS_TOPIC and part.is_leader:
                    self.on_leader(tp.partition)
        interval = _config_value(cfg.raw, "offsets.retention.check.interval.ms")
        self._expiry = loop.create_task(self._expire_periodically(interval))

    def _initialize_share_partitions(self, group_id: str, todo: dict[UUID, frozenset[int]], state_epoch: int,
                                     done: Callable[[dict[UUID, frozenset[int]]], None]) -> None:
        """Kafka's ``persisterInitialize``: once the record naming the partitions *initializing* is in the ISR,
        InitializeShareGroupState for each (start offset -1: the share-partition leader applies
        ``share.auto.offset.reset`` on its first fetch); ``done`` with those that succeeded. A failed one is
        asked for again after ``group.share.initialize.retry.interval.ms``."""
        task = asyncio.get_running_loop().create_task(self._run_share_initialization(group_id, todo, state_epoch,
                                                                                      done))
        pending = self._share_tasks.setdefault(group_id, set())
        pending.add(task)

        def finished(t: asyncio.Task[None]) -> None:
            pending.discard(t)
            if not pending and self._share_tasks.get(group_id) is pending:
                del self._share_tasks[group_id]

        task.add_done_callback(finished)

    async def share_initialized(self, group_id: str, timeout_s: float) -> bool:
        """Wait for the group's share-partition initializations under way; whether there were any and they
        all ended in time (the heartbeat that started them can then answer with the partitions assigned,
        instead of one heartbeat interval later)."""
        tasks = list(self._share_tasks.get(group_id, ()))
        if not tasks:
            return False
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        return not pending

    async def _run_share_initialization(self, group_id: str, todo: dict[UUID, frozenset[int]], state_epoch: int,
                                        done: Callable[[dict[UUID, frozenset[int]]], None]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHARE_STATE_WAIT_S
        while self.share_state is None and loop.time() < deadline:
            await asyncio.sleep(0.05)  # a coordinator replaying at startup, before the broker set it
        state = self.share_state
        if state is None or await self.durable(group_id, 5.0):
            return
        keys = [(t, p) for t, ps in sorted(todo.items()) for p in sorted(ps)]
        codes = await asyncio.gather(*(state.initialize(group_id, t, p, state_epoch, -1) for t, p in keys))
        succeeded: dict[UUID, set[int]] = {}
        for (topic_id, partition), code in zip(keys, codes, strict=True):
            if code:
                log.info("initializing share-partition %s:%s-%d failed: %s (retried later)", group_id, topic_id,
                         partition, ErrorCode(code).name)
            else:
                succeeded.setdefault(topic_id, set()).add(partition)
        if succeeded and self.manager is not None:
            done({t: frozenset(ps) for t, ps in succeeded.items()})

    async def stop(self) -> None:
        tasks = [t for pending in self._share_tasks.values() for t in pending]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        manager, self.manager = self.manager, None
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
            self._expiry = None
        if manager is not None:
            manager.unload()

    async def _expire_periodically(self, interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            if self.manager is not None:
                try:
                    removed = self.manager.expire_offsets()
                    if removed:
                        log.info("expired %d committed offsets", removed)
                except Exception:
                    log.exception("offset expiration failed")

    def topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact", "segment.bytes": str(self.broker.config.offsets_topic_segment_bytes)}

    # -- cluster mode: leadership of __consumer_offsets partitions --------------------------------

    async def ensure_topic(self) -> bool:
        """Create ``__consumer_offsets`` on first use (Kafka's FindCoordinator does); False while it
        cannot be made yet (fewer live brokers than ``offsets.topic.replication.factor``)."""
        broker = self.broker
        if broker.topics.get(OFFSETS_TOPIC) is not None:
            return True
        rf = _config_value(broker.config.raw, "offsets.topic.replication.factor")
        if broker.admin.max_replication_factor() < rf:
            log.info("not creating %s yet: %d live brokers, offsets.topic.replication.factor=%d", OFFSETS_TOPIC,
                     broker.admin.max_replication_factor(), rf)
            return False
        try:
            info = await broker.admin.create_topic(OFFSETS_TOPIC, broker.config.offsets_topic_num_partitions, rf,
                                                   self.topic_configs())
        except KafkaError as e:
            if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", OFFSETS_TOPIC, e)
                return False
            info = broker.topics.get(OFFSETS_TOPIC)
        if info is not None:
            self.partitions = info.partitions
        return info is not None

    def on_leader(self, partition: int) -> None:
        """This broker leads ``__consumer_offsets-partition`` now: load its groups."""
        manager = self.manager
        if manager is None or partition in self.loaded:
            return
        info = self.broker.topics.get(OFFSETS_TOPIC)
        if info is not None:
            self.partitions = info.partitions
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        plog = self.broker.replicas.local_log(tp)
        if plog is None:
            return
        before = set(manager.groups) | set(manager.consumer.groups)
        self._replay_log(manager, tp, plog, plog.log_end_offset)
        manager.on_loaded({g for g in (*manager.groups, *manager.consumer.groups) if g not in before})
        self.loaded.add(partition)
        log.info("coordinating the groups of %s", tp)

    def on_not_leader(self, partition: int) -> None:
        if partition not in self.loaded:
            return
        self.loaded.discard(partition)
        if self.manager is not None:
            n = self.manager.unload_groups(lambda group_id: self.partition_for(group_id) == partition)
            log.info("no longer coordinating the %d groups of %s-%d", n, OFFSETS_TOPIC, partition)

    async def durable(self, group_id: str, timeout_s: float) -> int:
        """Wait until this broker's writes for ``group_id`` are in the ISR (acks=all); an error code."""
        if not self.clustered:
            return ErrorCode.NONE
        partition = self.partition_for(group_id)
        offset = self._last_write.get(partition)
        if offset is None:
            return ErrorCode.NONE
        return await self.broker.replicas.wait_for_replication(TopicPartition(OFFSETS_TOPIC, partition), offset,
                                                                timeout_s)

    # -- storage ------------------------------------------------------------------------------

    def on_topic_deleted(self, topic: str) -> None:
        if self.manager is not None:
            removed = self.manager.on_topic_deleted(topic)
            if removed:
                log.info("removed %d committed offsets of deleted topic %s", removed, topic)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def committed_offsets(self) -> dict[int, dict[str, dict[tuple[str, int], tuple[int, str]]]]:
        """The committed offsets of the groups this broker coordinates, by ``__consumer_offsets`` partition:
        partition -> group -> (topic, partition) -> (offset, metadata). For the copy in the remote store
        (``offsets.remote.upload.interval.ms``); a partition led here with no offsets is listed, empty."""
        manager = self.manager
        if manager is None:
            return {}
        out: dict[int, dict[str, dict[tuple[str, int], tuple[int, str]]]] = \
            {p: {} for p in (self.loaded if self.clustered else range(self.partitions))}
        for group_id, offsets in list(manager.offsets.items()):
            if offsets and self.owns(group_id):
                out.setdefault(self.partition_for(group_id), {})[group_id] = {
                    tp: (o.offset, o.metadata) for tp, o in offsets.items()}
        return out

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was just appended to
        ``__consumer_offsets-partition`` here: make the producer's pending offsets of that partition's
        groups committed, or drop them (Kafka's ``scheduleHandleTxnCompletion``, run inline).

        Called by the transaction-marker path after its append, on this node or, in a cluster, on the
        partition's leader. A partition this broker does not coordinate (yet) is skipped: whoever loads
        it replays the marker from the log.
        """
        manager = self.manager
        if manager is None or (self.clustered and partition not in self.loaded):
            return
        n = manager.complete_txn_offset_commits(producer_id, commit, self._in_partition(partition))
        if n:
            log.info("%s transactional offsets of producer %d in %d groups of %s-%d",
                     "committed" if commit else "aborted", producer_id, n, OFFSETS_TOPIC, partition)

    def _in_partition(self, partition: int) -> Callable[[str], bool]:
        return lambda group_id: self.partition_for(group_id) == partition

    def _write(self, group_id: str, records: list[Record], producer: TxnProducer | None = None) -> int:
        """Append ``records`` as one batch (transactional for ``producer``); returns its base offset."""
        if producer is None:
            builder = BatchBuilder()
        else:
            builder = BatchBuilder(producer_id=producer[0], producer_epoch=producer[1], base_sequence=NO_SEQUENCE,
                                   transactional=True)
        for key, value in records:
            builder.append(value, key=key)
        tp = TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))
        try:
            info = self.broker.replicas.append(tp, builder.build(), AppendOrigin.COORDINATOR,
                                               required_acks=-1 if self.clustered else 1)
            self._last_write[tp.partition] = info.last_offset + 1
            return info.first_offset
        except KafkaError:
            raise
        except OSError as e:
            raise KafkaStorageError(f"append to {tp} failed: {e}") from e

    def _load(self, manager: GroupMetadataManager) -> None:
        """Replay every partition of ``__consumer_offsets`` from its log start to its high watermark.

        This node is the only replica, so it becomes leader with itself as the whole ISR and, as in
        Kafka, everything in its log is committed: the high watermark is first raised to the log end.
        (After a kill -9 the checkpointed high watermark is stale: records acknowledged after the
        last checkpoint would otherwise be skipped, and with them the latest commits.)
        """
        for p in range(self.partitions):
            tp = TopicPartition(OFFSETS_TOPIC, p)
            plog = self.broker.replicas.get_log(tp)
            plog.update_high_watermark(plog.log_end_offset)
            self._replay_log(manager, tp, plog, plog.high_watermark)

    def _replay_log(self, manager: GroupMetadataManager, tp: TopicPartition, plog: PartitionLog, end: int) -> None:
        """Replay ``[log start, end)`` batch by batch, as Kafka's ``doLoadGroupsAndOffsets`` reads it.

        Records of a transactional batch are pending for the batch's producer; that producer's next
        COMMIT/ABORT marker completes them for this partition's groups (only: the producer may have
        offsets pending in groups of other partitions, whose markers are in their own logs).
        """
        in_partition = self._in_partition(tp.partition)
        start = plog.log_start_offset
        for batch in iter_log_batches(plog, start, end):
            header = batch.header
            if header.is_control:
                try:
                    control = batch.control_record
                except CorruptRecordError as e:
                    log.error("skipping unreadable transaction marker at %s offset %d: %s", tp, header.base_offset, e)
                    continue
                if control is not None and header.base_offset >= start:
                    manager.replay_txn_marker(header.producer_id, control.type is ControlRecordType.COMMIT,
                                              in_partition)
                continue
            producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
            for record in batch.records:
                if start <= record.offset < end:
                    self._replay(manager, tp, record.offset, record.key, record.value, header.base_offset,
                                 producer_id)

    @staticmethod
    def _replay(manager: GroupMetadataManager, tp: TopicPartition, offset: int, key: bytes | None,
                value: bytes | None, batch_offset: int, producer_id: int) -> None:
        try:
            manager.replay(key, value, batch_offset, producer_id)
        except (CorruptRecordError, ValueError) as e:
            log.error("skipping unreadable record at %s offset %d: %s", tp, offset, e)
