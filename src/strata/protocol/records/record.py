"""Full decoding of the records inside a batch (after decompression).

Per record (``DefaultRecord.java``)::

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint
    | key_len varint (-1 = null) | key | value_len varint | value
    | headers_count varint | [key_len varint, key utf8, value_len varint, value] ...

This is the slow, thorough path: the broker never calls it when serving fetches. It is used by
``dump-log``, ListOffsets timestamp lookups, tests and the Spark reader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from strata.errors import CorruptRecordError
from strata.protocol.records.batch import (
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    TimestampType,
    ensure_valid,
    parse_header,
)
from strata.protocol.records.compression import decompress
from strata.protocol.records.varint import read_varint

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A transaction marker: key ``version int16, type int16``; value ``version int16, epoch int32``."""

    type: ControlRecordType
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: list[Record]

    @property
    def control_record(self) -> ControlRecord | None:
        if not self.header.is_control or not self.records:
            return None
        return parse_control_record(self.records[0])


def parse_control_record(record: Record) -> ControlRecord:
    if record.key is None or len(record.key) < 4:
        raise CorruptRecordError("control record key shorter than 4 bytes")
    _version, kind = struct.unpack_from(">hh", record.key)
    epoch = -1
    if record.value is not None and len(record.value) >= 6:
        _vversion, epoch = struct.unpack_from(">hi", record.value)
    try:
        return ControlRecord(ControlRecordType(kind), epoch)
    except ValueError:
        raise CorruptRecordError(f"unknown control record type {kind}") from None


def _read_bytes(buf: memoryview, position: int, end: int) -> tuple[bytes | None, int]:
    length, position = read_varint(buf, position)
    if length < 0:
        return None, position
    if position + length > end:
        raise CorruptRecordError(f"field of {length} bytes runs past the record", position)
    return bytes(buf[position : position + length]), position + length


def decode_records(header: BatchHeader, payload: bytes | memoryview) -> list[Record]:
    """Decode the (already decompressed) records section described by ``header``."""
    buf = memoryview(payload)
    log_append_time = header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    records: list[Record] = []
    position = 0
    total = len(buf)
    for _ in range(header.records_count):
        length, position = read_varint(buf, position)
        end = position + length
        if length < 0 or end > total:
            raise CorruptRecordError(f"record of {length} bytes runs past the batch", position)
        position += 1  # attributes, unused
        ts_delta, position = read_varint(buf, position)
        offset_delta, position = read_varint(buf, position)
        key, position = _read_bytes(buf, position, end)
        value, position = _read_bytes(buf, position, end)
        n_headers, position = read_varint(buf, position)
        if n_headers < 0:
            raise CorruptRecordError(f"negative header count {n_headers}", position)
        headers = []
        for _ in range(n_headers):
            hkey, position = _read_bytes(buf, position, end)
            if hkey is None:
                raise CorruptRecordError("null header key", position)
            hvalue, position = _read_bytes(buf, position, end)
            try:
                headers.append((hkey.decode("utf-8"), hvalue))
            except UnicodeDecodeError:
                raise CorruptRecordError("header key is not UTF-8", position) from None
        if position != end:
            raise CorruptRecordError(f"record length {length} does not match its fields", position)
        timestamp = log_append_time if log_append_time is not None else header.base_timestamp + ts_delta
        records.append(
            Record(
                offset=header.base_offset + offset_delta,
                timestamp=timestamp,
                key=key,
                value=value,
                headers=tuple(headers),
            )
        )
    if position != total:
        raise CorruptRecordError(
            f"{total - position} bytes left after the {header.records_count} records the header declares"
        )
    return records


def decode_batch(
    buf: bytes | bytearray | memoryview, position: int = 0, *, verify_crc: bool = True
) -> DecodedBatch:
    """Decode the batch at ``position``: header, CRC (unless told not to), codec, records."""
    header = parse_header(buf, position)
    if verify_crc:
        ensure_valid(buf, position, header)
    body = memoryview(buf)[position + RECORD_BATCH_OVERHEAD : position + header.size]
    return DecodedBatch(header, decode_records(header, decompress(header.compression, body)))
