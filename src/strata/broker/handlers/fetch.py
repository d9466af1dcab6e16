"""Fetch: whole batches sliced from segment files, long-polled by ``min_bytes``/``max_wait``.

Records are never decoded: each partition's data is a :class:`FileSlice`, spliced into the
encoded response and sent with ``sendfile`` (slices under ``INLINE_BYTES`` are read into the
response instead, where two syscalls would cost more than the copy). Fetch sessions (KIP-227)
are answered sessionless (``session_id`` 0): clients then send full fetches, which Kafka allows.
"""

from __future__ import annotations

import time
from typing import Any

from strata.broker.dispatch import RequestContext, Spliced, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode, KafkaError
from strata.log.partition_log import FetchIsolation
from strata.protocol.frame import Splice

FETCH = 1
INLINE_BYTES = 32 * 1024
READ_COMMITTED = 1


class _FetchState:
    """One pass over the requested partitions; rerun after a wait for more data."""

    def __init__(self) -> None:
        self.bytes = 0
        self.errors = False
        self.splices: list[Splice] = []


def _read_partition(ctx: RequestContext, name: str, p: Any, isolation: FetchIsolation, budget: int,
                    state: _FetchState) -> dict[str, Any]:
    replicas = ctx.broker.replicas
    tp = TopicPartition(name, p.partition)
    out: dict[str, Any] = {"partition_index": p.partition, "error_code": 0, "high_watermark": -1,
                           "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                           "preferred_read_replica": -1, "records": b""}
    try:
        plog = replicas.get_log(tp)
        replicas.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
        max_bytes = min(p.partition_max_bytes, budget)
        data = plog.read(p.fetch_offset, max_bytes, isolation, min_one_message=state.bytes == 0)
        out.update(high_watermark=plog.high_watermark, last_stable_offset=plog.last_stable_offset,
                   log_start_offset=plog.log_start_offset)
        records = data.records
        if isolation is FetchIsolation.TXN_COMMITTED:
            # No records, nothing to filter: skip reading the segments' transaction indexes.
            aborted = plog.collect_aborted_transactions(p.fetch_offset, plog.last_stable_offset) \
                if records is not None and records.size else []
            out["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                           for a in aborted]
        if records is not None and records.size:
            if records.size < INLINE_BYTES:
                out["records"] = records.read()
            else:
                splice = Splice(records, records.size)
                state.splices.append(splice)
                out["records"] = splice.marker
            state.bytes += records.size
    except KafkaError as e:
        state.errors = True
        out["error_code"] = e.error_code
        plog = replicas.logs.get_log(tp)
        if plog is not None:
            out.update(high_watermark=plog.high_watermark, last_stable_offset=plog.last_stable_offset,
                       log_start_offset=plog.log_start_offset)
    return out


def _one_pass(ctx: RequestContext, request: Any, isolation: FetchIsolation) -> tuple[list[dict[str, Any]], _FetchState,
                                                                                   list[TopicPartition]]:
    topics = ctx.broker.topics
    state = _FetchState()
    max_bytes = getattr(request, "max_bytes", 0x7FFFFFFF)
    responses = []
    tps = []
    for t in request.topics:
        name = getattr(t, "topic", None)
        topic_id = getattr(t, "topic_id", None)
        info = topics.get(name) if name is not None else topics.by_id(topic_id)
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
            state.errors = True
            parts = [{"partition_index": p.partition, "error_code": code, "high_watermark": -1,
                      "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                      "preferred_read_replica": -1, "records": b""} for p in t.partitions]
        else:
            parts = []
            for p in t.partitions:
                budget = max(0, max_bytes - state.bytes)
                parts.append(_read_partition(ctx, info.name, p, isolation, budget, state))
                tps.append(TopicPartition(info.name, p.partition))
        responses.append({"topic": name if name is not None else (info.name if info else ""),
                          "topic_id": info.topic_id if info else topic_id, "partitions": parts})
    return responses, state, tps


@handles(FETCH)
async def fetch(ctx: RequestContext, request: Any) -> Any:
    isolation = FetchIsolation.TXN_COMMITTED if getattr(request, "isolation_level", 0) == READ_COMMITTED \
        else FetchIsolation.HIGH_WATERMARK
    max_wait_s = max(0.0, request.max_wait.total_seconds())
    deadline = time.monotonic() + max_wait_s
    while True:
        responses, state, tps = _one_pass(ctx, request, isolation)
        remaining = deadline - time.monotonic()
        if state.bytes >= request.min_bytes or state.errors or remaining <= 0 or not tps \
                or ctx.broker.shutting_down:
            break
        await ctx.broker.replicas.wait_for_data(tps, remaining)
    body = ctx.respond(throttle_time=0, error_code=0, session_id=0, responses=responses)
    return Spliced(body, state.splices) if state.splices else body
