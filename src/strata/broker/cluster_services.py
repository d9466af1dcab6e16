"""What handlers ask about the cluster, and how they change topics: one interface, two worlds.

:class:`ClusterView` answers "which brokers, which controller, who leads this partition" and
:class:`TopicAdmin` creates, deletes, grows and reconfigures topics. A single node answers from
itself and changes its local registry synchronously; a cluster node answers from its ZooKeeper
metadata cache and writes Kafka's znodes, then waits (bounded) until the change reached this
broker's own view, so a client that asks the same broker right after sees what it did.
Handlers never branch on the mode: they hold one of each (the narrow services the layering asks
for, instead of reaching into the ``Broker`` object).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from strata.broker.topics import validate_topic_name
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode

if TYPE_CHECKING:
    from strata.broker.topics import TopicInfo, TopicRegistry
    from strata.cluster.node import ClusterNode
    from strata.config import LogConfig
    from strata.replication.replica_manager import ReplicaManager

PROPAGATION_TIMEOUT_S = 10.0


class LocalTopics(Protocol):
    """What the single-node view and the topic admins need of their broker: its id and address, its topic
    registry and replicas, and the local steps that create, delete, grow and reconfigure a topic (in a
    cluster they run when the controller's decision reaches this broker)."""

    node_id: int
    topics: TopicRegistry
    replicas: ReplicaManager

    def broker_entry(self, listener: str | None = None) -> dict[str, Any]: ...
    def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                     topic_id: uuid.UUID | None = None) -> TopicInfo: ...
    def delete_topic(self, name: str) -> TopicInfo: ...
    def add_partitions(self, name: str, count: int) -> TopicInfo: ...
    async def topic_changed(self, info: TopicInfo, deleted: bool = False) -> None:
        """After a create, grow or delete: the diskless coordinator learns the partitions (or forgets them)."""
    def set_topic_configs(self, name: str, overrides: dict[str, str]) -> LogConfig: ...


@dataclass(frozen=True)
class PartitionView:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


class ClusterView(Protocol):
    """``listener``: whose addresses to give (the listener a client came in on; None: the inter-broker one)."""

    def brokers(self, listener: str | None = None) -> list[dict[str, Any]]: ...
    def controller_id(self) -> int: ...
    def partition(self, topic: str, partition: int) -> PartitionView: ...
    def broker(self, node_id: int, listener: str | None = None) -> dict[str, Any] | None: ...


class TopicAdmin(Protocol):
    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str], assignment: Mapping[int, Sequence[int]] | None = None,
                           topic_id: uuid.UUID | None = None, initial_leader_epoch: int = 0) -> TopicInfo: ...
    async def delete_topic(self, name: str, timeout_s: float) -> None: ...
    async def add_partitions(self, name: str, count: int, assignment: Sequence[Sequence[int]] | None) -> None: ...
    async def set_topic_configs(self, name: str, overrides: dict[str, str]) -> None: ...
    def max_replication_factor(self) -> int: ...
    async def elect_leaders(self, election_type: int, tps: list[TopicPartition]) -> dict[TopicPartition, Result]: ...
    async def alter_reassignments(self, targets: dict[TopicPartition, list[int] | None]
                                  ) -> dict[TopicPartition, Result]: ...
    def reassignments(self) -> dict[TopicPartition, Reassignment]: ...


Result = tuple[int, str | None]  # (error code, message) of one partition


@dataclass(frozen=True)
class Reassignment:
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


# -- a single node ----------------------------------------------------------------------------------


class SingleNodeView:
    def __init__(self, broker: LocalTopics) -> None:
        self._broker = broker

    def brokers(self, listener: str | None = None) -> list[dict[str, Any]]:
        return [self._broker.broker_entry(listener)]

    def broker(self, node_id: int, listener: str | None = None) -> dict[str, Any] | None:
        entry = self._broker.broker_entry(listener)
        return entry if node_id == entry["node_id"] else None

    def controller_id(self) -> int:
        return self._broker.node_id

    def partition(self, topic: str, partition: int) -> PartitionView:
        node = self._broker.node_id
        return PartitionView(node, self._broker.replicas.leader_epoch_of(topic, partition), (node,), (node,), ())


class LocalTopicAdmin:
    def __init__(self, broker: LocalTopics) -> None:
        self._broker = broker

    def max_replication_factor(self) -> int:
        return 1

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str], assignment: Mapping[int, Sequence[int]] | None = None,
                           topic_id: uuid.UUID | None = None, initial_leader_epoch: int = 0) -> TopicInfo:
        # (a single node moves a restored partition's epoch up once its log is restored: initial_leader_epoch
        # is for a cluster's controller)
        info = self._broker.create_topic(name, partitions, dict(configs), topic_id=topic_id)
        await self._broker.topic_changed(info)
        return info

    async def delete_topic(self, name: str, timeout_s: float) -> None:
        await self._broker.topic_changed(self._broker.delete_topic(name), deleted=True)

    async def add_partitions(self, name: str, count: int, assignment: Sequence[Sequence[int]] | None) -> None:
        old = self._broker.topics.get(name)
        first_new = old.partitions if old is not None else 0
        await self._broker.topic_changed(self._broker.add_partitions(name, count), first_new=first_new)

    async def set_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        self._broker.set_topic_configs(name, overrides)

    async def elect_leaders(self, election_type: int, tps: list[TopicPartition]) -> dict[TopicPartition, Result]:
        """One replica is always the preferred leader and in sync: nothing to elect."""
        return {tp: (ErrorCode.ELECTION_NOT_NEEDED, None) if self._exists(tp)
                else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The partition {tp} does not exist.") for tp in tps}

    async def alter_reassignments(self, targets: dict[TopicPartition, list[int] | None]
                                  ) -> dict[TopicPartition, Result]:
        node = self._broker.node_id
        out: dict[TopicPartition, Result] = {}
        for tp, target in targets.items():
            if not self._exists(tp):
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The partition {tp} does not exist.")
            elif target is None:
                out[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment in progress")
            elif list(target) != [node]:
                out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The proposed replica assignment {list(target)} names brokers that are not registered "
                           f"(this cluster has 1 broker: {node})")
            else:
                out[tp] = (ErrorCode.NONE, None)
        return out

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        return {}

    def _exists(self, tp: TopicPartition) -> bool:
        info = self._broker.topics.get(tp.topic)
        return info is not None and 0 <= tp.partition < info.partitions


# -- a cluster node ---------------------------------------------------------------------------------


class ZkClusterView:
    def __init__(self, node: ClusterNode) -> None:
        self._node = node

    def brokers(self, listener: str | None = None) -> list[dict[str, Any]]:
        return [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in self._node.brokers(listener)]

    def broker(self, node_id: int, listener: str | None = None) -> dict[str, Any] | None:
        return next((b for b in self.brokers(listener) if b["node_id"] == node_id), None)

    def controller_id(self) -> int:
        return self._node.controller_id()

    def partition(self, topic: str, partition: int) -> PartitionView:
        cache = self._node.metadata
        tp = TopicPartition(topic, partition)
        replicas = cache.replicas(tp)
        state = cache.states.get(tp)
        live = cache.brokers
        offline = tuple(r for r in replicas if r not in live)
        if state is None:
            return PartitionView(-1, -1, replicas, (), offline)
        moved = self._node.peer_states.get(tp)
        if moved is not None and moved.leader_epoch > state.leader_epoch:
            # cut off from ZooKeeper, this broker learnt from its peers who leads now: clients go there
            return PartitionView(moved.leader, moved.leader_epoch, replicas, moved.isr, offline)
        leader = state.leader if state.leader in live else -1
        if leader == self._node.broker_id and not self._node.leadership_confirmed:
            leader = -1  # cut off from ZooKeeper: another broker may lead now; clients ask again elsewhere
        return PartitionView(leader, state.leader_epoch, replicas, state.isr, offline)


class ZkTopicAdmin:
    def __init__(self, broker: LocalTopics, node: ClusterNode) -> None:
        self._broker = broker
        self._node = node

    def max_replication_factor(self) -> int:
        return len(self._node.metadata.brokers)

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str], assignment: Mapping[int, Sequence[int]] | None = None,
                           topic_id: uuid.UUID | None = None, initial_leader_epoch: int = 0) -> TopicInfo:
        validate_topic_name(name)  # Metadata's auto-create comes here unchecked (a single node's registry checks)
        collision = self._broker.topics.colliding_topic(name)
        if collision is not None:
            raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                           f"Topic '{name}' collides with existing topic: {collision}")
        node = self._node
        plan = node.assignment_for(partitions, replication_factor, assignment)
        topic_id = await node.create_topic(name, plan, configs, topic_id=topic_id,
                                           initial_leader_epoch=initial_leader_epoch)
        topics = self._broker.topics

        def visible() -> bool:
            info = topics.get(name)
            cache = node.metadata
            return info is not None and info.topic_id == topic_id and all(
                TopicPartition(name, p) in cache.states for p in range(len(plan)))

        await node.wait_for(visible, PROPAGATION_TIMEOUT_S)
        info = topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, f"Topic '{name}' was created but has not reached this "
                                                        "broker yet")
        await self._broker.topic_changed(info)
        return info

    async def delete_topic(self, name: str, timeout_s: float) -> None:
        """Kafka answers once the topic is gone everywhere, or REQUEST_TIMED_OUT (the deletion goes on)."""
        info = self._broker.topics.get(name)
        await self._node.delete_topic(name)
        if info is not None:
            await self._broker.topic_changed(info, deleted=True)
        cache = self._node.metadata
        if not await self._node.wait_for(lambda: name not in cache.topics, timeout_s):
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT,
                           f"Deletion of topic '{name}' is in progress (a replica's broker may be down)")

    async def add_partitions(self, name: str, count: int, assignment: Sequence[Sequence[int]] | None) -> None:
        old = self._broker.topics.get(name)
        first_new = old.partitions if old is not None else 0
        await self._node.add_partitions(name, count, assignment)
        cache = self._node.metadata
        await self._node.wait_for(lambda: all(TopicPartition(name, p) in cache.states for p in range(count)),
                                  PROPAGATION_TIMEOUT_S)
        info = self._broker.topics.get(name)
        if info is not None:
            await self._broker.topic_changed(info, first_new=first_new)

    async def elect_leaders(self, election_type: int, tps: list[TopicPartition]) -> dict[TopicPartition, Result]:
        """Run by the controller (Kafka sends ElectLeaders there): NOT_CONTROLLER elsewhere, and the
        admin client asks the controller the metadata names."""
        outcome = await self._controller_call("elect_leaders", (election_type, tps))
        return {tp: (code, message) for tp, (code, message) in outcome.results.items()}

    async def alter_reassignments(self, targets: dict[TopicPartition, list[int] | None]
                                  ) -> dict[TopicPartition, Result]:
        return await self._controller_call("reassign", targets)

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        out = {}
        for topic, assignment in self._node.metadata.topics.items():
            for p, a in assignment.partitions.items():
                if a.is_being_reassigned:
                    out[TopicPartition(topic, p)] = Reassignment(a.replicas, a.adding_replicas, a.removing_replicas)
        return out

    async def _controller_call(self, kind: str, payload: Any) -> Any:
        from strata.cluster.controller import NotControllerError

        try:
            return await self._node.controller.call(kind, payload)
        except NotControllerError as e:
            raise ApiError(ErrorCode.NOT_CONTROLLER, str(e)) from None

    async def set_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        await self._node.set_topic_configs(name, overrides)
        topics = self._broker.topics
        await self._node.wait_for(lambda: (info := topics.get(name)) is not None and info.configs == overrides,
                                  PROPAGATION_TIMEOUT_S)
