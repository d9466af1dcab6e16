"""ListPartitionReassignments (KIP-455): the moves in progress, from the topic znodes every broker mirrors.

Authorization (Kafka's ``handleListPartitionReassignmentsRequest``): DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED with the requested partitions echoed empty (``getErrorResponse``).
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

LIST_PARTITION_REASSIGNMENTS = 46


@handles(LIST_PARTITION_REASSIGNMENTS)
async def list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                           error_message="Cluster authorization failed.", topics=[
                               {"name": t.name, "partitions": [
                                   {"partition_index": p, "replicas": [], "adding_replicas": [],
                                    "removing_replicas": []} for p in t.partition_indexes]}
                               for t in request.topics or ()])
    ongoing = ctx.broker.admin.reassignments()
    if request.topics is not None:
        wanted = {TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes}
        ongoing = {tp: r for tp, r in ongoing.items() if tp in wanted}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, r in sorted(ongoing.items()):
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "replicas": list(r.replicas), "adding_replicas": list(r.adding),
            "removing_replicas": list(r.removing)})
    return ctx.respond(throttle_time=0, error_code=0, error_message=None,
                       topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
