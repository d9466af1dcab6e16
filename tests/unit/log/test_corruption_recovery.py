"""Local corruption (issue 6): random bit flips and truncations in segments, and corrupt checkpoint files,
against the log loader. ``test_recovery.py`` holds the hand-picked cases; these draw the damage at random
(hypothesis, derandomized and bounded) and cover the files a broker must start without.

The rules under test: after an unclean shutdown the log is cut exactly at the first invalid batch (CRC,
framing, magic, offsets that do not follow on) and later segments go - never an exception that keeps the
broker from starting, never a record served from a damaged batch; a corrupt checkpoint is ignored with a
WARNING where the log itself holds the truth (recovery points, log start offsets, high watermarks, leader
epochs, producer snapshots).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.log.test_recovery import crash, fill, read_all

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile
from strata.log.files import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from strata.log.loader import load_partition_log
from strata.log.manager import LogManager
from strata.log.partition_log import PartitionLog
from strata.protocol.records import BatchBuilder, iter_batches

CONFIG = LogConfig(segment_bytes=8 * 1024, index_interval_bytes=512)
EXAMPLES = settings(max_examples=60, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
EPOCH_BYTES = range(12, 16)  # the partition leader epoch: outside the CRC, not checkable locally


@pytest.fixture
def fresh(tmp_path: Path, clock: ManualClock, scheduler: ManualScheduler) -> Iterator[Callable[..., PartitionLog]]:
    """``fresh(directory=None, config=CONFIG, **load_kwargs)``: open a partition log in a new (or the given)
    directory - hypothesis runs many examples in one test, each needs its own log."""
    opened: list[PartitionLog] = []

    def _open(directory: Path | None = None, config: LogConfig = CONFIG, **kwargs: object) -> PartitionLog:
        directory = directory or tmp_path / uuid.uuid4().hex / "t-0"
        plog = load_partition_log(directory, TopicPartition("t", 0), config, clock, scheduler,
                                  **kwargs)  # type: ignore[arg-type]
        opened.append(plog)
        return plog

    yield _open
    for plog in opened:
        plog.local_log.close_handlers()


# -- segments -------------------------------------------------------------------------------------


@EXAMPLES
@given(segment=st.integers(0, 100), batch=st.integers(0, 100), where=st.floats(0, 1, exclude_max=True),
       bit=st.integers(0, 7))
def test_a_flipped_bit_cuts_the_log_at_that_batch(fresh, clock, segment, batch, where, bit):
    """Anywhere in a batch but the leader epoch: the recovered log ends exactly where that batch began,
    later segments are gone, everything before is intact and readable."""
    plog = fresh()
    values = fill(plog, clock)
    paths = [s.log.path for s in plog.segments]
    crash(plog)
    path = paths[segment % len(paths)]
    data = bytearray(path.read_bytes())
    found = list(iter_batches(bytes(data)))
    position, header = found[batch % len(found)]
    inside = int(where * (header.size - len(EPOCH_BYTES)))
    inside += len(EPOCH_BYTES) if inside >= EPOCH_BYTES.start else 0
    data[position + inside] ^= 1 << bit
    path.write_bytes(bytes(data))
    reopened = fresh(plog.dir, recovery_point=0)
    assert reopened.log_end_offset == header.base_offset, (path.name, position, inside, bit)
    assert reopened.segments[-1].base_offset <= header.base_offset
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened) == values[:header.base_offset]


@EXAMPLES
@given(segment=st.integers(0, 100), batch=st.integers(0, 100), where=st.floats(0, 1, exclude_min=True,
                                                                               exclude_max=True))
def test_a_segment_torn_inside_a_batch_cuts_the_log_there(fresh, clock, segment, batch, where):
    plog = fresh()
    values = fill(plog, clock)
    paths = [s.log.path for s in plog.segments]
    crash(plog)
    path = paths[segment % len(paths)]
    found = list(iter_batches(path.read_bytes()))
    position, header = found[batch % len(found)]
    with open(path, "r+b") as f:
        f.truncate(position + max(1, int(where * header.size)))
    reopened = fresh(plog.dir, recovery_point=0)
    assert reopened.log_end_offset == header.base_offset
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened) == values[:header.base_offset]


def test_a_segment_cut_at_a_batch_boundary_keeps_the_later_segments_and_says_so(fresh, clock, caplog):
    """The cut leaves whole batches: nothing to truncate, and the later segments are intact - deleting them
    would lose more acknowledged records. The offsets in between are gone (a gap, as after compaction)."""
    plog = fresh()
    values = fill(plog, clock)
    middle = plog.segments[1]
    following = plog.segments[2].base_offset
    crash(plog)
    position, header = list(iter_batches(middle.log.path.read_bytes()))[5]
    with open(middle.log.path, "r+b") as f:
        f.truncate(position)
    with caplog.at_level(logging.WARNING, logger="strata.log.loader"):
        reopened = fresh(plog.dir, recovery_point=0)
    assert reopened.log_end_offset == len(values)
    assert f"offsets {header.base_offset} to {following - 1} are missing" in caplog.text
    kept = [reopened.read(o, 1 << 20).records.read() for o in (middle.base_offset, following)]
    assert [h.base_offset for _, h in iter_batches(kept[0])][-1] < header.base_offset
    assert next(iter_batches(kept[1]))[1].base_offset == following


@pytest.mark.parametrize("field,byte,mask", [
    ("magic 2 -> 0 (reads as an old message format)", 16, 0x02),
    ("base offset high bit (relative offset overflow)", 3, 0x01),
    ("base offset low bit (offsets overlap)", 7, 0x01),
    ("base offset, first batch of a segment", 7, 0x04),
])
def test_header_flips_are_corruption_not_a_crash(fresh, clock, field, byte, mask):
    """These used to escape recovery: the magic as UnsupportedForMessageFormatError, a base offset out of
    the segment's range as an index error, an overlapping one silently - each would have kept the broker
    from starting or renumbered records."""
    plog = fresh()
    values = fill(plog, clock)
    segment = plog.segments[1]
    crash(plog)
    data = bytearray(segment.log.path.read_bytes())
    found = list(iter_batches(bytes(data)))
    position, header = found[0] if "first batch" in field else found[3]
    data[position + byte] ^= mask
    segment.log.path.write_bytes(bytes(data))
    reopened = fresh(plog.dir, recovery_point=0)
    assert reopened.log_end_offset == header.base_offset, field
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened) == values[:header.base_offset]


def test_a_compacted_topic_may_have_offset_gaps(fresh):
    """Only a log that is not compacted must be contiguous: gaps (what a cleaner leaves) survive recovery."""
    config = LogConfig(segment_bytes=8 * 1024, cleanup_policy=["compact"])
    plog = fresh(config=config)
    for base in (0, 5, 9):
        b = BatchBuilder(base_offset=base, partition_leader_epoch=0)
        b.append(b"v%d" % base, key=b"k", timestamp=1_000 + base)
        plog.append_as_follower(b.build())
    crash(plog)
    reopened = fresh(plog.dir, config=config, recovery_point=0)
    assert reopened.log_end_offset == 10


def test_an_index_entry_pointing_past_its_offset_is_not_trusted(fresh, clock):
    """A clean reopen trusts indexes that pass the sanity check; an entry whose position is a later batch's
    must not make a read skip the offsets in between."""
    plog = fresh()
    values = fill(plog, clock)
    segment = plog.segments[0]
    plog.close()
    index = bytearray(segment.offset_index.path.read_bytes())
    positions = [p for p, _ in iter_batches(segment.log.path.read_bytes())]
    first_entry_position = int.from_bytes(index[4:8], "big")
    later = next(p for p in positions if p > first_entry_position + 1000)
    index[4:8] = later.to_bytes(4, "big")
    segment.offset_index.path.write_bytes(bytes(index))
    reopened = fresh(plog.dir, had_clean_shutdown=True)
    assert read_all(reopened) == values
    for offset in range(segment.base_offset, reopened.segments[1].base_offset):
        records = reopened.read(offset, 1).records.read()
        (_, header), *_ = iter_batches(records)
        assert header.base_offset <= offset <= header.last_offset, offset


# -- checkpoints ------------------------------------------------------------------------------------


GARBAGE = {
    RECOVERY_POINT_CHECKPOINT: b"0\n1\n\xff\xfe\n",  # not UTF-8
    LOG_START_OFFSET_CHECKPOINT: b"0\n3\nt 0 5\n",  # count mismatch
    REPLICATION_OFFSET_CHECKPOINT: b"7\n0\n",  # unknown version
}


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_corrupt_offset_checkpoints_are_ignored(tmp_path, clock, scheduler, caplog, clean):
    """Kafka's LogManager resets a corrupt recovery-point or log-start checkpoint; so does Strata, and for
    the high watermarks too. Unclean, the reset recovery point means every segment is recovered - here a
    flip in the first segment (long flushed, below the lost recovery point) is found and cut."""
    tp = TopicPartition("t", 0)
    manager = LogManager([tmp_path], lambda _t: CONFIG, clock, scheduler)
    manager.startup()
    plog = manager.get_or_create_log(tp)
    values = fill(plog, clock)
    plog.flush()
    manager.checkpoint()
    if clean:
        manager.shutdown()
    else:
        plog.local_log.close_handlers()
        first = plog.segments[0].log.path
        data = bytearray(first.read_bytes())
        position, victim = list(iter_batches(bytes(data)))[2]
        data[position + 100] ^= 0x20
        first.write_bytes(bytes(data))
    for name, garbage in GARBAGE.items():
        (tmp_path / name).write_bytes(garbage)
    again = LogManager([tmp_path], lambda _t: CONFIG, clock, scheduler)
    with caplog.at_level(logging.WARNING, logger="strata.log.manager"):
        again.startup()
    reopened = again.get_log(tp)
    try:
        expected = values if clean else values[:victim.base_offset]
        assert reopened.log_end_offset == len(expected)
        reopened.update_high_watermark(reopened.log_end_offset)
        assert read_all(reopened) == expected
        assert len([r for r in caplog.records if "ignoring corrupt checkpoint file" in r.getMessage()]) == 3
        for name in GARBAGE:  # rewritten whole at startup
            OffsetCheckpointFile(tmp_path / name).read()
    finally:
        again.shutdown()


@pytest.mark.parametrize("remote", [False, True], ids=["local", "tiered"])
def test_a_corrupt_leader_epoch_checkpoint_is_rebuilt_from_the_batches(fresh, clock, caplog, remote):
    """Kafka fails the log dir here; the batches carry their epochs, so Strata rebuilds the history. For a
    tiered log whose local data starts above the log start, the first epoch is taken back to the log start
    (the remote part's epochs are not in the log layer; Strata's single node never changes epoch)."""
    plog = fresh(remote_log_enabled=remote)
    fill(plog, clock, 90)  # epochs 1, 2, 3 (a new one every 30 batches)
    truth = plog.leader_epoch_cache.epoch_entries()
    assert [e.epoch for e in truth] == [1, 2, 3]
    expected = truth
    if remote:  # the first segments went to the remote tier: local data starts later
        local_start = plog.segments[2].base_offset
        for segment in plog.segments[:2]:
            for path in segment.file_paths(plog.dir, segment.base_offset):
                path.unlink(missing_ok=True)
        epoch = plog.leader_epoch_cache.epoch_for_offset(local_start)
        expected = [EpochEntry(epoch, 0)] + [e for e in truth if e.start_offset > local_start]
    crash(plog)
    (plog.dir / LEADER_EPOCH_CHECKPOINT).write_bytes(b"0\n2\n1 0\nbogus line here\n")
    with caplog.at_level(logging.WARNING, logger="strata.log.loader"):
        reopened = fresh(plog.dir, remote_log_enabled=remote, recovery_point=0)
    assert "ignoring corrupt leader epoch checkpoint" in caplog.text
    assert reopened.leader_epoch_cache.epoch_entries() == expected
    assert LeaderEpochCheckpointFile(plog.dir / LEADER_EPOCH_CHECKPOINT).read() == expected


def test_a_corrupt_producer_snapshot_is_rebuilt_from_the_log(fresh, clock):
    plog = fresh()
    values = fill(plog, clock)
    plog.close()
    snapshots = sorted(plog.dir.glob("*.snapshot"))
    assert snapshots
    for snapshot in snapshots:
        data = bytearray(snapshot.read_bytes())
        data[len(data) // 2] ^= 0x08
        snapshot.write_bytes(bytes(data))
    reopened = fresh(plog.dir, had_clean_shutdown=True)
    assert reopened.producer_state.last_entry(7).last_seq == len(values) - 1


def test_a_corrupt_partition_metadata_is_rewritten_from_the_registry(tmp_path, clock, scheduler):
    """Kafka takes the directory offline; Strata keeps the log of the topic the registry names."""
    tp, topic_id = TopicPartition("t", 0), uuid.uuid4()
    manager = LogManager([tmp_path], lambda _t: CONFIG, clock, scheduler)
    manager.startup()
    values = fill(manager.get_or_create_log(tp, topic_id), clock)
    manager.shutdown()
    (tmp_path / "t-0" / PARTITION_METADATA).write_bytes(b"version: 0\ntopic_id: \xff")
    again = LogManager([tmp_path], lambda _t: CONFIG, clock, scheduler)
    again.startup()
    try:
        plog = again.get_or_create_log(tp, topic_id)
        assert plog.log_end_offset == len(values) and again.topic_id_of(tp) == topic_id
    finally:
        again.shutdown()


def test_recovery_never_overfills_an_index(fresh, clock):
    """Rebuilt indexes place entries from the file's start, the live ones from each reopen; and
    segment.index.bytes may have been lowered since. Recovery keeps a sparser index instead of failing
    the broker's start with "attempt to append to a full time index" (found by the corruption soak)."""
    plog = fresh(config=LogConfig(segment_bytes=1 << 20, index_interval_bytes=1))
    values = fill(plog, clock)
    crash(plog)
    for index in [*plog.dir.glob("*.index"), *plog.dir.glob("*.timeindex")]:  # lost: rebuilt at their new size
        index.unlink()
    small = LogConfig(segment_bytes=1 << 20, index_interval_bytes=1, segment_index_bytes=48)
    reopened = fresh(plog.dir, config=small, recovery_point=0)
    assert reopened.log_end_offset == len(values)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened) == values
