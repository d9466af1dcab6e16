"""The broker starts, serves a real client, and stops cleanly on SIGTERM."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from tests.broker.harness import BrokerProcess


def test_produce_and_consume_roundtrip_with_confluent_kafka(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    for i in range(100):
        producer.produce("smoke", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)])
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "smoke", "log_level": 3,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("smoke", 0, 0)])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 100 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.key(), m.value(), m.headers()))
    consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)]) for i in range(100)]


def test_sigterm_writes_the_clean_shutdown_marker(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    producer.produce("marker", value=b"x")
    assert producer.flush(15) == 0
    assert broker.stop() == 0
    assert (broker.data_dir / "logs" / ".kafka_cleanshutdown").exists()
    assert "strata broker stopped" in broker.tail()


def test_admin_client_list_topics(broker: BrokerProcess) -> None:
    """librdkafka's AdminClient sends Metadata v13 with trailing bytes; Kafka (and we) ignore them."""
    from confluent_kafka.admin import AdminClient

    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    producer.produce("listed", value=b"x")
    assert producer.flush(15) == 0
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3}).list_topics(timeout=10)
    assert "listed" in metadata.topics
    assert [b.port for b in metadata.brokers.values()] == [broker.port]
