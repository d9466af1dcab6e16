"""DeleteGroups: remove Empty groups and their offsets (tombstones in ``__consumer_offsets``).

A group with members answers NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND. With an authorizer a
group the principal may not DELETE answers GROUP_AUTHORIZATION_FAILED and is left alone, as in Kafka.

A share group (KIP-932) is deleted as Kafka's ``deleteShareGroups`` does: its share-partitions are
recorded as deleting, their state is deleted at the share coordinator (DeleteShareGroupState through the
persister), and only then are the group's tombstones written; a group whose state could not all be
deleted stays, answering the first error, so the delete can be retried. That answer waits until the ISR
has the group's records.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.broker.group_api import manager_of, owns
from strata.broker.wire.dispatch import RequestContext, handles
from strata.coordinator.group import share_admin
from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.manager import GroupMetadataManager, group_append_error
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation, ResourceType

DELETE_GROUPS = 42
DURABLE_TIMEOUT_S = 5.0


async def _delete_share_group(ctx: RequestContext, manager: GroupMetadataManager, group_id: str) -> int:
    persister = ctx.broker.share_persister
    if persister is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    try:
        todo = share_admin.begin_delete_group(manager.share, group_id)
        if todo is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if todo and await ctx.broker.groups.durable(group_id, DURABLE_TIMEOUT_S):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        keys = [(topic_id, p) for topic_id, ps in todo.items() for p in sorted(ps)]
        codes = await asyncio.gather(*(persister.delete(group_id, topic_id, p) for topic_id, p in keys))
        failed = next((code for code in codes if code), ErrorCode.NONE)
        if failed:
            return failed
        if manager_of(ctx, group_id) is not manager:  # the coordinator moved while the state was deleted
            return ErrorCode.NOT_COORDINATOR
        share_admin.complete_delete_group(manager.share, group_id)
    except GroupError as e:
        return e.error_code
    except KafkaError as e:
        return group_append_error(e)
    if await ctx.broker.groups.durable(group_id, DURABLE_TIMEOUT_S):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.NONE


@handles(DELETE_GROUPS)
async def delete_groups(ctx: RequestContext, request: Any) -> Any:
    manager = manager_of(ctx)
    denied = {g for g in request.groups_names if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, g)}
    mine = [g for g in request.groups_names if g not in denied and manager is not None and owns(ctx, g)]
    done: dict[str | None, int] = {}
    if manager is not None and mine:
        shared = [g for g in dict.fromkeys(mine) if g is not None and share_admin.share_group(manager.share, g)]
        others = [g for g in mine if g not in shared]
        done.update(manager.delete_groups(others) if others else [])  # first: the share groups' deletes wait
        for g in shared:
            done[g] = await _delete_share_group(ctx, manager, g)
    results = [(g, ErrorCode.GROUP_AUTHORIZATION_FAILED if g in denied
                else done.get(g, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))) for g in request.groups_names]
    return ctx.respond(throttle_time=0, results=[{"group_id": g, "error_code": code} for g, code in results])
