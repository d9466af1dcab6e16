"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat, reconcile and leave a consumer group in one API.

The request is checked as Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid`` does (INVALID_REQUEST
for a malformed one: librdkafka treats it as fatal, so nothing recoverable answers it), then the group
coordinator's state machine (:mod:`strata.coordinator.group.consumer_manager`) computes the member's
next assignment and writes the records; in a cluster the answer waits until the ISR has them.

Authorization: READ on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic named in the
subscription (TOPIC_AUTHORIZATION_FAILED); topics a regular expression matches that the principal may
not DESCRIBE are left out silently, as in Kafka. Disabled (``group.coordinator.rebalance.protocols``
without ``consumer``), the API answers UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from strata.broker.group_api import client_host, manager_of, millis
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.consumer import owned_from_request
from strata.coordinator.group.consumer_manager import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    HeartbeatRequest,
    compile_regex,
)
from strata.coordinator.group.manager import group_append_error
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

CONSUMER_GROUP_HEARTBEAT = 68
CLIENT_GENERATED_MEMBER_ID_VERSION = 1  # KIP-1082: from v1 the client names itself
DURABLE_TIMEOUT_S = 5.0


def _error(ctx: RequestContext, code: int, message: str | None = None, member_id: str | None = None,
           epoch: int = 0) -> Any:
    return ctx.respond(throttle_time=0, error_code=code, error_message=message, member_id=member_id,
                       member_epoch=epoch, heartbeat_interval=0, assignment=None)


def _invalid(ctx: RequestContext, request: Any) -> str | None:
    """Kafka's request checks, in its order; the message to answer INVALID_REQUEST with."""
    if not request.group_id:
        return "GroupId can't be empty."
    if request.instance_id == "":
        return "InstanceId can't be empty."
    if request.rack_id == "":
        return "RackId can't be empty."
    epoch = request.member_epoch
    if not request.member_id and (ctx.version >= CLIENT_GENERATED_MEMBER_ID_VERSION or epoch != 0):
        return "MemberId can't be empty."
    if epoch == 0:
        if millis(request.rebalance_timeout) == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.topic_partitions is None or request.topic_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and getattr(request, "subscribed_topic_regex", None) is None:
            return "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            return "InstanceId can't be null."
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return "MemberEpoch is invalid."
    return None


@handles(CONSUMER_GROUP_HEARTBEAT)
async def consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    if "consumer" not in broker.config.group_rebalance_protocols:
        return _error(ctx, ErrorCode.UNSUPPORTED_VERSION,
                      "The new consumer group protocol is not enabled (group.coordinator.rebalance.protocols)")
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _error(ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    names = request.subscribed_topic_names
    if names and ctx.broker.authorization.enabled:
        refused = [t for t in names if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t)]
        if refused:
            return _error(ctx, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          f"The client is not authorized to describe topics: {', '.join(sorted(refused))}")
    invalid = _invalid(ctx, request)
    if invalid is not None:
        return _error(ctx, ErrorCode.INVALID_REQUEST, invalid)
    regex = getattr(request, "subscribed_topic_regex", None)
    manager = manager_of(ctx, request.group_id)
    if manager is None:
        code = ErrorCode.NOT_COORDINATOR if broker.groups is not None and broker.groups.active \
            else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return _error(ctx, code)
    assignors = manager.consumer.config.assignors
    if request.server_assignor is not None and request.server_assignor not in assignors:
        return _error(ctx, ErrorCode.UNSUPPORTED_ASSIGNOR,
                      f"ServerAssignor {request.server_assignor} is not supported. "
                      f"Supported assignors: {', '.join(assignors)}.")
    try:
        if regex:
            compile_regex(regex)
    except GroupError as e:
        return _error(ctx, e.error_code, str(e))
    owned = owned_from_request(None if request.topic_partitions is None else
                               [(tp.topic_id, tp.partitions) for tp in request.topic_partitions])
    req = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=millis(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=regex, server_assignor=request.server_assignor, owned=owned,
        client_id=ctx.client_id or "", client_host=client_host(ctx))
    if not req.member_id:  # v0 at epoch 0: the coordinator names the member
        req = dataclasses.replace(req, member_id=str(uuid.uuid4()))

    def can_describe(topic: str) -> bool:
        return ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)

    try:
        answer = manager.consumer.heartbeat(req, can_describe)
    except GroupError as e:
        return _error(ctx, e.error_code, str(e) if str(e) != str(e.error_code) else None, req.member_id,
                      req.member_epoch if e.error_code != ErrorCode.FENCED_MEMBER_EPOCH else 0)
    except KafkaError as e:
        return _error(ctx, group_append_error(e), str(e))
    # Every answer waits until the partition's earlier writes are in the ISR, even one that wrote nothing: it
    # may tell the member what another request just wrote, and a coordinator that dies before the ISR has
    # it would be replaced by one that never heard of it (Kafka's runtime holds answers the same way).
    code = await broker.groups.durable(request.group_id, DURABLE_TIMEOUT_S)
    if code:
        return _error(ctx, ErrorCode.COORDINATOR_NOT_AVAILABLE, "The group's records were not replicated in time")
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, error_message=None, **answer)
