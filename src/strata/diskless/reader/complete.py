"""Fetch completion: turn the bytes read from WAL objects into one partition's Fetch records.

Pure and synchronous (no I/O, no event loop), so every rule here is unit-testable on plain buffers.
Per partition, in coordinate order (Inkless's ``FetchCompleter``):

1. Copy each committed batch, or coalesced run of byte-adjacent batches, out of the object bytes.
2. Walk its physical batches: check framing and the CRC (``ensure_valid``) *before* touching anything,
   then write the absolute base offset and the partition's leader epoch (outside the CRC'd range, so no
   reseal), and for LogAppendTime batches the commit time as max timestamp (inside the CRC'd range:
   ``set_log_append_time`` sets the timestamp-type bit and the timestamp and reseals the CRC). The walk
   must end exactly at the row's ``last_offset`` and its byte end, else coordinator and object disagree.
3. Stop at the first problem and keep what came before it.

Why a problem with a prefix is answered as success: Kafka clients drop the records of a partition whose
error code is set. Answering ``CORRUPT_MESSAGE`` *with* the good prefix would throw the prefix away and
fail the consumer before records it could have read. So the prefix goes out with ``NONE``, the consumer
advances to the bad batch, and its next fetch starts there, finds nothing to serve, and gets the error.
That is what a consumer of a classic log sees too (records up to the corruption, then the error).
``PartitionRead.stop_error`` keeps the reason for logs and metrics.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strata.diskless.coordinator.api import AbortedTxn, BatchInfo, FindBatchResponse, TimestampType
from strata.errors import CorruptRecordError, ErrorCode, UnsupportedForMessageFormatError
from strata.protocol.records.batch import (
    ensure_valid,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

DISKLESS_LEADER_EPOCH = 0
"""The leader epoch of every batch of a partition diskless since its creation: it has no leader, so one epoch
covers its whole diskless life, as in Inkless. A switched partition's is the classic leader epoch at its seal
(``FindBatchResponse.leader_epoch``), above its classic epochs. OffsetForLeaderEpoch answers it with the
coordinator's high watermark."""

Buffer = bytes | memoryview


class ObjectBytes:
    """What one fetch read of one object: pieces ``(object position, bytes)``, plus the read error, if
    any, that left the rest unread. Hot reads give one piece per cache block, lagging reads one piece."""

    def __init__(self, pieces: Iterable[tuple[int, Buffer]], error: BaseException | None = None) -> None:
        ordered = sorted(((start, data) for start, data in pieces if len(data)), key=lambda p: p[0])
        self._starts = [start for start, _ in ordered]
        self._pieces = [data for _, data in ordered]
        self.error = error

    @classmethod
    def failed(cls, error: BaseException) -> ObjectBytes:
        return cls((), error)

    def view(self, start: int, end: int) -> Buffer | None:
        """Bytes ``[start, end)`` of the object, or None unless all of them were read. Within one piece
        this is a view (no copy); across pieces (a batch straddling two cache blocks) a join."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return None
        piece_start, data = self._starts[i], self._pieces[i]
        if start >= piece_start + len(data):
            return None
        if end <= piece_start + len(data):
            return memoryview(data)[start - piece_start:end - piece_start]
        parts: list[Buffer] = [memoryview(data)[start - piece_start:]]
        covered = piece_start + len(data)
        for j in range(i + 1, len(self._pieces)):
            if self._starts[j] != covered:
                return None
            nxt = self._pieces[j]
            take = min(end - covered, len(nxt))
            parts.append(memoryview(nxt)[:take])
            covered += take
            if covered >= end:
                return b"".join(parts)
        return None


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """One partition's Fetch answer.

    ``error`` is what goes on the wire; ``records`` are whole v2 batches with absolute offsets, ready
    to send. ``stop_error``/``message`` say why the records end before the coordinator's answer did
    (NONE when everything was served); with a non-empty prefix ``error`` is NONE (see the module doc).
    """

    topic_id: uuid.UUID
    partition: int
    error: ErrorCode
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTxn, ...] = ()
    stop_error: ErrorCode = ErrorCode.NONE
    message: str | None = None


class _Stop(Exception):  # noqa: N818 - control flow inside this module, never escapes
    def __init__(self, keep: int, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.keep = keep
        self.error = error
        self.message = message


def complete_partition(resp: FindBatchResponse, objects: Mapping[str, ObjectBytes]) -> PartitionRead:
    """Assemble one partition's records from the objects read for this fetch (see the module doc)."""
    if resp.error != ErrorCode.NONE:
        return PartitionRead(resp.topic_id, resp.partition, ErrorCode(resp.error), b"", resp.high_watermark,
                             resp.last_stable_offset, resp.log_start_offset, resp.aborted_transactions)
    out = bytearray()
    stop, message = ErrorCode.NONE, None
    for info in resp.batches:
        try:
            _append(out, info, objects.get(info.object_key), resp.leader_epoch)
        except _Stop as s:
            del out[s.keep:]
            stop, message = s.error, s.message
            break
    error = stop if stop != ErrorCode.NONE and not out else ErrorCode.NONE
    return PartitionRead(resp.topic_id, resp.partition, error, bytes(out), resp.high_watermark,
                         resp.last_stable_offset, resp.log_start_offset, resp.aborted_transactions, stop, message)


def _append(out: bytearray, info: BatchInfo, source: ObjectBytes | None, leader_epoch: int) -> None:
    """Copy one coordinator row's bytes onto ``out`` and make them servable, or raise :class:`_Stop`."""
    start = len(out)
    where = f"object {info.object_key} bytes [{info.byte_offset}, {info.byte_offset + info.byte_size})"
    data = None if source is None else source.view(info.byte_offset, info.byte_offset + info.byte_size)
    if data is None:
        cause = source.error if source is not None and source.error is not None else "object shorter or not read"
        raise _Stop(start, ErrorCode.KAFKA_STORAGE_ERROR, f"{where} unavailable: {cause}")
    out += data
    end = len(out)  # parse_header's whole-batch check now stops a batch at the row's end
    position, next_offset = start, info.base_offset
    log_append_time = info.timestamp_type == TimestampType.LOG_APPEND_TIME
    while position < end:
        try:
            header = parse_header(out, position)
            ensure_valid(out, position, header)
        except (CorruptRecordError, UnsupportedForMessageFormatError) as e:
            raise _Stop(position, ErrorCode.CORRUPT_MESSAGE, f"{where} at offset {next_offset}: {e}") from None
        set_base_offset(out, position, next_offset)
        set_partition_leader_epoch(out, position, leader_epoch)
        if log_append_time:
            set_log_append_time(out, position, header.size, info.log_append_timestamp)
        next_offset += header.last_offset_delta + 1
        position += header.size
    if next_offset - 1 != info.last_offset:
        raise _Stop(start, ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"{where}: the batches end at offset {next_offset - 1}, the coordinator says {info.last_offset}")
