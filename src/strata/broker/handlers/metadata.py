"""Metadata: brokers, and each topic's partitions with leader, epoch, replicas and ISR.

With ``auto.create.topics.enable`` and the client allowing it, an unknown topic is created with
``num.partitions`` and ``default.replication.factor`` (at most the live brokers). Kafka answers
LEADER_NOT_AVAILABLE once while the controller works; Strata waits (bounded) until the topic's
partition states reached this broker, so the first answer is usually complete.

Brokers, controller and partition leadership come from the broker's cluster view: the node itself
on a single node, the ZooKeeper metadata cache in a cluster.

Authorization (Kafka 3.9's ``KafkaApis.handleTopicMetadataRequest``): the topics the principal may not
DESCRIBE are left out of an "all topics" answer and answered TOPIC_AUTHORIZATION_FAILED when named, without
saying whether they exist (no topic id, no partitions); a topic asked for by id it may not DESCRIBE is
TOPIC_AUTHORIZATION_FAILED with its id (ids are not secret) and no name. Auto-creation of a describable
unknown topic needs CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED.

Authorized operations (v8+), when asked: every topic entry answered after those checks carries the
principal's topic bitmask (an unknown name too, as in Kafka; refused topics and unknown ids keep the "not
requested" value), and v8-v10 carry the cluster's when the principal may DESCRIBE the cluster (0 otherwise).

Diskless partitions (:mod:`strata.diskless.placement`): any broker serves them, so a client whose ``client.id``
carries Inkless's ``diskless_az=<rack>`` is given as leader a live replica in that rack (``broker.rack``),
partitions spread over the rack's replicas; without one (no token, an unknown rack, no live replica there) the
classic leader. The leader epoch stays the partition's, and classic topics are answered as always.
"""

from __future__ import annotations

from typing import Any

from strata.broker.topics import INTERNAL_TOPICS, TopicInfo
from strata.broker.wire.dispatch import RequestContext, handles
from strata.diskless.placement import client_az, metadata_leader
from strata.errors import ApiError, ErrorCode
from strata.security.acl import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_NAME, AclOperation, ResourceType

METADATA = 3


class _ClientRack:
    """The client's rack (``diskless_az=`` in its client id) and the live brokers' racks, for diskless
    partitions' leaders; None when the client names no rack any live broker has."""

    __slots__ = ("rack", "racks")

    def __init__(self, client_id: str | None, brokers: list[dict[str, Any]]) -> None:
        self.racks: dict[int, str | None] = {b["node_id"]: b.get("rack") for b in brokers}
        known = {r for r in self.racks.values() if r}
        self.rack = client_az(client_id, known) if known else None


def partition_entry(ctx: RequestContext, topic: str, p: int, client: _ClientRack | None = None) -> dict[str, Any]:
    """Leader, epoch, replicas, ISR and offline replicas as the cluster view has them; a partition
    without a live leader answers LEADER_NOT_AVAILABLE (clients retry), as Kafka's does. With ``client``
    (a diskless topic and a client in a known rack) the leader is a live replica in the client's rack."""
    view = ctx.broker.view.partition(topic, p)
    leader = view.leader
    if client is not None:
        leader = metadata_leader(topic, p, leader, view.replicas, client.racks, client.rack)
    return {"error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": p, "leader_id": leader, "leader_epoch": view.leader_epoch,
            "replica_nodes": list(view.replicas), "isr_nodes": list(view.isr), "offline_replicas": list(view.offline)}


def topic_entry(ctx: RequestContext, info: TopicInfo, authorized_ops: int = AUTHORIZED_OPERATIONS_OMITTED,
                client: _ClientRack | None = None) -> dict[str, Any]:
    if client is not None and (client.rack is None or ctx.broker.diskless is None
                               or not ctx.broker.diskless.is_diskless(info.name)):
        client = None  # no rack to place by, or a classic topic: the classic leaders
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.is_internal,
        "partitions": [partition_entry(ctx, info.name, p, client) for p in range(info.partitions)],
        "topic_authorized_operations": authorized_ops,
    }


def error_entry(name: str | None, code: int, topic_id: Any = None,
                authorized_ops: int = AUTHORIZED_OPERATIONS_OMITTED, is_internal: bool = False) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": is_internal, "partitions": [],
            "topic_authorized_operations": authorized_ops}


def _topic_ops(ctx: RequestContext, name: str | None, requested: bool) -> int:
    if not requested or name is None:
        return AUTHORIZED_OPERATIONS_OMITTED
    return ctx.authorized_operations(ResourceType.TOPIC, name)


def cluster_authorized_operations(ctx: RequestContext, requested: bool) -> int:
    """The ``cluster_authorized_operations`` of Metadata and DescribeCluster (Kafka: 0 without DESCRIBE)."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


@handles(METADATA)
async def metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    topics = broker.topics
    checking = broker.authorization.enabled
    want_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    brokers = broker.view.brokers(ctx.listener_name)
    client = _ClientRack(ctx.client_id, brokers)
    entries = []
    # All topics: null from v1 on; in v0 (no nullable arrays yet) the empty list meant "all".
    if request.topics is None or (ctx.version == 0 and not request.topics):
        for t in sorted(topics, key=lambda t: t.name):
            if checking and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name):
                continue  # never disclosed
            entries.append(topic_entry(ctx, t, _topic_ops(ctx, t.name, want_ops), client))
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        may_create_any = None  # CREATE on the cluster, asked once when a topic would be created
        for wanted in request.topics:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            info = topics.get(name) if name is not None else topics.by_id(topic_id)
            if name is None and info is None:
                entries.append(error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
                continue
            topic_name = name if name is not None else info.name
            if checking and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic_name):
                # by name: nothing about the topic, not even its id; by id: the id only
                entries.append(error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                           None if name is not None else topic_id))
                continue
            if info is None and allow_create:
                if checking:
                    if may_create_any is None:
                        may_create_any = ctx.authorize_cluster(AclOperation.CREATE)
                    if not may_create_any and not ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name):
                        entries.append(error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                   is_internal=name in INTERNAL_TOPICS))
                        continue
                try:
                    rf = min(broker.config.default_replication_factor, broker.admin.max_replication_factor())
                    info = await broker.admin.create_topic(name, broker.config.num_partitions, rf, {})
                except ApiError as e:
                    entries.append(error_entry(name, e.error_code, authorized_ops=_topic_ops(ctx, name, want_ops)))
                    continue
            if info is None:
                entries.append(error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic_id,
                                           _topic_ops(ctx, name, want_ops)))
            else:
                entries.append(topic_entry(ctx, info, _topic_ops(ctx, info.name, want_ops), client))
    return ctx.respond(
        throttle_time=0,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.view.controller_id(),
        topics=entries,
        cluster_authorized_operations=cluster_authorized_operations(  # v8-v10 only: later versions drop both fields
            ctx, bool(getattr(request, "include_cluster_authorized_operations", False))),
    )
