"""A short seeded nemesis run in ``make test`` (``make nemesis`` runs 100+ windows): a 3-broker cluster on a
3-node ensemble in network namespaces, idempotent producers, a transactional writer and a read_committed
group consumer, faults drawn from every kind, the final read and the checker.

Root only (``nemesis.net.available``); skipped with the reason elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nemesis.run import run

from nemesis import net
from strata.tools.zookeeper import zookeeper_available

REASON = net.available() or (None if zookeeper_available() else "ZooKeeper is not installed")
pytestmark = [pytest.mark.skipif(REASON is not None, reason=f"nemesis: {REASON}"),
              pytest.mark.xdist_group("netns")]  # one lab at a time: they share the host's nftables


def test_short_seeded_nemesis_run_finds_no_anomaly(tmp_path: Path) -> None:
    r = run(tmp_path / "seed-11", seed=11, windows=3, fault_s=9, quiet_s=6, warmup_s=6,
            kinds=["zk-isolate", "isolate-but-clients", "kill"], log=False)
    report = (r.out / "report.txt").read_text()
    assert not r.workload_errors, r.workload_errors
    assert len(r.history.faults) == 3
    assert r.result.ok, report
    assert not r.availability_violations(), report  # windows with a stall of the clients' process excepted
    # and there is none: a stall now means the workload lost its pace (it once did, at every kill) or the
    # machine starved the clients, either of which leaves windows unjudged
    assert not r.stalls, (r.out / "stalls.txt").read_text()[:4000]
    # the run wrote, read and committed (a checker of an empty history would pass anything)
    stats = r.result.stats
    assert sum(1 for op in r.history.ops if op.f == "send" and op.outcome == "ok") > 500, stats
    assert any(op.f == "txn" and op.outcome == "ok" and op.end == "commit" for op in r.history.ops)
    assert any(op.f == "commit_offset" and op.outcome == "ok" for op in r.history.ops)
    assert (r.out / "timeline.png").stat().st_size > 10_000
