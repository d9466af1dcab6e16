"""ElectLeaders (KIP-460): preferred-replica or unclean leader election for chosen partitions.

The controller runs it (Kafka sends ElectLeaders there too): another broker answers NOT_CONTROLLER
and the admin client asks the controller the metadata names. A null partition list means every
partition (Kafka: only those whose preferred replica is not the leader answer anything but
ELECTION_NOT_NEEDED). Per partition: NONE, ELECTION_NOT_NEEDED (84), PREFERRED_LEADER_NOT_AVAILABLE
(80), ELIGIBLE_LEADERS_NOT_AVAILABLE (83) or UNKNOWN_TOPIC_OR_PARTITION.

Authorization (Kafka's ``handleElectLeaders``): ALTER on the cluster, checked first; else the top-level error
(v1+) and every requested partition are CLUSTER_AUTHORIZATION_FAILED (a null list: no partitions listed).
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode
from strata.security.acl import AclOperation

ELECT_LEADERS = 43
PREFERRED = 0


@handles(ELECT_LEADERS)
async def elect_leaders(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    election_type = getattr(request, "election_type", PREFERRED)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return ctx.respond(throttle_time=0, error_code=code, replica_election_results=[
            {"topic": t.topic, "partition_result": [{"partition_id": p, "error_code": code, "error_message": None}
                                                    for p in t.partitions]}
            for t in request.topic_partitions or ()])
    if request.topic_partitions is None:
        tps = [TopicPartition(info.name, p) for info in broker.topics for p in range(info.partitions)]
    else:
        tps = [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    try:
        results = await broker.admin.elect_leaders(election_type, tps)
    except ApiError as e:
        if ctx.version >= 1:
            return ctx.respond(throttle_time=0, error_code=e.error_code, replica_election_results=[])
        results = {tp: (e.error_code, str(e)) for tp in tps}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in tps:
        code, message = results.get(tp, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None))
        by_topic.setdefault(tp.topic, []).append(
            {"partition_id": tp.partition, "error_code": code, "error_message": message})
    return ctx.respond(throttle_time=0, error_code=0, replica_election_results=[
        {"topic": t, "partition_result": parts} for t, parts in by_topic.items()])
