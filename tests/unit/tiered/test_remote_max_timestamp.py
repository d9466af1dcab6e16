"""ListOffsets MAX_TIMESTAMP (-3) over the remote-only segments (KAFKA-17552):
``RemoteLogReader.find_max_timestamp`` against real segments uploaded to the in-memory RSM of
``test_remote_reader`` (the local copy stays on disk and is the oracle for the first record with a timestamp).

The log: 30 batches of 3 records with growing timestamps, except that the largest one, ``TMAX``, is held
by record 1 of batch 7 (offset 22, epoch 0), record 2 of batch 22 (offset 68, epoch 3) and the local tail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from tests.unit.tiered.test_remote_reader import TP, Tiered, make_tiered

from strata.config import LogConfig
from strata.log.partition_log import ListOffsetsSpec, PartitionLog
from strata.log.segment import TimestampAndOffset
from strata.protocol.records import BatchBuilder
from strata.tiered.api import RemoteLogSegmentState
from strata.tiered.reader import find_max_timestamp

T0 = 1_700_000_000_000
TMAX = T0 + 1_000_000
BATCHES = 30
FIRST_MAX, SECOND_MAX = 22, 68  # offsets: 7 * 3 + 1, 22 * 3 + 2


def ts_of(batch: int, record: int) -> int:
    if (batch, record) in ((7, 1), (22, 2)):
        return TMAX
    return T0 + 10 * batch + (2, 0, 1)[record]


def write_log(plog: PartitionLog, tail_ts: int) -> None:
    for b in range(BATCHES):
        builder = BatchBuilder()
        for r in range(3):
            builder.append(b"v" * (20 + (b * 37) % 90), key=b"k%d" % b, timestamp=ts_of(b, r))
        plog.append_as_leader(builder.build(), leader_epoch=0 if b < 15 else 3)
    plog.roll()
    tail = BatchBuilder()
    tail.append(b"local", timestamp=tail_ts)
    plog.append_as_leader(tail.build(), leader_epoch=3)


@pytest.fixture
def tiered(open_log, tmp_path) -> Iterator[Tiered]:
    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog, TMAX)
    t = make_tiered(plog, tmp_path)
    assert len(t.mds) >= 4 and t.md_of(FIRST_MAX) is not t.md_of(SECOND_MAX)
    yield t
    t.cache.close()


LOCAL_START = BATCHES * 3  # the local tail's offset: everything below is remote-only for these tests


def test_the_first_record_with_the_largest_remote_timestamp(tiered):
    got = tiered.reader.find_max_timestamp(TP, 0, LOCAL_START, None)
    assert got == TimestampAndOffset(TMAX, FIRST_MAX, 0)
    # the local log (which still holds every segment here) agrees: Kafka's earliest offset with the maximum
    assert tiered.plog.fetch_offset_by_timestamp(ListOffsetsSpec.MAX_TIMESTAMP) == got


def test_only_the_winning_segment_is_read(tiered):
    tiered.reader.find_max_timestamp(TP, 0, LOCAL_START, None)
    read = {key for key, _, _ in tiered.rsm.segment_fetches}
    assert read == {tiered.md_of(FIRST_MAX).remote_log_segment_id.id}


def test_a_tie_with_the_local_log_goes_to_the_earlier_remote_offset(tiered):
    assert tiered.reader.find_max_timestamp(TP, 0, LOCAL_START, TMAX) == (TMAX, FIRST_MAX, 0)


def test_a_larger_local_maximum_needs_no_remote_read(tiered):
    assert tiered.reader.find_max_timestamp(TP, 0, LOCAL_START, TMAX + 1) is None
    assert tiered.rsm.segment_fetches == [] and tiered.rsm.index_fetches == []


def test_a_maximum_below_the_log_start_moves_on_to_the_next_segment(tiered):
    """DeleteRecords inside the segment past offset 22: the next segment holding TMAX answers."""
    assert tiered.reader.find_max_timestamp(TP, FIRST_MAX + 1, LOCAL_START, None) == (TMAX, SECOND_MAX, 3)
    # a log start past every remote TMAX: the largest remaining remote timestamp (batch 29's, record 0)
    last = tiered.mds[-1]
    got = tiered.reader.find_max_timestamp(TP, SECOND_MAX + 1, LOCAL_START, None)
    assert got == (ts_of(29, 0), 29 * 3, 3) and got.offset <= last.end_offset


def test_segments_from_the_local_log_start_on_are_left_to_the_local_search(tiered):
    md = tiered.md_of(FIRST_MAX)
    got = tiered.reader.find_max_timestamp(TP, 0, md.start_offset, None)
    before = [m for m in tiered.mds if m.start_offset < md.start_offset]
    best = max(before, key=lambda m: m.max_timestamp_ms)
    assert got is not None and got.timestamp == best.max_timestamp_ms
    assert got == tiered.plog.fetch_offset_by_timestamp(best.max_timestamp_ms)


def test_the_segment_filter_and_unfinished_segments(tiered):
    first = tiered.md_of(FIRST_MAX)
    skip_first = find_max_timestamp(tiered.rsm, tiered.rlmm, tiered.cache, TP, 0, LOCAL_START, None,
                                    segment_filter=lambda m: m.remote_log_segment_id != first.remote_log_segment_id)
    assert skip_first == (TMAX, SECOND_MAX, 3)
    tiered.rlmm.segments[first.remote_log_segment_id] = replace(
        first, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    assert tiered.reader.find_max_timestamp(TP, 0, LOCAL_START, None) == (TMAX, SECOND_MAX, 3)


def test_a_segment_whose_maximum_is_not_a_record_timestamp_is_passed_over(tiered):
    """The copier stores a segment's mtime as its maximum when no record has a timestamp: no record
    matches it, so the next candidate answers instead of nothing."""
    md = tiered.md_of(SECOND_MAX)
    tiered.rlmm.segments[md.remote_log_segment_id] = replace(md, max_timestamp_ms=TMAX + 5)
    assert tiered.reader.find_max_timestamp(TP, 0, LOCAL_START, None) == (TMAX, FIRST_MAX, 0)


def test_the_local_answer_skips_a_maximum_below_the_log_start(open_log):
    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog, T0)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.fetch_offset_by_timestamp(ListOffsetsSpec.MAX_TIMESTAMP) == (TMAX, FIRST_MAX, 0)
    plog.delete_records(FIRST_MAX + 1)  # inside batch 7: its TMAX record is gone, batch 22's answers
    assert plog.fetch_offset_by_timestamp(ListOffsetsSpec.MAX_TIMESTAMP) == (TMAX, SECOND_MAX, 3)
