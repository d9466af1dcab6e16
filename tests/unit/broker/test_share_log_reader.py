"""The share-partition leader's view of a log read: whole batches, their offsets, the bytes of a range, the
aborted transactional batches it must archive, and the errors it tells clients."""

from __future__ import annotations

from strata.broker.share.log_reader import ShareRead, aborted_ranges, whole_batches
from strata.broker.share.partition_manager import persister_error
from strata.errors import ErrorCode
from strata.protocol.records.builder import build_batch, build_control_batch
from strata.protocol.records.record import ControlRecordType


def _log() -> bytes:
    """offsets 0-2 plain, 3-4 producer 7 (aborted), 5 plain, 6 abort marker of 7, 7-8 producer 9 (committed),
    9 commit marker of 9."""
    return b"".join([
        build_batch([b"a", b"b", b"c"], base_offset=0),
        build_batch([b"x", b"y"], base_offset=3, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True),
        build_batch([b"d"], base_offset=5),
        build_control_batch(ControlRecordType.ABORT, producer_id=7, producer_epoch=0, base_offset=6),
        build_batch([b"p", b"q"], base_offset=7, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True),
        build_control_batch(ControlRecordType.COMMIT, producer_id=9, producer_epoch=0, base_offset=9),
    ])


def test_whole_batches_drops_a_partial_batch_and_those_at_or_past_the_bound() -> None:
    buf = _log()
    records, batches = whole_batches(buf[:-5], 100)
    assert [h.base_offset for _, h in batches] == [0, 3, 5, 6, 7]
    assert len(records) < len(buf) - 5
    _, bounded = whole_batches(buf, 5)
    assert [h.base_offset for _, h in bounded] == [0, 3]


def test_aborted_ranges_are_the_aborted_producer_s_batches_up_to_its_marker() -> None:
    _, batches = whole_batches(_log(), 100)
    assert aborted_ranges(batches, [(7, 3)]) == ((3, 4),)
    assert aborted_ranges(batches, []) == ()
    # a transaction that started before the read: its batches count from the start of the read
    assert aborted_ranges(batches[1:], [(7, 1)]) == ((3, 4),)


def test_slice_covers_the_batches_overlapping_a_range() -> None:
    records, batches = whole_batches(_log(), 100)
    read = ShareRead(records, tuple(batches))
    assert read.offsets()[:3] == [(0, 2), (3, 4), (5, 5)]
    _, inner = whole_batches(read.slice(4, 5), 100)
    assert [h.base_offset for _, h in inner] == [3, 5]
    assert read.slice(50, 60) == b""


def test_coordinator_errors_reach_clients_as_kafka_maps_them() -> None:
    assert persister_error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert persister_error(ErrorCode.NOT_COORDINATOR) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert persister_error(ErrorCode.FENCED_LEADER_EPOCH) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert persister_error(ErrorCode.FENCED_STATE_EPOCH) == ErrorCode.FENCED_STATE_EPOCH
    assert persister_error(ErrorCode.INVALID_REQUEST) == ErrorCode.UNKNOWN_SERVER_ERROR
