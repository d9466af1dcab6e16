"""The share-partition leader's view of a log read: whole batches, their offsets, the bytes of a range, the
aborted transactional batches it must archive, and the errors it tells clients."""

from __future__ import annotations

from pathlib import Path

from strata.broker.share.log_reader import ShareRead, aborted_ranges, local_batches, whole_batches
from strata.broker.share.partition_manager import persister_error
from strata.errors import ErrorCode
from strata.log.file_records import FileRecords, FileSlice
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


def test_a_local_read_is_headers_only_and_slices_stay_in_the_segment_file(tmp_path: Path) -> None:
    """The local path never reads the records: batches from their headers (bounded by offset and about
    MaxRecords), and the acquired range as a slice of the same file (sent with sendfile)."""
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"pad" + _log())
    file = FileRecords(path)
    try:
        sl = FileSlice(file, 3, path.stat().st_size - 3)
        assert [h.base_offset for _, h in local_batches(sl, 100, None)] == [0, 3, 5, 6, 7, 9]
        assert [h.base_offset for _, h in local_batches(sl, 5, None)] == [0, 3]  # the HWM/LSO bound
        assert [h.base_offset for _, h in local_batches(sl, 100, 4)] == [0, 3]  # about MaxRecords, whole batches
        assert [h.base_offset for _, h in local_batches(sl, 100, 1)] == [0]  # at least one batch
        batches = local_batches(sl, 100, None)
        read = ShareRead(sl, tuple(batches))
        part = read.slice(4, 5)
        assert isinstance(part, FileSlice) and part.file is file
        _, inner = whole_batches(part.read(), 100)
        assert [h.base_offset for _, h in inner] == [3, 5]
        assert read.slice(50, 60) == b""
    finally:
        file.close()


def test_coordinator_errors_reach_clients_as_kafka_maps_them() -> None:
    assert persister_error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert persister_error(ErrorCode.NOT_COORDINATOR) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert persister_error(ErrorCode.FENCED_LEADER_EPOCH) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert persister_error(ErrorCode.FENCED_STATE_EPOCH) == ErrorCode.FENCED_STATE_EPOCH
    assert persister_error(ErrorCode.INVALID_REQUEST) == ErrorCode.UNKNOWN_SERVER_ERROR
