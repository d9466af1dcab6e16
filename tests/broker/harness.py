"""A real broker process for tests: ``python -m strata serve`` on 127.0.0.1, a port outside the ephemeral range.

Started with bounded waits (the ready line within ``READY_TIMEOUT_S``), stopped by its pid
(SIGTERM, then SIGKILL after a bound), its stderr kept in ``broker.log`` beside its data so a
failing test can show what the broker said.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from strata.tools.zookeeper import free_port

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
_READY = re.compile(r"strata broker ready on ([\d.]+):(\d+)")

TEST_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "log.segment.delete.delay.ms": "0",
}


class BrokerProcess:
    """``listeners``: more named listeners beside the PLAINTEXT one, name -> security protocol (their ports
    are chosen here and kept across restarts: ``listener_ports``)."""

    def __init__(self, data_dir: Path, props: dict[str, str] | None = None,
                 listeners: dict[str, str] | None = None, host: str = "127.0.0.1",
                 wrap: tuple[str, ...] = ()) -> None:
        """``host``/``wrap``: the address it listens on and the command prefix that runs it (the nemesis
        suite's network namespaces: ``ip netns exec NAME``, which execs, so the pid is the broker's)."""
        self.data_dir = data_dir
        self.verbose = bool(os.environ.get("STRATA_TEST_BROKER_VERBOSE"))  # INFO in broker.log, for debugging
        self.host = host
        self.wrap = wrap
        self.props = {**TEST_DEFAULTS, **(props or {})}
        self.listeners = dict(listeners or {})
        self.listener_ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.log_path = data_dir / "broker.log"
        self.starts = 0
        self._ready_from = 0  # where the current run's output starts in broker.log

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "broker not started"
        return f"{self.host}:{self.port}"

    def address(self, listener: str) -> str:
        """``127.0.0.1:PORT`` of a named listener (``PLAINTEXT``: the bootstrap one)."""
        return self.bootstrap if listener == "PLAINTEXT" else f"{self.host}:{self.listener_ports[listener]}"

    def start(self) -> BrokerProcess:
        """Start (or restart on the same port, so clients can reconnect) and wait for the ready line."""
        return self.launch().wait_ready()

    def launch(self) -> BrokerProcess:
        """Spawn the process without waiting for it: a cluster launches every broker, then waits for each."""
        assert self.proc is None, "already running"
        # A port below the ephemeral range, kept across restarts: a bind(0) port could be taken by an
        # outgoing connection while the broker is down and the restart would fail with EADDRINUSE.
        port = self.port = self.port or free_port()
        for name in self.listeners:
            self.listener_ports.setdefault(name, free_port())
        endpoints = ([f"PLAINTEXT://{self.host}:{port}"]
                     + [f"{n}://{self.host}:{p}" for n, p in self.listener_ports.items()])
        args = [*self.wrap, sys.executable, "-m", "strata", "serve", *(["-v"] if self.verbose else []),
                "--set", f"log.dirs={self.data_dir / 'logs'}",
                "--set", f"listeners={','.join(endpoints)}"]
        if self.listeners:
            protocols = {"PLAINTEXT": "PLAINTEXT", **self.listeners}
            args += ["--set", "listener.security.protocol.map=" + ",".join(f"{n}:{p}" for n, p in protocols.items())]
        for k, v in self.props.items():
            args += ["--set", f"{k}={v}"]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "ab")  # noqa: SIM115 (owned by the child)
        self._ready_from = self.log_path.stat().st_size
        self.proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log_file.close()
        self.starts += 1
        return self

    def wait_ready(self) -> BrokerProcess:
        """Until the launched process prints its ready line (bounded by ``READY_TIMEOUT_S``)."""
        assert self.proc is not None, "not launched"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[self._ready_from:].decode(errors="replace")
            m = _READY.search(text)
            if m:
                self.port = int(m.group(2))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{text[-4000:]}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker not ready after {READY_TIMEOUT_S}s:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the broker and wait for it to exit; returns its exit code."""
        if self.proc is None:
            return 0
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(
                    f"broker did not stop within {STOP_TIMEOUT_S}s of {sig!r}:\n{self.tail()}") from None
        return proc.returncode

    def kill(self) -> None:
        """``kill -9``: no shutdown work at all."""
        self.stop(signal.SIGKILL)

    def restart(self, hard: bool = False) -> BrokerProcess:
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __del__(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
