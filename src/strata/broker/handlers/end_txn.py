"""EndTxn: commit or abort. Answered once the decision (PrepareCommit/PrepareAbort) is durable; the
markers follow, and the producer's next transaction waits (CONCURRENT_TRANSACTIONS) until they are all
written and the transaction is complete."""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles

END_TXN = 26


@handles(END_TXN, 0, 4)
async def end_txn(ctx: RequestContext, request: Any) -> Any:
    code = await ctx.broker.transactions.coordinator.end_txn(request.transactional_id, request.producer_id,
                                                               request.producer_epoch, bool(request.committed))
    return ctx.respond(throttle_time=0, error_code=code)
