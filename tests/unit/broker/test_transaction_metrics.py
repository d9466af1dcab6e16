"""``register_transaction_metrics`` against a real TransactionCoordinator and a real ReplicaManager (real logs).

The coordinator's ``__transaction_state`` and its marker writer are in-memory fakes the test holds back
or releases, so each gauge is read while a transaction sits in the state it counts: open, decided with
a marker owed to a partition without a leader, every marker written but the completion not yet written.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.unit.test_metrics import samples

from strata.broker.topics import TopicInfo
from strata.broker.transaction_metrics import (
    HANGING_ABORTS,
    LATE_TRANSACTION_BUFFER_MS,
    LATE_TRANSACTIONS,
    LOG_APPEND_RETRY_QUEUE_SIZE,
    MARKERS_WRITTEN,
    ONGOING_TRANSACTIONS,
    PENDING_MARKERS,
    PRODUCER_ID_COUNT,
    TIMED_OUT_ABORTS,
    TRANSACTIONAL_ID_COUNT,
    TRANSACTIONS_WITH_PENDING_MARKERS,
    UNKNOWN_DESTINATION_QUEUE_SIZE,
    has_late_transaction,
    register_transaction_metrics,
)
from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.common.metrics import Registry
from strata.config import LogConfig
from strata.config.transaction_config import TransactionConfig
from strata.coordinator.transaction.coordinator import TransactionCoordinator
from strata.errors import ErrorCode
from strata.log.manager import LogManager
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import BatchBuilder, ControlRecordType, build_control_batch
from strata.replication.replica_manager import ReplicaManager

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
MAX_TIMEOUT_MS = 60_000
COORDINATOR_SERIES = (UNKNOWN_DESTINATION_QUEUE_SIZE, LOG_APPEND_RETRY_QUEUE_SIZE, ONGOING_TRANSACTIONS,
                      TRANSACTIONAL_ID_COUNT, PENDING_MARKERS, TRANSACTIONS_WITH_PENDING_MARKERS, LATE_TRANSACTIONS)


def test_kafka_names() -> None:
    assert UNKNOWN_DESTINATION_QUEUE_SIZE == \
        "kafka_coordinator_transaction_TransactionMarkerChannelManager_UnknownDestinationQueueSize"
    assert LOG_APPEND_RETRY_QUEUE_SIZE == \
        "kafka_coordinator_transaction_TransactionMarkerChannelManager_LogAppendRetryQueueSize"
    assert PRODUCER_ID_COUNT == "kafka_server_ReplicaManager_ProducerIdCount"
    assert LATE_TRANSACTIONS == "kafka_server_ReplicaManager_PartitionsWithLateTransactionsCount"
    assert ONGOING_TRANSACTIONS == "strata_coordinator_transaction_TransactionCoordinator_OngoingTransactions"
    assert MARKERS_WRITTEN == "strata_coordinator_transaction_TransactionMarkerChannelManager_MarkersWrittenPerSec"


class Storage:
    """``__transaction_state`` in memory; ``gate`` cleared holds every append back."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        await self.gate.wait()
        self.records.append((partition, key, value))

    def read(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        return iter(())


class Writer:
    """Acknowledges markers on partitions with a leader; LEADER_NOT_AVAILABLE on the others."""

    def __init__(self, leaders: dict[TopicPartition, int]) -> None:
        self.leaders = leaders
        self.calls = 0

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls += 1
        return {tp: ErrorCode.NONE if self.leaders.get(tp, -1) >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
                for tp in partitions}

    def partition_exists(self, tp: TopicPartition) -> bool:
        return True


class View:
    def __init__(self, leaders: dict[TopicPartition, int]) -> None:
        self.leaders = leaders

    def partition(self, topic: str, partition: int) -> Any:
        return SimpleNamespace(leader=self.leaders.get(TopicPartition(topic, partition), -1))


def replica_manager(tmp_path: Path, clock: ManualClock) -> ReplicaManager:
    def config_for(topic: str) -> LogConfig:
        return LogConfig()

    logs = LogManager([tmp_path / "logs"], config_for, clock, ManualScheduler())
    return ReplicaManager(1, logs, config_for, clock)


def service(coordinator: TransactionCoordinator, view: View, now: Callable[[], int], clustered: bool) -> Any:
    """The attributes of ``TransactionService`` the metrics read."""
    return SimpleNamespace(coordinator=coordinator, clustered=clustered, view=view, now_ms=now,
                           partition_exists=lambda tp: True, hanging_aborted=0,
                           config=SimpleNamespace(transactions=TransactionConfig(max_timeout_ms=MAX_TIMEOUT_MS)))


async def until(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_coordinator_series_are_absent_before_the_service_starts(tmp_path: Path) -> None:
    registry = Registry()
    broker = SimpleNamespace(transactions=None, replicas=replica_manager(tmp_path, ManualClock()))
    register_transaction_metrics(registry, broker)
    got = samples(registry.render())
    assert got[PRODUCER_ID_COUNT] == 0
    for name in COORDINATOR_SERIES:
        assert name not in got
    assert got[TIMED_OUT_ABORTS + "_total"] == 0 and got[MARKERS_WRITTEN + "_total"] == 0


def test_a_transaction_through_its_states(tmp_path: Path) -> None:
    async def run() -> None:
        registry = Registry()
        clock = ManualClock()
        broker = SimpleNamespace(transactions=None, replicas=replica_manager(tmp_path, clock))
        register_transaction_metrics(registry, broker)
        leaders = {T0: 1, T1: -1}  # t-1 has no leader: its marker waits
        storage, writer = Storage(), Writer(leaders)
        coordinator = TransactionCoordinator(storage, writer, lambda: _next_pid(), clock.milliseconds,
                                             TransactionConfig(max_timeout_ms=MAX_TIMEOUT_MS), 1)
        coordinator.active = True
        coordinator.on_election(0, 0)
        broker.transactions = service(coordinator, View(leaders), clock.milliseconds, clustered=True)

        def read() -> dict[str, float]:
            return samples(registry.render())

        assert {k: read()[k] for k in COORDINATOR_SERIES} == dict.fromkeys(COORDINATOR_SERIES, 0)
        r = await coordinator.init_producer_id("a", 30_000)
        assert r.error_code == 0
        assert read()[TRANSACTIONAL_ID_COUNT] == 1 and read()[ONGOING_TRANSACTIONS] == 0  # Empty
        assert await coordinator.add_partitions("a", r.producer_id, r.producer_epoch, [T0, T1]) == 0
        assert read()[ONGOING_TRANSACTIONS] == 1 and read()[PENDING_MARKERS] == 0

        assert await coordinator.end_txn("a", r.producer_id, r.producer_epoch, True) == 0  # PrepareCommit
        await until(lambda: writer.calls >= 1, "the first marker round")
        got = read()
        assert got[ONGOING_TRANSACTIONS] == 0
        assert got[PENDING_MARKERS] == 1  # t-0 acknowledged, t-1 owed
        assert got[UNKNOWN_DESTINATION_QUEUE_SIZE] == 1  # and t-1 has no leader
        assert got[TRANSACTIONS_WITH_PENDING_MARKERS] == 1
        assert got[LOG_APPEND_RETRY_QUEUE_SIZE] == 0
        assert got[MARKERS_WRITTEN + "_total"] == 1

        storage.gate.clear()  # the completion will not get written yet
        leaders[T1] = 2
        await until(lambda: read()[PENDING_MARKERS] == 0, "the marker on t-1")
        got = read()
        assert got[UNKNOWN_DESTINATION_QUEUE_SIZE] == 0
        assert got[LOG_APPEND_RETRY_QUEUE_SIZE] == 1  # every marker written, CompleteCommit owed
        assert got[MARKERS_WRITTEN + "_total"] == 2

        storage.gate.set()
        await until(lambda: read()[TRANSACTIONS_WITH_PENDING_MARKERS] == 0, "the completion")
        got = read()
        assert got[LOG_APPEND_RETRY_QUEUE_SIZE] == 0 and got[TRANSACTIONAL_ID_COUNT] == 1

        coordinator.timed_out_aborts += 3
        broker.transactions.hanging_aborted = 2
        got = read()
        assert got[TIMED_OUT_ABORTS + "_total"] == 3 and got[HANGING_ABORTS + "_total"] == 2
        assert read()[TIMED_OUT_ABORTS + "_total"] == 3  # mirrored once, not again at each scrape

        # a new service (a restarted coordinator object): its counters start from 0 and add up
        fresh = TransactionCoordinator(storage, writer, lambda: _next_pid(), clock.milliseconds,
                                       TransactionConfig(), 1)
        fresh.timed_out_aborts = 1
        broker.transactions = service(fresh, View(leaders), clock.milliseconds, clustered=False)
        got = read()
        assert got[TIMED_OUT_ABORTS + "_total"] == 4
        assert got[UNKNOWN_DESTINATION_QUEUE_SIZE] == 0 and got[TRANSACTIONAL_ID_COUNT] == 0  # owns nothing
        await coordinator.stop()

    asyncio.run(run())


_pids = iter(range(1000, 2000))


async def _next_pid() -> int:
    return next(_pids)


def _txn_batch(pid: int, seq: int, timestamp: int) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
    b.append(b"v", timestamp=timestamp)
    return b.build()


def _idempotent_batch(pid: int, timestamp: int) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0)
    b.append(b"v", timestamp=timestamp)
    return b.build()


def test_producer_ids_and_late_transactions(tmp_path: Path) -> None:
    now = int(time.time() * 1000)  # the markers the log builds carry the wall clock's time
    clock = ManualClock(now)
    replicas = replica_manager(tmp_path, clock)
    replicas.open_topic(TopicInfo("t", uuid.uuid4(), 2))
    registry = Registry()
    coordinator = SimpleNamespace(timed_out_aborts=0, markers=SimpleNamespace(markers_written=0, pending=lambda: 0),
                                  state=SimpleNamespace(all_metadata=lambda: iter(())))
    broker = SimpleNamespace(transactions=service(coordinator, View({}), clock.milliseconds, clustered=False),
                             replicas=replicas)
    register_transaction_metrics(registry, broker)

    try:
        _late_transactions(registry, replicas, clock)
    finally:
        replicas.logs.shutdown()


def _late_transactions(registry: Registry, replicas: ReplicaManager, clock: ManualClock) -> None:
    now = clock.milliseconds()
    late = LATE_TRANSACTION_BUFFER_MS + MAX_TIMEOUT_MS
    replicas.append(T0, _idempotent_batch(7, now - 10 * late))  # old, but no transaction: never late
    replicas.append(T0, _txn_batch(8, 0, now - 1000))  # the oldest open transaction: recent
    replicas.append(T0, _txn_batch(9, 0, now - 2 * late))  # a later one, silent for long: not the oldest
    replicas.append(T1, _txn_batch(10, 0, now - late))  # exactly at the bound: not late yet
    got = samples(registry.render())
    assert got[PRODUCER_ID_COUNT] == 4
    assert got[LATE_TRANSACTIONS] == 0

    clock.advance(1)  # t-1's transaction is now past transaction.max.timeout.ms + 5 min
    assert samples(registry.render())[LATE_TRANSACTIONS] == 1

    # producer 8's transaction ends: producer 9's, silent for long, is now the oldest on t-0
    replicas.append(T0, build_control_batch(ControlRecordType.ABORT, producer_id=8, producer_epoch=0,
                                            coordinator_epoch=0), AppendOrigin.COORDINATOR)
    assert has_late_transaction(replicas.get_log(T0).producer_state, clock.milliseconds(), MAX_TIMEOUT_MS)
    got = samples(registry.render())
    assert got[LATE_TRANSACTIONS] == 2 and got[PRODUCER_ID_COUNT] == 4  # producer 8 is still known
