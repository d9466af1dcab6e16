"""OffsetForLeaderEpoch: where a leader epoch ended (consumers use it to detect truncation).

Authorization (Kafka's ``handleOffsetForLeaderEpochRequest``): CLUSTER_ACTION on the cluster (the brokers'
own fetchers) allows every topic; otherwise DESCRIBE on each topic (KIP-320 consumers), once per topic, a
refused topic answering TOPIC_AUTHORIZATION_FAILED on every partition.
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

OFFSET_FOR_LEADER_EPOCH = 23


async def _diskless_epoch_end(ctx: RequestContext, tp: TopicPartition, epoch: int) -> dict[str, Any]:
    """A diskless partition's batches all carry one leader epoch (0, or a switched partition's epoch at its
    seal), which ends at the coordinator's high watermark; any broker answers it. An older epoch of a switched
    partition's classic part ends where its local replica's epoch history says (a replica answers; another
    broker sends the client to one). A consumer validating its position after a metadata change (KIP-320)
    so never sees a truncation that did not happen."""
    diskless, info = ctx.broker.diskless, ctx.broker.topics.get(tp.topic)
    assert diskless is not None and info is not None
    found = await diskless.log_info(info.topic_id, tp.partition)
    if found.error:
        raise ApiError(found.error, f"{tp}: {found.error.name}")
    if epoch >= found.leader_epoch:
        return {"leader_epoch": found.leader_epoch, "end_offset": found.high_watermark}
    plog = ctx.broker.replicas.partition(tp).log  # NOT_LEADER_OR_FOLLOWER without a replica here
    answered, end = plog.leader_epoch_cache.end_offset_for(epoch, plog.log_end_offset)
    return {"leader_epoch": answered, "end_offset": end}


@handles(OFFSET_FOR_LEADER_EPOCH)
async def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.broker.replicas
    checking = ctx.broker.authorization.enabled and not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    topics = []
    for t in request.topics:
        allowed = not checking or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic)
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"error_code": 0, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
            if not allowed:
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(entry)
                continue
            try:
                tp = TopicPartition(t.topic, p.partition)
                diskless = ctx.broker.diskless
                if diskless is not None and diskless.is_diskless(t.topic):
                    entry.update(await _diskless_epoch_end(ctx, tp, p.leader_epoch))
                    parts.append(entry)
                    continue
                plog = replicas.get_log(tp)
                replicas.check_leader_epoch(tp, p.current_leader_epoch)
                epoch, end = plog.leader_epoch_cache.end_offset_for(p.leader_epoch, plog.log_end_offset)
                entry.update(leader_epoch=epoch, end_offset=end)
            except KafkaError as e:
                entry["error_code"] = e.error_code
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return ctx.respond(throttle_time=0, topics=topics)
