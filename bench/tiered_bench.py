"""Tiered storage (KIP-405): segment copy, consume from the remote tier, and restart time.

    .venv/bin/python bench/tiered_bench.py [--quick] [--only copy|consume|restart] [--no-s3]
                                           [--copy-reps N] [--consume-mib N] [--consume-reps N]
                                           [--restart-segments N] [--broker-restart-segments N]
                                           [--set KEY=VALUE ...] [--dir PATH] [--json PATH]

Every rate is shown as a ratio against a baseline measured in the same run (bench/report.py),
for the ``local`` backend and for ``s3`` against a SeaweedFS server this benchmark starts on
127.0.0.1 and stops by its pid (the s3 rows are skipped, with the reason printed, when it
cannot start):

1. **Segment copy** (target >= 0.9): real 8 and 64 MiB segments of 1 KiB records built by
   Strata's own log (tests/support/segments.py). Subject: the RSM's ``copy_log_segment_data``
   (the .log plus .index, .timeindex, producer snapshot and leader-epoch checkpoint). Baseline
   (the issue's "raw put of the same bytes to the same backend"): a raw put of every one of those
   files, from memory, one after another, each a complete put of its own - local: write + fsync +
   rename + directory fsync into the same tree (the durability the RSM gives every file); s3:
   obstore's put (single PUT, or multipart with the RSM's part size and concurrency above it) on
   the RSM's own store. MB/s counts all those bytes on both sides. What the RSM does beyond a
   plain put per file shows up as a ratio above 1: the local RSM fsyncs the directory once per
   segment and starts the writeback of each file as it writes it (sync_file_range), the S3 RSM
   sends the index PUTs beside the .log's. An info row keeps the earlier baseline, a raw put of the
   .log alone (MB/s of the .log bytes; the index files are then pure overhead for the RSM), and
   one extra copy per row has its steps timed (write/fsync per file, directory fsync, or PUTs).
2. **Consume from the remote tier** (targets >= 0.9 local store, >= 0.85 s3): a broker process with tiering on, two
   topics with ``segment.bytes`` 8 MiB and the same records (1 KiB, produced with linger.ms=5,
   batch.size 1 MiB): one tiered with ``local.retention.bytes=1`` (consumed once every segment
   but the active one was uploaded and deleted locally), one not tiered (the baseline). Each is
   consumed from offset 0 with confluent-kafka (fetch.max.bytes 50 MiB,
   max.partition.fetch.bytes 8 MiB). An untimed first pass warms the page cache and the remote
   index cache (its times are shown as info rows). The broker's /metrics give the number of
   remote reads and the time its reader threads spent in them, which splits a remote fetch into
   "reading the store" and "everything else", and the read-ahead hits and misses: the broker runs
   with its defaults, read-ahead of the next windows included (``remote.log.reader.prefetch.*``;
   ``--set remote.log.reader.prefetch.total.size.bytes=0`` measures without it); for s3 also the
   CPU SeaweedFS spent per pass (it shares this machine's cores). The ``s3+cache`` rows run the s3
   backend behind the broker's disk chunk cache (``rsm.config.fetch.chunk.cache.class=disk``, 4 MiB
   chunks; strata.tiered.chunk_cache): the untimed first pass reads the store and fills the cache (the
   cold figure, an info row), the timed passes are served from it. An info pass with
   max.partition.fetch.bytes 1 MiB (the consumer default: fetches start mid-segment) counts the
   store reads per fetch.
   2b. The same read path in this process, stage by stage, over a 64 MiB segment in 8 MiB fetches:
   a raw ranged read of the store, the RSM's fetch stream, ``RemoteLogReader.read``, and the
   encoding of the records into a Fetch response (bytes, as remote reads are sent, against the
   sendfile splice local reads use), plus a cProfile of the reader and the encoder.
3. **Restart time**: bench/rlmm_restart_bench.py (the RLMM alone over an in-memory metadata
   topic, 100k segments: Kafka's full replay against Strata's snapshot + tail), then a real broker
   restart with N (100k) remote segments of 100 partitions of live, untiered topics (the broker's
   orphan sweep deletes those of unknown topics): the metadata records are appended to
   ``__remote_log_metadata``'s logs while the broker is down, one record per batch as the broker
   writes them, then the broker is started and timed to its ready line and to its RLMM's "Loaded
   remote log metadata" line (it loads in the background) - once with the RLMM snapshot removed
   (full replay, Kafka's behaviour) and once with the snapshot its previous shutdown wrote -
   against restarts of the same broker with an empty metadata topic.

MB/s = 10^6 bytes/s. ``os.sync()`` runs untimed before every timed run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import shutil
import statistics
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
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
from broker_bench import Server  # noqa: E402
from report import MiB, Result, run_and_save, summarize  # noqa: E402

READY = re.compile(r"strata broker ready on ([\d.]+):(\d+)")
METRICS_PORT = re.compile(r"metrics on http://[\d.]+:(\d+)/metrics")
RLMM_LOADED = re.compile(r"Loaded remote log metadata in ([\d.]+) s: (\d+) records replayed, snapshot (used|not used)")
COPIED = re.compile(r"copied (\S+) \[(\d+)\.\.(\d+)\] \((\d+) B\) to remote storage in (\d+) ms")
OFFLOAD_TIMEOUT_S = 180.0
SEAWEED_VOLUME_MB = 1024
RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class BenchConfig:
    copy_segment_mib: tuple[int, ...] = (8, 64)
    copy_reps: int = 7
    record_bytes: int = 1024
    records_per_batch: int = 64  # the built segments: ~64 KiB batches
    consume_mib: int = 200
    consume_segment_mib: int = 8
    consume_reps: int = 7
    restart_segments: int = 100_000  # rlmm_restart_bench (in-memory metadata topic)
    restart_reps: int = 3
    broker_restart_segments: int = 100_000  # real broker restart
    broker_restart_reps: int = 2
    copy_target: float = 0.9
    consume_target: float = 0.9  # issue 31: local-directory store; s3 (with or without the chunk cache) 0.85
    consume_target_s3: float = 0.85
    s3: bool = True
    broker_props: tuple[tuple[str, str], ...] = ()  # --set: extra props of the consume brokers

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(copy_reps=3, consume_mib=64, consume_reps=2, restart_segments=20_000, restart_reps=2,
                   broker_restart_segments=10_000, broker_restart_reps=1)


def _log(msg: str) -> None:
    print(msg, flush=True)


def _timed_sync(fn: Callable[[], Any]) -> float:
    os.sync()  # no writeback of an earlier run's data inside a timed one
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- SeaweedFS -----------------------------------------------------------------------------------


@contextlib.contextmanager
def seaweedfs(work: Path, enabled: bool) -> Iterator[Any]:
    """A started SeaweedFS (stopped by pid at the end), or None with the reason printed."""
    if not enabled:
        yield None
        return
    try:
        from tests.support.seaweedfs import SeaweedFS

        class BenchSeaweedFS(SeaweedFS):
            """The test wrapper's server with 1 GiB volumes instead of 64 MB: with 64 MB volumes SeaweedFS
            allocates a volume every ~64 MB written, and those stalls (measured: 64 MiB PUTs spread over
            46-150 MB/s, median 59, against 93-174, median 140 with 1 GiB volumes) are noise here."""

            def _args(self) -> list[str]:
                return [a.replace("-master.volumeSizeLimitMB=64", f"-master.volumeSizeLimitMB={SEAWEED_VOLUME_MB}")
                        for a in super()._args()]

        server = BenchSeaweedFS(work / "seaweedfs")
        server.start()
    except Exception as e:  # noqa: BLE001 - any failure to start means: no s3 rows, said clearly
        _log(f"s3: SKIPPED - SeaweedFS could not start: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        yield None
        return
    _log(f"s3: SeaweedFS (weed mini) pid {server.proc.pid} on {server.endpoint}, up in {server.startup_s:.1f} s")
    try:
        yield server
    finally:
        server.close()


def s3_rsm_props(server: Any, prefix: str) -> dict[str, str]:
    from tests.support.seaweedfs import ACCESS_KEY, SECRET_KEY

    props = {k: str(v) for k, v in server.rsm_config().items() if k != "broker.id"}
    props.update({"aws.access.key.id": ACCESS_KEY, "aws.secret.access.key": SECRET_KEY, "key.prefix": prefix})
    return props


# -- 1. segment copy -----------------------------------------------------------------------------


def build_segments(work: Path, cfg: BenchConfig) -> dict[int, Any]:
    """Real rolled segments just below each target size (a broker's segment is at most segment.bytes)."""
    from tests.support.segments import segment_factory

    make = segment_factory(work / "segments")
    record_on_disk = cfg.record_bytes + 18  # key "key-N", varint lengths, attributes, deltas
    batch_on_disk = cfg.records_per_batch * record_on_disk + 61
    out = {}
    for mib in cfg.copy_segment_mib:
        batches = max(1, int(mib * MiB * 0.995) // batch_on_disk)
        out[mib] = make(batches=batches, records=cfg.records_per_batch, value_size=cfg.record_bytes,
                        topic=f"copy-{mib}")
    return out


def copy_files(seg: Any) -> list[tuple[str, bytes]]:
    """(suffix, bytes) of every file ``copy_log_segment_data`` uploads for ``seg``, the .log first."""
    d = seg.data
    files = [("log", d.log_segment.read_bytes()), ("index", d.offset_index.read_bytes()),
             ("timeindex", d.time_index.read_bytes()), ("snapshot", d.producer_snapshot_index.read_bytes()),
             ("leader_epoch_checkpoint", bytes(d.leader_epoch_index))]
    if d.transaction_index is not None:
        files.append(("txnindex", d.transaction_index.read_bytes()))
    return files


def _raw_local_put(payload: bytes, target: Path) -> None:
    """What the RSM promises, done plainly: temp file, write, fsync, rename, fsync the directory."""
    tmp = target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dfd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


@contextlib.contextmanager
def _patched(obj: Any, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """``obj.name`` wrapped for the block; nothing when there is no such function (an older tree)."""
    original = getattr(obj, name, None)
    if original is None:
        yield
        return
    setattr(obj, name, wrapper(original))
    try:
        yield
    finally:
        setattr(obj, name, original)


Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


def _stage_timer(stages: dict[str, float], label: Callable[..., str]) -> Wrapper:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                key = label(*args, **kwargs)
                stages[key] = stages.get(key, 0.0) + time.perf_counter() - started
        return timed
    return wrap


def _suffix_of(path: Any) -> str:
    name = str(path).split("/")[-1]
    return name.split(".tmp-")[0].rsplit(".", 1)[-1]


def copy_stages(backend: str, rsm: Any, seg: Any) -> dict[str, float]:
    """One extra, untimed-for-the-ratio copy with its steps timed (seconds per step)."""
    stages: dict[str, float] = {}
    seg = seg.with_new_id()
    os.sync()
    if backend == "local":
        import strata.tiered.storage.local as mod

        write = _stage_timer(stages, lambda fd, target, src: f"write .{_suffix_of(target)}")
        fsync = _stage_timer(stages, lambda fd, target: f"fsync .{_suffix_of(target)}")
        with _patched(mod, "_write_source", write), _patched(mod, "_fsync_file", fsync), \
                _patched(mod, "_fsync_dir", _stage_timer(stages, lambda d: "fsync dir")):
            started = time.perf_counter()
            rsm.copy_log_segment_data(seg.metadata, seg.data)
            total = time.perf_counter() - started
        rsm.delete_log_segment_data(seg.metadata)
    else:
        import obstore

        with _patched(rsm, "_put", _stage_timer(stages, lambda key, src: f"put .{_suffix_of(key)}")), \
                _patched(obstore, "delete", _stage_timer(stages, lambda store, key: "delete .txnindex (absent)")):
            started = time.perf_counter()
            rsm.copy_log_segment_data(seg.metadata, seg.data)
            total = time.perf_counter() - started
        rsm.delete_log_segment_data(seg.metadata)
    stages["total"] = total
    return stages


def make_rsm(backend: str, work: Path, server: Any | None, prefix: str) -> Any:
    if backend == "local":
        from strata.tiered.storage.local import LocalTieredStorage

        rsm = LocalTieredStorage()
        rsm.configure({"dir": str(work / "local-store"), "broker.id": 0})
        return rsm
    from strata.tiered.storage.s3 import S3RemoteStorageManager

    rsm = S3RemoteStorageManager()
    rsm.configure(s3_rsm_props(server, prefix))
    return rsm


def run_copy(work: Path, cfg: BenchConfig, server: Any | None, segments: dict[int, Any]) -> dict:
    """Part 1: RSM copy_log_segment_data against raw puts of the same files, per backend and size."""
    import obstore

    Put = Callable[[list[tuple[str, bytes]], Any, int], Callable[[], None]]
    backends: list[tuple[str, Any, Put, Callable[[], None]]] = []
    local = make_rsm("local", work, None, "")

    def local_raw(files: list[tuple[str, bytes]], seg: Any, rep: int) -> Callable[[], None]:
        directory = local.partition_dir(seg.tp)
        directory.mkdir(parents=True, exist_ok=True)
        targets = [(payload, directory / f"raw-{rep}-{uuid.uuid4().hex}.{suffix}") for suffix, payload in files]

        def put_all() -> None:
            for payload, target in targets:
                _raw_local_put(payload, target)
        return put_all

    def local_cleanup() -> None:
        for p in (work / "local-store").glob("*/*/raw-*"):
            p.unlink()

    backends.append(("local", local, local_raw, local_cleanup))
    if server is not None:
        s3 = make_rsm("s3", work, server, "copy-bench/")

        def s3_raw(files: list[tuple[str, bytes]], seg: Any, rep: int) -> Callable[[], None]:
            name = uuid.uuid4().hex
            puts = [(f"copy-bench/raw/{name}.{suffix}", payload, len(payload) > s3.part_size)
                    for suffix, payload in files]

            def put_all() -> None:
                for key, payload, multipart in puts:
                    obstore.put(s3.store, key, payload, use_multipart=multipart, chunk_size=s3.part_size,
                                max_concurrency=s3.concurrency)
            return put_all

        backends.append(("s3", s3, s3_raw, lambda: None))

    results: list[Result] = []
    stages: dict[str, dict[str, float]] = {}
    for backend, rsm, raw, cleanup in backends:
        for mib, seg in segments.items():
            files = copy_files(seg)
            log_only = files[:1]
            nbytes = sum(len(payload) for _, payload in files)
            log_bytes = len(files[0][1])
            how = ("write+fsync+rename+dir fsync per file, from memory" if backend == "local" else
                   ("multipart .log" if log_bytes > getattr(rsm, "part_size", 0) else "single PUTs")
                   + " via obstore, from memory")
            base = Result(f"copy {backend} {mib} MiB: raw put, all files", "baseline", nbytes=nbytes,
                          note=f"{len(files)} files one after another: {how}")
            subj = Result(f"copy {backend} {mib} MiB: RSM copy", "subject", nbytes=nbytes, baseline=base.name,
                          note="copy_log_segment_data: .log + 4 index/snapshot files")
            base_log = Result(f"copy {backend} {mib} MiB: raw put, .log only", "baseline", nbytes=log_bytes,
                              note="the earlier baseline: the index files are overhead")
            subj_log = Result(f"copy {backend} {mib} MiB: RSM copy vs .log", "subject", nbytes=log_bytes,
                              baseline=base_log.name, informational=True, note="the RSM copy's times, .log bytes")
            copies: list[Any] = []

            def rsm_copy(seg: Any = seg, rsm: Any = rsm, copies: list[Any] = copies) -> Callable[[], None]:
                fresh = seg.with_new_id()
                copies.append(fresh)
                return lambda: rsm.copy_log_segment_data(fresh.metadata, fresh.data)

            # warm-up: first-time code paths, connections, the store's first allocations
            rsm_copy()()
            raw(files, seg, -1)()
            raw(log_only, seg, -2)()
            for rep in range(cfg.copy_reps):
                order = [(base, raw(files, seg, rep)), (subj, rsm_copy()), (base_log, raw(log_only, seg, rep))]
                for result, fn in (order if rep % 2 == 0 else order[::-1]):
                    result.samples_s.append(_timed_sync(fn))
                # untimed: drop what was written so the store does not grow run after run
                while copies:
                    rsm.delete_log_segment_data(copies.pop().metadata)
                cleanup()
            subj_log.samples_s = list(subj.samples_s)
            stages[f"{backend} {mib} MiB"] = copy_stages(backend, rsm, seg)
            results += [base, subj, base_log, subj_log]
            _log(f"  {backend} {mib} MiB: raw put of all {len(files)} files {base.median:.0f} MB/s, RSM copy "
                 f"{subj.median:.0f} MB/s (ratio {subj.median / base.median:.2f}); vs a raw put of the .log alone: "
                 f"{subj_log.median / base_log.median:.2f}")
    local.close()
    return {"results": summarize(results, cfg.copy_target), "stages_s": stages,
            "segment_bytes": {mib: seg.data.log_segment.stat().st_size for mib, seg in segments.items()}}


def format_copy_stages(stages: dict[str, dict[str, float]]) -> str:
    lines = ["where an RSM copy's time goes (one extra copy per row, its steps timed; ms):"]
    for name, st in stages.items():
        steps = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in st.items() if k != "total")
        lines.append(f"  {name:<12} total {st['total'] * 1e3:7.1f}: {steps}")
    return "\n".join(lines)


# -- 2b. the remote read path in-process ----------------------------------------------------------


def run_read_path(work: Path, backend: str, server: Any | None, seg: Any, reps: int) -> dict:
    """The broker's remote read path without the broker: RemoteLogReader.read over a real RLMM
    (in-memory metadata topic) and index cache, in 8 MiB fetches over a 64 MiB segment, against a
    raw ranged read of the same byte windows from the same store; plus the event-loop cost of
    encoding those records into a Fetch response (bytes) against a local fetch's (a sendfile splice)."""
    import cProfile
    import io
    import pstats

    import obstore

    from strata.protocol.build import make, zero_values
    from strata.protocol.frame import Splice, encode_response, response_class
    from strata.tiered.api import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
    from strata.tiered.index_cache import RemoteIndexCache
    from strata.tiered.metadata.memory import InMemoryMetadataTopic
    from strata.tiered.metadata.topic_based import TopicBasedRemoteLogMetadataManager
    from strata.tiered.reader import RemoteLogReader, fetch_remote_segment_bytes

    rsm = make_rsm(backend, work, server, "read-path/")
    seg = seg.with_new_id()
    md = seg.metadata
    tp = md.topic_id_partition
    rsm.copy_log_segment_data(md, seg.data)
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(work / f"rlmm-{backend}"), "broker.id": 0,
                    "remote.log.metadata.topic.num.partitions": 1, "remote.log.metadata.snapshot.enable": False})
    rlmm.set_metadata_topic(InMemoryMetadataTopic(1))
    rlmm.initialize()
    rlmm.on_partition_leadership_changes({tp}, set())
    rlmm.add_remote_log_segment_metadata(md)
    rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        md.remote_log_segment_id, int(time.time() * 1000), None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
    index_cache = RemoteIndexCache(rsm, work / f"index-cache-{backend}", 1 << 30)
    reader = RemoteLogReader(rsm, rlmm, index_cache)
    epochs = [(0, 0)]

    def reader_pass(keep: bool = False) -> list[Any]:
        """Fetch after fetch as a consumer does; results are dropped at once, as the broker drops a
        response's records once sent (keeping them would make every read touch fresh memory)."""
        out, offset = [], md.start_offset
        while offset <= md.end_offset:
            r = reader.read(tp, epochs, offset, PARTITION_FETCH_BYTES, True, False)
            if keep:
                out.append(r)
            offset = r.upper_bound_offset
        return out

    first = reader_pass(keep=True)  # also warms the index cache (one offset-index fetch)
    ranged_reads: list[tuple[int, int | None]] = []
    fetch_log_segment = rsm.fetch_log_segment

    def counting_fetch(m: Any, start: int, end: int | None = None) -> Any:
        ranged_reads.append((start, end))
        return fetch_log_segment(m, start, end)

    rsm.fetch_log_segment = counting_fetch
    reader_pass()
    del rsm.fetch_log_segment
    windows = [(r.start_position, len(r.records)) for r in first]
    nbytes = sum(n for _, n in windows)
    if backend == "local":
        path = rsm._path(md, "log")  # noqa: SLF001 - the stored object, read plainly

        def raw_pass() -> None:
            fd = os.open(path, os.O_RDONLY)
            try:
                for pos, n in windows:
                    os.pread(fd, n, pos)
            finally:
                os.close(fd)
    else:
        key = rsm.key(md, "log")

        def raw_pass() -> None:
            for pos, n in windows:
                obstore.get(rsm.store, key, options={"range": (pos, pos + n)}).bytes()

    def stream_pass() -> None:
        for pos, n in windows:
            fetch_remote_segment_bytes(rsm, md, pos, pos + n)

    cls = response_class(1, 12)

    def body(records: Any) -> Any:
        part = {"partition_index": 0, "error_code": 0, "high_watermark": md.end_offset + 1,
                "last_stable_offset": md.end_offset + 1, "log_start_offset": 0, "aborted_transactions": None,
                "preferred_read_replica": -1, "records": records}
        return make(cls, **{**zero_values(cls), "responses": [{"topic": tp.topic, "partitions": [part]}]})

    def encode_bytes_pass() -> None:
        for r in first:
            encode_response(body(r.records), 7)

    def encode_splice_pass() -> None:
        for r in first:
            splice = Splice(None, len(r.records))
            encode_response(body(splice.marker), 7, [splice])

    raw = Result(f"read {backend}: raw ranged read", "baseline", nbytes=nbytes,
                 note="os.pread" if backend == "local" else "obstore.get(range).bytes()")
    stream = Result(f"read {backend}: RSM fetch + read", "subject", nbytes=nbytes, baseline=raw.name,
                    informational=True, note="fetch_remote_segment_bytes (RSM stream, _read_fully)")
    full = Result(f"read {backend}: RemoteLogReader.read", "subject", nbytes=nbytes, baseline=raw.name,
                  informational=True, note="what a remote-read thread does per fetch")
    enc_splice = Result(f"encode {backend}: Fetch resp, splice", "baseline", nbytes=nbytes,
                        note="a local fetch: records go out by sendfile")
    enc_bytes = Result(f"encode {backend}: Fetch resp, bytes", "subject", nbytes=nbytes, baseline=enc_splice.name,
                       informational=True, note="a remote fetch: records copied into the frame")
    passes = [(raw, raw_pass), (stream, stream_pass), (full, reader_pass), (enc_splice, encode_splice_pass),
              (enc_bytes, encode_bytes_pass)]
    for rep in range(reps):
        for result, fn in (passes if rep % 2 == 0 else passes[::-1]):
            result.samples_s.append(_timed_sync(fn))
    profiler = cProfile.Profile()
    profiler.enable()
    reader_pass()
    encode_bytes_pass()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(8)
    hot = [line for line in text.getvalue().splitlines() if re.match(r"\s+\d+", line)][:8]
    index_cache.close()
    rlmm.close()
    rsm.delete_log_segment_data(md)
    rsm.close()
    return {"backend": backend, "fetches": len(windows), "bytes": nbytes, "ranged_reads": ranged_reads,
            "ranged_read_bytes": sum((e if e is not None else md.segment_size_in_bytes - 1) - st + 1
                                     for st, e in ranged_reads),
            "results": summarize([raw, stream, full, enc_splice, enc_bytes], 0.0), "profile_top": hot}


def format_read_path(info: dict) -> str:
    rows = {row["name"]: row for row in info["results"]}
    per = {name: statistics.median(row["samples_s"]) * 1e3 / info["fetches"] for name, row in rows.items()}
    b = info["backend"]
    lines = [f"  {b}: per 8 MiB fetch ({info['bytes'] / info['fetches'] / MiB:.2f} MiB of records): raw read "
             f"{per[f'read {b}: raw ranged read']:.2f} ms, RSM fetch+read {per[f'read {b}: RSM fetch + read']:.2f} ms, "
             f"RemoteLogReader.read {per[f'read {b}: RemoteLogReader.read']:.2f} ms; response encode on the event "
             f"loop {per[f'encode {b}: Fetch resp, bytes']:.2f} ms (bytes) vs "
             f"{per[f'encode {b}: Fetch resp, splice']:.2f} ms (splice)",
             f"  {b}: {info['fetches']} reader.read calls made {len(info['ranged_reads'])} ranged reads of the store, "
             f"{info['ranged_read_bytes'] / MiB:.1f} MiB for {info['bytes'] / MiB:.1f} MiB of records; the short "
             f"ones: {[e - st + 1 for st, e in info['ranged_reads'] if e is not None and e - st + 1 < MiB][:8]} B",
             f"  {b}: cProfile of one reader pass + encode, top functions by own time "
             "(ncalls tottime percall cumtime percall where):"]
    lines += [f"    {' '.join(line.split())}"[:160] for line in info["profile_top"]]
    return "\n".join(lines)


# -- brokers -------------------------------------------------------------------------------------


class Broker:
    """``python -m strata serve -v`` on 127.0.0.1 via broker_bench.Server (stopped by pid)."""

    def __init__(self, data_dir: Path, props: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir / "logs"),
                      "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5",
                      "log.segment.delete.delay.ms": "0", "metrics.port": "0", **props}
        self.server: Server | None = None
        self.metrics_port: int | None = None
        self.start_s: float | None = None

    def start(self) -> Broker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "strata", "serve", "-v"]
        for k, v in self.props.items():
            args += ["--set", f"{k}={v}"]
        log_path = self.data_dir / "broker.log"
        self._log_offset = log_path.stat().st_size if log_path.exists() else 0
        self.started_at = time.perf_counter()
        self.server = Server(args, log_path, READY)
        self.start_s = time.perf_counter() - self.started_at
        m = METRICS_PORT.search(self.start_log())
        self.metrics_port = int(m.group(1)) if m else None
        return self

    def start_log(self) -> str:
        """What the broker logged since its last start."""
        return (self.data_dir / "broker.log").read_bytes()[self._log_offset:].decode(errors="replace")

    def wait_for(self, pattern: re.Pattern[str], timeout_s: float = 120.0) -> tuple[re.Match[str], float]:
        """The first match of ``pattern`` in this start's log, and the seconds from process start to seeing it."""
        deadline = time.monotonic() + timeout_s
        while True:
            m = pattern.search(self.start_log())
            if m:
                return m, time.perf_counter() - self.started_at
            if self.server is None or self.server.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no {pattern.pattern!r} in the broker log:\n{self.start_log()[-3000:]}")
            time.sleep(0.005)

    def stop(self) -> float:
        started = time.perf_counter()
        if self.server is not None:
            self.server.stop()
            self.server = None
        return time.perf_counter() - started

    @property
    def bootstrap(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}"

    @property
    def pid(self) -> int:
        assert self.server is not None
        return self.server.proc.pid

    def log_text(self) -> str:
        return (self.data_dir / "broker.log").read_bytes().decode(errors="replace")

    def metrics(self) -> dict[str, float]:
        """The unlabelled series of /metrics (BrokerTopicMetrics: the all-topics one, not per topic)."""
        if self.metrics_port is None:
            return {}
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#") or "{" in line:
                continue
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
        return out

    def partition_logs(self, topic: str, partition: int = 0) -> list[Path]:
        return sorted((self.data_dir / "logs" / f"{topic}-{partition}").glob("*.log"))


CHUNK_CACHE_PROPS = {"rsm.config.fetch.chunk.cache.class": "disk", "rsm.config.fetch.chunk.cache.size": str(4 << 30)}
"""``s3+cache``: the s3 backend behind the broker's disk chunk cache (strata.tiered.chunk_cache), 4 MiB chunks."""


def tiered_props(backend: str, work: Path, server: Any | None, **extra: str) -> dict[str, str]:
    if backend == "s3+cache":
        backend, extra = "s3", {**CHUNK_CACHE_PROPS, **extra}
    props = {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": backend,
             "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
             "log.initial.task.delay.ms": "200", **extra}
    if backend == "local":
        props["rsm.config.dir"] = str(work / "remote")
    else:
        prefix = f"consume-{uuid.uuid4().hex[:6]}/"
        props.update({f"rsm.config.{k}": v for k, v in s3_rsm_props(server, prefix).items()})
    return props


# -- 2. consume ----------------------------------------------------------------------------------

FETCH_MAX_BYTES = 50 * MiB
PARTITION_FETCH_BYTES = 8 * MiB
READER_TIMER = "kafka_log_remote_RemoteLogManager_RemoteLogReaderFetchRateAndTimeMs"
REMOTE_FETCHES = "kafka_server_BrokerTopicMetrics_RemoteFetchRequestsPerSec_total"
REMOTE_FETCH_BYTES = "kafka_server_BrokerTopicMetrics_RemoteFetchBytesPerSec_total"
REMOTE_FETCH_ERRORS = "kafka_server_BrokerTopicMetrics_RemoteFetchErrorsPerSec_total"
REMOTE_EXPIRED = "kafka_server_DelayedRemoteFetchMetrics_ExpiresPerSec_total"
PREFETCH_HITS = "kafka_log_remote_RemoteLogManager_RemoteLogReaderPrefetchHitsPerSec_total"
PREFETCH_MISSES = "kafka_log_remote_RemoteLogManager_RemoteLogReaderPrefetchMissesPerSec_total"


def produce(bootstrap: str, topic: str, records: int, record_bytes: int) -> float:
    from confluent_kafka import Producer

    value = os.urandom(record_bytes)
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 * MiB, "acks": 1,
                  "compression.type": "none", "enable.idempotence": False, "log_level": 3,
                  "queue.buffering.max.kbytes": 1024 * 1024})
    p.list_topics(topic, timeout=10)
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"produce to {topic}: {left} records not delivered, errors {errors[:3]}")
    return elapsed


def bench_consumer(bootstrap: str, group_prefix: str, partition_fetch_bytes: int = PARTITION_FETCH_BYTES) -> Any:
    """The consumer every consume benchmark uses: big fetches, no commits, quiet."""
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group_prefix}-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "log_level": 3, "fetch.queue.backoff.ms": 10,
                     "fetch.max.bytes": FETCH_MAX_BYTES, "max.partition.fetch.bytes": partition_fetch_bytes,
                     "receive.message.max.bytes": FETCH_MAX_BYTES + 16 * MiB})


def consume_all(bootstrap: str, topic: str, records: int, partition_fetch_bytes: int = PARTITION_FETCH_BYTES,
                partitions: int = 1, group: str = "tiered-bench") -> float:
    """Seconds to read ``records`` records of ``topic`` from offset 0 of each of its first ``partitions``."""
    from confluent_kafka import TopicPartition

    c = bench_consumer(bootstrap, group, partition_fetch_bytes)
    try:
        c.list_topics(topic, timeout=10)
        started = time.perf_counter()
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while got < records:
            msgs = c.consume(min(10_000, records - got), 1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"consume {topic}: {m.error()}")
            got += len(msgs)
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {got} of {records} records of {topic} in {RUN_TIMEOUT_S}s")
        return time.perf_counter() - started
    finally:
        c.close()


def create_topics(bootstrap: str, topics: dict[str, dict[str, str]], partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1, config=c) for t, c in topics.items()],
                                  operation_timeout=10)
    for fut in futures.values():
        fut.result(timeout=30)


def wait_offloaded(broker: Broker, topic: str, timeout_s: float = OFFLOAD_TIMEOUT_S) -> float:
    """Until the partition directory holds only the active segment (the rest uploaded, then deleted)."""
    started = time.monotonic()
    while True:
        logs = broker.partition_logs(topic)
        if len(logs) == 1 and int(logs[0].name.split(".")[0]) > 0:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{topic} not offloaded after {timeout_s:.0f}s: {len(logs)} local segments left\n"
                               + broker.log_text()[-3000:])
        time.sleep(0.1)


def run_consume(work: Path, backend: str, cfg: BenchConfig, server: Any | None) -> dict:
    """Part 2 for one backend: one broker, a tiered and a plain topic with the same records."""
    records = cfg.consume_mib * MiB // cfg.record_bytes
    nbytes = records * cfg.record_bytes
    seg_bytes = str(cfg.consume_segment_mib * MiB)
    props = tiered_props(backend, work / f"broker-{backend}", server,
                         **{"rlmm.config.remote.log.metadata.topic.num.partitions": "5", **dict(cfg.broker_props)})
    broker = Broker(work / f"broker-{backend}", props)
    broker.start()
    remote_dir = work / f"broker-{backend}" / "remote"
    info: dict[str, Any] = {"backend": backend, "records": records}
    try:
        create_topics(broker.bootstrap, {
            "tiered": {"remote.storage.enable": "true", "segment.bytes": seg_bytes, "local.retention.bytes": "1"},
            "plain": {"remote.storage.enable": "false", "segment.bytes": seg_bytes},
        })
        info["produce_s"] = {t: produce(broker.bootstrap, t, records, cfg.record_bytes) for t in ("plain", "tiered")}
        info["offload_wait_s"] = wait_offloaded(broker, "tiered")
        local_segments = len(broker.partition_logs("plain"))
        active = broker.partition_logs("tiered")[0]
        copied = [(int(m.group(4)), int(m.group(5))) for m in COPIED.finditer(broker.log_text())]
        info.update(segments=local_segments, remote_segments=len(copied),
                    local_active_segment_bytes=active.stat().st_size,
                    broker_copy_mb_s=(sum(b for b, _ in copied) / max(1, sum(ms for _, ms in copied)) / 1e3)
                    if copied else None)
        _log(f"  {backend}: produced {records} x {cfg.record_bytes} B to each topic "
             f"(plain {nbytes / info['produce_s']['plain'] / 1e6:.0f} MB/s, tiered "
             f"{nbytes / info['produce_s']['tiered'] / 1e6:.0f} MB/s); {len(copied)} segments uploaded and "
             f"deleted locally {info['offload_wait_s']:.1f} s after the last ack; broker-side copy "
             f"{info['broker_copy_mb_s'] or 0:.0f} MB/s (sum of bytes / sum of copy times in its log)")

        base = Result(f"consume {backend}: local tier", "baseline", nbytes=nbytes,
                      note=f"not tiered, {local_segments} local 8 MiB segments, page cache")
        subj = Result(f"consume {backend}: remote tier", "subject", nbytes=nbytes, baseline=base.name,
                      note=f"{len(copied)} remote segments + the active one local")
        cold_base = Result(f"consume {backend}: local, first pass", "baseline", nbytes=nbytes, note="untimed warm-up")
        cold = Result(f"consume {backend}: remote, first pass", "subject", nbytes=nbytes, baseline=cold_base.name,
                      informational=True, note="remote index cache cold" + (
                          ", chunk cache empty (this pass fills it)" if backend == "s3+cache" else ""))
        small_base = Result(f"consume {backend}: local, 1 MiB fetches", "baseline", nbytes=nbytes,
                            note="max.partition.fetch.bytes 1 MiB (the consumer default)")
        small = Result(f"consume {backend}: remote, 1 MiB fetches", "subject", nbytes=nbytes,
                       baseline=small_base.name, informational=True, note="fetches start mid-segment")
        remote_runs: list[dict[str, float]] = []

        def measured(topic: str, result: Result) -> None:
            events_before = _fetch_events(remote_dir) if backend == "local" else None
            m0 = broker.metrics()
            cpu0, mine0 = _proc_cpu_s(broker.pid), _own_cpu_s()
            store0 = _proc_cpu_s(server.proc.pid) if server is not None and backend.startswith("s3") else None
            os.sync()
            fetch_bytes = MiB if result in (small, small_base) else PARTITION_FETCH_BYTES
            result.samples_s.append(consume_all(broker.bootstrap, topic, records, fetch_bytes))
            result.server_cpu_s.append(_proc_cpu_s(broker.pid) - cpu0)
            result.client_cpu_s.append(_own_cpu_s() - mine0)
            if topic == "tiered":
                m1 = broker.metrics()
                run = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in
                       (REMOTE_FETCHES, REMOTE_FETCH_BYTES, REMOTE_FETCH_ERRORS, REMOTE_EXPIRED,
                        READER_TIMER + "_count", READER_TIMER + "_sum", PREFETCH_HITS, PREFETCH_MISSES)}
                run["wall_s"] = result.samples_s[-1]
                run["server_cpu_s"] = result.server_cpu_s[-1]
                if store0 is not None:
                    run["store_cpu_s"] = _proc_cpu_s(server.proc.pid) - store0
                if events_before is not None:
                    after = _fetch_events(remote_dir)
                    run.update({f"events_{k}": after.get(k, 0) - events_before.get(k, 0) for k in after})
                run["pass"] = "first pass" if result is cold else "1 MiB fetches" if result is small else "timed pass"
                remote_runs.append(run)

        measured("plain", cold_base)
        measured("tiered", cold)
        for rep in range(cfg.consume_reps):
            order = [("plain", base), ("tiered", subj)]
            for topic, result in (order if rep % 2 == 0 else order[::-1]):
                measured(topic, result)
            _log(f"  {backend} rep {rep + 1}: local {base.rates[-1]:.0f} MB/s, remote {subj.rates[-1]:.0f} MB/s")
        measured("plain", small_base)
        measured("tiered", small)
        info["remote_runs"] = remote_runs
        info["results"] = summarize([base, subj, cold_base, cold, small_base, small],
                                    cfg.consume_target if backend == "local" else cfg.consume_target_s3)
        info["cpu_budget"] = cpu_budget(base, subj, [r for r in remote_runs if r["pass"] == "timed pass"])
        info["warnings"] = [line for line in broker.log_text().splitlines()
                            if " WARNING " in line or " ERROR " in line][-10:]
    finally:
        broker.stop()
    return info


def cpu_budget(base: Result, subj: Result, timed_runs: list[dict[str, float]]) -> dict[str, float]:
    """Where the timed passes' CPU goes, and the ratio that CPU alone allows on this machine.

    Both passes keep the cores about equally busy (``busy_cores``), so when they are CPU-bound the
    ratio cannot exceed local CPU-s / remote CPU-s, all processes counted: this consumer, the broker
    and, for s3, SeaweedFS on the same cores. ``ceiling_without_store`` is that bound with the store's
    CPU elsewhere (as S3 is in production); ``ceiling_broker_as_local`` also charges the broker only
    what it spends on the local tier, the bound were Strata's remote path free.
    """
    med = statistics.median
    if not (base.client_cpu_s and subj.client_cpu_s):
        return {}  # no timed pass (--consume-reps 0)
    client_l, broker_l = med(base.client_cpu_s), med(base.server_cpu_s)
    client_r, broker_r = med(subj.client_cpu_s), med(subj.server_cpu_s)
    store_r = med([r.get("store_cpu_s", 0.0) for r in timed_runs]) if timed_runs else 0.0
    local, remote = client_l + broker_l, client_r + broker_r + store_r
    return {"local_cpu_s": local, "remote_cpu_s": remote, "client_local_cpu_s": client_l,
            "broker_local_cpu_s": broker_l, "client_remote_cpu_s": client_r, "broker_remote_cpu_s": broker_r,
            "store_remote_cpu_s": store_r, "busy_cores_local": local / med(base.samples_s),
            "busy_cores_remote": remote / med(subj.samples_s), "cpu_ceiling": local / remote,
            "ceiling_without_store": local / (client_r + broker_r),
            "ceiling_broker_as_local": local / (client_r + broker_l + store_r)}


def format_cpu_budget(backend: str, b: dict[str, float], gib: float) -> str:
    """One line: CPU-s per GiB consumed by each process, and the ratio that CPU allows."""
    store = b["store_remote_cpu_s"]
    remote = (f"consumer {b['client_remote_cpu_s'] / gib:.2f} + broker {b['broker_remote_cpu_s'] / gib:.2f}"
              + (f" + SeaweedFS {store / gib:.2f}" if store else ""))
    bounds = [f"a broker remote path as cheap as its local one {b['ceiling_broker_as_local']:.2f}"]
    if store:
        bounds.insert(0, f"the store on other cores {b['ceiling_without_store']:.2f}")
    return (f"  {backend} CPU-s per GiB (timed medians): local tier consumer {b['client_local_cpu_s'] / gib:.2f} + "
            f"broker {b['broker_local_cpu_s'] / gib:.2f}; remote tier {remote}; busy cores "
            f"{b['busy_cores_local']:.2f} vs {b['busy_cores_remote']:.2f}; so CPU allows a ratio of "
            f"{b['cpu_ceiling']:.2f} ({'; '.join(bounds)})")


def _fetch_events(remote_dir: Path) -> dict[str, int]:
    from strata.tiered.storage.local import read_events

    counts: dict[str, int] = {}
    for e in read_events(remote_dir):
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    return counts


def format_remote_runs(info: dict) -> str:
    lines = []
    for run in info["remote_runs"]:
        fetches = run[REMOTE_FETCHES]
        reader_ms = run[READER_TIMER + "_sum"]
        per_fetch_ms = run["wall_s"] * 1e3 / fetches if fetches else float("nan")
        avg_reader = reader_ms / fetches if fetches else float("nan")
        events = ""
        if "events_FETCH_SEGMENT" in run:
            events = (f"; local RSM events: FETCH_SEGMENT {run['events_FETCH_SEGMENT']}, "
                      f"FETCH_OFFSET_INDEX {run.get('events_FETCH_OFFSET_INDEX', 0)}")
        ahead = ""
        if run.get(PREFETCH_HITS, 0) or run.get(PREFETCH_MISSES, 0):
            ahead = f"; read-ahead hits {run[PREFETCH_HITS]:.0f}, misses {run[PREFETCH_MISSES]:.0f}"
        lines.append(
            f"  {info['backend']} {run['pass']}: "
            f"{fetches:.0f} remote reads ({run[REMOTE_FETCH_BYTES] / max(fetches, 1) / MiB:.2f} MiB each), "
            f"{per_fetch_ms:.1f} ms wall per remote read of which {avg_reader:.1f} ms in the reader thread "
            f"({100 * reader_ms / 1e3 / run['wall_s']:.0f}% of the wall time); broker CPU {run['server_cpu_s']:.2f} s"
            + (f", SeaweedFS CPU {run['store_cpu_s']:.2f} s" if "store_cpu_s" in run else "") + "; "
            f"errors {run[REMOTE_FETCH_ERRORS]:.0f}, expired {run[REMOTE_EXPIRED]:.0f}{ahead}{events}")
    return "\n".join(lines)


# -- 3. restart ----------------------------------------------------------------------------------


def run_rlmm_restart(work: Path, cfg: BenchConfig) -> dict | None:
    try:
        import rlmm_restart_bench
    except ImportError as e:
        _log(f"  rlmm_restart_bench not available ({e}): skipped")
        return None
    rcfg = dataclasses.replace(rlmm_restart_bench.BenchConfig(), segments=cfg.restart_segments,
                               reps=cfg.restart_reps,
                               user_partitions=min(1000, max(10, cfg.restart_segments // 100)))
    return rlmm_restart_bench.run(work / "rlmm", rcfg)


def _append_metadata_offline(logs_dir: Path, records: list[tuple[int, bytes]]) -> float:
    """Append (partition, value) to __remote_log_metadata's logs while the broker is down, one record per
    batch as the broker's RLMM writes them; the clean-shutdown marker stays valid (logs closed cleanly)."""
    from strata.common import ManualScheduler, SystemClock, TopicPartition
    from strata.config import LogConfig
    from strata.log.loader import load_partition_log
    from strata.log.producer_state import AppendOrigin
    from strata.protocol.records import BatchBuilder
    from strata.replication.replica_manager import INITIAL_LEADER_EPOCH

    started = time.perf_counter()
    by_partition: dict[int, list[bytes]] = {}
    for partition, value in records:
        by_partition.setdefault(partition, []).append(value)
    clock = SystemClock()
    for partition, values in by_partition.items():
        tp = TopicPartition("__remote_log_metadata", partition)
        plog = load_partition_log(logs_dir / str(tp), tp, LogConfig(), clock, ManualScheduler(),
                                  had_clean_shutdown=True)
        try:
            for value in values:
                builder = BatchBuilder()
                builder.append(value, key=None)
                plog.append_as_leader(builder.build(), INITIAL_LEADER_EPOCH, AppendOrigin.COORDINATOR)
        finally:
            plog.close()
    return time.perf_counter() - started


RESTART_TOPICS = 10
RESTART_PARTITIONS = 10  # 100 user partitions, all live topics


def build_metadata_records(tps: list[Any], segments: int, metadata_partitions: int) -> list[tuple[int, bytes]]:
    """(metadata partition, value) of ``segments`` finished uploads spread round-robin over ``tps``: the
    COPY_SEGMENT_STARTED and COPY_SEGMENT_FINISHED events the RLM writes, every 10th segment spanning
    two leader epochs (rlmm_restart_bench's shape, but on partitions of topics the broker knows: those
    of unknown topics are deleted by the broker's orphan sweep at startup)."""
    from strata.tiered.api import (
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        RemoteLogSegmentMetadataUpdate,
        RemoteLogSegmentState,
    )
    from strata.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
    from strata.tiered.metadata.serde import serialize

    partitioner = RemoteLogMetadataTopicPartitioner(metadata_partitions)
    next_offset = dict.fromkeys(tps, 0)
    now = int(time.time() * 1000)
    records = []
    for i in range(segments):
        tp = tps[i % len(tps)]
        start = next_offset[tp]
        end = start + 9_999
        next_offset[tp] = end + 1
        epochs = {0: start} if i % 10 else {0: start, 1: start + 5_000}
        segment_id = RemoteLogSegmentId(tp, uuid.uuid4())
        md = RemoteLogSegmentMetadata(segment_id, start, end, now, 0, now, 8 * MiB, epochs, txn_idx_empty=True)
        done = RemoteLogSegmentMetadataUpdate(segment_id, now, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0)
        partition = partitioner.metadata_partition(tp)
        records.append((partition, serialize(md)))
        records.append((partition, serialize(done)))
    return records


def run_broker_restart(work: Path, cfg: BenchConfig) -> dict:
    """A real broker restart with N remote segments in __remote_log_metadata (local RSM, 50 metadata partitions).

    The broker opens its listener first and loads the remote metadata in the background (remote
    reads of a partition wait for its metadata partition), so two times are taken per start: to
    the 'ready' line (local traffic served) and to the RLMM's 'Loaded remote log metadata' line
    (remote reads served). The segments belong to 100 partitions of 10 live topics (not tiered, so
    no copy or retention task touches them: only the RLMM's load is added to the restart)."""
    from strata.log.checkpoints import PartitionMetadataFile
    from strata.log.files import PARTITION_METADATA
    from strata.tiered.api import TopicIdPartition

    n = cfg.broker_restart_segments
    data = work / "broker-restart"
    broker = Broker(data, tiered_props("local", data, None))
    snapshot = data / "logs" / "__remote_log_metadata-snapshot"
    runs: dict[str, list[dict[str, Any]]] = {"empty": [], "full replay": [], "snapshot": []}
    stops: list[float] = []

    def timed_start(kind: str) -> None:
        broker.start()
        m, loaded_s = broker.wait_for(RLMM_LOADED)
        runs[kind].append({"ready_s": broker.start_s, "remote_ready_s": loaded_s, "rlmm_load_s": float(m.group(1)),
                           "records_replayed": int(m.group(2)), "snapshot": m.group(3)})
        stops.append(broker.stop())

    try:
        broker.start()  # creates the metadata topic, then the user topics
        broker.wait_for(RLMM_LOADED)
        topics = [f"restart-{i}" for i in range(RESTART_TOPICS)]
        create_topics(broker.bootstrap, {t: {"remote.storage.enable": "false"} for t in topics}, RESTART_PARTITIONS)
        broker.stop()
        tps = []
        for t in topics:
            for p in range(RESTART_PARTITIONS):
                topic_id = PartitionMetadataFile(data / "logs" / f"{t}-{p}" / PARTITION_METADATA).read()
                assert topic_id is not None
                tps.append(TopicIdPartition(topic_id, t, p))
        for _ in range(cfg.broker_restart_reps + 1):  # the first one is a warm-up
            timed_start("empty")
        runs["empty"].pop(0)
        stops.clear()
        records = build_metadata_records(tps, n, 50)
        append_s = _append_metadata_offline(data / "logs", records)
        _log(f"  appended {len(records)} metadata records ({n} segments of {len(tps)} user partitions, one record "
             f"per batch) to __remote_log_metadata offline in {append_s:.1f} s")
        for _ in range(cfg.broker_restart_reps):
            snapshot.unlink(missing_ok=True)
            timed_start("full replay")
            if not snapshot.exists():
                raise RuntimeError("no RLMM snapshot after a clean shutdown")
            timed_start("snapshot")
        text = broker.log_text()
        if "deleting the remote data of" in text:
            raise RuntimeError("the broker's orphan sweep deleted benchmark segments:\n" + text[-2000:])
    finally:
        broker.stop()
    return {"segments": n, "records": len(records), "user_partitions": len(tps), "append_s": append_s,
            "runs": runs, "stop_s": stops}


def format_broker_restart(r: dict) -> str:
    def med(kind: str, key: str) -> float:
        return statistics.median(run[key] for run in r["runs"][kind])

    base = med("empty", "remote_ready_s")
    lines = [f"real broker restart with {r['segments']} remote segments of {r['user_partitions']} partitions "
             f"({r['records']} metadata records, one per batch, in 50 partitions of __remote_log_metadata); "
             f"s from process start, median of "
             f"{len(r['runs']['full replay'])}:",
             f"  {'':<34} {'ready (local)':>13} {'remote ready':>13} {'RLMM load':>10} {'replayed':>9}"]
    for kind, label in (("empty", "empty metadata topic (baseline)"), ("full replay", "full replay (snapshot removed)"),
                        ("snapshot", "RLMM snapshot + tail")):
        lines.append(f"  {label:<34} {med(kind, 'ready_s'):13.2f} {med(kind, 'remote_ready_s'):13.2f} "
                     f"{med(kind, 'rlmm_load_s'):10.2f} {int(med(kind, 'records_replayed')):9d}")
    full, snap = med("full replay", "remote_ready_s"), med("snapshot", "remote_ready_s")
    lines.append(f"  remote metadata's share of a restart (remote ready - baseline): full replay {full - base:.2f} s, "
                 f"snapshot {snap - base:.2f} s ({(full - base) / max(snap - base, 1e-3):.1f}x); a clean stop "
                 f"(writes the snapshot) takes {statistics.median(r['stop_s']):.2f} s (median)")
    return "\n".join(lines)


# -- the benchmark --------------------------------------------------------------------------------


NOTES = """\
notes: copy - MB/s counts the bytes of all the files (.log, .index, .timeindex, producer snapshot,
       leader-epoch checkpoint) on both sides, put one by one for the baseline; the '.log only'
       rows count the .log bytes (the index files are then the RSM's overhead); every side fsyncs
       (local) or waits for the store's acknowledgement (s3); runs alternate, os.sync() before each.
       consume - payload bytes / wall time from assign() to the last record; the tiered topic's
       active segment is served locally (see 'remote segments'); both topics are read from the
       page cache (s3: SeaweedFS's volume files); CPU s = broker process / this process
       (librdkafka's threads) per run. 2b runs in this process (its memory behaviour differs from
       the broker's: compare rows with each other, not with the broker's numbers).
       s3 - SeaweedFS `weed mini` on 127.0.0.1 sharing this machine's CPUs, 1 GiB volumes.
       restart - 'remote ready' = the RLMM's 'Loaded remote log metadata' line (the broker loads the
       metadata in the background after opening its listener)."""


def environment() -> dict:
    import confluent_kafka
    import obstore

    return bench_report.environment(confluent_kafka=confluent_kafka.version()[0],
                                    librdkafka=confluent_kafka.libversion()[0], obstore=obstore.__version__,
                                    loadavg_at_start=" ".join(f"{x:.2f}" for x in os.getloadavg()))


def run(work: Path, cfg: BenchConfig, only: str | None = None) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    report: dict[str, Any] = {"config": asdict(cfg), "environment": environment()}
    try:
        if not cfg.s3:
            _log("s3: skipped (--no-s3)")
        with seaweedfs(work, cfg.s3 and only in (None, "copy", "consume")) as server:
            report["s3"] = server is not None
            backends = ["local"] + (["s3"] if server is not None else [])
            if only in (None, "copy", "consume"):
                segments = build_segments(work, cfg)
                for mib, seg in segments.items():
                    _log(f"  built a {mib} MiB segment: {seg.data.log_segment.stat().st_size} B .log, "
                         f"{seg.data.offset_index.stat().st_size} B .index, "
                         f"{seg.data.time_index.stat().st_size} B .timeindex, "
                         f"offsets {seg.metadata.start_offset}..{seg.metadata.end_offset}")
            if only in (None, "copy"):
                _log("[1/3] segment copy: RSM copy_log_segment_data vs a raw put")
                report["copy"] = run_copy(work / "copy", cfg, server, segments)
            if only in (None, "consume"):
                _log("[2/3] consume from the remote tier vs the local tier")
                report["consume"] = [run_consume(work / "consume", b, cfg, server)
                                     for b in backends + (["s3+cache"] if server is not None else [])]
                _log("      the remote read path in-process, stage by stage")
                largest = segments[max(segments)]
                report["read_path"] = [run_read_path(work / "read-path", b, server, largest, cfg.copy_reps)
                                       for b in backends]
        if only in (None, "restart"):
            _log("[3/3] restart time with many remote segments")
            report["rlmm_restart"] = run_rlmm_restart(work / "restart", cfg)
            report["broker_restart"] = run_broker_restart(work / "restart", cfg)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def print_report(report: dict) -> None:
    env = report["environment"]
    print()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    if "copy" in report:
        print()
        print("1. segment copy (target: RSM copy MB/s / raw put MB/s >= 0.9)")
        print(bench_report.format_table(report["copy"]["results"]))
        print(format_copy_stages(report["copy"]["stages_s"]))
    if "consume" in report:
        print()
        print("2. consume from offset 0 (targets: remote tier MB/s / local tier MB/s >= 0.9 on the local store, "
              ">= 0.85 on s3)")
        rows = [row for info in report["consume"] for row in info["results"]]
        print(bench_report.format_table(rows))
        for info in report["consume"]:
            print(format_remote_runs(info))
            if info.get("cpu_budget"):
                print(format_cpu_budget(info["backend"], info["cpu_budget"],
                                        report["config"]["consume_mib"] / 1024))
            for w in info["warnings"]:
                print(f"  broker {info['backend']}: {w[:200]}")
    if report.get("read_path"):
        print()
        print("2b. the remote read path in-process (no target: where a remote fetch's time goes)")
        print(bench_report.format_table([row for info in report["read_path"] for row in info["results"]]))
        for info in report["read_path"]:
            print(format_read_path(info))
    if not report.get("s3") and ("copy" in report or "consume" in report):
        print("s3 rows: none (SeaweedFS skipped or not started, see above)")
    if report.get("rlmm_restart"):
        import rlmm_restart_bench

        print()
        print("3a. RLMM restart (bench/rlmm_restart_bench.py, in-memory metadata topic; ratio = speed-up)")
        print(bench_report.format_table(report["rlmm_restart"]["results"]))
        print(rlmm_restart_bench.format_summary(report["rlmm_restart"]))
    if report.get("broker_restart"):
        print()
        print("3b. " + format_broker_restart(report["broker_restart"]))
    print()
    print(NOTES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 copy reps, 64 MiB consumed per run, 20k/10k segments for the restarts")
    parser.add_argument("--only", choices=["copy", "consume", "restart"], help="run one part")
    parser.add_argument("--no-s3", action="store_true", help="local backend only (no SeaweedFS)")
    parser.add_argument("--copy-reps", type=int)
    parser.add_argument("--consume-mib", type=int, help="payload MiB produced to (and consumed from) each topic")
    parser.add_argument("--consume-reps", type=int)
    parser.add_argument("--restart-segments", type=int, help="segments of the in-memory RLMM restart")
    parser.add_argument("--broker-restart-segments", type=int, help="segments of the real broker restart")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker prop for the consume part (repeatable), e.g. "
                             "remote.log.reader.prefetch.total.size.bytes=0 to measure without read-ahead")
    parser.add_argument("--dir", type=Path, default=OUT / "work" / "tiered", help="scratch directory (deleted)")
    parser.add_argument("--json", type=Path, default=OUT / "tiered_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides = {k: v for k, v in (("copy_reps", args.copy_reps), ("consume_mib", args.consume_mib),
                                   ("consume_reps", args.consume_reps), ("restart_segments", args.restart_segments),
                                   ("broker_restart_segments", args.broker_restart_segments)) if v is not None}
    props = tuple(tuple(kv.split("=", 1)) for kv in args.set)
    if any(len(kv) != 2 for kv in props):
        parser.error("--set takes KEY=VALUE")
    cfg = dataclasses.replace(cfg, s3=not args.no_s3, broker_props=props, **overrides)  # type: ignore[arg-type]
    return run_and_save(lambda: run(args.dir, cfg, args.only), print_report, quick=args.quick, json_path=args.json)


if __name__ == "__main__":
    sys.exit(main())
