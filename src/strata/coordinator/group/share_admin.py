"""Share-group administration on the group coordinator (the admin part of Kafka's ``GroupMetadataManager``
for share groups: ``alterShareGroupOffsets``, ``sharePartitionsEligibleForOffsetDeletion``,
``completeDeleteShareGroupOffsets``, ``shareGroupBuildPartitionDeleteRequest``).

A share group keeps no offsets of its own: each share-partition's start offset lives with the share
coordinator (``__share_group_state``). What the group coordinator keeps is ShareGroupStatePartitionMetadata
(record 15): which partitions are *initializing* (their state is being written), *initialized* (it exists)
and *deleting* (it is being removed). Every admin operation is therefore two record writes around an
asynchronous call to the share coordinator, and this module is the two synchronous halves; the broker's
handlers make the call (:class:`strata.broker.share.persister.SharePersister`) in between:

* **AlterShareGroupOffsets**: :func:`begin_alter_offsets` checks (the group must be empty; a group that does
  not exist yet is created, by its record 15 alone, so that offsets can be set before any consumer starts)
  and records the partitions as initializing; the caller initializes them with the new start offset at the
  group's epoch; :func:`complete_alter_offsets` records those that succeeded as initialized.
* **DeleteShareGroupOffsets**: :func:`begin_delete_offsets` moves the named topics from initialized to
  deleting; the caller deletes their state; :func:`complete_delete_offsets` forgets the topics whose state is
  gone. A topic left in deleting (the call failed) is deleted again by the next request naming it.
* **DeleteGroups**: :func:`begin_delete_group` moves every partition to deleting; the caller deletes the
  state; only when all of it is gone does :func:`complete_delete_group` write the group's tombstones. A
  group whose state could not be deleted stays, so the delete can be retried.

Each write goes through the manager's ``_commit``: the records are appended first and applied (with the
manager's own ``apply``, the replay path) only once the append succeeded, so a failed write changes
nothing, and a coordinator that loads the partition later rebuilds exactly this state. An append failure
is raised (:class:`strata.errors.KafkaError`) for the caller to answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.share_manager import ShareGroup, ShareGroupManager
from strata.errors import ErrorCode

Response = dict[str, Any]
TopicPartitions = dict[UUID, frozenset[int]]
Named = Mapping[UUID, tuple[str, frozenset[int]]]

# Kafka's Errors.*.message(), where Kafka answers with the default message
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
NON_EMPTY_GROUP_MESSAGE = "The group is not empty."
NO_OFFSETS_MESSAGE = "There is no offset information to delete."


@dataclass(slots=True)
class AlterPlan:
    """What AlterShareGroupOffsets asks of the share coordinator, and the answer so far."""

    state_epoch: int  # the group's epoch: Kafka initializes altered partitions at it
    offsets: dict[UUID, dict[int, int]] = field(default_factory=dict)  # topic id -> partition -> start offset
    topics: list[Response] = field(default_factory=list)  # response topics, partition errors already set


@dataclass(slots=True)
class DeleteOffsetsPlan:
    """The share-partitions DeleteShareGroupOffsets deletes, and the topics already answered with an error."""

    partitions: dict[UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)  # topic id -> (name, ps)
    errors: list[Response] = field(default_factory=list)  # response topics


# -- lookups ------------------------------------------------------------------------------------

def share_group(manager: ShareGroupManager, group_id: str) -> ShareGroup | None:
    """The live share group, or None (none, or it was deleted)."""
    group = manager.groups.get(group_id)
    return None if group is None or group.dead else group


def _existing(manager: ShareGroupManager, group_id: str) -> ShareGroup:
    """Kafka's ``shareGroup(groupId)``: GROUP_ID_NOT_FOUND when there is none or the id is another kind's."""
    group = share_group(manager, group_id)
    if group is None:
        if manager._taken(group_id):
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    return group


def _check_empty(group: ShareGroup) -> None:
    if group.members:
        raise GroupError(ErrorCode.NON_EMPTY_GROUP, NON_EMPTY_GROUP_MESSAGE)


def describe(manager: ShareGroupManager, group_id: str, topic_name: Callable[[UUID], str | None]) -> Response:
    """ShareGroupDescribe of one group; GroupError GROUP_ID_NOT_FOUND naming why."""
    _existing(manager, group_id)
    return manager.describe(group_id, topic_name)


def initialized_partitions(manager: ShareGroupManager, group_id: str) -> dict[UUID, tuple[str, frozenset[int]]]:
    """Kafka's ``initializedShareGroupPartitions``: what DescribeShareGroupOffsets with Topics=null shows
    (nothing for a group that does not exist: no error, as in Kafka)."""
    group = share_group(manager, group_id)
    return {} if group is None else {t: (n, ps) for t, (n, ps) in group.initialized.items() if ps}


# -- record 15 ----------------------------------------------------------------------------------

def _combined(a: Named, b: Named) -> dict[UUID, tuple[str, frozenset[int]]]:
    """Kafka's ``combineInitMaps``: the union per topic (the name from ``b`` when both have it)."""
    out = dict(a)
    for topic_id, (name, ps) in b.items():
        out[topic_id] = (name, out.get(topic_id, (name, frozenset()))[1] | ps)
    return out


def _without(a: Named, b: Mapping[UUID, frozenset[int]]) -> dict[UUID, tuple[str, frozenset[int]]]:
    out = {}
    for topic_id, (name, ps) in a.items():
        left = ps - b.get(topic_id, frozenset())
        if left:
            out[topic_id] = (name, left)
    return out


def _write_state(manager: ShareGroupManager, group_id: str, initializing: Named, initialized: Named,
                 deleting: Mapping[UUID, str]) -> None:
    manager._commit(group_id, [manager._state_metadata(group_id, initializing, initialized, deleting)])


def _state_of(group: ShareGroup | None) -> tuple[Named, Named, dict[UUID, str]]:
    if group is None:
        return {}, {}, {}
    return group.initializing, group.initialized, dict(group.deleting)


# -- AlterShareGroupOffsets ---------------------------------------------------------------------

def begin_alter_offsets(manager: ShareGroupManager, group_id: str,
                        topics: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> AlterPlan:
    """Kafka's ``alterShareGroupOffsets``: ``topics`` are (name, [(partition, start offset)]). The group must
    be empty (NON_EMPTY_GROUP); one that does not exist is created empty, at epoch 0, by the record that
    marks its partitions initializing. Unknown topics and partitions are answered UNKNOWN_TOPIC_OR_PARTITION;
    the others are recorded as initializing (and no longer deleting) before this returns."""
    group = share_group(manager, group_id)
    if group is None and manager._taken(group_id):
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    if group is not None:
        _check_empty(group)
    plan = AlterPlan(group.group_epoch if group is not None else 0)
    marking: dict[UUID, tuple[str, frozenset[int]]] = {}
    for name, partitions in topics:
        found = manager.topics.topic(name)
        if found is None:
            plan.topics.append({"topic_name": name, "topic_id": None, "partitions": [
                partition_error(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p, _ in partitions]})
            continue
        topic_id, count = found
        answered = []
        for p, offset in partitions:
            if 0 <= p < count:
                answered.append({"partition_index": p, "error_code": ErrorCode.NONE, "error_message": None})
                plan.offsets.setdefault(topic_id, {})[p] = offset
            else:
                answered.append(partition_error(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        plan.topics.append({"topic_name": name, "topic_id": topic_id, "partitions": answered})
        if topic_id in plan.offsets:
            marking[topic_id] = (name, frozenset(plan.offsets[topic_id]))
    if marking:
        initializing, initialized, deleting = _state_of(group)
        for topic_id in marking:
            deleting.pop(topic_id, None)
        _write_state(manager, group_id, _combined(initializing, marking), initialized, deleting)
        now = manager._now()  # fresh: a heartbeat meanwhile does not initialize them again at offset -1
        for topic_id, (_name, ps) in marking.items():
            for p in ps:
                manager._initializing_since[(group_id, topic_id, p)] = now
    return plan


def partition_error(partition: int, code: int, message: str | None = None) -> Response:
    """A response partition answered ``code`` (with Kafka's message for UNKNOWN_TOPIC_OR_PARTITION)."""
    if message is None and code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        message = UNKNOWN_TOPIC_OR_PARTITION_MESSAGE
    return {"partition_index": partition, "error_code": code, "error_message": message}


def complete_alter_offsets(manager: ShareGroupManager, group_id: str, succeeded: TopicPartitions) -> None:
    """The share coordinator holds the new state of these partitions: initializing -> initialized. (Those
    that failed stay initializing: a later heartbeat asks for them again, as after a failed heartbeat-driven
    initialization.)"""
    group = share_group(manager, group_id)
    succeeded = {t: ps for t, ps in succeeded.items() if ps}
    if group is None or not succeeded:
        return
    named = {t: (_name_in(group, t) or manager.topics.name_of(t) or "", ps) for t, ps in succeeded.items()}
    _write_state(manager, group_id, _without(group.initializing, succeeded), _combined(group.initialized, named),
                 group.deleting)
    for topic_id, ps in succeeded.items():
        for p in ps:
            manager._initializing_since.pop((group_id, topic_id, p), None)


def _name_in(group: ShareGroup, topic_id: UUID) -> str | None:
    known = group.initializing.get(topic_id) or group.initialized.get(topic_id)
    return known[0] if known is not None else group.deleting.get(topic_id)


# -- DeleteShareGroupOffsets --------------------------------------------------------------------

def begin_delete_offsets(manager: ShareGroupManager, group_id: str, topic_names: Iterable[str]) -> DeleteOffsetsPlan:
    """Kafka's ``initiateDeleteShareGroupOffsets``: the group must exist (GROUP_ID_NOT_FOUND) and be empty
    (NON_EMPTY_GROUP). A named topic's initialized partitions move to deleting and are returned for the
    caller to delete; a topic already deleting (an earlier delete failed) is deleted again, every partition;
    a topic with no state answers UNKNOWN_TOPIC_OR_PARTITION, as does one that does not exist."""
    group = _existing(manager, group_id)
    _check_empty(group)
    plan = DeleteOffsetsPlan()
    initialized = dict(group.initialized)
    deleting = dict(group.deleting)
    for name in topic_names:
        found = manager.topics.topic(name)
        if found is None:
            plan.errors.append(_topic_error(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            UNKNOWN_TOPIC_OR_PARTITION_MESSAGE))
            continue
        topic_id, count = found
        if topic_id in initialized:
            plan.partitions[topic_id] = (name, initialized.pop(topic_id)[1])
            deleting[topic_id] = name
        elif topic_id in deleting:
            plan.partitions[topic_id] = (name, frozenset(range(count)))
        else:
            plan.errors.append(_topic_error(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NO_OFFSETS_MESSAGE))
    if initialized != group.initialized or deleting != group.deleting:
        _write_state(manager, group_id, group.initializing, initialized, deleting)
    return plan


def _topic_error(name: str, topic_id: UUID | None, code: int, message: str | None) -> Response:
    return {"topic_name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


def complete_delete_offsets(manager: ShareGroupManager, group_id: str, deleted: Iterable[UUID]) -> None:
    """The state of these topics is gone: they leave deleting (Kafka's ``completeDeleteShareGroupOffsets``)."""
    group = share_group(manager, group_id)
    if group is None:
        return
    deleting = {t: n for t, n in group.deleting.items() if t not in set(deleted)}
    if deleting != group.deleting:
        _write_state(manager, group_id, group.initializing, group.initialized, deleting)


# -- DeleteGroups -------------------------------------------------------------------------------

def begin_delete_group(manager: ShareGroupManager, group_id: str) -> TopicPartitions | None:
    """Kafka's ``sharePartitionDeleteRequests`` for one group: None when ``group_id`` is no share group (the
    caller then tries the other kinds); NON_EMPTY_GROUP with members. Otherwise every initializing and
    initialized partition moves to deleting (with those an earlier attempt left deleting, all partitions of
    the topics that still exist) and is returned for the caller to delete before :func:`complete_delete_group`."""
    group = share_group(manager, group_id)
    if group is None:
        return None
    _check_empty(group)
    candidates = _combined(group.initialized, group.initializing)
    for topic_id in group.deleting:
        name = manager.topics.name_of(topic_id)
        found = manager.topics.topic(name) if name is not None else None
        if found is not None and name is not None:
            candidates = _combined(candidates, {topic_id: (name, frozenset(range(found[1])))})
    if not candidates:
        return {}
    _write_state(manager, group_id, {}, {}, {t: n for t, (n, _ps) in candidates.items()})
    return {t: ps for t, (_n, ps) in candidates.items()}


def complete_delete_group(manager: ShareGroupManager, group_id: str) -> None:
    """The group's share-partition state is gone: its tombstones (Kafka's order). NON_EMPTY_GROUP when a member
    joined meanwhile (the group stays; its partitions are initialized again as it subscribes), GROUP_ID_NOT_FOUND
    when another request deleted it meanwhile."""
    group = _existing(manager, group_id)
    _check_empty(group)
    manager._commit(group_id, manager.group_tombstones(group))
    for key in [k for k in manager._initializing_since if k[0] == group_id]:
        del manager._initializing_since[key]
