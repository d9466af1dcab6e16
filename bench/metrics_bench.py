"""Strata's hand-written metrics registry against ``prometheus_client``: produce-path cost and scrape cost.

    .venv/bin/python bench/metrics_bench.py [--reps N] [--series N] [--json PATH]

``prometheus_client`` is not a Strata dependency: ``pip install prometheus_client`` into the venv
to run the comparison (without it only Strata's side is measured).

Produce path (``handlers/produce.py``): per partition appended, the handler marks two
``BrokerTopicMetrics`` meters, BytesInPerSec and MessagesInPerSec, each for the topic and for
all topics (``TopicMeter.mark``: a dict lookup and two lock-protected adds). The prometheus_client
equivalent is two labelled Counters plus two unlabelled ones for the all-topics series
(prometheus_client cannot put a labelled and an unlabelled series under one name, which
Kafka's exporter names do): ``labels(topic).inc(n)`` as handlers would write it, and ``inc(n)`` on a
child looked up once (the best case). Times are ns per produce partition, min of ``--reps``.

Scrape: ``--series`` topic series of one labelled meter/counter (Strata renders a meter as two
lines: ``_total`` and ``_OneMinuteRate``; prometheus_client a counter as ``_total`` and, unless
disabled, ``_created``), rendered to text. Gauges with callbacks are timed too, as most of
Strata's cluster and tiered metrics are callbacks read at scrape time.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

from strata.common.metrics import Registry, broker_topic_metrics

try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
except ImportError:  # pragma: no cover - optional
    prometheus_client = None

HERE = Path(__file__).resolve().parent
BTM = "kafka_server_BrokerTopicMetrics"
LOOP = 100_000


def per_op_ns(stmt: str, env: dict[str, Any], reps: int, number: int = LOOP) -> float:
    """Min over ``reps`` of the mean time of one ``stmt``, in ns (timeit's loop, no call overhead)."""
    times = timeit.repeat(stmt, globals=env, repeat=reps, number=number)
    return min(times) / number * 1e9


def per_call_ms(fn: Any, reps: int) -> tuple[float, float]:
    """(min, median) ms of ``fn()``."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return min(out), statistics.median(out)


# -- produce path ----------------------------------------------------------------------------------

def produce_path(reps: int) -> dict[str, float]:
    res: dict[str, float] = {}
    stats = broker_topic_metrics(Registry())
    env: dict[str, Any] = {"bytes_in": stats.BytesInPerSec, "msgs_in": stats.MessagesInPerSec,
                           "meter": Registry().meter("m")}
    res["strata: TopicMeter.mark x2 (topic + all topics, 2 meters)"] = per_op_ns(
        "bytes_in.mark('orders', 1024); msgs_in.mark('orders', 10)", env, reps)
    res["strata: one Meter.mark (unlabelled)"] = per_op_ns("meter.mark(1024)", env, reps)
    if prometheus_client is None:
        return res
    reg = CollectorRegistry()
    b = Counter(f"{BTM}_BytesInPerSec", "Bytes in", ["topic"], registry=reg)
    m = Counter(f"{BTM}_MessagesInPerSec", "Messages in", ["topic"], registry=reg)
    b_all = Counter(f"{BTM}_BytesInPerSec_all", "Bytes in, all topics", registry=reg)
    m_all = Counter(f"{BTM}_MessagesInPerSec_all", "Messages in, all topics", registry=reg)
    env.update(b=b, m=m, b_all=b_all, m_all=m_all, b_child=b.labels("orders"), m_child=m.labels("orders"),
               single=Counter("single", "one", registry=reg))
    res["prometheus_client: labels(topic).inc x2 + all-topics inc x2"] = per_op_ns(
        "b.labels('orders').inc(1024); b_all.inc(1024); m.labels('orders').inc(10); m_all.inc(10)", env, reps)
    res["prometheus_client: cached child inc x2 + all-topics inc x2"] = per_op_ns(
        "b_child.inc(1024); b_all.inc(1024); m_child.inc(10); m_all.inc(10)", env, reps)
    res["prometheus_client: labels(topic=...) kwargs x2 + all-topics x2"] = per_op_ns(
        "b.labels(topic='orders').inc(1024); b_all.inc(1024); m.labels(topic='orders').inc(10); m_all.inc(10)",
        env, reps)
    res["prometheus_client: one Counter.inc (unlabelled)"] = per_op_ns("single.inc(1024)", env, reps)
    return res


# -- exposition ----------------------------------------------------------------------------------------

def exposition(series: int, reps: int) -> dict[str, dict[str, float]]:
    res: dict[str, dict[str, float]] = {}
    topics = [f"topic-{i:04d}" for i in range(series)]

    reg = Registry()
    for i, t in enumerate(topics):
        reg.meter(f"{BTM}_BytesInPerSec", "Bytes in", {"topic": t}).mark(i + 1)
    text = reg.render()
    lo, med = per_call_ms(reg.render, reps)
    res[f"strata Registry.render: {series} meters"] = {"min_ms": lo, "median_ms": med, "lines": _samples(text),
                                                         "bytes": len(text)}

    greg = Registry()
    for i, t in enumerate(topics):
        greg.gauge(f"{BTM}_RemoteLogSizeBytes", "size", {"topic": t}, fn=lambda i=i: i)
    text = greg.render()
    lo, med = per_call_ms(greg.render, reps)
    res[f"strata Registry.render: {series} callback gauges"] = {"min_ms": lo, "median_ms": med,
                                                                  "lines": _samples(text), "bytes": len(text)}
    if prometheus_client is None:
        return res

    for created in (True, False):
        (prometheus_client.enable_created_metrics if created else prometheus_client.disable_created_metrics)()
        preg = CollectorRegistry()
        c = Counter(f"{BTM}_BytesInPerSec", "Bytes in", ["topic"], registry=preg)
        for i, t in enumerate(topics):
            c.labels(t).inc(i + 1)
        out = generate_latest(preg)
        lo, med = per_call_ms(lambda preg=preg: generate_latest(preg), reps)
        label = f"prometheus_client generate_latest: {series} counters" + ("" if created else " (_created off)")
        res[label] = {"min_ms": lo, "median_ms": med, "lines": _samples(out.decode()), "bytes": len(out)}
    prometheus_client.enable_created_metrics()

    preg = CollectorRegistry()
    g = Gauge(f"{BTM}_RemoteLogSizeBytes", "size", ["topic"], registry=preg)
    for i, t in enumerate(topics):
        g.labels(t).set_function(lambda i=i: i)
    out = generate_latest(preg)
    lo, med = per_call_ms(lambda: generate_latest(preg), reps)
    res[f"prometheus_client generate_latest: {series} callback gauges"] = {
        "min_ms": lo, "median_ms": med, "lines": _samples(out.decode()), "bytes": len(out)}
    return res


def _samples(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--json", type=Path, default=HERE / "out" / "metrics_bench.json")
    args = ap.parse_args(argv)
    version = getattr(prometheus_client, "__version__", None) if prometheus_client else None
    if prometheus_client is not None and version is None:
        from importlib.metadata import version as dist_version
        version = dist_version("prometheus_client")
    print(f"python {platform.python_version()}, prometheus_client {version or 'not installed'}")
    produce = produce_path(args.reps)
    print("\nproduce path, ns per produced partition (min of reps):")
    for k, v in produce.items():
        print(f"  {v:8.0f} ns  {k}")
    expo = exposition(args.series, args.reps)
    print(f"\nexposition of {args.series} series, ms per scrape (min / median of reps):")
    for k, v in expo.items():
        print(f"  {v['min_ms']:7.2f} / {v['median_ms']:7.2f} ms  {v['lines']:5d} samples {v['bytes']:7d} B  {k}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"python": platform.python_version(), "prometheus_client": version,
                                     "produce_ns": produce, "exposition": expo}, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
