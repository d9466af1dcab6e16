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

from typing import Any

from strata.broker.share_state_api import answer_partitions, code_entry
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.share.records import NO_DELIVERY_COMPLETE_COUNT, StateBatch

WRITE_SHARE_GROUP_STATE = 85


@handles(WRITE_SHARE_GROUP_STATE)
async def write_share_group_state(ctx: RequestContext, request: Any) -> Any:
    def write(coordinator: Any, t: Any, p: Any) -> Any:
        return coordinator.write(request.group_id, t.topic_id, p.partition, p.state_epoch, p.leader_epoch,
                                 p.start_offset, getattr(p, "delivery_complete_count", NO_DELIVERY_COMPLETE_COUNT),
                                 [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                  for b in p.state_batches])

    return await answer_partitions(ctx, request, write, int, code_entry)
