"""The log cleaner on a real on-disk log (Kafka's LogCleanerTest cases, in this codebase's terms).

The cleaner runs in the test's thread with its "log thread" calls made inline; every case checks
what a reader of the log sees afterwards, and that the cleaned log reopens the same from disk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from tests.conftest import OpenLog

from strata.common.clock import ManualClock
from strata.config import LogConfig
from strata.log.cleaner.cleaner import Cleaner, Throttler
from strata.log.cleaner.manager import LogCleanerManager, build_log_to_clean, cleanable_offsets
from strata.log.cleaner.offset_map import OffsetMap
from strata.log.errors import CleaningAbortedError
from strata.log.partition_log import FetchIsolation, PartitionLog
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import CompressionType, ControlRecordType, decode_batch, iter_batches
from strata.protocol.records.builder import build_batch, build_control_batch
from strata.protocol.records.filtering import delete_horizon_ms

T = 1_700_000_000_000
COMPACT = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": 1024, "delete.retention.ms": 1000})


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in the log, in order."""
    out = []
    for segment in plog.segments:
        data = segment.log.read(0, segment.size)
        for pos, header in iter_batches(data):
            if header.is_control:
                continue
            for r in decode_batch(data, pos).records:
                out.append((r.offset, r.key, r.value))
    return out


def put(plog: PartitionLog, *pairs: tuple[bytes, bytes | None], **kw: object) -> None:
    plog.append_as_leader(build_batch(list(pairs), timestamp=T, **kw), leader_epoch=0)  # type: ignore[arg-type]


def cleaner(clock: ManualClock, memory: int = 1 << 20, check: Callable[[PartitionLog], None] | None = None) -> Cleaner:
    return Cleaner(0, OffsetMap(memory), Throttler(0), clock, lambda fn: fn(), check or (lambda _p: None))


def clean(plog: PartitionLog, clock: ManualClock, first_dirty: int = 0, c: Cleaner | None = None) -> int:
    plog.update_high_watermark(plog.log_end_offset)
    offsets = cleanable_offsets(plog, first_dirty, clock.milliseconds())
    ltc = build_log_to_clean(plog, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, False)
    end, _stats = (c or cleaner(clock)).clean(ltc)
    return end


def fill(plog: PartitionLog, rounds: int, keys: int) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"k%d" % k, b"v%d-%d" % (k, r)
            put(plog, (key, value))
            model[key] = value
    plog.roll()
    return model


def test_keeps_the_last_value_of_each_key_at_its_offset(open_log: OpenLog, clock: ManualClock) -> None:
    plog = open_log(COMPACT)
    model = fill(plog, rounds=5, keys=20)
    before = records(plog)
    assert len(plog.segments) > 3
    end = clean(plog, clock)
    assert end == plog.segments[-1].base_offset
    after = records(plog)
    last = {k: (o, v) for o, k, v in before}
    assert sorted(after) == sorted((o, k, v) for k, (o, v) in last.items())
    assert {k: v for _, k, v in after} == model
    # offsets of the kept records are the original ones, read through the log's normal read path
    got = plog.read(0, 1 << 20, FetchIsolation.LOG_END)
    assert got.records is not None
    plog.close()
    again = open_log(COMPACT)
    assert records(again) == after
    assert again.log_end_offset == plog.log_end_offset


def test_tombstones_stay_until_their_delete_horizon(open_log: OpenLog, clock: ManualClock) -> None:
    plog = open_log(COMPACT)
    put(plog, (b"a", b"1"), (b"b", b"1"))
    put(plog, (b"a", None))  # delete a
    plog.roll()
    put(plog, (b"c", b"1"))
    plog.roll()
    clean(plog, clock)
    assert [(k, v) for _, k, v in records(plog)] == [(b"b", b"1"), (b"a", None), (b"c", b"1")]
    # the tombstone's batch now carries a delete horizon: now + delete.retention.ms
    horizons = [delete_horizon_ms(h) for s in plog.segments for _, h in s.log.iter_headers(0)]
    assert clock.milliseconds() + 1000 in horizons
    clean(plog, clock, first_dirty=plog.segments[-1].base_offset)  # before the horizon: kept
    assert (b"a", None) in [(k, v) for _, k, v in records(plog)]
    clock.advance(1001)
    clean(plog, clock, first_dirty=plog.segments[-1].base_offset)  # an empty dirty section still rewrites
    assert [(k, v) for _, k, v in records(plog)] == [(b"b", b"1"), (b"c", b"1")]


def test_last_batch_of_a_producer_survives_so_its_sequence_continues(open_log: OpenLog, clock: ManualClock) -> None:
    plog = open_log(COMPACT)
    put(plog, (b"a", b"1"), producer_id=5, producer_epoch=0, base_sequence=0)
    put(plog, (b"a", b"2"), producer_id=5, producer_epoch=0, base_sequence=1)
    put(plog, (b"b", b"x"))
    put(plog, (b"a", b"3"))  # a later, non-idempotent write of the same key
    plog.roll()
    clean(plog, clock)
    batches = [h for s in plog.segments for _, h in s.log.iter_headers(0)]
    mine = [h for h in batches if h.producer_id == 5]
    assert len(mine) == 1 and mine[0].records_count == 0 and mine[0].last_sequence == 1  # kept empty
    # the producer continues at sequence 2 without OUT_OF_ORDER_SEQUENCE, also after a reopen
    plog.close()
    again = open_log(COMPACT)
    put(again, (b"a", b"4"), producer_id=5, producer_epoch=0, base_sequence=2)
    assert [(k, v) for _, k, v in records(again)][-1] == (b"a", b"4")


def test_aborted_transactions_are_removed_and_markers_after_their_horizon(open_log: OpenLog,
                                                                          clock: ManualClock) -> None:
    plog = open_log(COMPACT)
    put(plog, (b"a", b"committed"), producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    put(plog, (b"b", b"aborted"), producer_id=2, producer_epoch=0, base_sequence=0, transactional=True)
    plog.append_as_leader(build_control_batch(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0,
                                              timestamp=T), 0, origin=AppendOrigin.COORDINATOR)
    plog.append_as_leader(build_control_batch(ControlRecordType.ABORT, producer_id=2, producer_epoch=0,
                                              timestamp=T), 0, origin=AppendOrigin.COORDINATOR)
    put(plog, (b"c", b"1"))
    plog.roll()
    assert plog.last_stable_offset == plog.log_end_offset or plog.update_high_watermark(plog.log_end_offset)
    clean(plog, clock)
    kept = [(k, v) for _, k, v in records(plog)]
    assert (b"b", b"aborted") not in kept and (b"a", b"committed") in kept
    controls = [h for s in plog.segments for _, h in s.log.iter_headers(0) if h.is_control]
    assert controls, "markers stay until their horizon"


def test_compressed_batches_are_rewritten_with_their_codec(open_log: OpenLog, clock: ManualClock) -> None:
    plog = open_log(COMPACT)
    for r in range(3):
        put(plog, *[(b"k%d" % k, b"v%d" % r) for k in range(10)], compression=CompressionType.ZSTD)
    plog.roll()
    clean(plog, clock)
    headers = [h for s in plog.segments for _, h in s.log.iter_headers(0)]
    assert {h.compression for h in headers} == {CompressionType.ZSTD}
    assert [(k, v) for _, k, v in records(plog)] == [(b"k%d" % k, b"v2") for k in range(10)]


def test_a_full_offset_map_cleans_what_it_mapped(open_log: OpenLog, clock: ManualClock) -> None:
    plog = open_log(replace(COMPACT, segment_bytes=100_000))
    model = fill(plog, rounds=3, keys=200)
    small = cleaner(clock, memory=60 * (100 + 4))  # room for ~50 keys
    end = clean(plog, clock, c=small)
    assert 0 < end < plog.segments[-1].base_offset
    while end < plog.segments[-1].base_offset:
        end = clean(plog, clock, first_dirty=end, c=small)
    assert {k: v for _, k, v in records(plog)} == model
    assert len(records(plog)) == len(model)


def test_an_aborted_cleaning_leaves_the_log_and_no_files(open_log: OpenLog, clock: ManualClock, tmp_path: Path) -> None:
    plog = open_log(COMPACT)
    fill(plog, rounds=3, keys=20)
    before = records(plog)
    calls = 0

    def abort_late(_p: PartitionLog) -> None:
        nonlocal calls
        calls += 1
        if calls > 40:
            raise CleaningAbortedError("test")

    with pytest.raises(CleaningAbortedError):
        clean(plog, clock, c=cleaner(clock, check=abort_late))
    assert records(plog) == before
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_a_truncation_during_cleaning_voids_the_swap(open_log: OpenLog, clock: ManualClock, tmp_path: Path) -> None:
    plog = open_log(COMPACT)
    fill(plog, rounds=3, keys=20)
    target = plog.segments[1].base_offset + 1
    truncated = False

    def truncate_once(p: PartitionLog) -> None:
        nonlocal truncated
        if not truncated:
            truncated = True
            p.truncate_to(target)

    with pytest.raises(CleaningAbortedError):
        clean(plog, clock, c=cleaner(clock, check=truncate_once))
    assert plog.log_end_offset == target
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_cleaned_log_with_empty_batches_recovers_and_replicates(open_log: OpenLog, clock: ManualClock,
                                                                tmp_path: Path) -> None:
    """An emptied producer batch (records_count 0) passes recovery's checks after an unclean shutdown,
    rebuilds the producer's state, and a follower appends the cleaned log as it is, gaps included."""
    plog = open_log(COMPACT)
    for seq in range(4):
        put(plog, (b"a", b"%d" % seq), producer_id=9, producer_epoch=0, base_sequence=seq)
        put(plog, (b"a", b"plain-%d" % seq))
    put(plog, (b"gone", b"1"))
    put(plog, (b"gone", None))  # a tombstone: its batch gets a delete horizon a day ahead, as its timestamp
    plog.roll()
    clean(plog, clock)
    segments = plog.segments
    data = b"".join(s.log.read(0, s.size) for s in segments)
    assert any(h.records_count == 0 for _, h in iter_batches(data))
    assert any(delete_horizon_ms(h) for _, h in iter_batches(data))
    plog.local_log.close_handlers()  # a crash: no clean shutdown marker, recovery from offset 0
    again = open_log(COMPACT, had_clean_shutdown=False, recovery_point=0)
    assert records(again) == records(plog)
    assert again.producer_state.last_entry(9) is not None
    assert again.producer_state.last_entry(9).last_seq == 3  # type: ignore[union-attr]
    put(again, (b"a", b"next"), producer_id=9, producer_epoch=0, base_sequence=4)
    # a follower (another directory) appends the leader's cleaned batches with their gaps
    from strata.common import TopicPartition
    from strata.common.scheduler import ThreadScheduler
    from strata.log.loader import load_partition_log

    follower = load_partition_log(tmp_path / "follower-0", TopicPartition("follower", 0), COMPACT, clock,
                                  ThreadScheduler())
    try:
        for pos, header in iter_batches(data):
            follower.append_as_follower(data[pos: pos + header.size])
        assert records(follower) == records(plog)
        assert follower.producer_state.last_entry(9).last_seq == 3  # type: ignore[union-attr]
    finally:
        follower.local_log.close_handlers()


def manager_for(plog: PartitionLog, tmp_path: Path) -> LogCleanerManager:
    return LogCleanerManager([tmp_path], lambda: {plog.topic_partition: plog}, lambda _tp: tmp_path)


def test_min_compaction_lag_keeps_young_records(open_log: OpenLog, clock: ManualClock, tmp_path: Path) -> None:
    """A segment holding a record younger than min.compaction.lag.ms is not cleaned, nor anything after it."""
    config = replace(COMPACT, min_compaction_lag_ms=60_000)
    plog = open_log(config)
    now = clock.milliseconds()
    for r in range(3):  # old records (timestamps 10 min ago), several segments
        for k in range(20):
            plog.append_as_leader(build_batch([(b"k%d" % k, b"old%d" % r)], timestamp=now - 600_000), 0)
    plog.roll()
    young_start = plog.log_end_offset
    for k in range(20):  # young updates of the same keys
        plog.append_as_leader(build_batch([(b"k%d" % k, b"young")], timestamp=now - 1_000), 0)
    plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    offsets = cleanable_offsets(plog, 0, now)
    assert offsets.first_uncleanable_dirty_offset <= young_start
    manager = manager_for(plog, tmp_path)
    ltc = manager.grab_filthiest_compacted_log(now)
    assert ltc is not None and ltc.first_uncleanable_offset <= young_start
    end, _ = cleaner(clock).clean(ltc)
    assert end <= young_start
    kept = records(plog)
    assert [(k, v) for o, k, v in kept if o >= young_start] == [(b"k%d" % k, b"young") for k in range(20)]
    # the old section was compacted within itself (the young updates were not mapped)
    assert [(k, v) for o, k, v in kept if o < young_start] == [(b"k%d" % k, b"old2") for k in range(20)]


def test_max_compaction_lag_forces_a_cleaning_below_the_dirty_ratio(open_log: OpenLog, clock: ManualClock,
                                                                    tmp_path: Path) -> None:
    config = replace(COMPACT, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    plog = open_log(config)
    fill(plog, rounds=3, keys=20)
    plog.update_high_watermark(plog.log_end_offset)
    manager = manager_for(plog, tmp_path)
    manager.update_checkpoint(plog.topic_partition, plog.segments[1].base_offset)  # mostly clean: ratio < 0.99
    assert manager.grab_filthiest_compacted_log(clock.milliseconds()) is None
    clock.advance(120_000)  # the dirty records are now older than max.compaction.lag.ms
    ltc = manager.grab_filthiest_compacted_log(clock.milliseconds())
    assert ltc is not None and ltc.need_compaction_now
    assert manager.max_compaction_delay_ms > 0


def test_checkpoint_follows_cleanings_truncation_and_deletion(open_log: OpenLog, clock: ManualClock,
                                                              tmp_path: Path) -> None:
    plog = open_log(COMPACT)
    fill(plog, rounds=3, keys=20)
    plog.update_high_watermark(plog.log_end_offset)
    manager = manager_for(plog, tmp_path)
    ltc = manager.grab_filthiest_compacted_log(clock.milliseconds())
    assert ltc is not None
    assert manager.grab_filthiest_compacted_log(clock.milliseconds()) is None  # in progress: not chosen twice
    end, stats = cleaner(clock).clean(ltc)
    manager.done_cleaning(plog.topic_partition, end, stats.delete_horizon_ms)
    again = LogCleanerManager([tmp_path], dict, lambda _tp: tmp_path)  # read back from the file
    assert again.all_cleaner_checkpoints() == {plog.topic_partition: end}
    assert (tmp_path / "cleaner-offset-checkpoint").read_text().splitlines()[:2] == ["0", "1"]
    manager.maybe_truncate_checkpoint(plog.topic_partition, 5)
    assert manager.all_cleaner_checkpoints() == {plog.topic_partition: 5}
    manager.remove_partition(plog.topic_partition)
    assert manager.all_cleaner_checkpoints() == {}


def test_throttler_holds_the_cleaners_to_the_configured_rate() -> None:
    """log.cleaner.io.max.bytes.per.second: after each check interval the throttler sleeps off what the I/O
    ran ahead of the rate (a fake clock: what is checked is the arithmetic, not a wall-clock timing)."""
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    t = Throttler(1_000_000, check_interval_s=0.3, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        now[0] += 0.1
        t.maybe_throttle(500_000)  # 5 MB/s offered, 1 MB/s allowed
    total_bytes, total_time = 5_000_000, now[0]
    assert slept and total_time >= total_bytes / 1_000_000 - 0.5  # within one interval's worth
    unlimited = Throttler(1.7976931348623157e308, clock=lambda: now[0], sleep=sleep)
    before = len(slept)
    unlimited.maybe_throttle(10**12)
    assert len(slept) == before


@pytest.mark.parametrize("abort_signalled", [True, False])
def test_a_log_changed_between_abort_checks_is_an_abort_not_a_failure(
        open_log: OpenLog, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        abort_signalled: bool) -> None:
    """A truncation (or retention) removing a segment after its copy, before the cleaner's next abort
    check, makes the cleaning raise on a file that is gone: the partition must stay cleanable (it was
    marked uncleanable until restart, so a restarted replica never compacted again)."""
    import threading

    from strata.config.cleaner_config import CleanerConfig
    from strata.log.cleaner.log_cleaner import LogCleaner

    plog = open_log(replace(COMPACT, min_cleanable_dirty_ratio=0.01, file_delete_delay_ms=0))
    fill(plog, rounds=5, keys=20)
    plog.update_high_watermark(plog.log_end_offset)
    manager = manager_for(plog, tmp_path)
    if abort_signalled:
        plog.on_truncated = lambda tp, offset: manager.abort_cleaning(tp)
    lc = LogCleaner(CleanerConfig(), manager, clock, submit=lambda fn: fn())
    stop = threading.Event()
    c = Cleaner(0, OffsetMap(1 << 20), Throttler(0), clock, lambda fn: lc._call_on_log_thread(fn, stop),
                lambda p: lc._check_done(p, stop))
    real = Cleaner._clean_into
    done = False

    def clean_into(self: Cleaner, p: PartitionLog, source, *args) -> None:  # type: ignore[no-untyped-def]
        nonlocal done
        real(self, p, source, *args)
        if not done and source.base_offset == max(s.base_offset for s in p.segments[:-1]):
            done = True
            p.truncate_to(p.segments[1].base_offset + 1)
            source.delete_if_exists()  # file.delete.delay.ms=0: the scheduler's deletion, at once

    monkeypatch.setattr(Cleaner, "_clean_into", clean_into)
    assert lc._clean_filthiest_log(c, stop)
    assert done and manager.uncleanable() == {}
    monkeypatch.setattr(Cleaner, "_clean_into", real)
    fill(plog, rounds=2, keys=20)
    plog.update_high_watermark(plog.log_end_offset)
    assert lc._clean_filthiest_log(c, stop)  # cleaned again, normally
    assert manager.uncleanable() == {}
    assert lc.cleanings == 2
