"""DescribeShareGroupOffsets (API 90, KIP-932; v1 adds Lag, KIP-1226): a share group's start offsets.

A share group's start offset (SPSO) of a partition is kept by the share coordinator, not the group
coordinator, so each partition is read with ReadShareGroupStateSummary through the persister. As Kafka's
``describeShareGroupOffsets`` / ``describeShareGroupAllOffsets``:

* ``Topics`` null means every partition the group has initialized (none for a group that does not exist:
  no error); an empty list answers no topics;
* a topic that does not exist, a share-partition with no state, and one whose read failed, report start
  offset -1 (absence of data, as OffsetFetch reports it), not an error;
* ``Lag`` (v1) = the partition's latest offset (high watermark) - start offset - delivery-complete count,
  -1 while either of the last two is unknown. The latest offset comes from the partition's leader: read
  here when it is this broker (or the topic is diskless: any broker answers), else a ListOffsets to it
  over the inter-broker listener; a failure there is the partition's error.

Authorization: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for the group) and on each topic: a
named topic the principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED on its partitions; with
``Topics`` null such topics are left out.
"""

from __future__ import annotations

import asyncio
import types
import uuid
from collections.abc import Iterable
from typing import Any

from strata.broker.group_api import manager_of, owns
from strata.broker.handlers.list_offsets import _diskless_lookup, _lookup
from strata.broker.inter_broker import inter_broker_security
from strata.broker.wire.dispatch import RequestContext, handles
from strata.client.async_wire import AsyncBrokerConnection
from strata.client.wire import ADMIN_CLIENT_ID, WireError
from strata.common import TopicPartition
from strata.coordinator.group import share_admin
from strata.coordinator.share.records import NO_DELIVERY_COMPLETE_COUNT
from strata.errors import ErrorCode, KafkaError
from strata.log.partition_log import ListOffsetsSpec
from strata.security.acl import AclOperation, ResourceType

DESCRIBE_SHARE_GROUP_OFFSETS = 90
LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 7
UNINITIALIZED = -1
DEFAULT_LEADER_EPOCH = 0  # Kafka's PartitionFactory.DEFAULT_LEADER_EPOCH, shown where there is no state
REQUEST_TIMEOUT_S = 10.0
ZERO_UUID = uuid.UUID(int=0)

TP = tuple[str, int]


def _group(group_id: str, code: int = ErrorCode.NONE, topics: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"group_id": group_id, "topics": topics or [], "error_code": code, "error_message": None}


def _absent(partition: int, code: int = ErrorCode.NONE, message: str | None = None) -> dict[str, Any]:
    return {"partition_index": partition, "start_offset": UNINITIALIZED, "leader_epoch": DEFAULT_LEADER_EPOCH,
            "lag": UNINITIALIZED, "error_code": code, "error_message": message}


async def _local_latest(ctx: RequestContext, tp: TopicPartition) -> tuple[int, int]:
    """(error, high watermark) from this broker's log, with ListOffsets' own lookup."""
    diskless = ctx.broker.diskless
    try:
        if diskless is not None and diskless.is_diskless(tp.topic):
            found = await _diskless_lookup(ctx, tp, ListOffsetsSpec.LATEST, False)
        else:
            spec = types.SimpleNamespace(timestamp=ListOffsetsSpec.LATEST, current_leader_epoch=-1)
            found = await _lookup(ctx, tp, spec, False)
    except KafkaError as e:
        return int(e.error_code), -1
    return ErrorCode.NONE, int(found["offset"])


async def _remote_latest(ctx: RequestContext, leader: int, tps: list[TP]) -> dict[TP, tuple[int, int]]:
    """ListOffsets (latest, read_uncommitted, as Kafka's NetworkPartitionMetadataClient) at ``leader``."""
    broker = ctx.broker.view.broker(leader) if leader >= 0 else None
    if broker is None:
        return dict.fromkeys(tps, (ErrorCode.LEADER_NOT_AVAILABLE, -1))
    by_topic: dict[str, list[int]] = {}
    for topic, p in tps:
        by_topic.setdefault(topic, []).append(p)
    conn = AsyncBrokerConnection(broker["host"], broker["port"], client_id=ADMIN_CLIENT_ID,
                                 timeout_s=REQUEST_TIMEOUT_S, security=inter_broker_security(ctx.broker.config))
    try:
        body = await conn.call(LIST_OFFSETS, LIST_OFFSETS_VERSION, replica_id=-1, isolation_level=0, topics=[
            {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                        "timestamp": ListOffsetsSpec.LATEST} for p in ps]}
            for t, ps in by_topic.items()])
    except WireError:
        return dict.fromkeys(tps, (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1))
    finally:
        conn.close()
    out = dict.fromkeys(tps, (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
    for t in body.topics:
        for p in t.partitions:
            out[(t.name, int(p.partition_index))] = (int(p.error_code), int(p.offset))
    return out


async def _latest_offsets(ctx: RequestContext, tps: Iterable[TP]) -> dict[TP, tuple[int, int]]:
    """(error, latest offset) of each partition, asked of its leader."""
    local: list[TP] = []
    remote: dict[int, list[TP]] = {}
    diskless = ctx.broker.diskless
    for topic, p in tps:
        leader = ctx.broker.view.partition(topic, p).leader
        if leader == ctx.broker.node_id or (diskless is not None and diskless.is_diskless(topic)):
            local.append((topic, p))
        else:
            remote.setdefault(leader, []).append((topic, p))
    out: dict[TP, tuple[int, int]] = {}
    for tp in local:
        out[tp] = await _local_latest(ctx, TopicPartition(*tp))
    for found in await asyncio.gather(*(_remote_latest(ctx, leader, ps) for leader, ps in remote.items())):
        out.update(found)
    return out


async def _offsets(ctx: RequestContext, group_id: str,
                   wanted: list[tuple[str, uuid.UUID, list[int]]]) -> list[dict[str, Any]]:
    """The response topics of the existing topics in ``wanted`` (name, id, partitions)."""
    persister = ctx.broker.share_persister
    assert persister is not None
    keys = [(name, topic_id, p) for name, topic_id, ps in wanted for p in ps]
    summaries = dict(zip(keys, await asyncio.gather(*(persister.read_summary(group_id, topic_id, p)
                                                      for _name, topic_id, p in keys)), strict=True))
    lagging = [(name, p) for (name, _t, p), s in summaries.items()
               if not s.error_code and s.start_offset != UNINITIALIZED
               and s.delivery_complete_count != NO_DELIVERY_COMPLETE_COUNT]
    latest = await _latest_offsets(ctx, lagging) if lagging and ctx.version >= 1 else {}
    out = []
    for name, topic_id, ps in wanted:
        partitions = []
        for p in ps:
            s = summaries[(name, topic_id, p)]
            if s.error_code:
                partitions.append(_absent(p))
                continue
            entry = {"partition_index": p, "start_offset": s.start_offset, "leader_epoch": s.leader_epoch,
                     "lag": UNINITIALIZED, "error_code": ErrorCode.NONE, "error_message": None}
            if (name, p) in latest:
                code, end = latest[(name, p)]
                if code:
                    entry["error_code"] = code
                else:
                    entry["lag"] = end - s.start_offset - s.delivery_complete_count
            partitions.append(entry)
        out.append({"topic_name": name, "topic_id": topic_id, "partitions": partitions})
    return out


async def _describe(ctx: RequestContext, request_group: Any) -> dict[str, Any]:
    group_id = request_group.group_id
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return _group(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not group_id:
        return _group(group_id, ErrorCode.INVALID_GROUP_ID)
    manager = manager_of(ctx)
    if manager is None or ctx.broker.share_persister is None:
        return _group(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not owns(ctx, group_id):
        return _group(group_id, ErrorCode.NOT_COORDINATOR)
    registry = ctx.broker.topics
    if request_group.topics is None:  # every initialized partition, less the topics that may not be seen
        wanted = []
        for topic_id, (_name, ps) in sorted(share_admin.initialized_partitions(manager.share, group_id).items()):
            info = registry.by_id(topic_id)
            if info is not None and ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                wanted.append((info.name, topic_id, sorted(ps)))
        return _group(group_id, topics=await _offsets(ctx, group_id, wanted))
    wanted, missing, refused = [], [], []
    for t in request_group.topics:
        partitions = list(t.partitions)
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name):
            refused.append({"topic_name": t.topic_name, "topic_id": ZERO_UUID, "partitions": [
                _absent(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.") for p in partitions]})
            continue
        info = registry.get(t.topic_name)
        if info is None:
            missing.append({"topic_name": t.topic_name, "topic_id": ZERO_UUID,
                            "partitions": [_absent(p) for p in partitions]})
        else:
            wanted.append((t.topic_name, info.topic_id, partitions))
    return _group(group_id, topics=[*await _offsets(ctx, group_id, wanted), *missing, *refused])


@handles(DESCRIBE_SHARE_GROUP_OFFSETS)
async def describe_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    if "share" not in ctx.broker.config.group_rebalance_protocols:
        return ctx.respond(throttle_time=0, groups=[_group(g.group_id, ErrorCode.UNSUPPORTED_VERSION)
                                                    for g in request.groups])
    return ctx.respond(throttle_time=0, groups=[await _describe(ctx, g) for g in request.groups])
