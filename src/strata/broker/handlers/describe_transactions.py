"""DescribeTransactions: what the coordinator knows of transactional ids (``kafka-transactions.sh describe``).

With an authorizer, as in Kafka: an id the principal may not DESCRIBE answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (the schema's zeros elsewhere), and a described transaction lists only
the topics the principal may DESCRIBE. One addition: a principal with CLUSTER_ACTION on the cluster (a broker)
sees everything, because brokers ask each other this before aborting a transaction no coordinator seems to
know (:meth:`TransactionService._known_to_a_coordinator`): a filtered answer would abort a live transaction.
"""

from __future__ import annotations

import datetime
from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

DESCRIBE_TRANSACTIONS = 65
_NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)  # encodes as Kafka's -1


def _millis(ms: int) -> Any:
    """kio wants a datetime here and cannot encode "none": -1 (no transaction) is sent as -1 ms, as Kafka sends it."""
    return ms if ms >= 0 else _NO_TIME


@handles(DESCRIBE_TRANSACTIONS)
async def describe_transactions(ctx: RequestContext, request: Any) -> Any:
    txns = ctx.broker.transactions
    broker = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    states = []
    for tid in request.transactional_ids:
        if not broker and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            d: dict[str, Any] = {"transactional_id": tid, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                 "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": 0,
                                 "producer_id": 0, "producer_epoch": 0, "topics": []}
        elif txns is None:
            d = {"transactional_id": tid, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                 "transaction_state": "", "producer_id": -1, "producer_epoch": -1, "topics": []}
        else:
            d = txns.coordinator.describe(tid)
        topics = [t for t in d["topics"]
                  if broker or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t["topic"])]
        states.append({"error_code": d["error_code"], "transactional_id": tid,
                       "transaction_state": d["transaction_state"],
                       "transaction_timeout": d.get("transaction_timeout_ms", 0),
                       "transaction_start_time": _millis(d.get("transaction_start_time_ms", -1)),
                       "producer_id": d["producer_id"], "producer_epoch": d["producer_epoch"],
                       "topics": topics})
    return ctx.respond(throttle_time=0, transaction_states=states)
