"""ListPartitionReassignments (KIP-455): the moves in progress, from the topic znodes every broker mirrors."""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.common import TopicPartition

LIST_PARTITION_REASSIGNMENTS = 46


@handles(LIST_PARTITION_REASSIGNMENTS)
async def list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
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
