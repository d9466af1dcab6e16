"""Moving a partition's log to another log directory of the same broker (JBOD, AlterReplicaLogDirs).

Kafka builds a *future replica* in the target directory that fetches from the current one and swaps when
it has caught up. Segments are immutable once rolled, so Strata copies files instead - no record is
decoded or re-appended:

1. ``copy_rolled`` (a worker thread): every rolled segment's files, and the producer snapshots, into
   ``<target>/<topic>-<p>.<uuid>-future``. Files retention deletes meanwhile are skipped.
2. The broker rolls the log when its active segment has grown (so the final step copies little) and
   repeats step 1 for what rolled meanwhile.
3. ``swap`` (on the event loop, between two appends): the log is closed (final producer snapshot, trimmed
   indexes), what changed is copied (the active segment, its indexes, the checkpoints of the partition),
   the old directory is renamed ``<topic>-<p>.<uuid>-moved``, the future one to ``<target>/<topic>-<p>``,
   and the log is opened from there with its in-memory offsets (log start, high watermark, highest
   offset in remote storage) carried over. The ``-moved`` directory is then deleted like a deleted log's.

Crash safety (``recover_moves`` runs before the directories are loaded): a ``-future`` directory without
a ``-moved`` one is an unfinished copy (the source is intact): deleted. A ``-moved`` directory whose
partition directory exists elsewhere was swapped: deleted. A ``-moved`` one without it was interrupted
between the two renames: the ``-future`` copy, complete by then, is renamed into place (or, if it is
missing, the ``-moved`` directory is renamed back).
"""

from __future__ import annotations

import logging
import re
import shutil
import uuid
from pathlib import Path

from strata.common import TopicPartition
from strata.log.checkpoints import fsync_path

log = logging.getLogger(__name__)

FUTURE_DIR_SUFFIX = "-future"
MOVED_DIR_SUFFIX = "-moved"
_SPECIAL = re.compile(r"^(?P<tp>.+-\d+)\.(?P<id>[0-9a-f]{32})(?P<suffix>-future|-moved)$")


def future_dir(target_log_dir: Path, tp: TopicPartition) -> Path:
    return target_log_dir / f"{tp}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def copy_rolled(source: Path, future: Path, active_base_name: str) -> int:
    """Copy the files of every segment but the active one (named ``active_base_name.*``) not yet in ``future``,
    with the producer snapshots; returns the bytes copied. Runs on a worker thread: these files do not change."""
    future.mkdir(parents=True, exist_ok=True)
    copied = 0
    for path in sorted(source.iterdir()):
        name = path.name
        if not path.is_file() or name.startswith(active_base_name) or name.endswith((".deleted", ".cleaned", ".swap")):
            continue
        if not name.endswith((".log", ".index", ".timeindex", ".txnindex", ".snapshot")):
            continue  # checkpoints and partition.metadata: copied at the swap, when they are final
        target = future / name
        try:
            size = path.stat().st_size
            if target.exists() and target.stat().st_size == size:
                continue
            shutil.copyfile(path, target)
        except FileNotFoundError:  # deleted by retention meanwhile
            target.unlink(missing_ok=True)
            continue
        copied += size
    return copied


def copy_changed(source: Path, future: Path) -> int:
    """The swap's copy (the log is closed): every file missing from ``future`` or of another size, and the
    files that may change in place (checkpoints, ``partition.metadata``); files gone from the source are
    removed from ``future``. Then everything is fsynced."""
    copied = 0
    names = set()
    for path in source.iterdir():
        if not path.is_file() or path.name.endswith((".deleted", ".cleaned", ".swap")):
            continue
        names.add(path.name)
        target = future / path.name
        size = path.stat().st_size
        mutable = not path.name.endswith((".log", ".index", ".timeindex", ".txnindex", ".snapshot"))
        if mutable or not target.exists() or target.stat().st_size != size:
            shutil.copyfile(path, target)
            copied += size
    for stale in future.iterdir():
        if stale.name not in names:
            stale.unlink()
    for path in future.iterdir():
        fsync_path(path)
    fsync_path(future)
    return copied


def swap_dirs(source: Path, future: Path, target_log_dir: Path, tp: TopicPartition) -> tuple[Path, Path]:
    """Rename the source away (``-moved``), then the future copy into place; returns (new dir, moved dir)."""
    moved = source.with_name(f"{tp}.{uuid.uuid4().hex}{MOVED_DIR_SUFFIX}")
    source.rename(moved)
    fsync_path(source.parent)
    final = target_log_dir / str(tp)
    future.rename(final)
    fsync_path(target_log_dir)
    return final, moved


def recover_moves(log_dirs: list[Path]) -> list[Path]:
    """Finish or undo moves a crash interrupted (see the module docstring); returns directories to delete."""
    found: dict[str, dict[str, list[Path]]] = {}
    present: set[str] = set()
    for d in log_dirs:
        if not d.is_dir():
            continue
        for path in d.iterdir():
            m = _SPECIAL.match(path.name)
            if m is not None and path.is_dir():
                found.setdefault(m["tp"], {}).setdefault(m["suffix"], []).append(path)
            elif path.is_dir():
                present.add(path.name)
    doomed: list[Path] = []
    for tp, kinds in found.items():
        futures, moved = kinds.get(FUTURE_DIR_SUFFIX, []), kinds.get(MOVED_DIR_SUFFIX, [])
        if moved and tp not in present:
            if futures:
                final = futures[0].with_name(tp)
                log.warning("completing the interrupted move of %s into %s", tp, final.parent)
                futures.pop(0).rename(final)
            else:
                source = moved.pop(0)
                log.warning("undoing the interrupted move of %s: its copy is gone, the source is restored", tp)
                source.rename(source.with_name(tp))
            present.add(tp)
        for path in futures + moved:
            log.info("removing %s (a log directory move that did not complete, or completed)", path)
            doomed.append(path)
    return doomed
