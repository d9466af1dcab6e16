"""DeleteRecords: move a partition's log start offset forward; whole segments below it are deleted.

``offset`` -1 means the high watermark (delete everything readable). An offset above the high
watermark, or negative, is OFFSET_OUT_OF_RANGE; a topic whose ``cleanup.policy`` lacks ``delete``
is POLICY_VIOLATION and internal topics are INVALID_TOPIC_EXCEPTION (Kafka's
``ReplicaManager.deleteRecordsOnLocalLog`` and ``Partition.deleteRecordsOnLeader``). The answer's
``low_watermark`` is the new log start offset: consumers positioned below it are reset.

Authorization (Kafka's ``handleDeleteRecordsRequest``): DELETE on each topic, once per topic and before any
other check; a refused topic is TOPIC_AUTHORIZATION_FAILED (low watermark -1) on every partition.
"""

from __future__ import annotations

from typing import Any

from strata.broker.topics import INTERNAL_TOPICS
from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.diskless.coordinator.api import DeleteRecordsRequest as DisklessDeleteRecords
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

DELETE_RECORDS = 21
HIGH_WATERMARK = -1


def _delete(ctx: RequestContext, tp: TopicPartition, offset: int) -> int:
    broker = ctx.broker
    if tp.topic in INTERNAL_TOPICS:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {tp.topic}")
    info = broker.topics.get(tp.topic)
    if info is None or not 0 <= tp.partition < info.partitions:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host this topic-partition: {tp}")
    plog = broker.replicas.get_log(tp)
    if "delete" not in plog.config.cleanup_policy:
        raise ApiError(ErrorCode.POLICY_VIOLATION,
                       f"Records of partition {tp} can not be deleted due to the configured policy")
    target = plog.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise ApiError(ErrorCode.OFFSET_OUT_OF_RANGE, f"The offset {target} for partition {tp} is not valid")
    return broker.delete_records(tp, target)


async def _delete_diskless(ctx: RequestContext, tp: TopicPartition, offset: int) -> int:
    """A diskless partition's log start moves in the coordinator (any broker); its WAL objects go once no
    batch of any partition refers to them."""
    diskless, info = ctx.broker.diskless, ctx.broker.topics.get(tp.topic)
    assert diskless is not None and info is not None
    if offset < HIGH_WATERMARK:
        raise ApiError(ErrorCode.OFFSET_OUT_OF_RANGE, f"The offset {offset} for partition {tp} is not valid")
    (result,) = await diskless.delete_records([DisklessDeleteRecords(info.topic_id, tp.partition, offset)])
    if result.error:
        raise ApiError(result.error, f"DeleteRecords on {tp}: {result.error.name}")
    return result.log_start_offset


@handles(DELETE_RECORDS)
async def delete_records(ctx: RequestContext, request: Any) -> Any:
    checking = ctx.broker.authorization.enabled
    topics = []
    for t in request.topics:
        allowed = not checking or ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                                     "error_code": ErrorCode.NONE}
            if not allowed:
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(entry)
                continue
            try:
                tp = TopicPartition(t.name, p.partition_index)
                diskless = ctx.broker.diskless
                if diskless is not None and diskless.is_diskless(t.name):
                    entry["low_watermark"] = await _delete_diskless(ctx, tp, p.offset)
                else:
                    entry["low_watermark"] = _delete(ctx, tp, p.offset)
            except KafkaError as e:
                entry["error_code"] = e.error_code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return ctx.respond(throttle_time=0, topics=topics)
