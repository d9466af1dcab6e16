"""ShareGroupHeartbeat (API 76, KIP-932): join, heartbeat and leave a share group.

Checked as Kafka's ``throwIfShareGroupHeartbeatRequestIsInvalid`` (INVALID_REQUEST: librdkafka treats it as
fatal), then the group coordinator's share state machine (:mod:`strata.coordinator.group.share_manager`)
answers; in a cluster the answer waits until the ISR has the group's records. Leaving (epoch -1) releases
no records: the member's final ShareAcknowledge closes its share session and gives back what it still holds
(Kafka 4.2's order).

Authorization: READ on the group and DESCRIBE on every subscribed topic. Disabled
(``group.coordinator.rebalance.protocols`` without ``share``) the API answers UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import client_host, manager_of
from strata.broker.share.admin import share_refusal
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.manager import group_append_error
from strata.coordinator.group.share_manager import LEAVE_GROUP_MEMBER_EPOCH
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

SHARE_GROUP_HEARTBEAT = 76
MAX_MEMBER_ID_LENGTH = 36
DURABLE_TIMEOUT_S = 5.0
INITIALIZE_WAIT_S = 2.0  # how long a heartbeat waits for the share-partition initializations it started


def _error(ctx: RequestContext, code: int, message: str | None = None, member_id: str | None = None,
           epoch: int = 0) -> Any:
    return ctx.respond(throttle_time=0, error_code=code, error_message=message, member_id=member_id,
                       member_epoch=epoch, heartbeat_interval=0, assignment=None)


def _invalid(request: Any) -> str | None:
    """Kafka's request checks, in its order; the message to answer INVALID_REQUEST with."""
    if not request.group_id:
        return "GroupId can't be empty."
    if request.rack_id == "":
        return "RackId can't be empty."
    if not request.member_id:
        return "MemberId can't be empty."
    if len(request.member_id) > MAX_MEMBER_ID_LENGTH:
        return f"MemberId can't be longer than {MAX_MEMBER_ID_LENGTH} characters."
    epoch = request.member_epoch
    if epoch == 0:
        if not request.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
    elif epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return f"MemberEpoch is {epoch}, but must be greater than or equal to -1."
    return None


@handles(SHARE_GROUP_HEARTBEAT)
async def share_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    refusal = share_refusal(ctx, request.group_id, AclOperation.READ)
    if refusal is not None:
        return _error(ctx, refusal)
    names = request.subscribed_topic_names
    if names and broker.authorization.enabled:
        refused = [t for t in names if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t)]
        if refused:
            return _error(ctx, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          f"The client is not authorized to describe topics: {', '.join(sorted(refused))}")
    invalid = _invalid(request)
    if invalid is not None:
        return _error(ctx, ErrorCode.INVALID_REQUEST, invalid)
    manager = manager_of(ctx, request.group_id)
    if manager is None:
        code = ErrorCode.NOT_COORDINATOR if broker.groups is not None and broker.groups.active \
            else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return _error(ctx, code)
    try:
        answer = manager.share.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                         request.rack_id, None if names is None else tuple(names),
                                         ctx.client_id or "", client_host(ctx))
        if answer["member_epoch"] > 0 and await broker.groups.share_initialized(request.group_id,
                                                                                INITIALIZE_WAIT_S):
            # The partitions this heartbeat had initialized are ready: assign them now rather than at the
            # member's next heartbeat (Kafka answers this one empty and makes a new member wait an interval)
            again = manager.share.heartbeat(request.group_id, request.member_id, answer["member_epoch"],
                                            request.rack_id, None, ctx.client_id or "", client_host(ctx))
            answer = {**again, "assignment": again["assignment"] or answer["assignment"]}
    except GroupError as e:
        return _error(ctx, e.error_code, str(e) if str(e) != str(e.error_code) else None, request.member_id,
                      request.member_epoch if e.error_code != ErrorCode.FENCED_MEMBER_EPOCH else 0)
    except KafkaError as e:
        return _error(ctx, group_append_error(e), str(e))
    code = await broker.groups.durable(request.group_id, DURABLE_TIMEOUT_S)
    if code:
        return _error(ctx, ErrorCode.COORDINATOR_NOT_AVAILABLE, "The group's records were not replicated in time")
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, error_message=None, **answer)
