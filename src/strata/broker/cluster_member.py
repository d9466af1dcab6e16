"""A cluster broker's reaction to the metadata it watches: Kafka's ``becomeLeaderOrFollower`` glue.

The metadata cache reports each changed znode; this turns them into local actions:

* a topic (``/brokers/topics/<t>`` and ``/config/topics/<t>``) is mirrored into the local topic
  registry, which stays the one place handlers read names, ids, partition counts and configs from;
* a partition state naming this broker as a replica is applied to the replica manager, and the
  result (leader, follower, stopped) starts or stops the partition's fetcher, its tiering tasks
  and, for ``__consumer_offsets``, the groups it coordinates;
* a partition no longer assigned here (reassigned away) is deleted locally;
* a deletion request (``/admin/delete_topics/<t>``) deletes this broker's replicas of the topic
  (the last leader also its remote data, Kafka's rule) and is acknowledged with
  ``/admin/delete_topics/<t>/<broker id>`` -- also when the broker was down at the time and sees
  the request only after it returns.

Everything runs on the event loop (the cache delivers there).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from strata.broker.topics import TopicInfo, TopicRegistry
from strata.cluster.metadata import MetadataListener
from strata.cluster.node import ClusterNode, partition_state
from strata.cluster.znodes import LeaderAndIsr, TopicAssignment
from strata.common import TopicPartition
from strata.replication.fetcher import ReplicaFetcherManager
from strata.replication.partition import Partition, Transition
from strata.replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.cluster")


@dataclass
class RoleHooks:
    """Who else cares when this broker starts or stops leading a partition."""

    leading: list[Callable[[TopicPartition, uuid.UUID], None]] = field(default_factory=list)
    not_leading: list[Callable[[TopicPartition, uuid.UUID, bool], None]] = field(default_factory=list)
    # (topic, the partitions whose remote data this broker deletes)
    topic_deleted: list[Callable[[TopicInfo, frozenset[int]], None]] = field(default_factory=list)
    topic_config_changed: list[Callable[[str, bool], None]] = field(default_factory=list)


class ClusterMember:
    def __init__(self, node: ClusterNode, topics: TopicRegistry, replicas: ReplicaManager,
                 fetchers: ReplicaFetcherManager) -> None:
        self.node = node
        self.topics = topics
        self.replicas = replicas
        self.fetchers = fetchers
        self.hooks = RoleHooks()
        self._deleting: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        replicas.on_transition.append(self._on_transition)
        replicas.broker_alive = lambda broker: broker in node.metadata.brokers

    @property
    def broker_id(self) -> int:
        return self.node.broker_id

    def listener(self) -> MetadataListener:
        return MetadataListener(
            topic_changed=self._on_topic, partition_state_changed=self._on_state,
            topic_config_changed=self._on_topic_config, deletion_requested=self._on_deletion)

    # -- after the first full load --------------------------------------------------------------

    def reconcile(self) -> list[TopicPartition]:
        """Local state that ZooKeeper no longer knows: topics deleted (or recreated with another id)
        while this broker was down, and partition logs of replicas moved away. Returns what was removed."""
        cache = self.node.metadata
        removed: list[TopicPartition] = []
        for info in list(self.topics):
            zk_topic = cache.topics.get(info.name)
            if zk_topic is None or (zk_topic.topic_id is not None and zk_topic.topic_id != info.topic_id):
                log.info("topic %s (id %s) is gone from the cluster: deleting its local replicas", info.name,
                         info.topic_id)
                removed += self._drop_topic(info)
        for tp in list(self.replicas.logs.logs):
            info = self.topics.get(tp.topic)
            if info is None or self.broker_id not in cache.replicas(tp):
                if info is not None and tp.topic in cache.deleting:
                    continue
                log.info("%s is not assigned to this broker: deleting its local log", tp)
                self.replicas.remove_partitions([tp], delete=True)
                removed.append(tp)
        for topic in list(cache.deleting):
            self._on_deletion(topic, cache.deleting[topic])
        return removed

    # -- topics ---------------------------------------------------------------------------------

    def _mirror(self, name: str, assignment: TopicAssignment) -> TopicInfo | None:
        cache = self.node.metadata
        topic_id = assignment.topic_id or uuid.uuid5(uuid.NAMESPACE_URL, f"strata-topic:{name}")
        info = self.topics.get(name)
        if info is not None and info.topic_id != topic_id:
            self._drop_topic(info)  # recreated under the same name
            info = None
        configs = cache.topic_configs.get(name, {})
        return self.topics.mirror(name, topic_id, len(assignment.partitions), configs)

    def _on_topic(self, name: str, assignment: TopicAssignment | None) -> None:
        if assignment is None or name in self.node.metadata.deleting:
            return
        info = self._mirror(name, assignment)
        if info is None:
            return
        for p, a in assignment.partitions.items():
            tp = TopicPartition(name, p)
            if self.broker_id in a.replicas:
                state = self.node.metadata.states.get(tp)
                if state is not None:
                    self._apply(tp, info.topic_id, state)
                    self.replicas.update_assignment(tp, a.replicas)
            elif tp in self.replicas.partitions:
                log.info("%s moved off this broker: deleting the local replica", tp)
                self.replicas.remove_partitions([tp], delete=True)
        self.node.controller.reassignment_progress(TopicPartition(name, 0))

    def _on_topic_config(self, name: str, config: dict[str, str] | None) -> None:
        info = self.topics.get(name)
        if info is None or config is None or info.configs == config:
            return
        was_tiered = self.topics.remote_log_enabled(name)
        unclean_before = (info.configs.get("unclean.leader.election.enable") or "").strip().lower() == "true"
        self.topics.mirror(name, info.topic_id, info.partitions, config)
        self.replicas.apply_config(name)
        if not unclean_before and (config.get("unclean.leader.election.enable") or "").strip().lower() == "true":
            self.node.controller.enqueue("unclean_enabled", name)  # ignored unless this broker is the controller
        for fn in self.hooks.topic_config_changed:
            fn(name, was_tiered)

    # -- partitions -----------------------------------------------------------------------------

    def _on_state(self, tp: TopicPartition, state: LeaderAndIsr | None) -> None:
        if state is None or tp.topic in self.node.metadata.deleting:
            return
        if self.node.controller.active:
            self.node.controller.reassignment_progress(tp)
        if self.broker_id not in self.node.metadata.replicas(tp):
            return
        info = self.topics.get(tp.topic)
        if info is None:
            assignment = self.node.metadata.topics.get(tp.topic)
            info = self._mirror(tp.topic, assignment) if assignment is not None else None
            if info is None:
                return
        self._apply(tp, info.topic_id, state)

    def _apply(self, tp: TopicPartition, topic_id: uuid.UUID, state: LeaderAndIsr) -> None:
        assignment = self.node.metadata.topics[tp.topic].partitions.get(tp.partition)
        if state.leader == self.broker_id and not self._written_for_this_registration(tp):
            # A leadership recorded before this broker's current registration (it restarted, or its
            # session expired) is not taken up: its log may be shorter than what followers acknowledged
            # meanwhile (a wiped disk, a kill -9 before the page cache was written). Kafka's restarted
            # broker likewise waits for the controller, which gives the partition a new epoch once it
            # sees the broker register. Not applied at all (a state written while the registration was
            # still returning is applied by ``refresh_leaderships`` right after it).
            return
        self.replicas.become_leader_or_follower(tp, topic_id, partition_state(state, assignment))

    def _written_for_this_registration(self, tp: TopicPartition) -> bool:
        node = self.node
        return node.registered.is_set() and node.metadata.state_mzxids.get(tp, 0) > node.broker_epoch

    def _on_transition(self, tp: TopicPartition, transition: str, part: Partition) -> None:
        if transition == Transition.BECAME_LEADER:
            self.fetchers.unfollow(tp)
            for fn in self.hooks.leading:
                fn(tp, part.topic_id)
        elif transition == Transition.BECAME_FOLLOWER:
            if part.log.config.diskless_enable:  # its replicas consolidate from the coordinator (diskless.md)
                self.fetchers.unfollow(tp)
            else:
                self.fetchers.follow(tp, part.leader, part.leader_epoch)
            for fn in self.hooks.not_leading:
                fn(tp, part.topic_id, False)
        elif transition == Transition.STOPPED:
            self.fetchers.unfollow(tp)
            for fn in self.hooks.not_leading:
                fn(tp, part.topic_id, True)

    def refresh_leaderships(self) -> None:
        """After (re-)registration: apply every state from the (re-synchronised) cache, the leaderships
        written for this registration included."""
        cache = self.node.metadata
        for tp, state in list(cache.states.items()):
            info = self.topics.get(tp.topic)
            if info is not None and self.broker_id in cache.replicas(tp):
                self._apply(tp, info.topic_id, state)

    # -- deletion -------------------------------------------------------------------------------

    def _on_deletion(self, topic: str, acks: frozenset[int]) -> None:
        if self.broker_id in acks or topic in self._deleting:
            return
        self._deleting.add(topic)
        info = self.topics.get(topic)
        if info is not None:
            self._drop_topic(info, remote_owner=self._remote_owner(info))
            log.info("deleted the local replicas of topic %s (deletion requested)", topic)
        task = asyncio.get_running_loop().create_task(self._acknowledge(topic))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _acknowledge(self, topic: str) -> None:
        try:
            await self.node.zk.retry(lambda: self.node.acknowledge_deletion(topic))
        except Exception as e:  # noqa: BLE001 - retried when the request is seen again
            log.warning("could not acknowledge the deletion of %s: %s", topic, e)
        finally:
            self._deleting.discard(topic)

    def _remote_owner(self, info: TopicInfo) -> frozenset[int]:
        """The partitions of a topic being deleted whose remote data this broker deletes: those it leads
        (Kafka's rule: the leader deletes, once). A partition without a live leader (its leader was down
        when the deletion began) falls to its lowest-numbered replica, so its remote data is not orphaned."""
        cache = self.node.metadata
        out = set()
        for p in range(info.partitions):
            tp = TopicPartition(info.name, p)
            part = self.replicas.partitions.get(tp)
            state = cache.states.get(tp)
            leader = state.leader if state is not None else -1
            replicas = cache.replicas(tp)
            if (part is not None and part.is_leader) or leader == self.broker_id or (
                    leader not in cache.brokers and replicas and min(replicas) == self.broker_id):
                out.add(p)
        return frozenset(out)

    def _drop_topic(self, info: TopicInfo, *, remote_owner: frozenset[int] = frozenset()) -> list[TopicPartition]:
        tps = [TopicPartition(info.name, p) for p in range(info.partitions)]
        self.topics.forget(info.name)
        self.replicas.remove_partitions(tps, delete=True)
        for fn in self.hooks.topic_deleted:
            fn(info, remote_owner)
        return tps

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
