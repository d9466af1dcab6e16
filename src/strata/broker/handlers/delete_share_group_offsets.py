"""DeleteShareGroupOffsets (API 92, KIP-932): forget a share group's start offsets of whole topics
(``kafka-share-groups.sh --delete-offsets``).

As Kafka's ``deleteShareGroupOffsets``: the group must exist (GROUP_ID_NOT_FOUND) and be empty
(NON_EMPTY_GROUP). The named topics' initialized partitions are recorded as deleting
(ShareGroupStatePartitionMetadata), their state is deleted at the share coordinator (DeleteShareGroupState
through the persister), and the topics whose state is gone are then forgotten; a topic whose delete failed
answers that error and stays deleting, so naming it again retries. A topic the group has no state for, or
that does not exist, answers UNKNOWN_TOPIC_OR_PARTITION. The answer waits until the ISR has the records.

Authorization: DELETE on the group (else GROUP_AUTHORIZATION_FAILED for the whole request) and READ on each
topic (else TOPIC_AUTHORIZATION_FAILED for it).
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

DELETE_SHARE_GROUP_OFFSETS = 92


def _error(ctx: RequestContext, code: int, message: str | None = None) -> Any:
    return ctx.respond(throttle_time=0, error_code=code, error_message=message, responses=[])


@handles(DELETE_SHARE_GROUP_OFFSETS)
async def delete_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id
    refusal = share_refusal(ctx, group_id, AclOperation.DELETE)
    if refusal is not None:
        return _error(ctx, refusal)
    refused = [{"topic_name": t.topic_name, "topic_id": None, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "error_message": "Topic authorization failed."}
               for t in request.topics if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.topic_name)]
    names = [t.topic_name for t in request.topics if t.topic_name not in {r["topic_name"] for r in refused}]

    async def delete(persister: Any, plan: share_admin.DeleteOffsetsPlan) -> dict[UUID, int]:
        keys = [(topic_id, p) for topic_id, (_name, ps) in plan.partitions.items() for p in sorted(ps)]
        codes = await asyncio.gather(*(persister.delete(group_id, topic_id, p) for topic_id, p in keys))
        failed: dict[UUID, int] = {}
        for (topic_id, _p), code in zip(keys, codes, strict=True):
            if code and topic_id not in failed:
                failed[topic_id] = code
        return failed

    def record(share: Any, plan: share_admin.DeleteOffsetsPlan, failed: dict[UUID, int]) -> None:
        share_admin.complete_delete_offsets(share, group_id, [t for t in plan.partitions if t not in failed])

    try:
        plan, failed = await in_two_phases(
            ctx, group_id, lambda share: share_admin.begin_delete_offsets(share, group_id, names), delete, record)
    except ShareAdminError as e:
        return _error(ctx, e.error_code, e.message)
    answered = [{"topic_name": name, "topic_id": topic_id, "error_code": failed.get(topic_id, ErrorCode.NONE),
                 "error_message": None} for topic_id, (name, _ps) in plan.partitions.items()]
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, error_message=None,
                       responses=[*refused, *plan.errors, *answered])
