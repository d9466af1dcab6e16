"""The metadata cache: every broker's mirror of the cluster state in ZooKeeper.

Kafka's ZooKeeper-mode brokers were told the state by the controller (LeaderAndIsr and
UpdateMetadata requests). Strata's brokers *watch* it instead (replication reference 2.2): a
kazoo TreeCache mirrors ``/brokers`` (registrations, topic assignments, partition states), and
two more mirror ``/config/topics`` and ``/admin/delete_topics``. Brokers thus only ever see
committed, epoch-fenced state, no stale-controller message can reach them, and a controller
failover has no "resend everything" phase; the price is P x B watches, fine up to thousands of
partitions. The ordering that matters is per partition and is carried by the leader epoch and
the partition epoch (the state znode's version), which :mod:`strata.replication.partition` checks.

Changes are delivered to listeners on the event loop, one callback per changed znode, after the
cache itself was updated, so a listener may read the whole cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from strata.cluster.zk import AsyncZk, ZnodeStat
from strata.cluster.znodes import (
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerRegistration,
    ConfigEntityZNode,
    ControllerZNode,
    DeleteTopicsZNode,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicsZNode,
    TopicZNode,
    ZNodeDecodeError,
)
from strata.common import TopicPartition

log = logging.getLogger(__name__)

TOPIC_CONFIGS_PATH = ConfigEntityZNode.type_path("topics")


@dataclass
class MetadataListener:
    """Callbacks a broker registers; each runs on the event loop after the cache changed."""

    brokers_changed: Callable[[], None] = lambda: None
    controller_changed: Callable[[int], None] = lambda _id: None
    topic_changed: Callable[[str, TopicAssignment | None], None] = lambda _t, _a: None
    partition_state_changed: Callable[[TopicPartition, LeaderAndIsr | None], None] = lambda _tp, _s: None
    topic_config_changed: Callable[[str, dict[str, str] | None], None] = lambda _t, _c: None
    deletion_requested: Callable[[str, frozenset[int]], None] = lambda _t, _acks: None


@dataclass
class MetadataCache:
    zk: AsyncZk
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    state_mzxids: dict[TopicPartition, int] = field(default_factory=dict)  # when each state was written
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    deleting: dict[str, frozenset[int]] = field(default_factory=dict)
    listeners: list[MetadataListener] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stops: list[Callable[[], None]] = []
        self._initialized: dict[str, asyncio.Event] = {}

    # -- queries ------------------------------------------------------------------------------

    def partitions_of(self, topic: str) -> int:
        assignment = self.topics.get(topic)
        return len(assignment.partitions) if assignment else 0

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        assignment = self.topics.get(tp.topic)
        return assignment.replicas(tp.partition) if assignment else ()

    def leader(self, tp: TopicPartition) -> int:
        state = self.states.get(tp)
        return state.leader if state is not None else -1

    def live_brokers(self) -> list[int]:
        return sorted(self.brokers)

    def endpoint(self, broker_id: int, listener: str = "PLAINTEXT") -> tuple[str, int] | None:
        reg = self.brokers.get(broker_id)
        ep = reg.endpoint(listener) if reg is not None else None
        if ep is None:
            return None
        return (ep.host or "127.0.0.1", ep.port)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, timeout_s: float = 30.0) -> None:
        """Mirror the state; returns once every znode present now has been delivered."""
        zk = self.zk
        for path in (BrokerIdsZNode.PATH, TopicsZNode.PATH, TOPIC_CONFIGS_PATH, DeleteTopicsZNode.PATH):
            await zk.ensure_path(path)
        for root, handler in (("/brokers", self._on_brokers_event), (TOPIC_CONFIGS_PATH, self._on_config_event),
                              (DeleteTopicsZNode.PATH, self._on_delete_event)):
            done = self._initialized[root] = asyncio.Event()
            self._stops.append(zk.tree_cache(root, self._tracking(root, handler)))
        self._stops.append(zk.watch_data(ControllerZNode.PATH, self._on_controller))
        async with asyncio.timeout(timeout_s):
            for done in self._initialized.values():
                await done.wait()

    def _tracking(self, root: str, handler: Callable[[str, str, bytes | None, ZnodeStat | None], None]
                  ) -> Callable[[str, str, bytes | None, ZnodeStat | None], None]:
        def on_event(kind: str, path: str, data: bytes | None, stat: ZnodeStat | None) -> None:
            if kind == "initialized":
                self._initialized[root].set()
                return
            if kind == "lost":  # stale until read again on the new session
                self._initialized[root].clear()
                return
            try:
                handler(kind, path, data, stat)
            except ZNodeDecodeError as e:
                log.error("ignoring unreadable znode %s: %s", path, e)
        return on_event

    @property
    def synced(self) -> bool:
        """Every mirrored tree has been read on the current session (False after a session loss
        until the trees were read again: changes made meanwhile were not watched)."""
        return bool(self._initialized) and all(e.is_set() for e in self._initialized.values())

    def mark_stale(self) -> None:
        """The session expired: until every tree was read again on the new session, the mirror may
        miss changes (each tree's cache reports the loss too; this closes the window before it does)."""
        for done in self._initialized.values():
            done.clear()

    async def wait_synced(self, timeout_s: float) -> bool:
        """Wait until :attr:`synced`; False after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                for done in self._initialized.values():
                    await done.wait()
        except TimeoutError:
            return False
        return True

    def stop(self) -> None:
        for stop in self._stops:
            try:
                stop()
            except Exception:  # noqa: BLE001 - closing a cache of a closed client
                pass
        self._stops.clear()

    # -- events -------------------------------------------------------------------------------

    def _on_controller(self, data: bytes | None, _stat: ZnodeStat | None) -> None:
        new = -1
        if data:
            try:
                new = ControllerZNode.decode(data).broker_id
            except ZNodeDecodeError as e:
                log.error("unreadable /controller: %s", e)
        if new != self.controller_id:
            self.controller_id = new
            for listener in self.listeners:
                listener.controller_changed(new)

    def _on_brokers_event(self, kind: str, path: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        parts = path.strip("/").split("/")  # brokers, ids|topics, ...
        if len(parts) == 3 and parts[1] == "ids" and parts[2].isdigit():
            broker_id = int(parts[2])
            if kind == "removed":
                self.brokers.pop(broker_id, None)
            elif data is not None:
                self.brokers[broker_id] = BrokerIdZNode.decode(broker_id, data, stat.czxid if stat else -1)
            for listener in self.listeners:
                listener.brokers_changed()
        elif len(parts) == 3 and parts[1] == "topics":
            topic = parts[2]
            assignment = None
            if kind == "removed":
                self.topics.pop(topic, None)
                for tp in [tp for tp in self.states if tp.topic == topic]:
                    del self.states[tp]
            elif data is not None:
                assignment = self.topics[topic] = TopicZNode.decode(topic, data)
            for listener in self.listeners:
                listener.topic_changed(topic, assignment)
        elif len(parts) == 6 and parts[1] == "topics" and parts[3] == "partitions" and parts[5] == "state":
            tp = TopicPartition(parts[2], int(parts[4]))
            state = None
            if kind == "removed":
                self.states.pop(tp, None)
                self.state_mzxids.pop(tp, None)
            elif data is not None and stat is not None:
                state = self.states[tp] = TopicPartitionStateZNode.decode(data, stat.version)
                self.state_mzxids[tp] = stat.mzxid
            for listener in self.listeners:
                listener.partition_state_changed(tp, state)

    def _on_config_event(self, kind: str, path: str, data: bytes | None, _stat: ZnodeStat | None) -> None:
        if path.rstrip("/") == TOPIC_CONFIGS_PATH:
            return
        topic = path.rsplit("/", 1)[1]
        config = None
        if kind == "removed":
            self.topic_configs.pop(topic, None)
        else:
            config = self.topic_configs[topic] = ConfigEntityZNode.decode(data)
        for listener in self.listeners:
            listener.topic_config_changed(topic, config)

    def _on_delete_event(self, kind: str, path: str, _data: bytes | None, _stat: ZnodeStat | None) -> None:
        rest = path[len(DeleteTopicsZNode.PATH):].strip("/")
        if not rest:
            return
        topic, _, broker = rest.partition("/")
        if kind == "removed" and not broker:
            self.deleting.pop(topic, None)
            return
        acks = set(self.deleting.get(topic, frozenset()))
        if broker.isdigit():
            (acks.discard if kind == "removed" else acks.add)(int(broker))
        self.deleting[topic] = frozenset(acks)
        for listener in self.listeners:
            listener.deletion_requested(topic, self.deleting[topic])
