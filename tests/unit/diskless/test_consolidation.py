"""The consolidator on its own: an in-memory coordinator, an in-memory store, the real reader and a real
partition log on disk. What it must do: append exactly the committed batches in offset order (epoch 0),
restart a replica that fell below the WAL's start, follow the cross-tier log start, and have the leader
prune what its remote tier holds (reporting its log start first)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.unit.diskless.test_reader import NOW, Cluster, T, item, new_reader, records

from strata.common import TopicPartition
from strata.common.clock import ManualClock
from strata.common.scheduler import ManualScheduler
from strata.config import LogConfig
from strata.diskless.consolidation import Consolidator, Hosted
from strata.diskless.coordinator.api import AdvanceLogStartRequest, DeleteRecordsRequest, TopicIdPartition
from strata.diskless.reader.complete import DISKLESS_LEADER_EPOCH
from strata.log.loader import load_partition_log
from strata.log.partition_log import PartitionLog
from strata.protocol.records import iter_batches
from strata.protocol.records.record import decode_batch

TP = TopicPartition("events", 0)


class Rig:
    def __init__(self, tmp: Path, leads: bool = True) -> None:
        self.cluster = Cluster(partitions=1)
        self.clock = ManualClock(NOW + 1000)
        self.log = self.new_log(tmp / "events-0")
        self.leads = leads
        self.reader = new_reader(self.cluster.store)
        self.commands: list[tuple[str, Any]] = []
        self.notified: list[TopicPartition] = []
        self.consolidator = Consolidator(lambda: [Hosted(TP, T, self.log, self.leads)], self.query, self.execute,
                                         self.reader.read, self.notified.append, self.clock.milliseconds,
                                         max_bytes=1 << 20, prune_interval_ms=0)

    def new_log(self, directory: Path) -> PartitionLog:
        return load_partition_log(directory, TP, LogConfig(segment_bytes=2048), self.clock, ManualScheduler(),
                                  remote_log_enabled=True)

    async def query(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self.cluster.cp)

    async def execute(self, kind: str, args: Any) -> Any:
        self.commands.append((kind, args))
        if kind == "prune_batches":
            return self.cluster.cp.prune_batches_below_highest_tiered_offset(args, now_ms=self.clock.milliseconds())
        if kind == "advance_log_start":
            return self.cluster.cp.advance_cross_tier_log_start(args, now_ms=self.clock.milliseconds())
        raise AssertionError(kind)

    def produce(self, n_objects: int, per_object: int = 5, tag: str = "") -> None:
        for i in range(n_objects):
            self.cluster.produce(f"wal/{tag}{i}-{uuid.uuid4()}", [item(0, records(0, per_object, tag=f"{tag}{i}-"))])

    def run(self) -> int:
        return asyncio.run(self.consolidator.run_once())

    def local_values(self) -> list[tuple[int, bytes | None, int]]:
        out = []
        for segment in self.log.segments:
            data = segment.log.path.read_bytes()
            for position, header in iter_batches(data, verify_crc=True):
                out += [(r.offset, r.value, header.partition_leader_epoch)
                        for r in decode_batch(data, position).records]
        return out


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def test_committed_batches_are_appended_in_offset_order_with_epoch_0(rig: Rig) -> None:
    rig.produce(6)
    assert rig.run() == 6
    values = rig.local_values()
    assert [o for o, _, _ in values] == list(range(30))
    assert [v for _, v, _ in values[:5]] == [b"p0-0-%d" % i for i in range(5)]
    assert {e for _, _, e in values} == {DISKLESS_LEADER_EPOCH}
    assert rig.log.log_end_offset == rig.log.high_watermark == 30
    assert rig.notified == [TP]
    assert rig.run() == 0  # caught up: nothing appended twice
    rig.produce(1, tag="more")
    assert rig.run() == 1 and rig.log.log_end_offset == 35
    assert rig.consolidator.stats.batches == 7


def test_the_leader_reports_its_log_start_then_prunes_what_is_tiered(rig: Rig) -> None:
    rig.produce(6)
    rig.run()
    assert [k for k, _ in rig.commands] == ["advance_log_start"]  # nothing tiered yet: nothing pruned
    rig.log.update_highest_offset_in_remote_storage(14)
    rig.commands.clear()
    rig.run()
    assert [k for k, _ in rig.commands] == ["prune_batches"]  # the log start is known already
    (info,) = rig.cluster.cp.get_logs([TopicIdPartition(T, 0)])
    assert info.log_start_offset == 15  # the WAL starts after the tiered offset
    assert info.remote_log_start_offset == 0  # the partition still starts at 0 (remote tier)


def test_a_follower_never_prunes(tmp_path: Path) -> None:
    rig = Rig(tmp_path, leads=False)
    rig.produce(3)
    rig.log.update_highest_offset_in_remote_storage(9)
    rig.run()
    assert rig.commands == []


def test_a_replica_below_the_wal_start_restarts_there(rig: Rig, tmp_path: Path) -> None:
    rig.produce(6)
    rig.run()
    rig.log.update_highest_offset_in_remote_storage(19)
    rig.run()  # pruned below 20
    rig.log = rig.new_log(tmp_path / "wiped")  # a wiped disk: an empty log at 0
    assert rig.run() == 2
    assert rig.consolidator.stats.restarts == 1
    assert rig.log.local_log_start_offset == 20 and rig.log.log_start_offset == 0  # below: the remote tier
    assert rig.log.log_end_offset == 30
    assert rig.log.leader_epoch_cache.epoch_for_offset(5) == DISKLESS_LEADER_EPOCH


def test_the_cross_tier_log_start_is_followed(rig: Rig) -> None:
    rig.produce(6)
    rig.run()
    rig.cluster.cp.delete_records([DeleteRecordsRequest(T, 0, 12)], now_ms=NOW)
    rig.cluster.cp.advance_cross_tier_log_start([AdvanceLogStartRequest(T, 0, 12)], now_ms=NOW)
    rig.run()
    assert rig.log.log_start_offset == 12


def test_a_log_ahead_of_the_coordinator_is_truncated_to_it(rig: Rig, tmp_path: Path) -> None:
    rig.produce(2)
    rig.run()
    other = Rig(tmp_path / "other")  # a coordinator that knows fewer batches (state gone back)
    other.log = rig.log
    other.produce(1)
    other.run()
    assert rig.log.log_end_offset == 5
