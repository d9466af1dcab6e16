"""Heartbeat: keeps a member's session alive and tells it when to rejoin (REBALANCE_IN_PROGRESS).

With an authorizer it needs READ on the group (else GROUP_AUTHORIZATION_FAILED), as in Kafka."""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

HEARTBEAT = 12


@handles(HEARTBEAT)
async def heartbeat(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    manager = manager_of(ctx, request.group_id)
    if manager is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code = manager.heartbeat(request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                             request.generation_id)
    return ctx.respond(throttle_time=0, error_code=code)
