"""A topic deletion interrupted by a crash (registry written, directories not yet renamed) leaves
directories behind; the next start deletes them instead of serving or inheriting them."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from tests.broker.harness import BrokerProcess


def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    producer.produce(topic, value=value)
    assert producer.flush(15) == 0


def test_directories_of_a_topic_missing_from_the_registry_are_deleted(tmp_path):
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        _produce(broker.bootstrap, "doomed", b"old data")
        broker.kill()
        registry = broker.data_dir / "logs" / "strata-topics.json"
        data = json.loads(registry.read_text())
        data["topics"] = [t for t in data["topics"] if t["name"] != "doomed"]
        registry.write_text(json.dumps(data))  # what a crash right after the registry write leaves
        broker.start()
        assert not (broker.data_dir / "logs" / "doomed-0").exists()
        _produce(broker.bootstrap, "doomed", b"new data")  # auto-created again: must start empty
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "o", "log_level": 3})
        consumer.assign([TopicPartition("doomed", 0, 0)])
        got = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        consumer.close()
        assert got == [(0, b"new data")]
    finally:
        broker.stop()
