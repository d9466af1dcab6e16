"""What a request handler reaches: the broker's services, named as a protocol instead of the ``Broker`` class.

Why: the broker (``strata.broker.server``) composes the listeners, the dispatcher and every service, so a
module that it imports and that imported it back (the dispatcher, the connection, the group and config
glue once did, for their type hints) made one import circle through the whole wire layer. Handlers now see
:class:`BrokerServices`, connections ``strata.broker.wire.connection.ConnectionServices``, and lower rooms
declare their own narrower protocols (``GroupCoordinatorHost``, ``LocalTopics``, ``ConfigResources``,
``DynamicConfigHost``). Only the command line imports the server module (an import-linter contract).

Each attribute is one service with its own small API; a handler should use the service, not reach
through it into another (``replicas`` for partition state, ``admin`` for topic changes, ``view`` for who
leads what, ``groups``/``transactions`` for the coordinators).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from strata.broker.authorization import Authorization
    from strata.broker.client_quotas import ClientQuotaStore
    from strata.broker.cluster_services import ClusterView, TopicAdmin
    from strata.broker.dynamic_config import DynamicBrokerConfigs
    from strata.broker.group_configs import GroupConfigStore
    from strata.broker.producer_ids import ClusterProducerIdManager, ProducerIdManager
    from strata.broker.share.partition_manager import SharePartitionManager
    from strata.broker.share.persister import SharePersister
    from strata.broker.topics import TopicRegistry
    from strata.broker.transactions import TransactionService
    from strata.broker.user_credentials import UserCredentials
    from strata.common import Clock, TopicPartition
    from strata.config.broker_config import BrokerConfig
    from strata.coordinator.group.coordinator import GroupCoordinator
    from strata.coordinator.share.coordinator import ShareCoordinator
    from strata.log.manager import LogManager
    from strata.quota.replication import ReplicationQuotas
    from strata.replication.replica_manager import ReplicaManager
    from strata.tiered.manager import RemoteLogManager, TieredStats


class BrokerServices(Protocol):
    """The broker as request handlers see it (``RequestContext.broker``)."""

    config: BrokerConfig  # replaced whole by a dynamic config change: read it per request
    node_id: int
    cluster_id: str
    topics: TopicRegistry  # names, ids, partition counts and overrides of the topics this broker knows
    logs: LogManager  # log directories (DescribeLogDirs, AlterReplicaLogDirs)
    replicas: ReplicaManager  # partition state: append, read, leadership, ISR
    admin: TopicAdmin  # create/delete/grow/reconfigure topics, elections, reassignments
    view: ClusterView  # brokers, controller, leaders
    groups: GroupCoordinator
    transactions: TransactionService | None  # None until the broker started it
    share_coordinator: ShareCoordinator | None  # KIP-932 share-partition state; None until the broker started it
    share_persister: SharePersister | None  # that state, wherever its coordinator runs
    shares: SharePartitionManager | None  # the share-partitions this broker leads (ShareFetch/ShareAcknowledge)
    clock: Clock
    producer_ids: ProducerIdManager | ClusterProducerIdManager
    remote_log_manager: RemoteLogManager | None  # None without tiering
    stats: TieredStats  # per-topic byte meters
    authorization: Authorization
    user_credentials: UserCredentials | None
    group_configs: GroupConfigStore | None
    client_quotas: ClientQuotaStore | None
    replication_quotas: ReplicationQuotas  # KIP-73: the leader side is applied to follower fetches
    dynamic_configs: DynamicBrokerConfigs

    @property
    def clustered(self) -> bool: ...

    def broker_entry(self, listener: str | None = None) -> dict[str, Any]: ...

    def delete_records(self, tp: TopicPartition, offset: int) -> int: ...

