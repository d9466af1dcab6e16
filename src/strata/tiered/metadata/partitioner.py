"""Kafka's ``RemoteLogMetadataTopicPartitioner``: which ``__remote_log_metadata`` partition holds a user partition.

It must match Kafka bit for bit: a broker reads only the metadata partitions its user partitions map
to, so a Strata broker sharing the topic with Java brokers (or replacing one) must put every record
where they would look for it::

    h = java.util.Objects.hash(topicId.lsb, topicId.msb, partition)     # 32-bit Java arithmetic
    metadataPartition = (murmur2(h as 4 bytes big-endian) & 0x7fffffff) % numMetadataPartitions

Kafka hashes the two longs rather than calling ``Uuid.hashCode`` so the mapping can never change
with that method's implementation. ``murmur2`` is Kafka's ``Utils.murmur2`` (the default producer
partitioner's hash), which no lower Strata layer implements yet; it lives here until one needs it.
"""

from __future__ import annotations

from strata.tiered.api import TopicIdPartition

__all__ = ["RemoteLogMetadataTopicPartitioner", "java_objects_hash", "murmur2", "to_positive"]

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_M = 0x5BD1E995
_SEED = 0x9747B28C
_R = 24


def _to_int32(n: int) -> int:
    n &= _MASK32
    return n - 0x100000000 if n & 0x80000000 else n


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit result, as Java returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[end4 + 2] << 16
    if rest >= 2:
        h ^= data[end4 + 1] << 8
    if rest >= 1:
        h ^= data[end4]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows at MIN_VALUE)."""
    return n & 0x7FFFFFFF


def _java_long_hash(v: int) -> int:
    """``Long.hashCode``: ``(int) (v ^ (v >>> 32))``."""
    u = v & _MASK64
    return _to_int32(u ^ (u >> 32))


def java_objects_hash(*values: tuple[str, int]) -> int:
    """``java.util.Objects.hash`` over ``("long" | "int", value)`` pairs, with int32 wraparound."""
    h = 1
    for kind, value in values:
        element = _java_long_hash(value) if kind == "long" else _to_int32(value)
        h = (31 * h + element) & _MASK32
    return _to_int32(h)


class RemoteLogMetadataTopicPartitioner:
    """Maps a user partition to its metadata partition; results are memoised (the RLM asks per write)."""

    def __init__(self, num_metadata_topic_partitions: int) -> None:
        if num_metadata_topic_partitions < 1:
            raise ValueError(f"the metadata topic needs at least one partition, got {num_metadata_topic_partitions}")
        self.num_metadata_topic_partitions = num_metadata_topic_partitions
        self._memo: dict[TopicIdPartition, int] = {}

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        partition = self._memo.get(tp)
        if partition is None:
            partition = to_positive(murmur2(self._to_bytes(tp))) % self.num_metadata_topic_partitions
            if len(self._memo) < 1_000_000:  # bound the memo; a miss only costs a hash
                self._memo[tp] = partition
        return partition

    @staticmethod
    def _to_bytes(tp: TopicIdPartition) -> bytes:
        raw = tp.topic_id.bytes  # Kafka Uuid: msb (big-endian) then lsb
        msb = int.from_bytes(raw[:8], "big", signed=True)
        lsb = int.from_bytes(raw[8:], "big", signed=True)
        h = java_objects_hash(("long", lsb), ("long", msb), ("int", tp.partition))
        return (h & _MASK32).to_bytes(4, "big")
