"""In-memory fakes for the transaction coordinator's unit tests (a plain module, not a test file).

- :class:`FakeTxnLog`: the ``TxnLogStorage`` protocol over per-partition lists. It records every
  successful append as ``(partition, key, value)``, can be told to fail the next appends with Kafka
  error codes (raised as :class:`~strata.errors.ApiError`, as the broker's storage does), and can
  hold appends until the test releases them (the record is in the log, the ISR has not acknowledged
  it yet), so a test can act while a write is in flight.
- :class:`FakeMarkerWriter`: the ``MarkerWriter`` protocol; every call is recorded and answered
  from a per-partition script of error codes (NONE once the script is used up); partitions of a
  deleted topic can be declared. It can hold calls too.
- :class:`FakeClock` (``now_ms``) and :class:`ProducerIds` (``next_producer_id``, a counter).
- :class:`Harness` wires them into a :class:`TransactionCoordinator`; ``async with Harness() as h`` elects
  (loads) every ``__transaction_state`` partition and stops the coordinator at the end.

Everything here runs on the test's event loop (``asyncio.run`` per test).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field

import pytest

from strata.common import TopicPartition
from strata.config.transaction_config import TransactionConfig
from strata.coordinator.transaction import markers as markers_module
from strata.coordinator.transaction.coordinator import TransactionCoordinator
from strata.coordinator.transaction.log_records import (
    TransactionLogValue,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strata.coordinator.transaction.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionMetadata
from strata.errors import ApiError, ErrorCode

START_MS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Appended:
    partition: int
    key: bytes
    value: bytes | None

    @property
    def transactional_id(self) -> str | None:
        return decode_key(self.key)

    @property
    def decoded(self) -> TransactionLogValue | None:
        return None if self.value is None else decode_value(self.value)


class FakeTxnLog:
    """``TxnLogStorage``: appends go to a list per partition; failures and holds are scripted."""

    def __init__(self) -> None:
        self.appended: list[Appended] = []  # successful appends, in order
        self.attempts = 0  # every call of append, failed or not
        self._logs: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
        self._failures: list[int] = []
        self.holding = False
        self.held: list[asyncio.Future[None]] = []

    # -- scripting --------------------------------------------------------------------------------

    def fail_next(self, *codes: int) -> None:
        """The next appends raise these error codes, one per append (ErrorCode.NONE lets one through)."""
        self._failures.extend(codes)

    def hold(self) -> None:
        """From now on every append waits until released."""
        self.holding = True

    def release_one(self) -> None:
        fut = self.held.pop(0)
        if not fut.done():  # its waiter may have been cancelled
            fut.set_result(None)

    def release_all(self) -> None:
        self.holding = False
        while self.held:
            self.release_one()

    # -- seeding ----------------------------------------------------------------------------------

    def write(self, partition: int, transactional_id: str, value: TransactionLogValue | None) -> None:
        """Put a record in the log directly (what a previous coordinator wrote), not counted as appended."""
        self._put(partition, encode_key(transactional_id), None if value is None else encode_value(value))

    def write_raw(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        self._put(partition, key, value)

    def _put(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        log = self._logs.setdefault(partition, [])
        log.append((len(log), key, value))

    # -- TxnLogStorage ----------------------------------------------------------------------------

    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        """A successful record is in the log at once (the leader's append) and the call returns when
        released (the ISR acknowledged); a failing one writes nothing and raises when released."""
        self.attempts += 1
        code = self._failures.pop(0) if self._failures else ErrorCode.NONE
        if code == ErrorCode.NONE:
            self.appended.append(Appended(partition, key, value))
            self._put(partition, key, value)
        if self.holding:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.held.append(fut)
            await fut
        if code != ErrorCode.NONE:
            raise ApiError(ErrorCode(code), "scripted append failure")

    def read(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        yield from list(self._logs.get(partition, []))

    # -- inspection -------------------------------------------------------------------------------

    def records_of(self, transactional_id: str) -> list[TransactionLogValue | None]:
        """Every value appended for the id (None for a tombstone), in order."""
        return [a.decoded for a in self.appended if a.transactional_id == transactional_id]

    def states_of(self, transactional_id: str) -> list[TransactionState | None]:
        return [None if v is None else v.state for v in self.records_of(transactional_id)]


@dataclass(slots=True)
class MarkerCall:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[TopicPartition]


class FakeMarkerWriter:
    """``MarkerWriter``: answers each partition from its script, NONE once the script is used up."""

    def __init__(self) -> None:
        self.calls: list[MarkerCall] = []
        self.scripts: dict[TopicPartition, list[int | None]] = {}  # None: the partition missing from the answer
        self.deleted: set[TopicPartition] = set()
        self.holding = False
        self.held: list[asyncio.Future[None]] = []

    def script(self, tp: TopicPartition, *codes: int | None) -> None:
        self.scripts.setdefault(tp, []).extend(codes)

    def hold(self) -> None:
        self.holding = True

    def release_all(self) -> None:
        self.holding = False
        while self.held:
            fut = self.held.pop(0)
            if not fut.done():
                fut.set_result(None)

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls.append(MarkerCall(producer_id, producer_epoch, commit, coordinator_epoch, list(partitions)))
        if self.holding:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.held.append(fut)
            await fut
        out: dict[TopicPartition, int] = {}
        for tp in partitions:
            script = self.scripts.get(tp)
            code = script.pop(0) if script else ErrorCode.NONE
            if code is not None:
                out[tp] = code
        return out

    def partition_exists(self, tp: TopicPartition) -> bool:
        return tp not in self.deleted

    def partitions_sent(self) -> list[TopicPartition]:
        return [tp for c in self.calls for tp in c.partitions]


class FakeClock:
    def __init__(self, start_ms: int = START_MS) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


class ProducerIds:
    """``next_producer_id``: 1000, 1001, ...; can fail with a Kafka error or wait until released."""

    def __init__(self, first: int = 1000) -> None:
        self.next = first
        self.issued: list[int] = []
        self._failures: list[int] = []
        self.holding = False
        self.held: list[asyncio.Future[None]] = []

    def fail_next(self, code: int) -> None:
        self._failures.append(code)

    def hold(self) -> None:
        self.holding = True

    def release_all(self) -> None:
        self.holding = False
        while self.held:
            fut = self.held.pop(0)
            if not fut.done():
                fut.set_result(None)

    async def __call__(self) -> int:
        if self.holding:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.held.append(fut)
            await fut
        if self._failures:
            raise ApiError(ErrorCode(self._failures.pop(0)), "scripted producer id failure")
        pid = self.next
        self.next += 1
        self.issued.append(pid)
        return pid


def async_test(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an ``async def`` test with ``asyncio.run`` (a fresh event loop per test; fixtures pass through)."""

    @functools.wraps(fn)
    def run(*args: object, **kwargs: object) -> None:
        asyncio.run(fn(*args, **kwargs))  # type: ignore[arg-type]

    return run


async def settle(rounds: int = 20) -> None:
    """Let every ready task run until it waits on something the test controls."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def wait_until(cond: Callable[[], bool], timeout_s: float = 2.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


def tp(topic: str, partition: int = 0) -> TopicPartition:
    return TopicPartition(topic, partition)


def log_value(state: TransactionState, producer_id: int = 500, producer_epoch: int = 3,
              partitions: Iterable[TopicPartition] = (), timeout_ms: int = 60_000, start_ms: int = START_MS,
              update_ms: int = START_MS) -> TransactionLogValue:
    by_topic: dict[str, list[int]] = {}
    for p in sorted(partitions):
        by_topic.setdefault(p.topic, []).append(p.partition)
    return TransactionLogValue(producer_id=producer_id, producer_epoch=producer_epoch,
                               transaction_timeout_ms=timeout_ms, state=state,
                               partitions=tuple((t, tuple(ps)) for t, ps in by_topic.items()),
                               last_update_timestamp_ms=update_ms, start_timestamp_ms=start_ms)


def metadata(transactional_id: str = "txn", producer_id: int = 500, producer_epoch: int = 3,
             state: TransactionState = TransactionState.EMPTY, partitions: Iterable[TopicPartition] = (),
             last_producer_id: int = NO_PRODUCER_ID, last_producer_epoch: int = NO_PRODUCER_EPOCH,
             timeout_ms: int = 60_000, start_ms: int = -1, update_ms: int = START_MS) -> TransactionMetadata:
    return TransactionMetadata(transactional_id, producer_id, last_producer_id, producer_epoch, last_producer_epoch,
                               timeout_ms, state, set(partitions), start_ms, update_ms)


@dataclass
class Harness:
    """A coordinator over the fakes, every ``__transaction_state`` partition loaded at ``coordinator_epoch``."""

    num_partitions: int = 1
    coordinator_epoch: int = 5
    config: TransactionConfig = field(default_factory=TransactionConfig)
    log: FakeTxnLog = field(default_factory=FakeTxnLog)
    writer: FakeMarkerWriter = field(default_factory=FakeMarkerWriter)
    clock: FakeClock = field(default_factory=FakeClock)
    pids: ProducerIds = field(default_factory=ProducerIds)
    coordinator: TransactionCoordinator = field(init=False)

    def __post_init__(self) -> None:
        self.coordinator = TransactionCoordinator(self.log, self.writer, self.pids, self.clock, self.config,
                                                  self.num_partitions)

    def elect_all(self) -> None:
        for p in range(self.num_partitions):
            self.coordinator.on_election(p, self.coordinator_epoch)

    @property
    def c(self) -> TransactionCoordinator:
        return self.coordinator

    def partition_of(self, transactional_id: str) -> int:
        return self.coordinator.partition_for(transactional_id)

    def put(self, md: TransactionMetadata) -> TransactionMetadata:
        """Put metadata in the cache directly (Kafka's tests hand the coordinator a prepared metadata)."""
        found = self.coordinator.state.put_if_absent(md)
        assert not isinstance(found, int), f"partition of {md.transactional_id} not owned"
        assert found.metadata is md
        return md

    def md(self, transactional_id: str) -> TransactionMetadata | None:
        found = self.coordinator.state.get(transactional_id)
        if isinstance(found, int):
            raise AssertionError(f"{transactional_id}: {ErrorCode(found).name}")
        return None if found is None else found.metadata

    async def __aenter__(self) -> Harness:
        self.elect_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self.log.release_all()
        self.writer.release_all()
        self.pids.release_all()
        await self.coordinator.stop()


def fast_marker_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Marker retries back off 0.1 s doubling to 1 s; tests use 1 to 2 ms."""
    monkeypatch.setattr(markers_module, "RETRY_BACKOFF_S", 0.001)
    monkeypatch.setattr(markers_module, "MAX_BACKOFF_S", 0.002)
