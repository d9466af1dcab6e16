"""ShareFetch (API 78, KIP-932): a share-group member's fetch, with its acknowledgements piggy-backed.

The request runs in the member's share session (:mod:`strata.broker.share.sessions`): epoch 0 opens it with
the full partition list (and may not carry acknowledgements), later epochs add ``Topics`` and drop
``ForgottenTopicsData``, epoch -1 only acknowledges and closes it. Acknowledgements are applied first (each
persisted before it is answered); then every partition of the session is offered to the share-partition
(:mod:`strata.broker.share.partition_manager`), which acquires records for this member under a lock of
``share.record.lock.duration.ms``. With nothing acquired, the fetch waits up to MaxWaitMs for data or for
records to be released. The first answer of a session lists every partition; later ones only those with
records, errors or acknowledgement results, as Kafka's ShareSessionContext does.

v2 (KIP-1206/1222): ShareAcquireMode 1 (record_limit) makes MaxRecords exact; IsRenewAck renews locks only
(MaxBytes, MinBytes, MaxRecords and MaxWaitMs must then be 0).

Authorization: READ on the group (GROUP_AUTHORIZATION_FAILED for the whole request) and READ on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from strata.broker.handlers.fetch import INLINE_BYTES
from strata.broker.share.log_reader import Records, records_size
from strata.broker.share.partition_manager import ShareFetchError
from strata.broker.share.requests import (
    PartitionResult,
    Results,
    SessionError,
    acknowledgements,
    apply_acknowledgements,
    merged_topics,
    refusal,
    resolve,
    session_for,
)
from strata.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from strata.broker.wire.dispatch import RequestContext, Spliced, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode
from strata.log.file_records import FileSlice
from strata.protocol.frame import Splice
from strata.security.acl import AclOperation

SHARE_FETCH = 78
RECORD_LIMIT_MODE = 1


def _answer(ctx: RequestContext, code: int, message: str | None = None, lock_ms: int = 0,
            responses: list[dict[str, Any]] | None = None, endpoints: list[dict[str, Any]] | None = None) -> Any:
    return ctx.respond(throttle_time=0, error_code=code, error_message=message, acquisition_lock_timeout=lock_ms,
                       responses=responses or [], node_endpoints=endpoints or [])


def _records_field(records: Records, splices: list[Splice]) -> bytes:
    """The acquired batches as a ``records`` field: a segment slice goes out with ``sendfile`` (a splice
    marker in the encoded response) unless it is small enough to read, as Fetch sends them."""
    if not isinstance(records, FileSlice):
        return records
    if records.size < INLINE_BYTES:
        return records.read()
    splice = Splice(records, records.size)
    splices.append(splice)
    return splice.marker


def _partition_entry(ctx: RequestContext, name: str | None, partition: int, r: PartitionResult,
                     splices: list[Splice]) -> dict[str, Any]:
    leader = {"leader_id": -1, "leader_epoch": -1}
    if r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and name is not None:
        view = ctx.broker.view.partition(name, partition)
        leader = {"leader_id": view.leader, "leader_epoch": view.leader_epoch}
    return {"partition_index": partition, "error_code": r.error_code, "error_message": r.error_message,
            "acknowledge_error_code": r.acknowledge_error_code or 0,
            "acknowledge_error_message": r.acknowledge_error_message, "current_leader": leader,
            "records": _records_field(r.records, splices),  # not nullable in ShareFetch
            "acquired_records": [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                  "delivery_count": a.delivery_count} for a in r.acquired]}


def _responses(ctx: RequestContext, results: Results, full: list[tuple[UUID, int]] | None,
               splices: list[Splice] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    keys = list(results) if full is None else list(dict.fromkeys([*full, *results]))
    by_topic: dict[UUID, list[dict[str, Any]]] = {}
    leaders: set[int] = set()
    for key in keys:
        r = results.get(key, PartitionResult())
        if full is None and not r.reportable():
            continue
        info = ctx.broker.topics.by_id(key[0])
        entry = _partition_entry(ctx, info.name if info is not None else None, key[1], r,
                                 splices if splices is not None else [])
        if entry["current_leader"]["leader_id"] >= 0:
            leaders.add(entry["current_leader"]["leader_id"])
        by_topic.setdefault(key[0], []).append(entry)
    endpoints = []
    for node in sorted(leaders):
        b = ctx.broker.view.broker(node, ctx.listener_name)
        if b is not None:
            endpoints.append({"node_id": node, "host": b["host"], "port": b["port"], "rack": b.get("rack")})
    return [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()], endpoints


@handles(SHARE_FETCH)
async def share_fetch(ctx: RequestContext, request: Any) -> Any:
    refused = refusal(ctx, request)
    if refused is not None:
        return _answer(ctx, *refused)
    broker = ctx.broker
    shares = broker.shares
    assert shares is not None
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    renew = bool(getattr(request, "is_renew_ack", False))
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    if renew and (request.max_bytes or request.min_bytes or request.max_records or max_wait_ms):
        return _answer(ctx, ErrorCode.INVALID_REQUEST,
                       "A renew-ack share fetch must have MaxBytes, MinBytes, MaxRecords and MaxWaitMs 0.")
    topics = merged_topics(request.topics)
    acks = {(t, p.partition_index): acknowledgements(p) for t, ps in topics.items() for p in ps
            if p.acknowledgement_batches}
    if epoch == INITIAL_EPOCH and acks:
        return _answer(ctx, ErrorCode.INVALID_REQUEST, "A share session cannot start with acknowledgements.")
    lock_ms = shares.lock_duration_ms(group_id)
    try:
        session = session_for(shares, ctx, group_id, member_id, epoch, fetch=True)
    except SessionError as e:
        return _answer(ctx, e.error_code, str(e), lock_ms)

    results: Results = {}
    # partitions named in this request, checked (unknown or unauthorized ones are answered with their error)
    named: list[tuple[tuple[UUID, int], str]] = []
    for topic_id, partitions in topics.items():
        for p in partitions:
            name = resolve(ctx, topic_id, p.partition_index, AclOperation.READ, results)
            if name is not None:
                named.append(((topic_id, p.partition_index), name))
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    valid_acks = {k: v for k, v in acks.items() if k not in results}
    if valid_acks:
        await apply_acknowledgements(ctx, shares, group_id, member_id, valid_acks, results)

    if epoch == FINAL_EPOCH:
        shares.close_session(group_id, member_id)
        responses, endpoints = _responses(ctx, results, None)
        return _answer(ctx, ErrorCode.NONE, None, lock_ms, responses, endpoints)

    session.update(named, forgotten)
    full = list(session.partitions) if epoch == INITIAL_EPOCH else None
    if full is not None:
        full = [*full, *(k for k in results if k not in session.partitions)]
    if renew:
        responses, endpoints = _responses(ctx, results, full)
        return _answer(ctx, ErrorCode.NONE, None, lock_ms, responses, endpoints)

    record_limit = getattr(request, "share_acquire_mode", 0) == RECORD_LIMIT_MODE
    max_records = max(0, int(request.max_records))
    batch_size = max(1, int(request.batch_size))
    max_bytes = max(0, int(request.max_bytes))
    deadline = time.monotonic() + max(0, max_wait_ms) / 1000
    order = list(session.partitions.items())
    # rotate so that one busy partition does not starve the others across fetches
    if order:
        shift = session.epoch % len(order)
        order = order[shift:] + order[:shift]
    while True:
        got = await _acquire_all(shares, group_id, member_id, order, results, max_bytes, max_records, batch_size,
                                 record_limit)
        remaining = deadline - time.monotonic()
        if got or any(r.reportable() for r in results.values()) or remaining <= 0 or broker.shutting_down \
                or not order:
            break
        await shares.wait([TopicPartition(name, p) for (_, p), name in order], remaining)
    splices: list[Splice] = []
    responses, endpoints = _responses(ctx, results, full, splices)
    body = _answer(ctx, ErrorCode.NONE, None, lock_ms, responses, endpoints)
    return Spliced(body, splices) if splices else body


async def _acquire_all(shares: Any, group_id: str, member_id: str, order: list[tuple[tuple[UUID, int], str]],
                       results: Results, max_bytes: int, max_records: int, batch_size: int,
                       record_limit: bool) -> bool:
    """Offer each session partition in turn until the byte or record budget is spent; whether any acquired."""
    got = False
    for key, name in order:
        if max_records <= 0 or max_bytes <= 0:
            break
        existing = results.get(key)
        if existing is not None and existing.error_code:
            continue
        try:
            entry = await shares.entry(group_id, key[0], name, key[1])
            fetched = await shares.acquire(entry, member_id, max_bytes, max_records, batch_size, record_limit)
        except ShareFetchError as e:
            r = results.setdefault(key, PartitionResult())
            r.error_code, r.error_message = e.error_code, e.message
            continue
        if not fetched.acquired:
            continue
        r = results.setdefault(key, PartitionResult())
        r.records, r.acquired = fetched.records, fetched.acquired
        got = True
        max_bytes -= records_size(fetched.records)
        max_records -= sum(a.last_offset - a.first_offset + 1 for a in fetched.acquired)
    return got
