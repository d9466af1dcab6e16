"""The classic group state machine, driven deterministically by a manual clock and timer.

Each test plays clients' JoinGroup/SyncGroup/Heartbeat/LeaveGroup against the manager and checks
the answers and states Kafka's coordinator gives in the same situation. Parked requests are lists
the state machine appends its one answer to.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from strata.common import ManualClock
from strata.coordinator.group.classic import GroupState
from strata.coordinator.group.manager import GroupConfig, GroupMetadataManager, JoinRequest, Record, SyncRequest
from strata.coordinator.group.records import GroupMetadataKey, decode_group_metadata_value, decode_key
from strata.coordinator.group.timer import ManualTimer
from strata.errors import ErrorCode, KafkaError, KafkaStorageError

SESSION = 10_000
REBALANCE = 30_000
RANGE = ("range", b"range-meta")
ROUNDROBIN = ("roundrobin", b"rr-meta")


class Box(list[dict[str, Any]]):
    """A parked request: empty until the state machine answers it (exactly once)."""

    @property
    def answer(self) -> dict[str, Any]:
        assert len(self) == 1, f"expected exactly one answer, got {len(self)}"
        return self[0]


class Harness:
    def __init__(self, **config: Any) -> None:
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.written: list[tuple[str, list[Record]]] = []
        self.fail_with: KafkaError | None = None
        cfg = GroupConfig(**{"initial_rebalance_delay_ms": 0, **config})
        self.m = GroupMetadataManager(cfg, self.timer, self.clock, self._write)

    def _write(self, group_id: str, records: list[Record]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.written.append((group_id, records))

    def group(self, group_id: str = "g") -> Any:
        return self.m.groups[group_id]

    def join(self, member_id: str = "", *, group: str = "g", protocols: tuple[tuple[str, bytes], ...] = (RANGE,),
             version: int = 9, instance: str | None = None, session: int = SESSION, rebalance: int = REBALANCE,
             protocol_type: str = "consumer", client: str = "client") -> Box:
        box = Box()
        self.m.join_group(JoinRequest(group, member_id, instance, client, "/127.0.0.1", session, rebalance,
                                      protocol_type, protocols, version), box.append)
        return box

    def join_new(self, **kw: Any) -> tuple[str, Box]:
        """The two-step v4+ join of a dynamic member: MEMBER_ID_REQUIRED, then join with that id."""
        first = self.join(**kw).answer
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        return first["member_id"], self.join(first["member_id"], **kw)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, *,
             group: str = "g", instance: str | None = None) -> Box:
        box = Box()
        self.m.sync_group(SyncRequest(group, member_id, instance, generation, "consumer", None, assignments or {}),
                          box.append)
        return box

    def heartbeat(self, member_id: str, generation: int, group: str = "g", instance: str | None = None) -> int:
        return self.m.heartbeat(group, member_id, instance, generation)

    def stable_group(self, n: int) -> list[str]:
        """n dynamic members joined one by one and synced: returns their ids, the leader first."""
        ids: list[str] = []
        for _ in range(n):
            mid, box = self.join_new()
            boxes = [box] + [self.join(x) for x in ids]  # the others rejoin (told so by their heartbeats)
            ids.append(mid)
            self.timer.advance(0)
            answers = [b.answer for b in boxes]
            gen, leader = answers[0]["generation_id"], answers[0]["leader"]
            assert all(a["error_code"] == ErrorCode.NONE and a["generation_id"] == gen for a in answers)
            assignment = {x: f"a{i}".encode() for i, x in enumerate(ids)}
            syncs = [self.sync(x, gen, assignment if x == leader else None) for x in ids]
            assert all(s.answer["error_code"] == ErrorCode.NONE for s in syncs)
        assert self.group().state is GroupState.STABLE
        leader = self.group().leader_id
        return [leader] + [x for x in ids if x != leader]


# -- joining ------------------------------------------------------------------------------------

def test_first_member_gets_an_id_then_leads_generation_one() -> None:
    h = Harness()
    first = h.join().answer
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"].startswith("client-")
    assert first["generation_id"] == -1
    assert h.group().state is GroupState.EMPTY and h.group().is_pending_member(first["member_id"])
    box = h.join(first["member_id"])
    assert box == [] and h.group().state is GroupState.PREPARING_REBALANCE  # parked until the delay elapses
    h.timer.advance(0)
    answer = box.answer
    assert answer["error_code"] == ErrorCode.NONE and answer["generation_id"] == 1
    assert answer["leader"] == answer["member_id"] == first["member_id"]
    assert answer["protocol_name"] == "range" and answer["protocol_type"] == "consumer"
    assert answer["members"] == [{"member_id": first["member_id"], "group_instance_id": None,
                                  "metadata": b"range-meta"}]
    assert h.group().state is GroupState.COMPLETING_REBALANCE


def test_old_join_versions_get_a_member_id_at_once() -> None:
    h = Harness()
    box = h.join(version=3)
    h.timer.advance(0)
    assert box.answer["error_code"] == ErrorCode.NONE and box.answer["member_id"]


def test_the_new_group_is_written_before_it_is_used() -> None:
    h = Harness()
    h.join()
    (gid, [(key, value)]), = h.written
    assert gid == "g" and decode_key(key) == GroupMetadataKey("g")
    assert value is not None and decode_group_metadata_value(value).members == ()


def test_storage_failure_on_a_new_group_is_a_coordinator_error() -> None:
    h = Harness()
    h.fail_with = KafkaStorageError("disk gone")
    assert h.join().answer["error_code"] == ErrorCode.NOT_COORDINATOR
    assert "g" not in h.m.groups


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_session_timeout_out_of_bounds(session: int) -> None:
    h = Harness()
    assert h.join(session=session).answer["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_invalid() -> None:
    h = Harness()
    assert h.join(group="").answer["error_code"] == ErrorCode.INVALID_GROUP_ID


def test_unknown_member_id_for_a_missing_group() -> None:
    h = Harness()
    assert h.join("who-is-this").answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_protocol_is_chosen_by_votes_among_protocols_everyone_supports() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    _, a = h.join_new(protocols=(RANGE, ROUNDROBIN))
    _, b = h.join_new(protocols=(ROUNDROBIN, RANGE))
    _, c = h.join_new(protocols=(ROUNDROBIN, RANGE, ("sticky", b"")))
    h.timer.advance(6000)  # the initial delay, extended once because members kept arriving
    assert {x.answer["protocol_name"] for x in (a, b, c)} == {"roundrobin"}  # 2 votes to 1; sticky not common
    leader = [x.answer for x in (a, b, c) if x.answer["members"]]
    assert len(leader) == 1 and {m["metadata"] for m in leader[0]["members"]} == {b"rr-meta"}


def test_inconsistent_protocols_are_refused() -> None:
    h = Harness()
    h.join_new(protocols=(RANGE,))
    assert h.join(protocols=(ROUNDROBIN,)).answer["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocol_type="connect").answer["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert Harness().join(protocols=()).answer["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_initial_rebalance_delay_gathers_members_and_is_extended_by_new_ones() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    a_id, a = h.join_new(rebalance=10_000)
    h.timer.advance(2000)
    b_id, b = h.join_new(rebalance=10_000)  # a new member during the delay: wait another 3 s
    h.timer.advance(1000)
    assert a == [] and b == []
    h.timer.advance(3000)
    assert a.answer["generation_id"] == b.answer["generation_id"] == 1
    assert {m["member_id"] for m in a.answer["members"] + b.answer["members"]} == {a_id, b_id}


def test_max_group_size() -> None:
    h = Harness(max_size=1)
    h.stable_group(1)
    answer = h.join().answer
    assert answer["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED


# -- syncing ------------------------------------------------------------------------------------

def test_followers_wait_for_the_leaders_assignment_which_is_persisted_first() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    a_id, a = h.join_new()
    b_id, b = h.join_new()
    h.timer.advance(2000)  # the initial delay, extended once for the second member
    gen = a.answer["generation_id"]
    leader = a.answer["leader"]
    follower = b_id if leader == a_id else a_id
    f_sync = h.sync(follower, gen)
    assert f_sync == [] and h.group().state is GroupState.COMPLETING_REBALANCE
    before = len(h.written)
    l_sync = h.sync(leader, gen, {leader: b"L", follower: b"F"})
    assert l_sync.answer["assignment"] == b"L" and f_sync.answer["assignment"] == b"F"
    assert f_sync.answer["protocol_name"] == "range"
    assert h.group().state is GroupState.STABLE
    (_, [(key, value)]), = h.written[before:]
    stored = decode_group_metadata_value(value or b"")
    assert stored.generation == gen and stored.leader == leader and stored.protocol == "range"
    assert {m.member_id: m.assignment for m in stored.members} == {leader: b"L", follower: b"F"}
    # a repeated SyncGroup in Stable returns the stored assignment
    assert h.sync(follower, gen).answer["assignment"] == b"F"


def test_failed_assignment_write_is_answered_to_everyone() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    a_id, a = h.join_new()
    b_id, b = h.join_new()
    h.timer.advance(2000)  # the initial delay, extended once for the second member
    gen, leader = a.answer["generation_id"], a.answer["leader"]
    follower = b_id if leader == a_id else a_id
    f_sync = h.sync(follower, gen)
    h.fail_with = KafkaStorageError("disk gone")
    l_sync = h.sync(leader, gen, {leader: b"L", follower: b"F"})
    assert l_sync.answer["error_code"] == f_sync.answer["error_code"] == ErrorCode.NOT_COORDINATOR
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_sync_errors() -> None:
    h = Harness()
    [leader] = h.stable_group(1)
    gen = h.group().generation
    assert h.sync(leader, gen + 1).answer["error_code"] == ErrorCode.ILLEGAL_GENERATION
    assert h.sync("nobody", gen).answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync(leader, gen, group="nope").answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    box = Box()
    h.m.sync_group(SyncRequest("g", leader, None, gen, "connect", None, {}), box.append)
    assert box.answer["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    a_id, a = h.join_new()
    b_id, b = h.join_new()
    h.timer.advance(2000)  # the initial delay, extended once for the second member
    gen, leader = a.answer["generation_id"], a.answer["leader"]
    follower = b_id if leader == a_id else a_id
    h.sync(leader, gen, {leader: b"L", follower: b"F"})
    assert h.group().state is GroupState.STABLE
    for _ in range(REBALANCE // 3000):  # the leader keeps heartbeating, the follower never syncs
        h.timer.advance(3000)
        h.heartbeat(leader, gen)
    h.timer.advance(REBALANCE % 3000 + 1)
    assert follower not in h.group().members
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(leader, gen) == ErrorCode.REBALANCE_IN_PROGRESS


# -- heartbeats and timeouts --------------------------------------------------------------------

def test_heartbeat_answers() -> None:
    h = Harness()
    [leader] = h.stable_group(1)
    gen = h.group().generation
    assert h.heartbeat(leader, gen) == ErrorCode.NONE
    assert h.heartbeat(leader, gen - 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("stranger", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(leader, gen, group="other") == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(leader, gen, group="") == ErrorCode.INVALID_GROUP_ID


def test_new_member_triggers_a_rebalance_that_existing_members_learn_from_heartbeats() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    gen = h.group().generation
    b_id, b = h.join_new()
    assert h.group().state is GroupState.PREPARING_REBALANCE and b == []
    assert h.heartbeat(a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    a_box = h.join(a)
    assert a_box.answer["generation_id"] == b.answer["generation_id"] == gen + 1
    assert a_box.answer["leader"] == a and len(a_box.answer["members"]) == 2 and b.answer["members"] == []


def test_silent_member_is_evicted_after_its_session_timeout() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    gen = h.group().generation
    for _ in range(3):  # a heartbeats every 3 s, b is silent
        h.timer.advance(3000)
        assert h.heartbeat(a, gen) == ErrorCode.NONE
    assert b in h.group().members
    h.timer.advance(3000)
    assert b not in h.group().members  # 12 s > 10 s session timeout
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat(b, gen) == ErrorCode.UNKNOWN_MEMBER_ID
    box = h.join(a)  # only a left: the join completes at once
    assert box.answer["generation_id"] == gen + 1 and [m["member_id"] for m in box.answer["members"]] == [a]
    assert h.heartbeat(a, gen) == ErrorCode.ILLEGAL_GENERATION


def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    gen = h.group().generation
    c_id, c = h.join_new()
    a_box = h.join(a)
    assert h.group().state is GroupState.PREPARING_REBALANCE
    for _ in range(REBALANCE // 3000 - 1):
        h.timer.advance(3000)
        assert h.heartbeat(b, gen) == ErrorCode.REBALANCE_IN_PROGRESS  # alive, but never rejoins
    assert c == [] and a_box == []
    h.timer.advance(3000)  # the rebalance timeout
    assert c.answer["error_code"] == a_box.answer["error_code"] == ErrorCode.NONE
    assert set(h.group().members) == {a, c_id}
    assert h.heartbeat(b, gen) == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_member_that_never_comes_back_expires() -> None:
    h = Harness()
    first = h.join().answer
    assert h.group().is_pending_member(first["member_id"])
    h.timer.advance(SESSION)
    assert not h.group().is_pending_member(first["member_id"])


def test_offset_commit_keeps_the_session_alive() -> None:
    from strata.coordinator.group.manager import CommitRequest

    h = Harness()
    [a] = h.stable_group(1)
    gen = h.group().generation
    for _ in range(5):
        h.timer.advance(SESSION - 1000)
        assert h.m.commit_offsets(CommitRequest("g", a, None, gen, -1, 8, [("t", 0, 1, -1, None)])) == \
            {("t", 0): ErrorCode.NONE}
    assert a in h.group().members


# -- leaving ------------------------------------------------------------------------------------

def test_leader_leaves_and_the_others_rebalance_without_it() -> None:
    h = Harness()
    a, b, c = h.stable_group(3)
    gen = h.group().generation
    code, results = h.m.leave_group("g", [(a, None, "bye")])
    assert code == ErrorCode.NONE and results == [{"member_id": a, "group_instance_id": None, "error_code": 0}]
    assert h.heartbeat(b, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    jb = h.join(b)
    assert jb == []
    jc = h.join(c)
    assert jb.answer["generation_id"] == jc.answer["generation_id"] == gen + 1
    assert {jb.answer["leader"]} == {jc.answer["leader"]} and jb.answer["leader"] in (b, c)


def test_batch_leave_reports_each_member() -> None:
    h = Harness()
    a, b = h.stable_group(2)
    code, results = h.m.leave_group("g", [(a, None, None), ("ghost", None, None), (b, None, None)])
    assert [r["error_code"] for r in results] == [0, ErrorCode.UNKNOWN_MEMBER_ID, 0]
    assert h.group().state is GroupState.EMPTY  # everyone left: generation bumped, written as empty
    _, [(_, value)] = h.written[-1]
    assert decode_group_metadata_value(value or b"").members == ()
    assert h.m.leave_group("missing", [(a, None, None)])[0] == ErrorCode.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    gen = h.group().generation
    h.m.leave_group("g", [(a, None, None)])
    assert h.group().state is GroupState.EMPTY and h.group().generation == gen + 1
    assert h.group().protocol_name is None and h.group().leader_id is None


# -- static membership --------------------------------------------------------------------------

def test_static_member_rejoining_with_a_new_id_replaces_the_old_one_without_rebalance() -> None:
    h = Harness()
    box = h.join(instance="i-1")  # static members get their id at once, even on v4+
    h.timer.advance(0)
    old = box.answer["member_id"]
    assert old.startswith("i-1-")
    gen = box.answer["generation_id"]
    h.sync(old, gen, {old: b"A"})
    again = h.join(instance="i-1")  # restarted process: unknown member id, same instance id
    answer = again.answer
    new = answer["member_id"]
    assert new != old and answer["generation_id"] == gen and answer["skip_assignment"] is True
    assert h.group().state is GroupState.STABLE
    assert h.heartbeat(old, gen, instance="i-1") == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(new, gen, instance="i-1") == ErrorCode.NONE
    assert h.sync(new, gen, instance="i-1").answer["assignment"] == b"A"  # the assignment carried over


def test_static_member_removed_by_instance_id_alone() -> None:
    h = Harness()
    box = h.join(instance="i-1")
    h.timer.advance(0)
    h.sync(box.answer["member_id"], box.answer["generation_id"], {})
    code, results = h.m.leave_group("g", [("", "i-1", None), ("", "i-2", None)])
    assert [r["error_code"] for r in results] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
    assert h.group().state is GroupState.EMPTY


def test_static_member_is_not_dropped_for_missing_a_rebalance() -> None:
    h = Harness()
    s = h.join(instance="i-1")
    h.timer.advance(0)
    s_id, gen = s.answer["member_id"], s.answer["generation_id"]
    h.sync(s_id, gen, {s_id: b"S"})
    d_id, d = h.join_new()  # a dynamic member joins; the static one does not rejoin in time
    for _ in range(REBALANCE // 3000 + 1):
        h.timer.advance(3000)
        h.heartbeat(s_id, gen, instance="i-1")
    assert d.answer["error_code"] == ErrorCode.NONE
    assert set(h.group().members) == {s_id, d_id}  # kept, unlike a dynamic member


# -- describe, list, delete ---------------------------------------------------------------------

def test_describe_shows_metadata_only_when_stable() -> None:
    h = Harness()
    [a] = h.stable_group(1)
    described = h.m.describe_group("g")
    assert described is not None and described["group_state"] == "Stable" and described["protocol_data"] == "range"
    assert described["members"][0]["member_metadata"] == b"range-meta"
    h.join_new()
    described = h.m.describe_group("g")
    assert described is not None and described["group_state"] == "PreparingRebalance"
    assert described["protocol_data"] == "" and described["members"][0]["member_metadata"] == b""
    assert h.m.describe_group("missing") is None


def test_list_groups_filters() -> None:
    h = Harness()
    h.stable_group(1)
    h.join(group="other")
    assert {g["group_id"] for g in h.m.list_groups()} == {"g", "other"}
    assert [g["group_id"] for g in h.m.list_groups(states={"stable"})] == ["g"]
    assert [g["group_id"] for g in h.m.list_groups(states={"empty"})] == ["other"]
    assert h.m.list_groups(types={"consumer"}) == []
    assert len(h.m.list_groups(types={"classic"})) == 2


def test_delete_groups() -> None:
    from strata.coordinator.group.manager import CommitRequest

    h = Harness()
    h.stable_group(1)
    h.m.commit_offsets(CommitRequest("simple", "", None, -1, -1, 8, [("t", 0, 5, -1, None)]))
    results = dict(h.m.delete_groups(["g", "simple", "missing"]))
    assert results == {"g": ErrorCode.NON_EMPTY_GROUP, "simple": ErrorCode.NONE,
                       "missing": ErrorCode.GROUP_ID_NOT_FOUND}
    gid, records = h.written[-1]
    assert gid == "simple" and [v for _, v in records] == [None, None]  # offset and group tombstones
    assert "simple" not in h.m.groups and "simple" not in h.m.offsets


def test_unload_answers_parked_requests() -> None:
    h = Harness(initial_rebalance_delay_ms=5000)
    _, box = h.join_new()
    h.m.unload()
    assert box.answer["error_code"] == ErrorCode.NOT_COORDINATOR
    assert h.m.groups == {}
    h.timer.advance(10_000)  # nothing fires after unload


def test_replace_keeps_join_request_shape() -> None:
    # JoinRequest is frozen: tests build variants with dataclasses.replace
    req = JoinRequest("g", "", None, "c", "/h", SESSION, REBALANCE, "consumer", (RANGE,), 9)
    assert replace(req, member_id="x").member_id == "x"
