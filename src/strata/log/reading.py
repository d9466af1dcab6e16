"""Reading a partition's records back inside the broker (internal topics replayed at startup).

Client fetches never decode records; the internal topics (``__consumer_offsets``,
``__remote_log_metadata``) are the exception: their owners replay every record into memory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import NamedTuple

from strata.errors import CorruptRecordError
from strata.log.partition_log import FetchIsolation, PartitionLog
from strata.protocol.records import DecodedBatch, decode_batch, iter_batches

log = logging.getLogger(__name__)

READ_BYTES = 8 * 1024 * 1024


class LogRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None


def iter_log_batches(plog: PartitionLog, start: int, end: int | None = None) -> Iterator[DecodedBatch]:
    """The decoded batches (control batches included) overlapping ``[start, end)`` (end: the log end).

    A corrupt batch stops the iteration with an error logged: recovery has already cut torn tails,
    so what remains is damage that replaying past would turn into silently wrong state.
    """
    offset = max(start, plog.log_start_offset)
    end = plog.log_end_offset if end is None else end
    while offset < end:
        data = plog.read(offset, READ_BYTES, FetchIsolation.LOG_END, min_one_message=True)
        buf = data.records.read() if data.records is not None else b""
        if not buf:
            return
        next_offset = offset
        try:
            for position, header in iter_batches(buf):
                if header.next_offset <= offset:
                    continue
                if header.base_offset >= end:
                    return
                next_offset = header.next_offset
                yield decode_batch(buf, position)
        except CorruptRecordError as e:
            log.error("stopped reading %s at offset %d: %s", plog.topic_partition, next_offset, e)
            return
        if next_offset <= offset:
            return
        offset = next_offset


def iter_log_records(plog: PartitionLog, start: int, end: int | None = None) -> Iterator[LogRecord]:
    """Data records (control batches skipped) with ``start <= offset < end`` (end: the log end)."""
    lower = max(start, plog.log_start_offset)
    end = plog.log_end_offset if end is None else end
    for batch in iter_log_batches(plog, lower, end):
        if batch.header.is_control:
            continue
        for record in batch.records:
            if lower <= record.offset < end:
                yield LogRecord(record.offset, record.key, record.value)
