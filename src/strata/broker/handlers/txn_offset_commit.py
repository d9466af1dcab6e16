"""TxnOffsetCommit: a transactional producer's consumed positions, pending until its transaction ends.

The producer sends it after AddOffsetsToTxn, inside its transaction (KIP-98); from v3 it carries the
consumer's generation, member id and group instance id, which are checked as OffsetCommit checks
them (KIP-447: a zombie consumer-producer is fenced by the group generation). As in Kafka's
``KafkaApis``, unknown topics or partitions are refused (UNKNOWN_TOPIC_OR_PARTITION) before the
coordinator is asked, and the group's ``__consumer_offsets`` partition must be in the producer's open
transaction (KIP-890's verification with the transaction coordinator: AddOffsetsToTxn adds it); the
rest are written to ``__consumer_offsets`` as one transactional batch of the producer and answered once
the ISR has it. The offsets then stay pending (invisible to OffsetFetch)
until the transaction marker reaches the group's partition and the transaction-marker path calls
``GroupCoordinator.complete_transaction``.

With an authorizer, as in Kafka: without WRITE on the transactional id every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, without READ on the group GROUP_AUTHORIZATION_FAILED; then a topic
without READ answers TOPIC_AUTHORIZATION_FAILED for each of its partitions (before its existence is looked
at) and is not committed.
"""

from __future__ import annotations

from typing import Any

from strata.broker.group_api import manager_of, owns
from strata.broker.wire.dispatch import RequestContext, handles
from strata.common import TopicPartition
from strata.coordinator.group.coordinator import OFFSETS_TOPIC
from strata.coordinator.group.manager import NO_APPEND_OFFSET, TxnCommitRequest, txn_offset_append_error
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

TXN_OFFSET_COMMIT = 28
LOAD_ERROR_VERSION = 2  # clients before v2 (Kafka < 2.0) may crash on COORDINATOR_LOAD_IN_PROGRESS (KAFKA-7296)
DURABLE_TIMEOUT_S = 5.0


def _coordinator_error(ctx: RequestContext, group_id: str) -> int:
    """Kafka's ``validateGroupStatus`` for a group this broker cannot answer for."""
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    coordinator = ctx.broker.groups
    if coordinator is None or not coordinator.active:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.NONE if owns(ctx, group_id) else ErrorCode.NOT_COORDINATOR


def _authorization_error(ctx: RequestContext, request: Any) -> int:
    """Kafka's checks ahead of the topics' (the producer id is not checked: the transactional id implies it)."""
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return ErrorCode.NONE


async def _verify(ctx: RequestContext, request: Any) -> int:
    """KIP-890: the group's ``__consumer_offsets`` partition must be in the producer's open transaction
    (AddOffsetsToTxn put it there), or the batch would open a transaction no marker ever closes."""
    txns = ctx.broker.transactions
    if txns is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    tp = TopicPartition(OFFSETS_TOPIC, ctx.broker.groups.partition_for(request.group_id))
    code, _ = await txns.verify_for_append(tp, request.transactional_id, request.producer_id,
                                           request.producer_epoch)
    return code


@handles(TXN_OFFSET_COMMIT, 0, 4)
async def txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    topics = ctx.broker.topics
    group_id: str = request.group_id
    errors: dict[tuple[int, int], int] = {}  # (topic index, partition index in request) -> error
    wanted: list[tuple[str, int, int, int, str | None]] = []
    where: dict[tuple[int, int], tuple[str, int]] = {}
    denied = _authorization_error(ctx, request)
    readable: dict[str, bool] = {}
    for ti, t in enumerate(request.topics):
        info = topics.get(t.name)
        if not denied and t.name not in readable:
            readable[t.name] = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
        for pi, p in enumerate(t.partitions):
            if denied:
                errors[(ti, pi)] = denied
            elif not readable[t.name]:
                errors[(ti, pi)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p.partition_index < info.partitions:
                errors[(ti, pi)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                where[(ti, pi)] = (info.name, p.partition_index)
                wanted.append((info.name, p.partition_index, p.committed_offset,
                               getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    if where:
        manager = manager_of(ctx, group_id)
        code = _coordinator_error(ctx, group_id)
        if code or manager is None:
            results = dict.fromkeys(where.values(), code or ErrorCode.COORDINATOR_NOT_AVAILABLE)
        elif (verified := await _verify(ctx, request)) != ErrorCode.NONE:
            results = dict.fromkeys(where.values(), verified)
        else:
            producer_id, producer_epoch = request.producer_id, request.producer_epoch
            results, append_offset = manager.commit_txn_offsets(TxnCommitRequest(
                group_id=group_id,
                transactional_id=request.transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                member_id=getattr(request, "member_id", ""),
                group_instance_id=getattr(request, "group_instance_id", None),
                generation_id=getattr(request, "generation_id", -1),
                partitions=wanted,
            ))
            if append_offset != NO_APPEND_OFFSET:
                durable = await ctx.broker.groups.durable(group_id, DURABLE_TIMEOUT_S)
                if durable:
                    # Kafka's putCacheCallback on a failed append: the offsets are not pending here any more.
                    manager.fail_txn_offset_commit(group_id, producer_id, append_offset)
                    failed = txn_offset_append_error(durable)
                    results = {k: failed if v == ErrorCode.NONE else v for k, v in results.items()}
        for pos, key in where.items():
            errors[pos] = results[key]
    if ctx.version < LOAD_ERROR_VERSION:
        errors = {pos: ErrorCode.COORDINATOR_NOT_AVAILABLE if e == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else e
                  for pos, e in errors.items()}
    return ctx.respond(throttle_time=0, topics=[
        {"name": t.name,
         "partitions": [{"partition_index": p.partition_index, "error_code": errors[(ti, pi)]}
                        for pi, p in enumerate(t.partitions)]}
        for ti, t in enumerate(request.topics)])
