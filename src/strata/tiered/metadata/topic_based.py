"""Kafka's ``TopicBasedRemoteLogMetadataManager`` for a single broker, plus a local snapshot.

Kafka's design, kept: every metadata event is a record (serde.py bytes, null key) in the internal
topic ``__remote_log_metadata``, in the partition the :class:`RemoteLogMetadataTopicPartitioner`
picks for its user partition; the in-memory :class:`RemoteLogMetadataCache` of each user partition
is filled only by applying those records in offset order; a write returns once the broker's own
cache has applied it (read-your-writes).

Single-broker changes (why): there are no Kafka producer/consumer clients - the broker injects a
:class:`MetadataTopic` that appends to and reads from the topic's local log - and no consumer
thread: the writing thread catches its metadata partition up to its own record before returning,
through the same ``_apply(partition, offset, md)`` the startup replay uses, which skips offsets
already applied (so concurrent writers and the replay never apply a record twice or out of order).
Every user partition found in the topic is loaded (a single broker leads or follows them all).

Better than Kafka (its documented weakness is a full replay of the topic at every restart, KAFKA-16161
removed the file snapshot): the whole cache - segments, the exact per-epoch state, stopped partitions
- and the applied offset of every metadata partition are written atomically to
``<log.dir>/__remote_log_metadata-snapshot`` every ``remote.log.metadata.snapshot.events`` applied
events or ``remote.log.metadata.snapshot.interval.ms`` (whichever first) and at ``close()``. At
startup the snapshot is loaded and each metadata partition is replayed only from its snapshot
offset + 1. A corrupt or mismatched snapshot is ignored (full replay); a metadata partition whose
records no longer connect to the snapshot (retention deleted past it, or the topic was recreated)
is replayed in full, dropping what the snapshot said about its user partitions.

Snapshot file (all integers big-endian)::

    magic "SRLM" | version int16 = 1 | crc32c uint32 of everything after it
    numMetadataPartitions int32 | appliedOffset int64 per metadata partition (-1: none)
    uvarint n, n x stopped TopicIdPartition          (name: uvarint len + UTF-8, id 16 bytes, partition int32)
    uvarint n, n x (uvarint len, RemotePartitionDeleteMetadataRecord body)     # serde apiKey 2
    uvarint n, n x user partition:
        TopicIdPartition
        uvarint n, n x uint32 body length, then the n RemoteLogSegmentMetadataSnapshotRecord bodies (apiKey 3)
        uvarint n, n x orphan segment id (16 bytes)   # ids an epoch state names but no segment has
        uvarint n, n x epoch: epoch int32 | highestLogOffset int64 (-1: none) | r uint32 | u uint32
                              | r x startOffset int64 | r x referenced id index uint32
                              | u x unreferenced id index uint32
      (id index: position in the partition's segments, then its orphan ids)

Arrays are fixed-width so each is decoded by one ``struct.unpack_from``: restart time is what the
snapshot is for.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import struct
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crc32c import crc32c

from strata.common.crashpoints import crash_point
from strata.config.defs import ConfigDef, ConfigKey, at_least
from strata.errors import InvalidConfigError, KafkaStorageError
from strata.log.checkpoints import atomic_write
from strata.tiered.api import (
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
    TopicIdPartition,
)
from strata.tiered.metadata.cache import EpochStateSnapshot, RemoteLogMetadataCache, RemotePartitionMetadataStore
from strata.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from strata.tiered.metadata.serde import (
    ByteReader,
    RemoteLogSegmentMetadataSnapshot,
    decode_partition_delete_body,
    decode_snapshot_metadata,
    deserialize,
    encode_partition_delete_body,
    encode_snapshot_body,
    encode_uvarint,
    serialize,
)

__all__ = [
    "REMOTE_LOG_METADATA_TOPIC_NAME", "SNAPSHOT_FILE_NAME", "LoadStats", "MetadataTopic",
    "TopicBasedRemoteLogMetadataManager", "TopicBasedRemoteLogMetadataManagerConfig",
]

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC_NAME = "__remote_log_metadata"
SNAPSHOT_FILE_NAME = "__remote_log_metadata-snapshot"

# Kafka's TopicBasedRemoteLogMetadataManagerConfig names (after the rlmm.config. prefix is removed).
REMOTE_LOG_METADATA_TOPIC_REPLICATION_FACTOR_PROP = "remote.log.metadata.topic.replication.factor"
REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP = "remote.log.metadata.topic.num.partitions"
REMOTE_LOG_METADATA_TOPIC_RETENTION_MS_PROP = "remote.log.metadata.topic.retention.ms"
REMOTE_LOG_METADATA_CONSUME_WAIT_MS_PROP = "remote.log.metadata.consume.wait.ms"
REMOTE_LOG_METADATA_INITIALIZATION_RETRY_MAX_TIMEOUT_MS_PROP = "remote.log.metadata.initialization.retry.max.timeout.ms"
REMOTE_LOG_METADATA_INITIALIZATION_RETRY_INTERVAL_MS_PROP = "remote.log.metadata.initialization.retry.interval.ms"
# Strata's own: the local snapshot.
REMOTE_LOG_METADATA_SNAPSHOT_ENABLE_PROP = "remote.log.metadata.snapshot.enable"
REMOTE_LOG_METADATA_SNAPSHOT_INTERVAL_MS_PROP = "remote.log.metadata.snapshot.interval.ms"
REMOTE_LOG_METADATA_SNAPSHOT_EVENTS_PROP = "remote.log.metadata.snapshot.events"
LOG_DIR_PROP = "log.dir"
BROKER_ID_PROP = "broker.id"

_CONFIG = ConfigDef([
    ConfigKey(REMOTE_LOG_METADATA_TOPIC_REPLICATION_FACTOR_PROP, "int", 3, at_least(1),
              "Accepted for Kafka compatibility; a single broker stores one replica."),
    ConfigKey(REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP, "int", 50, at_least(1),
              "Partitions of __remote_log_metadata; must never change once the topic exists."),
    ConfigKey(REMOTE_LOG_METADATA_TOPIC_RETENTION_MS_PROP, "long", -1,
              lambda v: None if v == -1 or v > 0 else "must be -1 (unlimited) or positive"),
    ConfigKey(REMOTE_LOG_METADATA_CONSUME_WAIT_MS_PROP, "long", 120_000, at_least(0),
              "How long a write waits for its record to be readable and applied."),
    ConfigKey(REMOTE_LOG_METADATA_INITIALIZATION_RETRY_MAX_TIMEOUT_MS_PROP, "long", 120_000, at_least(0)),
    ConfigKey(REMOTE_LOG_METADATA_INITIALIZATION_RETRY_INTERVAL_MS_PROP, "long", 100, at_least(0)),
    ConfigKey(REMOTE_LOG_METADATA_SNAPSHOT_ENABLE_PROP, "bool", True),
    ConfigKey(REMOTE_LOG_METADATA_SNAPSHOT_INTERVAL_MS_PROP, "long", 60_000, at_least(1)),
    ConfigKey(REMOTE_LOG_METADATA_SNAPSHOT_EVENTS_PROP, "int", 10_000, at_least(1)),
    ConfigKey(LOG_DIR_PROP, "string", None),
    ConfigKey(BROKER_ID_PROP, "int", -1),
])


@dataclass(frozen=True, slots=True)
class TopicBasedRemoteLogMetadataManagerConfig:
    log_dir: Path
    broker_id: int = -1
    metadata_topic_partitions_count: int = 50
    metadata_topic_retention_ms: int = -1
    metadata_topic_replication_factor: int = 3
    consume_wait_ms: int = 120_000
    initialization_retry_max_timeout_ms: int = 120_000
    initialization_retry_interval_ms: int = 100
    snapshot_enable: bool = True
    snapshot_interval_ms: int = 60_000
    snapshot_events: int = 10_000

    @classmethod
    def from_configs(cls, configs: Mapping[str, Any]) -> TopicBasedRemoteLogMetadataManagerConfig:
        """Parse the ``rlmm.config.*`` props; unknown keys (client prefixes etc.) are accepted and ignored."""
        v = _CONFIG.parse(configs, allow_unknown=True)
        if not v[LOG_DIR_PROP]:
            raise InvalidConfigError(f"{LOG_DIR_PROP} can not be null or empty")
        return cls(
            log_dir=Path(v[LOG_DIR_PROP]),
            broker_id=v[BROKER_ID_PROP],
            metadata_topic_partitions_count=v[REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP],
            metadata_topic_retention_ms=v[REMOTE_LOG_METADATA_TOPIC_RETENTION_MS_PROP],
            metadata_topic_replication_factor=v[REMOTE_LOG_METADATA_TOPIC_REPLICATION_FACTOR_PROP],
            consume_wait_ms=v[REMOTE_LOG_METADATA_CONSUME_WAIT_MS_PROP],
            initialization_retry_max_timeout_ms=v[REMOTE_LOG_METADATA_INITIALIZATION_RETRY_MAX_TIMEOUT_MS_PROP],
            initialization_retry_interval_ms=v[REMOTE_LOG_METADATA_INITIALIZATION_RETRY_INTERVAL_MS_PROP],
            snapshot_enable=v[REMOTE_LOG_METADATA_SNAPSHOT_ENABLE_PROP],
            snapshot_interval_ms=v[REMOTE_LOG_METADATA_SNAPSHOT_INTERVAL_MS_PROP],
            snapshot_events=v[REMOTE_LOG_METADATA_SNAPSHOT_EVENTS_PROP],
        )


class MetadataTopic(Protocol):
    """The broker's handle on ``__remote_log_metadata`` (replaces Kafka's producer, consumer and admin)."""

    def ensure_created(self, num_partitions: int, retention_ms: int, replication_factor: int) -> int:
        """Create the topic if missing (cleanup.policy=delete, remote.storage.enable=false); its partition count."""
        ...

    def append(self, partition: int, value: bytes) -> int:
        """Append one record (null key); the record's offset once it is durable (acks=all)."""
        ...

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes]]:
        """``(offset, value)`` from ``max(from_offset, start_offset)`` to the current end."""
        ...

    def end_offset(self, partition: int) -> int: ...

    def start_offset(self, partition: int) -> int: ...


@dataclass(slots=True)
class LoadStats:
    """What ``initialize()`` did, for logs, tests and the restart benchmark."""

    snapshot_loaded: bool = False
    snapshot_error: str | None = None
    snapshot_user_partitions: int = 0
    snapshot_segments: int = 0
    full_replay_partitions: list[int] = field(default_factory=list)  # metadata partitions the snapshot could not serve
    records_replayed: int = 0
    duration_s: float = 0.0


POLL_WAIT_MS = 200  # the consumer task's long-poll: how stale a follower's view of the metadata may get
_REPLAY_BATCH = 1024  # records applied per hold of the apply lock while replaying
_NO_OFFSET = -1
_SNAPSHOT_MAGIC = b"SRLM"
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">4shI")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_EPOCH_HEAD = struct.Struct(">iqII")
_TP_TAIL = struct.Struct(">16si")


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """The RLMM over ``__remote_log_metadata``: configure, set_metadata_topic, initialize, then use."""

    def __init__(self) -> None:
        self._config: TopicBasedRemoteLogMetadataManagerConfig | None = None
        self._topic: MetadataTopic | None = None
        self._partitioner: RemoteLogMetadataTopicPartitioner | None = None
        self._store = RemotePartitionMetadataStore()
        # The apply lock: the store's contents, the applied offsets and the partition sets below
        # change only under it, so a snapshot taken under it is one consistent cut.
        self._lock = threading.RLock()
        self._last_applied: list[int] = []  # per metadata partition
        self._loaded: set[int] = set()  # metadata partitions replayed up to their end at startup
        self._stopped: set[TopicIdPartition] = set()  # on_stop_partitions: cache dropped, records ignored
        self._assigned: set[TopicIdPartition] = set()
        self._pending_reload: set[TopicIdPartition] = set()  # stopped, reassigned before their partition loaded
        self._events_since_snapshot = 0
        self._initialize_started = False
        self._all_loaded = threading.Event()
        self._failure: RemoteStorageError | None = None
        self._closing = False
        self._closed = False
        self._init_thread: threading.Thread | None = None
        self._snapshot_thread: threading.Thread | None = None
        self._consumer_thread: threading.Thread | None = None
        self._snapshot_wakeup = threading.Event()
        self._snapshot_write_lock = threading.Lock()
        self._last_snapshot_monotonic = time.monotonic()
        self.load_stats = LoadStats()
        self.last_snapshot_bytes = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, Any]) -> None:
        if self._config is not None:
            log.info("Skipping configure as it is already configured.")
            return
        self._config = TopicBasedRemoteLogMetadataManagerConfig.from_configs(configs)
        self._partitioner = RemoteLogMetadataTopicPartitioner(self._config.metadata_topic_partitions_count)
        self._last_applied = [_NO_OFFSET] * self._config.metadata_topic_partitions_count
        self._store = RemotePartitionMetadataStore()
        log.info("Configured topic-based RLMM: %s", self._config)

    def set_metadata_topic(self, topic: MetadataTopic) -> None:
        self._topic = topic

    @property
    def config(self) -> TopicBasedRemoteLogMetadataManagerConfig:
        if self._config is None:
            raise RemoteStorageError("TopicBasedRemoteLogMetadataManager is not configured")
        return self._config

    @property
    def snapshot_path(self) -> Path:
        return self.config.log_dir / SNAPSHOT_FILE_NAME

    def initialize(self, background: bool = False) -> None:
        """Create or check the topic, then load the metadata (from the snapshot, then the topic's tail).

        The topic check is synchronous either way, so a partition-count mismatch always fails here.
        With ``background=True`` the replay runs on a thread and each user partition becomes ready
        (``is_ready``) once its metadata partition is replayed; reads raise RemoteStorageNotReadyError
        until then.
        """
        config = self.config
        if self._topic is None:
            raise RemoteStorageError("set_metadata_topic() must be called before initialize()")
        if self._closing:
            raise RemoteStorageError("TopicBasedRemoteLogMetadataManager is closed")
        if self._initialize_started:
            return
        self._initialize_started = True
        # In a cluster the topic can only be created once enough brokers have registered, which happens
        # after the broker starts serving: the topic's creation waits on the loading thread there.
        create_later = background and getattr(self._topic, "create_in_background", False)
        try:
            if not create_later:
                self._create_topic()
            config.log_dir.mkdir(parents=True, exist_ok=True)
        except RemoteStorageError as e:
            self._failure = e
            raise
        if config.snapshot_enable:
            self._snapshot_thread = threading.Thread(target=self._snapshot_loop, name="RLMMSnapshotThread",
                                                     daemon=True)
            self._snapshot_thread.start()
        if background:
            self._init_thread = threading.Thread(target=self._load_guarded, args=(True, create_later),
                                                 name="RLMMInitializationThread", daemon=True)
            self._init_thread.start()
        else:
            self._load_guarded()
            if self._failure is not None:
                raise self._failure

    def wait_until_ready(self, timeout_s: float | None = None) -> bool:
        """Block until every metadata partition is loaded (or loading failed); False on timeout."""
        done = self._all_loaded.wait(timeout_s)
        if self._failure is not None:
            raise self._failure
        return done

    def close(self) -> None:
        """Stop the background threads and write a final snapshot if anything changed since the last one."""
        if self._closed:
            return
        self._closing = True
        self._snapshot_wakeup.set()
        for thread in (self._init_thread, self._snapshot_thread, self._consumer_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join()
        if self._config is not None and self._config.snapshot_enable and self._all_loaded.is_set() \
                and self._failure is None and (self._events_since_snapshot > 0 or not self.snapshot_path.exists()):
            self._write_snapshot_logged()
        self._closed = True
        log.info("Closed topic-based RLMM")

    def _create_topic(self) -> None:
        """Kafka's initializeResources: create or verify the topic, retrying until the max timeout."""
        config = self.config
        assert self._topic is not None
        deadline = time.monotonic() + config.initialization_retry_max_timeout_ms / 1000
        while True:
            try:
                actual = self._topic.ensure_created(config.metadata_topic_partitions_count,
                                                    config.metadata_topic_retention_ms,
                                                    config.metadata_topic_replication_factor)
                break
            except Exception as e:  # noqa: BLE001 - any failure to reach the topic is retried until the deadline
                if time.monotonic() >= deadline or self._closing:
                    raise RemoteStorageError(f"Timed out in initializing the resources: cannot create or describe "
                                             f"{REMOTE_LOG_METADATA_TOPIC_NAME}: {e}") from e
                log.info("Cannot create %s (%s); retrying in %d ms", REMOTE_LOG_METADATA_TOPIC_NAME, e,
                         config.initialization_retry_interval_ms)
                time.sleep(config.initialization_retry_interval_ms / 1000)
        if actual != config.metadata_topic_partitions_count:
            raise RemoteStorageError(
                f"Existing topic partition count {actual} of {REMOTE_LOG_METADATA_TOPIC_NAME} is not same as the "
                f"configured {REMOTE_LOG_METADATA_TOPIC_PARTITIONS_PROP}={config.metadata_topic_partitions_count}. "
                "The partition count of the metadata topic must never change; restore the configured value.")

    # -- loading ---------------------------------------------------------------------------------

    def _load_guarded(self, background: bool = False, create_first: bool = False) -> None:
        try:
            if create_first:
                self._create_topic()
            self._load(background)
        except Exception as e:
            log.exception("Loading the remote log metadata failed")
            self._failure = e if isinstance(e, RemoteStorageError) else \
                RemoteStorageError(f"loading {REMOTE_LOG_METADATA_TOPIC_NAME} failed: {e}")
            self._all_loaded.set()  # waiters wake up and see the failure

    def _load(self, background: bool = False) -> None:
        """Restore the snapshot, then replay every metadata partition's tail.

        The cyclic GC is paused while the snapshot is decoded (and, in a foreground load, during the
        replay): loading allocates hundreds of thousands of long-lived, acyclic objects, and each
        full collection meanwhile rescans all of them (measured: 35-40% of a snapshot load).
        """
        with _gc_paused(not background):
            self._load_snapshot_and_replay(background)

    def _load_snapshot_and_replay(self, background: bool) -> None:
        started = time.perf_counter()
        config, topic, partitioner = self.config, self._topic, self._partitioner
        assert topic is not None and partitioner is not None
        stats = LoadStats()
        with _gc_paused(background):  # a foreground load has paused it already
            snapshot = self._read_snapshot(stats) if config.snapshot_enable else None
        # The topic is asked outside the apply lock (its calls may hop onto the broker's event loop).
        spans = [(topic.start_offset(p), topic.end_offset(p)) for p in range(config.metadata_topic_partitions_count)] \
            if snapshot is not None else []
        with self._lock:
            if snapshot is not None:
                dropped: set[int] = set()
                for p, offset in enumerate(snapshot.offsets):
                    start, end = spans[p]
                    # Replay from offset + 1 only if the partition still holds it and nothing before it
                    # is missing: retention past the snapshot, or a recreated topic, means a full replay.
                    if start > offset + 1 or end < offset + 1:
                        log.warning("The RLMM snapshot is at offset %d of %s-%d but the partition now spans "
                                    "[%d, %d): replaying that partition in full", offset,
                                    REMOTE_LOG_METADATA_TOPIC_NAME, p, start, end)
                        dropped.add(p)
                    else:
                        self._last_applied[p] = offset
                for tp, cache in snapshot.caches.items():
                    if partitioner.metadata_partition(tp) not in dropped:
                        self._store.put_cache(tp, cache)
                        stats.snapshot_user_partitions += 1
                        stats.snapshot_segments += len(cache)
                for md in snapshot.delete_metadata:
                    if partitioner.metadata_partition(md.topic_id_partition) not in dropped:
                        self._store.handle_remote_partition_delete_metadata(md)
                self._stopped.update(tp for tp in snapshot.stopped if partitioner.metadata_partition(tp) not in dropped)
                stats.full_replay_partitions = sorted(dropped)
            self._events_since_snapshot = 0
        for p in range(config.metadata_topic_partitions_count):
            if self._closing:
                return
            stats.records_replayed += self._replay(p)
            self._finish_partition_load(p)
        stats.duration_s = time.perf_counter() - started
        self.load_stats = stats
        self._all_loaded.set()
        if getattr(topic, "poll", None) is not None and not self._closing:
            self._consumer_thread = threading.Thread(target=self._consume_loop, name="RLMMConsumerTask",
                                                     daemon=True)
            self._consumer_thread.start()
        log.info("Loaded remote log metadata in %.3f s: %d records replayed, snapshot %s (%d segments)",
                 stats.duration_s, stats.records_replayed, "used" if stats.snapshot_loaded else "not used",
                 stats.snapshot_segments)
        if self._events_since_snapshot >= config.snapshot_events:
            self._snapshot_wakeup.set()  # a long replay: snapshot soon so the next restart is short

    def _replay(self, partition: int) -> int:
        """Apply the partition's records after the last applied one; returns how many were applied."""
        assert self._topic is not None
        # Read and decode outside the apply lock (the broker's topic reads hop onto its event loop);
        # apply in batches under it, so writers of loaded partitions are never held up for long.
        records = iter(self._topic.read(partition, self._last_applied[partition] + 1))
        applied = 0
        while not self._closing:
            batch = [(offset, self._decode(partition, offset, value))
                     for offset, value in itertools.islice(records, _REPLAY_BATCH)]
            if not batch:
                break
            with self._lock:
                for offset, md in batch:
                    if self._apply(partition, offset, md):
                        applied += 1
        return applied

    def _finish_partition_load(self, partition: int) -> None:
        assert self._partitioner is not None
        with self._lock:
            self._loaded.add(partition)
            for tp, cache in self._store.items():
                if self._partitioner.metadata_partition(tp) == partition:
                    cache.mark_initialized()
            reload = [tp for tp in self._pending_reload if self._partitioner.metadata_partition(tp) == partition]
            self._pending_reload.difference_update(reload)
        for tp in reload:
            self._reload_partition(tp)

    # -- consuming other brokers' writes (cluster) --------------------------------------------------

    def _subscribed_partitions(self) -> set[int]:
        """Kafka's subscription: the metadata partitions holding an assigned user partition (leader or
        follower). A metadata partition dropped and subscribed again resumes after its last applied
        offset, so nothing written meanwhile is missed."""
        assert self._partitioner is not None
        with self._lock:
            return {self._partitioner.metadata_partition(tp) for tp in self._assigned | self._pending_reload}

    def _consume_loop(self) -> None:
        """Kafka's ``ConsumerTask``: in a cluster other brokers write metadata too (the leaders of the
        user partitions this broker follows); their records are applied as they become committed.
        ``poll`` long-polls the partitions' leaders, so an idle loop costs one request per leader per
        ``POLL_WAIT_MS``."""
        assert self._topic is not None
        poll = self._topic.poll  # type: ignore[attr-defined]
        failures = 0
        while not self._closing:
            partitions = self._subscribed_partitions()
            if not partitions:
                time.sleep(POLL_WAIT_MS / 1000)
                continue
            try:
                batches = poll({p: self._last_applied[p] + 1 for p in partitions}, POLL_WAIT_MS)
                failures = 0
            except Exception as e:  # noqa: BLE001 - a leader moving or a broker down: retried
                failures += 1
                level = logging.WARNING if failures == 1 or failures % 100 == 0 else logging.DEBUG
                log.log(level, "Polling %s failed (%d in a row): %s", REMOTE_LOG_METADATA_TOPIC_NAME, failures, e)
                time.sleep(min(1.0, 0.05 * failures))
                continue
            for partition, records in batches.items():
                decoded = [(offset, self._decode(partition, offset, value)) for offset, value in records]
                with self._lock:
                    for offset, md in decoded:
                        self._apply(partition, offset, md)

    def sync(self, tp: TopicIdPartition) -> None:
        """Apply every committed record of ``tp``'s metadata partition now (read to its current end).

        A new leader calls this before deciding where copying resumes, and an uploader before it
        completes an upload: decisions made on a cache that lags other brokers' writes would upload a
        segment twice or keep one another broker began to delete."""
        self._check_usable()
        assert self._partitioner is not None
        partition = self._partitioner.metadata_partition(tp)
        if partition in self._loaded:
            self._replay(partition)

    # -- the one way into the cache ---------------------------------------------------------------

    def _decode(self, partition: int, offset: int, value: bytes | None) -> RemoteLogMetadata | None:
        try:
            md = deserialize(value)  # type: ignore[arg-type]
        except ValueError as e:
            log.error("Skipping the undecodable record at offset %d of %s-%d: %s", offset,
                      REMOTE_LOG_METADATA_TOPIC_NAME, partition, e)
            return None
        if isinstance(md, RemoteLogSegmentMetadataSnapshot):
            log.error("Skipping the RemoteLogSegmentMetadataSnapshotRecord at offset %d of %s-%d: it is not an event",
                      offset, REMOTE_LOG_METADATA_TOPIC_NAME, partition)
            return None
        return md

    def _apply(self, partition: int, offset: int, md: RemoteLogMetadata | None,
               only: TopicIdPartition | None = None) -> bool:
        """Apply the record at ``offset`` of ``partition`` to the cache; False if it was already applied.

        Every record reaches the cache through here, from the startup replay and from the write path
        alike, in offset order per metadata partition. ``only`` re-applies the already-applied
        records of one user partition whose cache was dropped (reassignment after a stop).
        Caller holds the apply lock.
        """
        if only is None:
            if offset <= self._last_applied[partition]:
                return False
            self._last_applied[partition] = offset
            self._events_since_snapshot += 1
            if self._events_since_snapshot == self.config.snapshot_events:
                self._snapshot_wakeup.set()
            if md is None or md.topic_id_partition in self._stopped:
                return True
        elif md is None or md.topic_id_partition != only:
            return True
        try:
            self._store.handle_remote_log_metadata(md)
        except (ValueError, RemoteStorageError) as e:  # an event the cache refuses: Kafka logs it too
            log.error("Dropping the event at offset %d of %s-%d: %s", offset, REMOTE_LOG_METADATA_TOPIC_NAME,
                      partition, e)
        if only is None and partition in self._loaded:  # a partition first seen after loading: ready at once
            cache = self._store.get(md.topic_id_partition)
            if cache is not None and not cache.is_initialized():
                cache.mark_initialized()
        return True

    def _reload_partition(self, tp: TopicIdPartition) -> None:
        """Rebuild a stopped partition's cache from its metadata partition, then track it again.

        The partition stays stopped (its new records skipped) until its earlier records are applied,
        so the cache sees every event once and in order. The read happens outside the apply lock.
        """
        assert self._topic is not None and self._partitioner is not None
        partition = self._partitioner.metadata_partition(tp)
        records = list(self._topic.read(partition, 0))
        exhausted = False
        while True:
            with self._lock:
                if tp not in self._stopped or tp not in self._assigned:
                    return  # stopped again meanwhile
                last = self._last_applied[partition]
                covered = records[-1][0] if records else _NO_OFFSET
                if covered >= last or exhausted:
                    self._stopped.discard(tp)
                    self._store.clear_topic_partition(tp)
                    cache = self._store.maybe_load_partition(tp)  # not initialised while replaying (Kafka's rule)
                    for offset, value in records:
                        if offset > last:
                            break
                        self._apply(partition, offset, self._decode(partition, offset, value), only=tp)
                    cache.mark_initialized()
                    return
            more = list(self._topic.read(partition, covered + 1))  # records applied since the first read
            if not more:
                log.warning("%s-%d no longer holds offsets up to %d; reloading %s from what it holds",
                            REMOTE_LOG_METADATA_TOPIC_NAME, partition, last, tp)
                exhausted = True
            records.extend(more)

    # -- write path -------------------------------------------------------------------------------

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"Given remoteLogSegmentMetadata should have state as "
                             f"{RemoteLogSegmentState.COPY_SEGMENT_STARTED.name} but it contains state as: "
                             f"{metadata.state.name}")
        self._check_writable(metadata.topic_id_partition)
        self._store_remote_log_metadata(metadata.topic_id_partition, metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"Given remoteLogSegmentMetadata should not have the state as: "
                             f"{RemoteLogSegmentState.COPY_SEGMENT_STARTED.name}")
        tp = update.topic_id_partition
        self._check_writable(tp)
        cache = self._store.get(tp)
        if cache is None or cache.segment_metadata(update.remote_log_segment_id) is None:
            raise RemoteResourceNotFoundError(
                f"No remote log segment metadata found for :{update.remote_log_segment_id}")
        self._store_remote_log_metadata(tp, update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._check_writable(metadata.topic_id_partition)
        self._store_remote_log_metadata(metadata.topic_id_partition, metadata)

    def _check_writable(self, tp: TopicIdPartition) -> None:
        self._check_usable()
        assert self._partitioner is not None
        partition = self._partitioner.metadata_partition(tp)
        if partition not in self._loaded:
            raise RemoteStorageNotReadyError(f"Remote log metadata of {tp} is still loading "
                                             f"({REMOTE_LOG_METADATA_TOPIC_NAME}-{partition})")
        if tp in self._stopped:
            # Its events would be skipped, so the caller could not read its write (Kafka fails these
            # writes too: the partition is no longer assigned to the broker's consumer).
            raise RemoteStorageError(f"{tp} is stopped (on_stop_partitions); assign it again before writing")

    def _store_remote_log_metadata(self, tp: TopicIdPartition, md: RemoteLogMetadata) -> None:
        """Append the event, then catch its metadata partition up to it, so the caller reads its write."""
        assert self._topic is not None and self._partitioner is not None
        value = serialize(md)
        partition = self._partitioner.metadata_partition(tp)
        log.debug("Storing the partition: %s metadata: %s", tp, md)
        try:
            offset = self._topic.append(partition, value)
        except RemoteStorageError:
            raise
        except Exception as e:
            raise RemoteStorageError(f"cannot append to {REMOTE_LOG_METADATA_TOPIC_NAME}-{partition}: {e}") from e
        crash_point("rlmm.append.after_write")  # the event is in the topic, not yet in the cache
        self._wait_till_consumption_catches_up(partition, offset, md)

    def _wait_till_consumption_catches_up(self, partition: int, offset: int, md: RemoteLogMetadata) -> None:
        assert self._topic is not None
        deadline = time.monotonic() + self.config.consume_wait_ms / 1000
        while True:
            last = self._last_applied[partition]
            if last >= offset:
                return
            # Read outside the apply lock, apply under it: the read covers everything after ``last``, and
            # records another thread applied meanwhile are skipped, so the order stays the topic's.
            records = list(self._topic.read(partition, last + 1))
            with self._lock:
                for off, value in records:
                    # Our own record is applied as the object we were given (it round-trips exactly).
                    self._apply(partition, off, md if off == offset else self._decode(partition, off, value))
                if self._last_applied[partition] >= offset:
                    return
            if time.monotonic() >= deadline:
                raise RemoteStorageError(f"Timed out after {self.config.consume_wait_ms} ms waiting for offset "
                                         f"{offset} of {REMOTE_LOG_METADATA_TOPIC_NAME}-{partition} to be readable")
            time.sleep(0.01)

    # -- reads ------------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closing:
            raise RemoteStorageError("This instance is in closing state")
        if self._failure is not None:
            raise self._failure
        if not self._initialize_started:
            raise RemoteStorageNotReadyError("TopicBasedRemoteLogMetadataManager is not initialized yet")

    def _cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        self._check_usable()
        assert self._partitioner is not None
        if self._partitioner.metadata_partition(tp) not in self._loaded:
            raise RemoteStorageNotReadyError(f"Remote log metadata cache is not initialized for partition: {tp}")
        return self._store.cache_for_read(tp)

    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        return self._cache(tp).remote_log_segment_metadata(epoch_for_offset, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        return self._cache(tp).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        cache = self._cache(tp)
        if leader_epoch is None:
            return cache.list_all_remote_log_segments()
        return cache.list_remote_log_segments(leader_epoch)

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        return self._cache(tp).remote_log_size(leader_epoch)

    def next_segment_with_txn_index(self, tp: TopicIdPartition, epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        return self._cache(tp).next_segment_with_txn_index(epoch, offset)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        if self._closing or self._failure is not None or self._partitioner is None:
            return False
        return self._partitioner.metadata_partition(tp) in self._loaded and self._store.is_initialized(tp)

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        if self._partitioner is None:
            raise RemoteStorageError("TopicBasedRemoteLogMetadataManager is not configured")
        return self._partitioner.metadata_partition(tp)

    def read_offset_for_partition(self, metadata_partition: int) -> int | None:
        """Kafka's ``readOffsetForPartition``: the last applied offset of a metadata partition."""
        offset = self._last_applied[metadata_partition]
        return None if offset == _NO_OFFSET else offset

    # -- partition tracking -----------------------------------------------------------------------

    def on_partition_leadership_changes(self, leaders: set[TopicIdPartition],
                                        followers: set[TopicIdPartition]) -> None:
        """Track the partitions; a partition stopped earlier is reloaded from the topic."""
        if self._closing:
            raise RemoteStorageError("This instance is in closing state")
        log.info("Received leadership notifications with leader partitions %s and follower partitions %s",
                 leaders, followers)
        assert self._partitioner is not None, "configure() first"
        reload = []
        with self._lock:
            for tp in set(leaders) | set(followers):
                self._assigned.add(tp)
                loaded = self._partitioner.metadata_partition(tp) in self._loaded
                if tp in self._stopped:
                    if loaded:
                        reload.append(tp)
                    else:
                        self._pending_reload.add(tp)  # its records are skipped until then; reload in full
                elif tp not in self._pending_reload:
                    self._store.maybe_load_partition(tp, initialized=loaded)
        on_loop = _on_event_loop()
        for tp in reload:
            if not on_loop:
                self._reload_partition(tp)
                continue
            # Called from the broker's event loop: reload on a thread of its own, as Kafka's consumer task does
            # (a cluster's metadata topic reads through that loop: reading from the loop itself would wait on
            # it forever). The partition is not ready (is_ready) until it is reloaded.
            threading.Thread(target=self._reload_quietly, args=(tp,), name=f"RLMMReload-{tp.topic}-{tp.partition}",
                             daemon=True).start()

    def _reload_quietly(self, tp: TopicIdPartition) -> None:
        try:
            self._reload_partition(tp)
        except Exception:  # noqa: BLE001 - stays not ready; assigning it again retries
            log.exception("Reloading the remote log metadata of %s failed", tp)

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        """Drop the partitions' caches and ignore their events until they are assigned again.

        A partition this RLMM never saw - no cache, not assigned, and its metadata partition loaded, so
        the topic holds no record of it (say, one of a deleted topic that never tiered) - has nothing to
        drop or ignore: it is not remembered as stopped (that set is kept in every snapshot).
        """
        if self._closing:
            raise RemoteStorageError("This instance is in closing state")
        assert self._partitioner is not None, "configure() first"
        with self._lock:
            for tp in partitions:
                known = tp in self._assigned or tp in self._pending_reload or self._store.get(tp) is not None \
                    or self._partitioner.metadata_partition(tp) not in self._loaded
                self._assigned.discard(tp)
                self._pending_reload.discard(tp)
                self._store.clear_topic_partition(tp)
                if known:
                    self._stopped.add(tp)

    @property
    def assigned_partitions(self) -> set[TopicIdPartition]:
        return set(self._assigned)

    def known_partitions(self) -> set[TopicIdPartition]:
        """Every user partition with metadata in the cache (found at load, or written since):
        the broker deletes the remote data of those whose topic no longer exists."""
        with self._lock:
            return {tp for tp, _ in self._store.items()}

    # -- snapshot ---------------------------------------------------------------------------------

    def _snapshot_loop(self) -> None:
        interval_s = self.config.snapshot_interval_ms / 1000
        while not self._closing:
            self._snapshot_wakeup.wait(interval_s)
            self._snapshot_wakeup.clear()
            if self._closing:
                return
            due = self._events_since_snapshot >= self.config.snapshot_events or \
                time.monotonic() - self._last_snapshot_monotonic >= interval_s
            if due and self._events_since_snapshot > 0 and self._all_loaded.is_set() and self._failure is None:
                self._write_snapshot_logged()

    def _write_snapshot_logged(self) -> None:
        try:
            self.snapshot_now()
        except Exception:  # noqa: BLE001 - a failed snapshot only makes the next restart slower
            log.exception("Writing the RLMM snapshot %s failed", self.snapshot_path)

    def snapshot_now(self) -> int:
        """Write the snapshot file now; returns its size in bytes (0 if the metadata is not loaded yet)."""
        with self._snapshot_write_lock:
            with self._lock:
                if not self._all_loaded.is_set() or self._failure is not None:
                    return 0
                offsets = list(self._last_applied)
                caches = [(tp, cache.snapshot()) for tp, cache in self._store.items()]
                delete_metadata = self._store.delete_metadata_items()
                stopped = sorted(self._stopped | self._pending_reload, key=_tp_sort_key)
                events = self._events_since_snapshot
                self._events_since_snapshot = 0
            try:
                data = _encode_snapshot(offsets, stopped, delete_metadata, caches)
                atomic_write(self.snapshot_path, data)
            except (KafkaStorageError, ValueError):
                with self._lock:
                    self._events_since_snapshot += events  # still dirty: the next attempt writes them
                raise
            self._last_snapshot_monotonic = time.monotonic()
            self.last_snapshot_bytes = len(data)
            log.info("Wrote the RLMM snapshot %s: %d bytes, %d user partitions", self.snapshot_path, len(data),
                     len(caches))
            return len(data)

    def _read_snapshot(self, stats: LoadStats) -> _Snapshot | None:
        path = self.snapshot_path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            stats.snapshot_error = f"cannot read: {e}"
            log.warning("Ignoring the RLMM snapshot %s (%s): replaying %s in full", path, e,
                        REMOTE_LOG_METADATA_TOPIC_NAME)
            return None
        try:
            snapshot = _decode_snapshot(data, self.config.metadata_topic_partitions_count)
        except ValueError as e:
            stats.snapshot_error = str(e)
            log.warning("Ignoring the RLMM snapshot %s (%s): replaying %s in full", path, e,
                        REMOTE_LOG_METADATA_TOPIC_NAME)
            return None
        stats.snapshot_loaded = True
        return snapshot


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextmanager
def _gc_paused(pause: bool = True) -> Iterator[None]:
    """Pause the cyclic garbage collector (process-wide) for a bounded bulk load; restore its state after."""
    was_enabled = gc.isenabled()
    if pause and was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if pause and was_enabled:
            gc.enable()


# -- snapshot file encoding ------------------------------------------------------------------------


@dataclass(slots=True)
class _Snapshot:
    offsets: list[int]
    stopped: list[TopicIdPartition]
    delete_metadata: list[RemotePartitionDeleteMetadata]
    caches: dict[TopicIdPartition, RemoteLogMetadataCache]


def _tp_sort_key(tp: TopicIdPartition) -> tuple[str, int, bytes]:
    return tp.topic, tp.partition, tp.topic_id.bytes


def _encode_tp(tp: TopicIdPartition) -> bytes:
    name = tp.topic.encode("utf-8")
    return encode_uvarint(len(name)) + name + _TP_TAIL.pack(tp.topic_id.bytes, tp.partition)


def _read_tp(r: ByteReader) -> TopicIdPartition:
    name = r.take(r.uvarint("topic name length"), "topic name")
    topic_id, partition = r.fixed(_TP_TAIL, "topic id/partition")
    try:
        return TopicIdPartition(uuid.UUID(bytes=topic_id), name.decode("utf-8"), partition)
    except UnicodeDecodeError as e:
        raise r.error("topic name", f"not UTF-8: {e}") from None


def _encode_snapshot(offsets: list[int], stopped: Iterable[TopicIdPartition],
                     delete_metadata: list[RemotePartitionDeleteMetadata],
                     caches: list[tuple[TopicIdPartition, tuple[list[RemoteLogSegmentMetadata],
                                                               dict[int, EpochStateSnapshot]]]]) -> bytes:
    out = [_I32.pack(len(offsets)), struct.pack(f">{len(offsets)}q", *offsets)]
    stopped_list = list(stopped)
    out.append(encode_uvarint(len(stopped_list)))
    out.extend(_encode_tp(tp) for tp in stopped_list)
    out.append(encode_uvarint(len(delete_metadata)))
    for md in delete_metadata:
        body = encode_partition_delete_body(md)
        out += (encode_uvarint(len(body)), body)
    out.append(encode_uvarint(len(caches)))
    for tp, (segments, epochs) in caches:
        out.append(_encode_tp(tp))
        bodies = [encode_snapshot_body(RemoteLogSegmentMetadataSnapshot.create(md)) for md in segments]
        out.append(encode_uvarint(len(bodies)))
        out.append(struct.pack(f">{len(bodies)}I", *map(len, bodies)))
        out.extend(bodies)
        index = {md.remote_log_segment_id: i for i, md in enumerate(segments)}
        orphans = list(dict.fromkeys(
            segment_id for state in epochs.values()
            for segment_id in (*state.referenced, *state.unreferenced) if segment_id not in index))
        for segment_id in orphans:
            index[segment_id] = len(index)
        out.append(encode_uvarint(len(orphans)))
        out.extend(segment_id.id.bytes for segment_id in orphans)
        out.append(encode_uvarint(len(epochs)))
        for epoch, state in epochs.items():
            r, u = len(state.referenced), len(state.unreferenced)
            highest = _NO_OFFSET if state.highest_log_offset is None else state.highest_log_offset
            out.append(_EPOCH_HEAD.pack(epoch, highest, r, u))
            out.append(struct.pack(f">{r}q{r + u}I", *state.referenced_offsets,
                                   *(index[i] for i in state.referenced), *(index[i] for i in state.unreferenced)))
    body = b"".join(out)
    return _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, crc32c(body)) + body


def _decode_snapshot(data: bytes, expected_partitions: int) -> _Snapshot:
    """Parse and validate the whole file; ValueError (naming the problem) on any mismatch or corruption."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise ValueError(f"file too short ({len(data)} bytes)")
    magic, version, crc = _SNAPSHOT_HEADER.unpack_from(data)
    if magic != _SNAPSHOT_MAGIC:
        raise ValueError(f"bad magic {magic!r}")
    if version != _SNAPSHOT_VERSION:
        raise ValueError(f"unsupported snapshot version {version}")
    body = data[_SNAPSHOT_HEADER.size:]
    if crc32c(body) != crc:
        raise ValueError("CRC32C mismatch")
    r = ByteReader(body, "RLMM snapshot")
    (n,) = r.fixed(_I32, "metadata partition count")
    if n != expected_partitions:
        raise ValueError(f"written for {n} metadata partitions, configured {expected_partitions}")
    offsets = list(r.fixed(struct.Struct(f">{n}q"), "applied offsets"))
    stopped = [_read_tp(r) for _ in range(r.uvarint("stopped count"))]
    delete_metadata = []
    for _ in range(r.uvarint("partition delete count")):
        size = r.uvarint("partition delete length")
        delete_metadata.append(decode_partition_delete_body(r.take(size, "partition delete record")))
    caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
    for _ in range(r.uvarint("user partition count")):
        tp = _read_tp(r)
        count = r.uvarint("segment count")
        lengths = r.fixed(struct.Struct(f">{count}I"), "segment lengths")
        if sum(lengths) > len(body) - r.pos:
            raise r.error("segments", "lengths exceed the bytes left")
        segments: list[RemoteLogSegmentMetadata] = []
        pos = r.pos
        for size in lengths:
            segments.append(decode_snapshot_metadata(body, pos, pos + size, tp))
            pos += size
        r.pos = pos
        ids = [md.remote_log_segment_id for md in segments]
        ids.extend(RemoteLogSegmentId(tp, uuid.UUID(bytes=r.take(16, "orphan id")))
                   for _ in range(r.uvarint("orphan count")))
        epochs: dict[int, EpochStateSnapshot] = {}
        for _ in range(r.uvarint("epoch count")):
            epoch, highest, n_ref, n_unref = r.fixed(_EPOCH_HEAD, "epoch")
            arrays = r.fixed(struct.Struct(f">{n_ref}q{n_ref + n_unref}I"), "epoch arrays")
            try:
                state = EpochStateSnapshot(None if highest == _NO_OFFSET else highest, list(arrays[:n_ref]),
                                           [ids[i] for i in arrays[n_ref:2 * n_ref]],
                                           [ids[i] for i in arrays[2 * n_ref:]])
            except IndexError:
                raise r.error("epoch arrays", f"a segment index is out of range ({len(ids)} ids)") from None
            epochs[epoch] = state
        caches[tp] = RemoteLogMetadataCache.restore(segments, epochs)
    r.finish()
    return _Snapshot(offsets, stopped, delete_metadata, caches)
