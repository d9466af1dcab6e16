"""Rewrite a record batch keeping some of its records: the byte-level half of Kafka's
``MemoryRecords.filterTo`` (the log cleaner decides *which* records stay; this module writes them).

A record's bytes are reused as they are, except its ``timestampDelta``: Kafka's rebuilt batch takes as
base timestamp either the first retained record's timestamp or, when the batch gets a delete horizon
(KIP-534: bit 6 of the attributes), the horizon itself, and re-encodes each record's delta against it.
Everything after the offset delta (key, value, headers) is copied verbatim, so no record is decoded
beyond the four leading fields.

The rebuilt batch keeps the original base offset, last offset delta, producer id/epoch, base sequence,
partition leader epoch, timestamp type and codec (Kafka's ``buildRetainedRecordsInto`` with
``overrideLastOffset``): the last sequence of a producer survives compaction, so an idempotent producer
never sees OUT_OF_ORDER_SEQUENCE after a cleaning.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from strata.errors import CorruptRecordError
from strata.protocol.records.batch import (
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    TimestampType,
    reseal_crc,
)
from strata.protocol.records.compression import compress, decompress
from strata.protocol.records.varint import read_varint, write_varint

_HEADER_PREFIX = struct.Struct(">qiib")  # base offset, length, partition leader epoch, magic
_HEADER_REST = struct.Struct(">IhiqqqhII")  # crc, attributes, last delta, base ts, max ts, pid, epoch, seq, count
_COUNT = struct.Struct(">i")


class RecordSpan(NamedTuple):
    """One record of a (decompressed) records section, located but not decoded."""

    offset_delta: int
    timestamp: int  # absolute (base timestamp + delta); the batch's max timestamp under LogAppendTime
    key: bytes | None
    has_value: bool
    rest: int  # position of the key length: key, value and headers are copied from here to ``end``
    end: int


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """KIP-534: the time after which the cleaner may drop this batch's tombstones and markers."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None


def records_payload(buf: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> bytes | memoryview:
    """The records section of the batch at ``position``, decompressed."""
    body = memoryview(buf)[position + RECORD_BATCH_OVERHEAD: position + header.size]
    return decompress(header.compression, body) if header.compression else body


def scan_records(header: BatchHeader, payload: bytes | memoryview) -> list[RecordSpan]:
    """Each record's offset delta, timestamp, key and whether it has a value; values are skipped.

    The cleaner's hot loop (every record of every cleaned batch passes here twice): varints of one and
    two bytes - nearly all lengths and deltas - are decoded inline, and the spans are built as plain
    tuples (``RecordSpan`` only names their fields).
    """
    buf = bytes(payload)
    total = len(buf)
    base_ts = header.base_timestamp
    fixed_ts = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    spans: list[RecordSpan] = []
    append = spans.append
    new = tuple.__new__
    position = 0
    try:
        for _ in range(header.records_count):
            b = buf[position]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                position += 1
            elif buf[position + 1] < 0x80:
                raw = (b & 0x7F) | (buf[position + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                position += 2
            else:
                length, position = read_varint(buf, position)
            end = position + length
            if length < 0 or end > total:
                raise CorruptRecordError(f"record of {length} bytes runs past the batch", position)
            p = position + 1  # attributes: unused
            b = buf[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                ts_delta, p = read_varint(buf, p)
            b = buf[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = read_varint(buf, p)
            rest = p
            b = buf[p]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                key_len, p = read_varint(buf, p)
            key = None
            if key_len >= 0:
                key = buf[p: p + key_len]
                p += key_len
            b = buf[p]
            if p >= end:
                raise CorruptRecordError("record fields run past the record", position)
            append(new(RecordSpan, (offset_delta, base_ts + ts_delta if fixed_ts is None else fixed_ts, key,
                                    b != 1, rest, end)))  # a value length of -1 is the zig-zag byte 1
            position = end
    except IndexError:
        raise CorruptRecordError("a record runs past the end of the batch", position) from None
    if position != total:
        raise CorruptRecordError(f"{total - position} bytes left after the {header.records_count} records "
                                 "the header declares")
    return spans


def rebuild_batch(header: BatchHeader, payload: bytes | memoryview, retained: Sequence[RecordSpan],
                  delete_horizon: int | None) -> bytes:
    """A batch with only ``retained`` (a non-empty, ordered subset of ``scan_records(header, payload)``).

    ``delete_horizon``: set bit 6 and use it as the base timestamp (the batch keeps tombstones or a
    marker whose horizon starts now); None keeps the batch's horizon if it had one.
    """
    buf = payload if isinstance(payload, memoryview) else memoryview(payload)
    attributes = header.attributes & ~DELETE_HORIZON_MASK
    if delete_horizon is None and header.attributes & DELETE_HORIZON_MASK:
        delete_horizon = header.base_timestamp
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_MASK
        base_ts = delete_horizon
    else:
        base_ts = retained[0].timestamp if not log_append else header.base_timestamp
    body = bytearray()
    max_ts = NO_TIMESTAMP
    record = bytearray()
    for span in retained:
        record.clear()
        record.append(0)  # attributes: unused, always 0
        write_varint(0 if log_append else span.timestamp - base_ts, record)
        write_varint(span.offset_delta, record)
        record += buf[span.rest: span.end]
        write_varint(len(record), body)
        body += record
        if span.timestamp > max_ts:
            max_ts = span.timestamp
    if log_append:
        max_ts = header.max_timestamp
    records = compress(header.compression, body) if header.compression else body
    size = RECORD_BATCH_OVERHEAD + len(records)
    out = bytearray(size)
    _HEADER_PREFIX.pack_into(out, 0, header.base_offset, size - LOG_OVERHEAD, header.partition_leader_epoch,
                             header.magic)
    _HEADER_REST.pack_into(out, 17, 0, attributes, header.last_offset_delta, base_ts, max_ts,
                           header.producer_id, header.producer_epoch, header.base_sequence & 0xFFFFFFFF,
                           len(retained))
    out[RECORD_BATCH_OVERHEAD:] = records
    reseal_crc(out, 0, size)
    return bytes(out)


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader``: the batch's offsets, producer fields and max
    timestamp with no records (a producer's last batch, kept so its sequence and epoch survive)."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | 0x10 | 0x20)  # no codec, no delete horizon
    out = bytearray(RECORD_BATCH_OVERHEAD)
    _HEADER_PREFIX.pack_into(out, 0, header.base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
                             header.partition_leader_epoch, header.magic)
    _HEADER_REST.pack_into(out, 17, 0, attributes, header.last_offset_delta, NO_TIMESTAMP, header.max_timestamp,
                           header.producer_id, header.producer_epoch, header.base_sequence & 0xFFFFFFFF, 0)
    reseal_crc(out, 0, RECORD_BATCH_OVERHEAD)
    return bytes(out)
