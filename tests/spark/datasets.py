"""Deterministic topics for the Spark tests: what was produced, so reads can be checked exactly.

Record ``i`` of a dataset goes to partition ``i % partitions`` with key ``k{i}``, a value of
40-160 bytes derived from ``i``, timestamp ``T0 + i`` ms and, for every 50th record, two headers
(one with a null value). Records are produced in chunks, each chunk by a producer with another
codec (none, gzip, snappy, lz4, zstd), flushed before the next chunk so the partitions keep the
records in order. The expected rows per partition are kept as compact arrays (offsets are dense
from 0, so a record's offset is its index within its partition).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
T0 = 1_700_000_000_000
WAIT_S = 120.0


def value_of(i: int) -> bytes:
    n = 40 + (i * 7919) % 121
    seed = (f"{i:08d}|").encode()
    return (seed * (n // len(seed) + 1))[:n]


def headers_of(i: int) -> list[tuple[str, bytes | None]] | None:
    return [("h", str(i).encode()), ("null", None)] if i % 50 == 0 else None


@dataclass
class Dataset:
    topic: str
    partitions: int
    records: int
    # per partition: the global record index at each offset
    indexes: dict[int, list[int]] = field(default_factory=dict)

    def crc_sum(self, partition: int, start: int = 0, end: int | None = None) -> int:
        return sum(zlib.crc32(value_of(i)) for i in self.indexes[partition][start:end])

    def count(self, partition: int, start: int = 0, end: int | None = None) -> int:
        return len(self.indexes[partition][start:end])

    def timestamp(self, partition: int, offset: int) -> int:
        return T0 + self.indexes[partition][offset]


def create_topic(admin: Any, topic: str, partitions: int, **configs: str) -> None:
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=configs)], operation_timeout=10)
    futures[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, partitions: int, records: int, start: int = 0,
            chunk: int = 20_000, dataset: Dataset | None = None) -> Dataset:
    """Produce records ``start`` .. ``start + records - 1``; acks=all, idempotent, every codec."""
    ds = dataset or Dataset(topic, partitions, 0, {p: [] for p in range(partitions)})
    producers = {c: Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                              "compression.type": c, "linger.ms": 20, "batch.size": 64 * 1024,  # < the 128 KiB segments
                              "queue.buffering.max.messages": 500_000}) for c in CODECS}
    errors: list[Any] = []

    def failed(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    try:
        for n, lo in enumerate(range(start, start + records, chunk)):
            producer = producers[CODECS[n % len(CODECS)]]
            for i in range(lo, min(start + records, lo + chunk)):
                p = i % partitions
                while True:
                    try:
                        producer.produce(topic, value=value_of(i), key=b"k%d" % i, partition=p, timestamp=T0 + i,
                                         headers=headers_of(i), on_delivery=failed)
                        break
                    except BufferError:
                        producer.poll(0.05)
                ds.indexes[p].append(i)
            assert producer.flush(WAIT_S) == 0, "records still queued after the flush"
    finally:
        for producer in producers.values():
            producer.flush(10)
    assert not errors, errors[:3]
    ds.records += records
    return ds


def latest_tiered(cluster: Any, topic: str, partitions: int) -> dict[int, int]:
    return {p: o for (_, p), o in cluster.list_offsets({(topic, p): -5 for p in range(partitions)}).items()}


def wait_tiered(bootstrap: str, ds: Dataset, min_fraction: float = 0.8, timeout_s: float = WAIT_S) -> dict[int, int]:
    """Wait until at least ``min_fraction`` of every partition is in the remote tier, and copying is idle."""
    from strata.client.cluster import KafkaCluster

    deadline = time.monotonic() + timeout_s
    last: dict[int, int] | None = None
    with KafkaCluster(bootstrap) as cluster:
        while True:
            tiered = latest_tiered(cluster, ds.topic, ds.partitions)
            enough = all(tiered[p] + 1 >= min_fraction * len(ds.indexes[p]) for p in range(ds.partitions))
            if enough and tiered == last:
                return tiered
            if time.monotonic() > deadline:
                raise AssertionError(f"only {tiered} of {ds.topic} tiered after {timeout_s}s")
            last = tiered
            time.sleep(1.0)
