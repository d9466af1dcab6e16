"""Share-group consume throughput: 4 share consumers on one partition against one classic consumer.

    .venv/bin/python bench/share_bench.py [--quick] [--records N] [--consumers C] [--reps R]

One broker, one partition holding N records of 100 bytes. Baseline: one confluent-kafka Consumer (classic
group, ``assign`` from offset 0) reads all of them. Share: C confluent-kafka ShareConsumers of one share group
(implicit acknowledgement, ``share.auto.offset.reset=earliest``), each in its own process, read them together;
the clock stops when every record was delivered (each process counts what it received). Every run uses a
fresh group. Reported: the time to the first record (joining), MB/s from the first record to the last (10^6
bytes of values per second) and broker CPU-seconds per GiB (the whole run) for both, and the MB/s ratio
(target, issue 30: share / classic >= 1.0).

Writes bench/out/share_bench.json. The broker is stopped by its pid at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, ShareConsumer  # noqa: E402
from confluent_kafka import TopicPartition as CkTopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from tests.broker.harness import BrokerProcess  # noqa: E402

from cluster_bench import cpu_seconds  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
VALUE = 100
TARGET = 1.0
TIMEOUT_S = 600.0
PROPS = {"group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "1000"}


def _classic(bootstrap: str, topic: str, total: int, out: mp.Queue) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"classic-{time.monotonic_ns()}", "log_level": 3,
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    c.assign([CkTopicPartition(topic, 0, 0)])
    n, first, last = 0, 0.0, 0.0
    deadline = time.monotonic() + TIMEOUT_S
    while n < total and time.monotonic() < deadline:
        got = sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
        if got:
            last = time.time()
            first = first or last
            n += got
    c.close()
    out.put((n, first, last))


def _share(bootstrap: str, group: str, topic: str, total: int, seen: mp.Value, out: mp.Queue) -> None:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    c.subscribe([topic])
    n, first, last = 0, 0.0, 0.0
    deadline = time.monotonic() + TIMEOUT_S
    while seen.value < total and time.monotonic() < deadline:
        got = sum(1 for m in c.poll(0.2) if m.error() is None)
        if got:
            last = time.time()
            first = first or last
            n += got
            with seen.get_lock():
                seen.value += got
    c.close()
    out.put((n, first, last))


def _produce(bootstrap: str, topic: str, total: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1048576, "log_level": 3})
    value = b"x" * VALUE
    for _ in range(total):
        while True:
            try:
                p.produce(topic, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def one_run(broker: BrokerProcess, mode: str, topic: str, total: int, consumers: int, rep: int) -> dict:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    cpu0 = cpu_seconds(broker.pid())
    if mode == "classic":
        procs = [ctx.Process(target=_classic, args=(broker.bootstrap, topic, total, out))]
    else:
        group = f"share-{rep}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        res = ConfigResource("GROUP", group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(30)
        seen = ctx.Value("q", 0)
        procs = [ctx.Process(target=_share, args=(broker.bootstrap, group, topic, total, seen, out))
                 for _ in range(consumers)]
    started = time.time()
    for proc in procs:
        proc.start()
    reports = [out.get(timeout=TIMEOUT_S + 60) for _ in procs]
    seconds = time.time() - started
    for proc in procs:
        proc.join(30)
    cpu = cpu_seconds(broker.pid()) - cpu0
    counts = [n for n, _, _ in reports]
    first = min(f for n, f, _ in reports if n)
    last = max(t for n, _, t in reports if n)
    mb = total * VALUE / 1e6
    # throughput from the first record to the last (joining is reported apart: time to the first record)
    return {"mode": mode, "consumers": len(procs), "seconds": seconds, "first_record_s": first - started,
            "streaming_s": last - first, "delivered": sum(counts), "per_consumer": counts,
            "mb_s": mb / max(last - first, 1e-3), "broker_cpu_s": cpu, "cpu_s_per_gib": cpu / (total * VALUE / 2**30)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k records, 1 repetition")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    total, reps = (200_000, 1) if args.quick else (args.records, args.reps)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="share-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", PROPS).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
            admin.create_topics([NewTopic("sb", 1, 1)])["sb"].result(30)
            _produce(broker.bootstrap, "sb", total)
            for rep in range(reps):
                for mode in ("share", "classic"):
                    runs.append(one_run(broker, mode, "sb", total, args.consumers, rep))
                    r = runs[-1]
                    print(f"  rep {rep} {mode:<7} x{r['consumers']} first record {r['first_record_s']:5.2f} s, "
                          f"{r['streaming_s']:6.2f} s streaming {r['mb_s']:7.1f} MB/s "
                          f"broker {r['cpu_s_per_gib']:6.1f} CPU-s/GiB delivered {r['delivered']} "
                          f"{r['per_consumer']}", flush=True)
        finally:
            broker.stop()
    mb_s = {m: statistics.median(r["mb_s"] for r in runs if r["mode"] == m) for m in ("share", "classic")}
    cpu = {m: statistics.median(r["cpu_s_per_gib"] for r in runs if r["mode"] == m) for m in ("share", "classic")}
    ratio = mb_s["share"] / mb_s["classic"]
    result = {"records": total, "value_bytes": VALUE, "consumers": args.consumers, "runs": runs,
              "median_mb_s": mb_s, "median_cpu_s_per_gib": cpu, "ratio": ratio, "target": TARGET,
              "pass": ratio >= TARGET}
    print(f"share groups, {total} records of {VALUE} B on one partition: {args.consumers} share consumers "
          f"{mb_s['share']:.1f} MB/s, one classic consumer {mb_s['classic']:.1f} MB/s, ratio {ratio:.2f} "
          f"(target >= {TARGET}) {'PASS' if ratio >= TARGET else 'FAIL'}; broker CPU-s/GiB "
          f"{cpu['share']:.1f} / {cpu['classic']:.1f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "share_bench.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
