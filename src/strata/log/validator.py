"""Produce-time validation and offset assignment, header-only (Kafka's LogValidator, trimmed).

What is checked without decoding records: framing and magic, CRC-32C, batch size against
``max.message.bytes``, Kafka's client rules (base offset 0, no control batches, a producer id on
transactional batches, a sane record count), and the timestamp window on the batch's
``max_timestamp`` and ``base_timestamp``. Offsets and the leader epoch are then patched in place;
with ``LogAppendTime`` the max timestamp is stamped and the CRC re-sealed. Records are not
re-encoded: a CRC-valid batch from a client is stored as sent, unless the topic's ``compression.type``
names another codec than the batch's (:func:`recompress_to_target`, Kafka's ``targetCompression``).

The one exception to "header-only" is a compacted topic (``cleanup.policy`` with ``compact``): there,
as in Kafka's ``LogValidator.validateKey``, every record of a leader append needs a key, so the
records are walked (decompressed if need be) far enough to read each key length, nothing more.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from crc32c import crc32c

from strata.common import TopicPartition
from strata.config import LogConfig
from strata.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
    RecordTooLargeError,
    RecordValidationError,
)
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER_STRUCT,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CompressionType,
    TimestampType,
    decompress,
    ensure_valid,
    iter_batches,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from strata.protocol.records.batch import COMPRESSION_MASK
from strata.protocol.records.recompress import recompress_batch
from strata.protocol.records.varint import read_varint


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did: offsets assigned, timestamps seen, bytes and batches."""

    first_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    valid_bytes: int = 0
    batches: list[tuple[int, BatchHeader]] = field(default_factory=list)
    chunks: list[bytes | bytearray | memoryview] = field(default_factory=list)  # the bytes to write
    duplicate: bool = False

    @property
    def num_messages(self) -> int:
        return self.last_offset - self.first_offset + 1 if self.first_offset >= 0 else 0


_OFFSET_AND_LENGTH_AND_EPOCH = struct.Struct(">qii")
_U32 = struct.Struct(">I")


def analyze_and_validate(records: bytes | bytearray | memoryview, config: LogConfig,
                         origin: AppendOrigin, now_ms: int,
                         topic_partition: TopicPartition | None = None) -> list[tuple[int, BatchHeader]]:
    """Parse every batch header and check it; raises a KafkaError for the first bad batch.

    On a compacted topic, leader appends (any origin but REPLICATION) also have their record keys
    checked: :func:`validate_keys`, whose messages name ``topic_partition``. Timestamps are checked
    on leader appends only as well.
    """
    batches = []
    check_keys = origin is not AppendOrigin.REPLICATION and "compact" in config.cleanup_policy
    for position, header in iter_batches(records):
        if header.size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}"
            )
        ensure_valid(records, position, header)
        if origin is AppendOrigin.CLIENT:
            _validate_client_batch(header)
        if check_keys:
            validate_keys(records, position, header, topic_partition)
        # A follower takes the leader's batches as they are (Kafka's appendAsFollower skips LogValidator):
        # a batch the leader's cleaner rewrote carries its delete horizon (now + delete.retention.ms) as
        # its base timestamp, and replicated data may be older than message.timestamp.before.max.ms.
        if (origin is not AppendOrigin.REPLICATION and header.timestamp_type is TimestampType.CREATE_TIME
                and not config.log_append_time):
            _validate_timestamps(header, config, now_ms)
        batches.append((position, header))
    if not batches:
        raise InvalidRecordError("produce request carried no record batch")
    return batches


def _validate_client_batch(header: BatchHeader) -> None:
    if header.base_offset != 0:
        raise InvalidRecordError(f"the base offset of a produced batch must be 0, not {header.base_offset}")
    if header.is_control:
        raise InvalidRecordError("clients are not allowed to write control records")
    if header.is_transactional and not header.has_producer_id:
        raise InvalidRecordError("a transactional batch needs a producer id")
    if header.records_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"batch declares {header.records_count} records but a last offset delta of {header.last_offset_delta}"
        )


def validate_keys(records: bytes | bytearray | memoryview, position: int, header: BatchHeader,
                  topic_partition: TopicPartition | None) -> None:
    """Kafka's ``validateKey`` for the batch at ``position`` of a compacted topic's append.

    Raises :class:`RecordValidationError` (INVALID_RECORD) with one record error per keyless record,
    indexed within the batch, so that nothing of the batch is appended and the client learns which
    records were at fault.
    """
    missing = keyless_record_indexes(records, position, header)
    if missing:
        message = f"Compacted topic cannot accept message without key in topic partition {topic_partition}"
        raise RecordValidationError([RecordError(index, message) for index in missing])


def keyless_record_indexes(records: bytes | bytearray | memoryview, position: int,
                           header: BatchHeader) -> list[int]:
    """Indexes (within the batch) of the records with a null key, for the batch at ``position``.

    A cheap walk: per record, its length, the attributes byte, two varints skipped, the key length;
    then a jump to the next record. An uncompressed batch is read in place; a compressed one is
    decompressed first (as Kafka does: it cannot know the keys otherwise). Records that do not fit
    the batch, or a count that does not match the bytes, are a CorruptRecordError, as when decoding.
    """
    start = position + RECORD_BATCH_OVERHEAD
    stop = position + header.size
    buf: bytes | bytearray | memoryview
    if header.compression:
        buf = decompress(header.compression, memoryview(records)[start:stop])
        start, stop = 0, len(buf)
    else:
        buf = records
    missing = []
    pos = start
    try:
        for index in range(header.records_count):
            length, pos = read_varint(buf, pos)
            record_end = pos + length
            if length < 0 or record_end > stop:
                raise CorruptRecordError(f"record {index} of {length} bytes runs past its batch", pos)
            p = pos + 1  # the attributes byte
            while buf[p] & 0x80:  # timestamp delta
                p += 1
            p += 1
            while buf[p] & 0x80:  # offset delta
                p += 1
            key_length, p = read_varint(buf, p + 1)
            if p > record_end:
                raise CorruptRecordError(f"record {index} is shorter than its fields", pos)
            if key_length < 0:
                missing.append(index)
            pos = record_end
    except IndexError:
        raise CorruptRecordError("a record runs past the end of the records", pos) from None
    if pos != stop:
        raise CorruptRecordError(
            f"{stop - pos} bytes left after the {header.records_count} records the batch header declares"
        )
    return missing


def _validate_timestamps(header: BatchHeader, config: LogConfig, now_ms: int) -> None:
    for ts in (header.base_timestamp, header.max_timestamp):
        if ts < 0:
            continue
        if now_ms - ts > config.message_timestamp_before_max_ms:
            raise InvalidTimestampError(
                f"timestamp {ts} is more than message.timestamp.before.max.ms before now ({now_ms})"
            )
        if ts - now_ms > config.message_timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"timestamp {ts} is more than message.timestamp.after.max.ms after now ({now_ms})"
            )


TARGET_CODECS: dict[str, int | None] = {
    "producer": None,
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
"""``compression.type`` -> the codec every leader append is stored with (Kafka's ``BrokerCompressionType``);
``producer`` (None) keeps each batch's own codec."""


def target_codec(config: LogConfig) -> int | None:
    """Kafka's ``BrokerCompressionType.targetCompression``: the topic's codec, or None for ``producer``."""
    return TARGET_CODECS.get(config.compression_type)


def _needs_recompression(header: BatchHeader, target: int | None) -> bool:
    """Kafka rebuilds a batch whose codec is not the target (``inPlaceAssignment`` is false); a control
    batch (a transaction marker) keeps its bytes, and a batch with no record has nothing to re-encode."""
    return (target is not None and header.compression != target and not header.is_control
            and header.records_count > 0)


def _level(config: LogConfig, codec: int) -> int | None:
    if codec == CompressionType.GZIP:
        return config.compression_gzip_level
    if codec == CompressionType.LZ4:
        return config.compression_lz4_level
    if codec == CompressionType.ZSTD:
        return config.compression_zstd_level
    return None


def recompress_to_target(records: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]],
                         config: LogConfig, now_ms: int, topic_partition: TopicPartition | None = None,
                         ) -> tuple[bytes | bytearray | memoryview, list[tuple[int, BatchHeader]]]:
    """Leader appends only: the batches re-encoded with the topic's ``compression.type`` where it names
    another codec than theirs (Kafka's ``validateMessagesAndAssignOffsetsCompressed`` with
    ``inPlaceAssignment`` false, then ``buildRecordsAndAssignOffsets``); ``records`` and ``batches``
    unchanged when no batch needs it, which is every append of a topic on ``producer``.

    One batch in is one batch out (Kafka takes a single v2 batch per append and builds one; Strata takes
    several and rebuilds each on its own, so each keeps its producer id, epoch and sequence), at offset 0:
    :func:`assign_offsets` then patches offsets, leader epoch and LogAppendTime as for any batch. Every
    record's CreateTime timestamp is checked, since the records are decoded anyway (Kafka checks each one);
    a rebuilt batch larger than ``max.message.bytes`` is refused with MESSAGE_TOO_LARGE, as Kafka
    re-checks the size when ``messageSizeMaybeChanged``. Followers never come here: they store the
    leader's bytes.
    """
    target = target_codec(config)
    if target is None or not any(_needs_recompression(h, target) for _, h in batches):
        return records, batches
    level = _level(config, target)
    bounds = None if config.log_append_time else (now_ms - config.message_timestamp_before_max_ms,
                                                  now_ms + config.message_timestamp_after_max_ms)
    view = memoryview(records)
    out = bytearray()
    rebuilt = []
    for position, header in batches:
        if _needs_recompression(header, target):
            batch: bytes | memoryview = recompress_batch(records, position, header, target, level=level,
                                                         timestamp_bounds=bounds)
            if len(batch) > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"Message batch size is {len(batch)} bytes in append to partition {topic_partition} which "
                    f"exceeds the maximum configured size of {config.max_message_bytes}.")
            header = parse_header(batch)
        else:
            batch = view[position: position + header.size]
        rebuilt.append((len(out), header))
        out += batch
    return out, rebuilt


def assign_offsets(records: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]],
                   next_offset: int, leader_epoch: int, config: LogConfig, now_ms: int) -> LogAppendInfo:
    """Give the batches their offsets (and epoch, and LogAppendTime); returns the append summary.

    Immutable input (``bytes`` straight from a socket) is not copied: each batch becomes a patched
    61-byte header plus a view of its untouched remainder, written with one ``pwritev``. Only
    LogAppendTime, which changes CRC'd bytes, needs a mutable copy. ``info.batches`` carries the
    headers as written, so indexes and producer state see what is on disk.
    """
    info = LogAppendInfo(first_offset=next_offset)
    log_append_time = config.log_append_time
    if log_append_time and not isinstance(records, bytearray):
        records = bytearray(records)
    in_place = isinstance(records, bytearray)
    view = memoryview(records)
    chunks: list[bytes | bytearray | memoryview] = [] if not in_place else [records]
    stamped = []
    max_ts_seen = -1
    for position, h in batches:
        epoch = leader_epoch if leader_epoch >= 0 else h.partition_leader_epoch
        max_ts, attributes, crc = h.max_timestamp, h.attributes, h.crc
        if in_place:
            set_base_offset(records, position, next_offset)  # type: ignore[arg-type]
            set_partition_leader_epoch(records, position, epoch)  # type: ignore[arg-type]
            if log_append_time:
                set_log_append_time(records, position, h.size, now_ms)  # type: ignore[arg-type]
                max_ts, attributes = now_ms, attributes | TIMESTAMP_TYPE_MASK
                crc = _U32.unpack_from(records, position + 17)[0]
                info.log_append_time = now_ms
        else:
            head = bytearray(view[position : position + RECORD_BATCH_OVERHEAD])
            _OFFSET_AND_LENGTH_AND_EPOCH.pack_into(head, 0, next_offset, h.length, epoch)
            chunks.append(head)
            chunks.append(view[position + RECORD_BATCH_OVERHEAD : position + h.size])
        stamped.append((position, BatchHeader(
            next_offset, h.length, epoch, h.magic, crc, attributes, h.last_offset_delta, h.base_timestamp,
            max_ts, h.producer_id, h.producer_epoch, h.base_sequence, h.records_count,
        )))
        if max_ts > max_ts_seen:
            max_ts_seen = max_ts
            info.offset_of_max_timestamp = next_offset + h.last_offset_delta
        next_offset += h.last_offset_delta + 1
    info.max_timestamp = max_ts_seen
    info.last_offset = next_offset - 1
    info.valid_bytes = len(records)
    info.batches = stamped
    info.chunks = chunks
    return info


_PLAIN_EXCLUDED_ATTRIBUTES = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK


def fast_plain_append(records: bytes | bytearray | memoryview, next_offset: int, leader_epoch: int,
                      config: LogConfig, now_ms: int) -> LogAppendInfo | None:
    """The common produce in one pass: a single CreateTime batch from a plain (non-idempotent) client.

    Same rules and the same bytes as :func:`analyze_and_validate` + :func:`assign_offsets`, with a
    fraction of the interpreter steps (a 64 KiB append costs an 18 us page-cache write, so every
    microsecond of bookkeeping shows). Returns ``None`` for anything else, including any batch
    that breaks a rule, any batch for a compacted topic (its keys are checked) and any batch whose
    codec is not the topic's ``compression.type`` (it is re-encoded): the general path then handles
    it and raises the precise error.
    """
    if len(records) < RECORD_BATCH_OVERHEAD:
        return None
    (base_offset, length, _epoch, magic, crc, attributes, last_offset_delta, base_ts, max_ts,
     producer_id, producer_epoch, base_sequence, count) = HEADER_STRUCT.unpack_from(records, 0)
    size = length + 12
    target = TARGET_CODECS.get(config.compression_type)
    if (size != len(records) or magic != 2 or base_offset != 0 or producer_id >= 0
            or attributes & _PLAIN_EXCLUDED_ATTRIBUTES or count != last_offset_delta + 1 or count <= 0
            or (target is not None and attributes & COMPRESSION_MASK != target)
            or size > config.max_message_bytes or config.log_append_time or "compact" in config.cleanup_policy):
        return None
    earliest = now_ms - config.message_timestamp_before_max_ms
    latest = now_ms + config.message_timestamp_after_max_ms
    if not (earliest <= max_ts <= latest and (base_ts < 0 or earliest <= base_ts <= latest)):
        return None
    view = memoryview(records)
    if crc32c(view[ATTRIBUTES_OFFSET:]) != crc:
        return None
    epoch = leader_epoch if leader_epoch >= 0 else _epoch
    if isinstance(records, bytearray):
        _OFFSET_AND_LENGTH_AND_EPOCH.pack_into(records, 0, next_offset, length, epoch)
        chunks: list[bytes | bytearray | memoryview] = [records]
    else:
        head = bytearray(view[:RECORD_BATCH_OVERHEAD])
        _OFFSET_AND_LENGTH_AND_EPOCH.pack_into(head, 0, next_offset, length, epoch)
        chunks = [head, view[RECORD_BATCH_OVERHEAD:]]
    last_offset = next_offset + last_offset_delta
    header = BatchHeader(next_offset, length, epoch, magic, crc, attributes, last_offset_delta, base_ts, max_ts,
                         producer_id, producer_epoch, base_sequence, count)
    return LogAppendInfo(next_offset, last_offset, max_ts, last_offset, -1, -1, size, [(0, header)], chunks)


def header_append_info(records: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]],
                       size: int) -> LogAppendInfo:
    """Summary of batches whose offsets are already assigned (replication, recovery)."""
    info = LogAppendInfo(first_offset=batches[0][1].base_offset, last_offset=batches[-1][1].last_offset,
                         valid_bytes=size, batches=list(batches), chunks=[records])
    for _, header in batches:
        if header.max_timestamp > info.max_timestamp:
            info.max_timestamp = header.max_timestamp
            info.offset_of_max_timestamp = header.last_offset
    return info
