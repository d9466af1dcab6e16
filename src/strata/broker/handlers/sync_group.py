"""SyncGroup: the leader hands in the assignment; every member is answered with its own share.

Followers park until the leader's assignment has been written to ``__consumer_offsets`` (or until
the rebalance is abandoned, which answers them REBALANCE_IN_PROGRESS). With an authorizer it needs READ on
the group (else GROUP_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of, parked
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group.manager import SyncRequest, sync_response
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

SYNC_GROUP = 14


@handles(SYNC_GROUP)
async def sync_group(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.respond(throttle_time=0, **sync_response(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    manager = manager_of(ctx, request.group_id)
    if manager is None:
        return ctx.respond(throttle_time=0, **sync_response(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    req = SyncRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id,
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    fut, respond = parked()
    manager.sync_group(req, respond)
    answer = await fut
    if req.assignments and not answer.get("error_code"):
        # the leader's sync stored the assignment: answered once the ISR has it (a cluster's acks=all)
        code = await ctx.broker.groups.durable(req.group_id, DURABLE_TIMEOUT_S)
        if code:
            answer = sync_response(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return ctx.respond(throttle_time=0, **answer)


DURABLE_TIMEOUT_S = 5.0
