"""InitProducerId: a producer id for an idempotent producer, or a transactional id's next epoch.

Without a ``transactional_id`` any broker hands out a fresh producer id at epoch 0. With one, the
request must reach the id's transaction coordinator (FindCoordinator), which bumps the epoch - fencing
every older producer of the id - and first aborts a transaction the id left open
(:mod:`strata.coordinator.transaction.coordinator`). v3+ carries the producer id and epoch a producer
already holds (KIP-360), so one that hit an abortable error can re-initialise without being fenced.
A fenced producer is told PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH before (:mod:`strata.broker.txn_errors`).

With an authorizer, as in Kafka 3.x: a transactional id needs WRITE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE
on some topic (KIP-679's ``authorizeByResourceType``), else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import millis
from strata.broker.txn_errors import fenced_for_request
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

INIT_PRODUCER_ID = 22


@handles(INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return _refused(ctx, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not (ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE)
              or ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC)):
        return _refused(ctx, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.transactional_id is None:
        try:
            pid = await ctx.broker.producer_ids.next_id()
        except KafkaError as e:  # no id block yet (ZooKeeper unreachable): retriable, on any broker
            return _refused(ctx, e.error_code)
        return ctx.respond(throttle_time=0, error_code=0, producer_id=pid, producer_epoch=0)
    txns = ctx.broker.transactions
    if txns is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                           producer_epoch=-1)
    pid, epoch = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
    expected = (pid, epoch) if pid != -1 else None
    result = await txns.coordinator.init_producer_id(request.transactional_id, millis(request.transaction_timeout),
                                                     expected)
    return ctx.respond(throttle_time=0, error_code=fenced_for_request(ctx, result.error_code),
                       producer_id=result.producer_id, producer_epoch=result.producer_epoch)


def _refused(ctx: RequestContext, code: int) -> Any:
    return ctx.respond(throttle_time=0, error_code=code, producer_id=-1, producer_epoch=-1)
