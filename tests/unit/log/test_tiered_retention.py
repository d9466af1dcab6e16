"""Local retention of tiered logs: the upload gate, local.retention.*, offload rolls and the total-retention bound."""

from __future__ import annotations

from strata.config import LogConfig
from strata.protocol.records import BatchBuilder


def batch(ts: int, size: int = 100) -> bytes:
    b = BatchBuilder()
    b.append(b"v" * size, key=b"k", timestamp=ts)
    return b.build()


def tiered_log(open_log, clock, **config):  # type: ignore[no-untyped-def]
    plog = open_log(LogConfig(remote_storage_enable=True, **config), remote_log_enabled=True)
    return plog


def fill(plog, clock, n: int, ts: int | None = None) -> None:  # type: ignore[no-untyped-def]
    for _ in range(n):
        plog.append_as_leader(batch(clock.milliseconds() if ts is None else ts), leader_epoch=0)
        plog.roll()  # one batch per segment
    plog.update_high_watermark(plog.log_end_offset)


def bases(plog) -> list[int]:  # type: ignore[no-untyped-def]
    return [s.base_offset for s in plog.segments]


def test_local_retention_deletes_only_uploaded_segments(open_log, clock) -> None:  # type: ignore[no-untyped-def]
    plog = tiered_log(open_log, clock, local_retention_bytes=1)
    fill(plog, clock, 4)
    assert plog.delete_old_segments() == 0  # nothing uploaded: nothing leaves the disk
    plog.update_highest_offset_in_remote_storage(1)
    assert plog.delete_old_segments() == 2
    assert bases(plog) == [2, 3, 4]
    assert (plog.log_start_offset, plog.local_log_start_offset) == (0, 2)  # the log start stays: data is remote


def test_total_retention_bounds_the_disk_while_uploads_stall(open_log, clock) -> None:  # type: ignore[no-untyped-def]
    """Nothing uploaded, but segments past retention.ms go anyway (they would be expired remotely
    right after upload): the log start moves, the disk stays bounded."""
    plog = tiered_log(open_log, clock, retention_ms=10_000, local_retention_ms=1_000)
    old = clock.milliseconds()
    fill(plog, clock, 2, ts=old)
    clock.advance(20_000)
    fill(plog, clock, 2)
    assert plog.delete_old_segments() == 2
    assert bases(plog)[0] == 2
    assert plog.log_start_offset == 2 and plog.local_log_start_offset == 2


def test_active_segment_breaching_local_retention_is_rolled_for_offload(open_log, clock) -> None:  # type: ignore[no-untyped-def]
    plog = tiered_log(open_log, clock, local_retention_ms=1_000)
    plog.append_as_leader(batch(clock.milliseconds()), leader_epoch=0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_old_segments()
    assert bases(plog) == [0]  # still young
    clock.advance(5_000)
    plog.delete_old_segments()
    assert bases(plog) == [0, 1]  # rolled: the copy task can now upload offsets 0..0
    assert plog.delete_old_segments() == 0  # but it stays until uploaded
    plog.update_highest_offset_in_remote_storage(0)
    assert plog.delete_old_segments() == 1
    assert bases(plog) == [1]


def test_copy_disabled_falls_back_to_total_retention(open_log, clock) -> None:  # type: ignore[no-untyped-def]
    plog = tiered_log(open_log, clock, remote_log_copy_disable=True, retention_bytes=250)
    fill(plog, clock, 4)
    assert plog.delete_old_segments() >= 1  # no upload gate when copying is off
    assert plog.log_start_offset == bases(plog)[0]
