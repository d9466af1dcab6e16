"""Follower truncation (KIP-101/279) against Kafka 3.9's cases, plus a simulated cluster that checks the
protocol always lands on the longest common prefix of follower and leader logs."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.log.leader_epoch import LeaderEpochFileCache
from strata.replication.truncation import (
    OffsetTruncationState,
    end_offset_for,
    epoch_cache,
    follower_end_offset_for_epoch,
    offset_truncation_state,
)

UNDEFINED = (-1, -1)


# -- end_offset_for (LeaderEpochFileCacheTest cases, through the pairs API) -------------------------


@pytest.mark.parametrize(("epochs", "requested", "leo", "expected"), [
    ([(2, 10)], 2, 11, (2, 11)),  # shouldAddEpochAndMessageOffsetToCache
    ([(2, 11), (3, 12)], -1, 0, UNDEFINED),  # shouldReturnUndefinedOffsetIfUndefinedEpochRequested
    ([], 0, 0, UNDEFINED),  # shouldReturnUnsupportedIfNoEpochRecorded
    ([], -1, 73, UNDEFINED),  # ...AndUndefinedEpochRequested
    ([(5, 11), (6, 12), (7, 13)], 4, 0, (4, 11)),  # shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch
    ([(1, 11), (2, 13), (3, 15)], 2, 17, (2, 15)),  # shouldGetFirstOffsetOfSubsequentEpoch...
    ([(0, 10), (2, 13), (4, 17)], 1, 0, (0, 13)),  # shouldReturnNextAvailableEpochIfThereIsNoExactEpoch...
    ([(0, 10), (2, 13), (4, 17)], 2, 0, (2, 17)),
    ([(0, 10), (2, 13), (4, 17)], 3, 0, (2, 17)),
    ([(2, 100)], 3, 100, UNDEFINED),  # shouldReturnInvalidOffsetIfEpochIsRequestedWhichIsNotCurrentlyTracked
    ([(2, 6)], 2, 7, (2, 7)),  # shouldSupportEpochsThatDoNotStartFromZero
    ([(5, 11), (6, 12), (7, 13), (7, 12)], 5, 0, (5, 12)),  # shouldTruncateIfMatchingEpochButEarlierStartingOffset
    ([(5, 11), (6, 12), (7, 13), (7, 12)], 6, 0, (5, 12)),
])
def test_end_offset_for(epochs: list[tuple[int, int]], requested: int, leo: int, expected: tuple[int, int]) -> None:
    assert end_offset_for(epochs, requested, leo) == expected


def test_a_cache_is_used_as_is() -> None:
    cache = LeaderEpochFileCache(None)
    cache.assign(0, 0)
    cache.assign(3, 5)
    assert epoch_cache(cache) is cache
    assert end_offset_for(cache, 1, 9) == (0, 5)
    assert follower_end_offset_for_epoch(cache, 3, 9) == (3, 9)
    assert follower_end_offset_for_epoch(cache, 4, 9) is None  # UnifiedLog.endOffsetForEpoch: undefined -> None
    assert follower_end_offset_for_epoch([], 0, 0) is None


# -- offset_truncation_state: every branch of getOffsetTruncationState ----------------------------

FOLLOWER = [(0, 0), (2, 1), (4, 2)]  # the replica log of AbstractFetcherThreadTest.testTruncation, LEO 3


@pytest.mark.parametrize(("leader_epoch", "leader_end", "epochs", "leo", "fetch_offset", "expected"), [
    # the leader has no end offset for the epoch: truncate to the fetch offset (the high watermark)
    (-1, -1, FOLLOWER, 3, 2, (2, True)),
    (4, -1, FOLLOWER, 3, 0, (0, True)),
    # an offset without an epoch (OffsetsForLeaderEpoch v0): the leader's offset, capped at our LEO
    (-1, 2, FOLLOWER, 3, 0, (2, True)),
    (-1, 9, FOLLOWER, 3, 0, (3, True)),
    # the follower knows the epoch: min(leader end, our end of that epoch, LEO)
    (4, 5, FOLLOWER, 3, 0, (3, True)),  # our latest epoch: our end is the LEO
    (2, 5, FOLLOWER, 3, 0, (2, True)),  # our epoch 2 ends where 4 starts
    (2, 1, FOLLOWER, 3, 0, (1, True)),  # the leader's epoch 2 ends earlier
    (0, 0, FOLLOWER, 3, 0, (0, True)),
    # an epoch we never saw: cut back to the end of our largest epoch below it and ask again
    (3, 2, FOLLOWER, 3, 0, (2, False)),
    (1, 1, FOLLOWER, 3, 0, (1, False)),
    (9, 7, FOLLOWER, 3, 0, (3, True)),  # above all of ours: our cache cannot answer -> pre-KIP-279 rule
    # our history cannot answer (no epochs at all): the leader's offset, capped at our LEO
    (3, 2, [], 5, 0, (2, True)),
    (3, 8, [], 5, 0, (5, True)),
    # epoch below all of ours: we report that epoch ending where our first epoch starts
    (0, 4, [(2, 3), (4, 6)], 8, 0, (3, True)),
])
def test_offset_truncation_state(
    leader_epoch: int, leader_end: int, epochs: list[tuple[int, int]], leo: int, fetch_offset: int,
    expected: tuple[int, bool],
) -> None:
    result = offset_truncation_state(leader_epoch, leader_end, epochs=epochs, log_end_offset=leo,
                                     fetch_offset=fetch_offset)
    assert result == OffsetTruncationState(*expected)
    assert result.offset == expected[0] and result.truncation_completed == expected[1]


def test_kafka_test_truncation_converges_in_three_rounds() -> None:
    """AbstractFetcherThreadTest.testTruncation: replica epochs 0,2,4 vs leader epochs 1,3,5 (one record each):
    nothing is shared, so the replica must end up empty -- which takes three OffsetsForLeaderEpoch rounds."""
    leader, leader_leo = [(1, 0), (3, 1), (5, 2)], 3
    follower, follower_leo = list(FOLLOWER), 3
    rounds = []
    while True:
        asked = follower[-1][0]
        answer = end_offset_for(leader, asked, leader_leo)
        result = offset_truncation_state(*answer, epochs=follower, log_end_offset=follower_leo, fetch_offset=0)
        rounds.append((asked, answer, result))
        follower = [(e, s) for e, s in follower if s < result.offset]
        follower_leo = min(follower_leo, result.offset)
        if result.truncation_completed:
            break
    assert rounds == [
        (4, (3, 2), (2, False)),
        (2, (1, 1), (1, False)),
        (0, (0, 0), (0, True)),
    ]
    assert follower_leo == 0


def test_kip_101_no_loss_when_follower_restarts() -> None:
    """KIP-101 scenario 1: a follower that restarts with a high watermark behind its log must not drop records
    the leader has (HW truncation would lose m2 once the follower becomes leader)."""
    leader, follower = [(0, 0)], [(0, 0)]
    answer = end_offset_for(leader, 0, 2)  # the leader has m1, m2 in epoch 0
    assert answer == (0, 2)
    assert offset_truncation_state(*answer, epochs=follower, log_end_offset=2, fetch_offset=1) == (2, True)


def test_kip_101_divergence_after_both_crash() -> None:
    """KIP-101 scenario 2: A wrote m2 (epoch 0) that B never got; B became leader (epoch 1) and wrote m3 at
    offset 1. A must cut m2 instead of keeping a log that differs from B's at offset 1."""
    answer = end_offset_for([(0, 0), (1, 1)], 0, 2)
    assert answer == (0, 1)
    assert offset_truncation_state(*answer, epochs=[(0, 0)], log_end_offset=2, fetch_offset=1) == (1, True)


def test_an_epoch_led_without_writes_needs_the_cache_trim_at_the_log_end() -> None:
    """A replica led epoch 3 but wrote nothing (its cache has (3, 5) at its LEO 5); the new leader has epochs
    1, 2, 4. The answer to "where does 3 end" is epoch 2, which the follower never saw, so it truncates to the end
    of its epoch 1 -- its LEO, a no-op for the records. Only the cache trim that Kafka's ``truncateTo`` does even
    then makes the next round ask about epoch 1 instead of asking about epoch 3 forever."""
    leader = [(1, 0), (2, 5), (4, 8)]
    follower = LeaderEpochFileCache(None)
    follower.assign(1, 0)
    follower.assign(3, 5)
    first = offset_truncation_state(*end_offset_for(leader, 3, 10), epochs=follower, log_end_offset=5,
                                    fetch_offset=0)
    assert first == (5, False)
    follower.truncate_from_end(5)  # what UnifiedLog.truncateTo(5) does on a log that ends at 5
    assert follower.latest_epoch == 1
    second = offset_truncation_state(*end_offset_for(leader, 1, 10), epochs=follower, log_end_offset=5,
                                     fetch_offset=0)
    assert second == (5, True)


# -- the protocol in a simulated cluster ------------------------------------------------------------


@dataclass
class Replica:
    """A log as (epoch per offset) plus its epoch cache, updated the way Kafka updates it."""

    records: list[int] = field(default_factory=list)
    cache: LeaderEpochFileCache = field(default_factory=lambda: LeaderEpochFileCache(None))

    @property
    def leo(self) -> int:
        return len(self.records)

    def append(self, epochs: list[int]) -> None:
        for epoch in epochs:
            self.cache.assign(epoch, len(self.records))
            self.records.append(epoch)

    def truncate_to(self, offset: int) -> None:
        """``UnifiedLog.truncateTo``: a no-op truncation still trims the epoch cache at the log end, dropping
        the entry of an epoch this replica led without writing anything."""
        if offset >= self.leo:
            self.cache.truncate_from_end(self.leo)
            return
        del self.records[offset:]
        self.cache.truncate_from_end(offset)


def truncate_against(follower: Replica, leader: Replica) -> int:
    """The follower's Truncating phase against ``leader``; returns the number of OffsetsForLeaderEpoch rounds."""
    rounds = 0
    while True:
        latest = follower.cache.latest_epoch
        if latest is None:  # no epochs: Kafka truncates to the high watermark, which we take as 0
            follower.truncate_to(0)
            return rounds
        rounds += 1
        answer = leader.cache.end_offset_for(latest, leader.leo)
        result = offset_truncation_state(*answer, epochs=follower.cache, log_end_offset=follower.leo, fetch_offset=0)
        follower.truncate_to(result.offset)
        if result.truncation_completed:
            return rounds
        assert rounds <= 64, "truncation does not converge"


def _history(rnd: random.Random, length: int = 40) -> list[tuple[int, ...]]:
    """A random cluster history: 0 = elect replica a (any replica: clean or unclean), 1 = the leader appends a
    records, 2 = follower a truncates against the leader and then copies up to b records. Plain random choices
    (seeded by Hypothesis) reach the interesting interleavings far more often than shrink-friendly lists do."""
    events: list[tuple[int, ...]] = []
    for _ in range(length):
        roll = rnd.random()
        if roll < 0.2:
            events.append((0, rnd.randrange(3)))
        elif roll < 0.6:
            events.append((1, rnd.randint(1, 4)))
        else:
            events.append((2, rnd.randrange(3), rnd.randint(0, 6)))
    return events


@settings(max_examples=300)
@given(st.randoms(use_true_random=False))
def test_truncation_finds_the_longest_common_prefix(rnd: random.Random) -> None:
    replicas = [Replica(), Replica(), Replica()]
    leader_id, epoch = 0, 0
    replicas[0].cache.assign(0, 0)
    for event in _history(rnd):
        leader = replicas[leader_id]
        if event[0] == 0:
            leader_id, epoch = event[1], epoch + 1
            replicas[leader_id].cache.assign(epoch, replicas[leader_id].leo)  # makeLeader: (epoch, LEO)
        elif event[0] == 1:
            leader.append([epoch] * event[1])
        elif event[1] != leader_id:
            follower = replicas[event[1]]
            common = 0
            while (common < min(follower.leo, leader.leo)
                   and follower.records[common] == leader.records[common]):
                common += 1
            truncate_against(follower, leader)
            # the follower keeps exactly what it shares with the leader: nothing diverging, nothing more lost
            assert follower.records == leader.records[:common]
            follower.append(leader.records[follower.leo:follower.leo + event[2]])
