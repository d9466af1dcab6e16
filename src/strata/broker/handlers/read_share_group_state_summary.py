"""ReadShareGroupStateSummary (API 87): the start offset and epochs of share-partitions, for
DescribeShareGroupOffsets and the share-group admin tools (KIP-932); v1 adds DeliveryCompleteCount, from
which the lag is computed (KIP-1226). A share-partition with no state reads as start offset -1, not as an
error.

An inter-broker RPC: CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED on every partition), as
Kafka's ``handleReadShareGroupStateSummaryRequest``. An empty group id, topic list or partition list gets an
empty answer, as ``ShareCoordinatorService.readStateSummary`` gives; each partition is answered on its own
(:meth:`strata.coordinator.share.coordinator.ShareCoordinator.read_summary`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.coordinator.share.coordinator import SummaryResult
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

READ_SHARE_GROUP_STATE_SUMMARY = 87


def _results(request: Any, results: list[SummaryResult], message: str | None = None) -> list[dict[str, Any]]:
    it = iter(results)
    return [{"topic_id": t.topic_id,
             "partitions": [{"partition": p.partition, "error_code": (r := next(it)).error_code,
                             "error_message": message if r.error_code else None, "state_epoch": r.state_epoch,
                             "leader_epoch": r.leader_epoch, "start_offset": r.start_offset,
                             "delivery_complete_count": r.delivery_complete_count} for p in t.partitions]}
            for t in request.topics]


@handles(READ_SHARE_GROUP_STATE_SUMMARY)
async def read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    count = sum(len(t.partitions) for t in request.topics)
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.respond(results=_results(
            request, [SummaryResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)] * count, "Cluster authorization failed."))
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return ctx.respond(results=[])
    coordinator = ctx.broker.share_coordinator
    if coordinator is None:
        return ctx.respond(results=_results(request, [SummaryResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)] * count,
                                            "Share coordinator is not available."))
    results = await asyncio.gather(*(
        coordinator.read_summary(request.group_id, t.topic_id, p.partition, p.leader_epoch)
        for t in request.topics for p in t.partitions))
    return ctx.respond(results=_results(request, list(results)))
