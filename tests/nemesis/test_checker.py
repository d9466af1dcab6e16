"""The nemesis checker on histories with injected anomalies of every class: each one found, none invented.

Clean histories come from ``nemesis.synthetic`` (a model of a correct cluster with random interleavings from a
seed: overlapping idempotent and plain sends, plain retries that write twice, transactions committed, aborted
and of unknown outcome, consumer groups with rebalances and concurrent commits, fault windows with leader
failover, retention). On those the checker must report nothing forbidden, and exactly the plain duplicates the
model wrote. Each injection then changes one thing and the checker must report exactly that anomaly, of the
right class, naming the right operations, and nothing else.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from nemesis.checker import (
    ACK_MISMATCH,
    CLASSES,
    DUPLICATE,
    DUPLICATE_ALLOWED,
    FORBIDDEN,
    LOST,
    LOST_UNCLEAN,
    LOST_WEAK_ACKS,
    OFFSET_CONFLICT,
    OFFSET_REGRESSION,
    OFFSET_REGRESSION_UNCLEAN,
    PHANTOM,
    PHANTOM_UNCLEAN,
    PHANTOM_WEAK_ACKS,
    READ_COMMITTED_ANOMALY,
    REORDERED,
    CheckResult,
    check,
)
from nemesis.history import (
    ABORT,
    COMMIT,
    FAIL,
    OK,
    POLL,
    READ,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    SEND,
    TXN,
    History,
    Op,
    RunMeta,
)
from nemesis.report import format_report, plot_timeline
from nemesis.synthetic import SynthConfig, SynthTruth, synthesize

SMALL = {"duration": 20.0, "faults": 1}

# -- helpers ---------------------------------------------------------------------------------------------------


def clean(seed: int, **cfg: object) -> tuple[History, SynthTruth]:
    """A clean synthetic history, as a fresh copy (it went through the JSON lines, like a real one)."""
    h, truth = synthesize(SynthConfig(seed=seed, **{**SMALL, **cfg}))
    return History.from_lines(list(h.lines())), truth


def unexpected(result: CheckResult, truth: SynthTruth, expected: dict[str, int] | None = None) -> dict[str, object]:
    """Everything the checker said beyond the model's allowed duplicates and ``expected`` counts: {} when
    it said exactly that."""
    expected = expected or {}
    out: dict[str, object] = {}
    for cls in CLASSES:
        got = result.anomalies[cls]
        if cls == DUPLICATE_ALLOWED:
            values = {a.value for a in got}
            extra = values - truth.allowed_duplicates
            if values - extra != truth.allowed_duplicates or len(extra) != expected.get(cls, 0):
                out[cls] = sorted(values ^ truth.allowed_duplicates)
        elif len(got) != expected.get(cls, 0):
            out[cls] = [a.description for a in got]
    if result.problems:
        out["problems"] = result.problems
    return out


def assert_exactly(result: CheckResult, truth: SynthTruth, cls: str, ops: set[int],
                   partition: str | None = None, offset: int | None = None) -> None:
    assert unexpected(result, truth, {cls: 1}) == {}
    found = [a for a in result.anomalies[cls] if cls != DUPLICATE_ALLOWED or a.value not in truth.allowed_duplicates]
    assert len(found) == 1
    a = found[0]
    assert ops <= set(a.ops), (ops, a)
    if partition is not None:
        assert a.partition == partition, a
    if offset is not None:
        assert a.offset == offset, a
    assert result.ok == (cls not in FORBIDDEN)


def final_read(h: History, p: str, isolation: str) -> Op:
    """The final read of p through ``isolation``: the synthetic history reads each partition in order, first
    read_uncommitted, then read_committed."""
    finals = [op for op in h.ops if op.final]
    parts = sorted(h.finals, key=lambda q: int(q.rsplit("-", 1)[1]))
    op = finals[2 * parts.index(p) + (isolation == READ_COMMITTED)]
    assert op.isolation == isolation
    return op


def final_value(h: History, p: str, o: int) -> str | None:
    for r in final_read(h, p, READ_UNCOMMITTED).records:
        if r[1] == o:
            return r[2]
    return None


def placed_sends(h: History, pred: Callable[[Op], bool] = lambda op: True) -> list[Op]:
    """ok sends whose value the final read has exactly at their acknowledged offset (and nowhere else)."""
    positions: dict[str, list[tuple[str, int]]] = {}
    for op in h.ops:
        if op.final and op.isolation == READ_UNCOMMITTED:
            for p, o, v in op.records:
                positions.setdefault(v, []).append((p, o))
    return [op for op in h.ops if op.f == SEND and op.outcome == OK and pred(op)
            and positions.get(op.value) == [(op.partition, op.offset)]]


def add_final_record(h: History, p: str, v: str, *, committed_visible: bool = True) -> int:
    """Append ``v`` at the end of p in the final read (both isolations) and move the end: a write the final
    read shows and no one else saw."""
    pf = h.finals[p]
    o = pf.high_watermark
    final_read(h, p, READ_UNCOMMITTED).records.append((p, o, v))
    if committed_visible:
        final_read(h, p, READ_COMMITTED).records.append((p, o, v))
    pf.high_watermark += 1
    if pf.last_stable_offset == o:
        pf.last_stable_offset += 1
    return o


def remove_final_record(h: History, p: str, v: str, isolations: tuple[str, ...] = (READ_UNCOMMITTED,
                                                                                 READ_COMMITTED)) -> None:
    for iso in isolations:
        op = final_read(h, p, iso)
        op.records = [r for r in op.records if r[2] != v]


def new_read(h: History, truth: SynthTruth, records: list[tuple[str, int, str]], isolation: str = READ_UNCOMMITTED,
             *, t: float | None = None, f: str = POLL) -> Op:
    t = truth.quiet_from + 0.5 if t is None else t
    op = h.read("c-injected", isolation, f=f, t=t)
    h.ok(op, records=records, t=t + 0.01)
    return op


def new_send(h: History, truth: SynthTruth, p: str, v: str, *, t: float, offset: int | None, idempotent: bool = True,
             acks: str = "all", outcome: str = OK, process: str = "p-injected") -> Op:
    op = h.send(process, p, v, idempotent=idempotent, acks=acks, t=truth.quiet_from + t)
    h.complete(op, outcome, t=truth.quiet_from + t + 0.05, **({"offset": offset} if outcome == OK else {}))
    return op


def txns(h: History, pred: Callable[[Op], bool]) -> list[Op]:
    return [op for op in h.ops if op.f == TXN and pred(op)]


def in_final(h: History, p: str, o: int | None, v: str) -> bool:
    return o is not None and o >= h.finals[p].log_start and final_value(h, p, o) == v


def deleted_unread_offset(h: History, p: str) -> int:
    """An offset below p's log start that no read returned: a read of it conflicts with nothing."""
    seen = {r[1] for op in h.ops if op.records for r in op.records if r[0] == p}
    return next(o for o in range(h.finals[p].log_start) if o not in seen)


seeds = st.integers(min_value=0, max_value=2**32 - 1)
inject_settings = settings(max_examples=12, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# -- clean histories: nothing invented --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=seeds, partitions=st.integers(1, 5), idem=st.integers(0, 3), plain=st.integers(0, 3),
       txn=st.integers(0, 2), consumers=st.integers(0, 4), faults=st.integers(0, 3), retention=st.booleans())
def test_clean_histories_have_no_anomaly(seed: int, partitions: int, idem: int, plain: int, txn: int, consumers: int,
                                         faults: int, retention: bool) -> None:
    h, truth = clean(seed, partitions=partitions, idempotent_producers=idem, plain_producers=plain,
                     txn_producers=txn, consumers=consumers, faults=faults, retention=retention, duration=30.0)
    result = check(h)
    assert unexpected(result, truth) == {}
    assert result.ok
    if (idem + plain) * 20 / partitions >= 10:  # below ~10 acks/s a 5 s window's count is too noisy to judge
        assert result.availability.ok


def test_clean_history_exercises_the_hard_cases() -> None:
    """The generator really produces what the checker must not flag, or the clean test would prove little."""
    h, truth = clean(11, duration=40.0, faults=2)
    assert truth.allowed_duplicates
    assert any(op.f == SEND and op.outcome == "info" for op in h.ops)
    assert any(op.f == SEND and op.outcome == FAIL for op in h.ops)
    assert {op.end for op in h.ops if op.f == TXN} == {COMMIT, ABORT}
    assert any(op.f == TXN and op.end == COMMIT and op.outcome == "info" for op in h.ops)
    assert any(pf.log_start > 0 for pf in h.finals.values())
    commits = sorted((op for op in h.ops if op.f == "commit_offset"), key=lambda op: op.invoke_t)
    assert any(b.invoke_t < a.complete_t and b.offset < a.offset and b.partition == a.partition
               for a, b in zip(commits, commits[1:], strict=False))  # overlapping, lower: allowed
    assert len({op.process for op in h.ops if op.f == "commit_offset"}) == 2  # ownership moved
    sends = [op for op in h.ops if op.f == SEND and op.outcome == OK and op.idempotent]
    assert any(b.invoke_t < a.complete_t and a.process == b.process and a.partition == b.partition
               for a, b in zip(sends, sends[1:], strict=False))  # overlapping sends of one producer
    assert len(h.faults) == 2 and all(f.leaders for f in h.faults)
    assert check(h).ok


# -- lost -------------------------------------------------------------------------------------------------------


@inject_settings
@given(seed=seeds)
def test_lost(seed: int) -> None:
    h, truth = clean(seed)
    victim = random.Random(seed).choice(placed_sends(h, lambda op: op.idempotent))
    remove_final_record(h, victim.partition, victim.value)
    assert_exactly(check(h), truth, LOST, {victim.id}, victim.partition, victim.offset)


@inject_settings
@given(seed=seeds)
def test_lost_with_unclean_election_is_documented(seed: int) -> None:
    h, truth = clean(seed)
    h.meta.unclean_election = True
    victim = random.Random(seed).choice(placed_sends(h, lambda op: op.idempotent))
    remove_final_record(h, victim.partition, victim.value)
    result = check(h)
    assert_exactly(result, truth, LOST_UNCLEAN, {victim.id})
    assert result.ok


@inject_settings
@given(seed=seeds)
def test_lost_with_acks_1_is_documented(seed: int) -> None:
    h, truth = clean(seed)
    victims = placed_sends(h, lambda op: op.acks == "1" and op.value not in truth.allowed_duplicates)
    victim = random.Random(seed).choice(victims)
    remove_final_record(h, victim.partition, victim.value)
    assert_exactly(check(h), truth, LOST_WEAK_ACKS, {victim.id})


@inject_settings
@given(seed=seeds)
def test_lost_committed_transactional_record(seed: int) -> None:
    h, truth = clean(seed)
    committed = txns(h, lambda t: t.end == COMMIT and t.outcome == OK
                     and all(in_final(h, p, o, v) for p, v, o in t.writes))
    t = random.Random(seed).choice(committed)
    p, v, _ = t.writes[0]
    remove_final_record(h, p, v)
    assert_exactly(check(h), truth, LOST, {t.id})


def test_records_deleted_by_retention_are_not_lost() -> None:
    h, truth = clean(5)
    (p,) = [p for p, pf in h.finals.items() if pf.log_start > 0]
    below = [op for op in h.ops if op.f == SEND and op.outcome == OK and op.partition == p
             and op.offset < h.finals[p].log_start]
    assert below
    assert unexpected(check(h), truth) == {}
    h.finals[p].log_start = 0  # the same history, but the log claims to start at 0: now they are lost
    result = check(h)
    lost = {a.ops[0] for a in result.anomalies[LOST] + result.anomalies[LOST_WEAK_ACKS]}
    assert {op.id for op in below} <= lost


def test_truncated_then_overwritten_is_one_loss_not_a_conflict() -> None:
    """Unclean election: Z acknowledged and read at offset o, truncated, W written at o. One documented loss
    (the conflict at o is its mechanism, told in its description), nothing else; the same forbidden without
    the flag."""
    for unclean, cls in ((True, LOST_UNCLEAN), (False, LOST)):
        h, truth = clean(21)
        h.meta.unclean_election = unclean
        p = "t-0"
        o = h.finals[p].high_watermark
        z = new_send(h, truth, p, "z-lost", t=0.1, offset=o)
        reader = new_read(h, truth, [(p, o, "z-lost")], t=truth.quiet_from + 0.3)
        w = new_send(h, truth, p, "w-new", t=0.5, offset=o)
        add_final_record(h, p, "w-new")
        result = check(h)
        assert_exactly(result, truth, cls, {z.id}, p, o)
        (a,) = result.anomalies[cls]
        assert "'w-new'" in a.description and str(reader.id) in a.description
        assert w.id not in {i for x in result.all() for i in x.ops if x.cls != DUPLICATE_ALLOWED}


# -- duplicates -------------------------------------------------------------------------------------------------


@inject_settings
@given(seed=seeds)
def test_duplicate_from_idempotent_producer(seed: int) -> None:
    h, truth = clean(seed)
    victim = random.Random(seed).choice(placed_sends(h, lambda op: op.idempotent))
    o = add_final_record(h, victim.partition, victim.value)
    assert_exactly(check(h), truth, DUPLICATE, {victim.id, final_read(h, victim.partition, READ_UNCOMMITTED).id})
    assert o > victim.offset


@inject_settings
@given(seed=seeds)
def test_duplicate_of_transactional_record(seed: int) -> None:
    h, truth = clean(seed)
    committed = txns(h, lambda t: t.end == COMMIT and t.outcome == OK
                     and all(in_final(h, p, o, v) for p, v, o in t.writes))
    t = random.Random(seed).choice(committed)
    p, v, _ = t.writes[-1]
    add_final_record(h, p, v)
    assert_exactly(check(h), truth, DUPLICATE, {t.id})


@inject_settings
@given(seed=seeds)
def test_duplicate_from_plain_producer_is_allowed(seed: int) -> None:
    h, truth = clean(seed)
    victim = random.Random(seed).choice(placed_sends(h, lambda op: not op.idempotent
                                                     and op.value not in truth.allowed_duplicates))
    add_final_record(h, victim.partition, victim.value)
    result = check(h)
    assert_exactly(result, truth, DUPLICATE_ALLOWED, {victim.id})
    assert result.ok


def test_duplicate_seen_before_retention_deleted_one_copy() -> None:
    """A copy below the log start still counts if a read saw it: it was in the log."""
    h, truth = clean(5)
    (p,) = [p for p, pf in h.finals.items() if pf.log_start > 0]
    victim = placed_sends(h, lambda op: op.idempotent and op.partition == p)[-1]
    reader = new_read(h, truth, [(p, deleted_unread_offset(h, p), victim.value)])
    assert_exactly(check(h), truth, DUPLICATE, {victim.id, reader.id})


# -- reordering -------------------------------------------------------------------------------------------------


@inject_settings
@given(seed=seeds)
def test_reordered_idempotent_sends_swapped_in_place(seed: int) -> None:
    """Two sends of one idempotent producer at adjacent offsets trade places everywhere (acks, every read):
    a broker that appended them out of order. Only the idempotent rule can see it when they overlapped."""
    h, truth = clean(seed)
    sends = {(op.partition, op.offset): op for op in placed_sends(h, lambda op: op.idempotent)}
    pairs = []
    for (p, o), a in sends.items():
        b = sends.get((p, o + 1))
        if b is not None and b.process == a.process and o >= h.finals[p].log_start:
            pairs.append((a, b))
    assume(pairs)
    a, b = random.Random(seed).choice(pairs)
    swap = {(a.partition, a.offset): b.offset, (b.partition, b.offset): a.offset}
    for op in h.ops:
        if op.records:
            op.records = [(p, swap.get((p, o), o), v) for p, o, v in op.records]
    a.offset, b.offset = b.offset, a.offset
    assert_exactly(check(h), truth, REORDERED, {a.id, b.id}, b.partition, b.offset)


@inject_settings
@given(seed=seeds)
def test_reordered_overlapping_idempotent_sends(seed: int) -> None:
    h, truth = clean(seed)
    p = random.Random(seed).choice(sorted(h.finals))
    o = h.finals[p].high_watermark
    a = h.send("i-new", p, "a-first", idempotent=True, t=truth.quiet_from + 0.1)
    b = h.send("i-new", p, "b-second", idempotent=True, t=truth.quiet_from + 0.2)
    h.ok(b, offset=o, t=truth.quiet_from + 0.3)
    h.ok(a, offset=o + 1, t=truth.quiet_from + 0.4)
    add_final_record(h, p, "b-second")
    add_final_record(h, p, "a-first")
    assert_exactly(check(h), truth, REORDERED, {a.id, b.id}, p, o)


def test_overlapping_plain_sends_may_reorder() -> None:
    h, truth = clean(3)
    p = "t-1"
    o = h.finals[p].high_watermark
    a = h.send("n-new", p, "a-first", idempotent=False, t=truth.quiet_from + 0.1)
    b = h.send("n-new", p, "b-second", idempotent=False, t=truth.quiet_from + 0.2)
    h.ok(b, offset=o, t=truth.quiet_from + 0.3)
    h.ok(a, offset=o + 1, t=truth.quiet_from + 0.4)
    add_final_record(h, p, "b-second")
    add_final_record(h, p, "a-first")
    assert unexpected(check(h), truth) == {}


@inject_settings
@given(seed=seeds)
def test_reordered_in_real_time(seed: int) -> None:
    """Any producers: A acknowledged before B was invoked, B at the lower offset."""
    h, truth = clean(seed)
    p = random.Random(seed).choice(sorted(h.finals))
    o = h.finals[p].high_watermark
    a = new_send(h, truth, p, "a-first", t=0.1, offset=o + 1, idempotent=False, process="n-x")
    b = new_send(h, truth, p, "b-second", t=0.3, offset=o, idempotent=False, process="n-y")
    add_final_record(h, p, "b-second")
    add_final_record(h, p, "a-first")
    assert_exactly(check(h), truth, REORDERED, {a.id, b.id}, p, o)


# -- offset conflicts and ack offsets ---------------------------------------------------------------------------


@inject_settings
@given(seed=seeds)
def test_offset_conflict(seed: int) -> None:
    """A read saw Z at an offset the final read gives to Y (Z is in the final read at its own offset)."""
    h, truth = clean(seed)
    rng = random.Random(seed)
    z = rng.choice(placed_sends(h))
    others = [r for r in final_read(h, z.partition, READ_UNCOMMITTED).records if r[1] != z.offset]
    _, o2, y = rng.choice(others)
    reader = new_read(h, truth, [(z.partition, o2, z.value)])
    result = check(h)
    assert_exactly(result, truth, OFFSET_CONFLICT, {reader.id, final_read(h, z.partition, READ_UNCOMMITTED).id},
                   z.partition, o2)
    assert repr(y) in result.anomalies[OFFSET_CONFLICT][0].description


def test_offset_conflict_between_the_two_final_reads() -> None:
    """The final read_committed read has, at a plain record's offset, another plain record of the partition."""
    h, truth = clean(8)
    p = "t-2"
    rc = final_read(h, p, READ_COMMITTED)
    plain = {op.value for op in placed_sends(h)}
    (i, (_, o, v)), (_, (_, _, u)) = [(i, r) for i, r in enumerate(rc.records) if r[2] in plain][-2:]
    rc.records[i] = (p, o, u)
    result = check(h)
    assert_exactly(result, truth, OFFSET_CONFLICT, {rc.id, final_read(h, p, READ_UNCOMMITTED).id}, p, o)
    assert repr(v) in result.anomalies[OFFSET_CONFLICT][0].description


@inject_settings
@given(seed=seeds)
def test_ack_offset_mismatch(seed: int) -> None:
    h, truth = clean(seed)
    rng = random.Random(seed)
    z = rng.choice(placed_sends(h))
    z.offset = rng.choice([o for _, o, _ in final_read(h, z.partition, READ_UNCOMMITTED).records if o != z.offset])
    assert_exactly(check(h), truth, ACK_MISMATCH, {z.id}, z.partition, z.offset)


# -- committed offsets ------------------------------------------------------------------------------------------


@inject_settings
@given(seed=seeds)
def test_committed_offset_regression(seed: int) -> None:
    """One commit in the middle of the run goes below a commit that completed before it was invoked."""
    h, truth = clean(seed)
    commits = [op for op in h.ops if op.f == "commit_offset" and op.outcome == OK]
    candidates = []
    for b in commits:
        before = [a for a in commits if a.group == b.group and a.partition == b.partition
                  and a.complete_t < b.invoke_t]
        if before and max(a.offset for a in before) > 0:
            candidates.append((b, max(a.offset for a in before)))
    b, high = random.Random(seed).choice(candidates)
    b.offset = high - 1
    assert_exactly(check(h), truth, OFFSET_REGRESSION, {b.id}, b.partition, b.offset)


def test_overlapping_commits_are_not_ordered() -> None:
    h = History(RunMeta(run="commits"))
    a = h.commit_offset("c0", "g", "t-0", 100, t=1.0)
    b = h.commit_offset("c1", "g", "t-0", 50, t=1.1)  # invoked before a completed: concurrent
    h.ok(a, t=1.2)
    h.ok(b, t=1.3)
    c = h.commit_offset("c1", "g", "t-0", 90, t=1.4)  # after a completed: must not go below 100
    h.ok(c, t=1.5)
    result = check(h)
    assert [x.ops for x in result.all()] == [(a.id, c.id)]
    assert result.anomalies[OFFSET_REGRESSION][0].offset == 90


def test_regression_after_documented_truncation_is_documented() -> None:
    h, truth = clean(21)
    h.meta.unclean_election = True
    p = "t-0"
    o = h.finals[p].high_watermark
    z = new_send(h, truth, p, "z-lost", t=0.1, offset=o)
    hi = h.commit_offset("c-x", "g2", p, o + 1, t=truth.quiet_from + 0.2)
    h.ok(hi, t=truth.quiet_from + 0.25)
    lo = h.commit_offset("c-y", "g2", p, o, t=truth.quiet_from + 0.5)  # reset after the truncation
    h.ok(lo, t=truth.quiet_from + 0.55)
    result = check(h)
    assert unexpected(result, truth, {LOST_UNCLEAN: 1, OFFSET_REGRESSION_UNCLEAN: 1}) == {}
    assert result.anomalies[LOST_UNCLEAN][0].ops == (z.id,)
    assert result.anomalies[OFFSET_REGRESSION_UNCLEAN][0].ops == (hi.id, lo.id)
    assert result.ok


# -- read_committed ---------------------------------------------------------------------------------------------


def _placed_writes(h: History, t: Op) -> list[tuple[str, int, str]]:
    """A txn's writes with the offsets the final read_uncommitted read has them at."""
    out = []
    for p, v, _ in t.writes:
        for r in final_read(h, p, READ_UNCOMMITTED).records:
            if r[2] == v:
                out.append(r)
    return out


@inject_settings
@given(seed=seeds, which=st.sampled_from(["aborted", "commit failed", "unknown, aborted"]),
       final=st.booleans())
def test_read_committed_returned_an_uncommitted_transaction(seed: int, which: str, final: bool) -> None:
    h, truth = clean(seed)
    pred = {"aborted": lambda t: t.end == ABORT,
            "commit failed": lambda t: t.end == COMMIT and t.outcome == FAIL,
            "unknown, aborted": lambda t: t.end == COMMIT and t.outcome == "info"
            and not any(v in {r[2] for r in final_read(h, p, READ_COMMITTED).records} for p, v, _ in t.writes)}[which]
    candidates = [t for t in txns(h, pred) if _placed_writes(h, t)]
    assume(candidates)
    assume(not (final and which.startswith("unknown")))  # there the final read would show it committed
    t = random.Random(seed).choice(candidates)
    rec = _placed_writes(h, t)[0]
    if final:  # the final read_committed read itself shows it
        reader = final_read(h, rec[0], READ_COMMITTED)
        reader.records.append(rec)
    else:
        reader = new_read(h, truth, [rec], READ_COMMITTED)
    assert_exactly(check(h), truth, READ_COMMITTED_ANOMALY, {reader.id, t.id}, rec[0], rec[1])


@inject_settings
@given(seed=seeds)
def test_read_committed_before_the_commit_was_requested(seed: int) -> None:
    h, truth = clean(seed)
    committed = [t for t in txns(h, lambda t: t.end == COMMIT and t.outcome == OK) if _placed_writes(h, t)]
    t = random.Random(seed).choice(committed)
    rec = _placed_writes(h, t)[0]
    reader = new_read(h, truth, [rec], READ_COMMITTED, t=t.end_t - 0.02)
    assert reader.complete_t < t.end_t
    assert_exactly(check(h), truth, READ_COMMITTED_ANOMALY, {reader.id, t.id}, rec[0], rec[1])


@inject_settings
@given(seed=seeds)
def test_committed_transaction_invisible_to_read_committed(seed: int) -> None:
    h, truth = clean(seed)
    committed = [t for t in txns(h, lambda t: t.end == COMMIT and t.outcome == OK)
                 if len(_placed_writes(h, t)) == len(t.writes)]
    t = random.Random(seed).choice(committed)
    p, o, v = _placed_writes(h, t)[0]
    remove_final_record(h, p, v, (READ_COMMITTED,))
    assert_exactly(check(h), truth, READ_COMMITTED_ANOMALY, {t.id, final_read(h, p, READ_COMMITTED).id}, p, o)


def test_read_committed_sees_plain_records() -> None:
    """Non-transactional records are visible to read_committed: not an anomaly."""
    h, truth = clean(2)
    z = placed_sends(h)[-1]
    new_read(h, truth, [(z.partition, z.offset, z.value)], READ_COMMITTED)
    assert unexpected(check(h), truth) == {}


# -- phantoms ---------------------------------------------------------------------------------------------------


@inject_settings
@given(seed=seeds, outcome=st.sampled_from([FAIL, "info"]), overwritten=st.booleans())
def test_phantom(seed: int, outcome: str, overwritten: bool) -> None:
    """A read returned a record whose send never succeeded and the final read does not have it: beyond the
    end, or at an offset now holding another record (that conflict is the phantom's, not counted again)."""
    h, truth = clean(seed)
    p = random.Random(seed).choice(sorted(h.finals))
    s = new_send(h, truth, p, "ghost", t=0.1, offset=None, outcome=outcome)
    recs = final_read(h, p, READ_UNCOMMITTED).records
    o = recs[-1][1] if overwritten else h.finals[p].high_watermark
    reader = new_read(h, truth, [(p, o, "ghost")])
    assert_exactly(check(h), truth, PHANTOM, {reader.id, s.id}, p, o)


@pytest.mark.parametrize(("unclean", "acks", "cls"), [(True, "all", PHANTOM_UNCLEAN), (False, "1", PHANTOM_WEAK_ACKS),
                                                      (True, "1", PHANTOM_UNCLEAN)])
def test_phantom_documented(unclean: bool, acks: str, cls: str) -> None:
    h, truth = clean(4)
    h.meta.unclean_election = unclean
    s = new_send(h, truth, "t-1", "ghost", t=0.1, offset=None, outcome="info", idempotent=False, acks=acks)
    reader = new_read(h, truth, [("t-1", h.finals["t-1"].high_watermark, "ghost")])
    result = check(h)
    assert_exactly(result, truth, cls, {reader.id, s.id})
    assert result.ok


def test_phantom_of_a_value_nobody_wrote() -> None:
    h, truth = clean(4)
    reader = new_read(h, truth, [("t-0", h.finals["t-0"].high_watermark + 3, "garbage")])
    assert_exactly(check(h), truth, PHANTOM, {reader.id})


def test_read_below_the_log_start_is_not_a_phantom() -> None:
    h, truth = clean(5)
    (p,) = [p for p, pf in h.finals.items() if pf.log_start > 0]
    s = new_send(h, truth, p, "old", t=0.1, offset=None, outcome="info")
    new_read(h, truth, [(p, deleted_unread_offset(h, p), "old")])
    assert s.outcome == "info"
    assert unexpected(check(h), truth) == {}


# -- unclean election: the documented loss and nothing else -----------------------------------------------------


def test_unclean_election_still_forbids_everything_else() -> None:
    h, truth = clean(6)
    h.meta.unclean_election = True
    victim = placed_sends(h, lambda op: op.idempotent)[3]
    add_final_record(h, victim.partition, victim.value)
    result = check(h)
    assert_exactly(result, truth, DUPLICATE, {victim.id})
    assert not result.ok


# -- availability -----------------------------------------------------------------------------------------------


def test_availability_windows() -> None:
    h, truth = clean(9, duration=40.0, faults=2)
    result = check(h)
    assert result.availability.ok
    assert len(result.availability.windows) == 2
    for w in result.availability.windows:
        for pw in w.partitions:
            assert pw.leader == w.fault.leaders[pw.partition]
            assert pw.healthy == (pw.leader not in w.fault.brokers)
            assert pw.before_rate and pw.before_rate > 5
    # acks for a partition the fault did not touch stall through the window: that partition is reported
    w = next(w for w in result.availability.windows if any(pw.healthy for pw in w.partitions))
    victim = next(pw.partition for pw in w.partitions if pw.healthy)
    for op in h.ops:
        if op.f == SEND and op.partition == victim and op.complete_t is not None \
                and w.fault.start <= op.complete_t < w.end:
            op.complete_t = w.end + 0.01
    result = check(h)
    assert unexpected(result, truth) == {}  # delayed acks are not a safety anomaly
    assert [(x.fault.id, pw.partition) for x, pw in result.availability.violations] == [(w.fault.id, victim)]
    assert result.availability.violations[0][1].during_rate == 0


def test_resumed_is_the_time_from_the_windows_end_to_the_next_ack() -> None:
    h, _ = clean(9, duration=40.0, faults=2)
    w = check(h).availability.windows[0]
    p = w.partitions[0].partition
    for op in h.ops:  # nothing acknowledged from the fault's start until 2.5 s after its end
        if op.f == SEND and op.partition == p and op.complete_t is not None \
                and w.fault.start <= op.complete_t < w.end + 2.5:
            op.complete_t = w.end + 2.5
    pw = next(x for x in check(h).availability.windows[0].partitions if x.partition == p)
    assert pw.resumed_s == pytest.approx(2.5)
    assert pw.during_rate == 0
    others = [x for x in check(h).availability.windows[0].partitions if x.partition != p]
    assert others and all(x.resumed_s is not None and x.resumed_s < 1.0 for x in others)


def test_ack_series_counts_every_acknowledged_send() -> None:
    h, _ = clean(1)
    result = check(h)
    acked = sum(1 for op in h.ops if op.f == SEND and op.outcome == OK)
    assert sum(sum(c) for c in result.availability.series.values()) == acked


# -- the history: recording, serialisation ----------------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    h, _ = synthesize(SynthConfig(seed=3, **SMALL))
    path = tmp_path / "history.jsonl"
    h.dump(path)
    loaded = History.load(path)
    assert list(loaded.lines()) == list(h.lines())
    assert loaded.ops == h.ops and loaded.faults == h.faults and loaded.finals == h.finals
    assert loaded.meta == h.meta
    assert check(loaded).counts == check(h).counts


def test_streamed_history_is_loadable_and_keeps_the_last_word(tmp_path: Path) -> None:
    """Streaming writes an op when it completes; an info op later answered is written again and the loader keeps
    the answer; ops still pending at close are written as invocations (read as info)."""
    path = tmp_path / "stream.jsonl"
    with History(RunMeta(run="s", seed=1, unclean_election=True), path=path) as h:
        a = h.send(0, "t-0", "0-0", idempotent=True)
        b = h.send(0, "t-0", "0-1", idempotent=True)
        h.info(a, error="timed out")
        assert h.ok(a, offset=7)
        assert not h.fail(a)  # definite already: a racing callback changes nothing
        f = h.fault_start("kill -9", "broker 1", brokers=[1], leaders={"t-0": 1})
        h.fault_end(f)
        t = h.txn(1, [("t-0", "1-0"), ("t-1", "1-1")], transactional_id="tx")
        h.txn_end(t, COMMIT)
        h.complete_txn(t, OK, offsets=[8, 0])
        h.final_read("final", READ_UNCOMMITTED, [("t-0", 7, "0-0"), ("t-0", 8, "1-0"), ("t-1", 0, "1-1")])
        h.partition_final("t-0", 0, 9, 9)
    loaded = History.load(path)
    assert loaded.meta.unclean_election and loaded.meta.run == "s"
    by_id = {op.id: op for op in loaded.ops}
    assert by_id[a.id].outcome == OK and by_id[a.id].offset == 7
    assert by_id[b.id].outcome == "invoke"
    assert by_id[t.id].writes == [("t-0", "1-0", 8), ("t-1", "1-1", 0)] and by_id[t.id].end == COMMIT
    assert loaded.faults[0].end is not None and loaded.faults[0].leaders == {"t-0": 1}
    assert loaded.finals["t-0"].high_watermark == 9
    result = check(loaded)
    assert not result.problems and not result.all()
    assert any("t-1" in n for n in result.notes)  # read, but no partition_final: log start taken as 0


def test_concurrent_recording() -> None:
    h = History()
    n_threads, per = 8, 500

    def work(k: int) -> None:
        for i in range(per):
            op = h.send(k, f"t-{k % 3}", f"{k}-{i}", idempotent=True)
            h.ok(op, offset=i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(op.id for op in h.ops) == list(range(n_threads * per))
    assert [op.id for op in h.ops] == list(range(n_threads * per))  # ids in invocation (append) order
    assert all(op.outcome == OK for op in h.ops)
    assert len(list(h.lines())) == 1 + n_threads * per


def test_history_refuses_bad_input() -> None:
    h = History()
    with pytest.raises(ValueError):
        h.invoke(0, "write")
    with pytest.raises(ValueError):
        h.read(0, "snapshot")
    op = h.send(0, "t-0", "x", idempotent=True)
    with pytest.raises(ValueError):
        h.complete(op, "maybe")
    with pytest.raises(ValueError):
        h.ok(op, value="changed-later")  # what was sent is fixed at invocation
    t = h.txn(0, [("t-0", "y")])
    with pytest.raises(ValueError):
        h.complete_txn(t, OK)  # ok without txn_end: it would read as never asked to commit
    with pytest.raises(ValueError):
        History.from_lines(['{"type": "nonsense"}'])


# -- the report -------------------------------------------------------------------------------------------------


def _history_with_everything() -> tuple[History, CheckResult]:
    h, truth = clean(12, duration=30.0, faults=2)
    sends = placed_sends(h, lambda op: op.idempotent)
    remove_final_record(h, sends[10].partition, sends[10].value)
    add_final_record(h, sends[20].partition, sends[20].value)
    sends[30].offset += 10_000
    z = sends[40]
    other = next(r for r in final_read(h, z.partition, READ_UNCOMMITTED).records if r[1] > z.offset)
    new_read(h, truth, [(z.partition, other[1], z.value)])
    new_send(h, truth, "t-0", "ghost", t=0.1, offset=None, outcome=FAIL)
    new_read(h, truth, [("t-0", h.finals["t-0"].high_watermark, "ghost")])
    return h, check(h)


def test_report_text_and_png(tmp_path: Path) -> None:
    h, result = _history_with_everything()
    assert {LOST, DUPLICATE, ACK_MISMATCH, OFFSET_CONFLICT, PHANTOM} <= {c for c in CLASSES if result.anomalies[c]}
    text = format_report(result, h)
    for cls in CLASSES:
        assert cls in text
    assert "Safety: FAILED" in text and "Availability per fault window" in text
    assert str(result.anomalies[LOST][0].ops[0]) in text
    png = plot_timeline(h, result, tmp_path / "timeline.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    clean_h, _ = clean(12)
    ok_text = format_report(check(clean_h), clean_h)
    assert "Safety: OK" in ok_text
    assert plot_timeline(clean_h, check(clean_h), tmp_path / "clean.png").stat().st_size > 10_000


def test_report_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nemesis.report import main

    h, _ = _history_with_everything()
    path = tmp_path / "h.jsonl"
    h.dump(path)
    assert main([str(path), "--png", str(tmp_path / "t.png"), "--examples", "2"]) == 1
    out = capsys.readouterr().out
    assert "== lost: 1" in out and (tmp_path / "t.png").stat().st_size > 0


def test_reads_of_other_kinds_count_too() -> None:
    """``read`` (one-shot) and ``poll`` are both observations."""
    h, truth = clean(13)
    z = placed_sends(h)[5]
    other = next(r for r in final_read(h, z.partition, READ_UNCOMMITTED).records if r[1] != z.offset)
    reader = new_read(h, truth, [(z.partition, other[1], z.value)], f=READ)
    assert_exactly(check(h), truth, OFFSET_CONFLICT, {reader.id})
