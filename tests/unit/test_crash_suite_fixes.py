"""Unit tests of the crash points and of the bugs the crash suite (tests/reliability/test_crash.py) found.

Each fix is tested here at the smallest scale that shows it; the suite shows them with a real broker.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.segments import segment_factory

from strata.common import crashpoints
from strata.config import LogConfig
from strata.log.producer_state import read_snapshot
from strata.protocol.records import BatchBuilder
from strata.tiered.manager import only_local_size
from strata.tiered.storage.local import LocalTieredStorage

# -- crash points --------------------------------------------------------------------------------


def test_crash_point_specs_parse() -> None:
    specs = crashpoints.parse_specs("a.b, checkpoint.before_rename/*.snapshot:3,x:1")
    assert [(s.pattern, s.nth) for s in specs] == [("a.b", 1), ("checkpoint.before_rename/*.snapshot", 3), ("x", 1)]
    with pytest.raises(ValueError):
        crashpoints.parse_specs("a:0")


def test_unarmed_crash_points_do_nothing() -> None:
    assert not crashpoints.armed()  # the test process has no STRATA_CRASH_POINT
    crashpoints.crash_point("log.append.after_write")
    crashpoints.crash_point("checkpoint.before_rename", "leader-epoch-checkpoint")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)


def test_an_armed_point_kills_the_process_the_nth_time_it_is_reached() -> None:
    done = _run("from strata.common import crashpoints as c\n"
                "c.configure('checkpoint.before_rename/*.snapshot:2')\n"
                "c.crash_point('checkpoint.before_rename', 'leader-epoch-checkpoint')\n"
                "c.crash_point('checkpoint.before_rename', '00000000000000000005.snapshot')\n"
                "print('first hit survived', flush=True)\n"
                "c.crash_point('checkpoint.before_rename', '00000000000000000009.snapshot')\n"
                "print('never printed')\n")
    assert done.returncode == -9
    assert done.stdout == "first hit survived\n"
    assert "strata crash point checkpoint.before_rename/00000000000000000009.snapshot reached (hit 2)" in done.stderr


def test_signal_armed_points_are_dormant_until_sigusr1() -> None:
    done = _run("import os, signal\n"
                "from strata.common import crashpoints as c\n"
                "c.configure('copy.after_upload', 'signal')\n"
                "c.crash_point('copy.after_upload')\n"
                "print('dormant', flush=True)\n"
                "os.kill(os.getpid(), signal.SIGUSR1)\n"
                "c.crash_point('copy.after_upload')\n"
                "print('never printed')\n")
    assert (done.returncode, done.stdout) == (-9, "dormant\n")
    assert "strata crash points active" in done.stderr


# -- fixes ---------------------------------------------------------------------------------------


def test_segments_below_the_log_start_leave_the_disk_even_if_never_uploaded(open_log, clock) -> None:  # type: ignore[no-untyped-def]
    """DeleteRecords past segments not uploaded yet: the copy task starts at the log start, so they
    would never be uploaded, and the upload gate kept them on disk for ever (Kafka deletes them)."""
    plog = open_log(LogConfig(remote_storage_enable=True, local_retention_bytes=1), remote_log_enabled=True)
    for i in range(5):
        plog.append_as_leader(_batch(i), leader_epoch=0)
        plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records(3)
    assert [s.base_offset for s in plog.segments] == [3, 4, 5]
    assert (plog.log_start_offset, plog.local_log_start_offset) == (3, 3)
    assert plog.delete_old_segments() == 0  # the rest waits for the upload, as before


def _batch(i: int, producer_id: int = -1, timestamp: int = 1_700_000_000_000) -> bytes:
    b = BatchBuilder(producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                     base_sequence=i if producer_id >= 0 else -1)
    b.append(b"value-%d" % i, key=b"k", timestamp=timestamp)  # the ManualClock's time
    return b.build()


def test_recovery_writes_the_producer_snapshots_of_the_segments_it_replays(open_log, clock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A kill -9 before the roll wrote its snapshot, or recovery deleting the snapshots it cannot trust:
    the replay writes one at every segment base again, so each segment's copy uploads the real state."""
    plog = open_log(LogConfig(segment_bytes=1024))
    for i in range(40):
        plog.append_as_leader(_batch(i, producer_id=42), leader_epoch=0)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 3
    for snapshot in tmp_path.glob("t-0/*.snapshot"):
        snapshot.unlink()  # what recovery leaves of the snapshots above the recovery point
    plog.local_log.close_handlers()  # kill -9
    again = open_log(LogConfig(segment_bytes=1024), had_clean_shutdown=False, recovery_point=0)
    for base in bases[1:]:
        entries = read_snapshot(tmp_path / "t-0" / f"{base:020d}.snapshot")
        assert [(e.producer_id, e.last_data_offset) for e in entries] == [(42, base - 1)]
    assert again.log_end_offset == 40


def test_a_deleted_segment_takes_the_temp_files_of_its_interrupted_copy_along(tmp_path: Path) -> None:
    """kill -9 between the writes and the renames of a local-store copy leaves ``.tmp-*`` files; the
    dangling-upload cleanup deletes the segment id, and with it those files (nothing else would)."""
    seg = segment_factory(tmp_path)()
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "remote")})
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    files = rsm.segment_files(seg.metadata)
    leftovers = [files["log"].with_name(files["log"].name + ".tmp-0123abcd"),
                 files["index"].with_name(files["index"].name + ".tmp-4567ef01")]
    for path in leftovers:
        path.write_bytes(b"half an upload")
    other = files["log"].with_name("00000000000000000999-another.log.tmp-89ab")
    other.write_bytes(b"someone else's upload")
    rsm.delete_log_segment_data(seg.metadata)
    assert rsm.segment_files(seg.metadata) == {}
    assert not any(p.exists() for p in leftovers)
    assert other.exists()
    rsm.close()


def test_local_only_size_does_not_count_segments_the_metadata_shows_uploaded(open_log, clock) -> None:  # type: ignore[no-untyped-def]
    """After a restart the log's highest remote offset is -1 until the copy task's first run: retention
    sized the log with every local segment counted as not uploaded, i.e. twice, and expired too much."""
    plog = open_log(LogConfig(remote_storage_enable=True), remote_log_enabled=True)
    for i in range(4):
        plog.append_as_leader(_batch(i), leader_epoch=0)
        plog.roll()
    sizes = [s.size for s in plog.segments]
    assert only_local_size(plog) == sum(sizes)  # highest_offset_in_remote_storage is -1
    assert only_local_size(plog, remote_end_offset=1) == sum(sizes[2:])
    plog.update_highest_offset_in_remote_storage(2)
    assert only_local_size(plog, remote_end_offset=1) == sum(sizes[3:])
