"""Cluster administration through any broker, seen through every other one; min.insync.replicas;
controlled shutdown; preferred election and reassignment. Real ZooKeeper, broker processes, clients."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import running_cluster, wait_until

CREATE_TOPICS, DELETE_TOPICS = 19, 20


def partition_dirs(cluster, topic: str) -> dict[int, list[str]]:  # noqa: ANN001
    return {bid: sorted(d.name for d in (b.data_dir / "logs").glob(f"{topic}-*") if not d.name.endswith("-delete"))
            for bid, b in cluster.brokers.items()}


def produce_one(bootstrap: str, topic: str, acks: str, partition: int = 0) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": 8000, "retries": 0,
                  "enable.idempotence": False})
    p.produce(topic, key=b"k", value=b"v", partition=partition, on_delivery=lambda err, _m: errors.append(err))
    p.flush(20)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def test_topic_administration_through_any_broker(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        b1, b2, b3 = (cluster.brokers[i] for i in (1, 2, 3))
        # create through broker 1 with a raw request (no client routes it elsewhere)
        with WireClient(b1.bootstrap) as w:
            r = w.call(CREATE_TOPICS, 5, topics=[{"name": "adm", "num_partitions": 6, "replication_factor": 2,
                                                 "assignments": [], "configs": []}], timeout=30_000,
                       validate_only=False)
        assert r.topics[0].error_code == 0, r.topics[0].error_message
        assert (r.topics[0].num_partitions, r.topics[0].replication_factor) == (6, 2)
        # seen through broker 3: leaders spread over all brokers, two replicas each
        meta = AdminClient({"bootstrap.servers": b3.bootstrap}).list_topics("adm", timeout=10).topics["adm"]
        assert sorted({p.leader for p in meta.partitions.values()}) == [1, 2, 3]
        assert all(len(p.replicas) == 2 for p in meta.partitions.values())
        wait_until(lambda: sum(len(v) for v in partition_dirs(cluster, "adm").values()) == 12, 20,
                   "12 replica directories")

        # configs altered through broker 2 apply on every broker
        a2 = AdminClient({"bootstrap.servers": b2.bootstrap})
        res = ConfigResource(ConfigResource.Type.TOPIC, "adm", incremental_configs=[
            ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
        a2.incremental_alter_configs([res])[res].result(20)
        for b in (b1, b3):
            other = AdminClient({"bootstrap.servers": b.bootstrap})
            got = other.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "adm")])
            entries = next(iter(got.values())).result(20)
            assert entries["retention.ms"].value == "123456"

        # partitions added through broker 3, seen through broker 1
        a3 = AdminClient({"bootstrap.servers": b3.bootstrap})
        a3.create_partitions([NewPartitions("adm", 8)])["adm"].result(30)
        wait_until(lambda: len(AdminClient({"bootstrap.servers": b1.bootstrap}).list_topics(
            "adm", timeout=10).topics["adm"].partitions) == 8, 20, "8 partitions seen by broker 1")

        # delete while broker 3 is down: the deletion waits for it, and completes when it returns
        b3.kill()
        with WireClient(b2.bootstrap) as w:
            r = w.call(DELETE_TOPICS, 4, topic_names=["adm"], timeout=2000)
        assert r.responses[0].error_code == 7  # REQUEST_TIMED_OUT: in progress, a replica is down
        wait_until(lambda: not partition_dirs(cluster, "adm")[1] and not partition_dirs(cluster, "adm")[2], 20,
                   "replicas on the live brokers deleted")
        assert partition_dirs(cluster, "adm")[3]  # the dead broker still has its directories
        b3.start()
        wait_until(lambda: not any(partition_dirs(cluster, "adm").values()), 30, "every replica deleted")
        wait_until(lambda: "adm" not in cluster.admin().list_topics(timeout=10).topics, 30, "the topic gone")


def test_min_insync_replicas_refuses_acks_all_but_not_acks_1(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        cluster.admin().create_topics([NewTopic("mi", 1, 3, config={"min.insync.replicas": "2"})])["mi"].result(30)
        cluster.wait_full_isr("mi")
        assert produce_one(cluster.bootstrap, "mi", "all") is None
        leader = cluster.leader_of("mi", 0)
        for bid in cluster.brokers:
            if bid != leader:
                cluster.brokers[bid].kill()
        # the ISR shrinks to the leader after replica.lag.time.max.ms (3 s)
        wait_until(lambda: cluster.metadata("mi").partitions[0].isrs == [leader], 30, "the ISR shrunk to the leader")
        err = produce_one(cluster.brokers[leader].bootstrap, "mi", "all")
        assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
        assert produce_one(cluster.brokers[leader].bootstrap, "mi", "1") is None


def test_controlled_shutdown_moves_leadership_before_exit(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        cluster.admin().create_topics([NewTopic("cs", 6, 3)])["cs"].result(30)
        cluster.wait_full_isr("cs")
        b2 = cluster.brokers[2]
        assert any(p.leader == 2 for p in cluster.metadata("cs").partitions.values())
        started = time.monotonic()
        assert b2.stop() == 0
        assert time.monotonic() - started < 25
        assert "controlled shutdown: leadership moved to other replicas" in b2.tail(20_000)
        # right after the exit every partition already has a live leader: no offline window
        meta = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap}).list_topics("cs", timeout=10)
        assert all(p.leader in (1, 3) for p in meta.topics["cs"].partitions.values())


def test_preferred_election_and_reassignment(zk_connect: str, tmp_path: Path) -> None:
    from confluent_kafka import ElectionType, TopicPartition

    with running_cluster(zk_connect, tmp_path) as cluster:
        admin = cluster.admin()
        admin.create_topics([NewTopic("pe", 2, replica_assignment=[[1, 2], [2, 3]])])["pe"].result(30)
        cluster.wait_full_isr("pe")
        assert cluster.leader_of("pe", 0) == 1
        cluster.brokers[1].kill()
        wait_until(lambda: cluster.leader_of("pe", 0) == 2, 30, "broker 2 leading pe-0")
        cluster.brokers[1].start()
        cluster.wait_full_isr("pe")
        assert cluster.leader_of("pe", 0) == 2  # auto rebalance is off in the tests (hour-long check)
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("pe", 0)]).result(30)
        assert result[TopicPartition("pe", 0)] is None
        wait_until(lambda: cluster.leader_of("pe", 0) == 1, 20, "the preferred leader back")

        # move pe-1 from [2, 3] to [1, 3]: the new replica joins, leadership moves, broker 2 lets go
        with WireClient(cluster.brokers[1].bootstrap) as w:
            meta = w.call(3, 12, topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
        controller = meta.controller_id
        with WireClient(cluster.brokers[controller].bootstrap) as w:
            r = w.call(45, 0, timeout=30_000, topics=[{"name": "pe", "partitions": [
                {"partition_index": 1, "replicas": [1, 3]}]}])
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
        wait_until(lambda: sorted(cluster.metadata("pe").partitions[1].replicas) == [1, 3], 30,
                   "the reassignment complete")
        cluster.wait_full_isr("pe")
        assert cluster.leader_of("pe", 1) in (1, 3)
        wait_until(lambda: not partition_dirs(cluster, "pe")[2] or partition_dirs(cluster, "pe")[2] == ["pe-0"], 20,
                   "broker 2's replica of pe-1 deleted")
        with WireClient(cluster.brokers[1].bootstrap) as w:
            assert w.call(46, 0, timeout=30_000, topics=None).topics == ()
