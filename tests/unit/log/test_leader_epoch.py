"""LeaderEpochFileCache against the cases of Kafka's LeaderEpochFileCacheTest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from strata.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from strata.log.errors import LogStateError
from strata.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochFileCache

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class CountingCheckpoint(LeaderEpochCheckpointFile):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes = 0

    def write(self, entries: Sequence[EpochEntry]) -> None:
        self.writes += 1
        super().write(entries)


@pytest.fixture
def checkpoint(tmp_path: Path) -> CountingCheckpoint:
    return CountingCheckpoint(tmp_path / "leader-epoch-checkpoint")


@pytest.fixture
def cache(checkpoint: CountingCheckpoint) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(checkpoint)


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, o) for e, o in pairs]


def test_add_epoch_and_end_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 10)
    assert cache.latest_epoch == 2
    assert cache.epoch_entries() == entries((2, 10))
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_latest_epoch_returns_log_end_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_undefined_epoch_requested(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_start_offset_of_an_assigned_epoch_never_moves_forward(
    cache: LeaderEpochFileCache, checkpoint: CountingCheckpoint
) -> None:
    cache.assign(2, 6)
    cache.assign(2, 10)
    cache.assign(2, 6)
    assert cache.epoch_entries() == entries((2, 6))
    assert checkpoint.writes == 1  # the ignored assignments did not rewrite the file


def test_same_start_offset_new_epoch_replaces(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.epoch_entries() == entries((3, 9))


def test_requested_epoch_below_first_returns_first_start(cache: LeaderEpochFileCache) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_same_epoch_earlier_start_truncates(cache: LeaderEpochFileCache) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    cache.assign(7, 12)
    assert cache.epoch_entries() == entries((5, 11), (7, 12))
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_previous_epoch_end_is_next_epoch_start(cache: LeaderEpochFileCache) -> None:
    for epoch, offset in [(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)]:
        cache.assign(epoch, offset)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_gap_in_epochs_reports_floor_epoch(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 10)
    cache.assign(2, 13)
    cache.assign(4, 17)
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_unknown_and_empty_cases(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(7, 0) == UNDEFINED
    assert cache.latest_epoch is None
    assert cache.latest_entry is None and cache.earliest_entry is None
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_lower_epoch_truncates_newer_epochs(cache: LeaderEpochFileCache) -> None:
    # Kafka's shouldEnforceMonotonicallyIncreasingEpochs: a lower epoch is not ignored
    cache.assign(1, 5)
    cache.assign(2, 6)
    cache.assign(1, 7)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert cache.epoch_entries() == entries((1, 7))


def test_lower_start_offset_truncates(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.epoch_entries() == entries((3, 5))


def test_leader_changes_many_times(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_negative_assignment_rejected(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(LogStateError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -5)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (8, [(2, 6)]),  # on an epoch boundary
        (9, [(2, 6), (3, 8)]),  # between boundaries
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
        (100, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_end(cache: LeaderEpochFileCache, offset: int, expected: list[tuple[int, int]]) -> None:
    for epoch, start in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(offset)
    assert cache.epoch_entries() == entries(*expected)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (8, [(3, 8), (4, 11)]),
        (1, [(2, 6), (3, 8), (4, 11)]),
        (6, [(2, 6), (3, 8), (4, 11)]),
        (11, [(4, 11)]),
        (9, [(3, 9), (4, 11)]),
        (15, [(4, 15)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(
    cache: LeaderEpochFileCache, offset: int, expected: list[tuple[int, int]]
) -> None:
    for epoch, start in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(offset)
    assert cache.epoch_entries() == entries(*expected)


def test_truncate_from_start_between_first_two(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 0)
    cache.assign(1, 7)
    cache.assign(2, 10)
    cache.truncate_from_start(5)
    assert cache.epoch_entries() == entries((0, 5), (1, 7), (2, 10))


def test_truncations_on_empty_cache(cache: LeaderEpochFileCache) -> None:
    cache.truncate_from_start(7)
    cache.truncate_from_end(7)
    assert cache.epoch_entries() == []


def test_epoch_for_offset(cache: LeaderEpochFileCache) -> None:
    assert cache.epoch_for_offset(5) is None
    cache.assign(2, 10)
    cache.assign(4, 15)
    cache.assign(7, 20)
    assert cache.epoch_for_offset(5) is None
    assert cache.epoch_for_offset(10) == 2
    assert cache.epoch_for_offset(14) == 2
    assert cache.epoch_for_offset(15) == 4
    assert cache.epoch_for_offset(19) == 4
    assert cache.epoch_for_offset(20) == 7
    assert cache.epoch_for_offset(1_000) == 7


def test_neighbour_epochs(cache: LeaderEpochFileCache) -> None:
    assert cache.previous_epoch(2) is None
    cache.assign(2, 10)
    cache.assign(4, 15)
    cache.assign(10, 20)
    assert cache.previous_epoch(4) == 2
    assert cache.previous_epoch(10) == 4
    assert cache.previous_epoch(2) is None
    assert cache.next_epoch(2) == 4
    assert cache.next_epoch(10) is None
    assert cache.epoch_entry(4) == EpochEntry(4, 15)
    assert cache.epoch_entry(3) is None
    assert cache.earliest_entry == EpochEntry(2, 10)
    assert cache.latest_entry == EpochEntry(10, 20)


def test_epoch_entries_in_range_leaves_cache_alone(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(0, 0), (1, 10), (2, 20), (3, 30)]:
        cache.assign(epoch, start)
    assert cache.epoch_entries_in_range(15, 30) == entries((1, 15), (2, 20))
    assert cache.epoch_entries_in_range(-1, 20) == entries((0, 0), (1, 10))
    assert cache.epoch_entries_in_range(25, 100) == entries((2, 25), (3, 30))
    assert cache.epoch_entries() == entries((0, 0), (1, 10), (2, 20), (3, 30))


def test_every_mutation_is_persisted_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    assert path.read_bytes() == b"0\n3\n2 6\n3 8\n4 11\n"
    cache.truncate_from_start(7)
    assert path.read_bytes() == b"0\n3\n2 7\n3 8\n4 11\n"
    cache.truncate_from_end(11)
    assert path.read_bytes() == b"0\n2\n2 7\n3 8\n"
    reloaded = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert reloaded.epoch_entries() == entries((2, 7), (3, 8))
    reloaded.clear_and_flush()
    assert path.read_bytes() == b"0\n0\n"
    assert LeaderEpochFileCache(LeaderEpochCheckpointFile(path)).is_empty


def test_load_replays_assignment_rules(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n3\n1 5\n2 6\n1 7\n")  # a non-monotonic file written by hand
    assert LeaderEpochFileCache(LeaderEpochCheckpointFile(path)).epoch_entries() == entries((1, 7))


def test_no_op_truncations_do_not_rewrite(
    cache: LeaderEpochFileCache, checkpoint: CountingCheckpoint
) -> None:
    cache.assign(2, 6)
    cache.assign(3, 8)
    writes = checkpoint.writes
    cache.truncate_from_start(6)
    cache.truncate_from_start(3)
    cache.truncate_from_end(20)
    assert checkpoint.writes == writes


def test_in_memory_cache_without_checkpoint() -> None:
    cache = LeaderEpochFileCache(None)
    cache.assign(0, 0)
    cache.assign(1, 5)
    cache.truncate_from_end(5)
    assert cache.epoch_entries() == entries((0, 0))
