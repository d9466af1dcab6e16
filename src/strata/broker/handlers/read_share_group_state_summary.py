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

from typing import Any

from strata.broker.share_state_api import answer_partitions
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.share.coordinator import SummaryResult

READ_SHARE_GROUP_STATE_SUMMARY = 87


def _entry(partition: int, r: SummaryResult, message: str | None) -> dict[str, Any]:
    return {"partition": partition, "error_code": r.error_code, "error_message": message if r.error_code else None,
            "state_epoch": r.state_epoch, "leader_epoch": r.leader_epoch, "start_offset": r.start_offset,
            "delivery_complete_count": r.delivery_complete_count}


@handles(READ_SHARE_GROUP_STATE_SUMMARY)
async def read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    return await answer_partitions(
        ctx, request, lambda c, t, p: c.read_summary(request.group_id, t.topic_id, p.partition, p.leader_epoch),
        SummaryResult, _entry)
