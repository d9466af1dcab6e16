"""The KIP-848 consumer group: its members, target assignment and the reconciliation of each member.

A consumer group is the server-side half of Kafka 4's consumer rebalance protocol. Instead of a
leader client computing the assignment in a synchronised JoinGroup/SyncGroup round, the coordinator
keeps three things per group and moves each member towards them one heartbeat at a time:

* the **group epoch**, bumped whenever the group's subscriptions change (a member joins, leaves, or
  subscribes to something else, or the subscribed topics' partitions change);
* the **target assignment** at the assignment epoch, computed by a server-side assignor whenever the
  group epoch is ahead of it;
* each member's **current assignment** at its member epoch, which the member reconciles towards the
  target: partitions it must give up are revoked first (the member keeps its epoch, in
  UNREVOKED_PARTITIONS, until its heartbeat no longer reports them), and only then does it move to the
  target epoch and receive what is free. A partition still held by another member is withheld
  (UNRELEASED_PARTITIONS) until that member has released it, which is what guarantees no partition is
  ever owned by two members at once, without any global barrier.

This module is the model and the pure reconciliation step (Kafka's ``ConsumerGroup``,
``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``); :mod:`.consumer_manager` drives it from
heartbeats and timers and persists every change as Kafka's records.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from uuid import UUID

Assignment = Mapping[UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}
NO_EPOCH = -1  # a partition no member holds


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` (persisted as the int8 in ConsumerGroupCurrentMemberAssignmentValue)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    """What ListGroups and ConsumerGroupDescribe show (Kafka's ``ConsumerGroup.ConsumerGroupState``)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol inside a consumer group (KIP-848 online upgrade)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member, immutable: every change is a new value (compared to decide what to persist)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251 (Kafka 4.3): the member epoch at which each assigned or pending partition was given to the
    # member; a partition missing here was given at ``member_epoch`` (a record of a Kafka before 4.3)
    assignment_epochs: Mapping[tuple[UUID, int], int] = field(default_factory=dict)

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def metadata_equals(self, other: ConsumerGroupMember) -> bool:
        """Whether the persisted subscription record (ConsumerGroupMemberMetadata) would be the same."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic) == (
            other.instance_id, other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names,
            other.subscribed_topic_regex, other.rebalance_timeout_ms, other.server_assignor, other.classic)

    def assignment_equals(self, other: ConsumerGroupMember) -> bool:
        """Whether the persisted current assignment (ConsumerGroupCurrentMemberAssignment) would be the same."""
        return (self.member_epoch, self.previous_member_epoch, self.state, normalized(self.assigned),
                normalized(self.pending_revocation), self.held_epochs()) == (
            other.member_epoch, other.previous_member_epoch, other.state, normalized(other.assigned),
            normalized(other.pending_revocation), other.held_epochs())

    def held_epochs(self) -> dict[tuple[UUID, int], int]:
        """Every held partition's assignment epoch, explicit (what the record stores)."""
        return {(t, p): self.assignment_epochs.get((t, p), self.member_epoch)
                for assignment in (self.assigned, self.pending_revocation) for t, ps in assignment.items()
                for p in ps}

    def assignment_epoch(self, topic_id: UUID, partition: int) -> int | None:
        """The epoch at which the member received a partition it holds (assigned or pending revocation),
        None when it holds no such partition (Kafka 4.3's ``assignmentEpoch``/``pendingRevocationEpoch``)."""
        if partition in self.assigned.get(topic_id, frozenset()) \
                or partition in self.pending_revocation.get(topic_id, frozenset()):
            return self.assignment_epochs.get((topic_id, partition), self.member_epoch)
        return None

    def knows_its_assignment_at(self, epoch: int) -> bool:
        """Whether a member that last heard of ``epoch`` holds exactly what this state says: STABLE, nothing
        pending, no partition received after ``epoch``. A heartbeat at that epoch is then safe to accept even
        without its owned partitions (the coordinator moved the member on without changing its assignment)."""
        return self.state is MemberState.STABLE and not any(self.pending_revocation.values()) and all(
            self.assignment_epochs.get((t, p), self.member_epoch) <= epoch
            for t, ps in self.assigned.items() for p in ps)

    def with_epoch(self, epoch: int) -> ConsumerGroupMember:
        """Kafka's ``updateMemberEpoch``: the old epoch becomes the previous one."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch)


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """A regular expression's matching topics (ConsumerGroupRegularExpression), resolved off the heartbeat."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(slots=True)
class ConsumerGroup:
    """A consumer group's state as its records say (replay builds it; the manager reads it)."""

    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    # (topic id, partition) -> epoch of the member holding it, assigned or pending revocation
    partition_epochs: dict[tuple[UUID, int], int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    dead: bool = False

    # -- reading -------------------------------------------------------------------------------

    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def current_partition_epoch(self, topic_id: UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), NO_EPOCH)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, EMPTY_ASSIGNMENT)

    def subscribed_topic_names(self) -> set[str]:
        """Every topic some member subscribes to, by name or through a resolved regex."""
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                resolved = self.resolved_regexes.get(m.subscribed_topic_regex)
                if resolved is not None:
                    names.update(resolved.topics)
        return names

    def member_subscription(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            resolved = self.resolved_regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                names.update(resolved.topics)
        return names

    def preferred_assignor(self, default: str) -> str:
        """Kafka's ``computePreferredServerAssignor``: the assignor most members ask for, else the default."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        return max(counts, key=lambda name: counts[name]) if counts else default

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    # -- changing (only replay calls these) ------------------------------------------------------

    def put_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release_partitions(old)
            if old.instance_id is not None and old.instance_id != member.instance_id:
                self.static_members.pop(old.instance_id, None)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold_partitions(member)

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._release_partitions(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def _hold_partitions(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    def _release_partitions(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    if self.partition_epochs.get((topic_id, p)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, p)]


def normalized(assignment: Assignment) -> dict[UUID, frozenset[int]]:
    """An assignment without empty topics, comparable by value."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def owned_from_request(topic_partitions: Iterable[tuple[UUID, Iterable[int]]] | None
                       ) -> dict[UUID, frozenset[int]] | None:
    if topic_partitions is None:
        return None
    out: dict[UUID, set[int]] = {}
    for topic_id, partitions in topic_partitions:
        out.setdefault(topic_id, set()).update(partitions)
    return {t: frozenset(ps) for t, ps in out.items()}


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    """Kafka's ``isSubset`` for the epoch check: a null owned list is not a subset."""
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def topic_metadata_hash(topics: Iterable[tuple[str, UUID, int]]) -> int:
    """A stable 64-bit digest of the subscribed topics' (name, id, partition count), ordered by name.

    Kafka 4.1 (KIP-1101) stores an XXH3 hash of the same facts in ConsumerGroupMetadataValue so that a
    change (partitions added, a topic deleted and recreated) bumps the group epoch at the next heartbeat.
    Only this coordinator reads the value back, so any stable digest serves; BLAKE2b is in the standard
    library.
    """
    h = hashlib.blake2b(digest_size=8)
    for name, topic_id, partitions in sorted(topics):
        encoded = name.encode()
        h.update(struct.pack(">H", len(encoded)) + encoded + topic_id.bytes + struct.pack(">i", partitions))
    return struct.unpack(">q", h.digest())[0]


# -- reconciliation (Kafka's CurrentAssignmentBuilder) -------------------------------------------

def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still reports owning any of ``partitions`` (an unknown owned list: it might)."""
    if owned is None:
        return True
    return any(ps & partitions.get(t, frozenset()) for t, ps in owned.items())


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment, subscribed: set[UUID],
              partition_epoch: Callable[[UUID, int], int], owned: Assignment | None,
              subscription_changed: bool) -> ConsumerGroupMember:
    """The member's next current assignment towards ``target`` at ``target_epoch``.

    ``subscribed`` are the topic ids the member subscribes to now (partitions of other topics are
    revoked whatever the target says); ``owned`` is what its heartbeat reports (None: not sent).
    Raises :class:`FencedMember` for a member in a state this coordinator does not know that still
    owns partitions. Returns ``member`` itself when nothing changes.
    """
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, member.member_epoch, target_epoch, target, subscribed, partition_epoch,
                                    owned)
        if subscription_changed:
            return _shrink_to_subscription(member, subscribed, owned)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return _shrink_to_subscription(member, subscribed, owned) if subscription_changed else member
        return _next_assignment(member, member.member_epoch, target_epoch, target, subscribed, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, subscribed, partition_epoch, owned)
    if owned is None or any(owned.values()):
        raise FencedMember("the member is in an unknown state: it must abandon its partitions and rejoin")
    return _next_assignment(member, target_epoch, target_epoch, target, subscribed, partition_epoch, owned)


class FencedMember(Exception):
    """The member must give up everything and rejoin at epoch 0 (FENCED_MEMBER_EPOCH)."""


def _shrink_to_subscription(member: ConsumerGroupMember, subscribed: set[UUID],
                            owned: Assignment | None) -> ConsumerGroupMember:
    """A subscription change between assignments: drop (and revoke) the topics no longer subscribed."""
    assigned = dict(member.assigned)
    pending = {t: set(ps) for t, ps in member.pending_revocation.items()}
    removed = False
    for topic_id in list(assigned):
        if topic_id not in subscribed:
            pending.setdefault(topic_id, set()).update(assigned.pop(topic_id))
            removed = True
    if not removed:
        return member
    member = replace(member, assignment_epochs=member.held_epochs())
    pending_frozen = {t: frozenset(ps) for t, ps in pending.items() if ps}
    if pending_frozen and owns_any(owned, pending_frozen):
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                       pending_revocation=pending_frozen)
    return replace(member, assigned=assigned)


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Assignment,
                     subscribed: set[UUID], partition_epoch: Callable[[UUID, int], int],
                     owned: Assignment | None) -> ConsumerGroupMember:
    unreleased = False
    assigned: dict[UUID, frozenset[int]] = {}
    revoke: dict[UUID, frozenset[int]] = {}
    add: dict[UUID, frozenset[int]] = {}
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset()) if topic_id in subscribed else frozenset()
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        gone = current - keep
        mine_pending = member.pending_revocation.get(topic_id, frozenset())
        free = set()
        for p in wanted - keep:
            if partition_epoch(topic_id, p) != NO_EPOCH and p not in mine_pending:
                unreleased = True
            else:
                free.add(p)
        if keep:
            assigned[topic_id] = keep
        if gone:
            revoke[topic_id] = gone
        if free:
            add[topic_id] = frozenset(free)
    held = member.held_epochs()
    if revoke and owns_any(owned, revoke):
        epochs = {tp: e for tp, e in held.items() if tp[1] in assigned.get(tp[0], ()) or tp[1] in revoke.get(tp[0], ())}
        return replace(member.with_epoch(member_epoch), state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                       pending_revocation=revoke, assignment_epochs=epochs)
    epochs = {tp: e for tp, e in held.items() if tp[1] in assigned.get(tp[0], ())}
    for topic_id, partitions in add.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
        epochs.update({(topic_id, p): target_epoch for p in partitions})
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return replace(member.with_epoch(target_epoch), state=state, assigned=assigned, pending_revocation={},
                   assignment_epochs=epochs)
