"""Metadata: brokers, and each topic's partitions with leader, epoch, replicas and ISR.

With ``auto.create.topics.enable`` and the client allowing it, an unknown topic is created with
``num.partitions`` and ``default.replication.factor`` (at most the live brokers). Kafka answers
LEADER_NOT_AVAILABLE once while the controller works; Strata waits (bounded) until the topic's
partition states reached this broker, so the first answer is usually complete.

Brokers, controller and partition leadership come from the broker's cluster view: the node itself
on a single node, the ZooKeeper metadata cache in a cluster.

Authorized operations (v8+), when asked: every topic entry named in the answer carries the topic
bitmask (an unknown name too, as in Kafka; an unknown topic id keeps the "not requested" value),
and v8-v10 carry the cluster's (see :mod:`strata.broker.handlers.acl_operations`).
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.broker.handlers.acl_operations import UNKNOWN_OPERATIONS, AclResourceType, authorized_operations
from strata.broker.topics import TopicInfo
from strata.errors import ApiError, ErrorCode

METADATA = 3


def partition_entry(ctx: RequestContext, topic: str, p: int) -> dict[str, Any]:
    """Leader, epoch, replicas, ISR and offline replicas as the cluster view has them; a partition
    without a live leader answers LEADER_NOT_AVAILABLE (clients retry), as Kafka's does."""
    view = ctx.broker.view.partition(topic, p)
    return {"error_code": ErrorCode.NONE if view.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": p, "leader_id": view.leader, "leader_epoch": view.leader_epoch,
            "replica_nodes": list(view.replicas), "isr_nodes": list(view.isr), "offline_replicas": list(view.offline)}


def topic_entry(ctx: RequestContext, info: TopicInfo, authorized_ops: int = UNKNOWN_OPERATIONS) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.is_internal,
        "partitions": [partition_entry(ctx, info.name, p) for p in range(info.partitions)],
        "topic_authorized_operations": authorized_ops,
    }


def error_entry(name: str | None, code: int, topic_id: Any = None,
                authorized_ops: int = UNKNOWN_OPERATIONS) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": False, "partitions": [],
            "topic_authorized_operations": authorized_ops}


@handles(METADATA)
async def metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    topics = broker.topics
    ops = authorized_operations(AclResourceType.TOPIC,
                                requested=getattr(request, "include_topic_authorized_operations", False))
    entries = []
    # All topics: null from v1 on; in v0 (no nullable arrays yet) the empty list meant "all".
    if request.topics is None or (ctx.version == 0 and not request.topics):
        entries = [topic_entry(ctx, t, ops) for t in sorted(topics, key=lambda t: t.name)]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        for wanted in request.topics:
            name = wanted.name
            info = topics.get(name) if name is not None else topics.by_id(wanted.topic_id)
            if info is None and name is not None and allow_create:
                try:
                    rf = min(broker.config.default_replication_factor, broker.admin.max_replication_factor())
                    info = await broker.admin.create_topic(name, broker.config.num_partitions, rf, {})
                except ApiError as e:
                    entries.append(error_entry(name, e.error_code, authorized_ops=ops))
                    continue
            if info is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
                entries.append(error_entry(name, code, getattr(wanted, "topic_id", None),
                                           ops if name is not None else UNKNOWN_OPERATIONS))
            else:
                entries.append(topic_entry(ctx, info, ops))
    return ctx.respond(
        throttle_time=0,
        brokers=broker.view.brokers(ctx.listener_name),
        cluster_id=broker.cluster_id,
        controller_id=broker.view.controller_id(),
        topics=entries,
        cluster_authorized_operations=authorized_operations(  # v8-v10 only: later versions drop both fields
            AclResourceType.CLUSTER, requested=getattr(request, "include_cluster_authorized_operations", False)),
    )
