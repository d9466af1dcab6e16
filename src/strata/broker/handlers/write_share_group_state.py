"""WriteShareGroupState (API 85): a share-partition leader persists what changed (the start offset, the
delivery state and count of acknowledged, released or timed-out records) before it answers the consumer
(KIP-932). v1 adds DeliveryCompleteCount (KIP-1226; -1 from a v0 writer).

An inter-broker RPC: CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED on every partition), as
Kafka's ``handleWriteShareGroupStateRequest``. An empty group id, topic list or partition list gets an empty
answer, as ``ShareCoordinatorService.writeState`` gives; each partition is answered on its own, after the
write is in the ISR (:meth:`strata.coordinator.share.coordinator.ShareCoordinator.write`: INVALID_REQUEST for
an uninitialized share-partition, FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.coordinator.share.records import NO_DELIVERY_COMPLETE_COUNT, StateBatch
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

WRITE_SHARE_GROUP_STATE = 85


def _results(request: Any, codes: list[int], message: str | None = None) -> list[dict[str, Any]]:
    it = iter(codes)
    return [{"topic_id": t.topic_id,
             "partitions": [{"partition": p.partition, "error_code": (code := next(it)),
                             "error_message": message if code else None} for p in t.partitions]}
            for t in request.topics]


@handles(WRITE_SHARE_GROUP_STATE)
async def write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    count = sum(len(t.partitions) for t in request.topics)
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.respond(results=_results(request, [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * count,
                                            "Cluster authorization failed."))
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return ctx.respond(results=[])
    coordinator = ctx.broker.share_coordinator
    if coordinator is None:
        return ctx.respond(results=_results(request, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * count,
                                            "Share coordinator is not available."))
    codes = await asyncio.gather(*(
        coordinator.write(request.group_id, t.topic_id, p.partition, p.state_epoch, p.leader_epoch, p.start_offset,
                          getattr(p, "delivery_complete_count", NO_DELIVERY_COMPLETE_COUNT),
                          [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                           for b in p.state_batches])
        for t in request.topics for p in t.partitions))
    return ctx.respond(results=_results(request, list(codes)))
