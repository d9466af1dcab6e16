"""KIP-848 consumer groups: the heartbeat state machine, timers, records and offsets, deterministically.

Clients are played against ``GroupMetadataManager(...).consumer`` with a manual clock and timer and a
fake topics view; every batch the writer receives is kept, so any state can be rebuilt by replaying
the exact bytes into a fresh manager (what a new coordinator does after a failover).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.common import ManualClock
from strata.config.group_config import ConsumerGroupConfig
from strata.coordinator.group import modern_records as mr
from strata.coordinator.group import records as classic_records
from strata.coordinator.group.classic import GroupError, GroupState
from strata.coordinator.group.consumer import ConsumerGroup, MemberState, normalized
from strata.coordinator.group.consumer_manager import HeartbeatRequest
from strata.coordinator.group.manager import (
    CommitRequest,
    GroupConfig,
    GroupMetadataManager,
    JoinRequest,
    Record,
    TxnCommitRequest,
)
from strata.coordinator.group.timer import ManualTimer
from strata.errors import ErrorCode, KafkaError, KafkaStorageError

T = UUID(int=1)
U = UUID(int=2)
SESSION = 45_000  # ConsumerGroupConfig's default group.consumer.session.timeout.ms
REBALANCE = 20_000
GROUP = "g"
Assignment = dict[UUID, frozenset[int]]


def P(*partitions: int, topic: UUID = T) -> Assignment:
    return {topic: frozenset(partitions)} if partitions else {}


class FakeTopics:
    """The broker's topics: name -> (id, partition count); tests add and grow topics."""

    def __init__(self, topics: dict[str, tuple[UUID, int]]) -> None:
        self.by_name = dict(topics)

    def topic(self, name: str) -> tuple[UUID, int] | None:
        return self.by_name.get(name)

    def name_of(self, topic_id: UUID) -> str | None:
        return next((n for n, (t, _) in self.by_name.items() if t == topic_id), None)

    def names(self) -> list[str]:
        return list(self.by_name)


class Harness:
    def __init__(self, topics: dict[str, tuple[UUID, int]] | None = None, **consumer: Any) -> None:
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.topics = FakeTopics(topics if topics is not None else {"t": (T, 2)})
        self.written: list[tuple[str, list[Record]]] = []
        self.fail_with: KafkaError | None = None
        self.m = GroupMetadataManager(GroupConfig(initial_rebalance_delay_ms=0), self.timer, self.clock, self._write,
                                      consumer_config=ConsumerGroupConfig(**consumer), topics=self.topics)

    def _write(self, group_id: str, records: list[Record], producer: object = None) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.written.append((group_id, list(records)))

    def hb(self, member: str, epoch: int, **kw: Any) -> dict[str, Any]:
        return self.m.consumer.heartbeat(HeartbeatRequest(kw.pop("group", GROUP), member, epoch, **kw))

    def join(self, member: str, topics: tuple[str, ...] | None = ("t",), **kw: Any) -> dict[str, Any]:
        kw.setdefault("rebalance_timeout_ms", REBALANCE)
        return self.hb(member, 0, subscribed_topic_names=topics, owned={}, **kw)

    def error(self, member: str, epoch: int, **kw: Any) -> int:
        with pytest.raises(GroupError) as e:
            self.hb(member, epoch, **kw)
        return int(e.value.error_code)

    def group(self, group_id: str = GROUP) -> ConsumerGroup:
        return self.m.consumer.groups[group_id]

    def member(self, member_id: str) -> Any:
        return self.group().members[member_id]

    def batches_since(self, n: int) -> list[list[tuple[Any, Any]]]:
        return [[decoded(k, v) for k, v in records] for _, records in self.written[n:]]

    def replayed(self) -> GroupMetadataManager:
        return replay(self, self.written)


def replay(h: Harness, batches: list[tuple[str, list[Record]]],
           into: GroupMetadataManager | None = None) -> GroupMetadataManager:
    """What a new coordinator does: every record, from the bytes the writer got, into a fresh manager."""
    fresh = into or GroupMetadataManager(GroupConfig(), h.timer, h.clock, lambda *_: None, topics=h.topics)
    for _, records in batches:
        for key, value in records:
            fresh.replay(key, value)
    return fresh


def decoded(key: bytes, value: bytes | None) -> tuple[Any, Any]:
    modern = mr.decode_key(key)
    if modern is not None:
        return modern, None if value is None else mr.decode_value(modern.RECORD_TYPE, value)
    return classic_records.decode_key(key), value


def assignment_of(resp: dict[str, Any]) -> Assignment | None:
    if resp["assignment"] is None:
        return None
    return {tp["topic_id"]: frozenset(tp["partitions"]) for tp in resp["assignment"]["topic_partitions"]}


def check_exclusive(group: ConsumerGroup) -> None:
    """No partition is held (assigned or pending revocation) by two members; the epoch map agrees."""
    holders: dict[tuple[UUID, int], int] = {}
    for m in group.members.values():
        for assignment in (m.assigned, m.pending_revocation):
            for t, ps in assignment.items():
                for p in ps:
                    assert (t, p) not in holders, f"partition {t}-{p} held twice ({m.member_id})"
                    holders[(t, p)] = m.member_epoch
    assert group.partition_epochs == holders


def snapshot(m: GroupMetadataManager) -> dict[str, Any]:
    out = {}
    for gid, g in m.consumer.groups.items():
        members = {mid: replace(x, assigned=normalized(x.assigned), pending_revocation=normalized(x.pending_revocation))
                   for mid, x in g.members.items()}
        out[gid] = (g.group_epoch, g.metadata_hash, g.assignment_epoch, g.dead, members,
                    {mid: normalized(t) for mid, t in g.target.items()}, dict(g.resolved_regexes),
                    dict(g.partition_epochs), dict(g.static_members), g.state())
    return out


def record_types(batch: list[tuple[Any, Any]]) -> list[tuple[int, bool]]:
    """(record type, is tombstone) of each record; classic offsets as 1, classic groups as 2."""
    return [(getattr(k, "RECORD_TYPE", 2 if isinstance(k, classic_records.GroupMetadataKey) else 1), v is None)
            for k, v in batch]


def stable_pair(h: Harness, instance: str | None = None) -> None:
    """A (static when ``instance`` is set) owns p0 of t, B owns p1, both STABLE at epoch 2."""
    h.join("A", instance_id=instance)
    h.join("B")
    h.hb("A", 1, owned=P(0, 1), instance_id=instance)
    h.hb("A", 1, owned=P(0), instance_id=instance)
    h.hb("B", 2, owned=P())
    assert h.member("A").assigned == P(0) and h.member("B").assigned == P(1)
    assert h.group().state().value == "Stable"


# -- 1. the §3.4 worked example ---------------------------------------------------------------------

def test_worked_example_revocation_before_assignment() -> None:
    h = Harness()
    r = h.join("A")
    assert (r["member_epoch"], assignment_of(r)) == (1, P(0, 1))
    check_exclusive(h.group())

    n = len(h.written)
    r = h.join("B")  # group epoch 2, target A={p0}, B={p1}; p1 is still A's
    g = h.group()
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    assert normalized(g.target["A"]) == P(0) and normalized(g.target["B"]) == P(1)
    assert (r["member_epoch"], assignment_of(r)) == (2, {})
    assert h.member("B").state is MemberState.UNRELEASED_PARTITIONS
    assert g.state().value == "Reconciling"
    check_exclusive(g)

    n = len(h.written)
    r = h.hb("A", 1, owned=P(0, 1))  # A must give p1 up first: it keeps epoch 1
    a = h.member("A")
    assert (r["member_epoch"], assignment_of(r)) == (1, P(0))
    assert (a.state, a.member_epoch, normalized(a.pending_revocation)) == (MemberState.UNREVOKED_PARTITIONS, 1, P(1))
    assert h.timer.is_scheduled(("consumer-rebalance", GROUP, "A"))
    [batch] = h.batches_since(n)
    assert record_types(batch) == [(8, False)]
    check_exclusive(g)

    r = h.hb("B", 2, owned=P())  # still unreleased: nothing changes, nothing is written
    assert assignment_of(r) is None and h.member("B").assigned == {}
    check_exclusive(g)

    n = len(h.written)
    r = h.hb("A", 1, owned=P(0))  # revoked: STABLE at the new epoch, p1 free
    a = h.member("A")
    assert r["member_epoch"] == 2 and (a.state, a.previous_member_epoch) == (MemberState.STABLE, 1)
    assert not h.timer.is_scheduled(("consumer-rebalance", GROUP, "A"))
    assert g.current_partition_epoch(T, 1) == -1
    assert [record_types(b) for b in h.batches_since(n)] == [[(8, False)]]
    check_exclusive(g)

    r = h.hb("B", 2, owned=P())
    assert (r["member_epoch"], assignment_of(r)) == (2, P(1))
    assert h.member("B").state is MemberState.STABLE and g.state().value == "Stable"
    assert g.partition_epochs == {(T, 0): 2, (T, 1): 2}
    check_exclusive(g)


# -- 2. epoch checks ------------------------------------------------------------------------------

def test_member_epoch_checks() -> None:
    h = Harness()
    stable_pair(h)  # A: epoch 2, previous 1, assigned {p0}
    assert h.error("A", 3, owned=P(0)) == ErrorCode.FENCED_MEMBER_EPOCH  # greater than the coordinator's
    r = h.hb("A", 1, owned=P(0))  # the response with epoch 2 was lost
    assert r["member_epoch"] == 2
    assert h.error("A", 1, owned=P(0, 1)) == ErrorCode.FENCED_MEMBER_EPOCH
    # owned unknown, but A holds only what it held at epoch 1 (p0, assigned at 1): accepted
    assert h.hb("A", 1)["member_epoch"] == 2
    h.join("C")  # epoch 3; A and C reconcile
    h.hb("A", 2, owned=P(0))
    assert (h.member("A").member_epoch, h.member("A").previous_member_epoch) == (3, 2)
    assert h.error("A", 1, owned=P(0)) == ErrorCode.FENCED_MEMBER_EPOCH  # smaller, not the previous one


def test_a_heartbeat_at_the_previous_epoch_without_owned_partitions_is_fenced_once_the_member_received_more() -> None:
    h = Harness()
    stable_pair(h)  # A: p0 (assigned at 1), B: p1 (at 2)
    h.hb("B", -1)  # B leaves: epoch 3, A's target {p0, p1}, p1 free
    r = h.hb("A", 2, owned=P(0))
    assert (r["member_epoch"], assignment_of(r)) == (3, P(0, 1))
    assert h.member("A").assignment_epochs == {(T, 0): 1, (T, 1): 3}
    # at epoch 2 A did not hold p1: without owned partitions the coordinator cannot tell what it holds
    assert h.error("A", 2) == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.hb("A", 2, owned=P(0))["member_epoch"] == 3  # with them, as Kafka: a subset of the assignment


def quad(h: Harness) -> None:
    """A owns p0, p1 and B owns p2, p3 of t (4 partitions), both STABLE; B was heard from last."""
    h.join("A")
    h.join("B")
    h.hb("A", 1, owned=P(0, 1, 2, 3))
    h.hb("A", 1, owned=P(0, 1))
    h.clock.advance(100)
    h.hb("B", 2, owned=P())
    assert (h.member("A").assigned, h.member("B").assigned) == (P(0, 1), P(2, 3))
    assert h.group().state().value == "Stable"


def test_a_member_whose_assignment_does_not_change_moves_to_the_new_epoch_without_a_heartbeat() -> None:
    h = Harness(topics={"t": (T, 4)})
    quad(h)
    n = len(h.written)
    r = h.join("C")  # epoch 3: 4 partitions over 3 members, one must move
    g = h.group()
    a, b = h.member("A"), h.member("B")
    # the partition moves from A, heard from longest ago (it heartbeats soonest); B keeps both
    assert len(normalized(g.target_of("A"))[T]) == 1
    assert normalized(g.target_of("B")) == P(2, 3)
    assert (b.member_epoch, b.previous_member_epoch, b.state) == (3, 2, MemberState.STABLE)
    assert b.assignment_epochs == {(T, 2): 2, (T, 3): 2}  # kept at the epoch they were received
    assert (a.member_epoch, a.state) == (2, MemberState.STABLE)  # told to revoke at its own heartbeat
    assert r["member_epoch"] == 3 and h.member("C").state is MemberState.UNRELEASED_PARTITIONS
    # C waits for a partition A still holds: it is asked to heartbeat at a tenth of the interval
    assert r["heartbeat_interval"] == 500
    assert 8 in [t for t, _ in record_types(h.batches_since(n)[0])]
    # B's commit racing the bump it did not see is accepted (its partitions since epoch 2)
    assert commit(h, "B", 2, partition=2) == ErrorCode.NONE

    r = h.hb("A", 2)
    kept = normalized(g.target_of("A"))
    assert h.member("A").state is MemberState.UNREVOKED_PARTITIONS and assignment_of(r) == kept
    h.hb("A", 2, owned=kept)  # revoked
    r = h.hb("C", 3, owned=P())
    assert h.member("C").state is MemberState.STABLE and len(assignment_of(r)[T]) == 1
    assert r["heartbeat_interval"] == 5000
    assert g.state().value == "Stable"  # B has not heartbeated since C joined
    check_exclusive(g)
    # B heartbeats at the epoch it knows, without owned partitions, and learns the new one
    r = h.hb("B", 2)
    assert (r["member_epoch"], assignment_of(r)) == (3, P(2, 3))
    # a replayed coordinator has the same members, assignment epochs included
    fresh = h.replayed().consumer.groups[GROUP]
    assert fresh.members == g.members


def test_a_member_not_yet_told_its_epoch_is_not_moved_again() -> None:
    h = Harness(topics={"t": (T, 4), "u": (U, 1)})
    quad(h)
    h.join("C", topics=("u",))  # epoch 3: A and B keep their partitions and move to 3 at once
    assert (h.member("A").member_epoch, h.member("B").member_epoch) == (3, 3)
    assert h.group().state().value == "Stable"
    h.join("D", topics=("u",))  # epoch 4: A and B still know only 2; a second silent move would fence them
    assert (h.member("A").member_epoch, h.member("B").member_epoch) == (3, 3)
    r = h.hb("B", 2)
    assert r["member_epoch"] == 4 and h.member("B").previous_member_epoch == 3


def test_unknown_member_unknown_group_and_full_group() -> None:
    h = Harness()
    assert h.error("A", 1, owned=P()) == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.error("A", -1) == ErrorCode.GROUP_ID_NOT_FOUND
    h.join("A")
    assert h.error("X", 1, owned=P()) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.error("X", -1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.written and GROUP in h.m.consumer.groups and "X" not in h.group().members
    full = Harness(max_size=1)
    full.join("A")
    assert full.error("B", 0, subscribed_topic_names=("t",), owned={}) == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_epoch_zero_rejoin_of_an_existing_member_is_accepted() -> None:
    h = Harness()
    h.join("A")
    h.join("B")
    h.hb("A", 1, owned=P(0, 1))  # UNREVOKED, pending p1
    epoch = h.group().group_epoch
    r = h.join("A")  # the client thought it was fenced: it dropped everything and rejoins (4.2 rule)
    assert (r["member_epoch"], assignment_of(r)) == (2, P(0))
    assert h.member("A").state is MemberState.STABLE and h.group().group_epoch == epoch
    r = h.join("A")  # again, now fully reconciled: same epoch, full assignment
    assert (r["member_epoch"], assignment_of(r)) == (2, P(0))
    assert h.group().group_epoch == epoch
    check_exclusive(h.group())


# -- 3. leave and static membership --------------------------------------------------------------------

def test_leave_removes_the_member_and_the_others_take_its_partitions() -> None:
    h = Harness()
    stable_pair(h)
    n = len(h.written)
    r = h.hb("B", -1)
    assert (r["member_id"], r["member_epoch"]) == ("B", -1)
    [batch] = h.batches_since(n)
    assert record_types(batch) == [(8, True), (7, True), (5, True), (3, False)]
    assert batch[-1][1].epoch == 3
    g = h.group()
    assert "B" not in g.members and g.group_epoch == 3 and g.state().value == "Assigning"
    assert not h.timer.is_scheduled(("consumer-session", GROUP, "B"))
    r = h.hb("A", 2, owned=P(0))
    assert (r["member_epoch"], assignment_of(r)) == (3, P(0, 1))
    assert g.state().value == "Stable"


def test_static_leave_keeps_the_member_and_a_new_id_inherits_its_place() -> None:
    h = Harness()
    stable_pair(h, instance="ia")
    g = h.group()
    n = len(h.written)
    r = h.hb("A", -2, instance_id="ia")
    assert (r["member_id"], r["member_epoch"]) == ("A", -2)
    assert [record_types(b) for b in h.batches_since(n)] == [[(8, False)]]
    a = h.member("A")
    assert (a.member_epoch, normalized(a.assigned)) == (-2, P(0)) and g.group_epoch == 2
    assert g.current_partition_epoch(T, 0) == -2
    assert assignment_of(h.hb("B", 2, owned=P(1))) is None  # B does not get A's partition
    r = h.join("C")  # a rebalance while A is away: A keeps its target and its partition
    assert (r["member_epoch"], assignment_of(r)) == (3, {}) and normalized(g.target["A"]) == P(0)
    assert h.member("A").member_epoch == -2 and g.current_partition_epoch(T, 0) == -2
    check_exclusive(g)
    h.timer.advance(SESSION)  # a static member that does not come back is fenced by its session timeout
    assert "A" not in g.members and g.current_partition_epoch(T, 0) == -1


def test_static_rejoin_with_a_new_member_id_replaces_the_departed_member() -> None:
    h = Harness()
    stable_pair(h, instance="ia")
    target = normalized(h.group().target["A"])
    assert h.error("A2", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=("t",), owned={},
                   instance_id="ia") == ErrorCode.UNRELEASED_INSTANCE_ID  # A has not left
    h.hb("A", -2, instance_id="ia")
    n = len(h.written)
    r = h.join("A2", instance_id="ia")
    g = h.group()
    assert (r["member_epoch"], assignment_of(r)) == (2, P(0)) and g.group_epoch == 2
    assert "A" not in g.members and g.static_members == {"ia": "A2"}
    assert normalized(g.target["A2"]) == target and "A" not in g.target
    a2 = h.member("A2")
    assert (a2.state, normalized(a2.assigned), a2.instance_id) == (MemberState.STABLE, P(0), "ia")
    [batch] = h.batches_since(n)
    tombstoned = [k.member_id for k, v in batch if v is None]
    assert tombstoned == ["A", "A", "A"]
    check_exclusive(g)
    # the replaced member is fenced by its instance id, whether it heartbeats or leaves
    assert h.error("A", 2, owned=P(0), instance_id="ia") == ErrorCode.FENCED_INSTANCE_ID
    assert h.error("A", -1, instance_id="ia") == ErrorCode.FENCED_INSTANCE_ID
    assert h.error("A", -2, instance_id="zz") == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.error("A", 2, owned=P(0), instance_id="zz") == ErrorCode.UNKNOWN_MEMBER_ID
    assert snapshot(h.replayed()) == snapshot(h.m)


# -- 4. timers ------------------------------------------------------------------------------------

def test_session_timeout_fences_a_silent_member() -> None:
    h = Harness()
    stable_pair(h)
    h.timer.advance(SESSION // 2)
    h.hb("A", 2, owned=P(0))
    n = len(h.written)
    h.timer.advance(SESSION // 2)  # B's session (armed at t=0) expires; A's was re-armed
    g = h.group()
    assert set(g.members) == {"A"} and g.group_epoch == 3
    [batch] = h.batches_since(n)
    assert record_types(batch) == [(8, True), (7, True), (5, True), (3, False)]
    assert assignment_of(h.hb("A", 2, owned=P(0))) == P(0, 1)
    assert h.error("B", 2, owned=P(1)) == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("revokes", [False, True])
def test_rebalance_timeout_fences_only_a_member_that_does_not_revoke(revokes: bool) -> None:
    h = Harness()
    h.join("A")
    h.join("B")
    h.hb("A", 1, owned=P(0, 1))  # UNREVOKED, rebalance timer armed
    h.timer.advance(REBALANCE - 1)
    h.hb("A", 1, owned=P(0) if revokes else P(0, 1))  # still owning p1 does not push the timer back
    h.hb("B", 2, owned=P())
    assert h.timer.is_scheduled(("consumer-rebalance", GROUP, "A")) is not revokes
    h.timer.advance(1)
    g = h.group()
    assert set(g.members) == ({"A", "B"} if revokes else {"B"}) and g.group_epoch == (2 if revokes else 3)
    r = h.hb("B", 2, owned=P())
    assert (r["member_epoch"], h.member("B").assigned) == ((2, P(1)) if revokes else (3, P(0, 1)))
    check_exclusive(g)


# -- 5. persistence: live state == state replayed from the written bytes -------------------------------

SUBSCRIPTIONS = [(("a",), None), (("a", "b"), None), (("b",), None), ((), r"r-\d+"), (("a",), r"r-\d+")]
SLOTS = 3  # slot 2 is a static member (instance "i2") that changes member id each time it rejoins


class Client:
    """A consumer: ``owned`` is what it reports, ``latest`` the last assignment it was sent (``ack`` takes it)."""

    def __init__(self, h: Harness, slot: int) -> None:
        self.h, self.instance, self.incarnation = h, "i2" if slot == 2 else None, 0
        self.member_id = f"m{slot}"
        self.epoch, self.owned, self.latest = 0, {}, {}

    def send(self, epoch: int, **kw: Any) -> None:
        try:
            r = self.h.m.consumer.heartbeat(HeartbeatRequest(GROUP, self.member_id, epoch, instance_id=self.instance,
                                                             **kw))
        except GroupError as e:
            assert e.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH), e
            r = {"member_epoch": -1}
        if r["member_epoch"] < 0:  # left, or fenced: start again from scratch
            self.epoch, self.owned, self.latest = 0, {}, {}
            return
        self.epoch = r["member_epoch"]
        self.latest = assignment_of(r) if r.get("assignment") is not None else self.latest

    def join(self, sub: tuple[tuple[str, ...], str | None]) -> None:
        if self.epoch > 0:  # a subscription change
            return self.send(self.epoch, subscribed_topic_names=sub[0], subscribed_topic_regex=sub[1] or "",
                             owned=self.owned)
        if self.instance is not None:
            self.incarnation += 1
            self.member_id = f"s{self.incarnation}"
        self.send(0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=sub[0], subscribed_topic_regex=sub[1] or "",
                  owned={})

    def poll(self, ack: bool) -> None:
        if self.epoch <= 0:
            return self.join(SUBSCRIPTIONS[0])
        if ack:
            self.owned = dict(self.latest)
        self.send(self.epoch, owned=self.owned)

    def leave(self, static: bool) -> None:
        if self.epoch > 0:
            self.send(-2 if static and self.instance else -1)


ACTION = st.one_of(
    st.tuples(st.just("join"), st.integers(0, SLOTS - 1), st.sampled_from(SUBSCRIPTIONS)),
    st.tuples(st.just("poll"), st.integers(0, SLOTS - 1), st.booleans()),
    st.tuples(st.just("poll"), st.integers(0, SLOTS - 1), st.booleans()),
    st.tuples(st.just("leave"), st.integers(0, SLOTS - 1), st.booleans()),
    st.tuples(st.just("fail"), st.integers(0, SLOTS - 1), st.booleans()),
    st.tuples(st.just("tick"), st.sampled_from([1_000, 5_000, 11_000, REBALANCE + 1, SESSION + 1]), st.none()),
    st.tuples(st.just("topic"), st.sampled_from(["grow", "create"]), st.none()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ACTION, min_size=5, max_size=40))
def test_replaying_the_written_records_rebuilds_the_live_state(actions: list[tuple[Any, Any, Any]]) -> None:
    h = Harness({"a": (UUID(int=10), 3), "b": (UUID(int=11), 2), "r-1": (UUID(int=12), 2)})
    clients = [Client(h, i) for i in range(SLOTS)]
    fresh = replay(h, [])
    for kind, arg, extra in actions:
        replayed = len(h.written)
        if kind in ("join", "poll", "leave"):
            getattr(clients[arg], kind)(extra)
        elif kind == "fail":  # a failed write changes nothing
            before = snapshot(h.m)
            h.fail_with = KafkaStorageError("disk gone")
            try:
                clients[arg].poll(extra)
            except KafkaStorageError:
                pass
            h.fail_with = None
            assert snapshot(h.m) == before and len(h.written) == replayed
        elif kind == "tick":
            h.timer.advance(arg)
        elif arg == "grow":
            tid, count = h.topics.by_name["a"]
            h.topics.by_name["a"] = (tid, count + 1)
        else:
            k = len(h.topics.by_name)
            h.topics.by_name[f"r-{k}"] = (UUID(int=100 + k), 1)
        replay(h, h.written[replayed:], fresh)
        assert snapshot(fresh) == snapshot(h.m)
        if GROUP in h.m.consumer.groups:
            check_exclusive(h.group())


# -- 6. a failed write changes nothing ------------------------------------------------------------

def test_failed_write_leaves_the_state_unchanged() -> None:
    h = Harness()
    h.fail_with = KafkaStorageError("disk gone")
    with pytest.raises(KafkaError):
        h.join("A")
    assert GROUP not in h.m.consumer.groups and not h.timer.is_scheduled(("consumer-session", GROUP, "A"))
    h.fail_with = None
    h.join("A")
    before, n = snapshot(h.m), len(h.written)
    h.fail_with = KafkaStorageError("disk gone")
    with pytest.raises(KafkaError):
        h.join("B")
    with pytest.raises(KafkaError):
        h.hb("A", -1)
    assert snapshot(h.m) == before and len(h.written) == n and "B" not in h.group().members
    h.fail_with = None
    h.join("B")
    assert set(h.group().members) == {"A", "B"}


# -- 7. offsets and member epochs ---------------------------------------------------------------------

def commit(h: Harness, member: str, epoch: int, version: int = 9, partition: int = 0) -> int:
    req = CommitRequest(GROUP, member, None, epoch, -1, version, [("t", partition, 5, -1, None)])
    [code] = h.m.commit_offsets(req).values()
    return code


def txn_commit(h: Harness, member: str, epoch: int, partition: int = 0) -> int:
    results, _ = h.m.commit_txn_offsets(TxnCommitRequest(GROUP, "tx", 7, 0, member, None, epoch,
                                                         [("t", partition, 6, -1, None)]))
    [code] = results.values()
    return code


def test_offset_commit_is_checked_against_the_member_epoch() -> None:
    h = Harness()
    stable_pair(h)
    assert commit(h, "A", 2) == ErrorCode.NONE
    assert h.m.offsets[GROUP][("t", 0)].offset == 5
    # KIP-1251: an older epoch commits a partition the member has held since that epoch (A: p0 since 1) ...
    assert commit(h, "A", 1) == ErrorCode.NONE
    assert commit(h, "A", 3) == ErrorCode.STALE_MEMBER_EPOCH  # newer than the member's
    # ... but not one it no longer holds (p1 went to B at 2) nor one received after that epoch
    assert commit(h, "A", 1, partition=1) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit(h, "B", 1, partition=1) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit(h, "B", 2, partition=1) == ErrorCode.NONE
    assert commit(h, "X", 2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(h, "A", 2, version=8) == ErrorCode.UNSUPPORTED_VERSION
    assert commit(h, "", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # an admin commit to a group with members
    assert commit(h, "A", -1) == ErrorCode.STALE_MEMBER_EPOCH
    assert txn_commit(h, "A", 1, partition=1) == ErrorCode.ILLEGAL_GENERATION
    assert txn_commit(h, "A", 1) == ErrorCode.NONE
    assert txn_commit(h, "A", 2) == ErrorCode.NONE
    assert txn_commit(h, "", -1) == ErrorCode.NONE  # TxnOffsetCommit < v3: no member fields
    h.hb("A", -1)
    h.hb("B", -1)
    assert commit(h, "", -1) == ErrorCode.NONE  # empty group: an admin may commit


def test_offset_fetch_validation() -> None:
    h = Harness()
    stable_pair(h)
    h.m.validate_offset_fetch(GROUP, None, -1)
    h.m.validate_offset_fetch(GROUP, "A", 2)
    h.m.validate_offset_fetch("other", "A", 7)  # not a consumer group: nothing to check here
    with pytest.raises(GroupError) as e:
        h.m.validate_offset_fetch(GROUP, "A", 1)
    assert e.value.error_code == ErrorCode.STALE_MEMBER_EPOCH
    with pytest.raises(GroupError) as e:
        h.m.validate_offset_fetch(GROUP, "X", 2)
    assert e.value.error_code == ErrorCode.UNKNOWN_MEMBER_ID


# -- 8. regular expressions --------------------------------------------------------------------------

def test_regex_subscription_resolves_refreshes_and_is_tombstoned_with_its_last_subscriber() -> None:
    ids = {name: UUID(int=i + 1) for i, name in enumerate(["orders-1", "orders-2", "orders-12", "xorders-1"])}
    h = Harness({name: (tid, 1) for name, tid in ids.items()})
    regex = r"orders-\d"
    n = len(h.written)
    r = h.join("A", topics=None, subscribed_topic_regex=regex)
    assert assignment_of(r) == {}  # resolution is asynchronous, as in Kafka: nothing matches until it ran
    h.timer.advance(0)
    resolved = [v for batch in h.batches_since(n) for k, v in batch
                if isinstance(k, mr.ConsumerGroupRegularExpressionKey)]
    assert [v.topics for v in resolved] == [("orders-1", "orders-2")]
    r = h.hb("A", h.member("A").member_epoch, owned=P())
    assert assignment_of(r) == {ids["orders-1"]: frozenset({0}), ids["orders-2"]: frozenset({0})}
    first_version = h.group().resolved_regexes[regex].version
    h.join("B", topics=None, subscribed_topic_regex=regex)  # already resolved: no new resolution needed
    epoch = h.group().group_epoch

    h.topics.by_name["orders-3"] = (UUID(int=99), 1)
    h.timer.advance(5_000)
    h.hb("A", h.member("A").member_epoch, owned=P())
    h.timer.advance(0)
    assert h.group().group_epoch == epoch  # at most one resolution every 10 s
    h.timer.advance(5_001)
    h.hb("A", h.member("A").member_epoch, owned=P())
    h.timer.advance(0)
    g = h.group()
    assert g.group_epoch == epoch + 1 and g.resolved_regexes[regex].topics == {"orders-1", "orders-2", "orders-3"}
    assert g.resolved_regexes[regex].version != first_version  # the topics it was resolved against changed
    h.hb("A", h.member("A").member_epoch, owned=P())
    assert sum(len(t) for t in g.target.values()) == 3

    n = len(h.written)
    h.hb("A", -1)
    assert regex in g.resolved_regexes
    h.hb("B", -1)
    assert regex not in g.resolved_regexes
    assert [(k.regular_expression, v) for batch in h.batches_since(n) for k, v in batch
            if isinstance(k, mr.ConsumerGroupRegularExpressionKey)] == [(regex, None)]
    assert snapshot(h.replayed()) == snapshot(h.m)
    assert h.error("C", 0, rebalance_timeout_ms=REBALANCE, owned={}, subscribed_topic_regex="orders-(") \
        == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_failed_write_does_not_postpone_the_regex_refresh() -> None:
    h = Harness({"r-1": (T, 1)})
    h.join("A", topics=None, subscribed_topic_regex=r"r-\d")
    h.topics.by_name["r-2"] = (U, 1)
    h.timer.advance(10_001)
    h.fail_with = KafkaStorageError("disk gone")
    with pytest.raises(KafkaStorageError):
        h.hb("A", 1, owned=P(0))
    h.fail_with = None
    h.hb("A", 1, owned=P(0))  # the retry must resolve the regex the failed heartbeat could not persist
    h.timer.advance(0)
    assert h.group().resolved_regexes[r"r-\d"].topics == {"r-1", "r-2"}


def test_added_partitions_bump_the_group_epoch_at_the_next_heartbeat() -> None:
    h = Harness()
    h.join("A")
    h.topics.by_name["t"] = (T, 3)
    r = h.hb("A", 1, owned=P(0, 1))
    assert (r["member_epoch"], assignment_of(r), h.group().group_epoch) == (2, P(0, 1, 2), 2)


# -- 9. ListGroups, DescribeGroups, DeleteGroups -------------------------------------------------------

def test_list_and_describe_groups() -> None:
    h = Harness()
    h.join("A")
    entry = {"group_id": GROUP, "protocol_type": "consumer", "group_state": "Stable", "group_type": "consumer"}
    assert h.m.list_groups() == [entry]
    assert h.m.list_groups(states={"stable"}, types={"consumer"}) == [entry]
    assert h.m.list_groups(states={"empty"}) == []
    assert h.m.list_groups(types={"classic"}) == []
    assert h.m.describe_group(GROUP) is None
    d = h.m.consumer.describe(GROUP, h.topics.name_of)
    assert (d["group_state"], d["group_epoch"], d["assignment_epoch"], d["assignor_name"]) == \
        ("Stable", 1, 1, "uniform")
    [member] = d["members"]
    assert member["assignment"] == member["target_assignment"] == {
        "topic_partitions": [{"topic_id": T, "topic_name": "t", "partitions": [0, 1]}]}
    with pytest.raises(GroupError) as e:
        h.m.consumer.describe("nope", h.topics.name_of)
    assert e.value.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    h.hb("A", -1)
    assert h.m.list_groups(states={"empty"}) == [{**entry, "group_state": "Empty"}]


def test_delete_groups() -> None:
    h = Harness()
    stable_pair(h)
    commit(h, "A", 2)
    assert h.m.delete_groups([GROUP]) == [(GROUP, ErrorCode.NON_EMPTY_GROUP)]
    h.hb("A", -1)
    h.hb("B", -1)
    n = len(h.written)
    assert h.m.delete_groups([GROUP]) == [(GROUP, ErrorCode.NONE)]
    [batch] = h.batches_since(n)
    assert record_types(batch) == [(1, True), (6, True), (4, True), (3, True)]
    assert GROUP not in h.m.consumer.groups and GROUP not in h.m.offsets
    assert h.m.list_groups() == [] and h.m.delete_groups([GROUP]) == [(GROUP, ErrorCode.GROUP_ID_NOT_FOUND)]
    fresh = h.replayed()
    assert fresh.consumer.groups == {} and not fresh.offsets.get(GROUP) and GROUP not in fresh.groups


def test_group_tombstones_follow_kafkas_order() -> None:
    h = Harness({"r-1": (T, 2)})
    h.join("A", topics=("r-1",))
    h.join("B", topics=None, subscribed_topic_regex=r"r-\d")
    h.timer.advance(0)  # the regex resolves (an epoch bump); B's next heartbeat computes the new targets
    h.hb("B", h.member("B").member_epoch, owned=P())
    kinds = [type(k).RECORD_TYPE for k, v in h.m.consumer.group_tombstones(h.group()) if v is None]
    assert kinds == [8, 8, 7, 7, 6, 5, 5, 16, 4, 3]


def test_group_tombstones_include_the_legacy_partition_metadata_tombstone() -> None:
    h = Harness()
    h.join("A")
    kinds = [type(k).RECORD_TYPE for k, _ in h.m.consumer.group_tombstones(h.group())]
    assert kinds[-2:] == [4, 3]


# -- 10. offline migration ------------------------------------------------------------------------

def test_empty_classic_group_becomes_a_consumer_group_and_keeps_its_offsets() -> None:
    h = Harness()
    assert commit(h, "", -1, version=8) == ErrorCode.NONE  # a "simple" classic group with offsets only
    assert h.m.groups[GROUP].is_empty
    assert h.error("A", 1, owned=P()) == ErrorCode.GROUP_ID_NOT_FOUND
    n = len(h.written)
    h.join("A")
    [batch] = h.batches_since(n)
    assert batch[0] == (classic_records.GroupMetadataKey(GROUP), None)
    assert GROUP not in h.m.groups and h.group().members.keys() == {"A"}
    assert h.m.fetch_offsets(GROUP, [("t", [0])])[0][1][0]["committed_offset"] == 5
    fresh = h.replayed()
    assert GROUP not in fresh.groups and snapshot(fresh) == snapshot(h.m) and fresh.offsets == h.m.offsets


def classic_join(h: Harness, version: int = 9) -> dict[str, Any]:
    answers: list[dict[str, Any]] = []
    h.m.join_group(JoinRequest(GROUP, "", None, "c", "/h", 10_000, 30_000, "consumer", (("range", b""),), version),
                   answers.append)
    return answers[0] if answers else {}


def test_non_empty_classic_group_is_not_converted_when_upgrades_are_not_allowed() -> None:
    h = Harness(migration_policy="downgrade")
    classic_join(h, version=3)  # JoinGroup v3: a member id at once; the join completes after the 0 ms delay
    h.timer.advance(0)
    assert not h.m.groups[GROUP].is_empty
    assert h.error("A", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=("t",), owned={}) \
        == ErrorCode.GROUP_ID_NOT_FOUND
    assert GROUP not in h.m.consumer.groups


def test_join_group_converts_an_empty_consumer_group_back_to_classic() -> None:
    h = Harness(migration_policy="disabled")  # Kafka: a classic member may not join a non-empty consumer group
    h.join("A")
    assert classic_join(h)["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.group().members.keys() == {"A"}
    commit(h, "A", 1)
    h.hb("A", -1)
    n = len(h.written)
    assert classic_join(h)["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    assert GROUP not in h.m.consumer.groups and h.m.groups[GROUP].state is GroupState.EMPTY
    assert h.m.offsets[GROUP][("t", 0)].offset == 5
    assert [record_types(b) for b in h.batches_since(n)] == [[(6, True), (4, True), (3, True)], [(2, False)]]
    fresh = h.replayed()
    assert fresh.consumer.groups == {} and GROUP in fresh.groups and fresh.offsets[GROUP][("t", 0)].offset == 5


# -- 11. the uniform assignor with well-behaved clients --------------------------------------------------

def test_uniform_assignor_balances_members_joining_one_by_one() -> None:
    h = Harness({"t": (T, 10)})
    owned: dict[str, Assignment] = {}
    epochs: dict[str, int] = {}

    def heartbeat(mid: str) -> None:
        r = h.hb(mid, epochs[mid], owned=owned[mid])
        epochs[mid] = r["member_epoch"]
        got = assignment_of(r)
        if got is not None:
            owned[mid] = got  # revoke (and take) at once
        check_exclusive(h.group())

    for i in range(5):
        mid = f"m{i}"
        r = h.join(mid)
        epochs[mid], owned[mid] = r["member_epoch"], assignment_of(r) or {}
        target = [sum(len(ps) for ps in t.values()) for t in h.group().target.values()]
        assert sum(target) == 10 and max(target) - min(target) <= 1
        for _ in range(4):
            for m in list(owned):
                heartbeat(m)
        g = h.group()
        assert g.state().value == "Stable", g.state()
        assert {x.member_epoch for x in g.members.values()} == {g.group_epoch} == {g.assignment_epoch}
        counts = [len(x.assigned.get(T, ())) for x in g.members.values()]
        assert sum(counts) == 10 and max(counts) - min(counts) <= 1
    assert sorted(len(o.get(T, ())) for o in owned.values()) == [2] * 5
