"""Synthetic histories of a *correct* cluster, for testing the checker and demonstrating the report.

Why a simulator rather than hand-written histories: the checker's hard part is not flagging what a correct
broker legitimately does (overlapping sends, retries that duplicate a plain producer's records, transactions
aborted or of unknown outcome, consumers re-reading after a rebalance, retention deleting records, leaders
failing over). A small discrete-event model of a Kafka cluster produces all of that with random interleavings
from a seed, and what it did (e.g. which plain sends it wrote twice) is known exactly, so a test can say the
checker found precisely that and nothing else.

The model: partitions are lists of entries (a value, or a transaction marker); an append takes the next offset
at the time it happens, so offsets follow real time. Producers (idempotent acks=all, plain acks=1/all) append
their records per partition in invocation order; a plain send is sometimes appended twice (a retry after a
lost response: the ack carries the second offset). Sends fail (never appended) or end unknown (appended or
not) at small rates. Transactional producers write 1-3 records, then commit or abort; the markers decide
what read_committed shows (up to the last stable offset, aborted records skipped). Consumers poll with both
isolation levels, some in a group that commits offsets (ownership rotates every few seconds; a commit sometimes
overlaps a second one of a lower offset). A nemesis opens fault windows: partitions led by the faulty broker
take no appends until a failover moves their leadership (acks resume), other partitions are untouched.
Retention moves one partition's log start forward. At the end: a quiet period, then the final read.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nemesis.history import (
    ABORT,
    COMMIT,
    POLL,
    READ,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    History,
    Op,
    RunMeta,
    tp,
)


@dataclass
class SynthConfig:
    seed: int = 0
    duration: float = 40.0
    topic: str = "t"
    partitions: int = 3
    brokers: int = 3
    idempotent_producers: int = 2
    plain_producers: int = 2  # acks=1, acks=all, ...
    send_interval: float = 0.05  # mean gap between one producer's invocations
    txn_producers: int = 1
    txn_interval: float = 0.4
    consumers: int = 3  # alternately read_uncommitted and read_committed; the first two form a group
    poll_interval: float = 0.25
    rebalance_s: float = 8.0
    faults: int = 2
    fault_s: tuple[float, float] = (5.0, 8.0)
    failover_s: float = 2.5
    baseline_s: float = 10.0
    retention: bool = True
    plain_retry_rate: float = 0.01
    fail_rate: float = 0.01
    info_rate: float = 0.01
    quiet_s: float = 3.0


@dataclass
class SynthTruth:
    """What the simulation did that the checker should find (allowed) or use."""

    allowed_duplicates: set[str] = field(default_factory=set)  # plain values the checker can see twice
    failed_sends: list[int] = field(default_factory=list)  # send op ids never appended
    final_t: float = 0.0  # when the final read was invoked: injected ops go in the quiet period before it
    quiet_from: float = 0.0  # every workload op completed before this


Entry = list[Any]  # [value or None (marker), txn op id or None]


class _Sim:
    def __init__(self, cfg: SynthConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.h = History(RunMeta(run=f"synthetic-{cfg.seed}", seed=cfg.seed, scenario="synthetic"),
                         clock=lambda: 0.0)
        self.truth = SynthTruth()
        self.parts = [tp(cfg.topic, i) for i in range(cfg.partitions)]
        self.log: dict[str, list[Entry]] = {p: [] for p in self.parts}
        self.log_start = dict.fromkeys(self.parts, 0)
        self.leader = {p: i % cfg.brokers for i, p in enumerate(self.parts)}
        self.outage_until = dict.fromkeys(self.parts, -math.inf)
        self.txn_state: dict[int, str] = {}  # txn op id -> open / committed / aborted
        self.open_first: dict[str, dict[int, int]] = {p: {} for p in self.parts}  # p -> txn id -> first offset
        self.queues: dict[tuple[str, str], deque[tuple[Op, float, str, bool]]] = defaultdict(deque)
        self.copies: dict[str, list[tuple[str, int]]] = defaultdict(list)  # plain value -> offsets written
        self.read_pos: dict[str, set[int]] = defaultdict(set)
        self.committed: dict[tuple[str, str], int] = {}
        self.heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = 0
        self.now = 0.0
        self.last_t = 0.0

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, args))

    def lso(self, p: str) -> int:
        firsts = self.open_first[p]
        return min(firsts.values()) if firsts else len(self.log[p])

    def run(self) -> tuple[History, SynthTruth]:
        cfg, rng = self.cfg, self.rng
        for i in range(cfg.idempotent_producers):
            self.at(rng.uniform(0, 0.1), self.produce, f"i{i}", True, "all")
        for i in range(cfg.plain_producers):
            self.at(rng.uniform(0, 0.1), self.produce, f"n{i}", False, "1" if i % 2 == 0 else "all")
        for i in range(cfg.txn_producers):
            self.at(rng.uniform(0, 0.2), self.transact, f"x{i}")
        for i in range(cfg.consumers):
            iso = READ_UNCOMMITTED if i % 2 == 0 else READ_COMMITTED
            group = "g" if i < 2 else None
            self.at(rng.uniform(0, 0.3), self.consume, f"c{i}", iso, group, {})
        self.schedule_faults()
        if cfg.retention:
            self.at(cfg.duration * rng.uniform(0.5, 0.7), self.retain)
        while self.heap:
            t, _, fn, args = heapq.heappop(self.heap)
            self.now = t
            self.last_t = max(self.last_t, t)
            fn(*args)
        self.final()
        return self.h, self.truth

    # -- producers ------------------------------------------------------------------------------------------

    def produce(self, proc: str, idempotent: bool, acks: str, seq: int = 0) -> None:
        cfg, rng = self.cfg, self.rng
        if self.now >= cfg.duration:
            return
        p = rng.choice(self.parts)
        op = self.h.send(proc, p, f"{proc}-{seq}", idempotent=idempotent, acks=acks, t=self.now)
        r = rng.random()
        if r < cfg.fail_rate:
            self.truth.failed_sends.append(op.id)
            self.at(self.now + rng.uniform(0.01, 0.2), self.complete_send, op, "fail")
        else:
            outcome = "info" if r < cfg.fail_rate + cfg.info_rate else "ok"
            if outcome == "ok" or rng.random() < 0.5:
                retry = not idempotent and outcome == "ok" and rng.random() < cfg.plain_retry_rate
                self.schedule_append(op, self.now + rng.uniform(0.002, 0.02), outcome, retry)
            else:
                self.at(self.now + 1.0, self.complete_send, op, "info")
        self.at(self.now + rng.expovariate(1 / cfg.send_interval), self.produce, proc, idempotent, acks, seq + 1)

    def schedule_append(self, op: Op, t: float, outcome: str, retry: bool) -> None:
        """Appends of one producer to one partition go through a queue, in invocation order (the idempotent
        guarantee, and what a plain producer does without retries), also when a fault holds them back."""
        key = (str(op.process), op.partition)
        queue = self.queues[key]
        queue.append((op, t, outcome, retry))
        if len(queue) == 1:
            self.at(t, self.pump, key)

    def pump(self, key: tuple[str, str]) -> None:
        queue = self.queues[key]
        op, _, outcome, retry = queue[0]
        if self.now < self.outage_until[op.partition]:  # leader unreachable: wait for the failover
            self.at(self.outage_until[op.partition] + self.rng.uniform(0.01, 0.2), self.pump, key)
            return
        queue.popleft()
        self.append(op, outcome, retry)
        if queue:
            self.at(max(queue[0][1], self.now + 1e-6), self.pump, key)

    def append(self, op: Op, outcome: str, retry: bool) -> None:
        p = op.partition
        if self.now < self.outage_until[p]:  # only a plain producer's retry gets here during an outage
            self.at(self.outage_until[p] + self.rng.uniform(0.01, 0.2), self.append, op, outcome, retry)
            return
        offset = len(self.log[p])
        self.log[p].append([op.value, None])
        if not op.idempotent:
            self.copies[op.value].append((p, offset))
        if retry:  # the response was lost; the retry writes the record again and is the one acknowledged
            self.at(self.now + self.rng.uniform(0.03, 0.1), self.append, op, outcome, False)
        elif outcome == "ok":
            self.at(self.now + self.rng.uniform(0.002, 0.03), self.complete_send, op, "ok", offset)
        else:
            self.at(self.now + 1.0, self.complete_send, op, "info")

    def complete_send(self, op: Op, outcome: str, offset: int | None = None) -> None:
        if outcome == "ok":
            self.h.ok(op, offset=offset, t=self.now)
        elif outcome == "fail":
            self.h.fail(op, error="NOT_ENOUGH_REPLICAS", t=self.now)
        else:
            self.h.info(op, error="timed out", t=self.now)

    # -- transactions ---------------------------------------------------------------------------------------

    def transact(self, proc: str, seq: int = 0) -> None:
        cfg, rng = self.cfg, self.rng
        if self.now >= cfg.duration:
            return
        writes = [(rng.choice(self.parts), f"{proc}-{seq}.{i}") for i in range(rng.randint(1, 3))]
        op = self.h.txn(proc, writes, transactional_id=f"tx-{proc}", t=self.now)
        self.txn_state[op.id] = "open"
        offsets: list[int] = []
        t = self.now
        for p, v in writes:
            t += rng.uniform(0.002, 0.01)
            self.at(t, self.txn_append, op, p, v, offsets)
        self.at(t + rng.uniform(0.05, 0.3), self.txn_end, op, offsets, seq)

    def txn_append(self, op: Op, p: str, v: str, offsets: list[int]) -> None:
        offset = len(self.log[p])
        self.log[p].append([v, op.id])
        self.open_first[p].setdefault(op.id, offset)
        offsets.append(offset)

    def txn_end(self, op: Op, offsets: list[int], seq: int) -> None:
        rng = self.rng
        end = COMMIT if rng.random() < 0.75 else ABORT
        self.h.txn_end(op, end, t=self.now)
        r = rng.random()
        if end == COMMIT:
            outcome, decided = ("ok", "committed") if r < 0.85 else ("fail", "aborted") if r < 0.93 else (
                "info", rng.choice(["committed", "aborted"]))
        else:
            outcome, decided = ("ok" if r < 0.95 else "info"), "aborted"
        self.at(self.now + rng.uniform(0.005, 0.02), self.txn_markers, op, offsets, outcome, decided, seq)

    def txn_markers(self, op: Op, offsets: list[int], outcome: str, decided: str, seq: int) -> None:
        self.txn_state[op.id] = decided
        for p in dict.fromkeys(p for p, _, _ in op.writes):
            self.log[p].append([None, op.id])
            self.open_first[p].pop(op.id, None)
        known = offsets if outcome != "info" or self.rng.random() < 0.5 else None
        t = self.now + self.rng.uniform(0.002, 0.02)
        self.at(t, self.txn_complete, op, outcome, known)
        self.at(t + self.rng.expovariate(1 / self.cfg.txn_interval), self.transact, str(op.process), seq + 1)

    def txn_complete(self, op: Op, outcome: str, offsets: list[int] | None) -> None:
        self.h.complete_txn(op, outcome, offsets=offsets, t=self.now,
                            error=None if outcome == "ok" else "timed out" if outcome == "info" else "aborted")

    # -- consumers ------------------------------------------------------------------------------------------

    def owner(self, group: str, p: str) -> tuple[str | None, float]:
        """Which member of the group owns p now (None during a rebalance), and since when."""
        cfg = self.cfg
        epoch = int(self.now // cfg.rebalance_s)
        since = epoch * cfg.rebalance_s
        if self.now < since + 0.5 and epoch > 0:
            return None, since
        return f"c{(self.parts.index(p) + epoch) % 2}", since

    def consume(self, proc: str, iso: str, group: str | None, pos: dict[str, tuple[int, float]]) -> None:
        cfg, rng = self.cfg, self.rng
        if self.now >= cfg.duration:
            return
        p = rng.choice(self.parts)
        if group is not None:
            owner, since = self.owner(group, p)
            if owner != proc:
                self.at(self.now + rng.expovariate(1 / cfg.poll_interval), self.consume, proc, iso, group, pos)
                return
            start, owned_since = pos.get(p, (-1, -1.0))
            if owned_since != since:  # a new assignment: start from the group's committed offset
                start = self.committed.get((group, p), 0)
        else:
            start = pos.get(p, (0, 0.0))[0]
            since = 0.0
        start = max(start, self.log_start[p])
        end = len(self.log[p]) if iso == READ_UNCOMMITTED else self.lso(p)
        stop = min(end, start + rng.randint(1, 30))
        records = []
        for o in range(start, stop):
            v, tid = self.log[p][o]
            if v is None or (iso == READ_COMMITTED and tid is not None and self.txn_state[tid] != "committed"):
                continue
            records.append((p, o, v))
            self.read_pos[p].add(o)
        op = self.h.read(proc, iso, f=POLL if group else READ, group=group, t=self.now)
        done = self.now + rng.uniform(0.002, 0.05)
        self.at(done, lambda op=op, records=records: self.h.ok(op, records=records, t=self.now))
        # one poll at a time per consumer, as a consumer's poll loop does
        self.at(done + 0.002 + rng.expovariate(1 / cfg.poll_interval), self.consume, proc, iso, group, pos)
        pos[p] = (stop, since)
        if group is not None and rng.random() < 0.5:
            t = done + 0.001
            self.at(t, self.commit, proc, group, p, stop)
            if rng.random() < 0.1:  # an overlapping commit of a lower offset: concurrent, not a regression
                self.at(t + 0.005, self.commit, proc, group, p, None, 0.01)

    def commit(self, proc: str, group: str, p: str, offset: int | None, latency: float | None = None) -> None:
        """Commit ``offset``; None: the group's committed offset as it is now (lower than the commit in flight,
        never lower than a completed one)."""
        if offset is None:
            offset = self.committed.get((group, p), 0)
        op = self.h.commit_offset(proc, group, p, offset, t=self.now)
        latency = self.rng.uniform(0.03, 0.08) if latency is None else latency

        def done() -> None:
            self.h.ok(op, t=self.now)
            self.committed[(group, p)] = max(self.committed.get((group, p), 0), offset)

        self.at(self.now + latency, done)

    # -- nemesis and retention ------------------------------------------------------------------------------

    def schedule_faults(self) -> None:
        cfg, rng = self.cfg, self.rng
        if cfg.faults <= 0:
            return
        slot = (cfg.duration - 2.0) / cfg.faults
        kinds = ["isolate-leader", "leader-zk-partition", "kill -9", "SIGSTOP", "packet loss"]
        for k in range(cfg.faults):
            length = rng.uniform(*cfg.fault_s)
            lo = k * slot + min(cfg.baseline_s, slot / 2)
            start = rng.uniform(lo, max(lo, (k + 1) * slot - length))
            length = max(0.5, min(length, (k + 1) * slot - start))  # windows end before the next, and the run
            self.at(start, self.fault, rng.choice(kinds), rng.randrange(cfg.brokers), length)

    def fault(self, kind: str, broker: int, length: float) -> None:
        hit = [] if kind == "packet loss" else [broker]
        fault = self.h.fault_start(kind, f"broker {broker}", brokers=hit, leaders=dict(self.leader), t=self.now,
                                   description=f"{kind} of broker {broker} for {length:.1f} s")
        for p, b in self.leader.items():
            if b in hit:
                self.outage_until[p] = self.now + self.cfg.failover_s
                self.at(self.now + self.cfg.failover_s, self.failover, p, b)
        self.at(self.now + length, lambda: self.h.fault_end(fault, t=self.now))

    def failover(self, p: str, old: int) -> None:
        self.leader[p] = (old + 1) % self.cfg.brokers

    def retain(self) -> None:
        p = self.rng.choice(self.parts)
        self.log_start[p] = max(self.log_start[p], min(self.lso(p), len(self.log[p]) // 2))

    # -- the end --------------------------------------------------------------------------------------------

    def final(self) -> None:
        quiet_from = max(self.last_t, self.h.end_t)
        t = quiet_from + self.cfg.quiet_s
        self.truth.quiet_from = quiet_from
        self.truth.final_t = t
        for p in self.parts:
            ls, log = self.log_start[p], self.log[p]
            ru = [(p, o, log[o][0]) for o in range(ls, len(log)) if log[o][0] is not None]
            rc = [(p, o, v) for p, o, v in ru if log[o][1] is None or self.txn_state[log[o][1]] == "committed"]
            self.h.final_read("final", READ_UNCOMMITTED, ru, invoke_t=t, complete_t=t + 0.5)
            self.h.final_read("final", READ_COMMITTED, rc, invoke_t=t, complete_t=t + 0.5)
            self.h.partition_final(p, ls, len(log), self.lso(p))
        for v, copies in self.copies.items():
            seen = [(p, o) for p, o in copies if o >= self.log_start[p] or o in self.read_pos[p]]
            if len(seen) >= 2:
                self.truth.allowed_duplicates.add(v)


def synthesize(cfg: SynthConfig | None = None, **overrides: Any) -> tuple[History, SynthTruth]:
    """A clean history from ``cfg`` (or ``SynthConfig(**overrides)``) and what the simulation knows about it."""
    if cfg is None:
        cfg = SynthConfig(**overrides)
    elif overrides:
        raise TypeError("give a config or overrides, not both")
    return _Sim(cfg).run()
