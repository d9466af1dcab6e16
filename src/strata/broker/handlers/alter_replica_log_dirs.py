"""AlterReplicaLogDirs: move replicas between the log directories of this broker (JBOD).

``kafka-reassign-partitions.sh`` with ``log_dirs`` in its plan, and ``kafka-log-dirs.sh`` users, send this to
each broker. A partition already in the named directory answers NONE; otherwise the move starts in the
background (Kafka likewise answers once the future replica is created, not when it has caught up) and
DescribeLogDirs lists the partition in the target directory with ``is_future_key`` until it is done.
A path that is not one of ``log.dirs`` is LOG_DIR_NOT_FOUND; a partition this broker does not host is
REPLICA_NOT_AVAILABLE (Kafka remembers the directory for a replica created later; Strata does not).

Authorization (Kafka's ``handleAlterReplicaLogDirsRequest``): ALTER on the cluster, else every partition of
the request answers CLUSTER_AUTHORIZATION_FAILED and nothing moves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.errors import ErrorCode
from strata.security.acl import AclOperation

ALTER_REPLICA_LOG_DIRS = 34


@handles(ALTER_REPLICA_LOG_DIRS)
async def alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.ALTER):  # AlterReplicaLogDirsRequest.getErrorResponse
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return ctx.respond(throttle_time=0, results=[
            {"topic_name": t.name, "partitions": [{"partition_index": p, "error_code": code} for p in t.partitions]}
            for entry in request.dirs for t in entry.topics])
    broker = ctx.broker
    logs = broker.logs
    by_path = {d.resolve(): d for d in logs.log_dirs}
    results: dict[str, list[dict[str, Any]]] = {}
    for entry in request.dirs:
        target = by_path.get(Path(entry.path).resolve())
        for t in entry.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p)
                results.setdefault(t.name, []).append(
                    {"partition_index": p, "error_code": _move(broker, logs, tp, target)})
    return ctx.respond(throttle_time=0, results=[{"topic_name": name, "partitions": parts}
                                                 for name, parts in results.items()])


def _move(broker: Any, logs: Any, tp: TopicPartition, target: Path | None) -> ErrorCode:
    if target is None:
        return ErrorCode.LOG_DIR_NOT_FOUND
    info = broker.topics.get(tp.topic)
    if info is None or not 0 <= tp.partition < info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if logs.get_log(tp) is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    moving = logs.moving.get(tp)
    if moving is not None:
        return ErrorCode.NONE if moving[0] == target else ErrorCode.KAFKA_STORAGE_ERROR
    if logs.log_dir_of(tp) != target:
        broker.replicas.start_log_dir_move(tp, target)
    return ErrorCode.NONE
