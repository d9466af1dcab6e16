"""Crash suite: ``kill -9`` of a tiered broker at random moments and at every named crash point,
with idempotent ``acks=all`` producers running, on the ``local`` and ``s3`` backends.

What each cycle checks is listed in :mod:`tests.reliability.crash_harness`. ``make test`` runs a
fast subset: every crash point once across the two backends (those of the copy and delete paths on
S3, the rest on the local store), plus a random kill and a random kill followed by a kill of the
restart. ``make soak`` runs ``STRATA_SOAK_CRASH_CYCLES`` cycles (default 100: two thirds local, one
third s3), every point at least once on each backend, about 40 % of the rest random kills.
``STRATA_SOAK_SEED`` replays a run's plan and random choices (kill timings still vary); the seed is
printed with every failure and in the summary line (``-s``).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from tests.reliability.crash_harness import CRASH_POINTS, RANDOM, RESTART, CrashRun, plan
from tests.support.seaweedfs import SeaweedFS

# the points whose moment needs the remote store: run them on S3 in the fast subset, the rest locally
S3_POINTS = ["copy.after_started", "rsm.copy.mid", "copy.after_upload", "delete.after_started",
             "delete.after_store_delete"]
LOCAL_POINTS = [p for p in CRASH_POINTS if p not in S3_POINTS]


def _seed() -> int:
    text = os.environ.get("STRATA_SOAK_SEED")
    return int(text) if text else random.SystemRandom().randrange(1 << 31)


def _soak_cycles() -> int:
    return int(os.environ.get("STRATA_SOAK_CRASH_CYCLES", "100"))


def run_cycles(tmp: Path, backend: str, kinds: list[str], seed: int, s3: SeaweedFS | None = None) -> CrashRun:
    run = CrashRun(tmp, backend, seed, s3)
    started = time.monotonic()
    try:
        run.setup(kinds[0])
        for i, kind in enumerate(kinds):
            run.run_cycle(kind, kinds[i + 1] if i + 1 < len(kinds) else RANDOM)
        run.clean_restart()  # after all the crashes, a clean shutdown and start find the same, complete data
    except BaseException:
        print(f"\nCRASH SUITE FAILED: backend={backend} STRATA_SOAK_SEED={seed} cycle={run.cycle} "
              f"kinds={kinds}\n--- broker log tail ---\n{run.tb.broker.tail(6000)}")
        raise
    finally:
        run.close()
    report(run, kinds, time.monotonic() - started)
    return run


def report(run: CrashRun, kinds: list[str], wall_s: float) -> None:
    """Every armed point fired; one summary line (run with ``-s`` to see it)."""
    stats = run.stats
    fired = sum(1 for s in stats if s.fired and s.kind in CRASH_POINTS)
    assert fired == sum(1 for k in kinds if k in CRASH_POINTS), [(s.kind, s.fired) for s in stats]
    restarts = [s for s in stats if s.kind == RESTART]
    kills = len(stats) + len(restarts)
    print(f"\n[crash {run.backend} seed={run.seed}] {len(stats)} cycles, {kills} kills: {fired} at crash points, "
          f"{sum(1 for s in stats if s.kind == RANDOM)} random, {len(restarts)} random + one of the restart "
          f"({sum(s.fired for s in restarts)} before ready); {wall_s:.1f}s; acked {run.acked.count} of "
          f"{run.acked.produced} records ({run.load.fresh_count if run.load else 0} fresh producers + 1 across "
          f"all restarts); read back {sum(s.records_read for s in stats)} "
          f"({sum(s.remote_records_read for s in stats)} from the remote tier); max {run.max_remote_segments} "
          f"remote segments, {run.deletes_seen} deleted; median restart {_median(s.restart_s for s in stats):.2f}s, "
          f"until the kill {_median(s.kill_after_s for s in stats):.2f}s, "
          f"verify {_median(s.verify_s for s in stats):.2f}s; "
          f"client errors {dict(run.acked.client_errors)}; failed deliveries {dict(run.acked.failed)}")


def _median(values: object) -> float:
    ordered = sorted(values)  # type: ignore[call-overload]
    return float(ordered[len(ordered) // 2])


def test_crash_points_and_random_kills_local(tmp_path: Path) -> None:
    seed = _seed()
    rng = random.Random(seed)
    kinds = LOCAL_POINTS + [RANDOM, RESTART]
    rng.shuffle(kinds)
    run_cycles(tmp_path, "local", kinds, seed)


@pytest.mark.slow  # make soak (21 s, and its long soak below): make test runs every crash point locally
def test_crash_points_and_random_kills_s3(tmp_path: Path, seaweedfs: SeaweedFS) -> None:
    seed = _seed()
    rng = random.Random(seed)
    kinds = S3_POINTS + [RANDOM]
    rng.shuffle(kinds)
    run_cycles(tmp_path, "s3", kinds, seed, seaweedfs)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_crash_soak_local(tmp_path: Path) -> None:
    seed = _seed()
    cycles = max(1, _soak_cycles() * 2 // 3)
    run_cycles(tmp_path, "local", plan(random.Random(seed), cycles, list(CRASH_POINTS), 0.4), seed)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_crash_soak_s3(tmp_path: Path, seaweedfs: SeaweedFS) -> None:
    seed = _seed()
    cycles = max(1, _soak_cycles() - _soak_cycles() * 2 // 3)
    run_cycles(tmp_path, "s3", plan(random.Random(seed), cycles, list(CRASH_POINTS), 0.4), seed, seaweedfs)
