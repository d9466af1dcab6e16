"""DescribeTransactions: what the coordinator knows of transactional ids (``kafka-transactions.sh describe``)."""

from __future__ import annotations

import datetime
from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.errors import ErrorCode

DESCRIBE_TRANSACTIONS = 65
_NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)  # encodes as Kafka's -1


def _millis(ms: int) -> Any:
    """kio wants a datetime here and cannot encode "none": -1 (no transaction) is sent as -1 ms, as Kafka sends it."""
    return ms if ms >= 0 else _NO_TIME


@handles(DESCRIBE_TRANSACTIONS)
async def describe_transactions(ctx: RequestContext, request: Any) -> Any:
    txns = ctx.broker.transactions
    states = []
    for tid in request.transactional_ids:
        if txns is None:
            d: dict[str, Any] = {"transactional_id": tid, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 "transaction_state": "", "producer_id": -1, "producer_epoch": -1, "topics": []}
        else:
            d = txns.coordinator.describe(tid)
        states.append({"error_code": d["error_code"], "transactional_id": tid,
                       "transaction_state": d["transaction_state"],
                       "transaction_timeout": d.get("transaction_timeout_ms", 0),
                       "transaction_start_time": _millis(d.get("transaction_start_time_ms", -1)),
                       "producer_id": d["producer_id"], "producer_epoch": d["producer_epoch"],
                       "topics": d["topics"]})
    return ctx.respond(throttle_time=0, transaction_states=states)
