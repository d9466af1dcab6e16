"""``__remote_log_metadata`` value bytes: golden vectors built by hand from Kafka's message specs.

Each expected value is spelled out field by field from the JSON schemas (storage/src/main/resources/
message/RemoteLogSegmentMetadata*.json, RemotePartitionDeleteMetadataRecord.json) and the flexible
encoding rules, not produced by the code under test.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from strata.tiered.metadata import serde
from strata.tiered.metadata.serde import (
    RemoteLogMetadataSerde,
    RemoteLogSegmentMetadataSnapshot,
    decode_snapshot_body,
    decode_snapshot_metadata,
    deserialize,
    encode_snapshot_body,
    format_record,
    kafka_str,
    serialize,
)

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
SEGMENT_UUID = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")
TP = TopicIdPartition(TOPIC_ID, "foo", 0)
SEGMENT_ID = RemoteLogSegmentId(TP, SEGMENT_UUID)

TP_ENTRY = (
    "04" + "666f6f"                         # Name: COMPACT_STRING, uvarint(3 + 1) + "foo"
    + "00112233445566778899aabbccddeeff"     # Id: uuid (msb, lsb big-endian)
    + "00000000"                             # Partition: int32 0
    + "00"                                   # TopicIdPartitionEntry tagged fields: none
)
SEGMENT_ID_ENTRY = TP_ENTRY + "0f0e0d0c0b0a09080706050403020100" + "00"  # Id uuid, tagged fields: none


def h(text: str) -> bytes:
    return bytes.fromhex(text)


SEGMENT = RemoteLogSegmentMetadata(SEGMENT_ID, 0, 100, -1, 1, 123, 1024, {0: 0, 1: 20, 2: 80},
                                   custom_metadata=bytes(10))
SEGMENT_BYTES = h(
    "01" "00" "00"                           # frame version 1, apiKey 0, version 0
    + SEGMENT_ID_ENTRY
    + "0000000000000000"                     # StartOffset 0
    + "0000000000000064"                     # EndOffset 100
    + "00000001"                             # BrokerId 1
    + "ffffffffffffffff"                     # MaxTimestampMs -1
    + "000000000000007b"                     # EventTimestampMs 123
    + "04"                                   # SegmentLeaderEpochs: COMPACT_ARRAY uvarint(3 + 1), ascending epochs
    + "00000000" "0000000000000000" "00"     # (0, 0), no tags
    + "00000001" "0000000000000014" "00"     # (1, 20)
    + "00000002" "0000000000000050" "00"     # (2, 80)
    + "00000400"                             # SegmentSizeInBytes 1024
    + "0b" + "00" * 10                       # CustomMetadata: COMPACT_NULLABLE_BYTES uvarint(10 + 1) + 10 bytes
    + "00"                                   # RemoteLogSegmentState COPY_SEGMENT_STARTED
    + "00"                                   # tagged fields: none (TxnIndexEmpty false is not written)
)

UPDATE = RemoteLogSegmentMetadataUpdate(SEGMENT_ID, 456, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2)
UPDATE_BYTES = h(
    "01" "01" "00"                           # frame version 1, apiKey 1, version 0
    + SEGMENT_ID_ENTRY
    + "00000002"                             # BrokerId 2
    + "00000000000001c8"                     # EventTimestampMs 456
    + "00"                                   # CustomMetadata null
    + "01"                                   # RemoteLogSegmentState COPY_SEGMENT_FINISHED
    + "00"                                   # tagged fields
)

DELETE = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 789, 3)
DELETE_BYTES = h(
    "01" "02" "00"                           # frame version 1, apiKey 2, version 0
    + TP_ENTRY
    + "00000003"                             # BrokerId 3
    + "0000000000000315"                     # EventTimestampMs 789
    + "02"                                   # RemotePartitionDeleteState DELETE_PARTITION_FINISHED
    + "00"                                   # tagged fields
)

SNAPSHOT = RemoteLogSegmentMetadataSnapshot(SEGMENT_UUID, 0, 100, -1, 1, 123, 1024, {0: 0},
                                            RemoteLogSegmentState.COPY_SEGMENT_FINISHED, None, True)
SNAPSHOT_BODY = (
    "0f0e0d0c0b0a09080706050403020100"       # SegmentId uuid
    + "0000000000000000"                     # StartOffset 0
    + "0000000000000064"                     # EndOffset 100
    + "00000001"                             # BrokerId 1
    + "ffffffffffffffff"                     # MaxTimestampMs -1
    + "000000000000007b"                     # EventTimestampMs 123
    + "02" + "00000000" "0000000000000000" "00"  # SegmentLeaderEpochs [(0, 0)]
    + "00000400"                             # SegmentSizeInBytes 1024
    + "00"                                   # CustomMetadata null
    + "01"                                   # RemoteLogSegmentState COPY_SEGMENT_FINISHED
    + "01" "00" "01" "01"                    # tagged fields: 1 field, tag 0 (TxnIndexEmpty), size 1, true
)
SNAPSHOT_BYTES = h("01" "03" "00" + SNAPSHOT_BODY)


@pytest.mark.parametrize(("md", "expected"), [
    (SEGMENT, SEGMENT_BYTES), (UPDATE, UPDATE_BYTES), (DELETE, DELETE_BYTES), (SNAPSHOT, SNAPSHOT_BYTES),
], ids=["segment", "update", "partition-delete", "snapshot"])
def test_golden_bytes_and_round_trip(md, expected):
    assert serialize(md) == expected
    assert deserialize(expected) == md
    assert serde._deserialize_generic(expected) == md
    assert RemoteLogMetadataSerde.deserialize(RemoteLogMetadataSerde.serialize(md)) == md


def test_txn_index_empty_is_a_tagged_field_written_only_when_true():
    with_tag = RemoteLogSegmentMetadata(SEGMENT_ID, 0, 100, -1, 1, 123, 1024, {0: 0, 1: 20, 2: 80},
                                        custom_metadata=bytes(10), txn_idx_empty=True)
    expected = SEGMENT_BYTES[:-1] + h("01" "00" "01" "01")
    assert serialize(with_tag) == expected
    assert deserialize(expected).txn_idx_empty is True
    # An explicit false tag (another writer may emit it) decodes as false.
    assert deserialize(SEGMENT_BYTES[:-1] + h("01000100")).txn_idx_empty is False
    assert deserialize(SEGMENT_BYTES).txn_idx_empty is False


def test_multi_byte_varints():
    long_name = "t" * 130  # uvarint(131) = 0x83 0x01
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TopicIdPartition(TOPIC_ID, long_name, 7), SEGMENT_UUID),
                                  5, 9, 1, 1, 1, 1, {3: 5}, RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                                  custom_metadata=bytes(range(200)))  # uvarint(201) = 0xc9 0x01
    data = serialize(md)
    assert data[3:5] == h("8301")
    assert h("c901") + bytes(range(200)) in data
    assert deserialize(data) == md


def test_snapshot_body_helpers():
    assert encode_snapshot_body(SNAPSHOT) == h(SNAPSHOT_BODY)
    framed = b"xx" + h(SNAPSHOT_BODY) + b"yy"
    end = len(framed) - 2
    assert decode_snapshot_body(framed, 2, end) == SNAPSHOT
    md = decode_snapshot_metadata(framed, 2, end, TP)
    assert md == SNAPSHOT.to_metadata(TP)
    assert RemoteLogSegmentMetadataSnapshot.create(md) == SNAPSHOT
    with pytest.raises(ValueError, match="garbage"):
        decode_snapshot_metadata(framed, 2, end + 1, TP)


@pytest.mark.parametrize("data", [SEGMENT_BYTES, UPDATE_BYTES, DELETE_BYTES, SNAPSHOT_BYTES])
def test_trailing_bytes_are_rejected(data):
    with pytest.raises(ValueError, match=r"1 byte\(s\) of garbage"):
        deserialize(data + b"\x00")


@pytest.mark.parametrize("data", [SEGMENT_BYTES, UPDATE_BYTES, DELETE_BYTES, SNAPSHOT_BYTES])
def test_every_truncation_is_rejected(data):
    for n in range(len(data)):
        with pytest.raises(ValueError, match="malformed"):
            deserialize(data[:n])


def test_frame_version_0_and_others_are_rejected():
    with pytest.raises(ValueError, match="frame version 0"):
        deserialize(b"\x00" + SEGMENT_BYTES[1:])
    with pytest.raises(ValueError, match="unsupported frame version 2"):
        deserialize(b"\x02" + SEGMENT_BYTES[1:])


def test_unknown_api_key_and_version_are_rejected():
    with pytest.raises(ValueError, match="apiKey 4"):
        deserialize(b"\x01\x04\x00" + SEGMENT_BYTES[3:])
    with pytest.raises(ValueError, match="unsupported version 1"):
        deserialize(b"\x01\x00\x01" + SEGMENT_BYTES[3:])


@pytest.mark.parametrize(("position", "replacement", "message"), [
    (3, "00", "non-nullable field was serialized as null"),   # Name null
    (4, "ff", "not UTF-8"),                                     # Name byte not UTF-8
    (len(SEGMENT_BYTES) - 2, "07", "unknown state id 7"),        # RemoteLogSegmentState
])
def test_invalid_fields_are_rejected(position, replacement, message):
    data = bytearray(SEGMENT_BYTES)
    data[position:position + 1] = h(replacement)
    with pytest.raises(ValueError, match=message):
        deserialize(bytes(data))


def test_api_invariants_are_reported_as_malformed_records():
    empty_epochs = SEGMENT_BYTES.replace(h("04" "00000000" "0000000000000000" "00" "00000001" "0000000000000014" "00"
                                           "00000002" "0000000000000050" "00"), h("01"))
    with pytest.raises(ValueError, match="malformed RemoteLogSegmentMetadataRecord: segment_leader_epochs"):
        deserialize(empty_epochs)


def test_null_value_is_rejected():
    with pytest.raises(ValueError, match="null"):
        deserialize(None)  # type: ignore[arg-type]


def test_unknown_tagged_fields_are_skipped_and_known_tag_size_checked():
    # Top-level tagged section with an unknown tag 5 (3 bytes) before TxnIndexEmpty would be out of order in
    # Kafka's writer, but readers accept any order; here: only the unknown tag.
    data = SEGMENT_BYTES[:-1] + h("01" "05" "03" "aabbcc")
    assert deserialize(data) == SEGMENT
    # Unknown tag inside the nested TopicIdPartition struct.
    nested = SEGMENT_BYTES.replace(h("00000000" "00" "0f0e0d0c"), h("00000000" "01" "02" "01" "ff" "0f0e0d0c"), 1)
    assert deserialize(nested) == SEGMENT
    with pytest.raises(ValueError, match="size 2, expected 1"):
        deserialize(SEGMENT_BYTES[:-1] + h("01" "00" "02" "0101"))


def test_varint_longer_than_five_bytes_is_rejected():
    with pytest.raises(ValueError, match="longer than 5 bytes"):
        deserialize(h("01" "00" "00" "ffffffffff01") + SEGMENT_BYTES[7:])


def test_out_of_range_fields_are_rejected_on_serialize():
    md = RemoteLogSegmentMetadata(SEGMENT_ID, 0, 100, -1, 2**31, 123, 1024, {0: 0})
    with pytest.raises(ValueError, match="cannot serialize"):
        serialize(md)
    with pytest.raises(ValueError, match="no RemoteLogMetadataTransform"):
        serialize("nope")  # type: ignore[arg-type]


# -- formatter --------------------------------------------------------------------------------------


def test_formatter_matches_kafka():
    # RemoteLogMetadataFormatterTest's expectation plus the txnIdxEmpty field newer Kafka prints.
    expected = (
        "partition: 0, offset: 0, value: RemoteLogSegmentMetadata{remoteLogSegmentId=RemoteLogSegmentId"
        "{topicIdPartition=ABEiM0RVZneImaq7zN3u_w:foo-0, id=Dw4NDAsKCQgHBgUEAwIBAA}, startOffset=0, endOffset=100, "
        "brokerId=1, maxTimestampMs=-1, eventTimestampMs=123, segmentLeaderEpochs={0=0, 1=20, 2=80}, "
        "segmentSizeInBytes=1024, customMetadata=Optional[CustomMetadata{10 bytes}], state=COPY_SEGMENT_STARTED, "
        "txnIdxEmpty=false}")
    assert format_record(0, 0, SEGMENT_BYTES) == expected
    assert format_record(0, 0, SEGMENT) == expected


def test_kafka_str_of_other_records():
    assert kafka_str(UPDATE) == (
        "RemoteLogSegmentMetadataUpdate{remoteLogSegmentId=RemoteLogSegmentId{topicIdPartition="
        "ABEiM0RVZneImaq7zN3u_w:foo-0, id=Dw4NDAsKCQgHBgUEAwIBAA}, customMetadata=Optional.empty, "
        "state=COPY_SEGMENT_FINISHED, eventTimestampMs=456, brokerId=2}")
    assert kafka_str(DELETE) == (
        "RemotePartitionDeleteMetadata{topicPartition=ABEiM0RVZneImaq7zN3u_w:foo-0, "
        "state=DELETE_PARTITION_FINISHED, eventTimestampMs=789, brokerId=3}")
    assert kafka_str(SNAPSHOT).startswith("RemoteLogSegmentMetadataSnapshot{segmentId=Dw4NDAsKCQgHBgUEAwIBAA, "
                                          "startOffset=0, endOffset=100")
    assert format_record(3, 9, DELETE_BYTES).startswith("partition: 3, offset: 9, value: RemotePartitionDelete")


# -- properties ---------------------------------------------------------------------------------------

int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
uuids = st.uuids(allow_nil=True)
tps = st.builds(TopicIdPartition, uuids, st.text(min_size=0, max_size=150), st.integers(0, 2**31 - 1))
segment_ids = st.builds(RemoteLogSegmentId, tps, uuids)
customs = st.none() | st.binary(max_size=300)


@st.composite
def segments(draw):
    start = draw(st.integers(0, 2**62))
    end = draw(st.integers(start, 2**63 - 1))
    epochs = draw(st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), min_size=1, max_size=140))
    return RemoteLogSegmentMetadata(draw(segment_ids), start, end, draw(int64), draw(int32), draw(int64), draw(int32),
                                    epochs, draw(st.sampled_from(RemoteLogSegmentState)), draw(customs),
                                    draw(st.booleans()))


updates = st.builds(RemoteLogSegmentMetadataUpdate, segment_ids, int64, customs,
                    st.sampled_from(RemoteLogSegmentState), int32)
deletes = st.builds(RemotePartitionDeleteMetadata, tps, st.sampled_from(RemotePartitionDeleteState), int64, int32)
any_record = segments() | updates | deletes | segments().map(RemoteLogSegmentMetadataSnapshot.create)


@settings(max_examples=300, deadline=None)
@given(any_record)
def test_round_trip(md):
    data = serialize(md)
    assert deserialize(data) == md
    assert serde._deserialize_generic(data) == md


@settings(max_examples=400, deadline=None)
@given(segments() | updates, st.data())
def test_mutated_bytes_fast_path_agrees_with_generic_reader(md, data):
    """Corrupt a byte: the result is a ValueError or a record, and the fast path never disagrees."""
    raw = bytearray(serialize(md))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    raw = bytes(raw)
    try:
        generic = serde._deserialize_generic(raw)
    except ValueError:
        generic = None
    try:
        result = deserialize(raw)
    except ValueError:
        assert generic is None
    else:
        assert result == generic
