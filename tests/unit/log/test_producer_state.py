"""Producer state: Kafka's sequence/epoch rules, duplicate detection, transactions, snapshot bytes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from crc32c import crc32c

from strata.common import ManualClock
from strata.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from strata.log.checkpoints import CorruptCheckpointError
from strata.log.errors import LogStateError, TransactionCoordinatorFencedError
from strata.log.producer_state import (
    INT32_MAX,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    write_snapshot,
)
from strata.protocol.records import (
    ControlRecord,
    ControlRecordType,
    build_batch,
    build_control_batch,
    parse_header,
)

PID = 1000
CLIENT = AppendOrigin.CLIENT
REPLICATION = AppendOrigin.REPLICATION
DAY_MS = 86_400_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state(tmp_path: Path, clock: ManualClock) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, clock)


def append(
    state: ProducerStateManager,
    epoch: int,
    seq: int,
    offset: int,
    *,
    pid: int = PID,
    records: int = 1,
    txn: bool = False,
    origin: AppendOrigin = CLIENT,
    timestamp: int | None = None,
) -> None:
    """One data batch of ``records`` records, applied to the state as the log would."""
    info = state.prepare_update(pid, origin)
    last_seq = (seq + records - 1) % (INT32_MAX + 1)
    ts = state.clock.milliseconds() if timestamp is None else timestamp
    info.append_data_batch(epoch, seq, last_seq, ts, offset, offset + records - 1, txn)
    state.update(info)
    state.update_map_end_offset(offset + records)


def marker(
    state: ProducerStateManager,
    kind: ControlRecordType,
    epoch: int,
    offset: int,
    *,
    pid: int = PID,
    coordinator_epoch: int = 0,
    origin: AppendOrigin = AppendOrigin.COORDINATOR,
) -> CompletedTxn | None:
    info = state.prepare_update(pid, origin)
    completed = info.append_end_txn_marker(kind, epoch, coordinator_epoch, offset, state.clock.milliseconds())
    state.update(info)
    state.update_map_end_offset(offset + 1)
    return completed


# -- sequence and epoch validation ----------------------------------------------------------


def test_basic_id_mapping(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    append(state, 0, 1, 1)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 0, 1, 2)  # a repeated sequence is not in order
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 0, 3, 2)  # a gap
    append(state, 1, 0, 2)  # an epoch bump restarts at 0
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 1, 2, 3)
    entry = state.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (1, 0, 2)


def test_epoch_bump_must_restart_sequence_at_zero(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 1, 5, 1)


def test_lower_epoch_is_fenced(state: ProducerStateManager) -> None:
    append(state, 3, 0, 0)
    with pytest.raises(InvalidProducerEpochError):
        append(state, 2, 0, 1)
    entry = state.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 3


def test_unknown_producer_accepts_any_sequence_like_kafka(state: ProducerStateManager) -> None:
    append(state, 0, 42, 0)
    append(state, 0, 43, 1)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 0, 45, 2)


def test_strict_mode_requires_zero_for_unknown_producer(state: ProducerStateManager) -> None:
    info = state.prepare_update(PID, CLIENT, require_zero_first_sequence=True)
    with pytest.raises(OutOfOrderSequenceError):
        info.append_data_batch(0, 5, 5, 0, 0, 0, False)
    info = state.prepare_update(PID, CLIENT, require_zero_first_sequence=True)
    info.append_data_batch(0, 0, 0, 0, 0, 0, False)
    state.update(info)


def test_sequence_wraps_at_int32_max(state: ProducerStateManager) -> None:
    append(state, 15, INT32_MAX, 735, origin=REPLICATION)
    append(state, 15, 0, 1235)
    entry = state.last_entry(PID)
    assert entry is not None
    assert (entry.first_seq, entry.last_seq) == (INT32_MAX, 0)
    assert (entry.first_data_offset, entry.last_data_offset) == (735, 1235)


def test_no_wrap_to_anything_but_zero(state: ProducerStateManager) -> None:
    append(state, 15, INT32_MAX, 735, origin=REPLICATION)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 15, 1, 736)


def test_batch_spanning_the_wrap(state: ProducerStateManager) -> None:
    info = state.prepare_update(PID, REPLICATION)
    info.append_data_batch(15, INT32_MAX - 10, 9, 0, 2000, 2020, False)
    state.update(info)
    entry = state.last_entry(PID)
    assert entry is not None
    assert (entry.first_seq, entry.last_seq, entry.first_data_offset, entry.last_data_offset) == (
        INT32_MAX - 10, 9, 2000, 2020,
    )
    append(state, 15, 10, 2021)


def test_replication_origin_skips_sequence_checks(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    append(state, 0, 7, 1, origin=REPLICATION)  # a gap a replica (or recovery) must accept
    append(state, 0, 8, 2)
    entry = state.last_entry(PID)
    assert entry is not None and entry.last_seq == 8


def test_replication_origin_does_not_fence_on_epoch(state: ProducerStateManager) -> None:
    append(state, 3, 0, 0)
    append(state, 2, 0, 1, origin=REPLICATION)
    with pytest.raises(InvalidProducerEpochError):
        append(state, 1, 0, 2, origin=AppendOrigin.COORDINATOR)


def test_coordinator_origin_checks_epoch_not_sequence(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    append(state, 0, 9, 1, origin=AppendOrigin.COORDINATOR)


def test_rejected_batch_leaves_state_untouched(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    info = state.prepare_update(PID, CLIENT)
    info.append_data_batch(0, 1, 1, 0, 1, 1, False)
    with pytest.raises(OutOfOrderSequenceError):
        info.append_data_batch(0, 5, 5, 0, 2, 2, False)
    entry = state.last_entry(PID)
    assert entry is not None and entry.last_seq == 0  # nothing applied without update()


def test_several_batches_in_one_append_validate_against_each_other(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    info = state.prepare_update(PID, CLIENT)
    info.append_data_batch(0, 1, 4, 0, 1, 4, False)
    info.append_data_batch(0, 5, 9, 0, 5, 9, False)
    with pytest.raises(OutOfOrderSequenceError):
        info.append_data_batch(0, 11, 12, 0, 10, 11, False)
    state.update(info)
    entry = state.last_entry(PID)
    assert entry is not None and [b.last_seq for b in entry.batch_metadata] == [0, 4, 9]


def test_new_producer_accepts_gaps_within_its_first_append(state: ProducerStateManager) -> None:
    # Kafka only checks continuity once the partition has stored an epoch for the producer
    info = state.prepare_update(PID, CLIENT)
    info.append_data_batch(0, 3, 4, 0, 0, 1, False)
    info.append_data_batch(0, 9, 9, 0, 2, 2, False)
    state.update(info)
    entry = state.last_entry(PID)
    assert entry is not None and entry.last_seq == 9


# -- duplicates ------------------------------------------------------------------------------


def test_duplicates_detected_over_last_five_batches(state: ProducerStateManager) -> None:
    for i in range(6):  # batches of 5 records: seqs 0-4, 5-9, ..., 25-29 at offsets 100+5i
        append(state, 0, 5 * i, 100 + 5 * i, records=5)
    assert state.find_duplicate_batch(PID, 0, 0, 4) is None  # evicted: only 5 retained
    for i in range(1, 6):
        found = state.find_duplicate_batch(PID, 0, 5 * i, 5 * i + 4)
        assert found == BatchMetadata(5 * i, 5 * i + 4, 100 + 5 * i + 4, 4, state.clock.milliseconds())
        assert found.first_offset == 100 + 5 * i
    assert state.find_duplicate_batch(PID, 1, 5, 9) is None  # other epoch
    assert state.find_duplicate_batch(PID, 0, 5, 8) is None  # not the exact range
    assert state.find_duplicate_batch(PID + 1, 0, 5, 9) is None  # unknown producer
    entry = state.last_entry(PID)
    assert entry is not None and len(entry.batch_metadata) == 5


def test_batches_without_sequence_are_never_duplicates() -> None:
    entry = ProducerStateEntry(PID, 0, [BatchMetadata(-1, -1, 10, 0, 5)])
    assert entry.find_duplicate_batch(-1, -1, 0) is None


def test_epoch_bump_forgets_old_batches(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    append(state, 1, 0, 1)
    assert state.find_duplicate_batch(PID, 0, 0, 0) is None
    entry = state.last_entry(PID)
    assert entry is not None and len(entry.batch_metadata) == 1


# -- transactions ----------------------------------------------------------------------------


def test_transactions_first_unstable_and_last_stable(state: ProducerStateManager) -> None:
    other = PID + 1
    append(state, 0, 0, 10, txn=True)
    append(state, 0, 0, 15, pid=other, txn=True)
    append(state, 0, 1, 16, txn=True)  # same transaction: first offset stays 10
    assert state.first_unstable_offset() == 10

    aborted = marker(state, ControlRecordType.ABORT, 0, 20)
    assert aborted == CompletedTxn(PID, 10, 20, True)
    assert state.last_stable_offset(aborted) == 15  # the other producer's open transaction
    state.complete_txn(aborted)
    assert state.first_unstable_offset() == 15

    committed = marker(state, ControlRecordType.COMMIT, 0, 25, pid=other)
    assert committed == CompletedTxn(other, 15, 25, False)
    assert state.last_stable_offset(committed) == 26
    state.complete_txn(committed)
    assert state.first_unstable_offset() is None
    entry = state.last_entry(PID)
    assert entry is not None and entry.current_txn_first_offset is None


def test_last_stable_offset_ignores_own_transaction(state: ProducerStateManager) -> None:
    append(state, 0, 0, 5, txn=True)
    completed = marker(state, ControlRecordType.COMMIT, 0, 9)
    assert completed is not None
    assert state.last_stable_offset(completed) == 10


def test_marker_without_open_transaction_completes_nothing(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0)
    assert marker(state, ControlRecordType.COMMIT, 0, 1) is None
    assert marker(state, ControlRecordType.ABORT, 0, 2, pid=PID + 7) is None


def test_non_transactional_write_inside_transaction_rejected(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0, txn=True)
    with pytest.raises(InvalidTxnStateError):
        append(state, 0, 1, 1, txn=False)


def test_marker_bumps_epoch_and_clears_batches(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0, txn=True)
    marker(state, ControlRecordType.ABORT, 1, 1)
    entry = state.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.is_empty, entry.last_seq) == (1, True, -1)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 1, 1, 2)
    append(state, 1, 0, 2)


def test_marker_with_old_epoch_is_fenced(state: ProducerStateManager) -> None:
    append(state, 2, 0, 0, txn=True)
    with pytest.raises(InvalidProducerEpochError):
        marker(state, ControlRecordType.COMMIT, 1, 1)


def test_tv2_marker_needs_a_higher_epoch_unless_retried(state: ProducerStateManager) -> None:
    append(state, 2, 0, 0, txn=True)
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        info.append_end_txn_marker(ControlRecordType.COMMIT, 2, 0, 1, 0, transaction_version=2)
    info = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    assert info.append_end_txn_marker(ControlRecordType.COMMIT, 3, 0, 1, 0, transaction_version=2) is not None
    state.update(info)
    retry = state.prepare_update(PID, AppendOrigin.COORDINATOR)
    assert retry.append_end_txn_marker(ControlRecordType.COMMIT, 3, 0, 2, 0, transaction_version=2) is None


def test_zombie_coordinator_is_fenced(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0, txn=True)
    marker(state, ControlRecordType.COMMIT, 0, 1, coordinator_epoch=5)
    append(state, 0, 1, 2, txn=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(state, ControlRecordType.COMMIT, 0, 3, coordinator_epoch=4)
    assert marker(state, ControlRecordType.COMMIT, 0, 3, coordinator_epoch=4, origin=REPLICATION) is not None


def test_complete_unknown_transaction_rejected(state: ProducerStateManager) -> None:
    with pytest.raises(LogStateError):
        state.complete_txn(CompletedTxn(PID, 3, 5, False))


def test_append_batch_from_real_headers(state: ProducerStateManager) -> None:
    data = build_batch([b"a", b"b", b"c"], producer_id=PID, producer_epoch=0, base_sequence=0,
                       transactional=True, base_offset=50, timestamp=1234)
    ctrl = build_control_batch(ControlRecordType.ABORT, producer_id=PID, producer_epoch=0,
                               coordinator_epoch=3, base_offset=53, timestamp=1300)
    info = state.prepare_update(PID, CLIENT)
    assert info.append_batch(parse_header(data)) is None
    completed = info.append_batch(parse_header(ctrl), ControlRecord(ControlRecordType.ABORT, 3))
    assert completed == CompletedTxn(PID, 50, 53, True)
    assert info.append_batch(parse_header(ctrl), None) is None  # a cleaned control batch
    state.update(info)
    entry = state.last_entry(PID)
    assert entry is not None
    assert (entry.coordinator_epoch, entry.last_timestamp, entry.current_txn_first_offset) == (3, 1300, None)
    assert state.first_unstable_offset() == 50  # opened by the update ...
    state.complete_txn(completed)
    assert state.first_unstable_offset() is None  # ... and closed once the marker is accounted for


def test_update_rejects_no_producer_id(state: ProducerStateManager) -> None:
    with pytest.raises(LogStateError):
        state.update(state.prepare_update(-1, CLIENT))


# -- snapshot bytes --------------------------------------------------------------------------


def be(value: int, size: int) -> bytes:
    return value.to_bytes(size, "big", signed=True)


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_snapshot_exact_byte_layout() -> None:
    with_batch = ProducerStateEntry(
        producer_id=7, producer_epoch=3, batch_metadata=[BatchMetadata(10, 14, 104, 4, 999)],
        coordinator_epoch=2, current_txn_first_offset=100, last_timestamp=999,
    )
    without_batch = ProducerStateEntry(producer_id=-5, producer_epoch=1, last_timestamp=-1)
    data = encode_snapshot([with_batch, without_batch])
    entry1 = be(7, 8) + be(3, 2) + be(14, 4) + be(104, 8) + be(4, 4) + be(999, 8) + be(2, 4) + be(100, 8)
    entry2 = be(-5, 8) + be(1, 2) + be(-1, 4) + be(-1, 8) + be(0, 4) + be(-1, 8) + be(-1, 4) + be(-1, 8)
    tail = be(2, 4) + entry1 + entry2
    assert len(entry1) == len(entry2) == 46
    assert data == be(1, 2) + crc32c(tail).to_bytes(4, "big") + tail
    assert len(data) == 10 + 2 * 46


def test_empty_snapshot_is_ten_bytes() -> None:
    tail = be(0, 4)
    assert encode_snapshot([]) == b"\x00\x01" + crc32c(tail).to_bytes(4, "big") + tail


def test_snapshot_round_trip(tmp_path: Path) -> None:
    entries = [
        ProducerStateEntry(1, 0, [BatchMetadata(INT32_MAX - 10, 9, 2020, 20, 55)], 4, None, 55),
        ProducerStateEntry(2, 5, [], 0, 77, 66),
    ]
    path = tmp_path / "00000000000000000042.snapshot"
    write_snapshot(path, entries)
    assert not path.with_name(path.name + ".tmp").exists()
    assert read_snapshot(path) == entries  # the first sequence is derived across the wrap


def test_snapshot_keeps_only_last_batch() -> None:
    entry = ProducerStateEntry(1, 0, [BatchMetadata(i, i, 10 + i, 0, i) for i in range(3)], 0, None, 2)
    (loaded,) = decode_snapshot(encode_snapshot([entry]))
    assert list(loaded.batch_metadata) == [BatchMetadata(2, 2, 12, 0, 2)]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d[:-1],  # wrong size
        lambda d: d + b"\x00",  # trailing garbage
        lambda d: b"\x00\x02" + d[2:],  # unknown version
        lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:],  # bit flip in an entry
        lambda d: d[:2] + bytes([d[2] ^ 0x80]) + d[3:],  # bit flip in the CRC
        lambda d: d[:6] + be(2, 4) + d[10:],  # count disagrees with size
        lambda d: d[:5],  # shorter than the header
    ],
)
def test_corrupt_snapshot_raises_naming_the_file(tmp_path: Path, mutate: object) -> None:
    good = encode_snapshot([ProducerStateEntry(1, 0, [BatchMetadata(0, 0, 5, 0, 1)], 0, None, 1)])
    path = tmp_path / "00000000000000000006.snapshot"
    path.write_bytes(mutate(good))  # type: ignore[operator]
    with pytest.raises(CorruptSnapshotError, match="00000000000000000006.snapshot"):
        read_snapshot(path)
    assert issubclass(CorruptSnapshotError, CorruptCheckpointError)


# -- snapshot files and reload ---------------------------------------------------------------


def snapshot_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_take_snapshot_named_after_map_end_offset(state: ProducerStateManager, tmp_path: Path) -> None:
    assert state.take_snapshot() is None  # nothing since offset 0
    append(state, 0, 0, 0, records=10)
    path = state.take_snapshot()
    assert path == tmp_path / "00000000000000000010.snapshot"
    assert snapshot_names(tmp_path) == ["00000000000000000010.snapshot"]
    assert state.take_snapshot() is None  # same offset: not rewritten
    assert read_snapshot(path)[0].last_data_offset == 9
    assert state.latest_snapshot_offset == state.oldest_snapshot_offset == 10
    assert state.snapshot_file(10) == path and state.snapshot_file(11) is None


def test_existing_snapshots_found_at_construction(tmp_path: Path, clock: ManualClock) -> None:
    for offset in (5, 20):
        write_snapshot(tmp_path / f"{offset:020d}.snapshot", [])
    (tmp_path / "00000000000000000020.log").write_bytes(b"")
    (tmp_path / "00000000000000000003.snapshot.deleted").write_bytes(b"")
    state = ProducerStateManager(tmp_path, clock)
    assert state.snapshot_offsets() == [5, 20]


def _three_snapshots(state: ProducerStateManager) -> None:
    append(state, 0, 0, 0, records=10)
    state.take_snapshot()  # at 10
    append(state, 0, 10, 10, records=10)
    state.take_snapshot()  # at 20
    append(state, 0, 20, 20, records=10)
    state.take_snapshot()  # at 30


def test_truncate_and_reload_loads_latest_snapshot_in_range(
    state: ProducerStateManager, tmp_path: Path
) -> None:
    _three_snapshots(state)
    state.truncate_and_reload(log_start_offset=10, log_end_offset=25)
    # 10 goes because Kafka drops snapshots <= log start; 30 is past the log end
    assert state.snapshot_offsets() == [20]
    assert snapshot_names(tmp_path) == ["00000000000000000020.snapshot"]
    assert state.map_end_offset == 20
    entry = state.last_entry(PID)
    assert entry is not None and (entry.last_seq, entry.last_data_offset) == (19, 19)
    append(state, 0, 20, 20)  # replaying the log from the snapshot continues the sequence


def test_truncate_and_reload_without_snapshot_starts_at_log_start(state: ProducerStateManager) -> None:
    _three_snapshots(state)
    state.truncate_and_reload(log_start_offset=5, log_end_offset=8)
    assert state.snapshot_offsets() == []
    assert state.is_empty
    assert state.map_end_offset == 5


def test_truncate_and_reload_at_map_end_keeps_memory(state: ProducerStateManager) -> None:
    _three_snapshots(state)
    append(state, 0, 30, 30, records=5)
    state.truncate_and_reload(log_start_offset=15, log_end_offset=35)
    assert state.snapshot_offsets() == [20, 30]
    assert state.map_end_offset == 35
    entry = state.last_entry(PID)
    assert entry is not None and entry.last_seq == 34


def test_corrupt_snapshot_skipped_and_deleted(
    state: ProducerStateManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _three_snapshots(state)
    latest = tmp_path / "00000000000000000030.snapshot"
    data = bytearray(latest.read_bytes())
    data[-1] ^= 0xFF
    latest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="strata.log.producer_state"):
        state.truncate_and_reload(log_start_offset=0, log_end_offset=40)
    assert "00000000000000000030.snapshot" in caplog.text
    assert not latest.exists()
    assert state.snapshot_offsets() == [10, 20]
    assert state.map_end_offset == 20
    entry = state.last_entry(PID)
    assert entry is not None and entry.last_seq == 19


def test_reload_drops_expired_producers_but_not_open_transactions(
    state: ProducerStateManager, clock: ManualClock
) -> None:
    append(state, 0, 0, 0)
    append(state, 0, 0, 1, pid=2, txn=True)
    append(state, 0, 0, 2, pid=3)
    clock.advance(DAY_MS)
    append(state, 0, 1, 3, pid=3)
    state.take_snapshot()
    state.truncate_and_reload(0, 100)
    assert sorted(state.producers) == [2, 3]  # 1 idle for a day; 2 has an open transaction
    assert state.first_unstable_offset() == 1  # the open transaction came back with the snapshot


def test_remove_expired_producers(state: ProducerStateManager, clock: ManualClock) -> None:
    append(state, 0, 0, 0)
    append(state, 0, 0, 1, pid=2, txn=True)
    clock.advance(DAY_MS - 1)
    state.remove_expired_producers(clock.milliseconds())
    assert sorted(state.producers) == [2, PID]
    state.remove_expired_producers(clock.milliseconds() + 1)
    assert sorted(state.producers) == [2]


def test_truncate_full_and_start_at(state: ProducerStateManager, tmp_path: Path) -> None:
    _three_snapshots(state)
    append(state, 0, 30, 30, txn=True)
    state.truncate_full_and_start_at(500)
    assert state.is_empty and state.first_unstable_offset() is None
    assert state.snapshot_offsets() == [] and snapshot_names(tmp_path) == []
    assert state.map_end_offset == 500
    assert state.take_snapshot() == tmp_path / "00000000000000000500.snapshot"


def test_delete_snapshots_before(state: ProducerStateManager, tmp_path: Path) -> None:
    _three_snapshots(state)
    state.delete_snapshots_before(20)
    assert state.snapshot_offsets() == [20, 30]
    assert snapshot_names(tmp_path) == ["00000000000000000020.snapshot", "00000000000000000030.snapshot"]


def test_remove_stray_snapshots_keeps_newest_beyond_segments(state: ProducerStateManager) -> None:
    _three_snapshots(state)
    state.remove_stray_snapshots([0, 10])
    assert state.snapshot_offsets() == [10, 30]  # 20 is a stray below a newer stray
    state.remove_stray_snapshots([0, 10, 40])
    assert state.snapshot_offsets() == [10]  # 30 is below the newest segment now


def test_remove_and_mark_snapshot_for_deletion(state: ProducerStateManager, tmp_path: Path) -> None:
    _three_snapshots(state)
    marked = state.remove_and_mark_snapshot_for_deletion(10)
    assert marked == tmp_path / "00000000000000000010.snapshot.deleted"
    assert marked.exists()
    assert state.snapshot_offsets() == [20, 30]
    assert state.remove_and_mark_snapshot_for_deletion(10) is None
