"""DeleteShareGroupState (API 86): the share coordinator forgets share-partitions (a tombstone in
``__share_group_state``) when their group is deleted or their offsets are deleted (KIP-932).

An inter-broker RPC: CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED on every partition), as
Kafka's ``handleDeleteShareGroupStateRequest``. An empty group id, topic list or partition list gets an empty
answer, as ``ShareCoordinatorService.deleteState`` gives; each partition is answered on its own
(:meth:`strata.coordinator.share.coordinator.ShareCoordinator.delete`); deleting unknown state succeeds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

DELETE_SHARE_GROUP_STATE = 86


def _results(request: Any, codes: list[int], message: str | None = None) -> list[dict[str, Any]]:
    it = iter(codes)
    return [{"topic_id": t.topic_id,
             "partitions": [{"partition": p.partition, "error_code": (code := next(it)),
                             "error_message": message if code else None} for p in t.partitions]}
            for t in request.topics]


@handles(DELETE_SHARE_GROUP_STATE)
async def delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
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
    codes = await asyncio.gather(*(coordinator.delete(request.group_id, t.topic_id, p.partition)
                                   for t in request.topics for p in t.partitions))
    return ctx.respond(results=_results(request, list(codes)))
