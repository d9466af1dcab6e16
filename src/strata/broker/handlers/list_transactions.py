"""ListTransactions: the transactional ids this broker coordinates, filtered by state, producer id and
(v1, KIP-994) how long the transaction has been open (``kafka-transactions.sh list``). With an authorizer
only the ids the principal may DESCRIBE are listed, as in Kafka - except for a principal with CLUSTER_ACTION on
the cluster (a broker), which sees every id: brokers list each other's transactions before aborting one no
coordinator seems to know, and a filtered list would abort a live transaction."""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

LIST_TRANSACTIONS = 66


@handles(LIST_TRANSACTIONS, 0, 1)
async def list_transactions(ctx: RequestContext, request: Any) -> Any:
    txns = ctx.broker.transactions
    if txns is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           unknown_state_filters=[], transaction_states=[])
    code, unknown, states = txns.coordinator.list_transactions(
        set(request.state_filters), set(request.producer_id_filters), getattr(request, "duration_filter", -1))
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        states = [s for s in states
                  if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, s["transactional_id"])]
    return ctx.respond(throttle_time=0, error_code=code, unknown_state_filters=unknown, transaction_states=states)
