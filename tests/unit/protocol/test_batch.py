"""RecordBatch v2 header, CRC, in-place patches, batch iteration and varints."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from strata.errors import CorruptRecordError, TruncatedBatchError, UnsupportedForMessageFormatError
from strata.protocol.records import (
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    CompressionType,
    ControlRecordType,
    Record,
    TimestampType,
    build_batch,
    build_control_batch,
    compute_crc,
    decode_batch,
    ensure_valid,
    is_crc_valid,
    iter_batches,
    parse_header,
    reseal_crc,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from strata.protocol.records.varint import read_varint, size_of_varint, write_varint

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _handmade_batch(
    *,
    base_offset: int = 1000,
    leader_epoch: int = 7,
    attributes: int = 0,
    last_offset_delta: int = 2,
    base_timestamp: int = 1_700_000_000_000,
    max_timestamp: int = 1_700_000_000_500,
    producer_id: int = 4242,
    producer_epoch: int = 3,
    base_sequence: int = 17,
    records_count: int = 3,
    payload: bytes = b"",
    magic: int = 2,
) -> bytes:
    """A header packed field by field with struct, independent of the code under test."""
    length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    after_crc = struct.pack(
        ">hiqqqhii", attributes, last_offset_delta, base_timestamp, max_timestamp,
        producer_id, producer_epoch, base_sequence, records_count,
    ) + payload
    crc = crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, length, leader_epoch, magic, crc) + after_crc


def _three_record_batch(compression: CompressionType = CompressionType.NONE, **kwargs: object) -> bytes:
    b = BatchBuilder(compression=compression, base_offset=100, **kwargs)  # type: ignore[arg-type]
    b.append(b"v0", key=b"k0", timestamp=1_000, headers=[("h", b"x")])
    b.append(None, key=None, timestamp=3_000)
    b.append(b"v2" * 50, key=b"k2", timestamp=2_000)
    return b.build()


# --------------------------------------------------------------------------- header fields


def test_parse_header_decodes_every_field_of_a_handmade_batch() -> None:
    buf = _handmade_batch()
    h = parse_header(buf)
    assert h.base_offset == 1000
    assert h.length == 49
    assert h.partition_leader_epoch == 7
    assert h.magic == 2
    assert h.crc == crc32c(buf[21:])
    assert h.attributes == 0
    assert h.last_offset_delta == 2
    assert h.base_timestamp == 1_700_000_000_000
    assert h.max_timestamp == 1_700_000_000_500
    assert h.producer_id == 4242
    assert h.producer_epoch == 3
    assert h.base_sequence == 17
    assert h.records_count == 3
    assert h.size == 61 == len(buf)
    assert h.last_offset == 1002
    assert h.next_offset == 1003
    assert h.has_producer_id
    assert h.last_sequence == 19


def test_parse_header_handles_negative_and_extreme_values() -> None:
    buf = _handmade_batch(
        base_offset=INT64_MAX - 10, leader_epoch=-1, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        base_timestamp=-1, max_timestamp=-1, last_offset_delta=10, records_count=0,
    )
    h = parse_header(buf)
    assert h.base_offset == INT64_MAX - 10
    assert h.last_offset == INT64_MAX
    assert h.partition_leader_epoch == -1
    assert h.producer_id == NO_PRODUCER_ID and not h.has_producer_id
    assert h.producer_epoch == NO_PRODUCER_EPOCH
    assert h.base_sequence == NO_SEQUENCE
    assert h.last_sequence == NO_SEQUENCE
    assert h.base_timestamp == -1 and h.max_timestamp == -1


def test_crc_field_is_read_as_unsigned() -> None:
    buf = bytearray(_handmade_batch())
    struct.pack_into(">I", buf, 17, 0xFFFF_FFFF)
    assert parse_header(buf).crc == 0xFFFF_FFFF


def test_last_sequence_wraps_at_int32_max() -> None:
    buf = _handmade_batch(base_sequence=INT32_MAX, last_offset_delta=1, records_count=2)
    assert parse_header(buf).last_sequence == 0
    buf = _handmade_batch(base_sequence=INT32_MAX - 1, last_offset_delta=3, records_count=4)
    assert parse_header(buf).last_sequence == 1


def test_parse_header_at_a_position() -> None:
    first = _handmade_batch(base_offset=5, last_offset_delta=0, records_count=1)
    second = _handmade_batch(base_offset=6, payload=b"xyz")
    buf = b"\x00" * 3 + first + second
    assert parse_header(buf, 3).base_offset == 5
    h = parse_header(buf, 3 + len(first))
    assert h.base_offset == 6
    assert h.size == 64


@pytest.mark.parametrize("codec", list(CompressionType))
def test_attribute_codec_bits(codec: CompressionType) -> None:
    h = parse_header(_handmade_batch(attributes=int(codec)))
    assert h.compression == codec
    assert not h.is_transactional and not h.is_control
    assert h.timestamp_type is TimestampType.CREATE_TIME


@pytest.mark.parametrize(
    ("attributes", "ts_type", "transactional", "control", "codec"),
    [
        (0x00, TimestampType.CREATE_TIME, False, False, 0),
        (0x08, TimestampType.LOG_APPEND_TIME, False, False, 0),
        (0x10, TimestampType.CREATE_TIME, True, False, 0),
        (0x20, TimestampType.CREATE_TIME, False, True, 0),
        (0x30, TimestampType.CREATE_TIME, True, True, 0),
        (0x3C, TimestampType.LOG_APPEND_TIME, True, True, 4),
        (0x4B, TimestampType.LOG_APPEND_TIME, False, False, 3),  # delete-horizon bit does not leak
    ],
)
def test_attribute_flags(
    attributes: int, ts_type: TimestampType, transactional: bool, control: bool, codec: int
) -> None:
    h = parse_header(_handmade_batch(attributes=attributes))
    assert h.timestamp_type is ts_type
    assert h.is_transactional is transactional
    assert h.is_control is control
    assert h.compression == codec


def test_builder_sets_header_fields_and_attributes() -> None:
    buf = _three_record_batch(
        CompressionType.GZIP, partition_leader_epoch=9, producer_id=77, producer_epoch=5, base_sequence=40,
        transactional=True,
    )
    h = parse_header(buf)
    assert h.base_offset == 100
    assert h.size == len(buf)
    assert h.partition_leader_epoch == 9
    assert h.magic == 2
    assert h.compression == CompressionType.GZIP
    assert h.is_transactional and not h.is_control
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert h.last_offset_delta == 2 and h.records_count == 3
    assert h.last_offset == 102 and h.next_offset == 103
    assert h.base_timestamp == 1_000 and h.max_timestamp == 3_000
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 5, 40)
    assert h.last_sequence == 42
    assert is_crc_valid(buf, 0, h)


def test_builder_defaults_match_kafka_sentinels() -> None:
    h = parse_header(build_batch([b"a"], timestamp=5))
    assert h.partition_leader_epoch == NO_PARTITION_LEADER_EPOCH
    assert h.producer_id == NO_PRODUCER_ID
    assert h.producer_epoch == NO_PRODUCER_EPOCH
    assert h.base_sequence == NO_SEQUENCE
    assert h.attributes == 0


def test_builder_offset_gaps_set_last_offset_delta() -> None:
    b = BatchBuilder(base_offset=10)
    b.append(b"a", timestamp=1, offset_delta=0)
    b.append(b"b", timestamp=1, offset_delta=5)
    buf = b.build()
    h = parse_header(buf)
    assert (h.records_count, h.last_offset_delta, h.next_offset) == (2, 5, 16)
    assert [r.offset for r in decode_batch(buf).records] == [10, 15]
    with pytest.raises(ValueError):
        b.append(b"c", offset_delta=5)


def test_builder_rejects_empty_batch() -> None:
    with pytest.raises(ValueError):
        BatchBuilder().build()


def test_builder_log_append_time() -> None:
    b = BatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=9_999)
    b.append(b"a", timestamp=1)
    b.append(b"b", timestamp=2)
    d = decode_batch(b.build())
    assert d.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert d.header.max_timestamp == 9_999
    assert [r.timestamp for r in d.records] == [9_999, 9_999]


# --------------------------------------------------------------------------- CRC


@pytest.mark.parametrize("codec", list(CompressionType))
def test_crc_covers_attributes_to_end(codec: CompressionType) -> None:
    buf = _three_record_batch(codec)
    h = parse_header(buf)
    assert h.crc == crc32c(buf[21:]) == compute_crc(buf, 0, h.size)
    assert is_crc_valid(buf, 0, h)
    ensure_valid(buf, 0, h)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_flipping_any_byte_in_crc_range_is_detected(codec: CompressionType) -> None:
    original = _three_record_batch(codec)
    size = len(original)
    # 17..20 is the stored CRC itself; 21.. is the checksummed range.
    for i in range(17, size):
        for flip in (0x01, 0x80, 0xFF):
            buf = bytearray(original)
            buf[i] ^= flip
            with pytest.raises(CorruptRecordError) as exc:
                decode_batch(buf)
            assert exc.value.position == 0
            with pytest.raises(CorruptRecordError):
                list(iter_batches(buf, verify_crc=True))
            try:
                h = parse_header(buf)
            except CorruptRecordError:
                # Only a flip making last_offset_delta / records_count negative fails the header
                # sanity check before the CRC is even looked at.
                assert i in (23, 57) and flip & 0x80, (i, flip)
                continue
            assert not is_crc_valid(buf, 0, h), i
            with pytest.raises(CorruptRecordError, match="CRC mismatch") as exc:
                ensure_valid(buf, 0, h)
            assert exc.value.position == 0


def test_flipped_batch_reports_its_own_position() -> None:
    first = _three_record_batch()
    second = bytearray(_three_record_batch())
    second[40] ^= 0x10
    buf = first + bytes(second)
    with pytest.raises(CorruptRecordError) as exc:
        list(iter_batches(buf, verify_crc=True))
    assert exc.value.position == len(first)
    with pytest.raises(CorruptRecordError):
        decode_batch(buf, len(first))
    # Without CRC checking, iteration only looks at framing.
    assert [p for p, _ in iter_batches(buf)] == [0, len(first)]


def test_decode_batch_can_skip_crc_check() -> None:
    buf = bytearray(_three_record_batch())
    struct.pack_into(">I", buf, 17, 0)
    with pytest.raises(CorruptRecordError):
        decode_batch(buf)
    assert len(decode_batch(buf, verify_crc=False).records) == 3


def test_reseal_crc_repairs_a_checksum() -> None:
    buf = bytearray(_three_record_batch())
    buf[-1] ^= 0xFF
    h = parse_header(buf)
    assert not is_crc_valid(buf, 0, h)
    reseal_crc(buf, 0, h.size)
    assert is_crc_valid(buf, 0, parse_header(buf))
    assert parse_header(buf).crc == crc32c(bytes(buf[21:]))


# --------------------------------------------------------------------------- in-place patches


@pytest.mark.parametrize("codec", list(CompressionType))
def test_patching_base_offset_and_leader_epoch_keeps_crc_valid(codec: CompressionType) -> None:
    original = _three_record_batch(codec)
    buf = bytearray(original)
    set_base_offset(buf, 0, 123_456_789_012)
    set_partition_leader_epoch(buf, 0, 31)
    assert buf[21:] == original[21:]
    assert buf[17:21] == original[17:21]
    h = parse_header(buf)
    assert h.base_offset == 123_456_789_012
    assert h.partition_leader_epoch == 31
    assert h.crc == parse_header(original).crc
    ensure_valid(buf, 0, h)
    d = decode_batch(buf)
    assert [r.offset for r in d.records] == [123_456_789_012 + i for i in range(3)]


def test_patches_at_a_position_touch_only_that_batch() -> None:
    a, b = _three_record_batch(), _three_record_batch(CompressionType.SNAPPY)
    buf = bytearray(a + b)
    set_base_offset(memoryview(buf), len(a), 500)
    set_partition_leader_epoch(memoryview(buf), len(a), 4)
    assert buf[: len(a)] == a
    batches = list(iter_batches(buf, verify_crc=True))
    assert [(p, h.base_offset, h.partition_leader_epoch) for p, h in batches] == [
        (0, 100, -1), (len(a), 500, 4),
    ]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_set_log_append_time(codec: CompressionType) -> None:
    buf = bytearray(_three_record_batch(codec, transactional=True, producer_id=1, producer_epoch=0))
    before = parse_header(buf)
    assert before.timestamp_type is TimestampType.CREATE_TIME
    assert [r.timestamp for r in decode_batch(buf).records] == [1_000, 3_000, 2_000]
    set_log_append_time(buf, 0, before.size, 1_234_567)
    h = parse_header(buf)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.max_timestamp == 1_234_567
    assert h.compression == codec and h.is_transactional  # other attribute bits survive
    assert h.base_timestamp == before.base_timestamp
    ensure_valid(buf, 0, h)
    assert h.crc == crc32c(bytes(buf[21:]))
    d = decode_batch(buf)
    assert [r.timestamp for r in d.records] == [1_234_567] * 3
    assert [r.value for r in d.records] == [b"v0", None, b"v2" * 50]


def test_set_log_append_time_at_a_position() -> None:
    a, b = _three_record_batch(), _three_record_batch()
    buf = bytearray(a + b)
    set_log_append_time(buf, len(a), len(b), 77)
    assert buf[: len(a)] == a
    assert [r.timestamp for r in decode_batch(buf, len(a)).records] == [77, 77, 77]
    assert [r.timestamp for r in decode_batch(buf, 0).records] == [1_000, 3_000, 2_000]


# --------------------------------------------------------------------------- iteration


def test_iter_batches_returns_exact_positions() -> None:
    batches = [
        build_batch([b"a"], timestamp=1, base_offset=0),
        _three_record_batch(CompressionType.GZIP),
        build_control_batch(ControlRecordType.COMMIT, producer_id=5, producer_epoch=1, base_offset=103,
                            timestamp=9),
        _handmade_batch(base_offset=104, payload=b"opaque"),
        build_batch([(b"k", b"v" * 3000)], timestamp=1, compression=CompressionType.LZ4, base_offset=200),
    ]
    buf = b"".join(batches)
    expected, pos = [], 0
    for b in batches:
        expected.append((pos, len(b)))
        pos += len(b)
    got = [(p, h.size) for p, h in iter_batches(buf)]
    assert got == expected
    assert [h.base_offset for _, h in iter_batches(buf)] == [0, 100, 103, 104, 200]
    assert [p for p, _ in iter_batches(memoryview(buf))] == [p for p, _ in expected]
    assert [p for p, _ in iter_batches(bytearray(buf), verify_crc=True)] == [p for p, _ in expected]


def test_iter_batches_start_and_end() -> None:
    batches = [build_batch([b"x" * i], timestamp=1, base_offset=i) for i in range(1, 5)]
    positions = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    buf = b"".join(batches)
    assert [p for p, _ in iter_batches(buf, positions[1])] == positions[1:]
    assert [p for p, _ in iter_batches(buf, positions[1], positions[3])] == positions[1:3]
    assert list(iter_batches(buf, len(buf))) == []
    assert list(iter_batches(b"")) == []
    with pytest.raises(TruncatedBatchError) as exc:
        list(iter_batches(buf, 0, positions[3] - 1))
    assert exc.value.position == positions[2]


def test_truncated_trailing_batch_at_every_cut() -> None:
    head = _three_record_batch() + _three_record_batch(CompressionType.GZIP)
    tail = _three_record_batch(CompressionType.ZSTD)
    pos = len(head)
    for cut in range(len(tail)):
        buf = head + tail[:cut]
        with pytest.raises(TruncatedBatchError) as exc:
            parse_header(buf, pos)
        assert exc.value.position == pos, cut
        it = iter_batches(buf)
        assert next(it)[0] == 0
        assert next(it)[0] == len(_three_record_batch())
        if cut == 0:
            assert list(it) == []  # a clean end between batches is not truncation
            continue
        with pytest.raises(TruncatedBatchError) as exc:
            next(it)
        assert exc.value.position == pos, cut
        with pytest.raises(TruncatedBatchError):
            decode_batch(buf, pos)
    assert [p for p, _ in iter_batches(head + tail)] == [0, len(_three_record_batch()), pos]


def test_truncated_batch_is_a_corrupt_record_error() -> None:
    assert issubclass(TruncatedBatchError, CorruptRecordError)


@pytest.mark.parametrize("length", [-1, 0, 11, 48])
def test_length_below_minimum_is_corrupt(length: int) -> None:
    buf = bytearray(_handmade_batch() * 2)
    struct.pack_into(">i", buf, 8, length)
    with pytest.raises(CorruptRecordError, match="below the v2 minimum") as exc:
        parse_header(buf)
    assert not isinstance(exc.value, TruncatedBatchError)
    assert exc.value.position == 0
    with pytest.raises(CorruptRecordError, match="below the v2 minimum"):
        list(iter_batches(buf))


def test_length_past_the_buffer_is_truncation() -> None:
    buf = bytearray(_handmade_batch())
    struct.pack_into(">i", buf, 8, 50)
    with pytest.raises(TruncatedBatchError):
        parse_header(buf)
    struct.pack_into(">i", buf, 8, INT32_MAX)
    with pytest.raises(TruncatedBatchError):
        parse_header(buf)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_unsupported(magic: int) -> None:
    # A v0/v1 message: offset, size, crc, magic, attributes, [timestamp], key, value.
    body = struct.pack(">Ibb", 0, magic, 0) + (struct.pack(">q", 0) if magic else b"")
    body += struct.pack(">ii", -1, 3) + b"abc"
    legacy = struct.pack(">qi", 0, len(body)) + body
    with pytest.raises(UnsupportedForMessageFormatError):
        parse_header(legacy)
    with pytest.raises(UnsupportedForMessageFormatError):
        list(iter_batches(_handmade_batch() + legacy))
    with pytest.raises(UnsupportedForMessageFormatError):
        parse_header(_handmade_batch(magic=magic))


@pytest.mark.parametrize("magic", [3, 0x7F, -1])
def test_unknown_magic_is_corrupt(magic: int) -> None:
    with pytest.raises(CorruptRecordError, match="magic") as exc:
        parse_header(b"\x00" * 5 + _handmade_batch(magic=magic), 5)
    assert exc.value.position == 5


def test_negative_counts_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        parse_header(_handmade_batch(last_offset_delta=-1))
    with pytest.raises(CorruptRecordError):
        parse_header(_handmade_batch(records_count=-1))


def test_decode_batch_rejects_record_count_mismatch() -> None:
    buf = bytearray(_three_record_batch())
    struct.pack_into(">i", buf, 57, 2)  # header says 2 records, payload holds 3
    reseal_crc(buf, 0, len(buf))
    with pytest.raises(CorruptRecordError):
        decode_batch(buf)
    struct.pack_into(">i", buf, 57, 4)  # header says 4 records, payload holds 3
    reseal_crc(buf, 0, len(buf))
    with pytest.raises(CorruptRecordError):
        decode_batch(buf)


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("codec", list(CompressionType))
def test_decode_batch_records(codec: CompressionType) -> None:
    d = decode_batch(_three_record_batch(codec))
    assert d.records == [
        Record(100, 1_000, b"k0", b"v0", (("h", b"x"),)),
        Record(101, 3_000, None, None, ()),
        Record(102, 2_000, b"k2", b"v2" * 50, ()),
    ]
    assert d.control_record is None


@pytest.mark.parametrize("marker", list(ControlRecordType))
def test_control_batch(marker: ControlRecordType) -> None:
    buf = build_control_batch(marker, producer_id=9, producer_epoch=2, coordinator_epoch=6, base_offset=50,
                              timestamp=123, partition_leader_epoch=3)
    d = decode_batch(buf)
    h = d.header
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.partition_leader_epoch) == (9, 2, 3)
    assert h.records_count == 1
    (record,) = d.records
    assert record.offset == 50 and record.timestamp == 123
    assert record.key == struct.pack(">hh", 0, int(marker))
    assert record.value == struct.pack(">hi", 0, 6)
    cr = d.control_record
    assert cr is not None
    assert cr.type is marker and cr.coordinator_epoch == 6


# --------------------------------------------------------------------------- varints


def _enc(value: int) -> bytes:
    out = bytearray()
    write_varint(value, out)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (-65, b"\x81\x01"),
        (300, b"\xd8\x04"),
        (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
        (INT32_MIN, b"\xff\xff\xff\xff\x0f"),
        (INT64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (INT64_MIN, b"\xff" * 9 + b"\x01"),
    ],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert _enc(value) == encoded
    assert size_of_varint(value) == len(encoded)
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert read_varint(memoryview(b"\xaa" + encoded + b"\x00"), 1) == (value, len(encoded) + 1)


def test_varint_round_trip_range() -> None:
    values = [0, -1, 63, -64, 64, -65, 8191, -8192, 8192, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX]
    values += [2**k + d for k in range(63) for d in (-1, 0, 1)]
    values += [-(2**k) + d for k in range(63) for d in (-1, 0, 1)]
    out = bytearray()
    for v in values:
        write_varint(v, out)
    pos = 0
    for v in values:
        got, pos = read_varint(out, pos)
        assert got == v
    assert pos == len(out)


@pytest.mark.parametrize("encoded", [b"", b"\x80", b"\xff\xff", b"\xfe" + b"\xff" * 8])
def test_truncated_varint_is_corrupt(encoded: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="varint"):
        read_varint(encoded, 0)
    with pytest.raises(CorruptRecordError):
        read_varint(memoryview(b"\x00" + encoded), 1)


def test_overlong_varint_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        read_varint(b"\xff" * 10 + b"\x01", 0)


def test_builder_accepts_timestamp_type_as_plain_int() -> None:
    b = BatchBuilder(timestamp_type=1, log_append_time=99)  # type: ignore[arg-type]
    b.append(b"a", timestamp=1)
    d = decode_batch(b.build())
    assert d.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert d.records[0].timestamp == 99
