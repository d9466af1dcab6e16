"""ListOffsets from the "debugging consumer" (``replica_id`` -2, Kafka's ``DEBUGGING_REPLICA_ID``) in a
cluster: any replica answers it from its own log (Kafka: ``fetchOnlyFromLeader = replicaId !=
DEBUGGING_REPLICA_ID``), while an ordinary consumer (-1) is answered by the leader only."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import running_cluster, wait_until

LIST_OFFSETS = 2
NOT_LEADER_OR_FOLLOWER = 6


def ask(bootstrap: str, timestamp: int, replica_id: int) -> Any:
    with WireClient(bootstrap) as client:
        resp = client.call(LIST_OFFSETS, 9, replica_id=replica_id, isolation_level=0, topics=[
            {"name": "r", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                          "timestamp": timestamp}]}])
    return resp.topics[0].partitions[0]


def offsets(bootstrap: str, replica_id: int) -> list[int]:
    """earliest (-2), earliest local (-4), latest (-1) and max timestamp (-3) offsets."""
    out = []
    for spec in (-2, -4, -1, -3):
        p = ask(bootstrap, spec, replica_id)
        assert int(p.error_code) == 0, p
        out.append(p.offset)
    return out


def test_the_debugging_consumer_is_answered_by_every_replica(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, 3) as cluster:
        cluster.admin().create_topics([NewTopic("r", 1, replica_assignment=[[1, 2]])])["r"].result(30)
        cluster.wait_full_isr("r")
        leader = cluster.leader_of("r", 0)
        follower = 3 - leader
        now = int(time.time() * 1000)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
        for i, ts in enumerate((now - 500, now - 100, now - 400, now - 300, now - 200)):
            producer.produce("r", value=b"v%d" % i, partition=0, timestamp=ts)
        assert producer.flush(30) == 0  # acks=all: the follower's log holds all five

        follower_address = cluster.brokers[follower].bootstrap
        assert int(ask(follower_address, -1, -1).error_code) == NOT_LEADER_OR_FOLLOWER
        # its own log (latest: its log end offset); waited for only in case the ISR shrank meanwhile
        wait_until(lambda: offsets(follower_address, -2) == [0, 0, 5, 1], 15, "the follower's offsets")
        assert offsets(cluster.brokers[leader].bootstrap, -2) == [0, 0, 5, 1]
        assert offsets(cluster.brokers[leader].bootstrap, -1) == [0, 0, 5, 1]
        # a broker with no replica of the partition
        assert int(ask(cluster.brokers[3].bootstrap, -1, -2).error_code) == NOT_LEADER_OR_FOLLOWER
