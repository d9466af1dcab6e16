"""AddPartitionsToTxn: partitions join a producer's transaction before it writes to them.

v0-v3 come from producers: one transaction, its partitions added in one write to
``__transaction_state``; an unknown topic or partition fails the request without adding anything
(UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the rest, as Kafka answers).
v4 is broker-to-broker (KIP-890): a partition leader asks whether partitions are in a producer's
open transaction (``verify_only``) before accepting its first transactional batch; v4 may also add
partitions for several transactions at once.
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode

ADD_PARTITIONS_TO_TXN = 24


def _results(codes: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "partition_error_code": code})
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


async def _add(ctx: RequestContext, transactional_id: str | None, producer_id: int, producer_epoch: int,
               topics: Any, verify_only: bool = False) -> dict[TopicPartition, int]:
    wanted = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    unknown = {tp for tp in wanted if not ctx.broker.transactions.partition_exists(tp)}
    if unknown:
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in wanted}
    coordinator = ctx.broker.transactions.coordinator
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
    code = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
    return dict.fromkeys(wanted, code)


@handles(ADD_PARTITIONS_TO_TXN, 0, 4)
async def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.version < 4:
        codes = await _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                           request.v3_and_below_producer_epoch, request.v3_and_below_topics)
        return ctx.respond(throttle_time=0, results_by_topic_v3_and_below=_results(codes))
    results = []
    for txn in request.transactions:
        codes = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                           verify_only=txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _results(codes)})
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, results_by_transaction=results)
