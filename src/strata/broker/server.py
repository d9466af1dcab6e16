"""The broker process: composition root, listener, periodic work and clean shutdown.

Startup: ``meta.properties`` per log dir (Kafka's format: cluster id, node id), the topic
registry, the logs (recovered from their recovery points unless the clean-shutdown marker is
there), the group coordinator, then the listener. The one line ``strata broker ready on
HOST:PORT`` is logged only when connections are accepted, so scripts and tests can wait for it.

Shutdown (SIGTERM/SIGINT): stop accepting, wake long polls, close client sockets, then close
every log, write checkpoints and the clean-shutdown marker (``LogManager.shutdown``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import signal
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from strata.broker.admin_http import AdminHttpServer
from strata.broker.authorization import Authorization
from strata.broker.client_quotas import ClientQuotaStore
from strata.broker.cluster_member import ClusterMember
from strata.broker.cluster_metrics import register_cluster_metrics
from strata.broker.cluster_services import (
    ClusterView,
    LocalTopicAdmin,
    SingleNodeView,
    TopicAdmin,
    ZkClusterView,
    ZkTopicAdmin,
)
from strata.broker.diskless_metrics import register_diskless_metrics
from strata.broker.diskless_observer import DisklessMetadataObserver
from strata.broker.dynamic_config import DynamicBrokerConfigs
from strata.broker.fetch_sessions.cache import FetchSessionCache
from strata.broker.group_configs import GROUPS_ENTITY, GroupConfigStore
from strata.broker.group_metrics import register_group_metrics
from strata.broker.inter_broker import inter_broker_security
from strata.broker.leader_producer import LeaderProducer
from strata.broker.producer_id_source import ProducerIdSource
from strata.broker.producer_ids import ClusterProducerIdManager, ProducerIdManager
from strata.broker.recovery.offsets_upload import ConsumerOffsetsUploader
from strata.broker.recovery.service import TopicRecoveryService, is_read_replica
from strata.broker.remote_metadata_topic import BrokerMetadataTopic, ClusterMetadataTopic
from strata.broker.replication_config import ReplicationConfig
from strata.broker.share.partition_manager import SharePartitionManager
from strata.broker.share.persister import SharePersister
from strata.broker.topics import TopicInfo, TopicRegistry
from strata.broker.transaction_metrics import register_transaction_metrics
from strata.broker.transactions import TransactionService
from strata.broker.user_credentials import UserCredentials
from strata.broker.wire.dispatch import handlers
from strata.broker.wire.listeners import ListenerRuntime
from strata.broker.wire.throttling import Throttler
from strata.cluster.entity_configs import EntityConfigsZk
from strata.cluster.isolation import LeadershipProbe
from strata.cluster.node import ClusterNode
from strata.cluster.zk import ZkUnavailableError
from strata.cluster.znodes import ConfigType, Endpoint
from strata.common import SystemClock, ThreadScheduler, TopicPartition
from strata.common.metrics import Registry
from strata.config import LogConfig
from strata.config.broker_config import IGNORED_KEYS, BrokerConfig
from strata.coordinator.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from strata.coordinator.share.coordinator import ShareCoordinator
from strata.coordinator.share.records import SHARE_GROUP_STATE_TOPIC
from strata.coordinator.transaction.log_records import TRANSACTION_STATE_TOPIC
from strata.diskless.metadata_log import DISKLESS_METADATA_TOPIC, METADATA_PARTITION
from strata.diskless.service import DisklessService, diskless_tier_rows
from strata.errors import ApiError, ClusterError, ErrorCode, KafkaStorageError
from strata.log.checkpoints import atomic_write
from strata.log.cleaner.log_cleaner import LogCleaner
from strata.log.manager import LogManager
from strata.quota.client import ClientQuotaManagers
from strata.quota.replication import ReplicationQuotas
from strata.replication.fetcher import ReplicaFetcherManager
from strata.replication.partition import PartitionState
from strata.replication.replica_manager import ReplicaManager
from strata.tiered.api import ObjectStore, RemoteStorageError, TopicIdPartition
from strata.tiered.manager import RemoteAuxState, RemoteLogManager, TieredStats, copy_lag

log = logging.getLogger("strata.broker")


def owns_remote_data(info: TopicInfo) -> bool:
    """Whether deleting the topic deletes its remote data: not a read replica's (the origin's bucket), nor an
    unmounted topic's (left in the bucket for another cluster to mount)."""
    return not is_read_replica(info.configs) and info.configs.get("remote.unmount", "false").lower() != "true"
lifecycle = logging.getLogger("strata.lifecycle")  # startup/shutdown lines, shown at the default level

META_PROPERTIES = "meta.properties"


def _read_properties(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def ensure_meta_properties(log_dirs: tuple[Path, ...], node_id: int, cluster_id: str | None) -> str:
    """Kafka's ``meta.properties`` (version 1): every dir must agree on cluster id and node id."""
    found: str | None = None
    for d in log_dirs:
        d.mkdir(parents=True, exist_ok=True)
        path = d / META_PROPERTIES
        if path.exists():
            props = _read_properties(path)
            if int(props.get("node.id", node_id)) != node_id:
                raise KafkaStorageError(f"{path} belongs to node.id {props.get('node.id')}, this broker is {node_id}")
            cid = props.get("cluster.id")
            if found is not None and cid != found:
                raise KafkaStorageError(f"log dirs disagree on cluster.id: {found} vs {cid} in {path}")
            found = cid
    if cluster_id is not None and found is not None and cluster_id != found:
        raise KafkaStorageError(f"cluster.id {cluster_id} differs from {found} stored in meta.properties")
    cid = found or cluster_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    for d in log_dirs:
        path = d / META_PROPERTIES
        if not path.exists():
            directory_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            atomic_write(path, (f"#\n#{'Strata'}\nnode.id={node_id}\ndirectory.id={directory_id}\n"
                                f"version=1\ncluster.id={cid}\n").encode())
    return cid


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.clock = SystemClock()
        self.scheduler = ThreadScheduler()
        # Cluster mode: ZooKeeper holds the cluster's topics and leaders; this node mirrors them.
        self.cluster: ClusterNode | None = None
        self.member: ClusterMember | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        if config.cluster.enabled:
            endpoints = [Endpoint(li.name, li.advertised_host, li.advertised_port, li.security_protocol)
                         for li in config.listeners]
            self.cluster = ClusterNode(config.cluster, config.node_id, endpoints, config.inter_broker_listener_name)
            self.cluster_id = ""  # from /cluster/id, checked against meta.properties in start()
        else:
            self.cluster_id = ensure_meta_properties(config.log_dirs, config.node_id, config.cluster_id)
        self.topics = TopicRegistry(config.log_dirs[0], config.log_config,
                                    remote_storage_system_enable=config.remote.enabled)
        self.topics.load()
        self.logs = LogManager(config.log_dirs, self.topics.config, self.clock, self.scheduler,
                               remote_log_enabled_for=self.topics.remote_log_enabled)
        self.replicas = ReplicaManager(config.node_id, self.logs, self.topics.config, self.clock,
                                       partition_exists=self.topics.has_partition)
        self.dynamic_configs = DynamicBrokerConfigs(self)  # loaded and applied in start()
        # KIP-73 replication throttles: bounds from the dynamic configs, throttled partitions from topic configs
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        self.replication_quotas = ReplicationQuotas(config.node_id, self.topics.config,
                                                    config.cluster.replication_quota_window_num,
                                                    config.cluster.replication_quota_window_size_seconds)
        self.producer_ids: ProducerIdManager | ClusterProducerIdManager = ProducerIdManager(config.log_dirs[0])
        self.view: ClusterView = SingleNodeView(self)
        self.admin: TopicAdmin = LocalTopicAdmin(self)
        if self.cluster is not None:
            self.view = ZkClusterView(self.cluster)
            self.admin = ZkTopicAdmin(self, self.cluster)
            inter_broker = config.inter_broker_listener_name
            metadata = self.cluster.metadata
            self.fetchers = ReplicaFetcherManager(config.node_id,
                                                  lambda broker_id: metadata.endpoint(broker_id, inter_broker),
                                                  self.replicas, config.cluster, inter_broker_security(config),
                                                  remote_storage_enabled=config.remote.enabled,
                                                  quota=self.replication_quotas.follower)
            self.member = ClusterMember(self.cluster, self.topics, self.replicas, self.fetchers)
            self.replicas.isr_writer = self.cluster.write_isr
            source = ProducerIdSource(self.cluster, self.view, config.node_id, inter_broker_security(config))
            self.producer_ids = ClusterProducerIdManager(source.allocate)
        self.groups: Any = None  # the group coordinator, set in start() (see strata.coordinator.group)
        self.transactions: TransactionService | None = None  # the transaction coordinator, set in start()
        self.share_coordinator: ShareCoordinator | None = None  # __share_group_state (KIP-932), set in start()
        self.share_persister: SharePersister | None = None  # share-partition state, wherever its coordinator is
        self.shares: SharePartitionManager | None = None  # share-partitions led here (ShareFetch), set in start()
        self.remote_log_manager: RemoteLogManager | None = None  # set in start() when tiering is on
        self.topic_recovery: TopicRecoveryService | None = None  # remote.recovery, with tiering on
        self.diskless: DisklessService | None = None  # diskless topics, set in start() when tiering is on
        self.metrics = Registry()
        self.log_cleaner: LogCleaner | None = None
        self.stats = TieredStats(self.metrics)
        self.fetch_sessions.register_metrics(self.metrics)
        self.cluster_metrics = register_cluster_metrics(self.metrics, self.replicas, self.cluster, self.fetchers)
        self.cluster_metrics.register_replication_quotas(self.replication_quotas)
        if self.fetchers is not None:
            self.fetchers.registry = self.metrics  # FetcherStats of each replica fetcher
            self.fetchers.replication_bytes_in = self.stats.topics.ReplicationBytesInPerSec
        self.dynamic_configs.on_apply.append(ReplicationConfig(self.replication_quotas, self.fetchers).apply)
        self.transaction_metrics = register_transaction_metrics(self.metrics, self)
        self.group_metrics = register_group_metrics(self.metrics, self)
        self.diskless_metrics = register_diskless_metrics(self.metrics, self)
        self.admin_http: AdminHttpServer | None = None
        self.user_credentials: UserCredentials | None = None  # SCRAM credentials, set in start()
        self.group_configs: GroupConfigStore | None = None  # per-group configs (GROUP resources), set in start()
        self.quota_managers = ClientQuotaManagers(config.quota_window_num, config.quota_window_size_seconds)
        self.throttler = Throttler(self.quota_managers, self.metrics)
        self.client_quotas: ClientQuotaStore | None = None  # the quota entities, set in start()
        self.authorization = Authorization(config.raw, config.log_dirs[0],
                                           self.cluster.zk if self.cluster is not None else None)
        self.shutting_down = False
        self.listeners: list[ListenerRuntime] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self.port = config.listeners[0].port  # the first listener's, once bound (tools and tests connect there)
        self._bound: dict[str, int] = {}  # listener name -> bound port

    # -- what handlers use --------------------------------------------------------------------

    @property
    def clustered(self) -> bool:
        """Part of a ZooKeeper cluster (``zookeeper.connect`` set), not a single node."""
        return self.cluster is not None

    def broker_entry(self, listener: str | None = None) -> dict[str, Any]:
        """This broker's address on ``listener`` (the one a client came in on; None: the inter-broker one)."""
        li = self.config.listener_named(listener) if listener else self.config.listener
        port = li.advertised_port or self._bound.get(li.name, li.port)
        return {"node_id": self.node_id, "host": li.advertised_host, "port": port, "rack": None}

    def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                     topic_id: uuid.UUID | None = None) -> TopicInfo:
        info = self.topics.create(name, partitions, configs, topic_id=topic_id)
        try:
            self.replicas.open_topic(info)
        except (OSError, KafkaStorageError) as e:
            # Out of file descriptors or disk part-way through: a topic with some partitions missing
            # would be served half-made and reloaded so after a restart. Undo it and say why.
            log.error("creating topic %s failed after its registry entry; rolling back: %s", name, e)
            self.topics.delete(name)
            self.replicas.close_topic(info)
            raise KafkaStorageError(f"Cannot create the logs of topic '{name}': {e}") from e
        self._lead(info)
        log.info("created topic %s (%d partitions, id %s)", name, partitions, info.topic_id)
        return info

    async def topic_changed(self, info: TopicInfo, deleted: bool = False, first_new: int = 0) -> None:
        """A topic created (its partitions ``first_new..`` new), grown or deleted: the diskless coordinator
        learns of the new diskless partitions."""
        diskless = self.diskless
        if diskless is None:
            return
        if deleted:
            await diskless.on_topic_deleted(info.topic_id)
        elif diskless.is_diskless(info.name):
            await diskless.on_topic_created(info.name, info.topic_id, info.partitions, first_new)

    def _lead(self, info: TopicInfo) -> None:
        """Tell the RemoteLogManager this node leads the topic's partitions (it tiers the eligible ones)."""
        if self.remote_log_manager is not None:
            self.remote_log_manager.on_leadership_change(
                {TopicPartition(info.name, p): info.topic_id for p in range(info.partitions)})

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.topics.delete(name)
        if self.remote_log_manager is not None:  # the last leader deletes the remote data (Kafka)
            self.remote_log_manager.stop_partitions(
                [TopicPartition(name, p) for p in range(info.partitions)], delete_remote=owns_remote_data(info),
                topic_id=info.topic_id)
        self.replicas.close_topic(info)
        if self.groups is not None:
            self.groups.on_topic_deleted(name)
        if self.share_coordinator is not None:
            self.share_coordinator.on_topics_deleted({info.topic_id})
        if self.shares is not None:
            self.shares.on_topic_deleted(info.topic_id)
        log.info("deleted topic %s", name)
        return info

    # -- admin --------------------------------------------------------------------------------
    # Topic administration (CreatePartitions, AlterConfigs, DeleteRecords): the registry is changed
    # first (it is what a restart trusts), then the live logs follow.

    def add_partitions(self, name: str, count: int) -> TopicInfo:
        """Grow ``name`` to ``count`` partitions (the handler has checked it is an increase)."""
        info = self.topics.get(name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        old = info.partitions
        info = self.topics.set_partitions(name, count)
        self.replicas.add_partitions(info, old)
        self._lead(info)
        log.info("topic %s: %d -> %d partitions", name, old, count)
        return info

    def set_topic_configs(self, name: str, overrides: dict[str, str]) -> LogConfig:
        """Replace the topic's overrides (persisted), then apply them to its open logs at once."""
        was_tiered = self.topics.remote_log_enabled(name)
        effective = self.topics.set_configs(name, overrides)
        self.replicas.apply_config(name)
        self.apply_tiering_change(name, was_tiered)
        log.info("topic %s: config overrides now %s", name, overrides)
        return effective

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """DeleteRecords on one partition; returns the new log start offset (the low watermark).

        The log start offsets are checkpointed at once so a ``kill -9`` cannot bring the deleted
        records back (Kafka waits for the periodic checkpoint; one small write here is cheap).
        """
        low = self.replicas.get_log(tp).delete_records(offset)
        self.logs.checkpoint()
        return low

    def _maybe_start_diskless(self, name: str) -> None:
        """A classic topic switched to diskless (KIP-1150) may be this broker's first diskless topic: the
        coordinator starts (creating ``__diskless_metadata``); the partitions' leaders then seal them."""
        diskless = self.diskless
        if diskless is None or diskless.started or not diskless.is_diskless(name):
            return
        task = asyncio.get_running_loop().create_task(diskless.ensure_started(), name="diskless-start")
        self._background.append(task)  # cancelled at stop like the others

    def apply_tiering_change(self, name: str, was_tiered: bool) -> None:
        """KIP-950: ``remote.storage.enable`` turned on starts tiering the topic; turned off (only
        allowed with ``remote.log.delete.on.disable=true``) deletes its remote data and the log
        start becomes the local log start."""
        self._maybe_start_diskless(name)
        rlm = self.remote_log_manager
        info = self.topics.get(name)
        tiered = self.topics.remote_log_enabled(name)
        if rlm is None or info is None or tiered == was_tiered:
            return
        tps = [TopicPartition(name, p) for p in range(info.partitions)]
        for tp in tps:
            plog = self.logs.get_log(tp)
            if plog is not None:
                plog.set_remote_log_enabled(tiered)
        if self.cluster is None:
            if tiered:
                self._lead(info)
            else:
                rlm.stop_partitions(tps, delete_remote=True, topic_id=info.topic_id)
                self.logs.checkpoint()
            return
        # Cluster mode: each replica follows its role; turned off, the leaders delete the remote data.
        roles = {tp: self.replicas.partitions.get(tp) for tp in tps}
        led = [tp for tp, p in roles.items() if p is not None and p.is_leader]
        followed = [tp for tp, p in roles.items() if p is not None and not p.is_leader]
        if tiered:
            rlm.on_leadership_change(dict.fromkeys(led, info.topic_id))
            rlm.on_follower(dict.fromkeys(followed, info.topic_id))
        else:
            if led:
                rlm.stop_partitions(led, delete_remote=True, topic_id=info.topic_id)
            if followed:
                rlm.stop_partitions(followed, delete_remote=False)
            self.logs.checkpoint()

    def tier_states(self) -> list[dict[str, Any]]:
        """Per partition: offsets and bytes of both tiers (``/v1/tiers``, ``strata tiers``); a diskless
        partition's row adds the coordinator's view (its WAL) to this broker's consolidated replica."""
        diskless = self.diskless
        out = []
        for info in sorted(self.topics, key=lambda i: i.name):
            is_diskless = diskless is not None and diskless.is_diskless(info.name)
            rows = {p: row for p in range(info.partitions)
                    if (row := self._tier_row(info, p)) is not None or is_diskless}
            if is_diskless:
                assert diskless is not None
                for row in diskless_tier_rows(info, diskless.log_infos, rows):
                    out.append(row)
            else:
                out.extend(row for row in rows.values() if row is not None)
        return out

    def _tier_row(self, info: Any, p: int) -> dict[str, Any] | None:
        rlm = self.remote_log_manager
        tp = TopicPartition(info.name, p)
        plog = self.logs.get_log(tp)
        if plog is None:
            return None
        segments = plog.segments
        remote_segments = remote_bytes = 0
        st = rlm.tiered(tp) if rlm is not None else None
        if rlm is not None and (plog.remote_log_enabled or plog.log_start_offset < plog.local_log_start_offset):
            remote_segments, remote_bytes = rlm.remote_summary(TopicIdPartition(info.topic_id, info.name, p))
        lag_bytes, lag_segments = copy_lag(plog) if plog.remote_log_enabled else (0, 0)
        return {
            "topic": info.name, "partition": p, "topic_id": str(info.topic_id),
            "remote_storage_enable": plog.remote_log_enabled,
            "log_start_offset": plog.log_start_offset, "local_log_start_offset": plog.local_log_start_offset,
            "highest_offset_in_remote_storage": plog.highest_offset_in_remote_storage,
            "log_end_offset": plog.log_end_offset, "high_watermark": plog.high_watermark,
            "local_segments": len(segments), "local_bytes": sum(s.size for s in segments),
            "remote_segments": remote_segments, "remote_bytes": remote_bytes,
            "copy_lag_segments": lag_segments, "copy_lag_bytes": lag_bytes,
            "last_copy_error": st.last_copy_error if st is not None else None,
            # the background scrubber's findings in this partition's remote segments (None: not scrubbed here)
            "scrub": rlm.scrub_state(tp) if rlm is not None and st is not None else None,
        }

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        handlers()  # import every handler module before the first request
        unused = sorted(set(self.config.raw) & IGNORED_KEYS)
        if unused:  # accepted so Kafka's own files load, but never silently
            log.warning("accepted but not used by Strata (no such machinery: KRaft quorum, thread pools, share "
                        "coordinator): %s", ", ".join(f"{k}={self.config.raw[k]}" for k in unused))
        self.logs.startup()
        loop = asyncio.get_running_loop()
        self.log_cleaner = LogCleaner(self.config.cleaner, self.logs.cleaner_manager, self.clock,
                                      loop.call_soon_threadsafe, self.metrics)
        self.log_cleaner.start()
        if self.cluster is not None:
            await self._join_cluster()
        else:
            self._drop_orphan_logs()
            for info in self.topics:
                self.replicas.open_topic(info)  # partitions created while we were down, or lost dirs
        await self.dynamic_configs.start()
        users_zk = EntityConfigsZk(self.cluster.zk) if self.cluster is not None else None
        clients_zk = EntityConfigsZk(self.cluster.zk, ConfigType.CLIENT) if self.cluster is not None else None
        quotas = ClientQuotaStore(self.config.log_dirs[0], self.quota_managers, users_zk, clients_zk)
        self.user_credentials = UserCredentials(self.config.log_dirs[0], users_zk)
        await self.user_credentials.start()  # starts the users mirror, which the quota store listens to too
        await quotas.start()
        self.group_configs = GroupConfigStore(
            self.config.log_dirs[0], self.config.consumer_groups,
            EntityConfigsZk(self.cluster.zk, GROUPS_ENTITY) if self.cluster is not None else None,
            share_defaults=self.config.share_groups)
        await self.group_configs.start()
        self.client_quotas = quotas
        await self.authorization.start()
        self.groups = GroupCoordinator(self)
        await self.groups.start()
        self.share_coordinator = ShareCoordinator(self)
        await self.share_coordinator.start()
        self.share_persister = SharePersister(self.share_coordinator, self.view, self.node_id,
                                              inter_broker_security(self.config))
        self.shares = SharePartitionManager(self, self.share_persister)
        self.groups.share_state = self.share_persister
        self.transactions = TransactionService(
            self.config, self.replicas, self.topics, self.view, self.admin, self.producer_ids.next_id,
            self.clock.milliseconds, self.cluster is not None, self.create_topic, lambda: self.config)
        self.transactions.on_offsets_marker = getattr(self.groups, "complete_transaction", None)
        self.transactions.start()
        if self.config.remote.enabled:
            self._start_tiering()
            await self._start_diskless()
            self._start_offsets_upload()
        self._start_listeners()
        loop = asyncio.get_running_loop()
        self._background.append(loop.create_task(self._periodic(self.config.log_retention_check_interval_ms,
                                                                 self.logs.cleanup_logs, "retention",
                                                                 self.config.log_initial_task_delay_ms)))
        self._background.append(loop.create_task(self._periodic(
            self.config.log_flush_offset_checkpoint_interval_ms or 60_000, self.logs.checkpoint_in_background,
            "checkpoint")))
        self._background.append(loop.create_task(self._periodic(1000, self.logs.flush_dirty_logs, "flush")))
        self._background.append(loop.create_task(self._periodic(
            self.config.producer_id_expiration_check_interval_ms,
            lambda: self.logs.remove_expired_producers(self._producer_id_expiration_ms()), "producer-expiration")))
        if self.cluster is not None:
            lag_ms = self.config.cluster.replica_lag_time_max_ms
            self._background.append(loop.create_task(self._periodic(
                max(1, lag_ms // 2), lambda: self.replicas.maybe_shrink_isr(lag_ms), "isr-shrink")))
            self._background.append(loop.create_task(self._periodic(
                self.config.cluster.replica_high_watermark_checkpoint_interval_ms, self.logs.checkpoint_in_background,
                "high-watermark-checkpoint")))
            self.cluster.endpoints = [replace(ep, port=ep.port or self._bound[ep.listener])
                                      for ep in self.cluster.endpoints]
            await self.cluster.register()
        if self.config.metrics_port >= 0:
            self.admin_http = AdminHttpServer(self.config.metrics_host, self.config.metrics_port, self.metrics,
                                              self.tier_states, broker_id=self.node_id,
                                              ssl_config=self.config.metrics_ssl)
            port = await self.admin_http.start()
            # DescribeConfigs reports the bound port: `strata tiers` finds the endpoint through it.
            self.config = replace(self.config, metrics_port=port, raw={**self.config.raw, "metrics.port": str(port)})
            lifecycle.info("metrics on %s://%s:%d/metrics", "https" if self.config.metrics_ssl else "http",
                           self.config.metrics_host, port)
        first = self.config.listeners[0]
        others = ", ".join(f"{li.name}://{li.host}:{self._bound[li.name]} ({li.security_protocol})"
                           for li in self.config.listeners)
        lifecycle.info("strata broker ready on %s:%d%s", first.host, self.port,
                       f" (listeners {others})" if len(self.config.listeners) > 1 or first.name != "PLAINTEXT" else "")

    async def _join_cluster(self) -> None:
        """Connect to ZooKeeper, mirror the cluster's state, then take up this broker's replicas.

        ZooKeeper unreachable: one clear line and a non-zero exit after ``zookeeper.connection.timeout.ms``.
        The broker registers (and may become controller) only once its listener accepts connections.
        """
        node, member = self.cluster, self.member
        assert node is not None and member is not None
        try:
            cluster_id = await node.connect(self.config.cluster_id)
        except ZkUnavailableError as e:
            raise ClusterError(str(e)) from None
        self.cluster_id = ensure_meta_properties(self.config.log_dirs, self.node_id, cluster_id)
        node.on_session_lost.append(self.replicas.fence_leaderships)
        node.on_session_presumed_lost.append(self.replicas.fence_leaderships)
        node.on_session_restored.append(self.replicas.unfence_leaderships)
        node.on_leaderships_replaced.append(self.replicas.fence_partitions)
        inter_broker = self.config.inter_broker_listener_name

        def peers() -> list[tuple[int, str, int]]:
            found = ((b, node.metadata.endpoint(b, inter_broker)) for b in node.metadata.brokers)
            return [(b, ep[0], ep[1]) for b, ep in found if ep is not None and b != self.node_id]

        node.probe = LeadershipProbe(self.node_id, peers, self.replicas.led_partitions,
                                     inter_broker_security(self.config))
        node.on_reregistered.append(member.refresh_leaderships)
        await node.start_metadata(member.listener())
        member.reconcile()
        member.hooks.topic_deleted.append(self._on_cluster_topic_deleted)
        member.hooks.leading.append(self._on_leading)
        member.hooks.not_leading.append(self._on_not_leading)
        member.hooks.topic_config_changed.append(self.apply_tiering_change)
        lifecycle.info("joined the cluster %s through ZooKeeper %s: %d brokers, %d topics, %d local replicas",
                       cluster_id, self.config.cluster.zookeeper_connect, len(node.metadata.brokers),
                       len(node.metadata.topics), len(self.replicas.partitions))

    def _on_leading(self, tp: TopicPartition, _topic_id: uuid.UUID) -> None:
        if tp.topic == OFFSETS_TOPIC and self.groups is not None:
            self.groups.on_leader(tp.partition)
        elif tp.topic == SHARE_GROUP_STATE_TOPIC and self.share_coordinator is not None:
            self.share_coordinator.on_leader(tp.partition)
        elif tp.topic == TRANSACTION_STATE_TOPIC and self.transactions is not None:
            self.transactions.on_leader(tp.partition, self.replicas.leader_epoch(tp))

    def _on_not_leading(self, tp: TopicPartition, _topic_id: uuid.UUID, _deleted: bool) -> None:
        if self.shares is not None:
            self.shares.on_partition_moved(tp)
        if tp.topic == OFFSETS_TOPIC and self.groups is not None:
            self.groups.on_not_leader(tp.partition)
        elif tp.topic == SHARE_GROUP_STATE_TOPIC and self.share_coordinator is not None:
            self.share_coordinator.on_not_leader(tp.partition)
        elif tp.topic == TRANSACTION_STATE_TOPIC and self.transactions is not None:
            self.transactions.on_not_leader(tp.partition)

    def _on_cluster_topic_deleted(self, info: TopicInfo, remote_owner: frozenset[int]) -> None:
        """``remote_owner``: the partitions whose remote data this broker deletes (it led them: Kafka's
        rule, so each partition's data is deleted once, not once per replica)."""
        rlm = self.remote_log_manager
        if rlm is not None:
            tps = [TopicPartition(info.name, p) for p in range(info.partitions)]
            owned = [tp for tp in tps if tp.partition in remote_owner and owns_remote_data(info)]
            if owned:
                rlm.stop_partitions(owned, delete_remote=True, topic_id=info.topic_id)
            others = [tp for tp in tps if tp not in owned]
            if others:
                rlm.stop_partitions(others, delete_remote=False, topic_id=info.topic_id)
        if self.groups is not None:
            self.groups.on_topic_deleted(info.name)
        if self.share_coordinator is not None:
            self.share_coordinator.on_topics_deleted({info.topic_id})
        if self.shares is not None:
            self.shares.on_topic_deleted(info.topic_id)

    def _drop_orphan_logs(self) -> None:
        """Logs the registry does not know (a delete interrupted by a crash) are deleted, not served.

        The registry is written before partition directories are renamed away, so after a ``kill -9``
        in between, the directories of a deleted topic (or of a partition beyond the topic's count)
        are still there; a stale topic id is caught when the topic's logs are opened.
        """
        for tp in list(self.logs.logs):
            info = self.topics.get(tp.topic)
            if info is None or tp.partition >= info.partitions:
                log.warning("deleting %s: its topic is not in the registry (interrupted deletion)", tp)
                self.logs.delete_log(tp)

    def _start_listeners(self) -> None:
        """Bind every listener (TLS contexts and SASL users are read here: a bad keystore stops the start)."""
        loop = asyncio.get_running_loop()
        effective = self.dynamic_configs.effective or self.config  # stored keystore updates included
        for li in effective.listeners:
            runtime = ListenerRuntime(li, self.config.raw, self.scram_credential)
            self._bound[li.name] = runtime.bind(self.config.socket_send_buffer_bytes,
                                                self.config.socket_receive_buffer_bytes)
            self.listeners.append(runtime)
            self._background.append(loop.create_task(runtime.accept_loop(self, self._track_connection)))
        self.port = self._bound[self.config.listeners[0].name]

    def _track_connection(self, task: asyncio.Task[None]) -> None:
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    def scram_credential(self, user: str, mechanism: str) -> Any:
        """The SCRAM credential of ``user`` for ``mechanism`` (None: no such user), for SASL logins."""
        store = self.user_credentials
        return store.scram_credential(user, mechanism) if store is not None else None

    def _start_tiering(self) -> None:
        """Plugins, then the metadata load (snapshot + the topic's tail), then the partitions' tasks."""
        first_dir = self.config.log_dirs[0]
        rlm = RemoteLogManager(self.config.remote, broker_id=self.node_id, log_dir=first_dir,
                               cluster_id=self.cluster_id, clock=self.clock, log_for=self.logs.get_log,
                               on_log_start_changed=self.logs.checkpoint_in_background, stats=self.stats)
        set_topic = getattr(rlm.rlmm, "set_metadata_topic", None)
        if set_topic is not None:
            loop = asyncio.get_running_loop()
            if self.cluster is not None:  # a replicated topic, read and written through its leaders
                set_topic(ClusterMetadataTopic(node_id=self.node_id, replicas=self.replicas, view=self.view,
                                               admin=self.admin, topics=self.topics, loop=loop,
                                               security=inter_broker_security(self.config)))
            else:
                set_topic(BrokerMetadataTopic(self.replicas, self.topics, self.create_topic, loop))
        initialize = getattr(rlm.rlmm, "initialize", None)
        if initialize is not None:
            # The metadata loads in the background: local traffic is served at once, remote reads
            # answer REPLICA_NOT_AVAILABLE (retriable) and copy tasks wait until it is loaded.
            try:
                initialize(background=True)
            except RemoteStorageError as e:  # e.g. the topic's partition count differs from the config
                raise KafkaStorageError(f"remote log metadata: {e}") from None
        rlm.start()
        rlm.describe_topic = self._describe_topic
        rlm.on_log_restored = self._on_log_restored
        self.topic_recovery = TopicRecoveryService(rlm, self.node_id, self.clock)
        self.remote_log_manager = rlm
        if self.member is not None and self.fetchers is not None:
            # Cluster mode: tiering follows leadership, partition by partition. Leaders upload and expire;
            # followers track what their leader uploaded (their local retention deletes only that) and
            # rebuild their log from remote storage when they fall below the leader's local log start.
            self.member.hooks.leading.append(lambda tp, topic_id: rlm.on_leadership_change({tp: topic_id}))
            replicas = self.replicas
            rlm.leadership_confirmed = lambda tp: not ((p := replicas.partitions.get(tp)) is not None and p.fenced)
            self.member.hooks.not_leading.append(
                lambda tp, topic_id, deleted: rlm.release(tp) if deleted else rlm.on_follower({tp: topic_id}))

            async def aux_state(tp: TopicPartition, topic_id: uuid.UUID, epoch: int, offset: int) -> RemoteAuxState:
                return await rlm.remote_aux_state(TopicIdPartition(topic_id, tp.topic, tp.partition), epoch, offset)

            self.fetchers.set_remote_aux_state(aux_state)
            parts = self.replicas.partitions.items()
            rlm.on_leadership_change({tp: p.topic_id for tp, p in parts if p.is_leader})
            rlm.on_follower({tp: p.topic_id for tp, p in parts if not p.is_leader})
        else:
            for info in self.topics:
                self._lead(info)

        def is_live(tip: TopicIdPartition) -> bool:
            info = self.topics.get(tip.topic)
            return info is not None and info.topic_id == tip.topic_id and tip.partition < info.partitions

        rlm.sweep_orphans(is_live)

    def _start_offsets_upload(self) -> None:
        """``offsets.remote.upload.interval.ms``: a copy of the committed offsets in the remote store."""
        interval = self.config.offsets_remote_upload_interval_ms
        rlm = self.remote_log_manager
        if not interval or rlm is None or self.groups is None:
            return
        if not isinstance(rlm.rsm, ObjectStore):
            log.warning("offsets.remote.upload.interval.ms is set, but the remote storage manager %s stores no "
                        "plain objects: committed offsets are not copied", type(rlm.rsm).__name__)
            return
        uploader = ConsumerOffsetsUploader(rlm.rsm, self.groups.committed_offsets, interval, self.node_id,
                                           self.clock.milliseconds)
        uploader.start()
        assert uploader.task is not None
        self._background.append(uploader.task)

    def _on_log_restored(self, tp: TopicPartition, highest_epoch: int) -> None:
        """remote.recovery: a leader's log now starts after the restored records, whose batches carry leader
        epochs up to ``highest_epoch``: new records must go in a later epoch, or the epoch history would go
        backwards (a cluster's restored topic was created leading above them; a single node moves up now)."""
        part = self.replicas.partitions.get(tp)
        if part is None or not part.is_leader:
            return
        if part.leader_epoch > highest_epoch:
            part.log.leader_epoch_cache.assign(part.leader_epoch, part.log.log_end_offset)
        elif self.cluster is None:
            self.replicas.become_leader_or_follower(
                tp, part.topic_id, PartitionState(self.node_id, highest_epoch + 1, (self.node_id,), (self.node_id,)))
        elif not part.log.config.remote_read_replica:  # (a read replica's origin may elect past its epoch)
            log.warning("%s: the restored records carry leader epochs up to %d but the partition leads in epoch %d "
                        "(not created through remote.recovery?): new records may be hard to tell from them by epoch",
                        tp, highest_epoch, part.leader_epoch)

    def _describe_topic(self, name: str) -> tuple[int, dict[str, str], int | None] | None:
        """Partition count, config overrides and replication factor of a topic, for its bucket manifest."""
        info = self.topics.get(name)
        if info is None:
            return None
        # None when not known here (yet): a restore then uses its own default
        return info.partitions, dict(info.configs), len(self.view.partition(name, 0).replicas) or None

    async def _start_diskless(self) -> None:
        """Diskless topics live in the remote store: they need one that also stores plain objects."""
        rlm = self.remote_log_manager
        assert rlm is not None
        if not isinstance(rlm.rsm, ObjectStore):
            log.warning("diskless topics are not available: the remote storage manager %s stores no plain "
                        "objects", type(rlm.rsm).__name__)
            return
        admin = self.admin
        forward = None
        if self.cluster is not None:
            forward = LeaderProducer(self.view, DISKLESS_METADATA_TOPIC, 0, inter_broker_security(self.config)).append

        async def create(name: str, partitions: int, replicas: int, configs: dict[str, str]) -> Any:
            return await admin.create_topic(name, partitions, replicas, configs)

        fetchers = self.fetchers
        diskless = DisklessService(self.config, self.replicas, self.topics, rlm.rsm, self.clock,
                                   self.cluster is not None, create, admin.max_replication_factor, forward,
                                   lambda offset: self.delete_records(METADATA_PARTITION, offset),
                                   classic_following=lambda tp: fetchers is not None
                                   and fetchers.fetch_state(tp) is not None,
                                   stop_following=lambda tp: fetchers.unfollow(tp) if fetchers is not None else None,
                                   observer=DisklessMetadataObserver(self.view, inter_broker_security(self.config))
                                   if self.cluster is not None else None)
        self.diskless = diskless
        await diskless.start()
        txns = self.transactions
        if txns is not None:
            topics = self.topics

            async def markers(tps: list[TopicPartition], pid: int, epoch: int, commit: bool,
                              coordinator_epoch: int) -> list[int]:
                named = [(info.topic_id, tp.topic, tp.partition) for tp in tps
                         if (info := topics.get(tp.topic)) is not None]
                if len(named) != len(tps):
                    return [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * len(tps)
                return await diskless.write_markers(named, pid, epoch, commit, coordinator_epoch)

            txns.diskless_markers = markers
            txns.is_diskless = diskless.is_diskless

    def _producer_id_expiration_ms(self) -> int:
        """``producer.id.expiration.ms`` as it is now: a dynamic broker config over the static one."""
        cfg = self.config
        for level in (cfg.dynamic_broker_configs, cfg.dynamic_default_configs):
            if "producer.id.expiration.ms" in level:
                return int(level["producer.id.expiration.ms"])
        return cfg.producer_id_expiration_ms

    async def _periodic(self, interval_ms: int, fn: Any, name: str, initial_delay_ms: int | None = None) -> None:
        await asyncio.sleep((interval_ms if initial_delay_ms is None else initial_delay_ms) / 1000)
        while True:
            try:
                fn()
            except KafkaStorageError as e:  # e.g. a full disk: expected, retried on the next round
                log.error("periodic %s failed: %s", name, e)
            except Exception:
                log.exception("periodic %s failed", name)
            await asyncio.sleep(interval_ms / 1000)

    async def stop(self) -> None:
        if self.shutting_down:
            return
        self.shutting_down = True
        lifecycle.info("shutting down")
        if self.cluster is not None and self.config.cluster.controlled_shutdown_enable:
            cfg = self.config.cluster
            bound = (cfg.controlled_shutdown_max_retries + 1) * cfg.controlled_shutdown_retry_backoff_ms / 1000
            try:
                left = await self.cluster.controlled_shutdown(min(bound, 30.0))
                lifecycle.info("controlled shutdown: %s", "leadership moved to other replicas" if not left else
                               f"{left} partitions still led here (no other live in-sync replica, or the "
                               "controller could not be reached)")
            except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: shut down anyway
                log.warning("controlled shutdown failed: %s", e)
        for runtime in self.listeners:
            runtime.close()
        for task in self._background:
            task.cancel()
        for task in list(self._connections):
            task.cancel()
        self.replicas.wake_all()
        await asyncio.gather(*self._background, *self._connections, return_exceptions=True)
        if self.diskless is not None:  # its last WAL object commits through __diskless_metadata: before the logs
            await self.diskless.stop()
        if self.log_cleaner is not None:
            # Off the loop: a cleaner thread waiting for the loop (a selection, a swap) must get it to stop.
            await asyncio.to_thread(self.log_cleaner.shutdown)
        if self.fetchers is not None:
            await self.fetchers.close()
        if self.member is not None:
            await self.member.close()
        await self.replicas.close()
        if self.cluster is not None:
            try:
                await self.cluster.close()
            except Exception as e:  # noqa: BLE001 - ZooKeeper gone: the session expires by itself
                log.warning("closing the ZooKeeper session failed: %s", e)
        if self.transactions is not None:
            await self.transactions.stop()
        if self.groups is not None:
            await self.groups.stop()
        if self.share_coordinator is not None:
            await self.share_coordinator.stop()
        if self.shares is not None:
            await self.shares.stop()
        if self.share_persister is not None:
            self.share_persister.close()
        if self.admin_http is not None:
            await self.admin_http.stop()
        if self.user_credentials is not None:
            self.user_credentials.stop()
        if self.group_configs is not None:
            self.group_configs.stop()
        if self.client_quotas is not None:
            self.client_quotas.stop()
        self.authorization.stop()
        try:
            if self.remote_log_manager is not None:
                await self.remote_log_manager.close()
            self.logs.shutdown()
        except KafkaStorageError as e:
            # A full disk (the checkpoints cannot be written) must not leave a SIGTERMed broker
            # hanging: without the clean-shutdown marker the next start recovers the logs.
            log.error("shutdown could not write the checkpoints (%s); the next start recovers the logs", e)
        except Exception:
            log.exception("shutdown could not close every log cleanly; the next start recovers them")
        finally:
            self.scheduler.shutdown(run_pending=False)
            lifecycle.info("strata broker stopped")
            self._stopped.set()

    async def serve_forever(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: loop.create_task(self.stop()))
        await self._stopped.wait()


def serve(config: BrokerConfig) -> None:
    asyncio.run(Broker(config).serve_forever())
