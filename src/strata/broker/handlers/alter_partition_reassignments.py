"""AlterPartitionReassignments (KIP-455): move partitions to other brokers, or cancel a move.

The controller writes the target into the topic znode (``adding_replicas`` / ``removing_replicas``)
and drives it: the new replicas fetch as followers, join the ISR, leadership moves into the target
set if needed, then the removed replicas leave. A null replica list cancels an ongoing move.
Other brokers answer NOT_CONTROLLER (the admin client then asks the controller).

Authorization (Kafka's ``handleAlterPartitionReassignmentsRequest``): ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top level and on every partition (``getErrorResponse``).
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode
from strata.security.acl import AclOperation

ALTER_PARTITION_REASSIGNMENTS = 45


@handles(ALTER_PARTITION_REASSIGNMENTS)
async def alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.ALTER):
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return ctx.respond(throttle_time=0, error_code=code, error_message=message, responses=[
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                             "error_message": message} for p in t.partitions]}
            for t in request.topics])
    targets = {TopicPartition(t.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
               for t in request.topics for p in t.partitions}
    try:
        results = await ctx.broker.admin.alter_reassignments(targets)
    except ApiError as e:
        return ctx.respond(throttle_time=0, error_code=e.error_code, error_message=str(e), responses=[])
    return ctx.respond(throttle_time=0, error_code=0, error_message=None, responses=[
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": results[TopicPartition(t.name, p.partition_index)][0],
             "error_message": results[TopicPartition(t.name, p.partition_index)][1]} for p in t.partitions]}
        for t in request.topics])
