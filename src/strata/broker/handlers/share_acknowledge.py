"""ShareAcknowledge (API 79, KIP-932): a share-group member's acknowledgements outside a fetch (its commits,
and its close with epoch -1, which also ends its share session and gives back what it still holds).

Epoch 0 cannot open a session here (INVALID_SHARE_SESSION_EPOCH); other epochs follow the share session's
rules (:mod:`strata.broker.share.sessions`). Each partition's acknowledgements are persisted with
WriteShareGroupState before the answer: INVALID_RECORD_STATE when an offset is not acquired by this member or
its lock expired, INVALID_REQUEST for a malformed batch. v2 answers AcquisitionLockTimeoutMs and takes
IsRenewAck (RENEW acknowledgements only restart the locks).

Authorization: READ on the group and on each topic, as Kafka's ``handleShareAcknowledgeRequest``.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from strata.broker.share.requests import (
    Results,
    SessionError,
    acknowledgements,
    apply_acknowledgements,
    merged_topics,
    refusal,
    resolve,
    session_for,
)
from strata.broker.share.sessions import FINAL_EPOCH
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

SHARE_ACKNOWLEDGE = 79


def _answer(ctx: RequestContext, code: int, message: str | None = None, lock_ms: int = 0,
            responses: list[dict[str, Any]] | None = None) -> Any:
    return ctx.respond(throttle_time=0, error_code=code, error_message=message, acquisition_lock_timeout=lock_ms,
                       responses=responses or [], node_endpoints=[])


@handles(SHARE_ACKNOWLEDGE)
async def share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    refused = refusal(ctx, request)
    if refused is not None:
        return _answer(ctx, *refused)
    broker = ctx.broker
    shares = broker.shares
    assert shares is not None
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    lock_ms = shares.lock_duration_ms(group_id)
    try:
        session_for(shares, ctx, group_id, member_id, epoch, fetch=False)
    except SessionError as e:
        return _answer(ctx, e.error_code, str(e), lock_ms)
    results: Results = {}
    acks: dict[tuple[UUID, int], list[tuple[int, int, list[int]]]] = {}
    for topic_id, partitions in merged_topics(request.topics).items():
        for p in partitions:
            if resolve(ctx, topic_id, p.partition_index, AclOperation.READ, results) is None:
                continue
            acks[(topic_id, p.partition_index)] = acknowledgements(p)
    if acks:
        await apply_acknowledgements(ctx, shares, group_id, member_id, acks, results)
    if epoch == FINAL_EPOCH:
        shares.close_session(group_id, member_id)
    by_topic: dict[UUID, list[dict[str, Any]]] = {}
    for (topic_id, partition), r in results.items():
        code = r.error_code or (r.acknowledge_error_code or 0)
        message = r.error_message or r.acknowledge_error_message
        by_topic.setdefault(topic_id, []).append({
            "partition_index": partition, "error_code": code, "error_message": message,
            "current_leader": {"leader_id": -1, "leader_epoch": -1}})
    return _answer(ctx, ErrorCode.NONE, None, lock_ms,
                   [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()])
