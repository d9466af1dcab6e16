"""The readable end of a nemesis run: a table per anomaly class, an availability table per fault window, and a
timeline plot (PNG) with the faults shaded.

Why both: the tables say *what* is wrong with op ids to look up in the history; the plot says *when*, against
the faults, which is usually the first clue to the cause (acks stopping for every partition while one broker is
cut off was the availability finding of issue 26's first probe).

    .venv/bin/python -m nemesis.report HISTORY.jsonl [--png timeline.png] [--unclean-election] [--examples N]
    .venv/bin/python -m nemesis.report --demo timeline.png     # a synthetic run, to see what a report looks like
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from nemesis.checker import CLASSES, FORBIDDEN, CheckResult, check
from nemesis.history import History

_KIND_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7")


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def format_report(result: CheckResult, history: History | None = None, *, examples: int = 5) -> str:
    """The plain-text report: verdicts, the class table, examples of each non-empty class, availability."""
    out: list[str] = []
    if history is not None:
        m = history.meta
        out.append(f"Nemesis run {m.run or '?'} (seed {m.seed}, scenario {m.scenario or '-'}, unclean election "
                   f"{'on' if result.unclean_election else 'off'}): {len(history.ops)} ops, "
                   f"{len(history.faults)} fault window(s), {history.end_t:.1f} s")
    bad = {cls: len(lst) for cls, lst in result.forbidden.items()}
    if result.ok:
        out.append("Safety: OK (no forbidden anomaly)")
    else:
        why = [f"{cls} {n}" for cls, n in bad.items()] + [f"{len(result.problems)} history problem(s)"] * bool(
            result.problems)
        out.append("Safety: FAILED: " + ", ".join(why))
    av = result.availability
    if av.ok:
        out.append(f"Availability: OK (every partition not led by a faulty broker kept >= {av.min_ratio:.0%} of its "
                   f"acks/s through every window)")
    else:
        out.append(f"Availability: FAILED: {len(av.violations)} partition-window(s) not led by the faulty broker "
                   f"fell below {av.min_ratio:.0%} of their acks/s")
    out.append("")

    width = max(len(c) for c in CLASSES)
    out.append(f"{'anomaly class':<{width}}  {'count':>7}  kind")
    out.append(f"{'-' * width}  {'-' * 7}  {'-' * 9}")
    for cls in CLASSES:
        kind = "forbidden" if cls in FORBIDDEN else "allowed"
        out.append(f"{cls:<{width}}  {len(result.anomalies.get(cls, ())):>7}  {kind}")
    out.append("")

    for cls in CLASSES:
        lst = result.anomalies.get(cls, ())
        if not lst:
            continue
        shown = min(examples, len(lst))
        out.append(f"== {cls}: {len(lst)} (first {shown})")
        for a in lst[:shown]:
            where = f"{a.partition}@{a.offset}" if a.partition is not None and a.offset is not None else (
                a.partition or "")
            t = f"t={a.time:.3f}" if a.time is not None else "t=?"
            out.append(f"  ops {', '.join(map(str, a.ops))}  {t}  {where}  {a.value if a.value is not None else ''}"
                       .rstrip())
            out.extend(textwrap.wrap(a.description, 112, initial_indent="      ", subsequent_indent="      "))
        out.append("")

    if av.windows:
        out.append(f"Availability per fault window: acknowledged sends/s per partition, before = the "
                   f"{av.baseline_s:g} s before the window; * = led by a broker the fault hit (not judged); "
                   f"resumed = seconds from the window's end to the partition's next acknowledgement")
        head = (f"{'#':>3}  {'kind':<20}  {'target':<12}  {'window (s)':<20}  {'partition':<12}  {'leader':>6}  "
                f"{'before/s':>8}  {'during/s':>8}  {'ratio':>6}  {'resumed':>7}  verdict")
        out.append(head)
        out.append("-" * len(head))
        for w in av.windows:
            f = w.fault
            win = f"{f.start:.1f}-{w.end:.1f} ({w.end - f.start:.1f})"
            for i, pw in enumerate(w.partitions):
                lead = "?" if pw.healthy is None and pw.leader is None else str(pw.leader)
                if pw.healthy is False:
                    lead += "*"
                verdict = "-" if not pw.healthy else ("ok" if pw.ok else "LOW")
                ratio = "-" if pw.ratio is None else f"{pw.ratio:.2f}"
                resumed = "never" if pw.resumed_s is None else f"{pw.resumed_s:.1f}"
                cols = (f"{f.id:>3}  {f.kind[:20]:<20}  {f.target[:12]:<12}  {win:<20}" if i == 0 else
                        f"{'':>3}  {'':<20}  {'':<12}  {'':<20}")
                out.append(f"{cols}  {pw.partition:<12}  {lead:>6}  {_fmt_rate(pw.before_rate):>8}  "
                           f"{_fmt_rate(pw.during_rate):>8}  {ratio:>6}  {resumed:>7}  {verdict}")
        out.append("")
    if result.problems:
        out.append("History problems (the checks they concern are vacuous):")
        out.extend(f"  - {p}" for p in result.problems)
        out.append("")
    if result.notes:
        out.append("Notes:")
        out.extend(f"  - {n}" for n in result.notes)
        out.append("")
    if result.stats:
        out.append("Checked: " + ", ".join(f"{k} {v}" for k, v in result.stats.items()))
    return "\n".join(out).rstrip() + "\n"


def plot_timeline(history: History, result: CheckResult, path: str | Path, *, title: str | None = None) -> Path:
    """One PNG per run: acknowledged writes/s per partition over time (top), the anomalies by class (bottom),
    fault windows shaded on both with their kind. Uses the Agg backend: no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    av = result.availability
    end = max(history.end_t, 1.0)
    fig, (ax, axa) = plt.subplots(2, 1, figsize=(13, 6.5), sharex=True, gridspec_kw={"height_ratios": [4, 1.4]})
    try:
        b = av.bucket_s
        for p, counts in av.series.items():
            xs = [(i + 0.5) * b for i in range(len(counts))]
            ax.plot(xs, [c / b for c in counts], linewidth=1.2, label=p)
        ymax = max([c / b for counts in av.series.values() for c in counts] + [1.0])
        ax.set_ylim(0, ymax * 1.35)
        kinds = sorted({f.kind for f in history.faults})
        color = {k: _KIND_COLORS[i % len(_KIND_COLORS)] for i, k in enumerate(kinds)}
        for w in av.windows:
            f = w.fault
            for a in (ax, axa):
                a.axvspan(f.start, w.end, color=color[f.kind], alpha=0.18, linewidth=0)
            bad = "" if w.ok else "\nLOW acks"
            led = [pw.partition for pw in w.partitions if pw.healthy is False]
            leads = f"\nleader of {', '.join(led[:3])}{', ...' if len(led) > 3 else ''}" if led else ""
            ax.text((f.start + w.end) / 2, ymax * 1.32, f"#{f.id} {f.kind}\n{f.target}{leads}{bad}", ha="center",
                    va="top", fontsize=8, color="#b00000" if bad else "#333333")
        ax.set_ylabel(f"acknowledged writes/s ({b:g} s buckets)")
        ax.legend(loc="lower left", fontsize=8, ncol=min(6, max(1, len(av.series))), framealpha=0.8)
        ax.grid(alpha=0.3)

        present = [cls for cls in CLASSES if result.anomalies.get(cls)]
        if present:
            for y, cls in enumerate(present):
                times = [a.time for a in result.anomalies[cls] if a.time is not None]
                forbidden = cls in FORBIDDEN
                axa.scatter(times, [y] * len(times), marker="x" if forbidden else "o", s=28 if forbidden else 12,
                            color="#c00000" if forbidden else "#d08a00", zorder=3)
                if forbidden:
                    ax.scatter(times, [0] * len(times), marker="|", s=200, color="#c00000", zorder=3,
                               clip_on=False)
            axa.set_yticks(range(len(present)))
            axa.set_yticklabels([f"{c} ({len(result.anomalies[c])})" for c in present], fontsize=8)
            axa.set_ylim(-0.7, len(present) - 0.3)
        else:
            axa.set_yticks([])
            axa.text(end / 2, 0.5, "no anomalies", ha="center", va="center", fontsize=10, color="#2a7a2a",
                     transform=axa.get_xaxis_transform())
        axa.set_xlabel("seconds since the run started")
        axa.set_xlim(0, end)
        axa.grid(axis="x", alpha=0.3)
        verdict = "OK" if result.ok else "FAILED: " + ", ".join(f"{c} {len(v)}" for c, v in result.forbidden.items())
        if not av.ok:
            verdict += f"; availability: {len(av.violations)} low partition-window(s)"
        m = history.meta
        ax.set_title(title or f"{m.run or 'nemesis run'} (seed {m.seed}, unclean election "
                     f"{'on' if result.unclean_election else 'off'}): {verdict}", fontsize=10)
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nemesis.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("history", nargs="?", help="a history file (JSON lines)")
    ap.add_argument("--png", help="write the timeline plot here")
    ap.add_argument("--unclean-election", action="store_true", default=None,
                    help="judge as a run with unclean election on (default: the history's meta)")
    ap.add_argument("--examples", type=int, default=5, help="examples shown per anomaly class")
    ap.add_argument("--demo", metavar="PNG", help="report on a synthetic clean run and plot it to PNG")
    args = ap.parse_args(argv)
    if args.demo:
        from nemesis.synthetic import synthesize

        history, _ = synthesize(seed=7, duration=60.0, faults=3, partitions=4)
        args.png = args.demo
    elif args.history:
        history = History.load(args.history)
    else:
        ap.error("a history file or --demo")
    result = check(history, unclean_election=args.unclean_election)
    sys.stdout.write(format_report(result, history, examples=args.examples))
    if args.png:
        print(f"timeline: {plot_timeline(history, result, args.png)}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
