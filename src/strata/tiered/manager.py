"""``RemoteLogManager``: copies rolled segments to the remote tier, expires remote data, and
serves reads below the local log start - Kafka's RLM, on Strata's event loop.

Threading: every touch of a ``PartitionLog`` happens on the event loop thread (the log's only
writer); every plugin call (RSM, RLMM) runs on a thread pool - copier, expiration or reader, sized
by Kafka's keys - so a slow object store never stalls produce or local fetches. Each partition has
a copy task and an expiration task (asyncio tasks) that run every
``remote.log.manager.task.interval.ms``; a failed copy backs off exponentially with jitter
(``remote.log.manager.task.retry.*``) instead of retrying at the fixed interval, and so does a failed
expiration run (never sooner than the interval). A store that is down shows as a growing local backlog:
the copy-lag gauges are recorded every interval by a task of their own (also while the copy task backs
off or waits on a hung upload), and a rate-limited WARNING names the partition, the pending segments and
bytes and the last error.

KIP-956 quotas (Kafka 3.9's ``RLMQuotaManager``s, one per direction for the whole broker, changed live by
``update_copy_quota``/``update_fetch_quota``): a copy task waits before each segment while
``remote.log.manager.copy.max.bytes.per.second`` is exceeded, then records the segment's size; the Fetch
handler asks ``is_remote_log_fetch_quota_exceeded`` before reading the remote tier, and each remote read
records the bytes it returned against ``remote.log.manager.fetch.max.bytes.per.second``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from strata.common import Clock, TopicPartition
from strata.common.crashpoints import crash_point
from strata.common.metrics import (
    BROKER_TOPIC_METRICS,
    BrokerTopicMetrics,
    PartitionGauge,
    Registry,
    RemoteStorageMetrics,
    TopicMeter,
    broker_topic_metrics,
    remote_storage_metrics,
)
from strata.config.remote_log_config import RemoteLogManagerConfig
from strata.errors import InvalidConfigError, OffsetOutOfRangeError
from strata.log.checkpoints import epoch_entries_from_bytes
from strata.log.partition_log import FetchIsolation, PartitionLog
from strata.log.producer_state import encode_snapshot
from strata.log.segment import TimestampAndOffset
from strata.quota.remote import RLMQuotaManager, ThrottleTimeSensor
from strata.tiered.api import (
    RLMM_ALIASES,
    RSM_ALIASES,
    IndexType,
    ObjectStore,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RemoteStorageNotReadyError,
    RetriableRemoteStorageError,
    TopicIdPartition,
    load_class,
    uuid_to_str,
)
from strata.tiered.chunk_cache import chunk_cache_config
from strata.tiered.compaction import RemoteCompaction
from strata.tiered.copier import (
    CopyCandidate,
    CustomMetadataSizeLimitExceededError,
    build_copy_request,
    candidate_log_segments,
    describe,
)
from strata.tiered.expiration import ExpirationPlan, LogSnapshot, plan_expiration
from strata.tiered.index_cache import RemoteIndexCache
from strata.tiered.lineage import (
    build_filtered_leader_epoch_map,
    find_highest_remote_offset,
    is_remote_segment_within_leader_epochs,
)
from strata.tiered.reader import RemoteFetchResult, RemoteLogReader
from strata.tiered.recovery import chained_segment_metadata, publish
from strata.tiered.scrubber import RemoteScrubber, ScrubberMetrics
from strata.tiered.storage.manifests import ChainView, TopicManifest, read_chain

log = logging.getLogger("strata.tiered")

T = TypeVar("T")
S = RemoteLogSegmentState
TASK_FAILURE_LOG_INTERVAL_S = 30.0
READY_POLL_S = 0.01  # a fetch waiting for its partition's remote metadata to finish replaying
TopicDescription = tuple[int, dict[str, str], int | None]
"""(partition count, config overrides, replication factor or None) of a topic, for its manifest in the bucket."""
QUOTA_METRICS = "kafka_server_RemoteLogManager"
"""While a partition's copy (or expiration) task keeps failing, its WARNING repeats at most this often."""


class UploadAbandonedError(Exception):
    """Leadership moved during an upload and the new leader began deleting it: this broker's copy is undone."""


@dataclass(frozen=True, slots=True)
class RemoteAuxState:
    """What a follower needs to start its local log at ``next_offset`` (Kafka's TierStateMachine)."""

    next_offset: int
    epochs: list[tuple[int, int]]  # (epoch, start offset) up to the segment's end
    producer_snapshot: bytes


class RemoteReadQueueFullError(Exception):
    """``remote.log.reader.max.pending.tasks`` reads are already queued (Kafka's RejectedExecution)."""


@dataclass(frozen=True, slots=True)
class RemoteTier:
    """A partition's remote tier as a log starting after it needs it (restored and read-replica topics)."""

    log_start: int
    next_offset: int
    epochs: list[tuple[int, int]]  # (epoch, start offset) from the last segment's leader-epoch checkpoint
    highest_epoch: int
    segments: int


@dataclass(slots=True)
class PartitionTierState:
    """What the RLM knows of one tiered partition (read by ``strata tiers`` and the metrics)."""

    tp: TopicPartition
    tip: TopicIdPartition
    copied_offset: int = -1
    first_run: bool = True
    failures: int = 0
    last_copy_error: str | None = None
    copy_cancelled: str | None = None
    segments_copied: int = 0
    failing_since: float | None = None  # monotonic time of the first failure of the current run of failures
    failure_logged_at: float | None = None  # last WARNING about them (rate-limited)
    being_copied: set[RemoteLogSegmentId] = field(default_factory=set)
    # uploads running on the copier threads: cancelling the copy task does not stop them, so a delete of the
    # partition's remote data waits for them first (else an upload finishing after it leaves an orphan)
    uploads: set[Future[None]] = field(default_factory=set)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    restoring: bool = False  # remote.recovery: the leader's empty log is to start where the remote tier ends
    read_replica: bool = False  # remote.read.replica: follows the bucket's chain instead of uploading
    chain: ChainView | None = None  # (read replica) the partition's chain as last read


class TieredStats:
    """The RLM's view of the broker metrics: Kafka's BrokerTopicMetrics and remote-storage metrics."""

    def __init__(self, registry: Registry | None = None) -> None:
        registry = registry or Registry()
        self.topics: BrokerTopicMetrics = broker_topic_metrics(registry)
        self.remote: RemoteStorageMetrics = remote_storage_metrics(registry)
        # Strata's own, beside Kafka's names: remote segments the reader found corrupt (not yet deleted).
        self.corrupt_segments = PartitionGauge(registry, f"{BROKER_TOPIC_METRICS}_RemoteLogCorruptSegments",
                                               "Remote segments found corrupt by the reader (CRC, offsets, size).")
        # Strata's own: the background scrubber (tiered/scrubber.py) reading the led partitions' segments back
        self.scrubber = ScrubberMetrics(
            PartitionGauge(registry, f"{BROKER_TOPIC_METRICS}_RemoteLogScrubberFindings",
                           "Damaged or missing remote objects the scrubber found (per partition, as last checked)."),
            TopicMeter(registry, f"{BROKER_TOPIC_METRICS}_RemoteLogScrubberBytesPerSec",
                       "Stored bytes the scrubber read back from remote storage."),
            TopicMeter(registry, f"{BROKER_TOPIC_METRICS}_RemoteLogScrubberSegmentsPerSec",
                       "Remote segments the scrubber checked."))
        self.registry = registry
        # KIP-956: Kafka's RLMQuotaMetrics sensors of the RemoteLogManager (kafka.server:type=RemoteLogManager)
        self.copy_throttle = ThrottleTimeSensor()
        self.fetch_throttle = ThrottleTimeSensor()
        for kind, sensor in (("copy", self.copy_throttle), ("fetch", self.fetch_throttle)):
            base = f"{QUOTA_METRICS}_remote_{kind}_throttle_time"
            registry.gauge(f"{base}_avg", f"The average time in millis remote {kind}s was throttled by a broker.",
                           fn=sensor.avg)
            registry.gauge(f"{base}_max", f"The maximum time in millis remote {kind}s was throttled by a broker.",
                           fn=sensor.max)
        # Strata's own: a counter of the throttle time (ms), for rate() over any range
        self.copy_throttled_ms = registry.meter(f"{QUOTA_METRICS}_remote_copy_throttle_time_ms",
                                                "Time in millis remote copies were throttled by the copy quota.")
        self.fetch_throttled_ms = registry.meter(f"{QUOTA_METRICS}_remote_fetch_throttle_time_ms",
                                                 "Time in millis remote fetches were throttled by the fetch quota.")

    def record_copy_throttle(self, ms: float) -> None:
        self.copy_throttle.record(ms)
        self.copy_throttled_ms.mark(round(ms))

    def record_fetch_throttle(self, ms: float) -> None:
        self.fetch_throttle.record(ms)
        self.fetch_throttled_ms.mark(round(ms))

    def register_quotas(self, copy: RLMQuotaManager, fetch: RLMQuotaManager) -> None:
        """Kafka's ``byte-rate`` metric of each quota (``kafka.server:type=RLMCopy`` / ``RLMFetch``) and, Strata's
        own, the bound it is measured against (absent while there is none)."""
        for kind, quota in (("RLMCopy", copy), ("RLMFetch", fetch)):
            self.registry.gauge(f"kafka_server_{kind}_byte_rate", f"Tracking {kind[3:].lower()} byte-rate for "
                                "Remote Log Manager (bytes per second over the quota windows).", fn=quota.measure)
            self.registry.gauge(f"kafka_server_{kind}_quota_bytes_per_second",
                                f"The remote {kind[3:].lower()} quota in bytes per second (absent: none).",
                                fn=lambda q=quota: None if q.unbounded else q.quota)

    def mark(self, name: str, topic: str, n: int = 1) -> None:
        getattr(self.topics, name).mark(topic, n)

    def set_partition(self, name: str, topic: str, partition: int, value: float) -> None:
        getattr(self.topics, name).record(topic, partition, value)

    def remove_partition(self, topic: str, partition: int) -> None:
        self.topics.remove_partition(topic, partition)
        self.corrupt_segments.remove(topic, partition)
        self.scrubber.findings.remove(topic, partition)


class RemoteLogManager:
    scrubber: RemoteScrubber | None = None  # started by start() unless remote.log.scrubber.bytes.per.second=0

    def __init__(self, config: RemoteLogManagerConfig, *, broker_id: int, log_dir: Path, cluster_id: str,
                 clock: Clock, log_for: Callable[[TopicPartition], PartitionLog | None],
                 on_log_start_changed: Callable[[], None] = lambda: None, stats: TieredStats | None = None,
                 rsm: RemoteStorageManager | None = None, rlmm: RemoteLogMetadataManager | None = None) -> None:
        self.config = config
        self.broker_id = broker_id
        self.log_dir = log_dir
        self._clock = clock
        self._log_for = log_for
        self._on_log_start_changed = on_log_start_changed
        self.stats = stats or TieredStats()
        if rsm is None:
            rsm = _plugin("remote.log.storage.manager.class.name", config.rsm_class_name, RSM_ALIASES,
                          RemoteStorageManager, config.rsm_prefix, config.rsm_configs(broker_id, log_dir))
        if rlmm is None:
            rlmm = _plugin("remote.log.metadata.manager.class.name", config.rlmm_class_name, RLMM_ALIASES,
                           RemoteLogMetadataManager, config.rlmm_prefix,
                           config.rlmm_configs(broker_id, log_dir, cluster_id))
        self.rsm = rsm
        self.rlmm = rlmm
        self.chunk_cache_config = chunk_cache_config(config.rsm_props, log_dir)
        self.index_cache: RemoteIndexCache | None = None
        self.reader: RemoteLogReader | None = None
        self._partitions: dict[TopicPartition, PartitionTierState] = {}
        # Cluster mode: partitions this broker follows. Their leader uploads; the follower task keeps each
        # log's highest remote offset current, so local retention deletes only what is in remote storage.
        self._followers: dict[TopicPartition, PartitionTierState] = {}
        self._follower = ThreadPoolExecutor(config.follower_thread_pool_size, "rlm-follower")
        self._copier = ThreadPoolExecutor(config.copier_thread_pool_size, "rlm-copier")
        self._expiration = ThreadPoolExecutor(config.expiration_thread_pool_size, "rlm-expiration")
        self._reader = ThreadPoolExecutor(config.reader_threads, "remote-log-reader")
        self._pending_reads = 0
        self._background: set[asyncio.Task[Any]] = set()
        # Cluster mode: whether this broker's leadership of a partition is confirmed. A broker cut off from
        # ZooKeeper whose peers report a newer leader (or that hears from nobody) is fenced; its leader tasks
        # must then neither upload nor clean "dangling" uploads, which are the new leader's (the nemesis found
        # such a zombie deleting the new leader's upload in flight: a hole in the log once local retention ran).
        self.leadership_confirmed: Callable[[TopicPartition], bool] = lambda _tp: True
        # The topic as a restore must create it again (partition count, config overrides, replication factor),
        # for the bucket's topic manifest (object format v2); None: unknown here.
        self.describe_topic: Callable[[str], TopicDescription | None] = lambda _topic: None
        # remote.recovery: a leader's log now starts where its remote tier ends; the broker then makes sure the
        # partition leads in an epoch above the restored ones (the highest restored epoch is passed).
        self.on_log_restored: Callable[[TopicPartition, int], None] = lambda _tp, _epoch: None
        self._scratch = log_dir / "remote-log-scratch"
        self._closed = False
        # KIP-956: one copy and one fetch quota for the whole broker (Kafka's rlmCopy/FetchQuotaManager)
        self.copy_quota = RLMQuotaManager(config.copy_max_bytes_per_second, config.copy_quota_window_num,
                                          config.copy_quota_window_size_seconds,
                                          description="Tracking copy byte-rate for Remote Log Manager")
        self.fetch_quota = RLMQuotaManager(config.fetch_max_bytes_per_second, config.fetch_quota_window_num,
                                           config.fetch_quota_window_size_seconds,
                                           description="Tracking fetch byte-rate for Remote Log Manager")
        self.stats.register_quotas(self.copy_quota, self.fetch_quota)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Open the remote index cache; the RLMM was initialised by the broker (it owns the topic)."""
        self._scratch.mkdir(parents=True, exist_ok=True)
        self.index_cache = RemoteIndexCache(self.rsm, self.log_dir, self.config.index_cache_total_size_bytes)
        self.reader = RemoteLogReader(self.rsm, self.rlmm, self.index_cache,
                                      prefetch_total_bytes=self.config.reader_prefetch_total_size_bytes,
                                      prefetch_windows=self.config.reader_prefetch_windows,
                                      prefetch_window_bytes=self.config.reader_prefetch_window_bytes,
                                      prefetch_submit=self._reader.submit,
                                      corrupt_segment_action=self.config.reader_corrupt_segment_action,
                                      on_corrupt_segment=lambda tip, n: self.stats.corrupt_segments.record(
                                          tip.topic, tip.partition, n),
                                      chunk_cache=self.chunk_cache_config.build() if self.chunk_cache_config
                                      else None)
        self.stats.remote.RemoteLogReaderTaskQueueSize.set_function(lambda: self._pending_reads)
        read_ahead = self.reader.read_ahead
        if read_ahead is not None:
            self.stats.remote.RemoteLogReaderPrefetchBytes.set_function(lambda: read_ahead.bytes)
        cache = self.reader.chunk_cache
        if cache is not None:  # Strata's own, in the RemoteLogManager's family (Aiven exports Caffeine's stats)
            for name, fn, text in (("Hits", lambda: cache.hits, "Chunks served from the chunk cache."),
                                   ("Misses", lambda: cache.misses, "Chunks not in the chunk cache (loaded)."),
                                   ("Evictions", lambda: cache.evictions, "Chunks evicted (size or retention)."),
                                   ("NotAdmitted", lambda: cache.rejected,
                                    "Chunks loaded once and not kept (admission=second-access)."),
                                   ("Bytes", lambda: cache.bytes, "Bytes held by the chunk cache.")):
                self.stats.registry.gauge(f"kafka_log_remote_RemoteLogManager_RemoteLogChunkCache{name}", text,
                                          fn=fn)
        self._start_scrubber()

    async def close(self) -> None:
        self._closed = True
        if self.scrubber is not None:
            await self.scrubber.close()
        tasks = [t for st in (*self._partitions.values(), *self._followers.values()) for t in st.tasks] + \
            list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for pool in (self._copier, self._expiration, self._reader, self._follower):
            await loop.run_in_executor(None, lambda p=pool: p.shutdown(wait=True, cancel_futures=True))
        if self.index_cache is not None:
            self.index_cache.close()
        if self.reader is not None:
            self.reader.close()
        for plugin in (self.rlmm, self.rsm):
            try:  # off the loop: the RLMM may wait for a background load that needs the loop
                await loop.run_in_executor(None, plugin.close)
            except Exception:
                log.exception("closing %s failed", type(plugin).__name__)

    # -- quotas (KIP-956) ----------------------------------------------------------------------

    def update_copy_quota(self, bytes_per_s: int) -> None:
        """``remote.log.manager.copy.max.bytes.per.second`` changed: copy tasks waiting on the old bound re-check."""
        if bytes_per_s != self.copy_quota.quota:
            log.info("Updating remote copy quota to %d bytes per second", bytes_per_s)
            self.copy_quota.update_quota(bytes_per_s)

    def update_fetch_quota(self, bytes_per_s: int) -> None:
        if bytes_per_s != self.fetch_quota.quota:
            log.info("Updating remote fetch quota to %d bytes per second", bytes_per_s)
            self.fetch_quota.update_quota(bytes_per_s)

    def is_remote_log_fetch_quota_exceeded(self) -> bool:
        """Kafka's ``ReplicaManager.readFromLog`` check before a remote read: True (and the throttle time recorded
        in ``remote-fetch-throttle-time``) when this fetch must not read the remote tier."""
        throttle_s = self.fetch_quota.throttle_s()
        if throttle_s <= 0:
            return False
        self.stats.record_fetch_throttle(throttle_s * 1e3)
        log.debug("not fetching from remote storage: the fetch quota is exceeded for %.0f ms", throttle_s * 1e3)
        return True

    async def _run(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    # -- leadership ----------------------------------------------------------------------------

    def on_leadership_change(self, partitions: dict[TopicPartition, uuid.UUID]) -> None:
        """Start copy and expiration tasks for the tiered partitions among ``partitions``."""
        new = {}
        for tp, topic_id in partitions.items():
            plog = self._log_for(tp)
            if plog is None or not plog.remote_log_enabled or tp in self._partitions:
                continue
            self._stop_following(tp)
            new[tp] = st = PartitionTierState(tp, TopicIdPartition(topic_id, tp.topic, tp.partition))
            if plog.config.remote_read_replica:
                st.read_replica = True  # (appends are refused by the replica manager: the origin writes)
            elif plog.config.remote_recovery and plog.log_end_offset == 0 and plog.log_start_offset == 0:
                # a restored topic's leader with nothing local yet: no append until its log starts after the
                # remote tier (else new records would take offsets the bucket's records hold)
                st.restoring = plog.remote_restore_pending = True
        if not new:
            return
        self.rlmm.on_partition_leadership_changes({st.tip for st in new.values()}, set())
        loop = asyncio.get_running_loop()
        for tp, st in new.items():
            self._partitions[tp] = st
            if not st.read_replica:  # (a read replica's segments are its origin's: never rewritten here)
                self._attach_compaction(st, loop)
            st.tasks.append(loop.create_task(self._copy_loop(st), name=f"rlm-copy-{tp}"))
            st.tasks.append(loop.create_task(self._expiration_loop(st), name=f"rlm-expire-{tp}"))
            st.tasks.append(loop.create_task(self._lag_loop(st), name=f"rlm-lag-{tp}"))
        log.info("tiering %d partitions", len(new))

    def on_follower(self, partitions: dict[TopicPartition, uuid.UUID]) -> None:
        """Cluster mode: this broker now follows ``partitions`` (Kafka's ``onLeadershipChange`` for
        followers). Leader tasks stop - an upload already running finishes or abandons itself, see
        ``_copy_sync`` - and a follower task keeps the log's highest remote offset current from the
        metadata the leader writes."""
        new = {}
        for tp, topic_id in partitions.items():
            plog = self._log_for(tp)
            if plog is None or not plog.remote_log_enabled or tp in self._followers:
                continue
            st = self._partitions.pop(tp, None)
            if st is not None:
                for task in st.tasks:
                    task.cancel()
            self._detach_compaction(tp)
            new[tp] = PartitionTierState(tp, TopicIdPartition(topic_id, tp.topic, tp.partition))
        if not new:
            return
        self.rlmm.on_partition_leadership_changes(set(), {st.tip for st in new.values()})
        loop = asyncio.get_running_loop()
        for tp, st in new.items():
            self._followers[tp] = st
            st.tasks.append(loop.create_task(self._follower_loop(st), name=f"rlm-follow-{tp}"))

    def release(self, tp: TopicPartition) -> None:
        """The replica is gone from this broker (reassigned away, or its topic deleted): stop its tasks.
        The RLMM keeps its metadata - a topic deletion still needs it to delete the remote data."""
        for states in (self._partitions, self._followers):
            st = states.pop(tp, None)
            if st is not None:
                for task in st.tasks:
                    task.cancel()
        self._detach_compaction(tp)

    def _attach_compaction(self, st: PartitionTierState, loop: asyncio.AbstractEventLoop) -> None:
        """The leader's log cleaner cleans the remote tier too (compacted topics, KIP-1272)."""
        plog = self._log_for(st.tp)
        if plog is None:
            return
        tp = st.tp
        plog.remote_cleaning = RemoteCompaction(
            self, st.tip, plog, self._clock,
            lambda: self._partitions.get(tp) is st and not self._closed and self.leadership_confirmed(tp), loop)

    def _detach_compaction(self, tp: TopicPartition) -> None:
        plog = self._log_for(tp)
        if plog is not None and isinstance(plog.remote_cleaning, RemoteCompaction):
            plog.remote_cleaning = None

    def _rewrites_in_flight(self, tip: TopicIdPartition) -> frozenset[RemoteLogSegmentId]:
        plog = self._log_for(TopicPartition(tip.topic, tip.partition))
        rc = plog.remote_cleaning if plog is not None else None
        if not isinstance(rc, RemoteCompaction):
            return frozenset()
        with rc.lock:
            return frozenset(rc.rewriting)

    def _stop_following(self, tp: TopicPartition) -> None:
        st = self._followers.pop(tp, None)
        if st is not None:
            for task in st.tasks:
                task.cancel()

    async def _follower_loop(self, st: PartitionTierState) -> None:
        """Kafka's ``RLMFollowerTask``: the highest offset uploaded by the leader for this log's lineage
        becomes the log's ``highest_offset_in_remote_storage``, the gate of its local retention."""
        while True:
            try:
                plog = self._log_for(st.tp)
                if plog is not None and self.rlmm.is_ready(st.tip):
                    entries = [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.epoch_entries()]
                    offset, _epoch = await self._run(self._follower, find_highest_remote_offset, entries,
                                                     plog.log_end_offset,
                                                     lambda e: self.rlmm.highest_offset_for_epoch(st.tip, e))
                    if self._log_for(st.tp) is plog:
                        plog.update_highest_offset_in_remote_storage(offset)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - metadata not loaded or stopped: next interval
                log.debug("%s: follower task: %s", st.tp, e)
            await asyncio.sleep(self.config.task_interval_ms / 1000)

    def following(self, tp: TopicPartition) -> bool:
        return tp in self._followers

    async def remote_aux_state(self, tip: TopicIdPartition, target_epoch: int, offset: int) -> RemoteAuxState:
        """Kafka's ``buildRemoteLogAuxState`` (the remote part): the remote segment holding ``offset``
        for ``target_epoch``, with its leader-epoch checkpoint and producer snapshot. A follower whose
        fetch offset is below its leader's local log start rebuilds its log from these and fetches only
        from ``end_offset + 1``: the data below stays in remote storage, never copied to this broker."""
        topic = tip.topic

        def run() -> RemoteAuxState:
            sync = getattr(self.rlmm, "sync", None)
            if sync is not None:
                sync(tip)
            md = self.rlmm.remote_log_segment_metadata(tip, target_epoch, offset)
            if md is None:
                raise RemoteStorageError(f"no remote segment of {tip.topic}-{tip.partition} holds offset {offset} "
                                         f"(epoch {target_epoch}) yet")
            with self.rsm.fetch_index(md, IndexType.LEADER_EPOCH) as f:
                epochs = epoch_entries_from_bytes(f.read(), f"leader-epoch index of {md.remote_log_segment_id}")
            with self.rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as f:
                snapshot = f.read()
            return RemoteAuxState(md.end_offset + 1, [(e.epoch, e.start_offset) for e in epochs], snapshot)

        self.stats.mark("BuildRemoteLogAuxStateRequestsPerSec", topic)
        try:
            return await self._run(self._follower, run)
        except Exception:
            self.stats.mark("BuildRemoteLogAuxStateErrorsPerSec", topic)
            raise

    def stop_partitions(self, tps: Iterable[TopicPartition], *, delete_remote: bool,
                        topic_id: uuid.UUID | None = None) -> asyncio.Task[None] | None:
        """Cancel the partitions' tasks; with ``delete_remote`` delete their remote data in the
        background (Kafka does this synchronously in the stop-replica path, KAFKA-15313)."""
        stopped: list[TopicIdPartition] = []
        uploads: list[Future[None]] = []
        for tp in tps:
            st = self._partitions.pop(tp, None)
            following = self._followers.pop(tp, None)
            if following is not None:
                for task in following.tasks:
                    task.cancel()
                st = st or following
            if st is not None:
                for task in st.tasks:
                    task.cancel()
                uploads.extend(st.uploads.copy())  # (a copier thread may discard one meanwhile)
                stopped.append(st.tip)
            elif topic_id is not None:
                stopped.append(TopicIdPartition(topic_id, tp.topic, tp.partition))
            self.stats.remove_partition(tp.topic, tp.partition)
        if not stopped:
            return None
        if not delete_remote:
            self.rlmm.on_stop_partitions(set(stopped))
            return None
        task = asyncio.get_running_loop().create_task(self._delete_partitions(stopped, uploads))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _delete_partitions(self, tips: list[TopicIdPartition], uploads: Iterable[Future[None]] = ()) -> None:
        """Delete the remote data of ``tips``, then stop them in the RLMM (after ``uploads``, their copies
        still running on the copier threads, ended: what they upload is deleted too).

        Every partition of a deleted topic comes here, tiered or not: one the RLMM holds no metadata
        of (never tiered, or its data deleted when tiering was turned off) has nothing to delete, which
        is a quiet no-op. The metadata must be loaded first - before that the RLMM cannot tell "nothing"
        from "not read yet". A partition whose deletion failed (the store or, in a cluster, its metadata
        partition unavailable) is retried with the copy task's backoff until it succeeds or the broker
        stops; it is not stopped meanwhile, so its metadata stays known and the orphan sweep of the next
        start deletes what is left if the broker stops first.
        """
        running = [asyncio.wrap_future(u) for u in uploads]
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        try:
            if not await self._metadata_loaded():
                return  # closing
        except Exception as e:
            log.error("cannot delete the remote data of %d partitions (%s-%d...): the remote log metadata did "
                      "not load: %s", len(tips), tips[0].topic, tips[0].partition, e)
            return
        pending, failures = list(tips), 0
        while pending and not self._closed:
            done, failed = set(), []
            for tip in pending:
                try:
                    count = await self._run(self._expiration, self._delete_remote_partition, tip)
                except Exception as e:
                    failed.append(tip)
                    log.log(logging.WARNING if failures % 10 == 0 else logging.DEBUG,
                            "deleting the remote data of %s-%d failed (attempt %d, retried): %s: %s", tip.topic,
                            tip.partition, failures + 1, type(e).__name__, e)
                    continue
                done.add(tip)
                if count is None:
                    log.debug("%s-%d has no remote log metadata: no remote data to delete", tip.topic,
                              tip.partition)
                else:
                    log.log(logging.INFO if count else logging.DEBUG, "deleted %d remote segments of %s-%d", count,
                            tip.topic, tip.partition)
            if done:
                self.rlmm.on_stop_partitions(done)
            pending = failed
            if pending:
                failures += 1
                await asyncio.sleep(self._backoff_ms(failures) / 1000)

    async def _metadata_loaded(self) -> bool:
        """Wait (off the loop) until the RLMM has loaded its metadata; False if the RLM closes first.
        Raises the RLMM's error if loading failed."""
        wait = getattr(self.rlmm, "wait_until_ready", None)
        if wait is None or wait(0):
            return not self._closed
        while not await self._run(self._expiration, wait, 1.0):
            if self._closed:
                return False
        return not self._closed

    def _delete_remote_partition(self, tip: TopicIdPartition) -> int | None:
        """Delete every remote segment of ``tip``; how many, or None when the RLMM holds no metadata of it."""
        try:
            sync = getattr(self.rlmm, "sync", None)
            if sync is not None:  # a cluster: the last leader's final uploads may not be applied here yet
                sync(tip)
            listed = list(self.rlmm.list_remote_log_segments(tip))
        except RemoteResourceNotFoundError:  # Kafka's answer for a partition with no metadata at all
            return None
        segments = [md for md in listed if md.state is not S.DELETE_SEGMENT_FINISHED]
        for md in segments:
            self._update_state(md, S.DELETE_SEGMENT_STARTED)
        for md in segments:
            self.rsm.delete_log_segment_data(md)
            self._forget_indexes(md)
        for md in segments:
            self._update_state(md, S.DELETE_SEGMENT_FINISHED)
        manifests = getattr(self.rsm, "manifests", None)
        if manifests is not None:  # the partition's chain, and its topic's manifest
            manifests.delete_partition(tip)
        return len(segments)

    def sweep_orphans(self, is_live: Callable[[TopicIdPartition], bool]) -> asyncio.Task[None]:
        """Once the metadata is loaded, delete the remote data of partitions whose topic is gone
        (a deletion interrupted by a crash or by the store being down)."""
        async def sweep() -> None:
            known = getattr(self.rlmm, "known_partitions", None)
            if known is None or not await self._metadata_loaded():
                return
            orphans = [tip for tip in known() if not is_live(tip)]
            if orphans:
                log.info("deleting the remote data of %d partitions of deleted topics", len(orphans))
                await self._delete_partitions(orphans)

        task = asyncio.get_running_loop().create_task(sweep(), name="rlm-orphan-sweep")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def tiered(self, tp: TopicPartition) -> PartitionTierState | None:
        return self._partitions.get(tp)

    # -- copy ----------------------------------------------------------------------------------

    async def _copy_loop(self, st: PartitionTierState) -> None:
        while True:
            delay_ms = self.config.task_interval_ms
            try:
                if self.rlmm.is_ready(st.tip) and st.copy_cancelled is None and self.leadership_confirmed(st.tp):
                    if st.read_replica:
                        await self._follow_bucket(st)
                    else:
                        if st.restoring:
                            await self._restore_leader_log(st)
                        await self._copy_log_segments_to_remote(st)
                if st.failures:
                    self._log_copy_recovered(st)
                st.failures = 0
                st.last_copy_error = None
            except asyncio.CancelledError:
                raise
            except CustomMetadataSizeLimitExceededError as e:
                self.stats.mark("RemoteCopyErrorsPerSec", st.tp.topic)
                st.copy_cancelled = st.last_copy_error = str(e)
                log.error("%s: copying stopped until the broker restarts: %s", st.tp, e)
            except Exception as e:
                # Kafka marks a failed copy run whatever step failed, so the meter keeps counting while
                # the store is down and each run fails already in the dangling-upload cleanup.
                self.stats.mark("RemoteCopyErrorsPerSec", st.tp.topic)
                st.failures += 1
                st.last_copy_error = f"{type(e).__name__}: {e}"
                delay_ms = self._backoff_ms(st.failures)
                self._log_copy_failed(st, delay_ms)
            finally:
                self._record_lag(st)
            await asyncio.sleep(delay_ms / 1000)

    def _log_copy_failed(self, st: PartitionTierState, delay_ms: int) -> None:
        """A WARNING at the first failure and then at most every ``TASK_FAILURE_LOG_INTERVAL_S`` (DEBUG
        between), naming the local backlog that grows meanwhile: local retention cannot delete what is not
        uploaded, so an outage of the store shows first as disk use - the line says how much and why."""
        now = time.monotonic()
        if st.failing_since is None:
            st.failing_since = now
        level = logging.DEBUG
        if st.failure_logged_at is None or now - st.failure_logged_at >= TASK_FAILURE_LOG_INTERVAL_S:
            st.failure_logged_at = now
            level = logging.WARNING
        if not log.isEnabledFor(level):
            return
        plog = self._log_for(st.tp)
        lag_bytes, lag_segments = copy_lag(plog) if plog is not None else (0, 0)
        log.log(level, "%s: copy to remote storage failed (attempt %d, failing for %.0f s, next in %d ms): %s; "
                "%d segments (%d bytes) wait on local disk for upload", st.tp, st.failures, now - st.failing_since,
                delay_ms, st.last_copy_error, lag_segments, lag_bytes)

    def _log_copy_recovered(self, st: PartitionTierState) -> None:
        """Close the episode the failure WARNINGs opened (at WARNING too, so whoever saw those sees this)."""
        since = st.failing_since if st.failing_since is not None else time.monotonic()
        log.warning("%s: copy to remote storage recovered after %d failed attempts over %.0f s; %d segments "
                    "copied so far", st.tp, st.failures, time.monotonic() - since, st.segments_copied)
        st.failing_since = st.failure_logged_at = None

    async def _lag_loop(self, st: PartitionTierState) -> None:
        """Record the copy lag every task interval, apart from the copy task: while that one sleeps out a
        long backoff (an outage, up to ``task.retry.backoff.max.ms``) or waits on an upload to a store that
        hangs (up to the client's timeout), the lag gauges must keep rising with the local backlog instead
        of freezing at the value of the last finished run (Kafka's KAFKA-19995: no lag during failures)."""
        while True:
            await asyncio.sleep(self.config.task_interval_ms / 1000)
            self._record_lag(st)

    def _backoff_ms(self, failures: int) -> int:
        cfg = self.config
        base = min(cfg.task_retry_backoff_max_ms, cfg.task_retry_backoff_ms * 2 ** min(failures - 1, 30))
        jitter = 1 + random.uniform(-cfg.task_retry_jitter, cfg.task_retry_jitter)
        return max(1, int(base * jitter))

    def _remote_tier(self, tip: TopicIdPartition) -> RemoteTier | None:
        """Where the partition's remote tier starts and ends, as ``__remote_log_metadata`` has it (read to its
        end), with the leader-epoch history from its last segment: what a log that starts after it needs."""
        sync = getattr(self.rlmm, "sync", None)
        if sync is not None:
            sync(tip)
        live = [md for md in self.rlmm.list_remote_log_segments(tip) if md.state is S.COPY_SEGMENT_FINISHED]
        if not live:
            return None
        last = max(live, key=lambda md: md.end_offset)
        with self.rsm.fetch_index(last, IndexType.LEADER_EPOCH) as f:
            epochs = epoch_entries_from_bytes(f.read(), f"leader-epoch index of {last.remote_log_segment_id}")
        return RemoteTier(min(md.start_offset for md in live), last.end_offset + 1,
                          [(e.epoch, e.start_offset) for e in epochs],
                          max(e for md in live for e in md.segment_leader_epochs), len(live))

    def _start_after_remote_tier(self, st: PartitionTierState, plog: PartitionLog, tier: RemoteTier) -> None:
        """The (empty) local log starts where the remote tier ends. No producer state: the restored or mirrored
        producers belong to another cluster, which handed out the same producer ids (a restored id's sequence
        would refuse a new producer's first batch)."""
        plog.restore_from_remote_tier(tier.next_offset, tier.log_start, tier.epochs, encode_snapshot(()))
        plog.update_highest_offset_in_remote_storage(tier.next_offset - 1)
        self.on_log_restored(st.tp, tier.highest_epoch)

    async def _restore_leader_log(self, st: PartitionTierState) -> None:
        """``remote.recovery``: start this leader's empty log where its remote tier ends, as a follower below
        its leader's local log start does (Kafka's ``buildRemoteLogAuxState``): the leader-epoch history from the
        last remote segment, the log start at the first one, the high watermark at the end (every restored record
        was committed). A partition the bucket held nothing of starts at 0."""
        plog = self._log_for(st.tp)
        tier = await self._run(self._follower, self._remote_tier, st.tip)
        if plog is None or self._log_for(st.tp) is not plog or self._partitions.get(st.tp) is not st:
            return
        if tier is not None and plog.log_end_offset == 0:
            self._start_after_remote_tier(st, plog, tier)
            log.info("%s: restored from remote storage: offsets %d..%d in %d segments; the local log starts at %d",
                     st.tp, tier.log_start, tier.next_offset - 1, tier.segments, tier.next_offset)
        elif tier is None:
            log.info("%s: remote.recovery: the remote tier holds nothing of this partition; it starts empty", st.tp)
        plog.remote_restore_pending = False
        st.restoring = False

    async def _follow_bucket(self, st: PartitionTierState) -> None:
        """``remote.read.replica``: bring the partition up to its origin's uploads. The chain's entries since the
        last read (one LIST, a GET per new entry) say which segments the origin added and deleted; the added ones
        are published to this cluster's ``__remote_log_metadata`` from their manifests, the deleted ones marked
        deleted (their objects are the origin's: never touched here), and the leader's (empty) log then starts
        where the bucket ends, its log start at the bucket's first segment. Readers see new records once the
        origin has uploaded them: within its upload interval and this task's."""
        tip = st.tip
        rsm = self.rsm
        if not isinstance(rsm, ObjectStore):
            raise RemoteStorageError(f"remote.read.replica: {type(rsm).__name__} cannot list the remote store")

        def follow() -> tuple[RemoteTier | None, int, int]:
            sync = getattr(self.rlmm, "sync", None)
            if sync is not None:
                sync(tip)
            view = st.chain
            view = read_chain(rsm, tip) if view is None or view.tail is None else \
                read_chain(rsm, tip, after=view.tail, base=view)
            known = {uuid_to_str(md.remote_log_segment_id.id): md for md in self.rlmm.list_remote_log_segments(tip)
                     if md.state is S.COPY_SEGMENT_FINISHED}
            added = []
            for segment_id, seg in view.live.items():
                if segment_id not in known:
                    try:
                        added.append(chained_segment_metadata(rsm, tip, seg))
                    except ValueError as e:
                        log.warning("%s: read replica: %s", st.tp, e)
            publish(self.rlmm, added, self.broker_id, self._clock.milliseconds())
            removed = [md for segment_id, md in known.items() if segment_id not in view.live]
            for md in removed:
                self._update_state(md, S.DELETE_SEGMENT_STARTED)
                self._forget_indexes(md)
                self._update_state(md, S.DELETE_SEGMENT_FINISHED)
            st.chain = view
            return self._remote_tier(tip), len(added), len(removed)

        plog = self._log_for(st.tp)
        tier, added, removed = await self._run(self._follower, follow)
        if tier is None or plog is None or self._log_for(st.tp) is not plog or self._partitions.get(st.tp) is not st:
            return
        if tier.next_offset == plog.log_end_offset and tier.log_start == plog.log_start_offset:
            return
        self._start_after_remote_tier(st, plog, tier)
        log.log(logging.INFO if added or removed else logging.DEBUG,
                "%s: read replica at offsets %d..%d of the bucket (%d segments added, %d deleted by the origin)",
                st.tp, tier.log_start, tier.next_offset - 1, added, removed)

    async def _copy_log_segments_to_remote(self, st: PartitionTierState) -> None:
        plog = self._log_for(st.tp)
        if plog is None or not plog.remote_log_enabled or plog.config.remote_log_copy_disable:
            return
        # Dangling COPY_SEGMENT_STARTED uploads (a crash or a failed cleanup): nothing of this
        # partition is being copied between two runs, so every one of them is dangling.
        await self._run(self._copier, self._clean_dangling, st.tip, frozenset(st.being_copied))
        if st.first_run:
            # A new leader resumes after what earlier leaders uploaded: read their metadata to its end first.
            sync = getattr(self.rlmm, "sync", None)
            if sync is not None:
                await self._run(self._copier, sync, st.tip)
            entries = [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.epoch_entries()]
            offset, _epoch = await self._run(self._copier, find_highest_remote_offset, entries,
                                             plog.log_end_offset,
                                             lambda e: self.rlmm.highest_offset_for_epoch(st.tip, e))
            st.copied_offset = offset
            plog.update_highest_offset_in_remote_storage(offset)
            st.first_run = False
        lso = plog.last_stable_offset
        if plog.config.remote_unmount and lso == plog.log_end_offset and plog.segments[-1].size > 0:
            plog.roll()  # being unmounted: the active segment goes up too (nothing is appended any more)
            log.info("%s: rolled the active segment at %d to upload it (remote.unmount)", st.tp, lso)
        if lso <= 0 or st.copied_offset >= lso:
            return
        from_offset = max(st.copied_offset + 1, plog.log_start_offset)
        candidates = candidate_log_segments(plog, from_offset, lso)
        if candidates:
            await self._run(self._copier, self._put_topic_manifest, st.tip)
        for candidate in candidates:
            if self._closed or st.tp not in self._partitions or plog.config.remote_log_copy_disable:
                return
            # KIP-956: wait (in turn with every other partition's copy task) while the copy quota is exceeded,
            # then count the segment against it before uploading, as Kafka's RLMCopyTask does.
            waited = await self.copy_quota.acquire(
                candidate.segment.size, lambda s: self.stats.record_copy_throttle(s * 1e3))
            if waited and (self._closed or st.tp not in self._partitions or self._log_for(st.tp) is not plog
                           or plog.config.remote_log_copy_disable or candidate.segment not in plog.segments):
                return  # the partition changed while it waited: the next run starts over
            await self._copy_log_segment(st, plog, candidate)

    async def _copy_log_segment(self, st: PartitionTierState, plog: PartitionLog, candidate: CopyCandidate) -> None:
        segment_id = RemoteLogSegmentId.generate_new(st.tip)
        md, data = build_copy_request(plog, candidate, segment_id, self.broker_id, self._clock.milliseconds(),
                                      self._scratch)
        st.being_copied.add(segment_id)
        started = time.monotonic()
        try:
            self.stats.mark("RemoteCopyRequestsPerSec", st.tp.topic)
            upload = self._copier.submit(self._copy_sync, md, data)
            st.uploads.add(upload)
            upload.add_done_callback(st.uploads.discard)
            await asyncio.wrap_future(upload)  # a failure is counted by _copy_loop
        finally:
            st.being_copied.discard(segment_id)
        self.stats.mark("RemoteCopyBytesPerSec", st.tp.topic, md.segment_size_in_bytes)
        st.copied_offset = md.end_offset
        st.segments_copied += 1
        plog.update_highest_offset_in_remote_storage(md.end_offset)
        log.info("copied %s to remote storage in %.0f ms", describe(st.tip, md), (time.monotonic() - started) * 1e3)

    def _put_topic_manifest(self, tip: TopicIdPartition) -> None:
        """Keep the bucket's topic manifest current (v2 stores; written again only when the topic changed)."""
        manifests = getattr(self.rsm, "manifests", None)
        fmt = getattr(self.rsm, "object_format", None)
        if manifests is None or fmt is None or not fmt.writes_v2:
            return
        described = self.describe_topic(tip.topic)
        if described is None:
            return
        partitions, configs, replication_factor = described
        if manifests.put_topic_manifest(TopicManifest(tip.topic, uuid_to_str(tip.topic_id), partitions, configs,
                                                      replication_factor, self.broker_id,
                                                      self._clock.milliseconds())):
            log.info("stored the topic manifest of %s (%d partitions, %d config overrides)", tip.topic, partitions,
                     len(configs))

    def _copy_sync(self, md: RemoteLogSegmentMetadata, data: Any, detail: str | None = None) -> None:
        """COPY_SEGMENT_STARTED -> upload -> COPY_SEGMENT_FINISHED (a copier thread; the cleaner's for a
        rewrite, whose crash points carry ``detail`` "rewrite")."""
        self.rlmm.add_remote_log_segment_metadata(md)
        crash_point("copy.after_started", detail)  # COPY_SEGMENT_STARTED is durable, nothing uploaded
        try:
            custom = self.rsm.copy_log_segment_data(md, data)
        except RetriableRemoteStorageError:
            raise  # left COPY_SEGMENT_STARTED: the next run cleans it once the store is back
        except Exception:
            self._cleanup_quietly(md)
            raise
        crash_point("copy.after_upload", detail)  # every object is in the store, COPY_SEGMENT_FINISHED not written
        self._abandon_if_taken_over(md)
        finished = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, self._clock.milliseconds(), custom,
                                                  S.COPY_SEGMENT_FINISHED, self.broker_id)
        limit = self.config.custom_metadata_max_bytes
        if custom is not None and len(custom) > limit:
            self._cleanup_quietly(md.create_with_updates(finished))
            raise CustomMetadataSizeLimitExceededError(
                f"custom metadata of {len(custom)} bytes is over remote.log.metadata.custom.metadata.max.bytes "
                f"({limit}) for {md.remote_log_segment_id}")
        self.rlmm.update_remote_log_segment_metadata(finished)
        self._confirm_finished(md)

    def _synced_state(self, md: RemoteLogSegmentMetadata
                      ) -> tuple[TopicIdPartition, RemoteLogSegmentMetadata | None] | None:
        """Cluster mode (an RLMM that can ``sync``): the segment as the metadata has it once read to its end
        (None inside: not listed); None when the RLMM cannot sync (nothing to compare with)."""
        sync = getattr(self.rlmm, "sync", None)
        if sync is None:
            return None
        tip = md.topic_id_partition
        sync(tip)
        return tip, next((m for m in self.rlmm.list_remote_log_segments(tip)
                          if m.remote_log_segment_id == md.remote_log_segment_id), None)

    def _confirm_finished(self, md: RemoteLogSegmentMetadata) -> None:
        """Cluster mode: COPY_SEGMENT_FINISHED counts only once the metadata shows it. Another broker may have
        started deleting the upload in between (a leader that did not know it was replaced took it for
        dangling), and the metadata then drops the FINISHED event: counted anyway, this broker's local
        retention would delete segments that exist nowhere else. Unconfirmed, the segment is copied again."""
        found = self._synced_state(md)
        if found is None:
            return
        tip, current = found
        # Only a delete proves the upload lost: our FINISHED may simply not be read back yet (the metadata
        # topic's write is asynchronous), and a segment absent from a partial view is no proof either.
        if current is not None and current.state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            log.warning("upload %s not confirmed (%s): another broker deleted it meanwhile; it is copied again",
                        describe(tip, md), current.state.name)
            raise UploadAbandonedError(f"upload of {md.remote_log_segment_id} was deleted by another broker")

    def _abandon_if_taken_over(self, md: RemoteLogSegmentMetadata) -> None:
        """Cluster mode: leadership may have moved while this upload ran, and the new leader treats an
        upload it did not start as dangling and deletes it. Read the metadata to its end; if the segment
        is no longer COPY_SEGMENT_STARTED, delete what this upload wrote (the new leader's delete may have
        run before the last object landed) and give up - so the store never keeps an object the metadata
        does not list. When the check passes and the new leader deletes afterwards, its delete follows
        the finished upload, which is just as clean."""
        found = self._synced_state(md)
        if found is None:
            return
        tip, current = found
        if current is None or current.state is not S.COPY_SEGMENT_STARTED:
            log.info("abandoning upload %s: another leader took it over (%s)", describe(tip, md),
                     "gone" if current is None else current.state.name)
            self.rsm.delete_log_segment_data(md)
            raise UploadAbandonedError(f"upload of {md.remote_log_segment_id} was taken over by another leader")

    def _clean_dangling(self, tip: TopicIdPartition, being_copied: frozenset[RemoteLogSegmentId]) -> int:
        sync = getattr(self.rlmm, "sync", None)
        if sync is not None:  # a cluster: an upload another broker finished meanwhile is not dangling
            sync(tip)
        listed = list(self.rlmm.list_remote_log_segments(tip))
        busy = being_copied | self._rewrites_in_flight(tip)  # read after the listing: see RemoteCompaction
        dangling = [md for md in listed
                    if md.state is S.COPY_SEGMENT_STARTED and md.remote_log_segment_id not in busy]
        for md in dangling:
            log.info("deleting dangling upload %s (COPY_SEGMENT_STARTED, never finished)", describe(tip, md))
            self._delete_remote_segment(md)
        return len(dangling)

    def _cleanup_quietly(self, md: RemoteLogSegmentMetadata) -> None:
        try:
            self._delete_remote_segment(md)
        except Exception as e:  # retried by the next copy run's dangling sweep
            log.warning("cleaning up failed upload %s failed: %s", md.remote_log_segment_id, e)

    def _update_state(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, self._clock.milliseconds(), md.custom_metadata, state, self.broker_id))

    def _delete_remote_segment(self, md: RemoteLogSegmentMetadata, detail: str | None = None) -> None:
        """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED (a worker thread)."""
        topic = md.topic_id_partition.topic
        if md.state is not S.DELETE_SEGMENT_STARTED:
            self._update_state(md, S.DELETE_SEGMENT_STARTED)
        crash_point("delete.after_started", detail)  # DELETE_SEGMENT_STARTED is durable, the objects still there
        self.stats.mark("RemoteDeleteRequestsPerSec", topic)
        try:
            self.rsm.delete_log_segment_data(md)
        except Exception:
            self.stats.mark("RemoteDeleteErrorsPerSec", topic)
            raise
        crash_point("delete.after_store_delete", detail)  # objects gone, DELETE_SEGMENT_FINISHED not written
        self._forget_indexes(md)
        self._update_state(md, S.DELETE_SEGMENT_FINISHED)

    def _forget_indexes(self, md: RemoteLogSegmentMetadata) -> None:
        """The segment was deleted: drop its cached indexes and read-ahead windows."""
        if self.index_cache is not None:
            self.index_cache.remove(md.remote_log_segment_id.id)
        if self.reader is not None:
            self.reader.forget_segment(md.remote_log_segment_id.id)

    def _record_lag(self, st: PartitionTierState) -> None:
        plog = self._log_for(st.tp)
        if plog is None:
            return
        lag_bytes, lag_segments = copy_lag(plog)
        self.stats.set_partition("RemoteCopyLagBytes", st.tp.topic, st.tp.partition, lag_bytes)
        self.stats.set_partition("RemoteCopyLagSegments", st.tp.topic, st.tp.partition, lag_segments)

    # -- expiration ----------------------------------------------------------------------------

    async def _expiration_loop(self, st: PartitionTierState) -> None:
        """Every task interval; after failures (a store that is down fails every retried delete of a
        DELETE_SEGMENT_STARTED segment, e.g. each dangling upload the copy task began to clean) it backs
        off like the copy task, never retrying sooner than the interval, and its WARNING is rate-limited:
        an outage must not turn into one store call and one log line per partition per interval."""
        failures = 0
        logged_at: float | None = None
        while True:
            delay_ms = self.config.task_interval_ms
            try:
                if self.rlmm.is_ready(st.tip) and self.leadership_confirmed(st.tp) and not st.restoring \
                        and not st.read_replica:  # (a read replica's bucket is its origin's to expire)
                    await self.expire_once(st)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:
                failures += 1
                delay_ms = max(delay_ms, self._backoff_ms(failures))
                now = time.monotonic()
                level = logging.DEBUG
                if logged_at is None or now - logged_at >= TASK_FAILURE_LOG_INTERVAL_S or failures == 1:
                    logged_at, level = now, logging.WARNING
                log.log(level, "%s: remote retention failed (attempt %d, next in %d ms): %s: %s", st.tp, failures,
                        delay_ms, type(e).__name__, e)
            await asyncio.sleep(delay_ms / 1000)

    async def expire_once(self, st: PartitionTierState) -> ExpirationPlan | None:
        plog = self._log_for(st.tp)
        if plog is None:
            return None
        started = time.monotonic()
        # The listing first, then the log's state: the local-only bytes must not count a segment the
        # listing already holds as COPY_SEGMENT_FINISHED. The log's own highest remote offset lags the
        # metadata - it is -1 after a restart until the copy task's first run, and a copy finishing
        # between the two reads reaches it later still - and counting an uploaded segment in both
        # tiers inflates the size, so retention.bytes deleted remote data it had to keep (the crash
        # suite saw the retained bytes fall below retention.bytes after a restart).
        segments = await self._run(self._expiration, lambda: list(self.rlmm.list_remote_log_segments(st.tip)))
        if self._log_for(st.tp) is not plog:
            return None
        finished = max((md.end_offset for md in segments if md.state is S.COPY_SEGMENT_FINISHED), default=-1)
        config = plog.config
        delete_policy = "delete" in config.cleanup_policy
        snap = LogSnapshot(
            epoch_entries=[(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.epoch_entries()],
            log_end_offset=plog.log_end_offset, log_start_offset=plog.log_start_offset,
            only_local_size=only_local_size(plog, finished),
            retention_ms=config.retention_ms if delete_policy else -1,
            retention_bytes=config.retention_bytes if delete_policy else -1,
            now_ms=self._clock.milliseconds(),
        )
        plan = await self._run(self._expiration, plan_expiration, segments, snap)
        self.stats.set_partition("RemoteLogSizeComputationTime", st.tp.topic, st.tp.partition,
                                 (time.monotonic() - started) * 1e3)
        self.stats.set_partition("RemoteLogMetadataCount", st.tp.topic, st.tp.partition, plan.metadata_count)
        self.stats.set_partition("RemoteLogSizeBytes", st.tp.topic, st.tp.partition, plan.remote_size)
        if plan.new_log_start_offset is not None and self._log_for(st.tp) is plog:
            plog.update_log_start_offset_from_remote_tier(plan.new_log_start_offset)
            self._on_log_start_changed()
        if plan.to_delete:
            pending_bytes = sum(md.segment_size_in_bytes for md in plan.to_delete)
            self.stats.set_partition("RemoteDeleteLagSegments", st.tp.topic, st.tp.partition, len(plan.to_delete))
            self.stats.set_partition("RemoteDeleteLagBytes", st.tp.topic, st.tp.partition, pending_bytes)
            for md in plan.to_delete:
                await self._run(self._expiration, self._delete_remote_segment, md)
            log.info("%s: deleted %d expired remote segments (%d bytes)", st.tp, len(plan.to_delete), pending_bytes)
            self.stats.set_partition("RemoteDeleteLagSegments", st.tp.topic, st.tp.partition, 0)
            self.stats.set_partition("RemoteDeleteLagBytes", st.tp.topic, st.tp.partition, 0)
        return plan

    # -- reads ---------------------------------------------------------------------------------

    def _submit_read(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue a read on the reader pool, bounded by ``remote.log.reader.max.pending.tasks``."""
        if self._pending_reads >= self.config.reader_max_pending_tasks:
            raise RemoteReadQueueFullError(
                f"{self._pending_reads} remote reads pending (remote.log.reader.max.pending.tasks)")
        self._pending_reads += 1
        fut = asyncio.get_running_loop().run_in_executor(self._reader, fn, *args)

        def done(_: object) -> None:
            self._pending_reads -= 1

        fut.add_done_callback(done)
        return fut

    def read(self, tip: TopicIdPartition, plog: PartitionLog, fetch_offset: int, max_bytes: int,
             min_one_message: bool, read_committed: bool) -> asyncio.Future[RemoteFetchResult]:
        """A Fetch below the local log start: a future the fetch waits on (``remote.fetch.max.wait.ms``)."""
        assert self.reader is not None, "RemoteLogManager not started"
        epochs = [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.epoch_entries()]
        reader = self.reader
        if "compact" in plog.config.cleanup_policy:  # segments with offset gaps (KIP-1272)
            reader.compacted.add(tip)
        else:
            reader.compacted.discard(tip)
        topic = tip.topic
        stats = self.stats
        fetch_quota = self.fetch_quota

        def run() -> RemoteFetchResult:
            started = time.monotonic()
            stats.mark("RemoteFetchRequestsPerSec", topic)
            try:
                result = reader.read(tip, epochs, fetch_offset, max_bytes, min_one_message, read_committed)
            except OffsetOutOfRangeError:
                raise
            except Exception:
                stats.mark("RemoteFetchErrorsPerSec", topic)
                raise
            stats.mark("RemoteFetchBytesPerSec", topic, len(result.records))
            fetch_quota.record(len(result.records))  # KIP-956: Kafka's RemoteLogReader records what it read
            stats.remote.RemoteLogReaderFetchRateAndTimeMs.update((time.monotonic() - started) * 1e3)
            if result.read_ahead_hit is not None:
                (stats.remote.RemoteLogReaderPrefetchHitsPerSec if result.read_ahead_hit
                 else stats.remote.RemoteLogReaderPrefetchMissesPerSec).mark()
            return result

        if not self.rlmm.is_ready(tip):
            future: asyncio.Future[RemoteFetchResult] = asyncio.ensure_future(self._read_when_ready(tip, run))
        else:
            future = self._submit_read(run)
        if self.config.reader_corrupt_segment_action != "skip":
            return future
        return asyncio.ensure_future(self._resume_locally(future, plog, max_bytes, min_one_message, read_committed))

    async def _read_when_ready(self, tip: TopicIdPartition, run: Callable[[], RemoteFetchResult]) -> RemoteFetchResult:
        """A fetch that arrives while the partition's remote metadata is still replaying (a restart, a new
        leader) waits for it, up to half of ``remote.fetch.max.wait.ms`` so the read has the other half.

        Kafka answers such a fetch with an error at once; the consumer then backs off and fetches again,
        a round trip and a failed remote read per partition after every restart. Still loading after the
        wait: RemoteStorageNotReadyError, which the fetch answers REPLICA_NOT_AVAILABLE (retriable).
        """
        deadline = time.monotonic() + self.config.fetch_max_wait_ms / 2000
        while not self.rlmm.is_ready(tip):
            if time.monotonic() >= deadline or self._closed:
                raise RemoteStorageNotReadyError(f"remote log metadata of {tip.topic}-{tip.partition} is still loading")
            await asyncio.sleep(READY_POLL_S)
        return await self._submit_read(run)

    async def _resume_locally(self, future: asyncio.Future[RemoteFetchResult], plog: PartitionLog, max_bytes: int,
                              min_one_message: bool, read_committed: bool) -> RemoteFetchResult:
        """Action ``skip`` past the last remote segment: serve the local log from ``resume_offset``.

        Without it a consumer whose offset is in a corrupt last remote segment would get empty answers
        for that offset forever. Runs on the event loop, the log's owner.
        """
        result = await future
        offset = result.resume_offset
        if offset is None or not plog.local_log_start_offset <= offset < plog.log_end_offset:
            return result
        isolation = FetchIsolation.TXN_COMMITTED if read_committed else FetchIsolation.HIGH_WATERMARK
        records = plog.read(offset, max_bytes, isolation, min_one_message).records
        data = records.read() if records is not None and records.size else b""
        if not data:
            return result
        return RemoteFetchResult(data, offset, [] if read_committed else None, not read_committed,
                                 plog.last_stable_offset)

    def find_offset_by_timestamp(self, tip: TopicIdPartition, plog: PartitionLog,
                                 timestamp: int) -> asyncio.Future[TimestampAndOffset | None]:
        """ListOffsets by time over the remote-only part of the log (remote time indexes first)."""
        assert self.reader is not None, "RemoteLogManager not started"
        reader, (epochs, start, local_start, in_lineage) = self.reader, _remote_view(plog)

        def run() -> TimestampAndOffset | None:
            return reader.find_offset_by_timestamp(tip, epochs, timestamp, start, local_log_start_offset=local_start,
                                                   segment_filter=in_lineage)

        return self._submit_read(run)

    def find_max_timestamp(self, tip: TopicIdPartition, plog: PartitionLog,
                           local_max_timestamp: int | None) -> asyncio.Future[TimestampAndOffset | None]:
        """ListOffsets MAX_TIMESTAMP over the remote-only part of the log (KAFKA-17552), on the reader pool:
        the first record with the largest remote timestamp when it is at least ``local_max_timestamp``
        (ties go to the remote, earlier, offset), else None (``RemoteLogReader.find_max_timestamp``)."""
        assert self.reader is not None, "RemoteLogManager not started"
        reader, (_epochs, start, local_start, in_lineage) = self.reader, _remote_view(plog)

        def run() -> TimestampAndOffset | None:
            return reader.find_max_timestamp(tip, start, local_start, local_max_timestamp, segment_filter=in_lineage)

        return self._submit_read(run)

    # -- the scrubber --------------------------------------------------------------------------

    def _start_scrubber(self) -> None:
        """The background scrubber (``remote.log.scrubber.*``, tiered/scrubber.py): it re-reads the remote segments
        of the partitions this broker leads, so damage in the store is found before a fetch needs the data."""
        if self.scrubber is not None or self._closed or self.config.scrubber_bytes_per_second <= 0:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # built outside the broker's loop (a tool, a test): nothing runs in the background
            return

        def targets() -> list[TopicIdPartition]:
            return [st.tip for st in self._partitions.values()
                    if self.rlmm.is_ready(st.tip) and self.leadership_confirmed(st.tp)]

        def leading(tip: TopicIdPartition) -> bool:
            st = self._partitions.get(TopicPartition(tip.topic, tip.partition))
            return st is not None and st.tip == tip and not self._closed

        self.scrubber = RemoteScrubber(self.rsm, self.rlmm, targets=targets, leading=leading,
                                       metrics=self.stats.scrubber,
                                       bytes_per_second=self.config.scrubber_bytes_per_second,
                                       interval_ms=self.config.scrubber_interval_ms, clock_ms=self._clock.milliseconds)
        self.scrubber.start()

    def scrub_state(self, tp: TopicPartition) -> dict[str, Any] | None:
        """The scrubber's view of a led partition for ``/v1/tiers`` (None: off, or not scrubbed here yet)."""
        state = self.scrubber.state(tp) if self.scrubber is not None else None
        return state.to_json() if state is not None else None

    # -- state for tools -----------------------------------------------------------------------

    def remote_summary(self, tip: TopicIdPartition) -> tuple[int, int]:
        """(segments, bytes) of COPY_SEGMENT_FINISHED data of a partition."""
        count = size = 0
        try:
            for md in self.rlmm.list_remote_log_segments(tip):
                if md.state is S.COPY_SEGMENT_FINISHED:
                    count += 1
                    size += md.segment_size_in_bytes
        except Exception:  # not loaded yet, or stopped
            pass
        return count, size


def _plugin(key: str, name: str, aliases: dict[str, str], base: type[T], prefix: str,
            configs: dict[str, Any]) -> T:
    """Load and configure a plugin; a bad class or bad plugin props is a config error naming the key."""
    try:
        plugin = load_class(name, aliases, base)()
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value {name!r} for configuration {key}: {e}") from None
    try:
        plugin.configure(configs)  # type: ignore[attr-defined]
    except (ValueError, TypeError, RemoteStorageError) as e:
        raise InvalidConfigError(f"{type(plugin).__name__} rejected its {prefix}* configuration: {e}") from None
    return plugin


def _remote_view(plog: PartitionLog) -> tuple[list[tuple[int, int]], int, int,
                                              Callable[[RemoteLogSegmentMetadata], bool]]:
    """What a search of the remote-only range needs, read on the event loop (the log's owner): the epoch
    entries, log start, local log start, and a filter keeping the segments of this log's lineage."""
    epochs = [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.epoch_entries()]
    lineage = build_filtered_leader_epoch_map(epochs)
    leo = plog.log_end_offset

    def in_lineage(md: RemoteLogSegmentMetadata) -> bool:
        return is_remote_segment_within_leader_epochs(md, leo, lineage)

    return epochs, plog.log_start_offset, plog.local_log_start_offset, in_lineage


def only_local_size(plog: PartitionLog, remote_end_offset: int = -1) -> int:
    """Bytes of local segments not yet in remote storage (Kafka's ``onlyLocalLogSegmentsSize``);
    ``remote_end_offset``: the highest end offset a metadata listing shows uploaded, when the log's
    ``highest_offset_in_remote_storage`` has not caught up with it yet. ``>``, not Kafka's ``>=``: a
    segment starting at the highest uploaded offset holds that offset, so it is the uploaded one (a
    one-batch segment, as in Kafka's own tiered tests) and must not be counted a second time."""
    highest = max(plog.highest_offset_in_remote_storage, remote_end_offset)
    return sum(s.size for s in plog.segments if s.base_offset > highest)


def copy_lag(plog: PartitionLog) -> tuple[int, int]:
    """Kafka's RemoteCopyLagBytes/Segments: local data not yet uploaded, the active segment excluded."""
    highest = plog.highest_offset_in_remote_storage
    segments = plog.segments
    waiting = [s for s, nxt in zip(segments, segments[1:], strict=False) if nxt.base_offset - 1 > highest]
    return sum(s.size for s in waiting), len(waiting)
