"""Committed offsets: OffsetCommit validation, OffsetFetch, OffsetDelete, expiry, and reload.

Reload is checked the way the broker does it: every record the manager wrote is replayed, in
order, into a fresh manager, which must end up with the same groups and offsets (tombstones
included).
"""

from __future__ import annotations

import pytest
from test_group_state_machine import SESSION, Harness

from strata.coordinator.group.classic import GROUP_SUBSCRIBED_TO_TOPIC, GroupState
from strata.coordinator.group.manager import CommitRequest, GroupMetadataManager, OffsetAndMetadata
from strata.coordinator.group.records import (
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from strata.errors import ErrorCode, KafkaStorageError, RecordTooLargeError

DAY_MS = 24 * 3600 * 1000


def commit(h: Harness, group: str = "g", member: str = "", generation: int = -1, *, version: int = 8,
           retention: int = -1, instance: str | None = None,
           parts: list[tuple[str, int, int, int, str | None]] | None = None) -> dict[tuple[str, int], int]:
    return h.m.commit_offsets(CommitRequest(group, member, instance, generation, retention, version,
                                            parts if parts is not None else [("t", 0, 10, 2, "meta")]))


def consumer_subscription(*topics: str) -> bytes:
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + (-1).to_bytes(4, "big", signed=True)


def reload(h: Harness) -> GroupMetadataManager:
    fresh = GroupMetadataManager(h.m.config, h.timer, h.clock, lambda g, r: None)
    for _, records in h.written:
        for key, value in records:
            fresh.replay(key, value)
    fresh.on_loaded()
    return fresh


# -- OffsetCommit -------------------------------------------------------------------------------

def test_simple_commit_creates_an_empty_group_without_protocol() -> None:
    h = Harness()
    assert commit(h) == {("t", 0): ErrorCode.NONE}
    group = h.group()
    assert group.state is GroupState.EMPTY and group.protocol_type is None
    (gid, [(key, value)]), = h.written
    assert decode_key(key) == OffsetCommitKey("g", "t", 0)
    stored = decode_offset_commit_value(value or b"")
    assert (stored.offset, stored.leader_epoch, stored.metadata) == (10, 2, "meta")
    assert stored.commit_timestamp == h.clock.milliseconds()
    assert value is not None and value[:2] == b"\x00\x03"  # value version 3


def test_commit_with_retention_writes_value_v1_with_its_expiry() -> None:
    h = Harness()
    commit(h, version=2, retention=60_000)
    _, [(_, value)] = h.written[-1]
    assert value is not None and value[:2] == b"\x00\x01"
    assert decode_offset_commit_value(value).expire_timestamp == h.clock.milliseconds() + 60_000


def test_member_commits_are_checked_against_the_generation() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    gen = h.group().generation
    assert commit(h, member=a, generation=gen) == {("t", 0): ErrorCode.NONE}
    assert commit(h, member=a, generation=gen - 1) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert commit(h, member="stranger", generation=gen) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # a standalone commit into a group with members is refused
    assert commit(h) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_commit_during_completing_rebalance_asks_to_retry() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    h.join_new()
    j = h.join(a)
    gen = j.answer["generation_id"]
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert commit(h, member=a, generation=gen) == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}


@pytest.mark.parametrize("version, code", [(8, ErrorCode.ILLEGAL_GENERATION), (9, ErrorCode.GROUP_ID_NOT_FOUND)])
def test_member_commit_to_a_missing_group(version: int, code: int) -> None:
    h = Harness()
    assert commit(h, member="m", generation=3, version=version) == {("t", 0): code}
    assert "g" not in h.m.groups


def test_metadata_too_large_is_per_partition() -> None:
    h = Harness(offset_metadata_max_bytes=4)
    result = commit(h, parts=[("t", 0, 1, -1, "small"), ("t", 1, 1, -1, "ok"), ("t", 2, 1, -1, None)])
    assert result == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, ("t", 1): 0, ("t", 2): 0}
    assert set(h.m.offsets["g"]) == {("t", 1), ("t", 2)}
    assert h.m.offsets["g"][("t", 2)].metadata == ""  # null metadata is stored as ""


@pytest.mark.parametrize("error, code", [(KafkaStorageError("eio"), ErrorCode.NOT_COORDINATOR),
                                         (RecordTooLargeError("big"), ErrorCode.INVALID_COMMIT_OFFSET_SIZE)])
def test_failed_write_is_not_acknowledged_nor_stored(error: Exception, code: int) -> None:
    h = Harness()
    h.fail_with = error  # type: ignore[assignment]
    assert commit(h) == {("t", 0): code}
    assert h.m.offsets.get("g", {}) == {}


def test_empty_group_id() -> None:
    assert commit(Harness(), group="") == {("t", 0): ErrorCode.INVALID_GROUP_ID}


# -- OffsetFetch --------------------------------------------------------------------------------

def test_fetch_specific_and_all_partitions() -> None:
    h = Harness()
    commit(h, parts=[("t", 0, 10, 2, "m0"), ("t", 1, 11, -1, None), ("u", 0, 5, -1, "")])
    got = h.m.fetch_offsets("g", [("t", [0, 1, 2])])
    assert got == [("t", [
        {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 2, "metadata": "m0", "error_code": 0},
        {"partition_index": 1, "committed_offset": 11, "committed_leader_epoch": -1, "metadata": "", "error_code": 0},
        {"partition_index": 2, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": 0},
    ])]
    every = h.m.fetch_offsets("g", None)
    assert [(t, [p["partition_index"] for p in ps]) for t, ps in every] == [("t", [0, 1]), ("u", [0])]
    assert h.m.fetch_offsets("missing", None) == []
    assert h.m.fetch_offsets("missing", [("t", [0])])[0][1][0]["committed_offset"] == -1


# -- OffsetDelete -------------------------------------------------------------------------------

def test_offset_delete_for_empty_groups_and_unsubscribed_topics() -> None:
    h = Harness()
    commit(h, parts=[("t", 0, 1, -1, None), ("t", 1, 1, -1, None)])
    code, results = h.m.delete_offsets("g", [("t", [0, 5])])
    assert code == ErrorCode.NONE and results == [("t", [(0, 0), (5, 0)])]
    assert set(h.m.offsets["g"]) == {("t", 1)}
    _, records = h.written[-1]
    assert records == [(encode_offset_commit_key("g", "t", 0), None)]  # one tombstone: p5 had no offset
    assert h.m.delete_offsets("missing", [("t", [0])])[0] == ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_delete_with_members_only_for_topics_they_do_not_consume() -> None:
    h = Harness()
    mid, box = h.join_new(protocols=(("range", consumer_subscription("t")),))
    h.timer.advance(0)
    gen = box.answer["generation_id"]
    h.sync(mid, gen, {mid: b""})
    commit(h, member=mid, generation=gen, parts=[("t", 0, 1, -1, None), ("old", 0, 1, -1, None)])
    code, results = h.m.delete_offsets("g", [("t", [0]), ("old", [0])])
    assert code == ErrorCode.NONE
    assert results == [("t", [(0, GROUP_SUBSCRIBED_TO_TOPIC)]), ("old", [(0, 0)])]
    assert set(h.m.offsets["g"]) == {("t", 0)}


def test_offset_delete_refused_for_non_consumer_groups_with_members() -> None:
    h = Harness()
    mid, box = h.join_new(protocol_type="connect")
    h.timer.advance(0)
    assert h.m.delete_offsets("g", [("t", [0])])[0] == ErrorCode.NON_EMPTY_GROUP


# -- reload -------------------------------------------------------------------------------------

def test_reload_rebuilds_groups_and_offsets_from_the_records() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    gen = h.group().generation
    commit(h, member=a, generation=gen, parts=[("t", 0, 7, 1, "x"), ("t", 1, 8, -1, None)])
    commit(h, group="simple", parts=[("t", 0, 3, -1, None)])
    commit(h, group="gone", parts=[("t", 0, 3, -1, None)])
    assert dict(h.m.delete_groups(["gone"])) == {"gone": 0}
    h.m.delete_offsets("simple", [("t", [0])])
    commit(h, group="simple", parts=[("t", 1, 4, -1, None)])

    fresh = reload(h)
    assert set(fresh.groups) == {"g", "simple"}
    g = fresh.groups["g"]
    assert g.state is GroupState.STABLE and g.generation == gen and g.leader_id == a
    assert g.protocol_type == "consumer" and g.protocol_name == "range"
    assert {m.member_id: m.assignment for m in g.members.values()} == {a: b"a0", b: b"a1"}
    assert fresh.offsets["g"] == h.m.offsets["g"]
    assert fresh.offsets["simple"] == {("t", 1): OffsetAndMetadata(4, -1, "", h.clock.milliseconds())}
    assert fresh.groups["simple"].protocol_type is None and fresh.groups["simple"].state is GroupState.EMPTY


def test_loaded_members_must_heartbeat_within_their_session() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    gen = h.group().generation
    fresh = reload(h)
    assert fresh.heartbeat("g", a, None, gen) == ErrorCode.NONE  # a carries on after the restart
    h.timer.advance(SESSION - 1000)
    assert fresh.heartbeat("g", a, None, gen) == ErrorCode.NONE
    h.timer.advance(2000)  # b never came back
    assert set(fresh.groups["g"].members) == {a}
    assert fresh.heartbeat("g", a, None, gen) == ErrorCode.REBALANCE_IN_PROGRESS


def test_last_record_wins_and_tombstones_delete() -> None:
    h = Harness()
    m = GroupMetadataManager(h.m.config, h.timer, h.clock, lambda g, r: None)
    from strata.coordinator.group.records import GroupMetadataValue, OffsetCommitValue

    key = encode_offset_commit_key("g", "t", 0)
    m.replay(key, encode_offset_commit_value(OffsetCommitValue(1)))
    m.replay(key, encode_offset_commit_value(OffsetCommitValue(2), version=1))
    assert m.offsets["g"][("t", 0)].offset == 2
    m.replay(key, None)
    assert m.offsets["g"] == {}
    gkey = encode_group_metadata_key("g")
    m.replay(gkey, encode_group_metadata_value(GroupMetadataValue("consumer", 4, None, None)))
    assert m.groups["g"].generation == 4 and m.groups["g"].state is GroupState.EMPTY
    m.replay(gkey, None)
    assert "g" not in m.groups
    m.replay(b"\x00\x11whatever", b"ignored")  # streams-group records (type 17) are skipped


# -- expiry -------------------------------------------------------------------------------------

def test_offsets_of_simple_groups_expire_by_commit_time_and_the_group_goes_with_them() -> None:
    h = Harness(offsets_retention_ms=DAY_MS)
    commit(h, group="old", parts=[("t", 0, 1, -1, None)])
    h.clock.advance(DAY_MS // 2)
    commit(h, group="young", parts=[("t", 0, 1, -1, None)])
    h.clock.advance(DAY_MS // 2)
    assert h.m.expire_offsets() == 1
    assert "old" not in h.m.groups and set(h.m.offsets["young"]) == {("t", 0)}
    _, records = h.written[-1]
    assert [v for _, v in records] == [None, None]  # offset tombstone, then group tombstone


def test_offsets_of_empty_consumer_groups_expire_from_when_the_group_emptied() -> None:
    h = Harness(offsets_retention_ms=DAY_MS)
    [a] = h.stable_group(1)
    commit(h, member=a, generation=h.group().generation)
    h.clock.advance(DAY_MS)  # committed a day ago, but the group only now becomes empty
    h.m.leave_group("g", [(a, None, None)])
    assert h.m.expire_offsets() == 0
    h.clock.advance(DAY_MS)
    assert h.m.expire_offsets() == 1 and "g" not in h.m.groups


def test_stable_groups_keep_offsets_of_topics_they_consume() -> None:
    h = Harness(offsets_retention_ms=1000)
    mid, box = h.join_new(protocols=(("range", consumer_subscription("t")),))
    h.timer.advance(0)
    gen = box.answer["generation_id"]
    h.sync(mid, gen, {mid: b""})
    commit(h, member=mid, generation=gen, parts=[("t", 0, 1, -1, None), ("old", 0, 1, -1, None)])
    h.clock.advance(5000)
    h.m.heartbeat("g", mid, None, gen)
    assert h.m.expire_offsets() == 1
    assert set(h.m.offsets["g"]) == {("t", 0)} and "g" in h.m.groups


def test_deleting_a_topic_tombstones_its_offsets_in_every_group() -> None:
    """Kafka's onPartitionsDeleted: a recreated topic must not inherit the old topic's offsets."""
    h = Harness()
    commit(h, group="a", parts=[("gone", 0, 5, -1, None), ("kept", 0, 7, -1, None)])
    commit(h, group="b", parts=[("gone", 1, 9, -1, None)])
    assert h.m.on_topic_deleted("gone") == 2
    assert set(h.m.offsets["a"]) == {("kept", 0)} and h.m.offsets["b"] == {}
    fresh = reload(h)
    assert set(fresh.offsets.get("a", {})) == {("kept", 0)} and not fresh.offsets.get("b")
