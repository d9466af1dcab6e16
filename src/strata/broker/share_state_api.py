"""What the share-state RPCs (KIP-932's inter-broker APIs 83-87) share: their checks and their per-partition
answer. Each asks the share coordinator once per partition, all partitions at once, and answers in the
request's order; a refusal (no CLUSTER_ACTION, no coordinator) is that error on every partition, and an empty
group id, topic list or partition list is an empty answer, as Kafka's ``ShareCoordinatorService`` gives."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from strata.errors import ErrorCode
from strata.security.acl import AclOperation

if TYPE_CHECKING:
    from strata.broker.wire.dispatch import RequestContext

R = TypeVar("R")
Entry = Callable[[int, R, "str | None"], dict[str, Any]]


def code_entry(partition: int, code: int, message: str | None) -> dict[str, Any]:
    """The answer of an operation that returns only an error code (Initialize, Write, Delete)."""
    return {"partition": partition, "error_code": code, "error_message": message if code else None}


async def answer_partitions(ctx: RequestContext, request: Any, call: Callable[[Any, Any, Any], Awaitable[R]],
                            failed: Callable[[int], R], entry: Entry[R]) -> Any:
    """``call(coordinator, topic, partition)`` for every partition of the request; ``failed(code)`` is the
    result a refused partition reports and ``entry(partition, result, message)`` one partition's answer."""
    count = sum(len(t.partitions) for t in request.topics)

    def respond(results: list[R], message: str | None = None) -> Any:
        it = iter(results)
        return ctx.respond(results=[{"topic_id": t.topic_id, "partitions": [
            entry(p.partition, next(it), message) for p in t.partitions]} for t in request.topics])

    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return respond([failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)] * count, "Cluster authorization failed.")
    if not request.group_id or not request.topics or any(not t.partitions for t in request.topics):
        return ctx.respond(results=[])
    coordinator = ctx.broker.share_coordinator
    if coordinator is None:
        return respond([failed(ErrorCode.COORDINATOR_NOT_AVAILABLE)] * count, "Share coordinator is not available.")
    results = await asyncio.gather(*(call(coordinator, t, p) for t in request.topics for p in t.partitions))
    return respond(list(results))
