"""EndTxn: commit or abort. Answered once the decision (PrepareCommit/PrepareAbort) is durable; the
markers follow, and the producer's next transaction waits (CONCURRENT_TRANSACTIONS) until they are all
written and the transaction is complete. With an authorizer it needs WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as in Kafka. A fenced producer is told PRODUCER_FENCED from v2,
INVALID_PRODUCER_EPOCH before (:mod:`strata.broker.txn_errors`)."""

from __future__ import annotations

from typing import Any

from strata.broker.txn_errors import fenced_for_request
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

END_TXN = 26


@handles(END_TXN, 0, 4)
async def end_txn(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    code = await ctx.broker.transactions.coordinator.end_txn(request.transactional_id, request.producer_id,
                                                               request.producer_epoch, bool(request.committed))
    return ctx.respond(throttle_time=0, error_code=fenced_for_request(ctx, code))
