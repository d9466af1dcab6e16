"""ReadShareGroupState (API 84): a broker that becomes a share-partition leader reads the persisted state
(start offset, state epoch, the state batches of the records in flight) before it hands records out
(KIP-932). The reader's leader epoch is recorded: a stale leader's later reads and writes are fenced.

An inter-broker RPC: CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED on every partition), as
Kafka's ``handleReadShareGroupStateRequest``. An empty group id, topic list or partition list gets an empty
answer, as ``ShareCoordinatorService.readState`` gives; each partition is answered on its own
(:meth:`strata.coordinator.share.coordinator.ShareCoordinator.read`: INVALID_REQUEST for an uninitialized
share-partition, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.coordinator.share.coordinator import ReadResult
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

READ_SHARE_GROUP_STATE = 84


def _partition(partition: int, r: ReadResult, message: str | None = None) -> dict[str, Any]:
    return {"partition": partition, "error_code": r.error_code, "error_message": message if r.error_code else None,
            "state_epoch": r.state_epoch, "start_offset": r.start_offset,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                              for b in r.state_batches]}


def _results(request: Any, results: list[ReadResult], message: str | None = None) -> list[dict[str, Any]]:
    it = iter(results)
    return [{"topic_id": t.topic_id, "partitions": [_partition(p.partition, next(it), message) for p in t.partitions]}
            for t in request.topics]


@handles(READ_SHARE_GROUP_STATE)
async def read_share_group_state(ctx: RequestContext, request: Any) -> Any:
    count = sum(len(t.partitions) for t in request.topics)
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.respond(results=_results(request, [ReadResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)] * count,
                                            "Cluster authorization failed."))
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return ctx.respond(results=[])
    coordinator = ctx.broker.share_coordinator
    if coordinator is None:
        return ctx.respond(results=_results(request, [ReadResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)] * count,
                                            "Share coordinator is not available."))
    results = await asyncio.gather(*(coordinator.read(request.group_id, t.topic_id, p.partition, p.leader_epoch)
                                     for t in request.topics for p in t.partitions))
    return ctx.respond(results=_results(request, list(results)))
