"""DescribeProducers (KIP-664): the producer state a replica keeps for each partition
(``kafka-transactions.sh describe-producers``, ``Admin.describeProducers``).

As Kafka's ``KafkaApis.handleDescribeProducersRequest``: a topic whose name is not legal is
INVALID_TOPIC_EXCEPTION and one the cluster does not know UNKNOWN_TOPIC_OR_PARTITION, for each of its
requested partitions (with the error's message). Otherwise each partition is answered as
``ReplicaManager.activeProducerState``: a partition this broker holds a replica of answers from its
local log, *leader or follower* (Kafka's ``Partition.activeProducerState`` reads the local log; KIP-664
lets a tool send the request to a chosen broker to look at a follower's state, and the admin client
sends it to the leader by default); a partition of the cluster this broker holds no replica of is
NOT_LEADER_OR_FOLLOWER, and a partition index the topic does not have is UNKNOWN_TOPIC_OR_PARTITION.

Every producer of the partition's producer state map is listed (Kafka's ``activeProducers`` is the
whole map, idempotent producers included): its id and epoch, the last sequence and timestamp it
wrote, the coordinator epoch of its last marker, and the first offset of its open transaction
(-1 when it has none), the offset a stuck last stable offset is held at.

Authorization (Kafka's ``handleDescribeProducersRequest``): READ on each topic whose name is legal, before
its existence; a refused topic is TOPIC_AUTHORIZATION_FAILED on every requested partition.
"""

from __future__ import annotations

from typing import Any

from strata.broker.topics import validate_topic_name
from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.log.producer_state import ProducerStateEntry
from strata.security.acl import AclOperation, ResourceType

DESCRIBE_PRODUCERS = 61


def producer_state(entry: ProducerStateEntry) -> dict[str, Any]:
    """One ``ProducerState`` of the response (Kafka's ``UnifiedLog.activeProducers``)."""
    first = entry.current_txn_first_offset
    return {"producer_id": entry.producer_id, "producer_epoch": entry.producer_epoch,
            "last_sequence": entry.last_seq, "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": -1 if first is None else first}


def _topic_error(ctx: RequestContext, name: str) -> ApiError | None:
    try:
        validate_topic_name(name)
    except ApiError as e:
        return e
    if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name):
        return ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    if name not in ctx.broker.topics:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        "This server does not host this topic-partition.")
    return None


def _partition(ctx: RequestContext, tp: TopicPartition) -> dict[str, Any]:
    """Kafka's ``getPartitionOrError`` then ``Partition.activeProducerState``."""
    plog = ctx.broker.replicas.local_log(tp)
    if plog is None:
        info = ctx.broker.topics.get(tp.topic)
        if info is not None and 0 <= tp.partition < info.partitions:
            return {"error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "active_producers": []}
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "active_producers": []}
    # a copy first: the map is only changed on the event loop, but a snapshot of it is what we answer
    entries = list(plog.producer_state.producers.values())
    return {"error_code": ErrorCode.NONE, "active_producers": [producer_state(e) for e in entries]}


@handles(DESCRIBE_PRODUCERS)
async def describe_producers(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics:
        error = _topic_error(ctx, t.name)
        parts = []
        for index in t.partition_indexes:
            entry: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE,
                                     "error_message": None, "active_producers": []}
            if error is not None:
                entry.update(error_code=error.error_code, error_message=str(error))
            else:
                try:
                    entry.update(_partition(ctx, TopicPartition(t.name, index)))
                except KafkaError as e:
                    entry.update(error_code=e.error_code, error_message=str(e))
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return ctx.respond(throttle_time=0, topics=topics)
