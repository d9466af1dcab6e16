"""What the share-group handlers share: the refusals every share API starts with, and the two-phase shape of
the offset changes (AlterShareGroupOffsets, DeleteShareGroupOffsets).

A change to a share group's offsets touches two coordinators: the group's records (ShareGroupStatePartition-
Metadata, in ``__consumer_offsets``) and the share-partitions' state (``__share_group_state``). As in Kafka,
the group first records the partitions as pending, the share coordinator then changes their state, and the
group finally records the outcome; each record is in the ISR before the next step, so a coordinator that
fails between steps leaves a state a restart completes or retries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from strata.broker.group_api import manager_of, owns
from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.manager import group_append_error
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from strata.broker.share.persister import SharePersister
    from strata.broker.wire.dispatch import RequestContext
    from strata.coordinator.group.share_manager import ShareGroupManager

P = TypeVar("P")
R = TypeVar("R")
DURABLE_TIMEOUT_S = 5.0


class ShareAdminError(Exception):
    def __init__(self, error_code: int, message: str | None = None) -> None:
        super().__init__(message or ErrorCode(error_code).name)
        self.error_code = error_code
        self.message = message


def share_refusal(ctx: RequestContext, group_id: str | None, operation: AclOperation) -> int | None:
    """UNSUPPORTED_VERSION when share groups are off (``group.coordinator.rebalance.protocols``),
    GROUP_AUTHORIZATION_FAILED without ``operation`` on the group; None when the request may go on."""
    if "share" not in ctx.broker.config.group_rebalance_protocols:
        return ErrorCode.UNSUPPORTED_VERSION
    if not ctx.authorize(operation, ResourceType.GROUP, group_id or ""):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


async def _durable(ctx: RequestContext, group_id: str) -> None:
    if await ctx.broker.groups.durable(group_id, DURABLE_TIMEOUT_S):
        raise ShareAdminError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "The group's records were not replicated in time")


async def in_two_phases(ctx: RequestContext, group_id: str, begin: Callable[[ShareGroupManager], P],
                        persist: Callable[[SharePersister, P], Awaitable[R]],
                        complete: Callable[[ShareGroupManager, P, R], None]) -> tuple[P, R]:
    """``begin`` records the change as pending (GroupError: refused), ``persist`` makes it in the share
    coordinator, ``complete`` records its outcome; ShareAdminError with the request-level error otherwise."""
    if not group_id:
        raise ShareAdminError(ErrorCode.INVALID_GROUP_ID)
    manager = manager_of(ctx)
    persister = ctx.broker.share_persister
    if manager is None or persister is None:
        raise ShareAdminError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if not owns(ctx, group_id):
        raise ShareAdminError(ErrorCode.NOT_COORDINATOR)
    try:
        plan = begin(manager.share)
    except GroupError as e:
        raise ShareAdminError(e.error_code, str(e)) from None
    except KafkaError as e:
        raise ShareAdminError(group_append_error(e), str(e)) from None
    await _durable(ctx, group_id)
    outcome = await persist(persister, plan)
    if manager_of(ctx, group_id) is not manager:  # the coordinator moved meanwhile: the client retries there
        raise ShareAdminError(ErrorCode.NOT_COORDINATOR)
    try:
        complete(manager.share, plan, outcome)
    except KafkaError as e:
        raise ShareAdminError(group_append_error(e), str(e)) from None
    await _durable(ctx, group_id)
    return plan, outcome
