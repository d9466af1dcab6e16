"""Random produce traffic against both coordinators at once (Inkless's ``WriterPropertyTest``, plus
transactions and the SQLite replica machinery).

Five producers write two partitions: a plain one, two idempotent ones (one of which bumps its epoch) and
two transactional ones that commit or abort. Brokers flush whatever is unacknowledged into WAL objects;
a flush may fail before the commit (nothing happens, the producer retries) or lose its reply after the
commit (the producer retries, so idempotent batches come back as duplicates and plain ones are written
twice). Records are also deleted and retention runs. Checked throughout: both implementations answer
every command identically, accepted batches get exactly the next offsets, duplicates never get new
offsets, each producer's order is kept, the last stable offset and the aborted transactions match a
model; at the end, the two states have the same digest and a SQLite snapshot restores to it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.diskless.cp_helpers import NOW, RC, T1, batch, create, marker

from strata.diskless.coordinator import InMemoryControlPlane, SqliteControlPlane
from strata.diskless.coordinator.api import (
    AbortedTxn,
    CommitBatchRequest,
    CommitFileRequest,
    ControlRecordType,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    InvalidCommitError,
    IsolationLevel,
    TopicIdPartition,
)
from strata.errors import ErrorCode

PARTITIONS = (0, 1)
PLAIN, IDEM, BUMPING, TXN_A, TXN_B = range(5)
PIDS = {PLAIN: -1, IDEM: 11, BUMPING: 12, TXN_A: 13, TXN_B: 14}
TRANSACTIONAL = (TXN_A, TXN_B)
MAX_IN_FLIGHT = 5  # Kafka's limit for idempotence: never more unacknowledged batches than the window

# A step is four small integers, decoded by ``decode``: weighted so that most steps send or flush.
steps_strategy = st.lists(st.tuples(st.integers(0, 99), st.integers(0, 1023), st.integers(0, 255),
                                    st.integers(0, 11)), min_size=10, max_size=80)


def decode(roll: int, a: int, b: int, c: int) -> tuple[Any, ...]:
    if roll < 45:
        return "send", a % 5, b % 2, 1 + c % 3, 1 + (a + 7 * c) % 40
    if roll < 75:
        return "flush", a or 1023, b, ("ok", "ok", "ok", "lost", "fail", "ok")[c % 6]
    if roll < 85:
        return "end", TRANSACTIONAL[a % 2], bool(b % 2), ("ok", "ok", "lost", "fail")[c % 4]
    if roll < 89:
        return ("bump",)
    if roll < 94:
        return "trim", b % 2, c % 5
    if roll < 98:
        return "retain", b % 2, a % 400
    return ("bad",)


@dataclasses.dataclass
class Pending:
    producer: int
    partition: int
    seq: int
    records: int
    size: int
    epoch: int

    def request(self) -> CommitBatchRequest:
        pid = PIDS[self.producer]
        return batch(self.partition, self.records, size=self.size, ts=NOW + self.seq, pid=pid,
                     epoch=self.epoch if pid >= 0 else -1, seq=self.seq if pid >= 0 else -1,
                     txn=self.producer in TRANSACTIONAL)


class Harness:
    def __init__(self) -> None:
        self.memory, self.sqlite = InMemoryControlPlane(), SqliteControlPlane()
        for cp in self.planes:
            create(cp)
        self.now = NOW
        self.keys = 0
        self.queues: dict[tuple[int, int], list[Pending]] = defaultdict(list)
        self.next_seq: dict[tuple[int, int], int] = defaultdict(int)
        self.epoch = dict.fromkeys(PIDS, 0)
        self.txn_partitions: dict[int, set[int]] = {p: set() for p in TRANSACTIONAL}
        self.ending: dict[int, ControlRecordType] = {}
        # Ground truth, from what the coordinator answered (whether or not the producer heard it).
        self.hwm = dict.fromkeys(PARTITIONS, 0)
        self.first_offset: dict[tuple[int, int, int, int], int] = {}  # (pid, epoch, partition, seq) -> offset
        self.accepted: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        self.open_txns: dict[int, dict[int, int]] = {p: {} for p in PARTITIONS}
        self.aborted: dict[int, list[AbortedTxn]] = {p: [] for p in PARTITIONS}

    @property
    def planes(self) -> tuple[InMemoryControlPlane, SqliteControlPlane]:
        return self.memory, self.sqlite

    def both(self, call: Any) -> Any:
        """Run one command on both implementations; they must answer alike."""
        a, b = call(self.memory), call(self.sqlite)
        assert a == b
        return a

    def tick(self) -> None:
        self.now += 7

    # -- actions -----------------------------------------------------------------------------------

    def send(self, producer: int, partition: int, records: int, size: int) -> None:
        queue = self.queues[producer, partition]
        if len(queue) >= MAX_IN_FLIGHT or producer in self.ending:
            return
        seq = self.next_seq[producer, partition]
        queue.append(Pending(producer, partition, seq, records, size, self.epoch[producer]))
        self.next_seq[producer, partition] = seq + records
        if producer in TRANSACTIONAL:
            self.txn_partitions[producer].add(partition)

    def flush(self, mask: int, gaps: int, outcome: str) -> None:
        keys = [k for i, k in enumerate(sorted(self.queues)) if mask >> i & 1 and self.queues[k]]
        keys.sort(key=lambda k: k[1])  # the broker sorts an object's batches by partition, stably
        items = [p for k in keys for p in self.queues[k]]
        if not items:
            return
        responses = self.commit(tuple(p.request() for p in items), gaps, outcome)
        if responses is None:
            return
        for pending, resp in zip(items, responses, strict=True):
            self.record_data(pending, resp)
        if outcome == "ok":
            for k in keys:
                self.queues[k].clear()

    def end(self, producer: int, abort: bool, outcome: str) -> None:
        if any(self.queues[producer, p] for p in PARTITIONS) or not self.txn_partitions[producer]:
            return
        kind = self.ending.setdefault(producer, ControlRecordType.ABORT if abort else ControlRecordType.COMMIT)
        parts = sorted(self.txn_partitions[producer])
        responses = self.commit(tuple(marker(p, PIDS[producer], self.epoch[producer], kind) for p in parts), 0,
                                outcome)
        if responses is None:
            return
        for partition, resp in zip(parts, responses, strict=True):
            assert resp.error is ErrorCode.NONE and resp.assigned_base_offset == self.hwm[partition]
            self.hwm[partition] += 1
            first = self.open_txns[partition].pop(PIDS[producer], None)
            if first is not None and kind is ControlRecordType.ABORT:
                self.aborted[partition].append(AbortedTxn(PIDS[producer], first, resp.assigned_base_offset))
        if outcome == "ok":
            self.txn_partitions[producer].clear()
            del self.ending[producer]

    def bump(self) -> None:
        """The idempotent producer re-initialises: a new epoch, sequences from 0."""
        if not any(self.queues[BUMPING, p] for p in PARTITIONS):
            self.epoch[BUMPING] += 1
            for p in PARTITIONS:
                self.next_seq[BUMPING, p] = 0

    def trim(self, partition: int, quarter: int) -> None:
        info = self.memory.get_logs([TopicIdPartition(T1, partition)])[0]
        offset = info.log_start_offset + (info.high_watermark - info.log_start_offset) * quarter // 4
        resp = self.both(lambda cp: cp.delete_records([DeleteRecordsRequest(T1, partition, offset)], now_ms=self.now))
        assert resp[0].error is ErrorCode.NONE and resp[0].log_start_offset >= offset
        self.tick()

    def retain(self, partition: int, retention_bytes: int) -> None:
        self.both(lambda cp: cp.enforce_retention([EnforceRetentionRequest(T1, partition, retention_bytes, 50)],
                                                  now_ms=self.now, max_batches_per_partition=3))
        self.tick()

    def bad(self) -> None:
        """A malformed commit fails on both and leaves no trace."""
        before = self.memory.state_digest()
        request = self.wal((batch(0, size=10), dataclasses.replace(batch(1), byte_size=0)), 0)
        for cp in self.planes:
            try:
                cp.commit_file(request, now_ms=self.now)
            except InvalidCommitError:
                pass
            else:
                raise AssertionError("a zero-size batch was committed")
        assert self.memory.state_digest() == self.sqlite.state_digest() == before

    # -- plumbing ----------------------------------------------------------------------------------

    def wal(self, batches: tuple[CommitBatchRequest, ...], gaps: int) -> CommitFileRequest:
        pos, laid_out = 0, []
        for i, b in enumerate(batches):
            pos += 3 if gaps >> (i % 8) & 1 else 0
            laid_out.append(dataclasses.replace(b, byte_offset=pos))
            pos += b.byte_size
        self.keys += 1
        return CommitFileRequest(f"wal/{self.keys}", 1, pos, tuple(laid_out))

    def commit(self, batches: tuple[CommitBatchRequest, ...], gaps: int, outcome: str) -> list[Any] | None:
        self.tick()
        if outcome == "fail":  # the upload failed: no commit; the producer will retry
            return None
        request = self.wal(batches, gaps)
        return self.both(lambda cp: cp.commit_file(request, now_ms=self.now))

    def record_data(self, pending: Pending, resp: Any) -> None:
        partition, pid = pending.partition, PIDS[pending.producer]
        assert resp.error is ErrorCode.NONE, resp
        key = (pid, pending.epoch, partition, pending.seq)
        if resp.is_duplicate:
            assert pid >= 0 and self.first_offset[key] == resp.assigned_base_offset
            return
        assert resp.assigned_base_offset == self.hwm[partition]  # exactly the next offset: contiguous
        self.hwm[partition] += pending.records
        if pid < 0:
            return
        assert key not in self.first_offset, "a retried batch was given a second offset"
        self.first_offset[key] = resp.assigned_base_offset
        self.accepted[pid, partition].append((pending.epoch, pending.seq, resp.assigned_base_offset))
        if pending.producer in TRANSACTIONAL:
            self.open_txns[partition].setdefault(pid, resp.assigned_base_offset)

    # -- checks ------------------------------------------------------------------------------------

    def check(self) -> None:
        tps = [TopicIdPartition(T1, p) for p in PARTITIONS]
        infos = self.both(lambda cp: cp.get_logs(tps))
        for info in infos:
            p, start = info.partition, info.log_start_offset
            assert info.high_watermark == self.hwm[p]
            first_open = min(self.open_txns[p].values(), default=None)
            assert info.last_stable_offset == (self.hwm[p] if first_open is None else max(start, first_open))
            reqs = [FindBatchRequest(T1, p, start, 1 << 30)]
            rows = self.both(lambda cp, reqs=reqs: cp.find_batches(reqs, fetch_max_bytes=1 << 30))[0].batches
            if rows:
                assert rows[0].base_offset <= start and rows[-1].last_offset == self.hwm[p] - 1
            for a, b in zip(rows, rows[1:], strict=False):
                assert b.base_offset == a.last_offset + 1
            committed = self.both(lambda cp, reqs=reqs: cp.find_batches(reqs, fetch_max_bytes=1 << 30,
                                                                        isolation_level=RC))[0]
            end = committed.batches[-1].last_offset + 1 if committed.batches else start
            assert all(r.base_offset < info.last_stable_offset for r in committed.batches)
            expected = tuple(a for a in self.aborted[p] if a.last_offset >= start and a.first_offset < end)
            assert committed.aborted_transactions == (expected if committed.batches else ())
        for history in self.accepted.values():  # per producer and partition: order kept, no gaps
            assert [o for _, _, o in history] == sorted(o for _, _, o in history)
            assert [(e, s) for e, s, _ in history] == sorted((e, s) for e, s, _ in history)

    def check_replicas(self) -> None:
        digest = self.sqlite.state_digest()
        assert self.memory.state_digest() == digest
        replica = SqliteControlPlane()
        replica.restore(self.sqlite.snapshot())
        assert replica.state_digest() == digest
        reqs = [FindBatchRequest(T1, p, 0, 1 << 30) for p in PARTITIONS]
        for level in IsolationLevel:
            assert replica.find_batches(reqs, fetch_max_bytes=1 << 30, isolation_level=level) == \
                self.sqlite.find_batches(reqs, fetch_max_bytes=1 << 30, isolation_level=level)
        replica.close()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps_strategy)
def test_random_traffic_keeps_both_coordinators_identical_and_correct(steps: list[tuple[int, ...]]) -> None:
    h = Harness()
    try:
        for i, step in enumerate(steps):
            name, *args = decode(*step)
            getattr(h, name)(*args)
            h.check()
            if i % 20 == 19:
                h.check_replicas()
        h.check_replicas()
    finally:
        h.sqlite.close()
