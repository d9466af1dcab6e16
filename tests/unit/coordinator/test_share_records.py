"""The ``__share_group_state`` record codec against byte vectors derived by hand from Kafka's schemas.

The expected bytes are spelled out field by field from apache/kafka 4.2
``share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,Value}.json``: a key is an
int16 record type (0 ShareSnapshot, 1 ShareUpdate) then the non-flexible v0 key (int16-length GroupId, TopicId
as 16 bytes, int32 Partition); a value is an int16 version (0) then the flexible v0 struct, with compact array
counts (count + 1), an empty tagged-field section after each StateBatch, and a final tagged-field section
holding DeliveryCompleteCount (tag 0, int32) only when it is not its default -1.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.coordinator.share.records import (
    SHARE_GROUP_STATE_TOPIC,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    ShareValue,
    StateBatch,
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
U1_HEX = "00112233445566778899aabbccddeeff"
T_1700000000000 = "0000018bcfe56800"  # 1_700_000_000_000 = 0x18BCFE56800
T_1700000001000 = "0000018bcfe56be8"  # 1_700_000_001_000

SNAPSHOT = ShareSnapshotValue(
    snapshot_epoch=1, state_epoch=2, leader_epoch=3, start_offset=100,
    create_timestamp=1_700_000_000_000, write_timestamp=1_700_000_001_000,
    state_batches=(StateBatch(100, 109, 0, 1), StateBatch(110, 119, 2, 3)))
SNAPSHOT_BYTES = h(
    "0000",  # version 0
    "00000001",  # SnapshotEpoch
    "00000002",  # StateEpoch
    "00000003",  # LeaderEpoch
    "0000000000000064",  # StartOffset 100
    T_1700000000000,  # CreateTimestamp
    T_1700000001000,  # WriteTimestamp
    "03",  # StateBatches: 2 elements
    "0000000000000064", "000000000000006d", "00", "0001", "00",  # 100-109 Available, count 1, tagged fields
    "000000000000006e", "0000000000000077", "02", "0003", "00",  # 110-119 Acked, count 3, tagged fields
    "00",  # no tagged fields: DeliveryCompleteCount -1 is the default
)

UPDATE = ShareUpdateValue(snapshot_epoch=1, leader_epoch=3, start_offset=-1,
                          state_batches=(StateBatch(120, 120, 4, 5),), delivery_complete_count=10)
UPDATE_BYTES = h(
    "0000",
    "00000001",  # SnapshotEpoch
    "00000003",  # LeaderEpoch
    "ffffffffffffffff",  # StartOffset -1: unchanged
    "02", "0000000000000078", "0000000000000078", "04", "0005", "00",  # 120-120 Archived, count 5
    "01",  # one tagged field
    "00", "04", "0000000a",  # tag 0 DeliveryCompleteCount, size 4, 10
)

VALUE_VECTORS = [
    pytest.param(SNAPSHOT, SNAPSHOT_BYTES, id="snapshot"),
    pytest.param(ShareSnapshotValue(0, 0, -1, 0, 0, 0, delivery_complete_count=0), h(
        "0000", "00000000", "00000000", "ffffffff", "0000000000000000", "0000000000000000", "0000000000000000",
        "01",  # StateBatches: empty
        "01", "00", "04", "00000000",  # DeliveryCompleteCount 0 is not the default: written
    ), id="snapshot-empty"),
    pytest.param(UPDATE, UPDATE_BYTES, id="update"),
    pytest.param(ShareUpdateValue(7, 8, 9), h(
        "0000", "00000007", "00000008", "0000000000000009", "01", "00",
    ), id="update-empty"),
]

KEY_VECTORS = [
    pytest.param(ShareSnapshotKey("grp", U1, 7), h("0000", "0003 677270", U1_HEX, "00000007"), id="snapshot"),
    pytest.param(ShareUpdateKey("grp", U1, 7), h("0001", "0003 677270", U1_HEX, "00000007"), id="update"),
]


def test_topic_name_and_record_types() -> None:
    assert SHARE_GROUP_STATE_TOPIC == "__share_group_state"
    assert (ShareSnapshotKey.RECORD_TYPE, ShareUpdateKey.RECORD_TYPE) == (0, 1)
    assert (ShareSnapshotValue.RECORD_TYPE, ShareUpdateValue.RECORD_TYPE) == (0, 1)


@pytest.mark.parametrize(("key", "data"), KEY_VECTORS)
def test_key_matches_the_schema(key: ShareSnapshotKey | ShareUpdateKey, data: bytes) -> None:
    assert encode_key(key) == data
    assert decode_key(data) == key


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_value_matches_the_schema(value: ShareValue, data: bytes) -> None:
    assert encode_value(value) == data
    assert decode_value(value.RECORD_TYPE, data) == value


@pytest.mark.parametrize("record_type", [2, 3, -1, 100])
def test_other_record_types_are_not_ours(record_type: int) -> None:
    assert decode_key(record_type.to_bytes(2, "big", signed=True) + h("0003 677270", U1_HEX, "00000007")) is None
    with pytest.raises(ValueError):
        decode_value(record_type, UPDATE_BYTES)


@pytest.mark.parametrize(("key", "data"), KEY_VECTORS)
def test_truncated_key_is_corrupt(key: ShareSnapshotKey | ShareUpdateKey, data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_key(data[:n])


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_truncated_value_is_corrupt(value: ShareValue, data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_value(value.RECORD_TYPE, data[:n])


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_bytes_left_over_in_v0_are_corrupt(value: ShareValue, data: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="left over"):
        decode_value(value.RECORD_TYPE, data + b"\x00")


@pytest.mark.parametrize(("value", "data"), VALUE_VECTORS)
def test_newer_version_is_read_as_v0_and_its_trailing_content_ignored(value: ShareValue, data: bytes) -> None:
    assert decode_value(value.RECORD_TYPE, h("0001") + data[2:] + h("01020304")) == value


def test_malformed_values_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="negative version"):
        decode_value(1, h("ffff") + UPDATE_BYTES[2:])
    with pytest.raises(CorruptRecordError):  # StateBatches null
        decode_value(1, h("0000", "00000007", "00000008", "0000000000000009", "00", "00"))
    with pytest.raises(CorruptRecordError):  # 1000 batches announced, none present
        decode_value(1, h("0000", "00000007", "00000008", "0000000000000009", "e907", "00"))
    with pytest.raises(CorruptRecordError, match="int32 0 of 8 bytes"):  # DeliveryCompleteCount of 8 bytes
        decode_value(1, h("0000", "00000007", "00000008", "0000000000000009", "01", "01 00 08 0000000000000001"))
    with pytest.raises(CorruptRecordError):  # GroupId null
        decode_key(h("0000", "ffff", U1_HEX, "00000007"))


def test_unknown_tagged_fields_are_skipped() -> None:
    data = h("0000", "00000001", "00000003", "ffffffffffffffff",
             "02", "0000000000000078", "0000000000000078", "04", "0005",
             "01 02 03 aabbcc",  # StateBatch: unknown tag 2, 3 bytes
             "03",
             "00", "04", "0000000a",  # tag 0 DeliveryCompleteCount 10
             "01", "00",  # unknown tag 1, empty
             "9901", "01", "ff")  # unknown tag 153, 1 byte
    assert decode_value(1, data) == UPDATE


@given(st.sampled_from([0, 1]), st.binary(max_size=80))
def test_garbage_is_corrupt_or_decodes(record_type: int, data: bytes) -> None:
    try:
        decode_value(record_type, data)
    except CorruptRecordError:
        pass


@pytest.mark.parametrize("value", [
    ShareUpdateValue(2**31, 0, 0),
    ShareUpdateValue(0, 0, 2**63),
    ShareUpdateValue(0, 0, 0, delivery_complete_count=2**31),
    ShareSnapshotValue(0, 0, 0, 0, 0, 0, (StateBatch(0, 0, 128, 0),)),
    ShareSnapshotValue(0, 0, 0, 0, 0, 0, (StateBatch(0, 0, 0, 2**15),)),
])
def test_encoder_refuses_what_the_schema_cannot_hold(value: ShareValue) -> None:
    with pytest.raises(ValueError):
        encode_value(value)


def test_key_encoder_refuses_what_the_schema_cannot_hold() -> None:
    with pytest.raises(ValueError):
        encode_key(ShareSnapshotKey("g", U1, 2**31))
    with pytest.raises(ValueError):
        encode_key(ShareSnapshotKey(None, U1, 0))  # type: ignore[arg-type]


int8s = st.integers(-(2**7), 2**7 - 1)
int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
batches = st.lists(st.builds(StateBatch, int64s, int64s, int8s, int16s), max_size=4).map(tuple)


@given(st.one_of(
    st.builds(ShareSnapshotValue, int32s, int32s, int32s, int64s, int64s, int64s, batches, int32s),
    st.builds(ShareUpdateValue, int32s, int32s, int64s, batches, int32s),
))
def test_value_round_trip(value: ShareValue) -> None:
    assert decode_value(value.RECORD_TYPE, encode_value(value)) == value


@given(st.sampled_from([ShareSnapshotKey, ShareUpdateKey]), st.text(max_size=12), st.uuids(), int32s)
def test_key_round_trip(cls: type[ShareSnapshotKey] | type[ShareUpdateKey], group: str, topic_id: uuid.UUID,
                        partition: int) -> None:
    key = cls(group, topic_id, partition)
    assert decode_key(encode_key(key)) == key
