"""Crash recovery: torn writes, corrupt or missing indexes, flipped bytes (Kafka's LogLoader rules)."""

from __future__ import annotations

import os

import pytest

from strata.config import LogConfig
from strata.errors import CorruptRecordError
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import (
    BatchBuilder,
    ControlRecordType,
    build_control_batch,
    decode_batch,
    iter_batches,
)

CONFIG = LogConfig(segment_bytes=8 * 1024, index_interval_bytes=512)


def fill(plog, clock, n: int = 60) -> list[bytes]:
    values = []
    for i in range(n):
        b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=i * 2)
        for j in range(2):
            value = f"value-{i}-{j}".encode() * 10
            values.append(value)
            b.append(value, key=f"k{i}".encode(), timestamp=clock.milliseconds() + i)
        plog.append_as_leader(b.build(), leader_epoch=1 + i // 30)
    plog.update_high_watermark(plog.log_end_offset)
    return values


def read_all(plog) -> list[bytes]:
    out = []
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        data = plog.read(offset, 1000).records.read()
        assert data, f"no progress at offset {offset}"
        for pos, _ in iter_batches(data):
            for r in decode_batch(data, pos).records:
                if r.offset >= offset:
                    assert r.offset == offset, "offsets must be dense"
                    out.append(r.value)
                    offset += 1
    return out


def crash(plog) -> None:
    """Simulate kill -9: drop handles without the clean-close steps (no trim, no snapshot)."""
    plog.local_log.close_handlers()


def test_clean_reopen_needs_no_recovery(open_log, clock, tmp_path):
    plog = open_log(CONFIG)
    values = fill(plog, clock)
    plog.close()
    reopened = open_log(CONFIG, had_clean_shutdown=True, recovery_point=0)
    assert reopened.log_end_offset == len(values)
    assert read_all(reopened) == values
    # the producer state came from the clean-shutdown snapshot at the log end
    assert (tmp_path / "t-0" / f"{len(values):020d}.snapshot").exists()
    assert reopened.producer_state.last_entry(7).last_seq == len(values) - 1


def test_torn_write_is_truncated_and_earlier_data_kept(open_log, clock, tmp_path):
    plog = open_log(CONFIG)
    values = fill(plog, clock)
    active = plog.segments[-1]
    path, size = active.log.path, active.size
    crash(plog)
    last_batch_size = max(h.size for _, h in iter_batches(path.read_bytes()))
    with open(path, "r+b") as f:  # cut the last batch in half
        f.truncate(size - last_batch_size // 2)
    reopened = open_log(CONFIG, recovery_point=active.base_offset)
    assert reopened.log_end_offset == len(values) - 2
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened) == values[:-2]
    assert path.stat().st_size == size - last_batch_size
    # the log accepts appends right after the recovered end, continuing the producer's sequence
    b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=len(values) - 2)
    b.append(b"after", timestamp=clock.milliseconds())
    assert reopened.append_as_leader(b.build(), leader_epoch=2).first_offset == len(values) - 2


def test_garbage_tail_after_crash_is_truncated(open_log, clock):
    plog = open_log(CONFIG)
    values = fill(plog, clock)
    active = plog.segments[-1]
    crash(plog)
    with open(active.log.path, "ab") as f:
        f.write(os.urandom(1000))
    reopened = open_log(CONFIG, recovery_point=active.base_offset)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened) == values


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing", "bogus-position", "timeindex-garbage"])
def test_corrupt_index_is_rebuilt_on_reopen(open_log, clock, tmp_path, damage):
    plog = open_log(CONFIG)
    values = fill(plog, clock)
    first = plog.segments[0]
    plog.close()  # the indexes trimmed to their entries (a roll leaves that to the segment's flush)
    good_index = first.offset_index.path.read_bytes()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    timeindex = index.with_suffix(".timeindex")
    assert len(good_index) >= 16
    if damage == "garbage":
        index.write_bytes(os.urandom(len(good_index)))
    elif damage == "truncated":
        index.write_bytes(good_index[:-3])
    elif damage == "missing":
        index.unlink()
    elif damage == "bogus-position":
        index.write_bytes(good_index[:-4] + (5).to_bytes(4, "big"))  # points inside a batch
    else:
        timeindex.write_bytes(os.urandom(24))
    reopened = open_log(CONFIG, had_clean_shutdown=True)
    assert index.read_bytes() == good_index, "the rebuilt index equals the original"
    assert read_all(reopened) == values


def test_flipped_byte_is_a_crc_error_never_data(open_log, clock):
    plog = open_log(CONFIG)
    values = fill(plog, clock)
    segment = plog.segments[1]
    batches = list(iter_batches(segment.log.path.read_bytes()))
    victim_pos, victim = batches[3]
    crash(plog)
    with open(segment.log.path, "r+b") as f:
        f.seek(victim_pos + 61 + 5)
        byte = f.read(1)
        f.seek(victim_pos + 61 + 5)
        f.write(bytes([byte[0] ^ 0x40]))
    # read through the decoder: the CRC catches it
    data = segment.log.path.read_bytes()
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(data, victim_pos)
    # recovery stops at the corrupt batch: everything before it stays, nothing after it is served
    reopened = open_log(CONFIG, recovery_point=0)
    assert reopened.log_end_offset == victim.base_offset
    assert [s.base_offset for s in reopened.segments] == [0, segment.base_offset]
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened) == values[: victim.base_offset]


def test_leader_epochs_and_aborted_transactions_survive_recovery(open_log, clock, tmp_path):
    plog = open_log(CONFIG)
    fill(plog, clock, 40)
    txn = BatchBuilder(producer_id=99, producer_epoch=0, base_sequence=0, transactional=True)
    txn.append(b"doomed", timestamp=clock.milliseconds())
    first = plog.append_as_leader(txn.build(), leader_epoch=3).first_offset
    marker = build_control_batch(ControlRecordType.ABORT, producer_id=99, producer_epoch=0,
                                 timestamp=clock.milliseconds())
    abort_offset = plog.append_as_leader(marker, leader_epoch=3, origin=AppendOrigin.COORDINATOR).first_offset
    plog.update_high_watermark(plog.log_end_offset)
    aborted = plog.collect_aborted_transactions(0, plog.log_end_offset)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(99, first, abort_offset)]
    epochs = plog.leader_epoch_cache.epoch_entries()
    assert [e.epoch for e in epochs] == [1, 2, 3]
    crash(plog)
    reopened = open_log(CONFIG, recovery_point=0)
    assert reopened.leader_epoch_cache.epoch_entries() == epochs
    again = reopened.collect_aborted_transactions(0, reopened.log_end_offset)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in again] == [(99, first, abort_offset)]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text().startswith("0\n3\n1 0\n")


def test_index_with_negative_last_position_is_rebuilt(open_log, clock):
    """Garbage can decode to a negative int32 position: that is a corrupt index, never a pread(-n)."""
    plog = open_log(CONFIG)
    values = fill(plog, clock)
    plog.close()
    good_index = plog.segments[0].offset_index.path.read_bytes()
    index = plog.dir / "00000000000000000000.index"
    index.write_bytes(good_index[:-4] + (-55978829).to_bytes(4, "big", signed=True))
    reopened = open_log(CONFIG, had_clean_shutdown=True)
    assert index.read_bytes() == good_index
    assert read_all(reopened) == values


def test_a_rolled_segment_truncated_back_into_before_its_flush_keeps_a_valid_index(open_log, clock, scheduler,
                                                                                   tmp_path):
    """A roll leaves the index file's cut to the background flush; a follower truncating back into that
    segment first (it becomes the active one again) must neither lose entries nor let the late cut land."""
    plog = open_log(CONFIG)
    values = fill(plog, clock)
    assert len(plog.segments) > 2
    second = plog.segments[1]
    plog.truncate_to(second.base_offset + 4)  # back into the second segment: it is the active one again
    assert plog.segments[-1] is second and second.offset_index.writable
    scheduler.run_pending()  # the flushes the rolls scheduled run now, after the truncation
    for i in range(40):  # a new leader's records on top (rolls again)
        b = BatchBuilder(base_offset=plog.log_end_offset, partition_leader_epoch=5)
        b.append(b"after-%d" % i * 20, timestamp=clock.milliseconds())
        plog.append_as_follower(b.build())
    scheduler.run_pending()
    entries = {seg.offset_index.path.name: seg.offset_index.entries for seg in plog.segments}
    plog.close()
    for name, n in entries.items():
        data = (tmp_path / "t-0" / name).read_bytes()
        assert len(data) == n * 8, f"{name}: {len(data)} bytes for {n} entries"
        relative = [int.from_bytes(data[i:i + 4], "big") for i in range(0, len(data), 8)]
        assert relative == sorted(set(relative)), name  # no zeroed tail, no entry twice
    reopened = open_log(CONFIG, had_clean_shutdown=True)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert read_all(reopened)[:second.base_offset + 4] == values[:second.base_offset + 4]
