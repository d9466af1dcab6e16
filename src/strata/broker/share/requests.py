"""What ShareFetch and ShareAcknowledge share: the share session's epoch rules, the topic-id resolution and
authorization of the partitions a request names, and the acknowledgements applied to each.

Kafka's ``KafkaApis.handleShareFetchRequest`` / ``handleShareAcknowledgeRequest`` and
``SharePartitionManager.newContext`` / ``acknowledgeSessionUpdate`` are the contract. librdkafka repeats a
topic id across several topic entries of one request: the entries are merged, not refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from strata.broker.share.admin import share_refusal
from strata.broker.share.log_reader import Records
from strata.broker.share.partition_manager import ShareFetchError
from strata.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, next_epoch
from strata.errors import ErrorCode
from strata.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strata.broker.share.partition_manager import SharePartitionManager
    from strata.broker.wire.dispatch import RequestContext

AckBatches = list[tuple[int, int, list[int]]]


class SessionError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(slots=True)
class PartitionResult:
    """One partition's part of the answer."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    acknowledge_error_code: int | None = None  # None: no acknowledgement for it in this request
    acknowledge_error_message: str | None = None
    records: Records = b""
    acquired: list[Any] = field(default_factory=list)

    def reportable(self) -> bool:
        return bool(self.error_code or self.acknowledge_error_code is not None or self.acquired)


Results = dict[tuple[UUID, int], PartitionResult]


def merged_topics(topics: Iterable[Any]) -> dict[UUID, list[Any]]:
    """Topic entries by id, the partitions of repeated entries merged in order."""
    out: dict[UUID, list[Any]] = {}
    for t in topics:
        out.setdefault(t.topic_id, []).extend(t.partitions)
    return out


def acknowledgements(partition: Any) -> AckBatches:
    return [(int(b.first_offset), int(b.last_offset), [int(x) for x in b.acknowledge_types])
            for b in partition.acknowledgement_batches]


def refusal(ctx: RequestContext, request: Any) -> tuple[int, str | None] | None:
    """The request-level answer of a ShareFetch or ShareAcknowledge that goes no further: share groups off or
    not running yet, no READ on the group, an empty group or member id."""
    code = share_refusal(ctx, request.group_id, AclOperation.READ)
    if code is not None:
        return code, None
    if ctx.broker.shares is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    if not request.group_id:
        return ErrorCode.INVALID_REQUEST, "Group id must not be empty."
    if not request.member_id:
        return ErrorCode.INVALID_REQUEST, "Member id must not be empty."
    return None


def session_for(shares: SharePartitionManager, ctx: RequestContext, group_id: str, member_id: str, epoch: int,
                *, fetch: bool) -> ShareSession:
    """The share session this request runs in; SessionError with the request-level error otherwise. Opening
    (epoch 0) replaces the member's earlier session; as in Kafka's ``newContext`` its records stay acquired
    (a client reopens its session while it still works on what it received: releasing them would hand them
    to another member at the same time)."""
    sessions = shares.sessions
    now = shares.broker.clock.milliseconds()
    if epoch == INITIAL_EPOCH:
        if not fetch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               "A share acknowledge request cannot open a share session (epoch 0).")
        session, _replaced = sessions.open(group_id, member_id, ctx.connection_id, now)
        if session is None:
            raise SessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                               f"The broker has reached group.share.max.share.sessions ({sessions.max_sessions}).")
        return session
    session = sessions.get(group_id, member_id)
    if session is None:
        raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"No share session for member {member_id}.")
    if epoch != FINAL_EPOCH:
        if epoch != session.epoch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                               f"The share session epoch is {session.epoch}, the request has {epoch}.")
        session.epoch = next_epoch(epoch)
    session.last_used_ms = now
    return session


def resolve(ctx: RequestContext, topic_id: UUID, partition: int, operation: AclOperation,
            results: Results) -> str | None:
    """The topic's name when the partition may be used, else None with its error recorded in ``results``."""
    info = ctx.broker.topics.by_id(topic_id)
    key = (topic_id, partition)
    if info is None:
        results[key] = PartitionResult(ErrorCode.UNKNOWN_TOPIC_ID, "Unknown topic id.")
        return None
    if not ctx.authorize(operation, ResourceType.TOPIC, info.name):
        results[key] = PartitionResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return None
    if not 0 <= partition < info.partitions:
        results[key] = PartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return None
    if ctx.broker.topics.config(info.name).diskless_enable:
        results[key] = PartitionResult(ErrorCode.INVALID_REQUEST,
                                       "Share groups do not read diskless topics yet.")
        return None
    return info.name


async def apply_acknowledgements(ctx: RequestContext, shares: SharePartitionManager, group_id: str,
                                 member_id: str, acks: dict[tuple[UUID, int], AckBatches],
                                 results: Results) -> None:
    """Every partition's acknowledgements at once; each result's acknowledge error code set."""
    async def one(key: tuple[UUID, int], batches: AckBatches) -> None:
        result = results.setdefault(key, PartitionResult())
        info = ctx.broker.topics.by_id(key[0])
        name = info.name if info is not None else None
        if name is None:
            result.acknowledge_error_code = ErrorCode.UNKNOWN_TOPIC_ID
            return
        try:
            entry = await shares.entry(group_id, key[0], name, key[1])
        except ShareFetchError as e:
            result.acknowledge_error_code = e.error_code
            result.acknowledge_error_message = e.message
            return
        code = await shares.acknowledge(entry, member_id, batches)
        result.acknowledge_error_code = code
        if code == ErrorCode.INVALID_RECORD_STATE:
            result.acknowledge_error_message = "The record state is invalid: not acquired by this member, or its " \
                                               "acquisition lock expired."

    await asyncio.gather(*(one(key, batches) for key, batches in acks.items()))


def valid_ack_batches(batches: Sequence[tuple[int, int, Sequence[int]]]) -> bool:
    return all(first >= 0 and last >= first and types for first, last, types in batches)
