"""DescribeProducers (API 61, KIP-664): each partition's producer state, over the wire and through an admin client.

Kafka's answers (``KafkaApis.handleDescribeProducersRequest``, ``ReplicaManager.activeProducerState``):
every producer of the partition's producer state map with its epoch, last sequence and timestamp,
coordinator epoch and the first offset of its open transaction (-1 when none); a topic the cluster does
not know is UNKNOWN_TOPIC_OR_PARTITION, an illegal name INVALID_TOPIC_EXCEPTION; a replica answers from its
own log, leader or follower, and a broker without a replica of the partition says NOT_LEADER_OR_FOLLOWER.

confluent-kafka's AdminClient has no describe_producers (2.16); kafka-python's KafkaAdminClient does
(``describe_producers``, with ``broker_id`` to ask a chosen replica, as Java's ``DescribeProducersOptions``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic
from tests.cluster.harness import running_cluster, wait_until

from strata.errors import ErrorCode

DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS = 61, 65
TOPIC = "dp"


def describe(c: WireClient, topic: str, partitions: list[int]) -> list[Any]:
    r = c.call(DESCRIBE_PRODUCERS, 0, topics=[{"name": topic, "partition_indexes": partitions}])
    (t,) = r.topics
    assert t.name == topic
    return list(t.partitions)


def producers(c: WireClient, topic: str, partition: int) -> dict[int, Any]:
    (p,) = describe(c, topic, [partition])
    assert int(p.error_code) == 0, p
    return {int(s.producer_id): s for s in p.active_producers}


def txn_producer(c: WireClient, transactional_id: str) -> tuple[int, int]:
    r = c.call(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[transactional_id])
    (s,) = r.transaction_states
    assert int(s.error_code) == 0, s
    return int(s.producer_id), int(s.producer_epoch)


@pytest.fixture
def dp_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", {"transaction.state.log.num.partitions": "3",
                                            "num.partitions": "2"}).start()
    try:
        yield b
    finally:
        b.stop()


def test_open_transaction_and_idempotent_producer(dp_broker: BrokerProcess) -> None:
    with WireClient(dp_broker.bootstrap) as c:
        ensure_topic(c, TOPIC)
        assert producers(c, TOPIC, 0) == {}  # no producer wrote yet

        idem = Producer({"bootstrap.servers": dp_broker.bootstrap, "enable.idempotence": True})
        for i in range(3):
            idem.produce(TOPIC, b"idem-%d" % i, partition=0)
        assert idem.flush(15) == 0

        before_ms = int(time.time() * 1000)
        txn = Producer({"bootstrap.servers": dp_broker.bootstrap, "transactional.id": "dp-txn",
                        "linger.ms": 0})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(2):
            txn.produce(TOPIC, b"txn-%d" % i, partition=0)
        assert txn.flush(15) == 0
        pid, epoch = txn_producer(c, "dp-txn")

        states = producers(c, TOPIC, 0)
        assert len(states) == 2 and pid in states
        s = states[pid]
        assert (int(s.producer_epoch), int(s.current_txn_start_offset)) == (epoch, 3)  # after the 3 idempotent
        assert int(s.last_sequence) == 1  # two records, sequences 0 and 1
        assert before_ms - 5000 <= int(s.last_timestamp) <= int(time.time() * 1000) + 5000
        assert int(s.coordinator_epoch) == -1  # no marker yet
        (other,) = (v for k, v in states.items() if k != pid)
        assert int(other.current_txn_start_offset) == -1 and int(other.last_sequence) == 2
        assert producers(c, TOPIC, 1) == {}

        txn.commit_transaction(30)

        def closed() -> bool:
            s = producers(c, TOPIC, 0)[pid]
            return int(s.current_txn_start_offset) == -1 and int(s.coordinator_epoch) >= 0
        wait_until(closed, 15, "the COMMIT marker to close the producer's transaction")
        assert len(producers(c, TOPIC, 0)) == 2  # the producer stays in the map after its transaction


def test_errors(dp_broker: BrokerProcess) -> None:
    with WireClient(dp_broker.bootstrap) as c:
        ensure_topic(c, TOPIC)
        r = c.call(DESCRIBE_PRODUCERS, 0, topics=[
            {"name": "no-such-topic", "partition_indexes": [0, 1]},
            {"name": "bad/name", "partition_indexes": [0]},
            {"name": TOPIC, "partition_indexes": [1, 7, 0]},
            {"name": TOPIC, "partition_indexes": []}])
        by = [(t.name, [(int(p.partition_index), int(p.error_code)) for p in t.partitions]) for t in r.topics]
        assert by == [
            ("no-such-topic", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
            ("bad/name", [(0, ErrorCode.INVALID_TOPIC_EXCEPTION)]),
            (TOPIC, [(1, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (0, 0)]),
            (TOPIC, [])]
        assert r.topics[0].partitions[0].error_message  # the topic-level error's message, as Kafka's ApiError


def test_kafka_python_admin_describe_producers(dp_broker: BrokerProcess) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    with WireClient(dp_broker.bootstrap) as c:
        ensure_topic(c, TOPIC)
    txn = Producer({"bootstrap.servers": dp_broker.bootstrap, "transactional.id": "dp-kp"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(TOPIC, b"open", partition=1)
    assert txn.flush(15) == 0
    admin = KafkaAdminClient(bootstrap_servers=dp_broker.bootstrap)
    try:
        got = admin.describe_producers([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        assert got[TopicPartition(TOPIC, 0)].active_producers == []
        (state,) = got[TopicPartition(TOPIC, 1)].active_producers
        assert state.current_transaction_start_offset == 0 and state.producer_epoch == 0
        with WireClient(dp_broker.bootstrap) as c:
            assert state.producer_id == txn_producer(c, "dp-kp")[0]
    finally:
        admin.close()
    txn.abort_transaction(30)


CLUSTER_PROPS = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3",
                 "offsets.topic.num.partitions": "3"}


def test_cluster_followers_answer_and_non_replicas_say_not_leader(zk_connect: str, tmp_path: Path) -> None:
    """A follower answers from its own replica (what the admin client's ``brokerId`` option is for), with the
    producer state it replicated; a broker that holds no replica of the partition answers NOT_LEADER_OR_FOLLOWER."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NotLeaderForPartitionError

    with running_cluster(zk_connect, tmp_path, 3, CLUSTER_PROPS) as cluster:
        cluster.admin().create_topics([NewTopic("dp3", 1, 3), NewTopic("dp1", 1, 1)])["dp3"].result(30)
        cluster.wait_full_isr("dp3")
        cluster.wait_full_isr("dp1")
        txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "dp-cluster"})
        txn.init_transactions(60)
        txn.begin_transaction()
        txn.produce("dp3", b"open", partition=0)
        txn.produce("dp1", b"open", partition=0)
        assert txn.flush(15) == 0
        leader3, leader1 = cluster.leader_of("dp3", 0), cluster.leader_of("dp1", 0)
        follower = next(b for b in cluster.brokers if b != leader3)
        stranger = next(b for b in cluster.brokers if b != leader1)

        def ask(broker_id: int, topic: str) -> Any:
            with WireClient(cluster.brokers[broker_id].bootstrap) as c:
                (p,) = describe(c, topic, [0])
                return p

        lead = ask(leader3, "dp3")
        assert int(lead.error_code) == 0 and len(lead.active_producers) == 1
        state = lead.active_producers[0]
        assert int(state.current_txn_start_offset) == 0

        def follower_has_it() -> bool:
            p = ask(follower, "dp3")
            return int(p.error_code) == 0 and [(s.producer_id, int(s.current_txn_start_offset))
                                               for s in p.active_producers] == [(state.producer_id, 0)]
        wait_until(follower_has_it, 15, f"follower {follower} to show the replicated producer state")

        p = ask(stranger, "dp1")
        assert int(p.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER and not p.active_producers
        assert int(ask(leader1, "dp1").error_code) == 0

        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            tp3, tp1 = TopicPartition("dp3", 0), TopicPartition("dp1", 0)
            by_leader = admin.describe_producers([tp3, tp1])
            assert [s.producer_id for s in by_leader[tp3].active_producers] == [state.producer_id]
            assert [s.current_transaction_start_offset for s in by_leader[tp1].active_producers] == [0]
            by_follower = admin.describe_producers([tp3], broker_id=follower)
            assert [s.producer_id for s in by_follower[tp3].active_producers] == [state.producer_id]
            with pytest.raises(NotLeaderForPartitionError):
                admin.describe_producers([tp1], broker_id=stranger)
        finally:
            admin.close()

        # `strata transactions` joins each leader's producers with the coordinator's view across the brokers
        with WireClient(cluster.bootstrap.split(",")[0]) as c:
            coordinator = int(c.call(10, 3, key="dp-cluster", key_type=1).node_id)
        out = subprocess.run([sys.executable, "-m", "strata", "transactions", "--bootstrap", cluster.bootstrap,
                              "--open-only", "--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert sorted((p["topic"], p["leader"]) for p in doc["partitions"]) == [("dp1", leader1), ("dp3", leader3)]
        for p in doc["partitions"]:
            (t,) = p["open_transactions"]
            assert (t["producer_id"], t["transactional_id"], t["coordinator"]) == (
                state.producer_id, "dp-cluster", coordinator)
            assert p["last_stable_offset"] == 0 and p["high_watermark"] == 1
        (listed,) = doc["transactions"]
        assert (listed["transactional_id"], listed["state"], listed["coordinator"]) == ("dp-cluster", "Ongoing",
                                                                                      coordinator)
        txn.commit_transaction(60)
