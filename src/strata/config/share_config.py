"""The KIP-932 share coordinator's keys of ``server.properties`` (Kafka 4.2's ``ShareCoordinatorConfig``).

The share coordinator keeps every share-partition's state (its start offset and the delivery state of the
records in flight) in ``__share_group_state``: ``share.coordinator.state.topic.num.partitions`` partitions
(50), ``cleanup.policy=delete`` with ``retention.ms=-1`` (records are removed only by the coordinator's own
pruning, every ``share.coordinator.state.topic.prune.interval.ms``), replicated
``share.coordinator.state.topic.replication.factor`` times in a cluster (3; a single node uses 1) with
``min.insync.replicas`` = ``share.coordinator.state.topic.min.isr`` (2, capped by the replication factor so
a topic of fewer replicas can still be written). A write is one ShareUpdate record; every
``share.coordinator.snapshot.update.records.per.snapshot`` updates (at most 500, Kafka's bound) the
coordinator writes a full ShareSnapshot instead, so a reload replays at most that many updates per key.

Kafka's tuning keys for its thread pool, load buffer, compression and append linger are accepted (a Kafka
``server.properties`` must load) and have no effect: the coordinator runs on the broker's event loop and
appends each operation at once.

The share groups' own keys, ``group.share.*`` (Kafka 4.2's ``ShareGroupConfig`` and the share part of
``GroupCoordinatorConfig``), are :data:`SHARE_GROUP_KEYS`: a member's session and heartbeat interval and a
record's acquisition lock come from the broker, not the client, bounded by min/max keys, and the first three
may be overridden per group (``share.session.timeout.ms`` ... on a GROUP resource,
:mod:`strata.config.group_config`). ``group.share.enable`` is accepted and gates nothing: as in Kafka 4.2,
share groups are served when ``group.coordinator.rebalance.protocols`` contains ``share`` (the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigKey, at_least, between, list_of
from strata.errors import InvalidConfigError

_NO_EFFECT = "Accepted for Kafka compatibility; Strata's share coordinator has no such machinery"
MAX_SHORT = 32767

SHARE_COORDINATOR_KEYS = [
    ConfigKey("share.coordinator.state.topic.num.partitions", "int", 50, at_least(1),
              "Partitions of __share_group_state (should not change after deployment)"),
    ConfigKey("share.coordinator.state.topic.replication.factor", "int", 3, between(1, MAX_SHORT),
              "Replication factor of __share_group_state in cluster mode (a single node uses 1); the topic is "
              "not created until this many brokers are alive"),
    ConfigKey("share.coordinator.state.topic.min.isr", "int", 2, between(1, MAX_SHORT),
              "min.insync.replicas of __share_group_state (capped by its replication factor)"),
    ConfigKey("share.coordinator.state.topic.segment.bytes", "int", 104_857_600, at_least(1),
              "segment.bytes of __share_group_state"),
    ConfigKey("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, between(0, 500),
              "ShareUpdate records written per share-partition between two ShareSnapshot records"),
    ConfigKey("share.coordinator.write.timeout.ms", "int", 5000, at_least(1),
              "How long a share-state write waits for the in-sync replicas of __share_group_state"),
    ConfigKey("share.coordinator.state.topic.prune.interval.ms", "int", 300_000, at_least(1),
              "How often the records of __share_group_state that newer snapshots made redundant are deleted"),
    ConfigKey("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300_000, at_least(1),
              "A share-partition not snapshotted for this long is snapshotted again (so pruning can pass it)"),
    ConfigKey("share.coordinator.threads", "int", 1, at_least(1), _NO_EFFECT),
    ConfigKey("share.coordinator.load.buffer.size", "int", 5 * 1024 * 1024, at_least(1), _NO_EFFECT),
    ConfigKey("share.coordinator.state.topic.compression.codec", "int", 0, between(0, 4), _NO_EFFECT),
    ConfigKey("share.coordinator.append.linger.ms", "int", -1, at_least(-1), _NO_EFFECT),
]


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104_857_600
    snapshot_update_records_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    prune_interval_ms: int = 300_000
    cold_partition_snapshot_interval_ms: int = 300_000

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any]) -> ShareCoordinatorConfig:
        return cls(
            num_partitions=p["share.coordinator.state.topic.num.partitions"],
            replication_factor=p["share.coordinator.state.topic.replication.factor"],
            min_isr=p["share.coordinator.state.topic.min.isr"],
            segment_bytes=p["share.coordinator.state.topic.segment.bytes"],
            snapshot_update_records_per_snapshot=p["share.coordinator.snapshot.update.records.per.snapshot"],
            write_timeout_ms=p["share.coordinator.write.timeout.ms"],
            prune_interval_ms=p["share.coordinator.state.topic.prune.interval.ms"],
            cold_partition_snapshot_interval_ms=p["share.coordinator.cold.partition.snapshot.interval.ms"],
        )


# -- share groups (group.share.*) ---------------------------------------------------------------

SHARE_ASSIGNORS = ("simple",)

SHARE_GROUP_KEYS = [
    ConfigKey("group.share.enable", "bool", False, None,
              "Accepted for Kafka compatibility and gates nothing: share groups are served when "
              "group.coordinator.rebalance.protocols contains share"),
    ConfigKey("group.share.session.timeout.ms", "int", 45_000, at_least(1),
              "Session timeout of share-group members: the broker decides it, not the client"),
    ConfigKey("group.share.min.session.timeout.ms", "int", 45_000, at_least(1), ""),
    ConfigKey("group.share.max.session.timeout.ms", "int", 60_000, at_least(1), ""),
    ConfigKey("group.share.heartbeat.interval.ms", "int", 5_000, at_least(1),
              "How often share-group members heartbeat (told to them in each response)"),
    ConfigKey("group.share.min.heartbeat.interval.ms", "int", 5_000, at_least(1), ""),
    ConfigKey("group.share.max.heartbeat.interval.ms", "int", 15_000, at_least(1), ""),
    ConfigKey("group.share.record.lock.duration.ms", "int", 30_000, at_least(1000),
              "How long a record acquired by a share consumer stays locked to it before it is offered again"),
    ConfigKey("group.share.min.record.lock.duration.ms", "int", 15_000, between(1000, 30_000), ""),
    ConfigKey("group.share.max.record.lock.duration.ms", "int", 60_000, between(30_000, 3_600_000), ""),
    ConfigKey("group.share.delivery.count.limit", "int", 5, between(2, 10),
              "Deliveries of a record to share consumers before it is archived as undeliverable"),
    ConfigKey("group.share.partition.max.record.locks", "int", 2000, between(100, 10_000),
              "Records of one share-partition acquired at once (in flight)"),
    ConfigKey("group.share.max.share.sessions", "int", 2000, at_least(1),
              "Share sessions (KIP-932's fetch sessions) this broker keeps"),
    ConfigKey("group.share.max.size", "int", 200, between(1, 1000), "Most members of one share group"),
    ConfigKey("group.share.assignors", "list", list(SHARE_ASSIGNORS), list_of(*SHARE_ASSIGNORS),
              "Server-side assignors of share groups"),
    ConfigKey("group.share.initialize.retry.interval.ms", "int", 30_000, at_least(1),
              "A share-partition whose state initialization has not finished is asked for again after this"),
]


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000
    max_share_sessions: int = 2000
    max_size: int = 200
    initialize_retry_interval_ms: int = 30_000

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any]) -> ShareGroupConfig:
        cfg = cls(
            session_timeout_ms=p["group.share.session.timeout.ms"],
            min_session_timeout_ms=p["group.share.min.session.timeout.ms"],
            max_session_timeout_ms=p["group.share.max.session.timeout.ms"],
            heartbeat_interval_ms=p["group.share.heartbeat.interval.ms"],
            min_heartbeat_interval_ms=p["group.share.min.heartbeat.interval.ms"],
            max_heartbeat_interval_ms=p["group.share.max.heartbeat.interval.ms"],
            record_lock_duration_ms=p["group.share.record.lock.duration.ms"],
            min_record_lock_duration_ms=p["group.share.min.record.lock.duration.ms"],
            max_record_lock_duration_ms=p["group.share.max.record.lock.duration.ms"],
            delivery_count_limit=p["group.share.delivery.count.limit"],
            partition_max_record_locks=p["group.share.partition.max.record.locks"],
            max_share_sessions=p["group.share.max.share.sessions"],
            max_size=p["group.share.max.size"],
            initialize_retry_interval_ms=p["group.share.initialize.retry.interval.ms"],
        )
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Kafka's ``ShareGroupConfig`` / ``GroupCoordinatorConfig`` cross-checks, each naming the key at fault.

        A bound pair that cannot hold any value names the max key; otherwise the value outside its bounds is
        named, so a test suite's ``group.share.min.record.lock.duration.ms=1000`` with
        ``group.share.record.lock.duration.ms=1000`` loads and a lock duration below the min does not.
        """
        for name, value, low, high in (
                ("session.timeout.ms", self.session_timeout_ms, self.min_session_timeout_ms,
                 self.max_session_timeout_ms),
                ("heartbeat.interval.ms", self.heartbeat_interval_ms, self.min_heartbeat_interval_ms,
                 self.max_heartbeat_interval_ms),
                ("record.lock.duration.ms", self.record_lock_duration_ms, self.min_record_lock_duration_ms,
                 self.max_record_lock_duration_ms)):
            if high < low:
                raise InvalidConfigError(
                    f"Invalid value {high} for configuration group.share.max.{name}: must be at least "
                    f"group.share.min.{name} ({low})")
            if not low <= value <= high:
                raise InvalidConfigError(
                    f"Invalid value {value} for configuration group.share.{name}: must be between "
                    f"group.share.min.{name} ({low}) and group.share.max.{name} ({high})")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError(
                f"Invalid value {self.heartbeat_interval_ms} for configuration group.share.heartbeat.interval.ms: "
                f"must be less than group.share.session.timeout.ms ({self.session_timeout_ms})")
