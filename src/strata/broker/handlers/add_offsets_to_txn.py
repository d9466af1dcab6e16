"""AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction.

The producer then sends TxnOffsetCommit to the group coordinator; the offsets become the group's
committed offsets only when the transaction commits (the marker on that partition applies them).

With an authorizer, as in Kafka: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
then READ on the group (else GROUP_AUTHORIZATION_FAILED). A fenced producer is told PRODUCER_FENCED from v2,
INVALID_PRODUCER_EPOCH before (:mod:`strata.broker.txn_errors`).
"""

from __future__ import annotations

from typing import Any

from strata.broker.txn_errors import fenced_for_request
from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.coordinator.group.coordinator import OFFSETS_TOPIC
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

ADD_OFFSETS_TO_TXN = 25


@handles(ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    groups = ctx.broker.groups
    if groups is None or (groups.clustered and not await groups.ensure_topic()):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    tp = TopicPartition(OFFSETS_TOPIC, groups.partition_for(request.group_id))
    code = await ctx.broker.transactions.coordinator.add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch, [tp])
    return ctx.respond(throttle_time=0, error_code=fenced_for_request(ctx, code))
