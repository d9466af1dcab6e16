"""Moving a log between log dirs (strata.log.dir_move): copying, the swap, and recovery after a crash at
any point of the swap - the data is always in exactly one partition directory afterwards."""

from __future__ import annotations

from pathlib import Path

from strata.common import TopicPartition
from strata.log import dir_move

TP = TopicPartition("t", 0)


def _log_dir(root: Path, files: dict[str, bytes]) -> Path:
    d = root / str(TP)
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    return d


def test_copy_rolled_then_changed_then_swap(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d2.mkdir()
    source = _log_dir(d1, {"00000000000000000000.log": b"a" * 10, "00000000000000000000.index": b"i",
                           "00000000000000000005.log": b"active", "00000000000000000005.snapshot": b"s",
                           "leader-epoch-checkpoint": b"0\n1\n0 0\n", "partition.metadata": b"m"})
    future = dir_move.future_dir(d2, TP)
    assert dir_move.copy_rolled(source, future, "00000000000000000005") == 11
    assert sorted(p.name for p in future.iterdir()) == ["00000000000000000000.index", "00000000000000000000.log"]
    assert dir_move.copy_rolled(source, future, "00000000000000000005") == 0  # nothing new
    (source / "00000000000000000005.log").write_bytes(b"active+more")
    (source / "00000000000000000000.log").unlink()  # retention deleted the first segment meanwhile
    (source / "00000000000000000000.index").unlink()
    dir_move.copy_changed(source, future)
    assert sorted(p.name for p in future.iterdir()) == sorted(p.name for p in source.iterdir())
    final, moved = dir_move.swap_dirs(source, future, d2, TP)
    assert final == d2 / str(TP) and (final / "00000000000000000005.log").read_bytes() == b"active+more"
    assert not source.exists() and moved.name.endswith(dir_move.MOVED_DIR_SUFFIX)
    assert dir_move.recover_moves([d1, d2]) == [moved]  # a completed swap: only the old copy to delete


def test_a_crash_before_the_swap_keeps_the_source(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d2.mkdir()
    source = _log_dir(d1, {"00000000000000000000.log": b"x"})
    future = dir_move.future_dir(d2, TP)
    dir_move.copy_rolled(source, future, "99")
    assert dir_move.recover_moves([d1, d2]) == [future]
    assert source.is_dir()


def test_a_crash_between_the_two_renames_completes_the_move(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d2.mkdir()
    source = _log_dir(d1, {"00000000000000000000.log": b"x"})
    future = dir_move.future_dir(d2, TP)
    future.mkdir()
    dir_move.copy_changed(source, future)
    moved = source.with_name(f"{TP}.{'0' * 32}{dir_move.MOVED_DIR_SUFFIX}")
    source.rename(moved)  # the crash: the future copy not yet renamed into place
    assert dir_move.recover_moves([d1, d2]) == [moved]
    assert (d2 / str(TP) / "00000000000000000000.log").read_bytes() == b"x"


def test_a_moved_dir_without_its_copy_is_restored(tmp_path: Path) -> None:
    d1 = tmp_path / "d1"
    source = _log_dir(d1, {"00000000000000000000.log": b"x"})
    moved = source.with_name(f"{TP}.{'1' * 32}{dir_move.MOVED_DIR_SUFFIX}")
    source.rename(moved)
    assert dir_move.recover_moves([d1]) == []
    assert (d1 / str(TP) / "00000000000000000000.log").read_bytes() == b"x"
