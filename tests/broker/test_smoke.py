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


def test_a_newer_leader_epoch_than_the_brokers_is_refused_by_fetch_list_offsets_and_epoch_lookup(
        broker: BrokerProcess) -> None:
    """current_leader_epoch fencing, shared by Fetch, ListOffsets and OffsetForLeaderEpoch."""
    from tests.broker.kafka_wire import WireClient, ensure_topic

    with WireClient(broker.bootstrap) as wire:
        ensure_topic(wire, "epochs")
        for epoch, code in ((-1, 0), (0, 0), (1, 75)):  # 75 UNKNOWN_LEADER_EPOCH
            fetched = wire.call(1, 12, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                                session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[],
                                topics=[{"topic": "epochs", "partitions": [
                                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                     "current_leader_epoch": epoch, "log_start_offset": -1,
                                     "last_fetched_epoch": -1}]}])
            listed = wire.call(2, 7, replica_id=-1, isolation_level=0, topics=[{"name": "epochs", "partitions": [
                {"partition_index": 0, "timestamp": -1, "current_leader_epoch": epoch}]}])
            ended = wire.call(23, 4, replica_id=-1, topics=[{"topic": "epochs", "partitions": [
                {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": 0}]}])
            assert int(fetched.responses[0].partitions[0].error_code) == code
            assert int(listed.topics[0].partitions[0].error_code) == code
            assert int(ended.topics[0].partitions[0].error_code) == code
