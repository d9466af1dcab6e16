"""The controller's pure decisions: leader elections, ISR removal and replica assignment (Kafka 3.9).

Ported from ``PartitionLeaderElectionAlgorithms`` (``controller/PartitionStateMachine.scala``), ``Election.scala``,
``ReplicaStateMachine.doRemoveReplicasFromIsr``, ``PartitionStateMachine.initializeLeaderAndIsrForPartitions``,
``org.apache.kafka.admin.AdminUtils`` and ``AdminZkClient``'s assignment checks. They are kept apart from the
controller's ZooKeeper plumbing so that the rules which decide data safety (who may lead, what the ISR becomes,
when the leader epoch moves) can be table-tested against Kafka's own test vectors.

Conventions shared by every function:

* assignments are in preference order (the first replica is the preferred leader);
* ``live`` is the set of brokers that may take part -- Kafka's ``isReplicaOnline``: registered, not shutting down
  (except where a function says otherwise), and not holding the partition on a failed log directory;
* every state change bumps the leader epoch (``LeaderAndIsr.new_leader_and_isr``) and keeps the partition epoch
  and controller epoch of the state it started from; the writer stamps its own controller epoch and, once the
  conditional write succeeded, the new znode version (see :class:`~strata.cluster.znodes.LeaderAndIsr`).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from strata.cluster.znodes import LeaderAndIsr

__all__ = [
    "AssignmentError",
    "BrokerNotAvailableError",
    "ElectionResult",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "add_partitions_assignment",
    "assign_replicas_to_brokers",
    "controlled_shutdown_partition_leader_election",
    "initial_leader_and_isr",
    "leader_for_controlled_shutdown",
    "leader_for_offline",
    "leader_for_preferred_replica",
    "leader_for_reassign",
    "offline_partition_leader_election",
    "preferred_replica_partition_leader_election",
    "reassign_partition_leader_election",
    "remove_replica_from_isr",
    "validate_topic_assignment",
]


# -- leader choice: PartitionLeaderElectionAlgorithms ---------------------------------------------


def offline_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int], unclean_enabled: bool
) -> int | None:
    """The first live replica of the assignment that is in the ISR; failing that, and only if unclean election
    is enabled, the first live replica at all (which may lose acknowledged writes)."""
    leader = next((r for r in assignment if r in live_replicas and r in isr), None)
    if leader is None and unclean_enabled:
        leader = next((r for r in assignment if r in live_replicas), None)
    return leader


def reassign_partition_leader_election(
    reassignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    """The first replica of the *target* replica set that is live and in the ISR (never unclean)."""
    return next((r for r in reassignment if r in live_replicas and r in isr), None)


def preferred_replica_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    """The assignment's head if it is live and in the ISR; no fallback to the next replica."""
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int], shutting_down: Collection[int]
) -> int | None:
    """Like the clean offline election, skipping brokers that are shutting down (never unclean)."""
    return next((r for r in assignment if r in live_replicas and r in isr and r not in shutting_down), None)


# -- full states: Election.scala ------------------------------------------------------------------


@dataclass(frozen=True)
class ElectionResult:
    """The outcome of one partition's election.

    ``leader_and_isr`` is None when no replica qualifies (the partition stays offline and nothing is written).
    ``live_replicas`` are the replicas Kafka would send the new state to. ``unclean`` is True when the leader
    was not in the ISR, which Kafka counts in ``UncleanLeaderElectionsPerSec``.
    """

    leader_and_isr: LeaderAndIsr | None
    live_replicas: tuple[int, ...]
    unclean: bool = False


def leader_for_offline(
    state: LeaderAndIsr,
    assignment: Sequence[int],
    live: Collection[int],
    unclean_enabled: bool,
    *,
    leader_recovery_supported: bool = True,
) -> ElectionResult:
    """Elect a leader for a partition whose leader is gone (or that has none), as ``Election.leaderForOffline``.

    * Clean: the new ISR is the old ISR minus the brokers that are not live (in ISR order); the recovery state
      is kept, so a partition still RECOVERING stays so.
    * Unclean (the leader was not in the ISR): the ISR becomes ``[leader]`` and the state RECOVERING (KIP-704:
      the new leader must not let the ISR grow until it has recovered its log).
    * No candidate: no new state. The dead leader is then taken out of the state by
      :func:`remove_replica_from_isr` (ReplicaStateMachine), which keeps a last ISR member.
    """
    live_replicas = tuple(r for r in assignment if r in live)
    leader = offline_partition_leader_election(assignment, state.isr, live_replicas, unclean_enabled)
    if leader is None:
        return ElectionResult(None, live_replicas)
    if leader in state.isr:
        return ElectionResult(state.new_leader_and_isr(leader, [r for r in state.isr if r in live]), live_replicas)
    if leader_recovery_supported:
        return ElectionResult(state.new_recovering_leader_and_isr(leader, [leader]), live_replicas, unclean=True)
    return ElectionResult(state.new_leader_and_isr(leader, [leader]), live_replicas, unclean=True)


def leader_for_reassign(state: LeaderAndIsr, target_replicas: Sequence[int], live: Collection[int]) -> ElectionResult:
    """Move leadership into a reassignment's target replicas (``ReplicaAssignment.target_replicas``); ISR kept."""
    live_replicas = [r for r in target_replicas if r in live]
    leader = reassign_partition_leader_election(target_replicas, state.isr, live_replicas)
    return ElectionResult(None if leader is None else state.new_leader(leader), tuple(target_replicas))


def leader_for_preferred_replica(
    state: LeaderAndIsr, assignment: Sequence[int], live: Collection[int]
) -> ElectionResult:
    """Give leadership back to the preferred replica; ISR kept. Kafka's controller only asks for partitions whose
    leader is not already the preferred one, because this bumps the epoch even when the leader is unchanged."""
    live_replicas = [r for r in assignment if r in live]
    leader = preferred_replica_partition_leader_election(assignment, state.isr, live_replicas)
    return ElectionResult(None if leader is None else state.new_leader(leader), tuple(assignment))


def leader_for_controlled_shutdown(
    state: LeaderAndIsr, assignment: Sequence[int], live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
) -> ElectionResult:
    """Move leadership off brokers that are shutting down; they also leave the ISR.

    ``live_or_shutting_down`` includes the brokers that are shutting down (they are still registered and
    receive the new state, so they can stop serving as leader).
    """
    live_replicas = tuple(r for r in assignment if r in live_or_shutting_down)
    leader = controlled_shutdown_partition_leader_election(assignment, state.isr, live_replicas, shutting_down)
    if leader is None:
        return ElectionResult(None, live_replicas)
    new_isr = [r for r in state.isr if r not in shutting_down]
    return ElectionResult(state.new_leader_and_isr(leader, new_isr), live_replicas)


def initial_leader_and_isr(
    assignment: Sequence[int], live: Collection[int], controller_epoch: int
) -> LeaderAndIsr | None:
    """A new partition's first state (NewPartition -> OnlinePartition): the first live replica leads and every
    live replica is in the ISR, at leader epoch 0. None if no assigned replica is live (Kafka logs a failed state
    change and leaves the partition New)."""
    live_replicas = [r for r in assignment if r in live]
    if not live_replicas:
        return None
    return LeaderAndIsr.initial(live_replicas[0], live_replicas, controller_epoch)


def remove_replica_from_isr(state: LeaderAndIsr, replica: int) -> LeaderAndIsr | None:
    """Take a replica that went offline out of the state (``ReplicaStateMachine.doRemoveReplicasFromIsr``).

    If it led, the partition has no leader (-1) until an election. The ISR loses the replica -- unless it is the
    only member: then the ISR stays ``[replica]``, so that a clean election waits for the one replica known to
    have every acknowledged write instead of electing someone without it. The leader epoch is bumped.
    None when the replica is not in the ISR: nothing to write.
    """
    if replica not in state.isr:
        return None
    leader = LeaderAndIsr.NO_LEADER if replica == state.leader else state.leader
    isr = state.isr if len(state.isr) == 1 else [r for r in state.isr if r != replica]
    return state.new_leader_and_isr(leader, isr)


# -- replica assignment: AdminUtils / AdminZkClient ----------------------------------------------


class AssignmentError(ValueError):
    """A topic or partition assignment request that Kafka rejects (the subclass names Kafka's error)."""


class InvalidPartitionsError(AssignmentError):
    """Kafka's InvalidPartitionsException (error code INVALID_PARTITIONS)."""


class InvalidReplicationFactorError(AssignmentError):
    """Kafka's InvalidReplicationFactorException (error code INVALID_REPLICATION_FACTOR)."""


class InvalidReplicaAssignmentError(AssignmentError):
    """Kafka's InvalidReplicaAssignmentException (error code INVALID_REPLICA_ASSIGNMENT)."""


class BrokerNotAvailableError(AssignmentError):
    """Kafka's BrokerNotAvailableException: a manual assignment names an unknown broker."""


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, n_brokers: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def assign_replicas_to_brokers(
    brokers: Sequence[int],
    n_partitions: int,
    replication_factor: int,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment (``AdminUtils.assignReplicasToBrokersRackUnaware``).

    The first replica of each partition goes round-robin over ``brokers`` from a start index; the others follow
    at a shift that grows by one after every full round, so that the followers of one broker's partitions
    spread over all other brokers. ``brokers`` is used in the given order (Kafka's callers pass ids sorted).

    The start index and the initial shift are random (two independent draws from ``rng``) unless
    ``fixed_start_index`` >= 0, which fixes both. ``start_partition_id`` numbers the first new partition when
    partitions are added to an existing topic (see :func:`add_partitions_assignment`).
    """
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    n_brokers = len(brokers)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n_brokers)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n_brokers)
    current_partition_id = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if current_partition_id > 0 and current_partition_id % n_brokers == 0:
            next_replica_shift += 1
        first_replica_index = (current_partition_id + start_index) % n_brokers
        replicas = [brokers[first_replica_index]]
        replicas.extend(brokers[_replica_index(first_replica_index, next_replica_shift, j, n_brokers)]
                        for j in range(replication_factor - 1))
        result[current_partition_id] = replicas
        current_partition_id += 1
    return result


def validate_topic_assignment(assignment: Mapping[int, Sequence[int]]) -> None:
    """Check a manual assignment for a new topic (``AdminZkClient.validateTopicCreate``): every partition has
    the same, non-zero number of replicas, no broker twice, and the ids are exactly 0..n-1.

    Kafka's own id check (a sum of the non-negative ids) lets some non-consecutive sets through (e.g. -3, 0, 1,
    5); this one does not.
    """
    if len({len(replicas) for replicas in assignment.values()}) != 1:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
    for partition, replicas in assignment.items():
        if not replicas:
            raise InvalidReplicaAssignmentError(f"Cannot have replication factor of 0 for partition id {partition}.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"Duplicate replica assignment found: {dict(assignment)}")
    if set(assignment) != set(range(len(assignment))):
        raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")


def _validate_new_partitions(
    proposed: Mapping[int, Sequence[int]], expected_replication_factor: int, available_brokers: Collection[int]
) -> None:
    """``AdminZkClient.validateReplicaAssignment`` for a CreatePartitions request with an explicit assignment."""
    for partition, replicas in proposed.items():
        if not replicas:
            raise InvalidReplicaAssignmentError(f"Cannot have replication factor of 0 for partition id {partition}.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                "Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {partition}.")
        if not set(replicas) <= set(available_brokers):
            raise BrokerNotAvailableError(
                f"Some brokers specified for partition id {partition} are not available. "
                f"Specified brokers: {', '.join(map(str, replicas))}, "
                f"available brokers: {', '.join(map(str, sorted(available_brokers)))}.")
    bad = sorted((p, len(r)) for p, r in proposed.items() if len(r) != expected_replication_factor)
    if bad:
        raise InvalidReplicaAssignmentError(
            f"Inconsistent replication factor between partitions, partition 0 has {expected_replication_factor} "
            f"while partitions [{', '.join(str(p) for p, _ in bad)}] have replication factors "
            f"[{', '.join(str(n) for _, n in bad)}], respectively.")


def add_partitions_assignment(
    topic: str,
    existing: Mapping[int, Sequence[int]],
    brokers: Collection[int],
    num_partitions: int,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
    *,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """The assignment of the partitions that grow ``topic`` to ``num_partitions`` in total
    (``AdminZkClient.createNewPartitionsAssignment``); only the new partitions are returned.

    Without ``replica_assignment`` the new partitions continue the topic's round-robin: the start index is
    the position (in sorted ``brokers``) of the first broker with an id >= partition 0's preferred leader, which
    also fixes the shift, and numbering starts after the existing partitions. ``rng`` is unused then (Kafka
    passes a fixed start index) and is accepted for symmetry.
    """
    if 0 not in existing:
        raise AssignmentError(f"Unexpected existing replica assignment for topic '{topic}', partition id 0 is "
                              f"missing. Assignment: {dict(existing)}")
    partition0 = list(existing[0])
    partitions_to_add = num_partitions - len(existing)
    if partitions_to_add <= 0:
        raise InvalidPartitionsError(
            f"The number of partitions for a topic can only be increased. Topic {topic} currently has "
            f"{len(existing)} partitions, {num_partitions} would not be an increase.")
    if replica_assignment is not None:
        _validate_new_partitions(replica_assignment, len(partition0), brokers)
        return {p: list(r) for p, r in replica_assignment.items()}
    ordered = sorted(brokers)
    start_index = max(0, next((i for i, b in enumerate(ordered) if b >= partition0[0]), -1))
    return assign_replicas_to_brokers(ordered, partitions_to_add, len(partition0), fixed_start_index=start_index,
                                      start_partition_id=len(existing), rng=rng)
