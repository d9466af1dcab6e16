"""``LogManager``: every partition log under ``log.dirs``, with Kafka's per-directory files.

Per log directory: ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` (high watermarks) and the ``.kafka_cleanshutdown`` marker. The
marker is written last on a clean shutdown and removed right after startup, so its presence at
the next start proves every log was flushed and closed, which lets loading skip recovery.

Deleting logs (Kafka's ``LogManager.asyncDelete``): each directory is renamed to
``<topic>-<p>.<uuid>-delete`` at once, its files are removed ``file.delete.delay.ms`` later on the
scheduler's thread, and the checkpoints are rewritten once per call, not once per partition (each
rewrite holds every partition of the directory: deleting a topic of N partitions used to write 3N
files of all partitions, with two fsyncs each, on the event loop). Inside :meth:`deferred_checkpoint`
even that one rewrite waits for the end of the block. A stale checkpoint entry is harmless - at
startup only existing partition directories are loaded - except for a new log of the same
partition, which would inherit the deleted log's recovery point and log start offset after a
crash; so creating a log whose partition was deleted since the last checkpoint writes the
checkpoints first.
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from strata.common import Clock, Scheduler, TopicPartition
from strata.config import LogConfig
from strata.errors import KafkaStorageError
from strata.log import dir_move
from strata.log.checkpoints import (
    CorruptCheckpointError,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    atomic_write,
)
from strata.log.cleaner.manager import LogCleanerManager
from strata.log.files import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from strata.log.loader import load_partition_log
from strata.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_DELETE_DIR = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")
DELETE_DIR_SUFFIX = "-delete"

ConfigFor = Callable[[str], LogConfig]


def parse_partition_dir(name: str) -> TopicPartition | None:
    match = _PARTITION_DIR.match(name)
    if match is None or "." in name.rsplit("-", 1)[1]:
        return None
    return TopicPartition(match["topic"], int(match["partition"]))


def _read_offsets_or_reset(path: Path, consequence: str) -> dict[TopicPartition, int]:
    """A per-directory offset checkpoint, or an empty map (with a WARNING) when the file is corrupt.

    Kafka's ``LogManager.loadLogs`` does the same for the recovery-point and log-start files, and it is
    safe for all three: no recovery point means every segment is re-checked (only slower), no log start
    means the first segment's base offset (records removed by DeleteRecords inside that segment come
    back, none is lost), and no high watermark means the log end offset, which a single replica has
    acknowledged anyway. Refusing to start over a file that only speeds up a restart would turn one bad
    sector into a broker that never comes back. An unreadable file (an I/O error) still fails.
    """
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpointError as e:
        log.warning("ignoring corrupt checkpoint file %s (%s): %s", path, e, consequence)
        return {}


# a log directory and the contents of its three checkpoint files: recovery points, log starts, high watermarks
_DirCheckpoints = tuple[Path, dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, int]]


class LogManager:
    def __init__(self, log_dirs: Iterable[Path], config_for: ConfigFor, clock: Clock, scheduler: Scheduler,
                 *, remote_log_enabled_for: Callable[[str], bool] | None = None) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise KafkaStorageError("log.dirs is empty")
        self._config_for = config_for
        self._remote_enabled = remote_log_enabled_for or (lambda _topic: False)
        self._clock = clock
        self._scheduler = scheduler
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self.had_clean_shutdown: dict[Path, bool] = {}
        self._deferring = 0  # depth of deferred_checkpoint() blocks
        self.moving: dict[TopicPartition, tuple[Path, Path]] = {}  # tp -> (target log dir, its -future dir)
        self._deleted_since_checkpoint: set[TopicPartition] = set()
        self._checkpoint_lock = threading.Lock()  # the event loop's rewrites and the scheduler thread's
        self._checkpoint_taken = 0
        self._checkpoint_written = 0
        # The log cleaner's view of the logs (their clean offsets); its threads are the broker's to start.
        self.cleaner_manager = LogCleanerManager(self.log_dirs, lambda: self._logs, self.log_dir_of)

    # -- startup and shutdown ------------------------------------------------------------------

    def startup(self) -> None:
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
        for path in dir_move.recover_moves(self.log_dirs):  # a crash during a move between log dirs
            self._schedule_dir_removal(path, 0)
        for log_dir in self.log_dirs:
            self._load_dir(log_dir)
        self.cleaner_manager = LogCleanerManager(self.log_dirs, lambda: self._logs, self.log_dir_of)
        self.checkpoint()

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        self.had_clean_shutdown[log_dir] = clean
        if not clean and any(parse_partition_dir(p.name) for p in log_dir.iterdir() if p.is_dir()):
            log.warning("no clean shutdown marker in %s: recovering logs from their recovery points", log_dir)
        recovery_points = _read_offsets_or_reset(log_dir / RECOVERY_POINT_CHECKPOINT,
                                                 "recovering every log from its first segment")
        log_starts = _read_offsets_or_reset(log_dir / LOG_START_OFFSET_CHECKPOINT,
                                            "log start offsets reset to the base offset of the first segment")
        high_watermarks = _read_offsets_or_reset(log_dir / REPLICATION_OFFSET_CHECKPOINT,
                                                 "high watermarks reset to the log end offsets")
        for path in sorted(log_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_DIR_SUFFIX):
                self._schedule_dir_removal(path, 0)
                continue
            tp = parse_partition_dir(path.name)
            if tp is None:
                continue
            if tp in self._logs:
                raise KafkaStorageError(f"duplicate log directories for {tp}: {self._dir_of[tp]} and {path}")
            self._logs[tp] = load_partition_log(
                path, tp, self._config_for(tp.topic), self._clock, self._scheduler,
                log_start_offset=log_starts.get(tp, 0), recovery_point=recovery_points.get(tp, 0),
                high_watermark=high_watermarks.get(tp), had_clean_shutdown=clean,
                remote_log_enabled=self._remote_enabled(tp.topic),
            )
            self._dir_of[tp] = log_dir
            self._logs[tp].on_truncated = self._log_truncated
        marker.unlink(missing_ok=True)

    def shutdown(self) -> None:
        """Close every log, write the checkpoints, then the clean shutdown marker per directory."""
        failed: set[Path] = set()
        for tp, plog in self._logs.items():
            try:
                plog.close()
            except (OSError, KafkaStorageError) as e:
                log.error("failed to close %s cleanly: %s", tp, e)
                failed.add(self._dir_of[tp])
        self.checkpoint()
        for log_dir in self.log_dirs:
            if log_dir not in failed:
                atomic_write(log_dir / CLEAN_SHUTDOWN_MARKER, b'{"version":0,"BrokerEpoch":-1}')

    # -- logs ----------------------------------------------------------------------------------

    @property
    def logs(self) -> dict[TopicPartition, PartitionLog]:
        return dict(self._logs)

    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self._logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, topic_id: uuid.UUID | None = None,
                          config: LogConfig | None = None) -> PartitionLog:
        existing = self._logs.get(tp)
        if existing is not None:
            current = self._topic_id_or_rewrite(tp, existing, topic_id)
            if topic_id is None or current in (None, topic_id):
                return existing
            # A directory of an older topic with the same name (its deletion was interrupted):
            # never let a recreated topic inherit that data.
            log.warning("log dir of %s belongs to topic id %s, not %s: deleting the stale log", tp, current, topic_id)
            self.delete_log(tp)
        if tp in self._deleted_since_checkpoint:
            # The checkpoints still hold the deleted log's offsets: a crash before the next rewrite
            # would hand them to this new log.
            self.checkpoint()
        log_dir = self._next_log_dir()
        path = log_dir / str(tp)
        path.mkdir(parents=True, exist_ok=True)
        if topic_id is not None:
            PartitionMetadataFile(path / PARTITION_METADATA).write(topic_id)
        plog = load_partition_log(path, tp, config or self._config_for(tp.topic), self._clock, self._scheduler,
                                  had_clean_shutdown=True, remote_log_enabled=self._remote_enabled(tp.topic))
        plog.on_truncated = self._log_truncated
        self._logs[tp] = plog
        self._dir_of[tp] = log_dir
        log.info("created log for %s in %s", tp, log_dir)
        return plog

    def _topic_id_or_rewrite(self, tp: TopicPartition, plog: PartitionLog,
                             topic_id: uuid.UUID | None) -> uuid.UUID | None:
        """The topic id in ``partition.metadata``; a corrupt file is rewritten with ``topic_id`` (the registry's).

        Kafka takes the log directory offline; with one log directory that is a broker that never comes back.
        The directory is named after the topic and the registry lists that topic, so its data is kept: the
        stale-directory case the file guards against (a deletion interrupted before the rename) is also
        cleared at startup by dropping directories the registry does not know.
        """
        try:
            return self.topic_id_of(tp)
        except CorruptCheckpointError as e:
            if topic_id is None:
                raise
            log.warning("%s; rewriting it with topic id %s from the topic registry and keeping the log", e,
                        topic_id)
            PartitionMetadataFile(plog.dir / PARTITION_METADATA).write(topic_id)
            return topic_id

    def topic_id_of(self, tp: TopicPartition) -> uuid.UUID | None:
        """The topic id in the partition's ``partition.metadata`` (None if it has none)."""
        plog = self._logs.get(tp)
        if plog is None:
            return None
        return PartitionMetadataFile(plog.dir / PARTITION_METADATA).read()

    def _next_log_dir(self) -> Path:
        """The directory holding the fewest partitions (Kafka's default placement)."""
        counts = dict.fromkeys(self.log_dirs, 0)
        for d in self._dir_of.values():
            counts[d] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, tp: TopicPartition) -> None:
        """Rename to ``<topic>-<p>.<uuid>-delete`` at once, remove after ``file.delete.delay.ms``."""
        self.delete_logs([tp])

    def delete_logs(self, tps: Iterable[TopicPartition]) -> None:
        """:meth:`delete_log` of each, then one rewrite of the checkpoints (none if nothing was deleted)."""
        deleted = False
        for tp in tps:
            plog = self._logs.pop(tp, None)
            if plog is None:
                continue
            self.cleaner_manager.remove_partition(tp)
            self._dir_of.pop(tp, None)
            self._deleted_since_checkpoint.add(tp)
            deleted = True
            plog.local_log.close_handlers()
            target = plog.dir.with_name(f"{tp}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
            plog.dir.rename(target)
            self._schedule_dir_removal(target, plog.config.file_delete_delay_ms)
        if deleted and not self._deferring:
            self.checkpoint()

    @contextmanager
    def deferred_checkpoint(self) -> Iterator[None]:
        """Logs deleted inside the block are checkpointed once, when it ends (DeleteTopics of many topics).

        The block may span awaits: a log created meanwhile for a deleted partition checkpoints first.
        """
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if self._deleted_since_checkpoint and not self._deferring:
                try:
                    self.checkpoint()
                except KafkaStorageError as e:  # the logs are gone; the periodic checkpoint retries
                    log.error("checkpoint after deleting logs failed: %s", e)

    # -- moving a log to another log dir (AlterReplicaLogDirs) -----------------------------------

    def log_dir_of(self, tp: TopicPartition) -> Path | None:
        return self._dir_of.get(tp)

    def begin_move(self, tp: TopicPartition, target_dir: Path) -> Path:
        """Register a move of ``tp`` to ``target_dir`` (one of ``log_dirs``); returns its ``-future`` directory."""
        if tp in self.moving:
            raise KafkaStorageError(f"{tp} is already moving to {self.moving[tp][0]}")
        future = dir_move.future_dir(target_dir, tp)
        future.mkdir(parents=True)
        self.moving[tp] = (target_dir, future)
        return future

    def abort_move(self, tp: TopicPartition) -> None:
        entry = self.moving.pop(tp, None)
        if entry is not None:
            shutil.rmtree(entry[1], ignore_errors=True)

    def complete_move(self, tp: TopicPartition) -> PartitionLog:
        """The swap (on the event loop, no await: no append can come in between): close the log, copy what
        changed, swap the directories and open the log from its new one with its in-memory offsets."""
        target_dir, future = self.moving.pop(tp)
        old = self._logs[tp]
        carried = (old.log_start_offset, old.high_watermark, old.highest_offset_in_remote_storage,
                   old.remote_log_enabled)
        old.close()
        try:
            dir_move.copy_changed(old.dir, future)
            final, moved = dir_move.swap_dirs(old.dir, future, target_dir, tp)
        except OSError as e:
            shutil.rmtree(future, ignore_errors=True)
            self._logs[tp] = self._reopen(old.dir, tp, old)  # the source is intact
            raise KafkaStorageError(f"moving {tp} to {target_dir} failed: {e}") from e
        log_start, high_watermark, highest_remote, remote_enabled = carried
        plog = load_partition_log(final, tp, self._config_for(tp.topic), self._clock, self._scheduler,
                                  log_start_offset=log_start, recovery_point=old.log_end_offset,
                                  high_watermark=high_watermark, had_clean_shutdown=True,
                                  remote_log_enabled=remote_enabled)
        plog.update_highest_offset_in_remote_storage(highest_remote)
        plog.on_truncated = self._log_truncated
        clean_offset = self.cleaner_manager.all_cleaner_checkpoints().get(tp)
        self.cleaner_manager.remove_partition(tp)
        self._logs[tp] = plog
        self._dir_of[tp] = target_dir
        if clean_offset is not None:  # the clean offset moves with the log to its new directory
            self.cleaner_manager.update_checkpoint(tp, clean_offset)
        self.checkpoint()
        self._schedule_dir_removal(moved, old.config.file_delete_delay_ms)
        log.info("moved %s to %s", tp, target_dir)
        return plog

    def _reopen(self, path: Path, tp: TopicPartition, old: PartitionLog) -> PartitionLog:
        plog = load_partition_log(path, tp, self._config_for(tp.topic), self._clock, self._scheduler,
                                  log_start_offset=old.log_start_offset, recovery_point=old.log_end_offset,
                                  high_watermark=old.high_watermark, had_clean_shutdown=True,
                                  remote_log_enabled=old.remote_log_enabled)
        plog.update_highest_offset_in_remote_storage(old.highest_offset_in_remote_storage)
        plog.on_truncated = self._log_truncated
        return plog

    def _schedule_dir_removal(self, path: Path, delay_ms: int) -> None:
        self._scheduler.schedule(f"delete-dir-{path.name}", lambda: shutil.rmtree(path, ignore_errors=True),
                                 delay_ms)

    def _log_truncated(self, tp: TopicPartition, offset: int) -> None:
        """A cleaning of the log stops (its swap would be refused anyway) and its clean offset may not
        stay past the truncation (Kafka's ``LogManager.truncateTo``)."""
        self.cleaner_manager.abort_cleaning(tp)
        self.cleaner_manager.maybe_truncate_checkpoint(tp, offset)

    # -- periodic work -------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write recovery points, log start offsets and high watermarks of every log, per directory, now."""
        self._write_checkpoints(self._checkpoint_contents())
        self._deleted_since_checkpoint.clear()

    def checkpoint_in_background(self) -> None:
        """The same checkpoints, taken now and written on the scheduler's thread (the periodic ones).

        Each rewrite is three files with two fsyncs each, and under a heavy write load on ext4 an fsync
        waits for a journal commit: on the event loop that stalled every request for up to 300 ms every
        ``replica.high.watermark.checkpoint.interval.ms`` (Kafka writes them from its scheduler's threads too).
        A rewrite taken earlier never lands after a later one. Logs deleted meanwhile stay noted until a
        rewrite on the loop: a new log of such a partition still writes the checkpoints first."""
        contents = self._checkpoint_contents()

        def write() -> None:
            try:
                self._write_checkpoints(contents)
            except KafkaStorageError as e:  # e.g. a full disk: expected, the next round tries again
                log.error("writing the log directories' checkpoints failed: %s", e)

        self._scheduler.schedule("checkpoint", write)

    def _checkpoint_contents(self) -> tuple[int, list[_DirCheckpoints]]:
        """(sequence number, per directory: its recovery points, log start offsets, high watermarks)."""
        contents = []
        for log_dir in self.log_dirs:
            mine = {tp: plog for tp, plog in self._logs.items() if self._dir_of.get(tp) == log_dir}
            contents.append((log_dir, {tp: p.recovery_point for tp, p in mine.items()},
                             {tp: p.log_start_offset for tp, p in mine.items() if p.log_start_offset > 0},
                             {tp: p.high_watermark for tp, p in mine.items()}))
        self._checkpoint_taken += 1
        return self._checkpoint_taken, contents

    def _write_checkpoints(self, taken: tuple[int, list[_DirCheckpoints]]) -> None:
        seq, contents = taken
        with self._checkpoint_lock:
            if seq <= self._checkpoint_written:  # a later one is on disk already
                return
            for log_dir, recovery_points, log_starts, high_watermarks in contents:
                OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(recovery_points)
                OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(log_starts)
                OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).write(high_watermarks)
            self._checkpoint_written = seq

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """Kafka's producer expiration check (every ``producer.id.expiration.check.interval.ms``): each log
        forgets the producers idle for ``producer.id.expiration.ms`` (never one with an open transaction).
        The value is passed on every pass, so a dynamic change applies at the next one. Returns how many."""
        now = self._clock.milliseconds()
        removed = 0
        for plog in list(self._logs.values()):
            state = plog.producer_state
            state.producer_id_expiration_ms = expiration_ms
            before = len(state.producers)
            state.remove_expired_producers(now)
            removed += before - len(state.producers)
        return removed

    def cleanup_logs(self) -> int:
        """One retention pass over every log (``log.retention.check.interval.ms``)."""
        deleted = 0
        for tp, plog in list(self._logs.items()):
            try:
                deleted += plog.delete_old_segments()
            except KafkaStorageError as e:
                log.error("retention of %s failed: %s", tp, e)
        return deleted

    def flush_dirty_logs(self) -> None:
        """fsync logs whose ``flush.ms`` elapsed since their last flush."""
        now = self._clock.milliseconds()
        for plog in self._logs.values():
            if now - plog.local_log.last_flush_ms >= plog.config.flush_ms:
                plog.flush()
