"""The KIP-848 / KIP-932 ``__consumer_offsets`` record codec against byte vectors derived by hand.

The expected bytes are spelled out field by field from apache/kafka 4.2
``group-coordinator/src/main/resources/common/message/{ConsumerGroup,ShareGroup}*{Key,Value}.json`` and the
framing of ``CoordinatorRecordSerde``: a key is an int16 record type then the non-flexible v0 key (int16-length
strings); a value is an int16 version (0) then the flexible v0 struct (compact lengths = unsigned varint
length + 1, 0 = null; a uuid is its 16 bytes; every struct, nested ones too, ends with a tagged-field
section: count, then tag, size, data). The vectors are literals, not the encoder's output, so any drift in the
layout fails here.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.coordinator.group import modern_records as mr
from strata.coordinator.group.modern_records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    PartitionMetadata,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    TopicInfo,
    TopicMetadata,
    TopicPartitions,
    TopicPartitionsInfo,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strata.errors import CorruptRecordError


def h(*fields: str) -> bytes:
    """Bytes from one hex string per field (spaces allowed), so each vector reads like the schema."""
    return bytes.fromhex("".join(fields))


U1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
U2 = uuid.UUID("0123456789abcdef0123456789abcdef")
U1_HEX = "00112233445566778899aabbccddeeff"
U2_HEX = "0123456789abcdef0123456789abcdef"
GRP = "0003 677270"  # int16 length 3, "grp"
M1 = "0002 6d31"  # int16 length 2, "m1"
T_1700000000000 = "0000018bcfe56800"  # 1_700_000_000_000 = 0x18BCFE56800

# -- keys ---------------------------------------------------------------------------------------

KEY_VECTORS = [
    (ConsumerGroupMetadataKey("grp"), h("0003", GRP)),
    (ConsumerGroupPartitionMetadataKey("grp"), h("0004", GRP)),
    (ConsumerGroupMemberMetadataKey("grp", "m1"), h("0005", GRP, M1)),
    (ConsumerGroupTargetAssignmentMetadataKey("grp"), h("0006", GRP)),
    (ConsumerGroupTargetAssignmentMemberKey("grp", "m1"), h("0007", GRP, M1)),
    (ConsumerGroupCurrentMemberAssignmentKey("grp", "m1"), h("0008", GRP, M1)),
    (ShareGroupMemberMetadataKey("grp", "m1"), h("000a", GRP, M1)),
    (ShareGroupMetadataKey("grp"), h("000b", GRP)),
    (ShareGroupTargetAssignmentMetadataKey("grp"), h("000c", GRP)),
    (ShareGroupTargetAssignmentMemberKey("grp", "m1"), h("000d", GRP, M1)),
    (ShareGroupCurrentMemberAssignmentKey("grp", "m1"), h("000e", GRP, M1)),
    (ShareGroupStatePartitionMetadataKey("grp"), h("000f", GRP)),
    (ConsumerGroupRegularExpressionKey("grp", "t.*"), h("0010", GRP, "0003 742e2a")),
]


@pytest.mark.parametrize(("key", "data"), KEY_VECTORS, ids=lambda x: type(x).__name__)
def test_key_matches_the_schema(key: mr.ModernKey, data: bytes) -> None:
    assert encode_key(key) == data
    assert decode_key(data) == key
    assert int.from_bytes(data[:2], "big") == key.RECORD_TYPE


def test_record_types_are_the_schemas_api_keys() -> None:
    assert mr.RECORD_TYPES == {3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16}
    for key, _ in KEY_VECTORS:
        value_cls = getattr(mr, type(key).__name__.removesuffix("Key") + "Value")
        assert value_cls.RECORD_TYPE == key.RECORD_TYPE


@pytest.mark.parametrize("record_type", [0, 1, 2, 9, 17, 18, 19, 20, 21, 22, 23, 24, 1000, -1])
def test_other_record_types_are_not_ours(record_type: int) -> None:
    data = record_type.to_bytes(2, "big", signed=True) + h(GRP)
    assert decode_key(data) is None
    with pytest.raises(ValueError, match="no consumer- or share-group record"):
        decode_value(record_type, h("0000 00000001 00"))


def test_key_length_counts_utf8_bytes() -> None:
    data = h("0003", "0004 67c3a921")  # "gé!": three characters, four bytes
    assert encode_key(ConsumerGroupMetadataKey("gé!")) == data
    assert decode_key(data) == ConsumerGroupMetadataKey("gé!")


def test_key_with_null_string_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(h("0005", GRP, "ffff"))  # MemberId null


def test_key_with_bytes_left_over_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(h("0003", GRP, "00"))


def test_key_with_none_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_key(ConsumerGroupMemberMetadataKey("grp", None))  # type: ignore[arg-type]


# -- values -------------------------------------------------------------------------------------

VALUE_VECTORS = [
    pytest.param(ConsumerGroupMetadataValue(epoch=5), h(
        "0000",  # version 0
        "00000005",  # Epoch
        "00",  # no tagged fields: MetadataHash 0 is the default, not written
    ), id="cg-metadata"),
    pytest.param(ConsumerGroupMetadataValue(epoch=5, metadata_hash=0x0102030405060708), h(
        "0000", "00000005",
        "01",  # one tagged field
        "00", "08", "0102030405060708",  # tag 0 MetadataHash, size 8, int64
    ), id="cg-metadata-hash"),
    pytest.param(ConsumerGroupMetadataValue(epoch=-1, metadata_hash=-2), h(
        "0000", "ffffffff", "01", "00", "08", "fffffffffffffffe",
    ), id="cg-metadata-negative-hash"),
    pytest.param(ConsumerGroupPartitionMetadataValue(topics=(
        TopicMetadata(U1, "foo", 3, (PartitionMetadata(0, ("r1", "r2")),)),
    )), h(
        "0000",
        "02",  # Topics: 1 element
        U1_HEX,  # TopicId
        "04 666f6f",  # TopicName "foo"
        "00000003",  # NumPartitions
        "02",  # PartitionMetadata: 1 element
        "00000000",  # Partition 0
        "03 03 7231 03 7232",  # Racks ["r1", "r2"]
        "00",  # PartitionMetadata tagged fields
        "00",  # TopicMetadata tagged fields
        "00",  # value tagged fields
    ), id="cg-partition-metadata"),
    pytest.param(ConsumerGroupPartitionMetadataValue(topics=(TopicMetadata(U2, "b", 1),)), h(
        "0000", "02", U2_HEX, "02 62", "00000001",
        "01",  # PartitionMetadata: empty (Kafka 4.0+ writes it so)
        "00", "00",
    ), id="cg-partition-metadata-no-racks"),
    pytest.param(ConsumerGroupMemberMetadataValue(
        instance_id=None, rack_id="rk", client_id="cid", client_host="/1.2.3.4",
        subscribed_topic_names=("foo", "bar"), subscribed_topic_regex=None, rebalance_timeout_ms=300000,
        server_assignor="uniform"), h(
        "0000",
        "00",  # InstanceId null
        "03 726b",  # RackId "rk"
        "04 636964",  # ClientId "cid"
        "09 2f312e322e332e34",  # ClientHost "/1.2.3.4"
        "03 04 666f6f 04 626172",  # SubscribedTopicNames ["foo", "bar"]
        "00",  # SubscribedTopicRegex null
        "000493e0",  # RebalanceTimeoutMs 300000
        "08 756e69666f726d",  # ServerAssignor "uniform"
        "00",  # no tagged fields: ClassicMemberMetadata null is the default
    ), id="cg-member-metadata"),
    pytest.param(ConsumerGroupMemberMetadataValue(
        instance_id="i1", rack_id=None, client_id="c", client_host="h", subscribed_topic_names=(),
        subscribed_topic_regex="t.*", rebalance_timeout_ms=-1, server_assignor=None,
        classic_member_metadata=ClassicMemberMetadata(45000, (ClassicProtocol("range", b"\x00\x03"),))), h(
        "0000",
        "03 6931",  # InstanceId "i1"
        "00",  # RackId null
        "02 63",  # ClientId "c"
        "02 68",  # ClientHost "h"
        "01",  # SubscribedTopicNames []
        "04 742e2a",  # SubscribedTopicRegex "t.*"
        "ffffffff",  # RebalanceTimeoutMs -1
        "00",  # ServerAssignor null
        "01",  # one tagged field
        "00", "11",  # tag 0 ClassicMemberMetadata, 17 bytes:
        "01",  # presence marker of the nullable struct (not null)
        "0000afc8",  # SessionTimeoutMs 45000
        "02",  # SupportedProtocols: 1 element
        "06 72616e6765",  # Name "range"
        "03 0003",  # Metadata, 2 bytes
        "00",  # ClassicProtocol tagged fields
        "00",  # ClassicMemberMetadata tagged fields
    ), id="cg-member-metadata-classic"),
    pytest.param(ConsumerGroupTargetAssignmentMetadataValue(7), h(
        "0000", "00000007", "00",
    ), id="cg-target-assignment-metadata"),
    pytest.param(ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(U1, (0, 2)), TopicPartitions(U2))), h(
        "0000",
        "03",  # TopicPartitions: 2 elements
        U1_HEX, "03 00000000 00000002", "00",  # U1 [0, 2], tagged fields
        U2_HEX, "01", "00",  # U2 [], tagged fields
        "00",
    ), id="cg-target-assignment-member"),
    pytest.param(ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=10, previous_member_epoch=9, state=1,
        assigned_partitions=(TopicPartitions(U1, (1,)),),
        partitions_pending_revocation=(TopicPartitions(U2, (4,)),)), h(
        "0000",
        "0000000a",  # MemberEpoch
        "00000009",  # PreviousMemberEpoch
        "01",  # State UNREVOKED_PARTITIONS
        "02", U1_HEX, "02 00000001", "00",  # AssignedPartitions
        "02", U2_HEX, "02 00000004", "00",  # PartitionsPendingRevocation
        "00",
    ), id="cg-current-member-assignment"),
    pytest.param(ShareGroupMemberMetadataValue(rack_id=None, client_id="cid", client_host="/h",
                                               subscribed_topic_names=("foo",)), h(
        "0000",
        "00",  # RackId null
        "04 636964",  # ClientId
        "03 2f68",  # ClientHost
        "02 04 666f6f",  # SubscribedTopicNames ["foo"]
        "00",
    ), id="sg-member-metadata"),
    pytest.param(ShareGroupMetadataValue(epoch=3, metadata_hash=0x1122334455667788), h(
        "0000", "00000003", "1122334455667788", "00",  # MetadataHash is a regular field here
    ), id="sg-metadata"),
    pytest.param(ShareGroupMetadataValue(epoch=3, metadata_hash=0), h(
        "0000", "00000003", "0000000000000000", "00",  # written even when 0
    ), id="sg-metadata-zero-hash"),
    pytest.param(ShareGroupTargetAssignmentMetadataValue(4), h(
        "0000", "00000004", "00",
    ), id="sg-target-assignment-metadata"),
    pytest.param(ShareGroupTargetAssignmentMemberValue((TopicPartitions(U1, (5,)),)), h(
        "0000", "02", U1_HEX, "02 00000005", "00", "00",
    ), id="sg-target-assignment-member"),
    pytest.param(ShareGroupCurrentMemberAssignmentValue(2, 1, 0, (TopicPartitions(U1, (0, 1)),)), h(
        "0000", "00000002", "00000001", "00",  # MemberEpoch, PreviousMemberEpoch, State STABLE
        "02", U1_HEX, "03 00000000 00000001", "00",  # AssignedPartitions
        "00",  # (no PartitionsPendingRevocation in the share schema)
    ), id="sg-current-member-assignment"),
    pytest.param(ShareGroupStatePartitionMetadataValue(
        initializing_topics=(TopicPartitionsInfo(U1, "foo", (0,)),),
        initialized_topics=(TopicPartitionsInfo(U2, "bar", (1, 2)),),
        deleting_topics=(TopicInfo(U1, "foo"),)), h(
        "0000",
        "02", U1_HEX, "04 666f6f", "02 00000000", "00",  # InitializingTopics
        "02", U2_HEX, "04 626172", "03 00000001 00000002", "00",  # InitializedTopics
        "02", U1_HEX, "04 666f6f", "00",  # DeletingTopics
        "00",
    ), id="sg-state-partition-metadata"),
    pytest.param(ShareGroupStatePartitionMetadataValue(), h("0000", "01", "01", "01", "00"),
                 id="sg-state-partition-metadata-empty"),
    pytest.param(ConsumerGroupRegularExpressionValue(("foo", "bar"), 42, 1_700_000_000_000), h(
        "0000",
        "03 04 666f6f 04 626172",  # Topics
        "000000000000002a",  # Version
        T_1700000000000,  # Timestamp
        "00",
    ), id="cg-regular-expression"),
]


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_value_matches_the_schema(value: mr.ModernValue, data: bytes) -> None:
    assert encode_value(value) == data
    assert decode_value(value.RECORD_TYPE, data) == value


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_truncated_value_is_corrupt(value: mr.ModernValue, data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_value(value.RECORD_TYPE, data[:n])


@pytest.mark.parametrize(("key", "data"), KEY_VECTORS, ids=lambda x: type(x).__name__)
def test_truncated_key_is_corrupt(key: mr.ModernKey, data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_key(data[:n])


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_bytes_left_over_in_v0_are_corrupt(value: mr.ModernValue, data: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="left over"):
        decode_value(value.RECORD_TYPE, data + b"\x00")


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_newer_version_is_read_as_v0_and_its_trailing_content_ignored(value: mr.ModernValue, data: bytes) -> None:
    newer = h("0001") + data[2:] + h("deadbeef")
    assert decode_value(value.RECORD_TYPE, newer) == value


def test_negative_version_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="negative version"):
        decode_value(6, h("ffff", "00000007", "00"))


# -- malformed lengths --------------------------------------------------------------------------

@pytest.mark.parametrize(("record_type", "data"), [
    (5, h("0000", "00", "00", "00")),  # ClientId null
    (7, h("0000", "00", "00")),  # TopicPartitions null
    (7, h("0000", "02", U1_HEX, "00", "00", "00")),  # Partitions null
    (16, h("0000", "00", "000000000000002a", T_1700000000000, "00")),  # Topics null
    (16, h("0000", "03", "04 666f6f", "00", "000000000000002a", T_1700000000000, "00")),  # a null topic name
    (7, h("0000", "ffffffff0f")),  # an array count of 2**32 - 2 elements
    (7, h("0000", "ffffffffff")),  # a varint of more than five bytes
    (7, h("0000", "05", U1_HEX, "01", "00")),  # 4 elements, 1 present
    (5, h("0000", "00", "00", "ffff01")),  # a string of 32766 bytes (length + 1 = 32767) that is not there
    (5, h("0000", "00", "00", "82 80 02")),  # a string longer than 0x7FFF bytes
    (6, h("0000", "00000007", "05 00 00")),  # five tagged fields in three bytes
    (6, h("0000", "00000007", "01 09 05 0000")),  # a tagged field of 5 bytes, 2 present
    (13, h("0000", "02", U1_HEX, "02 000000")),  # a truncated partition index
])
def test_malformed_value_is_corrupt(record_type: int, data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_value(record_type, data)


@given(st.sampled_from(sorted(mr.RECORD_TYPES)), st.binary(max_size=80))
def test_garbage_is_corrupt_or_decodes(record_type: int, data: bytes) -> None:
    try:
        decode_value(record_type, data)
    except CorruptRecordError:
        pass


# -- tagged fields ------------------------------------------------------------------------------

def test_unknown_tagged_fields_are_skipped_at_the_top_level() -> None:
    data = h("0000", "00000005",
             "03",  # three tagged fields
             "00", "08", "0000000000000009",  # tag 0 MetadataHash 9
             "05", "02", "abcd",  # tag 5, unknown
             "8001", "00")  # tag 128, unknown, empty
    assert decode_value(3, data) == ConsumerGroupMetadataValue(5, 9)
    # a 4.3 AssignmentTimestamp (tag 0) on type 6 and type 12
    data = h("0000", "00000007", "01", "00", "08", T_1700000000000)
    assert decode_value(6, data) == ConsumerGroupTargetAssignmentMetadataValue(7)
    assert decode_value(12, data) == ShareGroupTargetAssignmentMetadataValue(7)


def test_assignment_epochs_of_kafka_4_3_are_read_and_written_byte_for_byte() -> None:
    # 4.3's AssignmentEpochs (KIP-1251; tag 0, []int32) inside a TopicPartitions of type 8
    data = h("0000", "0000000a", "00000009", "00",
             "02", U1_HEX, "02 00000001", "01 00 05 02 00000003",
             "01",
             "00")
    value = ConsumerGroupCurrentMemberAssignmentValue(10, 9, 0, (TopicPartitions(U1, (1,), (3,)),))
    assert decode_value(8, data) == value
    assert encode_value(value) == data
    # the same tag in type 7's TopicPartitions means nothing there: skipped
    data7 = h("0000", "02", U1_HEX, "02 00000001", "01 00 05 02 00000003", "00")
    assert decode_value(7, data7) == ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(U1, (1,)),))
    # epochs not as long as the partitions: corrupt, and never written
    bad = h("0000", "0000000a", "00000009", "00",
            "02", U1_HEX, "02 00000001", "01 00 09 03 00000003 00000004", "01", "00")
    with pytest.raises(CorruptRecordError):
        decode_value(8, bad)
    with pytest.raises(ValueError):
        encode_value(ConsumerGroupCurrentMemberAssignmentValue(10, 9, 0, (TopicPartitions(U1, (1,), (3, 4)),)))


def test_unknown_tagged_fields_are_skipped_in_nested_structs() -> None:
    # inside ClassicMemberMetadata and its ClassicProtocol
    data = h("0000", "00", "00", "02 63", "02 68", "01", "00", "ffffffff", "00",
             "01", "00", "10",  # tag 0, 16 bytes
             "01", "00002710",
             "02", "02 72", "01", "01 07 01 aa",  # ClassicProtocol "r", b"", unknown tag 7
             "01 03 00")  # ClassicMemberMetadata: unknown tag 3, empty
    assert decode_value(5, data).classic_member_metadata == ClassicMemberMetadata(  # type: ignore[union-attr]
        10000, (ClassicProtocol("r", b""),))


def test_known_tagged_field_of_wrong_size_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="int64 of 4 bytes"):
        decode_value(3, h("0000", "00000005", "01", "00", "04", "00000009"))
    with pytest.raises(CorruptRecordError, match="left over"):  # ClassicMemberMetadata shorter than its size
        decode_value(5, h("0000", "00", "00", "02 63", "02 68", "01", "00", "ffffffff", "00",
                          "01", "00", "09", "01", "00002710", "01", "00", "ee", "ee"))


def test_classic_member_metadata_presence_zero_is_null() -> None:
    data = h("0000", "00", "00", "02 63", "02 68", "01", "00", "ffffffff", "00", "01", "00", "01", "00")
    value = decode_value(5, data)
    assert value == ConsumerGroupMemberMetadataValue(None, None, "c", "h")


# -- encoder errors -----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    ConsumerGroupMetadataValue(2**31),
    ShareGroupMetadataValue(1, 2**63),
    ConsumerGroupMetadataValue(1, 2**63),
    ConsumerGroupCurrentMemberAssignmentValue(1, 0, 128),
    ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(U1, (2**31,)),)),
    ConsumerGroupMemberMetadataValue(None, None, None, "h"),  # type: ignore[arg-type]
    ShareGroupMemberMetadataValue(None, "c", "h", (None,)),  # type: ignore[arg-type]
    ConsumerGroupMemberMetadataValue(None, None, "c", "x" * 0x8000),
])
def test_encoder_refuses_what_the_schema_cannot_hold(value: mr.ModernValue) -> None:
    with pytest.raises(ValueError):
        encode_value(value)


def test_encoder_refuses_other_objects() -> None:
    with pytest.raises(TypeError):
        encode_value(object())  # type: ignore[arg-type]


# -- round trips --------------------------------------------------------------------------------

int8s = st.integers(-(2**7), 2**7 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)
opt_names = st.none() | names
name_lists = st.lists(names, max_size=4).map(tuple)
int32_lists = st.lists(int32s, max_size=5).map(tuple)
topic_partitions = st.lists(st.builds(TopicPartitions, st.uuids(), int32_lists), max_size=3).map(tuple)
classic = st.builds(ClassicMemberMetadata, int32s,
                    st.lists(st.builds(ClassicProtocol, names, st.binary(max_size=20)), max_size=3).map(tuple))
topic_partitions_infos = st.lists(st.builds(TopicPartitionsInfo, st.uuids(), names, int32_lists),
                                  max_size=3).map(tuple)

values = st.one_of(
    st.builds(ConsumerGroupMetadataValue, int32s, int64s),
    st.builds(ConsumerGroupPartitionMetadataValue, st.lists(st.builds(
        TopicMetadata, st.uuids(), names, int32s,
        st.lists(st.builds(PartitionMetadata, int32s, name_lists), max_size=3).map(tuple)), max_size=3).map(tuple)),
    st.builds(ConsumerGroupMemberMetadataValue, opt_names, opt_names, names, names, name_lists, opt_names, int32s,
              opt_names, st.none() | classic),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32s),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, topic_partitions),
    st.builds(ConsumerGroupCurrentMemberAssignmentValue, int32s, int32s, int8s, topic_partitions, topic_partitions),
    st.builds(ShareGroupMemberMetadataValue, opt_names, names, names, name_lists),
    st.builds(ShareGroupMetadataValue, int32s, int64s),
    st.builds(ShareGroupTargetAssignmentMetadataValue, int32s),
    st.builds(ShareGroupTargetAssignmentMemberValue, topic_partitions),
    st.builds(ShareGroupCurrentMemberAssignmentValue, int32s, int32s, int8s, topic_partitions),
    st.builds(ShareGroupStatePartitionMetadataValue, topic_partitions_infos, topic_partitions_infos,
              st.lists(st.builds(TopicInfo, st.uuids(), names), max_size=3).map(tuple)),
    st.builds(ConsumerGroupRegularExpressionValue, name_lists, int64s, int64s),
)

keys = st.one_of(
    *(st.builds(cls, names) for cls in (
        ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey, ConsumerGroupTargetAssignmentMetadataKey,
        ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey, ShareGroupStatePartitionMetadataKey)),
    *(st.builds(cls, names, names) for cls in (
        ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupCurrentMemberAssignmentKey, ShareGroupMemberMetadataKey, ShareGroupTargetAssignmentMemberKey,
        ShareGroupCurrentMemberAssignmentKey, ConsumerGroupRegularExpressionKey)),
)


@given(values)
def test_value_round_trip(value: mr.ModernValue) -> None:
    data = encode_value(value)
    assert data[:2] == b"\x00\x00"
    assert decode_value(value.RECORD_TYPE, data) == value


@given(keys)
def test_key_round_trip(key: mr.ModernKey) -> None:
    data = encode_key(key)
    assert decode_key(data) == key
