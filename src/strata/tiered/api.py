"""The KIP-405 plugin API: ``RemoteStorageManager``, ``RemoteLogMetadataManager`` and their data.

Names and contracts follow Kafka's ``org.apache.kafka.server.log.remote.storage`` package so a
reader can cross-reference it method by method (Java camelCase becomes snake_case). Both plugins
are synchronous: the RemoteLogManager calls them from worker threads, never from the broker's
event loop, so a plugin may block on I/O freely but must be thread-safe.

Plugins are loaded by dotted path (``remote.log.storage.manager.class.name``) and configured with
the broker properties under their prefix (``rsm.config.`` / ``rlmm.config.``), prefix removed,
plus ``broker.id`` - exactly what Kafka passes to ``configure``.
"""

from __future__ import annotations

import base64
import importlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol, runtime_checkable

# -- errors ------------------------------------------------------------------------------------


class RemoteStorageError(Exception):
    """Kafka's ``RemoteStorageException``: a plugin operation failed."""


class RetriableRemoteStorageError(RemoteStorageError):
    """Transient (store unreachable, throttled): retry later, skip the dangling-segment cleanup."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The segment, index or partition is not there (a missing transaction index is normal)."""


class RemoteStorageNotReadyError(RetriableRemoteStorageError):
    """The metadata of a partition is still loading (Kafka answers REPLICA_NOT_AVAILABLE)."""


# -- identities --------------------------------------------------------------------------------


def uuid_to_str(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


class TopicIdPartition(NamedTuple):
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{uuid_to_str(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """A segment *upload attempt*: a new random id for every copy, even of the same local segment."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate_new(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp, uuid.uuid4())

    def __str__(self) -> str:
        return f"{self.topic_id_partition}/{uuid_to_str(self.id)}"


class RemoteLogSegmentState(IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @staticmethod
    def is_valid_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
        """Kafka's rule: forward only, self-transitions allowed (retries are idempotent)."""
        S = RemoteLogSegmentState
        if src is None:
            return dst is S.COPY_SEGMENT_STARTED
        if src is dst:
            return True
        return dst in _NEXT_SEGMENT_STATES[src]


_NEXT_SEGMENT_STATES = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


class RemotePartitionDeleteState(IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @staticmethod
    def is_valid_transition(src: RemotePartitionDeleteState | None, dst: RemotePartitionDeleteState) -> bool:
        if src is None:
            return dst is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        return dst == src or dst == src + 1


# -- metadata records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One uploaded (or being uploaded/deleted) segment.

    ``end_offset`` is inclusive and comes from the *next* local segment's base offset minus one,
    so offset gaps (aborted transactions, compaction) belong to exactly one remote segment.
    ``segment_leader_epochs`` maps epoch -> first offset of that epoch within the segment.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_idx_empty: bool = False

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start_offset must be >= 0, got {self.start_offset}")
        if self.end_offset < self.start_offset:
            raise ValueError(f"end_offset {self.end_offset} is below start_offset {self.start_offset}")
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs must not be empty")
        object.__setattr__(self, "segment_leader_epochs", dict(sorted(self.segment_leader_epochs.items())))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(f"update for {update.remote_log_segment_id} applied to {self.remote_log_segment_id}")
        return replace(self, broker_id=update.broker_id, event_timestamp_ms=update.event_timestamp_ms,
                       custom_metadata=update.custom_metadata, state=update.state)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


RemoteLogMetadata = RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What ``copy_log_segment_data`` uploads. The leader-epoch index is in memory: the
    ``leader-epoch-checkpoint`` text of every epoch from the log start to the segment's end."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes = field(repr=False)


class IndexType(IntEnum):
    OFFSET = 0
    TIMESTAMP = 1
    PRODUCER_SNAPSHOT = 2
    TRANSACTION = 3
    LEADER_EPOCH = 4


# -- plugin interfaces ---------------------------------------------------------------------------


class RemoteStorageManager(ABC):
    """Stores segment data. May be eventually consistent; the RLMM is the source of truth."""

    def configure(self, configs: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Receives the ``rsm.config.*`` props (prefix removed) plus ``broker.id``."""

    @abstractmethod
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Upload the segment and its indexes; overwrite what exists. Returns optional custom metadata."""

    @abstractmethod
    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        """A stream of the segment bytes from ``start_position`` to ``end_position`` (inclusive) or the end."""

    @abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """The raw bytes of one index; a missing transaction index raises RemoteResourceNotFoundError."""

    @abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete everything of this segment id; deleting what is already gone is not an error."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object of a listing: its key (relative to the store's prefix), size and last-modified time."""

    key: str
    size: int
    last_modified_ms: int


@runtime_checkable
class ObjectStore(Protocol):
    """Plain objects beside the segments (diskless WAL objects, coordinator snapshots).

    The segment API above names objects by segment id; a WAL object holds batches of many partitions and
    is named by a key of its own, so the remote stores offer this second, smaller face on the same bucket
    or directory (and the same credentials, prefix and fault injection). Keys are relative to the store's
    configured prefix and use ``/`` as separator. Every call blocks: call it from a worker thread.
    Errors are the segment API's: a missing object is :class:`RemoteResourceNotFoundError`, a transient
    failure :class:`RetriableRemoteStorageError`, anything else :class:`RemoteStorageError`.
    """

    def put_object(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Write the whole object, durably, replacing any object of that key (no partial object is ever
        visible under ``key``)."""

    def get_object_range(self, key: str, start: int, end: int) -> bytes | memoryview:
        """Bytes ``[start, end)`` of the object (fewer only when the object is shorter)."""
        ...

    def delete_objects(self, keys: Sequence[str]) -> None:
        """Delete the objects; a key already gone is not an error."""

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in no particular order."""
        ...


class RemoteLogMetadataManager(ABC):
    """Strongly consistent store of segment metadata: a write is visible to reads once it returns."""

    def configure(self, configs: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Receives the ``rlmm.config.*`` props (prefix removed) plus ``broker.id`` and ``log.dir``."""

    @abstractmethod
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a new upload; the state must be COPY_SEGMENT_STARTED (else ValueError)."""

    @abstractmethod
    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a segment forward; the state must not be COPY_SEGMENT_STARTED (else ValueError)."""

    @abstractmethod
    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None: ...

    @abstractmethod
    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` within leader epoch ``epoch_for_offset``."""

    @abstractmethod
    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        """Highest offset copied (COPY_SEGMENT_FINISHED) for that epoch."""

    @abstractmethod
    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment not DELETE_SEGMENT_FINISHED; with an epoch, those holding it, by start offset."""

    @abstractmethod
    def on_partition_leadership_changes(self, leaders: set[TopicIdPartition],
                                        followers: set[TopicIdPartition]) -> None: ...

    @abstractmethod
    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None: ...

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        """KIP-852: bytes of the segments holding ``leader_epoch`` (any state but DELETE_FINISHED)."""
        return sum(md.segment_size_in_bytes for md in self.list_remote_log_segments(tp, leader_epoch))

    def next_segment_with_txn_index(self, tp: TopicIdPartition, epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """KIP-1058: the first segment at or after ``offset`` in ``epoch`` whose txn index is not empty."""
        return self.remote_log_segment_metadata(tp, epoch, offset)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        """False while the partition's metadata is loading; the RLM skips its tasks meanwhile."""
        return True

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


# -- plugin loading ------------------------------------------------------------------------------

RSM_ALIASES = {
    "local": "strata.tiered.storage.local.LocalTieredStorage",
    "s3": "strata.tiered.storage.s3.S3RemoteStorageManager",
    "faults": "strata.tiered.storage.faults.FaultInjectingRemoteStorageManager",  # chaos testing: wraps another
}
RLMM_ALIASES = {
    "topic": "strata.tiered.metadata.topic_based.TopicBasedRemoteLogMetadataManager",
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager":
        "strata.tiered.metadata.topic_based.TopicBasedRemoteLogMetadataManager",
}


def load_class(name: str, aliases: Mapping[str, str], base: type) -> type:
    """Resolve a short alias or a dotted ``module.Class`` path; the class must subclass ``base``."""
    path = aliases.get(name, name)
    module_name, _, class_name = path.rpartition(".")
    if not module_name:
        raise ValueError(f"{name!r} is neither a known alias ({', '.join(aliases)}) nor a dotted path")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load {path!r}: {e}") from e
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{path!r} is not a {base.__name__}")
    return cls


def prefixed(props: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Kafka's ``originalsWithPrefix``: the props under ``prefix`` with the prefix removed."""
    return {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}
