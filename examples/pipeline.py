"""The Strata pipeline end to end: produce, watch it tier, aggregate it all with Spark (``make demo``).

1. starts a broker on the embedded defaults (``config/server.properties``: tiering on, the
   ``local`` remote store) with its data under ``data/demo-pipeline/``, on a free port;
2. produces a sample click stream (1M JSON events by default) into a topic that keeps almost
   nothing on local disk (``local.retention.bytes``), with a progress bar;
3. shows the tier state with ``strata tiers`` once the rolled segments are uploaded;
4. runs a PySpark job over the whole topic with ``format("strata")``: remote segments are read by
   the executors straight from the remote store, the tail that is not uploaded yet from the
   broker; it counts events and bytes per page and writes the result to Parquet.

    .venv/bin/python examples/pipeline.py [--records N] [--bootstrap HOST:PORT] [--out DIR]

With ``--bootstrap`` it uses a running broker (``make run``) instead of starting one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "clicks"
PAGES = ("/", "/search", "/product", "/cart", "/checkout", "/help", "/account", "/blog")
READY = re.compile(r"strata broker ready on ([\d.]+):(\d+)")


def start_broker(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``strata serve`` on the embedded defaults, in its own data directory, on a free port."""
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    log_path = data / "broker.log"
    args = [sys.executable, "-m", "strata", "serve", "--config", str(ROOT / "config/server.properties"),
            "--set", f"log.dirs={data / 'broker'}", "--set", f"rsm.config.dir={data / 'remote-storage'}",
            "--set", "listeners=PLAINTEXT://127.0.0.1:0", "--set", "metrics.port=0",
            "--set", "remote.log.manager.task.interval.ms=1000", "--set", "log.retention.check.interval.ms=1000",
            "--set", "log.initial.task.delay.ms=1000"]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = READY.search(log_path.read_text(errors="replace"))
        if match:
            return proc, f"{match.group(1)}:{match.group(2)}"
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the broker did not start; see {log_path}")


def stop_broker(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def progress(done: int, total: int, started: float, what: str) -> None:
    width = 30
    filled = width * done // total
    rate = done / max(time.monotonic() - started, 1e-9)
    sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {100 * done // total:3d}% "
                     f"{done:,}/{total:,} {what} ({rate:,.0f}/s)")
    sys.stderr.flush()


def produce(bootstrap: str, records: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"remote.storage.enable": "true", "segment.bytes": str(1 << 20), "local.retention.bytes": "1",
              "retention.ms": "-1"}
    futures = admin.create_topics([NewTopic(TOPIC, 3, 1, config=config)], operation_timeout=10)
    try:
        futures[TOPIC].result(timeout=30)
    except Exception as e:  # noqa: BLE001 - an existing topic is fine when reusing a broker
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "compression.type": "lz4", "linger.ms": 20, "batch.size": 1 << 20})
    failed: list[object] = []
    started = time.monotonic()
    print(f"producing {records:,} click events to '{TOPIC}' (3 partitions, 1 MiB segments, local.retention.bytes=1)")
    for i in range(records):
        event = {"user": f"u{(i * 7919) % 50_000}", "page": PAGES[(i * 31) % len(PAGES)],
                 "ms": 100 + (i * 13) % 900, "ts": 1_700_000_000_000 + i}
        while True:
            try:
                producer.produce(TOPIC, key=event["user"].encode(), value=json.dumps(event).encode(),
                                 on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20_000 == 0:
            producer.poll(0)
            progress(i, records, started, "events")
    producer.flush(60)
    progress(records, records, started, "events")
    sys.stderr.write("\n")
    if failed:
        raise SystemExit(f"{len(failed)} events were not acknowledged: {failed[:3]}")


def wait_tiered(bootstrap: str, records: int) -> None:
    """Until copying is idle: the highest tiered offset (ListOffsets -5) stops moving."""
    sys.path.insert(0, str(ROOT / "src"))
    from strata.client.cluster import KafkaCluster

    print("waiting for the rolled segments to be copied to the remote store ...")
    last, deadline = None, time.monotonic() + 120
    with KafkaCluster(bootstrap) as cluster:
        while time.monotonic() < deadline:
            tiered = cluster.list_offsets({(TOPIC, p): -5 for p in range(3)})
            if tiered == last:  # two polls 2 s apart (two copy rounds) without progress: caught up
                return
            last = tiered
            time.sleep(2)


def show_tiers(bootstrap: str) -> None:
    command = [sys.executable, "-m", "strata", "tiers", "--bootstrap", bootstrap, "--topic", TOPIC]
    print(f"\n$ strata tiers --bootstrap {bootstrap} --topic {TOPIC}")
    subprocess.run(command, check=False, timeout=60)


def spark_job(bootstrap: str, out: Path) -> None:
    from pyspark.sql import functions as F

    import strata.spark

    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}
    print(f"\nplanning the read: {strata.spark.explain(options)}")
    spark = strata.spark.local_session("strata-demo")
    try:
        started = time.monotonic()
        clicks = spark.read.format("strata").options(**options).load()
        schema = "user string, page string, ms int, ts long"
        per_page = (clicks.select(F.from_json(F.col("value").cast("string"), schema).alias("e"),
                                  F.length("value").alias("bytes"))
                    .groupBy("e.page").agg(F.count("*").alias("events"), F.sum("bytes").alias("bytes"),
                                           F.round(F.avg("e.ms"), 1).alias("avg_ms"))
                    .orderBy(F.desc("events")))
        per_page.write.mode("overwrite").parquet(str(out))
        elapsed = time.monotonic() - started
        result = spark.read.parquet(str(out)).orderBy(F.desc("events"))
        total = result.agg(F.sum("events")).collect()[0][0]
        print(f"aggregated {total:,} events across both tiers in {elapsed:.1f} s -> {out}")
        result.show(truncate=False)
    finally:
        spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", help="use this running broker instead of starting one")
    parser.add_argument("--out", type=Path, default=ROOT / "data/demo-pipeline/clicks-per-page.parquet")
    args = parser.parse_args()
    proc = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        proc, bootstrap = start_broker(ROOT / "data/demo-pipeline")
        print(f"broker started on {bootstrap} (pid {proc.pid}, data in data/demo-pipeline/)")
    try:
        produce(bootstrap, args.records)
        wait_tiered(bootstrap, args.records)
        show_tiers(bootstrap)
        spark_job(bootstrap, args.out)
    finally:
        if proc is not None:
            stop_broker(proc)
            print(f"broker stopped (pid {proc.pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
