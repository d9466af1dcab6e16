"""WriteTxnMarkers: a transaction coordinator has a partition leader append COMMIT/ABORT markers.

Each marker is a control batch appended as leader with the coordinator's epoch (a partition refuses
markers from a coordinator older than the last one it heard from: TRANSACTION_COORDINATOR_FENCED) and
answered once the ISR has it. It closes the producer's open transaction on the partition: the last
stable offset moves, an abort is recorded in the ``.txnindex``, and on ``__consumer_offsets`` the
producer's transactional offset commits are applied or dropped.

Authorization is Kafka's: with an authorizer the principal needs ALTER on the cluster (an operator's
``kafka-transactions.sh abort``, KIP-664's ``Admin.abortTransaction``, which sends this API to the leader) or
CLUSTER_ACTION on it (brokers: the inter-broker listener's principal, usually a super user); otherwise every
partition answers CLUSTER_AUTHORIZATION_FAILED. Without an authorizer anyone may send it, as in Kafka (the
client-id check that stood in for ACLs before them refused ``kafka-transactions.sh abort``).
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

WRITE_TXN_MARKERS = 27


@handles(WRITE_TXN_MARKERS, 1, 1)
async def write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    txns = ctx.broker.transactions
    allowed = ctx.authorize_cluster(AclOperation.ALTER) or ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
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
                elif txns.diskless_markers is not None and txns.is_diskless(tp.topic):
                    (code,) = await txns.diskless_markers([tp], m.producer_id, m.producer_epoch,
                                                          bool(m.transaction_result), m.coordinator_epoch)
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
