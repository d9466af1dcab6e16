"""AlterShareGroupOffsets (API 91, KIP-932): set a share group's start offsets (``kafka-share-groups.sh
--reset-offsets --execute``).

As Kafka's ``alterShareGroupOffsets``: the group must be empty (NON_EMPTY_GROUP); a group that does not exist
is created empty, so offsets can be set before the first consumer starts. The partitions are recorded as
initializing (ShareGroupStatePartitionMetadata), then the share coordinator initializes each one's state at
the new start offset and the group's epoch (InitializeShareGroupState through the persister), and those that
succeeded are recorded as initialized; a partition whose initialization failed answers that error and stays
initializing. The answer waits until the ISR has the group's records.

Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED for the whole request) and on each topic
(else TOPIC_AUTHORIZATION_FAILED on its partitions); a topic that does not exist answers
UNKNOWN_TOPIC_OR_PARTITION, as does a partition it does not have.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from strata.broker.share.admin import ShareAdminError, in_two_phases, share_refusal
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group import share_admin
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

ALTER_SHARE_GROUP_OFFSETS = 91


def _error(ctx: RequestContext, code: int, message: str | None = None) -> Any:
    return ctx.respond(throttle_time=0, error_code=code, error_message=message, responses=[])


@handles(ALTER_SHARE_GROUP_OFFSETS)
async def alter_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    group_id = request.group_id
    refusal = share_refusal(ctx, group_id, AclOperation.READ)
    if refusal is not None:
        return _error(ctx, refusal)
    refused: list[dict[str, Any]] = []
    asked: list[tuple[str, list[tuple[int, int]]]] = []
    for t in request.topics:
        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if not ctx.authorize(
            AclOperation.READ, ResourceType.TOPIC, t.topic_name) else \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if t.topic_name not in broker.topics else ErrorCode.NONE
        if code:  # no topic id: a topic the principal may not read is not shown to exist (Kafka shows its id)
            refused.append({"topic_name": t.topic_name, "topic_id": None, "partitions": [
                share_admin.partition_error(p.partition_index, code) for p in t.partitions]})
        else:
            asked.append((t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]))

    async def initialize(persister: Any, plan: share_admin.AlterPlan) -> dict[tuple[UUID, int], int]:
        keys = [(topic_id, p, offset) for topic_id, ps in plan.offsets.items() for p, offset in ps.items()]
        codes = await asyncio.gather(*(persister.initialize(group_id, topic_id, p, plan.state_epoch, offset)
                                       for topic_id, p, offset in keys))
        return {(topic_id, p): code for (topic_id, p, _), code in zip(keys, codes, strict=True) if code}

    def record(share: Any, plan: share_admin.AlterPlan, failed: dict[tuple[UUID, int], int]) -> None:
        succeeded: dict[UUID, frozenset[int]] = {}
        for topic_id, ps in plan.offsets.items():
            for p in ps:
                if (topic_id, p) not in failed:
                    succeeded[topic_id] = succeeded.get(topic_id, frozenset()) | {p}
        share_admin.complete_alter_offsets(share, group_id, succeeded)

    try:
        plan, failed = await in_two_phases(
            ctx, group_id, lambda share: share_admin.begin_alter_offsets(share, group_id, asked), initialize, record)
    except ShareAdminError as e:
        return _error(ctx, e.error_code, e.message)
    for topic in plan.topics:
        for partition in topic["partitions"]:
            code = failed.get((topic["topic_id"], partition["partition_index"]))
            if code is not None and not partition["error_code"]:
                partition["error_code"] = code
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, error_message=None,
                       responses=[*refused, *plan.topics])
