"""Produce-time validation and offset assignment, header-only (Kafka's LogValidator, trimmed).

What is checked without decoding records: framing and magic, CRC-32C, batch size against
``max.message.bytes``, Kafka's client rules (base offset 0, no control batches, a producer id on
transactional batches, a sane record count), and the timestamp window on the batch's
``max_timestamp`` and ``base_timestamp``. Offsets and the leader epoch are then patched in place;
with ``LogAppendTime`` the max timestamp is stamped and the CRC re-sealed. Records are never
re-encoded: a CRC-valid batch from a client is stored as sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.config import LogConfig
from strata.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import (
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    TimestampType,
    ensure_valid,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)


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
    duplicate: bool = False

    @property
    def num_messages(self) -> int:
        return self.last_offset - self.first_offset + 1 if self.first_offset >= 0 else 0


def analyze_and_validate(records: bytes | bytearray | memoryview, config: LogConfig,
                         origin: AppendOrigin, now_ms: int) -> list[tuple[int, BatchHeader]]:
    """Parse every batch header and check it; raises a KafkaError for the first bad batch."""
    batches = []
    for position, header in iter_batches(records):
        if header.size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}"
            )
        ensure_valid(records, position, header)
        if origin is AppendOrigin.CLIENT:
            _validate_client_batch(header)
        if header.timestamp_type is TimestampType.CREATE_TIME and not config.log_append_time:
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


def assign_offsets(records: bytearray, batches: list[tuple[int, BatchHeader]], next_offset: int,
                   leader_epoch: int, config: LogConfig, now_ms: int) -> LogAppendInfo:
    """Patch base offsets (and epoch, and LogAppendTime) in place; returns the append summary.

    ``batches`` is replaced with headers that carry the assigned offsets, so later steps
    (indexes, producer state) see what is on disk.
    """
    info = LogAppendInfo(first_offset=next_offset)
    stamped = []
    for position, header in batches:
        set_base_offset(records, position, next_offset)
        if leader_epoch >= 0:
            set_partition_leader_epoch(records, position, leader_epoch)
        max_ts = header.max_timestamp
        attributes = header.attributes
        if config.log_append_time:
            set_log_append_time(records, position, header.size, now_ms)
            max_ts = now_ms
            attributes |= TIMESTAMP_TYPE_MASK
            info.log_append_time = now_ms
        new_header = header._replace(
            base_offset=next_offset,
            partition_leader_epoch=leader_epoch if leader_epoch >= 0 else header.partition_leader_epoch,
            max_timestamp=max_ts,
            attributes=attributes,
        )
        stamped.append((position, new_header))
        if max_ts > info.max_timestamp:
            info.max_timestamp = max_ts
            info.offset_of_max_timestamp = new_header.last_offset
        next_offset = new_header.next_offset
    info.last_offset = next_offset - 1
    info.valid_bytes = len(records)
    info.batches = stamped
    return info


def header_append_info(batches: list[tuple[int, BatchHeader]], size: int) -> LogAppendInfo:
    """Summary of batches whose offsets are already assigned (replication, recovery)."""
    info = LogAppendInfo(first_offset=batches[0][1].base_offset, last_offset=batches[-1][1].last_offset,
                         valid_bytes=size, batches=list(batches))
    for _, header in batches:
        if header.max_timestamp > info.max_timestamp:
            info.max_timestamp = header.max_timestamp
            info.offset_of_max_timestamp = header.last_offset
    return info
