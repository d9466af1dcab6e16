"""Committed group offsets and group metadata survive a broker restart, clean (SIGTERM) or kill -9.

The coordinator rebuilds its state by replaying ``__consumer_offsets`` at startup, so after either
kind of restart a consumer in the same group must resume exactly at the committed offset, and a
member that was in the group before the restart must be able to carry on (its generation was
persisted with the assignment).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess

WAIT_S = 30.0


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3, "client.id": "restart",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500, "partition.assignment.strategy": "roundrobin"})


def consume(c: Consumer, count: int) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset()))
    assert len(got) == count, f"consumed {len(got)} of {count} within {WAIT_S}s"
    return got


def committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "kill-9"])
def test_committed_offsets_survive_restart(tmp_path: Path, hard: bool) -> None:
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        admin.create_topics([NewTopic("durable", 2, 1)])["durable"].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        for i in range(20):
            producer.produce("durable", value=b"%d" % i, partition=i % 2)
        assert producer.flush(15) == 0

        everything = {(p, o) for p in (0, 1) for o in range(10)}

        # Round 1: consume a part, commit it, then leave (the group is Empty when the broker goes).
        c = consumer(broker.bootstrap, "g")
        c.subscribe(["durable"])
        first = consume(c, 6)
        expected = {p: max(o for q, o in first if q == p) + 1 for p in {q for q, _ in first}}
        c.commit(offsets=[TopicPartition("durable", p, o) for p, o in expected.items()], asynchronous=False)
        c.close()

        broker.restart(hard=hard)
        assert committed(broker.bootstrap, "g") == expected
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        groups = admin.list_consumer_groups().result(15)
        assert [(g.group_id, g.state.name) for g in groups.valid] == [("g", "EMPTY")]

        # Round 2: a new member resumes exactly where the commit left off: no gap, nothing twice.
        c = consumer(broker.bootstrap, "g")
        c.subscribe(["durable"])
        second = consume(c, len(everything) - len(first))
        assert sorted(second) == sorted(everything - set(first))
        c.commit(offsets=[TopicPartition("durable", p, 10) for p in (0, 1)], asynchronous=False)
        if not hard:
            c.close()
            return
        # Round 3 (kill -9): a member alive across the restart carries on, because its generation
        # and assignment were persisted with the group; its next commits are accepted as before.
        broker.restart(hard=True)
        for i in range(4):
            producer.produce("durable", value=b"after-%d" % i, partition=i % 2)
        assert producer.flush(15) == 0
        third = consume(c, 4)
        assert sorted(third) == [(0, 10), (0, 11), (1, 10), (1, 11)]
        c.commit(offsets=[TopicPartition("durable", p, 12) for p in (0, 1)], asynchronous=False)
        assert committed(broker.bootstrap, "g") == {0: 12, 1: 12}
        c.close()
    finally:
        broker.stop()


def test_group_tombstones_survive_restart(tmp_path: Path) -> None:
    """Deleted groups and offsets stay deleted: the tombstones are replayed too."""
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        admin.create_topics([NewTopic("tomb", 1, 1)])["tomb"].result(15)
        for group in ("keep", "drop"):
            c = consumer(broker.bootstrap, group)
            c.commit(offsets=[TopicPartition("tomb", 0, 5)], asynchronous=False)
            c.close()
        admin.delete_consumer_groups(["drop"])["drop"].result(15)
        broker.restart(hard=True)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        assert [g.group_id for g in admin.list_consumer_groups().result(15).valid] == ["keep"]
        assert committed(broker.bootstrap, "keep") == {0: 5}
        assert committed(broker.bootstrap, "drop") == {}
    finally:
        broker.stop()
