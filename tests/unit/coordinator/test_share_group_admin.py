"""Share-group administration on the coordinator (``share_admin``): AlterShareGroupOffsets,
DeleteShareGroupOffsets and DeleteGroups as record-15 (ShareGroupStatePartitionMetadata) changes around the
share coordinator's calls, with the real :class:`ShareGroupManager`: Kafka's checks, what is written, that a
failed write changes nothing, and that replaying the records rebuilds the same groups."""

from __future__ import annotations

from uuid import UUID

import pytest
from tests.unit.coordinator.test_share_group_manager import G, Harness, T, state

from strata.coordinator.group import modern_records as mr
from strata.coordinator.group import share_admin
from strata.coordinator.group.classic import GroupError
from strata.errors import ErrorCode, KafkaStorageError

U = UUID(int=2)


def harness(partitions: int = 2, initialize: bool = True) -> Harness:
    h = Harness(partitions=partitions, initialize=initialize)
    h.topics.by_name["u"] = (U, 3)
    return h


def kinds(h: Harness) -> list[list[int]]:
    """The record types of each batch written."""
    return [[mr.decode_key(k).RECORD_TYPE for k, _ in batch] for batch in h.written]


def state_record(h: Harness, batch: int = -1) -> mr.ShareGroupStatePartitionMetadataValue:
    ((key, value),) = h.written[batch]
    k = mr.decode_key(key)
    assert isinstance(k, mr.ShareGroupStatePartitionMetadataKey) and value is not None
    decoded = mr.decode_value(k.RECORD_TYPE, value)
    assert isinstance(decoded, mr.ShareGroupStatePartitionMetadataValue)
    return decoded


def replayed_groups(h: Harness) -> set[str]:
    return set(h.replayed().groups)


def code_of(e: pytest.ExceptionInfo[GroupError]) -> int:
    return int(e.value.error_code)


# -- AlterShareGroupOffsets --------------------------------------------------------------------------


def test_alter_creates_an_empty_group_by_its_state_record_alone() -> None:
    """Kafka creates the group so that offsets can be set before any consumer starts: only record 15 is
    written (no ShareGroupMetadata), so the group has epoch 0 and the state epoch asked for is 0."""
    h = harness()
    plan = share_admin.begin_alter_offsets(h.m, G, [("t", [(0, 5), (1, 7)])])
    assert plan.state_epoch == 0 and plan.offsets == {T: {0: 5, 1: 7}}
    assert plan.topics == [{"topic_name": "t", "topic_id": T, "partitions": [
        {"partition_index": 0, "error_code": 0, "error_message": None},
        {"partition_index": 1, "error_code": 0, "error_message": None}]}]
    assert kinds(h) == [[15]]
    assert state_record(h).initializing_topics == (mr.TopicPartitionsInfo(T, "t", (0, 1)),)
    group = h.m.groups[G]
    assert (group.group_epoch, group.state(), group.initializing) == (0, "Empty", {T: ("t", frozenset({0, 1}))})

    share_admin.complete_alter_offsets(h.m, G, {T: frozenset({0, 1})})
    assert kinds(h) == [[15], [15]]
    assert (group.initializing, group.initialized) == ({}, {T: ("t", frozenset({0, 1}))})
    assert share_admin.initialized_partitions(h.m, G) == {T: ("t", frozenset({0, 1}))}
    assert state(h.replayed()) == state(h.m)


def test_alter_answers_unknown_topics_and_partitions_and_writes_nothing_for_them() -> None:
    h = harness()
    plan = share_admin.begin_alter_offsets(h.m, G, [("nope", [(0, 1)]), ("t", [(2, 1), (-1, 1)])])
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert [(t["topic_name"], t["topic_id"], [(p["partition_index"], p["error_code"]) for p in t["partitions"]])
            for t in plan.topics] == [("nope", None, [(0, unknown)]), ("t", T, [(2, unknown), (-1, unknown)])]
    assert plan.offsets == {} and h.written == [] and G not in h.m.groups  # nothing valid: no group either


def test_alter_needs_an_empty_share_group() -> None:
    h = harness()
    h.join("A")
    written = len(h.written)
    with pytest.raises(GroupError) as e:
        share_admin.begin_alter_offsets(h.m, G, [("t", [(0, 1)])])
    assert code_of(e) == ErrorCode.NON_EMPTY_GROUP and len(h.written) == written
    h.m._taken = lambda gid: gid == "classic-one"  # a classic or consumer group holds the id
    with pytest.raises(GroupError) as e:
        share_admin.begin_alter_offsets(h.m, "classic-one", [("t", [(0, 1)])])
    assert code_of(e) == ErrorCode.GROUP_ID_NOT_FOUND and "not a share group" in str(e.value)


def test_alter_at_the_group_epoch_takes_the_topic_out_of_deleting_and_keeps_failures_initializing() -> None:
    h = harness()
    h.join("A")
    h.poll("A")
    h.hb("A", -1)  # empty again, epoch moved on
    group = h.m.groups[G]
    share_admin.begin_delete_offsets(h.m, G, ["t"])  # t deleting, as if the delete had failed
    assert group.deleting == {T: "t"}
    plan = share_admin.begin_alter_offsets(h.m, G, [("t", [(0, 3), (1, 4)])])
    assert plan.state_epoch == group.group_epoch > 0
    assert group.deleting == {} and group.initializing == {T: ("t", frozenset({0, 1}))}
    share_admin.complete_alter_offsets(h.m, G, {T: frozenset({1})})  # partition 0 failed
    assert group.initializing == {T: ("t", frozenset({0}))} and group.initialized == {T: ("t", frozenset({1}))}
    assert state(h.replayed()) == state(h.m)


def test_altered_partitions_are_not_initialized_again_by_a_heartbeat_meanwhile() -> None:
    """The altered partitions are recorded initializing *now*: a member joining before the share coordinator
    answered must not ask for them again (at start offset -1, which would undo the new offset)."""
    h = harness()
    share_admin.begin_alter_offsets(h.m, G, [("t", [(0, 3), (1, 4)])])
    h.join("A")
    assert h.asked == []


# -- DeleteShareGroupOffsets -------------------------------------------------------------------------


def initialized(h: Harness, topics: dict[str, list[tuple[int, int]]]) -> None:
    plan = share_admin.begin_alter_offsets(h.m, G, list(topics.items()))
    share_admin.complete_alter_offsets(h.m, G, {t: frozenset(ps) for t, ps in plan.offsets.items()})


def test_delete_offsets_moves_topics_to_deleting_then_forgets_them() -> None:
    h = harness()
    initialized(h, {"t": [(0, 1), (1, 1)], "u": [(2, 0)]})
    plan = share_admin.begin_delete_offsets(h.m, G, ["t", "nope", "v"])
    h.topics.by_name["v"] = (UUID(int=3), 1)
    assert plan.partitions == {T: ("t", frozenset({0, 1}))}
    assert [(e["topic_name"], e["error_code"], e["error_message"]) for e in plan.errors] == [
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."),
        ("v", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")]
    group = h.m.groups[G]
    assert group.initialized == {U: ("u", frozenset({2}))} and group.deleting == {T: "t"}
    record = state_record(h)
    assert record.deleting_topics == (mr.TopicInfo(T, "t"),)
    assert record.initialized_topics == (mr.TopicPartitionsInfo(U, "u", (2,)),)

    # a topic with no state: "There is no offset information to delete."; a deleting one again, whole
    plan = share_admin.begin_delete_offsets(h.m, G, ["v", "t"])
    assert [(e["topic_name"], e["error_message"]) for e in plan.errors] == [
        ("v", "There is no offset information to delete.")]
    assert plan.partitions == {T: ("t", frozenset({0, 1}))}  # all of t's partitions (it has 2)

    share_admin.complete_delete_offsets(h.m, G, [T])
    assert group.deleting == {} and group.initialized == {U: ("u", frozenset({2}))}
    assert state(h.replayed()) == state(h.m)


def test_delete_offsets_needs_an_existing_empty_share_group() -> None:
    h = harness()
    with pytest.raises(GroupError) as e:
        share_admin.begin_delete_offsets(h.m, G, ["t"])
    assert code_of(e) == ErrorCode.GROUP_ID_NOT_FOUND and str(e.value) == f"Group {G} not found."
    h.join("A")
    with pytest.raises(GroupError) as e:
        share_admin.begin_delete_offsets(h.m, G, ["t"])
    assert code_of(e) == ErrorCode.NON_EMPTY_GROUP


# -- DeleteGroups ------------------------------------------------------------------------------------


def test_delete_group_deletes_every_partition_state_first_then_tombstones() -> None:
    h = harness(partitions=2)
    h.join("A")  # t's partitions initialized by the heartbeat
    h.poll("A")
    h.hb("A", -1)
    share_admin.begin_alter_offsets(h.m, G, [("u", [(0, 9)])])  # u:0 still initializing
    assert share_admin.begin_delete_group(h.m, "other") is None  # no share group: the caller tries the others
    todo = share_admin.begin_delete_group(h.m, G)
    assert todo == {T: frozenset({0, 1}), U: frozenset({0})}
    record = state_record(h)
    assert (record.initializing_topics, record.initialized_topics) == ((), ())
    assert record.deleting_topics == (mr.TopicInfo(T, "t"), mr.TopicInfo(U, "u"))
    assert G in replayed_groups(h)  # still there until its state is gone

    # a retry after a failed delete deletes the deleting topics again, whole
    assert share_admin.begin_delete_group(h.m, G) == {T: frozenset({0, 1}), U: frozenset({0, 1, 2})}

    share_admin.complete_delete_group(h.m, G)
    assert kinds(h)[-1] == [12, 15, 11]  # Kafka's order: target metadata, state metadata, group metadata
    assert G not in h.m.groups and G not in replayed_groups(h)
    with pytest.raises(GroupError) as e:
        share_admin.complete_delete_group(h.m, G)
    assert code_of(e) == ErrorCode.GROUP_ID_NOT_FOUND


def test_delete_group_refuses_members_and_a_group_without_state_goes_at_once() -> None:
    h = harness(initialize=False)
    h.join("A")
    with pytest.raises(GroupError) as e:
        share_admin.begin_delete_group(h.m, G)
    assert code_of(e) == ErrorCode.NON_EMPTY_GROUP
    h.hb("A", -1)
    h.m.groups[G].initializing = {}  # nothing asked of the share coordinator
    written = len(h.written)
    assert share_admin.begin_delete_group(h.m, G) == {}
    assert len(h.written) == written  # no state: no record-15 change
    h.join("B")  # joined while the (absent) state was deleted
    with pytest.raises(GroupError) as e:
        share_admin.complete_delete_group(h.m, G)
    assert code_of(e) == ErrorCode.NON_EMPTY_GROUP and G in h.m.groups


# -- describing, failures ----------------------------------------------------------------------------


def test_describe_names_why_a_group_is_not_found() -> None:
    h = harness()
    with pytest.raises(GroupError) as e:
        share_admin.describe(h.m, G, lambda _t: None)
    assert str(e.value) == f"Group {G} not found."
    h.m._taken = lambda _gid: True
    with pytest.raises(GroupError) as e:
        share_admin.describe(h.m, G, lambda _t: None)
    assert str(e.value) == f"Group {G} is not a share group."
    assert share_admin.initialized_partitions(h.m, G) == {}


def test_a_failed_write_changes_nothing() -> None:
    h = harness()
    initialized(h, {"t": [(0, 1)]})
    before = state(h.m), dict(h.m.groups[G].deleting)
    h.fail = KafkaStorageError("disk gone")
    for step in (lambda m: share_admin.begin_alter_offsets(m, G, [("t", [(1, 1)])]),
                 lambda m: share_admin.complete_alter_offsets(m, G, {T: frozenset({1})}),
                 lambda m: share_admin.begin_delete_offsets(m, G, ["t"]),
                 lambda m: share_admin.begin_delete_group(m, G),
                 lambda m: share_admin.complete_delete_group(m, G)):
        with pytest.raises(KafkaStorageError):
            step(h.m)
        assert (state(h.m), dict(h.m.groups[G].deleting)) == before

