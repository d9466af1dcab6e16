"""The aborted transactions a read_committed fetch returns are bounded by the segment that served it.

Kafka's ``LocalLog.addAbortedTransactions`` bounds them at the next segment's base offset; bounding them at
the LSO made every fetch read the transaction index of every later segment and return every later abort
(found by the transactions benchmark: 630 index opens for 37 fetches, the response growing with the log).
"""

from __future__ import annotations

from strata.config import LogConfig
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import BatchBuilder, ControlRecordType, build_control_batch

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=1)


def _aborted_txn(plog, clock, pid: int) -> tuple[int, int]:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    b.append(b"x" * 300, timestamp=clock.milliseconds())
    first = plog.append_as_leader(b.build(), leader_epoch=0).first_offset
    marker = build_control_batch(ControlRecordType.ABORT, producer_id=pid, producer_epoch=0,
                                 timestamp=clock.milliseconds())
    last = plog.append_as_leader(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR).first_offset
    return first, last


def test_a_read_needs_only_the_aborts_up_to_the_next_segment(open_log, clock) -> None:
    plog = open_log(CONFIG)
    spans = [_aborted_txn(plog, clock, pid) for pid in range(1, 13)]
    plog.update_high_watermark(plog.log_end_offset)
    assert len(plog.segments) >= 4
    everything = plog.collect_aborted_transactions(0, plog.last_stable_offset)
    assert [a.first_offset for a in everything] == [first for first, _ in spans]

    first_segment = plog.segments[0]
    bound = plog.aborted_transactions_upper_bound(first_segment.base_offset)
    assert bound == plog.segments[1].base_offset
    bounded = plog.collect_aborted_transactions(0, bound)
    # every abort overlapping the first segment, none that starts after it
    assert [a.first_offset for a in bounded] == [first for first, _ in spans if first < bound]
    assert len(bounded) < len(everything)

    last = plog.segments[-1]
    assert plog.aborted_transactions_upper_bound(last.base_offset) == plog.last_stable_offset


def test_an_abort_whose_marker_is_in_a_later_segment_is_included(open_log, clock) -> None:
    plog = open_log(CONFIG)
    b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    b.append(b"doomed", timestamp=clock.milliseconds())
    first = plog.append_as_leader(b.build(), leader_epoch=0).first_offset
    seq = 1
    while len(plog.segments) < 3:  # the transaction's data rolls into later segments
        more = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=seq, transactional=True)
        more.append(b"y" * 300, timestamp=clock.milliseconds())
        plog.append_as_leader(more.build(), leader_epoch=0)
        seq += 1
    marker = build_control_batch(ControlRecordType.ABORT, producer_id=7, producer_epoch=0,
                                 timestamp=clock.milliseconds())
    plog.append_as_leader(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    plog.update_high_watermark(plog.log_end_offset)
    bound = plog.aborted_transactions_upper_bound(plog.segments[0].base_offset)
    assert [a.first_offset for a in plog.collect_aborted_transactions(0, bound)] == [first]
