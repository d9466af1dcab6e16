"""Produce latency of one client while another deletes topics (client-conformance issue, item 6).

    .venv/bin/python bench/delete_topics_bench.py [--quick] [--reps N] [--topics N] [--partitions N]
                                                  [--rate N] [--baseline-s S] [--mode batch|each|both]
                                                  [--set KEY=VALUE ...] [--dir PATH] [--json PATH] [--keep]

One broker process with tiering on (the ``local`` RSM in the work directory, as in
config/server.properties). Per repetition, ``--topics`` topics of ``--partitions`` partitions are
created first (every other one with ``remote.storage.enable=true``: tiered, but nothing ever rolls,
so nothing is uploaded; the others never tiered), then one confluent-kafka producer sends small
records (100 B, acks=all, linger.ms=0) at a steady ``--rate`` to a topic of its own and records
each message's delivery latency (``produce()`` to its delivery callback; the producer polls while
it waits for the next send, so a callback runs as soon as librdkafka has the ack):

* baseline: ``--baseline-s`` seconds with nothing else going on;
* during deletion: another client (confluent_kafka AdminClient, on a thread of its own) deletes
  all the topics - ``batch``: one DeleteTopics request naming all of them, ``each``: one request
  per topic, one after another, each waited for. A message counts as "during" when the time
  between its produce() and its delivery overlaps the deletion (first request sent to last answer).

p50/p99/max of both sets are printed with the ratio during/baseline, plus the deletion's wall
time and the ERROR/Traceback lines the broker logged. The broker keeps its defaults otherwise
(``log.segment.delete.delay.ms`` 60 s: directories are renamed at once, their files removed later;
``--set`` overrides any key). No fsync-related setting is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from broker_bench import Server  # noqa: E402
from report import environment  # noqa: E402

READY = re.compile(r"strata broker ready on ([\d.]+):(\d+)")
WAIT_S = 120.0
PRODUCE_TOPIC = "latency-probe"


@dataclass(frozen=True)
class BenchConfig:
    topics: int = 100
    partitions: int = 4
    rate: int = 200  # messages per second
    record_bytes: int = 100
    baseline_s: float = 5.0
    tail_s: float = 1.0  # producing after the deletion finished (its stragglers)
    reps: int = 3
    modes: tuple[str, ...] = ("batch", "each")
    props: tuple[tuple[str, str], ...] = ()

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(reps=1, baseline_s=3.0)


@dataclass
class Phase:
    latencies_ms: list[float] = field(default_factory=list)

    def stats(self) -> dict[str, float]:
        lat = sorted(self.latencies_ms)
        if not lat:
            return {"n": 0}
        return {"n": len(lat), "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99), "max_ms": lat[-1],
                "mean_ms": statistics.fmean(lat)}


def _pct(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    k = max(0, min(len(sorted_values) - 1, int(round(pct / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


class Broker:
    def __init__(self, work: Path, props: dict[str, str]) -> None:
        self.work = work
        self.props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(work / "logs"),
                      "remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "local",
                      "rsm.config.dir": str(work / "remote"), "metrics.port": "0",
                      "group.initial.rebalance.delay.ms": "0", **props}
        work.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "strata", "serve"]
        for k, v in self.props.items():
            args += ["--set", f"{k}={v}"]
        self.log_path = work / "broker.log"
        self.server = Server(args, self.log_path, READY)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def problems(self) -> list[str]:
        text = self.log_path.read_bytes().decode(errors="replace")
        return [line for line in text.splitlines() if " ERROR " in line or line.startswith("Traceback")]

    def stop(self) -> None:
        self.server.stop()


class LatencyProducer:
    """One producer at a steady rate; ``run_until(t)`` sends and records (sent, delivered) times."""

    def __init__(self, bootstrap: str, cfg: BenchConfig) -> None:
        from confluent_kafka import Producer

        self.cfg = cfg
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                  "enable.idempotence": False, "log_level": 3})
        self.producer.list_topics(PRODUCE_TOPIC, timeout=10)
        self.value = os.urandom(cfg.record_bytes)
        self.samples: list[tuple[float, float]] = []
        self.errors: list[Any] = []

    def run_until(self, stop: threading.Event | float) -> tuple[float, float]:
        """Send until ``stop`` (a deadline, or an event), then wait for every delivery; returns the span."""
        interval = 1.0 / self.cfg.rate
        started = next_send = time.monotonic()
        while True:
            now = time.monotonic()
            if isinstance(stop, float) and now >= stop or isinstance(stop, threading.Event) and stop.is_set():
                break
            if now >= next_send:
                sent = time.monotonic()

                def delivered(err: Any, _msg: Any, sent: float = sent) -> None:
                    if err is not None:
                        self.errors.append(err)
                    else:
                        self.samples.append((sent, time.monotonic()))

                self.producer.produce(PRODUCE_TOPIC, self.value, partition=0, on_delivery=delivered)
                next_send += interval
                if next_send < now:  # fell behind (a stalled poll): keep the rate, do not burst
                    next_send = now + interval
            self.producer.poll(max(0.0, min(next_send - time.monotonic(), 0.05)))
        if self.producer.flush(WAIT_S):
            raise RuntimeError("messages not delivered in time")
        if self.errors:
            raise RuntimeError(f"delivery errors: {self.errors[:3]}")
        return started, time.monotonic()


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def create_topics(admin: Any, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    new = [NewTopic(n, partitions, 1, config={"remote.storage.enable": "true" if i % 2 else "false"})
           for i, n in enumerate(names)]
    for fut in admin.create_topics(new, operation_timeout=30).values():
        fut.result(timeout=WAIT_S)


def delete_topics(admin: Any, names: list[str], mode: str) -> None:
    if mode == "batch":
        for fut in admin.delete_topics(names, operation_timeout=60).values():
            fut.result(timeout=WAIT_S)
    else:
        for n in names:
            for fut in admin.delete_topics([n], operation_timeout=60).values():
                fut.result(timeout=WAIT_S)


def run_rep(broker: Broker, cfg: BenchConfig, mode: str, rep: int) -> dict[str, Any]:
    admin = _admin(broker.bootstrap)
    names = [f"doomed-{mode}-{rep}-{i:03d}" for i in range(cfg.topics)]
    create_topics(admin, names, cfg.partitions)
    time.sleep(1.0)  # the creation's work (and the tiered partitions' first task runs) settle
    producer = LatencyProducer(broker.bootstrap, cfg)
    producer.run_until(time.monotonic() + 0.5)  # connections warm
    producer.samples.clear()

    b_start, b_end = producer.run_until(time.monotonic() + cfg.baseline_s)
    baseline = Phase([(d - s) * 1e3 for s, d in producer.samples])
    producer.samples.clear()

    window: dict[str, float] = {}
    done = threading.Event()
    failure: list[BaseException] = []

    def deleter() -> None:
        try:
            time.sleep(0.5)
            window["start"] = time.monotonic()
            delete_topics(admin, names, mode)
            window["end"] = time.monotonic()
            time.sleep(cfg.tail_s)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failure.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=deleter, name="deleter")
    thread.start()
    producer.run_until(done)
    thread.join()
    if failure:
        raise failure[0]
    start, end = window["start"], window["end"]
    during = Phase([(d - s) * 1e3 for s, d in producer.samples if s <= end and d >= start])
    left = sorted(set(names) & set(admin.list_topics(timeout=10).topics))
    if left:
        raise RuntimeError(f"topics still listed after their deletion: {left[:5]}")
    return {"mode": mode, "rep": rep, "baseline": baseline.stats(), "during": during.stats(),
            "deletion_s": end - start, "_baseline": baseline.latencies_ms, "_during": during.latencies_ms}


def run(work: Path, cfg: BenchConfig) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    broker = Broker(work, dict(cfg.props))
    reps: list[dict[str, Any]] = []
    try:
        admin = _admin(broker.bootstrap)
        from confluent_kafka.admin import NewTopic

        for fut in admin.create_topics([NewTopic(PRODUCE_TOPIC, 1, 1)], operation_timeout=30).values():
            fut.result(timeout=WAIT_S)
        for mode in cfg.modes:
            for rep in range(cfg.reps):
                r = run_rep(broker, cfg, mode, rep)
                print(f"  {mode} rep {rep}: deletion {r['deletion_s'] * 1e3:.0f} ms, "
                      f"baseline p99 {r['baseline']['p99_ms']:.1f} ms max {r['baseline']['max_ms']:.1f} ms, "
                      f"during p99 {r['during'].get('p99_ms', 0):.1f} ms max {r['during'].get('max_ms', 0):.1f} ms "
                      f"(n={r['during']['n']})", flush=True)
                reps.append(r)
        problems = broker.problems()
    finally:
        broker.stop()
    summary = {}
    for mode in cfg.modes:
        mine = [r for r in reps if r["mode"] == mode]
        baseline = Phase([x for r in mine for x in r["_baseline"]]).stats()
        during = Phase([x for r in mine for x in r["_during"]]).stats()
        summary[mode] = {"baseline": baseline, "during": during,
                         "deletion_s": [r["deletion_s"] for r in mine],
                         "ratio_p50": during["p50_ms"] / baseline["p50_ms"],
                         "ratio_p99": during["p99_ms"] / baseline["p99_ms"],
                         "ratio_max": during["max_ms"] / baseline["max_ms"]}
    for r in reps:
        del r["_baseline"], r["_during"]
    return {"config": asdict(cfg), "environment": environment(), "summary": summary, "reps": reps,
            "broker_errors": len(problems), "broker_error_lines": problems[:20]}


def format_report(report: dict[str, Any]) -> str:
    cfg = report["config"]
    lines = [f"produce latency (acks=all, {cfg['record_bytes']} B records, {cfg['rate']}/s) while another client "
             f"deletes {cfg['topics']} topics x {cfg['partitions']} partitions; {cfg['reps']} reps pooled",
             f"{'mode':<8} {'phase':<10} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   deletion s (per rep)"]
    for mode, s in report["summary"].items():
        dels = ", ".join(f"{d:.2f}" for d in s["deletion_s"])
        for phase in ("baseline", "during"):
            st = s[phase]
            lines.append(f"{mode:<8} {phase:<10} {st['n']:>6} {st['p50_ms']:>8.1f} {st['p99_ms']:>8.1f} "
                         f"{st['max_ms']:>8.1f}   {dels if phase == 'during' else ''}")
        lines.append(f"{mode:<8} {'ratio':<10} {'':>6} {s['ratio_p50']:>8.2f} {s['ratio_p99']:>8.2f} "
                     f"{s['ratio_max']:>8.2f}")
    lines.append(f"broker ERROR/Traceback lines: {report['broker_errors']}")
    lines += [f"  {line}" for line in report["broker_error_lines"][:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 rep, 3 s baseline")
    parser.add_argument("--reps", type=int)
    parser.add_argument("--topics", type=int)
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--rate", type=int, help="messages per second")
    parser.add_argument("--baseline-s", type=float)
    parser.add_argument("--mode", choices=["batch", "each", "both"], default="both")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker property")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "delete-topics")
    parser.add_argument("--json", type=Path, default=OUT / "delete_topics_bench.json")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the broker's log)")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides: dict[str, Any] = {k: v for k, v in (("reps", args.reps), ("topics", args.topics),
                                                    ("partitions", args.partitions), ("rate", args.rate),
                                                    ("baseline_s", args.baseline_s)) if v is not None}
    if args.mode != "both":
        overrides["modes"] = (args.mode,)
    overrides["props"] = tuple(tuple(kv.split("=", 1)) for kv in args.set)
    cfg = BenchConfig(**{**asdict(cfg), **overrides})
    started = time.perf_counter()
    report = run(args.dir, cfg)
    report["mode"] = "quick" if args.quick else "default"
    report["wall_s"] = time.perf_counter() - started
    print()
    print(format_report(report))
    print(f"wall time {report['wall_s']:.1f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"results: {args.json}")
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
