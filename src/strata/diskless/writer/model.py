"""What goes into the writer (``WriteEntry``) and what comes out (``WriteResult``), plus the ports it calls.

A produce request reaches the writer already validated, one :class:`WriteEntry` per diskless partition,
with its batch headers parsed once by the validator. The writer answers one :class:`WriteResult` per
entry: Kafka answers a partition with one error code and one base offset, however many batches the
partition's record set held, so the coordinator's per-batch answers are folded into one here.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from strata.diskless.coordinator.api import (
    NO_OFFSET,
    NO_TIMESTAMP,
    CommitBatchResponse,
    CommitFileRequest,
)
from strata.errors import ErrorCode, KafkaError
from strata.protocol.records.batch import BatchHeader, TimestampType, iter_batches

CommitFn = Callable[[CommitFileRequest], Awaitable[list[CommitBatchResponse]]]
"""Commit an uploaded object; answers one response per batch of the request, in order. The broker plugs
in the coordinator (a thread hop for SQLite, a round trip for a remote one). Raising means the outcome
is unknown, except :class:`~strata.diskless.coordinator.api.InvalidCommitError`, which means nothing
was applied."""

SafeDeleteFn = Callable[[str], Awaitable[bool]]
"""Whether an object whose commit failed may be deleted: true only if the coordinator is sure the key
is not committed (Inkless's ``isSafeToDeleteFile``)."""


class WriterClosedError(KafkaError):
    """The writer is closed (the broker is shutting down). KAFKA_STORAGE_ERROR is retriable and makes
    clients refresh metadata, so producers move on to another broker."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


@dataclass(frozen=True, slots=True)
class WriteEntry:
    """One partition's validated record batches from one produce request.

    ``records`` holds v2 batches with relative offsets (base offset 0 for the request's first batch);
    ``batches`` are their ``(position, header)`` pairs as the validator parsed them, in byte order. The
    writer copies ``records[first batch : end of last batch]`` once, into the object, when the active
    file closes, so the caller must not modify ``records`` after handing it over.
    """

    topic_id: uuid.UUID
    topic_name: str
    partition: int
    records: bytes | bytearray | memoryview
    batches: Sequence[tuple[int, BatchHeader]]

    def __post_init__(self) -> None:
        end = 0
        for position, header in self.batches:
            if position < end:
                raise ValueError(f"batch at byte {position} of {self.topic_name}-{self.partition} overlaps the "
                                 f"previous one (which ends at {end})")
            end = position + header.size
        if end > len(self.records):
            raise ValueError(f"batches of {self.topic_name}-{self.partition} end at byte {end}, past the "
                             f"{len(self.records)} bytes of records")

    @classmethod
    def parse(cls, topic_id: uuid.UUID, topic_name: str, partition: int,
              records: bytes | bytearray | memoryview) -> WriteEntry:
        """Build an entry by parsing ``records`` (for callers and tests that have no headers at hand)."""
        return cls(topic_id, topic_name, partition, records, list(iter_batches(records)))

    @property
    def start(self) -> int:
        """Where the entry's bytes start in ``records`` (its first batch)."""
        return self.batches[0][0] if self.batches else 0

    @property
    def end(self) -> int:
        """Where the entry's bytes end in ``records`` (the end of its last batch)."""
        if not self.batches:
            return 0
        position, header = self.batches[-1]
        return position + header.size

    @property
    def size(self) -> int:
        """Bytes this entry adds to the object."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The produce-response fields of one partition.

    ``base_offset``/``last_offset`` are the absolute offsets of the entry's first and last records
    (a duplicate's are the original's); ``log_append_time`` is the commit time for LogAppendTime
    batches and -1 otherwise. ``batch_responses`` keeps the coordinator's per-batch answers (for a
    coordinate cache, say); it is empty when the object never reached the coordinator.
    """

    error: ErrorCode
    base_offset: int = NO_OFFSET
    last_offset: int = NO_OFFSET
    log_append_time: int = NO_TIMESTAMP
    log_start_offset: int = NO_OFFSET
    is_duplicate: bool = False
    error_message: str | None = None
    batch_responses: tuple[CommitBatchResponse, ...] = field(default=(), repr=False)


EMPTY_RESULT = WriteResult(ErrorCode.NONE)
"""An empty record set: Inkless answers NONE without writing anything."""


def aggregate(entry: WriteEntry, responses: Sequence[CommitBatchResponse]) -> WriteResult:
    """Fold an entry's per-batch commit answers into the partition's answer.

    The first error wins (Kafka has one error per partition). Otherwise the base offset is the first
    batch's, the last offset the last batch's end, and the entry counts as a duplicate only if every
    batch was one (a producer sends one batch per partition per request, so in practice: if it was).
    """
    log_start = max((r.log_start_offset for r in responses), default=NO_OFFSET)
    for response in responses:
        if response.error is not ErrorCode.NONE:
            return WriteResult(response.error, log_start_offset=log_start, error_message=response.error_message,
                               batch_responses=tuple(responses))
    first, last = responses[0], responses[-1]
    first_header = entry.batches[0][1]
    append_time = first.batch_timestamp if first_header.timestamp_type is TimestampType.LOG_APPEND_TIME \
        else NO_TIMESTAMP
    return WriteResult(
        ErrorCode.NONE,
        base_offset=first.assigned_base_offset,
        last_offset=last.assigned_base_offset + entry.batches[-1][1].last_offset_delta,
        log_append_time=append_time,
        log_start_offset=log_start,
        is_duplicate=all(r.is_duplicate for r in responses),
        batch_responses=tuple(responses),
    )
