"""OffsetDelete: drop committed offsets of topics a group no longer consumes (KIP-496).

Allowed for Empty groups, and for consumer groups with members only on topics none of them
subscribes to (the others answer GROUP_SUBSCRIBED_TO_TOPIC). Unknown topics or partitions answer
UNKNOWN_TOPIC_OR_PARTITION without reaching the coordinator.

With an authorizer, as in Kafka: without DELETE on the group the request answers GROUP_AUTHORIZATION_FAILED;
a topic without READ answers TOPIC_AUTHORIZATION_FAILED for each of its partitions (before its existence is
looked at) and is not deleted.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

OFFSET_DELETE = 47


@handles(OFFSET_DELETE)
async def offset_delete(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
    manager = manager_of(ctx, request.group_id)
    if manager is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, topics=[])
    registry = ctx.broker.topics
    known: list[tuple[str, list[int]]] = []
    refused: dict[str, list[int]] = {}
    unauthorized: dict[str, list[int]] = {}
    for t in request.topics:
        if t.name not in unauthorized and not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name):
            unauthorized[t.name] = []
        if t.name in unauthorized:
            unauthorized[t.name].extend(p.partition_index for p in t.partitions)
            continue
        info = registry.get(t.name)
        ok = [p.partition_index for p in t.partitions if info is not None and 0 <= p.partition_index < info.partitions]
        bad = [p.partition_index for p in t.partitions if not (info is not None
                                                               and 0 <= p.partition_index < info.partitions)]
        if ok:
            known.append((t.name, ok))
        if bad:
            refused[t.name] = bad
    code, results = manager.delete_offsets(request.group_id, known)
    if code:
        return ctx.respond(throttle_time=0, error_code=code, topics=[])
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for name, parts in unauthorized.items():
        by_topic[name] = [{"partition_index": p, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED} for p in parts]
    for name, parts in results:
        by_topic.setdefault(name, []).extend({"partition_index": p, "error_code": c} for p, c in parts)
    for name, parts in refused.items():
        by_topic.setdefault(name, []).extend(
            {"partition_index": p, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION} for p in parts)
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE,
                       topics=[{"name": n, "partitions": ps} for n, ps in by_topic.items()])
