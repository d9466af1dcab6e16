"""AddPartitionsToTxn: partitions join a producer's transaction before it writes to them.

v0-v3 come from producers: one transaction, its partitions added in one write to
``__transaction_state``; an unknown topic or partition fails the request without adding anything
(UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the rest, as Kafka answers). A fenced
producer is told PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before (:mod:`strata.broker.txn_errors`).
v4 is broker-to-broker (KIP-890): a partition leader asks whether partitions are in a producer's
open transaction (``verify_only``) before accepting its first transactional batch; v4 may also add
partitions for several transactions at once.

With an authorizer, as in Kafka's ``handleAddPartitionsToTxnRequest``: v0-v3 need WRITE on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and WRITE on each topic
(internal topics never qualify): a refused topic answers TOPIC_AUTHORIZATION_FAILED and fails the request
like an unknown one (OPERATION_NOT_ATTEMPTED for the others). v4 comes only from brokers: the whole request
needs CLUSTER_ACTION on the cluster (else a top-level CLUSTER_AUTHORIZATION_FAILED), and then no
per-transaction check is made.
"""

from __future__ import annotations

from typing import Any

from strata.broker.topics import INTERNAL_TOPICS
from strata.broker.txn_errors import fenced_for_request
from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

ADD_PARTITIONS_TO_TXN = 24
BROKER_VERSION = 4


def _results(codes: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "partition_error_code": code})
    return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]


def _writable(ctx: RequestContext, topic: str) -> bool:
    """WRITE on the topic. An internal topic never qualifies: Kafka leaves internal topics out of the check, so
    they are refused even without an authorizer; Strata refuses them only with one (without, nothing changed)."""
    if not ctx.broker.authorization.enabled:
        return True
    if topic in INTERNAL_TOPICS:
        return False
    return ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic)


async def _add(ctx: RequestContext, transactional_id: str | None, producer_id: int, producer_epoch: int,
               topics: Any, verify_only: bool = False) -> dict[TopicPartition, int]:
    wanted = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    if ctx.version < BROKER_VERSION:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id or ""):
            return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        writable = {name: _writable(ctx, name) for name in {tp.topic for tp in wanted}}
    else:
        writable = dict.fromkeys((tp.topic for tp in wanted), True)
    failed: dict[TopicPartition, int] = {}
    for tp in wanted:
        if not writable[tp.topic]:
            failed[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not ctx.broker.transactions.partition_exists(tp):
            failed[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        return {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    coordinator = ctx.broker.transactions.coordinator
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
    code = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
    return dict.fromkeys(wanted, fenced_for_request(ctx, code))


@handles(ADD_PARTITIONS_TO_TXN, 0, 4)
async def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.version < BROKER_VERSION:
        codes = await _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                           request.v3_and_below_producer_epoch, request.v3_and_below_topics)
        return ctx.respond(throttle_time=0, results_by_topic_v3_and_below=_results(codes))
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                           results_by_transaction=[])
    results = []
    for txn in request.transactions:
        codes = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                           verify_only=txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _results(codes)})
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, results_by_transaction=results)
