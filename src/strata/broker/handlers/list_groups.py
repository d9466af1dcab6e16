"""ListGroups: every group this coordinator knows, filtered by state (v4+) and type (v5+).

Filters compare case-insensitively, as Kafka does. Groups are ``classic`` or ``consumer`` (KIP-848; their
protocol type is ``consumer`` and their states Empty, Assigning, Reconciling, Stable), KIP-1043's types.

With an authorizer, as in Kafka: a principal with DESCRIBE on the cluster sees every group; any other
sees only the groups it may DESCRIBE (and no error).
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

LIST_GROUPS = 16


@handles(LIST_GROUPS)
async def list_groups(ctx: RequestContext, request: Any) -> Any:
    manager = manager_of(ctx)
    if manager is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[])
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    groups = manager.list_groups(states, types)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        groups = [g for g in groups if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g["group_id"])]
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, groups=groups)
