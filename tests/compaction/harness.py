"""Helpers of the compaction tests: topics, full reads with a real consumer, condition waits."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess

TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "65536", "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "3000"}


def create(b: BrokerProcess, topic: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={**TOPIC_CONFIG, **config})])[topic].result(30)


def read_all(b: BrokerProcess, topic: str, partition: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from offset 0 to the high watermark: (offset, key, value)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        _, high = c.get_watermark_offsets(CkTopicPartition(topic, partition), timeout=10)
        c.assign([CkTopicPartition(topic, partition, 0)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        done = high == 0
        while not done and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error() is not None:
                    if m.error().code() == -191:  # _PARTITION_EOF
                        done = True
                    continue
                out.append((m.offset(), m.key(), m.value()))
        assert done, f"read stopped at {len(out)} records"
        return out
    finally:
        c.close()


def wait_until(what: str, predicate: Any, timeout_s: float = 60.0, interval_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def wait_until_equal(what: str, read: Any, expected: Any, timeout_s: float = 60.0) -> Any:
    """Poll ``read()`` until it equals ``expected``; on timeout, say how the last read differed."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if got == expected:
            return got
        if time.monotonic() > deadline:
            extra, missing = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}: {len(got)} records, "
                                 f"{len(extra)} unexpected (first {extra[:3]}), {len(missing)} missing "
                                 f"(first {missing[:3]})")
        time.sleep(0.3)
