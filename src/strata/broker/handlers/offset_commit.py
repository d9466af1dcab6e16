"""OffsetCommit: a group's consumed positions, written to ``__consumer_offsets`` before the answer.

Unknown topics or partitions are refused here (UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_TOPIC_ID for
v10's topic ids) and never reach the coordinator, as in Kafka's ``KafkaApis``. The rest are checked
against the group (generation, member; generation -1 with no member id is a "simple" commit,
allowed while the group is Empty) and committed in one batch.

With an authorizer, as in Kafka: without READ on the group every partition answers
GROUP_AUTHORIZATION_FAILED; then a topic without READ answers TOPIC_AUTHORIZATION_FAILED for each of its
partitions, before its existence is looked at (a topic id is first resolved to the name ACLs are about).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strata.broker.group_api import manager_of, millis
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group.manager import CommitRequest
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

OFFSET_COMMIT = 8
DURABLE_TIMEOUT_S = 5.0


@handles(OFFSET_COMMIT)
async def offset_commit(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _answer(ctx, request, lambda ti, pi: ErrorCode.GROUP_AUTHORIZATION_FAILED)
    topics = ctx.broker.topics
    manager = manager_of(ctx, request.group_id)
    errors: dict[tuple[int, int], int] = {}  # (topic index, partition index in request) -> error
    wanted: list[tuple[str, int, int, int, str | None]] = []
    where: dict[tuple[int, int], tuple[str, int]] = {}
    readable: dict[str, bool] = {}
    for ti, t in enumerate(request.topics):
        name = getattr(t, "name", None)
        info = topics.get(name) if name is not None else topics.by_id(getattr(t, "topic_id", None))
        acl_name = name if name is not None else info.name if info is not None else None
        if acl_name is not None and acl_name not in readable:
            readable[acl_name] = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, acl_name)
        for pi, p in enumerate(t.partitions):
            if acl_name is not None and not readable[acl_name]:
                errors[(ti, pi)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None:
                errors[(ti, pi)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None \
                    else ErrorCode.UNKNOWN_TOPIC_ID
            elif not 0 <= p.partition_index < info.partitions:
                errors[(ti, pi)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif manager is None:
                errors[(ti, pi)] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                where[(ti, pi)] = (info.name, p.partition_index)
                wanted.append((info.name, p.partition_index, p.committed_offset,
                               getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    if wanted and manager is not None:
        results = manager.commit_offsets(CommitRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            generation_id=request.generation_id_or_member_epoch,
            retention_ms=millis(getattr(request, "retention_time", None)),
            api_version=ctx.version,
            partitions=wanted,
        ))
        durable = await ctx.broker.groups.durable(request.group_id, DURABLE_TIMEOUT_S)
        for pos, key in where.items():
            # Kafka's storeOffsets: a write the ISR did not take in time is COORDINATOR_NOT_AVAILABLE (retried)
            errors[pos] = results[key] or (ErrorCode.COORDINATOR_NOT_AVAILABLE if durable else ErrorCode.NONE)
    return _answer(ctx, request, lambda ti, pi: errors[(ti, pi)])


def _answer(ctx: RequestContext, request: Any, error: Callable[[int, int], int]) -> Any:
    """Every requested partition with ``error(topic index, partition index)``."""
    return ctx.respond(throttle_time=0, topics=[
        {"name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None),
         "partitions": [{"partition_index": p.partition_index, "error_code": error(ti, pi)}
                        for pi, p in enumerate(t.partitions)]}
        for ti, t in enumerate(request.topics)])
