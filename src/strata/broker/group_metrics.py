"""Group coordinator metrics under Kafka 4's names (``group-coordinator-metrics``, KIP-848).

Kafka's new group coordinator reports, in the ``kafka.server:type=group-coordinator-metrics`` group (the
Prometheus JMX exporter names them ``kafka_server_group_coordinator_metrics_<name>``):

* ``group-count`` (gauge, label ``protocol``: classic, consumer): groups coordinated here;
* ``classic-group-count`` and ``consumer-group-count`` (gauges, label ``state``): groups per state
  (classic: Empty, PreparingRebalance, CompletingRebalance, Stable; consumer: Empty, Assigning,
  Reconciling, Stable);
* ``consumer-group-rebalance`` (meter: ``_total`` and ``_OneMinuteRate``): consumer-group epoch bumps,
  Kafka's ``consumer-group-rebalance-count`` / ``-rate`` (each bump is a new target assignment).

KIP-932 adds ``share-group-count`` (label ``state``: Empty, Stable) and ``share-group-rebalance``, and the
share-partition leader's ``kafka_server_share_group_metrics_*`` running totals: records acquired,
acknowledged and released, lock expiries and failed state writes.

Read at scrape time from the coordinator's state machine (the endpoint renders on the event loop, the only
thread that changes it); absent until the coordinator has started.
"""

from __future__ import annotations

from typing import Any, Protocol

from strata.common.metrics import Meter, Registry

PREFIX = "kafka_server_group_coordinator_metrics_"
SHARE_PREFIX = "kafka_server_share_group_metrics_"
SHARE_STATES = ("Empty", "Stable")
SHARE_COUNTERS = {
    "acquired_records": "Records handed out to share-group members (each delivery counts).",
    "acknowledged_records": "Acknowledgements (accept, reject, release) persisted.",
    "released_records": "Records given back when their member left, was fenced or closed its session.",
    "lock_expiries": "Acquisition-lock timeouts that gave records back (or archived them at the limit).",
    "write_failures": "Share-state writes that failed and were rolled back.",
}
CLASSIC_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable")
CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable")


class BrokerLike(Protocol):
    groups: Any
    shares: Any


class GroupMetrics:
    def __init__(self, registry: Registry, broker: BrokerLike) -> None:
        self._broker = broker
        self._rebalances_seen = 0
        for protocol in ("classic", "consumer"):
            registry.gauge(PREFIX + "group_count", "Groups coordinated by this broker, per protocol.",
                           {"protocol": protocol}, fn=lambda p=protocol: self._count(p))
        for state in CLASSIC_STATES:
            registry.gauge(PREFIX + "classic_group_count", "Classic groups coordinated here, per state.",
                           {"state": state}, fn=lambda s=state: self._classic_in(s))
        for state in CONSUMER_STATES:
            registry.gauge(PREFIX + "consumer_group_count", "Consumer groups (KIP-848) coordinated here, per state.",
                           {"state": state}, fn=lambda s=state: self._consumer_in(s))
        self.rebalances: Meter = registry.meter(PREFIX + "consumer_group_rebalance",
                                                "Consumer-group epoch bumps (new target assignments).")
        registry.gauge(PREFIX + "group_count", "Groups coordinated by this broker, per protocol.",
                       {"protocol": "share"}, fn=lambda: self._share_in(None))
        for state in SHARE_STATES:
            registry.gauge(PREFIX + "share_group_count", "Share groups (KIP-932) coordinated here, per state.",
                           {"state": state}, fn=lambda s=state: self._share_in(s))
        for name, help_text in SHARE_COUNTERS.items():
            registry.gauge(SHARE_PREFIX + name, help_text, fn=lambda n=name: self._share_stat(n))

    def _share_in(self, state: str | None) -> int | None:
        manager = self._manager()
        if manager is None:
            return None
        return sum(1 for g in manager.share.groups.values() if not g.dead and (state is None or g.state() == state))

    def _share_stat(self, name: str) -> int | None:
        shares = getattr(self._broker, "shares", None)
        return None if shares is None else int(getattr(shares.stats, name))

    def _manager(self) -> Any:
        groups = self._broker.groups
        return getattr(groups, "manager", None) if groups is not None else None

    def _sync_rebalances(self, manager: Any) -> None:
        total = manager.consumer.rebalances
        if total > self._rebalances_seen:
            self.rebalances.mark(total - self._rebalances_seen)
        self._rebalances_seen = total

    def _count(self, protocol: str) -> int | None:
        manager = self._manager()
        if manager is None:
            return None
        if protocol == "classic":
            return sum(1 for g in manager.groups.values() if g.state.value != "Dead")
        self._sync_rebalances(manager)
        return sum(1 for g in manager.consumer.groups.values() if not g.dead)

    def _classic_in(self, state: str) -> int | None:
        manager = self._manager()
        return None if manager is None else sum(1 for g in manager.groups.values() if g.state.value == state)

    def _consumer_in(self, state: str) -> int | None:
        manager = self._manager()
        return None if manager is None else sum(1 for g in manager.consumer.groups.values()
                                                if g.state().value == state)


def register_group_metrics(registry: Registry, broker: BrokerLike) -> GroupMetrics:
    return GroupMetrics(registry, broker)
