"""Elections, ISR removal and replica assignment against Kafka 3.9's own test vectors.

Sources: PartitionLeaderElectionAlgorithmsTest, PartitionStateMachineTest, ReplicaStateMachineTest,
LeaderAndIsrTest, AdminRackAwareTest.testReplicaAssignment, AdminZkClientTest and AddPartitionsTest.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.cluster.algorithms import (
    AssignmentError,
    BrokerNotAvailableError,
    ElectionResult,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    add_partitions_assignment,
    assign_replicas_to_brokers,
    controlled_shutdown_partition_leader_election,
    initial_leader_and_isr,
    leader_for_controlled_shutdown,
    leader_for_offline,
    leader_for_preferred_replica,
    leader_for_reassign,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
    remove_replica_from_isr,
    validate_topic_assignment,
)
from strata.cluster.znodes import LeaderAndIsr, LeaderRecoveryState, ReplicaAssignment

RECOVERED, RECOVERING = LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING
CONTROLLER_EPOCH = 7


def state(leader: int, isr: Sequence[int], epoch: int = 0, recovery: LeaderRecoveryState = RECOVERED) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, tuple(isr), CONTROLLER_EPOCH, recovery, partition_epoch=4)


# -- PartitionLeaderElectionAlgorithmsTest --------------------------------------------------------

OFFLINE = [  # assignment, isr, live, unclean, expected
    ([2, 4], [2, 4], {4}, False, 4),  # testOfflinePartitionLeaderElection
    ([2, 4], [2], {4}, False, None),  # ...LastIsrOfflineUncleanLeaderElectionDisabled
    ([2, 4], [2], {4}, True, 4),  # ...LastIsrOfflineUncleanLeaderElectionEnabled
    ([2, 4], [4, 2], {2, 4}, False, 2),  # assignment order wins over ISR order
    ([2, 4, 6], [], {6}, True, 6),
    ([2, 4], [2, 4], set(), True, None),
    ([], [1], {1}, True, None),
]


@pytest.mark.parametrize(("assignment", "isr", "live", "unclean", "expected"), OFFLINE)
def test_offline_partition_leader_election(
    assignment: list[int], isr: list[int], live: set[int], unclean: bool, expected: int | None
) -> None:
    assert offline_partition_leader_election(assignment, isr, live, unclean) == expected


@pytest.mark.parametrize(("reassignment", "isr", "live", "expected"), [
    ([2, 4], [2, 4], {4}, 4),  # testReassignPartitionLeaderElection
    ([2, 4], [2], set(), None),  # ...WithNoLiveIsr
    ([2, 4], [], {2}, None),  # ...WithEmptyIsr
])
def test_reassign_partition_leader_election(
    reassignment: list[int], isr: list[int], live: set[int], expected: int | None
) -> None:
    assert reassign_partition_leader_election(reassignment, isr, live) == expected


@pytest.mark.parametrize(("assignment", "isr", "live", "expected"), [
    ([2, 4], [2, 4], {2, 4}, 2),  # testPreferredReplicaPartitionLeaderElection
    ([2, 4], [2], set(), None),  # ...PreferredReplicaInIsrNotLive
    ([2, 4], [4], {2, 4}, None),  # ...PreferredReplicaNotInIsrLive
    ([2, 4], [], set(), None),  # ...PreferredReplicaNotInIsrNotLive
    ([], [1], {1}, None),
])
def test_preferred_replica_partition_leader_election(
    assignment: list[int], isr: list[int], live: set[int], expected: int | None
) -> None:
    assert preferred_replica_partition_leader_election(assignment, isr, live) == expected


@pytest.mark.parametrize(("assignment", "isr", "live", "shutting_down", "expected"), [
    ([2, 4], [2, 4], {2, 4}, {2}, 4),  # testControlledShutdownPartitionLeaderElection
    ([2, 4], [2], {2, 4}, {2}, None),  # ...LastIsrShuttingDown
    ([2, 4], [2, 4], {2, 4}, {2, 4}, None),  # ...AllIsrSimultaneouslyShutdown
])
def test_controlled_shutdown_partition_leader_election(
    assignment: list[int], isr: list[int], live: set[int], shutting_down: set[int], expected: int | None
) -> None:
    assert controlled_shutdown_partition_leader_election(assignment, isr, live, shutting_down) == expected


# -- Election.scala full states (PartitionStateMachineTest) ---------------------------------------


def test_new_partition_to_online() -> None:
    # testNewPartitionToOnlinePartitionTransition: LeaderAndIsr(brokerId, List(brokerId))
    assert initial_leader_and_isr([0], {0}, CONTROLLER_EPOCH) == LeaderAndIsr(0, 0, (0,), CONTROLLER_EPOCH)
    # first *live* replica leads; the ISR is every live replica, in assignment order
    assert initial_leader_and_isr([3, 1, 2], {1, 2}, 1) == LeaderAndIsr(1, 0, (1, 2), 1)
    assert initial_leader_and_isr([3, 1], set(), 1) is None


def test_offline_partition_to_online() -> None:
    # testOfflinePartitionToOnlinePartitionTransition: (NoLeader, [b]) -> newLeader(b)
    result = leader_for_offline(state(-1, [0], epoch=3), [0], {0}, unclean_enabled=False)
    assert result == ElectionResult(LeaderAndIsr(0, 4, (0,), CONTROLLER_EPOCH, RECOVERED, 4), (0,), unclean=False)


@pytest.mark.parametrize("recovery_supported", [True, False])
def test_offline_partition_to_unclean_online(recovery_supported: bool) -> None:
    # testOfflinePartitionToUncleanOnlinePartitionTransition: Leader X, ISR [X], Replicas [X, Y], live [Y]
    x, y = 1, 0
    result = leader_for_offline(state(x, [x]), [x, y], {y}, unclean_enabled=True,
                                leader_recovery_supported=recovery_supported)
    expected_recovery = RECOVERING if recovery_supported else RECOVERED
    assert result == ElectionResult(LeaderAndIsr(y, 1, (y,), CONTROLLER_EPOCH, expected_recovery, 4), (y,), True)


def test_offline_clean_election_keeps_live_isr_in_isr_order_and_recovery_state() -> None:
    result = leader_for_offline(state(1, [3, 1, 2], epoch=5, recovery=RECOVERING), [1, 2, 3], {2, 3}, False)
    assert result.leader_and_isr == LeaderAndIsr(2, 6, (3, 2), CONTROLLER_EPOCH, RECOVERING, 4)
    assert result.live_replicas == (2, 3)
    assert not result.unclean


def test_offline_election_without_candidate() -> None:
    assert leader_for_offline(state(1, [1]), [1, 2], {2}, unclean_enabled=False) == ElectionResult(None, (2,))
    assert leader_for_offline(state(1, [1]), [1, 2], set(), unclean_enabled=True) == ElectionResult(None, ())


def test_controlled_shutdown_election() -> None:
    # testOnlinePartitionToOnlineTransitionForControlledShutdown: newLeaderAndIsr(other, [other]); the
    # shutting-down broker still gets the new state
    result = leader_for_controlled_shutdown(state(0, [0, 1]), [0, 1], {0, 1}, {0})
    assert result == ElectionResult(LeaderAndIsr(1, 1, (1,), CONTROLLER_EPOCH, RECOVERED, 4), (0, 1))
    assert leader_for_controlled_shutdown(state(0, [0]), [0, 1], {0, 1}, {0}) == ElectionResult(None, (0, 1))


def test_preferred_election_bumps_epoch_even_for_the_same_leader() -> None:
    # testOnlinePartitionToOnlineTransition: leaderAndIsr.newLeader(brokerId)
    result = leader_for_preferred_replica(state(0, [0]), [0], {0})
    assert result == ElectionResult(LeaderAndIsr(0, 1, (0,), CONTROLLER_EPOCH, RECOVERED, 4), (0,))
    moved = leader_for_preferred_replica(state(2, [2, 1]), [1, 2], {1, 2})
    assert moved.leader_and_isr is not None
    assert (moved.leader_and_isr.leader, moved.leader_and_isr.isr) == (1, (2, 1))
    assert leader_for_preferred_replica(state(2, [2]), [1, 2], {1, 2}).leader_and_isr is None


def test_reassign_election_picks_from_target_replicas() -> None:
    assignment = ReplicaAssignment((1, 2)).reassign_to([3, 4])  # replicas (3, 4, 1, 2)
    result = leader_for_reassign(state(1, [1, 2, 3, 4]), assignment.target_replicas, {1, 2, 3, 4})
    assert result == ElectionResult(LeaderAndIsr(3, 1, (1, 2, 3, 4), CONTROLLER_EPOCH, RECOVERED, 4), (3, 4))
    # a target replica not yet in the ISR cannot lead
    assert leader_for_reassign(state(1, [1, 2, 4]), (3, 4), {1, 2, 3, 4}).leader_and_isr == LeaderAndIsr(
        4, 1, (1, 2, 4), CONTROLLER_EPOCH, RECOVERED, 4)
    assert leader_for_reassign(state(1, [1, 2]), (3, 4), {1, 2, 3, 4}).leader_and_isr is None


# -- ReplicaStateMachine.doRemoveReplicasFromIsr -------------------------------------------------


def test_offline_leader_leaves_isr_and_leadership() -> None:
    # testOnlineReplicaToOfflineReplicaTransition: newLeaderAndIsr(NoLeader, List(otherBrokerId))
    assert remove_replica_from_isr(state(0, [0, 1]), 0) == LeaderAndIsr(-1, 1, (1,), CONTROLLER_EPOCH, RECOVERED, 4)


def test_last_isr_member_is_kept() -> None:
    assert remove_replica_from_isr(state(0, [0], epoch=2), 0) == LeaderAndIsr(-1, 3, (0,), CONTROLLER_EPOCH,
                                                                             RECOVERED, 4)


def test_offline_follower_leaves_isr_and_bumps_epoch() -> None:
    assert remove_replica_from_isr(state(0, [0, 1, 2]), 1) == LeaderAndIsr(0, 1, (0, 2), CONTROLLER_EPOCH,
                                                                          RECOVERED, 4)


def test_replica_outside_isr_changes_nothing() -> None:
    assert remove_replica_from_isr(state(0, [0, 1]), 2) is None


def test_broker_failure_sequence() -> None:
    """onReplicasBecomeOffline: the dead leader's partitions are elected first, then its replicas leave ISRs."""
    elected = leader_for_offline(state(1, [1, 2]), [1, 2], {2}, unclean_enabled=False).leader_and_isr
    assert elected == LeaderAndIsr(2, 1, (2,), CONTROLLER_EPOCH, RECOVERED, 4)
    assert remove_replica_from_isr(elected, 1) is None  # already out: no second write
    # sole ISR member dies and unclean election is off: no leader, ISR kept as [dead]
    stuck = state(1, [1])
    assert leader_for_offline(stuck, [1, 2], {2}, unclean_enabled=False).leader_and_isr is None
    offline = remove_replica_from_isr(stuck, 1)
    assert offline == LeaderAndIsr(-1, 1, (1,), CONTROLLER_EPOCH, RECOVERED, 4)
    # it comes back: the clean election waits for exactly that replica
    back = leader_for_offline(offline, [1, 2], {1, 2}, unclean_enabled=False).leader_and_isr
    assert back == LeaderAndIsr(1, 2, (1,), CONTROLLER_EPOCH, RECOVERED, 4)


_ids = st.integers(0, 7)


@given(st.lists(_ids, unique=True, max_size=6), st.lists(_ids, unique=True, max_size=6), st.sets(_ids),
       st.booleans(), st.integers(0, 1000))
def test_offline_election_invariants(
    assignment: list[int], isr: list[int], live: set[int], unclean: bool, epoch: int
) -> None:
    before = state(-1, isr, epoch)
    result = leader_for_offline(before, assignment, live, unclean)
    after = result.leader_and_isr
    live_isr = [r for r in assignment if r in live and r in isr]
    if after is None:
        assert not live_isr and (not unclean or not [r for r in assignment if r in live])
        return
    assert after.leader in assignment and after.leader in live
    assert after.leader_epoch == epoch + 1
    assert after.leader in after.isr
    assert set(after.isr) <= live
    if live_isr:
        assert after.leader == live_isr[0] and not result.unclean
        assert after.isr == tuple(r for r in isr if r in live)
    else:
        assert result.unclean and after.isr == (after.leader,) and after.leader_recovery_state == RECOVERING


@given(st.lists(_ids, unique=True, min_size=1, max_size=6), _ids, st.integers(0, 1000))
def test_remove_replica_invariants(isr: list[int], replica: int, epoch: int) -> None:
    leader = isr[0]
    after = remove_replica_from_isr(state(leader, isr, epoch), replica)
    if replica not in isr:
        assert after is None
        return
    assert after is not None
    assert after.leader_epoch == epoch + 1
    assert after.leader != replica
    assert after.isr == ((replica,) if len(isr) == 1 else tuple(r for r in isr if r != replica))


@given(st.lists(_ids, unique=True, max_size=6), st.lists(_ids, unique=True, max_size=6), st.sets(_ids),
       st.sets(_ids))
def test_controlled_shutdown_never_elects_a_stopping_broker(
    assignment: list[int], isr: list[int], live: set[int], shutting_down: set[int]
) -> None:
    result = leader_for_controlled_shutdown(state(-1, isr), assignment, live | shutting_down, shutting_down)
    if result.leader_and_isr is not None:
        assert result.leader_and_isr.leader not in shutting_down
        assert not set(result.leader_and_isr.isr) & shutting_down


# -- replica assignment (AdminUtils) ------------------------------------------------------------


def test_replica_assignment_kafka_vector() -> None:
    # AdminRackAwareTest.testReplicaAssignment (also the table in AdminUtils' javadoc)
    assert assign_replicas_to_brokers(list(range(5)), 10, 3, fixed_start_index=0, start_partition_id=-1) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_replica_assignment_invalid_parameters() -> None:
    brokers = list(range(5))
    with pytest.raises(InvalidReplicationFactorError, match="larger than 0"):
        assign_replicas_to_brokers(brokers, 10, 0)
    with pytest.raises(InvalidReplicationFactorError, match="Replication factor: 6 larger than available brokers: 5"):
        assign_replicas_to_brokers(brokers, 10, 6)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_to_brokers(brokers, 0, 0)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers([], 1, 1)
    assert issubclass(InvalidPartitionsError, ValueError) and issubclass(InvalidReplicationFactorError, AssignmentError)


def test_replica_assignment_is_random_unless_fixed() -> None:
    brokers = [0, 1, 2, 3, 4]
    seen = {tuple(map(tuple, assign_replicas_to_brokers(brokers, 5, 3, rng=random.Random(seed)).values()))
            for seed in range(40)}
    assert len(seen) > 5  # both the start index and the shift vary
    assert assign_replicas_to_brokers(brokers, 5, 3, rng=random.Random(1)) == assign_replicas_to_brokers(
        brokers, 5, 3, rng=random.Random(1))


def test_replica_assignment_uses_broker_ids_in_the_given_order() -> None:
    assert assign_replicas_to_brokers([10, 20, 30], 3, 2, fixed_start_index=0) == {
        0: [10, 20], 1: [20, 30], 2: [30, 10]}
    assert assign_replicas_to_brokers([7], 2, 1) == {0: [7], 1: [7]}


@given(st.lists(st.integers(0, 1000), unique=True, min_size=1, max_size=9), st.integers(1, 60), st.data())
def test_replica_assignment_properties(brokers: list[int], n_partitions: int, data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    start = data.draw(st.integers(0, len(brokers) - 1))
    first_id = data.draw(st.integers(-1, 50))
    result = assign_replicas_to_brokers(brokers, n_partitions, rf, fixed_start_index=start,
                                        start_partition_id=first_id)
    first = max(0, first_id)
    assert list(result) == list(range(first, first + n_partitions))
    for partition, replicas in result.items():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(brokers)
        assert replicas[0] == brokers[(partition + start) % len(brokers)]  # leaders go round-robin
    leaders = Counter(r[0] for r in result.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1


# -- manual assignments and partition additions (AdminZkClient) ---------------------------------


@pytest.mark.parametrize("assignment", [
    {0: [0, 0]},  # duplicate brokers
    {0: [0, 1], 1: [0]},  # inconsistent replication factor
    {1: [1, 2], 2: [1, 2]},  # partitions should be 0-based
    {0: [1, 2], 3: [1, 2]},  # ... and consecutive
    {-1: [1, 2], 1: [1, 2], 2: [1, 2], 4: [1, 2]},
    {-3: [1], 0: [1], 1: [1], 5: [1]},  # passes Kafka's sum-based check, but is not 0..3
    {0: []},
    {},
])
def test_validate_topic_assignment_rejects(assignment: dict[int, list[int]]) -> None:
    # AdminZkClientTest.testManualReplicaAssignment
    with pytest.raises(InvalidReplicaAssignmentError):
        validate_topic_assignment(assignment)


def test_validate_topic_assignment_accepts() -> None:
    validate_topic_assignment({0: [0, 1, 2], 1: [1, 2, 3]})
    validate_topic_assignment({1: [2], 0: [1]})


def test_add_partitions_continues_round_robin() -> None:
    brokers = [0, 1, 2, 3]
    # AddPartitionsTest.testReplicaPlacementPartialServers: [1, 2] grown to 3 partitions
    assert add_partitions_assignment("t2", {0: [1, 2]}, brokers, 3) == {1: [2, 0], 2: [3, 1]}
    # AddPartitionsTest.testReplicaPlacementAllServers: [2, 3, 0, 1] grown to 7 (leader, replica set)
    added = add_partitions_assignment("t3", {0: [2, 3, 0, 1]}, brokers, 7)
    assert [(r[0], set(r)) for r in added.values()] == [(3, {0, 1, 2, 3}), (0, {0, 1, 2, 3}), (1, {0, 1, 2, 3}),
                                                        (2, {0, 1, 2, 3}), (3, {0, 1, 2, 3}), (0, {0, 1, 2, 3})]
    assert list(added) == [1, 2, 3, 4, 5, 6]
    # brokers are sorted first; a preferred leader above every id restarts at index 0
    assert add_partitions_assignment("t", {0: [9]}, [3, 1, 2], 2) == {1: [2]}


def test_add_partitions_errors() -> None:
    with pytest.raises(AssignmentError, match="partition id 0 is missing"):  # AddPartitionsTest
        add_partitions_assignment("new-topic5", {1: [0, 1]}, [0, 1, 2, 3], 2, {1: [0, 1], 2: [0, 1, 2]})
    with pytest.raises(InvalidPartitionsError, match="can only be increased"):
        add_partitions_assignment("t", {0: [0], 1: [1]}, [0, 1], 2)
    with pytest.raises(InvalidReplicaAssignmentError, match="Inconsistent replication factor"):  # testWrongReplicaCount
        add_partitions_assignment("t", {0: [0, 1]}, [0, 1, 2, 3], 2, {1: [0, 1, 2]})
    with pytest.raises(InvalidReplicaAssignmentError, match="Duplicate brokers"):
        add_partitions_assignment("t", {0: [0, 1]}, [0, 1, 2], 2, {1: [1, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="replication factor of 0"):
        add_partitions_assignment("t", {0: [0, 1]}, [0, 1, 2], 2, {1: []})
    with pytest.raises(BrokerNotAvailableError, match="available brokers: 0, 1, 2"):
        add_partitions_assignment("t", {0: [0, 1]}, [0, 1, 2], 2, {1: [1, 9]})
    # a valid manual assignment is returned as given (AddPartitionsTest.testManualAssignmentOfReplicas)
    assert add_partitions_assignment("t", {0: [1, 2]}, [0, 1, 2, 3], 3, {1: [0, 1], 2: [2, 3]}) == {
        1: [0, 1], 2: [2, 3]}
