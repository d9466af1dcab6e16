"""DeleteGroups: remove Empty groups and their offsets (tombstones in ``__consumer_offsets``).

A group with members answers NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.broker.group.api import manager_of
from strata.errors import ErrorCode

DELETE_GROUPS = 42


@handles(DELETE_GROUPS)
async def delete_groups(ctx: RequestContext, request: Any) -> Any:
    manager = manager_of(ctx)
    if manager is None:
        results = [(g, int(ErrorCode.COORDINATOR_NOT_AVAILABLE)) for g in request.groups_names]
    else:
        results = manager.delete_groups(request.groups_names)
    return ctx.respond(throttle_time=0, results=[{"group_id": g, "error_code": code} for g, code in results])
