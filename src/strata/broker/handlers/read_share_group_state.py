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

from typing import Any

from strata.broker.share_state_api import answer_partitions
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.share.coordinator import ReadResult

READ_SHARE_GROUP_STATE = 84


def _entry(partition: int, r: ReadResult, message: str | None) -> dict[str, Any]:
    return {"partition": partition, "error_code": r.error_code, "error_message": message if r.error_code else None,
            "state_epoch": r.state_epoch, "start_offset": r.start_offset,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                              for b in r.state_batches]}


@handles(READ_SHARE_GROUP_STATE)
async def read_share_group_state(ctx: RequestContext, request: Any) -> Any:
    return await answer_partitions(
        ctx, request, lambda c, t, p: c.read(request.group_id, t.topic_id, p.partition, p.leader_epoch),
        ReadResult, _entry)
