"""RemoteLogMetadataTopicPartitioner must pick the metadata partition a Java broker would.

Kafka has no test with concrete partitions, so the vectors below were computed with OpenJDK 17:
``java.util.Objects.hash(lsb, msb, partition)`` (the real JDK method), its 4 big-endian bytes hashed
with Kafka's murmur2, ``& 0x7fffffff % n``. murmur2 itself is checked against Kafka's UtilsTest
vectors and kafka-python's independent implementation.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from strata.tiered.api import TopicIdPartition
from strata.tiered.metadata.partitioner import (
    RemoteLogMetadataTopicPartitioner,
    java_objects_hash,
    murmur2,
    to_positive,
)


@pytest.mark.parametrize(("data", "expected"), [  # Kafka UtilsTest.testMurmur2
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_kafka_vectors(data, expected):
    assert murmur2(data) == expected


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_to_positive():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; the mask does not
    assert to_positive(5) == 5


# (msb, lsb, partition, Objects.hash, murmur2, partition of 50, partition of 7), from OpenJDK 17.
JDK_VECTORS = [
    (0x0000000000000000, 0x0000000000000000, 0, 29791, -104191892, 6, 2),
    (0x0000000000000000, 0x0000000000000000, 2147483647, -2147453858, -2119851738, 10, 5),
    (0x0000000000000001, 0x0000000000000002, 0, 31744, 838789430, 30, 3),
    (0x0000000000000001, 0x0000000000000002, 42, 31786, -1380730052, 46, 0),
    (0x0000000000000001, 0x0000000000000002, 2147483647, -2147451905, -1010471524, 24, 3),
    (0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 7, 29798, 1843146031, 31, 6),
    (0x123456789ABCDEF0, 0x0FEDCBA987654321, 0, 286360415, 1817281361, 11, 0),
    (0x123456789ABCDEF0, 0x0FEDCBA987654321, 1, 286360416, -850630996, 2, 4),
    (0x123456789ABCDEF0, 0x0FEDCBA987654321, 7, 286360422, 867352076, 26, 3),
    (0x123456789ABCDEF0, 0x0FEDCBA987654321, 42, 286360457, -536680990, 8, 3),
    (0x123456789ABCDEF0, 0x0FEDCBA987654321, 2147483647, -1861123234, -176718446, 2, 0),
    (0x8000000000000000, 0x7FFFFFFFFFFFFFFF, 1, 29792, 56723830, 30, 2),
    (0x7F3C5E1D2B4A6988, 0x8899AABBCCDDEEFF, 0, 2123723438, -328557724, 24, 4),
    (0x7F3C5E1D2B4A6988, 0x8899AABBCCDDEEFF, 1, 2123723439, 990292935, 35, 2),
    (0x7F3C5E1D2B4A6988, 0x8899AABBCCDDEEFF, 42, 2123723480, 1035370247, 47, 2),
    (0x7F3C5E1D2B4A6988, 0x8899AABBCCDDEEFF, 2147483647, -23760211, -300397934, 14, 5),
]


def _signed64(v: int) -> int:
    return v - 2**64 if v >= 2**63 else v


@pytest.mark.parametrize(("msb", "lsb", "partition", "java_hash", "java_murmur", "p50", "p7"), JDK_VECTORS)
def test_metadata_partition_matches_the_jdk(msb, lsb, partition, java_hash, java_murmur, p50, p7):
    assert java_objects_hash(("long", _signed64(lsb)), ("long", _signed64(msb)), ("int", partition)) == java_hash
    assert murmur2((java_hash & 0xFFFFFFFF).to_bytes(4, "big")) == java_murmur
    tp = TopicIdPartition(uuid.UUID(bytes=msb.to_bytes(8, "big") + lsb.to_bytes(8, "big")), "ignored", partition)
    assert RemoteLogMetadataTopicPartitioner(50).metadata_partition(tp) == p50
    assert RemoteLogMetadataTopicPartitioner(7).metadata_partition(tp) == p7


def test_objects_hash_by_hand():
    # Arrays.hashCode: 31 * (31 * (31 * 1 + h(lsb)) + h(msb)) + partition, with Long.hashCode(v) = (int)(v ^ v >>> 32).
    # lsb = 2 -> 2, msb = 1 -> 1, partition 0: 31 * (31 * 33 + 1) + 0 = 31744.
    assert java_objects_hash(("long", 2), ("long", 1), ("int", 0)) == 31744
    # -1L hashes to (int)(0xffffffffffffffff ^ 0x00000000ffffffff) = (int) 0xffffffff00000000 = 0.
    assert java_objects_hash(("long", -1)) == 31
    # Wraparound: 31 * 1 + Integer.MAX_VALUE overflows to a negative int.
    assert java_objects_hash(("int", 2**31 - 1)) == -(2**31) + 30


def test_the_topic_name_is_not_part_of_the_hash():
    topic_id = uuid.uuid4()
    partitioner = RemoteLogMetadataTopicPartitioner(50)
    assert partitioner.metadata_partition(TopicIdPartition(topic_id, "a", 3)) == \
        partitioner.metadata_partition(TopicIdPartition(topic_id, "b", 3))


def test_partitions_spread_over_the_topic():
    partitioner = RemoteLogMetadataTopicPartitioner(50)
    used = {partitioner.metadata_partition(TopicIdPartition(uuid.uuid4(), "t", p)) for p in range(2000)}
    assert len(used) == 50


def test_at_least_one_partition():
    with pytest.raises(ValueError):
        RemoteLogMetadataTopicPartitioner(0)
