"""A diskless partition's ISR: never shrunk (its replicas consolidate from the coordinator, not by fetching from
the leader), expanded back to its replicas - the live ones only, so a dead replica the controller removed is not
written back into ZooKeeper at every ISR check while it is down."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path

from tests.unit.broker.test_cluster_metrics_module import replica_manager

from strata.common import ManualClock, TopicPartition
from strata.config import LogConfig
from strata.replication.partition import PartitionState


def test_a_diskless_isr_is_never_shrunk_and_grows_back_to_the_live_replicas(tmp_path: Path) -> None:
    asyncio.run(_run(tmp_path))


async def _run(tmp_path: Path) -> None:
    clock = ManualClock()
    replicas = replica_manager(tmp_path, clock, {"dl": LogConfig(diskless_enable=True)})
    written = []

    async def isr_writer(tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        written.append(proposed.isr)
        return replace(proposed, partition_epoch=proposed.partition_epoch + 1)

    replicas.isr_writer = isr_writer
    alive = {1, 2, 3}
    replicas.broker_alive = lambda broker: broker in alive
    tp = TopicPartition("dl", 0)
    replicas.become_leader_or_follower(tp, uuid.uuid4(), PartitionState(1, 0, (1, 2, 3), (1, 2, 3)))
    replicas.consolidating.add(tp)
    clock.advance(60_000)  # no follower ever fetched: a classic ISR would shrink to the leader
    replicas.maybe_shrink_isr(5_000)
    await asyncio.sleep(0.01)
    assert replicas.partitions[tp].isr == {1, 2, 3} and written == []

    # broker 3 dies and the controller takes it out of the ISR: it is not written back while it is down
    alive.discard(3)
    replicas.become_leader_or_follower(tp, uuid.uuid4(), PartitionState(1, 0, (1, 2), (1, 2, 3), 1))
    for _ in range(3):
        replicas.maybe_shrink_isr(5_000)
        await asyncio.sleep(0.01)
    assert replicas.partitions[tp].isr == {1, 2} and written == []

    # once it is registered again, it is back at the next check
    alive.add(3)
    replicas.maybe_shrink_isr(5_000)
    await asyncio.sleep(0.01)
    assert replicas.partitions[tp].isr == {1, 2, 3} and written == [(1, 2, 3)]
