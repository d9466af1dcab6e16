"""``SqliteControlPlane``: the coordinator state every replica of ``__diskless_metadata`` materialises.

KIP-1164's topic-based coordinator appends each command to an internal topic and replays it into an
embedded SQLite database on the leader and on every follower. That only works if replay is
deterministic, so: each command is exactly one SQLite transaction (a failing command leaves nothing
behind), every time comes from the command's ``now_ms``, ids come from AUTOINCREMENT sequences that
are part of the database, and the decisions are the shared ``rules`` the in-memory implementation
uses too. ``snapshot``/``restore`` rebuild a replica from a copy in the object store; ``state_digest``
compares replicas.

Single-threaded by design: the coordinator applies commands one at a time, in log order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from strata.diskless.coordinator import rules, sqlite_schema
from strata.diskless.coordinator.api import (
    AbortedTxn,
    AdvanceLogStartRequest,
    AdvanceLogStartResponse,
    CommitBatchRequest,
    CommitBatchResponse,
    CommitFileRequest,
    CreatePartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FileAlreadyCommittedError,
    FileReason,
    FileState,
    FileToDelete,
    FindBatchRequest,
    FindBatchResponse,
    InitDisklessLogRequest,
    InitDisklessLogResponse,
    IsolationLevel,
    ListOffsetsRequest,
    ListOffsetsResponse,
    LogInfo,
    PruneBatchesRequest,
    PruneBatchesResponse,
    TopicIdPartition,
    effective_timestamp,
)
from strata.diskless.coordinator.sqlite_queries import Queries
from strata.errors import ErrorCode

_UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@dataclass
class _LogRow:
    """A commit's working copy of a ``logs`` row, written back once at the end (as Inkless does)."""

    log_start_offset: int
    high_watermark: int
    byte_size: int


class SqliteControlPlane:
    """A :class:`~strata.diskless.coordinator.api.ControlPlane` over one SQLite database.

    ``path`` is a file (the replica's materialised state) or ``":memory:"`` (tests).
    """

    def __init__(self, path: str = ":memory:") -> None:
        self._path = path
        self._conn = sqlite_schema.open_database(path)
        self._journal_offset: int | None = None

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _txn(self, mode: str) -> Iterator[Queries]:
        """One command or query = one SQLite transaction; any exception rolls all of it back.

        Inside :meth:`applying`, a command's transaction also records the journal offset it came from, so
        a replica that crashes mid-replay resumes exactly after the last command it applied."""
        self._conn.execute(f"BEGIN {mode}")
        try:
            yield Queries(self._conn)
            if self._journal_offset is not None and mode == "IMMEDIATE":
                self._conn.execute("UPDATE journal SET applied_offset = ? WHERE id = 0", (self._journal_offset,))
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- the journal (topic-based coordinator) -----------------------------------------------------

    @contextmanager
    def applying(self, offset: int) -> Iterator[None]:
        """Commands run inside record ``offset`` of ``__diskless_metadata`` as applied, atomically."""
        self._journal_offset = offset
        try:
            yield
        finally:
            self._journal_offset = None

    def mark_applied(self, offset: int) -> None:
        """Record ``offset`` as applied without a command (one that failed as a whole, or a no-op)."""
        self._conn.execute("UPDATE journal SET applied_offset = ? WHERE id = 0 AND applied_offset < ?",
                           (offset, offset))

    def applied_offset(self) -> int:
        """The last ``__diskless_metadata`` offset applied here, -1 for none."""
        return int(self._conn.execute("SELECT applied_offset FROM journal WHERE id = 0").fetchone()[0])

    # -- commands --------------------------------------------------------------------------------

    def create_partitions(self, requests: Sequence[CreatePartitionsRequest], *, now_ms: int) -> None:
        with self._txn("IMMEDIATE") as q:
            for req in requests:
                for p in range(req.num_partitions):
                    q.create_log(TopicIdPartition(req.topic_id, p), req.topic_name)

    def init_diskless_log(self, requests: Sequence[InitDisklessLogRequest], *,
                          now_ms: int) -> list[InitDisklessLogResponse]:
        out = []
        with self._txn("IMMEDIATE") as q:
            for req in requests:
                tp = TopicIdPartition(req.topic_id, req.partition)
                if q.log_offsets(tp) is not None:
                    out.append(InitDisklessLogResponse(ErrorCode.NONE, req.topic_id, req.partition, created=False))
                    continue
                q.init_log(tp, req.topic_name, req.seal_offset, req.log_start_offset, req.leader_epoch)
                for producer in req.producers:
                    q.save_producer(tp, producer.producer_id, None, rules.init_producer_state(producer))
                out.append(InitDisklessLogResponse(ErrorCode.NONE, req.topic_id, req.partition, created=True))
        return out

    def commit_file(self, request: CommitFileRequest, *, now_ms: int) -> list[CommitBatchResponse]:
        rules.validate_commit(request)
        with self._txn("IMMEDIATE") as q:
            if not q.is_safe_to_delete_file(request.object_key):
                raise FileAlreadyCommittedError(f"object {request.object_key} is committed already")
            file_id = q.insert_file(request, FileReason.PRODUCE, now_ms)
            logs: dict[TopicIdPartition, _LogRow | None] = {}
            runs: dict[TopicIdPartition, rules.OpenRun] = {}
            responses = [self._commit_batch(q, req, file_id, logs, runs, now_ms) for req in request.batches]
            for tp, row in logs.items():
                if row is not None:
                    q.write_log_tail(tp, row.high_watermark, row.byte_size)
            q.fill_earliest_timestamps(list(runs))
            q.mark_unreferenced_files([file_id], now_ms)
        return responses

    def _commit_batch(
        self, q: Queries, req: CommitBatchRequest, file_id: int, logs: dict[TopicIdPartition, _LogRow | None],
        runs: dict[TopicIdPartition, rules.OpenRun], now_ms: int,
    ) -> CommitBatchResponse:
        tp = req.topic_id_partition
        if tp not in logs:
            found = q.log_offsets(tp)
            logs[tp] = None if found is None else _LogRow(*found)
        log = logs[tp]
        if log is None:
            return CommitBatchResponse(_UNKNOWN, error_message=f"unknown partition {req.topic_name}-{req.partition}")
        producer = q.load_producer(tp, req.producer_id) if req.has_producer else None
        verdict = rules.check_batch(req, producer)
        if verdict.duplicate is not None:
            dup = verdict.duplicate
            return CommitBatchResponse(ErrorCode.NONE, dup.assigned_offset, dup.batch_timestamp,
                                       log.log_start_offset, is_duplicate=True)
        if verdict.error is not ErrorCode.NONE:
            return CommitBatchResponse(verdict.error, log_start_offset=log.log_start_offset,
                                       error_message=verdict.message)
        assigned = log.high_watermark
        log.high_watermark += req.record_count
        log.byte_size += req.byte_size
        batch_ts = effective_timestamp(req.timestamp_type, now_ms, req.batch_max_timestamp)
        run = runs.get(tp)
        if run is not None and rules.can_extend(run, req, rules.opens_transaction(req, producer)):
            q.extend_batch(run.row_id, log.high_watermark - 1, req.byte_size, req.batch_max_timestamp)
            row_id = run.row_id
        else:
            row_id = q.insert_batch(req, file_id, assigned, log.high_watermark - 1, now_ms)
        runs[tp] = rules.OpenRun(row_id, req.magic, req.timestamp_type, req.byte_offset + req.byte_size)
        if req.has_producer:
            state, aborted = rules.apply_batch(req, producer, assigned, batch_ts)
            q.save_producer(tp, req.producer_id, producer, state)
            if aborted is not None:
                q.insert_aborted(tp, aborted)
        return CommitBatchResponse(ErrorCode.NONE, assigned, batch_ts, log.log_start_offset)

    def delete_records(self, requests: Sequence[DeleteRecordsRequest], *, now_ms: int) -> list[DeleteRecordsResponse]:
        out = []
        with self._txn("IMMEDIATE") as q:
            for req in requests:
                tp = TopicIdPartition(req.topic_id, req.partition)
                found = q.log_offsets(tp)
                if found is None:
                    out.append(DeleteRecordsResponse(_UNKNOWN, req.topic_id, req.partition))
                    continue
                log_start, hwm, _ = found
                offset = hwm if req.offset == -1 else req.offset
                if offset < 0 or offset > hwm:
                    out.append(DeleteRecordsResponse(ErrorCode.OFFSET_OUT_OF_RANGE, req.topic_id, req.partition,
                                                     log_start))
                    continue
                new_start = max(offset, log_start)
                q.drop_below(tp, new_start, new_start, now_ms)
                out.append(DeleteRecordsResponse(ErrorCode.NONE, req.topic_id, req.partition, new_start))
        return out

    def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], *, now_ms: int, max_batches_per_partition: int = 0
    ) -> list[EnforceRetentionResponse]:
        out = []
        with self._txn("IMMEDIATE") as q:
            for req in requests:
                tp = TopicIdPartition(req.topic_id, req.partition)
                found = q.log_offsets(tp)
                if found is None:
                    out.append(EnforceRetentionResponse(_UNKNOWN, req.topic_id, req.partition))
                    continue
                log_start, hwm, byte_size = found
                boundary = rules.retention_boundary(
                    q.oldest_extents(tp, max_batches_per_partition), total_bytes=byte_size, high_watermark=hwm,
                    retention_bytes=req.retention_bytes, retention_ms=req.retention_ms, now_ms=now_ms,
                    max_batches=max_batches_per_partition)
                new_start = max(boundary, log_start)
                count, size = q.drop_below(tp, new_start, new_start, now_ms)
                out.append(EnforceRetentionResponse(ErrorCode.NONE, req.topic_id, req.partition, count, size,
                                                    new_start))
        return out

    def prune_batches_below_highest_tiered_offset(
        self, requests: Sequence[PruneBatchesRequest], *, now_ms: int
    ) -> list[PruneBatchesResponse]:
        out = []
        with self._txn("IMMEDIATE") as q:
            for req in requests:
                tp = TopicIdPartition(req.topic_id, req.partition)
                found = q.log_offsets(tp)
                if found is None:
                    out.append(PruneBatchesResponse(_UNKNOWN, req.topic_id, req.partition))
                    continue
                log_start, hwm, _ = found
                first = q.first_base_offset_after(tp, req.highest_tiered_offset)
                new_start = rules.pruned_log_start(log_start, hwm, req.highest_tiered_offset, first)
                count, _ = q.drop_below(tp, req.highest_tiered_offset + 1, new_start, now_ms)
                out.append(PruneBatchesResponse(ErrorCode.NONE, req.topic_id, req.partition, count, new_start))
        return out

    def advance_cross_tier_log_start(
        self, requests: Sequence[AdvanceLogStartRequest], *, now_ms: int
    ) -> list[AdvanceLogStartResponse]:
        out = []
        with self._txn("IMMEDIATE") as q:
            for req in requests:
                tp = TopicIdPartition(req.topic_id, req.partition)
                info = q.log_info(tp)
                if info is None:
                    out.append(AdvanceLogStartResponse(_UNKNOWN, req.topic_id, req.partition))
                    continue
                old = info.remote_log_start_offset
                if req.offset < 0 or req.offset > info.high_watermark:
                    out.append(AdvanceLogStartResponse(ErrorCode.OFFSET_OUT_OF_RANGE, req.topic_id, req.partition,
                                                       old))
                    continue
                new = req.offset if old is None else max(old, req.offset)
                q.set_remote_log_start(tp, new)
                out.append(AdvanceLogStartResponse(ErrorCode.NONE, req.topic_id, req.partition, new))
        return out

    def delete_topic(self, topic_id: uuid.UUID, *, now_ms: int) -> None:
        with self._txn("IMMEDIATE") as q:
            q.delete_topic(topic_id, now_ms)

    def delete_files(self, object_keys: Sequence[str], *, now_ms: int) -> None:
        with self._txn("IMMEDIATE") as q:
            q.delete_files(object_keys, FileState.DELETING)

    # -- queries ---------------------------------------------------------------------------------

    def find_batches(
        self,
        requests: Sequence[FindBatchRequest],
        *,
        fetch_max_bytes: int,
        max_batches_per_partition: int = 0,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> list[FindBatchResponse]:
        budget = rules.FetchBudget(fetch_max_bytes)
        read_committed = isolation_level is IsolationLevel.READ_COMMITTED
        out = []
        with self._txn("DEFERRED") as q:  # one read transaction: every answer from the same state
            for req in requests:
                tp = TopicIdPartition(req.topic_id, req.partition)
                info = q.log_info(tp)
                if info is None:
                    out.append(FindBatchResponse(_UNKNOWN, req.topic_id, req.partition))
                    continue
                start, hwm, lso = info.log_start_offset, info.high_watermark, info.last_stable_offset
                if req.offset < start or req.offset > hwm:
                    out.append(FindBatchResponse(ErrorCode.OFFSET_OUT_OF_RANGE, req.topic_id, req.partition, (),
                                                 start, hwm, lso))
                    continue
                rows = q.batches_from(tp, req.offset, lso if read_committed else hwm)
                batches = budget.take(rows, req.max_partition_fetch_bytes, max_batches_per_partition)
                aborted: tuple[AbortedTxn, ...] = ()
                if read_committed and batches:
                    aborted = q.aborted_overlapping(tp, req.offset, batches[-1].last_offset + 1)
                out.append(FindBatchResponse(ErrorCode.NONE, req.topic_id, req.partition, batches, start, hwm, lso,
                                             aborted, info.leader_epoch))
        return out

    def list_offsets(
        self,
        requests: Sequence[ListOffsetsRequest],
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> list[ListOffsetsResponse]:
        out = []
        with self._txn("DEFERRED") as q:
            for req in requests:
                tp = TopicIdPartition(req.topic_id, req.partition)
                info = q.log_info(tp)
                if info is None:
                    out.append(ListOffsetsResponse(_UNKNOWN, req.topic_id, req.partition))
                    continue
                out.append(rules.list_offsets_answer(
                    req, log_start=info.log_start_offset, high_watermark=info.high_watermark,
                    last_stable=info.last_stable_offset, remote_log_start=info.remote_log_start_offset,
                    isolation_level=isolation_level, max_timestamp_lookup=lambda tp=tp: q.max_timestamp(tp),
                    timestamp_lookup=lambda t, tp=tp: q.first_at_or_after(tp, t)))
        return out

    def files_to_delete(self, *, now_ms: int, grace_period_ms: int, max_files: int = 20_000) -> list[FileToDelete]:
        with self._txn("DEFERRED") as q:
            return q.files_to_delete(now_ms - grace_period_ms, max_files)

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        with self._txn("DEFERRED") as q:
            return q.is_safe_to_delete_file(object_key)

    def get_logs(self, partitions: Sequence[TopicIdPartition]) -> list[LogInfo]:
        with self._txn("DEFERRED") as q:
            return [q.log_info(TopicIdPartition(*tp)) or LogInfo(_UNKNOWN, tp[0], tp[1]) for tp in partitions]

    # -- replicas ----------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole database, to upload so a new replica need not replay the command log from 0."""
        return sqlite_schema.snapshot(self._conn)

    def restore(self, data: bytes) -> None:
        """Replace this replica's state with a snapshot's (raises ``ValueError`` for a bad snapshot)."""
        sqlite_schema.restore(self._conn, data)

    def dump(self) -> dict[str, list[tuple[object, ...]]]:
        with self._txn("DEFERRED"):
            return sqlite_schema.dump(self._conn)

    def state_digest(self) -> str:
        """A hash of the logical state (not of the file, whose layout differs between replicas)."""
        return rules.digest_tables(self.dump())
