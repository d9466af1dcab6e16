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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigKey, at_least, between

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
