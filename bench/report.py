"""What every benchmark here shares: a result with its same-run baseline, the ratio rows, the table.

A subject's ratio is the median of its rates over the median of its baseline's; ``paired_ratios``
are the per-repetition ratios, shown as the min-max spread. ``informational`` results get a
ratio but no target (shown for insight only). CPU columns appear when a benchmark records them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1024 * 1024


@dataclass
class Result:
    name: str
    kind: str  # "baseline" or "subject"
    samples_s: list[float] = field(default_factory=list)
    nbytes: int = 0
    baseline: str | None = None
    note: str = ""
    informational: bool = False  # a ratio shown for insight, not an acceptance target
    server_cpu_s: list[float] = field(default_factory=list)  # CPU the server process spent per run
    client_cpu_s: list[float] = field(default_factory=list)  # CPU the client (this process) spent per run

    @property
    def rates(self) -> list[float]:
        return [self.nbytes / s / 1e6 for s in self.samples_s]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def summarize(results: list[Result], target: float) -> list[dict]:
    by_name = {r.name: r for r in results}
    rows = []
    for r in results:
        row = {
            "name": r.name, "kind": r.kind, "note": r.note, "bytes_per_run": r.nbytes,
            "samples_s": r.samples_s, "mb_per_s": r.rates, "median_mb_per_s": r.median,
            "min_mb_per_s": min(r.rates), "max_mb_per_s": max(r.rates),
        }
        if r.server_cpu_s and r.client_cpu_s:
            row.update(server_cpu_s=r.server_cpu_s, client_cpu_s=r.client_cpu_s,
                       median_server_cpu_s=statistics.median(r.server_cpu_s),
                       median_client_cpu_s=statistics.median(r.client_cpu_s))
        if r.baseline is not None:
            b = by_name[r.baseline]
            ratio = r.median / b.median
            paired = [b.samples_s[i] / s for i, s in enumerate(r.samples_s)]
            row.update(baseline=b.name, ratio=ratio, paired_ratios=paired)
            if not r.informational:
                row.update(target=target, passed=ratio >= target)
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    with_cpu = any("median_server_cpu_s" in row for row in rows)
    header = f"{'name':<36} {'MB/s median (min-max)':>24} {'ratio (pairs)':>20} {'target':>7} {'result':>6}"
    if with_cpu:
        header += f" {'CPU s server/client':>20}"
    lines = [header, "-" * len(header)]
    for row in rows:
        rate = f"{row['median_mb_per_s']:.0f} ({row['min_mb_per_s']:.0f}-{row['max_mb_per_s']:.0f})"
        if "ratio" in row:
            pairs = row["paired_ratios"]
            ratio = f"{row['ratio']:.2f} ({min(pairs):.2f}-{max(pairs):.2f})"
            if "target" in row:
                target, verdict = f">={row['target']:g}", "PASS" if row["passed"] else "FAIL"
            else:
                target, verdict = "info", ""
        else:
            ratio, target, verdict = "baseline", "", ""
        line = f"{row['name']:<36} {rate:>24} {ratio:>20} {target:>7} {verdict:>6}"
        if with_cpu:
            cpu = f"{row['median_server_cpu_s']:.2f} / {row['median_client_cpu_s']:.2f}" \
                if "median_server_cpu_s" in row else ""
            line += f" {cpu:>20}"
        lines.append(line)
    return "\n".join(lines)


def environment(**extra: object) -> dict:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(), **extra}


def run_and_save(run: Callable[[], dict], show: Callable[[dict], None], *, quick: bool, json_path: Path) -> int:
    """Every benchmark's ending: run, time, print the report, save it as JSON next to the others."""
    started = time.perf_counter()
    report = run()
    report["mode"] = "quick" if quick else "default"
    report["wall_s"] = time.perf_counter() - started
    if isinstance(report.get("environment"), dict):
        report["environment"]["loadavg_at_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    show(report)
    print(f"wall time {report['wall_s']:.1f} s")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"results: {json_path}")
    return 0

