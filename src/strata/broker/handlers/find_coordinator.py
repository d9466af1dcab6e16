"""FindCoordinator: the coordinator of a group or of a transactional id.

A single node coordinates every group and transactional id. In a cluster the coordinator is the
leader of the key's partition of ``__consumer_offsets`` (groups) or ``__transaction_state``
(transactional ids); either topic is created here on first use, as Kafka does.

v0-v3 ask for one key, v4+ for a batch (``coordinator_keys``). Key type 2 (KIP-932 share coordinator,
v6+; brokers ask it for their share-partitions) takes the key ``groupId:topicId:partition``, parsed as
Kafka parses it (INVALID_REQUEST if malformed, or below v6), and is answered with the leader of the key's
partition of ``__share_group_state`` (created here on first use in a cluster). Other key types are
INVALID_REQUEST.

With an authorizer, each key is checked first, as Kafka's ``getCoordinator`` does: a group needs DESCRIBE on
it (else GROUP_AUTHORIZATION_FAILED), a transactional id DESCRIBE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), a share key CLUSTER_ACTION on the cluster (else
CLUSTER_AUTHORIZATION_FAILED); v4+ answers each key of the batch on its own.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group.coordinator import OFFSETS_TOPIC
from strata.coordinator.share.coordinator import parse_share_key
from strata.coordinator.share.records import SHARE_GROUP_STATE_TOPIC
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

FIND_COORDINATOR = 10
GROUP_KEY = 0
TRANSACTION_KEY = 1
SHARE_KEY = 2


async def _group_coordinator(ctx: RequestContext, key: str) -> dict[str, Any] | None:
    """The leader of the group's ``__consumer_offsets`` partition (this node on a single node)."""
    groups = ctx.broker.groups
    if not groups.clustered:
        return ctx.broker.broker_entry(ctx.listener_name)
    if not await groups.ensure_topic():
        return None
    view = ctx.broker.view.partition(OFFSETS_TOPIC, groups.partition_for(key))
    return ctx.broker.view.broker(view.leader, ctx.listener_name) if view.leader >= 0 else None


async def _transaction_coordinator(ctx: RequestContext, key: str) -> dict[str, Any] | None:
    txns = ctx.broker.transactions
    if txns is None or not await txns.ensure_topic():
        return None
    if not txns.clustered:
        return ctx.broker.broker_entry(ctx.listener_name)
    return txns.coordinator_node(key, ctx.listener_name)


async def _share_coordinator(ctx: RequestContext, key: str) -> dict[str, Any] | None:
    """The leader of the share key's ``__share_group_state`` partition (this node on a single node)."""
    share = ctx.broker.share_coordinator
    if share is None or not share.active:
        return None
    if not await share.ensure_topic():
        return None
    if not share.clustered:
        return ctx.broker.broker_entry(ctx.listener_name)
    view = ctx.broker.view.partition(SHARE_GROUP_STATE_TOPIC, share.partition_for_key(key))
    return ctx.broker.view.broker(view.leader, ctx.listener_name) if view.leader >= 0 else None


def _authorization_error(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str] | None:
    """Kafka's checks ahead of the lookup (``KafkaApis.getCoordinator``), with ``Errors``' messages."""
    if key_type == GROUP_KEY and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
    if key_type == TRANSACTION_KEY and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed."
    if key_type == SHARE_KEY and not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None


async def _lookup(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    code: int = ErrorCode.NONE
    message = None
    entry = None
    if key_type == SHARE_KEY and ctx.version < 6:  # Kafka checks this before the cluster authorization
        code, message = ErrorCode.INVALID_REQUEST, "Share coordinator keys need FindCoordinator v6 or later."
    elif (denied := _authorization_error(ctx, key_type, key)) is not None:
        code, message = denied
    elif key_type == GROUP_KEY:
        if manager_of(ctx) is None or (entry := await _group_coordinator(ctx, key)) is None:
            code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "The group coordinator is not available."
    elif key_type == TRANSACTION_KEY:
        if not key:
            code, message = ErrorCode.INVALID_REQUEST, "A transactional id must not be empty."
        elif (entry := await _transaction_coordinator(ctx, key)) is None:
            code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "The transaction coordinator is not available."
    elif key_type == SHARE_KEY:
        try:
            parse_share_key(key)
        except ValueError as e:
            code, message = ErrorCode.INVALID_REQUEST, str(e)
        else:
            if (entry := await _share_coordinator(ctx, key)) is None:
                code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "The share coordinator is not available."
    else:
        code, message = ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}"
    if code:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}
    assert entry is not None
    return {"key": key, "node_id": entry["node_id"], "host": entry["host"], "port": entry["port"],
            "error_code": ErrorCode.NONE, "error_message": None}


@handles(FIND_COORDINATOR)
async def find_coordinator(ctx: RequestContext, request: Any) -> Any:
    key_type = getattr(request, "key_type", GROUP_KEY)
    if ctx.version >= 4:
        return ctx.respond(throttle_time=0,
                           coordinators=[await _lookup(ctx, key_type, key) for key in request.coordinator_keys])
    found = await _lookup(ctx, key_type, request.key)
    del found["key"]
    return ctx.respond(throttle_time=0, **found)
