"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest-local (-4),
latest-tiered (-5), or the first offset at/after a timestamp.

"Latest" is the high watermark for read_uncommitted and the LSO for read_committed, as in Kafka
(not the log end offset: consumers must never be told about offsets they cannot read).
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.log.partition_log import ListOffsetsSpec

LIST_OFFSETS = 2
READ_COMMITTED = 1


def _lookup(ctx: RequestContext, tp: TopicPartition, p: Any, committed: bool) -> dict[str, Any]:
    replicas = ctx.broker.replicas
    plog = replicas.get_log(tp)
    leader_epoch = replicas.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
    ts = p.timestamp
    if ts == ListOffsetsSpec.LATEST:
        offset = plog.last_stable_offset if committed else plog.high_watermark
        epoch = plog.leader_epoch_cache.epoch_for_offset(offset - 1) if offset > 0 else None
        return {"timestamp": -1, "offset": offset, "leader_epoch": leader_epoch if epoch is None else epoch}
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
                entry.update(_lookup(ctx, TopicPartition(t.name, p.partition_index), p, committed))
            except KafkaError as e:
                entry["error_code"] = e.error_code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return ctx.respond(throttle_time=0, topics=topics)
