"""Kafka's tiered-storage integration harness, for one real Strata broker process.

Mirrors ``TieredStorageTestHarness``: topics get ``index.interval.bytes=1``,
``segment.index.bytes = 12 * max_batches_per_segment`` (exactly N batches per segment, the time
index being full at N-1 entries plus the first append writing none) and ``local.retention.bytes=1``
(an uploaded segment leaves the local disk at once); the producer sends one record per batch.
Assertions read the ``local`` RSM's event history (``.events.jsonl``), like Kafka's tests read
``LocalTieredStorage``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient

from strata.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, uuid_to_str
from strata.tiered.metadata.serde import deserialize
from strata.tiered.storage.local import read_events

WAIT_S = 30.0
LIST_OFFSETS = 2


def tiered_props(remote_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "local",
        "rsm.config.dir": str(remote_dir),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.initial.task.delay.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
        "metrics.port": "0",
        **extra,
    }


def wait_until(what: str, predicate: Callable[[], Any], timeout_s: float = WAIT_S, interval_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class TieredBroker:
    """One broker with the ``local`` RSM under ``remote_dir``; helpers named after Kafka's actions."""

    def __init__(self, tmp: Path, **props: str) -> None:
        self.remote_dir = tmp / "remote"
        self.broker = BrokerProcess(tmp / "broker", tiered_props(self.remote_dir, **props))
        self._admin: tuple[str, AdminClient] | None = None

    def start(self) -> TieredBroker:
        self.broker.start()
        return self

    def stop(self) -> None:
        self.broker.stop()

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def admin(self) -> AdminClient:
        """One client per broker start (a client dropped before its futures resolve fails them)."""
        if self._admin is None or self._admin[0] != self.bootstrap:
            self._admin = (self.bootstrap, AdminClient({"bootstrap.servers": self.bootstrap}))
        return self._admin[1]

    def log_dir(self, topic: str, partition: int) -> Path:
        return self.broker.data_dir / "logs" / f"{topic}-{partition}"

    # -- actions -------------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, max_batches_per_segment: int = 1,
                     enable_remote: bool = True, **configs: str) -> None:
        cfg = {"remote.storage.enable": str(enable_remote).lower(), "index.interval.bytes": "1",
               "segment.index.bytes": str(12 * max_batches_per_segment), "local.retention.bytes": "1"}
        if not enable_remote:
            del cfg["local.retention.bytes"]
        cfg.update({k.replace("_", "."): v for k, v in configs.items()})
        futures = self.admin().create_topics([NewTopic(topic, partitions, 1, config=cfg)], operation_timeout=10)
        futures[topic].result(timeout=WAIT_S)

    def alter_topic(self, topic: str, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        for fut in self.admin().incremental_alter_configs([res]).values():
            fut.result(timeout=WAIT_S)

    def produce(self, topic: str, partition: int, records: list[tuple[str, str] | tuple[str, str, int]]) -> None:
        """One record per batch (a flush after each), acks=all."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0})
        errors: list[Any] = []
        for rec in records:
            key, value = rec[0], rec[1]
            kwargs: dict[str, Any] = {"timestamp": rec[2]} if len(rec) > 2 else {}
            producer.produce(topic, value=value.encode(), key=key.encode(), partition=partition,
                             on_delivery=lambda err, _msg: errors.append(err) if err else None, **kwargs)
            assert producer.flush(WAIT_S) == 0
        assert not errors, errors

    def consume(self, topic: str, partition: int, from_offset: int, expected: int,
                timeout_s: float = WAIT_S) -> list[tuple[int, str, str]]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([CkTopicPartition(topic, partition, from_offset)])
            out: list[tuple[int, str, str]] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < expected and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    continue  # retriable errors are retried by the client
                out.append((msg.offset(), msg.key().decode(), msg.value().decode()))
            # nothing more should arrive
            extra = consumer.poll(0.5)
            if extra is not None and not extra.error():
                out.append((extra.offset(), extra.key().decode(), extra.value().decode()))
            return out
        finally:
            consumer.close()

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        futures = self.admin().delete_records([CkTopicPartition(topic, partition, before)])
        for fut in futures.values():
            fut.result(timeout=WAIT_S)

    def delete_topic(self, topic: str) -> None:
        for fut in self.admin().delete_topics([topic], operation_timeout=10).values():
            fut.result(timeout=WAIT_S)

    def list_offsets(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """ListOffsets v9 (it knows -4 earliest-local and -5 latest-tiered): ``(offset, leader_epoch)``."""
        with WireClient(self.bootstrap) as client:
            resp = client.call(LIST_OFFSETS, 9, replica_id=-1, isolation_level=0, topics=[
                {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                "timestamp": timestamp}]}])
        p = resp.topics[0].partitions[0]
        assert int(p.error_code) == 0, p
        return p.offset, p.leader_epoch

    # -- observations --------------------------------------------------------------------------

    def events(self, type: str, topic: str, partition: int) -> list[dict[str, Any]]:
        return [e for e in read_events(self.remote_dir, type) if e["topic"] == topic and e["partition"] == partition]

    def wait_offloaded(self, topic: str, partition: int, base_offsets: list[int]) -> None:
        def done() -> bool:
            copied = {e["start_offset"] for e in self.events("COPY_SEGMENT", topic, partition)}
            return set(base_offsets) <= copied
        wait_until(f"segments {base_offsets} of {topic}-{partition} offloaded", done)

    def earliest_local_offset(self, topic: str, partition: int) -> int:
        logs = sorted(p.name for p in self.log_dir(topic, partition).glob("*.log"))
        return int(logs[0].split(".")[0]) if logs else -1

    def wait_earliest_local(self, topic: str, partition: int, offset: int) -> None:
        wait_until(f"earliest local offset {offset} of {topic}-{partition}",
                   lambda: self.earliest_local_offset(topic, partition) == offset)

    def fetch_count(self, topic: str, partition: int) -> int:
        return len(self.events("FETCH_SEGMENT", topic, partition))

    def delete_count(self, topic: str, partition: int) -> int:
        return len(self.events("DELETE_SEGMENT", topic, partition))

    def remote_records(self, topic: str, partition: int) -> int:
        """Finished, not deleted uploads of a partition, counted from the event history."""
        copied = {e["segment_id"] for e in self.events("COPY_SEGMENT", topic, partition)}
        deleted = {e["segment_id"] for e in self.events("DELETE_SEGMENT", topic, partition)}
        return len(copied - deleted)


Record = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int,
               timeout_s: float = WAIT_S) -> list[Record]:
    """The records of ``topic-partition`` at offsets ``[start, end)`` as a consumer gets them (whatever it gets
    until it reaches ``end - 1`` or the timeout), with their timestamps."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 4 * 1024 * 1024})
    out: list[Record] = []
    try:
        consumer.assign([CkTopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return [r for r in out if r[0] < end]


def metadata_states(b: TieredBroker, topic: str | None = None,
                    partition: int | None = None) -> dict[str, tuple[int, int]]:
    """Every segment id in ``__remote_log_metadata`` (read with a real consumer, decoded with Kafka's
    record format) -> (start offset, latest state); optionally of one topic partition."""
    meta = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("__remote_log_metadata", timeout=10)
    partitions = list(meta.topics["__remote_log_metadata"].partitions)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"meta-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    states: dict[str, tuple[int, int]] = {}
    try:
        consumer.assign([CkTopicPartition("__remote_log_metadata", p, 0) for p in partitions])
        eof: set[int] = set()
        deadline = time.monotonic() + WAIT_S
        while len(eof) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            if msg.value() is None:  # a tombstone of the compacted topic (KIP-1266 keys)
                continue
            md = deserialize(msg.value())
            tip = getattr(md, "topic_id_partition", None)
            if tip is None or (topic is not None and (tip.topic, tip.partition) != (topic, partition)):
                continue
            if isinstance(md, RemoteLogSegmentMetadata):
                states[uuid_to_str(md.remote_log_segment_id.id)] = (md.start_offset, int(md.state))
            elif isinstance(md, RemoteLogSegmentMetadataUpdate):
                sid = uuid_to_str(md.remote_log_segment_id.id)
                states[sid] = (states[sid][0], int(md.state))
    finally:
        consumer.close()
    return states


class S3TieredBroker(TieredBroker):
    """The same broker with the ``s3`` RSM on a real S3 server (SeaweedFS). S3 keeps no event
    history, so observations come from the bucket listing, ``__remote_log_metadata`` and the
    broker's Prometheus counters instead."""

    def __init__(self, tmp: Path, s3: Any, key_prefix: str, **props: str) -> None:
        rsm = {f"rsm.config.{k}": str(v) for k, v in s3.rsm_config().items() if k != "broker.id"}
        super().__init__(tmp, **{"remote.log.storage.manager.class.name": "s3",
                                 "rsm.config.key.prefix": key_prefix, **rsm, **props})
        self.s3 = s3
        self.key_prefix = key_prefix

    def segment_objects(self, topic: str, partition: int) -> list[tuple[int, str]]:
        """(start offset, segment id) of every ``.log`` object of the partition in the bucket."""
        out = []
        for key in self.s3.list_keys(self.key_prefix):
            parts = key[len(self.key_prefix):].split("/")
            if len(parts) == 3 and parts[0][:-23] == topic and parts[1] == str(partition) \
                    and parts[2].endswith(".log"):
                start, segment_id = parts[2][:20], parts[2][21:-4]  # the id may contain "-"
                out.append((int(start), segment_id))
        return out

    def wait_offloaded(self, topic: str, partition: int, base_offsets: list[int]) -> None:
        wait_until(f"segments {base_offsets} of {topic}-{partition} in the bucket",
                   lambda: set(base_offsets) <= {s for s, _ in self.segment_objects(topic, partition)})

    def remote_records(self, topic: str, partition: int) -> int:
        return len(self.segment_objects(topic, partition))

    def delete_count(self, topic: str, partition: int) -> int:
        return sum(1 for _, state in metadata_states(self, topic, partition).values() if state == 3)

    def fetch_count(self, topic: str, partition: int) -> int:
        """Remote reads of the topic that did not fail (RemoteFetchRequestsPerSec less RemoteFetchErrorsPerSec),
        from the broker's /metrics."""
        import re
        import urllib.request

        from strata.tools.tiers import metrics_endpoint

        host, port = metrics_endpoint(self.bootstrap)
        text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
        def count(name: str) -> int:
            m = re.search(name + "_total" + re.escape(f'{{topic="{topic}"}}') + r" (\d+)", text)
            return int(m.group(1)) if m else 0

        # Kafka's scenarios count the RSM's FETCH_SEGMENT events: reads that reached a segment. A read refused
        # (the metadata still loading after a restart, say) is a request and an error, not a segment fetch.
        return count("RemoteFetchRequestsPerSec") - count("RemoteFetchErrorsPerSec")
