"""Kafka's bounds in the shared message-field reader (``strata.protocol.message_fields``), on its own and
through the ``__consumer_offsets`` decoder that gained them when the two coordinators' readers became one."""

from __future__ import annotations

import struct

import pytest

from strata.coordinator.group.records import (
    GroupMetadataValue,
    MemberMetadata,
    decode_group_metadata_value,
    encode_group_metadata_value,
    subscribed_topics,
)
from strata.errors import CorruptRecordError
from strata.protocol.message_fields import MAX_STRING, MessageReader, MessageWriter


def test_values_round_trip_in_both_encodings() -> None:
    for flexible in (False, True):
        w = MessageWriter(flexible)
        w.int8(-3)
        w.int16(300)
        w.int64(-(1 << 40))
        w.string("héllo")
        w.string(None)
        w.bytes_(b"\x00\x01")
        w.array_len(None)
        w.array_len(2)
        w.tags()
        r = MessageReader(bytes(w.out), "m")
        r.flexible = flexible
        assert (r.int8(), r.int16(), r.int64()) == (-3, 300, -(1 << 40))
        assert (r.string(), r.nullable_string(), r.bytes_()) == ("héllo", None, b"\x00\x01")
        assert (r.nullable_array_len(), r.array_len()) == (None, 2)
        r.skip_tags()
        r.done()


def test_a_string_longer_than_kafka_allows_is_refused_on_both_sides() -> None:
    with pytest.raises(ValueError, match="too long"):
        MessageWriter(True).string("x" * (MAX_STRING + 1))
    w = MessageWriter(True)
    w.uvarint(MAX_STRING + 2)  # compact length of a 0x8000-byte string
    w.out += b"x" * (MAX_STRING + 1)
    r = MessageReader(bytes(w.out), "m")
    r.flexible = True
    with pytest.raises(CorruptRecordError, match="invalid length 32768"):
        r.string()


def test_a_varint_of_more_than_five_bytes_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than five bytes"):
        MessageReader(b"\x80\x80\x80\x80\x80\x01", "m").uvarint()


def test_counts_larger_than_the_bytes_left_are_corrupt_before_any_element_is_read() -> None:
    with pytest.raises(CorruptRecordError, match="array of 1000 elements but only 4 bytes left"):
        MessageReader(struct.pack(">i", 1000) + b"abcd", "m").array_len(4)
    r = MessageReader(b"\x7f", "m")
    r.flexible = True
    with pytest.raises(CorruptRecordError, match="127 tagged fields"):
        r.skip_tags()


def test_a_truncated_field_names_the_message_and_the_position() -> None:
    with pytest.raises(CorruptRecordError, match="GroupMetadataValue: field of 4 bytes runs past the end"):
        decode_group_metadata_value(b"\x00\x03\x00\x08consumer\x00\x00")


def _group_value(members: int) -> bytes:
    member = MemberMetadata("m", None, "c", "/h", 300_000, 45_000, b"s", b"a")
    return encode_group_metadata_value(GroupMetadataValue("consumer", 1, "range", "m", 0, (member,) * members), 4)


def test_the_group_decoder_bounds_its_member_count() -> None:
    data = _group_value(2)
    assert len(decode_group_metadata_value(data).members) == 2
    # the compact member count is the byte after the leader string; claim 100 members in the same bytes
    at = data.index(b"\x03", data.index(b"range") + 5)  # count + 1 = 3
    forged = data[:at] + b"\x65" + data[at + 1:]
    with pytest.raises(CorruptRecordError, match="array of 100 elements"):
        decode_group_metadata_value(forged)


def test_a_subscription_with_an_impossible_topic_count_is_unknown_not_an_error() -> None:
    assert subscribed_topics(struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"t") == {"t"}
    assert subscribed_topics(struct.pack(">hi", 0, 1_000_000) + b"\x00\x01t") is None
