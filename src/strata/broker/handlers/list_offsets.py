"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest-local (-4),
latest-tiered (-5), or the first offset at/after a timestamp.

"Latest" is the high watermark for read_uncommitted and the LSO for read_committed, as in Kafka
(not the log end offset: consumers must never be told about offsets they cannot read); a timestamp
or max-timestamp answer at or above that bound is "none" (-1).

With tiering, a timestamp is first searched in the remote-only part of the log (remote time
indexes, on the reader pool, within ``remote.list.offsets.request.timeout.ms``), then locally.
The max timestamp compares the local segments' answer with the remote-only segments' metadata and,
when the largest timestamp is remote (or ties: the remote offset is the earlier one), reads the
offset of its first record the same way (Kafka answers from local segments only: KAFKA-17552).

Who answers (Kafka's ``KafkaApis.handleListOffsetRequest``): the leader, except for the "debugging
consumer" (``replica_id`` -2, ``ListOffsetsRequest.DEBUGGING_REPLICA_ID``), which any replica answers
from its own log, so a tool can compare the replicas' earliest (-2), earliest-local (-4) and latest
(-1) offsets. The debugging consumer gets no isolation bound: Kafka's ``isolationLevelOpt`` is empty
for it (``isClientRequest`` is ``replicaId == CONSUMER_REPLICA_ID``), so its "latest" is the replica's
log end offset, not its high watermark. Kafka treats brokers (``replica_id`` >= 0) the same way; here
they keep the consumer's bound, as before (the replica fetcher asks for -1 only after an
OFFSET_OUT_OF_RANGE, where the leader's high watermark is a safe, if conservative, truncation point).

Authorization (Kafka's ``handleListOffsetRequestV1AndAbove``): DESCRIBE on each topic, once per topic and
before its existence; a refused topic is TOPIC_AUTHORIZATION_FAILED on every partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.diskless.coordinator.api import ListOffsetsRequest as DisklessListOffsets
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.log.partition_log import ListOffsetsSpec, PartitionLog
from strata.log.segment import TimestampAndOffset
from strata.security.acl import AclOperation, ResourceType
from strata.tiered.api import RemoteStorageError, RemoteStorageNotReadyError, TopicIdPartition
from strata.tiered.manager import RemoteLogManager, RemoteReadQueueFullError

LIST_OFFSETS = 2
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
"""``ListOffsetsRequest.CONSUMER_REPLICA_ID``: an ordinary client; only the leader answers it."""
DEBUGGING_REPLICA_ID = -2
"""``ListOffsetsRequest.DEBUGGING_REPLICA_ID``: a tool; any replica answers it from its own log."""

T = TypeVar("T")


def _tiered_remote_only(ctx: RequestContext, tp: TopicPartition,
                        plog: PartitionLog) -> tuple[RemoteLogManager, TopicIdPartition] | None:
    """The RLM and topic-id partition when ``plog`` has a remote-only range (log start below local log start)."""
    rlm = ctx.broker.remote_log_manager
    info = ctx.broker.topics.get(tp.topic)
    if rlm is None or info is None or plog.log_start_offset >= plog.local_log_start_offset:
        return None
    return rlm, TopicIdPartition(info.topic_id, tp.topic, tp.partition)


async def _await_remote(rlm: RemoteLogManager, tp: TopicPartition, what: str,
                        submit: Callable[[], asyncio.Future[T]]) -> T:
    """A search on the reader pool, bounded by ``remote.list.offsets.request.timeout.ms``, its failures
    mapped to Kafka's error codes. ``submit`` runs inside the ``try``: a full reader queue is refused
    synchronously (``RemoteReadQueueFullError``) and must become KAFKA_STORAGE_ERROR too."""
    try:
        return await asyncio.wait_for(submit(), rlm.config.list_offsets_timeout_ms / 1000)
    except TimeoutError:
        raise ApiError(ErrorCode.REQUEST_TIMED_OUT, f"{tp}: remote {what} search timed out") from None
    except RemoteStorageNotReadyError:
        raise ApiError(ErrorCode.REPLICA_NOT_AVAILABLE, f"{tp}: remote metadata is loading") from None
    except (RemoteStorageError, RemoteReadQueueFullError) as e:
        raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"{tp}: remote {what} search failed: {e}") from None


async def _remote_lookup(ctx: RequestContext, tp: TopicPartition, plog: PartitionLog,
                         timestamp: int) -> TimestampAndOffset | None:
    tiered = _tiered_remote_only(ctx, tp, plog)
    if tiered is None:
        return None
    rlm, tip = tiered
    return await _await_remote(rlm, tp, "timestamp",
                               lambda: rlm.find_offset_by_timestamp(tip, plog, timestamp))


async def _max_timestamp(ctx: RequestContext, tp: TopicPartition, plog: PartitionLog) -> TimestampAndOffset | None:
    """MAX_TIMESTAMP over both tiers: the local answer unless a remote-only segment holds a timestamp at
    least as large (an equal one is at an earlier offset, and Kafka answers the earliest)."""
    local = plog.fetch_offset_by_timestamp(ListOffsetsSpec.MAX_TIMESTAMP)
    tiered = _tiered_remote_only(ctx, tp, plog)
    if tiered is None:
        return local
    rlm, tip = tiered
    local_max = None if local is None else local.timestamp
    remote = await _await_remote(rlm, tp, "max timestamp", lambda: rlm.find_max_timestamp(tip, plog, local_max))
    return local if remote is None else remote


def _replica_log(ctx: RequestContext, tp: TopicPartition) -> PartitionLog:
    """Any local replica's log (the debugging consumer); Kafka's ``getPartitionOrException`` fails it as
    :meth:`ReplicaManager.partition` does (NOT_LEADER_OR_FOLLOWER for a partition of the cluster this broker
    holds no replica of)."""
    return ctx.broker.replicas.partition(tp).log


async def _lookup(ctx: RequestContext, tp: TopicPartition, p: Any, committed: bool,
                  replica_id: int = CONSUMER_REPLICA_ID) -> dict[str, Any]:
    replicas = ctx.broker.replicas
    # Kafka: fetchOnlyFromLeader = replicaId != DEBUGGING_REPLICA_ID
    plog = _replica_log(ctx, tp) if replica_id == DEBUGGING_REPLICA_ID else replicas.get_log(tp)
    leader_epoch = replicas.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
    if replica_id == DEBUGGING_REPLICA_ID:
        bound = plog.log_end_offset  # Kafka's isolationLevelOpt = None: not a client request
    else:
        bound = plog.last_stable_offset if committed else plog.high_watermark
    ts = p.timestamp
    if ts == ListOffsetsSpec.LATEST:
        epoch = plog.leader_epoch_cache.epoch_for_offset(bound - 1) if bound > 0 else None
        return {"timestamp": -1, "offset": bound, "leader_epoch": leader_epoch if epoch is None else epoch}
    if ts == ListOffsetsSpec.MAX_TIMESTAMP:
        found = await _max_timestamp(ctx, tp, plog)
    else:
        found = await _remote_lookup(ctx, tp, plog, ts) if ts >= 0 else None
        if found is None:
            found = plog.fetch_offset_by_timestamp(ts)
    # Kafka filters every lookup but the earliest ones by the bound; -5 (latest tiered) is left as it was
    if found is None or ((ts >= 0 or ts == ListOffsetsSpec.MAX_TIMESTAMP) and found.offset >= bound):
        return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
    epoch = found.leader_epoch
    return {"timestamp": found.timestamp, "offset": found.offset, "leader_epoch": -1 if epoch is None else epoch}


async def _diskless_lookup(ctx: RequestContext, tp: TopicPartition, timestamp: int, committed: bool) -> dict[str, Any]:
    """Any broker answers a diskless partition from the coordinator, whose offsets are the partition's (with
    its one diskless leader epoch). Timestamps are searched in this broker's consolidated replica
    first, when it has one (local log and remote tier: the prefix the WAL may have pruned), then in the WAL."""
    diskless, info = ctx.broker.diskless, ctx.broker.topics.get(tp.topic)
    assert diskless is not None and info is not None
    plog = ctx.broker.replicas.local_log(tp)
    consolidated = None
    if plog is not None and (timestamp >= 0 or timestamp in (ListOffsetsSpec.MAX_TIMESTAMP,
                                                            ListOffsetsSpec.LATEST_TIERED)):
        bound = plog.last_stable_offset if committed else plog.high_watermark
        if timestamp == ListOffsetsSpec.LATEST_TIERED:
            consolidated = plog.fetch_offset_by_timestamp(timestamp)
            return {"timestamp": -1, "offset": -1 if consolidated is None else consolidated.offset,
                    "leader_epoch": _epoch(consolidated)}
        if timestamp == ListOffsetsSpec.MAX_TIMESTAMP:
            consolidated = await _max_timestamp(ctx, tp, plog)
        else:
            consolidated = await _remote_lookup(ctx, tp, plog, timestamp) or plog.fetch_offset_by_timestamp(timestamp)
        if consolidated is not None and consolidated.offset >= bound:
            consolidated = None
        if consolidated is not None and timestamp >= 0:  # the first match: the consolidated range is a prefix
            return {"timestamp": consolidated.timestamp, "offset": consolidated.offset,
                    "leader_epoch": _epoch(consolidated)}
    (found,) = await diskless.list_offsets([DisklessListOffsets(info.topic_id, tp.partition, timestamp)], committed)
    if found.error:
        raise ApiError(found.error, f"{tp}: {found.error.name}")
    if consolidated is not None and (found.offset < 0 or consolidated.timestamp >= found.timestamp):
        # MAX_TIMESTAMP: the larger one; on a tie the earlier offset, which the consolidated prefix holds
        return {"timestamp": consolidated.timestamp, "offset": consolidated.offset,
                "leader_epoch": _epoch(consolidated)}
    epoch = -1
    if found.offset >= 0:  # the partition's diskless epoch (a switched one's: its seal's)
        epoch = (await diskless.log_info(info.topic_id, tp.partition)).leader_epoch
    return {"timestamp": found.timestamp, "offset": found.offset, "leader_epoch": epoch}


def _epoch(found: TimestampAndOffset | None) -> int:
    return -1 if found is None or found.leader_epoch is None else found.leader_epoch


@handles(LIST_OFFSETS)
async def list_offsets(ctx: RequestContext, request: Any) -> Any:
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    replica_id = int(getattr(request, "replica_id", CONSUMER_REPLICA_ID))
    checking = ctx.broker.authorization.enabled
    topics = []
    for t in request.topics:
        allowed = not checking or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1,
                                     "offset": -1, "leader_epoch": -1}
            if not allowed:
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts.append(entry)
                continue
            try:
                if t.name not in ctx.broker.topics:
                    raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                tp = TopicPartition(t.name, p.partition_index)
                diskless = ctx.broker.diskless
                if diskless is not None and diskless.is_diskless(t.name):
                    entry.update(await _diskless_lookup(ctx, tp, p.timestamp, committed))
                else:
                    entry.update(await _lookup(ctx, tp, p, committed, replica_id))
            except KafkaError as e:
                entry["error_code"] = e.error_code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return ctx.respond(throttle_time=0, topics=topics)
