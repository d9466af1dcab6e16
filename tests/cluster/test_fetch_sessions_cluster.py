"""Followers keep incremental fetch sessions (KIP-227) with their leaders, and replicate as before when the
leader has no room for one (``max.incremental.fetch.session.cache.slots``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import running_cluster, wait_until
from tests.cluster.test_cluster_metrics import scrape

TOPIC, PARTITIONS = "fs", 9
SESSIONS = "kafka_server_FetchSessionCache_NumIncrementalFetchSessions"
CACHED = "kafka_server_FetchSessionCache_NumIncrementalFetchPartitionsCached"


@pytest.mark.parametrize("slots", [1000, 1])
def test_followers_fetch_through_sessions_and_without_room_sessionless(zk_connect: str, tmp_path: Path,
                                                                         slots: int) -> None:
    props = {"metrics.port": "0", "max.incremental.fetch.session.cache.slots": str(slots)}
    with running_cluster(zk_connect, tmp_path, 3, props) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2})
        sent = {p: [b"%d-%d" % (p, i) for i in range(50)] for p in range(PARTITIONS)}
        for i in range(50):
            for p in range(PARTITIONS):
                if i < 10 or p % 3 == 0:  # then only a third of the partitions moves: the rest idle in the sessions
                    producer.produce(TOPIC, sent[p][i], partition=p)
        assert producer.flush(30) == 0
        for p in range(PARTITIONS):
            sent[p] = sent[p][:50 if p % 3 == 0 else 10]

        led = {b: sum(1 for p in range(PARTITIONS) if cluster.leader_of(TOPIC, p) == b) for b in cluster.brokers}
        # each leader: a session per follower (two), or the one it has room for; each holds what that follower
        # follows from it (the topic's partitions it leads, and any internal ones)
        expected_sessions = {b: (2 if slots > 1 else 1) if led[b] else 0 for b in cluster.brokers}
        wait_until(lambda: {b: scrape(cluster.brokers[b]).get(SESSIONS) for b in cluster.brokers}
                   == expected_sessions, 30, "the followers' sessions")
        for b in cluster.brokers:
            assert scrape(cluster.brokers[b]).get(CACHED, 0) >= expected_sessions[b] * led[b]

        # every replica has every record: read each partition from its leader, then kill the leaders one at a
        # time so the next reads come from the former followers
        def read_all() -> dict[int, list[bytes]]:
            consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "r", "enable.auto.commit": False})
            try:
                consumer.assign([CkTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
                got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

                def more() -> bool:
                    for m in consumer.consume(500, 0.5):
                        if not m.error():
                            got[m.partition()].append(m.value())
                    return got == sent

                wait_until(more, 30, "every record")
                return got
            finally:
                consumer.close()

        assert read_all() == sent
        first = cluster.leader_of(TOPIC, 0)
        cluster.brokers[first].kill()
        wait_until(lambda: all(cluster.leader_of(TOPIC, p) != first for p in range(PARTITIONS)), 30, "new leaders")
        assert read_all() == sent
