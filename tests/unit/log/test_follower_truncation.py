"""A follower's log operations: truncation to a divergence point, full truncation, log start from the leader."""

from __future__ import annotations

from tests.conftest import OpenLog

from strata.errors import OutOfOrderSequenceError
from strata.log.checkpoints import EpochEntry
from strata.protocol.records.builder import build_batch

T = 1_700_000_000_000  # the ManualClock's now


def idempotent(n: int, seq: int, epoch: int) -> bytes:
    return build_batch([b"v%d" % i for i in range(n)], producer_id=7, producer_epoch=0, base_sequence=seq, timestamp=T,
                       partition_leader_epoch=epoch)


def test_truncate_drops_the_tail_epochs_and_producer_state(open_log: OpenLog) -> None:
    plog = open_log()
    plog.append_as_leader(idempotent(5, 0, 0), leader_epoch=0)   # offsets 0-4, epoch 0
    plog.roll()
    plog.append_as_leader(idempotent(5, 5, 1), leader_epoch=1)   # 5-9, epoch 1
    plog.append_as_leader(idempotent(5, 10, 2), leader_epoch=2)  # 10-14, epoch 2
    plog.update_high_watermark(15)
    assert plog.leader_epoch_cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(2, 10)]

    # followers truncate at batch boundaries (epoch starts, high watermarks, leader end offsets)
    assert plog.truncate_to(10)
    assert plog.log_end_offset == 10 and plog.high_watermark == 10
    assert plog.leader_epoch_cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(1, 5)]
    # the producer's last kept sequence is 9: a batch at 15 is out of order, the one at 10 continues
    try:
        plog.append_as_leader(idempotent(3, 15, 3), leader_epoch=3)
        raise AssertionError("sequence 15 accepted after the truncation")
    except OutOfOrderSequenceError:
        pass
    info = plog.append_as_leader(idempotent(3, 10, 3), leader_epoch=3)
    assert (info.first_offset, info.last_offset) == (10, 12)
    assert not plog.truncate_to(13) and not plog.truncate_to(99)

    # the truncation survives a reopen (no stale epochs or index entries)
    plog.close()
    again = open_log()
    assert again.log_end_offset == 13
    assert again.leader_epoch_cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(3, 10)]


def test_truncate_fully_restarts_at_an_offset(open_log: OpenLog) -> None:
    plog = open_log()
    plog.append_as_leader(idempotent(5, 0, 0), leader_epoch=0)
    plog.truncate_fully_and_start_at(100)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (100, 100, 100)
    assert plog.leader_epoch_cache.epoch_entries() == []
    info = plog.append_as_follower(build_batch([b"x"], base_offset=100, partition_leader_epoch=4, timestamp=T))
    assert info.last_offset == 100 and plog.leader_epoch_cache.epoch_entries() == [EpochEntry(4, 100)]


def test_follower_log_start_follows_the_leader_up_to_its_high_watermark(open_log: OpenLog) -> None:
    plog = open_log()
    plog.append_as_follower(build_batch([b"a"] * 10, partition_leader_epoch=0, timestamp=T))
    plog.update_high_watermark(6)
    plog.maybe_increment_log_start_offset(8)
    assert plog.log_start_offset == 6
    plog.maybe_increment_log_start_offset(3)
    assert plog.log_start_offset == 6
