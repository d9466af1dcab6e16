"""Idempotent and transactional producer state for one partition (Kafka's ProducerStateManager).

Why the broker keeps it:

* **deduplication** -- a producer that retries a batch after a lost response must not get it
  appended twice; the last five batches per producer are remembered (``NUM_BATCHES_TO_RETAIN``);
* **ordering and fencing** -- sequence numbers must continue without gaps and a zombie producer with
  an old epoch must be rejected;
* **transactions** -- the first offset of each open transaction bounds the last stable offset that
  READ_COMMITTED consumers may read up to, and aborted ranges feed the ``.txnindex``.

The state is rebuilt from the log on startup, starting from the newest ``<offset>.snapshot`` file so
only the tail of the log has to be replayed. Those snapshots are also uploaded with every remote
segment, so they are written in Kafka's exact format (``ProducerSnapshot.json`` v1)::

    version int16 = 1 | crc uint32 = CRC-32C of bytes [6, end) | count int32 | count x 46-byte entries:
    producer_id int64 | epoch int16 | last_sequence int32 | last_offset int64 | offset_delta int32 |
    timestamp int64 | coordinator_epoch int32 | current_txn_first_offset int64 (-1 = none)

Scope: a single-node broker. Kafka's "unreplicated transactions" (completed, but with the marker above
the high watermark) and the transaction-verification state are not modelled: ``complete_txn`` makes a
transaction stable at once, which is right when the high watermark is the log end offset.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from crc32c import crc32c

from strata.common import Clock
from strata.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
)
from strata.log.checkpoints import atomic_write
from strata.log.errors import CorruptCheckpointError, LogStateError, TransactionCoordinatorFencedError
from strata.log.files import DELETED_SUFFIX, SNAPSHOT_SUFFIX, offset_file_name, offset_from_file_name
from strata.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    ControlRecord,
    ControlRecordType,
)

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = (1 << 31) - 1
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_OFFSET = 2
_ENTRIES_OFFSET = 6
assert _HEADER.size == 10 and _ENTRY.size == 46


class CorruptSnapshotError(CorruptCheckpointError):
    """A producer snapshot with a bad version, size or CRC (Kafka's CorruptSnapshotException)."""


class AppendOrigin(Enum):
    """Who is appending, which decides how much is validated (Kafka ``AppendOrigin``).

    Only CLIENT appends have their sequence numbers checked; REPLICATION (also used to replay the log
    on recovery) trusts the data already in the log, so rebuilding state never fails on a sequence.
    """

    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the COMMIT/ABORT marker
    is_aborted: bool


class TxnMetadata(NamedTuple):
    """A transaction opened by an append: the producer and the offset of its first batch."""

    producer_id: int
    first_offset: int


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka ``DefaultRecordBatch.decrementSequence``: sequences wrap from Int32.MAX to 0."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _first_seq(last_seq: int, offset_delta: int) -> int:
    """The first sequence of a batch known only by its last one (as in a snapshot)."""
    return NO_SEQUENCE if last_seq == NO_SEQUENCE else decrement_sequence(last_seq, offset_delta)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


# -- per-producer state ----------------------------------------------------------------------


def _batches() -> deque[BatchMetadata]:
    return deque(maxlen=NUM_BATCHES_TO_RETAIN)


@dataclass
class ProducerStateEntry:
    """What the partition knows about one producer id (Kafka ``ProducerStateEntry``)."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batch_metadata: deque[BatchMetadata] = field(default_factory=_batches)
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None
    last_timestamp: int = NO_TIMESTAMP

    def __post_init__(self) -> None:
        # Whatever deque or list the caller passed, keep at most the last five batches.
        self.batch_metadata = deque(self.batch_metadata, maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def find_duplicate_batch(
        self, first_seq: int, last_seq: int, producer_epoch: int
    ) -> BatchMetadata | None:
        """The retained batch with exactly this sequence range under the current epoch, if any.

        Batches without sequence numbers are never duplicates (nothing identifies a retry).
        """
        if producer_epoch != self.producer_epoch or first_seq == NO_SEQUENCE:
            return None
        matches = (b for b in self.batch_metadata if b.first_seq == first_seq and b.last_seq == last_seq)
        return next(matches, None)

    def add_batch(self, producer_epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(batch)  # the deque's maxlen drops the oldest
        self.last_timestamp = batch.timestamp

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """A new epoch starts a new sequence space, so the old batches can no longer be duplicates."""
        if self.producer_epoch == producer_epoch:
            return False
        self.batch_metadata.clear()
        self.producer_epoch = producer_epoch
        return True

    def update(self, other: ProducerStateEntry) -> None:
        """Fold in the state an append produced (Kafka ``ProducerStateEntry.update``)."""
        self.maybe_update_producer_epoch(other.producer_epoch)
        self.batch_metadata.extend(other.batch_metadata)
        self.coordinator_epoch = other.coordinator_epoch
        self.current_txn_first_offset = other.current_txn_first_offset
        self.last_timestamp = other.last_timestamp

    def end_transaction(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """State after a COMMIT/ABORT marker: no open transaction any more."""
        self.maybe_update_producer_epoch(producer_epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def copy_without_batches(self) -> ProducerStateEntry:
        """The starting point of an append: same epochs and transaction, no batches yet."""
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, _batches(), self.coordinator_epoch,
            self.current_txn_first_offset, self.last_timestamp,
        )


# -- validation of one append ----------------------------------------------------------------


class ProducerAppendInfo:
    """Validates the batches of one producer in one append and accumulates the resulting state.

    Nothing is applied until ``ProducerStateManager.update(info)``, so a batch rejected halfway
    through an append leaves the partition's state untouched.

    ``require_zero_first_sequence`` is Kafka's rule for transaction-v2 idempotent producers: a producer
    the partition has no state for must start at sequence 0. Off by default because plain Kafka accepts
    any sequence from an unknown producer (its state may have expired or been deleted with old segments).
    """

    def __init__(
        self,
        producer_id: int,
        current_entry: ProducerStateEntry,
        origin: AppendOrigin,
        *,
        require_zero_first_sequence: bool = False,
    ) -> None:
        self.producer_id = producer_id
        self.origin = origin
        self.require_zero_first_sequence = require_zero_first_sequence
        self._current = current_entry
        self._updated = current_entry.copy_without_batches()
        self._updated.producer_id = producer_id
        self._started: list[TxnMetadata] = []

    @property
    def started_transactions(self) -> list[TxnMetadata]:
        return list(self._started)

    def to_entry(self) -> ProducerStateEntry:
        return self._updated

    def append_batch(self, header: BatchHeader, control: ControlRecord | None = None) -> CompletedTxn | None:
        """Validate one batch header as Kafka's ``append(batch)`` does.

        ``control`` is the decoded marker of a control batch; None for a control batch means its record
        was cleaned away, which changes nothing. The offsets must already be assigned. A marker's time
        is the batch's max timestamp, which is its single record's (Kafka reads the record's), and it
        is checked with the legacy (transaction v0/v1) epoch rule: batches do not carry the version.
        """
        if header.is_control:
            if control is None:
                return None
            return self.append_end_txn_marker(
                control.type, header.producer_epoch, control.coordinator_epoch, header.base_offset,
                header.max_timestamp,
            )
        self.append_data_batch(
            header.producer_epoch, header.base_sequence, header.last_sequence, header.max_timestamp,
            header.base_offset, header.last_offset, header.is_transactional,
        )
        return None

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        max_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
        origin: AppendOrigin | None = None,
    ) -> None:
        """Check epoch, sequence and transaction state of a data batch, then record it.

        ``origin`` defaults to the one given to ``prepare_update``.
        """
        origin = self.origin if origin is None else origin
        self._check_producer_epoch(epoch, first_offset, origin, transaction_version=0)
        if origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        open_txn = self._updated.current_txn_first_offset
        if open_txn is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {self.producer_id} at offset {first_offset}"
            )
        batch = BatchMetadata(first_seq, last_seq, last_offset, last_offset - first_offset, max_timestamp)
        self._updated.add_batch(epoch, batch)
        if open_txn is None and is_transactional:
            self._updated.current_txn_first_offset = first_offset
            self._started.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(
        self,
        marker: ControlRecordType,
        producer_epoch: int,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        transaction_version: int = 0,
    ) -> CompletedTxn | None:
        """Close the producer's transaction with a COMMIT/ABORT marker written at ``offset``.

        Returns None when no transaction was open: an empty transaction changes neither the last
        stable offset nor the transaction index.
        """
        self._check_producer_epoch(producer_epoch, offset, self.origin, transaction_version)
        self._check_coordinator_epoch(coordinator_epoch, offset)
        first = self._updated.current_txn_first_offset
        completed = None
        if first is not None:
            completed = CompletedTxn(self.producer_id, first, offset, marker is ControlRecordType.ABORT)
        self._updated.end_transaction(producer_epoch, coordinator_epoch, timestamp)
        return completed

    # -- checks -----------------------------------------------------------------------------

    def _check_producer_epoch(
        self, epoch: int, offset: int, origin: AppendOrigin, transaction_version: int
    ) -> None:
        """Fence zombies: an older epoch (or, for transaction-v2 markers, the same one) is rejected."""
        current = self._updated.producer_epoch
        strict = transaction_version >= 2
        if not (epoch <= current if strict else epoch < current):
            return
        if strict and epoch == current and self._updated.current_txn_first_offset is None:
            return  # a retried TV2 marker for a transaction that already ended (KAFKA-19999)
        message = (
            f"epoch of producer {self.producer_id} at offset {offset} is {epoch}, "
            f"{'<=' if strict else '<'} the last seen epoch {current}"
        )
        if origin is AppendOrigin.REPLICATION:
            log.warning(message)
        else:
            raise InvalidProducerEpochError(message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        if self.require_zero_first_sequence and first_seq != 0 and self._current.is_empty:
            raise OutOfOrderSequenceError(
                f"producer {self.producer_id} has no state here: expected sequence 0 at offset {offset}, "
                f"got {first_seq}"
            )
        if epoch != self._updated.producer_epoch:
            # A new epoch restarts the sequence at 0 -- unless we never saw any epoch for this producer.
            if first_seq != 0 and self._updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence {first_seq} for new epoch {epoch} of producer {self.producer_id} "
                    f"at offset {offset} (current epoch {self._updated.producer_epoch})"
                )
            return
        if not self._updated.is_empty:
            last_seq = self._updated.last_seq
        elif epoch == self._current.producer_epoch:
            last_seq = self._current.last_seq
        else:
            last_seq = NO_SEQUENCE
        if self._current.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence {first_seq} for producer {self.producer_id} at offset {offset}, "
                f"current end sequence {last_seq}"
            )

    def _check_coordinator_epoch(self, coordinator_epoch: int, offset: int) -> None:
        if self._updated.coordinator_epoch <= coordinator_epoch:
            return
        message = (
            f"invalid coordinator epoch {coordinator_epoch} for producer {self.producer_id} at offset "
            f"{offset}: older than the known coordinator epoch {self._updated.coordinator_epoch}"
        )
        if self.origin is AppendOrigin.REPLICATION:
            log.info(message)
        else:
            raise TransactionCoordinatorFencedError(message)


# -- snapshot files --------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a ``.snapshot`` file holding ``entries`` (in the order given)."""
    body = b"".join(_encode_entry(entry) for entry in entries)
    tail = struct.pack(">i", len(body) // _ENTRY.size) + body
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(tail)) + tail


def _encode_entry(entry: ProducerStateEntry) -> bytes:
    txn_first = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
    return _ENTRY.pack(
        entry.producer_id, entry.producer_epoch, entry.last_seq, entry.last_data_offset,
        entry.last_offset_delta, entry.last_timestamp, entry.coordinator_epoch, txn_first,
    )


def decode_snapshot(data: bytes, source: str = "<snapshot bytes>") -> list[ProducerStateEntry]:
    """Parse snapshot bytes; a bad version, size or CRC raises :class:`CorruptSnapshotError`."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"producer snapshot {source} is {len(data)} bytes, shorter than a header")
    version, stored_crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"producer snapshot {source} has unknown version {version}")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"producer snapshot {source} is {len(data)} bytes, not {count} entries")
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"producer snapshot {source} is corrupt: stored crc {stored_crc:#010x}, computed {computed:#010x}"
        )
    return [_decode_entry(data, _HEADER.size + i * _ENTRY.size) for i in range(count)]


def _decode_entry(data: bytes, position: int) -> ProducerStateEntry:
    pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first = _ENTRY.unpack_from(
        data, position
    )
    entry = ProducerStateEntry(
        pid, epoch, _batches(), coordinator_epoch, txn_first if txn_first >= 0 else None, timestamp
    )
    if last_offset >= 0:  # a producer whose batches were all cleared (e.g. by an epoch bump) has none
        entry.batch_metadata.append(
            BatchMetadata(_first_seq(last_seq, delta), last_seq, last_offset, delta, timestamp)
        )
    return entry


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], durable: bool = True) -> None:
    """Write a snapshot file (tmp + fsync + rename, so a crash never leaves half a file). ``durable=False``:
    no fsync yet (a torn or empty file fails its CRC at load and the next older snapshot is used)."""
    atomic_write(path, encode_snapshot(entries), durable=durable)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise KafkaStorageError(f"cannot read producer snapshot {path}: {e}") from e
    return decode_snapshot(data, str(path))


# -- the partition's producer state ----------------------------------------------------------


class ProducerStateManager:
    """Producer id → state for one partition, plus its ``<offset>.snapshot`` files.

    ``map_end_offset`` is the log offset up to which the in-memory state reflects the log; the log
    layer advances it after each append and names snapshots after it (a snapshot at offset N holds the
    state of every batch below N). The manager never reads the log itself: after
    ``truncate_and_reload`` the caller replays ``[map_end_offset, log end)`` with REPLICATION origin.
    """

    def __init__(
        self, partition_dir: Path, clock: Clock, producer_id_expiration_ms: int = 86_400_000
    ) -> None:
        self.partition_dir = partition_dir
        self.clock = clock
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, TxnMetadata] = {}  # open transactions by first offset
        self._snapshots: set[int] = self._scan_snapshots()
        self._map_end_offset = 0
        self._last_snap_offset = 0

    # -- producer map -----------------------------------------------------------------------

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return MappingProxyType(self._producers)

    @property
    def map_end_offset(self) -> int:
        return self._map_end_offset

    @property
    def is_empty(self) -> bool:
        return not self._producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def prepare_update(
        self, producer_id: int, origin: AppendOrigin, *, require_zero_first_sequence: bool = False
    ) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(
            producer_id, current, origin, require_zero_first_sequence=require_zero_first_sequence
        )

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a validated append (after its batches are in the log)."""
        if append_info.producer_id == NO_PRODUCER_ID:
            raise LogStateError(f"invalid producer id {append_info.producer_id} passed to update")
        updated = append_info.to_entry()
        current = self._producers.get(append_info.producer_id)
        if current is None:
            self._producers[append_info.producer_id] = updated
        else:
            current.update(updated)
        for txn in append_info.started_transactions:
            self._ongoing[txn.first_offset] = txn

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        """Install an entry as-is (from a snapshot, or a test), including its open transaction."""
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing[entry.current_txn_first_offset] = TxnMetadata(
                entry.producer_id, entry.current_txn_first_offset
            )

    def find_duplicate_batch(
        self, producer_id: int, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The already-appended batch a client retry duplicates, so the log can answer with its offsets."""
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.find_duplicate_batch(first_seq, last_seq, producer_epoch)

    def remove_expired_producers(self, now_ms: int) -> None:
        """Forget producers idle for ``producer_id_expiration_ms`` (never one with an open transaction)."""
        for pid in [pid for pid, entry in self._producers.items() if self._is_expired(now_ms, entry)]:
            del self._producers[pid]

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        idle_ms = now_ms - entry.last_timestamp
        return entry.current_txn_first_offset is None and idle_ms >= self.producer_id_expiration_ms

    # -- transactions -----------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction: READ_COMMITTED reads stop there."""
        return min(self._ongoing) if self._ongoing else None

    def last_stable_offset(self, completed_txn: CompletedTxn) -> int:
        """The LSO once ``completed_txn`` ends, recorded in its ``.txnindex`` entry.

        It is the start of the earliest transaction still open by another producer, else the offset
        after the marker. Computed before ``complete_txn`` so the index entry is written first.
        """
        for first_offset in sorted(self._ongoing):
            if self._ongoing[first_offset].producer_id != completed_txn.producer_id:
                return first_offset
        return completed_txn.last_offset + 1

    def complete_txn(self, completed_txn: CompletedTxn) -> None:
        if self._ongoing.pop(completed_txn.first_offset, None) is None:
            raise LogStateError(f"attempted to complete transaction {completed_txn}, which was not started")

    # -- snapshots --------------------------------------------------------------------------

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots) if self._snapshots else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots) if self._snapshots else None

    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    def snapshot_file(self, offset: int) -> Path | None:
        return self._snapshot_path(offset) if offset in self._snapshots else None

    def take_snapshot(self, durable: bool = True) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` unless a snapshot at that offset or later was taken.
        ``durable=False``: the caller fsyncs the returned file later (Kafka's ``takeSnapshot(false)``)."""
        if self._map_end_offset <= self._last_snap_offset:
            return None
        path = self._snapshot_path(self._map_end_offset)
        write_snapshot(path, [self._producers[pid] for pid in sorted(self._producers)], durable)
        log.info("wrote producer snapshot %s with %d producer ids", path, len(self._producers))
        self._snapshots.add(self._map_end_offset)
        self._last_snap_offset = self._map_end_offset
        return path

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> None:
        """Bring the state back to the newest usable snapshot within the log (Kafka ``truncateAndReload``).

        Snapshots at or below the log start and above the log end are deleted -- note ``<=``: Kafka
        drops even a snapshot exactly at the log start. If ``log_end_offset`` differs from
        ``map_end_offset`` the in-memory state is discarded and the newest remaining snapshot is loaded
        (producers expired by now are skipped), making ``map_end_offset`` the snapshot's offset; with
        no snapshot left the state is empty and ``map_end_offset`` becomes ``log_start_offset``. A
        corrupt snapshot is logged, deleted and the next older one tried. If the offsets already
        match, only the log start is applied. Either way the caller must then replay the log from
        ``map_end_offset`` to ``log_end_offset``.
        """
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._remove_and_delete_snapshot(offset)
        if log_end_offset != self._map_end_offset:
            self._producers.clear()
            self._ongoing.clear()
            self._load_from_snapshot(log_start_offset, self.clock.milliseconds())
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """The log start moved forward (retention, DeleteRecords): the map cannot end before it."""
        self._map_end_offset = max(self._map_end_offset, log_start_offset)
        latest = self.latest_snapshot_offset
        self._last_snap_offset = log_start_offset if latest is None else latest

    def truncate_full_and_start_at(self, offset: int) -> None:
        """Forget everything, delete every snapshot, and restart the map at ``offset``."""
        self._producers.clear()
        self._ongoing.clear()
        for snapshot in list(self._snapshots):
            self._remove_and_delete_snapshot(snapshot)
        self._last_snap_offset = 0
        self._map_end_offset = offset

    def load_snapshot_at(self, offset: int, data: bytes) -> None:
        """Install a snapshot fetched from remote storage as ``<offset>.snapshot`` and load it (the log
        was just restarted empty at ``offset``). Undecodable bytes raise CorruptSnapshotError before
        anything is written."""
        entries = decode_snapshot(data, f"remote producer snapshot at {offset}")
        path = self._snapshot_path(offset)
        atomic_write(path, data)
        self._snapshots.add(offset)
        self._producers.clear()
        self._ongoing.clear()
        now_ms = self.clock.milliseconds()
        for entry in entries:
            if not self._is_expired(now_ms, entry):
                self.load_producer_entry(entry)
        self._last_snap_offset = self._map_end_offset = offset

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot in [s for s in self._snapshots if s < offset]:
            self._remove_and_delete_snapshot(snapshot)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots without a segment of the same base offset (Kafka ``removeStraySnapshots``).

        The newest stray survives if it is above every segment: that is the snapshot a clean shutdown
        writes at the log end offset, and it saves replaying the active segment.
        """
        bases = set(segment_base_offsets)
        strays = sorted(s for s in self._scan_snapshots() if s not in bases)
        self._snapshots = self._scan_snapshots()
        for stray in strays[:-1]:
            self._remove_and_delete_snapshot(stray)
        if strays and bases and strays[-1] < max(bases):
            self._remove_and_delete_snapshot(strays[-1])

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Stop tracking a snapshot and rename it ``.snapshot.deleted`` for asynchronous deletion,
        along with its segment. None if it was not tracked or is already gone."""
        if offset not in self._snapshots:
            return None
        self._snapshots.discard(offset)
        path = self._snapshot_path(offset)
        target = path.with_name(path.name + DELETED_SUFFIX)
        try:
            path.rename(target)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise KafkaStorageError(f"cannot rename producer snapshot {path}: {e}") from e
        return target

    def update_parent_dir(self, partition_dir: Path) -> None:
        """Follow a renamed partition directory (e.g. ``-delete``); snapshots are named relative to it."""
        self.partition_dir = partition_dir

    # -- internals --------------------------------------------------------------------------

    def _snapshot_path(self, offset: int) -> Path:
        return self.partition_dir / offset_file_name(offset, SNAPSHOT_SUFFIX)

    def _scan_snapshots(self) -> set[int]:
        if not self.partition_dir.is_dir():
            return set()
        offsets = set()
        for path in self.partition_dir.iterdir():
            if not path.name.endswith(SNAPSHOT_SUFFIX) or not path.is_file():
                continue
            try:
                offsets.add(offset_from_file_name(path.name))
            except ValueError:
                log.warning("ignoring %s: not named after an offset", path)
        return offsets

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while (latest := self.latest_snapshot_offset) is not None:
            try:
                entries = read_snapshot(self._snapshot_path(latest))
            except CorruptSnapshotError as e:
                log.warning("failed to load producer snapshot: %s; deleting it", e)
                self._remove_and_delete_snapshot(latest)
                continue
            for entry in entries:
                if not self._is_expired(now_ms, entry):
                    self.load_producer_entry(entry)
            self._last_snap_offset = self._map_end_offset = latest
            return
        self._last_snap_offset = self._map_end_offset = log_start_offset

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        self._snapshots.discard(offset)
        path = self._snapshot_path(offset)
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"cannot delete producer snapshot {path}: {e}") from e
