"""Tiered storage in a cluster: the brokers' shared remote store and what to observe on disk.

The store is one local directory shared by every broker (``remote.log.storage.manager.class.name=local``),
as a bucket is shared by a real cluster. Short task intervals and small segments make tiering happen in
seconds. ``__remote_log_metadata`` is replicated (factor 2 by default: every test cluster has >= 2 brokers).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import Cluster
from tests.tiered.harness import LIST_OFFSETS, WAIT_S, TieredBroker, wait_until
from tests.tiered.harness import tiered_props as harness_tiered_props

SEGMENT_BYTES = 64 * 1024
LOCAL_RETENTION_BYTES = 2 * SEGMENT_BYTES
RECORD_BYTES = 1000
# NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
_LEADERSHIP_MOVING = frozenset({6, 5, 74, 75})


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
        "log.initial.task.delay.ms": "200",  # Kafka's 30 s before the first retention run: every test waited it
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


class TieredCluster(TieredBroker):
    """Kafka's tiered-storage harness (``tests/tiered/harness.py``) over a cluster: the same actions and
    observations, with topics placed on chosen brokers, reads sent to each partition's current leader, and
    per-broker log directories. All brokers share one ``local`` store, whose event history counts uploads,
    remote fetches and deletes of the whole cluster, as ``LocalTieredStorage``'s does in Kafka's tests."""

    def __init__(self, zk_connect: str, tmp: Path, size: int = 2, **props: str) -> None:
        self.remote_dir = tmp / "remote"
        self.cluster = Cluster(zk_connect, tmp, size, {
            **harness_tiered_props(self.remote_dir, **props),
            "rlmm.config.remote.log.metadata.topic.replication.factor": str(min(size, 2)),
            "metrics.port": "-1"}, verbose=True)
        self._admin = None

    def start(self) -> TieredCluster:
        self.cluster.start()
        return self

    def stop(self) -> None:
        self.cluster.stop()

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def admin(self) -> AdminClient:
        return self.cluster.admin()

    def leader(self, topic: str, partition: int) -> int:
        return wait_until(f"a leader of {topic}-{partition}",
                          lambda: max(self.cluster.leader_of(topic, partition), 0))

    def log_dir(self, topic: str, partition: int, broker: int | None = None) -> Path:
        """The replica's directory on ``broker`` (default: the leader), in whichever of its log dirs
        (``logs``, ``logs2``, ...) it is."""
        b = self.leader(topic, partition) if broker is None else broker
        data_dir = self.cluster.brokers[b].data_dir
        found = sorted(data_dir.glob(f"logs*/{topic}-{partition}"))
        return found[0] if found else data_dir / "logs" / f"{topic}-{partition}"

    def earliest_local_offset(self, topic: str, partition: int, broker: int | None = None) -> int:
        logs = sorted(p.name for p in self.log_dir(topic, partition, broker).glob("*.log"))
        return int(logs[0].split(".")[0]) if logs else -1

    def create_topic(self, topic: str, partitions: int = 1, max_batches_per_segment: int = 1,  # type: ignore[override]
                     enable_remote: bool = True, assignment: dict[int, list[int]] | None = None,
                     replication_factor: int = 1, **configs: str) -> None:
        cfg = {"remote.storage.enable": str(enable_remote).lower(), "index.interval.bytes": "1",
               "segment.index.bytes": str(12 * max_batches_per_segment), "local.retention.bytes": "1"}
        if not enable_remote:
            del cfg["local.retention.bytes"]
        cfg.update({k.replace("_", "."): v for k, v in configs.items()})
        if assignment is not None:
            new = NewTopic(topic, len(assignment), replica_assignment=[assignment[p] for p in sorted(assignment)],
                           config=cfg)
        else:
            new = NewTopic(topic, partitions, replication_factor, config=cfg)
        self.admin().create_topics([new], operation_timeout=10)[topic].result(timeout=WAIT_S)
        self.cluster.wait_full_isr(topic)

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """ListOffsets v9 to the partition's leader: ``(offset, leader_epoch)``.

        Like a client, it asks again when the broker it took for the leader answers that it no longer
        (or not yet) leads: the metadata it read may lag a leadership move in flight."""
        def ask() -> Any:
            leader = self.cluster.brokers[self.leader(topic, partition)]
            with WireClient(leader.bootstrap) as client:
                resp = client.call(LIST_OFFSETS, 9, replica_id=-1, isolation_level=0, topics=[
                    {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                    "timestamp": timestamp}]}])
            p = resp.topics[0].partitions[0]
            if int(p.error_code) in _LEADERSHIP_MOVING:
                return None
            assert int(p.error_code) == 0, p
            return p

        p = wait_until(f"ListOffsets({timestamp}) answered by the leader of {topic}-{partition}", ask)
        return p.offset, p.leader_epoch

    def reassign(self, topic: str, partition: int, replicas: list[int]) -> None:
        """AlterPartitionReassignments to the controller; returns once the assignment is ``replicas``
        and every replica of it is in the ISR."""
        controller = self.admin().list_topics(timeout=10).controller_id
        with WireClient(self.cluster.brokers[controller].bootstrap) as w:
            r = w.call(45, 0, timeout=30_000, topics=[{"name": topic, "partitions": [
                {"partition_index": partition, "replicas": replicas}]}])
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0, r
        wait_until(f"{topic}-{partition} reassigned to {replicas}",
                   lambda: list(self.cluster.metadata(topic).partitions[partition].replicas) == replicas)
        self.cluster.wait_full_isr(topic)

    def elect_preferred(self, topic: str, partition: int) -> None:
        from confluent_kafka import ElectionType

        result = self.admin().elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(topic, partition)])
        errors = result.result(WAIT_S)
        err = errors.get(CkTopicPartition(topic, partition))
        assert err is None or "ELECTION_NOT_NEEDED" in str(err), err
        preferred = self.cluster.metadata(topic).partitions[partition].replicas[0]
        wait_until(f"broker {preferred} leading {topic}-{partition}",
                   lambda: self.cluster.leader_of(topic, partition) == preferred)
