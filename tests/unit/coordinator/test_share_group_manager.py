"""The KIP-932 share-group state machine (``share_manager``): initialization before assignment, sharing
partitions among members, no revocation phase, leave and session expiry, and replay equal to live state."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from strata.common import ManualClock
from strata.coordinator.group import modern_records as mr
from strata.coordinator.group.classic import GroupError
from strata.coordinator.group.share_manager import ShareGroupManager, ShareGroupSettings
from strata.coordinator.group.timer import ManualTimer
from strata.errors import ErrorCode, KafkaStorageError

T = UUID(int=1)
G = "sg"


class Topics:
    def __init__(self, topics: dict[str, tuple[UUID, int]]) -> None:
        self.by_name = topics

    def topic(self, name: str) -> tuple[UUID, int] | None:
        return self.by_name.get(name)

    def name_of(self, topic_id: UUID) -> str | None:
        return next((n for n, (t, _) in self.by_name.items() if t == topic_id), None)

    def names(self) -> list[str]:
        return list(self.by_name)


class Harness:
    def __init__(self, partitions: int = 2, initialize: bool = True) -> None:
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.topics = Topics({"t": (T, partitions)})
        self.written: list[list[tuple[bytes, bytes | None]]] = []
        self.fail: Exception | None = None
        self.initialize = initialize
        self.asked: list[tuple[dict[UUID, frozenset[int]], int]] = []
        self.m = ShareGroupManager(ShareGroupSettings(session_timeout_ms=10_000, initialize_retry_interval_ms=5_000),
                                   self.timer, self.clock, self.topics, self.write, self.init)

    def write(self, _group: str, records: list[tuple[bytes, bytes | None]]) -> int:
        if self.fail is not None:
            raise self.fail
        self.written.append(records)
        return len(self.written)

    def init(self, _group: str, todo: dict[UUID, frozenset[int]], epoch: int, done: Any) -> None:
        self.asked.append((todo, epoch))
        done(todo if self.initialize else {})

    def hb(self, member: str, epoch: int, topics: tuple[str, ...] | None = None) -> dict[str, Any]:
        return self.m.heartbeat(G, member, epoch, None, topics, "client", "/127.0.0.1")

    def join(self, member: str) -> dict[str, Any]:
        return self.hb(member, 0, ("t",))

    def poll(self, member: str) -> dict[str, Any]:
        return self.hb(member, self.m.groups[G].members[member].member_epoch)

    def assigned(self, member: str) -> set[int]:
        return set(self.m.groups[G].members[member].assigned.get(T, ()))

    def replayed(self) -> ShareGroupManager:
        fresh = ShareGroupManager(ShareGroupSettings(), ManualTimer(ManualClock()), ManualClock(), self.topics,
                                  lambda *_: None, lambda *_: None)
        for batch in self.written:
            for key, value in batch:
                k = mr.decode_key(key)
                fresh.apply(k, None if value is None else mr.decode_value(k.RECORD_TYPE, value))
        return fresh


def state(m: ShareGroupManager) -> Any:
    g = m.groups[G]
    return (g.group_epoch, g.assignment_epoch, g.metadata_hash, dict(g.members), dict(g.target),
            dict(g.initializing), dict(g.initialized))


def test_partitions_are_assigned_only_once_initialized() -> None:
    h = Harness()
    first = h.join("A")
    assert first["assignment"] == {"topic_partitions": []}  # nothing initialized yet: Kafka answers the same
    assert h.asked == [({T: frozenset({0, 1})}, 1)]  # state epoch = the group epoch
    assert h.m.groups[G].initialized == {T: ("t", frozenset({0, 1}))}
    second = h.poll("A")
    assert second["assignment"] == {"topic_partitions": [{"topic_id": T, "partitions": [0, 1]}]}
    assert second["member_epoch"] == 2
    assert state(h.replayed()) == state(h.m)


def test_members_share_partitions_when_there_are_more_members_than_partitions() -> None:
    h = Harness(partitions=2)
    for m in "ABCDE":
        h.join(m)
    for _ in range(3):
        for m in "ABCDE":
            h.poll(m)
    owners = {p: [m for m in "ABCDE" if p in h.assigned(m)] for p in (0, 1)}
    assert all(h.assigned(m) for m in "ABCDE"), "every member gets a partition"
    assert sorted(len(o) for o in owners.values()) == [3, 3] or sorted(len(o) for o in owners.values()) == [2, 3]
    assert state(h.replayed()) == state(h.m)


def test_no_revocation_phase_and_leave_moves_partitions() -> None:
    h = Harness(partitions=4)
    h.join("A")
    h.poll("A")
    assert h.assigned("A") == {0, 1, 2, 3}
    h.join("B")
    h.poll("B")
    h.poll("A")  # A jumps straight to its new target: no UNREVOKED state in share groups
    assert len(h.assigned("A")) == 2 and len(h.assigned("B")) == 2
    epoch = h.m.groups[G].group_epoch
    assert h.hb("B", -1)["member_epoch"] == -1
    assert h.m.groups[G].group_epoch == epoch + 1
    h.poll("A")
    assert h.assigned("A") == {0, 1, 2, 3}
    assert state(h.replayed()) == state(h.m)


def test_epoch_checks_and_unknown_members() -> None:
    h = Harness()
    h.join("A")
    h.poll("A")
    epoch = h.m.groups[G].members["A"].member_epoch
    with pytest.raises(GroupError) as e:
        h.hb("A", epoch + 1)
    assert e.value.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(GroupError) as e:
        h.hb("Z", 3)
    assert e.value.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(GroupError) as e:
        h.m.heartbeat("other", "A", 1, None, None, "c", "h")
    assert e.value.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert h.hb("A", 0, ("t",))["member_epoch"] == epoch  # epoch 0 rejoins


def test_session_timeout_fences() -> None:
    h = Harness()
    h.join("A")
    h.join("B")
    h.timer.advance(5_000)
    h.poll("A")
    h.timer.advance(5_001)
    assert set(h.m.groups[G].members) == {"A"}


def test_failed_initialization_is_retried_after_the_interval() -> None:
    h = Harness(initialize=False)
    h.join("A")
    assert h.m.groups[G].initializing == {T: ("t", frozenset({0, 1}))} and h.m.groups[G].initialized == {}
    h.poll("A")
    assert len(h.asked) == 1  # asked recently: not again yet
    h.initialize = True
    h.timer.advance(5_001)
    h.poll("A")
    assert len(h.asked) == 2 and h.m.groups[G].initialized == {T: ("t", frozenset({0, 1}))}
    assert h.poll("A")["assignment"] == {"topic_partitions": [{"topic_id": T, "partitions": [0, 1]}]}


def test_a_failed_write_changes_nothing() -> None:
    h = Harness()
    h.fail = KafkaStorageError("disk gone")
    with pytest.raises(KafkaStorageError):
        h.join("A")
    assert G not in h.m.groups and h.asked == []


def test_group_tombstones_in_kafkas_order() -> None:
    h = Harness()
    h.join("A")
    h.poll("A")
    kinds = [type(k).RECORD_TYPE for k, v in h.m.group_tombstones(h.m.groups[G])]
    assert kinds == [14, 13, 12, 10, 15, 11]
