"""This broker's membership of the cluster: session, registration, metadata cache, controller, admin.

The broker (``strata.broker.server``) composes one :class:`ClusterNode` when
``zookeeper.connect`` is set and talks to it through the small methods below; handlers use it
through the broker's cluster view and topic-admin services. Topic administration writes
Kafka's znodes (``AdminZkClient``): a new topic is ``/config/topics/<t>`` then
``/brokers/topics/<t>`` with its assignment (the controller then creates the partition states);
a deletion is ``/admin/delete_topics/<t>``; a config change rewrites ``/config/topics/<t>`` and
adds a ``/config/changes`` notification. Any broker accepts them (ZooKeeper-mode Kafka sent
CreateTopics to the controller; with conditional znode creation any broker can write them safely).

Session loss (a long GC pause, SIGSTOP, a partition from ZooKeeper) is the zombie case: the
session's ephemerals are gone, the controller has elected other leaders. On LOST the node tells
the replica manager to refuse acks=all appends until it has re-registered and re-read the state
of every partition it led; a follower of the new leader never fetches from it again, so nothing
it accepts meanwhile can become committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from strata.cluster import algorithms
from strata.cluster.controller import KafkaController
from strata.cluster.isolation import LeadershipProbe, PeerState
from strata.cluster.metadata import MetadataCache, MetadataListener
from strata.cluster.registration import create_or_get_cluster_id, register_broker
from strata.cluster.zk import AsyncZk, MultiError, Op, SessionState, ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError
from strata.cluster.znodes import (
    PERSISTENT_PATHS,
    BrokerRegistration,
    ConfigEntityChangeNotificationZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    DeleteTopicsZNode,
    Endpoint,
    LeaderAndIsr,
    LeaderRecoveryState,
    ProducerIdBlockZNode,
    ProducerIdsBlock,
    ReplicaAssignment,
    TopicPartitionStateZNode,
    TopicZNode,
)
from strata.common import TopicPartition
from strata.config.cluster_config import ClusterConfig
from strata.errors import ApiError, ErrorCode
from strata.replication.partition import PartitionState

log = logging.getLogger(__name__)
lifecycle = logging.getLogger("strata.lifecycle")  # shown at the default level, like startup and shutdown


def partition_state(state: LeaderAndIsr, assignment: ReplicaAssignment | None) -> PartitionState:
    """The replication layer's view of a state znode and its assignment."""
    a = assignment or ReplicaAssignment(())
    return PartitionState(state.leader, state.leader_epoch, state.isr, a.replicas, state.partition_epoch,
                          state.controller_epoch, int(state.leader_recovery_state), a.adding_replicas,
                          a.removing_replicas)


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


class ClusterNode:
    def __init__(self, config: ClusterConfig, broker_id: int, endpoints: Sequence[Endpoint],
                 inter_broker_listener: str = "PLAINTEXT") -> None:
        """``endpoints``: the advertised listeners (a port of 0 is set once bound, before :meth:`register`);
        ``inter_broker_listener``: whose endpoints of other brokers this broker connects to."""
        assert config.zookeeper_connect is not None
        self.config = config
        self.broker_id = broker_id
        self.endpoints = list(endpoints)
        self.inter_broker_listener = inter_broker_listener
        self.zk = AsyncZk(config.zookeeper_connect, session_timeout_ms=config.zookeeper_session_timeout_ms,
                          connection_timeout_ms=config.zookeeper_connection_timeout_ms)
        self.metadata = MetadataCache(self.zk)
        self.controller = KafkaController(self.zk, broker_id, config)
        # the controller's view of partition states follows ZooKeeper (leaders change ISRs themselves)
        self.metadata.listeners.append(MetadataListener(partition_state_changed=self.controller.observe_state))
        self.cluster_id = ""
        self.broker_epoch = -1
        self.registered = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._reregistering: asyncio.Task[Any] | None = None
        self._suspended = False
        self._presume: asyncio.Task[Any] | None = None
        # True from session_timeout after a disconnect until ZooKeeper is back: see _presume_expired
        self.presumed_expired = False
        self.on_session_lost: list[Any] = []
        self.on_reregistered: list[Any] = []
        self.on_session_presumed_lost: list[Any] = []  # session_timeout without ZooKeeper (_presume_expired)
        self.on_session_restored: list[Any] = []  # the session survived a presumed expiry after all
        # Without ZooKeeper: the peers' view of partitions this broker led and lost (``strata.cluster.isolation``)
        self.probe: LeadershipProbe | None = None
        self.peer_states: dict[TopicPartition, PeerState] = {}
        self.on_leaderships_replaced: list[Any] = []  # called with the set of partitions peers saw move on

    # -- lifecycle ----------------------------------------------------------------------------

    async def connect(self, proposed_cluster_id: str | None) -> str:
        """Session, persistent paths and ``/cluster/id``; raises ZkUnavailableError after the timeout."""
        await self.zk.start()
        for path in PERSISTENT_PATHS:
            await self.zk.ensure_path(path)
        self.cluster_id = await create_or_get_cluster_id(self.zk, proposed_cluster_id)
        self.zk.add_state_listener(self._on_session)
        return self.cluster_id

    async def start_metadata(self, listener: MetadataListener) -> None:
        self.metadata.listeners.append(listener)
        await self.metadata.start()

    async def register(self) -> None:
        """Publish this broker (after its listener is up: peers fetch from it at once) and join the
        controller election."""
        self.broker_epoch = await register_broker(self.zk, self._registration(),
                                                  wait_s=self.config.zookeeper_session_timeout_ms / 1000 + 2)
        self.registered.set()
        log.info("registered as broker %d in ZooKeeper (broker epoch %d, cluster %s)", self.broker_id,
                 self.broker_epoch, self.cluster_id)
        # The controller may have reacted to the registration (and written this broker's leaderships)
        # before it returned here: states held back until now are applied (``on_reregistered`` too).
        for fn in self.on_reregistered:
            fn()
        await self.controller.start()
        self.controller.enqueue("elect")

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(self.broker_id, tuple(self.endpoints),
                                  rack=self.config.broker_rack, timestamp_ms=int(time.time() * 1000))

    async def close(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.controller.stop()
        self.metadata.stop()
        if self.probe is not None:
            self.probe.close()
        await self.zk.close()

    def _on_session(self, state: SessionState) -> None:
        if self._closing:
            return
        if state == SessionState.SUSPENDED:
            self._suspended = True
            log.warning("lost the connection to ZooKeeper; serving on, the session survives if it comes back "
                        "within zookeeper.session.timeout.ms=%d", self.config.zookeeper_session_timeout_ms)
            if self._presume is None or self._presume.done():
                self._presume = self._spawn(self._presume_expired())
        elif state == SessionState.LOST:
            self._suspended = False
            self._cancel_presumption()
            self.presumed_expired = False
            self.peer_states.clear()
            log.warning("ZooKeeper session expired: this broker's registration and leaderships are gone; "
                        "acks=all appends are refused until it has re-registered")
            self.registered.clear()
            self.metadata.mark_stale()
            for fn in self.on_session_lost:
                fn()
        elif state == SessionState.CONNECTED:
            if self._suspended and self.registered.is_set():
                lifecycle.info("connected to ZooKeeper again; the session (and this broker's registration) "
                               "survived")
            self._suspended = False
            self._cancel_presumption()
            if self.presumed_expired and self.registered.is_set():
                # the session outlived the disconnect: no other broker took over, the leaderships stand (those a
                # peer saw move on stay fenced until the watched state makes this broker their follower)
                self.presumed_expired = False
                for fn in self.on_session_restored:
                    fn(set(self.peer_states))
            self.peer_states.clear()
            if not self.registered.is_set() and self.broker_epoch >= 0 and (
                    self._reregistering is None or self._reregistering.done()):
                self._reregistering = self._spawn(self._reregister())

    async def _presume_expired(self) -> None:
        """While ZooKeeper is away: learn from the peers which leaderships moved on (fenced at once), and
        presume the session expired when no peer has answered for a whole session timeout either.

        A broker cut off from ZooKeeper learns that its session expired only when it reconnects (the server
        expires it; the client cannot know), while the controller has already elected other leaders. Still
        reachable by clients, it would keep naming itself leader and taking writes it cannot commit. Yet going
        quiet alone proves nothing: with the whole ensemble down every broker loses ZooKeeper and Kafka's leaders
        keep serving. The peers tell the two apart (``strata.cluster.isolation``)."""
        timeout_s = self.config.zookeeper_session_timeout_ms / 1000
        start = time.monotonic()
        last_answer: float | None = None
        while not self._closing and self._suspended:
            result = None
            if self.probe is not None:
                try:
                    result = await self.probe.probe()
                except Exception as e:  # noqa: BLE001 - a probe that fails proves nothing; try again
                    log.debug("leadership probe failed: %s", e)
            now = time.monotonic()
            if not self._suspended or self._closing:
                return
            if result is not None and result.reachable:
                last_answer = now
            if result is not None and result.replaced:
                new = {tp: st for tp, st in result.replaced.items() if self.peer_states.get(tp) != st}
                if new:
                    self.peer_states.update(new)
                    log.warning("without ZooKeeper; peers report new leaders of %d partition(s) this broker led "
                                "(%s): fenced", len(new), ", ".join(sorted(str(tp) for tp in new)[:5]))
                    for fn in self.on_leaderships_replaced:
                        fn(set(new))
            silent = now - (last_answer if last_answer is not None else start)
            if not self.presumed_expired and now - start >= timeout_s and silent >= timeout_s:
                self.presumed_expired = True
                log.warning("no ZooKeeper and no peer answering for zookeeper.session.timeout.ms=%d: the session is "
                            "presumed expired and this broker's leaderships fenced until ZooKeeper confirms them",
                            self.config.zookeeper_session_timeout_ms)
                for fn in self.on_session_presumed_lost:
                    fn()
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - now)))

    def _cancel_presumption(self) -> None:
        if self._presume is not None and not self._presume.done():
            self._presume.cancel()
        self._presume = None

    @property
    def leadership_confirmed(self) -> bool:
        """Whether this broker may name itself leader: registered on a live session, not presumed expired."""
        return self.registered.is_set() and not self.presumed_expired

    async def _reregister(self) -> None:
        """Register again on the new session, then -- once the metadata mirror was read again on it, so
        that no state from before the expiry is taken for the current one -- re-apply every partition
        state (``on_reregistered``). Retried until it succeeds: a broker must not stay unregistered
        because ZooKeeper failed once more in the middle."""
        wait_s = self.config.zookeeper_session_timeout_ms / 1000 + 2
        while not self._closing and not self.registered.is_set():
            try:
                self.broker_epoch = await register_broker(self.zk, self._registration(), wait_s=wait_s)
                session = self.zk.session_id  # the session the registration belongs to
                while not await self.metadata.wait_synced(wait_s):
                    log.info("waiting for the metadata to be read again from ZooKeeper")
                if self.zk.session_id != session:
                    continue  # expired again meanwhile: that registration is gone too
            except Exception as e:  # noqa: BLE001 - ZooKeeper failed again meanwhile: retried
                log.warning("re-registration as broker %d failed: %s; retrying", self.broker_id, e)
                await asyncio.sleep(0.5)
                continue
            self.registered.set()
            lifecycle.info("re-registered as broker %d (broker epoch %d) after the ZooKeeper session expired",
                           self.broker_id, self.broker_epoch)
            for fn in self.on_reregistered:
                fn()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def controlled_shutdown(self, timeout_s: float) -> int:
        """Ask the controller to move leadership away (Kafka's controlled shutdown) and wait until no
        partition with another replica is led here; returns how many still are after ``timeout_s``.

        Bounded as a whole: with ZooKeeper unreachable the request itself waits for a connection
        (kazoo queues calls until it is back), and a stopping broker must not wait for that."""
        from strata.cluster.controller import CONTROLLED_SHUTDOWN_PATH

        cache = self.metadata

        def still_leading() -> int:
            # led here with another live ISR member that could take over
            return sum(1 for s in cache.states.values()
                       if s.leader == self.broker_id and any(r != self.broker_id and r in cache.brokers
                                                             for r in s.isr))

        if not self.registered.is_set() or not still_leading():
            return 0
        deadline = time.monotonic() + timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                await self.zk.create(f"{CONTROLLED_SHUTDOWN_PATH}/{self.broker_id}", ephemeral=True,
                                     makepath=True)
        except ZkNodeExistsError:
            pass
        except TimeoutError:
            log.warning("controlled shutdown: ZooKeeper did not take the request within %.1fs", timeout_s)
            return still_leading()
        await self.wait_for(lambda: not still_leading(), max(0.0, deadline - time.monotonic()))
        return still_leading()

    # -- the cluster view ---------------------------------------------------------------------

    def brokers(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """Live brokers with their address on ``listener`` (default: the inter-broker one); a broker without
        that listener is left out, as Kafka's metadata cache does for a client's listener."""
        out = []
        for broker_id, reg in sorted(self.metadata.brokers.items()):
            ep = reg.endpoint(listener or self.inter_broker_listener)
            if ep is not None:
                out.append(BrokerEndpoint(broker_id, ep.host or "127.0.0.1", ep.port, reg.rack))
        return out

    def controller_id(self) -> int:
        return self.metadata.controller_id

    async def read_partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        got = await self.zk.get_or_none(TopicPartitionStateZNode.path(tp.topic, tp.partition))
        return None if got is None else TopicPartitionStateZNode.decode(got[0], got[1].version)

    # -- ISR changes by a leader (``ZkAlterPartitionManager``) ------------------------------------

    async def write_isr(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        """The leader's own ISR change: the state znode written on the condition that it is still the
        version the leader knows (a new leader epoch or a controller change makes it lose); the
        leader epoch is not bumped (Kafka: leader ISR changes only bump the partition epoch)."""
        if not self.registered.is_set():
            return None
        state = LeaderAndIsr(proposed.leader, proposed.leader_epoch, tuple(proposed.isr), proposed.controller_epoch,
                             LeaderRecoveryState(proposed.leader_recovery_state), proposed.partition_epoch)
        if state.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(state.isr) > 1:
            state = replace(state, leader_recovery_state=LeaderRecoveryState.RECOVERED)
        path = TopicPartitionStateZNode.path(tp.topic, tp.partition)
        try:
            stat = await self.zk.set(path, TopicPartitionStateZNode.encode(state), proposed.partition_epoch)
        except (ZkBadVersionError, ZkNoNodeError):
            return None
        return replace(proposed, isr=state.isr, partition_epoch=stat.version,
                       leader_recovery_state=int(state.leader_recovery_state))

    # -- topic administration (AdminZkClient) -------------------------------------------------

    def assignment_for(self, num_partitions: int, replication_factor: int,
                       manual: Mapping[int, Sequence[int]] | None) -> dict[int, list[int]]:
        brokers = self.metadata.live_brokers()
        try:
            if manual:
                algorithms.validate_topic_assignment(manual)
                unknown = {b for r in manual.values() for b in r} - set(brokers)
                if unknown:
                    raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                   f"Unknown broker(s) in the replica assignment: {sorted(unknown)}")
                return {p: list(r) for p, r in manual.items()}
            return algorithms.assign_replicas_to_brokers(brokers, num_partitions, replication_factor)
        except algorithms.InvalidReplicationFactorError as e:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, str(e)) from None
        except algorithms.InvalidPartitionsError as e:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, str(e)) from None
        except algorithms.AssignmentError as e:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(e)) from None

    async def create_topic(self, name: str, assignment: Mapping[int, Sequence[int]], configs: Mapping[str, str],
                           topic_id: uuid.UUID | None = None, initial_leader_epoch: int = 0) -> uuid.UUID:
        """``createTopicWithAssignment``: configs first (a reader of the topic znode finds them), then the
        topic znode; an existing topic znode means TOPIC_ALREADY_EXISTS.

        ``initial_leader_epoch`` above 0 (a topic restored from the remote store, whose records carry the old
        cluster's epochs): each partition's first state is written before the topic znode, leading in that
        epoch, as the controller would write it at epoch 0 (first live replica leads, the live replicas in
        sync); the controller finds it when the topic appears and goes on from it."""
        if name in self.metadata.topics or await self.zk.exists(TopicZNode.path(name)) is not None:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if await self.zk.exists(DeleteTopicsZNode.path(name)) is not None:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' is marked for deletion.")
        topic_id = topic_id or uuid.uuid4()
        config_path = ConfigEntityZNode.topic_path(name)
        data = ConfigEntityZNode.encode(dict(configs))
        try:
            await self.zk.create(config_path, data, makepath=True)
        except ZkNodeExistsError:
            await self.zk.set(config_path, data)
        topic = Op.create(TopicZNode.path(name), TopicZNode.encode(topic_id, assignment))
        try:
            if initial_leader_epoch > 0:  # one transaction: the controller sees the topic with its states
                await self.zk.multi([topic, *await self._initial_state_ops(name, assignment, initial_leader_epoch)])
            else:
                await self.zk.create(topic.path, topic.data)
        except (ZkNodeExistsError, MultiError) as e:
            if isinstance(e, ZkNodeExistsError) or isinstance(e.cause, ZkNodeExistsError):
                raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
            raise
        return topic_id

    async def _initial_state_ops(self, name: str, assignment: Mapping[int, Sequence[int]], epoch: int) -> list[Op]:
        got = await self.zk.get_or_none(ControllerEpochZNode.PATH)
        controller_epoch = ControllerEpochZNode.decode(got[0]) if got else 0
        live = set(self.metadata.brokers)
        ops = [Op.create(TopicZNode.partitions_path(name))]
        for partition, replicas in sorted(assignment.items()):
            in_sync = [r for r in replicas if r in live]
            ops.append(Op.create(TopicZNode.partition_path(name, partition)))
            if in_sync:  # else the controller starts it (at epoch 0) once a replica is live
                state = LeaderAndIsr(in_sync[0], epoch, tuple(in_sync), controller_epoch)
                ops.append(Op.create(TopicPartitionStateZNode.path(name, partition),
                                     TopicPartitionStateZNode.encode(state)))
        return ops

    async def delete_topic(self, name: str) -> None:
        if name not in self.metadata.topics and await self.zk.exists(TopicZNode.path(name)) is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        try:
            await self.zk.create(DeleteTopicsZNode.path(name))
        except ZkNodeExistsError:
            pass

    async def acknowledge_deletion(self, name: str) -> None:
        """This broker has deleted its replicas of ``name``: the controller completes the deletion
        when every replica has said so."""
        try:
            await self.zk.create(f"{DeleteTopicsZNode.path(name)}/{self.broker_id}")
        except (ZkNodeExistsError, ZkNoNodeError):
            pass

    async def add_partitions(self, name: str, total: int, manual: Sequence[Sequence[int]] | None) -> None:
        got = await self.zk.get_or_none(TopicZNode.path(name))
        if got is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        data, stat = got
        topic = TopicZNode.decode(name, data)
        existing = {p: a.replicas for p, a in topic.partitions.items()}
        proposed = {len(existing) + i: list(r) for i, r in enumerate(manual)} if manual else None
        try:
            new = algorithms.add_partitions_assignment(name, existing, self.metadata.live_brokers(), total, proposed)
        except algorithms.InvalidPartitionsError as e:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, str(e)) from None
        except algorithms.InvalidReplicationFactorError as e:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, str(e)) from None
        except algorithms.AssignmentError as e:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(e)) from None
        partitions: dict[int, ReplicaAssignment | Sequence[int]] = dict(topic.partitions)
        partitions.update(new)
        try:
            await self.zk.set(TopicZNode.path(name), TopicZNode.encode(topic.topic_id, partitions), stat.version)
        except ZkBadVersionError:
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, f"Topic '{name}' changed meanwhile; retry") from None

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """``changeTopicConfig``: the overrides, then a change notification every broker watches."""
        path = ConfigEntityZNode.topic_path(name)
        data = ConfigEntityZNode.encode(dict(configs))
        try:
            await self.zk.set(path, data)
        except ZkNoNodeError:
            await self.zk.create(path, data, makepath=True)
        await self.zk.create(ConfigEntityChangeNotificationZNode.CREATE_PATH,
                             ConfigEntityChangeNotificationZNode.encode(
                                 ConfigEntityChangeNotificationZNode.entity_path("topics", name)), sequence=True)

    async def wait_for(self, predicate: Any, timeout_s: float) -> bool:
        """Wait (polling the local cache, which follows ZooKeeper within milliseconds) until ``predicate()``."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    # -- producer ids (``ZkProducerIdManager``) -----------------------------------------------

    async def allocate_producer_ids(self) -> ProducerIdsBlock:
        """The next block of producer ids: ``/latest_producer_id_block`` advanced with a conditional write,
        so two brokers never get the same block."""
        for _ in range(100):
            got = await self.zk.get_or_none(ProducerIdBlockZNode.PATH)
            if got is None or not got[0]:
                first, version = 0, got[1].version if got else -1
            else:
                first, version = ProducerIdBlockZNode.decode(got[0]).next_block_first_id, got[1].version
            block = ProducerIdsBlock(self.broker_id, first, ProducerIdsBlock.BLOCK_SIZE)
            try:
                if got is None:
                    await self.zk.create(ProducerIdBlockZNode.PATH, ProducerIdBlockZNode.encode(block))
                else:
                    await self.zk.multi([Op.set(ProducerIdBlockZNode.PATH, ProducerIdBlockZNode.encode(block),
                                                version)])
                return block
            except (ZkNodeExistsError, MultiError):
                continue
        raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "could not allocate a producer id block (contention)")
