"""S3 client choice for the tiered-storage backend: obstore (Rust object_store) against boto3.

    .venv/bin/python bench/s3_client_bench.py [--reps N] [--mib N] [--json PATH]

Starts a SeaweedFS ``weed mini`` on 127.0.0.1 (tests/support/seaweedfs.py) and times, for each
client, the operations the RSM performs: a 64 MiB segment upload (single PUT and multipart with
8 MiB parts), a full 64 MiB download, 20 ranged 1 MiB GETs from a 64 MiB object (the consumer
fetch path) and 100 small 10 KiB PUTs (the index files). Ratio = obstore median / boto3 median
(> 1: obstore is faster). MB/s = 10^6 bytes/s. CPU s = CPU seconds of the server and of this
process (the client) per run; boto3 is pure Python on top of urllib3, obstore runs in Rust
threads outside the GIL, so the client column shows what each costs the broker process. A second
table shows the GIL side of it: a worker thread loops on an operation while the main thread runs
pure Python; "main thread keeps" is its share of its solo speed (what the broker's event loop
keeps while RSM worker threads fetch or upload).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import report as bench_report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.seaweedfs import SeaweedFS  # noqa: E402

MiB = 1024 * 1024
OUT = Path(__file__).resolve().parent / "out"


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Clients:
    """The same five operations through each client, configured as the RSM would configure it."""

    def __init__(self, server: SeaweedFS) -> None:
        import obstore
        from obstore.store import S3Store

        self.server = server
        self.bucket = server.bucket
        self.boto3 = server.boto3_client()
        env = server.client_env()
        self.obstore = obstore
        self.store = S3Store(self.bucket, endpoint=server.endpoint, region=env["AWS_DEFAULT_REGION"],
                             access_key_id=env["AWS_ACCESS_KEY_ID"], secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                             virtual_hosted_style_request=False, client_options={"allow_http": True})

    # boto3
    def boto3_put(self, key: str, data: bytes) -> None:
        self.boto3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def boto3_put_multipart(self, key: str, data: bytes) -> None:
        from boto3.s3.transfer import TransferConfig

        cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, max_concurrency=8)
        self.boto3.upload_fileobj(io.BytesIO(data), self.bucket, key, Config=cfg)

    def boto3_get(self, key: str) -> bytes:
        return self.boto3.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def boto3_get_range(self, key: str, start: int, length: int) -> bytes:
        return self.boto3.get_object(Bucket=self.bucket, Key=key,
                                     Range=f"bytes={start}-{start + length - 1}")["Body"].read()

    # obstore
    def obstore_put(self, key: str, data: bytes) -> None:
        self.obstore.put(self.store, key, data, use_multipart=False)

    def obstore_put_multipart(self, key: str, data: bytes) -> None:
        self.obstore.put(self.store, key, data, use_multipart=True, chunk_size=8 * MiB, max_concurrency=8)

    def obstore_get(self, key: str) -> bytes:
        return bytes(self.obstore.get(self.store, key).bytes())

    def obstore_get_range(self, key: str, start: int, length: int) -> bytes:
        return bytes(self.obstore.get_range(self.store, key, start=start, length=length))


def operations(c: Clients, client: str, data: bytes, small: list[bytes],
               offsets: list[int]) -> dict[str, tuple[int, Callable[[int], object]]]:
    """Operation name -> (bytes moved per run, run(i)); ``i`` keeps written keys distinct."""
    put, put_mpu = getattr(c, f"{client}_put"), getattr(c, f"{client}_put_multipart")
    get, get_range = getattr(c, f"{client}_get"), getattr(c, f"{client}_get_range")
    mib = len(data) // MiB

    def small_puts(i: int) -> None:
        for j, b in enumerate(small):
            put(f"{client}/small/{i}/{j}", b)

    def ranged_gets(i: int) -> None:
        for o in offsets:
            get_range("read/big", o, MiB)

    return {
        f"put {mib} MiB (single PUT)": (len(data), lambda i: put(f"{client}/put/{i}", data)),
        f"put {mib} MiB (multipart 8 MiB)": (len(data), lambda i: put_mpu(f"{client}/mpu/{i}", data)),
        f"get {mib} MiB": (len(data), lambda i: get("read/big")),
        f"ranged get 1 MiB x{len(offsets)} of {mib} MiB": (len(offsets) * MiB, ranged_gets),
        f"put 10 KiB x{len(small)}": (sum(map(len, small)), small_puts),
    }


def timed(server_pid: int, fn: Callable[[], object]) -> tuple[float, float, float]:
    s0, c0, t0 = _proc_cpu_s(server_pid), time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, _proc_cpu_s(server_pid) - s0, time.process_time() - c0


def run(reps: int, mib: int) -> dict:
    size = mib * MiB
    data = os.urandom(size)
    small = [os.urandom(10 * 1024) for _ in range(100)]
    rng = random.Random(405)
    offsets = [rng.randrange(0, size - MiB) for _ in range(20)]
    with tempfile.TemporaryDirectory(prefix="s3bench-") as tmp, SeaweedFS(Path(tmp)) as server:
        startup_s, rss_idle = server.startup_s, server.rss_bytes()
        clients = Clients(server)
        assert server.proc is not None
        pid = server.proc.pid
        # both clients read the same objects, written once up front
        clients.boto3_put("read/big", data)
        assert clients.obstore_get("read/big") == data and clients.boto3_get("read/big") == data

        results: list[bench_report.Result] = []
        plans = {client: operations(clients, client, data, small, offsets) for client in ("boto3", "obstore")}
        for op in plans["boto3"]:
            pair = []
            for client in ("boto3", "obstore"):
                is_base = client == "boto3"
                pair.append(bench_report.Result(name=f"{client}: {op}", kind="baseline" if is_base else "subject",
                                                nbytes=plans[client][op][0],
                                                baseline=None if is_base else f"boto3: {op}", informational=True))
                plans[client][op][1](-1)  # warm-up: connection pool, credential resolution
            for i in range(reps):  # interleaved, so both clients see the same machine state
                for client, r in zip(("boto3", "obstore"), pair, strict=True):
                    wall, server_cpu, client_cpu = timed(pid, lambda fn=plans[client][op][1], i=i: fn(i))
                    r.samples_s.append(wall)
                    r.server_cpu_s.append(server_cpu)
                    r.client_cpu_s.append(client_cpu)
            results += pair
        gil = gil_impact(plans)
        rss_after = server.rss_bytes()
    rows = bench_report.summarize(results, target=1.0)
    return {"results": rows, "environment": bench_report.environment(), "reps": reps, "object_mib": mib,
            "gil_impact": gil,
            "seaweedfs": {"startup_s": startup_s, "rss_idle_bytes": rss_idle, "rss_after_bytes": rss_after}}


def _spin(seconds: float) -> float:
    """Pure-Python loop iterations per second: how much of the GIL this thread gets."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += 1
    return n / seconds


def _spin_beside(fn: Callable[[int], object], seconds: float) -> tuple[float, float]:
    """Spin in this thread while a worker thread loops on ``fn``: (spin rate, worker runs per second)."""
    stop = threading.Event()
    runs = [0]

    def worker() -> None:
        while not stop.is_set():
            fn(10_000 + runs[0])
            runs[0] += 1

    t = threading.Thread(target=worker)
    t.start()
    try:
        time.sleep(0.2)  # the worker is in its loop
        started, before = time.perf_counter(), runs[0]
        rate = _spin(seconds)
        return rate, (runs[0] - before) / (time.perf_counter() - started)
    finally:
        stop.set()
        t.join()


def gil_impact(plans: dict[str, dict[str, tuple[int, Callable[[int], object]]]], seconds: float = 2.0) -> list[dict]:
    """A worker thread loops on one operation while the main thread spins: the main thread's share
    of its solo rate is what the broker's event loop keeps while the RSM works in its threads."""
    solo = _spin(seconds)
    ops = [k for k in plans["boto3"] if k.startswith(("ranged", "put 10 KiB"))]
    rows = []
    for op in ops:
        for client in ("boto3", "obstore"):
            rate, runs_per_s = _spin_beside(plans[client][op][1], seconds)
            rows.append({"op": op, "client": client, "main_thread_share": rate / solo,
                         "worker_runs_per_s": runs_per_s})
    return rows


def format_gil(rows: list[dict]) -> str:
    """``cost per run/s``: main-thread share lost per worker run per second (work-normalised)."""
    header = f"{'worker thread loops on':<36} {'client':>8} {'main thread keeps':>18} {'worker runs/s':>14}" \
             f" {'cost per run/s':>15}"
    lines = [header, "-" * len(header)]
    for r in rows:
        cost = (1 - r["main_thread_share"]) / r["worker_runs_per_s"] if r["worker_runs_per_s"] else float("nan")
        lines.append(f"{r['op']:<36} {r['client']:>8} {r['main_thread_share']:>17.0%} "
                     f"{r['worker_runs_per_s']:>14.1f} {cost:>14.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per operation (median shown)")
    parser.add_argument("--mib", type=int, default=64, help="size of the large object in MiB")
    parser.add_argument("--json", type=Path, default=OUT / "s3_client_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    report = run(args.reps, args.mib)
    print()
    print(bench_report.format_table(report["results"]))
    print()
    print(format_gil(report["gil_impact"]))
    sw = report["seaweedfs"]
    print()
    print(f"SeaweedFS weed mini: ready in {sw['startup_s']:.2f} s, RSS {sw['rss_idle_bytes'] / 1e6:.0f} MB idle, "
          f"{sw['rss_after_bytes'] / 1e6:.0f} MB after the runs; reps={args.reps}; ratio = obstore / boto3")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
