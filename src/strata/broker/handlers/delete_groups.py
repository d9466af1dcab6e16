"""DeleteGroups: remove Empty groups and their offsets (tombstones in ``__consumer_offsets``).

A group with members answers NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND. With an authorizer a
group the principal may not DELETE answers GROUP_AUTHORIZATION_FAILED and is left alone, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of, owns
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

DELETE_GROUPS = 42


@handles(DELETE_GROUPS)
async def delete_groups(ctx: RequestContext, request: Any) -> Any:
    manager = manager_of(ctx)
    denied = {g for g in request.groups_names if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, g)}
    mine = [g for g in request.groups_names if g not in denied and manager is not None and owns(ctx, g)]
    done = dict(manager.delete_groups(mine)) if manager is not None and mine else {}
    results = [(g, ErrorCode.GROUP_AUTHORIZATION_FAILED if g in denied
                else done.get(g, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))) for g in request.groups_names]
    return ctx.respond(throttle_time=0, results=[{"group_id": g, "error_code": code} for g, code in results])
