"""``make cluster``: a local ZooKeeper and three Strata brokers on 127.0.0.1, stopped together by Ctrl-C.

    python -m strata.tools.local_cluster [--dir DIR] [--brokers N] [--base-port 9092] [--zk-port 2181]
                                         [--metrics-base-port 9404] [--config FILE] [--set KEY=VALUE ...]

Everything lives under one folder (``--dir``, default ``./cluster-data`` or ``$CLUSTER_DIR``):
``zookeeper/`` (its data, ``zoo.cfg`` and ``zookeeper.log``), ``broker-N/logs`` (each broker's log
dirs) with ``broker-N/broker.log`` (what it printed), and ``remote-storage/`` (the ``local``
remote store the brokers would share like a bucket). Running it again on the same folder brings
the same cluster back (ZooKeeper's data and the logs are kept); delete the folder for a new one.

Broker N is ``python -m strata serve --config FILE --set ...`` with ``broker.id=N``, listening on
``base-port + N - 1`` with its metrics endpoint on ``metrics-base-port + N - 1``,
``zookeeper.connect=HOST:ZK_PORT/strata`` and tiered storage off (cluster mode refuses it for now).
Once every broker has logged its ready line the bootstrap string is printed. SIGINT or SIGTERM
stops the brokers one after the other (each does its controlled shutdown while the others still
run), then ZooKeeper, each by its process id; a second signal kills whatever is left at once.
Children run in their own sessions, so a terminal's Ctrl-C reaches only this process, which then
stops them in order; on Linux the brokers also get SIGTERM should this process die without doing so.
The pids are kept in ``local-cluster.pid`` in the folder: a second run on a folder whose cluster is
still up is refused, and a ZooKeeper left over by a killed run is stopped (by its pid, once its
command line shows it belongs to this folder) before starting again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strata.tools.zookeeper import ZooKeeperServer, zookeeper_available

DEFAULT_DIR = "cluster-data"
DEFAULT_CONFIG = Path("config") / "server.properties"
CHROOT = "/strata"
ZK_HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
EXIT_NO_ZOOKEEPER = 2
PID_FILE = "local-cluster.pid"

_READY = re.compile(r"strata broker ready on (\S+):(\d+)")
_METRICS = re.compile(r"metrics on (http://\S+/metrics)")

INSTALL_HINT = ("ZooKeeper is not installed (needs /usr/share/java/zookeeper.jar and java). On Debian or Ubuntu:\n"
                "    sudo apt-get install zookeeper\n"
                "or `make zookeeper` as root; STRATA_ZOOKEEPER_JAR points to another zookeeper.jar.")


class ClusterError(Exception):
    """A startup failure to report as one message (exit code 1)."""


@dataclass
class BrokerChild:
    broker_id: int
    host: str
    port: int
    data_dir: Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    log_offset: int = 0
    metrics_url: str | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # The exact command, so an operator can restart one broker by hand (after killing or wiping it).
        script = self.data_dir / "restart.sh"
        script.write_text(
            "#!/bin/sh\n# restart this broker as the local cluster started it (its log: broker.log beside this)\n"
            f"cd {shlex.quote(str(Path.cwd()))} && exec {shlex.join(self.args)} "
            f">> {shlex.quote(str(self.log_path))} 2>&1\n")
        script.chmod(0o755)
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_die_with_parent)

    def output(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def ready(self) -> bool:
        """Whether this start's output has the ready line (which follows the metrics line)."""
        text = self.output()
        if _READY.search(text) is None:
            return False
        m = _METRICS.search(text)
        self.metrics_url = m.group(1) if m else None
        return True

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class LocalCluster:
    directory: Path
    brokers: int = 3
    host: str = "127.0.0.1"
    base_port: int = 9092
    zk_port: int = 2181
    metrics_base_port: int = 9404
    config: Path | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable
    say: Callable[[str], None] = print
    zookeeper: ZooKeeperServer | None = None
    children: list[BrokerChild] = field(default_factory=list)

    @property
    def zookeeper_connect(self) -> str:
        return f"{ZK_HOST}:{self.zk_port}{CHROOT}"  # ZooKeeperServer binds the loopback address only

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.children)

    def metrics_port(self, broker_id: int) -> int:
        return self.metrics_base_port + broker_id - 1 if self.metrics_base_port > 0 else self.metrics_base_port

    def broker_props(self, broker_id: int) -> dict[str, str]:
        rf = str(min(3, self.brokers))
        port = self.base_port + broker_id - 1
        listener_host = f"[{self.host}]" if ":" in self.host else self.host
        return {
            "node.id": str(broker_id), "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{listener_host}:{port}",
            "zookeeper.connect": self.zookeeper_connect,
            "log.dirs": str(self.directory / f"broker-{broker_id}" / "logs"),
            "metrics.port": str(self.metrics_port(broker_id)),
            "metrics.host": self.host,
            # tiered storage as in server.properties, the brokers sharing one `local` store as they would
            # one bucket, and __remote_log_metadata replicated like the other internal topics
            "rsm.config.dir": str(self.directory / "remote-storage"),
            "rlmm.config.remote.log.metadata.topic.replication.factor": rf,
            "default.replication.factor": rf,
            "offsets.topic.replication.factor": rf,
            **self.overrides,
        }

    def check_ports(self) -> None:
        busy = [] if _port_free(ZK_HOST, self.zk_port) else [f"{self.zk_port} for ZooKeeper (--zk-port)"]
        wanted: dict[int, str] = {}
        for i in range(1, self.brokers + 1):
            wanted[self.base_port + i - 1] = f"broker {i} (--base-port)"
            if self.metrics_port(i) > 0:
                wanted[self.metrics_port(i)] = f"broker {i}'s metrics (--metrics-base-port)"
        busy += [f"{port} for {what}" for port, what in wanted.items() if not _port_free(self.host, port)]
        if busy:
            raise ClusterError(f"port(s) in use on {self.host}: {', '.join(busy)}; is another cluster running? "
                               "Choose other ports with --base-port / --zk-port / --metrics-base-port")

    # -- start ----------------------------------------------------------------------------------

    def pids(self) -> dict[str, int]:
        out = {}
        if self.zookeeper is not None and self.zookeeper.process is not None:
            out["zookeeper"] = self.zookeeper.process.pid
        for b in self.children:
            if b.proc is not None:
                out[f"broker-{b.broker_id}"] = b.proc.pid
        return out

    def start(self, stop_requested: Callable[[], bool] = lambda: False, timeout_s: float = START_TIMEOUT_S,
              on_child: Callable[[], None] = lambda: None) -> None:
        """ZooKeeper, then every broker (started together), returning once each logged its ready line;
        ``on_child()`` after each process is started."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.check_ports()
        self.zookeeper = ZooKeeperServer(self.directory / "zookeeper", port=self.zk_port)
        self.zookeeper.start()
        on_child()
        try:
            self.zookeeper.wait_ready(timeout_s)
        except (RuntimeError, TimeoutError) as e:
            raise ClusterError(f"ZooKeeper did not start: {e}") from None
        for i in range(1, self.brokers + 1):
            args = [self.python, "-m", "strata", "serve"]
            if self.config is not None:
                args += ["--config", str(self.config)]
            for k, v in self.broker_props(i).items():
                args += ["--set", f"{k}={v}"]
            b = BrokerChild(i, self.host, self.base_port + i - 1, self.directory / f"broker-{i}", args)
            self.children.append(b)
            b.start()
            on_child()
        deadline = time.monotonic() + timeout_s
        waiting = list(self.children)
        while waiting:
            if stop_requested():
                raise ClusterError("interrupted while starting")
            for b in list(waiting):
                if b.ready():
                    waiting.remove(b)
                elif not b.running:
                    code = b.proc.returncode if b.proc is not None else None
                    raise ClusterError(f"broker {b.broker_id} exited with code {code} while starting; "
                                       f"its log {b.log_path} ends with:\n{_tail(b.output())}")
            if waiting and time.monotonic() > deadline:
                b = waiting[0]
                raise ClusterError(f"broker {b.broker_id} not ready after {timeout_s:g}s; "
                                   f"its log {b.log_path} ends with:\n{_tail(b.output())}")
            time.sleep(0.1)

    def describe(self) -> list[str]:
        zk = self.zookeeper
        lines = [f"zookeeper  {ZK_HOST}:{self.zk_port}  pid {zk.pid if zk else '-'}  "
                 f"log {self.directory / 'zookeeper' / 'zookeeper.log'}"]
        for b in self.children:
            metrics = f"  metrics {b.metrics_url}" if b.metrics_url else ""
            lines.append(f"broker {b.broker_id}   {b.address}{metrics}  pid {b.proc.pid if b.proc else '-'}  "
                         f"log {b.log_path}")
        lines.append(f"zookeeper.connect={self.zookeeper_connect}")
        lines.append(f"bootstrap.servers={self.bootstrap}")
        return lines

    # -- stop -----------------------------------------------------------------------------------

    def stop(self, hurry: Callable[[], bool] = lambda: False, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Stop the brokers one by one (SIGTERM, SIGKILL after ``timeout_s`` or when ``hurry()``), then
        ZooKeeper; returns how many had to be killed."""
        killed = 0
        for b in self.children:
            if b.proc is None:
                continue
            if b.proc.poll() is None:
                self.say(f"stopping broker {b.broker_id} (pid {b.proc.pid})")
                with contextlib.suppress(ProcessLookupError):
                    b.proc.send_signal(signal.SIGKILL if hurry() else signal.SIGTERM)
                deadline = time.monotonic() + timeout_s
                while b.proc.poll() is None:
                    if hurry() or time.monotonic() > deadline:
                        with contextlib.suppress(ProcessLookupError):
                            b.proc.kill()
                        killed += 1
                        b.proc.wait(10)
                        break
                    time.sleep(0.05)
            else:
                b.proc.wait()
        zk = self.zookeeper
        if zk is not None and zk.pid is not None:
            self.say(f"stopping zookeeper (pid {zk.pid})")
            zk.stop(signal.SIGKILL if hurry() else signal.SIGTERM)
        return killed


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when this process dies (Linux ``PR_SET_PDEATHSIG``)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the brokers bind: TIME_WAIT is no conflict
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines()[-lines:])


def _read_pids(pid_file: Path) -> dict[str, int]:
    """``role pid`` lines of the pid file (``local_cluster``, ``zookeeper``, ``broker-N``)."""
    out: dict[str, int] = {}
    try:
        text = pid_file.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        role, _, pid = line.partition(" ")
        if pid.strip().isdigit():
            out[role] = int(pid)
    return out


def _cmdline(pid: int) -> bytes | None:
    """The process's command line (Linux), or None when it is gone or cannot be read."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _running_instance(pids: dict[str, int]) -> int | None:
    """The pid of a local cluster still running on this folder, per its pid file."""
    pid = pids.get("local_cluster")
    if pid is None or pid == os.getpid():
        return None
    cmdline = _cmdline(pid)
    return pid if cmdline is not None and b"local_cluster" in cmdline else None


def _stop_leftovers(pids: dict[str, int], directory: Path, say: Callable[[str], None]) -> None:
    """Children of a run whose manager was killed (``kill -9``: ZooKeeper outlives it; brokers get SIGTERM
    on Linux): stopped by pid, once their command line shows they are this folder's."""
    mine = str(directory).encode()
    for role, pid in pids.items():
        if role == "local_cluster":
            continue
        cmdline = _cmdline(pid)
        if cmdline is None or mine not in cmdline:
            continue
        say(f"stopping {role} (pid {pid}) left running by a previous run")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _cmdline(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if _cmdline(pid) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m strata.tools.local_cluster",
        description="Start a local ZooKeeper and Strata brokers on one host; Ctrl-C stops them all.")
    p.add_argument("--dir", type=Path, default=Path(os.environ.get("CLUSTER_DIR") or DEFAULT_DIR),
                   help=f"folder holding every process's data and logs (default $CLUSTER_DIR or ./{DEFAULT_DIR})")
    p.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--host", default="127.0.0.1", help="address everything listens on (default 127.0.0.1)")
    p.add_argument("--base-port", type=int, default=9092, help="broker N listens on BASE_PORT+N-1 (default 9092)")
    p.add_argument("--zk-port", type=int, default=2181, help="ZooKeeper's client port (default 2181)")
    p.add_argument("--metrics-base-port", type=int, default=9404,
                   help="broker N serves /metrics on METRICS_BASE_PORT+N-1 (default 9404; 0 picks free ports, "
                        "-1 disables)")
    p.add_argument("--config", default=str(DEFAULT_CONFIG),
                   help=f"server.properties every broker starts from (default {DEFAULT_CONFIG}; '' for none)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every broker (repeatable)")
    p.add_argument("--start-timeout", type=float, default=START_TIMEOUT_S, metavar="SECONDS",
                   help=f"how long to wait for each broker's ready line (default {START_TIMEOUT_S:g})")
    args = p.parse_args(argv)
    if args.brokers < 1:
        p.error("--brokers must be at least 1")
    for name in ("base_port", "zk_port"):
        if not 0 < getattr(args, name) < 65536:
            p.error(f"--{name.replace('_', '-')} must be a port number")
    if args.base_port + args.brokers - 1 > 65535 or args.metrics_base_port + args.brokers - 1 > 65535:
        p.error("ports beyond 65535")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def say(text: str) -> None:
        print(text, flush=True)

    if not zookeeper_available():
        print(f"local cluster: {INSTALL_HINT}", file=sys.stderr, flush=True)
        return EXIT_NO_ZOOKEEPER
    overrides: dict[str, str] = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"local cluster: --set expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value.strip()
    config: Path | None = None
    if args.config:
        config = Path(args.config).resolve()
        if not config.is_file():
            print(f"local cluster: no config file {config} (--config '' starts from the built-in defaults)",
                  file=sys.stderr)
            return 2
    directory = args.dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    pid_file = directory / PID_FILE
    previous_pids = _read_pids(pid_file)
    other = _running_instance(previous_pids)
    if other is not None:
        print(f"local cluster: already running on {directory} (pid {other}); stop it first", file=sys.stderr)
        return 1
    _stop_leftovers(previous_pids, directory, say)

    signals: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = LocalCluster(directory, brokers=args.brokers, host=args.host, base_port=args.base_port,
                           zk_port=args.zk_port, metrics_base_port=args.metrics_base_port, config=config,
                           overrides=overrides, say=say)
    code = 0
    try:
        def record_pids() -> None:
            pids = {"local_cluster": os.getpid(), **cluster.pids()}
            pid_file.write_text("".join(f"{role} {pid}\n" for role, pid in pids.items()))

        record_pids()
        say(f"starting zookeeper and {args.brokers} brokers under {directory}")
        try:
            cluster.start(stop_requested=lambda: bool(signals), timeout_s=args.start_timeout, on_child=record_pids)
        except ClusterError as e:
            print(f"local cluster: {e}", file=sys.stderr, flush=True)
            code = 1 if not signals else 0
        else:
            for line in cluster.describe():
                say(line)
            say(f"local cluster ready (data under {directory}); Ctrl-C stops it")
            exited: set[int] = set()
            while not signals:
                for b in cluster.children:
                    if b.proc is not None and b.proc.poll() is not None and b.broker_id not in exited:
                        say(f"broker {b.broker_id} exited with code {b.proc.returncode}; see {b.log_path}")
                        exited.add(b.broker_id)
                time.sleep(0.2)
            say("stopping (a second Ctrl-C kills what is left)")
    finally:
        first = len(signals)
        killed = cluster.stop(hurry=lambda: len(signals) > first)
        if killed:
            say(f"killed {killed} broker(s) that did not stop in time")
        with contextlib.suppress(OSError):
            pid_file.unlink()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    say("local cluster stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())
