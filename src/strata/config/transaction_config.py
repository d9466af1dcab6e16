"""The transaction coordinator's keys of ``server.properties`` (Kafka's names and defaults).

Kafka's ``TransactionStateManagerConfig`` and ``TransactionLogConfig``: ``__transaction_state`` is a
compacted topic of ``transaction.state.log.num.partitions`` partitions (50), replicated
``transaction.state.log.replication.factor`` times in cluster mode (3; a single node uses 1), and a
client may ask for a transaction timeout up to ``transaction.max.timeout.ms`` (15 minutes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigKey, at_least

TRANSACTION_KEYS = [
    ConfigKey("transaction.state.log.num.partitions", "int", 50, at_least(1), "Partitions of __transaction_state"),
    ConfigKey("transaction.state.log.replication.factor", "int", 3, at_least(1),
              "Replication factor of __transaction_state in cluster mode (a single node uses 1)"),
    ConfigKey("transaction.state.log.min.isr", "int", 2, at_least(1),
              "min.insync.replicas of __transaction_state (capped by its replication factor)"),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104_857_600, at_least(1),
              "segment.bytes of __transaction_state"),
    ConfigKey("transaction.max.timeout.ms", "int", 900_000, at_least(1),
              "The longest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above it)"),
    ConfigKey("transactional.id.expiration.ms", "int", 604_800_000, at_least(1),
              "A transactional id without a transaction for this long is forgotten"),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000, at_least(1),
              "How often the coordinator aborts transactions left open past their timeout"),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3_600_000, at_least(1),
              "How often the coordinator forgets expired transactional ids"),
    ConfigKey("transaction.partition.verification.enable", "bool", True, None,
              "KIP-890: a partition leader takes a transaction's first batch only once the coordinator confirms "
              "the partition is in the producer's open transaction (dynamic)"),
]


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104_857_600
    max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    abort_timed_out_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any]) -> TransactionConfig:
        return cls(
            num_partitions=p["transaction.state.log.num.partitions"],
            replication_factor=p["transaction.state.log.replication.factor"],
            min_isr=p["transaction.state.log.min.isr"],
            segment_bytes=p["transaction.state.log.segment.bytes"],
            max_timeout_ms=p["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=p["transactional.id.expiration.ms"],
            abort_timed_out_interval_ms=p["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_interval_ms=p["transaction.remove.expired.transaction.cleanup.interval.ms"],
        )
