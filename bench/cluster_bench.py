"""Cluster benchmarks (issue 13): a local ZooKeeper and three broker processes on this machine.

    .venv/bin/python bench/cluster_bench.py [--quick] [--mib N] [--kills N]

1. produce: acks=all to an RF=3 topic (min.insync.replicas=2) against acks=1 to an RF=1 topic,
   same producer settings (idempotence off: librdkafka refuses it with acks=1), same run; MB/s and
   broker CPU-seconds per GiB (all brokers summed), and the producer's own CPU-seconds per GiB. Beside
   them the same acks=all run with an idempotent producer: librdkafka's cap of 5 in flight per partition
   counts messages, not requests (``RD_KAFKA_IDEMP_MAX_INFLIGHT - rktp_msgs_inflight``), so one request per
   partition is in flight, and meanwhile its broker thread polls without sleeping
   (``rd_kafka_toppar_producer_serve``: a wakeup "now", 1 us while flushing), so on this 2-core machine
   the client's spin takes CPU from the brokers; its producer CPU figure shows how much.
2. catch-up: a follower stopped, N MiB produced, the follower started: MB/s until it is back in
   the ISR, against one consumer reading the same N MiB from the leader.
3. failover: ``kill -9`` of a partition's leader until the first acks=all write acknowledged by its
   successor; median and p99 over --kills kills (target: under zookeeper.session.timeout.ms + 1 s).
4. latency: produce p99 of acks=all RF=3 (idempotent) at half of the idempotent maximum rate measured
   in 1, against acks=1 RF=1 at the same rate.

Writes bench/out/cluster_bench.json. Every process is stopped by its pid at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.harness import Cluster, wait_until  # noqa: E402

from strata.tools.zookeeper import ZooKeeperServer  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
SESSION_MS = 2000
RECORD = 1024


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def brokers_cpu(cluster: Cluster) -> float:
    return sum(cpu_seconds(b.pid()) for b in cluster.brokers.values())


def process_cpu() -> float:
    """CPU-seconds of this process so far, every thread (the producer's librdkafka threads included)."""
    t = os.times()
    return t.user + t.system


def produce_bulk(bootstrap: str, topic: str, nbytes: int, acks: str, idempotent: bool = False) -> float:
    """Seconds to produce ``nbytes`` of 1 KiB records and have them all acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 10, "batch.size": 512 * 1024,
                  "enable.idempotence": idempotent, "queue.buffering.max.kbytes": 512 * 1024,
                  "compression.type": "none"})
    value = os.urandom(RECORD)
    n = nbytes // RECORD
    errors: list[object] = []
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value=value, on_delivery=lambda e, _m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.005)
    assert p.flush(300) == 0 and not errors, errors[:3]
    return time.perf_counter() - started


def consume_bulk(bootstrap: str, topic: str, partitions: int, nbytes: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 8 << 20})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    while got < nbytes:
        for m in c.consume(10_000, timeout=1.0):
            if not m.error():
                got += len(m.value())
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(m.error())
    elapsed = time.perf_counter() - started
    c.close()
    return elapsed


def bench_produce(cluster: Cluster, mib: int) -> dict:
    admin = cluster.admin()
    admin.create_topics([NewTopic("b-rf3", 3, 3, config={"min.insync.replicas": "2"}),
                         NewTopic("b-rf1", 3, 1)])["b-rf3"].result(30)
    cluster.wait_full_isr("b-rf3")
    cluster.wait_full_isr("b-rf1")
    out = {}
    runs = (("acks=1 RF=1", "b-rf1", "1", False), ("acks=all RF=3", "b-rf3", "all", False),
            ("acks=all RF=3 idempotent", "b-rf3", "all", True))
    for name, topic, acks, idempotent in runs:
        cpu0, own0 = brokers_cpu(cluster), process_cpu()
        seconds = produce_bulk(cluster.bootstrap, topic, mib << 20, acks, idempotent)
        cpu, own = brokers_cpu(cluster) - cpu0, process_cpu() - own0
        out[name] = {"MB/s": (mib << 20) / seconds / 1e6, "broker_cpu_s_per_GiB": cpu / (mib / 1024),
                     "producer_cpu_s_per_GiB": own / (mib / 1024), "seconds": seconds}
    out["ratio"] = out["acks=all RF=3"]["MB/s"] / out["acks=1 RF=1"]["MB/s"]
    out["ratio_idempotent"] = out["acks=all RF=3 idempotent"]["MB/s"] / out["acks=1 RF=1"]["MB/s"]
    return out


def bench_catch_up(cluster: Cluster, mib: int) -> dict:
    admin = cluster.admin()
    admin.create_topics([NewTopic("b-catch", 1, 3, config={"min.insync.replicas": "1"})])["b-catch"].result(30)
    cluster.wait_full_isr("b-catch")
    leader = cluster.leader_of("b-catch", 0)
    follower = next(b for b in cluster.brokers if b != leader)
    cluster.brokers[follower].stop()
    produce_bulk(cluster.bootstrap, "b-catch", mib << 20, "1")
    started = time.perf_counter()
    cluster.brokers[follower].start()
    wait_until(lambda: follower in cluster.metadata("b-catch").partitions[0].isrs, 600, "the follower in the ISR",
               interval_s=0.05)
    catch_up = time.perf_counter() - started
    consume = consume_bulk(cluster.bootstrap, "b-catch", 1, mib << 20)
    return {"follower MB/s (start to ISR)": (mib << 20) / catch_up / 1e6,
            "consumer MB/s": (mib << 20) / consume / 1e6, "ratio": consume / catch_up}


def bench_failover(cluster: Cluster, kills: int) -> dict:
    admin = cluster.admin()
    admin.create_topics([NewTopic("b-fail", 1, 3, config={"min.insync.replicas": "2"})])["b-fail"].result(30)
    cluster.wait_full_isr("b-fail")
    times = []
    for _ in range(kills):
        leader = cluster.leader_of("b-fail", 0)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 0, "retry.backoff.ms": 20, "retry.backoff.max.ms": 50,
                      "topic.metadata.refresh.interval.ms": 100})
        p.produce("b-fail", value=b"warm")
        p.flush(30)
        acked = threading.Event()
        stamp: list[float] = []

        def done(err: object, _msg: object, acked: threading.Event = acked, stamp: list[float] = stamp) -> None:
            if err is None and not acked.is_set():
                stamp.append(time.perf_counter())
                acked.set()

        killed_at = time.perf_counter()
        cluster.brokers[leader].kill()
        p.produce("b-fail", value=b"after", on_delivery=done)
        while not acked.is_set():
            p.poll(0.01)
            assert time.perf_counter() - killed_at < 60, "no acknowledged write within 60 s of the kill"
        times.append(stamp[0] - killed_at)
        p.flush(30)
        cluster.brokers[leader].start()
        cluster.wait_full_isr("b-fail")
    times.sort()
    return {"kills": kills, "median_s": statistics.median(times),
            "p99_s": times[min(len(times) - 1, int(0.99 * len(times)))], "max_s": times[-1],
            "target_s": SESSION_MS / 1000 + 1}


def bench_latency(cluster: Cluster, rate: float, seconds: float, topic: str = "b-rf3", acks: str = "all") -> dict:
    """Per-record latency of acks=all RF=3 (or ``acks`` to ``topic``) at ``rate`` records/s (1 KiB)."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                  "linger.ms": 1})
    lat: list[float] = []
    value = os.urandom(RECORD)
    for partition in range(3):  # warm up: producer id, metadata and a connection to every leader, untimed
        p.produce(topic, value=value, partition=partition)
    p.flush(30)
    interval = 1.0 / rate
    deadline = time.perf_counter() + seconds
    nxt = time.perf_counter()
    # The client's own garbage collections (its list of a million latencies, a closure per record) paused
    # this loop for 25 ms and more and were counted as the brokers' latency: off while timing.
    gc.disable()
    while time.perf_counter() < deadline:
        sent = time.perf_counter()
        p.produce(topic, value=value, on_delivery=lambda e, _m, s=sent: e is None and lat.append(
            time.perf_counter() - s))
        nxt += interval
        p.poll(max(0.0, nxt - time.perf_counter()))
    p.flush(60)
    gc.enable()
    lat.sort()
    return {"rate_per_s": rate, "records": len(lat), "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[int(0.99 * len(lat))] * 1000, "max_ms": lat[-1] * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every benchmark")
    parser.add_argument("--mib", type=int, help="MiB per produce run (default 256, quick 32)")
    parser.add_argument("--catch-up-mib", type=int, help="MiB the follower is behind (default 256, quick 32)")
    parser.add_argument("--kills", type=int, help="failover kills (default 20, quick 3)")
    args = parser.parse_args(argv)
    mib = args.mib or (32 if args.quick else 256)
    catch_mib = args.catch_up_mib or (32 if args.quick else 256)
    kills = args.kills or (3 if args.quick else 20)
    results: dict = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="strata-cluster-bench-") as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk").start().wait_ready()
        cluster = Cluster(zk.connect + "/bench", Path(tmp), 3, {
            "zookeeper.session.timeout.ms": str(SESSION_MS), "log.segment.bytes": str(64 << 20),
            "replica.fetch.max.bytes": str(8 << 20), "replica.fetch.response.max.bytes": str(32 << 20)})
        try:
            cluster.start()
            results["produce"] = bench_produce(cluster, mib)
            print("produce:", json.dumps(results["produce"], indent=1))
            max_rate = (mib << 20) / RECORD / results["produce"]["acks=all RF=3 idempotent"]["seconds"]
            seconds = 10 if args.quick else 30
            results["latency_at_half_max"] = bench_latency(cluster, max_rate / 2, seconds)
            results["latency_at_half_max_baseline_acks1_rf1"] = bench_latency(cluster, max_rate / 2, seconds,
                                                                              "b-rf1", "1")
            print("latency (acks=all RF=3, then acks=1 RF=1 at the same rate):",
                  json.dumps([results["latency_at_half_max"], results["latency_at_half_max_baseline_acks1_rf1"]],
                             indent=1))
            results["catch_up"] = bench_catch_up(cluster, catch_mib)
            print("catch-up:", json.dumps(results["catch_up"], indent=1))
            results["failover"] = bench_failover(cluster, kills)
            print("failover:", json.dumps(results["failover"], indent=1))
        finally:
            cluster.stop()
            zk.stop()
    OUT.mkdir(exist_ok=True)
    (OUT / "cluster_bench.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
