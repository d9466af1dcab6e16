"""Server-side assignors (uniform, range, simple): worked examples from Kafka and property tests."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Mapping
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.coordinator.group.assignors import (
    CONSUMER_GROUP_ASSIGNORS,
    RANGE,
    SHARE_GROUP_ASSIGNORS,
    SIMPLE,
    UNIFORM,
    GroupAssignment,
    MemberSpec,
    RangeAssignor,
    SimpleAssignor,
    UniformAssignor,
    assignor,
)


def kafka_uuid(text: str) -> UUID:
    """A Kafka ``Uuid.fromString`` id (url-safe base64 of 16 bytes)."""
    return UUID(bytes=base64.urlsafe_b64decode(text + "=="))


T1 = kafka_uuid("T1-A4s3VTwiI5CTbEp6POw")
T2 = kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe")
T3 = kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa")
T4 = kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa")
UNKNOWN = UUID(int=0xDEAD)
TOPIC_POOL = [UUID(int=i * 0x1_0000_0001 + 7) for i in range(1, 6)]


def member(
    member_id: str,
    topics: set[UUID] | frozenset[UUID],
    current: Mapping[UUID, set[int] | frozenset[int]] | None = None,
    instance_id: str | None = None,
) -> MemberSpec:
    return MemberSpec(
        member_id=member_id,
        instance_id=instance_id,
        rack_id=None,
        subscribed_topic_ids=frozenset(topics),
        current={t: frozenset(ps) for t, ps in (current or {}).items()},
    )


def group(*specs: MemberSpec) -> dict[str, MemberSpec]:
    return {spec.member_id: spec for spec in specs}


def with_current(members: Mapping[str, MemberSpec], result: GroupAssignment) -> dict[str, MemberSpec]:
    """The same members, with ``result`` as their current target (the coordinator's next round)."""
    return {
        mid: MemberSpec(spec.member_id, spec.instance_id, spec.rack_id, spec.subscribed_topic_ids, result[mid])
        for mid, spec in members.items()
    }


def sizes(result: GroupAssignment) -> dict[str, int]:
    return {mid: sum(len(ps) for ps in a.values()) for mid, a in result.items()}


def owners(result: GroupAssignment) -> Counter[tuple[UUID, int]]:
    return Counter((t, p) for a in result.values() for t, ps in a.items() for p in ps)


def assert_exclusive_cover(members: Mapping[str, MemberSpec], topics: Mapping[UUID, int], result: GroupAssignment):
    """Every partition of every subscribed, existing topic goes to exactly one of its subscribers."""
    assert list(result) == list(members)
    expected = {
        (t, p)
        for spec in members.values()
        for t in spec.subscribed_topic_ids
        if t in topics
        for p in range(topics[t])
    }
    counts = owners(result)
    assert set(counts) == expected
    assert all(n == 1 for n in counts.values())
    for mid, assignment in result.items():
        assert all(ps for ps in assignment.values()), "empty topic entries are omitted"
        assert set(assignment) <= members[mid].subscribed_topic_ids


# --------------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------------


@st.composite
def groups(draw, homogeneous: bool = False, max_members: int = 9, max_partitions: int = 12):
    """A group plus topic metadata; current targets are arbitrary (overlapping, stale, out of range)."""
    n_topics = draw(st.integers(1, len(TOPIC_POOL)))
    topics = {t: draw(st.integers(0, max_partitions)) for t in TOPIC_POOL[:n_topics]}
    candidates = [*topics, UNKNOWN]
    n_members = draw(st.integers(1, max_members))
    shared = frozenset(draw(st.sets(st.sampled_from(candidates), min_size=1)))
    members = {}
    for i in range(n_members):
        subscribed = shared if homogeneous else frozenset(draw(st.sets(st.sampled_from(candidates))))
        current = draw(
            st.dictionaries(
                st.sampled_from(candidates),
                st.frozensets(st.integers(0, max_partitions + 2), min_size=1),
                max_size=3,
            )
        )
        instance = draw(st.one_of(st.none(), st.sampled_from(["i-a", "i-b", "i-c", "i-d"])))
        members[f"m{i:02d}"] = member(f"m{i:02d}", subscribed, current, instance)
    return members, topics


@st.composite
def fresh_groups(draw, homogeneous: bool = False, max_members: int = 9, max_partitions: int = 12):
    """A group with no current targets (a first assignment)."""
    members, topics = draw(groups(homogeneous, max_members, max_partitions))
    return {mid: member(mid, s.subscribed_topic_ids, None, s.instance_id) for mid, s in members.items()}, topics


PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------------------
# Registry and interface
# --------------------------------------------------------------------------------------------------


def test_registry() -> None:
    assert assignor("uniform") is UNIFORM and isinstance(UNIFORM, UniformAssignor)
    assert assignor("range") is RANGE and isinstance(RANGE, RangeAssignor)
    assert assignor("simple") is SIMPLE and isinstance(SIMPLE, SimpleAssignor)
    assert list(CONSUMER_GROUP_ASSIGNORS) == ["uniform", "range"]
    assert list(SHARE_GROUP_ASSIGNORS) == ["simple"]
    with pytest.raises(KeyError):
        assignor("cooperative-sticky")


@pytest.mark.parametrize("impl", [UNIFORM, RANGE, SIMPLE], ids=lambda a: a.name)
def test_empty_group_and_no_subscriptions(impl) -> None:
    assert impl.assign({}, {T1: 3}) == {}
    members = group(member("A", set()), member("B", {UNKNOWN}))
    assert impl.assign(members, {T1: 3}) == {"A": {}, "B": {}}


@pytest.mark.parametrize("impl", [UNIFORM, RANGE, SIMPLE], ids=lambda a: a.name)
def test_result_is_in_member_order(impl) -> None:
    members = group(member("z", {T1}), member("a", {T1}), member("m", {T1}))
    assert list(impl.assign(members, {T1: 5})) == ["z", "a", "m"]


def test_member_spec_is_hashable_and_frozen() -> None:
    spec = member("A", {T1}, {T1: {0}})
    hash(spec)
    with pytest.raises(AttributeError):
        spec.member_id = "B"  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# uniform: homogeneous
# --------------------------------------------------------------------------------------------------


def test_uniform_reference_example_c_joins() -> None:
    """§3.12: A={0..3}, B={4..6}; C joins: A keeps 3, B keeps 2, C gets the 2 freed partitions."""
    members = group(
        member("A", {T1}, {T1: {0, 1, 2, 3}}),
        member("B", {T1}, {T1: {4, 5, 6}}),
        member("C", {T1}),
    )
    result = UNIFORM.assign(members, {T1: 7})
    assert result == {"A": {T1: frozenset({0, 1, 2})}, "B": {T1: frozenset({4, 5})}, "C": {T1: frozenset({3, 6})}}


def test_uniform_first_assignment_homogeneous() -> None:
    members = group(member("A", {T1, T2}), member("B", {T1, T2}), member("C", {T1, T2}))
    result = UNIFORM.assign(members, {T1: 4, T2: 4})
    assert_exclusive_cover(members, {T1: 4, T2: 4}, result)
    assert sorted(sizes(result).values()) == [2, 3, 3]
    # With nothing to keep, members give up the extra slot while enough members remain to take it,
    # so the last ones in member order end up with the extra partitions.
    assert sizes(result) == {"A": 2, "B": 3, "C": 3}


def test_uniform_drops_unsubscribed_and_unknown() -> None:
    members = group(
        member("A", {T1}, {T1: {0, 1}, T2: {0}, UNKNOWN: {0}}),
        member("B", {T1}, {T1: {2, 99}}),
    )
    result = UNIFORM.assign(members, {T1: 4, T2: 1})
    assert result == {"A": {T1: frozenset({0, 1})}, "B": {T1: frozenset({2, 3})}}


def test_uniform_duplicate_current_claims_go_to_first_member() -> None:
    members = group(member("A", {T1}, {T1: {0, 1}}), member("B", {T1}, {T1: {1}}))
    result = UNIFORM.assign(members, {T1: 2})
    assert result == {"A": {T1: frozenset({0})}, "B": {T1: frozenset({1})}}


def test_uniform_more_members_than_partitions() -> None:
    members = group(*(member(f"m{i}", {T1}) for i in range(5)))
    result = UNIFORM.assign(members, {T1: 2})
    assert_exclusive_cover(members, {T1: 2}, result)
    assert sorted(sizes(result).values()) == [0, 0, 0, 1, 1]


@PROPS
@given(groups(homogeneous=True))
def test_uniform_homogeneous_properties(case) -> None:
    members, topics = case
    result = UNIFORM.assign(members, topics)
    assert_exclusive_cover(members, topics, result)
    counts = sizes(result).values()
    assert max(counts) - min(counts) <= 1
    # A fixed point: re-running on its own output moves nothing.
    assert UNIFORM.assign(with_current(members, result), topics) == result


@PROPS
@given(fresh_groups(homogeneous=True, max_members=8, max_partitions=20))
def test_uniform_homogeneous_join_moves_minimum(case) -> None:
    members, topics = case
    before = UNIFORM.assign(members, topics)
    subscribed = next(iter(members.values())).subscribed_topic_ids
    joined = with_current(members, before)
    joined["new"] = member("new", subscribed)
    after = UNIFORM.assign(joined, topics)
    assert_exclusive_cover(joined, topics, after)
    total = sum(sizes(before).values())
    # Old members only lose partitions, and only the new member's fair share moves.
    for mid in members:
        for t, ps in after[mid].items():
            assert ps <= before[mid].get(t, frozenset())
    moved = sum(sizes(before).values()) - sum(sizes(after)[m] for m in members)
    assert moved == sizes(after)["new"] == total // len(joined)


@PROPS
@given(fresh_groups(homogeneous=True, max_members=8, max_partitions=20), st.data())
def test_uniform_homogeneous_leave_keeps_survivors(case, data) -> None:
    members, topics = case
    before = UNIFORM.assign(members, topics)
    gone = data.draw(st.sampled_from(list(members)))
    survivors = {mid: spec for mid, spec in with_current(members, before).items() if mid != gone}
    if not survivors:
        return
    after = UNIFORM.assign(survivors, topics)
    assert_exclusive_cover(survivors, topics, after)
    for mid in survivors:
        for t, ps in before[mid].items():
            assert ps <= after[mid].get(t, frozenset())


# --------------------------------------------------------------------------------------------------
# uniform: heterogeneous (expectations from Kafka's UniformHeterogeneousAssignmentBuilderTest)
# --------------------------------------------------------------------------------------------------


def fs(*partitions: int) -> frozenset[int]:
    return frozenset(partitions)


def test_uniform_heterogeneous_first_assignment_two_members_two_topics() -> None:
    members = group(member("A", {T1, T3}), member("B", {T3}))
    result = UNIFORM.assign(members, {T1: 3, T3: 6})
    assert result == {"A": {T1: fs(0, 1, 2), T3: fs(4)}, "B": {T3: fs(0, 1, 2, 3, 5)}}


def test_uniform_heterogeneous_more_members_than_partitions() -> None:
    members = group(member("A", {T3}), member("B", {T3}), member("C", {T1}))
    result = UNIFORM.assign(members, {T1: 2, T3: 1})
    assert result == {"A": {T3: fs(0)}, "B": {}, "C": {T1: fs(0, 1)}}


def test_uniform_heterogeneous_unbalanced_previous_assignment() -> None:
    members = group(
        member("A", {T1}, {T1: {0, 1, 2}}),
        member("B", {T1, T2}, {T1: {3}, T2: {0}}),
        member("C", {T1, T2, T3}, {T1: {4, 5}, T2: {1, 2, 3}, T3: {0, 1, 2, 3}}),
    )
    result = UNIFORM.assign(members, {T1: 6, T2: 4, T3: 4})
    assert result == {
        "A": {T1: fs(0, 1, 2, 5)},
        "B": {T1: fs(3), T2: fs(0, 1, 2, 3)},
        "C": {T1: fs(4), T3: fs(0, 1, 2, 3)},
    }


def test_uniform_heterogeneous_partitions_added() -> None:
    members = group(
        member("A", {T1, T3}, {T1: {0, 1, 2, 3}, T3: {0, 1}}),
        member("B", {T1, T2, T3, T4}, {T2: {0, 1, 2}, T4: {0, 1, 2}}),
    )
    result = UNIFORM.assign(members, {T1: 6, T2: 5, T3: 3, T4: 3})
    assert result == {
        "A": {T1: fs(0, 1, 2, 3, 4, 5), T3: fs(0, 1, 2)},
        "B": {T2: fs(0, 1, 2, 3, 4), T4: fs(0, 1, 2)},
    }


def test_uniform_heterogeneous_member_and_partitions_added() -> None:
    members = group(
        member("A", {T1}, {T1: {0, 2}, T2: {0}}),
        member("B", {T1, T2}, {T1: {1}, T2: {1, 2}}),
        member("C", {T1, T2}),
    )
    result = UNIFORM.assign(members, {T1: 6, T2: 7})
    assert result == {
        "A": {T1: fs(0, 2, 3, 4, 5)},
        "B": {T1: fs(1), T2: fs(1, 2, 6)},
        "C": {T2: fs(0, 3, 4, 5)},
    }


def test_uniform_heterogeneous_member_removed() -> None:
    members = group(
        member("A", {T1, T3}, {T1: {0, 1, 2}, T3: {0, 1}}),
        member("B", {T2}, {T2: {3, 4, 5, 6}}),
    )
    result = UNIFORM.assign(members, {T1: 3, T2: 8, T3: 3})
    assert result == {"A": {T1: fs(0, 1, 2), T3: fs(0, 1, 2)}, "B": {T2: fs(*range(8))}}


@PROPS
@given(groups())
def test_uniform_any_group_covers_exclusively(case) -> None:
    members, topics = case
    assert_exclusive_cover(members, topics, UNIFORM.assign(members, topics))


@PROPS
@given(fresh_groups(max_partitions=20))
def test_uniform_heterogeneous_keeps_what_it_can(case) -> None:
    """Keeping stays cheap: a second round over the first round's output changes nothing."""
    members, topics = case
    first = UNIFORM.assign(members, topics)
    assert UNIFORM.assign(with_current(members, first), topics) == first


@PROPS
@given(
    st.lists(st.integers(0, 15), min_size=1, max_size=2),
    st.lists(st.integers(0, 15), min_size=1, max_size=2),
    st.integers(1, 5),
    st.integers(1, 5),
)
def test_uniform_heterogeneous_identical_subscribers_balance(left, right, n_left, n_right) -> None:
    """Two cliques on disjoint topics: each clique is balanced within one, like a homogeneous group."""
    left_topics = dict(zip(TOPIC_POOL[:2], left, strict=False))
    right_topics = dict(zip(TOPIC_POOL[2:4], right, strict=False))
    members = group(
        *(member(f"L{i}", set(left_topics), {TOPIC_POOL[2]: {i}}) for i in range(n_left)),
        *(member(f"R{i}", set(right_topics), {TOPIC_POOL[0]: {0, 1, i}}) for i in range(n_right)),
    )
    topics = {**left_topics, **right_topics}
    result = UNIFORM.assign(members, topics)
    assert_exclusive_cover(members, topics, result)
    counts = sizes(result)
    for prefix in "LR":
        clique = [n for mid, n in counts.items() if mid.startswith(prefix)]
        assert max(clique) - min(clique) <= 1


def test_uniform_heterogeneous_overlapping_subscriptions_balanced_per_topic() -> None:
    members = group(member("A", {T1}), member("B", {T1, T2}), member("C", {T2}))
    topics = {T1: 10, T2: 10}
    result = UNIFORM.assign(members, topics)
    assert_exclusive_cover(members, topics, result)
    counts = sizes(result)
    assert abs(counts["A"] - counts["B"]) <= 1 and abs(counts["B"] - counts["C"]) <= 1


# --------------------------------------------------------------------------------------------------
# range
# --------------------------------------------------------------------------------------------------


def test_range_reference_example() -> None:
    """§3.12: M0 and M1 on T1 and T2 with 3 partitions each."""
    members = group(member("M0", {T1, T2}), member("M1", {T1, T2}))
    result = RANGE.assign(members, {T1: 3, T2: 3})
    assert result == {"M0": {T1: fs(0, 1), T2: fs(0, 1)}, "M1": {T1: fs(2), T2: fs(2)}}


def test_range_orders_static_members_first_by_instance_id() -> None:
    members = group(
        member("a-dynamic", {T1}),
        member("z-static", {T1}, instance_id="I0"),
        member("b-static", {T1}, instance_id="I1"),
    )
    result = RANGE.assign(members, {T1: 6})
    assert result == {"z-static": {T1: fs(0, 1)}, "b-static": {T1: fs(2, 3)}, "a-dynamic": {T1: fs(4, 5)}}
    # A static member that rejoins with a new member id keeps its range.
    members = group(
        member("a-dynamic", {T1}),
        member("y", {T1}, instance_id="I0"),
        member("b-static", {T1}, instance_id="I1"),
    )
    assert RANGE.assign(members, {T1: 6})["y"] == {T1: fs(0, 1)}


def test_range_uses_java_string_order() -> None:
    # U+FB01 sorts after U+1F600 by code point but before it in UTF-16 (a surrogate pair starts 0xD83D).
    members = group(member("\U0001f600", {T1}), member("\ufb01", {T1}))
    result = RANGE.assign(members, {T1: 2})
    assert result == {"\U0001f600": {T1: fs(0)}, "\ufb01": {T1: fs(1)}}


def test_range_heterogeneous() -> None:
    members = group(member("A", {T1, T2}), member("B", {T2}), member("C", {T1, T2}))
    result = RANGE.assign(members, {T1: 3, T2: 7})
    assert result == {
        "A": {T1: fs(0, 1), T2: fs(0, 1, 2)},
        "B": {T2: fs(3, 4)},
        "C": {T1: fs(2), T2: fs(5, 6)},
    }


def test_range_ignores_current() -> None:
    members = group(member("A", {T1}, {T1: {3}}), member("B", {T1}, {T1: {0}}))
    assert RANGE.assign(members, {T1: 4}) == {"A": {T1: fs(0, 1)}, "B": {T1: fs(2, 3)}}


@PROPS
@given(groups())
def test_range_properties(case) -> None:
    members, topics = case
    result = RANGE.assign(members, topics)
    assert_exclusive_cover(members, topics, result)
    for t in topics:
        subscribers = [mid for mid, s in members.items() if t in s.subscribed_topic_ids]
        per_member = [len(result[mid].get(t, ())) for mid in subscribers]
        if per_member:
            assert max(per_member) - min(per_member) <= 1
        for mid in subscribers:
            ps = sorted(result[mid].get(t, ()))
            if ps:  # contiguous
                assert ps == list(range(ps[0], ps[0] + len(ps)))
    # Co-partitioning: same topics and equal partition counts give the same numbers on every topic.
    subs = {frozenset(s.subscribed_topic_ids & topics.keys()) for s in members.values()}
    if len(subs) == 1 and len({topics[t] for t in next(iter(subs))}) == 1:
        for assignment in result.values():
            assert len(set(assignment.values())) <= 1


# --------------------------------------------------------------------------------------------------
# simple (share groups)
# --------------------------------------------------------------------------------------------------


def holders(result: GroupAssignment) -> dict[tuple[UUID, int], list[str]]:
    out: dict[tuple[UUID, int], list[str]] = {}
    for mid, a in result.items():
        for t, ps in a.items():
            for p in ps:
                out.setdefault((t, p), []).append(mid)
    return out


def test_simple_two_partitions_five_members() -> None:
    """§6.4: P=2, M=5 gives sharing 3 and desired counts 2,1,1,1,1."""
    members = group(*(member(f"m{i}", {T1}) for i in range(5)))
    result = SIMPLE.assign(members, {T1: 2})
    assert [sizes(result)[f"m{i}"] for i in range(5)] == [2, 1, 1, 1, 1]
    assert sorted(len(h) for h in holders(result).values()) == [3, 3]


def test_simple_fewer_members_than_partitions_is_exclusive() -> None:
    members = group(member("A", {T1, T2}), member("B", {T1, T2}))
    result = SIMPLE.assign(members, {T1: 3, T2: 2})
    assert_exclusive_cover(members, {T1: 3, T2: 2}, result)
    assert sorted(sizes(result).values()) == [2, 3]


def test_simple_only_assignable_partitions() -> None:
    members = group(member("A", {T1, T3}), member("B", {T1, T3}))
    topics = {T1: 3, T3: 3}
    result = SIMPLE.assign(members, topics, {T1: frozenset({0, 1, 2}), T3: frozenset({0, 1})})
    assert set(holders(result)) == {(T1, 0), (T1, 1), (T1, 2), (T3, 0), (T3, 1)}
    result = SIMPLE.assign(members, topics, {T1: frozenset({0, 1, 2})})
    assert set(holders(result)) == {(T1, 0), (T1, 1), (T1, 2)}


def test_simple_heterogeneous_with_non_assignable_topic() -> None:
    """Kafka's SimpleAssignorTest: T3 is not initialized, so B gets nothing."""
    members = group(member("A", {T1, T2}), member("B", {T3}), member("C", {T2, T3}))
    result = SIMPLE.assign(members, {T1: 3, T2: 3, T3: 2}, {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})})
    assert result == {"A": {T1: fs(0, 1, 2), T2: fs(0, 2)}, "B": {}, "C": {T2: fs(1)}}


def test_simple_heterogeneous_balances_per_topic() -> None:
    members = group(member("A", {T1}), member("B", {T2}), member("C", {T1, T2}))
    result = SIMPLE.assign(members, {T1: 4, T2: 4})
    assert {t: len(ps) for t, ps in result["C"].items()} == {T1: 2, T2: 2}
    assert sizes(result) == {"A": 2, "B": 2, "C": 4}


def test_simple_revokes_stale_and_uninitialized() -> None:
    members = group(member("A", {T1}, {T1: {0, 1, 2}, T2: {0}}), member("B", {T1}))
    result = SIMPLE.assign(members, {T1: 3, T2: 1}, {T1: frozenset({0, 1})})
    assert result == {"A": {T1: fs(0)}, "B": {T1: fs(1)}}


def test_simple_sticky_when_members_join_one_at_a_time() -> None:
    """Kafka's incremental test: 24 partitions, members join one by one up to 101; nothing is ever unserved."""
    members: dict[str, MemberSpec] = {}
    topics = {T1: 24}
    previous: GroupAssignment = {}
    for i in range(101):
        members[f"M{i}"] = member(f"M{i}", {T1})
        result = SIMPLE.assign(with_current(members, {**{m: {} for m in members}, **previous}), topics)
        assert len(holders(result)) == 24
        if i < 24:
            # Exclusive phase: each member keeps as much of its previous target as its new count allows.
            # (Counts are positional, ceil(P(i+1)/M) - ceil(Pi/M), so an old member may also gain one.)
            for mid, a in previous.items():
                old, new = a.get(T1, frozenset()), result[mid].get(T1, frozenset())
                assert len(old & new) == min(len(old), len(new))
        previous = result
    # Members leave one at a time.
    for i in range(100, 0, -1):
        del members[f"M{i}"]
        previous = {m: previous[m] for m in members}
        previous = SIMPLE.assign(with_current(members, previous), topics)
        assert len(holders(previous)) == 24


@PROPS
@given(groups(homogeneous=True, max_members=12, max_partitions=6), st.data())
def test_simple_homogeneous_properties(case, data) -> None:
    members, topics = case
    initialized = {
        t: frozenset(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n))) for t, n in topics.items()
    }
    result = SIMPLE.assign(members, topics, initialized)
    subscribed = next(iter(members.values())).subscribed_topic_ids
    pool = {(t, p) for t in subscribed if t in topics for p in initialized[t]}
    held = holders(result)
    assert set(held) == pool  # everything served, nothing uninitialized
    m, p = len(members), len(pool)
    if p:
        sharing = -(-m // p)
        assert all(len(h) <= sharing for h in held.values())
        counts = sizes(result).values()
        assert max(counts) - min(counts) <= 1 or m > p  # M ≤ P: exclusive and balanced
        if m <= p:
            assert all(len(h) == 1 for h in held.values())
        assert min(counts) >= 1 if m >= p else True
    # Stable: a second round keeps everything.
    assert SIMPLE.assign(with_current(members, result), topics, initialized) == result


@PROPS
@given(groups(max_members=10, max_partitions=6))
def test_simple_any_group(case) -> None:
    members, topics = case
    result = SIMPLE.assign(members, topics)
    for (t, part), hs in holders(result).items():
        assert part < topics[t]
        assert all(t in members[h].subscribed_topic_ids for h in hs)
    for t, n in topics.items():
        subscribers = [mid for mid, s in members.items() if t in s.subscribed_topic_ids]
        if subscribers and n:
            served = {p for (tt, p) in holders(result) if tt == t}
            assert served == set(range(n))
            sharing = -(-len(subscribers) // n)
            assert all(len(hs) <= sharing for (tt, _), hs in holders(result).items() if tt == t)


# --------------------------------------------------------------------------------------------------
# Scale sanity (no timing assertion; guards against a pathological algorithm)
# --------------------------------------------------------------------------------------------------


def test_fifty_members_thousand_partitions() -> None:
    topic_ids = [UUID(int=1000 + i) for i in range(10)]
    topics = dict.fromkeys(topic_ids, 100)
    homogeneous = {f"m{i:02d}": member(f"m{i:02d}", set(topic_ids)) for i in range(50)}
    heterogeneous = {
        f"m{i:02d}": member(f"m{i:02d}", {topic_ids[j] for j in range(10) if (i + j) % 3}) for i in range(50)
    }
    for members in (homogeneous, heterogeneous):
        for impl in (UNIFORM, RANGE):
            first = impl.assign(members, topics)
            assert_exclusive_cover(members, topics, first)
            joined = with_current(members, first)
            joined["late"] = member("late", set(topic_ids))
            assert_exclusive_cover(joined, topics, impl.assign(joined, topics))
        shared = SIMPLE.assign(members, topics)
        assert len(holders(shared)) == 1000
        SIMPLE.assign(with_current(members, shared), topics)
