"""One partition's replication state on this broker: Kafka's ``Partition`` (leader or follower).

A partition takes :class:`PartitionState` values (leader, leader epoch, ISR, replicas and the
partition epoch, i.e. the state znode's version) no matter who delivers them: today a ZooKeeper
watch, tomorrow perhaps a push from the controller. Kafka's ``becomeLeaderOrFollower`` rules
decide what a value means: a higher leader epoch changes the role, an equal epoch with a newer
partition epoch only changes the ISR or the replica set, anything older is ignored.

On the leader it keeps what Kafka's ``Replica`` keeps per follower (log end offset, last fetch,
last time caught up), advances the high watermark to the smallest log end offset in the ISR, and
proposes ISR changes (expand on catch-up, shrink after ``replica.lag.time.max.ms``); the caller
writes a proposal to ZooKeeper and applies it only once written (a leader that lost its
leadership cannot change the ISR: the conditional write fails). All methods run on the event loop.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from strata.common import TopicPartition
from strata.errors import ErrorCode
from strata.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

NO_LEADER = -1
LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the cluster decided for a partition (Kafka's LeaderAndIsr + assignment)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0
    controller_epoch: int = 0
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(slots=True)
class FollowerState:
    """The leader's view of one follower (Kafka's ``Replica`` / ``ReplicaState``)."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def update_fetch(self, fetch_offset: int, log_start_offset: int, now_ms: int, leader_end_offset: int) -> None:
        """Kafka's ``updateFetchStateOrThrow``: caught up now if the fetch reached the leader's end;
        caught up at the previous fetch if this fetch reached where the leader's end was then."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms


class Transition:
    """What applying a state did; the replica manager starts or stops fetchers accordingly."""

    NONE = "none"
    BECAME_LEADER = "leader"
    BECAME_FOLLOWER = "follower"  # new leader or new epoch: truncate, then fetch from ``leader``
    UPDATED = "updated"  # same role and epoch, new ISR / replicas
    STOPPED = "stopped"  # no longer hosted here (deleted, moved away)


@dataclass
class Partition:
    tp: TopicPartition
    topic_id: uuid.UUID
    local_id: int
    log: PartitionLog
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: frozenset[int] = frozenset()
    replicas: tuple[int, ...] = ()
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    leader_epoch_start_offset: int = -1
    followers: dict[int, FollowerState] = field(default_factory=dict)
    isr_change_in_flight: bool = False
    fenced: bool = False  # the ZooKeeper session was lost: leadership unconfirmed until a new state

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    def state(self) -> PartitionState:
        return PartitionState(self.leader, self.leader_epoch, tuple(sorted(self.isr)), self.replicas,
                              self.partition_epoch, leader_recovery_state=self.leader_recovery_state)

    # -- role changes ---------------------------------------------------------------------------

    def apply(self, state: PartitionState, now_ms: int) -> str:
        """Kafka's ``becomeLeaderOrFollower`` checks for one partition, then ``makeLeader``/``makeFollower``."""
        if state.leader_epoch >= self.leader_epoch and state.partition_epoch >= self.partition_epoch:
            self.fenced = False  # the cluster's current state, read after the session came back
        if state.leader_epoch < self.leader_epoch:
            return Transition.NONE  # stale: an older controller decision reached us late
        if state.leader_epoch == self.leader_epoch:
            if state.partition_epoch <= self.partition_epoch:
                return Transition.NONE
            self._take(state)
            if self.is_leader:
                self._track_followers(now_ms)
            return Transition.UPDATED
        was_leader = self.is_leader
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self._take(state)
        if self.is_leader:
            self._make_leader(now_ms)
            return Transition.BECAME_LEADER
        self.followers.clear()
        if was_leader:
            log.info("%s: leader %d at epoch %d, this broker follows now", self.tp, state.leader, state.leader_epoch)
        return Transition.BECAME_FOLLOWER

    def _take(self, state: PartitionState) -> None:
        self.partition_epoch = state.partition_epoch
        self.replicas = state.replicas
        self.isr = frozenset(state.isr)
        self.leader_recovery_state = state.leader_recovery_state
        self.isr_change_in_flight = False

    def update_replicas(self, replicas: tuple[int, ...], now_ms: int) -> bool:
        """The assignment changed without a new state (a reassignment adds or drops replicas): a leader
        starts or stops tracking their fetches. Returns whether anything changed."""
        if replicas == self.replicas:
            return False
        self.replicas = replicas
        if self.is_leader:
            self._track_followers(now_ms)
        return True

    def _make_leader(self, now_ms: int) -> None:
        plog = self.log
        self.leader_epoch_start_offset = plog.log_end_offset
        # Kafka's assignEpochStartOffset: the epoch starts at our end, even before a record is written,
        # so OffsetForLeaderEpoch answers a follower of the previous epoch with where it diverges.
        plog.leader_epoch_cache.assign(self.leader_epoch, plog.log_end_offset)
        self.followers = {}
        self._track_followers(now_ms, reset=True)
        log.info("%s: leader at epoch %d from offset %d, ISR %s", self.tp, self.leader_epoch,
                 self.leader_epoch_start_offset, sorted(self.isr))
        self.maybe_increment_high_watermark()

    def _track_followers(self, now_ms: int, reset: bool = False) -> None:
        """One FollowerState per other replica; ISR members count as caught up at leadership start."""
        for r in self.replicas:
            if r == self.local_id:
                continue
            if r not in self.followers or reset:
                self.followers[r] = FollowerState(r, last_caught_up_time_ms=now_ms if r in self.isr else 0)
        for r in list(self.followers):
            if r not in self.replicas:
                del self.followers[r]

    # -- leader: follower fetches, ISR and high watermark ----------------------------------------

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int) -> bool:
        """Record a follower's fetch; returns whether the high watermark moved."""
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        follower.update_fetch(fetch_offset, log_start_offset, now_ms, self.log.log_end_offset)
        return self.maybe_increment_high_watermark()

    def isr_to_expand(self, replica_id: int) -> int | None:
        """``replica_id``, the follower that just fetched, if it is out of the ISR and caught up with the HW and
        this epoch (Kafka's ``maybeExpandIsr`` for the fetching replica). Only the fetching follower: another
        one's last fetch may be long ago (it lost the network), and on an idle partition its stale end offset
        still equals the HW; taken back into the ISR, it would hold every acks=all write until the next shrink,
        again and again."""
        if not self.is_leader or self.isr_change_in_flight or replica_id in self.isr or replica_id not in self.replicas:
            return None
        f = self.followers.get(replica_id)
        if f is not None and f.log_end_offset >= self.log.high_watermark \
                and f.log_end_offset >= self.leader_epoch_start_offset:
            return replica_id
        return None

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> set[int]:
        """ISR followers that have not caught up for ``max_lag_ms`` (Kafka ``getOutOfSyncReplicas``)."""
        return {r for r in self.isr if r != self.local_id and (f := self.followers.get(r)) is not None
                and now_ms - f.last_caught_up_time_ms > max_lag_ms}

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset in the ISR (the leader's own included); never backwards."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for r in self.isr:
            if r == self.local_id:
                continue
            f = self.followers.get(r)
            if f is None or f.log_end_offset < 0:
                return False  # an ISR member we have not heard from yet holds the HW where it is
            new_hw = min(new_hw, f.log_end_offset)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def check_enough_replicas_reach_offset(self, required_offset: int, min_isr: int) -> tuple[bool, int]:
        """Kafka's ``checkEnoughReplicasReachOffset`` for a waiting acks=all produce: (done, error code)."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if len(self.isr) >= min_isr:
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if self.fenced:
            # Cut off from ZooKeeper, and another leader elected or presumed: the followers fetch from it now, so
            # this append is never replicated here. Answer at once, as Kafka answers the waits of a leader that
            # became a follower (the write may be lost; the client retries on the new leader), instead of
            # holding the producer for its whole request timeout (the netns suite caught it: a produce that
            # reached the old leader 100 ms before its peers' answer fenced it).
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return False, ErrorCode.NONE
