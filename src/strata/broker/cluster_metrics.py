"""Replication and controller metrics under Kafka's names: ReplicaManager, KafkaController, fetcher lag.

The names are what the Prometheus JMX exporter makes of Kafka's MBeans (:func:`prometheus_name`),
so dashboards and alerts written for a ZooKeeper-mode Kafka cluster work unchanged:

* gauges ``kafka.server:type=ReplicaManager,name=`` ``PartitionCount``, ``LeaderCount``,
  ``UnderReplicatedPartitions``, ``UnderMinIsrPartitionCount``, ``AtMinIsrPartitionCount``
  (``kafka_server_ReplicaManager_LeaderCount`` ...), in single-node mode too;
* meters ``kafka.server:type=ReplicaManager,name=IsrShrinksPerSec`` and ``IsrExpandsPerSec``
  (``..._total`` and ``..._OneMinuteRate``, as every meter here);
* cluster mode: gauges ``kafka.controller:type=KafkaController,name=`` ``ActiveControllerCount``,
  ``OfflinePartitionsCount``, ``GlobalTopicCount``, ``GlobalPartitionCount``; the meter
  ``kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec``; the gauge
  ``kafka.controller:type=ControllerEventManager,name=EventQueueTimeMs``; the meter
  ``kafka.server:type=SessionExpireListener,name=ZooKeeperExpiresPerSec``;
* cluster mode: ``kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica`` and, per
  followed partition, ``kafka.server:type=FetcherLagMetrics,name=ConsumerLag`` with the labels
  ``clientId`` (``ReplicaFetcherThread-<fetcher id>-<leader id>``), ``topic`` and ``partition``;
* cluster mode, per replica fetcher: ``kafka.server:type=FetcherStats,name=RequestsPerSec`` and
  ``BytesPerSec`` (registered by :class:`strata.replication.fetcher.ReplicaFetcherManager`);
* ``kafka.server:type=LeaderReplication`` and ``FollowerReplication``, attribute ``byte-rate``
  (``kafka_server_LeaderReplication_byte_rate``): the replication throttles' measured rates (KIP-73).

As in Kafka, the controller gauges read 0 on every broker but the active controller, so a sum over
the cluster is the cluster's value (``sum(ActiveControllerCount) == 1`` is the classic alert).
Kafka's EventQueueTimeMs is a histogram; the controller keeps only the latest event's queue time,
which is what the gauge reports. Under/at min ISR compare the ISR with the topic's
``min.insync.replicas`` as it is, the check acks=all appends are refused by here.

Everything is read at scrape time from the replica manager's and the controller's state (the
admin HTTP endpoint renders on the event loop, the only thread that changes them), except the
per-partition lag series, which are added and removed as this broker starts and stops following
partitions (``ReplicaManager.on_transition``), and the ISR meters, marked by ``on_isr_change``.
"""

from __future__ import annotations

from collections.abc import Callable

from strata.cluster.node import ClusterNode
from strata.common import TopicPartition
from strata.common.metrics import Registry, prometheus_name
from strata.quota.replication import ReplicationQuotas
from strata.replication.fetcher import ReplicaFetcherManager, fetcher_name
from strata.replication.partition import Partition
from strata.replication.replica_manager import ReplicaManager


def _replica_manager(name: str) -> str:
    return prometheus_name(f"kafka.server:type=ReplicaManager,name={name}")


def _controller(name: str) -> str:
    return prometheus_name(f"kafka.controller:type=KafkaController,name={name}")


PARTITION_COUNT = _replica_manager("PartitionCount")
LEADER_COUNT = _replica_manager("LeaderCount")
UNDER_REPLICATED = _replica_manager("UnderReplicatedPartitions")
UNDER_MIN_ISR = _replica_manager("UnderMinIsrPartitionCount")
AT_MIN_ISR = _replica_manager("AtMinIsrPartitionCount")
ISR_SHRINKS = _replica_manager("IsrShrinksPerSec")
ISR_EXPANDS = _replica_manager("IsrExpandsPerSec")
ACTIVE_CONTROLLER = _controller("ActiveControllerCount")
OFFLINE_PARTITIONS = _controller("OfflinePartitionsCount")
GLOBAL_TOPICS = _controller("GlobalTopicCount")
GLOBAL_PARTITIONS = _controller("GlobalPartitionCount")
UNCLEAN_ELECTIONS = prometheus_name("kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec")
EVENT_QUEUE_TIME = prometheus_name("kafka.controller:type=ControllerEventManager,name=EventQueueTimeMs")
MAX_LAG = prometheus_name("kafka.server:type=ReplicaFetcherManager,name=MaxLag")
CONSUMER_LAG = prometheus_name("kafka.server:type=FetcherLagMetrics,name=ConsumerLag")
ZK_EXPIRES = prometheus_name("kafka.server:type=SessionExpireListener,name=ZooKeeperExpiresPerSec")

MAX_LAG_LABELS = {"clientId": "Replica"}


def fetcher_client_id(leader: int, fetcher_id: int = 0) -> str:
    """Kafka's replica fetcher thread name, the ``clientId`` of its lag metrics."""
    return fetcher_name(fetcher_id, leader)


def replication_byte_rate(replication_type: str) -> str:
    """``kafka.server:type=LeaderReplication`` / ``FollowerReplication``, attribute ``byte-rate``, as the JMX
    exporter names it (the client quota metrics' scheme: ``kafka_server_Fetch_byte_rate``)."""
    return f"kafka_server_{replication_type}_byte_rate"


class ClusterMetrics:
    """The registered metrics; :func:`register_cluster_metrics` builds it (the broker keeps the reference)."""

    def __init__(self, registry: Registry, replicas: ReplicaManager, node: ClusterNode | None,
                 fetchers: ReplicaFetcherManager | None) -> None:
        self.registry = registry
        self.replicas = replicas
        self.node = node
        self.fetchers = fetchers
        self._unclean_seen = 0
        self._lag_series: dict[TopicPartition, dict[str, str]] = {}

        # Registration order is render order: ActiveControllerCount comes first because reading it
        # brings the UncleanLeaderElectionsPerSec meter up to the controller's count (see sync()).
        if node is not None:
            controller = node.controller
            registry.gauge(ACTIVE_CONTROLLER, "1 on the broker that is the active controller, else 0.",
                           fn=self._active_controller)
            registry.gauge(OFFLINE_PARTITIONS, "Partitions without a live leader (active controller only).",
                           fn=lambda: controller.stats.offline_partitions if controller.active else 0)
            registry.gauge(GLOBAL_TOPICS, "Topics in the cluster (active controller only).",
                           fn=lambda: len(controller.assignments) if controller.active else 0)
            registry.gauge(GLOBAL_PARTITIONS, "Partitions in the cluster (active controller only).",
                           fn=lambda: sum(len(a.partitions) for a in list(controller.assignments.values()))
                           if controller.active else 0)
            self.unclean_elections = registry.meter(
                UNCLEAN_ELECTIONS, "Leaders elected from outside the ISR by this broker as controller.")
            registry.gauge(EVENT_QUEUE_TIME, "Time the latest controller event waited in the event queue, ms.",
                           fn=lambda: controller.stats.event_queue_time_ms)
            self.zookeeper_expires = registry.meter(ZK_EXPIRES, "ZooKeeper session expirations.")
            node.on_session_lost.append(self.zookeeper_expires.mark)

        registry.gauge(PARTITION_COUNT, "Partitions hosted on this broker, leader or follower.",
                       fn=lambda: len(self.replicas.partitions))
        registry.gauge(LEADER_COUNT, "Partitions led by this broker.", fn=lambda: self._count(_is_leader))
        registry.gauge(UNDER_REPLICATED, "Partitions led here whose ISR is smaller than their replica set.",
                       fn=lambda: self._count(_under_replicated))
        registry.gauge(UNDER_MIN_ISR, "Partitions led here whose ISR is below min.insync.replicas.",
                       fn=lambda: self._count(_under_min_isr))
        registry.gauge(AT_MIN_ISR, "Partitions led here whose ISR is exactly min.insync.replicas.",
                       fn=lambda: self._count(_at_min_isr))
        self.isr_shrinks = registry.meter(ISR_SHRINKS, "ISR shrinks written by this broker as leader.")
        self.isr_expands = registry.meter(ISR_EXPANDS, "ISR expansions written by this broker as leader.")
        replicas.on_isr_change.append(self._on_isr_change)

        if fetchers is not None:
            registry.gauge(MAX_LAG, "Largest lag in records of a partition this broker follows.", MAX_LAG_LABELS,
                           fn=lambda: max(fetchers.lag().values(), default=0))
            replicas.on_transition.append(self._on_transition)
            fetchers.on_resize.append(self._on_resize)
            for tp, part in list(replicas.partitions.items()):
                self._track_lag(tp, part)

    def register_replication_quotas(self, quotas: ReplicationQuotas) -> None:
        """The byte-rate of each replication throttle (the bytes of throttled partitions, Kafka's sensor)."""
        for quota in (quotas.leader, quotas.follower):
            self.registry.gauge(replication_byte_rate(quota.replication_type),
                                f"Tracking byte-rate for {quota.replication_type}", fn=quota.measure)

    # -- reading -------------------------------------------------------------------------------

    def _count(self, predicate: Callable[[Partition], bool]) -> int:
        return sum(1 for p in list(self.replicas.partitions.values()) if predicate(p))

    def _active_controller(self) -> int:
        self.sync()
        assert self.node is not None
        return 1 if self.node.controller.active else 0

    def sync(self) -> None:
        """Bring the counts mirrored from the controller's stats (unclean elections) into their meters."""
        if self.node is None:
            return
        count = self.node.controller.stats.unclean_elections
        if count > self._unclean_seen:
            self.unclean_elections.mark(count - self._unclean_seen)
            self._unclean_seen = count

    def _on_isr_change(self, kind: str) -> None:
        if kind == "shrink":
            self.isr_shrinks.mark()
        elif kind == "expand":
            self.isr_expands.mark()

    # -- per-partition fetcher lag -------------------------------------------------------------

    def _on_transition(self, tp: TopicPartition, _transition: str, part: Partition) -> None:
        self._track_lag(tp, part)

    def _on_resize(self) -> None:
        """``num.replica.fetchers`` changed: partitions moved to other fetchers, their series are relabelled."""
        for tp, part in list(self.replicas.partitions.items()):
            self._track_lag(tp, part)

    def _track_lag(self, tp: TopicPartition, part: Partition) -> None:
        """One ConsumerLag series per followed partition, labelled with its leader's fetcher."""
        following = (self.replicas.partitions.get(tp) is part and not part.is_leader and part.leader >= 0)
        fid = self.fetchers.fetcher_id(tp) if self.fetchers is not None else 0
        wanted = ({"clientId": fetcher_client_id(part.leader, fid), "topic": tp.topic,
                   "partition": str(tp.partition)} if following else None)
        current = self._lag_series.get(tp)
        if current == wanted:
            return
        if current is not None:
            self.registry.remove(CONSUMER_LAG, current)
            del self._lag_series[tp]
        if wanted is not None:
            self.registry.gauge(CONSUMER_LAG, "Records the follower is behind the leader's high watermark.",
                                wanted, fn=lambda: self.partition_lag(tp))
            self._lag_series[tp] = wanted

    def partition_lag(self, tp: TopicPartition) -> int | None:
        """The leader's last high watermark minus our log end (as ``ReplicaFetcherManager.lag``), or None
        (the series is absent) when ``tp`` is not being fetched."""
        fetchers = self.fetchers
        part = self.replicas.partitions.get(tp)
        if fetchers is None or part is None or part.is_leader:
            return None
        state = fetchers.fetch_state(tp)
        if state is None:
            return None
        return max(0, state.leader_high_watermark - part.log.log_end_offset)


def _is_leader(p: Partition) -> bool:
    return p.is_leader


def _under_replicated(p: Partition) -> bool:
    return p.is_leader and len(p.isr) < len(p.replicas)


def _under_min_isr(p: Partition) -> bool:
    return p.is_leader and len(p.isr) < p.log.config.min_insync_replicas


def _at_min_isr(p: Partition) -> bool:
    return p.is_leader and len(p.isr) == p.log.config.min_insync_replicas


def register_cluster_metrics(registry: Registry, replicas: ReplicaManager, node: ClusterNode | None = None,
                             fetchers: ReplicaFetcherManager | None = None) -> ClusterMetrics:
    """Register the ReplicaManager metrics (single node too) and, in cluster mode (``node``), the
    controller, ZooKeeper-session and fetcher-lag ones. Call once per registry, before partitions
    are hosted or after: followed partitions present now get their lag series at once."""
    return ClusterMetrics(registry, replicas, node, fetchers)
