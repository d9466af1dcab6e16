"""Broker produce and consume throughput with confluent-kafka, against raw asyncio sockets.

Two acceptance checks (target: ratio >= 0.6 each), both measured in the same run as their
baselines, over loopback, with the server in its own process in every case:

* produce: confluent-kafka (librdkafka) produces 1 KiB records (linger.ms=5, acks=1,
  uncompressed) to one partition, timed from the first ``produce()`` to ``flush()`` returning,
  against an asyncio server that reads the same number of payload bytes from a socket
  (``loop.sock_recv_into``) and appends them to a file (``os.write``), fed by ``sendall`` of
  1 MiB chunks and timed until the server acknowledges the last byte.
* consume: a confluent-kafka consumer reads those records back (assign at offset 0, until every
  record arrived), against an asyncio server that sends a file of the same payload size with
  ``loop.sock_sendfile`` to a reader doing ``recv_into`` with a 1 MiB buffer.

MB/s counts record payload bytes only (10^6 bytes/s); the broker side also carries ~70 B of
batch and record framing per record, which the baselines do not. Runs alternate, medians are
compared, and the per-repetition ratios are shown as (pairs).

Page cache: on this kind of VM a page the guest touches for the first time costs a host fault
(fresh-memory writes run at a fraction of recycled-memory speed). The baseline truncates and
rewrites one file, so it always writes into recycled pages; each repetition therefore starts a
fresh broker on an empty data directory after deleting the previous one's files, so the
broker's segment writes recycle pages too. ``os.sync()`` runs untimed before every timed run.

Each row also shows the CPU seconds the server process and the client (this process, all
threads) spent per run: where the client's per-record work (Python calls into librdkafka,
librdkafka building and parsing batches) outweighs the server's, no broker can reach the
baseline's rate on a machine with few cores, and the columns show it.

:func:`profile` (``bench/run.py --profile-broker``) instead runs the broker under cProfile for
a few produce + consume passes and prints the functions with the most own time (and writes the
.pstats file beside the JSON).
"""

from __future__ import annotations

import asyncio
import os
import pstats
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from report import MiB, Result, summarize
from report import environment as _environment

CHUNK = 1 * MiB
READY = re.compile(r"strata broker ready on ([\d.]+):(\d+)")
START_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class BenchConfig:
    total_bytes: int = 256 * MiB
    record_bytes: int = 1024
    linger_ms: int = 5
    acks: int = 1
    reps: int = 5
    target: float = 0.6

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(total_bytes=64 * MiB, reps=3)

    @property
    def records(self) -> int:
        return self.total_bytes // self.record_bytes

    @property
    def payload_bytes(self) -> int:
        return self.records * self.record_bytes


# -- processes -------------------------------------------------------------------------------


class Server:
    """A child process that prints what it listens on; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, args: list[str], log_path: Path, pattern: re.Pattern[str]) -> None:
        self.log_path = log_path
        log_file = open(log_path, "ab")  # noqa: SIM115 (owned by the child)
        offset = log_path.stat().st_size
        self.proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log_file.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log_path.read_bytes()[offset:].decode(errors="replace")
            m = pattern.search(text)
            if m:
                self.port = int(m.group(2))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{args[:4]} exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{args[:4]} not ready after {START_TIMEOUT_S}s")

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_broker(work: Path, profile_to: Path | None = None) -> Server:
    data = work / "broker"
    data.mkdir(parents=True, exist_ok=True)
    args = [sys.executable]
    if profile_to is not None:
        args += ["-m", "cProfile", "-o", str(profile_to)]
    args += ["-m", "strata", "serve", "--set", f"log.dirs={data / 'logs'}",
             "--set", "listeners=PLAINTEXT://127.0.0.1:0", "--set", "log.segment.bytes=268435456"]
    return Server(args, work / "broker.log", READY)


BASELINE_READY = re.compile(r"baseline (\w+) listening on ([\d.]+):(\d+)")


def start_baseline(work: Path, mode: str, path: Path, nbytes: int) -> Server:
    args = [sys.executable, __file__, "--serve", mode, str(path), str(nbytes)]
    pattern = re.compile(rf"baseline {mode} listening on ([\d.]+):(\d+)")
    return Server(args, work / f"baseline-{mode}.log", pattern)


# -- baseline servers (run in the child process) ----------------------------------------------


async def serve_append(path: Path, nbytes: int) -> None:
    """Per connection: read ``nbytes`` into a buffer, append each read to ``path``, then ack."""
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    print(f"baseline append listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    buf = bytearray(256 * 1024)  # the broker's read size
    view = memoryview(buf)
    while True:
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            remaining = nbytes
            while remaining > 0:
                n = await loop.sock_recv_into(conn, buf)
                if n == 0:
                    break
                os.write(fd, view[:n])
                remaining -= n
            await loop.sock_sendall(conn, b"k")
        finally:
            os.close(fd)
            conn.close()


async def serve_sendfile(path: Path, nbytes: int) -> None:
    """Per connection: ``sock_sendfile`` the whole file, then close."""
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    print(f"baseline sendfile listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    while True:
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        with open(path, "rb") as f:
            await loop.sock_sendfile(conn, f, 0, nbytes)
        conn.close()


def serve_main(mode: str, path: str, nbytes: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fn = serve_append if mode == "append" else serve_sendfile
    asyncio.run(fn(Path(path), int(nbytes)))
    return 0


# -- runs (in the bench process) --------------------------------------------------------------


def _own_cpu_seconds() -> float:
    """CPU of this process, all threads (librdkafka's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_baseline_produce(server: Server, nbytes: int) -> float:
    chunk = os.urandom(CHUNK)
    with socket.create_connection(server.address) as sock:
        start = time.perf_counter()
        remaining = nbytes
        while remaining > 0:
            n = min(remaining, CHUNK)
            sock.sendall(chunk[:n] if n < CHUNK else chunk)
            remaining -= n
        if sock.recv(1) != b"k":
            raise RuntimeError("baseline append server did not acknowledge")
        return time.perf_counter() - start


def run_baseline_consume(server: Server, nbytes: int) -> float:
    buf = bytearray(CHUNK)
    with socket.create_connection(server.address) as sock:
        start = time.perf_counter()
        total = 0
        while total < nbytes:
            n = sock.recv_into(buf)
            if n == 0:
                break
            total += n
        elapsed = time.perf_counter() - start
    if total != nbytes:
        raise RuntimeError(f"baseline sendfile delivered {total} of {nbytes} bytes")
    return elapsed


def run_produce(bootstrap: str, topic: str, cfg: BenchConfig) -> float:
    from confluent_kafka import Producer

    value = os.urandom(cfg.record_bytes)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": cfg.linger_ms, "acks": cfg.acks,
                  "compression.type": "none", "enable.idempotence": False, "log_level": 3,
                  "queue.buffering.max.kbytes": 1024 * 1024})
    p.list_topics(topic, timeout=10)  # auto-creates the topic: metadata is not part of the timing
    produce = p.produce
    poll = p.poll
    start = time.perf_counter()
    for _ in range(cfg.records):
        while True:
            try:
                produce(topic, value, partition=0)
                break
            except BufferError:
                poll(0.001)
    left = p.flush(RUN_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return elapsed


def run_consume(bootstrap: str, topic: str, cfg: BenchConfig) -> float:
    from confluent_kafka import Consumer, TopicPartition

    # fetch.queue.backoff.ms: once its prefetch queue passes queued.min.messages (100k, fewer than
    # one run's records), librdkafka pauses fetching for this long, 1 s by default: a client-side
    # stall of a whole second that says nothing about the broker.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  "log_level": 3, "fetch.queue.backoff.ms": 10})
    try:
        c.list_topics(topic, timeout=10)
        start = time.perf_counter()
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while got < cfg.records:
            # consume(n) waits until n messages or the timeout: never ask for more than remain.
            msgs = c.consume(min(10_000, cfg.records - got), 1.0)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(str(m.error()))
            got += len(msgs)
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {got} of {cfg.records} records in {RUN_TIMEOUT_S}s")
        return time.perf_counter() - start
    finally:
        c.close()


# -- the benchmark ---------------------------------------------------------------------------


def run(work: Path, cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    nbytes = cfg.payload_bytes
    base_p = Result("produce: asyncio recv -> file", "baseline", nbytes=nbytes,
                    note="asyncio server: sock_recv_into 256 KiB + os.write to a file; client sendall 1 MiB chunks")
    subj_p = Result("produce: broker, confluent-kafka", "subject", nbytes=nbytes, baseline=base_p.name,
                    note=f"{cfg.record_bytes} B records, linger.ms={cfg.linger_ms}, acks={cfg.acks}, "
                         "uncompressed, one partition; first produce() to flush()")
    base_c = Result("consume: asyncio sendfile -> recv", "baseline", nbytes=nbytes,
                    note="asyncio server: loop.sock_sendfile of a file; client recv_into 1 MiB")
    subj_c = Result("consume: broker, confluent-kafka", "subject", nbytes=nbytes, baseline=base_c.name,
                    note="assign offset 0, consume(<=10000) until every record arrived")
    sendfile_src = work / "sendfile-source.bin"
    with open(sendfile_src, "wb") as f:
        for _ in range(nbytes // CHUNK):
            f.write(os.urandom(CHUNK))
        f.write(os.urandom(nbytes % CHUNK))
    append_srv = start_baseline(work, "append", work / "append-target.bin", nbytes)
    sendfile_srv = start_baseline(work, "sendfile", sendfile_src, nbytes)
    broker: list[Server] = []

    def fresh_broker() -> str:
        """A broker on an empty data dir: the last one's files are deleted first, so its page-cache
        pages are recycled as the baseline's truncated file's are (see the module docstring)."""
        if broker:
            broker.pop().stop()
        shutil.rmtree(work / "broker", ignore_errors=True)
        broker.append(start_broker(work))
        return f"127.0.0.1:{broker[0].port}"

    def produce_consume_pair(bootstrap: str) -> tuple[Callable[[], float], Callable[[], float]]:
        return (lambda: run_produce(bootstrap, "bench", cfg)), (lambda: run_consume(bootstrap, "bench", cfg))

    def timed(fn: Callable[[], float], result: Result, server: Server) -> None:
        os.sync()  # no writeback of an earlier run's data during a timed one
        cpu = server.cpu_seconds()
        mine = _own_cpu_seconds()
        result.samples_s.append(fn())
        result.server_cpu_s.append(server.cpu_seconds() - cpu)
        result.client_cpu_s.append(_own_cpu_seconds() - mine)

    try:
        log(f"broker bench: {cfg.records} records of {cfg.record_bytes} B = {nbytes / MiB:.0f} MiB per run, "
            f"{cfg.reps} reps, {os.cpu_count()} CPUs")
        # Warm-up (untimed): page cache for the sendfile source, first-touch pages for the written
        # data, first-time code paths in every process.
        run_baseline_produce(append_srv, nbytes)
        run_baseline_consume(sendfile_srv, nbytes)
        for _ in range(2):
            warm_p, warm_c = produce_consume_pair(fresh_broker())
            warm_p()
            warm_c()
        for rep in range(cfg.reps):
            subj_p_fn, subj_c_fn = produce_consume_pair(fresh_broker())
            # The consume subject reads what this rep's produce wrote, so produce runs first; each
            # baseline goes before its subject on even reps and after it on odd ones.
            for base_fn, base_r, base_srv, subj_fn, subj_r in (
                (lambda: run_baseline_produce(append_srv, nbytes), base_p, append_srv, subj_p_fn, subj_p),
                (lambda: run_baseline_consume(sendfile_srv, nbytes), base_c, sendfile_srv, subj_c_fn, subj_c),
            ):
                order = [(base_fn, base_r, base_srv), (subj_fn, subj_r, broker[0])]
                for fn, result, server in (order if rep % 2 == 0 else order[::-1]):
                    timed(fn, result, server)
            log(f"  rep {rep + 1}: " + "; ".join(f"{r.name} {r.rates[-1]:.0f} MB/s (CPU s: server "
                                                f"{r.server_cpu_s[-1]:.2f}, client {r.client_cpu_s[-1]:.2f})"
                                                for r in (base_p, subj_p, base_c, subj_c)))
    finally:
        for server in (*broker, append_srv, sendfile_srv):
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = summarize([base_p, subj_p, base_c, subj_c], cfg.target)
    return {"config": asdict(cfg), "environment": environment(), "results": rows}


def profile(work: Path, cfg: BenchConfig, out: Path, top: int = 25, log: Callable[[str], None] = print) -> str:
    """``cfg.reps`` produce + consume passes against a broker running under cProfile.

    Startup (imports, internal topics) is in the profile too, so several passes are run for the
    hot paths to dominate; the second listing keeps to strata's and kio's own functions.
    """
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    broker = start_broker(work, profile_to=out)
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        for rep in range(cfg.reps):
            p = run_produce(bootstrap, f"profiled-{rep}", cfg)
            c = run_consume(bootstrap, f"profiled-{rep}", cfg)
            log(f"profiled pass {rep + 1}: produce {cfg.payload_bytes / p / 1e6:.0f} MB/s, consume "
                f"{cfg.payload_bytes / c / 1e6:.0f} MB/s (cProfile slows the broker)")
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    import io

    text = io.StringIO()
    stats = pstats.Stats(str(out), stream=text)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("tottime").print_stats(r"strata|kio", top)
    return text.getvalue()


# -- report ----------------------------------------------------------------------------------



def environment() -> dict:
    import confluent_kafka

    return _environment(confluent_kafka=confluent_kafka.version()[0], librdkafka=confluent_kafka.libversion()[0])


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--serve":
    sys.exit(serve_main(sys.argv[2], sys.argv[3], sys.argv[4]))
