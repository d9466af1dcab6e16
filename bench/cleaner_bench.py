"""Log cleaner (compaction): cleaning throughput against plain file I/O, and ``__consumer_offsets`` load
time after many commits, with the cleaner against without it.

    .venv/bin/python bench/cleaner_bench.py [--quick] [--only clean|profile|offsets] [--cleaner-mib N]
                                            [--lz4-mib N] [--profile-mib N] [--reps N] [--dedupe-mib N]
                                            [--commits N] [--restarts N] [--dir PATH] [--json PATH]

1. **Clean**: a dirty compacted log of ``--cleaner-mib`` MiB (default 1024) built with the log layer
   (``load_partition_log``, ``PartitionLog.append_as_leader``): batches of 100 records with ~100 B JSON-like
   values and keys drawn uniformly from ``records / 10`` keys (so ~10% of the records survive), 64 MiB
   segments, ``cleanup.policy=compact``, every segment rolled (all of it cleanable), closed cleanly. Each
   repetition cleans a fresh copy of it (``shutil.copytree``, untimed) with one ``Cleaner`` (the class a
   cleaner thread runs; here its log-thread calls run inline) over the whole dirty section, repeating
   ``Cleaner.clean`` from the returned offset while the dedupe map filled early (passes are reported).
   Baseline, same run, alternating order: the same ``.log`` files read once with ``os.read`` and the same
   number of bytes written once with ``os.write`` to a new file (1 MiB chunks), after an untimed such copy.
   MB/s = 10^6 bytes of the dirty log per second; CPU-s/GiB = ``time.process_time`` per GiB of the dirty
   log. A second, smaller log with
   the same records in lz4 batches (``--lz4-mib``, 0 to skip) is cleaned the same way. After each cleaning
   the log is checked: exactly one record per distinct key is left below the active segment. (The lz4 log
   holds as many records as an uncompressed log of ``--lz4-mib`` would; its MB/s counts its on-disk bytes,
   so records/s is the figure to compare with the uncompressed log.)
2. **Profile**: one cleaning of a ``--profile-mib`` log (default 64) under cProfile: the top functions by
   cumulative and by own time (bench/out/cleaner_profile.pstats, beside the JSON).
3. **Offsets load**: a real broker (``strata serve``, 5 ``__consumer_offsets`` partitions,
   ``offsets.topic.segment.bytes`` 1 MiB, ``log.cleaner.backoff.ms=200``) takes ``--commits`` commit records
   (default 1,000,000: 100 groups x 100 partitions of one topic x 100 rounds; each OffsetCommit v8 a "simple"
   generation -1 commit of all 100 partitions for one group, 64 requests pipelined on one connection). With
   the cleaner the run waits until ``__consumer_offsets`` is compacted (its ``.log`` bytes under the bound of
   tests/compaction/test_offsets_topic_bounded.py and unchanged for 2 s); then the broker is stopped (SIGTERM)
   and started again ``--restarts`` times, timing from the process start until an OffsetFetch of all groups
   returns every committed offset exactly. Baseline, same run: the same commits on a broker with
   ``log.cleaner.enable=false`` (the uncompacted topic). A broker with the topic and no commits shows the
   fixed start-up cost. The coordinator loads ``__consumer_offsets`` before the broker listens, so the
   ready line already includes the load.

``os.sync()`` runs untimed before every timed run; reads are served from the page cache.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import os
import pstats
import random
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tests.broker.harness import BrokerProcess  # noqa: E402
from tests.compaction.test_offsets_topic_bounded import (  # noqa: E402
    broker_props,
    commit_rounds,
    create_topic,
    expected_offsets,
    fetch_committed,
    offsets_topic_bytes,
    size_bound,
    wait_until_bounded,
)

import report as bench_report  # noqa: E402
from report import MiB, Result, run_and_save, summarize  # noqa: E402
from strata.common import ManualScheduler, SystemClock, TopicPartition  # noqa: E402
from strata.config import LogConfig  # noqa: E402
from strata.log.cleaner.cleaner import Cleaner, CleanerStats, Throttler  # noqa: E402
from strata.log.cleaner.manager import build_log_to_clean, cleanable_offsets  # noqa: E402
from strata.log.cleaner.offset_map import OffsetMap  # noqa: E402
from strata.log.loader import load_partition_log  # noqa: E402
from strata.log.partition_log import PartitionLog  # noqa: E402
from strata.protocol.records import BatchBuilder, CompressionType  # noqa: E402

GiB = 1024 * MiB
IO_CHUNK = 1 * MiB
TP = TopicPartition("compacted", 0)
TOPIC = "consumed"


@dataclass(frozen=True)
class BenchConfig:
    cleaner_mib: int = 1024
    lz4_mib: int = 256
    profile_mib: int = 64
    segment_mib: int = 64
    records_per_batch: int = 100
    value_bytes: int = 100
    records_per_key: int = 10  # keys = records / 10: ~10% of the records are the latest of their key
    dedupe_mib: int = 512
    reps: int = 3
    seed: int = 20240611
    # offsets load
    groups: int = 100
    partitions: int = 100
    rounds: int = 100
    offsets_segment_bytes: int = 1024 * 1024
    backoff_ms: int = 200
    restarts: int = 3

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(cleaner_mib=64, lz4_mib=16, profile_mib=16, segment_mib=16, reps=2, groups=20, partitions=50,
                   rounds=100, offsets_segment_bytes=64 * 1024, restarts=2)

    @property
    def commits(self) -> int:
        return self.groups * self.partitions * self.rounds


def _log(msg: str) -> None:
    print(msg, flush=True)


# -- 1. the dirty log ------------------------------------------------------------------------------


def log_config(cfg: BenchConfig) -> LogConfig:
    return LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": str(cfg.segment_mib * MiB)})


@dataclass
class DirtyLog:
    path: Path
    compression: str
    log_bytes: int  # the .log files
    records: int
    keys_drawn_from: int
    distinct_keys: int
    segments: int  # rolled, all cleanable (the empty active one not counted)
    log_end_offset: int
    build_s: float


def _value(rng: random.Random, key: int, i: int, size: int) -> bytes:
    """~``size`` bytes of JSON-like text: compressible about as much as typical event payloads."""
    head = b'{"id":%d,"seq":%d,"user":"u-%08x","action":"update","v":"' % (key, i, rng.getrandbits(32))
    pad = size - len(head) - 2
    return head + (b"%016x" % rng.getrandbits(64) * (pad // 16 + 1))[:pad] + b'"}'


def build_dirty_log(path: Path, cfg: BenchConfig, mib: int, compression: CompressionType) -> DirtyLog:
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    plog = load_partition_log(path, TP, log_config(cfg), SystemClock(), ManualScheduler())
    rng = random.Random(cfg.seed)
    target = mib * MiB
    # records per MiB from one uncompressed sample batch: the key space is sized on the records the log
    # will hold (for lz4 the same record count as an uncompressed log of the same size would hold).
    sample = BatchBuilder()
    for k in range(cfg.records_per_batch):
        sample.append(_value(rng, k, k, cfg.value_bytes), key=b"key-%09d" % k, timestamp=0)
    record_bytes = len(sample.build()) / cfg.records_per_batch
    keys = max(1, int(target / record_bytes) // cfg.records_per_key)
    seen = bytearray(keys)
    now = int(time.time() * 1000)
    written = records = 0
    randrange = rng.randrange
    expected_records = int(target / record_bytes)
    while (records < expected_records) if compression != CompressionType.NONE else (written < target):
        builder = BatchBuilder(compression=compression)
        for _ in range(cfg.records_per_batch):
            k = randrange(keys)
            seen[k] = 1
            builder.append(_value(rng, k, records, cfg.value_bytes), key=b"key-%09d" % k, timestamp=now)
            records += 1
        batch = builder.build()
        written += len(batch)
        plog.append_as_leader(batch, 0)
    plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    leo = plog.log_end_offset
    segments = len(plog.segments) - 1
    log_bytes = sum(s.size for s in plog.segments)
    plog.close()
    os.sync()
    return DirtyLog(path, compression.name.lower(), log_bytes, records, keys, sum(seen), segments, leo,
                    time.perf_counter() - started)


def open_copy(dirty: DirtyLog, path: Path, cfg: BenchConfig) -> PartitionLog:
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(dirty.path, path)
    os.sync()
    return load_partition_log(path, TP, log_config(cfg), SystemClock(), ManualScheduler(),
                              recovery_point=dirty.log_end_offset, high_watermark=dirty.log_end_offset,
                              had_clean_shutdown=True)


def release(plog: PartitionLog) -> None:
    plog.local_log.close_handlers()
    shutil.rmtree(plog.dir, ignore_errors=True)


# -- 1. cleaning ------------------------------------------------------------------------------------


@dataclass
class CleanRun:
    seconds: float
    cpu_s: float
    passes: int
    bytes_read: int  # the rewrite pass (every segment below the map's end)
    map_bytes_read: int  # the map pass (the dirty section)
    bytes_written: int
    map_s: float
    buffer_utilization: float
    records_left: int


def clean_fully(plog: PartitionLog, cfg: BenchConfig) -> CleanRun:
    """Clean the whole dirty section, as many ``Cleaner.clean`` passes as a full map makes necessary."""
    clock = SystemClock()
    cleaner = Cleaner(0, OffsetMap(cfg.dedupe_mib * MiB), Throttler(0), clock, lambda fn: fn(), lambda _p: None)
    first_uncleanable = plog.segments[-1].base_offset
    end = plog.log_start_offset
    passes = 0
    totals = CleanerStats()
    map_s = util = 0.0
    cpu0, t0 = time.process_time(), time.perf_counter()
    while end < first_uncleanable:
        offsets = cleanable_offsets(plog, end, clock.milliseconds())
        ltc = build_log_to_clean(plog, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, False)
        end, stats = cleaner.clean(ltc)
        passes += 1
        totals.bytes_read += stats.bytes_read
        totals.map_bytes_read += stats.map_bytes_read
        totals.bytes_written += stats.bytes_written
        map_s += stats.map_elapsed_s
        util = max(util, stats.buffer_utilization)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    left = sum(h.records_count for s in plog.segments[:-1] for _, h in s.log.iter_headers(0))
    return CleanRun(seconds, cpu, passes, totals.bytes_read, totals.map_bytes_read, totals.bytes_written, map_s,
                    util, left)


def plain_copy(files: list[Path], dest: Path) -> tuple[float, float]:
    """Read ``files`` once and write as many bytes once (os.read / os.write, 1 MiB): (seconds, CPU s)."""
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                while chunk := os.read(fd, IO_CHUNK):
                    os.write(out, chunk)
                    total += len(chunk)
            finally:
                os.close(fd)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        os.close(out)
        dest.unlink()
    assert total == sum(p.stat().st_size for p in files)
    return elapsed, cpu


def bench_clean(work: Path, cfg: BenchConfig, dirty: DirtyLog) -> dict:
    files = sorted(dirty.path.glob("*.log"))
    label = f"{dirty.compression}, {dirty.log_bytes / MiB:.0f} MiB on disk"
    base = Result(f"copy: read + write ({label})", "baseline", nbytes=dirty.log_bytes,
                  note="os.read of the .log files once, os.write of as many bytes once, 1 MiB chunks")
    subj = Result(f"clean: Cleaner.clean ({label})", "subject", nbytes=dirty.log_bytes, baseline=base.name,
                  informational=True, note="map pass + rewrite pass + swaps, whole dirty section")
    base_cpu: list[float] = []
    runs: list[CleanRun] = []

    def run_base() -> None:
        # An untimed copy first: the timed one then writes into page-cache pages this VM has touched before
        # (first-touched guest pages cost a host fault each; without it the copy varied 500-3,800 MB/s).
        plain_copy(files, work / "plain-copy.bin")
        os.sync()
        s, c = plain_copy(files, work / "plain-copy.bin")
        base.samples_s.append(s)
        base_cpu.append(c)

    def run_clean() -> None:
        plog = open_copy(dirty, work / "clean-copy", cfg)
        try:
            os.sync()
            run = clean_fully(plog, cfg)
            assert plog.log_end_offset == dirty.log_end_offset
            assert run.records_left == dirty.distinct_keys, (run.records_left, dirty.distinct_keys)
        finally:
            release(plog)
        subj.samples_s.append(run.seconds)
        runs.append(run)

    for rep in range(cfg.reps):
        order = [run_base, run_clean] if rep % 2 == 0 else [run_clean, run_base]
        for fn in order:
            fn()
        r = runs[-1]
        _log(f"  rep {rep + 1}: clean {subj.rates[-1]:.1f} MB/s ({r.cpu_s:.1f} CPU s, {r.passes} pass(es), map "
             f"{r.map_s:.1f} s), copy {base.rates[-1]:.0f} MB/s ({base_cpu[-1]:.2f} CPU s)")
    rows = summarize([base, subj], 0.0)
    gib = dirty.log_bytes / GiB
    rows[0]["cpu_s"] = base_cpu
    rows[0]["cpu_s_per_gib"] = statistics.median(base_cpu) / gib
    rows[1]["cpu_s"] = [r.cpu_s for r in runs]
    rows[1]["cpu_s_per_gib"] = statistics.median(r.cpu_s for r in runs) / gib
    return {"log": {**asdict(dirty), "path": str(dirty.path)}, "results": rows, "runs": [asdict(r) for r in runs]}


# -- 2. profile -------------------------------------------------------------------------------------


def _func_name(func: tuple[str, int, str]) -> str:
    path, line, name = func
    if path == "~":
        return name
    for marker in ("/src/", "/site-packages/", "/lib/python"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{line}({name})"


def profile_clean(work: Path, cfg: BenchConfig, path: Path, top: int = 15) -> dict:
    dirty = build_dirty_log(work / "profile-dirty", cfg, cfg.profile_mib, CompressionType.NONE)
    plog = open_copy(dirty, work / "profile-copy", cfg)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        run = clean_fully(plog, cfg)
        profiler.disable()
    finally:
        release(plog)
        shutil.rmtree(dirty.path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(path)
    st = pstats.Stats(profiler, stream=io.StringIO())
    total = st.total_tt  # type: ignore[attr-defined]
    entries = [{"func": _func_name(f), "ncalls": nc, "tottime_s": tt, "cumtime_s": ct}
               for f, (_cc, nc, tt, ct, _callers) in st.stats.items()]  # type: ignore[attr-defined]
    by_own = sorted(entries, key=lambda e: -e["tottime_s"])[:top]
    by_cum = sorted(entries, key=lambda e: -e["cumtime_s"])[:top]
    return {"mib": cfg.profile_mib, "log_bytes": dirty.log_bytes, "profiled_s": total,
            "run_under_profiler": asdict(run), "pstats_file": str(path), "top_own": by_own,
            "top_cumulative": by_cum}


# -- 3. offsets load --------------------------------------------------------------------------------


def _wait_stable(logs: Path, hold_s: float = 2.0, timeout_s: float = 300.0) -> dict[str, Any]:
    """Poll the __consumer_offsets sizes until the .log bytes have not changed for ``hold_s``."""
    deadline = time.monotonic() + timeout_s
    last = offsets_topic_bytes(logs)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = offsets_topic_bytes(logs)
        if now["log_bytes"] != last["log_bytes"] or now["segments"] != last["segments"]:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= hold_s:
            return now
    raise RuntimeError(f"__consumer_offsets still changing after {timeout_s} s: {last}")


def _restart_and_time(b: BrokerProcess, cfg: BenchConfig, expected: dict[str, dict[int, int]]) -> dict[str, float]:
    t0 = time.perf_counter()
    b.stop()
    stop_s = time.perf_counter() - t0
    os.sync()
    t0 = time.perf_counter()
    b.start()
    ready_s = time.perf_counter() - t0
    while True:
        got = fetch_committed(b.bootstrap, TOPIC, cfg.groups, cfg.partitions)
        if got == expected:
            break
        if time.perf_counter() - t0 > 300:
            raise RuntimeError("committed offsets not served after 300 s")
        time.sleep(0.01)
    return {"stop_s": stop_s, "ready_s": ready_s, "served_s": time.perf_counter() - t0}


def offsets_variant(work: Path, cfg: BenchConfig, name: str, cleaner: bool, commit: bool) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    b = BrokerProcess(work, broker_props(cfg.offsets_segment_bytes, cleaner=cleaner, backoff_ms=cfg.backoff_ms))
    logs = work / "logs"
    out: dict[str, Any] = {"name": name, "cleaner": cleaner, "commits": cfg.commits if commit else 0}
    try:
        b.start()
        create_topic(b.bootstrap, TOPIC, cfg.partitions)
        expected: dict[str, dict[int, int]] = {}
        if commit:
            t0 = time.perf_counter()
            written = commit_rounds(b.bootstrap, TOPIC, cfg.groups, cfg.partitions, cfg.rounds)
            out["commit_s"] = time.perf_counter() - t0
            assert written == cfg.commits
            out["after_commits"] = offsets_topic_bytes(logs)
            expected = expected_offsets(cfg.groups, cfg.partitions, cfg.rounds)
            if cleaner:
                bound = size_bound(cfg.groups * cfg.partitions, cfg.offsets_segment_bytes)
                t0 = time.perf_counter()
                wait_until_bounded(logs, bound, timeout_s=300)
                out["bound"] = bound
                out["compacted"] = _wait_stable(logs)
                out["compacted_after_s"] = time.perf_counter() - t0 - 2.0  # less the stable hold
            else:
                out["compacted"] = _wait_stable(logs)
            assert fetch_committed(b.bootstrap, TOPIC, cfg.groups, cfg.partitions) == expected
        else:
            expected = {f"group-{g:03d}": dict.fromkeys(range(cfg.partitions), -1) for g in range(cfg.groups)}
            out["compacted"] = offsets_topic_bytes(logs)
        out["restarts"] = []
        for i in range(cfg.restarts):
            r = _restart_and_time(b, cfg, expected)
            out["restarts"].append(r)
            _log(f"  {name}: restart {i + 1}: offsets served {r['served_s']:.2f} s after start (ready line "
                 f"{r['ready_s']:.2f} s; stop took {r['stop_s']:.2f} s)")
        out["after_restarts"] = offsets_topic_bytes(logs)
        out["served_s_median"] = statistics.median(r["served_s"] for r in out["restarts"])
    finally:
        b.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


def bench_offsets(work: Path, cfg: BenchConfig) -> dict:
    variants = []
    for name, slug, cleaner, commit in (("cleaner on", "on", True, True),
                                        ("cleaner off (baseline)", "off", False, True),
                                        ("no commits (start-up cost)", "empty", True, False)):
        _log(f"  {name}: {cfg.commits if commit else 0} commit records ({cfg.groups} groups x {cfg.partitions} "
             f"partitions x {cfg.rounds} rounds), offsets.topic.segment.bytes {cfg.offsets_segment_bytes}")
        v = offsets_variant(work / slug, cfg, name, cleaner, commit)
        if "commit_s" in v:
            _log(f"    committed in {v['commit_s']:.1f} s ({cfg.commits / v['commit_s']:.0f} records/s); "
                 f".log bytes after the commits {v['after_commits']['log_bytes']}, settled "
                 f"{v['compacted']['log_bytes']} in {v['compacted']['segments']} segments")
        variants.append(v)
    return {"variants": variants}


# -- report -----------------------------------------------------------------------------------------


def format_clean(c: dict) -> str:
    lines = [bench_report.format_table(c["results"])]
    d = c["log"]
    rows = c["results"]
    runs = c["runs"]
    r0 = runs[len(runs) // 2]
    lines.append(f"  CPU-s/GiB: clean {rows[1]['cpu_s_per_gib']:.1f}, copy {rows[0]['cpu_s_per_gib']:.2f}; "
                 f"cleaner passes {sorted({r['passes'] for r in runs})}, map pass "
                 f"{statistics.median(r['map_s'] for r in runs):.1f} s of "
                 f"{statistics.median(r['seconds'] for r in runs):.1f} s, dedupe map peak "
                 f"{100 * max(r['buffer_utilization'] for r in runs):.1f}% of {c.get('dedupe_mib', '?')} MiB")
    lines.append(f"  records/s: clean {d['records'] / statistics.median(r['seconds'] for r in runs):,.0f}; "
                 f"{d['log_bytes'] / d['records']:.1f} B per record on disk")
    lines.append(f"  log: {d['records']} records in {d['segments']} segments, keys drawn from {d['keys_drawn_from']} "
                 f"({d['distinct_keys']} distinct, all left exactly once after cleaning); built in "
                 f"{d['build_s']:.0f} s; rewrite read {r0['bytes_read'] / MiB:.0f} MiB, map read "
                 f"{r0['map_bytes_read'] / MiB:.0f} MiB, wrote {r0['bytes_written'] / MiB:.1f} MiB")
    return "\n".join(lines)


def format_profile(p: dict) -> str:
    u = p["run_under_profiler"]
    lines = [f"2. one cleaning of {p['log_bytes'] / MiB:.0f} MiB under cProfile ({p['profiled_s']:.1f} s profiled, "
             f"{u['seconds']:.1f} s wall with the profiler; {p['pstats_file']})",
             "  top by cumulative time (ncalls, own s, cumulative s):"]
    for e in p["top_cumulative"]:
        lines.append(f"    {e['ncalls']:>9} {e['tottime_s']:7.2f} {e['cumtime_s']:7.2f}  {e['func']}"[:170])
    lines.append("  top by own time:")
    for e in p["top_own"]:
        lines.append(f"    {e['ncalls']:>9} {e['tottime_s']:7.2f} {e['cumtime_s']:7.2f}  {e['func']}"[:170])
    return "\n".join(lines)


def format_offsets(o: dict) -> str:
    lines = [f"  {'':<28} {'commits':>9} {'.log MiB after commits':>23} {'.log MiB settled':>17} {'segments':>9} "
             f"{'allocated MiB':>14} {'offsets served after start, s (median; all)':>44}"]
    for v in o["variants"]:
        after = v.get("after_commits", v["compacted"])["log_bytes"] / MiB
        s = v["compacted"]
        served = ", ".join(f"{r['served_s']:.2f}" for r in v["restarts"])
        lines.append(f"  {v['name']:<28} {v['commits']:>9} {after:23.2f} {s['log_bytes'] / MiB:17.2f} "
                     f"{s['segments']:>9} {s['allocated_bytes'] / MiB:14.2f} {v['served_s_median']:>10.2f} ({served})")
    by = {v["name"]: v for v in o["variants"]}
    on, off, empty = by["cleaner on"], by["cleaner off (baseline)"], by["no commits (start-up cost)"]
    base = empty["served_s_median"]
    lines.append(f"  load time beyond an empty broker's start: cleaner on {on['served_s_median'] - base:.2f} s, "
                 f"off {off['served_s_median'] - base:.2f} s; on-disk .log bytes on/off "
                 f"{on['compacted']['log_bytes'] / off['compacted']['log_bytes']:.3f}; compacted under the bound "
                 f"({on['bound']} B) {on['compacted_after_s']:.1f} s after the last commit")
    return "\n".join(lines)


NOTES = """\
notes: MB/s = 10^6 B/s of the dirty log's .log bytes; ratio = median cleaner rate / median copy rate. The
       cleaner reads the dirty section twice (map, then rewrite) and decodes every record in Python both times;
       the copy reads and writes each byte once in C. Old segments are renamed .deleted and their removal is
       left to the scheduler (not timed, as on the broker where it is delayed by file.delete.delay.ms).
       Offsets: served = from the broker process's start to an OffsetFetch of every group answering all
       offsets exactly; the coordinator replays __consumer_offsets before the broker listens."""


def print_report(report: dict) -> None:
    env = report["environment"]
    cfg = report["config"]
    print()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    for key in ("clean", "clean_lz4"):
        if key in report:
            print()
            print(f"1. cleaning a dirty log ({cfg['records_per_batch']} records/batch, ~{cfg['value_bytes']} B values, "
                  f"keys = records/{cfg['records_per_key']}, {cfg['segment_mib']} MiB segments, dedupe buffer "
                  f"{cfg['dedupe_mib']} MiB)")
            print(format_clean({**report[key], "dedupe_mib": cfg["dedupe_mib"]}))
    if "profile" in report:
        print()
        print(format_profile(report["profile"]))
    if "offsets" in report:
        print()
        print(f"3. __consumer_offsets after {cfg['groups'] * cfg['partitions'] * cfg['rounds']} commit records, "
              f"restarted {cfg['restarts']} times")
        print(format_offsets(report["offsets"]))
    print()
    print(NOTES)


def run(work: Path, cfg: BenchConfig, only: str | None, pstats_path: Path) -> dict:
    report: dict[str, Any] = {"config": asdict(cfg), "environment": environment()}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        if only in (None, "clean"):
            for key, mib, codec in (("clean", cfg.cleaner_mib, CompressionType.NONE),
                                    ("clean_lz4", cfg.lz4_mib, CompressionType.LZ4)):
                if mib <= 0:
                    continue
                _log(f"[1/3] clean: building a {mib} MiB dirty log ({codec.name.lower()})")
                dirty = build_dirty_log(work / f"dirty-{key}", cfg, mib, codec)
                _log(f"  {dirty.records} records, {dirty.log_bytes / MiB:.0f} MiB in {dirty.segments} segments, "
                     f"{dirty.distinct_keys} distinct keys, built in {dirty.build_s:.0f} s")
                report[key] = bench_clean(work, cfg, dirty)
                shutil.rmtree(dirty.path, ignore_errors=True)
        if only in (None, "profile"):
            _log(f"[2/3] profile: one cleaning of {cfg.profile_mib} MiB under cProfile")
            report["profile"] = profile_clean(work, cfg, pstats_path)
        if only in (None, "offsets"):
            _log(f"[3/3] offsets: load time after {cfg.commits} commit records, cleaner on / off")
            report["offsets"] = bench_offsets(work / "offsets", cfg)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def environment() -> dict:
    """With a digest of the cleaner's source: the numbers belong to that code."""
    digest = hashlib.sha1()
    for path in sorted((ROOT / "src" / "strata" / "log" / "cleaner").glob("*.py")):
        digest.update(path.read_bytes())
    return bench_report.environment(loadavg_at_start=" ".join(f"{x:.2f}" for x in os.getloadavg()),
                                    cleaner_source_sha1=digest.hexdigest()[:12])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="64 MiB cleaned (lz4 16 MiB, profile 16 MiB), 2 reps; 100,000 commits, 2 restarts")
    parser.add_argument("--only", choices=["clean", "profile", "offsets"], help="run one part")
    parser.add_argument("--cleaner-mib", type=int, help="dirty log size, MiB (default 1024)")
    parser.add_argument("--lz4-mib", type=int,
                        help="lz4 dirty log: as many records as an uncompressed log of N MiB (default 256; 0: none)")
    parser.add_argument("--profile-mib", type=int, help="profiled cleaning, MiB (default 64)")
    parser.add_argument("--dedupe-mib", type=int, help="the cleaner's dedupe buffer, MiB (default 512)")
    parser.add_argument("--reps", type=int, help="cleanings (and copies) per log")
    parser.add_argument("--commits", type=int,
                        help="commit records for the offsets part (groups x partitions x rounds: the rounds scale)")
    parser.add_argument("--restarts", type=int, help="timed restarts per offsets broker")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "cleaner", help="scratch directory (deleted)")
    parser.add_argument("--json", type=Path, default=OUT / "cleaner_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides: dict[str, Any] = {k: v for k, v in (
        ("cleaner_mib", args.cleaner_mib), ("lz4_mib", args.lz4_mib), ("profile_mib", args.profile_mib),
        ("dedupe_mib", args.dedupe_mib), ("reps", args.reps), ("restarts", args.restarts)) if v is not None}
    if args.commits is not None:
        overrides["rounds"] = max(1, args.commits // (cfg.groups * cfg.partitions))
    cfg = replace(cfg, **overrides)
    pstats_path = args.json.with_name(args.json.stem.removesuffix("_bench") + "_profile.pstats")
    return run_and_save(lambda: run(args.dir, cfg, args.only, pstats_path), print_report, quick=args.quick,
                        json_path=args.json)


if __name__ == "__main__":
    sys.exit(main())
