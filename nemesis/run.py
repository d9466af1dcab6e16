"""``python -m nemesis.run``: workloads against a cluster in network namespaces while a seeded nemesis injects
faults, then a final read, the checker and the report (``make nemesis``; a short run is in ``make test``).

Each fault window: a fault drawn from the seeded schedule starts, holds for ``--fault-s``, is healed, and the
cluster gets ``--quiet-s`` to recover before the next. After the last window every broker is brought back,
the workloads stop, the final read covers every partition, and the checker judges the whole history. The
output directory keeps ``history.jsonl`` (check it again with ``python -m nemesis.report``), ``report.txt``,
``timeline.png`` and the brokers' logs. The exit status is 0 only when no forbidden anomaly was found and every
window's availability held.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nemesis import net
from nemesis.checker import CheckResult, check
from nemesis.environment import TOPIC, Environment
from nemesis.faults import FAULTS, available_faults
from nemesis.history import History, RunMeta
from nemesis.report import format_report, plot_timeline
from nemesis.workloads import GroupConsumer, IdempotentProducers, TransactionalWriter, Workload, final_read


@dataclass
class RunResult:
    result: CheckResult
    history: History
    out: Path
    workload_errors: list[str]
    stalls: list[tuple[float, float]]  # when the clients' own process could not run (see Heartbeat)

    def availability_violations(self) -> list[tuple[object, object]]:
        """The availability violations not explained by a stall of the clients' process during the window."""
        return [(w, pw) for w, pw in self.result.availability.violations
                if not any(a < w.end and b > w.fault.start for a, b in self.stalls)]

    @property
    def ok(self) -> bool:
        return self.result.ok and not self.availability_violations() and not self.workload_errors


class Heartbeat(threading.Thread):
    """Measures the instrument. Acknowledgements also stop for reasons that are not the brokers': the process
    that runs the clients cannot run a thread (the GIL held by a blocking C call, the machine starved), or
    every producer thread sits blocked inside the client library. Both are recorded as stalls, with the Python
    stack of every thread (``stalls.txt``; faulthandler for the first kind, as it needs no GIL; native stacks
    through py-spy where installed), and a window a stall overlaps is not judged for availability. The first
    runs saw a stall at almost every broker kill or freeze; the native stacks showed producers in an ordinary
    timed wait, which led to the cause: the workload's own pacing (:func:`nemesis.workloads._poll_until`)."""

    def __init__(self, history: History, dump: Path, progress: Callable[[], dict[str, float]] = dict,
                 gap_s: float = 1.5) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.history, self.gap_s, self.progress = history, gap_s, progress
        self.stalls: list[tuple[float, float]] = []
        self._dump = open(dump, "w")  # noqa: SIM115 - closed by stop()
        self._halt = threading.Event()

    def run(self) -> None:
        import faulthandler

        last = self.history.now()
        blocked_since: float | None = None
        while not self._halt.is_set():
            faulthandler.dump_traceback_later(self.gap_s + 1.0, repeat=False, file=self._dump)
            time.sleep(0.1)
            now = self.history.now()
            if now - last > self.gap_s:
                self.stalls.append((last, now))
            last = now
            try:
                progress = self.progress()
            except RuntimeError:  # the dict changed while it was copied: look again next time
                continue
            mono = time.monotonic()
            if progress and all(mono - t > self.gap_s for t in progress.values()):
                if blocked_since is None:
                    blocked_since = now - (mono - max(progress.values()))
                    self._stacks(f"every producer thread blocked in its client for {self.gap_s} s at {now:.1f} s")
            elif blocked_since is not None:
                self.stalls.append((blocked_since, now))
                blocked_since = None
        faulthandler.cancel_dump_traceback_later()

    def _stacks(self, why: str) -> None:
        import traceback

        names = {t.ident: t.name for t in threading.enumerate()}
        self._dump.write(f"==== {why}\n")
        for ident, frame in sys._current_frames().items():
            self._dump.write(f"-- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame)[-4:]))
        self._dump.flush()
        self._native_stacks()

    def _native_stacks(self) -> None:
        """Python stacks end where a thread entered C; py-spy (if installed) shows where inside the client
        library every thread waits."""
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if spy is None:
            return
        try:
            out = subprocess.run([spy, "dump", "--native", "--pid", str(os.getpid())], capture_output=True,
                                 text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            self._dump.write(f"(py-spy: {e})\n")
            return
        self._dump.write(out.stdout + out.stderr)
        self._dump.flush()

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self._dump.close()


def run(out: Path, *, seed: int, windows: int, fault_s: float = 15.0, quiet_s: float = 10.0,
        warmup_s: float = 10.0, kinds: list[str] | None = None, unclean_election: bool = False,
        partitions: int = 3, tiered: bool = True, log: bool = True) -> RunResult:
    reason = net.available()
    if reason is not None:
        raise RuntimeError(f"the nemesis needs network namespaces: {reason}")
    kinds = kinds or available_faults(tiered)
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(FAULTS)}")
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    meta = RunMeta(run=out.name, seed=seed, unclean_election=unclean_election, scenario=",".join(kinds))
    history = History(meta, path=out / "history.jsonl")
    say = print if log else (lambda *_a, **_k: None)
    env = Environment(out / "cluster", partitions=partitions, unclean_election=unclean_election, tiered=tiered)
    stop = threading.Event()
    workloads: list[Workload] = []
    producers: IdempotentProducers | None = None
    heartbeat = Heartbeat(history, out / "stalls.txt", lambda: dict(producers.progress) if producers else {})
    heartbeat.start()
    try:
        env.start()
        say(f"cluster up: brokers {env.bootstrap}; seed {seed}, {windows} windows of {fault_s:g} s")
        producers = IdempotentProducers(history, stop, env.bootstrap, TOPIC, partitions)
        workloads = [
            producers,
            TransactionalWriter(history, stop, env.bootstrap, TOPIC, partitions, seed),
            GroupConsumer(history, stop, env.bootstrap, TOPIC, "nemesis-group"),
        ]
        for w in workloads:
            w.start()
        time.sleep(warmup_s)
        for i in range(windows):
            kind = rng.choice(kinds)
            leaders = env.leaders()
            started = FAULTS[kind](env, rng, leaders)
            fault = history.fault_start(started.kind, started.target, brokers=started.brokers,
                                        description=started.description, leaders=leaders)
            say(f"[{history.now():7.1f}s] window {i + 1}/{windows}: {started.description}")
            time.sleep(fault_s)
            started.undo()
            history.fault_end(fault)
            time.sleep(quiet_s)
        env.lab.heal()
        env.wait_healthy()
        time.sleep(2.0)
        stop.set()
        for w in workloads:
            w.join(120)
        say(f"[{history.now():7.1f}s] workloads stopped; final read")
        final_read(history, env.bootstrap, TOPIC, partitions)
    finally:
        stop.set()
        heartbeat.stop()
        history.close()
        env.stop()
        _keep_logs(env, out)
    result = check(history, unclean_election=unclean_election)
    report = format_report(result, history)
    errors = [e for w in workloads for e in w.errors]
    if errors:
        report += "\n\nWorkload errors (bugs of the harness, not anomalies):\n" + "\n".join(errors)
    if heartbeat.stalls:
        report += ("\n\nStalls of the clients' process (windows they overlap are not judged for availability; "
                   "stacks in stalls.txt):\n" + "\n".join(f"  {a:7.1f}s - {b:7.1f}s ({b - a:.1f} s)"
                                                         for a, b in heartbeat.stalls))
    (out / "report.txt").write_text(report + "\n")
    try:
        plot_timeline(history, result, out / "timeline.png", title=f"nemesis seed {seed}")
    except ImportError:  # matplotlib is a test extra
        pass
    say(report)
    return RunResult(result, history, out, errors, heartbeat.stalls)


def _keep_logs(env: Environment, out: Path) -> None:
    """Broker logs stay beside the history (the cluster's data directories are removed)."""
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    if env.cluster is not None:
        for i, b in env.cluster.brokers.items():
            if b.log_path.exists():
                shutil.copy(b.log_path, logs / f"broker-{i}.log")
    shutil.rmtree(out / "cluster", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nemesis.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("nemesis-out"), help="output directory (one subdir per run)")
    ap.add_argument("--seed", type=int, action="append", help="seed of a run (repeat for several runs)")
    ap.add_argument("--runs", type=int, default=1, help="runs with seeds drawn at random (without --seed)")
    ap.add_argument("--windows", type=int, default=10, help="fault windows per run")
    ap.add_argument("--fault-s", type=float, default=15.0)
    ap.add_argument("--quiet-s", type=float, default=10.0)
    ap.add_argument("--kinds", help=f"comma-separated fault kinds (default: all of {', '.join(FAULTS)})")
    ap.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable=true")
    ap.add_argument("--no-tiered", action="store_true", help="no S3 store, no tiered topic")
    args = ap.parse_args(argv)
    # a SIGTERM (CI's time limit, a kill) unwinds like Ctrl-C: brokers, ZooKeeper and namespaces are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seeds = args.seed or [random.SystemRandom().randrange(1 << 31) for _ in range(args.runs)]
    kinds = args.kinds.split(",") if args.kinds else None
    failed = []
    total_windows = 0
    for seed in seeds:
        r = run(args.out / f"seed-{seed}", seed=seed, windows=args.windows, fault_s=args.fault_s,
                quiet_s=args.quiet_s, kinds=kinds, unclean_election=args.unclean, tiered=not args.no_tiered)
        total_windows += len(r.history.faults)
        if not r.ok:
            failed.append(seed)
    print(f"\n{len(seeds)} runs, {total_windows} fault windows; failed seeds: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
