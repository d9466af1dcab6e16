"""The diskless WAL writer: rotation, object layout, ordered commits, failure answers, close.

Time is a ManualClock driving a ManualTimer, so the commit interval fires exactly when a test says;
uploads really run in worker threads against a MemoryObjectStore wrapped to inject failures and
hold-ups, and commits go to an InMemoryControlPlane through an adapter that can fail before or after
applying (the "answer lost" case).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any
from unittest import mock

import pytest

from strata.common.clock import ManualClock
from strata.diskless.coordinator import InMemoryControlPlane
from strata.diskless.coordinator.api import (
    CommitBatchResponse,
    CommitFileRequest,
    CreatePartitionsRequest,
    FileAlreadyCommittedError,
    FindBatchRequest,
    InvalidCommitError,
    TopicIdPartition,
)
from strata.diskless.writer import (
    DEFAULT_PREFIX,
    ManualTimer,
    WriteEntry,
    Writer,
    WriterClosedError,
    WriterConfig,
    WriteResult,
    new_object_key,
    parse_object_key,
    validate_prefix,
)
from strata.errors import CorruptRecordError, ErrorCode
from strata.protocol.records.batch import TimestampType, iter_batches
from strata.protocol.records.builder import BatchBuilder, build_control_batch
from strata.protocol.records.record import ControlRecordType, decode_batch
from strata.tiered.api import RemoteStorageError, RetriableRemoteStorageError
from strata.tiered.storage.memory_objects import MemoryObjectStore

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
NOW = 1_700_000_000_000
BROKER = 7


# -- builders ------------------------------------------------------------------------------------


def records(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1, base_offset: int = 0,
            log_append_time: bool = False, transactional: bool = False) -> bytes:
    """One v2 batch holding ``values`` (one record each)."""
    ts_type = TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME
    builder = BatchBuilder(base_offset=base_offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           transactional=transactional, timestamp_type=ts_type)
    for value in values or (b"v",):
        builder.append(value, timestamp=NOW - 1000)
    return builder.build()


def entry(partition: int = 0, *values: bytes, topic: uuid.UUID = T1, **kwargs: Any) -> WriteEntry:
    return WriteEntry.parse(topic, f"topic-{topic.int}", partition, records(*values, **kwargs))


def raw_entry(partition: int, data: bytes, topic: uuid.UUID = T1) -> WriteEntry:
    return WriteEntry.parse(topic, f"topic-{topic.int}", partition, data)


def values_of(data: bytes) -> list[bytes | None]:
    """Every record value in a concatenation of batches, in byte order."""
    out: list[bytes | None] = []
    for position, _ in iter_batches(data):
        out.extend(r.value for r in decode_batch(data, position).records)
    return out


# -- fakes ---------------------------------------------------------------------------------------


class FlakyStore(MemoryObjectStore):
    """A MemoryObjectStore whose PUTs can fail (queued errors) or wait for a test's signal."""

    def __init__(self) -> None:
        super().__init__()
        self.put_errors: deque[BaseException] = deque()
        self.fail_when: list[tuple[Callable[[bytes], bool], BaseException]] = []
        self.holds: list[tuple[Callable[[bytes], bool], threading.Event]] = []
        self.completed: list[str] = []  # keys in the order their PUT finished
        self.delete_error: BaseException | None = None
        self._guard = threading.Lock()

    def hold(self, predicate: Callable[[bytes], bool]) -> threading.Event:
        """PUTs whose data matches wait until the returned event is set."""
        gate = threading.Event()
        self.holds.append((predicate, gate))
        return gate

    def put_object(self, key: str, data: bytes | bytearray | memoryview) -> None:
        with self._guard:
            error = self.put_errors.popleft() if self.put_errors else None
        if error is None:
            error = next((e for predicate, e in self.fail_when if predicate(bytes(data))), None)
        if error is not None:
            self.calls["put_failed"] += 1
            raise error
        for predicate, gate in self.holds:
            if predicate(bytes(data)):
                assert gate.wait(10), "a held PUT was never released"
        super().put_object(key, data)
        with self._guard:
            self.completed.append(key)

    def delete_objects(self, keys: Sequence[str]) -> None:
        if self.delete_error is not None:
            raise self.delete_error
        super().delete_objects(keys)

    def data(self, key: str) -> bytes:
        return self.get_object_range(key, 0, 1 << 40)


class CommitAdapter:
    """The coordinator behind the writer's ``commit`` port, with the test clock and injected failures.

    Modes (queued, one per commit call): ``"before"`` raises without applying, ``"after"`` applies and
    then raises (the answer was lost), ``"invalid"`` / ``"already"`` raise the coordinator's refusals.
    """

    def __init__(self, cp: InMemoryControlPlane, clock: ManualClock) -> None:
        self.cp = cp
        self.clock = clock
        self.modes: deque[str | None] = deque()
        self.calls: list[str] = []     # object keys, in commit order
        self.applied: list[str] = []
        self.lost: dict[str, tuple[CommitFileRequest, list[CommitBatchResponse]]] = {}  # applied, answer lost
        self.safe_check_error: BaseException | None = None
        self.gate: asyncio.Event | None = None  # when set, commits wait for it

    async def __call__(self, request: CommitFileRequest) -> list[CommitBatchResponse]:
        self.calls.append(request.object_key)
        if self.gate is not None:
            await self.gate.wait()
        mode = self.modes.popleft() if self.modes else None
        if mode == "before":
            raise ConnectionError("coordinator unreachable")
        if mode == "invalid":
            raise InvalidCommitError("refused")
        if mode == "already":
            raise FileAlreadyCommittedError("committed already")
        responses = self.cp.commit_file(request, now_ms=self.clock.milliseconds())
        self.applied.append(request.object_key)
        if mode == "after":
            self.lost[request.object_key] = (request, responses)
            raise ConnectionError("connection lost after the commit")
        return responses

    async def is_safe_to_delete(self, key: str) -> bool:
        if self.safe_check_error is not None:
            raise self.safe_check_error
        return self.cp.is_safe_to_delete_file(key)


class Harness:
    def __init__(self, *, safe_delete: bool = True, **config: Any) -> None:
        self.clock = ManualClock(NOW)
        self.timer = ManualTimer(self.clock)
        self.store = FlakyStore()
        self.cp = InMemoryControlPlane()
        self.cp.create_partitions(
            [CreatePartitionsRequest(T1, "topic-1", 4), CreatePartitionsRequest(T2, "topic-2", 2)], now_ms=NOW)
        self.commits = CommitAdapter(self.cp, self.clock)
        self.writer = Writer(
            broker_id=BROKER, store=self.store, commit=self.commits,
            is_safe_to_delete=self.commits.is_safe_to_delete if safe_delete else None,
            config=WriterConfig(**{"upload_backoff_ms": 1, **config}), clock=self.clock, timer=self.timer)

    async def send(self, *entries: WriteEntry) -> asyncio.Task[list[WriteResult]]:
        """Start a write and let it reach the active file (its synchronous part runs in one step)."""
        task = asyncio.ensure_future(self.writer.write(entries))
        await asyncio.sleep(0)
        return task

    async def tick(self, ms: int) -> None:
        self.timer.advance(ms)
        await asyncio.sleep(0)

    def batches(self, partition: int, topic: uuid.UUID = T1) -> list[tuple[str, int, int]]:
        resp = self.cp.find_batches([FindBatchRequest(topic, partition, 0, 1 << 30)], fetch_max_bytes=1 << 30)[0]
        return [(b.object_key, b.base_offset, b.last_offset) for b in resp.batches]

    def high_watermark(self, partition: int, topic: uuid.UUID = T1) -> int:
        return self.cp.get_logs([TopicIdPartition(topic, partition)])[0].high_watermark


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test body in a fresh event loop (no pytest-asyncio here)."""
    def test() -> None:
        asyncio.run(asyncio.wait_for(body(), 30))
    test.__name__ = body.__name__
    test.__doc__ = body.__doc__
    return test


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def results(*tasks: Awaitable[list[WriteResult]]) -> list[list[WriteResult]]:
    return list(await asyncio.gather(*tasks))


BATCH = len(records(b"x"))  # every one-record batch of a one-byte value has this size


# -- rotation ------------------------------------------------------------------------------------


@run
async def test_rotates_before_adding_when_the_request_would_overflow() -> None:
    h = Harness(max_bytes=BATCH * 2 + BATCH // 2)
    first = await h.send(entry(0, b"a"))
    second = await h.send(entry(0, b"b"))
    assert h.timer.pending == 1 and h.writer.stats.rotations_by_size == 0
    third = await h.send(entry(0, b"c"))  # 3 batches > max: the two buffered ones go first
    assert h.writer.stats.rotations_by_size == 1
    assert [r[0].base_offset for r in await results(first, second)] == [0, 1]
    assert not third.done() and h.writer.active_file_size == BATCH
    assert h.timer.pending == 1  # re-armed by the first write into the new, empty file
    await h.tick(250)
    assert (await third)[0].base_offset == 2
    assert h.writer.stats.rotations_by_interval == 1
    assert len(h.store.keys()) == 2


@run
async def test_rotates_after_adding_when_the_file_is_full() -> None:
    h = Harness(max_bytes=BATCH * 2)
    first = await h.send(entry(0, b"a"))
    second = await h.send(entry(1, b"b"))
    assert h.writer.stats.rotations_by_size == 1 and h.writer.active_file_size == 0
    assert h.timer.pending == 0  # the full file rotated; the timer armed for it was cancelled
    (r1,), (r2,) = await results(first, second)
    assert r1.error is r2.error is ErrorCode.NONE
    assert len(h.store.keys()) == 1


@run
async def test_interval_timer_is_armed_by_the_first_write_only() -> None:
    h = Harness(commit_interval_ms=250)
    first = await h.send(entry(0, b"a"))
    await h.tick(200)
    second = await h.send(entry(1, b"b"))  # does not push the deadline back
    assert h.timer.pending == 1
    await h.tick(49)
    assert not first.done() and h.writer.stats.rotations_by_interval == 0
    await h.tick(1)  # 250 ms after the first write
    (r1,), (r2,) = await results(first, second)
    assert (r1.error, r2.error) == (ErrorCode.NONE, ErrorCode.NONE)
    [key] = h.store.keys()
    assert h.batches(0) == [(key, 0, 0)] and h.batches(1) == [(key, 0, 0)]
    assert h.writer.stats.rotations_by_interval == 1 and h.timer.pending == 0


@run
async def test_an_idle_writer_uploads_nothing() -> None:
    h = Harness()
    await h.tick(10_000)
    assert h.timer.pending == 0 and h.store.calls["put"] == 0 and h.commits.calls == []


@run
async def test_a_request_is_never_split_across_objects() -> None:
    h = Harness(max_bytes=BATCH * 3)
    first = await h.send(entry(0, b"a"), entry(1, b"b"))
    second = await h.send(entry(0, b"c"), entry(1, b"d"), entry(2, b"e"))  # would overflow: rotate first
    await h.tick(250)
    await results(first, second)
    key1, key2 = h.commits.calls
    assert [b[0] for b in h.batches(0)] == [key1, key2]
    assert h.batches(2) == [(key2, 0, 0)]
    assert values_of(h.store.data(key2)) == [b"c", b"d", b"e"]


@run
async def test_an_oversized_request_makes_an_oversized_object() -> None:
    h = Harness(max_bytes=BATCH)
    task = await h.send(entry(0, b"a"), entry(1, b"b"), entry(2, b"c"))
    res = await task
    assert [r.error for r in res] == [ErrorCode.NONE] * 3
    [key] = h.store.keys()
    assert len(h.store.data(key)) == 3 * BATCH > h.writer.config.max_bytes
    assert h.writer.stats.rotations_by_size == 1 and h.timer.pending == 0


# -- layout and answers --------------------------------------------------------------------------


@run
async def test_batches_are_stably_sorted_by_partition_in_the_object() -> None:
    h = Harness()
    t1 = await h.send(entry(1, b"a"), entry(0, b"b"))
    t2 = await h.send(entry(0, b"c"), entry(0, b"d", topic=T2))
    t3 = await h.send(entry(1, b"e"))
    await h.writer.flush()
    (a, b), (c, d), (e,) = await results(t1, t2, t3)
    [key] = h.store.keys()
    assert values_of(h.store.data(key)) == [b"b", b"c", b"a", b"e", b"d"]  # T1-0, T1-1, T2-0; arrival order kept
    assert (b.base_offset, c.base_offset, a.base_offset, e.base_offset, d.base_offset) == (0, 1, 0, 1, 0)
    # one byte-adjacent run per partition: the coordinator coalesces them into one row each
    assert h.batches(0) == [(key, 0, 1)] and h.batches(1) == [(key, 0, 1)]


@run
async def test_object_and_commit_request_describe_the_same_bytes() -> None:
    h = Harness()
    seen: list[CommitFileRequest] = []
    inner = h.commits

    async def spy(request: CommitFileRequest) -> list[CommitBatchResponse]:
        seen.append(request)
        return await inner(request)

    h.writer._commit = spy
    # an entry whose batches sit at an offset inside the caller's buffer
    prefix = b"\x00" * 5
    data = prefix + records(b"p", b"q") + records(b"r", base_offset=2)
    padded = WriteEntry(T1, "topic-1", 3, data, list(iter_batches(data, 5)))
    t = await h.send(entry(2, b"z"), padded)
    await h.writer.flush()
    [request] = seen
    obj = h.store.data(request.object_key)
    assert request.file_size == len(obj) and request.uploader_broker_id == BROKER
    for b in request.batches:
        assert [(p, hd.size) for p, hd in iter_batches(obj, b.byte_offset, b.byte_offset + b.byte_size)] == \
            [(b.byte_offset, b.byte_size)]
    assert [(b.partition, b.base_offset, b.last_offset) for b in request.batches] == [(2, 0, 0), (3, 0, 1), (3, 2, 2)]
    z, pr = await t
    assert (z.base_offset, z.last_offset) == (0, 0)
    assert (pr.base_offset, pr.last_offset) == (0, 2) and len(pr.batch_responses) == 2


@run
async def test_log_append_time_and_log_start_in_the_answer() -> None:
    h = Harness()
    t = await h.send(entry(0, b"a", log_append_time=True), entry(1, b"b"))
    h.clock.advance(5)
    await h.writer.flush()
    lat, create = await t
    assert lat.log_append_time == NOW + 5 and create.log_append_time == -1
    assert lat.log_start_offset == create.log_start_offset == 0
    assert not lat.is_duplicate


@run
async def test_empty_entries_are_answered_without_writing() -> None:
    h = Harness()
    empty = WriteEntry(T1, "topic-1", 0, b"", [])
    assert await h.writer.write([empty]) == [WriteResult(ErrorCode.NONE)]
    t = await h.send(empty, entry(1, b"a"))
    await h.writer.flush()
    none, one = await t
    assert none == WriteResult(ErrorCode.NONE) and one.base_offset == 0
    assert h.writer.stats.entries == 1


@run
async def test_partition_errors_come_back_per_entry() -> None:
    h = Harness()
    t = await h.send(entry(0, b"a"), entry(9, b"gone"), entry(1, b"b", pid=5, epoch=0, seq=3))
    await h.writer.flush()
    ok, unknown, gap = await t
    assert ok.error is ErrorCode.NONE
    assert unknown.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and unknown.base_offset == -1
    assert gap.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and gap.error_message


@run
async def test_transaction_markers_reach_the_coordinator_as_control_batches() -> None:
    h = Harness()
    data = await h.send(entry(0, b"t", pid=9, epoch=0, seq=0, transactional=True))
    await h.writer.flush()
    assert (await data)[0].error is ErrorCode.NONE
    log = h.cp.get_logs([TopicIdPartition(T1, 0)])[0]
    assert (log.high_watermark, log.last_stable_offset) == (1, 0)
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=9, producer_epoch=0, coordinator_epoch=3)
    done = await h.send(raw_entry(0, marker))
    await h.writer.flush()
    assert (await done)[0].base_offset == 1
    log = h.cp.get_logs([TopicIdPartition(T1, 0)])[0]
    assert (log.high_watermark, log.last_stable_offset) == (2, 2)


@run
async def test_a_control_batch_without_a_marker_fails_only_its_request() -> None:
    h = Harness()
    builder = BatchBuilder(producer_id=9, producer_epoch=0, transactional=True, control=True)
    builder.append(b"x", key=b"\x00", timestamp=NOW)  # key too short for a marker
    with pytest.raises(CorruptRecordError):
        await h.writer.write([raw_entry(0, builder.build())])
    assert h.writer.active_file_size == 0 and h.timer.pending == 0


def test_entry_rejects_batches_outside_its_records() -> None:
    data = records(b"a")
    [(pos, header)] = list(iter_batches(data))
    with pytest.raises(ValueError, match="past the"):
        WriteEntry(T1, "topic-1", 0, data[:-1], [(pos, header)])
    with pytest.raises(ValueError, match="overlaps"):
        WriteEntry(T1, "topic-1", 0, data + data, [(0, header), (1, header)])


# -- uploads and the commit lane -----------------------------------------------------------------


@run
async def test_uploads_overlap_but_commits_follow_rotation_order() -> None:
    h = Harness(max_bytes=BATCH)  # every request is an object of its own
    release = h.store.hold(lambda data: b"slow" in data)
    first = await h.send(entry(0, b"slow"))
    second = await h.send(entry(0, b"fast"))
    await wait_until(lambda: len(h.store.completed) == 1)  # object 2 is uploaded while 1 is stuck
    await asyncio.sleep(0.01)
    assert h.commits.calls == [] and not second.done()
    release.set()
    (r1,), (r2,) = await results(first, second)
    assert h.commits.calls == h.store.completed[::-1]  # committed 1 then 2, uploaded 2 then 1
    assert (r1.base_offset, r2.base_offset) == (0, 1)


@run
async def test_upload_concurrency_is_bounded() -> None:
    h = Harness(max_bytes=BATCH, max_uploads_in_flight=2)
    release = h.store.hold(lambda data: True)
    tasks = [await h.send(entry(0, b"%d" % i)) for i in range(4)]
    await asyncio.sleep(0.02)
    assert h.writer.objects_in_flight == 4
    assert h.writer.stats.put_requests == 2
    release.set()
    answers = await results(*tasks)
    assert [r[0].base_offset for r in answers] == [0, 1, 2, 3]


@run
async def test_the_next_commit_waits_for_a_slow_commit() -> None:
    h = Harness(max_bytes=BATCH)
    h.commits.gate = asyncio.Event()
    first = await h.send(entry(0, b"a"))
    second = await h.send(entry(0, b"b"))
    await wait_until(lambda: len(h.store.completed) == 2)
    await asyncio.sleep(0.01)
    assert len(h.commits.calls) == 1  # object 2 is uploaded and waits its turn
    h.commits.gate.set()
    await results(first, second)
    assert len(h.commits.calls) == 2


@run
async def test_upload_retries_transient_errors() -> None:
    h = Harness()
    h.store.put_errors.extend([RetriableRemoteStorageError("throttled")] * 2)
    t = await h.send(entry(0, b"a"))
    await h.writer.flush()
    assert (await t)[0].error is ErrorCode.NONE
    s = h.writer.stats
    assert (s.put_requests, s.upload_retries, s.objects_uploaded, s.upload_failures) == (3, 2, 1, 0)


@run
async def test_upload_failure_fails_every_partition_of_every_request_and_skips_the_commit() -> None:
    h = Harness()
    h.store.put_errors.extend([RetriableRemoteStorageError("down")] * 3)
    t1 = await h.send(entry(0, b"a"), entry(1, b"b"))
    t2 = await h.send(entry(2, b"c"))
    await h.writer.flush()
    answers = [r for rs in await results(t1, t2) for r in rs]
    assert [r.error for r in answers] == [ErrorCode.KAFKA_STORAGE_ERROR] * 3
    assert h.commits.calls == [] and h.store.keys() == []
    assert (h.writer.stats.put_requests, h.writer.stats.upload_failures) == (3, 1)
    # the writer goes on: the next object commits normally
    t3 = await h.send(entry(0, b"d"))
    await h.writer.flush()
    assert (await t3)[0].base_offset == 0


@run
async def test_a_permanent_store_error_is_not_retried() -> None:
    h = Harness()
    h.store.put_errors.append(RemoteStorageError("access denied"))
    t = await h.send(entry(0, b"a"))
    await h.writer.flush()
    assert (await t)[0].error is ErrorCode.KAFKA_STORAGE_ERROR
    assert h.writer.stats.put_requests == 1


@run
async def test_a_failed_upload_keeps_its_place_in_the_commit_lane() -> None:
    h = Harness(max_bytes=BATCH)
    h.commits.gate = asyncio.Event()
    first = await h.send(entry(0, b"a"))
    await wait_until(lambda: len(h.commits.calls) == 1)
    h.store.fail_when.append((lambda data: b"b" in values_of(data), RetriableRemoteStorageError("down")))
    second = await h.send(entry(0, b"b"))  # fails to upload
    third = await h.send(entry(0, b"c"))
    await wait_until(lambda: second.done() and len(h.store.completed) == 2)
    assert (await second)[0].error is ErrorCode.KAFKA_STORAGE_ERROR  # answered without waiting for object 1
    await asyncio.sleep(0.01)
    assert len(h.commits.calls) == 1  # object 3 still waits for object 1's commit
    h.commits.gate.set()
    (r1,), (r3,) = await results(first, third)
    assert (r1.base_offset, r3.base_offset) == (0, 1)


# -- commit failures -----------------------------------------------------------------------------


@run
async def test_commit_failure_answers_storage_error_and_deletes_an_uncommitted_object() -> None:
    h = Harness()
    h.commits.modes.append("before")
    t = await h.send(entry(0, b"a"), entry(1, b"b"))
    await h.writer.flush()
    assert [r.error for r in await t] == [ErrorCode.KAFKA_STORAGE_ERROR] * 2
    assert h.store.keys() == [] and h.writer.stats.objects_deleted == 1
    assert h.high_watermark(0) == 0


@run
async def test_a_lost_commit_answer_keeps_the_object_and_a_retry_gets_the_original_offsets() -> None:
    h = Harness()
    h.commits.modes.append("after")
    batch = records(b"a", b"b", pid=5, epoch=0, seq=0)
    t = await h.send(raw_entry(0, batch))
    await h.writer.flush()
    [failed] = await t
    assert failed.error is ErrorCode.KAFKA_STORAGE_ERROR
    [key] = h.store.keys()  # committed: the safety check said no
    assert h.commits.applied == [key] and h.writer.stats.objects_deleted == 0
    retry = await h.send(raw_entry(0, batch))  # the producer resends the same batch
    await h.writer.flush()
    [answer] = await retry
    assert (answer.error, answer.base_offset, answer.last_offset, answer.is_duplicate) == \
        (ErrorCode.NONE, 0, 1, True)
    assert h.high_watermark(0) == 2 and h.batches(0) == [(key, 0, 1)]


@run
async def test_an_object_is_kept_when_its_commit_state_is_unknown() -> None:
    h = Harness()
    h.commits.modes.append("before")
    h.commits.safe_check_error = ConnectionError("coordinator still down")
    t = await h.send(entry(0, b"a"))
    await h.writer.flush()
    assert (await t)[0].error is ErrorCode.KAFKA_STORAGE_ERROR
    assert len(h.store.keys()) == 1

    h2 = Harness(safe_delete=False)  # no safety check at all: never delete after an unknown outcome
    h2.commits.modes.append("before")
    t = await h2.send(entry(0, b"a"))
    await h2.writer.flush()
    assert len(h2.store.keys()) == 1


@run
async def test_a_refused_commit_is_invalid_request_and_its_object_is_deleted() -> None:
    h = Harness()
    h.commits.modes.append("invalid")
    t = await h.send(entry(0, b"a"))
    await h.writer.flush()
    assert (await t)[0].error is ErrorCode.INVALID_REQUEST
    assert h.store.keys() == []


@run
async def test_an_already_committed_key_is_never_deleted() -> None:
    h = Harness()
    h.commits.modes.append("already")
    t = await h.send(entry(0, b"a"))
    await h.writer.flush()
    assert (await t)[0].error is ErrorCode.KAFKA_STORAGE_ERROR
    assert len(h.store.keys()) == 1


@run
async def test_a_failed_delete_is_only_logged() -> None:
    h = Harness()
    h.commits.modes.append("before")
    h.store.delete_error = RemoteStorageError("nope")
    t = await h.send(entry(0, b"a"))
    await h.writer.flush()
    assert (await t)[0].error is ErrorCode.KAFKA_STORAGE_ERROR
    assert h.writer.stats.delete_failures == 1


@run
async def test_a_failed_commit_does_not_block_the_next_object() -> None:
    h = Harness(max_bytes=BATCH)
    h.commits.modes.extend(["before", None])
    first = await h.send(entry(0, b"a"))
    second = await h.send(entry(0, b"b"))
    (r1,), (r2,) = await results(first, second)
    assert (r1.error, r2.error, r2.base_offset) == (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE, 0)


@run
async def test_a_wrong_number_of_answers_is_a_storage_error() -> None:
    h = Harness()

    async def short(request: CommitFileRequest) -> list[CommitBatchResponse]:
        return (await h.commits(request))[:-1]

    h.writer._commit = short
    t = await h.send(entry(0, b"a"), entry(1, b"b"))
    await h.writer.flush()
    assert [r.error for r in await t] == [ErrorCode.KAFKA_STORAGE_ERROR] * 2
    assert len(h.store.keys()) == 1  # it may be committed: kept


@run
async def test_a_cancelled_caller_does_not_stop_the_commit() -> None:
    h = Harness()
    t = await h.send(entry(0, b"a"))
    t.cancel()
    await h.writer.flush()
    assert h.high_watermark(0) == 1


@run
async def test_submit_buffers_before_it_returns() -> None:
    """A connection's pipelined produce requests are submitted back to back, with no ``await`` in between:
    they share the active file (and so one object and one commit), in submission order."""
    h = Harness()
    first = h.writer.submit([entry(0, b"a")])
    assert h.writer.active_file_size == BATCH and h.timer.pending == 1  # buffered, interval armed: no await yet
    second = h.writer.submit([entry(0, b"b"), entry(1, b"c")])
    assert h.writer.active_file_size == 3 * BATCH and h.writer.stats.requests == 2
    assert not first.done() and not second.done()
    await h.tick(250)
    (a,), (b, c) = await results(first, second)
    [key] = h.store.keys()
    assert h.commits.calls == [key]
    assert (a.base_offset, b.base_offset, c.base_offset) == (0, 1, 0)
    assert h.batches(0) == [(key, 0, 1)]
    assert values_of(h.store.data(key)) == [b"a", b"b", b"c"]


@run
async def test_submit_answers_empty_entries_and_a_cancelled_answer_still_commits() -> None:
    h = Harness()
    empty = WriteEntry.parse(T1, "topic-1", 2, b"")
    done = h.writer.submit([empty])
    assert done.done() and [r.error for r in done.result()] == [ErrorCode.NONE]
    mixed = h.writer.submit([empty, entry(0, b"a"), empty])
    dropped = h.writer.submit([entry(0, b"b")])
    dropped.cancel()  # the client went away: the batch still commits, nobody else's answer changes
    await h.writer.flush()
    x, a, y = await mixed
    assert (x.error, y.error, x.base_offset) == (ErrorCode.NONE, ErrorCode.NONE, -1)
    assert a.base_offset == 0 and h.high_watermark(0) == 2
    await h.writer.close()
    with pytest.raises(WriterClosedError):
        h.writer.submit([entry(0, b"c")])


@run
async def test_crash_points_surround_the_commit() -> None:
    h = Harness()
    seen: list[tuple[str, int, bool]] = []
    t = await h.send(entry(0, b"a"))

    def record(name: str, detail: str | None = None) -> None:
        seen.append((name, len(h.commits.applied), t.done()))

    with mock.patch("strata.diskless.writer.writer.crash_point", record):
        await h.writer.flush()
    await t
    assert seen == [("diskless.after_upload", 0, False), ("diskless.after_commit", 1, False)]


# -- close ---------------------------------------------------------------------------------------


@run
async def test_close_flushes_the_active_file_and_rejects_later_writes() -> None:
    h = Harness()
    t = await h.send(entry(0, b"a"))
    await h.writer.close()
    assert (await t)[0].base_offset == 0
    assert h.writer.closed and h.timer.pending == 0
    assert h.writer.stats.rotations_by_flush == 1
    with pytest.raises(WriterClosedError):
        await h.writer.write([entry(0, b"b")])
    await h.writer.close()  # idempotent


@run
async def test_close_gives_up_after_its_timeout() -> None:
    h = Harness(close_timeout_ms=50)
    release = h.store.hold(lambda data: True)
    t = await h.send(entry(0, b"a"))
    try:
        await h.writer.close()
        assert (await t)[0].error is ErrorCode.KAFKA_STORAGE_ERROR
        assert h.writer.objects_in_flight == 0
    finally:
        release.set()
    assert h.commits.calls == []


# -- object keys and config ----------------------------------------------------------------------


def test_object_keys_sort_by_creation_time_and_name_the_broker() -> None:
    keys = [new_object_key(DEFAULT_PREFIX, 3, t) for t in (NOW + 1000, 5, NOW)]
    assert sorted(keys) == [keys[1], keys[2], keys[0]]
    assert all(k.startswith("diskless/wal/") for k in keys)
    assert parse_object_key(DEFAULT_PREFIX, keys[0]) == (NOW + 1000, 3)
    assert new_object_key(DEFAULT_PREFIX, 3, NOW) != new_object_key(DEFAULT_PREFIX, 3, NOW)
    bare = new_object_key("", 12, NOW)
    assert "/" not in bare and parse_object_key("", bare) == (NOW, 12)
    assert parse_object_key(DEFAULT_PREFIX, "diskless/wal/not-ours") is None
    assert parse_object_key("other", keys[0]) is None


@pytest.mark.parametrize("prefix", ["/wal", "wal/", "a//b", "/"])
def test_bad_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        validate_prefix(prefix)
    with pytest.raises(ValueError):
        WriterConfig(object_key_prefix=prefix)


@run
async def test_objects_go_under_the_configured_prefix() -> None:
    h = Harness(object_key_prefix="tenant-a/wal")
    t = await h.send(entry(0, b"a"))
    await h.writer.flush()
    await t
    [key] = h.store.keys()
    parsed = parse_object_key("tenant-a/wal", key)
    assert parsed is not None and parsed.broker_id == BROKER and parsed.created_ms == NOW


@pytest.mark.parametrize("field,value", [("max_bytes", 0), ("commit_interval_ms", -1), ("max_upload_attempts", 0),
                                         ("upload_backoff_ms", -1), ("max_uploads_in_flight", 0),
                                         ("close_timeout_ms", -1)])
def test_config_ranges(field: str, value: int) -> None:
    kwargs: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=field):
        WriterConfig(**kwargs)


@run
async def test_stats_count_objects_bytes_and_latencies() -> None:
    h = Harness(max_bytes=BATCH * 2)
    t = await h.send(entry(0, b"a"), entry(1, b"b"))
    await t
    s = h.writer.stats
    assert (s.requests, s.entries, s.objects_uploaded, s.bytes_uploaded, s.commits, s.batches_committed) == \
        (1, 2, 1, 2 * BATCH, 1, 2)
    assert len(s.upload_latency_ms) == 1 and len(s.commit_latency_ms) == 1
