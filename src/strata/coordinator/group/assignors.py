"""Server-side partition assignors of the modern group protocols, as pure functions.

Kafka 4.2's group coordinator computes a group's *target assignment* itself (KIP-848) instead of asking a
client leader. Three assignors ship with it, and this module provides the same three:

* ``uniform`` (the consumer-group default): balanced first, sticky second
  (``UniformHomogeneousAssignmentBuilder`` / ``UniformHeterogeneousAssignmentBuilder``);
* ``range``: contiguous ranges per topic, co-partitioned when possible, not sticky (``RangeAssignor``);
* ``simple`` (share groups, KIP-932): like uniform, but a partition may be *shared* by several members when
  there are more members than partitions (``Simple*AssignmentBuilder``).

An assignor sees only what the coordinator hands it: each member's id, instance id, rack, the topic ids it
subscribes to and its current *target* assignment (not what the member owns right now; reconciliation
between the two is the coordinator's job), plus the partition count of every known topic. It returns a
complete new target for every member. Nothing here does I/O, logs, or keeps state between calls, so
the coordinator can run it anywhere and tests can run it thousands of times.

Conventions shared by all three:

* The result has one entry per input member, in the input order, even when it is empty; topics with no
  partition for a member are left out of its entry. (Kafka sometimes returns no entry at all and lets the
  caller default it; a total result is easier to consume.)
* Subscriptions to topic ids missing from ``topics`` are ignored (Kafka throws; the coordinator only
  subscribes to resolved topics anyway, and a topic deleted between resolution and assignment should not
  break the group).
* Current assignments are sanitized first: topics no longer subscribed by that member, unknown topics and
  out-of-range partitions are dropped, and for the consumer assignors a partition claimed by two members
  stays with the first one in member order. Kafka trusts its input here; garbage in would be garbage out.
* Whether a group is *homogeneous* (all members subscribe to the same topics) is decided on the effective
  subscriptions, i.e. after dropping unknown topics. Kafka decides it on subscribed topic names, so a group
  whose members differ only in a topic that does not exist is heterogeneous there and homogeneous here;
  both algorithms produce a valid balanced result, they just pick different partitions.
* Ties are broken deterministically in Kafka's orders: member-map order, topic ids compared as Java's
  ``Uuid.compareTo`` (signed 64-bit halves), strings compared as Java's ``String.compareTo`` (UTF-16 code
  units). Where Kafka iterates a ``HashMap``/``HashSet`` (so its order is an accident of hashing), we use
  ascending topic-id/partition order instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol
from uuid import UUID

__all__ = [
    "CONSUMER_GROUP_ASSIGNORS",
    "RANGE",
    "SHARE_GROUP_ASSIGNORS",
    "SIMPLE",
    "UNIFORM",
    "Assignor",
    "GroupAssignment",
    "MemberAssignment",
    "MemberSpec",
    "RangeAssignor",
    "SimpleAssignor",
    "UniformAssignor",
    "assignor",
]

MemberAssignment = dict[UUID, frozenset[int]]
"""One member's partitions, by topic id. Topics without partitions are absent."""

GroupAssignment = dict[str, MemberAssignment]
"""Every member's assignment, by member id, in the input member order."""


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows about one member (Kafka's ``MemberSubscriptionAndAssignmentImpl``).

    ``current`` is the member's current *target* assignment, which is what stickiness is measured against:
    the coordinator recomputes targets whenever the group epoch bumps, and keeping the previous target
    stable is what keeps revocations to a minimum. ``rack_id`` is carried for completeness; no 4.2
    assignor is rack-aware.
    """

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    subscribed_topic_ids: frozenset[UUID] = frozenset()
    current: Mapping[UUID, frozenset[int]] = field(default_factory=dict, hash=False)


class Assignor(Protocol):
    """A server-side assignor: a pure function from the group's members and topics to a new target.

    ``topics`` maps every known topic id to its partition count. Members are processed in the mapping's
    iteration order (Kafka iterates its member map in insertion order), which decides who gets the extra
    partitions and who gives partitions up, so callers must pass a stable order.
    """

    name: str

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[UUID, int]) -> GroupAssignment:
        ...


# --------------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------------

_JAVA_UUID_FLIP = (1 << 127) | (1 << 63)


def _topic_key(topic_id: UUID) -> int:
    """Sort key ordering topic ids like Java's ``Uuid.compareTo``.

    Kafka compares the two 64-bit halves as *signed* longs; flipping both sign bits turns that into
    plain unsigned order of the 128-bit integer.
    """
    return topic_id.int ^ _JAVA_UUID_FLIP


def _java_string_key(value: str) -> bytes:
    """Sort key ordering strings like Java's ``String.compareTo`` (lexicographic over UTF-16 code units)."""
    return value.encode("utf-16-be", "surrogatepass")


def _effective_subscriptions(
    members: Mapping[str, MemberSpec], known: Mapping[UUID, object]
) -> list[frozenset[UUID]]:
    """Each member's subscribed topic ids restricted to topics that exist, in member order."""
    return [frozenset(t for t in spec.subscribed_topic_ids if t in known) for spec in members.values()]


def _is_homogeneous(subscriptions: Sequence[frozenset[UUID]]) -> bool:
    return all(sub == subscriptions[0] for sub in subscriptions)


def _sanitized_current(
    members: Mapping[str, MemberSpec],
    subscriptions: Sequence[frozenset[UUID]],
    topics: Mapping[UUID, int],
) -> list[dict[UUID, list[int]]]:
    """Each member's current target, cleaned for a consumer assignor (exclusive ownership).

    Keeps only subscribed, existing topics and in-range partitions; a partition listed by two members
    goes to the first. Topics and partitions come out sorted so that "keep the first *n*" is deterministic.
    """
    claimed: dict[UUID, set[int]] = {}
    out: list[dict[UUID, list[int]]] = []
    for spec, subscribed in zip(members.values(), subscriptions, strict=True):
        kept: dict[UUID, list[int]] = {}
        for topic_id in sorted(spec.current.keys() & subscribed, key=_topic_key):
            count = topics[topic_id]
            taken = claimed.setdefault(topic_id, set())
            partitions = [p for p in sorted(spec.current[topic_id]) if 0 <= p < count and p not in taken]
            if partitions:
                taken.update(partitions)
                kept[topic_id] = partitions
        out.append(kept)
    return out


def _freeze(member_ids: Iterable[str], assignments: Iterable[Mapping[UUID, Iterable[int]]]) -> GroupAssignment:
    """Build the immutable-valued result, dropping empty topics."""
    return {
        member_id: {topic_id: frozenset(parts) for topic_id, parts in assignment.items() if parts}
        for member_id, assignment in zip(member_ids, assignments, strict=True)
    }


# --------------------------------------------------------------------------------------------------
# uniform
# --------------------------------------------------------------------------------------------------

_MAX_BALANCE_ITERATIONS = 16
"""Cap on the heterogeneous balancing rounds (Kafka's ``MAX_ITERATION_COUNT``).

Identical subscriptions converge in one round; overlapping, non-identical ones can take longer, and each
round roughly halves the imbalance, so 16 rounds bound the work without giving up much balance.
"""


class UniformAssignor:
    """Kafka's default consumer-group assignor: balance first, then stickiness.

    Homogeneous groups use a quota scheme (every member gets ``P // M`` partitions, ``P % M`` of them one
    more) that keeps each member's current partitions up to its quota. Heterogeneous groups keep every
    partition of a still-subscribed topic, hand out the rest to the least-loaded subscribers, and then
    move partitions from the most- to the least-loaded subscribers of each topic until every topic's
    subscribers are within one partition of each other (or an iteration cap is hit).
    """

    name: str = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[UUID, int]) -> GroupAssignment:
        if not members:
            return {}
        subscriptions = _effective_subscriptions(members, topics)
        current = _sanitized_current(members, subscriptions, topics)
        if _is_homogeneous(subscriptions):
            result = _uniform_homogeneous(subscriptions[0], current, topics)
        else:
            result = _UniformHeterogeneous(subscriptions, current, topics).build()
        return _freeze(members.keys(), result)


def _uniform_homogeneous(
    subscribed: frozenset[UUID], current: list[dict[UUID, list[int]]], topics: Mapping[UUID, int]
) -> list[dict[UUID, list[int]]]:
    """``UniformHomogeneousAssignmentBuilder``: quotas in member order, keep up to quota, fill from the rest.

    The subtle part is the extra partition: ``P % M`` members may hold ``quota + 1``. Walking the members in
    order, a member takes an extra slot while some remain; one that cannot fill its extra slot from what it
    already holds gives it back, unless only as many members remain as extra slots (then it must take it, or
    a slot would be lost and a partition left over). This keeps the most partitions where they are.
    """
    member_count = len(current)
    ordered_topics = sorted(subscribed, key=_topic_key)
    owned = {(t, p) for assignment in current for t, ps in assignment.items() for p in ps}
    unassigned = [(t, p) for t in ordered_topics for p in range(topics[t]) if (t, p) not in owned]
    total = sum(topics[t] for t in ordered_topics)
    min_quota, remaining_extra = divmod(total, member_count)

    targets: list[dict[UUID, list[int]]] = []
    unfilled: list[tuple[int, int]] = []  # (member index, remaining quota)
    for index, assignment in enumerate(current):
        quota = min_quota
        has_extra = remaining_extra > 0
        if has_extra:
            quota += 1
        target: dict[UUID, list[int]] = {}
        for topic_id, partitions in assignment.items():
            keep = partitions[:quota]
            quota -= len(keep)
            if keep:
                target[topic_id] = keep
            unassigned.extend((topic_id, p) for p in partitions[len(keep):])
        if quota > 0 and has_extra and member_count - index > remaining_extra:
            quota -= 1
            has_extra = False
        if quota > 0:
            unfilled.append((index, quota))
        if has_extra:
            remaining_extra -= 1
        targets.append(target)

    cursor = 0
    for index, quota in unfilled:
        for topic_id, partition in unassigned[cursor:cursor + quota]:
            targets[index].setdefault(topic_id, []).append(partition)
        cursor += quota
    if cursor < len(unassigned):  # cannot happen: the quotas add up to the partition count
        raise AssertionError("uniform assignor left partitions unassigned")
    return targets


class _LoadBalancer:
    """Kafka's ``MemberAssignmentBalancer``: walks the least- and most-loaded members of one topic.

    Members are sorted by load once per topic. The least-loaded *range* (members sharing the minimum load)
    is handed partitions round-robin; when every member in it has received one, its level rises by one and
    it grows to take in the members already at that level. The most-loaded range shrinks symmetrically from
    the other end. Comparing the two levels tells when moving another partition would no longer help.
    This avoids re-sorting after every move, which keeps balancing O(P log P) per topic.
    """

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.order: list[int] = []
        self.least_end = 0  # [0, least_end) is the least-loaded range
        self.least_level = -1
        self.next_least = 0
        self.most_start = 0  # [most_start, most_end) is the most-loaded range
        self.most_end = 0
        self.most_level = 1
        self.next_most = -1

    def initialize(self, members: Sequence[int]) -> int:
        """Reset for a topic's subscribers; returns the load spread between the extremes."""
        sizes = self.sizes
        self.order = sorted(members, key=lambda m: (sizes[m], m))
        n = len(self.order)
        self.least_end = 0
        self.least_level = sizes[self.order[0]] - 1
        self.next_least = 0
        self.most_start = n
        self.most_end = n
        self.most_level = sizes[self.order[-1]] + 1
        self.next_most = n - 1
        return sizes[self.order[-1]] - sizes[self.order[0]]

    def next_least_loaded(self) -> int:
        """The member to give the next partition to (assumes it will get one)."""
        if self.next_least >= self.least_end:
            self.least_level += 1
            while self.least_end < len(self.order) and self.sizes[self.order[self.least_end]] == self.least_level:
                self.least_end += 1
            self.next_least = 0
        member = self.order[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        """The member to take the next partition from (assumes it will lose one), or -1 if none is left."""
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # The range was emptied by exclusions: restart it at the next member's level so it expands.
                self.most_level = self.sizes[self.order[self.most_start - 1]]
            else:
                self.most_level -= 1
            while self.most_start > 0 and self.sizes[self.order[self.most_start - 1]] == self.most_level:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = self.order[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Drop the member last returned by :meth:`next_most_loaded`: it has nothing of this topic to give."""
        i = self.next_most + 1
        last = self.most_end - 1
        self.order[i], self.order[last] = self.order[last], self.order[i]
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_level - self.least_level <= 1


class _UniformHeterogeneous:
    """``UniformHeterogeneousAssignmentBuilder``: keep, fill the least loaded, then balance per topic.

    Members are numbered by their position in the member map; loads are plain ints in a list and partition
    owners plain lists per topic, because balancing touches them for every partition moved.
    """

    def __init__(
        self,
        subscriptions: Sequence[frozenset[UUID]],
        current: list[dict[UUID, list[int]]],
        topics: Mapping[UUID, int],
    ) -> None:
        self.topics = topics
        self.subscribers: dict[UUID, list[int]] = {}
        for index, subscribed in enumerate(subscriptions):
            for topic_id in subscribed:
                self.subscribers.setdefault(topic_id, []).append(index)
        self.sizes = [0] * len(subscriptions)
        self.owners = {topic_id: [-1] * topics[topic_id] for topic_id in self.subscribers}
        self.targets: list[dict[UUID, set[int]]] = []
        # Step 1: keep every partition of a still-subscribed topic (``current`` is already restricted to those).
        for index, assignment in enumerate(current):
            target: dict[UUID, set[int]] = {}
            for topic_id, partitions in assignment.items():
                target[topic_id] = set(partitions)
                owners = self.owners[topic_id]
                for p in partitions:
                    owners[p] = index
                self.sizes[index] += len(partitions)
            self.targets.append(target)

    def _topic_order(self, topic_ids: Iterable[UUID]) -> list[UUID]:
        """Most partitions per subscriber first, then fewest subscribers, then topic id.

        Placing the topics with the fewest choices of owner first gives the later, more flexible topics a
        chance to even out the loads.
        """

        def key(topic_id: UUID) -> tuple[Fraction, int, int]:
            n = len(self.subscribers[topic_id])
            return (Fraction(-self.topics[topic_id], n), n, _topic_key(topic_id))

        return sorted(topic_ids, key=key)

    def _move(self, topic_id: UUID, partition: int, member: int) -> None:
        owners = self.owners[topic_id]
        old = owners[partition]
        if old != -1:
            parts = self.targets[old][topic_id]
            parts.discard(partition)
            if not parts:
                del self.targets[old][topic_id]
            self.sizes[old] -= 1
        self.targets[member].setdefault(topic_id, set()).add(partition)
        owners[partition] = member
        self.sizes[member] += 1

    def build(self) -> list[dict[UUID, set[int]]]:
        # Step 2: hand every unowned partition to the least-loaded subscriber, topic by topic.
        unassigned = {
            topic_id: [p for p, owner in enumerate(owners) if owner == -1] for topic_id, owners in self.owners.items()
        }
        balancer = _LoadBalancer(self.sizes)
        for topic_id in self._topic_order(t for t, ps in unassigned.items() if ps):
            balancer.initialize(self.subscribers[topic_id])
            for partition in unassigned[topic_id]:
                self._move(topic_id, partition, balancer.next_least_loaded())
        # Step 3: move partitions from the most- to the least-loaded subscribers until no round moves any.
        movable = self._topic_order(t for t, subs in self.subscribers.items() if len(subs) >= 2)
        if movable:
            self._balance(movable, balancer)
        return self.targets

    def _balance(self, ordered_topics: list[UUID], balancer: _LoadBalancer) -> None:
        last_rebalanced = -1
        for _ in range(_MAX_BALANCE_ITERATIONS):
            for position, topic_id in enumerate(ordered_topics):
                if position == last_rebalanced:
                    return  # a whole round since the last move: nothing more to gain
                if self._balance_topic(topic_id, balancer) > 0 or last_rebalanced == -1:
                    last_rebalanced = position

    def _balance_topic(self, topic_id: UUID, balancer: _LoadBalancer) -> int:
        if balancer.initialize(self.subscribers[topic_id]) <= 1:
            return 0
        owners = self.owners[topic_id]
        # The topic's partitions grouped by owner, so a member's partitions are a contiguous slice we can
        # pop from the end in O(1).
        partitions = sorted(range(len(owners)), key=lambda p: (owners[p], p))
        start: dict[int, int] = {}
        end: dict[int, int] = {}  # exclusive
        for i, p in enumerate(partitions):
            start.setdefault(owners[p], i)
            end[owners[p]] = i + 1
        moved = 0
        while not balancer.is_balanced():
            while True:
                donor = balancer.next_most_loaded()
                if donor == -1 or end.get(donor, 0) - start.get(donor, 0) > 0:
                    break
                balancer.exclude_most_loaded()
            if donor == -1:
                break
            end[donor] -= 1
            partition = partitions[end[donor]]
            receiver = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self._move(topic_id, partition, receiver)
            moved += 1
        return moved


# --------------------------------------------------------------------------------------------------
# range
# --------------------------------------------------------------------------------------------------


class RangeAssignor:
    """Kafka's ``range`` consumer-group assignor: contiguous ranges per topic, no stickiness.

    Members are ordered static-first (by instance id), then dynamic (by member id), and each topic's
    subscribers take consecutive ranges of ``P // n`` partitions in that order, the first ``P % n`` one more.
    When all members subscribe to the same topics and the topics have equal partition counts, every member
    gets the same partition numbers of each topic (co-partitioning, which joins rely on). Ordering by
    instance id keeps a static member's range across restarts even though its member id changes.
    """

    name: str = "range"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[UUID, int]) -> GroupAssignment:
        if not members:
            return {}
        subscriptions = dict(zip(members.keys(), _effective_subscriptions(members, topics), strict=True))

        def member_key(member_id: str) -> tuple[int, bytes]:
            instance_id = members[member_id].instance_id
            if instance_id is not None:
                return (0, _java_string_key(instance_id))
            return (1, _java_string_key(member_id))

        ordered = sorted(members.keys(), key=member_key)
        subscriber_counts: dict[UUID, int] = {}
        for subscribed in subscriptions.values():
            for topic_id in subscribed:
                subscriber_counts[topic_id] = subscriber_counts.get(topic_id, 0) + 1
        # Per topic: [next range start, minimum quota, members still due an extra partition].
        cursors = {
            topic_id: [0, *divmod(topics[topic_id], n)] for topic_id, n in subscriber_counts.items()
        }
        result: dict[str, dict[UUID, range]] = {}
        for member_id in ordered:
            assignment: dict[UUID, range] = {}
            for topic_id in sorted(subscriptions[member_id], key=_topic_key):
                cursor = cursors[topic_id]
                begin, quota = cursor[0], cursor[1]
                if cursor[2] > 0:
                    quota += 1
                    cursor[2] -= 1
                stop = min(begin + quota, topics[topic_id])
                cursor[0] = stop
                assignment[topic_id] = range(begin, stop)
            result[member_id] = assignment
        return _freeze(members.keys(), (result[m] for m in members))


# --------------------------------------------------------------------------------------------------
# simple (share groups)
# --------------------------------------------------------------------------------------------------

_TopicPartition = tuple[UUID, int]


class SimpleAssignor:
    """KIP-932's share-group assignor: balanced, sticky, and sharing partitions when members outnumber them.

    Share-group members do not own partitions exclusively (records are handed out per delivery), so with
    more members than partitions idle members are avoided by sharing: each partition gets
    ``desired_sharing = ceil(M / P)`` members, and member *i* gets ``ceil(d·(i+1)) − ceil(d·i)`` partitions
    with ``d = desired_sharing·P / M``; those counts add up to exactly ``desired_sharing·P`` and differ by at
    most one. With M ≤ P that is one member per partition and P // M or P // M + 1 partitions per member.
    Homogeneous groups pool all subscribed partitions; heterogeneous groups run the same per topic over that
    topic's subscribers and combine the results.

    Only *initialized* share partitions may be assigned (the share coordinator must hold their state first),
    so :meth:`assign` takes an optional ``assignable`` map, topic id → partitions that may be assigned.
    ``None`` means every partition in ``topics`` is assignable; a topic missing from a given map has none.

    Two differences from Kafka 4.2, both on inputs Kafka does not expect: a current target's partition that
    is not assignable is revoked (Kafka keeps it and counts it toward the member's quota), and in the
    heterogeneous case partitions of a topic nobody subscribes to any more are dropped (Kafka's per-topic
    pass never visits such a topic, so they would linger).
    """

    name: str = "simple"

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[UUID, int],
        assignable: Mapping[UUID, frozenset[int]] | None = None,
    ) -> GroupAssignment:
        if not members:
            return {}
        subscriptions = _effective_subscriptions(members, topics)
        pools: dict[UUID, list[int]] = {}
        for topic_id in set().union(*subscriptions):
            count = topics[topic_id]
            if assignable is None:
                pools[topic_id] = list(range(count))
            else:
                pools[topic_id] = sorted(p for p in assignable.get(topic_id, ()) if 0 <= p < count)
        allowed = {topic_id: frozenset(partitions) for topic_id, partitions in pools.items()}
        # Current targets restricted to subscribed topics and assignable partitions (sharing is legal).
        held: list[dict[UUID, list[_TopicPartition]]] = []
        for spec, subscribed in zip(members.values(), subscriptions, strict=True):
            mine: dict[UUID, list[_TopicPartition]] = {}
            for topic_id in sorted(spec.current.keys() & subscribed, key=_topic_key):
                ok = allowed[topic_id]
                mine[topic_id] = [(topic_id, p) for p in sorted(spec.current[topic_id]) if p in ok]
            held.append(mine)

        result: list[dict[UUID, list[int]]] = [{} for _ in held]
        groups: list[tuple[list[_TopicPartition], list[int], dict[int, list[_TopicPartition]]]] = []
        if _is_homogeneous(subscriptions):
            pool = [(t, p) for t in sorted(subscriptions[0], key=_topic_key) for p in pools[t]]
            everyone = list(range(len(held)))
            groups.append((pool, everyone, {m: [tp for tps in held[m].values() for tp in tps] for m in everyone}))
        else:
            subscribers: dict[UUID, list[int]] = {}
            for index, subscribed in enumerate(subscriptions):
                for topic_id in subscribed:
                    subscribers.setdefault(topic_id, []).append(index)
            for t in sorted(subscribers, key=_topic_key):
                pool = [(t, p) for p in pools[t]]
                groups.append((pool, subscribers[t], {m: held[m].get(t, []) for m in subscribers[t]}))
        for pool, group_members, current in groups:
            for member, partitions in _share(pool, group_members, current).items():
                for topic_id, partition in partitions:
                    result[member].setdefault(topic_id, []).append(partition)
        return _freeze(members.keys(), result)


def _share(
    pool: list[_TopicPartition], group_members: list[int], current: Mapping[int, list[_TopicPartition]]
) -> dict[int, list[_TopicPartition]]:
    """Share the ``pool`` partitions among ``group_members`` (the ``Simple*AssignmentBuilder`` steps).

    1. keep each member's current partitions up to its desired count;
    2. revoke holders beyond ``desired_sharing`` from over-shared partitions (the earliest members keep it);
    3. give every partition with no holder to an unfilled member (round-robin), so nothing is left unserved;
    4. top up partitions below ``desired_sharing`` from unfilled members that do not hold them yet.

    Step 4 can leave a slot empty when every unfilled member already holds that partition; Kafka accepts the
    slight imbalance, and so do we. Step 3 is split out from 4 (Kafka does both in one pass over a hash map)
    so that an unlucky iteration order can never leave a partition with no member at all.
    """
    n, p_count = len(group_members), len(pool)
    sharing = -(-n // p_count) if p_count else 0
    total = sharing * p_count
    # ceil(total·i / n) with exact integers; Kafka uses doubles, which agree except for rounding accidents.
    desired = {m: -(-total * (i + 1) // n) - -(-total * i // n) for i, m in enumerate(group_members)}

    holders: dict[_TopicPartition, list[int]] = {tp: [] for tp in pool}
    assigned: dict[int, list[_TopicPartition]] = {}
    for m in group_members:
        keep = current.get(m, [])[: desired[m]]
        assigned[m] = list(keep)
        for tp in keep:
            holders[tp].append(m)
    for tp, members in holders.items():
        if len(members) > sharing:
            for m in members[sharing:]:
                assigned[m].remove(tp)
            del members[sharing:]

    unfilled = [m for m in group_members if len(assigned[m]) < desired[m]]
    cursor = 0

    def give(tp: _TopicPartition, position: int) -> int:
        """Assign ``tp`` to ``unfilled[position]``; returns where the round-robin continues."""
        m = unfilled[position]
        assigned[m].append(tp)
        holders[tp].append(m)
        if len(assigned[m]) >= desired[m]:
            unfilled.pop(position)
            return position
        return position + 1

    for tp in pool:
        if not holders[tp] and unfilled:
            cursor = give(tp, cursor % len(unfilled))
    for tp in pool:
        need = sharing - len(holders[tp])
        tries = 0
        while need > 0 and unfilled and tries < len(unfilled):
            position = cursor % len(unfilled)
            if unfilled[position] in holders[tp]:
                cursor, tries = position + 1, tries + 1
                continue
            cursor, need, tries = give(tp, position), need - 1, 0
    return assigned


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
SIMPLE = SimpleAssignor()

CONSUMER_GROUP_ASSIGNORS: Mapping[str, Assignor] = {UNIFORM.name: UNIFORM, RANGE.name: RANGE}
"""Assignors a consumer group may use (``group.consumer.assignors``; the first listed is the default)."""

SHARE_GROUP_ASSIGNORS: Mapping[str, Assignor] = {SIMPLE.name: SIMPLE}
"""Assignors a share group may use; ``simple`` is the only one in Kafka 4.2."""


def assignor(name: str) -> Assignor:
    """The built-in assignor called ``name`` (``uniform``, ``range`` or ``simple``); raises ``KeyError``.

    Callers that must restrict the choice to one group type should look in
    :data:`CONSUMER_GROUP_ASSIGNORS` or :data:`SHARE_GROUP_ASSIGNORS` instead.
    """
    if name in CONSUMER_GROUP_ASSIGNORS:
        return CONSUMER_GROUP_ASSIGNORS[name]
    return SHARE_GROUP_ASSIGNORS[name]
