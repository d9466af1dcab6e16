"""The active file: produce requests buffered for the next WAL object, and the object they close into.

Requests are kept whole and uncopied (references to the callers' buffers) until the file closes; then
the entries are ordered by partition and their bytes joined once into the object. Batches of one
entry are contiguous in the caller's buffer and always share a partition, so a stable sort of
*entries* by ``(topic_id, partition)`` lays the batches out exactly as Inkless's stable sort of
batches does (one partition's batches adjacent, in arrival order), which lets the coordinator
coalesce them into few rows and a fetch read them with one range.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from strata.diskless.coordinator.api import (
    CommitBatchRequest,
    CommitBatchResponse,
    CommitFileRequest,
    ControlRecordType,
    TimestampType,
)
from strata.diskless.writer.model import WriteEntry, WriteResult, aggregate
from strata.errors import CorruptRecordError, ErrorCode
from strata.protocol.records.batch import BatchHeader
from strata.protocol.records.record import ControlRecord, decode_batch

_Control = tuple[ControlRecordType, int]  # marker type, transaction coordinator epoch


def _control_info(entry: WriteEntry, position: int, header: BatchHeader) -> _Control:
    """The marker of a control batch: the coordinator needs its type and coordinator epoch."""
    decoded = decode_batch(entry.records, position, verify_crc=False)
    control: ControlRecord | None = decoded.control_record
    if control is None:
        raise CorruptRecordError(f"control batch of {entry.topic_name}-{entry.partition} has no record", position)
    return ControlRecordType(int(control.type)), control.coordinator_epoch


class PendingRequest:
    """One ``write()`` call's non-empty entries and the future its caller awaits.

    Control batches are decoded here, when the request arrives, so a malformed marker fails its own
    request instead of the object it would have joined.
    """

    __slots__ = ("controls", "entries", "future", "size")

    def __init__(self, entries: Sequence[WriteEntry], future: asyncio.Future[list[WriteResult]]) -> None:
        self.entries = list(entries)
        self.future = future
        self.size = sum(e.size for e in self.entries)
        self.controls: dict[tuple[int, int], _Control] = {
            (i, position): _control_info(entry, position, header)
            for i, entry in enumerate(self.entries)
            for position, header in entry.batches
            if header.is_control
        }

    def answer(self, results: list[WriteResult]) -> None:
        if not self.future.done():
            self.future.set_result(results)

    def fail(self, error: ErrorCode, message: str) -> None:
        self.answer([WriteResult(error, error_message=message)] * len(self.entries))


def _batch_request(entry: WriteEntry, header: BatchHeader, byte_offset: int,
                   control: _Control | None) -> CommitBatchRequest:
    return CommitBatchRequest(
        topic_id=entry.topic_id,
        topic_name=entry.topic_name,
        partition=entry.partition,
        byte_offset=byte_offset,
        byte_size=header.size,
        base_offset=header.base_offset,
        last_offset=header.base_offset + header.last_offset_delta,
        batch_max_timestamp=header.max_timestamp,
        timestamp_type=TimestampType(int(header.timestamp_type)),
        magic=header.magic,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        last_sequence=header.last_sequence,
        is_transactional=header.is_transactional,
        is_control=control is not None,
        control_type=None if control is None else control[0],
        coordinator_epoch=-1 if control is None else control[1],
    )


@dataclass(slots=True)
class _Placement:
    """Where one entry's batches sit in the commit request: ``batches[first : first + count]``."""

    request: PendingRequest
    entry_index: int
    first: int
    count: int


class ClosedFile:
    """A rotated active file: the object's bytes and commit request, and whom to answer.

    ``data`` is dropped once uploaded, so an object waiting for its turn to commit holds no payload.
    """

    __slots__ = ("commit_request", "data", "object_key", "requests", "_placements", "seq")

    def __init__(self, seq: int, object_key: str, data: bytes, commit_request: CommitFileRequest,
                 requests: list[PendingRequest], placements: list[_Placement]) -> None:
        self.seq = seq
        self.object_key = object_key
        self.data = data
        self.commit_request = commit_request
        self.requests = requests
        self._placements = placements

    @property
    def size(self) -> int:
        return self.commit_request.file_size

    def answer(self, responses: Sequence[CommitBatchResponse]) -> None:
        """Answer every request from the coordinator's per-batch responses (in commit-request order)."""
        per_request: dict[int, list[WriteResult | None]] = {id(r): [None] * len(r.entries) for r in self.requests}
        for p in self._placements:
            entry = p.request.entries[p.entry_index]
            per_request[id(p.request)][p.entry_index] = aggregate(entry, responses[p.first : p.first + p.count])
        for request in self.requests:
            results = per_request[id(request)]
            request.answer([r if r is not None else WriteResult(ErrorCode.UNKNOWN_SERVER_ERROR) for r in results])

    def fail(self, error: ErrorCode, message: str) -> None:
        """Answer every request not answered yet with ``error`` (every partition of every request)."""
        for request in self.requests:
            request.fail(error, message)


class ActiveFile:
    """The buffer requests join until rotation. ``size`` counts the object bytes the entries will take."""

    __slots__ = ("file_id", "requests", "size")

    def __init__(self, file_id: int) -> None:
        self.file_id = file_id
        self.requests: list[PendingRequest] = []
        self.size = 0

    @property
    def empty(self) -> bool:
        return not self.requests

    def add(self, request: PendingRequest) -> None:
        self.requests.append(request)
        self.size += request.size

    def close(self, object_key: str, uploader_broker_id: int) -> ClosedFile:
        """Lay the object out (entries stably sorted by partition) and build its commit request."""
        order = sorted(
            ((request, i) for request in self.requests for i in range(len(request.entries))),
            key=lambda item: (item[0].entries[item[1]].topic_id, item[0].entries[item[1]].partition),
        )
        parts: list[bytes | bytearray | memoryview] = []
        batches: list[CommitBatchRequest] = []
        placements: list[_Placement] = []
        offset = 0
        for request, i in order:
            entry = request.entries[i]
            start, end = entry.start, entry.end
            if start == 0 and end == len(entry.records):
                parts.append(entry.records)
            else:
                parts.append(memoryview(entry.records)[start:end])
            placements.append(_Placement(request, i, len(batches), len(entry.batches)))
            for position, header in entry.batches:
                control = request.controls.get((i, position)) if header.is_control else None
                batches.append(_batch_request(entry, header, offset + position - start, control))
            offset += end - start
        data = b"".join(parts)
        commit_request = CommitFileRequest(object_key, uploader_broker_id, len(data), tuple(batches))
        return ClosedFile(self.file_id, object_key, data, commit_request, self.requests, placements)
