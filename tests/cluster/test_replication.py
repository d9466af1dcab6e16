"""Replication across real broker processes on a real ZooKeeper, with real clients."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster.harness import running_cluster, wait_until


def produce(bootstrap: str, topic: str, n: int, start: int = 0, **extra: object) -> dict[int, list[tuple[int, bytes]]]:
    """acks=all idempotent; returns the acknowledged (offset, value) per partition."""
    acked: dict[int, list[tuple[int, bytes]]] = {}
    errors: list[object] = []

    def done(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  **extra})
    for i in range(start, start + n):
        p.produce(topic, value=b"v%d" % i, key=b"k%d" % i, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    return acked


def consume_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    eof: set[int] = set()
    try:
        def step() -> bool:
            for m in c.consume(500, timeout=1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                    continue
                got[m.partition()].append((m.offset(), m.value()))
            return len(eof) == partitions
        wait_until(step, 60, "every partition read to its end", interval_s=0)
    finally:
        c.close()
    return got


def test_rf3_topic_replicates_and_survives_its_leaders(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        admin = cluster.admin()
        admin.create_topics([NewTopic("r3", 3, 3, config={"min.insync.replicas": "2"})])["r3"].result(30)
        cluster.wait_full_isr("r3")
        meta = cluster.metadata("r3")
        assert sorted(p.leader for p in meta.partitions.values()) == [1, 2, 3]  # leaders spread
        acked = produce(cluster.bootstrap, "r3", 3000)
        assert sum(len(v) for v in acked.values()) == 3000

        # every replica has every record: kill the leaders one after another
        victim = cluster.leader_of("r3", 0)
        cluster.brokers[victim].kill()
        wait_until(lambda: cluster.leader_of("r3", 0) not in (-1, victim), 30, "a new leader for r3-0")
        acked2 = produce(cluster.bootstrap, "r3", 1000, start=3000)
        got = consume_all(cluster.bootstrap, "r3", 3)
        for p in range(3):
            assert got[p] == sorted(acked.get(p, []) + acked2.get(p, [])), p
        cluster.brokers[victim].start()
        cluster.wait_full_isr("r3")


def test_group_offsets_survive_the_coordinator(zk_connect: str, tmp_path: Path) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    with running_cluster(zk_connect, tmp_path) as cluster:
        cluster.admin().create_topics([NewTopic("g", 2, 3, config={"min.insync.replicas": "2"})])["g"].result(30)
        cluster.wait_full_isr("g")
        acked = produce(cluster.bootstrap, "g", 400)
        conf = {"bootstrap.servers": cluster.bootstrap, "group.id": "survivor", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "session.timeout.ms": 6000}
        c = Consumer(conf)
        c.subscribe(["g"])
        seen: list[tuple[int, int]] = []

        def read(consumer: Consumer, want: int) -> bool:
            for m in consumer.consume(50, timeout=1.0):
                if not m.error():
                    seen.append((m.partition(), m.offset()))
            return len(seen) >= want

        wait_until(lambda: read(c, 200), 60, "200 records read")
        c.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition("g", 0), TopicPartition("g", 1)],
                                                                   timeout=10) if tp.offset >= 0}
        assert sum(committed.values()) >= 200
        c.close()
        group = cluster.admin().describe_consumer_groups(["survivor"])["survivor"].result(10)
        coordinator = group.coordinator.id
        # Killing the coordinator while its __consumer_offsets partition's followers are out of the ISR (they
        # can fall behind on a loaded machine: replica.lag.time.max.ms is 3 s here) would rightly leave the
        # partition offline - no clean leader. The scenario is a coordinator whose ISR is whole.
        cluster.wait_full_isr("__consumer_offsets", 60)
        cluster.brokers[coordinator].kill()

        def offsets_back() -> bool:
            # A new admin client per attempt, as `kafka-consumer-groups --describe` would be: a long-lived
            # librdkafka client keeps the dead coordinator in its coordinator cache for metadata.max.age.ms and
            # re-asks FindCoordinator only when that broker's connection state changes, which its growing
            # reconnect backoff can put past the request timeout.
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            got = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions("survivor")])["survivor"].result(10)
            return {tp.partition: tp.offset for tp in got.topic_partitions} == committed
        wait_until(offsets_back, 30, "the committed offsets from the new coordinator")

        # a new member resumes exactly after the commit: nothing committed is read again
        before = len(seen)
        c2 = Consumer(conf)
        c2.subscribe(["g"])
        wait_until(lambda: read(c2, 400), 60, "the rest of the records")
        c2.close()
        again = seen[before:]
        assert all(off >= committed.get(p, 0) for p, off in again)
        assert len(set(seen)) == sum(len(v) for v in acked.values()) == 400
