"""Partition leader/follower state: Kafka's becomeLeaderOrFollower rules, HW, ISR proposals, acks=all checks."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tests.conftest import OpenLog

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.errors import ErrorCode
from strata.log.manager import LogManager
from strata.protocol.records.builder import build_batch
from strata.replication.partition import Partition, PartitionState, Transition
from strata.replication.replica_manager import ReplicaManager

T = 1_700_000_000_000
TP = TopicPartition("t", 0)


def records(n: int) -> bytes:
    return build_batch([b"x"] * n, timestamp=T)


def leader(open_log: OpenLog, isr: tuple[int, ...] = (1, 2, 3)) -> Partition:
    part = Partition(TP, uuid.uuid4(), 1, open_log())
    assert part.apply(PartitionState(1, 5, isr, (1, 2, 3), partition_epoch=3), now_ms=0) == Transition.BECAME_LEADER
    return part


def test_stale_and_equal_states_are_ignored_newer_partition_epochs_update(open_log: OpenLog) -> None:
    part = leader(open_log)
    assert part.apply(PartitionState(2, 4, (2,), (1, 2, 3), partition_epoch=9), 0) == Transition.NONE
    assert part.apply(PartitionState(1, 5, (1, 2), (1, 2, 3), partition_epoch=3), 0) == Transition.NONE
    assert part.apply(PartitionState(1, 5, (1, 2), (1, 2, 3), partition_epoch=4), 0) == Transition.UPDATED
    assert part.isr == {1, 2} and part.is_leader
    assert part.apply(PartitionState(2, 6, (2, 3), (1, 2, 3), partition_epoch=5), 0) == Transition.BECAME_FOLLOWER
    assert not part.is_leader and part.leader == 2 and part.followers == {}


def test_leader_epoch_starts_at_the_log_end(open_log: OpenLog) -> None:
    part = Partition(TP, uuid.uuid4(), 1, open_log())
    part.apply(PartitionState(2, 0, (1, 2), (1, 2)), 0)
    part.log.append_as_follower(build_batch([b"a"] * 3, partition_leader_epoch=0, timestamp=T))
    part.apply(PartitionState(1, 1, (1, 2), (1, 2), partition_epoch=1), 0)
    assert part.leader_epoch_start_offset == 3
    assert part.log.leader_epoch_cache.end_offset_for(0, part.log.log_end_offset) == (0, 3)


def test_high_watermark_is_the_smallest_isr_log_end(open_log: OpenLog) -> None:
    part = leader(open_log)
    part.log.append_as_leader(records(10), part.leader_epoch)
    assert not part.maybe_increment_high_watermark()  # followers not heard from yet
    assert not part.update_follower_fetch(2, 10, 0, now_ms=1)
    assert part.update_follower_fetch(3, 4, 0, now_ms=1)
    assert part.log.high_watermark == 4
    assert part.check_enough_replicas_reach_offset(10, min_isr=2) == (False, ErrorCode.NONE)
    part.update_follower_fetch(3, 10, 0, now_ms=2)
    assert part.log.high_watermark == 10
    assert part.check_enough_replicas_reach_offset(10, min_isr=2) == (True, ErrorCode.NONE)
    assert part.check_enough_replicas_reach_offset(10, min_isr=4) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_out_of_sync_followers_and_expansion(open_log: OpenLog) -> None:
    part = leader(open_log, isr=(1, 2))
    part.log.append_as_leader(records(5), part.leader_epoch)
    # 2 is in the ISR and counted as caught up at leadership start (t=0); 3 is not in the ISR
    assert part.out_of_sync_replicas(now_ms=100, max_lag_ms=1000) == set()
    assert part.out_of_sync_replicas(now_ms=1001, max_lag_ms=1000) == {2}
    part.update_follower_fetch(2, 5, 0, now_ms=1001)  # reached the leader's end: caught up now
    assert part.out_of_sync_replicas(now_ms=1500, max_lag_ms=1000) == set()
    assert part.log.high_watermark == 5
    assert part.isr_to_expand(2) is None  # in the ISR already
    part.update_follower_fetch(3, 2, 0, now_ms=1500)
    assert part.isr_to_expand(3) is None  # behind the HW
    part.update_follower_fetch(3, 5, 0, now_ms=1600)
    assert part.isr_to_expand(3) == 3


def test_only_the_fetching_follower_can_rejoin_the_isr(tmp_path: Path) -> None:
    """Found by the nemesis: follower 3 fetched to the end, lost the network and left the ISR; on an idle
    partition its stale end offset still equals the HW, and a fetch by follower 2 took 3 back into the ISR,
    where it held every acks=all write until the next shrink, every few seconds (Kafka expands the ISR only
    with the replica that fetched)."""
    clock = ManualClock(T)
    logs = LogManager([tmp_path / "logs"], lambda _t: LogConfig(), clock, ManualScheduler())
    rm = ReplicaManager(1, logs, lambda _t: LogConfig(), clock)
    proposed: list[tuple[int, ...]] = []

    async def writer(tp: TopicPartition, state: PartitionState) -> PartitionState | None:
        proposed.append(state.isr)
        return None

    rm.isr_writer = writer

    async def scenario() -> None:
        rm.become_leader_or_follower(TP, uuid.uuid4(), PartitionState(1, 5, (1, 2), (1, 2, 3), partition_epoch=3))
        part = rm.partitions[TP]
        part.log.append_as_leader(records(5), part.leader_epoch)
        part.update_follower_fetch(3, 5, 0, now_ms=T)  # 3's last fetch before it lost the network
        rm.update_follower_fetch(TP, 2, 5, 0)  # 2 fetches: the HW is 5, 3's stale end offset too
        await asyncio.sleep(0)
        assert proposed == []
        rm.update_follower_fetch(TP, 3, 5, 0)  # 3 itself fetches again: it rejoins
        await asyncio.sleep(0)
        assert proposed == [(1, 2, 3)]

    asyncio.run(scenario())


def test_caught_up_at_the_previous_fetch_when_this_one_reaches_where_the_leader_was(open_log: OpenLog) -> None:
    part = leader(open_log, isr=(1, 2))
    part.log.append_as_leader(records(5), part.leader_epoch)
    part.update_follower_fetch(2, 0, 0, now_ms=10)   # leader end then: 5
    part.log.append_as_leader(records(5), part.leader_epoch)
    part.update_follower_fetch(2, 5, 0, now_ms=20)   # reached 5 (where the leader was at t=10), not 10
    assert part.followers[2].last_caught_up_time_ms == 10


def test_a_follower_is_not_leader_for_acks(open_log: OpenLog) -> None:
    part = Partition(TP, uuid.uuid4(), 1, open_log())
    part.apply(PartitionState(2, 0, (1, 2), (1, 2)), 0)
    assert part.check_enough_replicas_reach_offset(0, 1) == (True, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_a_fenced_leader_answers_its_waiting_acks_all_produces_at_once(tmp_path: Path) -> None:
    """Found by the netns suite: a produce reached the old leader 100 ms before its peers' answer fenced it
    (cut off from ZooKeeper, another leader elected). Its followers fetch from the new leader, so the wait could
    only end in the request timeout, 30 s of a producer stuck. Fenced, the wait ends with NOT_LEADER_OR_FOLLOWER
    (the client retries on the new leader); what was replicated before the fence is still answered NONE."""
    clock = ManualClock(T)
    logs = LogManager([tmp_path / "logs"], lambda _t: LogConfig(), clock, ManualScheduler())
    rm = ReplicaManager(1, logs, lambda _t: LogConfig(), clock)

    async def scenario() -> None:
        rm.become_leader_or_follower(TP, uuid.uuid4(), PartitionState(1, 5, (1, 2), (1, 2), partition_epoch=3))
        part = rm.partitions[TP]
        rm.append(TP, records(5), required_acks=-1)
        rm.update_follower_fetch(TP, 2, 5, 0)  # replicated: HW 5
        rm.append(TP, records(5), required_acks=-1)  # waits for the follower
        waiting = asyncio.ensure_future(rm.wait_for_replication(TP, 10, timeout_s=30))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        rm.fence_partitions({TP})
        assert await asyncio.wait_for(waiting, 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await rm.wait_for_replication(TP, 5, timeout_s=1) == ErrorCode.NONE
        assert part.is_leader and part.fenced

    asyncio.run(scenario())
