"""Random produce traffic through the WAL writer into the in-memory coordinator, with injected faults.

Three producers (one plain, two idempotent) write three partitions through one writer. Each step sends
a request, moves the simulated clock (the commit interval fires), waits for in-flight objects, flushes
or lets the upload threads run. PUTs fail (transiently or for good) and are slowed at random, so
uploads finish out of order; commits fail before applying, after applying (the answer is lost) or are
refused. Producers behave as Kafka's do: at most five unacknowledged batches per partition, a failed
batch is resent with its original sequence number before anything new. At the end faults stop, every
producer retries until all its batches are acknowledged, and the writer closes.

Checked: each partition's offsets are contiguous from 0 and every byte range the coordinator names is
in the store; each idempotent producer's batches appear in sequence order exactly once; every answer
NONE (duplicates included) names offsets that hold exactly that batch's records; a plain batch appears
once per applied attempt; OUT_OF_ORDER_SEQUENCE_NUMBER is only ever the consequence of an earlier
failure of the same producer (the commit lane keeps rotation order); the store holds exactly the
committed objects (deleted after failures that applied nothing, kept after those that did).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.unit.diskless.test_writer import NOW, CommitAdapter, records

from strata.common.clock import ManualClock
from strata.diskless.coordinator import InMemoryControlPlane
from strata.diskless.coordinator.api import CreatePartitionsRequest, FindBatchRequest, TopicIdPartition
from strata.diskless.writer import ManualTimer, WriteEntry, Writer, WriterConfig, WriteResult
from strata.errors import ErrorCode
from strata.protocol.records.batch import iter_batches
from strata.protocol.records.record import decode_batch
from strata.tiered.api import RemoteStorageError, RetriableRemoteStorageError
from strata.tiered.storage.memory_objects import MemoryObjectStore

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
PARTITIONS = ((T1, 0), (T1, 1), (T2, 0))
PRODUCERS = {0: (-1, -1), 1: (101, 0), 2: (102, 0)}  # producer -> (producer id, epoch); 0 is not idempotent
MAX_UNACKED = 5  # Kafka's max.in.flight for idempotence == the coordinator's dedupe window
ALLOWED = {ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.INVALID_REQUEST,
           ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER}


class FaultyStore(MemoryObjectStore):
    """PUT number ``i`` sleeps ``delays[i]`` ms and then follows ``plan[i]``: 0 ok, 1 transient, 2 permanent."""

    def __init__(self, plan: Sequence[int], delays: Sequence[int]) -> None:
        super().__init__()
        self.plan, self.delays = plan, delays
        self.faults = True
        self._n = itertools.count()
        self._guard = threading.Lock()

    def put_object(self, key: str, data: bytes | bytearray | memoryview) -> None:
        with self._guard:
            i = next(self._n)
        time.sleep(self.delays[i % len(self.delays)] / 1000)
        decision = self.plan[i % len(self.plan)] if self.faults else 0
        if decision == 1:
            raise RetriableRemoteStorageError(f"put {i} throttled")
        if decision == 2:
            raise RemoteStorageError(f"put {i} refused")
        super().put_object(key, data)


@dataclass(eq=False)
class Attempt:
    unit: Unit
    ahead: list[Attempt]  # attempts of lower sequences of the same stream still unanswered when this one was sent
    result: WriteResult | None = None


@dataclass(eq=False)
class Unit:
    """One producer batch (a plain producer's may hold two record batches), resent as is on failure."""

    producer: int
    partition: int
    seq: int
    data: bytes
    values: list[bytes]
    state: str = "pending"  # pending (to send) | inflight | acked
    attempts: list[Attempt] = field(default_factory=list)
    acked: WriteResult | None = None


@dataclass
class Stream:
    units: list[Unit] = field(default_factory=list)

    def unacked(self) -> list[Unit]:
        return [u for u in self.units if u.state != "acked"]

    def next_to_send(self, producer: int, partition: int, n_records: int, two_batches: bool) -> Unit | None:
        """The lowest failed batch if any; else a new one while fewer than five are unacknowledged."""
        pending = [u for u in self.units if u.state == "pending"]
        if pending:
            return pending[0]
        if len(self.unacked()) >= MAX_UNACKED:
            return None
        seq = len(self.units)
        pid, epoch = PRODUCERS[producer]
        values = [f"{producer}:{partition}:{seq}:{i}".encode() for i in range(n_records)]
        if pid < 0:
            data = records(*values)
            if two_batches:
                extra = f"{producer}:{partition}:{seq}:x".encode()
                data += records(extra, base_offset=n_records)
                values.append(extra)
            unit_seq = seq
        else:
            base_seq = sum(len(u.values) for u in self.units)
            data = records(*values, pid=pid, epoch=epoch, seq=base_seq)
            unit_seq = base_seq
        unit = Unit(producer, partition, unit_seq, data, values)
        self.units.append(unit)
        return unit


class Scenario:
    def __init__(self, put_plan: Sequence[int], delays: Sequence[int], commit_plan: Sequence[str | None],
                 max_bytes: int, uploads: int) -> None:
        self.clock = ManualClock(NOW)
        self.timer = ManualTimer(self.clock)
        self.store = FaultyStore(put_plan, delays)
        self.cp = InMemoryControlPlane()
        self.cp.create_partitions(
            [CreatePartitionsRequest(T1, "topic-1", 2), CreatePartitionsRequest(T2, "topic-2", 1)], now_ms=NOW)
        self.commits = CommitAdapter(self.cp, self.clock)
        self.commits.modes.extend(itertools.islice(itertools.cycle(commit_plan), 10_000))
        self.writer = Writer(broker_id=1, store=self.store, commit=self.commits,
                             is_safe_to_delete=self.commits.is_safe_to_delete, clock=self.clock, timer=self.timer,
                             config=WriterConfig(max_bytes=max_bytes, upload_backoff_ms=0,
                                                 max_uploads_in_flight=uploads))
        self.streams = {(p, i): Stream() for p in PRODUCERS for i in range(len(PARTITIONS))}
        self.outstanding: list[tuple[asyncio.Task[list[WriteResult]], list[Attempt]]] = []
        self.out_of_order: list[Attempt] = []

    async def send(self, producer: int, mask: int, n_records: int, two_batches: bool, *,
                   resend_only: bool = False) -> None:
        entries: list[WriteEntry] = []
        attempts: list[Attempt] = []
        for i, (topic, partition) in enumerate(PARTITIONS):
            if not mask & (1 << i):
                continue
            stream = self.streams[producer, i]
            if resend_only and not any(u.state == "pending" for u in stream.units):
                continue
            unit = stream.next_to_send(producer, i, n_records, two_batches)
            if unit is None:
                continue
            ahead = [a for u in stream.units if u.seq < unit.seq and u.state == "inflight"
                     for a in u.attempts if a.result is None]
            attempt = Attempt(unit, ahead)
            unit.attempts.append(attempt)
            unit.state = "inflight"
            attempts.append(attempt)
            entries.append(WriteEntry.parse(topic, f"topic-{topic.int}", partition, unit.data))
        if entries:
            self.outstanding.append((asyncio.ensure_future(self.writer.write(entries)), attempts))
            await asyncio.sleep(0)

    def collect(self) -> None:
        """Take the answers of finished writes, in send order."""
        still = []
        for task, attempts in self.outstanding:
            if not task.done():
                still.append((task, attempts))
                continue
            for attempt, result in zip(attempts, task.result(), strict=True):
                assert result.error in ALLOWED, result
                attempt.result = result
                unit = attempt.unit
                if result.error is ErrorCode.NONE:
                    assert unit.state == "inflight"
                    unit.state, unit.acked = "acked", result
                    assert result.log_start_offset == 0
                    assert result.last_offset - result.base_offset + 1 == len(unit.values)
                else:
                    unit.state = "pending"
                    if result.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                        self.out_of_order.append(attempt)
        self.outstanding = still

    async def step(self, roll: int, a: int, b: int) -> None:
        if roll < 60:
            await self.send(a % 3, 1 + b % 7, 1 + (a >> 2) % 3, bool(b & 8))
        elif roll < 85:
            self.timer.advance(1 + a * 2)
            await asyncio.sleep(0)
        elif roll < 90:
            await self.writer.drain()
        elif roll < 93:
            await self.writer.flush()
        else:
            await asyncio.sleep(0.001 * (1 + a % 3))
        self.collect()

    async def finish(self) -> None:
        """Faults stop; producers resend until everything is acknowledged; the writer closes."""
        self.store.faults = False
        self.commits.modes.clear()
        await self.writer.flush()
        await asyncio.gather(*(t for t, _ in self.outstanding))
        self.collect()
        for _ in range(4 * MAX_UNACKED):
            if not any(u.state == "pending" for s in self.streams.values() for u in s.units):
                break
            for producer in PRODUCERS:
                await self.send(producer, 0b111, 1, False, resend_only=True)
            await self.writer.flush()
            await asyncio.gather(*(t for t, _ in self.outstanding))
            self.collect()
        await self.writer.close()
        assert not self.outstanding

    # -- invariants ------------------------------------------------------------------------------

    def partition_log(self, i: int) -> list[tuple[int, bytes, int, int]]:
        """Every record of partition ``i`` as (offset, value, producer id, batch base sequence)."""
        topic, partition = PARTITIONS[i]
        info = self.cp.get_logs([TopicIdPartition(topic, partition)])[0]
        resp = self.cp.find_batches([FindBatchRequest(topic, partition, 0, 1 << 30)], fetch_max_bytes=1 << 30)[0]
        out: list[tuple[int, bytes, int, int]] = []
        expected = 0
        for row in resp.batches:
            assert row.base_offset == expected, f"gap in partition {i}: {row.base_offset} after {expected}"
            data = self.store.get_object_range(row.object_key, row.byte_offset, row.byte_offset + row.byte_size)
            assert len(data) == row.byte_size, f"object {row.object_key} lost"
            offset = row.base_offset
            for position, header in iter_batches(data):
                for record in decode_batch(data, position).records:
                    assert record.value is not None
                    out.append((offset + record.offset - header.base_offset, record.value, header.producer_id,
                                header.base_sequence))
                offset += header.last_offset_delta + 1
            assert offset == row.last_offset + 1
            expected = offset
        assert expected == info.high_watermark and info.log_start_offset == 0
        assert [o for o, *_ in out] == list(range(expected))
        return out

    def lost_but_accepted(self) -> Counter[bytes]:
        """How often each batch (named by its first value) was accepted by a commit whose answer was lost:
        those producers were told KAFKA_STORAGE_ERROR although their batch is in the log."""
        out: Counter[bytes] = Counter()
        for key, (request, responses) in self.commits.lost.items():
            for batch, response in zip(request.batches, responses, strict=True):
                if response.error is ErrorCode.NONE and not response.is_duplicate:
                    data = self.store.get_object_range(key, batch.byte_offset, batch.byte_offset + batch.byte_size)
                    value = decode_batch(data).records[0].value
                    assert value is not None
                    out[value] += 1
        return out

    def check(self) -> None:
        for attempt in self.out_of_order:  # only an earlier failure of the same stream explains it
            assert any(a.result is not None and a.result.error is not ErrorCode.NONE for a in attempt.ahead), \
                f"out of order without an earlier failure: {attempt.unit.values[0]!r}"
        lost_but_accepted = self.lost_but_accepted()
        for i in range(len(PARTITIONS)):
            log = self.partition_log(i)
            by_value = Counter(v for _, v, _, _ in log)
            for producer, (pid, _) in PRODUCERS.items():
                units = self.streams[producer, i].units
                for unit in units:
                    assert unit.state == "acked" and unit.acked is not None, unit.values[0]
                    ack = unit.acked
                    got = [v for o, v, _, _ in log if ack.base_offset <= o <= ack.last_offset]
                    assert got == unit.values, (producer, i, unit.seq, ack)
                    copies = {by_value[v] for v in unit.values}
                    assert len(copies) == 1
                    applied = lost_but_accepted[unit.values[0]]
                    if pid >= 0:
                        assert copies == {1}, f"idempotent batch {unit.values[0]!r} written {copies} times"
                        assert ack.is_duplicate == (applied > 0), (unit.values[0], applied, ack)
                    else:
                        assert copies == {1 + applied}, (unit.values[0], copies, applied)
                if pid >= 0:  # the producer's batches, in log order, are its sequences in order, each once
                    seqs = [s for _, _, p, s in log if p == pid]
                    firsts = [s for j, s in enumerate(seqs) if j == 0 or s != seqs[j - 1]]
                    assert firsts == [u.seq for u in units]
        committed = set(self.commits.applied)
        assert set(self.store.keys()) == committed, "store holds an uncommitted object or lost a committed one"
        for key in committed:
            assert not self.cp.is_safe_to_delete_file(key)


steps_strategy = st.lists(st.tuples(st.integers(0, 99), st.integers(0, 255), st.integers(0, 255)),
                          min_size=5, max_size=80)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=steps_strategy,
    put_plan=st.lists(st.sampled_from([0, 0, 0, 0, 1, 1, 2]), min_size=1, max_size=12),
    delays=st.lists(st.integers(0, 5), min_size=1, max_size=6),
    commit_plan=st.lists(st.sampled_from([None, None, None, "before", "after", "invalid"]), min_size=1, max_size=8),
    max_bytes=st.sampled_from([150, 400, 1500, 1 << 20]),
    uploads=st.integers(1, 4),
)
def test_random_traffic_keeps_offsets_sequences_and_answers_consistent(
    steps: list[tuple[int, int, int]], put_plan: list[int], delays: list[int], commit_plan: list[str | None],
    max_bytes: int, uploads: int,
) -> None:
    async def scenario() -> None:
        s = Scenario(put_plan, delays, commit_plan, max_bytes, uploads)
        for step in steps:
            await s.step(*step)
        await s.finish()
        s.check()
        stats = s.writer.stats
        event(f"objects: {min(stats.objects_uploaded, 10)}{'+' if stats.objects_uploaded >= 10 else ''}")
        for name, happened in [
            ("an upload failed", stats.upload_failures > 0),
            ("a commit failed", stats.commit_failures > 0),
            ("an idempotent retry was a duplicate",
             any(u.acked is not None and u.acked.is_duplicate for st_ in s.streams.values() for u in st_.units)),
            ("a plain batch was written twice", any(v.startswith(b"0:") for v in s.lost_but_accepted())),
            ("out of order after a failure", bool(s.out_of_order)),
        ]:
            if happened:
                event(name)

    asyncio.run(asyncio.wait_for(scenario(), 60))
