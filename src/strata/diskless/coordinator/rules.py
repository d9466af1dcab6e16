"""The decisions both control planes share, as pure functions over plain values.

The in-memory and the SQLite coordinator differ in how they store and find rows; what a commit,
fetch or retention run *decides* lives here once, so the two cannot drift apart (the contract and
property tests then check the storage parts). Nothing here reads a clock or keeps state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from strata.diskless.coordinator.api import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_OFFSET,
    NO_TIMESTAMP,
    AbortedTxn,
    BatchInfo,
    CommitBatchRequest,
    CommitFileRequest,
    ControlRecordType,
    InitProducer,
    InvalidCommitError,
    IsolationLevel,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from strata.errors import ErrorCode

INT32_MAX = (1 << 31) - 1
NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN


class ProducerBatch(NamedTuple):
    """One entry of a producer's idempotence window: enough to answer a retry with the original."""

    producer_epoch: int
    base_sequence: int
    last_sequence: int
    assigned_offset: int
    batch_timestamp: int


class ProducerState(NamedTuple):
    """What one partition knows about one producer. ``window`` holds the last five accepted batches of
    the current epoch; ``txn_first_offset`` is the first offset of its ongoing transaction, if any."""

    producer_epoch: int
    coordinator_epoch: int
    window: tuple[ProducerBatch, ...]
    txn_first_offset: int | None


def init_producer_state(producer: InitProducer) -> ProducerState:
    """A classic producer's state at a switch's seal (an ``api.InitProducer``) as the coordinator keeps it:
    the last batches of its window (at most five), its epochs and its open transaction."""
    window = tuple(ProducerBatch(producer.producer_epoch, base_seq, last_seq, offset, ts)
                   for base_seq, last_seq, offset, ts in producer.batches[-NUM_BATCHES_TO_RETAIN:])
    return ProducerState(producer.producer_epoch, producer.coordinator_epoch, window, producer.txn_first_offset)


class Verdict(NamedTuple):
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    duplicate: ProducerBatch | None = None


ACCEPT = Verdict()


class OpenRun(NamedTuple):
    """The batch row a commit may still extend with the next byte-adjacent batch of its partition."""

    row_id: int
    magic: int
    timestamp_type: int
    end_byte: int


class Extent(NamedTuple):
    """A batch row as retention sees it, oldest first."""

    base_offset: int
    byte_size: int
    timestamp: int


# -- commit ------------------------------------------------------------------------------------


def validate_commit(request: CommitFileRequest) -> None:
    """Refuse a malformed commit as a whole, before anything is written."""
    if request.file_size < 0:
        raise InvalidCommitError(f"object {request.object_key} has negative size {request.file_size}")
    for i, b in enumerate(request.batches):
        where = f"batch {i} of object {request.object_key}"
        if b.byte_size <= 0:
            raise InvalidCommitError(f"{where} has size {b.byte_size}: a zero-size batch is never valid")
        if b.byte_offset < 0 or b.byte_offset + b.byte_size > request.file_size:
            raise InvalidCommitError(
                f"{where} spans bytes [{b.byte_offset}, {b.byte_offset + b.byte_size}) outside the object's "
                f"{request.file_size} bytes")
        if b.base_offset < 0 or b.last_offset < b.base_offset:
            raise InvalidCommitError(f"{where} has relative offsets {b.base_offset}..{b.last_offset}")


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Sequences wrap from Int32.MAX to 0 (Kafka accepts the wrap; Inkless's SQL rejects it)."""
    return next_sequence == last_sequence + 1 or (last_sequence == INT32_MAX and next_sequence == 0)


def check_batch(req: CommitBatchRequest, producer: ProducerState | None) -> Verdict:
    """Idempotence, fencing and transaction checks of one batch, in Kafka's order: epoch, then
    sequence (a duplicate is answered, not rejected), then transaction state."""
    if req.is_control:
        return _check_marker(req, producer)
    if not req.has_producer:
        if req.is_transactional:
            return Verdict(ErrorCode.INVALID_REQUEST, "a transactional batch needs a producer id and epoch")
        return ACCEPT
    pid = req.producer_id
    if producer is not None and producer.producer_epoch > req.producer_epoch:
        return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH,
                       f"producer {pid} has epoch {req.producer_epoch}, older than {producer.producer_epoch}")
    window = producer.window if producer is not None and producer.producer_epoch == req.producer_epoch else ()
    if not window:
        if req.base_sequence != 0:
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                           f"producer {pid} epoch {req.producer_epoch} must start at sequence 0, "
                           f"not {req.base_sequence}")
    else:
        for entry in window:
            if entry.base_sequence == req.base_sequence and entry.last_sequence == req.last_sequence:
                return Verdict(duplicate=entry)
        last = window[-1].last_sequence
        if not in_sequence(last, req.base_sequence):
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                           f"producer {pid} sent sequence {req.base_sequence} after {last}")
    if producer is not None and producer.txn_first_offset is not None and not req.is_transactional:
        return Verdict(ErrorCode.INVALID_TXN_STATE,
                       f"producer {pid} has an ongoing transaction but sent a non-transactional batch")
    return ACCEPT


def _check_marker(req: CommitBatchRequest, producer: ProducerState | None) -> Verdict:
    """Markers are not sequenced; an older producer epoch or coordinator epoch is a zombie's."""
    if not req.has_producer:
        return Verdict(ErrorCode.INVALID_REQUEST, "a control batch needs a producer id and epoch")
    if producer is None:
        return ACCEPT
    if req.producer_epoch < producer.producer_epoch:
        return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH,
                       f"marker for producer {req.producer_id} has epoch {req.producer_epoch}, "
                       f"older than {producer.producer_epoch}")
    if req.coordinator_epoch < producer.coordinator_epoch:
        return Verdict(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                       f"marker from coordinator epoch {req.coordinator_epoch}, older than "
                       f"{producer.coordinator_epoch}")
    return ACCEPT


def opens_transaction(req: CommitBatchRequest, producer: ProducerState | None) -> bool:
    return req.is_transactional and not req.is_control and (producer is None or producer.txn_first_offset is None)


def apply_batch(
    req: CommitBatchRequest, producer: ProducerState | None, assigned_offset: int, batch_timestamp: int
) -> tuple[ProducerState, AbortedTxn | None]:
    """The producer's state after an accepted batch, and the aborted transaction an ABORT closed.

    A new epoch starts a new sequence space, so the old window is dropped (Kafka's
    ``maybeUpdateProducerEpoch``). A marker ends the ongoing transaction whether or not one was open:
    an empty transaction leaves no trace in the aborted list.
    """
    same_epoch = producer is not None and producer.producer_epoch == req.producer_epoch
    window = producer.window if same_epoch and producer is not None else ()
    if req.is_control:
        first = producer.txn_first_offset if producer is not None else None
        aborted = None
        if first is not None and req.control_type is ControlRecordType.ABORT:
            aborted = AbortedTxn(req.producer_id, first, assigned_offset)
        return ProducerState(req.producer_epoch, req.coordinator_epoch, window, None), aborted
    entry = ProducerBatch(req.producer_epoch, req.base_sequence, req.last_sequence, assigned_offset, batch_timestamp)
    window = (*window, entry)[-NUM_BATCHES_TO_RETAIN:]
    coordinator_epoch = producer.coordinator_epoch if producer is not None else -1
    txn_first = producer.txn_first_offset if producer is not None else None
    if req.is_transactional and txn_first is None:
        txn_first = assigned_offset
    return ProducerState(req.producer_epoch, coordinator_epoch, window, txn_first), None


def can_extend(run: OpenRun | None, req: CommitBatchRequest, opens_txn: bool) -> bool:
    """Coalescing: extend the open run with a byte-adjacent batch of the same magic and timestamp type.

    A batch that opens a transaction always starts a row, so the last stable offset (the first offset
    of the earliest ongoing transaction) is always a row boundary and read_committed answers can stop
    there without cutting a row.
    """
    return (run is not None and not opens_txn and run.magic == req.magic
            and run.timestamp_type == req.timestamp_type and run.end_byte == req.byte_offset)


# -- reads -------------------------------------------------------------------------------------


class FetchBudget:
    """Kafka's fetch budgets: each partition gets ``min(max_partition_bytes, bytes left)``; a batch
    that would overflow it is left out, except that the first batch of the whole request is always
    returned (``minOneMessage``, once per request) so an oversized batch cannot stall a consumer."""

    def __init__(self, fetch_max_bytes: int) -> None:
        self.remaining = fetch_max_bytes
        self.min_one = True

    def take(self, rows: Iterable[BatchInfo], max_partition_bytes: int, max_batches: int) -> tuple[BatchInfo, ...]:
        limit = min(max_partition_bytes, self.remaining)
        taken: list[BatchInfo] = []
        size = 0
        for row in rows:
            if size + row.byte_size > limit and not (self.min_one and not taken):
                break
            taken.append(row)
            size += row.byte_size
            if 0 < max_batches <= len(taken):
                break
        if taken:
            self.min_one = False
            self.remaining = max(0, self.remaining - size)
        return tuple(taken)


def last_stable_offset(log_start: int, high_watermark: int, first_ongoing: int | None) -> int:
    """The first offset of the earliest ongoing transaction, else the high watermark; never below the
    log start (Kafka raises the first unstable offset to the log start when records are deleted). The log
    start is the cross-tier one when there is one: a switched partition's open transaction may have begun
    in its classic part, below the WAL's start."""
    return high_watermark if first_ongoing is None else max(log_start, first_ongoing)


def overlapping_aborted(aborted: Iterable[AbortedTxn], start: int, end: int) -> tuple[AbortedTxn, ...]:
    """Aborted transactions that overlap ``[start, end)``, in marker order (Kafka's ``.txnindex`` lookup)."""
    return tuple(sorted((a for a in aborted if a.last_offset >= start and a.first_offset < end),
                        key=lambda a: a.last_offset))


def list_offsets_answer(
    req: ListOffsetsRequest,
    *,
    log_start: int,
    high_watermark: int,
    last_stable: int,
    remote_log_start: int | None,
    isolation_level: IsolationLevel,
    max_timestamp_lookup: Callable[[], tuple[int, int] | None],
    timestamp_lookup: Callable[[int], tuple[int, int] | None],
) -> ListOffsetsResponse:
    """One ListOffsets answer. Lookups return ``(timestamp, offset)``: for MAX_TIMESTAMP the last offset
    of the first row with the largest effective timestamp, for ``t >= 0`` the base offset of the first
    row whose effective timestamp is ``>= t``. As in Kafka, read_committed never answers an offset at or
    past the last stable offset (LATEST is the LSO itself)."""
    fetchable = last_stable if isolation_level is IsolationLevel.READ_COMMITTED else high_watermark

    def answer(timestamp: int, offset: int) -> ListOffsetsResponse:
        return ListOffsetsResponse(ErrorCode.NONE, req.topic_id, req.partition, timestamp, offset)

    ts = req.timestamp
    if ts == EARLIEST_TIMESTAMP:
        return answer(NO_TIMESTAMP, log_start if remote_log_start is None else remote_log_start)
    if ts == EARLIEST_LOCAL_TIMESTAMP:
        return answer(NO_TIMESTAMP, log_start)
    if ts == LATEST_TIMESTAMP:
        return answer(NO_TIMESTAMP, fetchable)
    if ts == LATEST_TIERED_TIMESTAMP:
        return answer(NO_TIMESTAMP, NO_OFFSET)
    if ts == MAX_TIMESTAMP:
        found = max_timestamp_lookup()
    elif ts >= 0:
        found = timestamp_lookup(ts)
        if found is not None:
            found = (found[0], max(found[1], log_start))
    else:
        return ListOffsetsResponse(ErrorCode.INVALID_REQUEST, req.topic_id, req.partition)
    if found is None or found[1] >= fetchable:
        return answer(NO_TIMESTAMP, NO_OFFSET)
    return answer(*found)


# -- retention and pruning -----------------------------------------------------------------------


def retention_boundary(
    oldest_first: Iterable[Extent], *, total_bytes: int, high_watermark: int, retention_bytes: int,
    retention_ms: int, now_ms: int, max_batches: int,
) -> int:
    """The offset retention moves the log start to: the base of the first row whose size from there to
    the end fits ``retention_bytes`` and whose effective timestamp is not older than ``retention_ms``
    (the high watermark when none is), but deleting at most ``max_batches`` rows (0 = no cap)."""
    remaining = total_bytes
    for i, row in enumerate(oldest_first):
        if 0 < max_batches <= i:
            return row.base_offset
        size_ok = retention_bytes < 0 or remaining <= retention_bytes
        time_ok = retention_ms < 0 or row.timestamp >= now_ms - retention_ms
        if size_ok and time_ok:
            return row.base_offset
        remaining -= row.byte_size
    return high_watermark


def pruned_log_start(log_start: int, high_watermark: int, highest_tiered: int, first_remaining: int | None) -> int:
    """The log start after dropping rows with ``last_offset <= highest_tiered`` (only moves forward)."""
    if first_remaining is None:
        return min(high_watermark, max(highest_tiered + 1, log_start))
    return max(log_start, first_remaining)


# -- state comparison --------------------------------------------------------------------------


def digest_tables(tables: Mapping[str, Sequence[tuple[object, ...]]]) -> str:
    """A SHA-256 over a canonical dump (table name, then its rows in key order), so replicas -- and the
    two implementations -- can compare their logical state without comparing database files."""
    h = hashlib.sha256()
    for name in sorted(tables):
        h.update(f"{name}\n".encode())
        for row in tables[name]:
            h.update(repr(row).encode())
            h.update(b"\n")
    return h.hexdigest()
