"""A classic consumer group: its members, state and generation (Kafka's ``ClassicGroup``).

States and their legal predecessors, as in Kafka::

    Empty               <- PreparingRebalance
    PreparingRebalance  <- Empty, CompletingRebalance, Stable
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- any

This module is bookkeeping only: who is a member, who is parked in a JoinGroup or SyncGroup, which
protocol the members can agree on. The decisions (when to rebalance, when a member has timed out,
what to persist) live in :mod:`strata.coordinator.group.manager`. A parked request is a callback
(``join_waiter``/``sync_waiter``) that the manager calls exactly once with the response fields.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from strata.coordinator.group.records import subscribed_topics
from strata.errors import ErrorCode, KafkaError

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""
GROUP_SUBSCRIBED_TO_TOPIC = 86  # not (yet) in strata.errors.ErrorCode

Response = dict[str, Any]
Waiter = Callable[[Response], None]


class GroupError(KafkaError):
    """A group-level failure answered with ``code`` (any Kafka code, including ones strata.errors lacks)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or str(code))
        self.error_code = code  # type: ignore[assignment]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.EMPTY, GroupState.COMPLETING_REBALANCE,
                                               GroupState.STABLE}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}

Protocols = tuple[tuple[str, bytes], ...]


def dedupe_protocols(protocols: Sequence[tuple[str, bytes]]) -> Protocols:
    """Kafka keeps the first protocol of each name (the request collection is keyed by name)."""
    seen: set[str] = set()
    out = []
    for name, metadata in protocols:
        if name not in seen:
            seen.add(name)
            out.append((name, bytes(metadata)))
    return tuple(out)


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_waiter: Waiter | None = field(default=None, repr=False)
    sync_waiter: Waiter | None = field(default=None, repr=False)
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (its list is in preference order)."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def has_satisfied_heartbeat(self) -> bool:
        """New members can expire while parked in JoinGroup; others are covered while parked."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync

    def describe(self, protocol: str | None) -> Response:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "member_metadata": self.metadata(protocol) if protocol is not None else b"",
                "member_assignment": self.assignment}


class ClassicGroup:
    def __init__(self, group_id: str, now_ms: int, *, state: GroupState = GroupState.EMPTY, generation: int = 0,
                 protocol_type: str | None = None, protocol_name: str | None = None, leader_id: str | None = None,
                 current_state_timestamp: int | None = None) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state: GroupState | None = None
        self.current_state_timestamp: int | None = current_state_timestamp if current_state_timestamp is not None \
            else now_ms
        self.generation = generation
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_join: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED, not yet joined
        self.pending_sync: set[str] = set()
        self.supported_protocols: Counter[str] = Counter()
        self.new_member_added = False
        self.subscribed: set[str] | None = None

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state.value}, generation={self.generation}, "
                f"members={list(self.members)})")

    # -- queries --------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty(self) -> bool:
        return self.state is GroupState.EMPTY

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_join

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Unknown subscriptions count as "subscribed" only for consumer-protocol groups (as in Kafka)."""
        if self.subscribed is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            found = subscribed_topics(m.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    # -- protocols ------------------------------------------------------------------------------

    def _candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its preferred protocol among those all members support; most votes wins."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self._candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self.supported_protocols[p] == n for p in names)

    # -- membership -----------------------------------------------------------------------------

    def add(self, member: Member, waiter: Waiter | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"static member {member.group_instance_id} is already in group {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("the group and member's protocol type must be the same")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.join_waiter = waiter
        self.pending_join.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self.supported_protocols.subtract(removed.protocol_names())
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise ValueError(f"pending member {member_id} is already a member")
        self.pending_join.add(member_id)

    def update_member(self, member: Member, protocols: Protocols, rebalance_timeout_ms: int, session_timeout_ms: int,
                      waiter: Waiter | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        member.protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if waiter is not None and member.join_waiter is not None and member.join_waiter is not waiter:
            # The client gave up on its previous JoinGroup (a new connection): release it.
            member.join_waiter({"error_code": ErrorCode.REBALANCE_IN_PROGRESS, "member_id": member.member_id,
                                "generation_id": -1, "leader": "", "protocol_type": None, "protocol_name": None,
                                "members": [], "skip_assignment": False})
        member.join_waiter = waiter

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        old = self.members.pop(old_member_id)
        fenced = {"error_code": ErrorCode.FENCED_INSTANCE_ID, "member_id": old_member_id, "generation_id": -1,
                  "leader": "", "protocol_type": None, "protocol_name": None, "members": [],
                  "skip_assignment": False}
        self.complete_join(old, fenced)
        self.complete_sync(old, {"error_code": ErrorCode.FENCED_INSTANCE_ID, "protocol_type": None,
                                 "protocol_name": None, "assignment": b""})
        new = Member(new_member_id, old.group_instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                     old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment)
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return new

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else promote a member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        """UNKNOWN_MEMBER_ID for a stranger, FENCED_INSTANCE_ID for a stale id of a static member."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            if existing != member_id:
                raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
        if member_id not in self.members:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)

    # -- parked requests ------------------------------------------------------------------------

    def complete_join(self, member: Member, response: Response) -> bool:
        waiter = member.join_waiter
        if waiter is None:
            return False
        member.join_waiter = None
        waiter(response)
        return True

    def complete_sync(self, member: Member, response: Response) -> bool:
        waiter = member.sync_waiter
        if waiter is None:
            return False
        member.sync_waiter = None
        waiter(response)
        return True

    def complete_all(self, code: int) -> None:
        """Answer every parked request with ``code`` (the group is going away)."""
        for m in list(self.members.values()):
            self.complete_join(m, {"error_code": code, "member_id": m.member_id, "generation_id": -1, "leader": "",
                                   "protocol_type": None, "protocol_name": None, "members": [],
                                   "skip_assignment": False})
            self.complete_sync(m, {"error_code": code, "protocol_type": None, "protocol_name": None,
                                   "assignment": b""})

    # -- transitions ----------------------------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise ValueError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.previous_state = self.state
        self.state = state
        self.current_state_timestamp = now_ms

    def init_next_generation(self, now_ms: int) -> None:
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync.clear()

    def join_members(self) -> list[Response]:
        """The member list the leader gets in its JoinGroup response (metadata of the chosen protocol)."""
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(self.protocol_name)} for m in self.members.values()]

    def assignments(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}
