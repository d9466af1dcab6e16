"""The ``__consumer_offsets`` record codecs against byte vectors derived from Kafka's schemas.

The expected bytes are written out field by field from apache/kafka
``group-coordinator/src/main/resources/common/message/{OffsetCommitKey,OffsetCommitValue,
GroupMetadataKey,GroupMetadataValue}.json`` (int16 version prefix; non-flexible strings are int16
length + UTF-8, nullable as -1; bytes are int32 length; arrays int32 count; v4 values are flexible:
unsigned-varint lengths + 1, and an empty tagged-field section after each struct), so a drift in
our encoder shows up as a byte mismatch rather than as a round trip that agrees with itself.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.common.hashing import java_string_hash
from strata.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OtherKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
    subscribed_topics,
)
from strata.errors import CorruptRecordError


def i16(v: int) -> bytes:
    return v.to_bytes(2, "big", signed=True)


def i32(v: int) -> bytes:
    return v.to_bytes(4, "big", signed=True)


def i64(v: int) -> bytes:
    return v.to_bytes(8, "big", signed=True)


def s(v: str | None) -> bytes:
    return i16(-1) if v is None else i16(len(v.encode())) + v.encode()


def b(v: bytes) -> bytes:
    return i32(len(v)) + v


# -- fixed vectors ------------------------------------------------------------------------------

OFFSET_KEY = OffsetCommitKey("my-group", "orders", 7)
OFFSET_KEY_BYTES = bytes.fromhex("0001" "0008" + b"my-group".hex() + "0006" + b"orders".hex()
                                 + "00000007")

OFFSET_VALUE = OffsetCommitValue(offset=42, leader_epoch=3, metadata="meta", commit_timestamp=1_700_000_000_123)
OFFSET_VALUE_V3 = i16(3) + i64(42) + i32(3) + s("meta") + i64(1_700_000_000_123)
OFFSET_VALUE_V1 = i16(1) + i64(42) + s("meta") + i64(1_700_000_000_123) + i64(1_700_000_060_123)
OFFSET_VALUE_V0 = i16(0) + i64(42) + s("meta") + i64(1_700_000_000_123)
# v4 (flexible): compact string "meta" is uvarint(4 + 1) then the bytes; one empty tag section.
OFFSET_VALUE_V4 = i16(4) + i64(42) + i32(3) + bytes([5]) + b"meta" + i64(1_700_000_000_123) + bytes([0])

GROUP_KEY_BYTES = i16(2) + s("my-group")

MEMBER = MemberMetadata(member_id="c-1", group_instance_id=None, client_id="cli", client_host="/127.0.0.1",
                        rebalance_timeout=300_000, session_timeout=10_000, subscription=b"\x00\x01",
                        assignment=b"\x02")
STATIC_MEMBER = MemberMetadata(member_id="s-1", group_instance_id="inst", client_id="cli", client_host="/h",
                               rebalance_timeout=60_000, session_timeout=6_000, subscription=b"",
                               assignment=b"\x09\x08")
GROUP_VALUE = GroupMetadataValue(protocol_type="consumer", generation=5, protocol="range", leader="c-1",
                                 current_state_timestamp=1_700_000_000_000, members=(MEMBER, STATIC_MEMBER))


def member_v3(m: MemberMetadata) -> bytes:
    return (s(m.member_id) + s(m.group_instance_id) + s(m.client_id) + s(m.client_host) + i32(m.rebalance_timeout)
            + i32(m.session_timeout) + b(m.subscription) + b(m.assignment))


GROUP_VALUE_V3 = (i16(3) + s("consumer") + i32(5) + s("range") + s("c-1") + i64(1_700_000_000_000) + i32(2)
                  + member_v3(MEMBER) + member_v3(STATIC_MEMBER))
EMPTY_GROUP_VALUE_V3 = i16(3) + s("") + i32(0) + s(None) + s(None) + i64(1_700_000_000_000) + i32(0)


def test_offset_commit_key_matches_the_schema() -> None:
    assert encode_offset_commit_key("my-group", "orders", 7) == OFFSET_KEY_BYTES
    assert decode_key(OFFSET_KEY_BYTES) == OFFSET_KEY
    # key version 0 has the same layout and is still read
    assert decode_key(i16(0) + OFFSET_KEY_BYTES[2:]) == OFFSET_KEY


def test_group_metadata_key_matches_the_schema() -> None:
    assert encode_group_metadata_key("my-group") == GROUP_KEY_BYTES
    assert decode_key(GROUP_KEY_BYTES) == GroupMetadataKey("my-group")


def test_keys_of_newer_record_types_are_recognised_and_skipped() -> None:
    # KIP-848 consumer-group records use key versions 3 and up: not ours, but not corrupt either.
    assert decode_key(i16(3) + s("g")) == OtherKey(3)


def test_offset_commit_value_v3_is_what_we_write() -> None:
    assert encode_offset_commit_value(OFFSET_VALUE) == OFFSET_VALUE_V3
    assert decode_offset_commit_value(OFFSET_VALUE_V3) == OFFSET_VALUE


@pytest.mark.parametrize("data, expected", [
    (OFFSET_VALUE_V0, OffsetCommitValue(42, -1, "meta", 1_700_000_000_123)),
    (OFFSET_VALUE_V1, OffsetCommitValue(42, -1, "meta", 1_700_000_000_123, 1_700_000_060_123)),
    (i16(2) + OFFSET_VALUE_V0[2:], OffsetCommitValue(42, -1, "meta", 1_700_000_000_123)),
    (OFFSET_VALUE_V4, OFFSET_VALUE),
], ids=["v0", "v1", "v2", "v4"])
def test_offset_commit_value_older_and_flexible_versions_are_read(data: bytes, expected: OffsetCommitValue) -> None:
    assert decode_offset_commit_value(data) == expected


def test_offset_commit_value_v1_carries_the_expiry() -> None:
    v = OffsetCommitValue(42, -1, "meta", 1_700_000_000_123, 1_700_000_060_123)
    assert encode_offset_commit_value(v, version=1) == OFFSET_VALUE_V1
    assert encode_offset_commit_value(OFFSET_VALUE, version=4) == OFFSET_VALUE_V4


def test_flexible_value_skips_unknown_tagged_fields() -> None:
    tagged = OFFSET_VALUE_V4[:-1] + bytes([1, 7, 2]) + b"zz"  # one tag (7) of two bytes
    assert decode_offset_commit_value(tagged) == OFFSET_VALUE


def test_group_metadata_value_v3_matches_the_schema() -> None:
    assert encode_group_metadata_value(GROUP_VALUE) == GROUP_VALUE_V3
    assert decode_group_metadata_value(GROUP_VALUE_V3) == GROUP_VALUE


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    empty = GroupMetadataValue("", 0, None, None, 1_700_000_000_000, ())
    assert encode_group_metadata_value(empty) == EMPTY_GROUP_VALUE_V3
    assert decode_group_metadata_value(EMPTY_GROUP_VALUE_V3) == empty


def test_group_metadata_value_older_versions_lack_fields() -> None:
    # v0: no rebalance timeout, no state timestamp, no instance id.
    v0 = (i16(0) + s("consumer") + i32(1) + s("range") + s("c-1") + i32(1) + s("c-1") + s("cli") + s("/h")
          + i32(10_000) + b(b"\x01") + b(b"\x02"))
    decoded = decode_group_metadata_value(v0)
    assert decoded.current_state_timestamp == -1
    assert decoded.members == (MemberMetadata("c-1", None, "cli", "/h", -1, 10_000, b"\x01", b"\x02"),)
    for version in (0, 1, 2, 4):
        assert decode_group_metadata_value(encode_group_metadata_value(GROUP_VALUE, version)).members[0].member_id \
            == "c-1"


def test_group_metadata_value_v4_is_flexible() -> None:
    data = encode_group_metadata_value(GroupMetadataValue("consumer", 1, None, None, -1, ()), version=4)
    # version, compact "consumer" (9 = 8 + 1), generation, null protocol and leader (0), timestamp,
    # empty compact array (1), empty tags.
    assert data == i16(4) + bytes([9]) + b"consumer" + i32(1) + bytes([0, 0]) + i64(-1) + bytes([1, 0])


@pytest.mark.parametrize("bad", [b"", i16(1) + b"\x00", OFFSET_VALUE_V3[:-1], OFFSET_VALUE_V3 + b"\x00"])
def test_truncated_or_overlong_values_are_corrupt(bad: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_offset_commit_value(bad)


# -- round trips --------------------------------------------------------------------------------

names = st.text(min_size=0, max_size=40)
ints32 = st.integers(-(2**31), 2**31 - 1)
ints64 = st.integers(-(2**63), 2**63 - 1)


@given(group=names, topic=names, partition=ints32)
def test_offset_commit_key_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetCommitKey(group, topic, partition)


@given(offset=ints64, epoch=ints32, metadata=names, ts=ints64, version=st.sampled_from([0, 2, 3, 4]))
def test_offset_commit_value_round_trip(offset: int, epoch: int, metadata: str, ts: int, version: int) -> None:
    v = OffsetCommitValue(offset, epoch if version >= 3 else -1, metadata, ts)
    assert decode_offset_commit_value(encode_offset_commit_value(v, version)) == v


members = st.builds(MemberMetadata, names, st.none() | names, names, names, ints32, ints32, st.binary(max_size=64),
                    st.binary(max_size=64))


@given(ptype=names, generation=ints32, protocol=st.none() | names, leader=st.none() | names, ts=ints64,
       ms=st.lists(members, max_size=4), version=st.sampled_from([3, 4]))
def test_group_metadata_value_round_trip(ptype: str, generation: int, protocol: str | None, leader: str | None,
                                         ts: int, ms: list[MemberMetadata], version: int) -> None:
    v = GroupMetadataValue(ptype, generation, protocol, leader, ts, tuple(ms))
    assert decode_group_metadata_value(encode_group_metadata_value(v, version)) == v


# -- partitioning -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("", 0),
    ("a", 97),
    ("Aa", 2112),
    ("BB", 2112),  # the classic collision
    ("hello", 99162322),
    ("Hello World", -862545276),
    ("polygenelubricants", -(2**31)),  # hashes to Integer.MIN_VALUE
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 code units
])
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_partition_for_uses_kafka_utils_abs() -> None:
    assert partition_for("Hello World", 50) == 862545276 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0, not MIN_VALUE
    assert partition_for("hello", 7) == 99162322 % 7
    assert all(0 <= partition_for(f"group-{i}", 5) < 5 for i in range(200))


def test_subscription_topics_from_the_consumer_protocol() -> None:
    # ConsumerProtocolSubscription v1: version, topics, user data, owned partitions: only the v0 prefix matters.
    data = i16(1) + i32(2) + s("a") + s("b") + i32(-1) + i32(0)
    assert subscribed_topics(data) == {"a", "b"}
    assert subscribed_topics(b"\x00") is None
