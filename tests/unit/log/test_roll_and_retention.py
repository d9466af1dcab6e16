"""Roll and retention rules, asserted as exact segment base offsets."""

from __future__ import annotations

import pytest

from strata.config import LogConfig
from strata.errors import OffsetOutOfRangeError, RecordBatchTooLargeError
from strata.protocol.records import BatchBuilder


def batch(clock, n: int = 1, size: int = 100, ts: int | None = None) -> bytes:
    b = BatchBuilder()
    for _ in range(n):
        b.append(b"v" * size, key=b"k", timestamp=clock.milliseconds() if ts is None else ts)
    return b.build()


BATCH_SIZE = 61 + 1 + 1 + 1 + 1 + 2 + 1 + 2 + 100 + 1  # header + one record of 100-byte value, 1-byte key


def bases(plog) -> list[int]:
    return [s.base_offset for s in plog.segments]


def test_roll_on_segment_bytes(open_log, clock):
    size = len(batch(clock))
    # three batches fit (3 * size <= segment.bytes), the fourth does not
    plog = open_log(LogConfig(segment_bytes=3 * size))
    for _ in range(10):
        plog.append_as_leader(batch(clock), leader_epoch=0)
    assert bases(plog) == [0, 3, 6, 9]
    assert [s.size for s in plog.segments] == [3 * size, 3 * size, 3 * size, size]


def test_leader_refuses_an_append_larger_than_a_segment(open_log, clock):
    # Kafka's RecordBatchTooLargeException: otherwise every oversized batch becomes a segment of its own
    size = len(batch(clock))
    plog = open_log(LogConfig(segment_bytes=2 * size))
    plog.append_as_leader(batch(clock), leader_epoch=0)
    with pytest.raises(RecordBatchTooLargeError, match=f"exceeds the maximum configured segment size of {2 * size}"):
        plog.append_as_leader(batch(clock, n=3), leader_epoch=0)
    assert plog.log_end_offset == 1 and [s.size for s in plog.segments] == [size]


def test_follower_splits_a_fetched_chunk_at_segment_bytes(open_log, clock):
    # segment.bytes lowered while the follower copies the leader's older, larger segments: one fetch answer
    # (many whole batches) is appended in runs that each fit, so the follower still rolls at segment.bytes
    chunk = bytearray()
    for i in range(10):
        b = BatchBuilder(base_offset=i)
        b.append(b"v" * 100, key=b"k", timestamp=clock.milliseconds())
        chunk += b.build()
    size = len(chunk) // 10
    big = BatchBuilder(base_offset=10)
    for _ in range(4):
        big.append(b"v" * 100, key=b"k", timestamp=clock.milliseconds())
    chunk += big.build()  # a single batch above segment.bytes (the leader took it under a larger limit)
    plog = open_log(LogConfig(segment_bytes=3 * size))
    plog.append_as_follower(bytes(chunk))
    assert bases(plog) == [0, 3, 6, 9, 10]
    assert [s.size for s in plog.segments][:4] == [3 * size, 3 * size, 3 * size, size]
    assert plog.log_end_offset == 14


def test_roll_on_segment_ms_uses_batch_timestamps(open_log, clock):
    plog = open_log(LogConfig(segment_ms=1000))
    t0 = clock.milliseconds()
    plog.append_as_leader(batch(clock, ts=t0), leader_epoch=0)
    plog.append_as_leader(batch(clock, ts=t0 + 1000), leader_epoch=0)  # not > segment.ms yet
    plog.append_as_leader(batch(clock, ts=t0 + 1001), leader_epoch=0)  # rolls
    plog.append_as_leader(batch(clock, ts=t0 + 1500), leader_epoch=0)
    plog.append_as_leader(batch(clock, ts=t0 + 2002), leader_epoch=0)  # 1001 after the 2nd segment's first
    assert bases(plog) == [0, 2, 4]


def test_segment_jitter_shortens_the_roll_time(open_log, clock, monkeypatch):
    import strata.log.segment as segment_module

    monkeypatch.setattr(segment_module.random, "randrange", lambda n: 300)
    plog = open_log(LogConfig(segment_ms=1000, segment_jitter_ms=500))
    t0 = clock.milliseconds()
    plog.append_as_leader(batch(clock, ts=t0), leader_epoch=0)
    plog.append_as_leader(batch(clock, ts=t0 + 700), leader_epoch=0)  # 700 == 1000 - 300: stays
    plog.append_as_leader(batch(clock, ts=t0 + 701), leader_epoch=0)  # rolls
    assert bases(plog) == [0, 2]


def test_roll_when_offset_index_is_full(open_log, clock):
    # 48 bytes: 6 offset-index entries, 4 time-index slots. Equal timestamps add one time entry only,
    # so the offset index fills first: entries for offsets 1..6 (the first append never makes one).
    plog = open_log(LogConfig(segment_index_bytes=48, index_interval_bytes=0))
    for _ in range(15):
        plog.append_as_leader(batch(clock), leader_epoch=0)
    assert bases(plog) == [0, 7, 14]


def test_roll_when_time_index_is_full(open_log, clock):
    # 36 bytes = 3 time-index slots (one reserved), 4 offset-index slots
    plog = open_log(LogConfig(segment_index_bytes=36, index_interval_bytes=0))
    for i in range(7):
        plog.append_as_leader(batch(clock, ts=clock.milliseconds() + i), leader_epoch=0)
    assert bases(plog) == [0, 3, 6]


def test_roll_on_relative_offset_overflow(open_log, clock):
    plog = open_log()
    first = BatchBuilder(base_offset=0)
    first.append(b"a", timestamp=clock.milliseconds())
    plog.append_as_follower(first.build())
    far = BatchBuilder(base_offset=2**31 + 10)  # cannot be stored relative to base 0
    far.append(b"b", timestamp=clock.milliseconds())
    plog.append_as_follower(far.build())
    assert bases(plog) == [0, 2**31 + 10]
    assert plog.log_end_offset == 2**31 + 11


def test_retention_ms_deletes_old_segments_and_moves_the_log_start(open_log, clock, scheduler, tmp_path):
    size = len(batch(clock))
    plog = open_log(LogConfig(segment_bytes=2 * size, retention_ms=10_000, file_delete_delay_ms=60_000))
    t0 = clock.milliseconds()
    for i in range(7):
        plog.append_as_leader(batch(clock, ts=t0 + i * 3000), leader_epoch=0)
    plog.update_high_watermark(plog.log_end_offset)
    assert bases(plog) == [0, 2, 4, 6]
    # segment max timestamps: t0+3000, t0+9000, t0+15000, t0+18000; older than 10 s at t0+20000: [0, 2]
    clock.now_ms = t0 + 20_000
    assert plog.delete_old_segments() == 2
    assert bases(plog) == [4, 6]
    assert plog.log_start_offset == 4 and plog.local_log_start_offset == 4
    d = tmp_path / "t-0"
    assert (d / "00000000000000000000.log.deleted").exists(), "deleted segments are renamed first"
    assert not (d / "00000000000000000000.log").exists()
    assert scheduler.run_pending() >= 2
    assert not list(d.glob("*.deleted"))
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(1, 1000)


def test_retention_never_deletes_past_the_high_watermark(open_log, clock):
    size = len(batch(clock))
    plog = open_log(LogConfig(segment_bytes=size, retention_ms=1))
    for _ in range(4):
        plog.append_as_leader(batch(clock, ts=0), leader_epoch=0)
    plog.update_high_watermark(2)
    assert plog.delete_old_segments() == 2
    assert bases(plog) == [2, 3]


def test_retention_ms_of_every_segment_rolls_a_new_active_one(open_log, clock):
    plog = open_log(LogConfig(retention_ms=1000))
    for _ in range(3):
        plog.append_as_leader(batch(clock, ts=clock.milliseconds()), leader_epoch=0)
    plog.update_high_watermark(plog.log_end_offset)
    clock.advance(5000)
    assert plog.delete_old_segments() == 1
    assert bases(plog) == [3]
    assert plog.log_start_offset == 3 and plog.log_end_offset == 3
    plog.append_as_leader(batch(clock), leader_epoch=0)
    assert plog.log_end_offset == 4


def test_retention_bytes(open_log, clock):
    size = len(batch(clock))
    plog = open_log(LogConfig(segment_bytes=2 * size, retention_bytes=3 * size))
    for _ in range(9):
        plog.append_as_leader(batch(clock), leader_epoch=0)
    plog.update_high_watermark(plog.log_end_offset)
    assert bases(plog) == [0, 2, 4, 6, 8]  # 9 batches: 4 full segments and one with one batch
    # total 9 * size; deleting whole segments while at least retention.bytes remain: [0, 2, 4]
    assert plog.delete_old_segments() == 3
    assert bases(plog) == [6, 8]
    assert plog.size_in_bytes == 3 * size


def test_delete_records_moves_log_start_and_deletes_whole_segments(open_log, clock):
    size = len(batch(clock))
    plog = open_log(LogConfig(segment_bytes=3 * size))
    for _ in range(10):
        plog.append_as_leader(batch(clock), leader_epoch=0)
    plog.update_high_watermark(8)
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records(9)
    assert plog.delete_records(7) == 7
    assert bases(plog) == [6, 9]  # [0, 3) and [3, 6) are below 7; [6, 9) still holds 7 and 8
    assert plog.log_start_offset == 7
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(6, 1000)
    assert plog.read(7, 10_000).records.size == size  # only offset 7: the HW (8) bounds the read


def test_log_start_survives_restart_via_checkpoint(tmp_path, clock, scheduler):
    from strata.common import TopicPartition
    from strata.log.manager import LogManager

    size = len(batch(clock))
    config = LogConfig(segment_bytes=3 * size)
    manager = LogManager([tmp_path / "logs"], lambda _t: config, clock, scheduler)
    manager.startup()
    plog = manager.get_or_create_log(TopicPartition("t", 0))
    for _ in range(7):
        plog.append_as_leader(batch(clock), leader_epoch=0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records(4)
    manager.shutdown()
    assert (tmp_path / "logs" / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 4\n"
    assert (tmp_path / "logs" / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 7\n"
    again = LogManager([tmp_path / "logs"], lambda _t: config, clock, scheduler)
    again.startup()
    reopened = again.get_log(TopicPartition("t", 0))
    assert reopened.log_start_offset == 4 and reopened.log_end_offset == 7 and reopened.high_watermark == 7
    assert again.had_clean_shutdown[tmp_path / "logs"]
