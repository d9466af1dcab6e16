"""``compression.type`` applied on leader appends (Kafka's ``LogValidator`` with a target codec).

The rebuilt batches are read by kafka-python's own RecordBatch v2 reader (independent header, record,
varint, codec and CRC-32C code), so a field Strata writes wrongly and reads back wrongly still fails here.
The log-level tests pin Kafka's rules around the rebuild: in-place when the codec already matches,
control batches and follower appends untouched, the size re-checked, the errors invalid records get,
idempotent retries still deduplicated, a config change applied to the next append.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any

import pytest

from strata.config import LogConfig
from strata.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    RecordTooLargeError,
    RecordValidationError,
)
from strata.log.producer_state import AppendOrigin
from strata.log.validator import fast_plain_append
from strata.protocol.records import (
    CompressionType,
    ControlRecordType,
    build_control_batch,
    compute_crc,
    decode_batch,
    iter_batches,
    parse_header,
    reseal_crc,
)
from strata.protocol.records.recompress import recompress_batch

with warnings.catch_warnings():  # kafka-python's package import uses deprecated importlib APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec as kp_codec
    import kafka.record.util as kp_util
    from kafka.record._crc32c import crc as kp_pure_python_crc32c
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

NOW = 1_700_000_000_000  # the ManualClock's start
CODECS = list(CompressionType)
NAMES = {CompressionType.NONE: "uncompressed", CompressionType.GZIP: "gzip", CompressionType.SNAPPY: "snappy",
         CompressionType.LZ4: "lz4", CompressionType.ZSTD: "zstd"}

pytestmark = pytest.mark.skipif(
    not (kp_codec.has_snappy() and kp_codec.has_lz4() and kp_codec.has_zstd()),
    reason="kafka-python's snappy, lz4 and zstd codecs are not installed")

# Compressible values (kafka-python keeps a batch uncompressed when compressing does not pay), null keys
# and values, empty and null header values, non-ASCII header keys, out-of-order timestamps, an offset gap.
RECORDS: list[dict[str, Any]] = [
    {"delta": 0, "ts": NOW - 5_000, "key": b"key-0", "value": b"value " * 40, "headers": []},
    {"delta": 1, "ts": NOW - 4_750, "key": None, "value": b"null key " * 30,
     "headers": [("trace-id", b"abc123"), ("empty", b""), ("null", None)]},
    {"delta": 2, "ts": NOW - 6_000, "key": b"k", "value": None, "headers": [("tombstone", b"1")]},
    {"delta": 3, "ts": NOW - 1_000, "key": b"", "value": b"", "headers": [("ünïcödé-këy", b"\x00\xff")]},
    {"delta": 4, "ts": NOW - 4_999, "key": None, "value": None, "headers": []},
    {"delta": 5, "ts": NOW - 4_998, "key": b"\x00" * 300, "value": bytes(range(256)) * 20,
     "headers": [(f"h{i}", bytes([i]) * i) for i in range(20)]},
]


def kp_build(codec: int, records: list[dict[str, Any]] = RECORDS, **producer: Any) -> bytes:
    """A batch as kafka-python's producer writes it."""
    state = {"is_transactional": False, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1}
    state.update(producer)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, batch_size=1 << 22, **state)
    for r in records:
        assert builder.append(r["delta"], timestamp=r["ts"], key=r["key"], value=r["value"],
                              headers=r["headers"]) is not None
    buf = bytes(builder.build())
    assert parse_header(buf).compression == codec, "kafka-python fell back to another codec"
    return buf


def kp_read(buf: bytes | bytearray) -> tuple[DefaultRecordBatch, list[Any]]:
    batch = DefaultRecordBatch(bytes(buf))
    assert batch.validate_crc(), "kafka-python rejects the CRC"
    return batch, list(batch)


def expected(base_offset: int = 0, records: list[dict[str, Any]] = RECORDS) -> list[tuple[Any, ...]]:
    """(offset, timestamp, key, value, headers): offsets consecutive, whatever the source's deltas."""
    return [(base_offset + i, r["ts"], r["key"], r["value"], r["headers"]) for i, r in enumerate(records)]


def as_tuples(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


# -- the rebuild itself, read by kafka-python -----------------------------------------------------------


@pytest.mark.parametrize("source", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("target", CODECS, ids=lambda c: c.name)
def test_rebuilt_batch_reads_back_with_kafka_python(source: CompressionType, target: CompressionType) -> None:
    raw = kp_build(source, producer_id=4242, producer_epoch=3, base_sequence=2_147_483_000, is_transactional=True)
    out = recompress_batch(raw, 0, parse_header(raw), target)
    kb, krecords = kp_read(out)
    assert kb.compression_type == target
    assert kb.crc == kp_pure_python_crc32c(out[21:]) == compute_crc(out, 0, len(out))
    assert kb.size_in_bytes == len(out) and kb.magic == 2
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (4242, 3, 2_147_483_000)
    assert kb.is_transactional and not kb.is_control_batch and kb.timestamp_type == 0
    assert kb.records_count == len(RECORDS) and kb.last_offset_delta == len(RECORDS) - 1
    assert kb.first_timestamp == RECORDS[0]["ts"]  # Kafka's builder: the first record's timestamp
    assert kb.max_timestamp == max(r["ts"] for r in RECORDS)
    assert as_tuples(krecords) == expected()


def test_offset_deltas_are_renumbered_and_levels_apply() -> None:
    gappy = [dict(r, delta=r["delta"] * 3) for r in RECORDS]  # v0/v1-era clients left gaps; Kafka renumbers
    raw = kp_build(CompressionType.NONE, gappy)
    header = parse_header(raw)
    for codec, levels in ((CompressionType.GZIP, (-1, 1, 9)), (CompressionType.LZ4, (1, 9, 17)),
                          (CompressionType.ZSTD, (-5, 3, 19))):
        for level in levels:
            kb, krecords = kp_read(recompress_batch(raw, 0, header, codec, level=level))
            assert kb.compression_type == codec
            assert as_tuples(krecords) == expected(records=gappy)


def _hand_made_batch(base_timestamp: int, records: list[tuple[int, int, bytes]]) -> bytes:
    """An uncompressed batch written field by field with kafka-python's varint encoder:
    ``records`` are (attributes byte, timestamp, value), offset deltas 0..n-1, no key, no header."""
    body = bytearray()
    for i, (attributes, timestamp, value) in enumerate(records):
        record = bytearray([attributes])
        for v in (timestamp - base_timestamp, i, -1, len(value)):
            kp_util.encode_varint(v, record.append)
        record += value
        kp_util.encode_varint(0, record.append)
        kp_util.encode_varint(len(record), body.append)
        body += record
    head = struct.pack(">qiibIhiqqqhii", 0, 49 + len(body), -1, 2, 0, 0, len(records) - 1, base_timestamp,
                       max(t for _, t, _ in records), -1, -1, -1, len(records))
    raw = bytearray(head + body)
    reseal_crc(raw, 0, len(raw))
    return bytes(raw)


def test_records_are_re_encoded_when_their_bytes_are_not_kafkas() -> None:
    """Record attributes are written 0 and timestamp deltas taken from the first record, as Kafka's builder
    writes them, when the producer's bytes differ (here: attributes 0x05, a base timestamp 1 s early)."""
    raw = _hand_made_batch(NOW - 1_000, [(5, NOW, b"a" * 50), (0, NOW + 7, b"b" * 50), (0, NOW - 3, b"")])
    out = recompress_batch(raw, 0, parse_header(raw), CompressionType.GZIP)
    kb, krecords = kp_read(out)
    assert kb.first_timestamp == NOW and kb.max_timestamp == NOW + 7
    assert [(r.offset, r.timestamp, r.key, r.value) for r in krecords] == [
        (0, NOW, None, b"a" * 50), (1, NOW + 7, None, b"b" * 50), (2, NOW - 3, None, b"")]
    plain = recompress_batch(out, 0, parse_header(out), CompressionType.NONE)
    assert plain[61:] == _hand_made_batch(NOW, [(0, NOW, b"a" * 50), (0, NOW + 7, b"b" * 50), (0, NOW - 3, b"")])[61:]


def test_log_append_time_source_records_take_the_batch_timestamp() -> None:
    raw = bytearray(kp_build(CompressionType.GZIP))
    struct.pack_into(">hq", raw, 21, struct.unpack_from(">h", raw, 21)[0] | 0x08, NOW)  # attributes, ...
    struct.pack_into(">q", raw, 35, NOW)  # ... and max timestamp, as a LogAppendTime batch has them
    reseal_crc(raw, 0, len(raw))
    kb, krecords = kp_read(recompress_batch(raw, 0, parse_header(raw), CompressionType.ZSTD))
    assert kb.timestamp_type == 0 and [r.timestamp for r in krecords] == [NOW] * len(RECORDS)


def test_control_batches_are_refused() -> None:
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0)
    with pytest.raises(ValueError, match="control"):
        recompress_batch(marker, 0, parse_header(marker), CompressionType.GZIP)


def _uncompressed_with_record(record: bytes) -> bytes:
    """One-record uncompressed batch whose single record is ``record`` (its length prefix included)."""
    raw = bytearray(kp_build(CompressionType.NONE, RECORDS[:1]))
    raw[61:] = record
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    reseal_crc(raw, 0, len(raw))
    return bytes(raw)


@pytest.mark.parametrize(("record", "kind"), [
    (b"\x10\x00\x00\x00\x02k\x02v\x01", "negative header count"),  # headers = -1
    (b"\x10\x00\x00\x00\x02k\x02v\x02\x01", "negative header key"),  # one header, key length -1
    (b"\x12\x00\x00\x00\x02k\x02v\x00\x00", "record longer than its fields"),
    (b"\x0c\x00\x00\x00\x02k\x06v", "field past the record"),
    (b"\x40\x00\x00\x00\x02k\x02v\x00", "record past the batch"),
    (b"\x10\x00\x00\x00\x02k\x02v\x00\x00", "bytes after the declared records"),
])
def test_malformed_records_are_invalid_record(record: bytes, kind: str) -> None:
    valid = _uncompressed_with_record(b"\x10\x00\x00\x00\x02k\x02v\x00")  # the helper makes sound batches
    kb, krecords = kp_read(recompress_batch(valid, 0, parse_header(valid), CompressionType.GZIP))
    assert [(r.key, r.value, list(r.headers)) for r in krecords] == [(b"k", b"v", [])]
    raw = _uncompressed_with_record(record)
    with pytest.raises(InvalidRecordError) as e:
        recompress_batch(raw, 0, parse_header(raw), CompressionType.GZIP)
    assert e.value.error_code == ErrorCode.INVALID_RECORD, kind
    assert not isinstance(e.value, RecordValidationError), "Kafka fails the batch, with no per-record errors"


def test_a_payload_the_codec_cannot_read_is_corrupt_message() -> None:
    raw = bytearray(kp_build(CompressionType.GZIP))
    raw[70:90] = b"\xff" * 20
    reseal_crc(raw, 0, len(raw))
    with pytest.raises(CorruptRecordError):
        recompress_batch(raw, 0, parse_header(raw), CompressionType.ZSTD)


def test_every_record_timestamp_is_checked() -> None:
    raw = kp_build(CompressionType.LZ4)
    with pytest.raises(RecordValidationError) as e:
        recompress_batch(raw, 0, parse_header(raw), CompressionType.ZSTD, timestamp_bounds=(NOW - 5_500, NOW))
    assert e.value.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [r.batch_index for r in e.value.record_errors] == [2]  # NOW - 6_000: below base and max alike


# -- through the log: PartitionLog.append_as_leader ------------------------------------------------------


def stored(plog: Any) -> list[tuple[Any, list[Any]]]:
    """Every batch of the log's segments as kafka-python reads it from the .log files."""
    out = []
    for segment in plog.segments:
        data = (plog.dir / f"{segment.base_offset:020d}.log").read_bytes()
        for position, header in iter_batches(data, verify_crc=True):
            out.append(kp_read(data[position: position + header.size]))
    return out


@pytest.mark.parametrize("target", CODECS, ids=lambda c: c.name)
def test_leader_append_stores_the_target_codec(open_log: Any, target: CompressionType) -> None:
    source = CompressionType.ZSTD if target is not CompressionType.ZSTD else CompressionType.GZIP
    plog = open_log(LogConfig(compression_type=NAMES[target]))
    plog.append_as_leader(kp_build(CompressionType.NONE, RECORDS[:2]), leader_epoch=5)  # offsets 0-1
    info = plog.append_as_leader(kp_build(source, producer_id=9, producer_epoch=1, base_sequence=0), leader_epoch=5)
    assert (info.first_offset, info.last_offset) == (2, 1 + len(RECORDS))
    assert info.valid_bytes == info.batches[0][1].size and info.max_timestamp == max(r["ts"] for r in RECORDS)
    _, (kb, krecords) = stored(plog)
    assert kb.compression_type == target and kb.base_offset == 2 and kb.leader_epoch == 5
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (9, 1, 0)
    assert as_tuples(krecords) == expected(base_offset=2)
    entry = plog.producer_state.last_entry(9)
    assert entry is not None and (entry.last_seq, entry.last_data_offset) == (len(RECORDS) - 1, 1 + len(RECORDS))


def test_matching_codec_and_producer_keep_the_bytes(open_log: Any) -> None:
    """Kafka's in-place assignment: only the offset and leader epoch are patched, the rest is as sent."""
    raw = kp_build(CompressionType.SNAPPY)
    plog = open_log(LogConfig(compression_type="snappy"))
    plog.append_as_leader(raw, leader_epoch=0)
    plog.update_config(LogConfig(compression_type="producer"))
    plog.append_as_leader(raw, leader_epoch=0)
    data = (plog.dir / f"{0:020d}.log").read_bytes()
    assert [p for p, _ in iter_batches(data)] == [0, len(raw)]
    assert data[16:len(raw)] == data[len(raw) + 16:] == raw[16:]


def test_log_append_time_topic(open_log: Any, clock: Any) -> None:
    plog = open_log(LogConfig(compression_type="lz4", message_timestamp_type="LogAppendTime"))
    clock.advance(1234)
    info = plog.append_as_leader(kp_build(CompressionType.GZIP), leader_epoch=0)
    assert info.log_append_time == NOW + 1234
    ((kb, krecords),) = stored(plog)
    assert kb.compression_type == CompressionType.LZ4 and kb.timestamp_type == 1
    assert kb.max_timestamp == NOW + 1234 and [r.timestamp for r in krecords] == [NOW + 1234] * len(RECORDS)


def test_idempotent_retry_of_a_recompressed_batch_is_a_duplicate(open_log: Any) -> None:
    plog = open_log(LogConfig(compression_type="zstd"))
    raw = kp_build(CompressionType.GZIP, producer_id=77, producer_epoch=0, base_sequence=0)
    first = plog.append_as_leader(raw, leader_epoch=0)
    again = plog.append_as_leader(raw, leader_epoch=0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert plog.log_end_offset == len(RECORDS)


def test_transaction_markers_and_follower_appends_are_never_recompressed(open_log: Any) -> None:
    plog = open_log(LogConfig(compression_type="gzip"))
    txn = kp_build(CompressionType.NONE, producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    plog.append_as_leader(txn, leader_epoch=0)
    assert plog.producer_state.first_unstable_offset() == 0
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=5, producer_epoch=0, timestamp=NOW)
    plog.append_as_leader(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    # a follower stores the leader's bytes as they are (here: snappy, on a gzip topic)
    follower_batch = bytearray(kp_build(CompressionType.SNAPPY))
    struct.pack_into(">q", follower_batch, 0, plog.log_end_offset)
    plog.append_as_follower(bytes(follower_batch))
    kinds = [(kb.compression_type, kb.is_transactional, kb.is_control_batch) for kb, _ in stored(plog)]
    assert kinds == [(CompressionType.GZIP, True, False), (CompressionType.NONE, True, True),
                     (CompressionType.SNAPPY, False, False)]
    assert plog.producer_state.first_unstable_offset() is None  # the marker still ended the transaction
    data = (plog.dir / f"{0:020d}.log").read_bytes()
    assert data.endswith(bytes(follower_batch))


def test_max_message_bytes_is_checked_on_the_rebuilt_batch(open_log: Any) -> None:
    records = [{"delta": i, "ts": NOW, "key": None, "value": b"a" * 10_000, "headers": []} for i in range(10)]
    raw = kp_build(CompressionType.ZSTD, records)
    assert len(raw) < 2_000
    plog = open_log(LogConfig(compression_type="uncompressed", max_message_bytes=50_000))
    with pytest.raises(RecordTooLargeError) as e:
        plog.append_as_leader(raw, leader_epoch=0)
    assert e.value.error_code == ErrorCode.MESSAGE_TOO_LARGE and plog.log_end_offset == 0
    plog.update_config(LogConfig(compression_type="gzip", max_message_bytes=50_000))
    assert plog.append_as_leader(raw, leader_epoch=0).last_offset == 9


def test_a_config_change_applies_to_the_next_append(open_log: Any) -> None:
    plog = open_log(LogConfig())
    raw = kp_build(CompressionType.NONE)
    assert fast_plain_append(raw, 0, 0, plog.config, NOW) is not None
    plog.append_as_leader(raw, leader_epoch=0)
    plog.update_config(LogConfig(compression_type="zstd"))
    assert fast_plain_append(raw, 0, 0, plog.config, NOW) is None  # the fast path hands it over
    plog.append_as_leader(raw, leader_epoch=0)
    plog.update_config(LogConfig(compression_type="producer"))
    plog.append_as_leader(raw, leader_epoch=0)
    assert [kb.compression_type for kb, _ in stored(plog)] == [0, CompressionType.ZSTD, 0]
    assert [r.offset for r in decode_batch((plog.dir / f"{0:020d}.log").read_bytes(), len(raw)).records] == \
        list(range(len(RECORDS), 2 * len(RECORDS)))
