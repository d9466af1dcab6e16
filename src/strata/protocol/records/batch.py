"""The record batch v2 header: parse, check and patch without touching the records.

Layout (Kafka ``DefaultRecordBatch.java``; all integers big-endian)::

    offset size field
     0     8    base_offset             first offset in the batch (set by the leader on append)
     8     4    length                  bytes after this field = batch size - 12 (LOG_OVERHEAD)
    12     4    partition_leader_epoch  set by the leader on append; NOT covered by the CRC
    16     1    magic                   2
    17     4    crc                     CRC-32C of bytes [21, end of batch)
    21     2    attributes              bits 0-2 codec, 3 timestamp type, 4 transactional,
                                        5 control, 6 delete horizon
    23     4    last_offset_delta
    27     8    base_timestamp
    35     8    max_timestamp
    43     8    producer_id
    51     2    producer_epoch
    53     4    base_sequence
    57     4    records_count
    61     ...  records (compressed as a whole when the codec is not 0)

Because base offset and leader epoch sit before the CRC'd range, the broker can assign offsets by
patching 12 bytes in place: no re-encoding, no re-compression, no re-checksumming. That is what
keeps the produce→disk→fetch path free of per-record Python work.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import NamedTuple

from crc32c import crc32c

from strata.errors import (
    CorruptRecordError,
    TruncatedBatchError,
    UnsupportedForMessageFormatError,
)

LOG_OVERHEAD = 12  # base_offset + length: the framing shared by every magic
RECORD_BATCH_OVERHEAD = 61
HEADER_SIZE_UP_TO_MAGIC = 17  # what Kafka's RemoteLogInputStream reads first
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CURRENT_MAGIC = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")  # the 61-byte header as one unpack, field order of BatchHeader
_HEADER = HEADER_STRUCT
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
assert _HEADER.size == RECORD_BATCH_OVERHEAD


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The 61 header bytes of one batch, decoded by a single ``struct`` call."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Kafka's ``lastSequence``: sequences wrap at Int32.MAX."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(
    buf: bytes | bytearray | memoryview, position: int = 0, *, require_whole_batch: bool = True
) -> BatchHeader:
    """Decode the header at ``position``; checks framing and magic, not the CRC.

    ``require_whole_batch=False`` accepts a buffer holding only the 61 header bytes (file scans
    that ``pread`` headers and check the batch end against the file size themselves).
    """
    remaining = len(buf) - position
    if remaining < LOG_OVERHEAD:
        raise TruncatedBatchError(f"{remaining} bytes left, fewer than the 12-byte batch framing", position)
    base_offset, length = struct.unpack_from(">qi", buf, position)
    size = length + LOG_OVERHEAD
    if remaining >= HEADER_SIZE_UP_TO_MAGIC and buf[position + MAGIC_OFFSET] != CURRENT_MAGIC:
        magic = buf[position + MAGIC_OFFSET]
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"message format v{magic} at offset {base_offset}: only record batch v2 is supported"
            )
        raise CorruptRecordError(f"invalid magic {magic} at offset {base_offset}", position)
    if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {length} is below the v2 minimum of 49", position)
    if remaining < (size if require_whole_batch else RECORD_BATCH_OVERHEAD):
        raise TruncatedBatchError(f"batch of {size} bytes but only {remaining} bytes left", position)
    header = BatchHeader._make(_HEADER.unpack_from(buf, position))
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError(
            f"negative last offset delta {header.last_offset_delta} or record count {header.records_count}",
            position,
        )
    return header


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    return crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])


def is_crc_valid(buf: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> bool:
    return compute_crc(buf, position, header.size) == header.crc


def ensure_valid(buf: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> None:
    """Kafka's ``ensureValid``: the stored CRC must match the bytes."""
    actual = compute_crc(buf, position, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch in batch at offset {header.base_offset}: stored {header.crc:#010x}, "
            f"computed {actual:#010x}",
            position,
        )


def iter_batches(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None, *, verify_crc: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in ``buf[start:end]``.

    Raises :class:`TruncatedBatchError` at a trailing partial batch, :class:`CorruptRecordError`
    at a malformed one (and, with ``verify_crc``, at a checksum mismatch).
    """
    view = memoryview(buf)
    if end is not None:
        view = view[:end]
    position = start
    limit = len(view)
    while position < limit:
        header = parse_header(view, position)
        if verify_crc:
            ensure_valid(view, position, header)
        yield position, header
        position += header.size


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    _I64.pack_into(buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, size: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as its max timestamp and re-sign it.

    These fields are inside the CRC'd range, so unlike offset assignment this recomputes the
    CRC (Kafka's ``setMaxTimestamp`` does the same); the records themselves are untouched.
    """
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _U32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))


def reseal_crc(buf: bytearray | memoryview, position: int, size: int) -> None:
    """Recompute and store the CRC after an in-range edit (used by builders and tests)."""
    _U32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))
