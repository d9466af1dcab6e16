"""What the group handlers share: reaching the coordinator, parking a request, reading kio fields."""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

from strata.coordinator.group.classic import Response, Waiter

if TYPE_CHECKING:
    from strata.broker.wire.dispatch import RequestContext
    from strata.coordinator.group.manager import GroupMetadataManager


def manager_of(ctx: RequestContext, group_id: str | None = None) -> GroupMetadataManager | None:
    """The live state machine, or None while the coordinator is not (or no longer) running -- or,
    in a cluster, when ``group_id``'s ``__consumer_offsets`` partition is not led (and loaded) here:
    the client then looks its coordinator up again."""
    coordinator = ctx.broker.groups
    manager = getattr(coordinator, "manager", None) if coordinator is not None else None
    if manager is not None and group_id is not None and not coordinator.owns(group_id):
        return None
    return manager


def owns(ctx: RequestContext, group_id: str | None) -> bool:
    coordinator = ctx.broker.groups
    return coordinator is not None and group_id is not None and coordinator.owns(group_id)


def millis(value: Any, default: int = -1) -> int:
    """A kio duration (timedelta) or plain int as integer milliseconds."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value // datetime.timedelta(milliseconds=1))
    return int(value)


def client_host(ctx: RequestContext) -> str:
    """Kafka shows a member's host as ``InetAddress.toString()``: ``/127.0.0.1``."""
    host = ctx.connection_id.rsplit(":", 1)[0]
    return f"/{host}"


def parked() -> tuple[asyncio.Future[Response], Waiter]:
    """A future and the callback that resolves it once (the state machine may answer late or never twice)."""
    fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

    def respond(result: Response) -> None:
        if not fut.done():
            fut.set_result(result)

    return fut, respond
