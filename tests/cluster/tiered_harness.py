"""Tiered storage in a cluster: the brokers' shared remote store and what to observe on disk.

The store is one local directory shared by every broker (``remote.log.storage.manager.class.name=local``),
as a bucket is shared by a real cluster. Short task intervals and small segments make tiering happen in
seconds. ``__remote_log_metadata`` is replicated (factor 2 by default: every test cluster has >= 2 brokers).
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from tests.cluster.harness import Cluster

SEGMENT_BYTES = 64 * 1024
LOCAL_RETENTION_BYTES = 2 * SEGMENT_BYTES
RECORD_BYTES = 1000


def tiered_props(store: Path, *, metadata_rf: int = 2) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "local",
        "rsm.config.dir": str(store),
        "remote.log.manager.task.interval.ms": "200",
        "remote.log.manager.task.retry.backoff.ms": "200",
        "remote.log.manager.task.retry.backoff.max.ms": "1000",
        "rlmm.config.remote.log.metadata.topic.replication.factor": str(metadata_rf),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
        "log.retention.check.interval.ms": "200",
    }


def tiered_topic_config(**overrides: str) -> dict[str, str]:
    return {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": str(LOCAL_RETENTION_BYTES), "retention.bytes": "-1", "retention.ms": "-1",
            **overrides}


def value(i: int) -> bytes:
    return (b"%08d-" % i).ljust(RECORD_BYTES, b"x")


def produce(bootstrap: str, topic: str, start: int, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 16384})
    errors: list[str] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(start, start + count):
        producer.produce(topic, value=value(i), key=b"%d" % i, partition=partition, on_delivery=report)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]


def consume_all(bootstrap: str, topic: str, expected: int, partition: int = 0, timeout_s: float = 90) -> list[bytes]:
    """Every record of the partition from offset 0, checked dense: (offset i holds value(i))."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 4 * 1024 * 1024})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            assert msg.offset() == len(out), f"offset {msg.offset()} where {len(out)} was expected"
            out.append(msg.value())
    finally:
        consumer.close()
    return out


def partition_dir(cluster: Cluster, broker_id: int, topic: str, partition: int = 0) -> Path:
    return cluster.brokers[broker_id].data_dir / "logs" / f"{topic}-{partition}"


def local_segments(cluster: Cluster, broker_id: int, topic: str, partition: int = 0) -> dict[int, int]:
    """Base offset -> size of the replica's local ``.log`` files ({} when the directory is absent)."""
    d = partition_dir(cluster, broker_id, topic, partition)
    if not d.is_dir():
        return {}
    out = {}
    for f in d.glob("*.log"):
        try:
            out[int(f.stem)] = f.stat().st_size
        except (FileNotFoundError, ValueError):
            continue
    return out


def store_segments(store: Path, topic: str, partition: int = 0) -> dict[int, list[str]]:
    """Start offset -> the segment ids whose ``.log`` object is in the shared store (temp files left out)."""
    out: dict[int, list[str]] = {}
    for d in store.glob(f"{topic}-*/{partition}"):
        for f in d.iterdir():
            name = f.name
            if not name.endswith(".log") or ".tmp-" in name:
                continue
            start, _, segment_id = name[:-4].partition("-")
            out.setdefault(int(start), []).append(segment_id)
    return out
