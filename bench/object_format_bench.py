"""Remote object format v2 (issue 29: chunks with per-chunk zstd and AES-256-GCM, plus a JSON manifest)
against format v1 (Kafka's plain objects): what compression and encryption cost a real broker, and what they save.

    .venv/bin/python bench/object_format_bench.py [--quick] [--only broker|codec] [--s3] [--reps N]
                                                  [--topic-mib N] [--segment-mib N] [--codec-mib N]
                                                  [--profile] [--dir PATH] [--json PATH]

The workload everywhere is JSON events (~240 B: an event id, a millisecond timestamp, a type of 7, a user id of
200k, a random 64-bit session token, country, device, a page path, a referrer, a duration, an amount, a flag),
from a pool of 65536 distinct events cycled (16 MB: far more than a chunk, so zstd sees no repetition beyond
what the events themselves have). Two broker processes (``python -m strata serve``, tiered_bench's Broker) run
side by side with the ``local`` RSM (``--s3``: SeaweedFS, parts 1 and 2): **v1** (no ``rsm.config.*`` format
settings) and **v2** (tests/support/keys.py's ``v2_broker_props``: ``compression.enabled``,
``encryption.enabled``, a fresh RSA key pair, ``chunk.size`` 4 MiB, the default).

1. **Upload** (target v2/v1 >= 0.8). Each broker gets ``--reps`` (3) topics (1 partition, ``segment.bytes``
   ``--segment-mib``, 16) produced with tiering off, ``--topic-mib`` (64) MiB of rolled segments each (uncompressed
   batches, linger.ms 5, batch.size 1 MiB). A run turns ``remote.storage.enable`` on for one topic and
   waits for the broker's "copied ... in N ms" line of every rolled segment; runs alternate between the
   brokers. MB/s = the segments' .log bytes / the sum of the broker's per-segment copy times (RLMM events,
   the RSM's ``copy_log_segment_data``: encode, write, fsync); CPU-s/GiB = the broker process's CPU from the
   config change to the last copy, per GiB of .log bytes. An info row times the same runs from the config
   change to the last copy line (the copy task's 200 ms interval is then in it).
2. **Remote consume** (target v2/v1 >= 0.8). The first upload topic gets ``local.retention.bytes=1`` (only
   the active segment, a few hundred KiB, stays local), is read once untimed (index cache, page cache), then
   consumed from offset 0, alternating brokers, by confluent-kafka (tiered_bench's consumer: fetch.max.bytes
   50 MiB, max.partition.fetch.bytes 8 MiB) and by a bare Fetch loop with the same limits (tests/broker's
   WireClient; the records are not parsed, so the broker's work is nearly all there is: with ~250 B records
   the confluent-kafka client's per-record work bounds that row on a small machine). MB/s = record values /
   wall time; CPU-s/GiB = broker CPU per GiB of values. The broker's read-ahead is on (its defaults).
3. **Bucket bytes**: stored bytes / original bytes (what v1 stores), objects and manifests included, for the
   first upload topic's segments: the v1 broker's bucket; v2 zstd only and v2 zstd+AES encoded in-process from
   those same v1 objects (``ObjectFormat.encode``, what the RSM stores); the v2 broker's own bucket; and two
   topics of the v2 broker produced with producer-side lz4 and zstd batches (``segment.bytes`` 1 MiB): v2
   stores those without zstd, so their stored size should be about their original size. "B/payload B" relates
   the stored bytes to the JSON values they hold.
4. **Codec** (no broker): one ``--codec-mib`` (64) MiB segment of the same events built by Strata's log
   (64 KiB batches), in memory / page cache. The RSM's copy and its 8 MiB-window fetches (the broker's
   read-ahead pattern: each window starts at the last whole batch of the one before) for v1 and v2 on the
   local store; ``ObjectFormat.encode`` / ``read``; and the primitives on the same 4 MiB chunks (cramjam zstd
   at its default level and, for comparison, at level 1; cryptography's AES-GCM; hashlib's SHA-256; the
   batch-header scan; one memory copy), each as MB/s of original bytes and ms per segment, so the rows add up
   to where a v2 copy's time goes; then a cProfile of one v2 encode and one windowed v2 RSM fetch.

``--profile``: one upload run and one consume run (both consumers) per format with py-spy (if installed)
recording each broker during them (bench/out/object_format_profile/*.txt, raw collapsed stacks, line
numbers), then part 4 on a 16 MiB segment; the busy samples (threads not parked in a queue, condition or
select) are attributed to the source line they are on (zstd, AES-GCM, SHA-256, other RSM/format code, the
rest of the broker), over the whole broker and under the RSM's copy / the remote reader. ``bench/run.py
--only object-format --profile-broker`` runs the same. MB/s = 10^6 bytes/s; os.sync() before every timed run.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import gc
import hashlib
import io
import json
import linecache
import os
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import report as bench_report  # noqa: E402
from report import MiB, run_and_save  # noqa: E402
from tiered_bench import (  # noqa: E402
    COPIED,
    FETCH_MAX_BYTES,
    OFFLOAD_TIMEOUT_S,
    PARTITION_FETCH_BYTES,
    PREFETCH_HITS,
    PREFETCH_MISSES,
    READER_TIMER,
    REMOTE_FETCH_BYTES,
    REMOTE_FETCHES,
    RUN_TIMEOUT_S,
    Broker,
    _own_cpu_s,
    _proc_cpu_s,
    consume_all,
    create_topics,
    seaweedfs,
    tiered_props,
    wait_offloaded,
)

GiB = 1024 * MiB
FORMATS = ("v1", "v2")
POOL_EVENTS = 65536
DISTINCT_BATCH_BYTES = 16 * MiB  # the codec segment: distinct batches up to this, then repeated (> a chunk)
PC_SEGMENT_BYTES = MiB  # segment.bytes of the producer-compressed topics
PROFILE_DIR = OUT / "object_format_profile"


@dataclass(frozen=True)
class BenchConfig:
    topic_mib: int = 64  # rolled segments per upload topic, in MiB
    segment_mib: int = 16
    reps: int = 3  # upload runs per format (one topic each)
    consume_reps: int = 3
    chunk_mib: int = 4  # rsm.config.chunk.size
    compressed_segments: int = 8  # 1 MiB segments per producer-compressed topic
    codec_mib: int = 64
    codec_reps: int = 3
    window_mib: int = 8  # the codec part's fetch windows
    target: float = 0.8
    s3: bool = False
    profile: bool = False

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(topic_mib=24, segment_mib=8, reps=2, consume_reps=2, compressed_segments=4, codec_mib=16,
                   codec_reps=2)

    @property
    def segments_per_topic(self) -> int:
        return max(2, self.topic_mib // self.segment_mib)


def _log(msg: str) -> None:
    print(msg, flush=True)


# -- the workload ---------------------------------------------------------------------------------

TYPES = ("page_view", "click", "add_to_cart", "purchase", "search", "login", "logout")
COUNTRIES = ("DE", "US", "FR", "GB", "JP", "BR", "IN", "NL", "ES", "IT")
DEVICES = ("mobile", "desktop", "tablet")
SECTIONS = ("products", "category", "cart", "checkout", "search", "account", "help")
REFERRERS = ("https://www.google.com/", "https://www.bing.com/", "https://t.co/", "direct", "email", "")


def json_events(n: int, seed: int = 29) -> list[bytes]:
    """``n`` distinct JSON events: a few repeated field names, ids, timestamps, short strings."""
    rng = random.Random(seed)
    ts = 1_718_000_000_000
    out = []
    for i in range(n):
        ts += rng.randrange(40)
        out.append((f'{{"event_id":"evt-{i:010d}","ts":{ts},"type":"{rng.choice(TYPES)}",'
                    f'"user_id":"u-{rng.randrange(200_000):06d}","session":"{rng.getrandbits(64):016x}",'
                    f'"country":"{rng.choice(COUNTRIES)}","device":"{rng.choice(DEVICES)}",'
                    f'"page":"/{rng.choice(SECTIONS)}/{rng.randrange(50_000)}","referrer":"{rng.choice(REFERRERS)}",'
                    f'"duration_ms":{rng.randrange(20_000)},"amount":{rng.randrange(100_000) / 100:.2f},'
                    f'"ok":{"true" if rng.random() < 0.97 else "false"}}}').encode())
    return out


@dataclass
class Pool:
    values: list[bytes]
    prefix: list[int] = field(default_factory=list)  # prefix[i] = bytes of values[:i]

    def __post_init__(self) -> None:
        total = 0
        self.prefix = [0]
        for v in self.values:
            total += len(v)
            self.prefix.append(total)

    def payload(self, records: int) -> int:
        """Value bytes of the first ``records`` records produced (the pool cycled from its start)."""
        whole, rest = divmod(records, len(self.values))
        return whole * self.prefix[-1] + self.prefix[rest]

    @property
    def mean(self) -> float:
        return self.prefix[-1] / len(self.values)


# -- brokers --------------------------------------------------------------------------------------


def broker_props(fmt: str, data_dir: Path, backend: str, server: Any | None, keys_dir: Path,
                 cfg: BenchConfig) -> dict[str, str]:
    from tests.support.keys import v2_broker_props

    props = tiered_props(backend, data_dir, server, **{"rlmm.config.remote.log.metadata.topic.num.partitions": "5"})
    if fmt == "v2":
        props.update(v2_broker_props(keys_dir, chunk_size=cfg.chunk_mib * MiB))
    return props


def log_since(broker: Broker, offset: int) -> str:
    with open(broker.data_dir / "broker.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def log_size(broker: Broker) -> int:
    return (broker.data_dir / "broker.log").stat().st_size


def alter_topic(admin: Any, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)


def produce_segments(broker: Broker, topic: str, pool: Pool, segments: int, compression: str = "none") -> int:
    """Events of the pool, cycled from its start, until partition 0 of ``topic`` has rolled ``segments``
    segments; the new active segment holds at most one step (~0.5 MB of values). Returns the records sent."""
    from confluent_kafka import Producer

    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": MiB, "acks": 1,
                  "compression.type": compression, "enable.idempotence": False, "log_level": 3,
                  "queue.buffering.max.kbytes": 4096})
    p.list_topics(topic, timeout=10)
    values, sent, step = pool.values, 0, 2048
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        for _ in range(step):
            value = values[sent % len(values)]
            while True:
                try:
                    p.produce(topic, value, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.001)
            sent += 1
        rolled = len(broker.partition_logs(topic)) - 1
        if rolled >= segments - 2:  # near the end: let each step land before looking again
            if p.flush(60):
                raise RuntimeError(f"produce to {topic}: records not delivered in 60 s")
            rolled = len(broker.partition_logs(topic)) - 1
        else:
            p.poll(0)
        if rolled >= segments:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"produce to {topic}: {rolled} of {segments} segments after {RUN_TIMEOUT_S:.0f} s")
    if p.flush(60) or errors:
        raise RuntimeError(f"produce to {topic}: errors {errors[:3]}")
    return sent


@dataclass
class UploadRun:
    segments: int
    log_bytes: int
    copy_s: float  # sum of the broker's per-segment copy times
    wall_s: float  # config change -> last copy line seen
    server_cpu_s: float
    client_cpu_s: float


def measure_upload(broker: Broker, admin: Any, topic: str) -> UploadRun:
    """Turn tiering on for ``topic`` and wait for every rolled segment's copy line."""
    expected = len(broker.partition_logs(topic)) - 1
    offset = log_size(broker)
    name = f"{topic}-0"
    os.sync()
    cpu0, mine0 = _proc_cpu_s(broker.pid), _own_cpu_s()
    started = time.perf_counter()
    alter_topic(admin, topic, {"remote.storage.enable": "true"})
    deadline = time.monotonic() + OFFLOAD_TIMEOUT_S
    while True:
        copies = [m for m in COPIED.finditer(log_since(broker, offset)) if m.group(1) == name]
        if len(copies) >= expected:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: {len(copies)} of {expected} segments copied after {OFFLOAD_TIMEOUT_S:.0f}"
                               f" s\n{log_since(broker, offset)[-3000:]}")
        time.sleep(0.01)
    wall = time.perf_counter() - started
    cpu, mine = _proc_cpu_s(broker.pid) - cpu0, _own_cpu_s() - mine0
    return UploadRun(expected, sum(int(m.group(4)) for m in copies), sum(int(m.group(5)) for m in copies) / 1e3,
                     wall, cpu, mine)


@dataclass
class ConsumeRun:
    records: int
    payload: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float
    metrics: dict[str, float]


def measure_consume(broker: Broker, topic: str, records: int, payload: int, raw: bool = False) -> ConsumeRun:
    """confluent-kafka from offset 0, or (``raw``) bare Fetch requests."""
    m0 = broker.metrics()
    os.sync()
    cpu0, mine0 = _proc_cpu_s(broker.pid), _own_cpu_s()
    seconds = (raw_fetch_all(broker.bootstrap, topic, records) if raw
               else consume_all(broker.bootstrap, topic, records, group="object-format-bench"))
    cpu, mine = _proc_cpu_s(broker.pid) - cpu0, _own_cpu_s() - mine0
    m1 = broker.metrics()
    keys = (REMOTE_FETCHES, REMOTE_FETCH_BYTES, READER_TIMER + "_count", READER_TIMER + "_sum", PREFETCH_HITS,
            PREFETCH_MISSES)
    return ConsumeRun(records, payload, seconds, cpu, mine, {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in keys})


def _next_offset(records: Any, offset: int) -> int:
    """The offset after the last whole batch of a Fetch answer's records (``offset`` when there is none)."""
    view = memoryview(records or b"")
    position = 0
    while position + 61 <= len(view):
        base, length = struct.unpack_from(">qi", view, position)
        if position + 12 + length > len(view):
            break
        (last_delta,) = struct.unpack_from(">i", view, position + 23)
        offset = base + last_delta + 1
        position += 12 + length
    return offset


def raw_fetch_all(bootstrap: str, topic: str, records: int) -> float:
    """Seconds to fetch offsets ``[0, records)`` of partition 0 with bare Fetch requests (the same byte limits
    as the confluent-kafka consumer's), the records left as bytes: a consume with almost no client work."""
    from tests.broker.kafka_wire import WireClient

    with WireClient(bootstrap, timeout_s=60) as wire:
        offset = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        started = time.perf_counter()
        while offset < records:
            resp = wire.call(1, 12, replica_id=-1, max_wait=500, min_bytes=1, max_bytes=FETCH_MAX_BYTES,
                             isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                             topics=[{"topic": topic, "partitions": [
                                 {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                  "last_fetched_epoch": -1, "log_start_offset": -1,
                                  "partition_max_bytes": PARTITION_FETCH_BYTES}]}])
            part = resp.responses[0].partitions[0]
            if int(part.error_code):
                raise RuntimeError(f"fetch {topic} at {offset}: error {int(part.error_code)}")
            offset = _next_offset(part.records, offset)
            if time.monotonic() > deadline:
                raise RuntimeError(f"fetched {offset} of {records} records of {topic} in {RUN_TIMEOUT_S:.0f} s")
        return time.perf_counter() - started


# -- rate rows (ratios against a baseline of the same run, as bench/report.py's) ------------------------


@dataclass
class Series:
    name: str
    kind: str  # "baseline" or "subject"
    mb_s: list[float] = field(default_factory=list)
    cpu_s_per_gib: list[float] = field(default_factory=list)
    baseline: str | None = None
    informational: bool = False
    note: str = ""


def summarize_series(series: list[Series], target: float) -> list[dict[str, Any]]:
    by_name = {s.name: s for s in series}
    rows = []
    for s in series:
        row: dict[str, Any] = {"name": s.name, "kind": s.kind, "note": s.note, "mb_per_s": s.mb_s,
                               "median_mb_per_s": statistics.median(s.mb_s), "min_mb_per_s": min(s.mb_s),
                               "max_mb_per_s": max(s.mb_s)}
        if s.cpu_s_per_gib:
            row.update(cpu_s_per_gib=s.cpu_s_per_gib, median_cpu_s_per_gib=statistics.median(s.cpu_s_per_gib))
        if s.baseline is not None:
            b = by_name[s.baseline]
            ratio = row["median_mb_per_s"] / statistics.median(b.mb_s)
            row.update(baseline=b.name, ratio=ratio, paired_ratios=[x / y for x, y in zip(s.mb_s, b.mb_s,
                                                                                          strict=False)])
            if not s.informational:
                row.update(target=target, passed=ratio >= target)
            if s.cpu_s_per_gib and b.cpu_s_per_gib:
                row["cpu_ratio"] = row["median_cpu_s_per_gib"] / statistics.median(b.cpu_s_per_gib)
        rows.append(row)
    return rows


def format_rate_rows(rows: list[dict[str, Any]], cpu_label: str = "broker CPU-s/GiB") -> str:
    header = (f"{'name':<40} {'MB/s median (min-max)':>22} {'ratio (pairs)':>18} {'target':>7} {'result':>6} "
              f"{cpu_label:>17}")
    lines = [header, "-" * len(header)]
    for row in rows:
        rate = f"{row['median_mb_per_s']:.1f} ({row['min_mb_per_s']:.1f}-{row['max_mb_per_s']:.1f})"
        if "ratio" in row:
            pairs = row["paired_ratios"]
            ratio = f"{row['ratio']:.2f} ({min(pairs):.2f}-{max(pairs):.2f})"
            target, verdict = ((f">={row['target']:.1f}", "PASS" if row["passed"] else "FAIL") if "target" in row
                               else ("info", ""))
        else:
            ratio, target, verdict = "baseline", "", ""
        cpu = f"{row['median_cpu_s_per_gib']:.2f}" if "median_cpu_s_per_gib" in row else ""
        if "cpu_ratio" in row:
            cpu += f" (x{row['cpu_ratio']:.2f})"
        lines.append(f"{row['name']:<40} {rate:>22} {ratio:>18} {target:>7} {verdict:>6} {cpu:>17}")
    return "\n".join(lines)


# -- py-spy ---------------------------------------------------------------------------------------


def _py_spy() -> str | None:
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")


@contextlib.contextmanager
def py_spy(pid: int | None, out: Path | None, rate: int = 200) -> Iterator[None]:
    """py-spy recording ``pid`` (every thread, line numbers) into ``out`` for the block; nothing when off."""
    exe = _py_spy()
    if pid is None or out is None or exe is None:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--full-filenames", "--rate",
                             str(rate), "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached and sampling
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not out.exists():
            _log(f"  py-spy wrote no profile: {err.decode(errors='replace')[-500:]}")


FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")
CATEGORIES = (  # (category, pattern on the source line a sample is on)
    ("zstd compress", re.compile(r"zstd\.compress\(")),
    ("zstd decompress", re.compile(r"zstd\.decompress\(")),
    ("AES-GCM encrypt (line: iv + encrypt)", re.compile(r"aes\.encrypt\(")),
    ("AES-GCM decrypt (line: slices + decrypt)", re.compile(r"aes\.decrypt\(")),
    ("SHA-256", re.compile(r"digest\.update\(|hashlib\.sha256")),
)


WAITING = "waiting"
WAITING_FILES = ("/threading.py", "/selectors.py", "/queue.py")


def categorize(file: str, line: int, func: str) -> str:
    if file.endswith(WAITING_FILES) or (file.endswith("concurrent/futures/thread.py") and func == "_worker") \
            or func.endswith("_read_from_self"):
        return WAITING
    text = linecache.getline(file, line)
    for name, pattern in CATEGORIES:
        if pattern.search(text):
            return name
    if "strata/tiered/storage/" in file:
        return "other RSM / object format code"
    if "strata/tiered/" in file:
        return "other tiering code (RLM, reader, RLMM)"
    if "/strata/" in file:
        return "other strata code"
    return "stdlib / libraries (event loop, sockets, threads)"


def summarize_py_spy(path: Path, focus: str, top: int = 12) -> dict[str, Any]:
    """Busy samples (threads not parked in a queue, a condition or select) by category and by source line,
    over all of them and over those under a frame containing ``focus``."""
    total = waiting = focused = 0
    categories: dict[str, int] = {}
    focus_categories: dict[str, int] = {}
    lines: dict[str, int] = {}
    for raw in path.read_text(errors="replace").splitlines():
        stack, _, count_text = raw.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        m = FRAME.match(frames[-1])
        if m is None:
            continue
        file, line = m.group("file"), int(m.group("line"))
        category = categorize(file, line, m.group("func"))
        total += count
        if category == WAITING:
            waiting += count
            continue
        categories[category] = categories.get(category, 0) + count
        short = file.split("/src/")[-1].split("site-packages/")[-1].split("/lib/python3.11/")[-1]
        key = f"{short}:{line} {m.group('func')}: {linecache.getline(file, line).strip()[:64]}"
        lines[key] = lines.get(key, 0) + count
        if any(focus in f for f in frames[:-1]) or focus in frames[-1]:
            focused += count
            focus_categories[category] = focus_categories.get(category, 0) + count
    return {"samples": total, "waiting": waiting, "busy": total - waiting, "focus": focus, "focus_samples": focused,
            "categories": dict(sorted(categories.items(), key=lambda kv: -kv[1])),
            "focus_categories": dict(sorted(focus_categories.items(), key=lambda kv: -kv[1])),
            "top_lines": sorted(lines.items(), key=lambda kv: -kv[1])[:top]}


def format_py_spy(name: str, s: dict[str, Any]) -> str:
    if not s["busy"]:
        return f"  {name}: no busy samples"
    busy, f = s["busy"], max(1, s["focus_samples"])
    lines = [f"  {name}: {s['samples']} samples, {s['waiting']} of threads parked in a queue/condition/select "
             f"(sampled as running, not CPU work), {busy} busy; {s['focus_samples']} "
             f"({100 * s['focus_samples'] / busy:.0f}%) under {s['focus']}",
             "    busy samples by category (all | under " + s["focus"] + "):"]
    lines += [f"    {100 * n / busy:5.1f}% | {100 * s['focus_categories'].get(c, 0) / f:5.1f}%  {c}"
              for c, n in s["categories"].items()]
    lines.append("    top source lines (% of busy samples):")
    lines += [f"    {100 * n / busy:5.1f}%  {k}" for k, n in s["top_lines"]]
    return "\n".join(lines)


# -- parts 1 and 2: the brokers -------------------------------------------------------------------


def run_brokers(work: Path, cfg: BenchConfig, pool: Pool) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    out: dict[str, Any] = {}
    with seaweedfs(work, cfg.s3) as server:
        backend = "s3" if server is not None else "local"
        if cfg.s3 and server is None:
            _log("  --s3: SeaweedFS did not start; the local store is used")
        out["backend"] = backend
        brokers = {fmt: Broker(work / f"broker-{fmt}", broker_props(fmt, work / f"broker-{fmt}", backend, server,
                                                                    work / "keys", cfg)) for fmt in FORMATS}
        admins: dict[str, Any] = {}
        try:
            for broker in brokers.values():
                broker.start()
            admins.update({fmt: AdminClient({"bootstrap.servers": b.bootstrap}) for fmt, b in brokers.items()})
            phase = time.perf_counter()
            out.update(setup(brokers, admins, cfg, pool))
            out["phase_s"] = {"setup": time.perf_counter() - phase}
            phase = time.perf_counter()
            out["upload"] = run_uploads(brokers, admins, cfg)
            out["phase_s"]["upload"] = time.perf_counter() - phase
            phase = time.perf_counter()
            out["consume"] = run_consumes(brokers, admins, cfg, pool, out["records"])
            out["phase_s"]["consume"] = time.perf_counter() - phase
            out["warnings"] = {fmt: [line for line in b.log_text().splitlines()
                                     if " WARNING " in line or " ERROR " in line][-5:] for fmt, b in brokers.items()}
        finally:
            admins.clear()  # before the brokers go: a client left behind logs its reconnection attempts
            gc.collect()
            for broker in brokers.values():
                broker.stop()
    out["remote_dirs"] = {fmt: str(work / f"broker-{fmt}" / "remote") for fmt in FORMATS}
    return out


def upload_topics(cfg: BenchConfig) -> list[str]:
    return [f"json-{rep}" for rep in range(cfg.reps)]


def setup(brokers: dict[str, Broker], admins: dict[str, Any], cfg: BenchConfig, pool: Pool) -> dict[str, Any]:
    """Topics with tiering off, produced (untimed); the v2 broker's producer-compressed topics, produced with
    tiering off too (a rolled segment is counted on the local disk), then tiered and offloaded."""
    seg = str(cfg.segment_mib * MiB)
    topics = upload_topics(cfg)
    compressed = [] if cfg.profile else ["lz4", "zstd"]
    started = time.perf_counter()
    for fmt, broker in brokers.items():
        configs = {t: {"remote.storage.enable": "false", "segment.bytes": seg} for t in topics}
        if fmt == "v2":
            configs.update({f"json-{c}": {"remote.storage.enable": "false", "segment.bytes": str(PC_SEGMENT_BYTES)}
                            for c in compressed})
        create_topics(broker.bootstrap, configs)
    records: dict[str, dict[str, int]] = {fmt: {} for fmt in brokers}
    for c in compressed:
        records["v2"][f"json-{c}"] = produce_segments(brokers["v2"], f"json-{c}", pool, cfg.compressed_segments, c)
        alter_topic(admins["v2"], f"json-{c}", {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    for topic in topics:
        for fmt, broker in brokers.items():
            records[fmt][topic] = produce_segments(broker, topic, pool, cfg.segments_per_topic)
    for c in compressed:
        wait_offloaded(brokers["v2"], f"json-{c}")
    produced = sum(pool.payload(n) for per in records.values() for n in per.values())
    _log(f"  produced {produced / MiB:.0f} MiB of JSON values ({sum(len(p) for p in records.values())} topic "
         f"runs) in {time.perf_counter() - started:.1f} s; each upload topic: {cfg.segments_per_topic} rolled "
         f"{cfg.segment_mib} MiB segments")
    return {"records": records}


def run_uploads(brokers: dict[str, Broker], admins: dict[str, Any], cfg: BenchConfig) -> dict[str, Any]:
    runs: dict[str, list[UploadRun]] = {fmt: [] for fmt in FORMATS}
    _log("[1/4] upload: remote.storage.enable turned on, until every rolled segment is copied")
    for rep, topic in enumerate(upload_topics(cfg)):
        for fmt in (FORMATS if rep % 2 == 0 else FORMATS[::-1]):
            profile = PROFILE_DIR / f"{fmt}-upload.txt" if cfg.profile else None
            with py_spy(brokers[fmt].pid if cfg.profile else None, profile):
                run = measure_upload(brokers[fmt], admins[fmt], topic)
            runs[fmt].append(run)
            _log(f"  {fmt} {topic}: {run.segments} segments, {run.log_bytes / MiB:.1f} MiB in {run.copy_s:.2f} s of "
                 f"copies ({run.log_bytes / 1e6 / run.copy_s:.1f} MB/s; {run.wall_s:.2f} s from the config change), "
                 f"broker CPU {run.server_cpu_s:.2f} s")
    series = []
    for fmt in FORMATS:
        v2 = fmt == "v2"
        copy = Series(f"upload {fmt}: per-segment copy time", "subject" if v2 else "baseline",
                      [r.log_bytes / 1e6 / r.copy_s for r in runs[fmt]],
                      [r.server_cpu_s / (r.log_bytes / GiB) for r in runs[fmt]],
                      baseline="upload v1: per-segment copy time" if v2 else None,
                      note="zstd + AES-256-GCM, 4 MiB chunks" if v2 else "plain objects")
        wall = Series(f"upload {fmt}: config change to last copy", "subject" if v2 else "baseline",
                      [r.log_bytes / 1e6 / r.wall_s for r in runs[fmt]],
                      baseline="upload v1: config change to last copy" if v2 else None, informational=True,
                      note="includes the copy task's 200 ms interval")
        series += [copy, wall]
    order = [series[0], series[2], series[1], series[3]]
    return {"runs": {fmt: [asdict(r) for r in rs] for fmt, rs in runs.items()},
            "results": summarize_series(order, cfg.target)}


def run_consumes(brokers: dict[str, Broker], admins: dict[str, Any], cfg: BenchConfig, pool: Pool,
                 records: dict[str, dict[str, int]]) -> dict[str, Any]:
    _log("[2/4] remote consume: local.retention.bytes=1, then consumed from offset 0")
    used = [upload_topics(cfg)[0]] * cfg.consume_reps  # one topic: one untimed first pass per format
    info: dict[str, Any] = {"local_active_bytes": {}}
    for fmt, broker in brokers.items():
        for topic in sorted(set(used)):
            alter_topic(admins[fmt], topic, {"local.retention.bytes": "1"})
        for topic in sorted(set(used)):
            wait_offloaded(broker, topic)
            info["local_active_bytes"].setdefault(fmt, {})[topic] = broker.partition_logs(topic)[0].stat().st_size
    first: dict[str, list[ConsumeRun]] = {fmt: [] for fmt in FORMATS}
    for topic in sorted(set(used)):  # untimed: the remote index cache and the page cache
        for fmt in FORMATS:
            n = records[fmt][topic]
            first[fmt].append(measure_consume(brokers[fmt], topic, n, pool.payload(n)))
    runs: dict[str, list[ConsumeRun]] = {fmt: [] for fmt in FORMATS}
    raw_runs: dict[str, list[ConsumeRun]] = {fmt: [] for fmt in FORMATS}
    for rep, topic in enumerate(used):
        for fmt in (FORMATS if rep % 2 == 0 else FORMATS[::-1]):
            n = records[fmt][topic]
            profile = PROFILE_DIR / f"{fmt}-consume.txt" if cfg.profile else None
            with py_spy(brokers[fmt].pid if cfg.profile else None, profile):  # both consumers
                run = measure_consume(brokers[fmt], topic, n, pool.payload(n))
                raw = measure_consume(brokers[fmt], topic, n, pool.payload(n), raw=True)
            runs[fmt].append(run)
            raw_runs[fmt].append(raw)
            fetches = run.metrics[REMOTE_FETCHES]
            _log(f"  {fmt} {topic}: {run.payload / 1e6 / run.wall_s:.1f} MB/s, broker CPU {run.server_cpu_s:.2f} s, "
                 f"{fetches:.0f} remote reads, {run.metrics[READER_TIMER + '_sum'] / max(fetches, 1):.1f} ms each in "
                 f"the reader; bare Fetch requests {raw.payload / 1e6 / raw.wall_s:.1f} MB/s, broker CPU "
                 f"{raw.server_cpu_s:.2f} s")
    series = []
    for label, by_fmt, note in (("remote tier", runs, "confluent-kafka consumer"),
                                ("bare Fetch loop", raw_runs, "records not parsed: the broker's share")):
        for fmt in FORMATS:
            v2 = fmt == "v2"
            series.append(Series(f"consume {fmt}: {label}", "subject" if v2 else "baseline",
                                 [r.payload / 1e6 / r.wall_s for r in by_fmt[fmt]],
                                 [r.server_cpu_s / (r.payload / GiB) for r in by_fmt[fmt]],
                                 baseline=f"consume v1: {label}" if v2 else None, note=note))
    for fmt in FORMATS:
        v2 = fmt == "v2"
        series.append(Series(f"consume {fmt}: first pass (untimed)", "subject" if v2 else "baseline",
                             [r.payload / 1e6 / r.wall_s for r in first[fmt]],
                             [r.server_cpu_s / (r.payload / GiB) for r in first[fmt]],
                             baseline="consume v1: first pass (untimed)" if v2 else None, informational=True,
                             note="remote index cache cold"))
    info.update(runs={fmt: [asdict(r) for r in rs] for fmt, rs in runs.items()},
                raw_runs={fmt: [asdict(r) for r in rs] for fmt, rs in raw_runs.items()},
                first_runs={fmt: [asdict(r) for r in rs] for fmt, rs in first.items()},
                results=summarize_series(series, cfg.target))
    return info


# -- part 3: bucket bytes -------------------------------------------------------------------------


def _topic_dirs(remote_dir: Path, topic: str) -> list[Path]:
    """``{topic}-{topicId}/0`` directories (a topic id is 22 characters of URL-safe base64)."""
    return [d / "0" for d in remote_dir.rglob(f"{topic}-*")
            if d.is_dir() and len(d.name) == len(topic) + 23 and (d / "0").is_dir()]


def _stem_files(stem: Path) -> list[Path]:
    return [p for p in stem.parent.glob(f"{stem.name}.*") if ".tmp" not in p.name]


def bucket_v1(remote_dir: Path, topic: str, pool: Pool) -> dict[str, Any]:
    from strata.tiered.storage.object_format import _scan_batches

    stems = sorted(p.with_suffix("") for d in _topic_dirs(remote_dir, topic) for p in d.glob("*.log"))
    stored = sum(f.stat().st_size for s in stems for f in _stem_files(s))
    log_bytes = sum(s.with_suffix(".log").stat().st_size for s in stems)
    records = sum(_scan_batches(s.with_suffix(".log"))[0] for s in stems)
    return {"segments": len(stems), "original": stored, "stored": stored, "log_original": log_bytes,
            "log_stored": log_bytes, "records": records, "payload": pool.payload(records), "log_compression": None,
            "stems": [str(s) for s in stems]}


def bucket_v2(remote_dir: Path, topic: str, pool: Pool) -> dict[str, Any]:
    manifests = sorted(p for d in _topic_dirs(remote_dir, topic) for p in d.glob("*.manifest"))
    original = stored = log_original = log_stored = records = 0
    compression: set[str | None] = set()
    for path in manifests:
        doc = json.loads(path.read_bytes())
        objects = doc["objects"]
        original += sum(o["original_size"] for o in objects.values())
        stored += sum(f.stat().st_size for f in _stem_files(path.with_suffix("")))
        log_original += objects["log"]["original_size"]
        log_stored += objects["log"]["stored_size"]
        records += doc["record_count"]
        compression.add(objects["log"]["compression"])
    return {"segments": len(manifests), "original": original, "stored": stored, "log_original": log_original,
            "log_stored": log_stored, "records": records, "payload": pool.payload(records),
            "log_compression": "/".join(sorted(str(c) for c in compression))}


def encode_in_process(stems: list[Path], configs: dict[str, str], pool: Pool) -> dict[str, Any]:
    """The v2 objects ``ObjectFormat.encode`` makes of v1 segments (their bytes counted, nothing stored)."""
    from strata.tiered.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
    from strata.tiered.storage.object_format import ObjectFormat, _scan_batches

    fmt = ObjectFormat.from_config(configs)
    tip = TopicIdPartition(uuid.uuid4(), "json", 0)
    out = {"segments": 0, "original": 0, "stored": 0, "log_original": 0, "log_stored": 0, "records": 0}
    compression: set[str | None] = set()
    for stem in stems:
        sources: dict[str, Path | bytes] = {p.suffix[1:]: p for p in _stem_files(stem)}
        log_path = stem.with_suffix(".log")
        records = _scan_batches(log_path)[0]
        start = int(stem.name.split("-", 1)[0])
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, start + max(records, 1) - 1,
                                      0, 0, int(time.time() * 1000), log_path.stat().st_size, {0: start})
        with fmt.encode(md, sources) as encoded:
            out["stored"] += sum(o.stat().st_size if isinstance(o, Path) else len(o)
                                 for o in encoded.objects.values())
            out["original"] += sum(o.original_size for o in encoded.manifest.objects.values())
            out["log_original"] += encoded.manifest.objects["log"].original_size
            out["log_stored"] += encoded.manifest.objects["log"].stored_size
            compression.add(encoded.manifest.objects["log"].compression)
        out["segments"] += 1
        out["records"] += records
    return {**out, "payload": pool.payload(out["records"]),
            "log_compression": "/".join(sorted(str(c) for c in compression))}


def run_bucket(work: Path, brokers: dict[str, Any], cfg: BenchConfig, pool: Pool) -> dict[str, Any] | None:
    from tests.support.keys import v2_configs

    if brokers.get("backend") != "local":
        _log("[3/4] bucket bytes: skipped (measured on the local store only: run without --s3)")
        return None
    _log("[3/4] bucket bytes")
    v1_dir, v2_dir = Path(brokers["remote_dirs"]["v1"]), Path(brokers["remote_dirs"]["v2"])
    topic = upload_topics(cfg)[0]
    v1 = bucket_v1(v1_dir, topic, pool)
    stems = [Path(s) for s in v1.pop("stems")]
    chunk = str(cfg.chunk_mib * MiB)
    zstd_only = {"compression.enabled": "true", "chunk.size": chunk}
    both = v2_configs(work / "keys-in-process", chunk_size=cfg.chunk_mib * MiB)
    rows = [
        {"name": f"v1 plain ({topic}, v1 broker's bucket)", **v1},
        {"name": "v2 zstd only (same segments, in-process)", **encode_in_process(stems, zstd_only, pool)},
        {"name": "v2 zstd+AES (same segments, in-process)", **encode_in_process(stems, both, pool)},
        {"name": f"v2 zstd+AES ({topic}, v2 broker's bucket)", **bucket_v2(v2_dir, topic, pool)},
        {"name": "v2 zstd+AES, producer lz4 batches", **bucket_v2(v2_dir, "json-lz4", pool)},
        {"name": "v2 zstd+AES, producer zstd batches", **bucket_v2(v2_dir, "json-zstd", pool)},
    ]
    for row in rows:
        row["ratio"] = row["stored"] / row["original"] if row["original"] else float("nan")
        row["log_ratio"] = row["log_stored"] / row["log_original"] if row["log_original"] else float("nan")
        row["stored_per_payload"] = row["stored"] / row["payload"] if row["payload"] else float("nan")
        row["original_per_payload"] = row["original"] / row["payload"] if row["payload"] else float("nan")
    return {"topic": topic, "rows": rows}


def run_verify(brokers: dict[str, Any]) -> dict[str, Any] | None:
    """``strata bucket verify``'s full mode over each broker's store, once the brokers are stopped: MB/s of
    stored bytes read (v2: hashed, decrypted, decompressed, batch-checked; v1: batch-checked)."""
    import io

    from strata.tiered.storage.local import LocalTieredStorage
    from strata.tools.bucket_verify import BucketVerifier, VerifyOptions

    if brokers.get("backend") != "local":
        return None
    _log("[5] strata bucket verify, full mode")
    out: dict[str, Any] = {}
    for fmt, remote in brokers["remote_dirs"].items():
        rsm = LocalTieredStorage()
        configs: dict[str, Any] = {"dir": remote, "events.log.enable": "false"}
        if fmt == "v2":  # the v2 broker's key pair (run_brokers: <work>/keys, the broker in <work>/broker-v2)
            keys = Path(remote).parent.parent / "keys"
            configs.update({"compression.enabled": "true", "encryption.enabled": "true",
                            "encryption.key.pair.id": "k1", "encryption.key.pairs": "k1",
                            "encryption.key.pairs.k1.public.key.file": str(keys / "k1.pub.pem"),
                            "encryption.key.pairs.k1.private.key.file": str(keys / "k1.pem")})
        rsm.configure(configs)
        report = BucketVerifier(rsm, rsm.object_format, VerifyOptions(seed=1), err=io.StringIO()).run()
        out[fmt] = {"segments": report.segments, "bytes_read": report.bytes_read, "elapsed_s": report.elapsed_s,
                    "mb_per_s": report.mb_per_s, "findings": len(report.findings)}
        _log(f"  {fmt}: {report.segments} segments, {report.mb_per_s:.0f} MB/s, {len(report.findings)} findings")
    return out


def format_bucket(b: dict[str, Any]) -> str:
    header = (f"{'name':<44} {'segs':>4} {'original MiB':>12} {'stored MiB':>10} {'stored/orig':>11} "
              f"{'.log s/o':>8} {'orig B/payload B':>16} {'stored B/payload B':>18} {'.log zstd':>9}")
    lines = [header, "-" * len(header)]
    for r in b["rows"]:
        lines.append(f"{r['name']:<44} {r['segments']:>4} {r['original'] / MiB:>12.2f} {r['stored'] / MiB:>10.2f} "
                     f"{r['ratio']:>11.3f} {r['log_ratio']:>8.3f} {r['original_per_payload']:>16.3f} "
                     f"{r['stored_per_payload']:>18.3f} {str(r['log_compression']):>9}")
    return "\n".join(lines)


# -- part 4: the codec ----------------------------------------------------------------------------

LEADER_EPOCH_CHECKPOINT = b"0\n1\n0 0\n"


def build_segment(directory: Path, pool: Pool, target_bytes: int, batch_bytes: int = 64 * 1024) -> tuple[Any, Any]:
    """A rolled segment of uncompressed JSON-event batches just under ``target_bytes``: (metadata, data)."""
    from strata.common import ManualClock, ManualScheduler, TopicPartition
    from strata.config import LogConfig
    from strata.log.loader import load_partition_log
    from strata.protocol.records import BatchBuilder
    from strata.tiered.api import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

    clock = ManualClock()
    part_dir = directory / "codec-0"
    plog = load_partition_log(part_dir, TopicPartition("codec", 0), LogConfig(), clock, ManualScheduler())
    try:
        batches: list[bytes] = []
        built, i = 0, 0
        while built < min(target_bytes, DISTINCT_BATCH_BYTES):
            builder, n = BatchBuilder(), 0
            while n < batch_bytes:
                value = pool.values[i % len(pool.values)]
                builder.append(value, key=None, timestamp=clock.milliseconds() + i)
                n += len(value)
                i += 1
            batch = builder.build()
            batches.append(batch)
            built += len(batch)
        k = 0
        while plog.segments[-1].size + len(batches[k % len(batches)]) <= target_bytes:
            plog.append_as_leader(batches[k % len(batches)], leader_epoch=0)
            k += 1
        plog.roll()
        segment, next_base = plog.segments[0], plog.segments[1].base_offset
        size, max_ts = segment.size, segment.max_timestamp_so_far
    finally:
        plog.local_log.close_handlers()
    stem = part_dir / f"{0:020d}"
    snapshot = part_dir / f"{next_base:020d}.snapshot"
    if not snapshot.exists():
        snapshot.write_bytes(b"")
    tp = TopicIdPartition(uuid.uuid4(), "codec", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), 0, next_base - 1, max_ts, 0,
                                  int(time.time() * 1000), size, {0: 0})
    data = LogSegmentData(log_segment=stem.with_suffix(".log"), offset_index=stem.with_suffix(".index"),
                          time_index=stem.with_suffix(".timeindex"), transaction_index=None,
                          producer_snapshot_index=snapshot, leader_epoch_index=LEADER_EPOCH_CHECKPOINT)
    return md, data


def fetch_windows(log: bytes, window: int) -> list[tuple[int, int]]:
    """The broker's read-ahead pattern: ``[start, start + window)``, each start the end of the last whole
    batch of the window before."""
    ends = []  # end of every batch
    position = 0
    while position + 12 <= len(log):
        _, length = struct.unpack_from(">qi", log, position)
        position += 12 + length
        ends.append(position)
    out, start = [], 0
    while start < len(log):
        end = min(start + window, len(log))
        out.append((start, end))
        if end == len(log):
            break
        i = bisect.bisect_right(ends, end) - 1
        start = ends[i] if ends[i] > start else end
    return out


def run_codec(work: Path, cfg: BenchConfig, pool: Pool) -> dict[str, Any]:
    import cProfile
    import pstats

    import cramjam
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from tests.support.keys import v2_configs

    from strata.tiered.api import RemoteLogSegmentId, RemoteLogSegmentState
    from strata.tiered.reader import fetch_remote_segment_bytes
    from strata.tiered.storage.local import LocalTieredStorage
    from strata.tiered.storage.object_format import ObjectFormat, _scan_batches

    _log(f"[4/4] codec: one {cfg.codec_mib} MiB segment, in-process")
    started = time.perf_counter()
    md, data = build_segment(work / "codec-log", pool, cfg.codec_mib * MiB)
    log_path = data.log_segment
    log = log_path.read_bytes()
    size = len(log)
    chunk = cfg.chunk_mib * MiB
    _log(f"  built a {size / MiB:.1f} MiB segment ({size} B, offsets 0..{md.end_offset}) in "
         f"{time.perf_counter() - started:.1f} s")
    keys = v2_configs(work / "keys-codec", chunk_size=chunk)
    fmt_both = ObjectFormat.from_config(keys)
    fmt_aes = ObjectFormat.from_config({**keys, "compression.enabled": "false"})
    sources: dict[str, Path | bytes] = {"log": log_path, "index": data.offset_index, "timeindex": data.time_index,
                                        "snapshot": data.producer_snapshot_index,
                                        "leader_epoch_checkpoint": data.leader_epoch_index}

    # the stored form, for the decode rows and the primitives
    with fmt_both.encode(md, sources) as encoded:
        obj = encoded.objects["log"]
        stored_log = obj.read_bytes() if isinstance(obj, Path) else obj
        manifest = encoded.manifest
    chunks = [log[i:i + chunk] for i in range(0, size, chunk)]
    zchunks = [bytes(cramjam.zstd.compress(c)) for c in chunks]
    data_key = os.urandom(32)
    aes = AESGCM(data_key)
    iv, aad = os.urandom(12), os.urandom(40)
    enc_z = [aes.encrypt(iv, z, aad) for z in zchunks]
    windows = fetch_windows(log, cfg.window_mib * MiB)
    decoded = sum(min((-(-b // chunk)) * chunk, size) - (a // chunk) * chunk for a, b in windows)
    amplification = decoded / sum(b - a for a, b in windows)

    def get_range(a: int, b: int) -> bytes:
        return stored_log[a:b]

    rsms: dict[str, Any] = {}
    for name, extra in (("v1", {}), ("v2", keys)):
        rsm = LocalTieredStorage()
        rsm.configure({"dir": str(work / f"codec-store-{name}"), "broker.id": 0, **extra})
        rsms[name] = rsm

    def fresh() -> Any:
        return dataclasses.replace(md, remote_log_segment_id=RemoteLogSegmentId.generate_new(md.topic_id_partition))

    stored_md: dict[str, Any] = {}
    for name, rsm in rsms.items():
        m = fresh()
        custom = rsm.copy_log_segment_data(m, data)
        stored_md[name] = dataclasses.replace(m, custom_metadata=custom,
                                              state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    copied: list[tuple[Any, Any]] = []

    def rsm_copy(name: str) -> Callable[[], None]:
        rsm = rsms[name]

        def copy() -> None:
            m = fresh()
            copied.append((rsm, m))
            rsm.copy_log_segment_data(m, data)
        return copy

    def drop_copies() -> None:  # untimed, after each copy run
        while copied:
            rsm, m = copied.pop()
            rsm.delete_log_segment_data(m)

    def rsm_fetch(name: str) -> Callable[[], None]:
        rsm, m = rsms[name], stored_md[name]

        def fetch() -> None:
            for a, b in windows:
                fetch_remote_segment_bytes(rsm, m, a, b)
        return fetch

    def encode(fmt: ObjectFormat) -> Callable[[], None]:
        def run() -> None:
            with fmt.encode(md, sources):
                pass
        return run

    def read_whole() -> None:
        fmt_both.read(manifest, "log", get_range)

    def read_windows() -> None:
        for a, b in windows:
            fmt_both.read(manifest, "log", get_range, a, b)

    def read_file() -> None:
        with open(log_path, "rb") as f:
            while f.read(chunk):
                pass

    plain_ct = [aes.encrypt(iv, c, aad) for c in chunks]
    steps: list[tuple[str, str, Callable[[], Any]]] = [
        # (group, name, fn)
        ("copy", "v1 RSM copy (local store, fsync)", rsm_copy("v1")),
        ("copy", "v2 RSM copy zstd+AES (local store, fsync)", rsm_copy("v2")),
        ("encode", "ObjectFormat.encode zstd+AES (.log + indexes)", encode(fmt_both)),
        ("encode", "ObjectFormat.encode AES only", encode(fmt_aes)),
        ("encode", "  zstd compress (cramjam, 4 MiB chunks)", lambda: [cramjam.zstd.compress(c) for c in chunks]),
        ("encode", "  zstd compress at level 1 (not what v2 does)",
         lambda: [cramjam.zstd.compress(c, level=1) for c in chunks]),
        ("encode", "  AES-GCM encrypt of the zstd chunks", lambda: [aes.encrypt(iv, z, aad) for z in zchunks]),
        ("encode", "  SHA-256 of the stored .log", lambda: hashlib.sha256(stored_log).digest()),
        ("encode", "  batch header scan (_scan_batches)", lambda: _scan_batches(log_path)),
        ("encode", "  read the .log in 4 MiB chunks", read_file),
        ("encode", "  one memory copy of the segment (new buffer)", lambda: bytearray(log)),
        ("encode", "  AES-GCM encrypt, plain chunks", lambda: [aes.encrypt(iv, c, aad) for c in chunks]),
        ("encode", "  SHA-256 of the original .log", lambda: hashlib.sha256(log).digest()),
        ("fetch", "v1 RSM fetch, 8 MiB windows", rsm_fetch("v1")),
        ("fetch", "v2 RSM fetch, 8 MiB windows", rsm_fetch("v2")),
        ("decode", "ObjectFormat.read, 8 MiB windows", read_windows),
        ("decode", "ObjectFormat.read, whole .log", read_whole),
        ("decode", "  AES-GCM decrypt of the stored chunks", lambda: [aes.decrypt(iv, e, aad) for e in enc_z]),
        ("decode", "  zstd decompress (cramjam, 4 MiB chunks)", lambda: [cramjam.zstd.decompress(z) for z in zchunks]),
        ("decode", "  AES-GCM decrypt, plain chunks", lambda: [aes.decrypt(iv, e, aad) for e in plain_ct]),
    ]
    samples: dict[str, list[float]] = {name: [] for _, name, _ in steps}
    for _, name, fn in steps:  # warm-up of the store's first-time paths (directories, manifest, data key)
        if name.startswith(("v1 RSM", "v2 RSM")):
            fn()
            drop_copies()
    for rep in range(cfg.codec_reps):
        for _, name, fn in (steps if rep % 2 == 0 else steps[::-1]):
            os.sync()
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
            drop_copies()
    rows = []
    for group, name, _ in steps:
        s = samples[name]
        rows.append({"group": group, "name": name.strip(), "indent": name.startswith("  "), "samples_s": s,
                     "median_ms": statistics.median(s) * 1e3, "mb_per_s": [size / x / 1e6 for x in s],
                     "median_mb_per_s": size / statistics.median(s) / 1e6})
    profile_text = io.StringIO()
    profiler = cProfile.Profile()
    profiler.enable()
    encode(fmt_both)()
    rsm_fetch("v2")()
    profiler.disable()
    pstats.Stats(profiler, stream=profile_text).sort_stats("tottime").print_stats(14)
    hot = [" ".join(line.split()) for line in profile_text.getvalue().splitlines() if re.match(r"\s+\d", line)]
    for rsm in rsms.values():
        rsm.close()
    stored_total = sum(o.stored_size for o in manifest.objects.values())
    zstd_ratio = sum(len(z) for z in zchunks) / size
    level1_ratio = sum(len(cramjam.zstd.compress(c, level=1)) for c in chunks) / size
    return {"segment_bytes": size, "stored_bytes": stored_total, "chunk_bytes": chunk, "windows": len(windows),
            "zstd_default_ratio": zstd_ratio, "zstd_level1_ratio": level1_ratio,
            "window_bytes": cfg.window_mib * MiB, "decode_amplification": amplification, "rows": rows,
            "profile_top": hot[:14]}


def format_codec(c: dict[str, Any]) -> str:
    rows = {r["name"]: r for r in c["rows"]}
    ref = {"copy": "v1 RSM copy (local store, fsync)", "encode": "ObjectFormat.encode zstd+AES (.log + indexes)",
           "fetch": "v1 RSM fetch, 8 MiB windows", "decode": "ObjectFormat.read, 8 MiB windows"}
    header = f"{'name':<52} {'MB/s median (min-max)':>24} {'ms/segment':>10} {'vs':>6}"
    lines = [header, "-" * len(header)]
    for r in c["rows"]:
        rate = f"{r['median_mb_per_s']:.0f} ({min(r['mb_per_s']):.0f}-{max(r['mb_per_s']):.0f})"
        base = rows[ref[r["group"]]]
        vs = "" if base is r else (f"{100 * r['median_ms'] / base['median_ms']:.0f}%" if r["indent"]
                                  else f"x{r['median_mb_per_s'] / base['median_mb_per_s']:.2f}")
        name = ("  " if r["indent"] else "") + r["name"]
        lines.append(f"{name:<52} {rate:>24} {r['median_ms']:>10.1f} {vs:>6}")

    def ms(name: str) -> float:
        return float(rows[name]["median_ms"])

    def best(name: str) -> float:  # the breakdown uses each row's best run: the least disturbed by other load
        return float(min(rows[name]["samples_s"])) * 1e3

    enc = best("ObjectFormat.encode zstd+AES (.log + indexes)")
    parts = (best("zstd compress (cramjam, 4 MiB chunks)") + best("AES-GCM encrypt of the zstd chunks")
             + best("SHA-256 of the stored .log") + best("batch header scan (_scan_batches)")
             + best("read the .log in 4 MiB chunks"))
    windows = best("ObjectFormat.read, 8 MiB windows")
    amp = c["decode_amplification"]
    dec_parts = amp * (best("AES-GCM decrypt of the stored chunks") + best("zstd decompress (cramjam, 4 MiB chunks)"))
    lines += [
        f"segment {c['segment_bytes'] / MiB:.1f} MiB, stored (zstd+AES, all objects) {c['stored_bytes'] / MiB:.2f} "
        f"MiB ({c['stored_bytes'] / c['segment_bytes']:.3f}); 'vs': indented rows = share of the group's reference "
        "time, others = speed relative to it",
        f"encode, best runs: zstd + AES + SHA-256 + scan + file read = {parts:.1f} ms, ObjectFormat.encode "
        f"{enc:.1f} ms: the format's own code (copies, joins, index objects, manifest) ~ {enc - parts:.1f} ms "
        f"({100 * (enc - parts) / enc:.0f}%; below zero = within this machine's run-to-run noise)",
        f"decode, best runs: {c['windows']} windows of {c['window_bytes'] / MiB:.0f} MiB decode {amp:.2f}x their "
        f"bytes (whole 4 MiB chunks); {amp:.2f} x (AES decrypt + zstd decompress) = {dec_parts:.1f} ms of "
        f"ObjectFormat.read's {windows:.1f} ms; the rest, {windows - dec_parts:.1f} ms "
        f"({100 * (windows - dec_parts) / windows:.0f}%), is copies and slicing",
        f"zstd: cramjam's default level (3) stores the .log at {c['zstd_default_ratio']:.3f} of its size in "
        f"{ms('zstd compress (cramjam, 4 MiB chunks)'):.0f} ms; level 1 at {c['zstd_level1_ratio']:.3f} in "
        f"{ms('zstd compress at level 1 (not what v2 does)'):.0f} ms",
        "cProfile of one v2 encode + one v2 windowed RSM fetch, top by own time "
        "(ncalls tottime percall cumtime percall where):",
    ]
    lines += [f"  {line[:150]}" for line in c["profile_top"]]
    return "\n".join(lines)


# -- the benchmark --------------------------------------------------------------------------------


NOTES = """\
notes: upload MB/s = .log bytes / the broker's summed per-segment copy times (its "copied ... in N ms" log
       lines: RLMM events + copy_log_segment_data); CPU-s/GiB = broker process CPU from the config change to
       the last copy (x: v2 over v1). consume MB/s = record values / wall time from offset 0 (the active
       segment, a few hundred KiB, is read locally), confluent-kafka or bare Fetch requests (no record
       parsing: the broker's side); CPU-s/GiB per GiB of values.
       Both brokers run all the time (the idle one costs little); runs alternate; os.sync() before each.
       The codec rows run in this process on a page-cached segment; the primitives are timed on the same
       4 MiB chunks and their ms add up to a v2 encode / decode."""


def environment() -> dict[str, Any]:
    import confluent_kafka
    import cramjam
    import cryptography

    return bench_report.environment(confluent_kafka=confluent_kafka.version()[0],
                                    librdkafka=confluent_kafka.libversion()[0], cramjam=cramjam.__version__,
                                    cryptography=cryptography.__version__,
                                    loadavg_at_start=" ".join(f"{x:.2f}" for x in os.getloadavg()))


def run(work: Path, cfg: BenchConfig, only: str | None) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    report: dict[str, Any] = {"config": asdict(cfg), "environment": environment()}
    try:
        started = time.perf_counter()
        pool = Pool(json_events(POOL_EVENTS))
        report["workload"] = {"events": len(pool.values), "mean_value_bytes": pool.mean,
                              "pool_bytes": pool.prefix[-1]}
        _log(f"  {len(pool.values)} JSON events, {pool.mean:.0f} B each on average ({time.perf_counter() - started:.1f}"
             f" s), e.g. {pool.values[1].decode()}")
        phases: dict[str, float] = {"workload": time.perf_counter() - started}
        report["phase_s"] = phases
        if only in (None, "broker"):
            if cfg.profile:
                shutil.rmtree(PROFILE_DIR, ignore_errors=True)
            brokers = run_brokers(work / "brokers", cfg, pool)
            report["brokers"] = {k: v for k, v in brokers.items() if k != "remote_dirs"}
            phases.update(brokers.get("phase_s", {}))
            if cfg.profile:
                report["profile"] = {f"{fmt}-{phase}": summarize_py_spy(path, focus)
                                     for fmt in FORMATS for phase, focus in (("upload", "copy_log_segment_data"),
                                                                             ("consume", "strata/tiered/reader.py"))
                                     if (path := PROFILE_DIR / f"{fmt}-{phase}.txt").exists()}
            else:
                phase = time.perf_counter()
                report["bucket"] = run_bucket(work / "bucket", brokers, cfg, pool)
                phases["bucket"] = time.perf_counter() - phase
                phase = time.perf_counter()
                report["verify"] = run_verify(brokers)
                phases["verify"] = time.perf_counter() - phase
        if only in (None, "codec"):
            phase = time.perf_counter()
            report["codec"] = run_codec(work / "codec", cfg, pool)
            phases["codec"] = time.perf_counter() - phase
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def print_report(report: dict[str, Any]) -> None:
    print()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in report["environment"].items()))
    brokers = report.get("brokers")
    if brokers:
        print()
        print(f"1. upload to the remote store, {brokers['backend']} backend (target: v2 MB/s / v1 MB/s >= 0.8)")
        print(format_rate_rows(brokers["upload"]["results"]))
        print()
        print(f"2. consume from the remote tier, {brokers['backend']} backend (target: v2 / v1 >= 0.8)")
        print(format_rate_rows(brokers["consume"]["results"]))
        for fmt, runs in brokers["consume"]["runs"].items():
            fetches = statistics.median(r["metrics"][REMOTE_FETCHES] for r in runs)
            reader_ms = statistics.median(r["metrics"][READER_TIMER + "_sum"] / max(1, r["metrics"][REMOTE_FETCHES])
                                          for r in runs)
            hits = statistics.median(r["metrics"][PREFETCH_HITS] for r in runs)
            print(f"  {fmt}: {fetches:.0f} remote reads per run, {reader_ms:.1f} ms each in a reader thread "
                  f"(median), read-ahead hits {hits:.0f}; local active segment "
                  f"{max(brokers['consume']['local_active_bytes'][fmt].values()) / 1024:.0f} KiB at most")
        for fmt, warnings in brokers.get("warnings", {}).items():
            for w in warnings:
                print(f"  broker {fmt}: {w[:200]}")
    if report.get("bucket"):
        print()
        print("3. bucket bytes on the JSON workload (stored / original = what v1 stores; objects + manifests)")
        print(format_bucket(report["bucket"]))
    if report.get("verify"):
        print()
        print("5. strata bucket verify, full mode (every stored byte read, hashed, decoded and batch-checked)")
        for fmt, v in report["verify"].items():
            print(f"  {fmt}: {v['segments']} segments, {v['bytes_read'] / MiB:.1f} MiB read in {v['elapsed_s']:.2f} s"
                  f" = {v['mb_per_s']:.0f} MB/s, {v['findings']} findings")
    if report.get("codec"):
        print()
        print("4. codec throughput, no broker (MB/s of original bytes)")
        print(format_codec(report["codec"]))
    if report.get("profile"):
        print()
        print("py-spy of the brokers (samples attributed to the source line they are on; bench/out/"
              "object_format_profile/):")
        for name, summary in report["profile"].items():
            print(format_py_spy(name, summary))
    print()
    print("seconds per phase: " + ", ".join(f"{k} {v:.1f}" for k, v in report.get("phase_s", {}).items()))
    print(NOTES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 runs of 24 MiB (8 MiB segments) per format, a 16 MiB codec segment")
    parser.add_argument("--only", choices=["broker", "codec"], help="parts 1-3 (brokers) or part 4 (codec)")
    parser.add_argument("--s3", action="store_true", help="parts 1 and 2 on SeaweedFS (tiered_bench's) instead of "
                                                          "the local directory store")
    parser.add_argument("--reps", type=int, help="upload runs (topics) per format, and consume runs")
    parser.add_argument("--topic-mib", type=int, help="MiB of rolled segments per upload topic")
    parser.add_argument("--segment-mib", type=int, help="segment.bytes of the upload topics, in MiB")
    parser.add_argument("--codec-mib", type=int, help="size of the codec part's segment, in MiB")
    parser.add_argument("--profile", action="store_true",
                        help="one upload and one consume run per format with py-spy recording the brokers, then "
                             "part 4 on a 16 MiB segment")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "object-format", help="scratch (deleted)")
    parser.add_argument("--json", type=Path, default=OUT / "object_format_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides: dict[str, Any] = {k: v for k, v in (("reps", args.reps), ("consume_reps", args.reps),
                                                   ("topic_mib", args.topic_mib), ("segment_mib", args.segment_mib),
                                                   ("codec_mib", args.codec_mib)) if v is not None}
    if args.profile:
        if _py_spy() is None:
            parser.error("--profile needs py-spy (pip install py-spy)")
        overrides.update(reps=1, consume_reps=1, codec_reps=1, codec_mib=min(cfg.codec_mib, 16))
    cfg = dataclasses.replace(cfg, s3=args.s3, profile=args.profile, **overrides)
    json_path = OUT / "object_format_profile.json" if args.profile and args.json == parser.get_default("json") \
        else args.json
    return run_and_save(lambda: run(args.dir, cfg, args.only), print_report, quick=args.quick, json_path=json_path)


if __name__ == "__main__":
    sys.exit(main())
