"""Replication settings a dynamic broker config changes at run time.

Kafka's ``BrokerConfigHandler`` gives the replication quotas their bounds from the dynamic configs
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` (this broker's value, else
the cluster-wide one, else unbounded: they are not ``server.properties`` keys), and ``DynamicThreadPool``
resizes the replica fetchers to a new ``num.replica.fetchers``. Both run after every application of the
dynamic configs (:attr:`strata.broker.dynamic_config.DynamicBrokerConfigs.on_apply`), the first one at start.
"""

from __future__ import annotations

import logging

from strata.config.broker_config import BrokerConfig
from strata.quota.replication import UNBOUNDED, ReplicationQuotas
from strata.replication.fetcher import ReplicaFetcherManager

log = logging.getLogger(__name__)


class ReplicationConfig:
    def __init__(self, quotas: ReplicationQuotas, fetchers: ReplicaFetcherManager | None) -> None:
        self.quotas = quotas
        self.fetchers = fetchers

    def apply(self, effective: BrokerConfig) -> None:
        leader, follower = self.quotas.leader, self.quotas.follower
        before = (leader.upper_bound, follower.upper_bound)
        self.quotas.update(effective.dynamic_broker_configs, effective.dynamic_default_configs)
        after = (leader.upper_bound, follower.upper_bound)
        if after != before:
            log.info("replication throttles: leader %s, follower %s", *(_rate(r) for r in after))
        if self.fetchers is not None:
            self.fetchers.resize(effective.cluster.num_replica_fetchers)


def _rate(bound: int) -> str:
    return "unbounded" if bound >= UNBOUNDED else f"{bound} bytes/s"
