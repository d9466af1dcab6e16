"""Diskless topics (KIP-1150, issue 27): produce latency, PUTs per GiB, consume throughput, cost per GiB.

    .venv/bin/python bench/diskless_bench.py [--quick] [--s3] [--latency-s S] [--phase-s S] [--producers N]
                                             [--linger-ms N] [--consume-mib N] [--consume-reps N]
                                             [--set KEY=VALUE ...] [--dir PATH] [--json PATH]
    .venv/bin/python bench/run.py --only diskless [--quick]      (the local store only)

One broker process per backend (bench/tiered_bench.py's ``Broker``: ``python -m strata serve`` on
127.0.0.1, stopped by its pid) with ``remote.log.storage.system.enable=true``; the remote store is the
local-directory store (``local``) and, with ``--s3``, also S3 on a SeaweedFS server this benchmark
starts on 127.0.0.1 (bench/tiered_bench.py's ``seaweedfs``; skipped, with the reason, when it cannot
start). PUTs (retries included) and GETs are the broker's own diskless metrics
(``strata_diskless_Writer_PutRequestsPerSec_total``, ``strata_diskless_Reader_GetRequestsPerSec_total``
on its /metrics), read before and after each phase. Every other broker setting keeps its default
(``diskless.produce.commit.interval.ms`` 250, ``.buffer.max.bytes`` 8 MiB); ``--set`` overrides any
broker key.

The clients: ``--producers`` (8) confluent-kafka producers, producer i writing 1 KiB records to
partition i of an 8-partition topic, ``acks=all``, ``linger.ms=5``, ``batch.size`` 4 MiB (the topics'
``max.message.bytes`` is 4 MiB, on the classic topic too), ``max.in.flight.requests.per.connection=5``.
Five in flight: the broker pipelines a connection's diskless produce requests (each joins the WAL object
being filled, answers leave in order), so a producer gets a request into every commit cycle instead of
waiting for its previous answer. Several producers stand for several client connections: their requests
share the broker's WAL objects.

1. **Produce latency** (target: delivery p99 <= PUT p99 + commit interval + 50 ms): the producers pace
   a steady 10 MB/s for ``--latency-s`` seconds (after an untimed warm-up) to a diskless topic; each
   record's delivery latency is ``produce()`` to its delivery callback. The store's PUT latency is
   measured beforehand in this process by timing ``put_object`` of 2.5 MB objects (10 MB/s x 250 ms)
   through the broker's own store class (``LocalTieredStorage`` / ``S3RemoteStorageManager``,
   ``configure()``d as the broker's), in the same file system / bucket. Also shown against the same
   bound (info): the broker's own produce latency (``ProduceLatencyMs``: a request's arrival to its
   commit, over its last 1024 produce requests, i.e. this phase and its warm-up), the ProduceRequest
   round trip seen by librdkafka (its ``rtt`` statistics), and the broker's in-situ PUT and commit
   latencies (``UploadLatencyMs``, ``CommitLatencyMs``). A record produced while its connection's
   request is in flight waits for that answer, and librdkafka builds the connection's next request
   before the answer comes (its ``queue.buffering.backpressure.threshold`` cannot be 0), so a steady
   producer's records take two to three round trips, not one.
2. **PUT requests per GiB** at 1, 10 and 50 MB/s offered (target at 50 MB/s: <= 256): the WAL objects
   under ``diskless/wal/`` are listed (through the same store class) before and after each phase, and
   the broker's PUT requests are counted. The 10 MB/s row is the latency phase. GiB = record payload bytes;
   the achieved rate is shown (on a small machine the client may not reach 50 MB/s).
3. **Consume** (target: diskless MB/s / classic MB/s >= 0.8): the same number of records is produced
   (unpaced; info rows compare that too) to a diskless and a classic topic on the same broker, then
   one consumer reads each from offset 0 (all partitions, fetch.max.bytes 50 MiB,
   max.partition.fetch.bytes 8 MiB). An untimed first pass of each comes first (it loads the diskless
   objects into the broker's cache: its GETs are counted and its time is shown as an info row), then
   ``--consume-reps`` timed passes alternate. Broker CPU seconds per GiB are shown for every row.
4. **Cost per GiB** at S3 list prices (PUT $0.005/1000, GET $0.0004/1000, storage ignored): PUTs/GiB as
   measured; GETs/GiB = (the GETs per object measured on the first consume pass, on the uploading broker,
   which serves from the objects it cached when uploading + one GET per object for the serving broker of
   each of the 2 other availability zones, which hold no copy) x the objects per GiB. Against a classic RF=3
   topic: 2 replica copies cross zones ($0.02/GiB each) and the producer reaches a leader in another
   zone 2/3 of the time (+$0.0133/GiB); consumers are assumed to fetch from a follower in their zone.

MB/s = 10^6 bytes/s of record payload; GiB = 2^30 bytes of record payload.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import report as bench_report  # noqa: E402
from report import MiB, Result, run_and_save, summarize  # noqa: E402
from tiered_bench import (  # noqa: E402
    Broker,
    _own_cpu_s,
    _proc_cpu_s,
    s3_rsm_props,
    seaweedfs,
)
from tiered_bench import consume_all as tiered_consume_all  # noqa: E402

GiB = 1024 * MiB
WAL_PREFIX = "diskless/wal/"
TOPIC_MAX_MESSAGE_BYTES = 4 * MiB
PRODUCER_BATCH_BYTES = 4 * MiB
PRODUCER_REQUEST_BYTES = 16 * MiB
DEFAULT_COMMIT_INTERVAL_MS = 250
WAIT_S = 120.0
STATS_INTERVAL_MS = 5000
# S3 list prices (us-east-1 standard) and the cross-AZ transfer price of the model
PUT_USD = 0.005 / 1000
GET_USD = 0.0004 / 1000
CROSS_AZ_USD_PER_GIB = 0.02
ZONES = 3


@dataclass(frozen=True)
class BenchConfig:
    record_bytes: int = 1024
    producers: int = 8
    linger_ms: int = 5
    latency_rate_mb: float = 10.0
    latency_s: float = 15.0
    warmup_s: float = 2.0
    rates_mb: tuple[float, ...] = (1.0, 10.0, 50.0)
    phase_s: float = 12.0
    put_probe_objects: int = 40
    put_probe_bytes: int = 2_500_000  # 10 MB/s x 250 ms
    consume_mib: int = 192  # its WAL objects fit the broker's 256 MiB object cache
    consume_reps: int = 3
    latency_slack_ms: float = 50.0
    puts_per_gib_target: float = 256.0
    consume_target: float = 0.8
    s3: bool = False
    broker_props: tuple[tuple[str, str], ...] = ()

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(latency_s=6.0, phase_s=6.0, put_probe_objects=20, consume_mib=64, consume_reps=2)


def _log(msg: str) -> None:
    print(msg, flush=True)


def _pct(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    k = max(0, min(len(sorted_values) - 1, int(round(pct / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def _latency_stats(values_ms: list[float]) -> dict[str, float]:
    lat = sorted(values_ms)
    if not lat:
        return {"n": 0}
    return {"n": len(lat), "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99), "max_ms": lat[-1],
            "mean_ms": statistics.fmean(lat)}


# -- the store, as the broker sees it ------------------------------------------------------------


def make_store(backend: str, work: Path, server: Any | None, prefix: str, directory: Path | None = None) -> Any:
    """The broker's store class, configured as the broker configures it (same directory / bucket and prefix)."""
    if backend == "local":
        from strata.tiered.storage.local import LocalTieredStorage

        store = LocalTieredStorage()
        store.configure({"dir": str(directory or work / "store"), "broker.id": 0, "events.log.enable": "false"})
        return store
    from strata.tiered.storage.s3 import S3RemoteStorageManager

    store = S3RemoteStorageManager()
    store.configure(s3_rsm_props(server, prefix))
    return store


def broker_props(backend: str, work: Path, server: Any | None, prefix: str, cfg: BenchConfig) -> dict[str, str]:
    props = {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": backend,
             "rlmm.config.remote.log.metadata.topic.num.partitions": "5"}
    if backend == "local":
        props["rsm.config.dir"] = str(work / "store")
    else:
        props.update({f"rsm.config.{k}": v for k, v in s3_rsm_props(server, prefix).items()})
    props.update(dict(cfg.broker_props))
    return props


METRIC = "strata_diskless_{}"
COUNTERS = {"puts": "Writer_PutRequestsPerSec_total", "gets": "Reader_GetRequestsPerSec_total",
            "objects_uploaded": "Writer_WalObjectsUploadedPerSec_total",
            "upload_failures": "Writer_UploadFailuresPerSec_total",
            "commit_failures": "Writer_CommitFailuresPerSec_total"}
LATENCIES = {"produce": "Produce_ProduceLatencyMs", "upload": "Writer_UploadLatencyMs",
             "commit": "Writer_CommitLatencyMs"}


class StoreCounter:
    """WAL objects in the store (listed) and the broker's diskless counters (its /metrics)."""

    def __init__(self, store: Any, broker: Broker) -> None:
        self.store = store
        self.broker = broker

    def snapshot(self) -> dict[str, int]:
        objects = nbytes = 0
        for info in self.store.list_objects(WAL_PREFIX):
            objects += 1
            nbytes += info.size
        metrics = self.broker.metrics()
        return {"objects": objects, "object_bytes": nbytes,
                **{k: int(metrics.get(METRIC.format(name), 0)) for k, name in COUNTERS.items()}}

    def latencies(self) -> dict[str, dict[str, float]]:
        """The broker's latency percentiles (over its last 1024 samples of each)."""
        metrics = self.broker.metrics()
        return {k: {f"p{q}_ms": metrics.get(METRIC.format(f"{name}_p{q}"), float("nan")) for q in (50, 99)}
                for k, name in LATENCIES.items()}

    @staticmethod
    def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        return {k: after[k] - before[k] for k in after}


def measure_puts(store: Any, cfg: BenchConfig) -> dict[str, Any]:
    """Timed ``put_object`` of ``put_probe_bytes`` objects, one after another (each a new key, deleted after)."""
    payload = os.urandom(cfg.put_probe_bytes)
    keys = [f"bench-put-probe/{uuid.uuid4().hex}" for _ in range(cfg.put_probe_objects + 2)]
    for key in keys[:2]:  # warm-up: connections, directories
        store.put_object(key, payload)
    times = []
    for key in keys[2:]:
        started = time.perf_counter()
        store.put_object(key, payload)
        times.append((time.perf_counter() - started) * 1e3)
    store.delete_objects(keys)
    return {"bytes": cfg.put_probe_bytes, **_latency_stats(times)}


# -- clients -------------------------------------------------------------------------------------


class ProducerPool:
    """``n`` confluent-kafka producers, producer i writing partition i (one connection each)."""

    def __init__(self, bootstrap: str, topic: str, n: int, linger_ms: int, *, every_report: bool,
                 stats: bool = False) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.errors: list[Any] = []
        self.stats: list[str] = []
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms, "batch.size": PRODUCER_BATCH_BYTES,
            "message.max.bytes": PRODUCER_REQUEST_BYTES, "max.in.flight.requests.per.connection": 5,
            "compression.type": "none", "enable.idempotence": False, "log_level": 3,
            "queue.buffering.max.kbytes": 1024 * 1024, "queue.buffering.max.messages": 2_000_000,
            "on_delivery": self._delivered}
        if not every_report:
            conf["delivery.report.only.error"] = True
        if stats:
            conf.update({"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": self.stats.append})
        self.producers = [Producer(conf) for _ in range(n)]
        for p in self.producers:
            p.list_topics(topic, timeout=10)

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(err)

    def close(self) -> None:
        """Drop the producers now (they hold this pool through their callbacks: no waiting for the GC)."""
        self.producers = []

    def poll(self) -> None:
        for p in self.producers:
            p.poll(0)

    def flush(self) -> None:
        left = sum(p.flush(WAIT_S) for p in self.producers)
        if left or self.errors:
            raise RuntimeError(f"produce to {self.topic}: {left} records not delivered, errors {self.errors[:3]}")

    def paced(self, rate_mb: float, seconds: float, value: bytes, latencies_ms: list[float] | None) -> dict[str, float]:
        """Send ``rate_mb`` MB/s of records for ``seconds`` (1 ms ticks), then wait for every delivery."""
        n = len(self.producers)
        per_s = rate_mb * 1e6 / len(value)
        topic = self.topic
        sent = 0
        started = time.monotonic()
        deadline = started + seconds
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            due = int((now - started) * per_s)
            while sent < due:
                k = sent % n
                if latencies_ms is None:
                    self.producers[k].produce(topic, value, partition=k)
                else:
                    def done(err: Any, _msg: Any, at: float = now) -> None:
                        if err is None:
                            latencies_ms.append((time.monotonic() - at) * 1e3)
                        else:
                            self.errors.append(err)
                    self.producers[k].produce(topic, value, partition=k, on_delivery=done)
                sent += 1
            self.poll()
            time.sleep(max(0.0, 0.001 - (time.monotonic() - now)))
        sent_s = time.monotonic() - started
        self.flush()
        return {"records": sent, "sent_s": sent_s, "acked_s": time.monotonic() - started}

    def unpaced(self, records: int, value: bytes) -> float:
        n = len(self.producers)
        started = time.monotonic()
        for i in range(records):
            k = i % n
            while True:
                try:
                    self.producers[k].produce(self.topic, value, partition=k)
                    break
                except BufferError:
                    self.producers[k].poll(0.001)
            if i % 2000 == 0:
                self.poll()
        self.flush()
        return time.monotonic() - started

    def request_stats(self) -> dict[str, float]:
        """ProduceRequest round trips from librdkafka's statistics windows (p99: the largest window p99)."""
        rtt_p50, rtt_p99, n = [], [], 0
        for text in self.stats:
            for b in json.loads(text).get("brokers", {}).values():
                if b.get("nodeid", -1) < 0 or not b["rtt"]["cnt"]:
                    continue
                n += b["rtt"]["cnt"]
                rtt_p50.append(b["rtt"]["p50"] / 1e3)
                rtt_p99.append(b["rtt"]["p99"] / 1e3)
        if not n:
            return {"requests": 0}
        return {"requests": n, "windows": len(rtt_p50), "rtt_p50_ms": statistics.median(rtt_p50),
                "rtt_p99_ms": max(rtt_p99)}


def create_topics(bootstrap: str, topics: dict[str, dict[str, str]], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(t, partitions, 1, config=c) for t, c in topics.items()],
                                  operation_timeout=30)
    for fut in futures.values():
        fut.result(timeout=WAIT_S)


def consume_all(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    return tiered_consume_all(bootstrap, topic, records, partitions=partitions, group="diskless-bench")


# -- one backend ---------------------------------------------------------------------------------


def _problems(broker: Broker) -> list[str]:
    lines = broker.log_text().splitlines()
    return [line for line in lines if " ERROR " in line or " WARNING " in line or line.startswith("Traceback")]


def run_backend(work: Path, backend: str, cfg: BenchConfig, server: Any | None) -> dict[str, Any]:
    prefix = f"diskless-bench-{uuid.uuid4().hex[:6]}/"
    work.mkdir(parents=True, exist_ok=True)
    props = broker_props(backend, work, server, prefix, cfg)
    interval_ms = int(props.get("diskless.produce.commit.interval.ms", DEFAULT_COMMIT_INTERVAL_MS))
    store = make_store(backend, work, server, prefix)
    probe_store = make_store(backend, work, server, prefix, directory=work / "put-probe")
    value = os.urandom(cfg.record_bytes)
    n = cfg.producers
    topic_conf = {"max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES)}
    info: dict[str, Any] = {"backend": backend, "commit_interval_ms": interval_ms, "producers": n}
    broker = Broker(work / "broker", props)
    broker.start()
    counter = StoreCounter(store, broker)
    try:
        _log(f"  {backend}: broker pid {broker.pid} up in {broker.start_s:.1f} s")
        info["put_probe"] = measure_puts(probe_store, cfg)
        pp = info["put_probe"]
        _log(f"  {backend}: store PUT of {pp['bytes'] / 1e6:.1f} MB objects: p50 {pp['p50_ms']:.1f} ms, "
             f"p99 {pp['p99_ms']:.1f} ms, max {pp['max_ms']:.1f} ms ({pp['n']} puts)")

        def phase(name: str, rate_mb: float, seconds: float, latency: bool) -> dict[str, Any]:
            topic = f"diskless-{name}"
            create_topics(broker.bootstrap, {topic: {"diskless.enable": "true", **topic_conf}}, n)
            pool = ProducerPool(broker.bootstrap, topic, n, cfg.linger_ms, every_report=latency, stats=latency)
            pool.paced(rate_mb, cfg.warmup_s, value, None)  # untimed: connections, first objects
            pool.stats.clear()
            lat: list[float] | None = [] if latency else None
            before = counter.snapshot()
            cpu0, store_cpu0 = _proc_cpu_s(broker.pid), _server_cpu(server)
            run = pool.paced(rate_mb, seconds, value, lat)
            cpu = _proc_cpu_s(broker.pid) - cpu0
            store_cpu = _server_cpu(server) - store_cpu0
            counts = StoreCounter.delta(before, counter.snapshot())
            nbytes = run["records"] * cfg.record_bytes
            out: dict[str, Any] = {
                "rate_mb": rate_mb, **run, "bytes": nbytes, "sent_mb_s": nbytes / run["sent_s"] / 1e6,
                "acked_mb_s": nbytes / run["acked_s"] / 1e6, "broker_cpu_s": cpu,
                "broker_cpu_s_per_gib": cpu / (nbytes / GiB), **counts,
                "puts_per_gib": counts["puts"] / (nbytes / GiB), "objects_per_gib": counts["objects"] / (nbytes / GiB),
                "avg_object_bytes": counts["object_bytes"] / max(1, counts["objects"])}
            if server is not None:
                out["store_cpu_s"] = store_cpu
            if lat is not None:
                out["latency"] = _latency_stats(lat)
                out["requests"] = pool.request_stats()
                out["broker_latency"] = counter.latencies()
            pool.close()
            _log(f"  {backend} {rate_mb:g} MB/s offered: {out['acked_mb_s']:.1f} MB/s acked over {seconds:g} s, "
                 f"{counts['objects']} WAL objects ({counts['puts']} PUTs) = {out['puts_per_gib']:.0f} PUTs/GiB, "
                 f"broker CPU {out['broker_cpu_s_per_gib']:.1f} s/GiB"
                 + (f"; delivery p50 {out['latency']['p50_ms']:.0f} ms p99 {out['latency']['p99_ms']:.0f} ms"
                    if lat is not None else ""))
            return out

        _log(f"[1/3] {backend}: produce latency at a steady {cfg.latency_rate_mb:g} MB/s")
        info["latency"] = phase("latency", cfg.latency_rate_mb, cfg.latency_s, latency=True)
        _log(f"[2/3] {backend}: PUTs per GiB at {', '.join(f'{r:g}' for r in cfg.rates_mb)} MB/s")
        info["rates"] = {}
        for rate in cfg.rates_mb:
            if rate == cfg.latency_rate_mb:
                info["rates"][rate] = {**info["latency"], "from": "latency phase"}
            else:
                info["rates"][rate] = phase(f"rate-{rate:g}", rate, cfg.phase_s, latency=False)
        _log(f"[3/3] {backend}: consume {cfg.consume_mib} MiB from a diskless and a classic topic")
        info["consume"] = run_consume(broker, counter, cfg, value, topic_conf, server)
        info["problems"] = _problems(broker)
    finally:
        broker.stop()
        store.close()
        probe_store.close()
    return info


def _server_cpu(server: Any | None) -> float:
    return _proc_cpu_s(server.proc.pid) if server is not None else 0.0


def run_consume(broker: Broker, counter: StoreCounter, cfg: BenchConfig, value: bytes,
                topic_conf: dict[str, str], server: Any | None) -> dict[str, Any]:
    n = cfg.producers
    records = cfg.consume_mib * MiB // cfg.record_bytes
    nbytes = records * cfg.record_bytes
    topics = {"classic": "consume-classic", "diskless": "consume-diskless"}
    create_topics(broker.bootstrap, {topics["classic"]: dict(topic_conf),
                                     topics["diskless"]: {"diskless.enable": "true", **topic_conf}}, n)
    prod = {kind: Result(f"produce {kind} (unpaced)", "baseline" if kind == "classic" else "subject",
                         nbytes=nbytes, baseline=None if kind == "classic" else "produce classic (unpaced)",
                         informational=True, note=f"{n} producers, acks=all, 5 requests in flight each")
            for kind in ("classic", "diskless")}
    info: dict[str, Any] = {"records": records}
    for kind in ("classic", "diskless"):
        pool = ProducerPool(broker.bootstrap, topics[kind], n, cfg.linger_ms, every_report=False)
        before = counter.snapshot()
        cpu0, mine0 = _proc_cpu_s(broker.pid), _own_cpu_s()
        prod[kind].samples_s.append(pool.unpaced(records, value))
        prod[kind].server_cpu_s.append(_proc_cpu_s(broker.pid) - cpu0)
        prod[kind].client_cpu_s.append(_own_cpu_s() - mine0)
        pool.close()
        if kind == "diskless":
            info["produce_counts"] = StoreCounter.delta(before, counter.snapshot())
    _log(f"  produced {records} x {cfg.record_bytes} B to each: classic {prod['classic'].rates[0]:.0f} MB/s, "
         f"diskless {prod['diskless'].rates[0]:.0f} MB/s ({info['produce_counts']['objects']} WAL objects)")

    base = Result("consume classic", "baseline", nbytes=nbytes, note="page cache, sendfile")
    subj = Result("consume diskless", "subject", nbytes=nbytes, baseline=base.name,
                  note="broker's object cache (filled by the first pass)")
    cold_base = Result("consume classic, first pass", "baseline", nbytes=nbytes, note="untimed warm-up")
    cold = Result("consume diskless, first pass", "subject", nbytes=nbytes, baseline=cold_base.name,
                  informational=True, note="cache cold: GETs from the store")
    passes: list[dict[str, Any]] = []

    def measured(kind: str, result: Result) -> None:
        before = counter.snapshot()
        cpu0, mine0, store0 = _proc_cpu_s(broker.pid), _own_cpu_s(), _server_cpu(server)
        result.samples_s.append(consume_all(broker.bootstrap, topics[kind], n, records))
        result.server_cpu_s.append(_proc_cpu_s(broker.pid) - cpu0)
        result.client_cpu_s.append(_own_cpu_s() - mine0)
        counts = StoreCounter.delta(before, counter.snapshot())
        passes.append({"name": result.name, "seconds": result.samples_s[-1], "gets": counts["gets"],
                       "broker_cpu_s": result.server_cpu_s[-1],
                       **({"store_cpu_s": _server_cpu(server) - store0} if server is not None else {})})

    measured("classic", cold_base)
    measured("diskless", cold)
    for rep in range(cfg.consume_reps):
        order = [("classic", base), ("diskless", subj)]
        for kind, result in (order if rep % 2 == 0 else order[::-1]):
            measured(kind, result)
        _log(f"  rep {rep + 1}: classic {base.rates[-1]:.0f} MB/s, diskless {subj.rates[-1]:.0f} MB/s")
    objects = info["produce_counts"]["objects"]
    first_gets = next(p["gets"] for p in passes if p["name"] == cold.name)
    info.update(passes=passes, first_pass_gets=first_gets,
                gets_per_object=first_gets / objects if objects else 0.0,
                results=summarize([base, subj, cold_base, cold, prod["classic"], prod["diskless"]],
                                  cfg.consume_target))
    return info


# -- the report ----------------------------------------------------------------------------------


def cost_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    classic = 2 * CROSS_AZ_USD_PER_GIB + (ZONES - 1) / ZONES * CROSS_AZ_USD_PER_GIB
    gets_per_object = info["consume"]["gets_per_object"]
    rows = []
    for rate, r in info["rates"].items():
        gets = (gets_per_object + (ZONES - 1)) * r["objects_per_gib"]
        put_usd, get_usd = r["puts_per_gib"] * PUT_USD, gets * GET_USD
        rows.append({"rate_mb": rate, "acked_mb_s": r["acked_mb_s"], "puts_per_gib": r["puts_per_gib"],
                     "gets_per_gib": gets, "put_usd": put_usd, "get_usd": get_usd, "diskless_usd": put_usd + get_usd,
                     "classic_usd": classic, "ratio": (put_usd + get_usd) / classic})
    return rows


def format_backend(info: dict[str, Any], cfg: BenchConfig) -> str:
    b = info["backend"]
    pp, lat = info["put_probe"], info["latency"]
    interval = info["commit_interval_ms"]
    bound = pp["p99_ms"] + interval + cfg.latency_slack_ms
    req = lat["requests"]
    lines = [f"== backend: {b} ==", "",
             f"1. produce latency, diskless topic, steady {lat['rate_mb']:g} MB/s offered "
             f"({lat['acked_mb_s']:.1f} MB/s acked), {info['producers']} producers, acks=all, "
             f"{cfg.record_bytes} B records, {lat['latency']['n']} records",
             f"   bound = store PUT p99 {pp['p99_ms']:.1f} ms ({pp['bytes'] / 1e6:.1f} MB objects, {pp['n']} puts; "
             f"p50 {pp['p50_ms']:.1f}, max {pp['max_ms']:.1f}) + commit interval {interval} ms + "
             f"{cfg.latency_slack_ms:.0f} ms = {bound:.1f} ms",
             f"   {'':<44} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'margin ms':>10} {'result':>7}"]
    d = lat["latency"]

    def row(label: str, p50: float, p99: float, mx: float | None, kind: str | None) -> str:
        """kind: "target" (PASS/FAIL against the bound), "info" (margin shown, no verdict) or None."""
        margin = bound - p99
        verdict = ("PASS" if margin >= 0 else "FAIL") if kind == "target" else ("(under)" if margin >= 0 else "(over)")
        return (f"   {label:<44} {p50:>8.1f} {p99:>8.1f} {'' if mx is None else f'{mx:.1f}':>8} "
                + (f"{margin:>10.1f} {verdict:>7}" if kind is not None else ""))

    lines.append(row("delivery latency, produce() to callback", d["p50_ms"], d["p99_ms"], d["max_ms"], "target"))
    bl = lat.get("broker_latency", {})
    if "produce" in bl:
        lines.append(row("broker ProduceLatencyMs (arrival to commit)", bl["produce"]["p50_ms"],
                         bl["produce"]["p99_ms"], None, "info"))
    if req.get("requests"):
        lines.append(row("ProduceRequest round trip (librdkafka rtt)", req["rtt_p50_ms"], req["rtt_p99_ms"], None,
                         "info"))
    if "upload" in bl:
        lines.append(row("  of which broker PUT (UploadLatencyMs)", bl["upload"]["p50_ms"], bl["upload"]["p99_ms"],
                         None, None))
        lines.append(row("  of which broker commit (CommitLatencyMs)", bl["commit"]["p50_ms"], bl["commit"]["p99_ms"],
                         None, None))
    lines.append(f"   (target row: PASS/FAIL; the others are info. Broker percentiles: its last 1024 samples, this "
                 f"phase and its warm-up; rtt: {req.get('requests', 0)} requests in librdkafka's "
                 f"{STATS_INTERVAL_MS // 1000} s statistics windows, p50 = median of the windows' p50, p99 = the "
                 "largest window p99. A record produced while its connection's request is in flight waits for that "
                 "answer, and librdkafka builds the next request before it comes, so a steady producer's record "
                 "takes two to three round trips)")
    lines += ["", f"2. PUT requests per GiB of records (target at 50 MB/s: <= {cfg.puts_per_gib_target:.0f})",
              f"   {'offered':>8} {'acked MB/s':>10} {'GiB':>6} {'WAL objs':>8} {'PUTs':>6} {'PUTs/GiB':>9} "
              f"{'obj MiB':>8} {'CPU s/GiB':>9} {'target':>7} {'result':>6}"]
    for rate, r in info["rates"].items():
        target, verdict = "", ""
        if rate == max(info["rates"]):
            target = f"<={cfg.puts_per_gib_target:.0f}"
            verdict = "PASS" if r["puts_per_gib"] <= cfg.puts_per_gib_target else "FAIL"
        lines.append(f"   {rate:>8g} {r['acked_mb_s']:>10.1f} {r['bytes'] / GiB:>6.3f} {r['objects']:>8} "
                     f"{r['puts']:>6} {r['puts_per_gib']:>9.0f} {r['avg_object_bytes'] / MiB:>8.2f} "
                     f"{r['broker_cpu_s_per_gib']:>9.1f} {target:>7} {verdict:>6}")
    fails = sum(r["upload_failures"] + r["commit_failures"] for r in info["rates"].values())
    lines.append(f"   (PUTs = the broker's PutRequestsPerSec_total, retries included; failed uploads + commits: "
                 f"{fails}; WAL objs = listed under {WAL_PREFIX}; CPU = broker process, user+sys)")
    c = info["consume"]
    lines += ["", f"3. consume {c['records']} records ({c['records'] * cfg.record_bytes / MiB:.0f} MiB) from offset 0 "
                  f"(target: diskless / classic >= {cfg.consume_target})",
              bench_report.format_table(c["results"])]
    per_gib = []
    for row in c["results"]:
        if "median_server_cpu_s" in row:
            per_gib.append(f"{row['name']} {row['median_server_cpu_s'] / (row['bytes_per_run'] / GiB):.2f}")
    lines.append("   broker CPU s per GiB: " + "; ".join(per_gib))
    gets = ", ".join(f"{p['name']} {p['gets']}" for p in c["passes"] if "diskless" in p["name"])
    lines.append(f"   store GETs per pass: {gets} (the topic's data is in "
                 f"{c['produce_counts']['objects']} WAL objects: {c['gets_per_object']:.2f} GETs per object on the "
                 "first read" + ("; the uploading broker did not keep its own objects in its cache)"
                                 if c["first_pass_gets"] else ")"))
    lines += ["", f"4. cost per GiB at S3 list prices (PUT ${PUT_USD * 1000:.3f}/1000, GET ${GET_USD * 1000:.4f}/1000, "
                  "storage ignored) vs classic RF=3 across 3 zones",
              f"   {'offered':>8} {'PUTs/GiB':>9} {'GETs/GiB':>9} {'PUT $':>8} {'GET $':>8} {'diskless $':>10} "
              f"{'classic $':>10} {'ratio':>6}"]
    for row in cost_rows(info):
        lines.append(f"   {row['rate_mb']:>8g} {row['puts_per_gib']:>9.0f} {row['gets_per_gib']:>9.0f} "
                     f"{row['put_usd']:>8.5f} {row['get_usd']:>8.5f} {row['diskless_usd']:>10.5f} "
                     f"{row['classic_usd']:>10.5f} {row['ratio']:>6.3f}")
    lines.append(f"   classic = 2 replica copies x ${CROSS_AZ_USD_PER_GIB}/GiB + producer to a leader in another zone "
                 f"2/3 of the time (${(ZONES - 1) / ZONES * CROSS_AZ_USD_PER_GIB:.4f}); diskless GETs = (the "
                 f"uploader's measured GETs/object + 1 for each of the {ZONES - 1} other zones' brokers) x "
                 "objects/GiB; no cross-zone transfer (producers and consumers use a broker in their zone, S3 "
                 "transfer in-region is free)")
    problems = info["problems"]
    lines += ["", f"broker WARNING/ERROR/Traceback lines: {len(problems)}"]
    lines += [f"   {line[:220]}" for line in problems[:8]]
    return "\n".join(lines)


NOTES = """\
notes: every server is its own process on loopback, sharing this machine's cores with the client
       (confluent-kafka, this process); a 50 MB/s row below 50 is the client and broker together not
       keeping up, and its PUTs/GiB are those of the rate reached. The consume rows read from the page
       cache (classic) and the broker's object cache (diskless, after the first pass). s3: SeaweedFS
       `weed mini` on 127.0.0.1, 1 GiB volumes, sharing the cores too."""


def environment() -> dict:
    import confluent_kafka

    return bench_report.environment(confluent_kafka=confluent_kafka.version()[0],
                                    librdkafka=confluent_kafka.libversion()[0],
                                    loadavg_at_start=" ".join(f"{x:.2f}" for x in os.getloadavg()))


def run(work: Path, cfg: BenchConfig) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    report: dict[str, Any] = {"config": asdict(cfg), "environment": environment(), "backends": []}
    try:
        report["backends"].append(run_backend(work / "local", "local", cfg, None))
        if cfg.s3:
            with seaweedfs(work, True) as server:
                if server is not None:
                    report["backends"].append(run_backend(work / "s3", "s3", cfg, server))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def print_report(report: dict) -> None:
    cfg = BenchConfig(**{**report["config"], "rates_mb": tuple(report["config"]["rates_mb"]),
                         "broker_props": tuple(tuple(kv) for kv in report["config"]["broker_props"])})
    print()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in report["environment"].items()))
    for info in report["backends"]:
        print()
        print(format_backend(info, cfg))
    if cfg.s3 and len(report["backends"]) < 2:
        print("\ns3: none (SeaweedFS skipped or not started, see above)")
    print()
    print(NOTES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 s phases, 64 MiB consumed, 2 consume reps")
    parser.add_argument("--s3", action="store_true", help="also the s3 backend on SeaweedFS")
    parser.add_argument("--latency-s", type=float, help="seconds of the 10 MB/s latency phase")
    parser.add_argument("--phase-s", type=float, help="seconds of each other PUTs-per-GiB phase")
    parser.add_argument("--producers", type=int, help="producer connections (one partition each)")
    parser.add_argument("--linger-ms", type=int, help="the producers' linger.ms")
    parser.add_argument("--consume-mib", type=int, help="payload MiB produced to (and consumed from) each topic")
    parser.add_argument("--consume-reps", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker prop (repeatable), e.g. diskless.produce.commit.interval.ms=100")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "diskless", help="scratch directory (deleted)")
    parser.add_argument("--json", type=Path, default=OUT / "diskless_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides: dict[str, Any] = {k: v for k, v in (("latency_s", args.latency_s), ("phase_s", args.phase_s),
                                                   ("producers", args.producers), ("linger_ms", args.linger_ms),
                                                   ("consume_mib", args.consume_mib),
                                                   ("consume_reps", args.consume_reps)) if v is not None}
    props = tuple(tuple(kv.split("=", 1)) for kv in args.set)
    if any(len(kv) != 2 for kv in props):
        parser.error("--set takes KEY=VALUE")
    cfg = dataclasses.replace(cfg, s3=args.s3, broker_props=props, **overrides)  # type: ignore[arg-type]
    return run_and_save(lambda: run(args.dir, cfg), print_report, quick=args.quick, json_path=args.json)


if __name__ == "__main__":
    sys.exit(main())
