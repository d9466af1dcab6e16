"""DescribeLogDirs: per log directory, the partitions it holds with their size on disk.

``kafka-log-dirs.sh`` and rebalancing tools use this to see disk usage per partition. The offset
lag is how far the log end is behind the high watermark, which is 0 for a leader (Kafka's
``getLogEndOffsetLag``); v4+ adds the directory's total and usable bytes from the file system.

Authorization (Kafka's ``handleDescribeLogDirsRequest``): DESCRIBE on the cluster, else no results and
CLUSTER_AUTHORIZATION_FAILED as the top-level error (v3+; older versions just get no results).
"""

from __future__ import annotations

import shutil
from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

DESCRIBE_LOG_DIRS = 35


@handles(DESCRIBE_LOG_DIRS)
async def describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    broker = ctx.broker
    logs = broker.logs.logs
    if request.topics is None:
        wanted: set[TopicPartition] | None = None
    else:
        wanted = {TopicPartition(t.topic, p) for t in request.topics for p in t.partitions}
    results = []
    for log_dir in broker.logs.log_dirs:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, plog in sorted(logs.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
            if plog.dir.parent != log_dir or (wanted is not None and tp not in wanted):
                continue
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "partition_size": plog.size_in_bytes,
                "offset_lag": max(plog.high_watermark - plog.log_end_offset, 0), "is_future_key": False})
        for tp, (target, future) in sorted(broker.logs.moving.items()):
            if target == log_dir and (wanted is None or tp in wanted):  # a move under way (AlterReplicaLogDirs)
                copied = {int(f.stem): f.stat().st_size for f in future.glob("*.log")} if future.is_dir() else {}
                size = sum(copied.values())
                source = logs.get(tp)
                # Kafka: a future log's lag is the current log's end minus its own end (here: where the
                # first segment not copied yet starts)
                lag = 0
                if source is not None:
                    end = next((s.base_offset for s in source.segments if s.base_offset not in copied),
                               source.log_end_offset)
                    lag = source.log_end_offset - end
                by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "partition_size": size,
                                                          "offset_lag": lag, "is_future_key": True})
        try:
            usage = shutil.disk_usage(log_dir)
            total, usable, code = usage.total, usage.free, ErrorCode.NONE
        except OSError:
            total, usable, code = -1, -1, ErrorCode.KAFKA_STORAGE_ERROR
        results.append({
            "error_code": code, "log_dir": str(log_dir.resolve()),
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
            "total_bytes": total, "usable_bytes": usable, "is_cordoned": False,
        })
    return ctx.respond(throttle_time=0, error_code=ErrorCode.NONE, results=results)
