"""The history checker: what Kafka promises, judged against everything a run's clients saw.

Why one pass over indexes instead of per-client assertions: the anomalies that matter (a record one
consumer read and that later vanished, an offset that held two records at different times, a transaction one
reader saw although it aborted) only show when all reads are compared with each other and with the final read.
The checker indexes the final read by ``(partition, offset)`` and by value, then looks only at observations
that *disagree* with it (rare in a good run), so a history of a million operations checks in seconds.

Definitions (``F(p, o)`` is the value the final read has at partition ``p``, offset ``o``; a value's *final
positions* are the ``(p, o)`` where the final read has it; a record is *acknowledged* when its send completed
``ok`` or its transaction's commit completed ``ok``; *deleted* means below the partition's final log start:
its known offset (acknowledged, else any observed) is below it, or, offset unknown, a send to that partition
invoked after it completed had an acknowledged offset below it):

- ``lost``: an acknowledged record (acks=all, or a committed transaction's) with no final position, not deleted.
  ``lost, documented (unclean election)`` instead when the run had unclean election on; ``lost, documented
  (acks<all)`` for a send with acks 0 or 1 (Kafka acknowledges those before they are replicated).
- ``phantom``: a value some read returned that was never acknowledged, has no final position and is not
  deleted: data that was readable and then vanished (Kafka's truncation of unreplicated data). Documented
  classes as for ``lost`` (unclean election, acks<all).
- ``offset conflict``: two different values observed at one ``(p, o)`` by any reads, the final read included.
  When every value there except ``F(p, o)`` vanished (is lost or a phantom) the conflict is the mechanism of
  that loss (truncated, then overwritten) and is folded into the vanished record's anomaly, not counted again.
- ``duplicate``: a value at two or more positions, counting its final positions and the positions where
  reads saw it and the final read has nothing (below the log start, a gap, beyond the end; a position the
  final read gives to another value is an offset conflict instead). Forbidden for idempotent and transactional
  producers; ``duplicate, allowed (non-idempotent)`` for plain producers, whose retries may write twice.
- ``ack offset mismatch``: an ``ok`` send (or a committed transaction's write with a delivery offset) whose
  value has final positions, none of them the acknowledged ``(p, offset)``: the record moved. (If it has no
  final position it is lost, and what now holds its offset is told in the loss.)
- ``reordered``: sends whose final positions contradict their order. A send's position is its acknowledged
  offset when the final read agrees (or retention deleted it), else its single final offset when it had no
  acknowledged offset; lost, moved and duplicated sends have none. Two rules, one anomaly per out-of-place
  send B: (1) an idempotent producer keeps its invocation order within a partition even with up to 5
  requests in flight: A invoked before B by the same process, same partition, both ``ok`` => pos(A) < pos(B);
  (2) real time, for every producer: an ``ok`` send A that completed before an ``ok`` send B to the same
  partition was invoked => pos(A) < pos(B) (sends that overlap in time have no order, except by rule 1).
- ``committed offset regression``: two ``ok`` commits of one group and partition, A completed before B was
  invoked, and B's offset is lower. Overlapping commits are concurrent and never compared.
  ``..., documented (unclean election)`` when unclean election was on and a documented loss or phantom in
  that partition lies below A's offset (consumers reset after the truncation).
- ``read_committed anomaly``: a read_committed read returned a record of a transaction that did not commit
  (aborted: ``end=abort``, never asked to commit, a commit that ``fail``-ed, or a commit of unknown outcome
  whose records the final read_committed read covers and does not show), or returned it before the
  commit was even requested (the read completed before ``end_t``); or a committed transaction's record that
  the final read_uncommitted read has within the final read_committed range but the final read_committed read
  does not show.

The result's ``ok`` is True only when no forbidden class has an anomaly and the history had no problems
(e.g. a written partition without a final read, which would make every check on it vacuous).

Availability: acknowledged sends per second per partition, and per fault window each partition's ack rate
inside the window against its steady rate in the ``baseline_s`` seconds before it (the median of the
per-bucket rates: a previous fault's released backlog is not throughput); a partition whose leader at the fault's start
was not one of the fault's brokers must keep ``min_ratio`` of its rate (reported, and in
``availability.ok``, kept apart from the safety verdict).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from nemesis.history import (
    ABORT,
    COMMIT,
    COMMIT_OFFSET,
    FAIL,
    INVOKE,
    OK,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    READS,
    SEND,
    TXN,
    Fault,
    History,
    Op,
)

LOST = "lost"
LOST_UNCLEAN = "lost, documented (unclean election)"
LOST_WEAK_ACKS = "lost, documented (acks<all)"
PHANTOM = "phantom"
PHANTOM_UNCLEAN = "phantom, documented (unclean election)"
PHANTOM_WEAK_ACKS = "phantom, documented (acks<all)"
DUPLICATE = "duplicate"
DUPLICATE_ALLOWED = "duplicate, allowed (non-idempotent)"
REORDERED = "reordered"
OFFSET_CONFLICT = "offset conflict"
ACK_MISMATCH = "ack offset mismatch"
OFFSET_REGRESSION = "committed offset regression"
OFFSET_REGRESSION_UNCLEAN = "committed offset regression, documented (unclean election)"
READ_COMMITTED_ANOMALY = "read_committed anomaly"

CLASSES: tuple[str, ...] = (
    LOST, LOST_UNCLEAN, LOST_WEAK_ACKS, DUPLICATE, DUPLICATE_ALLOWED, REORDERED, OFFSET_CONFLICT, ACK_MISMATCH,
    OFFSET_REGRESSION, OFFSET_REGRESSION_UNCLEAN, READ_COMMITTED_ANOMALY, PHANTOM, PHANTOM_UNCLEAN,
    PHANTOM_WEAK_ACKS,
)
FORBIDDEN: frozenset[str] = frozenset({
    LOST, DUPLICATE, REORDERED, OFFSET_CONFLICT, ACK_MISMATCH, OFFSET_REGRESSION, READ_COMMITTED_ANOMALY, PHANTOM,
})
_VANISHED = frozenset({LOST, LOST_UNCLEAN, LOST_WEAK_ACKS, PHANTOM, PHANTOM_UNCLEAN, PHANTOM_WEAK_ACKS})
_MAX_OPS_PER_VALUE = 3  # ops listed per value in a conflict or phantom: enough to find them, not all of them

Pos = tuple[str, int]


@dataclass(slots=True)
class Anomaly:
    """One anomaly: its class, the ids of the operations involved and a sentence a human can check them by.
    ``time`` is when it showed (for the timeline); partition/offset/value locate it when there is one."""

    cls: str
    ops: tuple[int, ...]
    description: str
    time: float | None = None
    partition: str | None = None
    offset: int | None = None
    value: str | None = None


@dataclass(slots=True)
class PartitionWindow:
    """One partition through one fault window. ``healthy``: its leader at the fault's start was not hit by
    the fault (None when the history does not say who led it). ``resumed_s``: seconds from the window's end
    to the partition's first acknowledgement after it (None: none before the history ends): how long a
    healed fault still costs, which the rate during the window does not show."""

    partition: str
    leader: int | None
    healthy: bool | None
    before_rate: float | None
    during_rate: float
    ratio: float | None
    ok: bool
    resumed_s: float | None = None


@dataclass(slots=True)
class WindowAvailability:
    fault: Fault
    end: float
    before_s: float
    partitions: list[PartitionWindow]

    @property
    def ok(self) -> bool:
        return all(pw.ok for pw in self.partitions)


@dataclass(slots=True)
class Availability:
    """Acks per ``bucket_s`` per partition (``series[p][i]`` counts completions in ``[i*b, (i+1)*b)``) and the
    fault windows' rates."""

    bucket_s: float
    baseline_s: float
    min_ratio: float
    series: dict[str, list[int]]
    windows: list[WindowAvailability]

    @property
    def violations(self) -> list[tuple[WindowAvailability, PartitionWindow]]:
        return [(w, pw) for w in self.windows for pw in w.partitions if not pw.ok]

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class CheckResult:
    anomalies: dict[str, list[Anomaly]]
    availability: Availability
    unclean_election: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        return {cls: len(self.anomalies.get(cls, ())) for cls in CLASSES}

    @property
    def forbidden(self) -> dict[str, list[Anomaly]]:
        """The forbidden classes that have anomalies."""
        return {cls: lst for cls, lst in self.anomalies.items() if cls in FORBIDDEN and lst}

    @property
    def ok(self) -> bool:
        return not self.forbidden and not self.problems

    def all(self) -> list[Anomaly]:
        return [a for cls in CLASSES for a in self.anomalies.get(cls, ())]


def partition_sort_key(p: str) -> tuple[str, int, str]:
    """``orders-10`` after ``orders-9``."""
    topic, _, n = p.rpartition("-")
    return (topic, int(n), "") if n.isdigit() else (p, -1, "")


def check(history: History, *, unclean_election: bool | None = None, bucket_s: float = 1.0,
          baseline_s: float = 10.0, min_ratio: float = 0.5) -> CheckResult:
    """Check ``history``. ``unclean_election`` overrides the run's meta flag."""
    unclean = history.meta.unclean_election if unclean_election is None else unclean_election
    return _Checker(history, unclean).run(bucket_s, baseline_s, min_ratio)


def _outcome(op: Op) -> str:
    return "info" if op.outcome == INVOKE else op.outcome


def _short(v: str | None) -> str:
    return repr(v) if v is None or len(v) <= 40 else repr(v[:37] + "...")


class _Checker:
    def __init__(self, history: History, unclean: bool) -> None:
        self.h = history
        self.unclean = unclean
        self.anomalies: dict[str, list[Anomaly]] = {cls: [] for cls in CLASSES}
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.by_id: dict[int, Op] = {op.id: op for op in history.ops}
        self.vanished: dict[str, Anomaly] = {}  # value -> its lost/phantom anomaly

    # -- helpers ------------------------------------------------------------------------------------------------

    def add(self, cls: str, ops: Iterable[int], description: str, *, time: float | None = None,
            partition: str | None = None, offset: int | None = None, value: str | None = None) -> Anomaly:
        a = Anomaly(cls, tuple(dict.fromkeys(ops)), description, time, partition, offset, value)
        self.anomalies[cls].append(a)
        return a

    def log_start(self, p: str) -> int:
        pf = self.h.finals.get(p)
        return pf.log_start if pf is not None else 0

    def final_end(self, p: str) -> int:
        pf = self.h.finals.get(p)
        if pf is not None:
            return pf.high_watermark
        m = self.final.get(p)
        return max(m) + 1 if m else 0

    def rc_end(self, p: str) -> int:
        pf = self.h.finals.get(p)
        if pf is not None:
            return pf.last_stable_offset if pf.last_stable_offset is not None else pf.high_watermark
        return self.rc_max.get(p, -1) + 1

    def final_positions(self, v: str) -> list[Pos]:
        extra = self.fdup.get(v)
        if extra is not None:
            return extra
        pos = self.fpos.get(v)
        return [pos] if pos is not None else []

    def txn_state(self, t: Op) -> str:
        """committed / aborted / unknown, from the client's view alone."""
        out = _outcome(t)
        if t.end == COMMIT:
            return "committed" if out == OK else "aborted" if out == FAIL else "unknown"
        return "aborted"  # asked to abort, or never asked to commit: the coordinator cannot commit it

    # -- the passes ---------------------------------------------------------------------------------------------

    def run(self, bucket_s: float, baseline_s: float, min_ratio: float) -> CheckResult:
        self.index()
        self.check_lost()
        self.check_phantoms()
        self.check_conflicts()
        self.check_duplicates()
        self.check_ack_mismatch()
        self.check_reorders()
        self.check_regressions()
        self.check_read_committed()
        availability = self.availability(bucket_s, baseline_s, min_ratio)
        for lst in self.anomalies.values():
            lst.sort(key=lambda a: (a.time if a.time is not None else math.inf, a.ops))
        return CheckResult(self.anomalies, availability, self.unclean, self.problems, self.notes, self.stats)

    def index(self) -> None:
        self.sends: dict[str, Op] = {}
        self.txn_of: dict[str, tuple[Op, int]] = {}
        self.reads: list[Op] = []
        self.final_reads: list[Op] = []
        self.commits: list[Op] = []
        self.txns: list[Op] = []
        written: set[str] = set()
        reused: list[str] = []
        for op in self.h.ops:
            if op.f == SEND:
                if op.value in self.sends or op.value in self.txn_of:
                    reused.append(op.value)
                self.sends[op.value] = op
                written.add(op.partition)
            elif op.f == TXN:
                self.txns.append(op)
                for i, (p, v, _) in enumerate(op.writes or ()):
                    if v in self.sends or v in self.txn_of:
                        reused.append(v)
                    self.txn_of[v] = (op, i)
                    written.add(p)
            elif op.f in READS:
                if op.records:
                    (self.final_reads if op.final else self.reads).append(op)
            elif op.f == COMMIT_OFFSET:
                if op.outcome == OK:
                    self.commits.append(op)
        if reused:
            self.problems.append(f"{len(reused)} value(s) written by more than one operation (values must be "
                                 f"unique), e.g. {reused[:3]}: checks on them are unreliable")

        # The final read: F(p, o), each value's final positions, what read_committed showed.
        self.final: dict[str, dict[int, str]] = {}
        self.final_op: dict[str, dict[int, int]] = {}
        self.fpos: dict[str, Pos] = {}
        self.fdup: dict[str, list[Pos]] = {}
        self.rc_values: set[str] = set()
        self.rc_parts: set[str] = set()
        self.rc_max: dict[str, int] = {}
        self.rc_final_op: dict[str, int] = {}
        # observations that disagree with the final read: (p, o) -> value -> op ids; value -> positions
        self.deviant: dict[Pos, dict[str, list[int]]] = {}
        self.dev_pos: dict[str, set[Pos]] = defaultdict(set)
        self.first_seen: dict[str, float] = {}  # deviant value -> earliest completion of a read that saw it
        self.final_reads.sort(key=lambda op: (op.isolation == READ_COMMITTED, op.id))
        for op in self.final_reads:
            rc = op.isolation == READ_COMMITTED
            for p, o, v in op.records:
                m = self.final.get(p)
                if m is None:
                    m = self.final[p] = {}
                    self.final_op[p] = {}
                cur = m.get(o)
                if cur is None:
                    m[o] = v
                    self.final_op[p][o] = op.id
                    pos = (p, o)
                    first = self.fpos.get(v)
                    if first is None:
                        self.fpos[v] = pos
                    elif v in self.fdup:
                        self.fdup[v].append(pos)
                    else:
                        self.fdup[v] = [first, pos]
                elif cur != v:
                    self._deviate(p, o, v, op)
                if rc:
                    self.rc_values.add(v)
                    self.rc_parts.add(p)
                    self.rc_final_op.setdefault(p, op.id)
                    if o > self.rc_max.get(p, -1):
                        self.rc_max[p] = o
        for pf in self.h.finals.values():
            self.final.setdefault(pf.partition, {})
            self.final_op.setdefault(pf.partition, {})
        self.final_parts = set(self.final) | set(self.h.finals)
        if any(op.final and op.isolation == READ_COMMITTED and op.f in READS for op in self.h.ops):
            # a final read_committed read covers every partition with a partition_final, records or not
            self.rc_parts |= set(self.h.finals)

        final = self.final
        n_obs = 0
        for op in self.reads:
            n_obs += len(op.records)
            for p, o, v in op.records:
                m = final.get(p)
                if m is None or m.get(o) != v:
                    self._deviate(p, o, v, op)

        missing = sorted(written - self.final_parts, key=partition_sort_key)
        if missing:
            self.problems.append(f"no final read of written partition(s) {', '.join(missing)}: loss and phantom "
                                 f"checks skipped there")
        no_pf = sorted(set(self.final) - set(self.h.finals), key=partition_sort_key)
        if no_pf:
            self.notes.append(f"no partition_final for {', '.join(no_pf)}: log start taken as 0, end as the last "
                              f"offset read")
        for pf in sorted(self.h.finals.values(), key=lambda x: partition_sort_key(x.partition)):
            if pf.last_stable_offset is not None and pf.last_stable_offset < pf.high_watermark:
                self.notes.append(f"{pf.partition}: last stable offset {pf.last_stable_offset} < high watermark "
                                  f"{pf.high_watermark} at the final read (a transaction still open?)")
        self.stats = {"ops": len(self.h.ops), "sends": len(self.sends), "txns": len(self.txns),
                      "reads": len(self.reads), "observations": n_obs, "final_records": len(self.fpos),
                      "commits": len(self.commits), "faults": len(self.h.faults),
                      "deviant_positions": len(self.deviant)}

        # retention: per partition, the latest invocation of a send acknowledged below the log start; a record
        # of unknown offset completed before it was below the log start too
        self._deleted_before: dict[str, float] = {}
        for op in self.sends.values():
            if op.outcome == OK and op.offset is not None and 0 <= op.offset < self.log_start(op.partition):
                if op.invoke_t > self._deleted_before.get(op.partition, -math.inf):
                    self._deleted_before[op.partition] = op.invoke_t

    def _deviate(self, p: str, o: int, v: str, op: Op) -> None:
        pos = (p, o)
        by_value = self.deviant.get(pos)
        if by_value is None:
            by_value = self.deviant[pos] = {}
        ids = by_value.get(v)
        if ids is None:
            by_value[v] = [op.id]
        elif len(ids) < _MAX_OPS_PER_VALUE and ids[-1] != op.id:
            ids.append(op.id)
        self.dev_pos[v].add(pos)
        t = op.complete_t if op.complete_t is not None else op.invoke_t
        if t < self.first_seen.get(v, math.inf):
            self.first_seen[v] = t

    def deleted(self, p: str, offset: int | None, v: str, complete_t: float | None) -> bool:
        ls = self.log_start(p)
        if ls <= 0:
            return False
        if offset is not None and offset >= 0:
            return offset < ls
        seen = [o for q, o in self.dev_pos.get(v, ()) if q == p]
        if seen:
            return min(seen) < ls
        return complete_t is not None and complete_t < self._deleted_before.get(p, -math.inf)

    def _vanish_classes(self, acks: str | None) -> tuple[str, str, str]:
        """(class for a loss, class for a phantom, why) given the record's acks."""
        if self.unclean:
            return LOST_UNCLEAN, PHANTOM_UNCLEAN, "unclean election on"
        if acks is not None and acks != "all" and acks != "-1":
            return LOST_WEAK_ACKS, PHANTOM_WEAK_ACKS, f"acks={acks}"
        return LOST, PHANTOM, ""

    def _seen_note(self, v: str) -> str:
        pos = sorted(self.dev_pos.get(v, ()))
        if not pos:
            return ""
        parts = []
        for p, o in pos[:3]:
            ops = self.deviant[(p, o)][v]
            parts.append(f"{p}@{o} by op {', '.join(map(str, ops))}")
        return "; read at " + "; ".join(parts)

    def check_lost(self) -> None:
        def judge(v: str, p: str, offset: int | None, acks: str | None, op: Op, what: str) -> None:
            if p not in self.final_parts or v in self.fpos or self.deleted(p, offset, v, op.complete_t):
                return
            cls, _, why = self._vanish_classes(acks)
            at = f"{p}@{offset}" if offset is not None and offset >= 0 else p
            desc = (f"{what} {_short(v)} acknowledged at {at} by op {op.id} (t={op.complete_t:.3f}) is absent from "
                    f"the final read (log start {self.log_start(p)}, end {self.final_end(p)})")
            holder = self.final.get(p, {}).get(offset) if offset is not None else None
            if holder is not None:
                desc += f"; the final read has {_short(holder)} at {p}@{offset}"
            desc += self._seen_note(v) + (f" [{why}]" if why else "")
            ops = [op.id]
            if holder is not None:
                ops.append(self.final_op[p][offset])
            self.vanished[v] = self.add(cls, ops, desc, time=op.complete_t, partition=p, offset=offset, value=v)

        for v, op in self.sends.items():
            if op.outcome == OK:
                judge(v, op.partition, op.offset, op.acks, op, "send")
        for t in self.txns:
            if self.txn_state(t) == "committed":
                for p, v, o in t.writes or ():
                    judge(v, p, o, "all", t, "committed transactional record")

    def check_phantoms(self) -> None:
        for v, positions in self.dev_pos.items():
            if v in self.fpos or v in self.vanished:
                continue
            send = self.sends.get(v)
            txn = self.txn_of.get(v)
            if send is not None and send.outcome == OK:
                continue
            if txn is not None and self.txn_state(txn[0]) == "committed":
                continue
            checkable = [(p, o) for p, o in positions if p in self.final_parts]
            if not checkable or any(o < self.log_start(p) for p, o in checkable):
                continue  # no final read to judge by, or retention deleted it
            _, cls, why = self._vanish_classes(send.acks if send is not None else None)
            ops: list[int] = []
            for pos in sorted(positions):
                ops.extend(self.deviant[pos][v])
            if send is not None:
                writer = f"send op {send.id} ({_outcome(send)}, acks={send.acks})"
                ops.append(send.id)
            elif txn is not None:
                writer = f"txn op {txn[0].id} ({self.txn_state(txn[0])})"
                ops.append(txn[0].id)
            else:
                writer = "no operation of the history"
            p, o = min(positions)
            desc = (f"{_short(v)}, written by {writer}, was read and is absent from the final read (log start "
                    f"{self.log_start(p)}, end {self.final_end(p)})" + self._seen_note(v))
            desc += f" [{why}]" if why else ""
            self.vanished[v] = self.add(cls, ops, desc, time=self.first_seen.get(v), partition=p, offset=o, value=v)

    def check_conflicts(self) -> None:
        for (p, o), vals in sorted(self.deviant.items()):
            fv = self.final.get(p, {}).get(o)
            values = set(vals)
            if fv is not None:
                values.add(fv)
            if len(values) < 2:
                continue
            losers = values - {fv}
            if all(x in self.vanished for x in losers):
                for x in losers:  # the truncation that made it vanish: told in its anomaly
                    a = self.vanished[x]
                    now = f"now {_short(fv)}" if fv is not None else "now nothing"
                    a.description += f"; {p}@{o} held it, {now}"
                continue
            ops: list[int] = []
            parts = []
            for x in sorted(values):
                ids = list(vals.get(x, []))
                if x == fv:
                    ids.insert(0, self.final_op[p][o])
                ops.extend(ids)
                parts.append(f"{_short(x)} (op {', '.join(map(str, ids))})")
            times = [self.by_id[i].complete_t or self.by_id[i].invoke_t for i in ops if not self.by_id[i].final]
            self.add(OFFSET_CONFLICT, ops, f"{p}@{o} held different values: {'; '.join(parts)}",
                     time=min(times) if times else None, partition=p, offset=o)

    def check_duplicates(self) -> None:
        candidates = set(self.fdup)
        for v in self.dev_pos:
            if v in self.fpos or len(self.dev_pos[v]) > 1:
                candidates.add(v)
        for v in sorted(candidates):
            positions = set(self.final_positions(v))
            for p, o in self.dev_pos.get(v, ()):
                if self.final.get(p, {}).get(o) is None:
                    positions.add((p, o))
            if len(positions) < 2:
                continue
            send = self.sends.get(v)
            txn = self.txn_of.get(v)
            if send is not None:
                writer: Op = send
                cls = DUPLICATE if send.idempotent else DUPLICATE_ALLOWED
                kind = "idempotent" if send.idempotent else "non-idempotent"
            elif txn is not None:
                writer, cls, kind = txn[0], DUPLICATE, "transactional"
            else:
                continue  # not written by this history: nothing to judge it by
            ops = [writer.id]
            for p, o in sorted(positions):
                ops.append(self.final_op[p][o] if self.final.get(p, {}).get(o) == v else self.deviant[(p, o)][v][0])
            where = ", ".join(f"{p}@{o}" for p, o in sorted(positions))
            p, o = min(positions)
            self.add(cls, ops, f"{_short(v)} ({kind}, op {writer.id}) is at {len(positions)} offsets: {where}",
                     time=writer.complete_t, partition=p, offset=o, value=v)

    def check_ack_mismatch(self) -> None:
        fpos, fdup = self.fpos, self.fdup

        def judge(v: str, p: str, offset: int | None, op: Op, what: str) -> None:
            if offset is None or offset < 0:
                return
            if v not in fdup and fpos.get(v) == (p, offset):  # the common case, without building lists
                return
            positions = self.final_positions(v)
            if not positions or (p, offset) in positions:
                return
            holder = self.final.get(p, {}).get(offset)
            holds = f"{p}@{offset} holds {_short(holder)}" if holder is not None else f"{p}@{offset} holds nothing"
            where = ", ".join(f"{q}@{o}" for q, o in positions)
            ops = [op.id] + [self.final_op[q][o] for q, o in positions[:1]]
            self.add(ACK_MISMATCH, ops, f"{what} {_short(v)} acknowledged at {p}@{offset} by op {op.id}, the final "
                     f"read has it at {where} ({holds})", time=op.complete_t, partition=p, offset=offset, value=v)

        for v, op in self.sends.items():
            if op.outcome == OK:
                judge(v, op.partition, op.offset, op, "send")
        for t in self.txns:
            if self.txn_state(t) == "committed":
                for p, v, o in t.writes or ():
                    judge(v, p, o, t, "committed transactional record")

    def position(self, op: Op) -> int | None:
        """Where an ok send sits, when that is unambiguous (see the module docstring)."""
        p = op.partition
        a = op.offset
        v = op.value
        if a is not None and a >= 0 and v not in self.fdup and self.fpos.get(v) == (p, a):
            return a  # the common case
        positions = self.final_positions(v)
        if a is not None and a >= 0:
            if (p, a) in positions:
                return a
            if not positions and (p not in self.final_parts or a < self.log_start(p)):
                return a
            return None
        if len(positions) == 1 and positions[0][0] == p:
            return positions[0][1]
        return None

    def check_reorders(self) -> None:
        by_partition: dict[str, list[tuple[Op, int]]] = defaultdict(list)
        by_producer: dict[tuple[object, str], list[tuple[Op, int]]] = defaultdict(list)
        for op in self.sends.values():
            if op.outcome != OK or op.complete_t is None:
                continue
            pos = self.position(op)
            if pos is None:
                continue
            by_partition[op.partition].append((op, pos))
            if op.idempotent:
                by_producer[(op.process, op.partition)].append((op, pos))
        flagged: set[int] = set()
        for (process, p), sends in by_producer.items():
            sends.sort(key=lambda x: (x[0].invoke_t, x[0].id))
            best: tuple[Op, int] | None = None
            for op, pos in sends:
                if best is not None and pos < best[1]:
                    a, apos = best
                    flagged.add(op.id)
                    self.add(REORDERED, (a.id, op.id),
                             f"idempotent producer {process}: {_short(a.value)} (op {a.id}, invoked "
                             f"t={a.invoke_t:.3f}) is at {p}@{apos}, after {_short(op.value)} (op {op.id}, invoked "
                             f"later t={op.invoke_t:.3f}) at {p}@{pos}", time=op.complete_t, partition=p, offset=pos,
                             value=op.value)
                if best is None or pos > best[1]:
                    best = (op, pos)
        for p, sends in by_partition.items():
            invoked = sorted(sends, key=lambda x: (x[0].invoke_t, x[0].id))
            completed = sorted(sends, key=lambda x: x[0].complete_t)
            i = 0
            best = None
            for op, pos in invoked:
                while i < len(completed) and completed[i][0].complete_t < op.invoke_t:
                    if best is None or completed[i][1] > best[1]:
                        best = completed[i]
                    i += 1
                if best is not None and pos < best[1] and op.id not in flagged:
                    a, apos = best
                    flagged.add(op.id)
                    self.add(REORDERED, (a.id, op.id),
                             f"{_short(a.value)} (op {a.id}) completed at t={a.complete_t:.3f}, before "
                             f"{_short(op.value)} (op {op.id}) was invoked at t={op.invoke_t:.3f}, yet sits after "
                             f"it: {p}@{apos} > {p}@{pos}", time=op.complete_t, partition=p, offset=pos,
                             value=op.value)

    def check_regressions(self) -> None:
        lowest_vanished: dict[str, int] = {}
        for cls in (LOST_UNCLEAN, PHANTOM_UNCLEAN):
            for a in self.anomalies[cls]:
                if a.partition is not None and a.offset is not None and a.offset >= 0:
                    lowest_vanished[a.partition] = min(lowest_vanished.get(a.partition, a.offset), a.offset)
        by_key: dict[tuple[str, str], list[Op]] = defaultdict(list)
        for op in self.commits:
            if op.complete_t is not None and op.offset is not None:
                by_key[(op.group, op.partition)].append(op)
        for (group, p), commits in sorted(by_key.items()):
            invoked = sorted(commits, key=lambda op: (op.invoke_t, op.id))
            completed = sorted(commits, key=lambda op: op.complete_t)
            i = 0
            best: Op | None = None
            for op in invoked:
                while i < len(completed) and completed[i].complete_t < op.invoke_t:
                    if best is None or completed[i].offset > best.offset:
                        best = completed[i]
                    i += 1
                if best is not None and op.offset < best.offset:
                    documented = self.unclean and lowest_vanished.get(p, math.inf) < best.offset
                    self.add(OFFSET_REGRESSION_UNCLEAN if documented else OFFSET_REGRESSION, (best.id, op.id),
                             f"group {group} {p}: committed {best.offset} (op {best.id}, completed "
                             f"t={best.complete_t:.3f}), then {op.offset} (op {op.id}, invoked t={op.invoke_t:.3f})",
                             time=op.complete_t, partition=p, offset=op.offset)

    def check_read_committed(self) -> None:
        state: dict[int, str] = {}
        for t in self.txns:
            s = self.txn_state(t)
            if s == "unknown":
                visible = covered = False
                for p, v, o in t.writes or ():
                    if v in self.rc_values:
                        visible = True
                        break
                    if p in self.rc_parts:
                        off = o if o is not None else next((q for pp, q in self.final_positions(v) if pp == p), None)
                        if off is not None and self.log_start(p) <= off < self.rc_end(p):
                            covered = True
                s = "committed (resolved)" if visible else "aborted (resolved)" if covered else "unknown"
            state[t.id] = s

        for op in self.reads + self.final_reads:
            if op.isolation != READ_COMMITTED:
                continue
            seen: dict[int, list[tuple[str, int, str]]] = {}
            for rec in op.records:
                t = self.txn_of.get(rec[2])
                if t is not None:
                    seen.setdefault(t[0].id, []).append(rec)
            for tid, recs in seen.items():
                t = self.by_id[tid]
                s = state[tid]
                where = ", ".join(f"{_short(v)} at {p}@{o}" for p, o, v in recs[:3])
                read = f"read_committed {'final read' if op.final else op.f} op {op.id}"
                if s.startswith("aborted"):
                    why = {ABORT: "it aborted", None: "it never asked to commit"}.get(
                        t.end, "its commit failed" if _outcome(t) == FAIL else "its commit never took effect")
                    self.add(READ_COMMITTED_ANOMALY, (op.id, tid),
                             f"{read} returned {len(recs)} record(s) of txn op {tid}, which did not commit ({why}, "
                             f"{s}): {where}", time=op.complete_t, partition=recs[0][0], offset=recs[0][1],
                             value=recs[0][2])
                elif t.end_t is not None and op.complete_t is not None and op.complete_t < t.end_t:
                    self.add(READ_COMMITTED_ANOMALY, (op.id, tid),
                             f"{read} completed at t={op.complete_t:.3f} with {len(recs)} record(s) of txn op {tid}, "
                             f"whose commit was requested only at t={t.end_t:.3f}: {where}", time=op.complete_t,
                             partition=recs[0][0], offset=recs[0][1], value=recs[0][2])

        for t in self.txns:
            if not state[t.id].startswith("committed"):
                continue
            hidden = []
            for p, v, _ in t.writes or ():
                if v in self.rc_values or p not in self.rc_parts:
                    continue
                for q, o in self.final_positions(v):
                    if q == p and self.log_start(p) <= o < self.rc_end(p):
                        hidden.append((p, o, v))
                        break
            if hidden:
                p, o, v = hidden[0]
                where = ", ".join(f"{_short(v)} at {p}@{o}" for p, o, v in hidden[:3])
                self.add(READ_COMMITTED_ANOMALY, (t.id, self.rc_final_op.get(p, t.id)),
                         f"{len(hidden)} record(s) of txn op {t.id} ({state[t.id]}) are in the final read_uncommitted "
                         f"read within the read_committed range but not in the final read_committed read: {where}",
                         time=t.complete_t, partition=p, offset=o, value=v)

    def availability(self, bucket_s: float, baseline_s: float, min_ratio: float) -> Availability:
        acks: dict[str, list[float]] = defaultdict(list)
        partitions: set[str] = set()
        for op in self.sends.values():
            partitions.add(op.partition)
            if op.outcome == OK and op.complete_t is not None:
                acks[op.partition].append(op.complete_t)
        for times in acks.values():
            times.sort()
        end = self.h.end_t
        n = max(1, math.ceil(end / bucket_s))
        series: dict[str, list[int]] = {}
        for p in sorted(partitions, key=partition_sort_key):
            counts = [0] * n
            for t in acks[p]:
                counts[min(n - 1, int(t // bucket_s))] += 1
            series[p] = counts

        def count(p: str, a: float, b: float) -> int:
            times = acks.get(p, [])
            return bisect.bisect_left(times, b) - bisect.bisect_left(times, a)

        def baseline(p: str, a: float, b: float) -> float | None:
            """The median of the per-bucket rates in ``[a, b)``: the steady rate, not inflated by the burst of
            records a previous fault held back and released (they were late, not extra throughput)."""
            k = int((b - a) // bucket_s)
            if k <= 0:
                return None
            rates = sorted(count(p, b - (i + 1) * bucket_s, b - i * bucket_s) / bucket_s for i in range(k))
            return statistics.median(rates)

        windows = []
        for fault in self.h.faults:
            s = fault.start
            e = fault.end if fault.end is not None else end
            before = min(baseline_s, s)
            rows = []
            for p in series:
                during = count(p, s, e) / (e - s) if e > s else 0.0
                before_rate = baseline(p, s - before, s)
                if p in fault.leaders:
                    leader = fault.leaders[p]
                    healthy: bool | None = leader is not None and leader >= 0 and leader not in fault.brokers
                else:
                    leader, healthy = None, None
                ratio = during / before_rate if before_rate else None
                ok = not healthy or ratio is None or ratio >= min_ratio
                times = acks.get(p, [])
                i = bisect.bisect_left(times, e)
                resumed = times[i] - e if i < len(times) else None
                rows.append(PartitionWindow(p, leader, healthy, before_rate, during, ratio, ok, resumed))
            windows.append(WindowAvailability(fault, e, before, rows))
        return Availability(bucket_s, baseline_s, min_ratio, series, windows)


__all__ = [
    "ACK_MISMATCH", "CLASSES", "DUPLICATE", "DUPLICATE_ALLOWED", "FORBIDDEN", "LOST", "LOST_UNCLEAN",
    "LOST_WEAK_ACKS", "OFFSET_CONFLICT", "OFFSET_REGRESSION", "OFFSET_REGRESSION_UNCLEAN", "PHANTOM",
    "PHANTOM_UNCLEAN", "PHANTOM_WEAK_ACKS", "READ_COMMITTED_ANOMALY", "READ_UNCOMMITTED", "REORDERED", "Anomaly",
    "Availability", "CheckResult", "PartitionWindow", "WindowAvailability", "check", "partition_sort_key",
]
