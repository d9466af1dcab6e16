"""The controller: Kafka's ZooKeeper-mode ``KafkaController``, on one asyncio task.

Every broker runs one; the one that creates the ephemeral ``/controller`` znode in the same
``multi`` that increments ``/controller_epoch`` is active. From then on every write it makes is a
``multi`` guarded by ``check(/controller_epoch, version)``: a controller that lost its session and
was replaced can never overwrite state (``ControllerMovedException``); it resigns at once.

What it does, as Kafka's controller does it (decisions in :mod:`strata.cluster.algorithms`):

* new partitions get their first state (first live replica leads, live replicas in the ISR);
* a dead broker's partitions get a new leader from the ISR (unclean only if enabled) and it
  leaves every ISR, each change bumping the leader epoch; a partition whose last ISR member died
  keeps it as ``[dead]`` with no leader, so a clean election waits for it;
* a returning broker brings offline partitions back; preferred-leader and unclean elections on
  request (ElectLeaders) and for imbalance (``auto.leader.rebalance.enable``);
* controlled shutdown moves leadership off a stopping broker and takes it out of the ISRs;
* reassignments (KIP-455): add the target replicas, wait for them in the ISR, move leadership,
  drop the removed replicas;
* topic deletion completes once every replica acknowledged deleting its data.

Its view of partition states is a cache refreshed from ZooKeeper whenever a conditional write
loses (a leader changed the ISR meanwhile), which is Kafka's ``updateLeaderAndIsr`` retry loop.
Watch callbacks only enqueue events; one task handles them, so controller logic is sequential.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from strata.cluster import algorithms
from strata.cluster.zk import (
    AsyncZk,
    MultiError,
    Op,
    SessionState,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkSessionExpiredError,
    ZkUnavailableError,
)
from strata.cluster.znodes import (
    BrokerIdsZNode,
    BrokerIdZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicsZNode,
    TopicZNode,
)
from strata.common import TopicPartition
from strata.config.cluster_config import ClusterConfig

log = logging.getLogger(__name__)

# Strata's controlled shutdown request: an ephemeral znode per stopping broker (Kafka 3.9 used the
# ControlledShutdown RPC, which Kafka 4 removed; ephemeral, so a broker that dies meanwhile withdraws it).
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"


class ControllerMovedError(Exception):
    """Another controller was elected: this one's writes are fenced, it must resign."""


class NotControllerError(Exception):
    pass


PREFERRED, UNCLEAN = 0, 1


@dataclass
class ControllerStats:
    active: int = 0
    offline_partitions: int = 0
    unclean_elections: int = 0
    event_queue_time_ms: float = 0.0
    events: int = 0


@dataclass
class ElectionOutcome:
    """Per partition: (error code, message) of an ElectLeaders or controlled-shutdown request."""

    results: dict[TopicPartition, tuple[int, str | None]] = field(default_factory=dict)


class KafkaController:
    def __init__(self, zk: AsyncZk, broker_id: int, config: ClusterConfig,
                 unclean_default: Callable[[], bool] | None = None) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.config = config
        self.unclean_default = unclean_default or (lambda: config.unclean_leader_election_enable)
        self.epoch = 0
        self.epoch_zk_version = -1
        self.active = False
        self.stats = ControllerStats()
        self.live: dict[int, int] = {}  # broker id -> broker epoch (czxid)
        self.shutting_down: set[int] = set()
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self._state_mzxids: dict[TopicPartition, int] = {}  # the zxid of each state's last write we read
        self._queue: asyncio.Queue[tuple[float, str, Any, asyncio.Future[Any] | None]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._watch_stops: list[Callable[[], None]] = []
        self._topic_watches: dict[str, Callable[[], None]] = {}
        self._rebalance_task: asyncio.Task[None] | None = None
        self.on_become: list[Callable[[bool], None]] = []
        self._owns_controller_znode = False
        self._deleting: set[str] = set()
        self._ack_watches: dict[str, Callable[[], None]] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._process(), name="controller-events")
        self.zk.add_state_listener(self._on_session)
        self._watch_stops.append(self.zk.watch_data(ControllerZNode.PATH, self._on_controller_znode))

    async def stop(self) -> None:
        """Resign (if active) and stop; the ephemeral znode goes with the session."""
        self._resign("shutdown")
        for stop in self._watch_stops:
            stop()
        self._watch_stops.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.active or self._owns_controller_znode:
            try:
                await self.zk.delete(ControllerZNode.PATH)
            except Exception:  # noqa: BLE001 - the session closing removes it anyway
                pass

    def _on_session(self, state: SessionState) -> None:
        if state == SessionState.LOST:
            self._resign("ZooKeeper session lost")
        elif state == SessionState.CONNECTED:
            self.enqueue("elect")

    def _on_controller_znode(self, data: bytes | None, _stat: Any) -> None:
        if data is None:
            self.enqueue("elect")
        else:
            try:
                holder = ControllerZNode.decode(data).broker_id
            except Exception:  # noqa: BLE001
                return
            if holder != self.broker_id and self.active:
                self._resign(f"broker {holder} is controller now")

    # -- events -------------------------------------------------------------------------------

    def enqueue(self, kind: str, payload: Any = None) -> None:
        self._queue.put_nowait((time.monotonic(), kind, payload, None))

    async def call(self, kind: str, payload: Any = None) -> Any:
        """Run ``kind`` on the controller task and return its result (API requests)."""
        if not self.active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((time.monotonic(), kind, payload, fut))
        return await fut

    async def _process(self) -> None:
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "elect": self._elect, "brokers": self._on_brokers, "topics": self._on_topics,
            "topic": self._on_topic_change, "deletions": self._on_deletions, "elect_leaders": self._elect_leaders,
            "controlled_shutdown": self._controlled_shutdown, "reassign": self._reassign,
            "rebalance": self._auto_rebalance, "shutdowns": self._on_shutdown_requests,
            "unclean_enabled": self._on_unclean_enabled, "reconcile": self._reconcile,
        }
        while True:
            queued_at, kind, payload, fut = await self._queue.get()
            self.stats.event_queue_time_ms = (time.monotonic() - queued_at) * 1000
            self.stats.events += 1
            if kind != "elect" and not self.active:
                if fut is not None and not fut.done():
                    fut.set_exception(NotControllerError(f"broker {self.broker_id} is not the controller"))
                continue
            try:
                result = await self.zk.retry(lambda kind=kind, payload=payload: handlers[kind](payload))
            except ControllerMovedError as e:
                self._resign(str(e))
                if fut is not None and not fut.done():
                    fut.set_exception(NotControllerError(str(e)))
                continue
            except asyncio.CancelledError:
                raise
            except (ZkUnavailableError, ZkSessionExpiredError) as e:
                # ZooKeeper away (an outage, a lost session): no bug to show a traceback for. A lost
                # session resigns and elects again by itself; an active controller retries.
                log.warning("controller event %s not completed: %s%s", kind, e,
                            "; retrying in 1s" if self.active else "")
                if fut is not None and not fut.done():
                    fut.set_exception(e)
                if self.active:
                    asyncio.get_running_loop().call_later(1.0, self.enqueue, kind, payload)
                continue
            except Exception as e:
                log.exception("controller event %s failed", kind)
                if fut is not None and not fut.done():
                    fut.set_exception(e)
                if self.active:  # try again later: ZooKeeper may be back
                    asyncio.get_running_loop().call_later(1.0, self.enqueue, kind, payload)
                continue
            if fut is not None and not fut.done():
                fut.set_result(result)

    # -- election -----------------------------------------------------------------------------

    async def _elect(self, _payload: Any = None) -> None:
        """``KafkaController.elect``: one multi creates /controller and bumps /controller_epoch."""
        if self.active:
            return
        got = await self.zk.get_or_none(ControllerZNode.PATH)
        if got is not None:
            holder = ControllerZNode.decode(got[0]).broker_id
            if holder == self.broker_id and got[1].ephemeral_owner == self.zk.session_id:
                await self.zk.delete(ControllerZNode.PATH)  # our own, from before a resignation: elect anew
            else:
                return
        epoch_node = await self.zk.get_or_none(ControllerEpochZNode.PATH)
        if epoch_node is None:
            try:
                await self.zk.create(ControllerEpochZNode.PATH,
                                     ControllerEpochZNode.encode(ControllerEpochZNode.INITIAL_EPOCH))
            except ZkNodeExistsError:
                pass
            epoch_node = await self.zk.get(ControllerEpochZNode.PATH)
        epoch, version = ControllerEpochZNode.decode(epoch_node[0]), epoch_node[1].version
        try:
            results = await self.zk.multi([
                Op.create(ControllerZNode.PATH, ControllerZNode.encode(self.broker_id, int(time.time() * 1000)),
                          ephemeral=True),
                Op.set(ControllerEpochZNode.PATH, ControllerEpochZNode.encode(epoch + 1), version),
            ])
        except MultiError as e:
            if isinstance(e.cause, (ZkNodeExistsError, ZkBadVersionError)):
                return  # another broker won this round
            raise
        self.epoch = epoch + 1
        self.epoch_zk_version = results[1].version
        self._owns_controller_znode = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        await self._on_failover()

    async def _on_failover(self) -> None:
        """``onControllerFailover``: watch, load the whole context, then make every partition right."""
        self.active = True
        self.stats.active = 1
        zk = self.zk
        self._watch_stops.append(zk.watch_children(BrokerIdsZNode.PATH, lambda _c: self.enqueue("brokers")))
        self._watch_stops.append(zk.watch_children(TopicsZNode.PATH, lambda _c: self.enqueue("topics")))
        self._watch_stops.append(zk.watch_children(DeleteTopicsZNode.PATH, lambda _c: self.enqueue("deletions")))
        await zk.ensure_path(CONTROLLED_SHUTDOWN_PATH)
        self._watch_stops.append(zk.watch_children(CONTROLLED_SHUTDOWN_PATH, lambda _c: self.enqueue("shutdowns")))
        await self._load_brokers()
        await self._load_topics()
        for fn in self.on_become:
            fn(True)
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_timer())
        for tps, bounced in self._bounces_not_handled().items():
            # The failure half of a bounce its predecessor never handled (the startup half is the pass below).
            log.info("controller: brokers %s registered again since %d partition states were written: handled "
                     "as restarted", sorted(bounced), len(tps))
            await self._reconcile(tps, not_live=bounced)
        await self._reconcile(self.states.keys() | self._all_partitions())
        await self._on_deletions(None)

    def _bounces_not_handled(self) -> dict[frozenset[TopicPartition], frozenset[int]]:
        """In-sync replicas registered again after their partition's state was last written, grouped.

        A controller that was also a leader, killed and restarted at once, is succeeded only once its old
        session expired - by then it may have registered again, so its successor finds it live and never
        sees the bounce. Its leaderships were written before its new registration, which it refuses to take
        up (its log may be shorter than what followers acknowledged meanwhile: ``cluster_member._apply``);
        the same holds for an in-sync follower that restarted unseen. Both zxids come from the one
        ZooKeeper history, so "written before the registration" is a plain comparison.
        """
        by_bounced: dict[frozenset[int], set[TopicPartition]] = {}
        for tp, state in self.states.items():
            written = self._state_mzxids.get(tp)
            if written is None:
                continue
            bounced = frozenset(r for r in state.isr if r in self.live and self.live[r] > written)
            if bounced:
                by_bounced.setdefault(bounced, set()).add(tp)
        return {frozenset(tps): bounced for bounced, tps in by_bounced.items()}

    def _resign(self, why: str) -> None:
        if not self.active:
            return
        log.info("broker %d resigns as controller: %s", self.broker_id, why)
        self.active = False
        self.stats.active = 0
        self._owns_controller_znode = False
        for stop in self._watch_stops[1:]:
            stop()
        del self._watch_stops[1:]
        for stop in self._topic_watches.values():
            stop()
        self._topic_watches.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        for fn in self.on_become:
            fn(False)

    # -- context ------------------------------------------------------------------------------

    async def _load_brokers(self) -> None:
        live = {}
        for child in await self.zk.children(BrokerIdsZNode.PATH):
            if child.isdigit():
                stat = await self.zk.exists(BrokerIdZNode.path(int(child)))
                if stat is not None:
                    live[int(child)] = stat.czxid
        self.live = live
        self.shutting_down &= set(live)

    async def _load_topics(self) -> None:
        names = set(await self.zk.children(TopicsZNode.PATH))
        for gone in set(self.assignments) - names:
            self._forget_topic(gone)
        for name in names:
            await self._load_topic(name)

    async def _load_topic(self, name: str) -> TopicAssignment | None:
        got = await self.zk.get_or_none(TopicZNode.path(name))
        if got is None:
            self._forget_topic(name)
            return None
        assignment = self.assignments[name] = TopicZNode.decode(name, got[0])
        if name not in self._topic_watches:
            self._topic_watches[name] = self.zk.watch_data(TopicZNode.path(name),
                                                           lambda _d, _s, name=name: self.enqueue("topic", name))
        for p in assignment.partitions:
            await self._read_state(TopicPartition(name, p))
        return assignment

    def observe_state(self, tp: TopicPartition, state: LeaderAndIsr | None) -> None:
        """A partition state seen in ZooKeeper (the broker's metadata watch): keep the view current.

        Leaders change ISRs themselves (``ClusterNode.write_isr``), which the controller does not
        write and would otherwise only learn of when one of its own conditional writes lost. Kafka's
        ZooKeeper controller learnt them from ``/isr_change_notification``; without them a replica
        that rejoined an ISR and then died would stay in it (the leader only drops it after
        ``replica.lag.time.max.ms``, acks=all waiting meanwhile). Only newer versions are taken:
        the controller's own writes are in the view already."""
        if state is None or tp.topic not in self.assignments:
            return
        current = self.states.get(tp)
        if current is None or state.partition_epoch > current.partition_epoch:
            self.states[tp] = state
            # A leader took a replica back into the ISR that has died again since (before this controller even
            # handled its return, so its death changed nothing in the live set it knows): take it out now.
            if self.active and self.live and any(r not in self.live for r in state.isr):
                self.enqueue("reconcile", [tp])

    def _forget_topic(self, name: str) -> None:
        self.assignments.pop(name, None)
        stop = self._topic_watches.pop(name, None)
        if stop is not None:
            stop()
        for tp in [tp for tp in self.states if tp.topic == name]:
            del self.states[tp]
            self._state_mzxids.pop(tp, None)

    async def _read_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        got = await self.zk.get_or_none(TopicPartitionStateZNode.path(tp.topic, tp.partition))
        if got is None:
            self.states.pop(tp, None)
            return None
        state = self.states[tp] = TopicPartitionStateZNode.decode(got[0], got[1].version)
        self._state_mzxids[tp] = got[1].mzxid
        return state

    def _all_partitions(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, a in self.assignments.items() for p in a.partitions}

    def _assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        a = self.assignments.get(tp.topic)
        return a.partitions.get(tp.partition) if a is not None else None

    async def _unclean_enabled(self, topic: str) -> bool:
        got = await self.zk.get_or_none(ConfigEntityZNode.topic_path(topic))
        config = ConfigEntityZNode.decode(got[0]) if got else {}
        value = config.get("unclean.leader.election.enable")
        return self.unclean_default() if value is None else value.strip().lower() == "true"

    # -- fenced writes ------------------------------------------------------------------------

    async def _fenced(self, ops: list[Op]) -> list[Any]:
        """``wrapRequestWithControllerEpochCheck``: the write happens only while we are controller.

        A controller that never won an election (or resigned) writes nothing: without an epoch
        version of its own the check would name version -1, which ZooKeeper reads as "any version"
        (Kafka's ``MatchAnyVersion``) and so would let the write through.
        """
        if not self.active or self.epoch_zk_version < 0:
            raise ControllerMovedError(f"broker {self.broker_id} is not the controller")
        try:
            results = await self.zk.multi([Op.check(ControllerEpochZNode.PATH, self.epoch_zk_version), *ops])
        except MultiError as e:
            if e.index == 0:
                raise ControllerMovedError(f"controller epoch {self.epoch} is fenced by a newer controller") from None
            raise
        return results[1:]

    async def _write_state(self, tp: TopicPartition, new: LeaderAndIsr) -> LeaderAndIsr | None:
        """Conditional update of a state znode; None when it lost (caller re-reads and decides again)."""
        new = new.with_controller_epoch(self.epoch)
        path = TopicPartitionStateZNode.path(tp.topic, tp.partition)
        try:
            (stat,) = await self._fenced([Op.set(path, TopicPartitionStateZNode.encode(new), new.partition_epoch)])
        except MultiError as e:
            if isinstance(e.cause, (ZkBadVersionError, ZkNoNodeError)):
                await self._read_state(tp)
                return None
            raise
        written = self.states[tp] = new.with_partition_epoch(stat.version)
        return written

    async def _update(self, tp: TopicPartition, decide: Callable[[LeaderAndIsr], LeaderAndIsr | None],
                      attempts: int = 10) -> LeaderAndIsr | None:
        """Decide from the cached state and write; on a lost race re-read and decide again."""
        for _ in range(attempts):
            state = self.states.get(tp)
            if state is None:
                return None
            new = decide(state)
            if new is None:
                return None
            written = await self._write_state(tp, new)
            if written is not None:
                return written
        log.warning("%s: gave up updating the state after %d conflicting writes", tp, attempts)
        return None

    # -- reconciliation -------------------------------------------------------------------------

    async def _reconcile(self, tps: Iterable[TopicPartition], not_live: Iterable[int] = ()) -> None:
        """Bring each partition to a state consistent with the live brokers (idempotent); brokers in
        ``not_live`` are handled as if they were not (the failure half of a bounce)."""
        live = set(self.live) - self.shutting_down - set(not_live)
        for tp in sorted(tps):
            assignment = self._assignment(tp)
            if assignment is None:
                continue
            if tp.topic in self._deleting:
                continue
            state = self.states.get(tp)
            if state is None:
                await self._initialize(tp, assignment, live)
                continue
            # Replicas that are not live leave the ISR (the leader among them loses leadership). The dead
            # first, the bounced ones (live, in ``not_live``) after them, the leader last: the member an
            # offline partition keeps is the one that can lead again at the startup half of a bounce -
            # Kafka's bounced leader whose other in-sync replicas are dead leads again, as the only choice.
            gone = [r for r in state.isr if r not in live and r not in self.shutting_down]
            for dead in sorted(gone, key=lambda r, s=state: (r in self.live, r == s.leader)):
                await self._update(tp, lambda s, dead=dead: _remove_from_isr(s, dead))
            state = self.states.get(tp)
            if state is None:
                continue
            if state.leader not in live or state.leader == LeaderAndIsr.NO_LEADER:
                unclean = await self._unclean_enabled(tp.topic)
                target = assignment.replicas  # Kafka: the full list, replicas being removed included
                await self._update(tp, lambda s, unclean=unclean, target=target: self._offline_election(
                    s, target, live, unclean))
        self.stats.offline_partitions = sum(1 for s in self.states.values() if not s.has_leader)

    async def _on_unclean_enabled(self, topic: str | None) -> None:
        """Kafka's ``TopicUncleanLeaderElectionEnable`` (``topic``) and ``enableDefaultUncleanLeaderElection``
        (None): unclean election was just turned on, so the offline partitions it now lets an out-of-sync replica
        lead elect at once, not at the next broker change."""
        offline = [tp for tp, state in self.states.items()
                   if (topic is None or tp.topic == topic) and (not state.has_leader or state.leader not in self.live)]
        if offline:
            log.info("unclean.leader.election.enable turned on%s: electing %d offline partition(s)",
                     f" for {topic}" if topic else " (broker default)", len(offline))
            await self._reconcile(offline)

    def _offline_election(self, state: LeaderAndIsr, assignment: tuple[int, ...], live: set[int],
                          unclean: bool) -> LeaderAndIsr | None:
        if state.has_leader and state.leader in live:
            return None
        result = algorithms.leader_for_offline(state, assignment, live, unclean)
        if result.leader_and_isr is None:
            return None
        if result.unclean:
            self.stats.unclean_elections += 1
            log.warning("unclean leader election: broker %d leads with ISR %s (acknowledged records only the old "
                        "ISR %s had are lost)", result.leader_and_isr.leader, list(result.leader_and_isr.isr),
                        list(state.isr))
        return result.leader_and_isr

    async def _initialize(self, tp: TopicPartition, assignment: ReplicaAssignment, live: set[int]) -> None:
        state = algorithms.initial_leader_and_isr(assignment.replicas, live, self.epoch)
        if state is None:
            log.warning("%s: no replica of %s is live; the partition stays offline", tp, list(assignment.replicas))
            return
        parent = TopicZNode.partition_path(tp.topic, tp.partition)
        await self.zk.ensure_path(parent)
        path = TopicPartitionStateZNode.path(tp.topic, tp.partition)
        try:
            await self._fenced([Op.create(path, TopicPartitionStateZNode.encode(state))])
        except MultiError as e:
            if not isinstance(e.cause, ZkNodeExistsError):
                raise
        await self._read_state(tp)

    # -- event handlers -------------------------------------------------------------------------

    async def _on_brokers(self, _payload: Any) -> None:
        before = dict(self.live)
        await self._load_brokers()
        dead = {b for b in before if b not in self.live}
        bounced = {b for b in before if b in self.live and self.live[b] != before[b]}
        new = {b for b in self.live if b not in before}
        if dead or bounced or new:
            log.info("controller: brokers %s (new %s, gone %s, restarted %s)", sorted(self.live), sorted(new),
                     sorted(dead), sorted(bounced))
        self.shutting_down -= dead | bounced
        # A broker registered again without its failure having been handled: bounced (a new broker epoch
        # under the same id), or new here yet still leading (this controller never saw it go). It may
        # have come back with less than it had (a fast restart on an empty disk), so it must neither
        # keep leading nor count as in sync. (A new broker merely in an ISR is not one of them: a
        # leader may have taken it back in before this event was handled.)
        restarted = bounced | {b for b in new if any(b == s.leader for s in self.states.values())}
        affected = {tp for tp, s in self.states.items() if set(s.isr) & (dead | restarted)
                    or s.leader in dead | restarted or not s.has_leader}
        affected |= {tp for tp in self._all_partitions() if tp not in self.states}
        if restarted:
            # Kafka's processBrokerChange: a bounced broker is a failure followed by a startup. Failure:
            # its leaderships move to other in-sync replicas and it leaves the ISRs (a last member stays,
            # without leader); startup (the pass below): it leads again only where it is the only choice,
            # and rejoins the other ISRs once it has caught up.
            await self._reconcile(affected, not_live=restarted)
        await self._reconcile(affected)
        await self._on_deletions(None)

    async def _on_topics(self, _payload: Any) -> None:
        before = set(self.assignments)
        await self._load_topics()
        new = set(self.assignments) - before
        if new:
            await self._reconcile({tp for tp in self._all_partitions() if tp.topic in new})

    async def _on_topic_change(self, topic: str) -> None:
        """PartitionModifications: new partitions, or a reassignment's progress."""
        assignment = await self._load_topic(topic)
        if assignment is None:
            return
        await self._reconcile({TopicPartition(topic, p) for p in assignment.partitions})
        if any(a.is_being_reassigned for a in assignment.partitions.values()):
            await self._continue_reassignment(topic)

    # -- elections on request -----------------------------------------------------------------

    async def _elect_leaders(self, payload: tuple[int, list[TopicPartition]]) -> ElectionOutcome:
        """ElectLeaders: PREFERRED moves leadership to the first replica if it is live and in the ISR;
        UNCLEAN elects any live replica when no ISR member is live (Kafka's error codes per partition)."""
        kind, tps = payload
        live = set(self.live) - self.shutting_down
        out = ElectionOutcome()
        for tp in tps:
            assignment = self._assignment(tp)
            state = await self._read_state(tp) if assignment is not None else None
            if assignment is None or state is None:
                out.results[tp] = (3, f"The partition {tp} does not exist.")  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            replicas = assignment.target_replicas
            if kind == PREFERRED:
                if state.leader == replicas[0]:
                    out.results[tp] = (84, None)  # ELECTION_NOT_NEEDED
                    continue
                written = await self._update(tp, lambda s, replicas=replicas: algorithms.leader_for_preferred_replica(
                    s, replicas, live).leader_and_isr if s.leader != replicas[0] else None)
                if written is None or written.leader != replicas[0]:
                    out.results[tp] = (80, f"Failed to elect leader for partition {tp} under strategy "
                                           "PreferredReplicaPartitionLeaderElectionStrategy")
                    continue
            else:
                if state.has_leader and state.leader in live:
                    out.results[tp] = (84, None)
                    continue
                written = await self._update(tp, lambda s, replicas=replicas: self._offline_election(
                    s, replicas, live, True))
                if written is None:
                    out.results[tp] = (83, f"Failed to elect leader for partition {tp} under strategy "
                                           "UncleanLeaderElectionStrategy")
                    continue
            out.results[tp] = (0, None)
        return out

    async def _on_shutdown_requests(self, _payload: Any) -> None:
        for child in await self.zk.children(CONTROLLED_SHUTDOWN_PATH):
            if child.isdigit() and int(child) in self.live and int(child) not in self.shutting_down:
                await self._controlled_shutdown(int(child))

    async def _controlled_shutdown(self, broker_id: int) -> list[TopicPartition]:
        """Move leadership off ``broker_id`` and take it out of the ISRs; returns the partitions it still
        leads (those without another ISR member: they go offline with the broker, as in Kafka)."""
        if broker_id not in self.live:
            return []
        self.shutting_down.add(broker_id)
        live_or_stopping = set(self.live)
        remaining = []
        for tp, state in sorted(self.states.items()):
            assignment = self._assignment(tp)
            if assignment is None or broker_id not in assignment.replicas:
                continue
            if state.leader == broker_id:
                if len(assignment.replicas) <= 1:
                    remaining.append(tp)
                    continue
                replicas = assignment.replicas

                def move(s: LeaderAndIsr, replicas: tuple[int, ...] = replicas) -> LeaderAndIsr | None:
                    if s.leader != broker_id:
                        return None
                    return algorithms.leader_for_controlled_shutdown(
                        s, replicas, live_or_stopping, self.shutting_down).leader_and_isr

                written = await self._update(tp, move)
                if written is None or written.leader == broker_id:
                    remaining.append(tp)
            elif broker_id in state.isr and len(state.isr) > 1:
                await self._update(tp, lambda s: s.new_leader_and_isr(s.leader, [r for r in s.isr if r != broker_id])
                                   if broker_id in s.isr and len(s.isr) > 1 and s.leader != broker_id else None)
        log.info("controlled shutdown of broker %d: %d partitions still led by it", broker_id, len(remaining))
        return remaining

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_ms / 1000)
            self.enqueue("rebalance")

    async def _auto_rebalance(self, _payload: Any = None) -> None:
        """``checkAndTriggerAutoLeaderRebalance``: preferred elections for brokers whose share of
        partitions not led by them exceeds ``leader.imbalance.per.broker.percentage``."""
        live = set(self.live) - self.shutting_down
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self._all_partitions():
            a = self._assignment(tp)
            if a is not None and a.replicas and tp.topic not in self._deleting and not a.is_being_reassigned:
                by_preferred.setdefault(a.replicas[0], []).append(tp)
        todo = []
        for broker, tps in by_preferred.items():
            if broker not in live:
                continue
            imbalanced = [tp for tp in tps if (s := self.states.get(tp)) is not None and s.leader != broker]
            if tps and len(imbalanced) * 100 / len(tps) > self.config.leader_imbalance_per_broker_percentage:
                todo += [tp for tp in imbalanced if broker in self.states[tp].isr]
        if todo:
            log.info("auto leader rebalance: preferred election for %d partitions", len(todo))
            await self._elect_leaders((PREFERRED, todo))

    # -- reassignment (KIP-455) ---------------------------------------------------------------

    async def _reassign(self, payload: dict[TopicPartition, list[int] | None]
                        ) -> dict[TopicPartition, tuple[int, str | None]]:
        """AlterPartitionReassignments: write the target into the topic znode; the rest follows from
        the topic's data watch (``_continue_reassignment``). None cancels a reassignment."""
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        by_topic: dict[str, dict[int, list[int] | None]] = {}
        for tp, target in payload.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = target
        for topic, targets in by_topic.items():
            assignment = await self._load_topic(topic)
            if assignment is None:
                for p in targets:
                    results[TopicPartition(topic, p)] = (3, "The partition does not exist.")
                continue
            partitions = dict(assignment.partitions)
            for p, target in targets.items():
                tp = TopicPartition(topic, p)
                current = partitions.get(p)
                if current is None:
                    results[tp] = (3, "The partition does not exist.")
                elif target is None:
                    if not current.is_being_reassigned:
                        results[tp] = (85, "No reassignment in progress")  # NO_REASSIGNMENT_IN_PROGRESS
                        continue
                    partitions[p] = ReplicaAssignment(current.origin_replicas)
                    results[tp] = (0, None)
                elif not target or len(set(target)) != len(target):
                    results[tp] = (39, f"The proposed replica assignment {target} is invalid")
                elif not set(target) <= set(self.live):
                    results[tp] = (39, f"The proposed replica assignment {target} contains brokers that are "
                                       f"not live: {sorted(set(target) - set(self.live))}")
                else:
                    partitions[p] = current.reassign_to(target)
                    results[tp] = (0, None)
            if partitions != dict(assignment.partitions):
                await self._fenced([Op.set(TopicZNode.path(topic), TopicZNode.encode(assignment.topic_id, partitions))])
                await self._load_topic(topic)
                # Kafka's onPartitionReassignment bumps the leader epoch with the new replica set, so
                # every replica (the new ones included) re-reads the partition with its new assignment.
                for p in targets:
                    tp = TopicPartition(topic, p)
                    if tp in self.states and results.get(tp, (1, None))[0] == 0:
                        await self._update(tp, lambda s: s.new_epoch())
                await self._continue_reassignment(topic)
        return results

    async def _continue_reassignment(self, topic: str) -> None:
        """Kafka's ``onPartitionReassignment`` stages for every moving partition of ``topic``: the new
        replicas start as followers (they are in the assignment, so they fetch); once all of them are
        in the ISR, leadership moves into the target set if needed, the removed replicas leave the ISR
        and the assignment becomes the target."""
        assignment = await self._load_topic(topic)
        if assignment is None:
            return
        partitions = dict(assignment.partitions)
        live = set(self.live) - self.shutting_down
        changed = False
        for p, a in assignment.partitions.items():
            if not a.is_being_reassigned:
                continue
            tp = TopicPartition(topic, p)
            state = self.states.get(tp) or await self._read_state(tp)
            if state is None:
                continue
            target = a.target_replicas
            if not set(target) <= set(state.isr):
                continue  # still catching up; the ISR change re-triggers through the broker's state watch
            if state.leader not in target or state.leader not in live:
                written = await self._update(tp, lambda s, target=target: algorithms.leader_for_reassign(
                    s, target, live).leader_and_isr)
                if written is None:
                    continue
            await self._update(tp, lambda s, target=target: s.new_leader_and_isr(
                s.leader, [r for r in s.isr if r in target]) if set(s.isr) - set(target) else None)
            partitions[p] = ReplicaAssignment(target)
            changed = True
            log.info("%s: reassignment to %s complete", tp, list(target))
        if changed:
            await self._fenced([Op.set(TopicZNode.path(topic), TopicZNode.encode(assignment.topic_id, partitions))])
            await self._load_topic(topic)

    def reassignment_progress(self, tp: TopicPartition) -> None:
        """A partition state changed (e.g. its ISR grew): a reassignment may be able to move on."""
        a = self._assignment(tp)
        if self.active and a is not None and a.is_being_reassigned:
            self.enqueue("topic", tp.topic)

    # -- topic deletion -----------------------------------------------------------------------

    async def _on_deletions(self, _payload: Any) -> None:
        """``TopicDeletionManager``: a requested deletion completes when every replica acknowledged
        (brokers delete their data on seeing the request and create ``/admin/delete_topics/<t>/<id>``);
        replicas on dead brokers hold it until they return, as in Kafka."""
        names = await self.zk.children(DeleteTopicsZNode.PATH)
        self._deleting = set(names)
        for topic in names:
            assignment = self.assignments.get(topic) or await self._load_topic(topic)
            acks = {int(c) for c in await self.zk.children(DeleteTopicsZNode.path(topic)) if c.isdigit()}
            if assignment is not None:
                replicas = {r for a in assignment.partitions.values() for r in a.replicas}
                if not replicas <= acks:
                    for child in [str(r) for r in replicas - acks]:
                        self._watch_deletion_ack(topic, child)
                    continue
            await self._complete_deletion(topic, assignment)

    def _watch_deletion_ack(self, topic: str, _child: str) -> None:
        if topic not in self._ack_watches:
            self._ack_watches[topic] = self.zk.watch_children(DeleteTopicsZNode.path(topic),
                                                              lambda _c: self.enqueue("deletions"))

    async def _complete_deletion(self, topic: str, assignment: TopicAssignment | None) -> None:
        ops: list[Op] = []
        if assignment is not None:
            for p in assignment.partitions:
                state = TopicPartitionStateZNode.path(topic, p)
                if await self.zk.exists(state) is not None:
                    ops.append(Op.delete(state))
                if await self.zk.exists(TopicZNode.partition_path(topic, p)) is not None:
                    ops.append(Op.delete(TopicZNode.partition_path(topic, p)))
            if await self.zk.exists(TopicZNode.partitions_path(topic)) is not None:
                ops.append(Op.delete(TopicZNode.partitions_path(topic)))
            ops.append(Op.delete(TopicZNode.path(topic)))
        if await self.zk.exists(ConfigEntityZNode.topic_path(topic)) is not None:
            ops.append(Op.delete(ConfigEntityZNode.topic_path(topic)))
        for child in await self.zk.children(DeleteTopicsZNode.path(topic)):
            ops.append(Op.delete(f"{DeleteTopicsZNode.path(topic)}/{child}"))
        ops.append(Op.delete(DeleteTopicsZNode.path(topic)))
        await self._fenced(ops)
        stop = self._ack_watches.pop(topic, None)
        if stop is not None:
            stop()
        self._forget_topic(topic)
        self._deleting.discard(topic)
        log.info("topic %s deleted", topic)


def _remove_from_isr(state: LeaderAndIsr, replica: int) -> LeaderAndIsr | None:
    """``remove_replica_from_isr``, but nothing to write when nothing changes: an offline partition keeps
    its last ISR member (leader -1, ISR [dead]), and bumping its leader epoch again at every broker
    change (or controller failover) would only churn the state znode."""
    new = algorithms.remove_replica_from_isr(state, replica)
    if new is not None and new.leader == state.leader and new.isr == state.isr:
        return None
    return new
