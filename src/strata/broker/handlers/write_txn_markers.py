"""WriteTxnMarkers: a transaction coordinator has a partition leader append COMMIT/ABORT markers.

Each marker is a control batch appended as leader with the coordinator's epoch (a partition refuses
markers from a coordinator older than the last one it heard from: TRANSACTION_COORDINATOR_FENCED) and
answered once the ISR has it. It closes the producer's open transaction on the partition: the last
stable offset moves, an abort is recorded in the ``.txnindex``, and on ``__consumer_offsets`` the
producer's transactional offset commits are applied or dropped.

Kafka lets only brokers send this API (CLUSTER_ACTION on the cluster): a marker is a decision only a
coordinator may take. Until ACLs exist here (issue 17), a request is accepted only on a connection
whose client id is the inter-broker one; others get CLUSTER_AUTHORIZATION_FAILED for every partition.
That keeps a confused client from closing transactions, but it is no security boundary.
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.client.wire import ADMIN_CLIENT_ID
from strata.common import TopicPartition
from strata.errors import ErrorCode

WRITE_TXN_MARKERS = 27


@handles(WRITE_TXN_MARKERS, 1, 1)
async def write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    txns = ctx.broker.transactions
    allowed = ctx.client_id == ADMIN_CLIENT_ID
    results = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            partitions = []
            for p in t.partition_indexes:
                tp = TopicPartition(t.name, p)
                if not allowed:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif not txns.partition_exists(tp):
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    part = ctx.broker.replicas.partitions.get(tp)
                    if part is None or not part.is_leader:
                        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        code = await txns.write_marker(tp, m.producer_id, m.producer_epoch,
                                                       bool(m.transaction_result), m.coordinator_epoch)
                partitions.append({"partition_index": p, "error_code": code})
            topics.append({"name": t.name, "partitions": partitions})
        results.append({"producer_id": m.producer_id, "topics": topics})
    return ctx.respond(markers=results)
