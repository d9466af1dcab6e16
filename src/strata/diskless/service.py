"""``DisklessService``: diskless topics (KIP-1150) on this broker, for the handlers to call.

It puts the pieces together: the journaled coordinator over ``__diskless_metadata`` (created on the first
diskless topic), the WAL writer (produce: validated batches into shared WAL objects, uploaded, committed,
answered), the reader (fetch: the coordinator's batch coordinates, range reads through the block cache,
offsets injected) and the housekeeping (WAL objects no batch refers to any more are deleted after a grace
period; objects uploaded but never committed are swept).

Handlers see a narrow surface: :meth:`is_diskless`, :meth:`produce`, :meth:`fetch`, :meth:`list_offsets`,
:meth:`wait_for_commit` and the topic lifecycle hooks. A diskless topic still has its local partition
directories (they stay empty; consolidation into KIP-405 segments will fill them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.common import TopicPartition
from strata.common.clock import Clock
from strata.config.broker_config import BrokerConfig
from strata.diskless.consolidation import Consolidator, Hosted
from strata.diskless.coordinator.api import (
    AdvanceLogStartRequest,
    CommitBatchResponse,
    CommitFileRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    FindBatchRequest,
    InitDisklessLogRequest,
    IsolationLevel,
    ListOffsetsRequest,
    ListOffsetsResponse,
    LogInfo,
    TopicIdPartition,
)
from strata.diskless.coordinator.journal import JournaledControlPlane
from strata.diskless.metadata_log import (
    DISKLESS_METADATA_TOPIC,
    METADATA_PARTITION,
    Forward,
    MetadataTopicLog,
    Observer,
)
from strata.diskless.reader import ObjectCache, PartitionRead, Reader
from strata.diskless.writer import WriteEntry, Writer, WriterConfig, WriteResult
from strata.diskless.writer.object_key import parse_object_key
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.protocol.records import ControlRecordType, build_control_batch
from strata.replication.replica_manager import ReplicaManager
from strata.tiered.api import ObjectStore, RemoteStorageError

log = logging.getLogger("strata.diskless")

COORDINATOR_DB = "diskless-coordinator-0.sqlite"
LOG_INFO_REFRESH_MS = 2000
SNAPSHOTS_KEPT = 3
RETENTION_MAX_BATCHES = 2000  # per partition and run (Inkless's inkless.retention.enforcement.max.batches.per.request)

CreateTopic = Callable[[str, int, int, dict[str, str]], Awaitable[Any]]
"""Create a topic (name, partitions, replication factor, configs) through the broker's topic admin."""


@dataclass(slots=True)
class DisklessStats:
    """What the service itself counts (the writer, reader and cache keep their own); read by the metrics."""

    produce_latency_ms: deque[int] = field(default_factory=lambda: deque(maxlen=1024))
    find_batches_latency_ms: deque[int] = field(default_factory=lambda: deque(maxlen=1024))
    objects_deleted: int = 0
    orphans_deleted: int = 0
    delete_requests: int = 0


class DisklessService:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, topics: Any, store: ObjectStore,
                 clock: Clock, clustered: bool, create_topic: CreateTopic, live_brokers: Callable[[], int],
                 forward: Forward | None = None, truncate: Callable[[int], int] | None = None,
                 classic_following: Callable[[TopicPartition], bool] = lambda tp: False,
                 stop_following: Callable[[TopicPartition], None] = lambda tp: None,
                 observer: Observer | None = None) -> None:
        self.config = config
        self.dc = config.diskless
        self.replicas = replicas
        self.topics = topics
        self.store = store
        self.clock = clock
        self.clustered = clustered
        self._create_topic = create_topic
        self._live_brokers = live_brokers
        self._truncate = truncate
        self._classic_following = classic_following  # a switched partition's follower still fetching its classic part
        self.snapshot_prefix = f"{self.dc.object_key_prefix}/coordinator"
        self._last_snapshot = -1
        self.observer = observer  # reads __diskless_metadata from its leader when this broker holds no replica
        self.metadata_log = MetadataTopicLog(replicas, clustered, forward, observer)
        self.coordinator = JournaledControlPlane(self.metadata_log,
                                                 str(Path(config.log_dirs[0]) / COORDINATOR_DB), clock.milliseconds,
                                                 self._newest_snapshot)
        self.wal_prefix = f"{self.dc.object_key_prefix}/wal"
        self.cache = ObjectCache(store, max_bytes=self.dc.cache_max_bytes, lifespan_s=self.dc.cache_lifespan_ms / 1000,
                                 clock=clock)
        self.reader = Reader(self.cache, lagging_threshold_ms=self.dc.cache_lifespan_ms)
        self.writer = Writer(
            broker_id=config.node_id, store=store, commit=self._commit, is_safe_to_delete=self._is_safe_to_delete,
            config=WriterConfig(max_bytes=self.dc.buffer_max_bytes, commit_interval_ms=self.dc.commit_interval_ms,
                                max_upload_attempts=self.dc.max_upload_attempts,
                                upload_backoff_ms=self.dc.upload_backoff_ms,
                                max_uploads_in_flight=self.dc.max_uploads_in_flight,
                                object_key_prefix=self.wal_prefix),
            clock=clock, on_uploaded=self.cache.prefill)
        self.consolidator = Consolidator(self._hosted, self.coordinator.query, self.coordinator.execute,
                                         self.reader.read, replicas.notify, clock.milliseconds,
                                         self.dc.consolidation_fetch_max_bytes, self.dc.consolidation_prune_interval_ms,
                                         stop_following, replicas.consolidating)
        self._committed = asyncio.Event()
        self._opening = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self.stats = DisklessStats()
        self.log_infos: dict[tuple[uuid.UUID, int], LogInfo] = {}  # the coordinator's view, for /v1/tiers

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._started

    def metadata_topic_configs(self) -> dict[str, str]:
        """The command log keeps every command until snapshots let it be truncated."""
        dc = self.dc
        replicas = dc.metadata_replication_factor if self.clustered else 1
        return {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                "segment.bytes": str(dc.metadata_segment_bytes),
                "min.insync.replicas": str(min(dc.metadata_min_isr, replicas)),
                "unclean.leader.election.enable": "false", "compression.type": "producer"}

    async def start(self) -> None:
        """Open the coordinator state and replay what it has not applied (a single node: its own log is
        all committed). Nothing is created until the first diskless topic needs it; in a cluster the
        replay loop also notices a replica of ``__diskless_metadata`` another broker's first diskless topic
        made here."""
        if self.replicas.local_log(METADATA_PARTITION) is not None:
            await self._open()
        if self.clustered:
            self._tasks.append(asyncio.get_running_loop().create_task(self._replay(), name="diskless-replay"))

    def _can_serve(self) -> bool:
        """This broker holds a replica of ``__diskless_metadata``, or (a cluster larger than its replication
        factor) the topic exists and an observer can read it from its leader."""
        if self.replicas.local_log(METADATA_PARTITION) is not None:
            return True
        return self.observer is not None and self.topics.get(DISKLESS_METADATA_TOPIC) is not None

    async def _replay(self) -> None:
        """Cluster mode: apply what the leader committed (other brokers' commands) as it arrives."""
        while True:
            try:
                if not self._can_serve():
                    await asyncio.sleep(0.5)
                    continue
                if not self._started:
                    await self._open()
                applied = self.coordinator.applied_offset
                if await self.coordinator.catch_up() != applied:
                    self._notify_commit()
                await self.metadata_log.wait_for_commands(1.0)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - logged; the loop goes on (a failed replica stops in catch_up)
                log.warning("diskless coordinator replay: %s", e)
                await asyncio.sleep(1.0)

    async def _open(self) -> None:
        """Once, whoever calls first (start, the replay loop, the first diskless topic) while others wait."""
        async with self._opening:
            await self._open_once()

    async def _open_once(self) -> None:
        if self._started:
            return
        if not self.clustered:
            plog = self.replicas.get_log(METADATA_PARTITION)
            plog.update_high_watermark(plog.log_end_offset)  # the only replica: everything written is committed
        await self.coordinator.start()
        if self.observer is not None and self.metadata_log.observing():
            log.info("no replica of %s on this broker: following it from its leader", DISKLESS_METADATA_TOPIC)
            self.observer.start(self.coordinator.applied_offset + 1)
            await self.observer.wait(5.0)  # the first answer (the log start, the first commands)
        applied = await self.coordinator.catch_up()
        self._started = True
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._clean_files_periodically(), name="diskless-file-cleaner"))
        self._tasks.append(loop.create_task(self._sweep_orphans_periodically(), name="diskless-orphan-sweeper"))
        self._tasks.append(loop.create_task(self._periodically(self.dc.snapshot_interval_ms, self.snapshot,
                                                               "snapshot"), name="diskless-snapshot"))
        self._tasks.append(loop.create_task(self._periodically(LOG_INFO_REFRESH_MS, self.refresh_log_infos,
                                                               "partition view"), name="diskless-log-infos"))
        self._tasks.append(loop.create_task(self.consolidator.run(self.dc.consolidation_interval_ms,
                                                                  self.wait_for_commit), name="diskless-consolidation"))
        self._tasks.append(loop.create_task(self._periodically(self.config.log_retention_check_interval_ms,
                                                               self.enforce_retention, "retention"),
                                            name="diskless-retention"))
        # A partition the coordinator does not know (created while it was down, or a classic topic switched to
        # diskless) is initialized by its leader's consolidator, at its classic log's end (see seal_request).
        log.info("diskless coordinator ready (applied up to offset %d of %s)", applied, DISKLESS_METADATA_TOPIC)

    async def _all_logs(self) -> list[LogInfo]:
        parts = [TopicIdPartition(info.topic_id, p) for info in self.topics if self.is_diskless(info.name)
                 for p in range(info.partitions)]
        if not parts:
            return []
        return [i for i in await self.coordinator.query(lambda s: s.get_logs(parts)) if i.error == ErrorCode.NONE]

    async def ensure_started(self) -> None:
        """Create ``__diskless_metadata`` (single node) and open the coordinator, on the first diskless topic."""
        if self._started:
            return
        if self.topics.get(DISKLESS_METADATA_TOPIC) is None:
            replicas = min(self.dc.metadata_replication_factor, self._live_brokers()) if self.clustered else 1
            try:
                await self._create_topic(DISKLESS_METADATA_TOPIC, 1, replicas, self.metadata_topic_configs())
            except KafkaError as e:
                if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
        deadline = asyncio.get_running_loop().time() + 30
        while not self._can_serve():  # the controller's decision reaching us
            if asyncio.get_running_loop().time() > deadline:
                raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{DISKLESS_METADATA_TOPIC} has not reached "
                               "this broker yet")
            await asyncio.sleep(0.1)
        await self._open()

    async def open_for_requests(self, timeout_s: float = 10.0) -> None:
        """A request for a diskless topic reached this broker before its coordinator replica opened (the
        topic was created through another broker a moment ago): open it now, or say it is not available
        (COORDINATOR_NOT_AVAILABLE, retriable) when this broker holds no replica of ``__diskless_metadata``
        within ``timeout_s``."""
        try:
            await asyncio.wait_for(self._open_when_hosted(), timeout_s)
        except TimeoutError:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the diskless coordinator is not open on this "
                           f"broker yet (no replica of {DISKLESS_METADATA_TOPIC} here)") from None

    async def _open_when_hosted(self) -> None:
        while not self._can_serve():
            await asyncio.sleep(0.05)
        await self._open()

    async def stop(self) -> None:
        if self.observer is not None:
            await self.observer.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await self.writer.close()
        except Exception:  # noqa: BLE001 - shutting down: say so and go on
            log.exception("closing the diskless writer failed")
        await self.coordinator.close()

    # -- topics ---------------------------------------------------------------------------------

    def classic_end(self, tp: TopicPartition) -> int | None:
        """Where a hosted switched partition's classic part ends, once sealed (see ``Consolidator.classic_end``)."""
        return self.consolidator.classic_end(tp)

    def is_diskless(self, topic: str) -> bool:
        info = self.topics.get(topic)
        return info is not None and bool(info.configs) and self.topics.config(topic).diskless_enable

    def _hosted(self) -> list[Hosted]:
        """This broker's replicas of diskless partitions (what the consolidator fills)."""
        out = []
        partitions = self.replicas.partitions
        for info in self.topics:
            if not self.is_diskless(info.name):
                continue
            for p in range(info.partitions):
                part = partitions.get(TopicPartition(info.name, p))
                if part is not None:
                    out.append(Hosted(part.tp, info.topic_id, part.log, part.is_leader or not self.clustered,
                                      part.leader_epoch, self._classic_following(part.tp)))
        return out

    async def on_topic_created(self, name: str, topic_id: uuid.UUID, partitions: int, first_new: int = 0) -> None:
        """A diskless topic created (or partitions ``first_new..`` added): they start empty, at offset 0 and
        leader epoch 0. Partitions that existed before are left alone: an added partition must not
        initialize one whose classic-to-diskless switch is still pending at 0 (its leader seals it)."""
        await self.ensure_started()
        await self.coordinator.execute("init_diskless_log", [
            InitDisklessLogRequest(topic_id, name, p, 0, 0, 0) for p in range(first_new, partitions)])

    async def on_topic_deleted(self, topic_id: uuid.UUID) -> None:
        if self._started:
            await self.coordinator.execute("delete_topic", topic_id)

    # -- produce --------------------------------------------------------------------------------

    def submit(self, entries: Sequence[WriteEntry]) -> asyncio.Future[list[WriteResult]]:
        """Buffer one produce request's diskless partitions in the active WAL object now (synchronously, so a
        connection's pipelined requests join the file in their order); the future answers them once the
        object is committed. The produce latency is measured from here to the answer."""
        if not self._started:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the diskless coordinator is not running")
        started = time.monotonic()
        answer = self.writer.submit(entries)
        answer.add_done_callback(
            lambda _: self.stats.produce_latency_ms.append(int((time.monotonic() - started) * 1000)))
        return answer

    async def produce(self, entries: Sequence[WriteEntry]) -> list[WriteResult]:
        return await asyncio.shield(self.submit(entries))

    async def write_markers(self, partitions: Sequence[tuple[uuid.UUID, str, int]], producer_id: int,
                            producer_epoch: int, commit: bool, coordinator_epoch: int) -> list[int]:
        """COMMIT/ABORT markers on diskless partitions: control batches committed like any batch, through this
        broker's WAL (no leader to send them to). The coordinator closes the producer's open transaction on
        each partition, moving its last stable offset, and lists an aborted one for read_committed fetches.
        One error code per partition."""
        if not self._started:
            return [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(partitions)
        marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = build_control_batch(marker, producer_id=producer_id, producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch)
        entries = [WriteEntry.parse(topic_id, name, p, batch) for topic_id, name, p in partitions]
        try:
            results = await self.writer.write(entries)
        except KafkaError as e:
            return [e.error_code] * len(partitions)
        return [int(r.error) for r in results]

    async def _commit(self, request: CommitFileRequest) -> list[CommitBatchResponse]:
        responses: list[CommitBatchResponse] = await self.coordinator.execute("commit_file", request)
        self._notify_commit()
        return responses

    def _notify_commit(self) -> None:
        self._committed.set()
        self._committed = asyncio.Event()

    async def _is_safe_to_delete(self, key: str) -> bool:
        return bool(await self.coordinator.query(lambda s: s.is_safe_to_delete_file(key)))

    async def wait_for_commit(self, timeout_s: float) -> None:
        """Return at the next commit applied here, or after ``timeout_s`` (a fetch's long-poll)."""
        try:
            await asyncio.wait_for(self._committed.wait(), timeout_s)
        except TimeoutError:
            pass

    # -- fetch ----------------------------------------------------------------------------------

    async def fetch(self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int,
                    read_committed: bool) -> list[PartitionRead]:
        isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        started = time.monotonic()
        found = await self.coordinator.query(
            lambda s: s.find_batches(requests, fetch_max_bytes=fetch_max_bytes, isolation_level=isolation))
        self.stats.find_batches_latency_ms.append(int((time.monotonic() - started) * 1000))
        return await self.reader.read(found, self.clock.milliseconds())

    async def list_offsets(self, requests: Sequence[ListOffsetsRequest],
                           read_committed: bool) -> list[ListOffsetsResponse]:
        isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        return list(await self.coordinator.query(lambda s: s.list_offsets(requests, isolation_level=isolation)))

    async def delete_records(self, requests: Sequence[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """DeleteRecords across both tiers: the coordinator drops the WAL batches below the offset and raises
        the cross-tier log start, which every replica's consolidation follows (its local and remote tiers
        then delete below it as for any DeleteRecords). The low watermark answered is the cross-tier one."""
        out = list(await self.coordinator.execute("delete_records", list(requests)))
        advance = [AdvanceLogStartRequest(r.topic_id, r.partition,
                                          req.offset if req.offset >= 0 else r.log_start_offset)
                   for req, r in zip(requests, out, strict=True) if r.error == ErrorCode.NONE]
        if advance:
            moved = {(a.topic_id, a.partition): a for a in await self.coordinator.execute("advance_log_start", advance)}
            for i, r in enumerate(out):
                a = moved.get((r.topic_id, r.partition))
                if a is not None and a.error == ErrorCode.NONE and a.remote_log_start_offset is not None:
                    out[i] = dataclasses.replace(r, log_start_offset=a.remote_log_start_offset)
                    self._follow_log_start(r.topic_id, r.partition, a.remote_log_start_offset)
        self._notify_commit()  # the other replicas here and there follow at their next consolidation round
        return out

    def _follow_log_start(self, topic_id: uuid.UUID, partition: int, offset: int) -> None:
        """This broker's replica stops serving below a new log start at once (DeleteRecords' answer)."""
        info = self.topics.by_id(topic_id)
        plog = self.replicas.local_log(TopicPartition(info.name, partition)) if info is not None else None
        if plog is not None:
            plog.maybe_increment_log_start_offset(offset)

    async def log_infos_now(self, partitions: Sequence[tuple[uuid.UUID, int]]) -> list[LogInfo]:
        """The coordinator's current view of these partitions (one query)."""
        parts = [TopicIdPartition(t, p) for t, p in partitions]
        return list(await self.coordinator.query(lambda s: s.get_logs(parts)))

    async def log_info(self, topic_id: uuid.UUID, partition: int) -> LogInfo:
        (info,) = await self.coordinator.query(lambda s: s.get_logs([TopicIdPartition(topic_id, partition)]))
        return info

    # -- housekeeping ---------------------------------------------------------------------------

    # -- snapshots --------------------------------------------------------------------------------

    def _leads_metadata(self) -> bool:
        part = self.replicas.partitions.get(METADATA_PARTITION)
        return not self.clustered or (part is not None and part.is_leader)

    async def snapshot(self) -> int | None:
        """The leader of ``__diskless_metadata`` uploads its state (``<prefix>/coordinator/<offset>.sqlite``)
        and truncates the topic below it, so a restart replays only what came after, and the topic's disk
        stays bounded. A replica that finds the commands it needs truncated away restores the newest
        snapshot (:meth:`_newest_snapshot`). The three newest snapshots are kept."""
        if not self._leads_metadata() or self._truncate is None:
            return None
        if self.coordinator.applied_offset - max(self._last_snapshot, 0) < self.dc.snapshot_min_commands:
            return None
        offset, image = await self.coordinator.snapshot()
        key = f"{self.snapshot_prefix}/{offset:020d}.sqlite"
        await asyncio.to_thread(self.store.put_object, key, image)
        self._last_snapshot = offset
        low = self._truncate(offset + 1)
        log.info("diskless coordinator snapshot at offset %d (%d bytes) uploaded; %s now starts at %d", offset,
                 len(image), DISKLESS_METADATA_TOPIC, low)
        old = sorted(await self._snapshot_keys())[:-SNAPSHOTS_KEPT]
        if old:
            await asyncio.to_thread(self.store.delete_objects, [k for _, k in old])
        return offset

    async def _snapshot_keys(self) -> list[tuple[int, str]]:
        def listing() -> list[tuple[int, str]]:
            out = []
            for info in self.store.list_objects(f"{self.snapshot_prefix}/"):
                name = info.key.rsplit("/", 1)[-1]
                if name.endswith(".sqlite") and name[:-7].isdigit():
                    out.append((int(name[:-7]), info.key))
            return out
        return await asyncio.to_thread(listing)

    async def _newest_snapshot(self, at_least: int) -> bytes | None:
        found = [(o, k) for o, k in await self._snapshot_keys() if o >= at_least]
        if not found:
            return None
        _, key = max(found)
        return bytes(await asyncio.to_thread(self.store.get_object_range, key, 0, 1 << 40))

    async def refresh_log_infos(self) -> None:
        """Every diskless partition's log start, high watermark and WAL bytes, as this replica knows them
        (``/v1/tiers`` reads them on the event loop, where the coordinator's thread cannot be asked)."""
        self.log_infos = {(i.topic_id, i.partition): i for i in await self._all_logs()}

    async def enforce_retention(self) -> int:
        """Each diskless partition's ``retention.ms`` and ``retention.bytes``, as one command. Run by the
        broker leading ``__diskless_metadata`` (every broker on a single node is that one): the command is
        the same whoever sends it, so one sender is enough."""
        part = self.replicas.partitions.get(METADATA_PARTITION)
        if self.clustered and (part is None or not part.is_leader):
            return 0
        requests = []
        for info in self.topics:
            if self.is_diskless(info.name):
                config = self.topics.config(info.name)
                requests += [EnforceRetentionRequest(info.topic_id, p, config.retention_bytes, config.retention_ms)
                             for p in range(info.partitions)]
        if not requests or all(r.retention_bytes < 0 and r.retention_ms < 0 for r in requests):
            return 0
        results = await self.coordinator.execute("enforce_retention", (requests, RETENTION_MAX_BATCHES))
        # Expired WAL batches expire the partition up to them: older data (consolidated, tiered) is older still
        # (Kafka's retention deletes from the oldest segment on), so the cross-tier log start follows, and every
        # replica's consolidated log with it.
        moved = [AdvanceLogStartRequest(r.topic_id, r.partition, r.log_start_offset) for r in results
                 if r.error == ErrorCode.NONE and r.batches_deleted]
        if moved:
            await self.coordinator.execute("advance_log_start", moved)
            self._notify_commit()
        deleted = sum(r.batches_deleted for r in results)
        if deleted:
            log.info("retention deleted %d diskless batches (%d bytes)", deleted, sum(r.bytes_deleted for r in results))
        return deleted

    async def clean_files(self) -> int:
        """Delete WAL objects no batch refers to any more, once their grace period is over (reads that
        found their coordinates just before still find the object), then forget them."""
        now = self.clock.milliseconds()
        due = await self.coordinator.query(
            lambda s: s.files_to_delete(now_ms=now, grace_period_ms=self.dc.file_cleaner_retention_ms))
        if not due:
            return 0
        keys = [f.object_key for f in due]
        await asyncio.to_thread(self.store.delete_objects, keys)
        self.stats.objects_deleted += len(keys)
        self.stats.delete_requests += 1
        for key in keys:
            self.cache.invalidate(key)
        await self.coordinator.execute("delete_files", keys)
        log.info("deleted %d WAL object(s) no batch refers to", len(keys))
        return len(keys)

    async def sweep_orphans(self) -> int:
        """Delete WAL objects never committed (a broker killed between upload and commit) once they are
        older than ``diskless.orphan.grace.ms``: far above any upload-to-commit time, so an object whose
        commit is still on its way is never taken."""
        now = self.clock.milliseconds()
        cutoff = now - self.dc.orphan_grace_ms

        def old_keys() -> list[str]:
            out = []
            for info in self.store.list_objects(f"{self.wal_prefix}/"):
                parsed = parse_object_key(self.wal_prefix, info.key)
                created = parsed.created_ms if parsed is not None else info.last_modified_ms
                if created < cutoff and info.last_modified_ms < cutoff:
                    out.append(info.key)
            return out
        candidates = await asyncio.to_thread(old_keys)
        orphans = [k for k in candidates if await self._is_safe_to_delete(k)]
        if orphans:
            await asyncio.to_thread(self.store.delete_objects, orphans)
            self.stats.orphans_deleted += len(orphans)
            self.stats.delete_requests += 1
            log.warning("deleted %d WAL object(s) uploaded but never committed (older than %d ms)", len(orphans),
                        self.dc.orphan_grace_ms)
        return len(orphans)

    async def _clean_files_periodically(self) -> None:
        await self._periodically(self.dc.file_cleaner_interval_ms, self.clean_files, "file cleaner")

    async def _sweep_orphans_periodically(self) -> None:
        await self._periodically(max(self.dc.orphan_grace_ms // 4, 1000), self.sweep_orphans, "orphan sweeper")

    async def _periodically(self, interval_ms: int, job: Callable[[], Any], name: str) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except (KafkaError, RemoteStorageError, OSError) as e:
                log.warning("diskless %s: %s (retried in %d ms)", name, e, interval_ms)
            except Exception:
                log.exception("diskless %s failed", name)


def diskless_tier_rows(info: Any, log_infos: dict[tuple[uuid.UUID, int], LogInfo],
                       replicas: dict[int, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """``/v1/tiers`` rows of a diskless topic: this broker's consolidated replica (its local and remote tiers,
    when it holds one) with the coordinator's view on top: the partition's offsets, and the WAL (from
    ``wal_start_offset``, ``wal_bytes``) that consolidation has not yet moved into the remote tier."""
    rows = []
    for p in range(info.partitions):
        found = log_infos.get((info.topic_id, p))
        local = replicas.get(p)
        row: dict[str, Any] = dict(local) if local is not None else {
            "topic": info.name, "partition": p, "topic_id": str(info.topic_id), "remote_storage_enable": True,
            "local_segments": 0, "local_bytes": 0}
        row["diskless"] = True
        if local is not None:
            row["consolidated_offset"] = local["log_end_offset"]
        if found is not None:
            cross = found.remote_log_start_offset
            row.update(log_start_offset=found.log_start_offset if cross is None else cross,
                       wal_start_offset=found.log_start_offset, high_watermark=found.high_watermark,
                       log_end_offset=found.high_watermark, last_stable_offset=found.last_stable_offset,
                       wal_bytes=found.byte_size)
        rows.append(row)
    return rows
