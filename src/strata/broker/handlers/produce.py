"""Produce: validate and append each partition's batches; errors are per partition.

acks=1 answers after the leader's append; acks=-1 (all) is refused before the append while the ISR
is smaller than ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS) and otherwise waits until the high
watermark covers the append (a single node answers at once: its ISR is itself). acks=0 gets no response;
if such a request fails, the connection is closed instead, which is how Kafka tells a
fire-and-forget producer to refresh its metadata.

A request with diskless partitions does its work at once (checks, classic appends, every diskless batch
into the active WAL file) and returns a :class:`~strata.broker.wire.dispatch.Deferred` for the rest: the wait
for the commit (and acks=all's ISR wait of its classic partitions). The connection reads the next request
meanwhile, so a producer's pipelined requests share a commit cycle, and answers them in order.
A classic acks=all request whose followers have not caught up yet is deferred the same way after its
appends: the producer's next pipelined request is appended while the first waits, and the followers fetch
both at once. Kafka mutes the connection until the answer is out instead, so each request pays a full
replication round trip before the next is even read; answers still go out in request order, and a later
request is only ever appended after every earlier one (the order an idempotent producer's sequences need).

Authorization (Kafka 3.9's ``KafkaApis.handleProduceRequest``): a request carrying transactional batches
needs WRITE on its ``transactional_id`` (none given counts as refused), else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended (acks=0: no answer). Then WRITE on each topic,
checked once per topic and before its existence (a refused topic is TOPIC_AUTHORIZATION_FAILED on every
partition whether it exists or not). An idempotent producer is checked at InitProducerId (IDEMPOTENT_WRITE on
the cluster or WRITE on some topic), not here, as in Kafka 3.x.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from strata.broker.transactions import TransactionService
from strata.broker.wire.dispatch import CloseConnection, Deferred, RequestContext, handles
from strata.client.wire import ADMIN_CLIENT_ID
from strata.common import TopicPartition
from strata.diskless.produce import diskless_entry
from strata.diskless.service import DisklessService
from strata.diskless.writer import WriteEntry, WriteResult
from strata.errors import (
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    KafkaStorageError,
    RecordError,
    RecordValidationError,
)
from strata.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

PRODUCE = 0
NO_DISKLESS = ("this broker cannot serve diskless topics (its remote storage is off or stores no plain objects): "
               "see its start-up log")


def _partition_error(index: int, code: int, message: str | None, batch_error: bool = False,
                     record_errors: list[RecordError] | None = None) -> dict[str, Any]:
    """``record_errors``: the rejected records by index in their batch (v8+ answers them; librdkafka
    fails those records with ``code`` and the rest of the batch with ``_INVALID_DIFFERENT_RECORD``).
    Without them, ``batch_error`` reports the batch as one record error at index 0."""
    if record_errors:
        errors = [{"batch_index": e.batch_index, "batch_index_error_message": e.message} for e in record_errors]
    elif batch_error:
        errors = [{"batch_index": 0, "batch_index_error_message": message}]
    else:
        errors = []
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1,
            "record_errors": errors, "error_message": message}


async def _wait_for_isr(ctx: RequestContext, waiting: list[tuple[TopicPartition, int, dict[str, Any]]],
                       timeout_s: float) -> bool:
    """acks=all: Kafka's DelayedProduce, every appended partition at once, at most ``timeout_ms``.

    A partition whose high watermark already covers the append (one replica, or followers that were
    quick) answers at once; the others as their ISR catches up, or with the error that ended the wait.
    """
    replicas = ctx.broker.replicas
    codes = await asyncio.gather(*(replicas.wait_for_replication(tp, offset, timeout_s)
                                   for tp, offset, _ in waiting))
    failed = False
    for (tp, _, part), code in zip(waiting, codes, strict=True):
        if code:
            failed = True
            part.update(error_code=code, base_offset=-1, log_append_time=-1, log_start_offset=-1,
                        error_message=_WAIT_ERRORS.get(code, "").format(tp=tp) or None)
    return failed


_WAIT_ERRORS = {
    ErrorCode.REQUEST_TIMED_OUT: "Timed out waiting for the in-sync replicas of {tp} to acknowledge the append",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "Written to the leader of {tp}, but the ISR shrank below "
                                                "min.insync.replicas before the followers caught up",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "Leadership of {tp} moved while waiting for the in-sync replicas",
}


def _submit_diskless(diskless: DisklessService, written: list[tuple[WriteEntry, dict[str, Any]]],
                     ) -> asyncio.Future[list[WriteResult]] | None:
    """Every diskless partition of the request goes into the broker's active WAL object at once, before
    the connection reads its next request; None if the writer refused them (their parts say why)."""
    try:
        return diskless.submit([entry for entry, _ in written])
    except KafkaError as e:
        for _, part in written:
            part.update(error_code=e.error_code, error_message=str(e))
        return None


async def _diskless_answers(ctx: RequestContext, written: list[tuple[WriteEntry, dict[str, Any]]],
                            pending: asyncio.Future[list[WriteResult]]) -> bool:
    """The answer comes once the WAL object is uploaded and committed, whatever ``acks`` asked (diskless.md)."""
    try:
        results = await pending
    except KafkaError as e:
        for _, part in written:
            part.update(error_code=e.error_code, error_message=str(e))
        return True
    failed = False
    topic_stats = ctx.broker.stats.topics
    for (entry, part), result in zip(written, results, strict=True):
        if result.error:
            failed = True
            part.update(error_code=result.error, error_message=result.error_message)
            continue
        part.update(base_offset=result.base_offset, log_append_time=result.log_append_time,
                    log_start_offset=result.log_start_offset)
        topic_stats.BytesInPerSec.mark(entry.topic_name, entry.size)
        topic_stats.MessagesInPerSec.mark(entry.topic_name, result.last_offset - result.base_offset + 1)
    return failed


async def _answer_after_commit(ctx: RequestContext, request: Any, topics_out: list[dict[str, Any]],
                               written: list[tuple[WriteEntry, dict[str, Any]]],
                               pending: asyncio.Future[list[WriteResult]],
                               waiting: list[tuple[TopicPartition, int, dict[str, Any]]], failed: bool) -> Any:
    """The deferred part of a produce with diskless partitions: the commit, then acks=all's ISR wait for
    the classic partitions of the same request, then the answer."""
    failed = await _diskless_answers(ctx, written, pending) or failed
    return await _answer_after_isr(ctx, request, topics_out, waiting, failed)


async def _answer_after_isr(ctx: RequestContext, request: Any, topics_out: list[dict[str, Any]],
                            waiting: list[tuple[TopicPartition, int, dict[str, Any]]], failed: bool) -> Any:
    """The deferred part of a classic acks=all produce (and the end of a diskless one): the ISR wait, then
    the answer."""
    if waiting:
        failed = await _wait_for_isr(ctx, waiting, max(0.0, request.timeout.total_seconds())) or failed
    return _answer(ctx, request, topics_out, failed)


def _answer(ctx: RequestContext, request: Any, topics_out: list[dict[str, Any]], failed: bool) -> Any:
    if request.acks == 0:
        if failed:
            raise CloseConnection("an acks=0 produce failed: closing so the producer refreshes metadata")
        return None
    return ctx.respond(responses=topics_out, throttle_time=0)


def _has_transactional_records(request: Any) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: does any partition carry a transactional batch?"""
    return any(pdata.records and TransactionService.transactional_producer(pdata.records) is not None
               for topic in request.topic_data for pdata in topic.partition_data)


def _refuse_all(ctx: RequestContext, request: Any, code: int) -> Any:
    """Kafka's ``ProduceRequest.getErrorResponse``: every partition fails with ``code``; acks=0 gets no answer."""
    if request.acks == 0:
        return None
    return ctx.respond(throttle_time=0, responses=[
        {"name": getattr(topic, "name", None) or "", "topic_id": getattr(topic, "topic_id", None),
         "partition_responses": [_partition_error(p.index, code, "Transactional Id authorization failed.")
                                 for p in topic.partition_data]}
        for topic in request.topic_data])


@handles(PRODUCE)
async def produce(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    topic_stats = broker.stats.topics
    acks = request.acks
    checking = broker.authorization.enabled
    if checking and _has_transactional_records(request) and (
            request.transactional_id is None
            or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)):
        return _refuse_all(ctx, request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    failed = False
    topics_out = []
    waiting: list[tuple[TopicPartition, int, dict[str, Any]]] = []
    diskless = broker.diskless
    diskless_parts: list[tuple[WriteEntry, dict[str, Any]]] = []
    for topic in request.topic_data:
        name = getattr(topic, "name", None)
        info = broker.topics.get(name) if name else broker.topics.by_id(getattr(topic, "topic_id", None))
        allowed = True
        if checking:  # WRITE on the topic, once per topic; a topic id this broker cannot name: UNKNOWN_TOPIC_ID
            topic_name = name or (info.name if info is not None else None)
            allowed = topic_name is None or ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic_name)
        parts = []
        for pdata in topic.partition_data:
            index = pdata.index
            if not allowed:
                parts.append(_partition_error(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
                continue
            if acks not in (0, 1, -1):
                parts.append(_partition_error(index, ErrorCode.INVALID_REQUIRED_ACKS, f"invalid acks {acks}"))
                continue
            if info is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
                parts.append(_partition_error(index, code, None))
                continue
            # Kafka's internalTopicsAllowed: only the brokers' own writers (the RLMM writing
            # __remote_log_metadata to its leader on another broker) may produce to internal topics.
            if info.is_internal and ctx.client_id != ADMIN_CLIENT_ID:
                parts.append(_partition_error(index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                              f"Cannot append to internal topic {info.name}"))
                continue
            records = pdata.records
            if not records:
                parts.append(_partition_error(index, ErrorCode.INVALID_RECORD, "produce request carried no records",
                                              batch_error=True))
                continue
            tp = TopicPartition(info.name, index)
            txn = broker.transactions.transactional_producer(records) if broker.transactions is not None else None
            if txn is not None:
                code, message = await broker.transactions.verify_for_append(tp, request.transactional_id, *txn)
                if code:
                    parts.append(_partition_error(index, code, message))
                    continue
            if diskless is None and info.configs and broker.topics.config(info.name).diskless_enable:
                parts.append(_partition_error(index, ErrorCode.KAFKA_STORAGE_ERROR, NO_DISKLESS))
                continue
            if diskless is not None and diskless.is_diskless(info.name):
                part = _partition_error(index, ErrorCode.NONE, None)
                parts.append(part)
                try:
                    entry = diskless_entry(info.topic_id, tp, records, broker.topics.config(info.name),
                                           broker.clock.milliseconds())
                except KafkaError as e:
                    part.update(_partition_error(index, e.error_code, str(e), batch_error=e.error_code in (
                        ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP), record_errors=e.record_errors
                        if isinstance(e, RecordValidationError) else None))
                    continue
                diskless_parts.append((entry, part))
                continue
            try:
                result = broker.replicas.append(tp, records, required_acks=acks)
            except KafkaError as e:
                if isinstance(e, KafkaStorageError):
                    log.error("append to %s-%d failed: %s", info.name, index, e)
                elif not isinstance(e, InvalidRecordError) and e.error_code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("append to %s-%d failed", info.name, index)
                parts.append(_partition_error(index, e.error_code, str(e),
                                              batch_error=e.error_code in (ErrorCode.INVALID_RECORD,
                                                                           ErrorCode.INVALID_TIMESTAMP),
                                              record_errors=e.record_errors
                                              if isinstance(e, RecordValidationError) else None))
                continue
            topic_stats.BytesInPerSec.mark(info.name, len(records))
            topic_stats.MessagesInPerSec.mark(info.name, result.num_messages)
            part = {"index": index, "error_code": 0, "base_offset": result.first_offset,
                    "log_append_time": result.log_append_time, "log_start_offset": result.log_start_offset,
                    "record_errors": [], "error_message": None}
            parts.append(part)
            if acks == -1:
                waiting.append((tp, result.last_offset + 1, part))
        failed = failed or any(p["error_code"] for p in parts)
        topics_out.append({"name": name if name else (info.name if info else ""),
                           "topic_id": info.topic_id if info else getattr(topic, "topic_id", None),
                           "partition_responses": parts})
    if diskless_parts:
        # Enqueued now, in request order; only the wait for the commit is deferred, so the connection
        # reads its next request (a producer's next pipelined batch joins the same WAL object).
        assert diskless is not None
        if not diskless.started:  # a diskless topic created through another broker a moment ago
            await diskless.open_for_requests()
        pending = _submit_diskless(diskless, diskless_parts)
        if pending is not None:
            return Deferred(_answer_after_commit(ctx, request, topics_out, diskless_parts, pending, waiting,
                                                 failed))
        failed = True
    if waiting and not all(broker.replicas.replicated(tp, offset) for tp, offset, _ in waiting):
        # The appends are done, in request order; only the wait for the followers is deferred, so the
        # connection reads the producer's next pipelined request meanwhile and the followers fetch both
        # appends at once, instead of one replication round trip per request.
        return Deferred(_answer_after_isr(ctx, request, topics_out, waiting, failed))
    return _answer(ctx, request, topics_out, failed)
