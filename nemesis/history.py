"""The history of a nemesis run: every client operation and every fault, append-only, as Jepsen records them.

Why a history rather than assertions in the workload: a checker that sees *everything* (when each operation
was invoked and completed, whether it succeeded, failed or is unknown, and what every read returned) can
judge anomalies that no single client can see: a record one consumer read and that later vanished, two
records that held the same offset at different times, a committed offset that went backwards between two
consumers. Recording is cheap and the judging happens afterwards, so workloads stay simple and a failing run's
history can be checked again (or by a better checker) later.

Schema (one JSON object per line; :meth:`History.load` accepts lines in any order):

``{"type": "meta", ...}``
    :class:`RunMeta`: run name, seed, ``unclean_election`` (changes which losses are documented), scenario.
``{"type": "op", ...}``
    :class:`Op`: one client operation. Common fields: ``id`` (unique, assigned at invocation, increasing),
    ``process`` (one client: one producer or consumer instance, driven from one thread), ``f``, ``invoke_t``,
    ``outcome`` (``ok`` / ``fail`` / ``info``; ``invoke`` if the run ended before it completed, read as
    ``info``), ``complete_t``, ``error``. Times are monotonic seconds since the run started. Per ``f``:

    - ``send``: ``partition`` (``"topic-N"``), ``value`` (unique in the whole history, e.g. ``"p3-17"``),
      ``idempotent``, ``acks`` (``"all"``, ``"1"``, ``"0"``), and on ``ok`` the ``offset`` the broker assigned.
      ``invoke_t`` is when ``produce()`` was called: the order of one process's invocations is the order in
      which its producer sequences the records (an idempotent producer keeps that order per partition).
      ``fail`` means the record was certainly not written (a definite error); anything else is ``info``.
      (A producer whose partitioner picks the partition may give ``partition`` at completion instead.)
    - ``read`` / ``poll``: ``isolation`` (``read_uncommitted`` / ``read_committed``), optional ``group``,
      ``records``: ``[[partition, offset, value], ...]`` as returned (values of control records omitted).
      ``final: true`` marks the final read (see below).
    - ``commit_offset``: ``group``, ``partition``, ``offset`` (the committed position: next offset to read).
    - ``txn``: ``transactional_id``, ``writes``: ``[[partition, value, offset-or-null], ...]`` (offsets from the
      delivery reports where known), ``end`` (``commit`` / ``abort``: what the client asked for; null if it
      never got that far), ``end_t`` (when it asked; :meth:`History.txn_end`). ``ok``: the requested end took
      effect; ``fail``: the transaction is certainly not committed; ``info``: unknown.
``{"type": "fault", ...}``
    :class:`Fault`: ``id``, ``kind``, ``target``, ``brokers`` (the brokers the fault hits), ``description``,
    ``start``, ``end``, ``leaders`` (``{partition: broker}`` at the fault's start, for the availability check).
``{"type": "partition_final", ...}``
    :class:`PartitionFinal`: per partition, after the workload stopped and the cluster healed, the log start
    offset, high watermark and last stable offset that the final read covers.

The final read: after the run, every partition is read from its log start to its high watermark with
``read_uncommitted`` and to its last stable offset with ``read_committed``, recorded as ``read`` ops with
``final: true`` (:meth:`History.final_read`), plus one ``partition_final`` line per partition.

Thread safety: every mutation holds one lock, so producer delivery callbacks, consumer threads and the nemesis
can record concurrently. With a ``path`` the history is also streamed to disk: the meta line at once, each op
when it completes (an ``info`` op that later completes is written again; the loader keeps the last line),
each fault when it ends, ops still pending at :meth:`History.close` as they are. A crashed run leaves a
loadable file.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SEND = "send"
READ = "read"
POLL = "poll"
COMMIT_OFFSET = "commit_offset"
TXN = "txn"
FUNCTIONS = frozenset({SEND, READ, POLL, COMMIT_OFFSET, TXN})
READS = frozenset({READ, POLL})

INVOKE = "invoke"  # not completed (yet): read as info by the checker
OK = "ok"
FAIL = "fail"
INFO = "info"
OUTCOMES = frozenset({INVOKE, OK, FAIL, INFO})

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATIONS = frozenset({READ_UNCOMMITTED, READ_COMMITTED})

COMMIT = "commit"
ABORT = "abort"

ReadRecord = tuple[str, int, str]  # (partition, offset, value)
TxnWrite = tuple[str, str, "int | None"]  # (partition, value, offset if known)
Process = int | str


def tp(topic: str, partition: int) -> str:
    """The partition key used everywhere in a history: Kafka's ``TopicPartition.toString`` (``orders-3``)."""
    return f"{topic}-{partition}"


@dataclass(slots=True)
class Op:
    """One client operation. Only the fields of its ``f`` are set (see the module docstring)."""

    id: int
    process: Process
    f: str
    invoke_t: float
    outcome: str = INVOKE
    complete_t: float | None = None
    partition: str | None = None
    value: str | None = None
    idempotent: bool | None = None
    acks: str | None = None
    offset: int | None = None
    group: str | None = None
    isolation: str | None = None
    records: list[ReadRecord] | None = None
    writes: list[TxnWrite] | None = None
    end: str | None = None
    end_t: float | None = None
    transactional_id: str | None = None
    final: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Only the fields that are set, so a send is one short line."""
        d: dict[str, Any] = {"type": "op"}
        for name in _OP_FIELDS:
            v = getattr(self, name)
            if v is None or (name == "final" and not v):
                continue
            d[name] = v
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Op:
        kw = dict(d)
        kw.pop("type", None)
        records = kw.get("records")
        if records is not None:
            kw["records"] = [(p, o, v) for p, o, v in records]
        writes = kw.get("writes")
        if writes is not None:
            kw["writes"] = [(p, v, o) for p, v, o in writes]
        try:
            return cls(**kw)
        except TypeError:  # fields from a newer writer: keep what this version knows
            return cls(**{k: v for k, v in kw.items() if k in _OP_FIELD_SET})

    @property
    def done(self) -> bool:
        return self.outcome != INVOKE

    def describe(self) -> str:
        """One line for reports: enough to find the op in the history file and see what it did."""
        when = f"t={self.invoke_t:.3f}" + (f"..{self.complete_t:.3f}" if self.complete_t is not None else "..?")
        head = f"op {self.id} [{self.process}] {self.f} {self.outcome} {when}"
        if self.f == SEND:
            kind = "idempotent" if self.idempotent else "plain"
            at = f"@{self.offset}" if self.offset is not None else ""
            return f"{head} {self.value!r} -> {self.partition}{at} ({kind}, acks={self.acks})"
        if self.f in READS:
            n = len(self.records or ())
            return f"{head} {self.isolation}{' FINAL' if self.final else ''} {n} record(s)"
        if self.f == COMMIT_OFFSET:
            return f"{head} group {self.group} {self.partition} offset {self.offset}"
        if self.f == TXN:
            vals = ", ".join(f"{v!r}->{p}" + (f"@{o}" if o is not None else "") for p, v, o in self.writes or ())
            return f"{head} end={self.end} [{vals}]"
        return head


_OP_FIELDS = tuple(Op.__dataclass_fields__)
_OP_FIELD_SET = frozenset(_OP_FIELDS)
# what an op learns when it completes; the rest (what was asked) is fixed at invocation. ``partition`` too: a
# producer that lets its partitioner choose learns the partition from the delivery report.
_COMPLETION_FIELDS = frozenset({"offset", "partition", "records", "writes", "error", "end", "end_t"})


@dataclass(slots=True)
class Fault:
    """A fault window, recorded by the nemesis; ``leaders`` is taken at ``start`` so the availability check knows
    which partitions the fault should not have touched (those led by a broker not in ``brokers``)."""

    id: int
    kind: str
    target: str
    start: float
    end: float | None = None
    brokers: list[int] = field(default_factory=list)
    description: str = ""
    leaders: dict[str, int | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"type": "fault", "id": self.id, "kind": self.kind, "target": self.target, "start": self.start,
                "end": self.end, "brokers": list(self.brokers), "description": self.description,
                "leaders": dict(self.leaders)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fault:
        return cls(id=d["id"], kind=d["kind"], target=d.get("target", ""), start=d["start"], end=d.get("end"),
                   brokers=list(d.get("brokers") or ()), description=d.get("description", ""),
                   leaders=dict(d.get("leaders") or {}))


@dataclass(slots=True)
class PartitionFinal:
    """What the final read of one partition covers: ``[log_start, high_watermark)`` read_uncommitted and
    ``[log_start, last_stable_offset)`` read_committed. ``log_start`` is what lets the checker tell a record
    retention deleted from a lost one."""

    partition: str
    log_start: int
    high_watermark: int
    last_stable_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"type": "partition_final", "partition": self.partition, "log_start": self.log_start,
                "high_watermark": self.high_watermark, "last_stable_offset": self.last_stable_offset}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionFinal:
        return cls(partition=d["partition"], log_start=d["log_start"], high_watermark=d["high_watermark"],
                   last_stable_offset=d.get("last_stable_offset"))


@dataclass(slots=True)
class RunMeta:
    """Facts about the run the checker needs (``unclean_election``) or the report shows."""

    run: str = ""
    seed: int | None = None
    unclean_election: bool = False
    scenario: str = ""
    started_wall: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"type": "meta", "run": self.run, "seed": self.seed, "unclean_election": self.unclean_election,
                "scenario": self.scenario, "started_wall": self.started_wall, "info": self.info}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunMeta:
        return cls(run=d.get("run", ""), seed=d.get("seed"), unclean_election=bool(d.get("unclean_election")),
                   scenario=d.get("scenario", ""), started_wall=d.get("started_wall"), info=dict(d.get("info") or {}))


def _dumps(d: dict[str, Any]) -> str:
    return json.dumps(d, separators=(",", ":"))


class History:
    """An append-only, thread-safe record of a run. Workloads call ``invoke`` then ``ok``/``fail``/``info``
    (or the typed helpers); the nemesis calls :meth:`fault_start`/:meth:`fault_end`."""

    def __init__(self, meta: RunMeta | None = None, path: str | Path | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.meta = meta or RunMeta()
        if self.meta.started_wall is None:
            self.meta.started_wall = time.time()
        self.ops: list[Op] = []
        self.faults: list[Fault] = []
        self.finals: dict[str, PartitionFinal] = {}
        self._next_id = 0
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        if path is not None:
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
            self._writer = threading.Thread(target=self._drain, name="history-writer", daemon=True)
            self._writer.start()
            self._write(self.meta.to_json())

    # -- recording --------------------------------------------------------------------------------------------

    def now(self) -> float:
        """Monotonic seconds since the history was created: the time base of every op and fault."""
        return self._clock() - self._t0

    def _write(self, d: dict[str, Any]) -> None:
        """Queue a line for the writer thread. Recording never waits on the disk: with brokers writing hard
        on the same disk, the kernel throttles a heavy writer (dirty page writeback) for seconds, and a write
        under the history's lock then stalled every client thread that records, which looked like brokers
        not acknowledging (the nemesis' first runs)."""
        if self._file is not None:
            self._lines.put(_dumps(d))

    def _drain(self) -> None:
        assert self._file is not None
        while (line := self._lines.get()) is not None:
            self._file.write(line + "\n")
            if self._lines.empty():
                self._file.flush()

    def invoke(self, process: Process, f: str, *, t: float | None = None, **fields: Any) -> Op:
        """Record the start of an operation; its id is assigned here, so ids follow invocation order."""
        if f not in FUNCTIONS:
            raise ValueError(f"unknown function {f!r}")
        with self._lock:
            op = Op(id=self._next_id, process=process, f=f, invoke_t=self.now() if t is None else t, **fields)
            self.ops.append(op)
            self._next_id += 1
        return op

    def complete(self, op: Op, outcome: str, *, t: float | None = None, **fields: Any) -> bool:
        """Record how ``op`` ended; ``fields`` are what it learnt (offset, partition, records, writes, error,
        end, end_t). Returns False (and changes nothing) for an op already definite (``ok``/``fail``): delivery
        callbacks may race a timeout. An ``info`` op may still become ``ok``/``fail`` when the late answer
        arrives (the answer is better knowledge than the timeout)."""
        if outcome not in (OK, FAIL, INFO):
            raise ValueError(f"bad outcome {outcome!r}")
        with self._lock:
            if op.outcome in (OK, FAIL) or (op.outcome == INFO and outcome == INFO):
                return False
            op.outcome = outcome
            op.complete_t = self.now() if t is None else t
            for k, v in fields.items():
                if k not in _COMPLETION_FIELDS:
                    raise ValueError(f"cannot set {k!r} at completion")
                setattr(op, k, v)
            self._write(op.to_json())
        return True

    def ok(self, op: Op, *, t: float | None = None, **fields: Any) -> bool:
        return self.complete(op, OK, t=t, **fields)

    def fail(self, op: Op, *, t: float | None = None, error: str | None = None, **fields: Any) -> bool:
        return self.complete(op, FAIL, t=t, error=error, **fields)

    def info(self, op: Op, *, t: float | None = None, error: str | None = None, **fields: Any) -> bool:
        return self.complete(op, INFO, t=t, error=error, **fields)

    # typed helpers: the same ops, with the fields each function needs spelled out

    def send(self, process: Process, partition: str, value: str, *, idempotent: bool, acks: str = "all",
             t: float | None = None) -> Op:
        """Invoke a send; complete it with ``ok(op, offset=...)``, ``fail(op, error=...)`` or ``info(op)``."""
        return self.invoke(process, SEND, t=t, partition=partition, value=value, idempotent=idempotent,
                           acks=str(acks))

    def read(self, process: Process, isolation: str, *, f: str = POLL, group: str | None = None,
             t: float | None = None) -> Op:
        """Invoke a read or poll; complete it with ``ok(op, records=[(partition, offset, value), ...])``."""
        if isolation not in ISOLATIONS or f not in READS:
            raise ValueError(f"bad read {f!r} {isolation!r}")
        return self.invoke(process, f, t=t, isolation=isolation, group=group)

    def commit_offset(self, process: Process, group: str, partition: str, offset: int, *,
                      t: float | None = None) -> Op:
        return self.invoke(process, COMMIT_OFFSET, t=t, group=group, partition=partition, offset=offset)

    def txn(self, process: Process, writes: Iterable[tuple[str, str]], *, transactional_id: str | None = None,
            t: float | None = None) -> Op:
        """Invoke a transaction (at ``beginTransaction``) that writes ``(partition, value)`` pairs; call
        :meth:`txn_end` when commit/abort is requested, then ``ok``/``fail``/``info`` (``offsets=[...]`` sets the
        delivery-report offsets, in ``writes`` order)."""
        return self.invoke(process, TXN, t=t, writes=[(p, v, None) for p, v in writes],
                           transactional_id=transactional_id)

    def txn_end(self, op: Op, end: str, *, t: float | None = None) -> None:
        """Record that the client asked to commit or abort (``end_t`` bounds when its records may be visible)."""
        if end not in (COMMIT, ABORT):
            raise ValueError(f"bad end {end!r}")
        with self._lock:
            op.end = end
            op.end_t = self.now() if t is None else t

    def complete_txn(self, op: Op, outcome: str, *, offsets: Sequence[int | None] | None = None,
                     t: float | None = None, error: str | None = None) -> bool:
        """Complete a txn, setting the offsets its writes got (None where unknown). An ``ok`` needs
        :meth:`txn_end` first: the checker reads a transaction that never asked to commit as aborted."""
        if outcome == OK and op.end is None:
            raise ValueError("txn_end (commit or abort) before completing a transaction ok")
        writes = op.writes or []
        if offsets is not None:
            if len(offsets) != len(writes):
                raise ValueError("one offset per write")
            writes = [(p, v, o) for (p, v, _), o in zip(writes, offsets, strict=True)]
        return self.complete(op, outcome, t=t, writes=writes, error=error)

    def final_read(self, process: Process, isolation: str, records: Iterable[ReadRecord], *,
                   invoke_t: float | None = None, complete_t: float | None = None) -> Op:
        """Record one final read (a whole partition or several) through ``isolation``."""
        op = self.invoke(process, READ, t=invoke_t, isolation=isolation, final=True)
        self.complete(op, OK, t=complete_t, records=list(records))
        return op

    def partition_final(self, partition: str, log_start: int, high_watermark: int,
                        last_stable_offset: int | None = None) -> PartitionFinal:
        pf = PartitionFinal(partition, log_start, high_watermark, last_stable_offset)
        with self._lock:
            self.finals[partition] = pf
            self._write(pf.to_json())
        return pf

    def fault_start(self, kind: str, target: str, *, brokers: Iterable[int] = (), description: str = "",
                    leaders: dict[str, int | None] | None = None, t: float | None = None) -> Fault:
        with self._lock:
            fault_id = max((f.id for f in self.faults), default=-1) + 1
            fault = Fault(id=fault_id, kind=kind, target=target, start=self.now() if t is None else t,
                          brokers=list(brokers), description=description, leaders=dict(leaders or {}))
            self.faults.append(fault)
        return fault

    def fault_end(self, fault: Fault, *, t: float | None = None) -> None:
        with self._lock:
            fault.end = self.now() if t is None else t
            self._write(fault.to_json())

    def close(self) -> None:
        """Flush what is still open (pending ops as ``invoke``, faults without an end) and close the file."""
        with self._lock:
            if self._file is None:
                return
            for op in self.ops:
                if not op.done:
                    self._write(op.to_json())
            for fault in self.faults:
                if fault.end is None:
                    self._write(fault.to_json())
            self._lines.put(None)
            if self._writer is not None:
                self._writer.join(120)
            self._file.close()
            self._file = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serialisation ----------------------------------------------------------------------------------------

    def lines(self) -> Iterator[str]:
        """The whole history as JSON lines: meta, ops in id order, faults, partition finals."""
        yield _dumps(self.meta.to_json())
        for op in self.ops:
            yield _dumps(op.to_json())
        for fault in self.faults:
            yield _dumps(fault.to_json())
        for pf in self.finals.values():
            yield _dumps(pf.to_json())

    def dump(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for line in self.lines():
                fh.write(line + "\n")

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> History:
        """Parse JSON lines in any order; for an op or fault written more than once the last line wins."""
        h = cls()
        ops: dict[int, Op] = {}
        faults: dict[int, Fault] = {}
        for raw in lines:
            raw = raw.strip()
            if not raw:
                continue
            d = json.loads(raw)
            kind = d.get("type")
            if kind == "op":
                op = Op.from_json(d)
                ops[op.id] = op
            elif kind == "fault":
                fault = Fault.from_json(d)
                faults[fault.id] = fault
            elif kind == "partition_final":
                pf = PartitionFinal.from_json(d)
                h.finals[pf.partition] = pf
            elif kind == "meta":
                h.meta = RunMeta.from_json(d)
            else:
                raise ValueError(f"unknown history line type {kind!r}")
        h.ops = [ops[i] for i in sorted(ops)]
        h._next_id = max(ops, default=-1) + 1
        h.faults = [faults[i] for i in sorted(faults)]
        return h

    @classmethod
    def load(cls, path: str | Path) -> History:
        with open(path, encoding="utf-8") as fh:
            return cls.from_lines(fh)

    @property
    def end_t(self) -> float:
        """The last time anything in the history happened (the run's length for plots and rates)."""
        t = 0.0
        for op in self.ops:
            t = max(t, op.invoke_t, op.complete_t or 0.0)
        for fault in self.faults:
            t = max(t, fault.start, fault.end or 0.0)
        return t
