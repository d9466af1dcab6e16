"""Kafka's hash of a string key, shared by the coordinators that place keys on partitions.

``__consumer_offsets`` and ``__transaction_state`` place a group id or a transactional id on partition
``Utils.abs(key.hashCode()) % partitions``; the result must be Kafka's, bit for bit, so that a client's
FindCoordinator answer and a Kafka tool reading those topics agree with Strata.
"""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, wrapping to a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode()) % partitions`` (``Utils.abs(MIN_VALUE)`` is 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
