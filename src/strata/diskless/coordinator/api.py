"""The pluggable diskless coordinator (``ControlPlane``): its commands, queries and answers.

The shape follows Aiven Inkless's control plane and KIP-1164's coordinator interface, so the names of
operations and fields are the ones readers of those sources know (``commit_file``, ``find_batches``,
``high_watermark``...). Two things are Strata's own:

* **Every mutating command carries ``now_ms``**, the committing broker's clock. The topic-based
  coordinator replays the same commands on every replica of ``__diskless_metadata``; reading the
  local clock during replay would give each replica a different ``committed_at`` or log append time.
  Implementations must never read the wall clock.
* **Transactions.** Inkless rejects transactional produce. Here the coordinator keeps what Kafka's
  partition leader keeps: the ongoing transactions (producer id -> first offset), the last stable
  offset and the aborted-transaction list that read_committed fetches need. COMMIT/ABORT markers are
  committed like any batch, as control batches in a WAL object.

Per-partition failures come back as an ``ErrorCode`` in the answer (one answer per request entry, in
request order); only a malformed command raises (:class:`InvalidCommitError`), and then it changes
nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import NamedTuple, Protocol

from strata.errors import ErrorCode, KafkaError

# ListOffsets special timestamps (Kafka's ``ListOffsetsRequest``).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

NO_OFFSET = -1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

FILE_FORMAT_WRITE_AHEAD_MULTI_SEGMENT = 1  # a bare concatenation of v2 record batches


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The key of a control record (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1


class IsolationLevel(IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class FileState(StrEnum):
    UPLOADED = "uploaded"
    DELETING = "deleting"  # no batch refers to it any more; the cleaner deletes it after a grace period


class FileReason(StrEnum):
    PRODUCE = "produce"


class TopicIdPartition(NamedTuple):
    topic_id: uuid.UUID
    partition: int


class InvalidCommitError(KafkaError):
    """A commit the coordinator refuses as a whole (a zero-size batch, a range outside the object).

    The broker built it wrongly, so no part of it is applied; replaying it fails the same way.
    """

    error_code = ErrorCode.INVALID_REQUEST


class FileAlreadyCommittedError(InvalidCommitError):
    """The object key is committed already. A retried commit must upload a new object: committing
    the same key twice is not idempotence, the producer's sequence numbers are."""


# -- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    """Create partitions ``0 .. num_partitions-1`` of a topic; existing ones are left alone."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class CommitBatchRequest:
    """One record batch inside a WAL object, as the uploading broker validated it.

    ``base_offset``/``last_offset`` are relative (the broker writes batches with base offset 0), so
    ``last_offset - base_offset + 1`` is the number of offsets the batch takes. Control batches
    (``is_control``) carry their marker type and the transaction coordinator's epoch.
    """

    topic_id: uuid.UUID
    topic_name: str
    partition: int
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    batch_max_timestamp: int
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    magic: int = 2
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    last_sequence: int = NO_SEQUENCE
    is_transactional: bool = False
    is_control: bool = False
    control_type: ControlRecordType | None = None
    coordinator_epoch: int = -1

    def __post_init__(self) -> None:
        if self.is_control != (self.control_type is not None):
            raise ValueError("a control batch needs its marker type, and only a control batch has one")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.partition)

    @property
    def record_count(self) -> int:
        return self.last_offset - self.base_offset + 1

    @property
    def has_producer(self) -> bool:
        """Idempotence applies only with both a producer id and an epoch (Inkless's rule)."""
        return self.producer_id > NO_PRODUCER_ID and self.producer_epoch > NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class CommitFileRequest:
    """A WAL object the broker uploaded: every batch in it, in the object's byte order."""

    object_key: str
    uploader_broker_id: int
    file_size: int
    batches: tuple[CommitBatchRequest, ...]
    format: int = FILE_FORMAT_WRITE_AHEAD_MULTI_SEGMENT


@dataclass(frozen=True, slots=True)
class CommitBatchResponse:
    """The answer for one batch. ``batch_timestamp`` is the batch's effective timestamp (the commit
    time for LogAppendTime batches); a duplicate gets the original's offset and timestamp."""

    error: ErrorCode
    assigned_base_offset: int = NO_OFFSET
    batch_timestamp: int = NO_TIMESTAMP
    log_start_offset: int = NO_OFFSET
    is_duplicate: bool = False
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FindBatchRequest:
    topic_id: uuid.UUID
    partition: int
    offset: int
    max_partition_fetch_bytes: int


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """Where a committed batch (or a coalesced run of byte-adjacent batches) lives, with its absolute
    offsets. The reader injects ``base_offset`` into the batch headers it copies out."""

    batch_id: int
    object_key: str
    topic_id: uuid.UUID
    partition: int
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    magic: int
    timestamp_type: TimestampType
    log_append_timestamp: int
    batch_max_timestamp: int

    @property
    def effective_timestamp(self) -> int:
        return effective_timestamp(self.timestamp_type, self.log_append_timestamp, self.batch_max_timestamp)


class AbortedTxn(NamedTuple):
    """An aborted transaction: its first data offset and the offset of its ABORT marker."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class FindBatchResponse:
    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    batches: tuple[BatchInfo, ...] = ()
    log_start_offset: int = NO_OFFSET
    high_watermark: int = NO_OFFSET
    last_stable_offset: int = NO_OFFSET
    aborted_transactions: tuple[AbortedTxn, ...] = ()
    leader_epoch: int = 0  # stamped on the batches served


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    topic_id: uuid.UUID
    partition: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    timestamp: int = NO_TIMESTAMP
    offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    """Move the log start to ``offset`` (-1 = the high watermark)."""

    topic_id: uuid.UUID
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    log_start_offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True)
class EnforceRetentionRequest:
    """Size and time retention of one partition; -1 switches either off."""

    topic_id: uuid.UUID
    partition: int
    retention_bytes: int
    retention_ms: int


@dataclass(frozen=True, slots=True)
class EnforceRetentionResponse:
    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    batches_deleted: int = 0
    bytes_deleted: int = 0
    log_start_offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True)
class FileToDelete:
    object_key: str
    marked_for_deletion_at: int


@dataclass(frozen=True, slots=True)
class LogInfo:
    """One partition's metadata (``last_stable_offset`` is derived from its ongoing transactions)."""

    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    topic_name: str = ""
    log_start_offset: int = NO_OFFSET
    high_watermark: int = NO_OFFSET
    last_stable_offset: int = NO_OFFSET
    byte_size: int = 0
    remote_log_start_offset: int | None = None
    earliest_batch_timestamp: int | None = None
    diskless_start_offset: int = 0  # the seal of a switched partition (0: diskless since its creation)
    leader_epoch: int = 0  # the epoch of every diskless batch it serves (a switched partition's: the seal's)


@dataclass(frozen=True, slots=True)
class InitProducer:
    """A classic partition's producer at the seal: its epochs, the last batches of its idempotence window
    (``(base_sequence, last_sequence, base_offset, timestamp)``, oldest first) and the first offset of its
    open transaction, if any."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    batches: tuple[tuple[int, int, int, int], ...] = ()
    txn_first_offset: int | None = None


@dataclass(frozen=True, slots=True)
class InitDisklessLogRequest:
    """A classic partition switched to diskless (KIP-1150's seal): its diskless log starts at ``seal_offset``
    (the classic log's end, every in-sync replica caught up), the partition itself at ``log_start_offset``
    (the classic part, tiered); its producers carry on (sequences, epochs, an open transaction); and every
    diskless batch carries ``leader_epoch`` (the classic epochs stay below it, so consumers validating their
    position never see a truncation). A partition already initialized is left alone (``created`` False)."""

    topic_id: uuid.UUID
    topic_name: str
    partition: int
    seal_offset: int
    log_start_offset: int
    leader_epoch: int
    producers: tuple[InitProducer, ...] = ()


@dataclass(frozen=True, slots=True)
class InitDisklessLogResponse:
    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    created: bool = False


@dataclass(frozen=True, slots=True)
class PruneBatchesRequest:
    """Drop WAL batches already in tiered storage: every batch with ``last_offset <= highest_tiered_offset``."""

    topic_id: uuid.UUID
    partition: int
    highest_tiered_offset: int


@dataclass(frozen=True, slots=True)
class PruneBatchesResponse:
    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    batches_deleted: int = 0
    log_start_offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True)
class AdvanceLogStartRequest:
    """Report the cross-tier earliest offset (the tiering leader's remote log start)."""

    topic_id: uuid.UUID
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class AdvanceLogStartResponse:
    error: ErrorCode
    topic_id: uuid.UUID
    partition: int
    remote_log_start_offset: int | None = None


def effective_timestamp(timestamp_type: int, log_append_timestamp: int, batch_max_timestamp: int) -> int:
    """The timestamp ListOffsets and retention see: the commit time for LogAppendTime batches."""
    return log_append_timestamp if timestamp_type == TimestampType.LOG_APPEND_TIME else batch_max_timestamp


# -- the interface -----------------------------------------------------------------------------


class ControlPlane(Protocol):
    """The diskless coordinator. Answers come one per request entry, in request order."""

    def create_partitions(self, requests: Sequence[CreatePartitionsRequest], *, now_ms: int) -> None:
        """Create empty logs (0/0/0); idempotent, so the controller may retry it."""

    def commit_file(self, request: CommitFileRequest, *, now_ms: int) -> list[CommitBatchResponse]:
        """Register an uploaded WAL object and assign offsets to its batches, in order.

        Raises :class:`InvalidCommitError` (and changes nothing) for a malformed commit.
        """
        ...

    def find_batches(
        self,
        requests: Sequence[FindBatchRequest],
        *,
        fetch_max_bytes: int,
        max_batches_per_partition: int = 0,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> list[FindBatchResponse]:
        """The batches holding each partition's offsets from ``offset``, within the byte budgets.

        read_committed answers stop at the last stable offset and list the aborted transactions
        that overlap the answered range.
        """
        ...

    def list_offsets(
        self,
        requests: Sequence[ListOffsetsRequest],
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> list[ListOffsetsResponse]: ...

    def delete_records(self, requests: Sequence[DeleteRecordsRequest], *, now_ms: int) -> list[DeleteRecordsResponse]:
        ...

    def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], *, now_ms: int, max_batches_per_partition: int = 0
    ) -> list[EnforceRetentionResponse]:
        """Apply size/time retention, deleting at most ``max_batches_per_partition`` rows (0 = all)."""
        ...

    def delete_topic(self, topic_id: uuid.UUID, *, now_ms: int) -> None:
        """Forget a topic's logs, batches and producer state; idempotent."""

    def files_to_delete(self, *, now_ms: int, grace_period_ms: int, max_files: int = 20_000) -> list[FileToDelete]:
        """Files marked ``deleting`` at least ``grace_period_ms`` ago (the grace protects in-flight reads)."""
        ...

    def delete_files(self, object_keys: Sequence[str], *, now_ms: int) -> None:
        """Forget files the object store *confirmed* deleted; keys not in state ``deleting`` are ignored."""

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        """Whether a failed commit's object may be deleted: true unless the key is committed."""
        ...

    def get_logs(self, partitions: Sequence[TopicIdPartition]) -> list[LogInfo]: ...

    def init_diskless_log(
        self, requests: Sequence[InitDisklessLogRequest], *, now_ms: int
    ) -> list[InitDisklessLogResponse]:
        """Create switched partitions at their seal (see :class:`InitDisklessLogRequest`)."""
        ...

    def prune_batches_below_highest_tiered_offset(
        self, requests: Sequence[PruneBatchesRequest], *, now_ms: int
    ) -> list[PruneBatchesResponse]: ...

    def advance_cross_tier_log_start(
        self, requests: Sequence[AdvanceLogStartRequest], *, now_ms: int
    ) -> list[AdvanceLogStartResponse]:
        """Raise ``remote_log_start_offset`` (never lowers it)."""
        ...
