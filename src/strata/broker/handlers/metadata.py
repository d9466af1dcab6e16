"""Metadata: brokers, and each topic's partitions with leader, epoch, replicas and ISR.

With ``auto.create.topics.enable`` and the client allowing it, an unknown topic is created with
``num.partitions`` (Kafka answers LEADER_NOT_AVAILABLE once while the controller works; a single
node creates the logs synchronously, so the first answer is already complete).
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.broker.topics import TopicInfo
from strata.errors import ApiError, ErrorCode

METADATA = 3
UNKNOWN_OPERATIONS = -2147483648


def topic_entry(ctx: RequestContext, info: TopicInfo) -> dict[str, Any]:
    node = ctx.broker.node_id
    replicas = ctx.broker.replicas
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.is_internal,
        "partitions": [
            {"error_code": 0, "partition_index": p, "leader_id": node,
             "leader_epoch": replicas.leader_epoch_of(info.name, p), "replica_nodes": [node], "isr_nodes": [node],
             "offline_replicas": []}
            for p in range(info.partitions)
        ],
        "topic_authorized_operations": UNKNOWN_OPERATIONS,
    }


def error_entry(name: str | None, code: int, topic_id: Any = None) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": False, "partitions": [],
            "topic_authorized_operations": UNKNOWN_OPERATIONS}


@handles(METADATA)
async def metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    topics = broker.topics
    entries = []
    # All topics: null from v1 on; in v0 (no nullable arrays yet) the empty list meant "all".
    if request.topics is None or (ctx.version == 0 and not request.topics):
        entries = [topic_entry(ctx, t) for t in sorted(topics, key=lambda t: t.name)]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        for wanted in request.topics:
            name = wanted.name
            info = topics.get(name) if name is not None else topics.by_id(wanted.topic_id)
            if info is None and name is not None and allow_create:
                try:
                    info = broker.create_topic(name, broker.config.num_partitions, {})
                except ApiError as e:
                    entries.append(error_entry(name, e.error_code))
                    continue
            if info is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
                entries.append(error_entry(name, code, getattr(wanted, "topic_id", None)))
            else:
                entries.append(topic_entry(ctx, info))
    return ctx.respond(
        throttle_time=0,
        brokers=[broker.broker_entry()],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=entries,
        cluster_authorized_operations=UNKNOWN_OPERATIONS,
    )
