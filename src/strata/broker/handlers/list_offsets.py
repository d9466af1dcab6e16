"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest-local (-4),
latest-tiered (-5), or the first offset at/after a timestamp.

"Latest" is the high watermark for read_uncommitted and the LSO for read_committed, as in Kafka
(not the log end offset: consumers must never be told about offsets they cannot read).

With tiering, a timestamp is first searched in the remote-only part of the log (remote time
indexes, on the reader pool, within ``remote.list.offsets.request.timeout.ms``), then locally.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.log.partition_log import ListOffsetsSpec, PartitionLog
from strata.log.segment import TimestampAndOffset
from strata.tiered.api import RemoteStorageError, RemoteStorageNotReadyError, TopicIdPartition
from strata.tiered.manager import RemoteReadQueueFullError

LIST_OFFSETS = 2
READ_COMMITTED = 1


async def _remote_lookup(ctx: RequestContext, tp: TopicPartition, plog: PartitionLog,
                         timestamp: int) -> TimestampAndOffset | None:
    rlm = ctx.broker.remote_log_manager
    info = ctx.broker.topics.get(tp.topic)
    if rlm is None or info is None or plog.log_start_offset >= plog.local_log_start_offset:
        return None
    future = rlm.find_offset_by_timestamp(TopicIdPartition(info.topic_id, tp.topic, tp.partition), plog, timestamp)
    try:
        return await asyncio.wait_for(future, rlm.config.list_offsets_timeout_ms / 1000)
    except TimeoutError:
        raise ApiError(ErrorCode.REQUEST_TIMED_OUT, f"{tp}: remote timestamp search timed out") from None
    except RemoteStorageNotReadyError:
        raise ApiError(ErrorCode.REPLICA_NOT_AVAILABLE, f"{tp}: remote metadata is loading") from None
    except (RemoteStorageError, RemoteReadQueueFullError) as e:
        raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"{tp}: remote timestamp search failed: {e}") from None


async def _lookup(ctx: RequestContext, tp: TopicPartition, p: Any, committed: bool) -> dict[str, Any]:
    replicas = ctx.broker.replicas
    plog = replicas.get_log(tp)
    leader_epoch = replicas.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
    ts = p.timestamp
    if ts == ListOffsetsSpec.LATEST:
        offset = plog.last_stable_offset if committed else plog.high_watermark
        epoch = plog.leader_epoch_cache.epoch_for_offset(offset - 1) if offset > 0 else None
        return {"timestamp": -1, "offset": offset, "leader_epoch": leader_epoch if epoch is None else epoch}
    found = await _remote_lookup(ctx, tp, plog, ts) if ts >= 0 else None
    if found is None:
        found = plog.fetch_offset_by_timestamp(ts)
    bound = plog.last_stable_offset if committed else plog.high_watermark
    if found is None or (ts >= 0 and found.offset >= bound):
        return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
    epoch = found.leader_epoch
    return {"timestamp": found.timestamp, "offset": found.offset, "leader_epoch": -1 if epoch is None else epoch}


@handles(LIST_OFFSETS)
async def list_offsets(ctx: RequestContext, request: Any) -> Any:
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1,
                                     "offset": -1, "leader_epoch": -1}
            try:
                if t.name not in ctx.broker.topics:
                    raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                entry.update(await _lookup(ctx, TopicPartition(t.name, p.partition_index), p, committed))
            except KafkaError as e:
                entry["error_code"] = e.error_code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return ctx.respond(throttle_time=0, topics=topics)
