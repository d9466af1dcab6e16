"""InitProducerId for idempotent producers: a fresh producer id at epoch 0.

Transactions need a transaction coordinator, which this broker does not have yet: a request
with a ``transactional_id`` gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a fatal error the
client reports at once, instead of a retriable one it would loop on.
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.errors import ErrorCode

INIT_PRODUCER_ID = 22


@handles(INIT_PRODUCER_ID)
async def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           producer_id=-1, producer_epoch=-1)
    return ctx.respond(throttle_time=0, error_code=0, producer_id=await ctx.broker.producer_ids.next_id(),
                       producer_epoch=0)
