"""Re-encode one record batch with another codec: the byte-level half of Kafka's
``LogValidator.buildRecordsAndAssignOffsets`` (the broker's ``compression.type`` decides *when*; this writes it).

Kafka rebuilds a produced batch, rather than patching its header in place, when the topic's target codec
differs from the batch's. Its ``MemoryRecordsBuilder`` then writes, for magic v2, exactly one new batch:

* the header: the batch's producer id, producer epoch, base sequence and transactional flag; the new
  codec; last offset delta ``count - 1``; base timestamp the first record's timestamp, max timestamp the
  largest record timestamp; never the control flag or a delete horizon. Offsets, the leader epoch and
  LogAppendTime are the caller's (:func:`strata.log.validator.assign_offsets` patches them afterwards).
* each record: attributes 0, its timestamp as a delta from the new base, offset delta ``0..count-1``
  (Kafka appends with consecutive offsets), then its key, value and headers, copied byte for byte.

Each record is walked as Kafka's ``DefaultRecord.readFrom`` walks it (it decodes every record on this path),
so a record that does not parse fails the whole batch with INVALID_RECORD (Kafka's ``InvalidRecordException``,
thrown by its record iterator: no per-record errors). Only timestamps out of range are reported per record,
as Kafka's ``validateTimestamp`` does. A records section the codec cannot inflate is CORRUPT_MESSAGE, as
everywhere else in Strata (Kafka wraps the codec's IOException in a KafkaException: UNKNOWN_SERVER_ERROR).
Control batches are never given here: transaction markers keep their bytes.
"""

from __future__ import annotations

import struct

from strata.errors import ErrorCode, InvalidRecordError, RecordError, RecordValidationError
from strata.protocol.records.batch import (
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    reseal_crc,
)
from strata.protocol.records.compression import compress, decompress
from strata.protocol.records.varint import read_varint, write_varint

_HEADER_PREFIX = struct.Struct(">qiib")  # base offset, length, partition leader epoch, magic
_HEADER_REST = struct.Struct(">Ihiqqqhii")  # crc, attributes, last delta, base ts, max ts, pid, epoch, seq, count


def recompress_batch(buf: bytes | bytearray | memoryview, position: int, header: BatchHeader, codec: int, *,
                     level: int | None = None, timestamp_bounds: tuple[int, int] | None = None) -> bytes:
    """The batch at ``position`` of ``buf`` rebuilt with ``codec`` (``level``: Kafka's, see ``compress``).

    ``timestamp_bounds``: ``(earliest, latest)`` a record's CreateTime timestamp must fall in (Kafka's
    ``validateTimestamp``, which checks every record of a batch it decodes); records outside are
    rejected together with per-record errors (INVALID_TIMESTAMP). ``None``: no check (LogAppendTime).
    The result's offsets and leader epoch are the batch's own; its CRC is recomputed.

    What every producer sends - record attributes 0, offset deltas 0..n-1, a base timestamp that is the
    first record's - re-encodes to the very bytes it already has (its varints as written: every client
    writes them minimal, as Kafka does), so then the records section is only walked (to validate it) and
    handed to the codec as it is; otherwise each record is re-encoded.
    """
    if header.is_control:
        raise ValueError("control batches are never recompressed")
    body = memoryview(buf)[position + RECORD_BATCH_OVERHEAD: position + header.size]
    payload = decompress(header.compression, body) if header.compression else bytes(body)
    deltas, rests, ends, verbatim = _walk(payload, header.records_count)
    if header.attributes & TIMESTAMP_TYPE_MASK:  # a LogAppendTime batch: every record has its max timestamp
        timestamps = [header.max_timestamp] * len(deltas)
        verbatim = False
    else:
        base = header.base_timestamp
        timestamps = [base + delta for delta in deltas]
    if timestamp_bounds is not None:
        _check_timestamps(timestamps, *timestamp_bounds)
    base_ts = timestamps[0]
    max_ts = max(NO_TIMESTAMP, max(timestamps))
    if verbatim and deltas[0] == 0:
        records = payload
    else:
        parts: list[bytes | memoryview] = []
        view = memoryview(payload)
        prefix = bytearray()
        for offset_delta, timestamp in enumerate(timestamps):
            prefix.clear()
            prefix.append(0)  # the record's attributes byte
            write_varint(timestamp - base_ts, prefix)
            write_varint(offset_delta, prefix)
            rest, end = rests[offset_delta], ends[offset_delta]
            length = bytearray()
            write_varint(len(prefix) + end - rest, length)
            parts += (bytes(length), bytes(prefix), view[rest:end])
        records = b"".join(parts)
    compressed = compress(codec, records, level=level)
    size = RECORD_BATCH_OVERHEAD + len(compressed)
    batch = bytearray(size)
    _HEADER_PREFIX.pack_into(batch, 0, header.base_offset, size - LOG_OVERHEAD, header.partition_leader_epoch,
                             CURRENT_MAGIC)
    attributes = codec | (header.attributes & TRANSACTIONAL_MASK)
    _HEADER_REST.pack_into(batch, 17, 0, attributes, len(deltas) - 1, base_ts, max_ts, header.producer_id,
                           header.producer_epoch, header.base_sequence, len(deltas))
    batch[RECORD_BATCH_OVERHEAD:] = compressed
    reseal_crc(batch, 0, size)
    return bytes(batch)


def _walk(payload: bytes, count: int) -> tuple[list[int], list[int], list[int], bool]:
    """Validate ``count`` records as Kafka's ``DefaultRecord.readFrom`` reads them; per record its timestamp
    delta, where its key length starts and where it ends, and whether the section is already as Kafka's
    builder would write it (attributes 0, offset deltas 0..n-1).

    The hot loop of this path: one-byte varints (nearly every length and delta) are decoded inline.
    """
    deltas: list[int] = []
    rests: list[int] = []
    ends: list[int] = []
    add_delta, add_rest, add_end = deltas.append, rests.append, ends.append
    verbatim = True
    total = len(payload)
    pos = 0
    index = 0
    try:
        for index in range(count):
            b = payload[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(payload, pos)
            end = pos + length
            if length < 0 or end > total:
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
            b = payload[pos + 1]  # after the attributes byte (unused in v2, written as 0): the timestamp delta
            if b < 0x80:
                add_delta((b >> 1) ^ -(b & 1))
                p = pos + 2
            else:
                ts_delta, p = read_varint(payload, pos + 1)
                add_delta(ts_delta)
            b = payload[p]
            if b < 0x80:
                if verbatim and (b != index << 1 or payload[pos]):  # offset delta, attributes
                    verbatim = False
                p += 1
            else:
                offset_delta, p = read_varint(payload, p)
                if offset_delta != index or payload[pos]:
                    verbatim = False
            add_rest(p)
            b = payload[p]  # key length
            if b < 0x80:
                p += 1 + ((b >> 1) if not b & 1 else 0)
            else:
                n, p = read_varint(payload, p)
                if n > 0:
                    p += n
            b = payload[p]  # value length
            if b < 0x80:
                p += 1 + ((b >> 1) if not b & 1 else 0)
            else:
                n, p = read_varint(payload, p)
                if n > 0:
                    p += n
            b = payload[p]  # header count
            if b < 0x80:
                headers = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                headers, p = read_varint(payload, p)
            if headers:
                if headers < 0:
                    raise InvalidRecordError(f"Found invalid number of record headers {headers} in record {index}")
                for _ in range(headers):
                    b = payload[p]
                    if b < 0x80:
                        if b & 1:
                            raise InvalidRecordError(f"Invalid negative header key size {-(b + 1) >> 1} in record "
                                                     f"{index}")
                        p += 1 + (b >> 1)
                    else:
                        n, p = read_varint(payload, p)
                        if n < 0:
                            raise InvalidRecordError(f"Invalid negative header key size {n} in record {index}")
                        p += n
                    b = payload[p]
                    if b < 0x80:
                        p += 1 + ((b >> 1) if not b & 1 else 0)
                    else:
                        n, p = read_varint(payload, p)
                        if n > 0:
                            p += n
                    if p > end:
                        break
            if p != end:
                raise InvalidRecordError(f"Invalid record size: expected to read {length} bytes in record payload, "
                                         f"but the fields of record {index} end at byte {p - pos}")
            add_end(end)
            pos = end
    except InvalidRecordError:
        raise
    except Exception as e:  # a varint running past the payload (CorruptRecordError), an IndexError
        raise InvalidRecordError(f"Found invalid record structure in record {index}: {e}") from None
    if pos != total:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    if not deltas:
        raise InvalidRecordError(f"Invalid reported count for record batch: {count}")
    return deltas, rests, ends, verbatim


def _check_timestamps(timestamps: list[int], earliest: int, latest: int) -> None:
    """Kafka's ``validateTimestamp`` per record (NO_TIMESTAMP is not checked), one error per record."""
    if earliest <= min(timestamps) and max(timestamps) <= latest:
        return
    errors = [
        RecordError(index, f"Timestamp {timestamp} of message with offset {index} is out of range. "
                           f"The timestamp should be within [{earliest}, {latest}]")
        for index, timestamp in enumerate(timestamps)
        if timestamp != NO_TIMESTAMP and not earliest <= timestamp <= latest
    ]
    if errors:
        raise RecordValidationError(errors, ErrorCode.INVALID_TIMESTAMP)
