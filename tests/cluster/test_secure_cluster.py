"""A cluster whose brokers talk to each other over SASL_SSL (``inter.broker.listener.name``).

Three brokers on a real ZooKeeper, each with a PLAINTEXT listener for clients and an INTERNAL listener
(SASL_SSL, PLAIN logins from the listener's JAAS config, the same CA-signed certificate) that replica
fetchers, transaction markers and the remote-log-metadata client use. Replication with ``acks=all``,
a leader failover and a transaction spanning partitions led by different brokers all go through it;
Metadata on the INTERNAL listener answers with INTERNAL addresses, and a broker whose inter-broker
password is wrong cannot join the ISR.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster.harness import running_cluster, wait_until
from tests.security.certs import Pki, make_pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("cluster-pki"))


def _secure_props(pki: Pki) -> dict[str, str]:
    return {
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "listener.name.internal.ssl.keystore.type": "PEM",
        "listener.name.internal.ssl.keystore.location": str(pki.server.pem),
        "listener.name.internal.ssl.truststore.type": "PEM",
        "listener.name.internal.ssl.truststore.location": str(pki.truststore_pem),
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "3",  # Kafka's 50 would make every broker open 150 replicas
    }


def test_replication_failover_and_transactions_over_sasl_ssl(zk_connect: str, tmp_path: Path, pki: Pki) -> None:
    with running_cluster(zk_connect, tmp_path, props=_secure_props(pki),
                         listeners={"INTERNAL": "SASL_SSL"}) as cluster:
        admin = cluster.admin()
        admin.create_topics([NewTopic("sec", 2, 3, config={"min.insync.replicas": "2"})])["sec"].result(30)
        cluster.wait_full_isr("sec", 60)  # followers fetched over SASL_SSL
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(200):
            producer.produce("sec", b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0

        txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:6]}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(200, 220):
            txn.produce("sec", b"%d" % i, partition=i % 2)
        txn.commit_transaction(30)  # markers to both partitions' leaders, over INTERNAL

        leader = cluster.leader_of("sec", 0)
        cluster.brokers[leader].kill()
        wait_until(lambda: cluster.leader_of("sec", 0) not in (-1, leader), 30, "a new leader of sec-0")

        # no commits: with one of 3 brokers dead, __consumer_offsets (replication factor 3, not created yet)
        # cannot be made, so a committing consumer's close() would wait out its 45 s session timeout, as on Kafka
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("sec", 0, 0), TopicPartition("sec", 1, 0)])
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(got) < 220 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.add(m.value())
        consumer.close()
        assert got == {b"%d" % i for i in range(220)}

        survivor = next(b for i, b in cluster.brokers.items() if i != leader)
        internal = AdminClient({"bootstrap.servers": survivor.address("INTERNAL"), "security.protocol": "SASL_SSL",
                                "ssl.ca.location": str(pki.ca_cert), "sasl.mechanisms": "PLAIN",
                                "sasl.username": "alice", "sasl.password": "alice-secret"})
        brokers = internal.list_topics(timeout=10).brokers
        assert {f"{b.host}:{b.port}" for b in brokers.values()} == {
            b.address("INTERNAL") for i, b in cluster.brokers.items() if i != leader}


def test_a_broker_with_the_wrong_inter_broker_password_stays_out_of_the_isr(
        zk_connect: str, tmp_path: Path, pki: Pki) -> None:
    props = _secure_props(pki)
    with running_cluster(zk_connect, tmp_path, size=2, props=props, listeners={"INTERNAL": "SASL_SSL"}) as cluster:
        cluster.admin().create_topics([NewTopic("pw", 1, 2)])["pw"].result(30)
        cluster.wait_full_isr("pw", 60)
        follower = next(i for i in cluster.brokers if i != cluster.leader_of("pw", 0))
        b = cluster.brokers[follower]
        b.stop()
        b.props["listener.name.internal.plain.sasl.jaas.config"] = JAAS.replace(
            'password="broker-secret" user_broker', 'password="wrong" user_broker')
        b.start()
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce("pw", b"x", partition=0)
        assert producer.flush(30) == 0
        wait_until(lambda: "login as 'broker' failed" in b.tail(), 30, "the follower's refused login in its log")
        isr = cluster.metadata("pw").partitions[0].isrs
        assert follower not in isr, isr


def test_acls_created_through_one_broker_apply_on_every_broker(zk_connect: str, tmp_path: Path, pki: Pki) -> None:
    """ACLs live in ZooKeeper in Kafka's layout (``/kafka-acl/Topic/<name>``); every broker mirrors them, so one
    created through broker 1 lets alice write to a partition led by broker 2 at once, and its deletion stops her."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    from kazoo.client import KazooClient

    props = {**_secure_props(pki), "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "super.users": "User:ANONYMOUS;User:broker"}
    with running_cluster(zk_connect, tmp_path, size=2, props=props, listeners={"INTERNAL": "SASL_SSL"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})  # PLAINTEXT: a super user
        admin.create_topics([NewTopic("acl-t", 2, replica_assignment=[[1], [2]])])["acl-t"].result(30)
        alice = {"bootstrap.servers": cluster.brokers[2].address("INTERNAL"), "security.protocol": "SASL_SSL",
                 "ssl.ca.location": str(pki.ca_cert), "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                 "sasl.password": "alice-secret"}

        def produce_both() -> list[KafkaError | None]:
            results: list[KafkaError | None] = []
            p = Producer({**alice, "acks": "all", "message.timeout.ms": 10_000, "retries": 0})
            for part in (0, 1):
                p.produce("acl-t", b"x", partition=part, on_delivery=lambda err, _m: results.append(err))
            p.flush(30)
            return results

        assert all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in produce_both())
        binding = AclBinding(ResourceType.TOPIC, "acl-t", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)
        admin.create_acls([binding])[binding].result(30)
        assert produce_both() == [None, None]  # both leaders allow her: broker 2 mirrored the ACL

        zk = KazooClient(hosts=zk_connect)
        zk.start(10)
        try:
            data, _ = zk.get("/kafka-acl/Topic/acl-t")
            assert b'"principal":"User:alice"' in data and b'"operation":"Write"' in data
        finally:
            zk.stop()
            zk.close()
        _quota_set_on_one_broker_applies_on_the_other(cluster, alice, zk_connect)
        gone = AclBindingFilter(ResourceType.TOPIC, "acl-t", ResourcePatternType.LITERAL, "User:alice", "*",
                                AclOperation.ANY, AclPermissionType.ANY)
        admin.delete_acls([gone])[gone].result(30)
        wait_until(lambda: all(e is not None for e in produce_both()), 30, "alice refused again on both brokers")


def _quota_set_on_one_broker_applies_on_the_other(cluster: Any, alice: dict[str, Any], zk_connect: str) -> None:
    """Client quotas are ZooKeeper entity configs (``/config/users/alice/clients/<default>``, Kafka's layout):
    set through broker 1, broker 2 describes and enforces them."""
    from kazoo.client import KazooClient

    from strata.client.wire import KafkaWire

    entity = [{"entity_type": "user", "entity_name": "alice"}, {"entity_type": "client-id", "entity_name": None}]
    with KafkaWire(cluster.brokers[1].bootstrap) as w:
        r = w.call(49, 1, entries=[{"entity": entity, "ops": [{"key": "producer_byte_rate", "value": 4096.0,
                                                               "remove": False}]}], validate_only=False)
    assert r.entries[0].error_code == 0, r.entries[0].error_message

    def on_broker_2() -> list[Any]:
        with KafkaWire(cluster.brokers[2].bootstrap) as w:
            d = w.call(48, 1, components=[{"entity_type": "user", "match_type": 0, "match": "alice"}], strict=False)
        return [([(e.entity_type, e.entity_name) for e in x.entity], {v.key: v.value for v in x.values})
                for x in d.entries]

    wait_until(lambda: on_broker_2() == [([("user", "alice"), ("client-id", None)],
                                          {"producer_byte_rate": 4096.0})], 10, "broker 2 mirrors the quota")
    zk = KazooClient(hosts=zk_connect)
    zk.start(10)
    try:
        data, _ = zk.get("/config/users/alice/clients/<default>")
        assert b'"producer_byte_rate":"4096"' in data
    finally:
        zk.stop()
        zk.close()
    throttles: list[float] = []
    p = Producer({**alice, "acks": "all", "linger.ms": 5, "batch.size": 8192,
                  "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    for _ in range(56):  # 56 KiB: past the 10 windows' burst (40 KiB) a 4 KiB/s quota allows
        p.produce("acl-t", b"q" * 1024, partition=1)  # led by broker 2
    assert p.flush(30) == 0
    wait_until(lambda: p.poll(0.1) >= 0 and any(t > 0 for t in throttles), 20, "broker 2 throttles alice")
