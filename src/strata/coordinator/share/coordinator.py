"""The KIP-932 share coordinator: share-partition state in ``__share_group_state`` (Kafka 4.2's
``ShareCoordinatorShard`` and ``ShareCoordinatorService``).

A share group's records are handed out by each data partition's leader (the *share-partition leader*);
what must outlive that leader -- the share-partition start offset (SPSO), the delivery state and count of
the records in flight, the epochs -- is written here through the inter-broker RPCs Initialize / Read /
Write / Delete / ReadSummary ShareGroupState (API keys 83-87). Every (group, topic id, partition) lives on
partition ``abs(javaHash("group:topicId:partition")) % n`` of ``__share_group_state`` (the topic id
rendered as Kafka's ``Uuid.toString``), and the broker leading that partition answers for it, as the
leader of a ``__consumer_offsets`` partition answers for its groups.

The state is event-sourced, byte for byte as Kafka writes it (:mod:`strata.coordinator.share.records`):

* **ShareSnapshot** holds the whole state of one share-partition; Initialize writes one (snapshot epoch
  old+1, or 0), and so does every ``share.coordinator.snapshot.update.records.per.snapshot``-th write;
* **ShareUpdate** holds one write's batches only; replay merges it into the state before it with
  :func:`combine_state_batches` (Kafka's ``PersisterStateBatchCombiner``);
* a null-valued ShareSnapshot (tombstone) deletes the state (Delete).

Operations work as Kafka's coordinator runtime runs them: each one computes its records from the state in
memory (:class:`ShareCoordinatorShard`, pure and synchronous), appends them as one batch with
``AppendOrigin.COORDINATOR``, replays them into the same state -- so the live state is by construction what
a reload rebuilds from the log -- and answers only once the partition's high watermark covers this
broker's last write to it (acks=all in a cluster, ``share.coordinator.write.timeout.ms``). Reads wait for
that too: a read must not report state a failover could still lose. The compute-append-replay step has no
await inside, so operations on one partition are serialized by the event loop without a lock.

Single node: ``__share_group_state`` is created (if missing) and every partition loaded before the broker
listens. Cluster: the topic is created by the first FindCoordinator for a share key (replicated
``share.coordinator.state.topic.replication.factor`` times, not before that many brokers are alive, as
Kafka's topic creation fails until then); a broker that becomes leader of partition ``p`` replays it in
the background, answering COORDINATOR_LOAD_IN_PROGRESS for its keys meanwhile, and one that loses ``p``
drops its state (NOT_COORDINATOR; the share-partition leader then finds the new coordinator).

Housekeeping, both as Kafka does on its timers: every ``share.coordinator.state.topic.prune.interval.ms``
the records below the oldest latest snapshot of any live share-partition (everything older is superseded)
are deleted with DeleteRecords; every ``share.coordinator.cold.partition.snapshot.interval.ms`` a
share-partition whose last snapshot is older than that is snapshotted again, so that one idle
share-partition does not hold pruning back forever.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from strata.common import TopicPartition
from strata.common.hashing import kafka_partition_for
from strata.coordinator.share.records import (
    NO_DELIVERY_COMPLETE_COUNT,
    SHARE_GROUP_STATE_TOPIC,
    ShareKey,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    ShareValue,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strata.errors import CorruptRecordError, ErrorCode, KafkaError
from strata.log.checkpoints import topic_id_to_str
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_batches
from strata.protocol.records import BatchBuilder

if TYPE_CHECKING:
    from strata.common import Clock
    from strata.config.broker_config import BrokerConfig
    from strata.log.partition_log import PartitionLog
    from strata.replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.coordinator.share")

UNINITIALIZED_START_OFFSET = -1  # Kafka's PartitionFactory / ShareGroupOffset constants
DEFAULT_EPOCH = 0
NO_EPOCH = -1  # a request's "not checked" leader or state epoch
LOAD_CHUNK_BATCHES = 500  # batches replayed between two yields to the event loop while loading
_NO_OFFSET = 2**63 - 1

Key = tuple[str, UUID, int]  # (group id, topic id, partition): Kafka's SharePartitionKey
Record = tuple[ShareKey, ShareValue | None]


# -- keys ---------------------------------------------------------------------------------------------

def coordinator_key(group_id: str, topic_id: UUID, partition: int) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``: ``group:topicId:partition`` (topic id in base64)."""
    return f"{group_id}:{topic_id_to_str(topic_id)}:{partition}"


_INT = re.compile(r"[+-]?\d+")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")  # java.util.Base64's URL decoder: no other characters


def parse_share_key(key: str) -> Key:
    """A FindCoordinator share key, validated as Kafka's ``SharePartitionKey.getInstance(String)``: the last
    two ``:``-separated tokens are the topic id and the partition, the rest (colons allowed) the group.
    ValueError for a key Kafka refuses (FindCoordinator answers INVALID_REQUEST)."""
    if not key:
        raise ValueError("Share partition key cannot be empty")
    tokens = key.split(":")
    while tokens and not tokens[-1]:  # Java's String.split drops trailing empty strings
        tokens.pop()
    if len(tokens) < 3:
        raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found - {key}")
    group_id = ":".join(tokens[:-2])
    if not group_id.strip():
        raise ValueError("GroupId must not be empty")
    topic_text, partition_text = tokens[-2], tokens[-1]
    try:
        if len(topic_text) > 24 or not _BASE64URL.fullmatch(topic_text):
            raise ValueError
        raw = base64.urlsafe_b64decode(topic_text + "=" * (-len(topic_text) % 4))
        if len(raw) != 16:
            raise ValueError
    except (ValueError, binascii.Error):
        raise ValueError(f"Invalid topic ID: {topic_text}") from None
    if not _INT.fullmatch(partition_text) or not -(2**31) <= int(partition_text) < 2**31:
        raise ValueError(f"Invalid partition: {partition_text}")
    return group_id, UUID(bytes=raw), int(partition_text)


# -- PersisterStateBatchCombiner -----------------------------------------------------------------------

_Batch = tuple[int, int, int, int]  # (first, last, delivery count, delivery state): PersisterStateBatch order


def _info(b: _Batch) -> tuple[int, int]:
    """A batch's priority on overlap: delivery count, then delivery state (Kafka's compareBatchDeliveryInfo)."""
    return b[2], b[3]


def _add(batches: list[_Batch], b: _Batch) -> None:
    """Insert into the sorted list as into Kafka's TreeSet (an equal batch is there once)."""
    i = bisect.bisect_left(batches, b)
    if i == len(batches) or batches[i] != b:
        batches.insert(i, b)


def combine_state_batches(so_far: Iterable[StateBatch], new: Iterable[StateBatch],
                          start_offset: int) -> tuple[StateBatch, ...]:
    """Kafka's ``PersisterStateBatchCombiner.combineStateBatches``: one sorted, non-overlapping batch list.

    Batches ending below ``start_offset`` are dropped and one straddling it is cut at it (-1: no pruning).
    Where two batches overlap, the one with the higher delivery count -- at equal counts the higher
    delivery state, AVAILABLE 0 < ACKNOWLEDGED 2 < ARCHIVED 4 -- keeps the overlapping offsets: a record's
    newer state is the one further along (a redelivery counts up, a terminal state is never undone), which
    is how Kafka tells newer from older without timestamps. Adjacent or overlapping batches of equal count
    and state are merged into one.
    """
    combined: list[_Batch] = [(b.first_offset, b.last_offset, b.delivery_count, b.delivery_state)
                              for b in (*so_far, *new)]
    if start_offset != UNINITIALIZED_START_OFFSET:
        combined = [(max(f, start_offset), la, c, s) for f, la, c, s in combined if la >= start_offset]
    if len(combined) < 2:
        return tuple(StateBatch(f, la, s, c) for f, la, c, s in combined)
    work = sorted(set(combined))
    final: list[_Batch] = []
    while True:
        pair = _merge_candidate(work, final)
        if pair is None:
            break
        prev, cand = work.pop(0), work.pop(0)
        assert (prev, cand) == pair
        if _info(cand) == _info(prev):  # same state: overlapping or contiguous, one batch
            _add(work, (prev[0], max(prev[1], cand[1]), prev[2], prev[3]))
        else:
            for b in _split_overlap(prev, cand):
                _add(work, b)
    final.extend(work)
    return tuple(StateBatch(f, la, s, c) for f, la, c, s in final)


def _merge_candidate(work: list[_Batch], final: list[_Batch]) -> tuple[_Batch, _Batch] | None:
    """The first adjacent pair that overlaps, or touches with the same state; the batches before it can
    overlap nothing any more and move to ``final`` (Kafka's ``getMergeCandidatePair``)."""
    for i in range(len(work) - 1):
        prev, cand = work[i], work[i + 1]
        if cand[0] <= prev[1] or (prev[1] + 1 == cand[0] and _info(prev) == _info(cand)):
            final.extend(work[:i])
            del work[:i]
            return prev, cand
    final.extend(work[:-1])
    del work[:-1]
    return None


def _split_overlap(prev: _Batch, cand: _Batch) -> list[_Batch]:
    """Two overlapping batches of different state (``prev`` first in sort order) as non-overlapping pieces,
    the overlap going to the higher priority (Kafka's ``handleDiffStateOverlap*`` cases)."""
    cand_wins = _info(cand) > _info(prev)
    if cand[0] == prev[0]:
        if cand[1] == prev[1]:
            return [cand]  # equal offsets: sorted order puts the higher priority second
        # cand is longer (sort order)
        return [cand] if cand_wins else [prev, (prev[1] + 1, cand[1], cand[2], cand[3])]
    head = (prev[0], cand[0] - 1, prev[2], prev[3])
    if cand[1] < prev[1]:  # prev swallows cand
        return [head, cand, (cand[1] + 1, prev[1], prev[2], prev[3])] if cand_wins else [prev]
    if cand[1] == prev[1]:
        return [head, cand] if cand_wins else [prev]
    return [head, cand] if cand_wins else [prev, (prev[1] + 1, cand[1], cand[2], cand[3])]


# -- the state of one __share_group_state partition -----------------------------------------------------

@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """One share-partition's state (Kafka's ``ShareGroupOffset``)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp: int = 0
    write_timestamp: int = 0

    @classmethod
    def from_record(cls, value: ShareValue) -> ShareGroupOffset:
        if isinstance(value, ShareSnapshotValue):
            return cls(value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
                       value.delivery_complete_count, value.state_batches, value.create_timestamp,
                       value.write_timestamp)
        return cls(value.snapshot_epoch, DEFAULT_EPOCH, value.leader_epoch, value.start_offset,
                   value.delivery_complete_count, value.state_batches)

    def merge(self, update: ShareUpdateValue) -> ShareGroupOffset:
        """This state with an update applied (Kafka's ``ShareCoordinatorShard.merge``): -1 leaves the start
        offset and the leader epoch as they were, the delivery-complete count is the update's."""
        start = self.start_offset if update.start_offset == UNINITIALIZED_START_OFFSET else update.start_offset
        leader = self.leader_epoch if update.leader_epoch == NO_EPOCH else update.leader_epoch
        return replace(self, start_offset=start, leader_epoch=leader,
                       delivery_complete_count=update.delivery_complete_count,
                       state_batches=combine_state_batches(self.state_batches, update.state_batches, start))

    def snapshot(self) -> ShareSnapshotValue:
        return ShareSnapshotValue(self.snapshot_epoch, self.state_epoch, self.leader_epoch, self.start_offset,
                                  self.create_timestamp, self.write_timestamp, self.state_batches,
                                  self.delivery_complete_count)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """ReadShareGroupState for one share-partition (error fields as Kafka's error results)."""

    error_code: int
    state_epoch: int = 0
    start_offset: int = 0
    state_batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """ReadShareGroupStateSummary for one share-partition."""

    error_code: int
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = 0
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT


class ShareCoordinatorShard:
    """The share-partitions of one ``__share_group_state`` partition (Kafka's ``ShareCoordinatorShard``).

    Pure and synchronous: operations return their answer and the record to append (None: nothing to
    write), and only :meth:`replay` changes the state, so the live state and a reload agree by
    construction. ``topic_partitions`` gives a topic id's partition count (None: no such topic), for
    Kafka's UNKNOWN_TOPIC_OR_PARTITION check.
    """

    def __init__(self, records_per_snapshot: int, topic_partitions: Callable[[UUID], int | None],
                 now_ms: Callable[[], int]) -> None:
        self.records_per_snapshot = records_per_snapshot
        self.topic_partitions = topic_partitions
        self.now_ms = now_ms
        self.states: dict[Key, ShareGroupOffset] = {}
        self.leader_epochs: dict[Key, int] = {}  # the highest leader epoch seen (writes and reads fence below it)
        self.state_epochs: dict[Key, int] = {}
        self.update_counts: dict[Key, int] = {}  # ShareUpdates since the last snapshot
        self._snapshot_offsets: dict[Key, int] = {}  # offset of each live key's latest snapshot
        self._redundant = _NO_OFFSET

    # -- replay ----------------------------------------------------------------------------------

    def replay(self, offset: int, key: ShareKey, value: ShareValue | None) -> None:
        k = (key.group_id, key.topic_id, key.partition)
        if isinstance(key, ShareSnapshotKey):
            if value is None:
                self.states.pop(k, None)
                self.leader_epochs.pop(k, None)
                self.state_epochs.pop(k, None)
                self.update_counts.pop(k, None)
            else:
                assert isinstance(value, ShareSnapshotValue)
                self._raise(self.leader_epochs, k, value.leader_epoch)
                self._raise(self.state_epochs, k, value.state_epoch)
                self.states[k] = ShareGroupOffset.from_record(value)
                # Kafka resets the count only when it reached the limit (an Initialize snapshot keeps it)
                if k in self.update_counts and self.update_counts[k] >= self.records_per_snapshot:
                    self.update_counts[k] = 0
            self._snapshot_written(k, offset, value is None)
        elif value is not None:
            assert isinstance(value, ShareUpdateValue)
            self._raise(self.leader_epochs, k, value.leader_epoch)
            state = self.states.get(k)
            self.states[k] = ShareGroupOffset.from_record(value) if state is None else state.merge(value)
            self.update_counts[k] = self.update_counts.get(k, 0) + 1
        # a null ShareUpdate is no record Kafka writes: ignored

    @staticmethod
    def _raise(epochs: dict[Key, int], k: Key, epoch: int) -> None:
        if k not in epochs or epochs[k] < epoch:
            epochs[k] = epoch

    def _snapshot_written(self, k: Key, offset: int, deleted: bool) -> None:
        """Kafka's ``ShareCoordinatorOffsetsManager``: the log below the oldest latest snapshot of any live
        key is redundant (every key has a newer full snapshot above it). A deleted key stops holding it
        back once its tombstone is counted."""
        self._snapshot_offsets[k] = offset
        self._redundant = min(self._snapshot_offsets.values())
        if deleted:
            del self._snapshot_offsets[k]

    def last_redundant_offset(self) -> int | None:
        """The offset below which this partition's records may be deleted (None: nothing yet)."""
        return None if self._redundant <= 0 or self._redundant == _NO_OFFSET else self._redundant

    # -- checks ----------------------------------------------------------------------------------

    def _unknown_topic(self, topic_id: UUID, partition: int) -> bool:
        count = self.topic_partitions(topic_id)
        return count is None or count <= partition

    # -- operations ------------------------------------------------------------------------------

    def initialize_state(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int,
                         start_offset: int) -> tuple[int, Record | None]:
        """A fresh snapshot (no batches, leader epoch 0); FENCED_STATE_EPOCH below the stored state epoch."""
        if partition < 0:
            return ErrorCode.INVALID_REQUEST, None
        k = (group_id, topic_id, partition)
        if state_epoch != NO_EPOCH and self.state_epochs.get(k, state_epoch) > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, None
        if self._unknown_topic(topic_id, partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        current = self.states.get(k)
        now = self.now_ms()
        # a start offset to come (-1) has no lag yet; a set one (offsets altered) starts counting at 0
        complete = NO_DELIVERY_COMPLETE_COUNT if start_offset == UNINITIALIZED_START_OFFSET else 0
        value = ShareSnapshotValue(current.snapshot_epoch + 1 if current is not None else 0, state_epoch,
                                   DEFAULT_EPOCH, start_offset, now, now, (), complete)
        return ErrorCode.NONE, (ShareSnapshotKey(*k), value)

    def write_state(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, delivery_complete_count: int,
                    batches: Sequence[StateBatch]) -> tuple[int, Record | None]:
        """Checks in Kafka's order: uninitialized INVALID_REQUEST, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH,
        UNKNOWN_TOPIC_OR_PARTITION; then a ShareUpdate, or a snapshot every ``records_per_snapshot``."""
        if partition < 0:
            return ErrorCode.INVALID_REQUEST, None
        k = (group_id, topic_id, partition)
        if k not in self.states:
            return ErrorCode.INVALID_REQUEST, None
        if leader_epoch != NO_EPOCH and self.leader_epochs.get(k, leader_epoch) > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        if state_epoch != NO_EPOCH and self.state_epochs.get(k, state_epoch) > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH, None
        if self._unknown_topic(topic_id, partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        return ErrorCode.NONE, self._state_record(k, leader_epoch, start_offset, delivery_complete_count,
                                                  tuple(batches), update_leader_epoch=False)

    def read_state(self, group_id: str, topic_id: UUID, partition: int,
                   leader_epoch: int) -> tuple[ReadResult, Record | None]:
        """The merged state; a leader epoch above the stored one is recorded (a record written), a lower one
        is FENCED_LEADER_EPOCH (-1 included once any epoch is stored, as in Kafka)."""
        if partition < 0:
            return ReadResult(ErrorCode.INVALID_REQUEST), None
        k = (group_id, topic_id, partition)
        state = self.states.get(k)
        if state is None:
            return ReadResult(ErrorCode.INVALID_REQUEST), None
        if k in self.leader_epochs and self.leader_epochs[k] > leader_epoch:
            return ReadResult(ErrorCode.FENCED_LEADER_EPOCH), None
        if self._unknown_topic(topic_id, partition):
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
        result = ReadResult(ErrorCode.NONE, state.state_epoch, state.start_offset, state.state_batches)
        if leader_epoch == NO_EPOCH or self.leader_epochs.get(k) == leader_epoch:
            return result, None
        return result, self._state_record(k, leader_epoch, state.start_offset, state.delivery_complete_count,
                                          (), update_leader_epoch=True)

    def read_summary(self, group_id: str, topic_id: UUID, partition: int) -> SummaryResult:
        """Start offset, epochs and delivery-complete count; an unknown share-partition reads as
        uninitialized (start offset -1), not as an error."""
        if partition < 0:
            return SummaryResult(ErrorCode.INVALID_REQUEST)
        if self._unknown_topic(topic_id, partition):
            return SummaryResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        state = self.states.get((group_id, topic_id, partition))
        if state is None:
            return SummaryResult(ErrorCode.NONE, DEFAULT_EPOCH, DEFAULT_EPOCH, UNINITIALIZED_START_OFFSET)
        return SummaryResult(ErrorCode.NONE, state.state_epoch, state.leader_epoch, state.start_offset,
                             state.delivery_complete_count)

    def delete_state(self, group_id: str, topic_id: UUID, partition: int) -> tuple[int, Record | None]:
        """A tombstone; deleting what does not exist succeeds without writing."""
        if partition < 0:
            return ErrorCode.INVALID_REQUEST, None
        if self._unknown_topic(topic_id, partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        k = (group_id, topic_id, partition)
        if k not in self.states:
            return ErrorCode.NONE, None
        return ErrorCode.NONE, (ShareSnapshotKey(*k), None)

    def cold_snapshots(self, interval_ms: int) -> list[Record]:
        """Kafka's ``snapshotColdPartitions``: a new snapshot (epoch+1, write time now) of every
        share-partition not snapshotted for ``interval_ms``; nothing when every state is already a cold
        snapshot (a quiet coordinator writes nothing)."""
        if all(s.create_timestamp != s.write_timestamp for s in self.states.values()):
            return []
        now = self.now_ms()
        return [(ShareSnapshotKey(*k), replace(s, snapshot_epoch=s.snapshot_epoch + 1, write_timestamp=now).snapshot())
                for k, s in self.states.items() if now - s.write_timestamp >= interval_ms]

    def cleanup_records(self, topic_ids: set[UUID]) -> list[Record]:
        """Tombstones for the share-partitions of deleted topics (Kafka's ``maybeCleanupShareState``)."""
        return [(ShareSnapshotKey(*k), None) for k in self.states if k[1] in topic_ids]

    def _state_record(self, k: Key, leader_epoch: int, start_offset: int, delivery_complete_count: int,
                      batches: tuple[StateBatch, ...], *, update_leader_epoch: bool) -> Record:
        """Kafka's ``generateShareStateRecord``. Only a read moves the stored leader epoch (a write keeps the
        current one); a ShareUpdate carries the request's batches merged among themselves, a snapshot the
        whole merged state."""
        current = self.states[k]
        new_leader = current.leader_epoch
        if update_leader_epoch and leader_epoch != NO_EPOCH:
            new_leader = leader_epoch
        if self.update_counts.get(k, 0) >= self.records_per_snapshot:
            start = current.start_offset if start_offset == UNINITIALIZED_START_OFFSET else start_offset
            now = self.now_ms()
            return ShareSnapshotKey(*k), ShareSnapshotValue(
                current.snapshot_epoch + 1, current.state_epoch, new_leader, start, now, now,
                combine_state_batches(current.state_batches, batches, start), delivery_complete_count)
        return ShareUpdateKey(*k), ShareUpdateValue(
            current.snapshot_epoch, new_leader, start_offset, combine_state_batches((), batches, start_offset),
            delivery_complete_count)


# -- the coordinator on the broker ----------------------------------------------------------------------

class TopicSize(Protocol):
    @property
    def partitions(self) -> int: ...


class ShareTopics(Protocol):
    def get(self, name: str) -> TopicSize | None: ...

    def by_id(self, topic_id: UUID) -> TopicSize | None: ...


class StateTopicAdmin(Protocol):
    """Cluster mode: how the coordinator creates a replicated ``__share_group_state``."""

    def max_replication_factor(self) -> int: ...

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str]) -> TopicSize: ...


class ShareCoordinatorHost(Protocol):
    """The part of a broker the share coordinator uses: its configuration and clock, the topic registry (to
    size ``__share_group_state`` and to know the data topics' partitions), the replica manager (to append,
    replay and wait for the ISR), the topic creators and DeleteRecords (pruning). A protocol because the
    coordinator sits below the wire layer (the broker satisfies it structurally; tests pass a small object)."""

    config: BrokerConfig
    clock: Clock
    replicas: ReplicaManager
    topics: ShareTopics
    admin: StateTopicAdmin

    @property
    def clustered(self) -> bool: ...

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicSize: ...

    def delete_records(self, tp: TopicPartition, offset: int) -> int: ...


def _coordinator_error(code: int) -> int:
    """A failed append or replication wait as Kafka's ``CoordinatorOperationExceptionHelper`` answers it:
    the share-partition leader retries COORDINATOR_NOT_AVAILABLE, and looks the coordinator up again on
    NOT_COORDINATOR."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


class ShareCoordinator:
    def __init__(self, broker: ShareCoordinatorHost) -> None:
        self.broker = broker
        self.config = broker.config.share_coordinator
        self.partitions = self.config.num_partitions
        self.clustered = broker.clustered
        self.active = False
        self.shards: dict[int, ShareCoordinatorShard] = {}  # the __share_group_state partitions loaded here
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._last_write: dict[int, int] = {}  # partition -> next offset after this broker's last write
        self._pruned: dict[int, int] = {}  # partition -> offset last pruned to
        self._tasks: list[asyncio.Task[None]] = []
        self._creating: asyncio.Lock | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        broker = self.broker
        # Created on first use (FindCoordinator with key type 2, ``ensure_topic``), as Kafka does, not here:
        # a broker whose clients never use share groups should not carry 50 more partitions.
        info = broker.topics.get(SHARE_GROUP_STATE_TOPIC)
        if info is not None:
            self.partitions = info.partitions
        self.active = True
        if not self.clustered:
            for p in range(self.partitions if info is not None else 0):
                self._load_now(p)
        else:  # partitions led before the coordinator started
            for tp, part in list(broker.replicas.partitions.items()):
                if tp.topic == SHARE_GROUP_STATE_TOPIC and part.is_leader:
                    self.on_leader(tp.partition)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._periodically(self.config.prune_interval_ms, self.prune), name="share-state-prune"),
            loop.create_task(self._periodically(self.config.cold_partition_snapshot_interval_ms,
                                                self.snapshot_cold_partitions), name="share-state-cold-snapshot")]

    async def stop(self) -> None:
        self.active = False
        tasks = [*self._tasks, *self._loading.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._loading.clear()
        self.shards.clear()

    async def _periodically(self, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                job()
            except Exception:
                log.exception("share coordinator job %s failed", getattr(job, "__name__", job))

    def topic_configs(self, replication_factor: int) -> dict[str, str]:
        """Kafka's ``shareGroupStateTopicConfigs``; min.insync.replicas capped by the replication factor so
        that a topic of fewer replicas (a single node, replication.factor=1) can take acks=all writes."""
        cfg = self.config
        return {"cleanup.policy": "delete", "retention.ms": "-1", "compression.type": "producer",
                "segment.bytes": str(cfg.segment_bytes),
                "min.insync.replicas": str(min(cfg.min_isr, replication_factor))}

    # -- routing ---------------------------------------------------------------------------------

    def partition_for(self, group_id: str, topic_id: UUID, partition: int) -> int:
        return kafka_partition_for(coordinator_key(group_id, topic_id, partition), self.partitions)

    def partition_for_key(self, key: str) -> int:
        """The partition of a FindCoordinator share key (ValueError: a key Kafka refuses). The key is parsed
        and rendered again, as Kafka does, so only group, topic id and partition decide."""
        return self.partition_for(*parse_share_key(key))

    async def ensure_topic(self) -> bool:
        """Create ``__share_group_state`` on first use (FindCoordinator); False while it cannot be made yet
        (fewer live brokers than ``share.coordinator.state.topic.replication.factor``)."""
        broker = self.broker
        if broker.topics.get(SHARE_GROUP_STATE_TOPIC) is not None:
            return True
        if not self.clustered:  # a single node makes it (again, if it was deleted) and loads it
            info = broker.create_topic(SHARE_GROUP_STATE_TOPIC, self.config.num_partitions, self.topic_configs(1))
            self.partitions = info.partitions
            self.shards.clear()
            self._pruned.clear()
            for p in range(self.partitions):
                self._load_now(p)
            return True
        if self._creating is None:
            self._creating = asyncio.Lock()
        async with self._creating:
            if broker.topics.get(SHARE_GROUP_STATE_TOPIC) is not None:
                return True
            rf = self.config.replication_factor
            if broker.admin.max_replication_factor() < rf:
                log.info("not creating %s yet: %d live brokers, share.coordinator.state.topic.replication.factor=%d",
                         SHARE_GROUP_STATE_TOPIC, broker.admin.max_replication_factor(), rf)
                return False
            try:
                info = await broker.admin.create_topic(SHARE_GROUP_STATE_TOPIC, self.config.num_partitions, rf,
                                                       self.topic_configs(rf))
            except KafkaError as e:
                if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.warning("creating %s failed: %s", SHARE_GROUP_STATE_TOPIC, e)
                    return False
                found = broker.topics.get(SHARE_GROUP_STATE_TOPIC)
                if found is None:
                    return False
                info = found
            self.partitions = info.partitions
            return True

    # -- cluster mode: leadership of __share_group_state partitions --------------------------------

    def on_leader(self, partition: int) -> None:
        """This broker leads ``__share_group_state-partition`` now: load it (in the background when an event
        loop runs; its keys answer COORDINATOR_LOAD_IN_PROGRESS until then)."""
        if not self.active or partition in self.shards or partition in self._loading:
            return
        info = self.broker.topics.get(SHARE_GROUP_STATE_TOPIC)
        if info is not None:
            self.partitions = info.partitions
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._load_now(partition)
            return
        self._loading[partition] = loop.create_task(self._load(partition), name=f"share-state-load-{partition}")

    def on_not_leader(self, partition: int) -> None:
        task = self._loading.pop(partition, None)
        if task is not None:
            task.cancel()
        self._last_write.pop(partition, None)
        self._pruned.pop(partition, None)
        shard = self.shards.pop(partition, None)
        if shard is not None:
            log.info("no longer coordinating the %d share-partitions of %s-%d", len(shard.states),
                     SHARE_GROUP_STATE_TOPIC, partition)

    def _new_shard(self) -> ShareCoordinatorShard:
        def partitions_of(topic_id: UUID) -> int | None:
            info = self.broker.topics.by_id(topic_id)
            return info.partitions if info is not None else None

        return ShareCoordinatorShard(self.config.snapshot_update_records_per_snapshot, partitions_of,
                                     self.broker.clock.milliseconds)

    def _load_now(self, partition: int) -> None:
        """Replay at once (a single node before it listens: the only replica, so everything in its log was
        acknowledged and the high watermark is first raised to the log end -- it lags after a kill -9)."""
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, partition)
        plog = self.broker.replicas.local_log(tp)
        if plog is None:
            return
        if not self.clustered:
            plog.update_high_watermark(plog.log_end_offset)
        shard = self._new_shard()
        end = plog.log_end_offset
        for _ in self._replay_steps(shard, tp, plog, end):
            pass
        self._loaded(partition, shard, end)

    async def _load(self, partition: int) -> None:
        """Replay to the log end, yielding to the event loop every few hundred batches. As the new leader
        everything in this log will be committed, so all of it is state; the first answer waits until the
        high watermark covers it."""
        try:
            tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, partition)
            plog = self.broker.replicas.local_log(tp)
            if plog is None:
                return
            shard = self._new_shard()
            end = plog.log_end_offset
            for _ in self._replay_steps(shard, tp, plog, end):
                await asyncio.sleep(0)
            if self._loading.get(partition) is asyncio.current_task():
                self._loaded(partition, shard, end)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", SHARE_GROUP_STATE_TOPIC, partition)
        finally:
            if self._loading.get(partition) is asyncio.current_task():
                del self._loading[partition]

    def _loaded(self, partition: int, shard: ShareCoordinatorShard, end: int) -> None:
        self.shards[partition] = shard
        self._last_write[partition] = end
        log.info("coordinating the %d share-partitions of %s-%d", len(shard.states), SHARE_GROUP_STATE_TOPIC,
                 partition)

    def _replay_steps(self, shard: ShareCoordinatorShard, tp: TopicPartition, plog: PartitionLog,
                      end: int) -> Iterator[None]:
        """Replay ``[log start, end)`` into ``shard``, yielding every ``LOAD_CHUNK_BATCHES`` batches."""
        start = plog.log_start_offset
        for n, batch in enumerate(iter_log_batches(plog, start, end), 1):
            if not batch.header.is_control:
                for record in batch.records:
                    if start <= record.offset < end:
                        self._replay_record(shard, tp, record.offset, record.key, record.value)
            if n % LOAD_CHUNK_BATCHES == 0:
                yield

    @staticmethod
    def _replay_record(shard: ShareCoordinatorShard, tp: TopicPartition, offset: int, key: bytes | None,
                       value: bytes | None) -> None:
        if key is None:
            return
        try:
            decoded = decode_key(key)
            if decoded is None:
                return  # a record type of a newer Kafka: skipped, as Kafka's loader does
            shard.replay(offset, decoded, None if value is None else decode_value(decoded.RECORD_TYPE, value))
        except (CorruptRecordError, ValueError) as e:
            log.error("skipping unreadable record at %s offset %d: %s", tp, offset, e)

    # -- writing -------------------------------------------------------------------------------

    def _shard(self, partition: int) -> tuple[int, ShareCoordinatorShard | None]:
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        shard = self.shards.get(partition)
        return (ErrorCode.NONE, shard) if shard is not None else (ErrorCode.NOT_COORDINATOR, None)

    def _append(self, partition: int, records: list[Record]) -> int:
        """Append ``records`` as one batch and replay them into the partition's shard; an error code (then
        nothing was applied)."""
        shard = self.shards[partition]
        builder = BatchBuilder()
        for key, value in records:
            builder.append(None if value is None else encode_value(value), key=encode_key(key))
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, partition)
        try:
            info = self.broker.replicas.append(tp, builder.build(), AppendOrigin.COORDINATOR,
                                               required_acks=-1 if self.clustered else 1)
        except KafkaError as e:
            log.warning("appending to %s failed: %s", tp, e)
            return _coordinator_error(e.error_code)
        except OSError as e:
            log.warning("appending to %s failed: %s", tp, e)
            return ErrorCode.NOT_COORDINATOR
        for i, (key, value) in enumerate(records):
            shard.replay(info.first_offset + i, key, value)
        self._last_write[partition] = info.last_offset + 1
        return ErrorCode.NONE

    async def durable(self, partition: int) -> int:
        """Wait until the ISR has this broker's writes to ``partition`` (acks=all); an error code."""
        if not self.clustered:
            return ErrorCode.NONE
        offset = self._last_write.get(partition)
        if offset is None:
            return ErrorCode.NONE
        code = await self.broker.replicas.wait_for_replication(
            TopicPartition(SHARE_GROUP_STATE_TOPIC, partition), offset, self.config.write_timeout_ms / 1000)
        return _coordinator_error(code)

    async def _run(self, partition: int, code: int, record: Record | None) -> int:
        """Append an operation's record (if any), then answer its code once the partition is durable."""
        if record is not None:
            failed = self._append(partition, [record])
            if failed:
                return failed
        durable = await self.durable(partition)
        return durable or code

    # -- the RPCs ----------------------------------------------------------------------------------

    async def initialize(self, group_id: str, topic_id: UUID | None, partition: int, state_epoch: int,
                         start_offset: int) -> int:
        """InitializeShareGroupState: a fresh snapshot of the share-partition; an error code."""
        if topic_id is None:
            return ErrorCode.INVALID_REQUEST
        p = self.partition_for(group_id, topic_id, partition)
        code, shard = self._shard(p)
        if shard is None:
            return code
        code, record = shard.initialize_state(group_id, topic_id, partition, state_epoch, start_offset)
        return await self._run(p, code, record)

    async def read(self, group_id: str, topic_id: UUID | None, partition: int, leader_epoch: int) -> ReadResult:
        """ReadShareGroupState: the merged state; records ``leader_epoch`` and fences lower ones later."""
        if topic_id is None:
            return ReadResult(ErrorCode.INVALID_REQUEST)
        p = self.partition_for(group_id, topic_id, partition)
        code, shard = self._shard(p)
        if shard is None:
            return ReadResult(code)
        result, record = shard.read_state(group_id, topic_id, partition, leader_epoch)
        code = await self._run(p, result.error_code, record)
        return result if code == result.error_code else ReadResult(code)

    async def read_summary(self, group_id: str, topic_id: UUID | None, partition: int,
                           leader_epoch: int = NO_EPOCH) -> SummaryResult:
        """ReadShareGroupStateSummary: start offset, epochs, delivery-complete count (``leader_epoch`` is
        part of the request but, as in Kafka, neither checked nor recorded)."""
        if topic_id is None:
            return SummaryResult(ErrorCode.INVALID_REQUEST)
        p = self.partition_for(group_id, topic_id, partition)
        code, shard = self._shard(p)
        if shard is None:
            return SummaryResult(code)
        result = shard.read_summary(group_id, topic_id, partition)
        code = await self._run(p, result.error_code, None)
        return result if code == result.error_code else SummaryResult(code)

    async def write(self, group_id: str, topic_id: UUID | None, partition: int, state_epoch: int,
                    leader_epoch: int, start_offset: int, delivery_complete_count: int,
                    batches: Sequence[StateBatch]) -> int:
        """WriteShareGroupState: a ShareUpdate (or every N-th time a snapshot); an error code."""
        if topic_id is None:
            return ErrorCode.INVALID_REQUEST
        p = self.partition_for(group_id, topic_id, partition)
        code, shard = self._shard(p)
        if shard is None:
            return code
        code, record = shard.write_state(group_id, topic_id, partition, state_epoch, leader_epoch, start_offset,
                                         delivery_complete_count, batches)
        return await self._run(p, code, record)

    async def delete(self, group_id: str, topic_id: UUID | None, partition: int) -> int:
        """DeleteShareGroupState: a tombstone; an error code."""
        if topic_id is None:
            return ErrorCode.INVALID_REQUEST
        p = self.partition_for(group_id, topic_id, partition)
        code, shard = self._shard(p)
        if shard is None:
            return code
        code, record = shard.delete_state(group_id, topic_id, partition)
        return await self._run(p, code, record)

    # -- housekeeping ----------------------------------------------------------------------------

    def prune(self) -> None:
        """DeleteRecords below each loaded partition's last redundant offset (at most its high watermark:
        only committed records are ever deleted), skipping a partition already pruned that far."""
        for p, shard in list(self.shards.items()):
            offset = shard.last_redundant_offset()
            if offset is None or self._pruned.get(p) == offset:
                continue
            tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, p)
            plog = self.broker.replicas.local_log(tp)
            if plog is None:
                continue
            offset = min(offset, plog.high_watermark)
            if offset <= plog.log_start_offset:
                continue
            try:
                self.broker.delete_records(tp, offset)
            except (KafkaError, OSError) as e:
                log.warning("pruning %s below offset %d failed: %s", tp, offset, e)
                continue
            self._pruned[p] = offset
            log.debug("pruned %s below offset %d", tp, offset)

    def snapshot_cold_partitions(self) -> None:
        for p, shard in list(self.shards.items()):
            records = shard.cold_snapshots(self.config.cold_partition_snapshot_interval_ms)
            if records and (code := self._append(p, records)):
                log.warning("snapshotting the cold share-partitions of %s-%d failed: %s", SHARE_GROUP_STATE_TOPIC,
                            p, ErrorCode(code).name)

    def on_topics_deleted(self, topic_ids: set[UUID]) -> None:
        """Tombstones for the share-partitions of deleted topics (Kafka's ``onTopicsDeleted``), in every
        loaded partition; best effort, as in Kafka."""
        for p, shard in list(self.shards.items()):
            records = shard.cleanup_records(topic_ids)
            if records and (code := self._append(p, records)):
                log.warning("deleting the share state of deleted topics in %s-%d failed: %s",
                            SHARE_GROUP_STATE_TOPIC, p, ErrorCode(code).name)
