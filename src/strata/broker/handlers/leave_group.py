"""LeaveGroup: one member (v0-v2) or a batch of members (v3+, KIP-345) leaves; the rest rebalance.

A batch may name static members by ``group_instance_id`` alone (admin removal). v0-v2 answers
carry a single error: the group's, or else the member's, as Kafka's ``LeaveGroupResponse`` does.
With an authorizer leaving needs READ on the group: else GROUP_AUTHORIZATION_FAILED for the request (no
member results), as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

LEAVE_GROUP = 13
BATCH_VERSION = 3
DURABLE_TIMEOUT_S = 5.0


@handles(LEAVE_GROUP)
async def leave_group(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    manager = manager_of(ctx, request.group_id)
    if ctx.version >= BATCH_VERSION:
        members = [(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in request.members]
    else:
        members = [(request.member_id, None, None)]
    if manager is None:
        code, results = int(ErrorCode.COORDINATOR_NOT_AVAILABLE), []
    else:
        mixed = manager.consumer_group(request.group_id) is not None
        code, results = manager.leave_group(request.group_id, members)
        # a consumer group's members leave by records (fenced, the epoch bumped): answered once the ISR has them
        if mixed and code == ErrorCode.NONE and await ctx.broker.groups.durable(request.group_id, DURABLE_TIMEOUT_S):
            code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if ctx.version >= BATCH_VERSION:
        return ctx.respond(throttle_time=0, error_code=code, members=results)
    if code == ErrorCode.NONE and results:
        code = results[0]["error_code"]
    return ctx.respond(throttle_time=0, error_code=code)
