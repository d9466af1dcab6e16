"""InitProducerId: a producer id for an idempotent producer, or a transactional id's next epoch.

Without a ``transactional_id`` any broker hands out a fresh producer id at epoch 0. With one, the
request must reach the id's transaction coordinator (FindCoordinator), which bumps the epoch - fencing
every older producer of the id - and first aborts a transaction the id left open
(:mod:`strata.coordinator.transaction.coordinator`). v3+ carries the producer id and epoch a producer
already holds (KIP-360), so one that hit an abortable error can re-initialise without being fenced.
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.broker.group.api import millis
from strata.errors import ErrorCode

INIT_PRODUCER_ID = 22


@handles(INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is None:
        return ctx.respond(throttle_time=0, error_code=0, producer_id=await ctx.broker.producer_ids.next_id(),
                           producer_epoch=0)
    txns = ctx.broker.transactions
    if txns is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                           producer_epoch=-1)
    pid, epoch = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
    expected = (pid, epoch) if pid != -1 else None
    result = await txns.coordinator.init_producer_id(request.transactional_id, millis(request.transaction_timeout),
                                                     expected)
    return ctx.respond(throttle_time=0, error_code=result.error_code, producer_id=result.producer_id,
                       producer_epoch=result.producer_epoch)
