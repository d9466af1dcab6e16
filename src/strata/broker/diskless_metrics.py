"""Diskless metrics: Inkless's meanings under Kafka-style names (``strata.diskless:type=...,name=...``).

* ``type=Writer``: ``WalObjectsUploadedPerSec``, ``WalBytesUploadedPerSec`` and ``PutRequestsPerSec``
  (meters; PUT attempts, retries included: what the store bills), ``UploadFailuresPerSec`` and
  ``CommitFailuresPerSec`` (meters), ``BytesPerObject`` (gauge: average of the objects uploaded so far),
  ``ActiveFileBytes`` and ``ObjectsInFlight`` (gauges), ``UploadLatencyMs`` / ``CommitLatencyMs``
  (gauges ``_p50``/``_p99`` over the last 1024 objects);
* ``type=Produce``: ``ProduceLatencyMs`` (``_p50``/``_p99``: a produce request's diskless part, from its
  arrival to its commit);
* ``type=Reader``: ``CacheHitsPerSec``, ``CacheMissesPerSec`` (= the cache's GETs), ``LaggingGetsPerSec``
  (GETs around the cache), ``GetRequestsPerSec`` (every GET), ``CacheBytes`` (gauge),
  ``FindBatchesLatencyMs`` (``_p50``/``_p99``);
* ``type=Cleaner``: ``DeleteRequestsPerSec`` (bulk DELETEs), ``ObjectsDeletedPerSec`` (unreferenced objects)
  and ``OrphansDeletedPerSec`` (uploaded, never committed);
* ``type=Consolidation``: ``BatchesPerSec``, ``BytesPerSec`` (replayed into this broker's replicas),
  ``RestartsPerSec`` (replicas restarted at the WAL's start), ``BatchesPrunedPerSec`` (meters), ``LagOffsets``
  (gauge: committed, not yet consolidated here) and ``WalBytesAwaitingTiering`` (gauge: the WAL's bytes);
* ``type=Coordinator``: ``CommandsAppliedPerSec`` (meter) and ``AppliedOffset`` (gauge: the last
  ``__diskless_metadata`` offset applied here; equal on every replica once they caught up).

Everything is read at scrape time from ``broker.diskless`` (absent until the broker started it: then the
series are absent too). Counters kept by the pieces are mirrored into meters when the first gauge is read,
which the registry does before it reads the meters (registration order is render order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from strata.common.metrics import Meter, Number, Registry, prometheus_name


def _name(kind: str, name: str) -> str:
    return prometheus_name(f"strata.diskless:type={kind},name={name}")


def percentile(samples: Sequence[int], q: float) -> int | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Mirror:
    def __init__(self, meter: Meter, read: Callable[[Any], int]) -> None:
        self.meter, self.read = meter, read
        self.seen, self.source = 0, None

    def sync(self, source: Any) -> None:
        if source is not self.source:
            self.source, self.seen = source, 0
        count = self.read(source)
        if count > self.seen:
            self.meter.mark(count - self.seen)
            self.seen = count


class DisklessMetrics:
    def __init__(self, registry: Registry, broker: Any) -> None:
        self.broker = broker
        registry.gauge(_name("Writer", "ActiveFileBytes"), "Bytes buffered for the next WAL object.",
                       fn=lambda: self._read(lambda d: d.writer.active_file_size, sync=True))
        registry.gauge(_name("Writer", "ObjectsInFlight"), "WAL objects uploading or waiting for their commit.",
                       fn=lambda: self._read(lambda d: d.writer.objects_in_flight))
        registry.gauge(_name("Writer", "BytesPerObject"), "Average size of the WAL objects uploaded.",
                       fn=lambda: self._read(lambda d: d.writer.stats.bytes_uploaded // d.writer.stats.objects_uploaded
                                             if d.writer.stats.objects_uploaded else 0))
        registry.gauge(_name("Reader", "CacheBytes"), "Bytes of WAL objects in this broker's fetch cache.",
                       fn=lambda: self._read(lambda d: d.cache.size_bytes))
        registry.gauge(_name("Consolidation", "LagOffsets"), "Offsets committed but not yet consolidated into this "
                       "broker's replicas.", fn=lambda: self._read(lambda d: d.consolidator.stats.lag_offsets))
        registry.gauge(_name("Consolidation", "WalBytesAwaitingTiering"), "Bytes of diskless batches still only in "
                       "WAL objects (consolidation and tiering prune the rest).",
                       fn=lambda: self._read(lambda d: sum(i.byte_size for i in d.log_infos.values())))
        registry.gauge(_name("Coordinator", "AppliedOffset"), "The last __diskless_metadata offset applied here.",
                       fn=lambda: self._read(lambda d: d.coordinator.applied_offset))
        for kind, name, samples in (
                ("Writer", "UploadLatencyMs", lambda d: d.writer.stats.upload_latency_ms),
                ("Writer", "CommitLatencyMs", lambda d: d.writer.stats.commit_latency_ms),
                ("Produce", "ProduceLatencyMs", lambda d: d.stats.produce_latency_ms),
                ("Reader", "FindBatchesLatencyMs", lambda d: d.stats.find_batches_latency_ms)):
            for q in (0.5, 0.99):
                registry.gauge(_name(kind, f"{name}_p{int(q * 100)}"), f"{name}, {int(q * 100)}th percentile of the "
                               "last 1024.", fn=lambda s=samples, q=q: self._read(lambda d: percentile(s(d), q)))
        self._mirrors = [
            _Mirror(registry.meter(_name(kind, name), help_text), read) for kind, name, help_text, read in (
                ("Writer", "WalObjectsUploadedPerSec", "WAL objects uploaded.",
                 lambda d: d.writer.stats.objects_uploaded),
                ("Writer", "WalBytesUploadedPerSec", "Bytes of WAL objects uploaded.",
                 lambda d: d.writer.stats.bytes_uploaded),
                ("Writer", "PutRequestsPerSec", "PUT requests of WAL objects, retries included.",
                 lambda d: d.writer.stats.put_requests),
                ("Writer", "UploadFailuresPerSec", "WAL objects given up on after their upload attempts.",
                 lambda d: d.writer.stats.upload_failures),
                ("Writer", "CommitFailuresPerSec", "Commits that failed or whose outcome is unknown.",
                 lambda d: d.writer.stats.commit_failures),
                ("Reader", "CacheHitsPerSec", "Fetch reads served from the cache.", lambda d: d.cache.stats.hits),
                ("Reader", "CacheMissesPerSec", "Fetch reads that loaded a block (one GET each).",
                 lambda d: d.cache.stats.misses),
                ("Reader", "LaggingGetsPerSec", "GETs of lagging reads, around the cache.",
                 lambda d: d.reader.stats.lagging_gets),
                ("Reader", "GetRequestsPerSec", "Every GET of WAL objects.",
                 lambda d: d.cache.stats.misses + d.reader.stats.lagging_gets),
                ("Cleaner", "DeleteRequestsPerSec", "Bulk DELETE requests of WAL objects.",
                 lambda d: d.stats.delete_requests),
                ("Cleaner", "ObjectsDeletedPerSec", "WAL objects deleted once no batch referred to them.",
                 lambda d: d.stats.objects_deleted),
                ("Cleaner", "OrphansDeletedPerSec", "WAL objects uploaded but never committed, swept.",
                 lambda d: d.stats.orphans_deleted),
                ("Consolidation", "BatchesPerSec", "Batches replayed into this broker's replicas.",
                 lambda d: d.consolidator.stats.batches),
                ("Consolidation", "BytesPerSec", "Bytes replayed into this broker's replicas.",
                 lambda d: d.consolidator.stats.bytes),
                ("Consolidation", "RestartsPerSec", "Replicas restarted at the WAL start (below: remote tier).",
                 lambda d: d.consolidator.stats.restarts),
                ("Consolidation", "BatchesPrunedPerSec", "WAL batches pruned once tiered (by the partitions led here).",
                 lambda d: d.consolidator.stats.batches_pruned),
                ("Coordinator", "CommandsAppliedPerSec", "Coordinator commands applied to this replica's state.",
                 lambda d: d.coordinator.commands_applied))]

    def _read(self, fn: Callable[[Any], Number | None], sync: bool = False) -> Number | None:
        diskless = self.broker.diskless
        if diskless is None:
            return None
        if sync:
            for mirror in self._mirrors:
                mirror.sync(diskless)
        return fn(diskless)


def register_diskless_metrics(registry: Registry, broker: Any) -> DisklessMetrics:
    return DisklessMetrics(registry, broker)
