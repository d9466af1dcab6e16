"""``make bench``: local-log throughput against plain file I/O, and broker produce/consume
throughput with confluent-kafka against raw asyncio sockets.

    .venv/bin/python bench/run.py [--quick] [--only log|broker|tiered|columnar|spark|delete|cluster|rejoin|txn|cleaner|
                                                  security|diskless|tiered-compaction|rlmm|object-format|group|share]
                                  [--reps N]
                                  [--total-mib N] [--segment-mib N] [--broker-mib N] [--dir PATH] [--profile-broker]

Prints tables (MB/s = 10^6 bytes/s) and writes bench/out/log_bench.json and
bench/out/broker_bench.json. Always exits 0 when the benchmarks ran: a missed target is reported
as FAIL in the table, not as an error. ``--profile-broker`` runs only a cProfile pass of the
broker (bench/out/broker_profile.pstats) and prints its hot spots; with ``--only object-format`` it
runs object_format_bench.py's ``--profile`` instead (py-spy on the v1 and v2 brokers' uploads and
remote consumes, bench/out/object_format_profile/).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import broker_bench
import cleaner_bench
import cluster_bench
import columnar_bench
import delete_topics_bench
import diskless_bench
import group_bench
import log_bench
import object_format_bench
import rejoin_bench
import report as bench_report
import rlmm_restart_bench
import security_bench
import segment_tail_bench
import share_bench
import spark_bench
import tiered_bench
import tiered_compaction_bench
import txn_bench

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

NOTES = """\
notes: no fsync in any timed region (both sides write into the page cache; the log's roll work,
       which fsyncs its small index and snapshot files, is timed as part of the log); os.sync()
       runs untimed before each run. Reads are served from the page cache. Ratio = median of the
       subject / median of its baseline; (pairs) = min-max of the per-repetition ratios."""


BROKER_NOTES = """\
notes: every server (broker, baselines) is its own process on loopback; MB/s counts record payload
       bytes (the broker also moves ~70 B of batch/record framing per 1 KiB record). The consume
       subject reads the topic its rep's produce run wrote, from the page cache. CPU s = median
       CPU seconds per run of the server process and of this process (the client: for the broker
       rows confluent-kafka, librdkafka's threads included); with few cores the client's share
       bounds what any server can reach."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB per run (log: 32 MiB segments), 3 reps")
    parser.add_argument("--reps", type=int, help="repetitions of each measurement (>= 3 recommended)")
    parser.add_argument("--total-mib", type=int, help="bytes appended / read per run, in MiB")
    parser.add_argument("--segment-mib", type=int, help="segment.bytes, in MiB")
    parser.add_argument("--records-per-batch", type=int,
                        help="1 KiB records per batch (default 64: ~64 KiB batches; at most ~1000 fit "
                             "max.message.bytes)")
    parser.add_argument("--dir", type=Path, default=OUT / "work",
                        help="scratch directory for the logs and plain files (deleted afterwards)")
    parser.add_argument("--json", type=Path, default=OUT / "log_bench.json", help="where to write results")
    parser.add_argument("--only", choices=["log", "broker", "tiered", "columnar", "spark", "delete", "cluster",
                                           "rejoin", "txn", "cleaner", "security", "diskless",
                                           "tiered-compaction", "rlmm", "object-format", "group", "share",
                                           "segment-tail"],
                        help="run one benchmark (default: all)")
    parser.add_argument("--broker-mib", type=int, help="payload MiB produced and consumed per broker run")
    parser.add_argument("--broker-json", type=Path, default=OUT / "broker_bench.json",
                        help="where to write the broker results")
    parser.add_argument("--profile-broker", action="store_true",
                        help="profile the broker's produce and fetch paths (cProfile) instead of benchmarking")
    args = parser.parse_args(argv)
    if args.profile_broker and args.only == "object-format":  # py-spy on the v1 and v2 brokers (remote format)
        return object_format_bench.main(["--profile"])
    if args.profile_broker:
        return profile_broker(args)
    if args.only in (None, "log"):
        run_log_bench(args)
    if args.only in (None, "broker"):
        run_broker_bench(args)
    if args.only in (None, "columnar"):  # Kafka batches to Arrow for Spark, against a per-record decoder
        columnar_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "spark"):  # Spark rows/s of a tiered topic vs one consumer and a synthetic source
        spark_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "delete"):  # produce latency while another client deletes 100 topics
        delete_topics_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "cluster"):  # replication: acks=all RF=3, catch-up, failover, latency
        cluster_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "rejoin"):  # a new replica of a tiered topic copies the local tail only
        rejoin_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "txn"):  # transactional vs idempotent produce, read_committed vs read_uncommitted
        txn_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "cleaner"):  # log cleaner vs plain copy; __consumer_offsets load, cleaner on vs off
        cleaner_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "security"):  # produce/consume MB/s over SSL and SASL_SSL against PLAINTEXT
        security_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "diskless"):  # diskless topics: produce latency, PUTs/GiB, consume vs classic, $/GiB
        diskless_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "tiered-compaction"):  # cleaning a compacted topic's remote tier vs its local log
        tiered_compaction_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "rlmm"):  # remote log metadata at 1M and 10M segments: restart, memory, lookups
        rlmm_restart_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "object-format"):  # remote object format v2 (zstd + AES-GCM) vs v1: upload, consume, bytes
        object_format_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "segment-tail"):  # a batch near the active segment's end: tail vs index + scan
        segment_tail_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "group"):  # KIP-848 vs classic: a 50-member group's rebalance when one more joins
        group_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "share"):  # KIP-932: 4 share consumers on one partition vs one classic consumer
        share_bench.main(["--quick"] if args.quick else [])
    if args.only in (None, "tiered"):  # segment copy, remote vs local consume, restart with 100k segments
        return tiered_bench.main(["--quick"] if args.quick else [])
    return 0


def run_log_bench(args: argparse.Namespace) -> None:
    cfg = log_bench.BenchConfig.quick() if args.quick else log_bench.BenchConfig()
    overrides = {}
    if args.reps is not None:
        overrides["reps"] = args.reps
    if args.total_mib is not None:
        overrides["total_bytes"] = args.total_mib * log_bench.MiB
    if args.segment_mib is not None:
        overrides["segment_bytes"] = args.segment_mib * log_bench.MiB
    if args.records_per_batch is not None:
        overrides["records_per_batch"] = args.records_per_batch
    cfg = dataclasses.replace(cfg, **overrides)

    started = time.perf_counter()
    report = log_bench.run(args.dir, cfg)
    report["mode"] = "quick" if args.quick else "default"
    report["wall_s"] = time.perf_counter() - started

    print()
    print(bench_report.format_table(report["results"]))
    print()
    print(log_bench.format_costs(report["append_costs"]))
    print()
    print(NOTES)
    print(f"batch: {cfg.records_per_batch} x {cfg.record_bytes} B records, uncompressed, "
          f"{report['batch_bytes']} B per batch; wall time {report['wall_s']:.1f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results: {args.json}")


def _broker_config(args: argparse.Namespace) -> broker_bench.BenchConfig:
    cfg = broker_bench.BenchConfig.quick() if args.quick else broker_bench.BenchConfig()
    overrides = {}
    if args.reps is not None:
        overrides["reps"] = args.reps
    if args.broker_mib is not None:
        overrides["total_bytes"] = args.broker_mib * broker_bench.MiB
    return dataclasses.replace(cfg, **overrides)


def run_broker_bench(args: argparse.Namespace) -> None:
    cfg = _broker_config(args)
    started = time.perf_counter()
    report = broker_bench.run(args.dir / "broker", cfg)
    report["mode"] = "quick" if args.quick else "default"
    report["wall_s"] = time.perf_counter() - started
    print()
    print(bench_report.format_table(report["results"]))
    print()
    print(BROKER_NOTES)
    print(f"wall time {report['wall_s']:.1f} s")
    args.broker_json.parent.mkdir(parents=True, exist_ok=True)
    args.broker_json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results: {args.broker_json}")


def profile_broker(args: argparse.Namespace) -> int:
    cfg = _broker_config(args)
    print(broker_bench.profile(args.dir / "broker-profile", cfg, OUT / "broker_profile.pstats"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
