"""KIP-73 replication quotas and ``num.replica.fetchers`` without a cluster: the throttled-replica lists, the
quota's rate and bound, the dynamic rate precedence, Kafka's fetcher id, the follower's choice of what to
leave out of a fetch, and a resize moving partitions between fetchers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.config.broker_config import BrokerConfig
from strata.errors import InvalidConfigError
from strata.log.manager import LogManager
from strata.quota.replication import (
    UNBOUNDED,
    ReplicationQuotaManager,
    ReplicationQuotas,
    dynamic_rate,
    throttled_partitions,
)
from strata.replication.fetcher import FetchState, ReplicaFetcher, ReplicaFetcherManager, fetcher_id
from strata.replication.replica_manager import ReplicaManager


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_list_names_partitions_for_one_broker_or_every_replica() -> None:
    assert throttled_partitions(("0:1", "1:2", " 2:1 "), 1) == frozenset({0, 2})
    assert throttled_partitions(("0:1", "1:2"), 3) == frozenset()
    assert throttled_partitions(("*",), 7) is None
    assert throttled_partitions((), 1) == frozenset()


def test_throttled_replica_lists_are_validated_as_kafka_does() -> None:
    assert LogConfig.from_props({"leader.replication.throttled.replicas": "0:1,1:2"}) \
        .leader_replication_throttled_replicas == ("0:1", "1:2")
    for bad in ("0-1", "*,0:1", "a:1"):
        with pytest.raises(InvalidConfigError, match="must be the literal"):
            LogConfig.from_props({"follower.replication.throttled.replicas": bad})


def test_which_partitions_are_throttled_follows_the_topic_config() -> None:
    configs = {"t": LogConfig(leader_replication_throttled_replicas=("0:1", "1:2"),
                              follower_replication_throttled_replicas=("*",))}
    quotas = ReplicationQuotas(1, lambda topic: configs.get(topic, LogConfig()))
    assert quotas.leader.is_throttled(TopicPartition("t", 0))
    assert not quotas.leader.is_throttled(TopicPartition("t", 1))  # that entry is broker 2's
    assert quotas.follower.is_throttled(TopicPartition("t", 5))
    assert not quotas.leader.is_throttled(TopicPartition("u", 0))
    configs["t"] = LogConfig()  # the throttle removed from the topic
    assert not quotas.leader.is_throttled(TopicPartition("t", 0))
    assert not quotas.follower.is_throttled(TopicPartition("t", 5))


def test_the_quota_is_exceeded_above_the_bound_and_for_as_long_as_simple_rate_says() -> None:
    clock = Clock()
    quota = ReplicationQuotaManager("FollowerReplication", 1, lambda _t: (), clock=clock)
    woken: list[int] = []
    quota.on_update.append(lambda: woken.append(quota.upper_bound))
    quota.record(10_000_000)
    assert not quota.is_quota_exceeded() and quota.throttle_s() == 0  # no bound: nothing is ever exceeded
    quota.update_quota(1000)
    assert woken == [1000]
    quota.update_quota(1000)  # unchanged: nobody is woken
    assert woken == [1000]

    clock.now = 1000.0  # long after: the windows have expired
    quota.record(1000)
    assert quota.measure() == pytest.approx(1000)  # a first burst counts over one window (SimpleRate)
    assert not quota.is_quota_exceeded()  # at the bound is within it
    quota.record(500)
    assert quota.is_quota_exceeded()
    assert quota.throttle_s() == pytest.approx(1.5)  # 1500 bytes at 1000/s: 1.5 s after the first record
    clock.now += 1.0
    assert quota.is_quota_exceeded() and quota.throttle_s() == pytest.approx(0.5)
    clock.now += 0.5
    assert not quota.is_quota_exceeded() and quota.throttle_s() == 0
    quota.update_quota(UNBOUNDED)
    assert not quota.bounded and woken == [1000, UNBOUNDED]


def test_the_rate_comes_from_the_broker_then_the_cluster_default() -> None:
    key = "leader.replication.throttled.rate"
    assert dynamic_rate({}, {}, key) == UNBOUNDED
    assert dynamic_rate({}, {key: "500"}, key) == 500
    assert dynamic_rate({key: "100"}, {key: "500"}, key) == 100


def test_fetcher_ids_are_kafkas() -> None:
    # Utils.abs(31 * topic.hashCode() + partition) % n as Java computes it (String.hashCode over UTF-16,
    # int overflow; "polygenelubricants".hashCode() is Integer.MIN_VALUE, which Utils.abs maps to 0)
    java = {("nf", 2): [0, 1, 0, 1, 0, 1], ("nf", 3): [2, 0, 1, 2, 0, 1], ("nf", 4): [0, 1, 2, 3, 0, 1],
            ("slow", 4): [3, 0, 1, 2, 3, 0], ("topic-with-a-long-name", 3): [1, 0, 2, 1, 0, 2],
            ("polygenelubricants", 4): [0, 3, 2, 1, 0, 3]}
    for (topic, n), ids in java.items():
        assert [fetcher_id(TopicPartition(topic, p), n) for p in range(6)] == ids, (topic, n)


def _replicas(tmp_path: Path) -> ReplicaManager:
    clock = ManualClock()
    logs = LogManager([tmp_path / "logs"], lambda _t: LogConfig(), clock, ManualScheduler())
    return ReplicaManager(1, logs, lambda _t: LogConfig(), clock)


def test_the_follower_leaves_out_throttled_partitions_not_in_sync_once_the_quota_is_exceeded(tmp_path: Path) -> None:
    config = BrokerConfig.load(None, {"zookeeper.connect": "127.0.0.1:1", "broker.id": "1"})
    clock = Clock()
    quota = ReplicationQuotaManager("FollowerReplication", 1, lambda t: ("0:1",) if t == "moving" else (),
                                    clock=clock)
    fetcher = ReplicaFetcher(2, 1, lambda _id: None, _replicas(tmp_path), config.cluster, quota=quota)
    moving, caught_up, other = FetchState(TopicPartition("moving", 0), 0), FetchState(TopicPartition("moving", 1), 0), \
        FetchState(TopicPartition("other", 0), 0)
    caught_up.lag = 0
    states = [moving, caught_up, other]
    assert fetcher._not_throttled(states) == states  # no bound
    quota.update_quota(1000)
    quota.record(5000)
    assert fetcher._not_throttled(states) == [caught_up, other]  # moving-1 is not in the list anyway
    moving.lag = 0  # in sync: never held back
    assert fetcher._not_throttled(states) == states
    moving.lag = 10
    clock.now += 10
    assert fetcher._not_throttled(states) == states  # the rate fell back under the bound


def test_a_resize_moves_every_partition_to_kafkas_fetcher_and_stops_idle_ones(tmp_path: Path) -> None:
    async def run() -> None:
        config = BrokerConfig.load(None, {"zookeeper.connect": "127.0.0.1:1", "broker.id": "1"})
        manager = ReplicaFetcherManager(1, lambda _id: None, _replicas(tmp_path), config.cluster)
        resized: list[int] = []
        manager.on_resize.append(lambda: resized.append(manager.num_fetchers))
        tps = [TopicPartition("nf", p) for p in range(6)]
        try:
            for tp in tps:
                manager.follow(tp, 2, 3)
            assert set(manager.fetchers) == {(2, 0)}
            manager.fetch_state(tps[3]).leader_high_watermark = 42  # type: ignore[union-attr]
            manager.resize(4)
            assert set(manager.fetchers) == {(2, 0), (2, 1), (2, 2), (2, 3)} and resized == [4]
            for tp, fid in zip(tps, [0, 1, 2, 3, 0, 1], strict=True):
                assert tp in manager.fetchers[2, fid].partitions
            state = manager.fetch_state(tps[3])
            assert state is not None and state.leader_high_watermark == 42 and state.leader_epoch == 3
            assert manager.fetchers[2, 3].name == "ReplicaFetcherThread-3-2"
            manager.resize(2)
            assert set(manager.fetchers) == {(2, 0), (2, 1)}  # fetchers 2 and 3 were left idle: stopped
            assert sorted(tp.partition for tp in manager.fetchers[2, 1].partitions) == [1, 3, 5]
            for tp in tps[1::2]:
                manager.unfollow(tp)
            await asyncio.sleep(0)  # idle fetchers stop once the state change is applied
            assert set(manager.fetchers) == {(2, 0)}
        finally:
            await manager.close()

    asyncio.run(run())
