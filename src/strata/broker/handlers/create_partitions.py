"""CreatePartitions: grow a topic's partition count (never shrink: records are keyed by partition).

Kafka's checks (``ReplicationControlManager.createPartitions``): the topic exists, the count is an
increase (the same count and a lower one fail with different INVALID_PARTITIONS messages), and a
manual assignment, when given, has one entry per new partition, each naming live brokers with the
topic's replication factor (here: exactly this node). ``validate_only`` checks without changing.

Internal topics keep their count: the coordinators map a group or transactional id to a partition
by the count they were created with, so a new partition would never be used.

Authorization (Kafka's ``handleCreatePartitionsRequest``): ALTER on each topic, after the duplicate check and
before everything else (existence included): a refused topic is TOPIC_AUTHORIZATION_FAILED and does not count
towards the request's partition limit.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from strata.broker.handlers.create_topics import INVALID_REPLICA_ASSIGNMENT, MAX_PARTITIONS_PER_BATCH, check_assignment
from strata.broker.topics import INTERNAL_TOPICS
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ApiError, ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

CREATE_PARTITIONS = 37


def _check(ctx: RequestContext, topic: Any) -> None:
    broker = ctx.broker
    if topic.name in INTERNAL_TOPICS:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Cannot change the partition count of internal topic {topic.name}.")
    info = broker.topics.get(topic.name)
    if info is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic.name}' does not exist.")
    current = info.partitions
    if topic.count == current:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if topic.count < current:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"The topic {topic.name} currently has {current} partition(s); "
                                                     f"{topic.count} would not be an increase.")
    additional = topic.count - current
    if topic.assignments is not None:
        if len(topic.assignments) != additional:
            raise ApiError(INVALID_REPLICA_ASSIGNMENT,
                           f"Attempted to add {additional} additional partition(s), but only "
                           f"{len(topic.assignments)} assignment(s) were specified.")
        brokers = [b["node_id"] for b in broker.view.brokers()]
        rf = len(broker.view.partition(topic.name, 0).replicas) or 1
        for a in topic.assignments:
            check_assignment(a.broker_ids, brokers, rf)


@handles(CREATE_PARTITIONS)
async def create_partitions(ctx: RequestContext, request: Any) -> Any:
    counts = Counter(t.name for t in request.topics)
    results = [{"name": n, "error_code": ErrorCode.INVALID_REQUEST, "error_message": "Duplicate topic name."}
               for n in sorted(n for n, c in counts.items() if c > 1)]
    topics = [t for t in request.topics if counts[t.name] == 1]
    if ctx.broker.authorization.enabled:
        refused = {t.name for t in topics if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, t.name)}
        results += [{"name": n, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     "error_message": "The topic authorization is failed."} for n in sorted(refused)]
        topics = [t for t in topics if t.name not in refused]
    added = 0
    for topic in topics:
        info = ctx.broker.topics.get(topic.name)
        if info is not None and topic.count > info.partitions:
            added += topic.count - info.partitions
    if added > MAX_PARTITIONS_PER_BATCH:
        # Kafka's controller fails the whole request when its records would exceed
        # MAX_RECORDS_PER_USER_OP (the same 10,000): nothing is created.
        message = "Unable to perform excessively large batch operation."
        results += [{"name": t.name, "error_code": ErrorCode.POLICY_VIOLATION, "error_message": message}
                    for t in topics]
        return ctx.respond(throttle_time=0, results=results)
    # Checked one by one, then grown together: in a cluster each growth waits until the new partitions'
    # states are everywhere (a ZooKeeper round trip), and Kafka's controller handles a request's topics at once.
    pending: list[tuple[str, asyncio.Task[None] | None]] = []
    for topic in topics:
        try:
            _check(ctx, topic)
        except KafkaError as e:
            results.append({"name": topic.name, "error_code": e.error_code, "error_message": str(e)})
            continue
        if request.validate_only:
            pending.append((topic.name, None))
            continue
        manual = [list(a.broker_ids) for a in topic.assignments] if topic.assignments else None
        pending.append((topic.name, asyncio.get_running_loop().create_task(
            ctx.broker.admin.add_partitions(topic.name, topic.count, manual))))
    for name, task in pending:
        try:
            if task is not None:
                await task
        except KafkaError as e:
            results.append({"name": name, "error_code": e.error_code, "error_message": str(e)})
            continue
        results.append({"name": name, "error_code": ErrorCode.NONE, "error_message": None})
    return ctx.respond(throttle_time=0, results=results)
