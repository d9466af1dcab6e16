"""Kafka's ``TopicBasedRemoteLogMetadataManager`` for a single broker, plus a local snapshot.

Kafka's design, kept: every metadata event is a record (serde.py bytes) in the internal topic
``__remote_log_metadata``, in the partition the :class:`RemoteLogMetadataTopicPartitioner` picks
for its user partition; the in-memory :class:`RemoteLogMetadataCache` of each user partition is
filled only by applying those records in offset order; a write returns once the broker's own cache
has applied it (read-your-writes).

KIP-1266, so the topic stays small: records are keyed (``keys.py``: a segment's base record, its
latest update, a partition's delete metadata; Strata's keys end with the segment id, unlike
Kafka's, see there why) and the topic is created compacted. Once a segment is DELETE_SEGMENT_FINISHED
the writer appends tombstones for its base key, then its update key (that order: a cleaning that
stops between them leaves no base record without its final update), so the cleaner removes it after
``delete.retention.ms``; after DELETE_PARTITION_FINISHED, tombstones for the partition's remaining
segments and its delete key. Replaying a compacted topic sees, per live segment, the base record
then the latest update (a base record is written once and stays below its updates), which rebuilds
the same segments, states and readable ranges as the full history; only what deleted segments left
in the per-epoch state is gone (an epoch whose segments are all deleted, a highest offset held by a
segment no longer COPY_SEGMENT_FINISHED). Two rules make a partial history apply cleanly:

* a DELETE_SEGMENT_FINISHED for a segment still COPY_SEGMENT_STARTED/FINISHED first moves it to
  DELETE_SEGMENT_STARTED (the record it replaced under the update key), where Kafka's cache would
  refuse the transition and keep a segment whose data is gone;
* a tombstone is a no-op for a segment or partition the cache does not hold, and is logged and
  ignored for one it holds (only the leader writes tombstones, after the deletion finished: such a
  reader missed records, and dropping live metadata would orphan remote data, keeping it costs at
  most a second, idempotent deletion).

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

The snapshot file's format - version 2 since issue 28: each cache's columns, mapped and adopted as
they are at load; version 1 files are still read - is ``snapshot.py``'s docstring.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from strata.common.crashpoints import crash_point
from strata.config.defs import ConfigDef, ConfigKey, at_least
from strata.errors import InvalidConfigError, KafkaStorageError
from strata.tiered.api import (
    RemoteLogMetadata,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
    TopicIdPartition,
)
from strata.tiered.metadata.cache import RemoteLogMetadataCache, RemotePartitionMetadataStore
from strata.tiered.metadata.keys import (
    KeyKind,
    Tombstone,
    compacted_away_delete_started,
    parse_key,
    partition_delete_key,
    segment_key,
    segment_update_key,
)
from strata.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from strata.tiered.metadata.serde import (
    RemoteLogSegmentMetadataSnapshot,
    deserialize,
    serialize,
)
from strata.tiered.metadata.snapshot import RlmmSnapshot, encode_snapshot, read_snapshot, tp_sort_key, write_snapshot

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
        """Create the topic if missing (``keys.new_topic_configs``: compacted, remote.storage.enable=false);
        its partition count. An existing topic keeps its configs (a delete-policy one stays version 0 until
        ``strata remote-log-metadata-migration`` moves it)."""
        ...

    def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        """Append one record (``value`` None: a tombstone); its offset once it is durable (acks=all)."""
        ...

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        """``(offset, key, value)`` from ``max(from_offset, start_offset)`` to the current end, tombstones
        included. A compacted topic has offset gaps; ``(offset, None, None)`` may mark a position without a
        record (a batch the cleaner emptied), so the reader's position moves past it."""
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
            stats.records_replayed += self._replay(p, stats)
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

    def _replay(self, partition: int, stats: LoadStats | None = None) -> int:
        """Apply the partition's records after the last applied one; returns how many were applied."""
        assert self._topic is not None
        # Read and decode outside the apply lock (the broker's topic reads hop onto its event loop);
        # apply in batches under it, so writers of loaded partitions are never held up for long.
        records = iter(self._topic.read(partition, self._last_applied[partition] + 1))
        if partition not in self._loaded and self._last_applied[partition] != _NO_OFFSET:
            records = self._check_resumed_replay(partition, list(records), stats)
        applied = 0
        while not self._closing:
            batch = [(offset, self._decode(partition, offset, value, key))
                     for offset, key, value in itertools.islice(records, _REPLAY_BATCH)]
            if not batch:
                break
            with self._lock:
                for offset, md in batch:
                    if self._apply(partition, offset, md):
                        applied += 1
        return applied

    def _check_resumed_replay(self, partition: int, records: list[tuple[int, bytes | None, bytes | None]],
                              stats: LoadStats | None) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        """The records after the snapshot's offset, if none of them was compacted away; else the whole partition,
        its state from the snapshot dropped. A snapshot is a consumer's position: after it the cleaner may have
        removed a segment's DELETE_SEGMENT_FINISHED and then, past ``delete.retention.ms``, its tombstones, and
        a replay of what is left would keep that segment for ever. Nothing but compaction leaves an offset
        without a record in this topic (no transactions, no control batches), so a gap is the proof."""
        expected = self._last_applied[partition] + 1
        for offset, _key, _value in records:
            if offset != expected:
                break
            expected += 1
        else:
            return iter(records)
        assert self._partitioner is not None and self._topic is not None
        log.warning("Records after offset %d of %s-%d, where the RLMM snapshot stopped, were compacted away since: "
                    "replaying that partition in full", self._last_applied[partition], REMOTE_LOG_METADATA_TOPIC_NAME,
                    partition)
        with self._lock:
            for tp in self._store.partitions():
                if self._partitioner.metadata_partition(tp) == partition:
                    self._store.clear_topic_partition(tp)
                    if tp in self._assigned:
                        self._store.maybe_load_partition(tp)
            for tp in self._store.delete_metadata_items():
                if self._partitioner.metadata_partition(tp.topic_id_partition) == partition:
                    self._store.clear_topic_partition(tp.topic_id_partition)
            self._stopped.difference_update([tp for tp in self._stopped
                                             if self._partitioner.metadata_partition(tp) == partition])
            self._last_applied[partition] = _NO_OFFSET
        if stats is not None:
            stats.full_replay_partitions = sorted({*stats.full_replay_partitions, partition})
        return iter(self._topic.read(partition, 0))

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
                decoded = [(offset, self._decode(partition, offset, value, key)) for offset, key, value in records]
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

    def _decode(self, partition: int, offset: int, value: bytes | None,
                key: bytes | None = None) -> RemoteLogMetadata | Tombstone | None:
        """The event a record holds, a :class:`Tombstone` for a null value, None for what cannot be applied."""
        if value is None:
            if key is None:
                return None
            try:
                return Tombstone(parse_key(key))
            except ValueError as e:
                log.warning("Skipping the tombstone at offset %d of %s-%d: %s", offset, REMOTE_LOG_METADATA_TOPIC_NAME,
                            partition, e)
                return None
        try:
            md = deserialize(value)
        except ValueError as e:
            log.error("Skipping the undecodable record at offset %d of %s-%d: %s", offset,
                      REMOTE_LOG_METADATA_TOPIC_NAME, partition, e)
            return None
        if isinstance(md, RemoteLogSegmentMetadataSnapshot):
            log.error("Skipping the RemoteLogSegmentMetadataSnapshotRecord at offset %d of %s-%d: it is not an event",
                      offset, REMOTE_LOG_METADATA_TOPIC_NAME, partition)
            return None
        return md

    def _apply(self, partition: int, offset: int, md: RemoteLogMetadata | Tombstone | None,
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
        if isinstance(md, Tombstone):
            self._apply_tombstone(partition, offset, md)
            return True
        try:
            self._bridge_compacted_delete(md)
            self._store.handle_remote_log_metadata(md)
        except (ValueError, RemoteStorageError) as e:  # an event the cache refuses: Kafka logs it too
            log.error("Dropping the event at offset %d of %s-%d: %s", offset, REMOTE_LOG_METADATA_TOPIC_NAME,
                      partition, e)
        if only is None and partition in self._loaded:  # a partition first seen after loading: ready at once
            cache = self._store.get(md.topic_id_partition)
            if cache is not None and not cache.is_initialized():
                cache.mark_initialized()
        return True

    def _bridge_compacted_delete(self, md: RemoteLogMetadata) -> None:
        """``keys.compacted_away_delete_started``: a DELETE_SEGMENT_FINISHED for a segment still COPY_SEGMENT_*
        here goes through the DELETE_SEGMENT_STARTED compaction removed. Caller holds the apply lock."""
        started = compacted_away_delete_started(self._store, md)
        if started is not None:
            log.debug("Applying DELETE_SEGMENT_STARTED before the DELETE_SEGMENT_FINISHED of %s: its record was "
                      "compacted away", started.remote_log_segment_id)
            self._store.handle_remote_log_metadata(started)

    def _apply_tombstone(self, partition: int, offset: int, tombstone: Tombstone) -> None:
        """A tombstone says its segment (or partition delete metadata) is gone: nothing to do when the cache
        does not hold it (never seen, or deleted by the DELETE_SEGMENT_FINISHED / DELETE_PARTITION_FINISHED the
        writer applied before writing it). One it still holds is kept, with a warning: tombstones are written
        only after the deletion finished, so this reader missed records (compacted away after the position it
        resumed from); dropping live metadata would orphan remote data, keeping it costs at most a deletion
        that the leader's retention repeats (deleting is idempotent). Caller holds the apply lock."""
        key = tombstone.key
        tp = key.topic_id_partition
        segment_id = key.remote_log_segment_id
        if segment_id is not None:
            cache = self._store.get(tp)
            live = cache.segment_metadata(segment_id) if cache is not None else None
            if live is not None:
                log.warning("Keeping %s (%s): the tombstone for its %s key at offset %d of %s-%d came before this "
                            "broker applied its DELETE_SEGMENT_FINISHED (records it never read were compacted away)",
                            segment_id, live.state.name, "update" if key.kind is KeyKind.SEGMENT_UPDATE else "base",
                            offset, REMOTE_LOG_METADATA_TOPIC_NAME, partition)
            return
        pending = self._store.partition_delete_metadata(tp)
        if pending is not None:
            log.warning("Keeping the %s delete metadata of %s: its tombstone at offset %d of %s-%d came before "
                        "this broker applied its DELETE_PARTITION_FINISHED", pending.state.name, tp, offset,
                        REMOTE_LOG_METADATA_TOPIC_NAME, partition)

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
                    for offset, key, value in records:
                        if offset > last:
                            break
                        self._apply(partition, offset, self._decode(partition, offset, value, key), only=tp)
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
        self._store_remote_log_metadata(metadata.topic_id_partition, metadata, segment_key(metadata))

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"Given remoteLogSegmentMetadata should not have the state as: "
                             f"{RemoteLogSegmentState.COPY_SEGMENT_STARTED.name}")
        tp = update.topic_id_partition
        self._check_writable(tp)
        cache = self._store.get(tp)
        base = cache.segment_metadata(update.remote_log_segment_id) if cache is not None else None
        if base is None:
            raise RemoteResourceNotFoundError(
                f"No remote log segment metadata found for :{update.remote_log_segment_id}")
        self._store_remote_log_metadata(tp, update, segment_update_key(base))
        if update.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            # Base key first: a cleaning that stops between the two keeps the final update, never a lone base.
            self._append_tombstones(tp, [segment_key(base), segment_update_key(base)])

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        tp = metadata.topic_id_partition
        self._check_writable(tp)
        finished = metadata.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        cache = self._store.get(tp) if finished else None
        # Segments the partition's deletion did not move to DELETE_SEGMENT_FINISHED one by one (the cache drops
        # them with the partition): without tombstones their records would outlive it and bring it back in a
        # replay of the compacted topic once the delete metadata's own tombstone is gone.
        leftover = list(cache.list_all_remote_log_segments()) if cache is not None else []
        self._store_remote_log_metadata(tp, metadata, partition_delete_key(tp))
        if finished:
            keys = [key for md in leftover for key in (segment_key(md), segment_update_key(md))]
            self._append_tombstones(tp, [*keys, partition_delete_key(tp)])

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

    def _store_remote_log_metadata(self, tp: TopicIdPartition, md: RemoteLogMetadata, key: bytes) -> None:
        """Append the event, then catch its metadata partition up to it, so the caller reads its write."""
        assert self._topic is not None and self._partitioner is not None
        value = serialize(md)
        partition = self._partitioner.metadata_partition(tp)
        log.debug("Storing the partition: %s metadata: %s", tp, md)
        offset = self._append(partition, value, key)
        crash_point("rlmm.append.after_write")  # the event is in the topic, not yet in the cache
        self._wait_till_consumption_catches_up(partition, offset, md)

    def _append(self, partition: int, value: bytes | None, key: bytes) -> int:
        assert self._topic is not None
        try:
            return self._topic.append(partition, value, key)
        except RemoteStorageError:
            raise
        except Exception as e:
            raise RemoteStorageError(f"cannot append to {REMOTE_LOG_METADATA_TOPIC_NAME}-{partition}: {e}") from e

    def _append_tombstones(self, tp: TopicIdPartition, keys: list[bytes]) -> None:
        """Best effort, as in Kafka: the deletion is durable already, and a missing tombstone only leaves the
        segment's last two records in the compacted topic (a replay still deletes it: ``_bridge_compacted_delete``)."""
        assert self._partitioner is not None
        partition = self._partitioner.metadata_partition(tp)
        try:
            offset = _NO_OFFSET
            for key in keys:
                offset = self._append(partition, None, key)
            self._wait_till_consumption_catches_up(partition, offset, None)
        except RemoteStorageError as e:
            log.warning("Could not write the tombstones of %d keys of %s to %s-%d: their last records stay in the "
                        "compacted topic (a replay still applies them as deleted): %s", len(keys), tp,
                        REMOTE_LOG_METADATA_TOPIC_NAME, partition, e)

    def _wait_till_consumption_catches_up(self, partition: int, offset: int, md: RemoteLogMetadata | None) -> None:
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
                for off, key, value in records:
                    # Our own record is applied as the object we were given (it round-trips exactly).
                    self._apply(partition, off, md if off == offset and md is not None
                                else self._decode(partition, off, value, key))
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
                # Copies of the columns, taken under the apply lock: one consistent cut, encoded outside it.
                caches = [(tp, cache.export_columns()) for tp, cache in self._store.items()]
                delete_metadata = self._store.delete_metadata_items()
                stopped = sorted(self._stopped | self._pending_reload, key=tp_sort_key)
                events = self._events_since_snapshot
                self._events_since_snapshot = 0
            try:
                size = write_snapshot(self.snapshot_path, encode_snapshot(offsets, stopped, delete_metadata, caches))
            except (KafkaStorageError, ValueError):
                with self._lock:
                    self._events_since_snapshot += events  # still dirty: the next attempt writes them
                raise
            self._last_snapshot_monotonic = time.monotonic()
            self.last_snapshot_bytes = size
            log.info("Wrote the RLMM snapshot %s: %d bytes, %d user partitions", self.snapshot_path, size,
                     len(caches))
            if not self._closing:
                # Caches still on the pages of the file this one replaced move to memory of their own,
                # so that file's blocks are freed (a no-op for the others; skipped at shutdown).
                for _, cache in self._store.items():
                    cache.detach()
            return size

    def _read_snapshot(self, stats: LoadStats) -> RlmmSnapshot | None:
        path = self.snapshot_path
        try:
            snapshot = read_snapshot(path, self.config.metadata_topic_partitions_count)
        except FileNotFoundError:
            return None
        except OSError as e:
            stats.snapshot_error = f"cannot read: {e}"
            log.warning("Ignoring the RLMM snapshot %s (%s): replaying %s in full", path, e,
                        REMOTE_LOG_METADATA_TOPIC_NAME)
            return None
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
