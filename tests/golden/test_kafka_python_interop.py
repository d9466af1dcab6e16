"""Cross-check against kafka-python's independent RecordBatch v2 reader and builder.

kafka-python needs python-snappy, lz4 and zstandard for its codecs. Where those are installed
they are used as they are. Where they are not, cramjam-backed stand-ins are plugged into exactly
the hooks kafka-python calls (python-snappy 0.7 is itself a cramjam wrapper), so kafka-python's
own header, record, CRC and xerial-framing code still does all the work being cross-checked.
"""

from __future__ import annotations

import struct
import types
import warnings
from collections.abc import Iterator
from typing import Any

import cramjam
import pytest

from strata.errors import CorruptRecordError
from strata.protocol.records import (
    BatchBuilder,
    CompressionType,
    ControlRecordType,
    TimestampType,
    build_control_batch,
    compute_crc,
    decode_batch,
    iter_batches,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

with warnings.catch_warnings():  # kafka-python's package import uses deprecated importlib APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec as kp_codec
    import kafka.record.default_records as kp_default
    from kafka.record._crc32c import crc as kp_pure_python_crc32c
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

CODECS = list(CompressionType)


def _lz4_independent(data: bytes) -> bytes:
    c = cramjam.lz4.Compressor(block_linked=False)  # what kafka-python asks python-lz4 for
    c.compress(bytes(data))
    return bytes(c.finish())


@pytest.fixture(scope="module", autouse=True)
def kafka_python_codecs() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        if not kp_codec.has_snappy():
            mp.setattr(kp_codec, "snappy", types.SimpleNamespace(
                compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
                decompress=lambda data: bytes(cramjam.snappy.decompress_raw(data)),
            ))
        if not kp_codec.has_lz4():
            mp.setattr(kp_codec, "lz4", types.SimpleNamespace())
            mp.setattr(kp_default, "lz4_encode", _lz4_independent)
            mp.setattr(kp_default, "lz4_decode", lambda data: bytes(cramjam.lz4.decompress(data)))
        if not kp_codec.has_zstd():
            mp.setattr(kp_codec, "zstd", types.SimpleNamespace())
            mp.setattr(kp_default, "zstd_encode", lambda data: bytes(cramjam.zstd.compress(data)))
            mp.setattr(kp_default, "zstd_decode", lambda data: bytes(cramjam.zstd.decompress(data)))
        assert kp_codec.has_snappy() and kp_codec.has_lz4() and kp_codec.has_zstd()
        yield


# A mix of everything the record format can carry. Values are compressible on purpose:
# kafka-python silently falls back to an uncompressed batch when compression does not pay.
RECORDS: list[dict[str, Any]] = [
    {"delta": 0, "ts": 1_700_000_000_000, "key": b"key-0", "value": b"value " * 40, "headers": []},
    {"delta": 1, "ts": 1_700_000_000_250, "key": None, "value": b"null key " * 30,
     "headers": [("trace-id", b"abc123"), ("empty", b""), ("null", None)]},
    {"delta": 2, "ts": 1_699_999_999_000, "key": b"k", "value": None, "headers": [("tombstone", b"1")]},
    {"delta": 3, "ts": 1_700_000_360_000, "key": b"", "value": b"",
     "headers": [("ünïcödé-këy", b"\x00\xff")]},
    {"delta": 4, "ts": 1_700_000_000_001, "key": None, "value": None, "headers": []},
    {"delta": 7, "ts": 1_700_000_000_002, "key": b"\x00" * 300, "value": bytes(range(256)) * 20,
     "headers": [(f"h{i}", bytes([i]) * i) for i in range(20)]},
]


def _kp_build(codec: int, records: list[dict[str, Any]] = RECORDS, **producer: Any) -> bytes:
    state = {"is_transactional": False, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1}
    state.update(producer)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, batch_size=1 << 22, **state)
    for r in records:
        meta = builder.append(r["delta"], timestamp=r["ts"], key=r["key"], value=r["value"],
                              headers=r["headers"])
        assert meta is not None
    return bytes(builder.build())


def _our_build(codec: int, records: list[dict[str, Any]] = RECORDS, **kwargs: Any) -> bytes:
    builder = BatchBuilder(compression=codec, **kwargs)
    for r in records:
        builder.append(r["value"], key=r["key"], headers=r["headers"], timestamp=r["ts"],
                       offset_delta=r["delta"])
    return builder.build()


def _kp_read(buf: bytes) -> tuple[DefaultRecordBatch, list[Any]]:
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc(), "kafka-python rejects the CRC"
    return batch, list(batch)


# --------------------------------------------------------------------------- (a) kafka-python -> us


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_we_read_kafka_python_batches(codec: CompressionType) -> None:
    buf = _kp_build(codec)
    h = parse_header(buf)
    assert h.compression == codec, "kafka-python fell back to another codec: test data not compressible"
    d = decode_batch(buf)
    assert h.base_offset == 0 and h.magic == 2
    assert h.records_count == len(RECORDS)
    assert h.last_offset_delta == RECORDS[-1]["delta"]
    assert h.base_timestamp == RECORDS[0]["ts"]
    assert h.max_timestamp == max(r["ts"] for r in RECORDS)
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert not h.is_transactional and not h.is_control
    assert [r.offset for r in d.records] == [r["delta"] for r in RECORDS]
    assert [r.timestamp for r in d.records] == [r["ts"] for r in RECORDS]
    assert [r.key for r in d.records] == [r["key"] for r in RECORDS]
    assert [r.value for r in d.records] == [r["value"] for r in RECORDS]
    assert [list(r.headers) for r in d.records] == [r["headers"] for r in RECORDS]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_we_read_kafka_python_idempotent_batches_after_broker_patches(codec: CompressionType) -> None:
    buf = bytearray(_kp_build(codec, producer_id=123_456, producer_epoch=7, base_sequence=2_147_483_645))
    set_base_offset(buf, 0, 9_000)
    set_partition_leader_epoch(buf, 0, 12)
    h = parse_header(buf)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (123_456, 7, 2_147_483_645)
    assert h.partition_leader_epoch == 12
    d = decode_batch(buf)  # CRC still valid: the patched fields are outside its range
    assert [r.offset for r in d.records] == [9_000 + r["delta"] for r in RECORDS]
    # And kafka-python agrees on the patched batch, including the wrapped last sequence.
    kb, krecords = _kp_read(bytes(buf))
    assert (kb.base_offset, kb.leader_epoch) == (9_000, 12)
    assert kb.last_sequence == h.last_sequence
    assert [r.offset for r in krecords] == [r.offset for r in d.records]


def test_kafka_python_header_view_matches_ours_for_every_field() -> None:
    buf = _kp_build(CompressionType.GZIP, producer_id=5, producer_epoch=1, base_sequence=10,
                    is_transactional=True)
    h = parse_header(buf)
    kb = DefaultRecordBatch(buf)
    assert (h.base_offset, h.size, h.partition_leader_epoch, h.magic, h.crc, h.attributes) == (
        kb.base_offset, kb.size_in_bytes, kb.leader_epoch, kb.magic, kb.crc, kb.attributes)
    assert (h.last_offset_delta, h.last_offset, h.next_offset) == (
        kb.last_offset_delta, kb.last_offset, kb.next_offset)
    assert (h.base_timestamp, h.max_timestamp, int(h.timestamp_type)) == (
        kb.first_timestamp, kb.max_timestamp, kb.timestamp_type)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, h.records_count) == (
        kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.last_sequence, kb.records_count)
    assert (h.compression, h.is_transactional, h.is_control) == (
        kb.compression_type, kb.is_transactional, kb.is_control_batch)


def test_kafka_python_batch_with_corrupted_payload_is_rejected() -> None:
    buf = bytearray(_kp_build(CompressionType.SNAPPY))
    buf[-5] ^= 0x40
    assert not DefaultRecordBatch(bytes(buf)).validate_crc()
    with pytest.raises(CorruptRecordError):
        decode_batch(buf)


# --------------------------------------------------------------------------- (b) us -> kafka-python


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_our_batches(codec: CompressionType) -> None:
    buf = _our_build(codec, base_offset=1_000, partition_leader_epoch=3, producer_id=77,
                     producer_epoch=2, base_sequence=500)
    kb, krecords = _kp_read(buf)
    assert kb.magic == 2
    assert kb.compression_type == codec
    assert kb.base_offset == 1_000
    assert kb.leader_epoch == 3
    assert kb.size_in_bytes == len(buf)
    assert kb.crc == compute_crc(buf, 0, len(buf))
    assert kb.last_offset_delta == RECORDS[-1]["delta"]
    assert kb.records_count == len(RECORDS)
    assert kb.first_timestamp == RECORDS[0]["ts"]
    assert kb.max_timestamp == max(r["ts"] for r in RECORDS)
    assert kb.timestamp_type == 0
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (77, 2, 500)
    assert not kb.is_transactional and not kb.is_control_batch
    assert [r.offset for r in krecords] == [1_000 + r["delta"] for r in RECORDS]
    assert [r.timestamp for r in krecords] == [r["ts"] for r in RECORDS]
    assert [r.key for r in krecords] == [r["key"] for r in RECORDS]
    assert [r.value for r in krecords] == [r["value"] for r in RECORDS]
    assert [r.headers for r in krecords] == [r["headers"] for r in RECORDS]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_crc_matches_kafka_python_pure_python_crc32c(codec: CompressionType) -> None:
    buf = _our_build(codec)
    assert parse_header(buf).crc == kp_pure_python_crc32c(buf[21:]) == compute_crc(buf, 0, len(buf))


def test_kafka_python_reads_our_raw_snappy_batches() -> None:
    buf = _our_build(CompressionType.SNAPPY, snappy_raw=True)
    assert buf[61:69] != b"\x82SNAPPY\x00"
    kb, krecords = _kp_read(buf)
    assert [r.value for r in krecords] == [r["value"] for r in RECORDS]


def test_kafka_python_reads_our_concatenated_batches() -> None:
    batches = [_our_build(codec, base_offset=100 * i) for i, codec in enumerate(CODECS)]
    buf = b"".join(batches)
    ours = [(p, h.base_offset, h.size) for p, h in iter_batches(buf, verify_crc=True)]
    records = MemoryRecords(buf)
    theirs, pos = [], 0
    while records.has_next():
        kb = records.next_batch()
        assert kb.validate_crc()
        theirs.append((pos, kb.base_offset, kb.size_in_bytes))
        assert [r.value for r in kb] == [r["value"] for r in RECORDS]
        pos += kb.size_in_bytes
    assert ours == theirs
    assert len(ours) == len(CODECS)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_kafka_python_sees_log_append_time(codec: CompressionType) -> None:
    buf = bytearray(_our_build(codec))
    set_log_append_time(buf, 0, len(buf), 1_800_000_000_000)
    kb, krecords = _kp_read(bytes(buf))
    assert kb.timestamp_type == 1
    assert kb.max_timestamp == 1_800_000_000_000
    assert [r.timestamp for r in krecords] == [1_800_000_000_000] * len(RECORDS)
    assert {r.timestamp_type for r in krecords} == {1}


def test_kafka_python_reads_builder_log_append_time() -> None:
    buf = _our_build(CompressionType.ZSTD, timestamp_type=TimestampType.LOG_APPEND_TIME,
                     log_append_time=1_750_000_000_000)
    kb, krecords = _kp_read(buf)
    assert kb.timestamp_type == 1
    assert [r.timestamp for r in krecords] == [1_750_000_000_000] * len(RECORDS)


# --------------------------------------------------------------------------- (c) transactions, control


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_transactional_batches_both_ways(codec: CompressionType) -> None:
    ours = _our_build(codec, producer_id=42, producer_epoch=3, base_sequence=0, transactional=True)
    kb, krecords = _kp_read(ours)
    assert kb.is_transactional and not kb.is_control_batch
    assert (kb.producer_id, kb.producer_epoch) == (42, 3)
    assert [r.value for r in krecords] == [r["value"] for r in RECORDS]

    theirs = _kp_build(codec, producer_id=42, producer_epoch=3, base_sequence=0, is_transactional=True)
    d = decode_batch(theirs)
    assert d.header.is_transactional and not d.header.is_control
    assert (d.header.producer_id, d.header.producer_epoch, d.header.base_sequence) == (42, 3, 0)
    assert d.control_record is None
    assert [r.value for r in d.records] == [r["value"] for r in RECORDS]


@pytest.mark.parametrize("marker", list(ControlRecordType))
def test_kafka_python_reads_our_control_batches(marker: ControlRecordType) -> None:
    buf = build_control_batch(marker, producer_id=99, producer_epoch=4, coordinator_epoch=17,
                              base_offset=250, timestamp=1_700_000_000_000)
    kb, krecords = _kp_read(buf)
    assert kb.is_control_batch and kb.is_transactional
    assert (kb.producer_id, kb.producer_epoch, kb.base_offset) == (99, 4, 250)
    (record,) = krecords
    assert record.offset == 250 and record.timestamp == 1_700_000_000_000
    assert record.type == int(marker)
    assert record.commit is (marker is ControlRecordType.COMMIT)
    assert record.abort is (marker is ControlRecordType.ABORT)
    assert record.version == 0
    assert struct.unpack(">hi", record.value) == (0, 17)


@pytest.mark.parametrize("marker", list(ControlRecordType))
def test_we_read_control_batches_made_from_kafka_python(marker: ControlRecordType) -> None:
    # kafka-python's builder never sets the control bit (only brokers write markers), so set it
    # and re-sign with kafka-python's own CRC function, as a broker would.
    raw = _kp_build(
        CompressionType.NONE,
        [{"delta": 0, "ts": 1_700_000_000_123, "key": struct.pack(">hh", 0, int(marker)),
          "value": struct.pack(">hi", 0, 23), "headers": []}],
        producer_id=8, producer_epoch=1, base_sequence=-1, is_transactional=True,
    )
    buf = bytearray(raw)
    (attributes,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attributes | 0x20)
    struct.pack_into(">I", buf, 17, kp_pure_python_crc32c(bytes(buf[21:])))
    kb, krecords = _kp_read(bytes(buf))
    assert kb.is_control_batch and krecords[0].type == int(marker)
    d = decode_batch(buf)
    assert d.header.is_control and d.header.is_transactional
    cr = d.control_record
    assert cr is not None
    assert cr.type is marker and cr.coordinator_epoch == 23
    assert d.records[0].timestamp == 1_700_000_000_123
