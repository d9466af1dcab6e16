"""ShareGroupDescribe (API 77, KIP-932): a share group's state, epochs, assignor and every member's assignment.

Each group is answered on its own, as Kafka's ``handleShareGroupDescribe``: GROUP_AUTHORIZATION_FAILED
without DESCRIBE on it, NOT_COORDINATOR when another broker coordinates it, INVALID_GROUP_ID for the empty
id, GROUP_ID_NOT_FOUND when it does not exist or is not a share group, and TOPIC_AUTHORIZATION_FAILED for the
whole group when a member shows a topic the principal may not DESCRIBE (its assignment, and, as Strata's
ConsumerGroupDescribe does, its subscription: both name topics). The assignor is always ``simple``.
Disabled (``group.coordinator.rebalance.protocols`` without ``share``) every group answers UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of, owns
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group import share_admin
from strata.coordinator.group.classic import GroupError
from strata.errors import ErrorCode
from strata.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType

SHARE_GROUP_DESCRIBE = 77


def _failed(group_id: str, code: int, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


@handles(SHARE_GROUP_DESCRIBE)
async def share_group_describe(ctx: RequestContext, request: Any) -> Any:
    if "share" not in ctx.broker.config.group_rebalance_protocols:
        return ctx.respond(throttle_time=0, groups=[_failed(g, ErrorCode.UNSUPPORTED_VERSION)
                                                    for g in request.group_ids])
    manager = manager_of(ctx)
    include_operations = bool(request.include_authorized_operations)
    topics = ctx.broker.topics

    def name_of(topic_id: Any) -> str | None:
        info = topics.by_id(topic_id)
        return info.name if info is not None else None

    out = []
    for group_id in request.group_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(_failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if not group_id:
            out.append(_failed("", ErrorCode.INVALID_GROUP_ID))
            continue
        if manager is None:
            out.append(_failed(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        if not owns(ctx, group_id):
            out.append(_failed(group_id, ErrorCode.NOT_COORDINATOR))
            continue
        try:
            described = share_admin.describe(manager.share, group_id, name_of)
        except GroupError as e:
            out.append(_failed(group_id, e.error_code, str(e)))
            continue
        shown = {tp["topic_name"] for m in described["members"] for tp in m["assignment"]["topic_partitions"]}
        shown |= {t for m in described["members"] for t in m["subscribed_topic_names"]}
        if ctx.broker.authorization.enabled and any(
                not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t) for t in shown if t):
            out.append(_failed(group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                               "The group has described topic(s) that the client is not authorized to describe."))
            continue
        described["authorized_operations"] = ctx.authorized_operations(ResourceType.GROUP, group_id) \
            if include_operations else AUTHORIZED_OPERATIONS_OMITTED
        out.append(described)
    return ctx.respond(throttle_time=0, groups=out)
