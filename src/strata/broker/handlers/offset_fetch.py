"""OffsetFetch: committed offsets of one group (v1-v7) or of several groups at once (v8+).

A partition without a committed offset answers -1, and so does a group that does not exist (Kafka
does not reveal whether it exists). ``topics`` null (v2+) asks for every committed partition.
v10 names topics by id: an unknown id answers UNKNOWN_TOPIC_ID for its partitions. ``require_stable``
(v7+, KIP-447; set by read_committed consumers) makes a partition whose offset a transaction has
committed but not yet completed (a pending TxnOffsetCommit) answer UNSTABLE_OFFSET_COMMIT, which the
client retries; without it such a partition shows the last completed commit.

With an authorizer, as in Kafka: a group without DESCRIBE on it answers GROUP_AUTHORIZATION_FAILED (and no
topics); a request for every partition leaves out the topics the principal may not DESCRIBE; named topics
it may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED for each requested partition without reaching the
coordinator (a topic id is resolved to the name ACLs are about first).
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group.classic import GroupError
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

OFFSET_FETCH = 9
TOP_LEVEL_ERROR_VERSION = 2
MULTI_GROUP_VERSION = 8


def _missing(partition: int, code: int) -> dict[str, Any]:
    return {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
            "error_code": code}


def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool,
                 member: tuple[str | None, int] = (None, -1)) -> tuple[int, list[dict[str, Any]]]:
    """(group error, response topics) for one group; topics carry both name and id (the version keeps one)."""
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    registry = ctx.broker.topics
    manager = manager_of(ctx, group_id)
    requested: list[tuple[str, list[int]]] | None = None
    unknown_ids: list[tuple[Any, list[int]]] = []
    refused: list[tuple[str, list[int]]] = []  # named topics the principal may not DESCRIBE
    describable: dict[str, bool] = {}

    def may_describe(name: str) -> bool:
        if name not in describable:
            describable[name] = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        return describable[name]

    if topics is not None:
        requested = []
        for t in topics:
            name = getattr(t, "name", None)
            if name is None:
                info = registry.by_id(getattr(t, "topic_id", None))
                if info is None:
                    unknown_ids.append((t.topic_id, list(t.partition_indexes)))
                    continue
                name = info.name
            (requested if may_describe(name) else refused).append((name, list(t.partition_indexes)))
    if manager is None:
        code: int = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return code, [{"name": n, "topic_id": _id_of(ctx, n), "partitions": [_missing(p, code) for p in ps]}
                      for n, ps in requested or []]
    try:
        manager.validate_offset_fetch(group_id, *member)  # v9+: a consumer group's member at its epoch
        found = manager.fetch_offsets(group_id, requested, require_stable)
    except GroupError as e:
        return e.error_code, [{"name": n, "topic_id": _id_of(ctx, n),
                               "partitions": [_missing(p, e.error_code) for p in ps]} for n, ps in requested or []]
    out = [{"name": name, "topic_id": _id_of(ctx, name), "partitions": parts} for name, parts in found
           if topics is not None or may_describe(name)]
    if topics is None and ctx.version >= 10:
        out = [t for t in out if t["topic_id"] is not None]  # offsets of deleted topics have no id to show
    out += [{"name": n, "topic_id": _id_of(ctx, n),
             "partitions": [_missing(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in ps]} for n, ps in refused]
    out += [{"name": "", "topic_id": tid, "partitions": [_missing(p, ErrorCode.UNKNOWN_TOPIC_ID) for p in ps]}
            for tid, ps in unknown_ids]
    return ErrorCode.NONE, out


def _id_of(ctx: RequestContext, name: str) -> Any:
    info = ctx.broker.topics.get(name)
    return info.topic_id if info is not None else None


@handles(OFFSET_FETCH)
async def offset_fetch(ctx: RequestContext, request: Any) -> Any:
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.version >= MULTI_GROUP_VERSION:
        groups = []
        for g in request.groups:
            member = (getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            code, topics = _fetch_group(ctx, g.group_id, g.topics, require_stable, member)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return ctx.respond(throttle_time=0, groups=groups)
    code, topics = _fetch_group(ctx, request.group_id, request.topics, require_stable)
    if ctx.version < TOP_LEVEL_ERROR_VERSION and code:
        for t in topics:  # v1 has no group-level error: every partition carries it
            t["partitions"] = [{**p, "error_code": code} for p in t["partitions"]]
    return ctx.respond(throttle_time=0, error_code=code, topics=topics)
