"""DescribeGroups: state, protocol and members of classic groups.

Member metadata and the chosen protocol are shown only for Stable groups (mid-rebalance they are in
flux), as in Kafka. An unknown group is described as Dead; from v6 it also carries
GROUP_ID_NOT_FOUND with a message. ``authorized_operations`` (v3+) is, when asked, the bit field of
what the principal may do on the group (:meth:`RequestContext.authorized_operations`: every group operation
without an authorizer), for the groups described without an error, as in Kafka; the others keep the "not
requested" value. With an authorizer a group the principal may not DESCRIBE answers
GROUP_AUTHORIZATION_FAILED with nothing else known about it (Kafka's ``DescribeGroupsResponse.groupError``).
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of, owns
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType

DESCRIBE_GROUPS = 15
NOT_FOUND_VERSION = 6


def _dead(group_id: str, code: int, message: str | None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "Dead",
            "protocol_type": "", "protocol_data": "", "members": []}


@handles(DESCRIBE_GROUPS)
async def describe_groups(ctx: RequestContext, request: Any) -> Any:
    manager = manager_of(ctx)
    include_operations = bool(getattr(request, "include_authorized_operations", False))
    out = []
    for group_id in request.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            entry = {**_dead(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None), "group_state": ""}
        elif manager is None or not owns(ctx, group_id):
            entry = _dead(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
        else:
            described = manager.describe_group(group_id)
            if described is not None:
                entry = described
            elif ctx.version >= NOT_FOUND_VERSION:
                entry = _dead(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
            else:
                entry = _dead(group_id, ErrorCode.NONE, None)
        described_ok = include_operations and entry["error_code"] == ErrorCode.NONE
        out.append({**entry, "authorized_operations": ctx.authorized_operations(ResourceType.GROUP, group_id)
                    if described_ok else AUTHORIZED_OPERATIONS_OMITTED})
    return ctx.respond(throttle_time=0, groups=out)
