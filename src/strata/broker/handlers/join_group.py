"""JoinGroup: the first phase of a classic-group rebalance, parked until every member has (re)joined.

The request waits in the group state machine (at most the group's rebalance timeout, or the
initial rebalance delay for a new group) and this handler answers when the machine calls back.
JoinGroup v0 has no rebalance timeout: as in Kafka, the session timeout stands in for it.
With an authorizer, joining needs READ on the group (else GROUP_AUTHORIZATION_FAILED, as Kafka answers).
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import client_host, manager_of, millis, parked
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group.classic import dedupe_protocols
from strata.coordinator.group.manager import JoinRequest, join_error
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

JOIN_GROUP = 11
DURABLE_TIMEOUT_S = 5.0
NULLABLE_PROTOCOL_VERSION = 7


def _answer(ctx: RequestContext, result: dict[str, Any]) -> Any:
    values = dict(result)
    if ctx.version < NULLABLE_PROTOCOL_VERSION and values.get("protocol_name") is None:
        values["protocol_name"] = ""
    return ctx.respond(throttle_time=0, **values)


@handles(JOIN_GROUP)
async def join_group(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _answer(ctx, join_error("", ErrorCode.GROUP_AUTHORIZATION_FAILED))
    manager = manager_of(ctx, request.group_id)
    if manager is None:
        return _answer(ctx, join_error(request.member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
    session = millis(request.session_timeout)
    req = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=session,
        rebalance_timeout_ms=millis(getattr(request, "rebalance_timeout", None), session),
        protocol_type=request.protocol_type,
        protocols=dedupe_protocols([(p.name, p.metadata) for p in request.protocols]),
        api_version=ctx.version,
        reason=getattr(request, "reason", None),
    )
    fut, respond = parked()
    manager.join_group(req, respond)
    answer = await fut
    # a classic member of a consumer group: answered once the ISR has what the answer rests on
    if not answer.get("error_code") and manager.consumer_group(request.group_id) is not None \
            and await ctx.broker.groups.durable(request.group_id, DURABLE_TIMEOUT_S):
        answer = join_error(request.member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(ctx, answer)
