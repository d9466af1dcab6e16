"""Local-log throughput against plain file I/O on the same disk, measured in the same run.

Two acceptance checks:

* append: ~64 KiB batches (64 records of 1 KiB, uncompressed) through
  ``PartitionLog.append_as_leader``, against ``os.write`` of the same batches to a plain file in
  the same directory. Measured twice for the log: with ``bytes`` (what the broker gets from the
  socket; the log copies it into a ``bytearray`` to patch offsets) and with a ``bytearray``
  (patched in place, no copy).
* read: the whole log read back sequentially with ``PartitionLog.read(offset, 1 MiB)`` and each
  ``FileSlice`` consumed by ``os.preadv`` into one reused buffer, or by ``os.sendfile`` to a sink
  (what the broker does with a fetch), against reading the same ``.log`` files with 1 MiB
  ``readinto``. A raw ``sendfile`` of the same files is measured too, so the sendfile ratio can
  also be read as "log overhead only".

Measurement rules (the disk here is a VM's, and page-cache state dominates the noise):

* Nothing in a timed region fsyncs the data (both sides write into the page cache). The log's own
  roll work is timed as part of the log (index trim and producer snapshot, which fsync small
  files, as on the broker).
* Outside timed regions: ``os.sync()`` before every run, and each write run's files are deleted
  before the next run, so every run writes into recycled page-cache pages. A guest page touched
  for the first time costs a host page fault (writes to fresh memory ran at ~300 MB/s here instead
  of ~3 GB/s), so an untimed warm-up pass of each kind runs first.
* Runs alternate (the order rotates each repetition); medians and min-max are reported, and the
  ratio is the median of the subject over the median of its baseline.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from report import MiB, Result, environment, summarize
from strata.common import ManualScheduler, SystemClock, TopicPartition
from strata.config import LogConfig
from strata.log.loader import load_partition_log
from strata.log.partition_log import PartitionLog
from strata.protocol.records import BatchBuilder, CompressionType, compute_crc

READ_CHUNK = 1 * MiB
ZERO_BASE_OFFSET = bytes(8)
TP = TopicPartition("bench", 0)


@dataclass(frozen=True)
class BenchConfig:
    total_bytes: int = 512 * MiB
    segment_bytes: int = 128 * MiB
    records_per_batch: int = 64
    record_bytes: int = 1024
    pool_batches: int = 64  # distinct batches, cycled through
    reps: int = 5
    target: float = 0.8
    seed: int = 20240501

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(total_bytes=64 * MiB, segment_bytes=32 * MiB, reps=3)


# -- inputs ------------------------------------------------------------------------------------


def build_pool(cfg: BenchConfig) -> list[bytes]:
    """Distinct uncompressed batches of ``records_per_batch`` random-ish 1 KiB values."""
    rng = random.Random(cfg.seed)
    now = int(time.time() * 1000)
    pool = []
    for _ in range(cfg.pool_batches):
        builder = BatchBuilder(compression=CompressionType.NONE)
        for _ in range(cfg.records_per_batch):
            builder.append(rng.randbytes(cfg.record_bytes), key=None, timestamp=now)
        pool.append(builder.build())
    return pool


def batches_for(cfg: BenchConfig, pool: list[bytes]) -> int:
    return max(1, cfg.total_bytes // len(pool[0]))


def open_log(directory: Path, cfg: BenchConfig) -> PartitionLog:
    return load_partition_log(directory, TP, LogConfig(segment_bytes=cfg.segment_bytes), SystemClock(),
                              ManualScheduler())


def discard_log(plog: PartitionLog) -> None:
    """Release the log's files without the clean-close fsync, then delete them."""
    plog.local_log.close_handlers()
    shutil.rmtree(plog.dir, ignore_errors=True)


# -- append ------------------------------------------------------------------------------------


def run_plain_write(work: Path, pool: list[bytes], n: int) -> float:
    path = work / "plain-write.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    size = len(pool)
    write = os.write
    try:
        start = time.perf_counter()
        for i in range(n):
            write(fd, pool[i % size])
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return elapsed


def run_log_append_bytes(work: Path, pool: list[bytes], n: int, cfg: BenchConfig) -> float:
    plog = open_log(work / "append-log", cfg)
    size = len(pool)
    append = plog.append_as_leader
    try:
        start = time.perf_counter()
        for i in range(n):
            append(pool[i % size], 0)
        elapsed = time.perf_counter() - start
        assert plog.log_end_offset == n * cfg.records_per_batch
    finally:
        discard_log(plog)
    return elapsed


def run_log_append_bytearray(work: Path, pool: list[bytearray], n: int, cfg: BenchConfig) -> float:
    """The no-copy path; the offsets patched in place are zeroed again before reuse (8 bytes)."""
    plog = open_log(work / "append-log", cfg)
    size = len(pool)
    append = plog.append_as_leader
    zero = ZERO_BASE_OFFSET
    try:
        start = time.perf_counter()
        for i in range(n):
            buf = pool[i % size]
            buf[0:8] = zero
            append(buf, 0)
        elapsed = time.perf_counter() - start
        assert plog.log_end_offset == n * cfg.records_per_batch
    finally:
        discard_log(plog)
    return elapsed


def bench_append(work: Path, cfg: BenchConfig, pool: list[bytes], log: Callable[[str], None]) -> list[Result]:
    n = batches_for(cfg, pool)
    nbytes = n * len(pool[0])
    pool_ba = [bytearray(b) for b in pool]
    base = Result("append: plain os.write", "baseline", nbytes=nbytes,
                  note="os.write of the same batches to one plain file, same directory")
    as_bytes = Result("append: log, bytes (broker path)", "subject", nbytes=nbytes, baseline=base.name,
                      note="append_as_leader(bytes): what the broker passes (socket bytes; the log copies "
                           "them into a bytearray once)")
    as_ba = Result("append: log, bytearray (no copy)", "subject", nbytes=nbytes, baseline=base.name,
                   note="append_as_leader(bytearray): patched in place, no copy")
    runs: list[tuple[Result, Callable[[], float]]] = [
        (base, lambda: run_plain_write(work, pool, n)),
        (as_bytes, lambda: run_log_append_bytes(work, pool, n, cfg)),
        (as_ba, lambda: run_log_append_bytearray(work, pool_ba, n, cfg)),
    ]
    segments = -(-nbytes // (cfg.segment_bytes // len(pool[0]) * len(pool[0])))
    log(f"append: {n} batches of {len(pool[0])} B = {nbytes / MiB:.0f} MiB per run, "
        f"segment.bytes {cfg.segment_bytes // MiB} MiB ({segments} segments, {segments - 1} rolls), {cfg.reps} reps")
    for _, fn in runs:  # warm-up: touch the page-cache pages every later run recycles
        os.sync()
        fn()
    for rep in range(cfg.reps):
        order = runs[rep % len(runs):] + runs[:rep % len(runs)]
        for result, fn in order:
            os.sync()
            result.samples_s.append(fn())
        log(f"  rep {rep + 1}: " + ", ".join(f"{r.name.split(': ')[1]} {r.rates[-1]:.0f}" for r, _ in runs))
    return [base, as_bytes, as_ba]


def per_batch_costs(pool: list[bytes], results: list[Result]) -> dict:
    """Per-batch microseconds, and the best ratio the log could reach with no Python overhead at all.

    The log must at least CRC-check each batch (Kafka's ensureValid) and, for ``bytes`` input,
    copy it once to patch the offsets; ``ceiling`` is the plain write against write + those.
    """
    batch = pool[0]
    buf = bytearray(batch)
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        compute_crc(buf, 0, len(buf))
    crc = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for _ in range(n):
        bytearray(batch)
    copy = (time.perf_counter() - start) / n * 1e6
    per_batch = {r.name: len(batch) / r.median for r in results}  # MB/s -> us per batch
    write = per_batch[results[0].name]
    return {
        "batch_bytes": len(batch), "us_per_batch_median": per_batch, "crc32c_us": crc, "copy_us": copy,
        "ceiling_ratio_bytearray": write / (write + crc), "ceiling_ratio_bytes": write / (write + crc + copy),
        "python_overhead_us_bytes": per_batch[results[1].name] - write - crc - copy,
        "python_overhead_us_bytearray": per_batch[results[2].name] - write - crc,
    }


def format_costs(c: dict) -> str:
    us = c["us_per_batch_median"]
    names = list(us)
    return (
        f"append per batch ({c['batch_bytes']} B, medians): plain write {us[names[0]]:.1f} us; "
        f"log {us[names[1]]:.1f} us (bytes), {us[names[2]]:.1f} us (bytearray)\n"
        f"  of which CRC-32C {c['crc32c_us']:.1f} us, bytes->bytearray copy {c['copy_us']:.1f} us, "
        f"remaining log code (Python, index, roll) ~{c['python_overhead_us_bytes']:.1f} us\n"
        f"  ceiling with zero Python overhead: ratio {c['ceiling_ratio_bytes']:.2f} (bytes), "
        f"{c['ceiling_ratio_bytearray']:.2f} (bytearray); optimistic: CRC and copy timed on cache-warm data"
    )


# -- read --------------------------------------------------------------------------------------


class Sink:
    """Where sendfile goes: ``/dev/null`` if the kernel allows it, else a drained socketpair."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._peer: socket.socket | None = None
        self._sock: socket.socket | None = None
        self.fd = os.open(os.devnull, os.O_WRONLY)
        self.kind = "/dev/null"
        probe = os.open(__file__, os.O_RDONLY)
        try:
            os.sendfile(self.fd, probe, 0, 16)
        except OSError:
            os.close(self.fd)
            self._sock, self._peer = socket.socketpair()
            self.fd = self._sock.fileno()
            self.kind = "socketpair drained by a thread"
            self._thread = threading.Thread(target=self._drain, daemon=True)
            self._thread.start()
        finally:
            os.close(probe)

    def _drain(self) -> None:
        buf = bytearray(4 * MiB)
        assert self._peer is not None
        while self._peer.recv_into(buf):
            pass

    def close(self) -> None:
        if self._sock is None:
            os.close(self.fd)
            return
        self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        assert self._peer is not None
        self._peer.close()


def sendfile_all(out_fd: int, in_fd: int, position: int, size: int) -> None:
    while size > 0:
        sent = os.sendfile(out_fd, in_fd, position, size)
        if sent == 0:
            raise EOFError(f"sendfile stopped with {size} bytes left")
        position += sent
        size -= sent


@dataclass
class ReadLog:
    plog: PartitionLog
    files: list[Path]
    nbytes: int
    # (segment base offset, end position of a batch) -> offset after that batch: what a consumer
    # learns from the batches it received, without charging a header parse to either side.
    next_offset: dict[tuple[int, int], int]


def build_read_log(work: Path, cfg: BenchConfig, pool: list[bytes]) -> ReadLog:
    plog = open_log(work / "read-log", cfg)
    next_offset = {}
    segments = plog.local_log.segments
    for i in range(batches_for(cfg, pool)):
        info = plog.append_as_leader(pool[i % len(pool)], 0)
        active = segments.active
        next_offset[(active.base_offset, active.size)] = info.last_offset + 1
    plog.update_high_watermark(plog.log_end_offset)
    files = [s.log.path for s in plog.segments]
    return ReadLog(plog, files, sum(p.stat().st_size for p in files), next_offset)


def run_plain_readinto(rlog: ReadLog) -> float:
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    total = 0
    start = time.perf_counter()
    for path in rlog.files:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    elapsed = time.perf_counter() - start
    assert total == rlog.nbytes, (total, rlog.nbytes)
    return elapsed


def run_plain_sendfile(rlog: ReadLog, sink: Sink) -> float:
    total = 0
    start = time.perf_counter()
    for path in rlog.files:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for position in range(0, size, READ_CHUNK):
                chunk = min(READ_CHUNK, size - position)
                sendfile_all(sink.fd, fd, position, chunk)
                total += chunk
        finally:
            os.close(fd)
    elapsed = time.perf_counter() - start
    assert total == rlog.nbytes
    return elapsed


def run_log_read(rlog: ReadLog, consume: Callable[[int, int, int], None]) -> float:
    plog = rlog.plog
    read = plog.read
    next_offset = rlog.next_offset
    offset = plog.log_start_offset
    end = plog.log_end_offset
    total = 0
    start = time.perf_counter()
    while offset < end:
        fdi = read(offset, READ_CHUNK)
        records = fdi.records
        assert records is not None and records.size > 0, offset
        consume(records.fileno(), records.position, records.size)
        total += records.size
        offset = next_offset[(fdi.fetch_offset_metadata.segment_base_offset, records.position + records.size)]
    elapsed = time.perf_counter() - start
    assert total == rlog.nbytes, (total, rlog.nbytes)
    return elapsed


def run_log_read_pread(rlog: ReadLog) -> float:
    view = memoryview(bytearray(READ_CHUNK))
    preadv = os.preadv

    def consume(fd: int, position: int, size: int) -> None:
        if preadv(fd, [view[:size]], position) != size:
            raise EOFError(f"short pread at {position}")

    return run_log_read(rlog, consume)


def run_log_read_sendfile(rlog: ReadLog, sink: Sink) -> float:
    out = sink.fd
    return run_log_read(rlog, lambda fd, position, size: sendfile_all(out, fd, position, size))


def bench_read(work: Path, cfg: BenchConfig, pool: list[bytes], log: Callable[[str], None]) -> tuple[list[Result], str]:
    rlog = build_read_log(work, cfg, pool)
    sink = Sink()
    try:
        nbytes = rlog.nbytes
        base = Result("read: plain readinto 1 MiB", "baseline", nbytes=nbytes,
                      note="f.readinto of the same .log files, 1 MiB buffer")
        base_sf = Result("read: plain sendfile 1 MiB", "baseline", nbytes=nbytes,
                         note=f"os.sendfile of the same .log files in 1 MiB chunks to {sink.kind}")
        pread = Result("read: log slice + pread", "subject", nbytes=nbytes, baseline=base.name,
                       note="PartitionLog.read(offset, 1 MiB) -> FileSlice -> os.preadv into a reused buffer")
        sendf = Result("read: log slice + sendfile (broker)", "subject", nbytes=nbytes, baseline=base.name,
                       note=f"PartitionLog.read(offset, 1 MiB) -> FileSlice -> os.sendfile to {sink.kind} "
                            f"(the broker's fetch path)")
        sendf_raw = Result("read: log sendfile vs plain sendfile", "subject", nbytes=nbytes,
                           baseline=base_sf.name, informational=True,
                           note="the same runs as the row above, against plain sendfile: log overhead only")
        runs: list[tuple[Result, Callable[[], float]]] = [
            (base, lambda: run_plain_readinto(rlog)),
            (pread, lambda: run_log_read_pread(rlog)),
            (base_sf, lambda: run_plain_sendfile(rlog, sink)),
            (sendf, lambda: run_log_read_sendfile(rlog, sink)),
        ]
        log(f"read: {len(rlog.files)} segment files, {nbytes / MiB:.0f} MiB, from the page cache, "
            f"{cfg.reps} reps; sendfile sink: {sink.kind}")
        os.sync()  # written back before timing: reads see clean cached pages, no writeback running
        for _, fn in runs:
            fn()  # warm-up
        for rep in range(cfg.reps):
            order = runs[rep % len(runs):] + runs[:rep % len(runs)]
            for result, fn in order:
                result.samples_s.append(fn())
            log(f"  rep {rep + 1}: " + ", ".join(f"{r.name.split(': ')[1]} {r.rates[-1]:.0f}" for r, _ in runs))
        sendf_raw.samples_s = list(sendf.samples_s)
        return [base, pread, base_sf, sendf, sendf_raw], sink.kind
    finally:
        sink.close()
        discard_log(rlog.plog)


# -- report ------------------------------------------------------------------------------------


def run(work: Path, cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        pool = build_pool(cfg)
        append_results = bench_append(work, cfg, pool, log)
        read_results, sink = bench_read(work, cfg, pool, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = summarize(append_results + read_results, cfg.target)
    return {"config": asdict(cfg), "batch_bytes": len(pool[0]), "sendfile_sink": sink,
            "environment": environment(), "results": rows,
            "append_costs": per_batch_costs(pool, append_results)}
