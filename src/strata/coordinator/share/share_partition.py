"""The in-memory state of one KIP-932 share partition: Kafka's ``SharePartition``, without the I/O.

The leader of a data partition hands its records out to the consumers of each share group under
*acquisition locks* and tracks what they do with them. This module is that state machine and nothing
else: it is synchronous, reads no clock (every call that needs the time takes ``now_ms``), starts no timer
and writes nothing. Persistence is expressed as a :class:`PendingUpdate` that the caller writes with
WriteShareGroupState and then hands back to :meth:`SharePartition.commit` or
:meth:`SharePartition.rollback`; the caller schedules a timer at :meth:`SharePartition.next_lock_deadline`
and calls :meth:`SharePartition.expire_locks` when it fires. One caller at a time (the broker's event loop);
the object has no locks of its own.

Semantics follow ``core/src/main/java/kafka/server/share/SharePartition.java`` and
``server/.../share/fetch/{InFlightState,InFlightBatch,RecordState}.java`` of Kafka 4.2:

* record states AVAILABLE 0, ACQUIRED 1, ACKNOWLEDGED 2, ARCHIVED 4; only AVAILABLE -> ACQUIRED and
  ACQUIRED -> AVAILABLE / ACKNOWLEDGED / ARCHIVED happen, ACKNOWLEDGED and ARCHIVED are terminal;
* the share-partition start offset (SPSO) has every offset below it finished; the end offset (SPEO) is the
  last offset ever handed out; the records in flight are SPEO - SPSO + 1 and are capped by
  ``max_in_flight`` (``group.share.partition.max.record.locks``); at the cap only offsets already in
  flight can be handed out again;
* every acquisition counts one delivery; a record released or timed out at ``delivery_count_limit``
  deliveries is archived instead of made available; records at ``max(2, ceil(limit / 2))`` deliveries or
  more are handed out on their own or in halving pieces so that one poison record cannot exhaust the
  delivery attempts of a whole batch;
* acknowledgements are validated as a whole (every offset ACQUIRED by the member, not in transition, lock
  not expired) and become visible at once but stay *in transition* until the caller commits the write;
  a failed write rolls them back, to AVAILABLE (or ARCHIVED) if the lock ran out meanwhile;
* after a committed write the SPSO moves past the finished prefix and the finished batches are dropped.

The cache is what Kafka's ``cachedState`` is: batches in offset order keyed by their first offset, each
with one state for the whole batch until something needs a different state for part of it, then one
state per offset. Handing out, acknowledging and timing out whole batches is O(batches), not O(records).

Deviations from Kafka, all deliberate:

* every cached offset is >= SPSO: a log-start move drops the records below it, including ACQUIRED ones
  (Kafka keeps those until their lock expires and then archives them; an acknowledgement of offsets below
  the SPSO is ignored either way);
* the gaps between persisted state batches are filled with AVAILABLE batches of delivery count 0 at
  :meth:`SharePartition.initialize` instead of Kafka's "gap window"; so gap records are handed out on
  those boundaries rather than on the log's batch boundaries;
* in record-limit mode the part of a new log batch beyond ``max_records`` is cached as its own AVAILABLE
  batch (delivery count 0) rather than as per-offset states of one batch;
* an acknowledgement of a record whose lock deadline has passed fails with INVALID_RECORD_STATE even if
  :meth:`SharePartition.expire_locks` has not run yet (Kafka races its timer thread);
* acknowledgement batches must be in order and must not overlap (INVALID_REQUEST; Kafka's request check
  lets two batches share one offset and then fails on the second with INVALID_RECORD_STATE); a batch's
  per-offset types that are all equal are treated as one type (no per-offset split);
* a failed acknowledgement changes nothing, RENEW included (Kafka renews locks before it finds the error);
  RENEW (4) is always accepted here: refusing it below ShareAcknowledge v2 or without IsRenewAck is the
  request handler's check, as it is KafkaApis' in Kafka;
* :meth:`SharePartition.state_batches` (a full snapshot, which Kafka's leader never writes) reports records
  in transition by their committed state, and ACQUIRED records as a release would leave them: AVAILABLE
  with their current delivery count (the delivery happened), ARCHIVED at the limit. Kafka's coordinator
  would still hold the count from before the acquisition;
* the log-start move, stale-batch and aborted-transaction archiving move the SPSO at once; a lock timeout
  and a rolled-back write move it when the caller completes the returned update, as a committed one does.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from strata.coordinator.share.records import StateBatch
from strata.errors import ErrorCode

__all__ = [
    "INVALID_RECORD_STATE",
    "AckBatch",
    "AcknowledgeType",
    "AcquiredRecords",
    "PendingUpdate",
    "RecordState",
    "RecordView",
    "SharePartition",
    "ShareStateSnapshot",
    "StateBatch",
]

# Kafka's INVALID_RECORD_STATE (InvalidRecordStateException); strata.errors.ErrorCode has no member for it yet.
INVALID_RECORD_STATE = 121
_NONE = int(ErrorCode.NONE)
_INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)


class RecordState(IntEnum):
    """A record's delivery state; the values are the ``DeliveryState`` bytes of the share-state records."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})
_AVAILABLE = RecordState.AVAILABLE
_ACQUIRED = RecordState.ACQUIRED
_ARCHIVED = RecordState.ARCHIVED


class AcknowledgeType(IntEnum):
    """The ``AcknowledgeTypes`` bytes of ShareFetch/ShareAcknowledge (0 is a gap: no record at that offset)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


# Where each acknowledgement type sends a record (RENEW keeps it ACQUIRED and restarts its lock).
_ACK_TARGET = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}
_MIN_THROTTLE_LIMIT = 2  # Kafka's MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT


class AcquiredRecords(NamedTuple):
    """One ``AcquiredRecords`` entry of a ShareFetch response."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AckBatch(NamedTuple):
    """One ``AcknowledgementBatches`` entry: a single type for the range or one type per offset."""

    first_offset: int
    last_offset: int
    acknowledge_types: Sequence[int]


class RecordView(NamedTuple):
    """One cached record as :meth:`SharePartition.records` shows it (for describe, metrics and tests)."""

    offset: int
    state: RecordState
    delivery_count: int
    member_id: str
    in_transition: bool


class ShareStateSnapshot(NamedTuple):
    """Everything a ShareSnapshot record needs from the partition."""

    start_offset: int
    state_epoch: int
    leader_epoch: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class PendingUpdate:
    """A state change the caller must persist (WriteShareGroupState) and then commit or roll back.

    ``state_batches`` are the changed ranges with their new states, ``start_offset`` and
    ``delivery_complete_count`` the partition's values when the update was made, as Kafka writes them. An
    update with no state batches (a RENEW-only acknowledgement, a release of a member holding nothing) needs
    no write: commit it straight away. ``in_transition`` names the offsets whose change waits on this update.
    """

    update_id: int
    start_offset: int
    state_epoch: int
    leader_epoch: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    in_transition: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    @property
    def needs_write(self) -> bool:
        return bool(self.state_batches)


class _Pending(NamedTuple):
    """What a state was before the transition that ``update_id`` carries: a rollback restores it."""

    update_id: int
    state: RecordState
    member_id: str
    deadline_ms: int | None


class _State:
    """One record's or one whole batch's state (Kafka's ``InFlightState``).

    ``deadline_ms`` is the acquisition lock's deadline while ACQUIRED. ``pending`` is set while a write is
    outstanding (Kafka's rollback state): such a record can be neither acknowledged nor handed out, and the
    SPSO does not move past it. ``sticky`` marks a record archived while in transition (log compaction,
    aborted transaction): a rollback must not revive it.
    """

    __slots__ = ("state", "delivery_count", "member_id", "deadline_ms", "pending", "sticky")

    def __init__(self, state: RecordState, delivery_count: int, member_id: str = "",
                 deadline_ms: int | None = None, pending: _Pending | None = None, sticky: bool = False) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.deadline_ms = deadline_ms
        self.pending = pending
        self.sticky = sticky

    def copy(self) -> _State:
        return _State(self.state, self.delivery_count, self.member_id, self.deadline_ms, self.pending, self.sticky)

    def acquirable(self) -> bool:
        return self.state is _AVAILABLE and self.pending is None

    def committed(self, delivery_count_limit: int) -> tuple[RecordState, int]:
        """The state a snapshot records: the pre-transition one while a write is outstanding, and ACQUIRED as
        a release would leave it (locks do not survive a leader change; the delivery did happen, so its count
        stays, and a record on its last delivery is archived rather than delivered once more)."""
        state = self.pending.state if self.pending is not None and not self.sticky else self.state
        if state is _ACQUIRED:
            state = _ARCHIVED if self.delivery_count >= delivery_count_limit else _AVAILABLE
        return state, self.delivery_count

    def __repr__(self) -> str:
        return (f"_State({self.state.name}, dc={self.delivery_count}, member={self.member_id!r}, "
                f"deadline={self.deadline_ms}, pending={self.pending is not None}, sticky={self.sticky})")


class _Batch:
    """A cached range (Kafka's ``InFlightBatch``): one state for all of it, or one per offset after a split."""

    __slots__ = ("first", "last", "whole", "offsets")

    def __init__(self, first: int, last: int, state: _State) -> None:
        self.first = first
        self.last = last
        self.whole: _State | None = state
        self.offsets: list[_State] | None = None

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def split(self) -> list[_State]:
        """Switch to per-offset states (each a copy of the batch state, lock deadline and transition)."""
        if self.offsets is None:
            whole = self.whole
            assert whole is not None
            self.offsets = [whole.copy() for _ in range(self.size)]
            self.whole = None
        return self.offsets

    def runs(self, lo: int, hi: int) -> Iterator[tuple[int, int, _State]]:
        """(first, last, state) covering the batch's part of [lo, hi]: one run for a whole batch (the whole
        batch's state, even if [lo, hi] covers only part of it), else one per offset."""
        a, b = max(lo, self.first), min(hi, self.last)
        if a > b:
            return
        if self.offsets is None:
            assert self.whole is not None
            yield a, b, self.whole
            return
        base = self.first
        offsets = self.offsets
        for offset in range(a, b + 1):
            yield offset, offset, offsets[offset - base]

    def trim_front(self, new_first: int) -> None:
        if self.offsets is not None:
            del self.offsets[: new_first - self.first]
        self.first = new_first

    def terminal_count(self, lo: int | None = None, hi: int | None = None) -> int:
        lo = self.first if lo is None else lo
        hi = self.last if hi is None else hi
        return sum(b - a + 1 for a, b, st in self.runs(lo, hi) if st.state in _TERMINAL)

    def __repr__(self) -> str:
        body = repr(self.whole) if self.offsets is None else f"{len(self.offsets)} offsets"
        return f"_Batch({self.first}-{self.last}, {body})"


def _first_of(batch: _Batch) -> int:
    return batch.first


class _Cache:
    """Batches in offset order. New batches only ever go at the end and old ones leave from the front, so a
    list with a moving head (compacted now and then) is the sorted map; lookups bisect on first offsets."""

    __slots__ = ("_items", "_head")

    def __init__(self) -> None:
        self._items: list[_Batch] = []
        self._head = 0

    def __len__(self) -> int:
        return len(self._items) - self._head

    def __iter__(self) -> Iterator[_Batch]:
        return itertools.islice(self._items, self._head, None)

    def front(self) -> _Batch:
        return self._items[self._head]

    def back(self) -> _Batch:
        return self._items[-1]

    def append(self, batch: _Batch) -> None:
        if len(self) and batch.first <= self._items[-1].last:
            raise AssertionError(f"batch {batch} does not follow {self._items[-1]}")
        self._items.append(batch)

    def pop_front(self) -> None:
        self._head += 1
        if self._head == len(self._items):
            self.clear()
        elif self._head > 64 and self._head * 2 > len(self._items):
            del self._items[: self._head]
            self._head = 0

    def clear(self) -> None:
        self._items.clear()
        self._head = 0

    def floor(self, offset: int) -> _Batch | None:
        """The last batch whose first offset is <= ``offset``."""
        i = bisect_right(self._items, offset, lo=self._head, key=_first_of) - 1
        return self._items[i] if i >= self._head else None

    def overlapping(self, lo: int, hi: int) -> list[_Batch]:
        """The batches with any offset in [lo, hi], in order."""
        items = self._items
        i = bisect_right(items, lo, lo=self._head, key=_first_of) - 1
        if i < self._head or items[i].last < lo:
            i += 1
        out: list[_Batch] = []
        while i < len(items) and items[i].first <= hi:
            out.append(items[i])
            i += 1
        return out


class _Runs:
    """Collects (first, last, key) runs in offset order, merging each with the previous run when they touch
    and have the same key: per-offset work still produces few persisted batches, lock timers and ranges."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[list[Any]] = []

    def add(self, first: int, last: int, key: Any) -> None:
        items = self.items
        if items and items[-1][1] == first - 1 and items[-1][2] == key:
            items[-1][1] = last
        else:
            items.append([first, last, key])

    def __bool__(self) -> bool:
        return bool(self.items)

    def triples(self) -> Iterator[tuple[int, int, Any]]:
        for item in self.items:
            yield item[0], item[1], item[2]


def _state_batches(runs: _Runs) -> tuple[StateBatch, ...]:
    out = []
    for first, last, key in runs.triples():
        state, count = key
        out.append(StateBatch(first, last, int(state), count))
    return tuple(out)


class SharePartition:
    """The share-partition state of one (group, topic, partition) on the partition's leader.

    Call :meth:`initialize` with the state read back from the share coordinator before anything else.
    """

    def __init__(self, group_id: str, topic_id: object, partition: int, *, delivery_count_limit: int = 5,
                 max_in_flight: int = 2000, lock_duration_ms: int = 30_000) -> None:
        if delivery_count_limit < 1 or max_in_flight < 1 or lock_duration_ms < 0:
            raise ValueError("delivery_count_limit and max_in_flight must be >= 1, lock_duration_ms >= 0")
        self.group_id = group_id
        self.topic_id = topic_id
        self.partition = partition
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        # Public and mutable: the group's share.record.lock.duration.ms can change at run time; new locks use
        # the new value.
        self.lock_duration_ms = lock_duration_ms
        # Kafka's throttleRecordsDeliveryLimit: records delivered this often are handed out in small pieces.
        self.throttle_limit = max(_MIN_THROTTLE_LIMIT, -(-delivery_count_limit // 2))
        self._cache = _Cache()
        self._start = 0
        self._state_epoch = 0
        self._leader_epoch = 0
        self._initialized = False
        # Number of cached records in a terminal state (all cached records are >= SPSO): KIP-1226's
        # DeliveryCompleteCount, which the coordinator uses for lag.
        self._complete = 0
        # Kafka's findNextFetchOffset: something may be AVAILABLE in the cache, so look for it.
        self._find_next = False
        # Lock deadlines: (deadline, seq, first, last). Every ACQUIRED state with deadline d has an entry
        # (d, .., range covering it); entries whose states moved on are dropped when they come up.
        self._locks: list[tuple[int, int, int, int]] = []
        self._seq = itertools.count()
        self._update_ids = itertools.count(1)
        self._outstanding: set[int] = set()

    # ------------------------------------------------------------------ state and views

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def start_offset(self) -> int:
        """SPSO: every offset below it is finished."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO: the last offset in flight, or SPSO - 1 when nothing is (Kafka keeps SPSO there instead)."""
        return self._cache.back().last if len(self._cache) else self._start - 1

    @property
    def in_flight_count(self) -> int:
        """SPEO - SPSO + 1, finished records not yet pruned included; what ``max_in_flight`` caps."""
        return self.end_offset - self._start + 1

    @property
    def delivery_complete_count(self) -> int:
        """Records in flight that are ACKNOWLEDGED or ARCHIVED (visible state, transitions included)."""
        return self._complete

    @property
    def state_epoch(self) -> int:
        return self._state_epoch

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def cached_batch_count(self) -> int:
        """Kafka's InFlightBatchCount gauge."""
        return len(self._cache)

    @property
    def outstanding_updates(self) -> int:
        return len(self._outstanding)

    def records(self, first: int | None = None, last: int | None = None) -> Iterator[RecordView]:
        """Every cached record in [first, last] (default: all), one per offset; O(records)."""
        if not len(self._cache):
            return
        lo = self._cache.front().first if first is None else first
        hi = self._cache.back().last if last is None else last
        for batch in self._cache.overlapping(lo, hi):
            for a, b, st in batch.runs(lo, hi):
                for offset in range(a, b + 1):
                    yield RecordView(offset, st.state, st.delivery_count, st.member_id, st.pending is not None)

    def state_batches(self) -> list[StateBatch]:
        """The committed state to persist in a snapshot: every cached range except AVAILABLE records never
        delivered (those are implied between the SPSO and the last batch); adjacent equal ranges merged."""
        return list(self._snapshot_runs()[0])

    def snapshot(self) -> ShareStateSnapshot:
        batches, complete = self._snapshot_runs()
        return ShareStateSnapshot(self._start, self._state_epoch, self._leader_epoch, complete, batches)

    def _snapshot_runs(self) -> tuple[tuple[StateBatch, ...], int]:
        runs = _Runs()
        complete = 0
        for batch in self._cache:
            for a, b, st in batch.runs(batch.first, batch.last):
                state, count = st.committed(self.delivery_count_limit)
                if state in _TERMINAL:
                    complete += b - a + 1
                if state is _AVAILABLE and count == 0:
                    continue
                runs.add(a, b, (state, count))
        return _state_batches(runs), complete

    # ------------------------------------------------------------------ initialization

    def initialize(self, start_offset: int, state_batches: Iterable[StateBatch], state_epoch: int,
                   leader_epoch: int) -> None:
        """Load the state read back with ReadShareGroupState.

        ``start_offset`` must already be resolved: a persisted -1 (a partition the group never read) is the
        caller's ``share.auto.offset.reset`` lookup. The batches must be ordered, non-overlapping and at or
        above the start offset (else ValueError, as Kafka fails the load). They are cached with no owner; an
        ACQUIRED state (which Kafka never writes) loads as AVAILABLE. Gaps between them are records nobody
        finished, cached as AVAILABLE with no deliveries so that they are handed out again.
        """
        if self._initialized:
            raise RuntimeError("share partition already initialized")
        if start_offset < 0:
            raise ValueError(f"start offset {start_offset} is not resolved")
        cache = _Cache()
        complete = 0
        previous_last = start_offset - 1
        for sb in state_batches:
            first, last, count = sb.first_offset, sb.last_offset, sb.delivery_count
            state = RecordState(sb.delivery_state)
            if first < start_offset or last < first or first <= previous_last or count < 0:
                raise ValueError(f"invalid state batch {sb} after offset {previous_last} "
                                 f"(start offset {start_offset})")
            if state is _ACQUIRED:
                state = _AVAILABLE
            if first > previous_last + 1:
                cache.append(_Batch(previous_last + 1, first - 1, _State(_AVAILABLE, 0)))
            cache.append(_Batch(first, last, _State(state, count)))
            if state in _TERMINAL:
                complete += last - first + 1
            previous_last = last
        self._cache = cache
        self._start = start_offset
        self._complete = complete
        self._state_epoch = state_epoch
        self._leader_epoch = leader_epoch
        self._find_next = bool(len(cache))
        self._initialized = True
        self._advance()

    def _check_active(self) -> None:
        if not self._initialized:
            raise RuntimeError("share partition not initialized")

    # ------------------------------------------------------------------ fetch side

    def next_fetch_offset(self) -> int:
        """Where the next log read should start: the first AVAILABLE record (released, timed out, left by a
        closed session, or never delivered), else the offset after SPEO."""
        self._check_active()
        if self._find_next:
            for batch in self._cache:
                if batch.offsets is None:
                    assert batch.whole is not None
                    if batch.whole.acquirable():
                        return batch.first
                    continue
                for i, st in enumerate(batch.offsets):
                    if st.acquirable():
                        return batch.first + i
            self._find_next = False
        return self.end_offset + 1

    def can_acquire(self) -> bool:
        """Kafka's canAcquireRecords: worth reading the log for this partition at all."""
        return self.next_fetch_offset() != self.end_offset + 1 or self.in_flight_count < self.max_in_flight

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int]], max_records: int, batch_size: int,
                now_ms: int, record_limit_mode: bool = False, *, fetch_offset: int | None = None,
                aborted: Sequence[tuple[int, int]] = ()) -> list[AcquiredRecords]:
        """Hand out records of a log read to ``member_id``; what is returned is ACQUIRED under a lock.

        ``batches`` are the (base offset, last offset) of the log batches the read returned, in order;
        ``fetch_offset`` is where the read started (default: the first batch's base offset, which turns off
        the archiving of cached records the log no longer has). ``max_records`` is a soft cap (whole cached
        batches and whole log batches are handed out) unless ``record_limit_mode``, where it is exact and
        ``batch_size`` is ignored. New records are cut into acquired ranges of about ``batch_size`` at log
        batch boundaries. ``aborted`` are the (first, last) of aborted-transaction batches in the read (under
        read_committed): they are archived and left out of the answer.
        """
        self._check_active()
        if not member_id:
            raise ValueError("member id must not be empty")
        if max_records <= 0 or not batches:
            return []
        first_base, last_offset = batches[0][0], batches[-1][1]
        if last_offset < self._start:
            return []
        if fetch_offset is None:
            fetch_offset = first_base
        end = self.end_offset
        hi = last_offset
        max_to_acquire = min(max_records, self.max_in_flight - self.in_flight_count)
        if max_to_acquire <= 0:
            if fetch_offset > end:
                return []
            # At the cap, only offsets already in flight can go out again.
            max_to_acquire = min(max_records, end - fetch_offset + 1)
            hi = min(hi, end)

        archived = 0
        if fetch_offset < first_base:
            # The log has nothing between the read offset and its first batch any more (compaction): archive
            # what the cache still offers there so that the SPSO and the next fetch offset can move on.
            archived = self._archive(fetch_offset, first_base - 1, frozenset({_AVAILABLE}))

        deadline = now_ms + self.lock_duration_ms
        result: list[AcquiredRecords] = []
        acquired = 0
        stopped = False
        lo = first_base
        for batch in self._cache.overlapping(lo, hi):
            if acquired >= max_to_acquire:
                break
            remaining = max_to_acquire - acquired
            full = batch.first >= lo and batch.last <= hi
            limit_subset = record_limit_mode and batch.size > remaining
            throttle = self._should_throttle(batch, lo, hi)
            if throttle and acquired > 0:
                # Deliver the much-delivered records in a later fetch, on their own.
                stopped = True
                break
            if not full or batch.offsets is not None or limit_subset or throttle:
                if batch.offsets is None:
                    assert batch.whole is not None
                    if not batch.whole.acquirable():
                        continue
                    batch.split()
                got = self._acquire_offsets(batch, member_id, record_limit_mode, remaining, lo, hi, deadline,
                                            result)
                acquired += got
                if throttle and got > 0:
                    stopped = True
                    break
                continue
            st = batch.whole
            assert st is not None
            if not st.acquirable():
                continue
            self._grab(st, member_id, deadline)
            self._lock(deadline, batch.first, batch.last)
            result.append(AcquiredRecords(batch.first, batch.last, st.delivery_count))
            acquired += batch.size

        new_first = max(lo, self._start, end + 1)
        if not stopped and acquired < max_to_acquire and new_first <= hi:
            self._acquire_new(member_id, batches, record_limit_mode, new_first, hi, batch_size,
                              max_to_acquire - acquired, deadline, result)

        if aborted:
            for first, last in aborted:
                archived += self._archive(first, last, frozenset({_AVAILABLE, _ACQUIRED}))
            result = _subtract_ranges(result, aborted)
        if archived:
            self._advance()
        return result

    def _should_throttle(self, batch: _Batch, lo: int, hi: int) -> bool:
        """Whether the acquirable part of ``batch`` in [lo, hi] holds a record delivered throttle_limit times."""
        limit = self.throttle_limit
        if batch.offsets is None:
            st = batch.whole
            assert st is not None
            return st.acquirable() and st.delivery_count >= limit
        return any(st.acquirable() and st.delivery_count >= limit for _, _, st in batch.runs(lo, hi))

    def _acquire_offsets(self, batch: _Batch, member_id: str, record_limit_mode: bool, max_records: int,
                         lo: int, hi: int, deadline: int, result: list[AcquiredRecords]) -> int:
        """Kafka's acquireSubsetBatchRecords over a split batch: hand out its AVAILABLE offsets in [lo, hi].

        A record on its last delivery attempt goes out alone; once a record at the throttle limit is met, at
        most size >> (count - limit + 1) records go out (halving with every further attempt)."""
        assert batch.offsets is not None
        limit = self.delivery_count_limit
        throttle_limit = self.throttle_limit
        throttled_max = -1
        got = 0
        runs = _Runs()
        for offset, _, st in batch.runs(lo, hi):
            if not st.acquirable():
                continue
            count = st.delivery_count
            if limit > 2 and count == limit - 1 and got > 0:
                break
            if count >= throttle_limit and throttled_max < 0:
                throttled_max = max(1, len(batch.offsets) >> (count - throttle_limit + 1))
            self._grab(st, member_id, deadline)
            runs.add(offset, offset, st.delivery_count)
            got += 1
            if st.delivery_count == limit and limit > 2:
                break
            if record_limit_mode and got == max_records:
                break
            if got == throttled_max:
                break
        for first, last, count in runs.triples():
            result.append(AcquiredRecords(first, last, count))
            self._lock(deadline, first, last)
        return got

    def _acquire_new(self, member_id: str, batches: Sequence[tuple[int, int]], record_limit_mode: bool,
                     first: int, hi: int, batch_size: int, max_records: int, deadline: int,
                     result: list[AcquiredRecords]) -> None:
        """Cache and hand out offsets past SPEO (Kafka's acquireNewBatchRecords and createBatches)."""
        if not len(self._cache):
            # Nothing in flight: the log has no records between the SPSO and the first new one (Kafka moves
            # the SPSO to the first new batch too).
            self._start = first
        last = hi
        if max_records < last - first + 1:
            # Soft cap: up to the end of the log batch holding the last record allowed.
            last = min(hi, _end_of_batch_containing(batches, first + max_records - 1))
        if record_limit_mode:
            acquired_last = min(last, first + max_records - 1)
            self._cache.append(_Batch(first, acquired_last, _State(_ACQUIRED, 1, member_id, deadline)))
            self._lock(deadline, first, acquired_last)
            result.append(AcquiredRecords(first, acquired_last, 1))
            if acquired_last < last:
                # The rest of the log batch is cached as never delivered, for the next fetch.
                self._cache.append(_Batch(acquired_last + 1, last, _State(_AVAILABLE, 0)))
                self._find_next = True
            return
        cuts: list[tuple[int, int]] = []
        current = first
        if batch_size > 0 and last - first + 1 > batch_size:
            for base, _ in batches:
                if base > last:
                    break
                if base - current >= batch_size:
                    cuts.append((current, base - 1))
                    current = base
        cuts.append((current, last))
        for a, b in cuts:
            self._cache.append(_Batch(a, b, _State(_ACQUIRED, 1, member_id, deadline)))
            self._lock(deadline, a, b)
            result.append(AcquiredRecords(a, b, 1))

    def archive(self, first: int, last: int) -> int:
        """Archive the AVAILABLE and ACQUIRED records in [first, last] (an aborted transaction's batch under
        read_committed); returns how many. Not persisted, as in Kafka: the SPSO moves and a later write carries
        it, and after a leader change the records are read, found aborted and archived again."""
        self._check_active()
        archived = self._archive(first, last, frozenset({_AVAILABLE, _ACQUIRED}))
        if archived:
            self._advance()
        return archived

    def _archive(self, lo: int, hi: int, states: frozenset[RecordState]) -> int:
        archived = 0
        for batch in self._cache.overlapping(lo, hi):
            if batch.offsets is None:
                st = batch.whole
                assert st is not None
                if st.state not in states:
                    continue
                if lo <= batch.first and batch.last <= hi:
                    self._archive_state(st, batch.size)
                    archived += batch.size
                    continue
                batch.split()
            for _, _, st in batch.runs(lo, hi):
                if st.state in states:
                    self._archive_state(st, 1)
                    archived += 1
        return archived

    def _archive_state(self, st: _State, size: int) -> None:
        if st.pending is not None:
            st.sticky = True
        self._set(st, size, _ARCHIVED)
        st.member_id = ""
        st.deadline_ms = None

    # ------------------------------------------------------------------ acknowledgement side

    def acknowledge(self, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]],
                    now_ms: int) -> tuple[int, PendingUpdate | None]:
        """Apply a member's acknowledgements: all of them, or (with an error code) none.

        Returns (NONE, update) for the caller to persist and then commit or roll back, or
        (INVALID_REQUEST, None) for a malformed batch, an unknown type or a range past the cached records, or
        (INVALID_RECORD_STATE, None) when some offset is not ACQUIRED by this member, is in transition, or its
        lock has expired. Ranges entirely below the SPSO are ignored. ACCEPT -> ACKNOWLEDGED, REJECT and gap
        -> ARCHIVED, RELEASE -> AVAILABLE (ARCHIVED at the delivery limit), RENEW restarts the lock and needs
        no write.
        """
        self._check_active()
        start = self._start
        previous_last: int | None = None
        normalized: list[tuple[int, int, list[int]]] = []
        for first, last, types in batches:
            types = list(types)
            if (first > last or not types or (len(types) > 1 and len(types) != last - first + 1)
                    or (previous_last is not None and first <= previous_last)
                    or any(t not in _VALID_ACK_TYPES for t in types)):
                return _INVALID_REQUEST, None
            previous_last = last
            if len(types) > 1 and all(t == types[0] for t in types):
                types = types[:1]
            normalized.append((first, last, types))

        # Validate everything before changing anything.
        plan: list[tuple[_Batch, int, int, int, list[int]]] = []
        for first, last, types in normalized:
            if last < start:
                continue
            lo = max(first, start)
            floor = self._cache.floor(lo)
            if floor is None:
                # Nothing cached at or before lo: nothing was handed out there, unless lo is in a stretch the
                # log has no records for (compaction) before the first cached batch.
                if not len(self._cache) or self._cache.front().first > last:
                    return INVALID_RECORD_STATE, None
                floor = self._cache.front()
            entries = self._cache.overlapping(floor.first, last)
            if entries[-1].last < lo or last > entries[-1].last:
                return _INVALID_REQUEST, None
            for batch in entries:
                if batch.last < lo:
                    continue
                for _, _, st in batch.runs(lo, last):
                    if (st.state is not _ACQUIRED or st.member_id != member_id or st.pending is not None
                            or (st.deadline_ms is not None and st.deadline_ms <= now_ms)):
                        return INVALID_RECORD_STATE, None
                plan.append((batch, lo, last, first, types))

        update_id = next(self._update_ids)
        deadline = now_ms + self.lock_duration_ms
        changes = _Runs()
        transitions = _Runs()
        renewed = _Runs()
        for batch, lo, hi, first, types in plan:
            if batch.offsets is None and len(types) == 1 and lo <= batch.first and batch.last <= hi:
                st = batch.whole
                assert st is not None
                if types[0] == AcknowledgeType.RENEW:
                    st.deadline_ms = deadline
                    renewed.add(batch.first, batch.last, None)
                else:
                    self._begin(st, batch.size, _ACK_TARGET[AcknowledgeType(types[0])], update_id)
                    changes.add(batch.first, batch.last, (st.state, st.delivery_count))
                    transitions.add(batch.first, batch.last, None)
                continue
            batch.split()
            for offset, _, st in batch.runs(lo, hi):
                ack = types[0] if len(types) == 1 else types[offset - first]
                if ack == AcknowledgeType.RENEW:
                    st.deadline_ms = deadline
                    renewed.add(offset, offset, None)
                else:
                    self._begin(st, 1, _ACK_TARGET[AcknowledgeType(ack)], update_id)
                    changes.add(offset, offset, (st.state, st.delivery_count))
                    transitions.add(offset, offset, None)
        for a, b, _ in renewed.triples():
            self._lock(deadline, a, b)
        return _NONE, self._new_update(update_id, changes, transitions)

    def release_member(self, member_id: str) -> PendingUpdate:
        """Give back everything ``member_id`` holds (its share session closed or it left the group): its
        ACQUIRED records become AVAILABLE, or ARCHIVED at the delivery limit, pending the write."""
        self._check_active()
        update_id = next(self._update_ids)
        changes = _Runs()
        transitions = _Runs()
        for batch in self._cache:
            for a, b, st in batch.runs(batch.first, batch.last):
                if st.state is _ACQUIRED and st.member_id == member_id and st.pending is None:
                    self._begin(st, b - a + 1, _AVAILABLE, update_id)
                    changes.add(a, b, (st.state, st.delivery_count))
                    transitions.add(a, b, None)
        return self._new_update(update_id, changes, transitions)

    def _begin(self, st: _State, size: int, target: RecordState, update_id: int) -> None:
        """Start a transition out of ACQUIRED (Kafka's startStateTransition)."""
        if target is _AVAILABLE and st.delivery_count >= self.delivery_count_limit:
            target = _ARCHIVED
        st.pending = _Pending(update_id, st.state, st.member_id, st.deadline_ms)
        self._set(st, size, target)
        st.member_id = ""
        st.deadline_ms = None

    def _new_update(self, update_id: int, changes: _Runs, transitions: _Runs) -> PendingUpdate:
        self._outstanding.add(update_id)
        return PendingUpdate(
            update_id=update_id, start_offset=self._start, state_epoch=self._state_epoch,
            leader_epoch=self._leader_epoch, delivery_complete_count=self._complete,
            state_batches=_state_batches(changes),
            in_transition=tuple((a, b) for a, b, _ in transitions.triples()))

    def commit(self, update: PendingUpdate) -> None:
        """The update's write succeeded: its transitions become final, and the SPSO moves past the finished
        prefix of the cache (whose batches are dropped)."""
        self._take(update)
        for st, _a, _b in self._in_transition(update):
            st.pending = None
            st.sticky = False
            if st.state is _AVAILABLE:
                self._find_next = True
        self._advance()

    def rollback(self, update: PendingUpdate, now_ms: int) -> None:
        """The update's write failed: its records go back to ACQUIRED by their member, or, if their lock has
        expired meanwhile, to AVAILABLE (ARCHIVED at the delivery limit). A record archived during the
        transition stays archived. A lock-timeout update has nothing to undo (Kafka keeps those changes)."""
        self._take(update)
        relock = _Runs()
        for st, a, b in self._in_transition(update):
            pending = st.pending
            assert pending is not None
            st.pending = None
            if st.sticky:
                st.sticky = False
                continue
            if pending.deadline_ms is not None and pending.deadline_ms <= now_ms:
                self._set(st, b - a + 1, self._released(st))
                st.member_id = ""
                st.deadline_ms = None
                if st.state is _AVAILABLE:
                    self._find_next = True
            else:
                self._set(st, b - a + 1, pending.state)
                st.member_id = pending.member_id
                st.deadline_ms = pending.deadline_ms
                if pending.deadline_ms is not None:
                    relock.add(a, b, pending.deadline_ms)
        for a, b, deadline in relock.triples():
            self._lock(deadline, a, b)
        self._advance()

    def _take(self, update: PendingUpdate) -> None:
        self._check_active()
        if update.update_id not in self._outstanding:
            raise ValueError(f"update {update.update_id} is not outstanding")
        self._outstanding.discard(update.update_id)

    def _in_transition(self, update: PendingUpdate) -> list[tuple[_State, int, int]]:
        """The states still carrying ``update``'s transition (a log-start move may have dropped some)."""
        found: list[tuple[_State, int, int]] = []
        seen: set[int] = set()
        for lo, hi in update.in_transition:
            for batch in self._cache.overlapping(lo, hi):
                for a, b, st in batch.runs(lo, hi):
                    if st.pending is not None and st.pending.update_id == update.update_id and id(st) not in seen:
                        seen.add(id(st))
                        # A whole batch's state covers the whole batch, not only the part inside [lo, hi].
                        if batch.offsets is None:
                            a, b = batch.first, batch.last
                        found.append((st, a, b))
        return found

    # ------------------------------------------------------------------ locks and the log start

    def next_lock_deadline(self) -> int | None:
        """The earliest acquisition-lock deadline, for the caller's timer; None when nothing is locked."""
        locks = self._locks
        while locks:
            deadline, _, lo, hi = locks[0]
            for batch in self._cache.overlapping(lo, hi):
                for _, _, st in batch.runs(lo, hi):
                    if st.state is _ACQUIRED and st.deadline_ms == deadline:
                        return deadline
            heapq.heappop(locks)
        return None

    def expire_locks(self, now_ms: int) -> PendingUpdate | None:
        """Release every record whose lock deadline is <= ``now_ms``: AVAILABLE again, or ARCHIVED at the
        delivery limit. The change is made at once and kept whatever happens to the write (as Kafka does);
        commit or roll back the returned update once written, which moves the SPSO if records were archived.
        Returns None when no lock expired."""
        self._check_active()
        changes = _Runs()
        locks = self._locks
        while locks and locks[0][0] <= now_ms:
            _, _, lo, hi = heapq.heappop(locks)
            for batch in self._cache.overlapping(lo, hi):
                for a, b, st in batch.runs(lo, hi):
                    if st.state is not _ACQUIRED or st.deadline_ms is None or st.deadline_ms > now_ms:
                        continue
                    if batch.offsets is None:
                        a, b = batch.first, batch.last
                    self._set(st, b - a + 1, self._released(st))
                    st.member_id = ""
                    st.deadline_ms = None
                    if st.state is _AVAILABLE:
                        self._find_next = True
                    changes.add(a, b, (st.state, st.delivery_count))
        if not changes:
            return None
        # The lock heap pops in deadline order, not offset order: sort the runs before they are merged.
        ordered = _Runs()
        for a, b, key in sorted(changes.triples(), key=lambda run: run[0]):
            ordered.add(a, b, key)
        return self._new_update(next(self._update_ids), ordered, _Runs())

    def update_log_start(self, log_start_offset: int) -> None:
        """The log start moved (DeleteRecords, retention, or a read answered OFFSET_OUT_OF_RANGE): drop the
        records below it and move the SPSO there. Not persisted now; the next write carries the new SPSO."""
        self._check_active()
        if log_start_offset <= self._start:
            return
        cache = self._cache
        while len(cache):
            batch = cache.front()
            if batch.last < log_start_offset:
                self._complete -= batch.terminal_count()
                cache.pop_front()
                continue
            if batch.first < log_start_offset:
                self._complete -= batch.terminal_count(batch.first, log_start_offset - 1)
                batch.trim_front(log_start_offset)
            break
        self._start = log_start_offset
        self._find_next = True
        self._advance()

    # ------------------------------------------------------------------ internals

    def _set(self, st: _State, size: int, state: RecordState) -> None:
        """Change a state covering ``size`` records, keeping the delivery-complete count right."""
        was, now = st.state in _TERMINAL, state in _TERMINAL
        if was != now:
            self._complete += size if now else -size
        st.state = state

    def _grab(self, st: _State, member_id: str, deadline: int) -> None:
        st.state = _ACQUIRED
        st.delivery_count += 1
        st.member_id = member_id
        st.deadline_ms = deadline

    def _released(self, st: _State) -> RecordState:
        return _ARCHIVED if st.delivery_count >= self.delivery_count_limit else _AVAILABLE

    def _lock(self, deadline: int, first: int, last: int) -> None:
        heapq.heappush(self._locks, (deadline, next(self._seq), first, last))

    def _advance(self) -> None:
        """Move the SPSO past the finished (terminal, not in transition) prefix and drop it from the cache.

        A cached batch that starts after the new SPSO leaves offsets the log no longer has (compaction): the
        SPSO jumps to that batch, as Kafka moves it to the next batch's first offset."""
        cache = self._cache
        moved = False
        while len(cache):
            batch = cache.front()
            if batch.offsets is None:
                st = batch.whole
                assert st is not None
                if st.pending is not None or st.state not in _TERMINAL:
                    break
                done = batch.size
            else:
                done = 0
                for st in batch.offsets:
                    if st.pending is not None or st.state not in _TERMINAL:
                        break
                    done += 1
                if done == 0:
                    break
            moved = True
            self._complete -= done
            if done == batch.size:
                self._start = batch.last + 1
                cache.pop_front()
                continue
            self._start = batch.first + done
            batch.trim_front(self._start)
            break
        if moved and len(cache) and cache.front().first > self._start:
            self._start = cache.front().first


_VALID_ACK_TYPES = frozenset(int(t) for t in AcknowledgeType)


def _end_of_batch_containing(batches: Sequence[tuple[int, int]], offset: int) -> int:
    """The last offset of the log batch holding ``offset``, or ``offset`` if none does (Kafka's
    lastOffsetFromBatchWithRequestOffset)."""
    i = bisect_right(batches, offset, key=lambda b: b[0]) - 1
    if i >= 0 and offset <= batches[i][1]:
        return batches[i][1]
    return offset


def _subtract_ranges(records: list[AcquiredRecords], remove: Sequence[tuple[int, int]]) -> list[AcquiredRecords]:
    """``records`` without the offsets in ``remove`` (Kafka's filterRecordBatchesFromAcquiredRecords)."""
    out: list[AcquiredRecords] = []
    cuts = sorted(remove)
    for record in records:
        pieces = [(record.first_offset, record.last_offset)]
        for lo, hi in cuts:
            next_pieces = []
            for a, b in pieces:
                if hi < a or lo > b:
                    next_pieces.append((a, b))
                    continue
                if a < lo:
                    next_pieces.append((a, lo - 1))
                if b > hi:
                    next_pieces.append((hi + 1, b))
            pieces = next_pieces
        out.extend(AcquiredRecords(a, b, record.delivery_count) for a, b in pieces)
    return out
