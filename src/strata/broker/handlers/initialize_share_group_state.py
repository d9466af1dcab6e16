"""InitializeShareGroupState (API 83): the group coordinator asks the share coordinator to start (or restart,
with a higher state epoch) the persisted state of share-partitions before it assigns them (KIP-932).

An inter-broker RPC: CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED on every partition), as
Kafka's ``handleInitializeShareGroupStateRequest``. An empty group id or topic list gets an empty answer, as
``ShareCoordinatorService.initializeState`` gives; each partition is answered on its own
(:meth:`strata.coordinator.share.coordinator.ShareCoordinator.initialize`), NOT_COORDINATOR where this broker
does not lead the share-partition's ``__share_group_state`` partition.
"""

from __future__ import annotations

from typing import Any

from strata.broker.share_state_api import answer_partitions, code_entry
from strata.broker.wire.dispatch import RequestContext, handles

INITIALIZE_SHARE_GROUP_STATE = 83


@handles(INITIALIZE_SHARE_GROUP_STATE)
async def initialize_share_group_state(ctx: RequestContext, request: Any) -> Any:
    return await answer_partitions(
        ctx, request, lambda c, t, p: c.initialize(request.group_id, t.topic_id, p.partition, p.state_epoch,
                                                   p.start_offset),
        int, code_entry)
