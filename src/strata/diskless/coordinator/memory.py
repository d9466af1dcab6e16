"""``InMemoryControlPlane``: the coordinator in plain dicts and lists, for unit tests of other modules.

It keeps exactly the state the SQLite coordinator keeps (``dump()`` renders it as the same tables), so
the property test can compare the two implementations' digests. Commands validate everything that can
fail as a whole before mutating anything, which gives them the all-or-nothing behaviour SQLite's
transactions give the other implementation.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from strata.diskless.coordinator import rules
from strata.diskless.coordinator.api import (
    AbortedTxn,
    AdvanceLogStartRequest,
    AdvanceLogStartResponse,
    BatchInfo,
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
    TimestampType,
    TopicIdPartition,
    effective_timestamp,
)
from strata.errors import ErrorCode

_UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@dataclass
class _File:
    file_id: int
    object_key: str
    format: int
    uploader_broker_id: int
    committed_at: int
    size: int
    state: FileState = FileState.UPLOADED
    marked_for_deletion_at: int | None = None
    batch_count: int = 0  # rows referring to it; 0 means the object can go


@dataclass
class _Log:
    topic_name: str
    log_start_offset: int = 0
    high_watermark: int = 0
    byte_size: int = 0
    diskless_start_offset: int = 0
    remote_log_start_offset: int | None = None
    earliest_batch_timestamp: int | None = None
    leader_epoch: int = 0
    batches: list[BatchInfo] = field(default_factory=list)  # offset order == commit order
    producers: dict[int, rules.ProducerState] = field(default_factory=dict)
    ongoing: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its transaction
    aborted: list[AbortedTxn] = field(default_factory=list)  # in marker order

    def last_stable_offset(self) -> int:
        first = min(self.ongoing.values(), default=None)
        start = self.log_start_offset if self.remote_log_start_offset is None else self.remote_log_start_offset
        return rules.last_stable_offset(start, self.high_watermark, first)


class InMemoryControlPlane:
    """A :class:`~strata.diskless.coordinator.api.ControlPlane` with no persistence."""

    def __init__(self) -> None:
        self._logs: dict[TopicIdPartition, _Log] = {}
        self._files: dict[str, _File] = {}
        self._files_by_id: dict[int, _File] = {}
        self._last_file_id = 0
        self._last_batch_id = 0

    # -- commands --------------------------------------------------------------------------------

    def create_partitions(self, requests: Sequence[CreatePartitionsRequest], *, now_ms: int) -> None:
        for req in requests:
            for p in range(req.num_partitions):
                self._logs.setdefault(TopicIdPartition(req.topic_id, p), _Log(req.topic_name))

    def init_diskless_log(self, requests: Sequence[InitDisklessLogRequest], *,
                          now_ms: int) -> list[InitDisklessLogResponse]:
        out = []
        for req in requests:
            tp = TopicIdPartition(req.topic_id, req.partition)
            if tp in self._logs:
                out.append(InitDisklessLogResponse(ErrorCode.NONE, req.topic_id, req.partition, created=False))
                continue
            seal = req.seal_offset
            log = self._logs[tp] = _Log(req.topic_name, log_start_offset=seal, high_watermark=seal,
                                        diskless_start_offset=seal,
                                        remote_log_start_offset=min(req.log_start_offset, seal),
                                        leader_epoch=req.leader_epoch)
            for producer in req.producers:
                log.producers[producer.producer_id] = rules.init_producer_state(producer)
                if producer.txn_first_offset is not None:
                    log.ongoing[producer.producer_id] = producer.txn_first_offset
            out.append(InitDisklessLogResponse(ErrorCode.NONE, req.topic_id, req.partition, created=True))
        return out

    def commit_file(self, request: CommitFileRequest, *, now_ms: int) -> list[CommitBatchResponse]:
        rules.validate_commit(request)
        if request.object_key in self._files:
            raise FileAlreadyCommittedError(f"object {request.object_key} is committed already")
        self._last_file_id += 1
        file = _File(self._last_file_id, request.object_key, request.format, request.uploader_broker_id,
                     now_ms, request.file_size)
        self._files[file.object_key] = self._files_by_id[file.file_id] = file
        runs: dict[TopicIdPartition, rules.OpenRun] = {}
        responses = [self._commit_batch(req, file, runs, now_ms) for req in request.batches]
        for tp in runs:
            log = self._logs[tp]
            if log.earliest_batch_timestamp is None and log.batches:
                log.earliest_batch_timestamp = log.batches[0].effective_timestamp
        if file.batch_count == 0:
            self._mark_deleting(file, now_ms)
        return responses

    def _commit_batch(self, req: CommitBatchRequest, file: _File, runs: dict[TopicIdPartition, rules.OpenRun],
                      now_ms: int) -> CommitBatchResponse:
        tp = req.topic_id_partition
        log = self._logs.get(tp)
        if log is None:
            return CommitBatchResponse(_UNKNOWN, error_message=f"unknown partition {req.topic_name}-{req.partition}")
        producer = log.producers.get(req.producer_id) if req.has_producer else None
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
        if rules.can_extend(run, req, rules.opens_transaction(req, producer)):
            row = log.batches[-1]
            log.batches[-1] = BatchInfo(
                row.batch_id, row.object_key, row.topic_id, row.partition, row.byte_offset,
                row.byte_size + req.byte_size, row.base_offset, log.high_watermark - 1, row.magic,
                row.timestamp_type, row.log_append_timestamp, max(row.batch_max_timestamp, req.batch_max_timestamp))
        else:
            self._last_batch_id += 1
            log.batches.append(BatchInfo(
                self._last_batch_id, file.object_key, req.topic_id, req.partition, req.byte_offset, req.byte_size,
                assigned, log.high_watermark - 1, req.magic, TimestampType(req.timestamp_type), now_ms,
                req.batch_max_timestamp))
            file.batch_count += 1
        runs[tp] = rules.OpenRun(log.batches[-1].batch_id, req.magic, req.timestamp_type,
                                 req.byte_offset + req.byte_size)
        if req.has_producer:
            state, aborted = rules.apply_batch(req, producer, assigned, batch_ts)
            log.producers[req.producer_id] = state
            if state.txn_first_offset is None:
                log.ongoing.pop(req.producer_id, None)
            else:
                log.ongoing[req.producer_id] = state.txn_first_offset
            if aborted is not None:
                log.aborted.append(aborted)
        return CommitBatchResponse(ErrorCode.NONE, assigned, batch_ts, log.log_start_offset)

    def delete_records(self, requests: Sequence[DeleteRecordsRequest], *, now_ms: int) -> list[DeleteRecordsResponse]:
        out = []
        for req in requests:
            log = self._logs.get(TopicIdPartition(req.topic_id, req.partition))
            if log is None:
                out.append(DeleteRecordsResponse(_UNKNOWN, req.topic_id, req.partition))
                continue
            offset = log.high_watermark if req.offset == -1 else req.offset
            if offset < 0 or offset > log.high_watermark:
                out.append(DeleteRecordsResponse(ErrorCode.OFFSET_OUT_OF_RANGE, req.topic_id, req.partition,
                                                 log.log_start_offset))
                continue
            self._advance_log_start(log, offset, now_ms)
            out.append(DeleteRecordsResponse(ErrorCode.NONE, req.topic_id, req.partition, log.log_start_offset))
        return out

    def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], *, now_ms: int, max_batches_per_partition: int = 0
    ) -> list[EnforceRetentionResponse]:
        out = []
        for req in requests:
            log = self._logs.get(TopicIdPartition(req.topic_id, req.partition))
            if log is None:
                out.append(EnforceRetentionResponse(_UNKNOWN, req.topic_id, req.partition))
                continue
            boundary = rules.retention_boundary(
                (rules.Extent(b.base_offset, b.byte_size, b.effective_timestamp) for b in log.batches),
                total_bytes=log.byte_size, high_watermark=log.high_watermark, retention_bytes=req.retention_bytes,
                retention_ms=req.retention_ms, now_ms=now_ms, max_batches=max_batches_per_partition)
            count, size = self._advance_log_start(log, boundary, now_ms)
            out.append(EnforceRetentionResponse(ErrorCode.NONE, req.topic_id, req.partition, count, size,
                                                log.log_start_offset))
        return out

    def prune_batches_below_highest_tiered_offset(
        self, requests: Sequence[PruneBatchesRequest], *, now_ms: int
    ) -> list[PruneBatchesResponse]:
        out = []
        for req in requests:
            log = self._logs.get(TopicIdPartition(req.topic_id, req.partition))
            if log is None:
                out.append(PruneBatchesResponse(_UNKNOWN, req.topic_id, req.partition))
                continue
            keep = bisect.bisect_right(log.batches, req.highest_tiered_offset, key=lambda b: b.last_offset)
            first = log.batches[keep].base_offset if keep < len(log.batches) else None
            new_start = rules.pruned_log_start(log.log_start_offset, log.high_watermark, req.highest_tiered_offset,
                                               first)
            count, _ = self._drop_below(log, keep, new_start, now_ms)
            out.append(PruneBatchesResponse(ErrorCode.NONE, req.topic_id, req.partition, count, log.log_start_offset))
        return out

    def advance_cross_tier_log_start(
        self, requests: Sequence[AdvanceLogStartRequest], *, now_ms: int
    ) -> list[AdvanceLogStartResponse]:
        out = []
        for req in requests:
            log = self._logs.get(TopicIdPartition(req.topic_id, req.partition))
            if log is None:
                out.append(AdvanceLogStartResponse(_UNKNOWN, req.topic_id, req.partition))
            elif req.offset < 0 or req.offset > log.high_watermark:
                out.append(AdvanceLogStartResponse(ErrorCode.OFFSET_OUT_OF_RANGE, req.topic_id, req.partition,
                                                   log.remote_log_start_offset))
            else:
                old = log.remote_log_start_offset
                log.remote_log_start_offset = req.offset if old is None else max(old, req.offset)
                out.append(AdvanceLogStartResponse(ErrorCode.NONE, req.topic_id, req.partition,
                                                   log.remote_log_start_offset))
        return out

    def delete_topic(self, topic_id: uuid.UUID, *, now_ms: int) -> None:
        for tp in [tp for tp in self._logs if tp.topic_id == topic_id]:
            log = self._logs.pop(tp)
            self._release(log.batches, now_ms)

    def delete_files(self, object_keys: Sequence[str], *, now_ms: int) -> None:
        for key in object_keys:
            file = self._files.get(key)
            if file is not None and file.state is FileState.DELETING:
                del self._files[key], self._files_by_id[file.file_id]

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
        out = []
        for req in requests:
            log = self._logs.get(TopicIdPartition(req.topic_id, req.partition))
            if log is None:
                out.append(FindBatchResponse(_UNKNOWN, req.topic_id, req.partition))
                continue
            lso = log.last_stable_offset()
            error = ErrorCode.NONE
            if req.offset < log.log_start_offset or req.offset > log.high_watermark:
                error = ErrorCode.OFFSET_OUT_OF_RANGE
            read_committed = isolation_level is IsolationLevel.READ_COMMITTED
            end = lso if read_committed else log.high_watermark
            batches = () if error is not ErrorCode.NONE else budget.take(self._rows_from(log, req.offset, end),
                                                   req.max_partition_fetch_bytes, max_batches_per_partition)
            aborted = ()
            if read_committed and batches:
                aborted = rules.overlapping_aborted(log.aborted, req.offset, batches[-1].last_offset + 1)
            out.append(FindBatchResponse(error, req.topic_id, req.partition, batches, log.log_start_offset,
                                         log.high_watermark, lso, aborted, log.leader_epoch))
        return out

    @staticmethod
    def _rows_from(log: _Log, offset: int, end: int) -> Iterator[BatchInfo]:
        i = bisect.bisect_left(log.batches, offset, key=lambda b: b.last_offset)
        while i < len(log.batches) and log.batches[i].base_offset < end:
            yield log.batches[i]
            i += 1

    def list_offsets(
        self,
        requests: Sequence[ListOffsetsRequest],
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> list[ListOffsetsResponse]:
        out = []
        for req in requests:
            log = self._logs.get(TopicIdPartition(req.topic_id, req.partition))
            if log is None:
                out.append(ListOffsetsResponse(_UNKNOWN, req.topic_id, req.partition))
                continue
            out.append(rules.list_offsets_answer(
                req, log_start=log.log_start_offset, high_watermark=log.high_watermark,
                last_stable=log.last_stable_offset(), remote_log_start=log.remote_log_start_offset,
                isolation_level=isolation_level, max_timestamp_lookup=lambda log=log: _max_timestamp(log),
                timestamp_lookup=lambda t, log=log: _first_at_or_after(log, t)))
        return out

    def files_to_delete(self, *, now_ms: int, grace_period_ms: int, max_files: int = 20_000) -> list[FileToDelete]:
        due = [f for f in self._files_by_id.values() if f.state is FileState.DELETING
               and f.marked_for_deletion_at is not None and f.marked_for_deletion_at <= now_ms - grace_period_ms]
        due.sort(key=lambda f: (f.marked_for_deletion_at, f.file_id))
        return [FileToDelete(f.object_key, f.marked_for_deletion_at or 0) for f in due[:max_files]]

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        return object_key not in self._files

    def get_logs(self, partitions: Sequence[TopicIdPartition]) -> list[LogInfo]:
        out = []
        for tp in partitions:
            log = self._logs.get(TopicIdPartition(*tp))
            if log is None:
                out.append(LogInfo(_UNKNOWN, tp.topic_id, tp.partition))
                continue
            out.append(LogInfo(ErrorCode.NONE, tp.topic_id, tp.partition, log.topic_name, log.log_start_offset,
                               log.high_watermark, log.last_stable_offset(), log.byte_size,
                               log.remote_log_start_offset, log.earliest_batch_timestamp,
                               log.diskless_start_offset, log.leader_epoch))
        return out

    # -- state comparison ------------------------------------------------------------------------

    def dump(self) -> dict[str, list[tuple[object, ...]]]:
        """The logical state rendered as the SQLite coordinator's tables (``sqlite_schema.dump``), rows
        in key order, so the two implementations' digests can be compared."""
        logs, producers, window, ongoing, aborted, batches = [], [], [], [], [], []
        for tp in sorted(self._logs, key=lambda tp: (str(tp.topic_id), tp.partition)):
            log, key = self._logs[tp], (str(tp.topic_id), tp.partition)
            logs.append((*key, log.topic_name, log.log_start_offset, log.high_watermark, log.byte_size,
                         log.diskless_start_offset, log.remote_log_start_offset, log.earliest_batch_timestamp,
                         log.leader_epoch))
            for pid in sorted(log.producers):
                state = log.producers[pid]
                producers.append((*key, pid, state.producer_epoch, state.coordinator_epoch))
                window.extend((*key, pid, i, *entry) for i, entry in enumerate(state.window))
            ongoing.extend((*key, pid, first) for pid, first in sorted(log.ongoing.items()))
            aborted.extend((*key, *a) for a in log.aborted)
            batches.extend((b.batch_id, b.magic, *key, b.base_offset, b.last_offset,
                            self._files[b.object_key].file_id, b.byte_offset, b.byte_size, int(b.timestamp_type),
                            b.log_append_timestamp, b.batch_max_timestamp) for b in log.batches)
        files = [(f.file_id, f.object_key, f.format, FileReason.PRODUCE.value, f.state.value, f.uploader_broker_id,
                  f.committed_at, f.marked_for_deletion_at, f.size) for _, f in sorted(self._files_by_id.items())]
        return {"logs": logs, "files": files, "batches": sorted(batches), "producers": producers,
                "producer_state": window, "ongoing_txns": ongoing, "aborted_txns": aborted,
                "sequences": [("batches", self._last_batch_id), ("files", self._last_file_id)]}

    def state_digest(self) -> str:
        return rules.digest_tables(self.dump())

    # -- helpers ---------------------------------------------------------------------------------

    def _advance_log_start(self, log: _Log, offset: int, now_ms: int) -> tuple[int, int]:
        """Delete-records semantics: the log start only moves forward; rows wholly below it go."""
        new_start = max(offset, log.log_start_offset)
        keep = bisect.bisect_left(log.batches, new_start, key=lambda b: b.last_offset)
        return self._drop_below(log, keep, new_start, now_ms)

    def _drop_below(self, log: _Log, keep: int, new_start: int, now_ms: int) -> tuple[int, int]:
        dropped = log.batches[:keep]
        del log.batches[:keep]
        size = sum(b.byte_size for b in dropped)
        log.byte_size -= size
        if new_start > log.log_start_offset:
            log.log_start_offset = new_start
            log.aborted = [a for a in log.aborted if a.last_offset >= new_start]
        if dropped:
            log.earliest_batch_timestamp = log.batches[0].effective_timestamp if log.batches else None
        self._release(dropped, now_ms)
        return len(dropped), size

    def _release(self, dropped: Sequence[BatchInfo], now_ms: int) -> None:
        for b in dropped:
            file = self._files[b.object_key]
            file.batch_count -= 1
            if file.batch_count == 0:
                self._mark_deleting(file, now_ms)

    @staticmethod
    def _mark_deleting(file: _File, now_ms: int) -> None:
        if file.state is not FileState.DELETING:
            file.state = FileState.DELETING
            file.marked_for_deletion_at = now_ms


def _max_timestamp(log: _Log) -> tuple[int, int] | None:
    best: BatchInfo | None = None
    for b in log.batches:  # the first row (commit order) with the largest timestamp wins ties
        if best is None or b.effective_timestamp > best.effective_timestamp:
            best = b
    return None if best is None else (best.effective_timestamp, best.last_offset)


def _first_at_or_after(log: _Log, timestamp: int) -> tuple[int, int] | None:
    for b in log.batches:
        if b.effective_timestamp >= timestamp:
            return b.effective_timestamp, b.base_offset
    return None

