"""The broker's keys for diskless topics (KIP-1150), with Inkless's meanings under ``diskless.*`` names.

A diskless topic (topic config ``diskless.enable=true``) has no leader-follower data replication: every
broker takes produce for any of its partitions, appends the batches of all of them into one shared WAL
object in the remote store, and commits the object to the diskless coordinator, which assigns offsets.
Inkless names its keys ``inkless.*``; KIP-1150 and Kafka's topic key use ``diskless``, so Strata does too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigKey, at_least

MiB = 1024 * 1024


def _key_prefix(value: str) -> str | None:
    return "must not start or end with '/'" if value.startswith("/") or value.endswith("/") else None


DISKLESS_KEYS = [
    ConfigKey("diskless.produce.buffer.max.bytes", "int", 8 * MiB, at_least(1024),
              "A WAL object is closed and uploaded once it holds this many bytes (a produce request is never split)"),
    ConfigKey("diskless.produce.commit.interval.ms", "int", 250, at_least(1),
              "... or this long after its first batch: the floor of a diskless produce's latency"),
    ConfigKey("diskless.produce.max.upload.attempts", "int", 3, at_least(1),
              "Tries of one WAL object's upload before its producers get KAFKA_STORAGE_ERROR"),
    ConfigKey("diskless.produce.upload.backoff.ms", "int", 10, at_least(0),
              "Wait before the first retry of an upload (doubled each time)"),
    ConfigKey("diskless.produce.max.uploads.in.flight", "int", 4, at_least(1),
              "WAL objects uploading at once (their commits still go one at a time, in order)"),
    ConfigKey("diskless.object.key.prefix", "string", "diskless", _key_prefix,
              "Key prefix of WAL objects and coordinator snapshots in the remote store"),
    ConfigKey("diskless.fetch.cache.max.bytes", "long", 256 * MiB, at_least(0),
              "Bytes of WAL objects a broker keeps in memory for fetches of the hot tail"),
    ConfigKey("diskless.fetch.cache.lifespan.ms", "int", 60_000, at_least(1),
              "How long a cached WAL object stays; reads of batches older than this bypass the cache"),
    ConfigKey("diskless.fetch.max.wait.ms", "int", 100, at_least(0),
              "A diskless fetch waits at least this long for data when a consumer asks to wait"),
    ConfigKey("diskless.file.cleaner.interval.ms", "int", 120_000, at_least(1),
              "How often WAL objects no batch refers to any more are deleted"),
    ConfigKey("diskless.file.cleaner.retention.period.ms", "int", 60_000, at_least(0),
              "How long an unreferenced WAL object stays before deletion (reads in flight still find it)"),
    ConfigKey("diskless.orphan.grace.ms", "int", 3_600_000, at_least(1),
              "A WAL object never committed (its broker died between upload and commit) is deleted this long "
              "after its upload"),
    ConfigKey("diskless.consolidation.interval.ms", "int", 1000, at_least(10),
              "How often each replica of a diskless partition replays newly committed batches into its local log "
              "(it also runs after each commit it sees), from where KIP-405 tiers them"),
    ConfigKey("diskless.consolidation.fetch.max.bytes", "int", 8 * MiB, at_least(1024),
              "Bytes of one partition a consolidation round reads at most"),
    ConfigKey("diskless.consolidation.prune.interval.ms", "int", 30_000, at_least(10),
              "How often a diskless partition's leader prunes WAL batches its remote tier already holds "
              "(a WAL object is deleted once every batch in it is pruned or expired)"),
    ConfigKey("diskless.metadata.topic.replication.factor", "int", 3, at_least(1),
              "Replication factor of __diskless_metadata in cluster mode (a single node uses 1)"),
    ConfigKey("diskless.metadata.topic.min.isr", "int", 2, at_least(1),
              "min.insync.replicas of __diskless_metadata (capped by its replication factor)"),
    ConfigKey("diskless.metadata.topic.segment.bytes", "int", 100 * MiB, at_least(1024),
              "segment.bytes of __diskless_metadata"),
    ConfigKey("diskless.metadata.snapshot.interval.ms", "int", 600_000, at_least(100),
              "How often the coordinator's leader snapshots its state to the remote store and truncates "
              "__diskless_metadata below it (restart time and disk stay bounded)"),
    ConfigKey("diskless.metadata.snapshot.min.commands", "int", 10_000, at_least(1),
              "... once at least this many commands were applied since the last snapshot"),
]


@dataclass(frozen=True, slots=True)
class DisklessConfig:
    buffer_max_bytes: int = 8 * MiB
    commit_interval_ms: int = 250
    max_upload_attempts: int = 3
    upload_backoff_ms: int = 10
    max_uploads_in_flight: int = 4
    object_key_prefix: str = "diskless"
    cache_max_bytes: int = 256 * MiB
    cache_lifespan_ms: int = 60_000
    fetch_max_wait_ms: int = 100
    file_cleaner_interval_ms: int = 120_000
    file_cleaner_retention_ms: int = 60_000
    orphan_grace_ms: int = 3_600_000
    consolidation_interval_ms: int = 1000
    consolidation_fetch_max_bytes: int = 8 * MiB
    consolidation_prune_interval_ms: int = 30_000
    metadata_replication_factor: int = 3
    metadata_min_isr: int = 2
    metadata_segment_bytes: int = 100 * MiB
    snapshot_interval_ms: int = 600_000
    snapshot_min_commands: int = 10_000

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any]) -> DisklessConfig:
        return cls(
            buffer_max_bytes=p["diskless.produce.buffer.max.bytes"],
            commit_interval_ms=p["diskless.produce.commit.interval.ms"],
            max_upload_attempts=p["diskless.produce.max.upload.attempts"],
            upload_backoff_ms=p["diskless.produce.upload.backoff.ms"],
            max_uploads_in_flight=p["diskless.produce.max.uploads.in.flight"],
            object_key_prefix=p["diskless.object.key.prefix"],
            cache_max_bytes=p["diskless.fetch.cache.max.bytes"],
            cache_lifespan_ms=p["diskless.fetch.cache.lifespan.ms"],
            fetch_max_wait_ms=p["diskless.fetch.max.wait.ms"],
            file_cleaner_interval_ms=p["diskless.file.cleaner.interval.ms"],
            file_cleaner_retention_ms=p["diskless.file.cleaner.retention.period.ms"],
            orphan_grace_ms=p["diskless.orphan.grace.ms"],
            consolidation_interval_ms=p["diskless.consolidation.interval.ms"],
            consolidation_fetch_max_bytes=p["diskless.consolidation.fetch.max.bytes"],
            consolidation_prune_interval_ms=p["diskless.consolidation.prune.interval.ms"],
            metadata_replication_factor=p["diskless.metadata.topic.replication.factor"],
            metadata_min_isr=p["diskless.metadata.topic.min.isr"],
            metadata_segment_bytes=p["diskless.metadata.topic.segment.bytes"],
            snapshot_interval_ms=p["diskless.metadata.snapshot.interval.ms"],
            snapshot_min_commands=p["diskless.metadata.snapshot.min.commands"],
        )
