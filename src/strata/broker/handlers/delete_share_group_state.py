"""DeleteShareGroupState (API 86): the share coordinator forgets share-partitions (a tombstone in
``__share_group_state``) when their group is deleted or their offsets are deleted (KIP-932).

An inter-broker RPC: CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED on every partition), as
Kafka's ``handleDeleteShareGroupStateRequest``. An empty group id, topic list or partition list gets an empty
answer, as ``ShareCoordinatorService.deleteState`` gives; each partition is answered on its own
(:meth:`strata.coordinator.share.coordinator.ShareCoordinator.delete`); deleting unknown state succeeds.
"""

from __future__ import annotations

from typing import Any

from strata.broker.share_state_api import answer_partitions, code_entry
from strata.broker.wire.dispatch import RequestContext, handles

DELETE_SHARE_GROUP_STATE = 86


@handles(DELETE_SHARE_GROUP_STATE)
async def delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
    return await answer_partitions(ctx, request, lambda c, t, p: c.delete(request.group_id, t.topic_id, p.partition),
                                   int, code_entry)
