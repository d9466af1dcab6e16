"""``register_cluster_metrics`` against a real ReplicaManager (real logs), fetcher manager and controller object.

No ZooKeeper: the ClusterNode is built but never connected; partition states are applied the way
the cluster member applies them (``become_leader_or_follower``), ISR changes go through the
replica manager's own propose/write path with a fake writer.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path

from tests.unit.test_metrics import samples

from strata.broker.cluster_metrics import (
    ACTIVE_CONTROLLER,
    AT_MIN_ISR,
    CONSUMER_LAG,
    EVENT_QUEUE_TIME,
    GLOBAL_PARTITIONS,
    GLOBAL_TOPICS,
    ISR_EXPANDS,
    ISR_SHRINKS,
    LEADER_COUNT,
    MAX_LAG,
    OFFLINE_PARTITIONS,
    PARTITION_COUNT,
    UNCLEAN_ELECTIONS,
    UNDER_MIN_ISR,
    UNDER_REPLICATED,
    ZK_EXPIRES,
    register_cluster_metrics,
)
from strata.broker.topics import TopicInfo
from strata.cluster.node import ClusterNode
from strata.cluster.znodes import Endpoint, ReplicaAssignment, TopicAssignment
from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.common.metrics import Registry
from strata.config import LogConfig
from strata.config.broker_config import BrokerConfig
from strata.log.manager import LogManager
from strata.protocol.records.builder import build_batch
from strata.replication.fetcher import ReplicaFetcherManager
from strata.replication.partition import PartitionState
from strata.replication.replica_manager import ReplicaManager


def test_kafka_names() -> None:
    assert UNDER_REPLICATED == "kafka_server_ReplicaManager_UnderReplicatedPartitions"
    assert ISR_SHRINKS == "kafka_server_ReplicaManager_IsrShrinksPerSec"
    assert ACTIVE_CONTROLLER == "kafka_controller_KafkaController_ActiveControllerCount"
    assert OFFLINE_PARTITIONS == "kafka_controller_KafkaController_OfflinePartitionsCount"
    assert UNCLEAN_ELECTIONS == "kafka_controller_ControllerStats_UncleanLeaderElectionsPerSec"
    assert EVENT_QUEUE_TIME == "kafka_controller_ControllerEventManager_EventQueueTimeMs"
    assert MAX_LAG == "kafka_server_ReplicaFetcherManager_MaxLag"
    assert CONSUMER_LAG == "kafka_server_FetcherLagMetrics_ConsumerLag"
    assert ZK_EXPIRES == "kafka_server_SessionExpireListener_ZooKeeperExpiresPerSec"


def replica_manager(tmp_path: Path, clock: ManualClock, configs: dict[str, LogConfig] | None = None
                    ) -> ReplicaManager:
    def config_for(topic: str) -> LogConfig:
        return (configs or {}).get(topic, LogConfig())

    logs = LogManager([tmp_path / "logs"], config_for, clock, ManualScheduler())
    return ReplicaManager(1, logs, config_for, clock)


def test_single_node_gets_the_replica_manager_metrics_only(tmp_path: Path) -> None:
    registry = Registry()
    replicas = replica_manager(tmp_path, ManualClock())
    register_cluster_metrics(registry, replicas, None, None)
    before = samples(registry.render())
    assert before[PARTITION_COUNT] == 0 and before[LEADER_COUNT] == 0
    replicas.open_topic(TopicInfo("t", uuid.uuid4(), 3))
    replicas.open_topic(TopicInfo("u", uuid.uuid4(), 2))
    got = samples(registry.render())
    assert got[PARTITION_COUNT] == 5 and got[LEADER_COUNT] == 5
    assert got[UNDER_REPLICATED] == 0 and got[UNDER_MIN_ISR] == 0
    assert got[AT_MIN_ISR] == 5  # ISR {self} == min.insync.replicas 1, as Kafka counts it
    assert got[ISR_SHRINKS + "_total"] == 0 and got[ISR_EXPANDS + "_total"] == 0
    assert not any(k.startswith(("kafka_controller_", MAX_LAG, CONSUMER_LAG, ZK_EXPIRES)) for k in got)
    replicas.close_topic(TopicInfo("u", uuid.uuid4(), 2))
    assert samples(registry.render())[PARTITION_COUNT] == 3


def test_cluster_mode(tmp_path: Path) -> None:
    asyncio.run(_cluster_mode(tmp_path))


async def _cluster_mode(tmp_path: Path) -> None:
    clock = ManualClock()
    replicas = replica_manager(tmp_path, clock, {"strict": LogConfig(min_insync_replicas=2)})
    config = BrokerConfig.load(None, {"zookeeper.connect": "127.0.0.1:1/never-connected", "broker.id": "1"})
    node = ClusterNode(config.cluster, 1, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)])
    fetchers = ReplicaFetcherManager(1, lambda _id: None, replicas, config.cluster)
    written: list[PartitionState] = []

    async def isr_writer(tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        written.append(proposed)
        return replace(proposed, partition_epoch=proposed.partition_epoch + 1)

    replicas.isr_writer = isr_writer
    # what ClusterMember does on a transition: fetch from the new leader
    replicas.on_transition.append(lambda tp, _t, part: fetchers.follow(tp, part.leader, part.leader_epoch)
                                  if not part.is_leader else fetchers.unfollow(tp))
    registry = Registry()
    metrics = register_cluster_metrics(registry, replicas, node, fetchers)
    tid, strict_id = uuid.uuid4(), uuid.uuid4()
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    s0 = TopicPartition("strict", 0)
    try:
        replicas.become_leader_or_follower(t0, tid, PartitionState(1, 0, (1, 2, 3), (1, 2, 3)))
        replicas.become_leader_or_follower(t1, tid, PartitionState(1, 0, (1, 2), (1, 2, 3)))
        replicas.become_leader_or_follower(t2, tid, PartitionState(2, 0, (1, 2, 3), (2, 3, 1)))
        replicas.become_leader_or_follower(s0, strict_id, PartitionState(1, 0, (1,), (1, 2)))
        got = samples(registry.render())
        assert got[PARTITION_COUNT] == 4 and got[LEADER_COUNT] == 3
        assert got[UNDER_REPLICATED] == 2  # t-1 (2 of 3) and strict-0 (1 of 2); t-2 is led elsewhere
        assert got[UNDER_MIN_ISR] == 1 and got[AT_MIN_ISR] == 0  # strict-0: ISR 1 < 2; t-0, t-1: ISR above 1
        # controller metrics read 0 on a broker that is not the active controller
        assert got[ACTIVE_CONTROLLER] == 0 and got[OFFLINE_PARTITIONS] == 0 and got[GLOBAL_TOPICS] == 0
        assert got[UNCLEAN_ELECTIONS + "_total"] == 0 and got[ZK_EXPIRES + "_total"] == 0
        # the follower of t-2: a lag series labelled like Kafka's fetcher thread, MaxLag over all
        lag_key = f'{CONSUMER_LAG}{{clientId="ReplicaFetcherThread-0-2",partition="2",topic="t"}}'
        assert got[lag_key] == 0 and got[MAX_LAG + '{clientId="Replica"}'] == 0
        fetchers.fetchers[2, 0].partitions[t2].leader_high_watermark = 25
        got = samples(registry.render())
        assert got[lag_key] == 25 and got[MAX_LAG + '{clientId="Replica"}'] == 25
        assert metrics.partition_lag(t2) == 25 and fetchers.lag() == {t2: 25}

        # ISR shrink (follower 3 of t-0 never fetched) and expand (follower 3 of t-1 catches up)
        clock.advance(10_000)
        replicas.update_follower_fetch(t0, 2, 0, 0)
        replicas.update_follower_fetch(t1, 2, 0, 0)
        replicas.maybe_shrink_isr(5_000)
        await asyncio.sleep(0.01)
        assert replicas.partitions[t0].isr == {1, 2}
        replicas.update_follower_fetch(t1, 3, 0, 0)
        await asyncio.sleep(0.01)
        assert replicas.partitions[t1].isr == {1, 2, 3}
        got = samples(registry.render())
        assert got[ISR_SHRINKS + "_total"] == 1 and got[ISR_EXPANDS + "_total"] == 1
        assert got[UNDER_REPLICATED] == 2  # t-0 now, t-1 no more, strict-0 still

        # this broker becomes the controller; the controller's counters are mirrored
        node.controller.active = True
        node.controller.stats.offline_partitions = 2
        node.controller.stats.unclean_elections = 3
        node.controller.stats.event_queue_time_ms = 1.5
        node.controller.assignments["t"] = TopicAssignment(
            "t", tid, {p: ReplicaAssignment((1, 2, 3)) for p in range(3)})
        node.controller.assignments["strict"] = TopicAssignment("strict", strict_id, {0: ReplicaAssignment((1, 2))})
        got = samples(registry.render())
        assert got[ACTIVE_CONTROLLER] == 1 and got[OFFLINE_PARTITIONS] == 2
        assert got[GLOBAL_TOPICS] == 2 and got[GLOBAL_PARTITIONS] == 4
        assert got[UNCLEAN_ELECTIONS + "_total"] == 3 and got[EVENT_QUEUE_TIME] == 1.5
        node.controller.stats.unclean_elections = 4
        assert samples(registry.render())[UNCLEAN_ELECTIONS + "_total"] == 4
        for fn in node.on_session_lost:  # what ClusterNode does on SessionState.LOST
            fn()
        assert samples(registry.render())[ZK_EXPIRES + "_total"] == 1

        # leadership of t-2 moves here: its lag series goes; a new leader for it brings a new series
        replicas.become_leader_or_follower(t2, tid, PartitionState(1, 1, (1, 3), (2, 3, 1)))
        got = samples(registry.render())
        assert not any(k.startswith(CONSUMER_LAG) for k in got) and got[MAX_LAG + '{clientId="Replica"}'] == 0
        assert got[LEADER_COUNT] == 4
        replicas.become_leader_or_follower(t2, tid, PartitionState(3, 2, (3,), (2, 3, 1)))
        got = samples(registry.render())
        assert [k for k in got if k.startswith(CONSUMER_LAG)] == [
            f'{CONSUMER_LAG}{{clientId="ReplicaFetcherThread-0-3",partition="2",topic="t"}}']
        replicas.remove_partitions([t2], delete=True)
        got = samples(registry.render())
        assert not any(k.startswith(CONSUMER_LAG) for k in got) and got[PARTITION_COUNT] == 3
    finally:
        await fetchers.close()
        await replicas.close()


def test_lag_series_for_partitions_followed_before_registration(tmp_path: Path) -> None:
    async def run() -> None:
        replicas = replica_manager(tmp_path, ManualClock())
        config = BrokerConfig.load(None, {"zookeeper.connect": "127.0.0.1:1", "broker.id": "1"})
        fetchers = ReplicaFetcherManager(1, lambda _id: None, replicas, config.cluster)
        tp = TopicPartition("t", 0)
        replicas.become_leader_or_follower(tp, uuid.uuid4(), PartitionState(2, 0, (1, 2), (2, 1)))
        fetchers.follow(tp, 2, 0)
        plog = replicas.partitions[tp].log
        plog.append_as_follower(build_batch([b"x"] * 4, partition_leader_epoch=0, timestamp=1_700_000_000_000))
        fetchers.fetchers[2, 0].partitions[tp].leader_high_watermark = 10
        registry = Registry()
        node = ClusterNode(config.cluster, 1, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)])
        register_cluster_metrics(registry, replicas, node, fetchers)
        try:
            got = samples(registry.render())
            assert got[f'{CONSUMER_LAG}{{clientId="ReplicaFetcherThread-0-2",partition="0",topic="t"}}'] == 6
            assert got[MAX_LAG + '{clientId="Replica"}'] == 6
        finally:
            await fetchers.close()

    asyncio.run(run())
