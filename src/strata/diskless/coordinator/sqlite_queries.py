"""The SQL of the SQLite coordinator, one method per statement group, run inside the caller's transaction.

Kept apart from ``sqlite.py`` so that file reads as the commands' logic, and this one as their storage.
Topic ids are stored as canonical UUID text (see ``sqlite_schema``).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from strata.diskless.coordinator import rules
from strata.diskless.coordinator.api import (
    AbortedTxn,
    BatchInfo,
    CommitBatchRequest,
    CommitFileRequest,
    FileReason,
    FileState,
    FileToDelete,
    LogInfo,
    TimestampType,
    TopicIdPartition,
)
from strata.diskless.coordinator.sqlite_schema import EFFECTIVE_TS
from strata.errors import ErrorCode

_PART = "topic_id = ? AND partition = ?"


def _key(tp: TopicIdPartition) -> tuple[str, int]:
    return str(tp.topic_id), tp.partition


class Queries:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def _one(self, sql: str, params: Sequence[object]) -> Any:
        """The first row (a tuple of SQLite values) or None."""
        return self._conn.execute(sql, params).fetchone()

    # -- logs ------------------------------------------------------------------------------------

    def create_log(self, tp: TopicIdPartition, topic_name: str) -> None:
        self._conn.execute("INSERT INTO logs (topic_id, partition, topic_name, log_start_offset, high_watermark, "
                           "byte_size) VALUES (?, ?, ?, 0, 0, 0) ON CONFLICT DO NOTHING", (*_key(tp), topic_name))

    def log_offsets(self, tp: TopicIdPartition) -> tuple[int, int, int] | None:
        """``(log_start_offset, high_watermark, byte_size)``, or None for an unknown partition."""
        return self._one(f"SELECT log_start_offset, high_watermark, byte_size FROM logs WHERE {_PART}",
                         _key(tp))

    def log_info(self, tp: TopicIdPartition) -> LogInfo | None:
        row = self._one("SELECT topic_name, log_start_offset, high_watermark, byte_size, remote_log_start_offset, "
                        "earliest_batch_timestamp, diskless_start_offset, leader_epoch, "
                        f"(SELECT MIN(first_offset) FROM ongoing_txns WHERE {_PART}) "
                        f"FROM logs WHERE {_PART}", (*_key(tp), *_key(tp)))
        if row is None:
            return None
        name, start, hwm, size, remote, earliest, diskless_start, epoch, first_ongoing = row
        lso = rules.last_stable_offset(start if remote is None else remote, hwm, first_ongoing)
        return LogInfo(ErrorCode.NONE, tp.topic_id, tp.partition, name, start, hwm, lso, size, remote, earliest,
                       diskless_start, epoch)

    def init_log(self, tp: TopicIdPartition, topic_name: str, seal: int, log_start: int, leader_epoch: int) -> None:
        self._conn.execute("INSERT INTO logs (topic_id, partition, topic_name, log_start_offset, high_watermark, "
                           "byte_size, diskless_start_offset, remote_log_start_offset, leader_epoch) "
                           "VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?)",
                           (*_key(tp), topic_name, seal, seal, seal, min(log_start, seal), leader_epoch))

    def write_log_tail(self, tp: TopicIdPartition, high_watermark: int, byte_size: int) -> None:
        self._conn.execute(f"UPDATE logs SET high_watermark = ?, byte_size = ? WHERE {_PART}",
                           (high_watermark, byte_size, *_key(tp)))

    def fill_earliest_timestamps(self, partitions: Iterable[TopicIdPartition]) -> None:
        for tp in partitions:
            self._conn.execute(
                f"UPDATE logs SET earliest_batch_timestamp = (SELECT {EFFECTIVE_TS} FROM batches WHERE {_PART} "
                f"ORDER BY last_offset LIMIT 1) WHERE {_PART} AND earliest_batch_timestamp IS NULL",
                (*_key(tp), *_key(tp)))

    def set_remote_log_start(self, tp: TopicIdPartition, offset: int) -> None:
        self._conn.execute(f"UPDATE logs SET remote_log_start_offset = ? WHERE {_PART}", (offset, *_key(tp)))

    # -- files -----------------------------------------------------------------------------------

    def insert_file(self, request: CommitFileRequest, reason: FileReason, now_ms: int) -> int:
        cur = self._conn.execute(
            "INSERT INTO files (object_key, format, reason, state, uploader_broker_id, committed_at, size) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (request.object_key, request.format, reason.value, FileState.UPLOADED.value,
             request.uploader_broker_id, now_ms, request.file_size))
        return int(cur.lastrowid or 0)

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        return self._one("SELECT 1 FROM files WHERE object_key = ?", (object_key,)) is None

    def mark_unreferenced_files(self, file_ids: Iterable[int], now_ms: int) -> None:
        """A file no batch row refers to any more becomes ``deleting`` (the cleaner takes it from there)."""
        self._conn.executemany(
            "UPDATE files SET state = 'deleting', marked_for_deletion_at = ? WHERE file_id = ? "
            "AND state = 'uploaded' AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.file_id = files.file_id)",
            [(now_ms, f) for f in sorted(set(file_ids))])

    def files_to_delete(self, marked_before: int, limit: int) -> list[FileToDelete]:
        rows = self._conn.execute(
            "SELECT object_key, marked_for_deletion_at FROM files WHERE state = 'deleting' "
            "AND marked_for_deletion_at <= ? ORDER BY marked_for_deletion_at, file_id LIMIT ?", (marked_before, limit))
        return [FileToDelete(*r) for r in rows]

    def delete_files(self, object_keys: Iterable[str], state: FileState) -> None:
        self._conn.executemany("DELETE FROM files WHERE object_key = ? AND state = ?",
                               [(k, state.value) for k in object_keys])

    # -- batches ---------------------------------------------------------------------------------

    def insert_batch(self, req: CommitBatchRequest, file_id: int, base_offset: int, last_offset: int,
                     now_ms: int) -> int:
        cur = self._conn.execute(
            "INSERT INTO batches (magic, topic_id, partition, base_offset, last_offset, file_id, byte_offset, "
            "byte_size, timestamp_type, log_append_timestamp, batch_max_timestamp) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (req.magic, str(req.topic_id), req.partition, base_offset, last_offset, file_id, req.byte_offset,
             req.byte_size, int(req.timestamp_type), now_ms, req.batch_max_timestamp))
        return int(cur.lastrowid or 0)

    def extend_batch(self, batch_id: int, last_offset: int, byte_size: int, max_timestamp: int) -> None:
        self._conn.execute("UPDATE batches SET last_offset = ?, byte_size = byte_size + ?, "
                           "batch_max_timestamp = MAX(batch_max_timestamp, ?) WHERE batch_id = ?",
                           (last_offset, byte_size, max_timestamp, batch_id))

    def batches_from(self, tp: TopicIdPartition, offset: int, end: int) -> Iterator[BatchInfo]:
        """Rows holding offsets ``>= offset`` and starting below ``end``, in offset order, read lazily so
        the fetch budget stops the scan (cost follows the answer, not the consumer's lag)."""
        rows = self._conn.execute(
            "SELECT b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset, b.magic, "
            "b.timestamp_type, b.log_append_timestamp, b.batch_max_timestamp FROM batches b "
            "JOIN files f ON f.file_id = b.file_id WHERE b.topic_id = ? AND b.partition = ? "
            "AND b.last_offset >= ? AND b.base_offset < ? ORDER BY b.last_offset", (*_key(tp), offset, end))
        for bid, key, pos, size, base, last, magic, ts_type, append_ts, max_ts in rows:
            yield BatchInfo(bid, key, tp.topic_id, tp.partition, pos, size, base, last, magic, TimestampType(ts_type),
                            append_ts, max_ts)

    def oldest_extents(self, tp: TopicIdPartition, max_batches: int) -> Iterator[rules.Extent]:
        limit = max_batches + 1 if max_batches > 0 else -1
        rows = self._conn.execute(f"SELECT base_offset, byte_size, {EFFECTIVE_TS} FROM batches WHERE {_PART} "
                                  "ORDER BY last_offset LIMIT ?", (*_key(tp), limit))
        return (rules.Extent(*r) for r in rows)

    def first_base_offset_after(self, tp: TopicIdPartition, offset: int) -> int | None:
        row = self._one(f"SELECT base_offset FROM batches WHERE {_PART} AND last_offset > ? "
                        "ORDER BY last_offset LIMIT 1", (*_key(tp), offset))
        return None if row is None else int(row[0])

    def max_timestamp(self, tp: TopicIdPartition) -> tuple[int, int] | None:
        return self._one(f"SELECT {EFFECTIVE_TS} AS ts, last_offset FROM batches WHERE {_PART} "
                         "ORDER BY ts DESC, batch_id LIMIT 1", _key(tp))

    def first_at_or_after(self, tp: TopicIdPartition, timestamp: int) -> tuple[int, int] | None:
        return self._one(f"SELECT {EFFECTIVE_TS} AS ts, base_offset FROM batches WHERE {_PART} AND ts >= ? "
                         "ORDER BY batch_id LIMIT 1", (*_key(tp), timestamp))

    def drop_below(self, tp: TopicIdPartition, bound: int, new_start: int, now_ms: int) -> tuple[int, int]:
        """Delete the rows with ``last_offset < bound``, move the log start forward to ``new_start``
        (dropping aborted transactions wholly below it) and mark emptied files. Returns rows and bytes."""
        key = _key(tp)
        dropped = self._conn.execute(f"SELECT file_id, byte_size FROM batches WHERE {_PART} AND last_offset < ?",
                                     (*key, bound)).fetchall()
        size = sum(s for _, s in dropped)
        if dropped:
            self._conn.execute(f"DELETE FROM batches WHERE {_PART} AND last_offset < ?", (*key, bound))
            self._conn.execute(
                f"UPDATE logs SET byte_size = byte_size - ?, earliest_batch_timestamp = (SELECT {EFFECTIVE_TS} "
                f"FROM batches WHERE {_PART} ORDER BY last_offset LIMIT 1) WHERE {_PART}", (size, *key, *key))
        moved = self._conn.execute(f"UPDATE logs SET log_start_offset = ? WHERE {_PART} AND log_start_offset < ?",
                                   (new_start, *key, new_start)).rowcount
        if moved:
            self._conn.execute(f"DELETE FROM aborted_txns WHERE {_PART} AND last_offset < ?", (*key, new_start))
        self.mark_unreferenced_files((f for f, _ in dropped), now_ms)
        return len(dropped), size

    def delete_topic(self, topic_id: uuid.UUID, now_ms: int) -> None:
        tid = str(topic_id)
        files = [f for (f,) in self._conn.execute("SELECT DISTINCT file_id FROM batches WHERE topic_id = ?", (tid,))]
        for table in ("batches", "producer_state", "producers", "ongoing_txns", "aborted_txns", "logs"):
            self._conn.execute(f"DELETE FROM {table} WHERE topic_id = ?", (tid,))
        self.mark_unreferenced_files(files, now_ms)

    # -- producers and transactions ----------------------------------------------------------------

    def load_producer(self, tp: TopicIdPartition, producer_id: int) -> rules.ProducerState | None:
        key = (*_key(tp), producer_id)
        row = self._one(f"SELECT producer_epoch, coordinator_epoch FROM producers WHERE {_PART} AND producer_id = ?",
                        key)
        if row is None:
            return None
        window = tuple(rules.ProducerBatch(*r) for r in self._conn.execute(
            "SELECT producer_epoch, base_sequence, last_sequence, assigned_offset, batch_timestamp "
            f"FROM producer_state WHERE {_PART} AND producer_id = ? ORDER BY row_id", key))
        first = self._one(f"SELECT first_offset FROM ongoing_txns WHERE {_PART} AND producer_id = ?", key)
        return rules.ProducerState(row[0], row[1], window, None if first is None else first[0])

    def save_producer(self, tp: TopicIdPartition, producer_id: int, old: rules.ProducerState | None,
                      new: rules.ProducerState) -> None:
        """Write what changed: the epochs, the window (rewritten, it is at most five rows), the transaction."""
        key = (*_key(tp), producer_id)
        self._conn.execute(
            "INSERT INTO producers (topic_id, partition, producer_id, producer_epoch, coordinator_epoch) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET producer_epoch = excluded.producer_epoch, "
            "coordinator_epoch = excluded.coordinator_epoch", (*key, new.producer_epoch, new.coordinator_epoch))
        if old is None or old.window != new.window:
            self._conn.execute(f"DELETE FROM producer_state WHERE {_PART} AND producer_id = ?", key)
            self._conn.executemany("INSERT INTO producer_state VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                   [(*key, i, *entry) for i, entry in enumerate(new.window)])
        old_first = None if old is None else old.txn_first_offset
        if new.txn_first_offset != old_first:
            self._conn.execute(f"DELETE FROM ongoing_txns WHERE {_PART} AND producer_id = ?", key)
            if new.txn_first_offset is not None:
                self._conn.execute("INSERT INTO ongoing_txns VALUES (?, ?, ?, ?)", (*key, new.txn_first_offset))

    def insert_aborted(self, tp: TopicIdPartition, txn: AbortedTxn) -> None:
        self._conn.execute("INSERT INTO aborted_txns (topic_id, partition, producer_id, first_offset, last_offset) "
                           "VALUES (?, ?, ?, ?, ?)", (*_key(tp), *txn))

    def aborted_overlapping(self, tp: TopicIdPartition, start: int, end: int) -> tuple[AbortedTxn, ...]:
        rows = self._conn.execute(
            f"SELECT producer_id, first_offset, last_offset FROM aborted_txns WHERE {_PART} AND last_offset >= ? "
            "AND first_offset < ? ORDER BY last_offset", (*_key(tp), start, end))
        return tuple(AbortedTxn(*r) for r in rows)
