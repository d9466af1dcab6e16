"""A local Apache ZooKeeper as a child process: for tests, ``make cluster`` and trying cluster mode.

It runs Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``) directly with
``ZooKeeperServerMain`` (or ``QuorumPeerMain`` for an ensemble), not through ``zkServer.sh``,
which reads ``/etc/zookeeper``, logs to ``/var/log`` and turns on JMX. Everything binds to
127.0.0.1; the admin server (Jetty on :8080) is off so instances never collide. Readiness is the
``srvr`` four-letter word answering ``Mode: standalone|leader|follower``: ``ruok`` says ``imok``
before the server serves (replication reference 1.3). Stopped by process id.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ZOOKEEPER_JAR = Path(os.environ.get("STRATA_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")
JVM_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xms16m", "-Xmx128m", "-XX:-UsePerfData",
             "-Xss512k", "-Dzookeeper.cnxTimeout=1000", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


class ZooKeeperNotInstalled(RuntimeError):
    pass


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


_handed_out: set[int] = set()
_share: tuple[int, int] = (0, 1)  # (index, count): this process takes only ports with port % count == index


def share_ports(index: int, count: int) -> None:
    """Several processes that pick ports at once (pytest-xdist's workers) each take a disjoint residue class,
    so two of them never hand out the same port between one's probe and its server's bind."""
    if not 0 <= index < count:
        raise ValueError(f"port share {index} of {count}")
    global _share
    _share = (index, count)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A free 127.0.0.1 port to bind *later* (a broker or ZooKeeper told its port up front).

    Chosen below the kernel's ephemeral range: a port taken from that range (``bind(0)``) can be handed
    by the kernel to any outgoing connection - another broker's ZooKeeper session, a client - between
    this call and the bind, and the server then fails with EADDRINUSE (a clean-clone run hit it). Ports
    outside the range are only ever taken by an explicit bind. Never the same port twice per process, and
    never a port of another process's share (:func:`share_ports`).
    """
    low, _ = _ephemeral_range()
    floor = 10_000 if low > 12_000 else 1024
    for _ in range(2000):
        index, count = _share
        port = random.randrange(floor, low)
        port -= (port - index) % count
        if port < floor or port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free 127.0.0.1 port in {floor}..{low - 1}")


def four_letter(port: int, cmd: str = "srvr", timeout_s: float = 0.5, host: str = "127.0.0.1") -> str:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(cmd.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


@dataclass
class ZooKeeperServer:
    """One server; ``peers`` (id -> (quorum port, election port)) makes it an ensemble member.

    ``host`` is the address it binds (127.0.0.1, or its network namespace's in the nemesis suite, with
    ``wrap`` the command prefix that runs it there: ``ip netns exec NAME``); ``peer_hosts`` the members'.
    """

    directory: Path
    port: int = 0
    tick_ms: int = 500
    myid: int | None = None
    peers: dict[int, tuple[int, int]] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"
    wrap: tuple[str, ...] = ()
    peer_hosts: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # absolute: the server runs in its own directory, where a relative config path would not resolve
        self.directory = Path(self.directory).absolute()
        if not self.port:
            self.port = free_port()

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def _write_config(self) -> Path:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [f"tickTime={self.tick_ms}", "initLimit=10", "syncLimit=5", f"dataDir={data}",
                 f"clientPort={self.port}", f"clientPortAddress={self.host}", "admin.enableServer=false",
                 "4lw.commands.whitelist=ruok,srvr,mntr,stat", f"minSessionTimeout={2 * self.tick_ms}",
                 "maxSessionTimeout=60000", "autopurge.purgeInterval=0"]
        for sid, (quorum, election) in sorted(self.peers.items()):
            lines.append(f"server.{sid}={self.peer_hosts.get(sid, '127.0.0.1')}:{quorum}:{election}")
        if self.peers:
            (data / "myid").write_text(f"{self.myid}\n")
        cfg = self.directory / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        return cfg

    def start(self) -> ZooKeeperServer:
        if not zookeeper_available():
            raise ZooKeeperNotInstalled(f"ZooKeeper not found ({ZOOKEEPER_JAR}); install Debian's "
                                        "'zookeeper' package (apt-get install zookeeper) and Java")
        cfg = self._write_config()
        main = ("org.apache.zookeeper.server.quorum.QuorumPeerMain" if self.peers
                else "org.apache.zookeeper.server.ZooKeeperServerMain")
        classpath = f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE}" if SLF4J_SIMPLE.exists() else str(ZOOKEEPER_JAR)
        out = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            self.process = subprocess.Popen([*self.wrap, "java", *JVM_FLAGS, "-cp", classpath, main, str(cfg)],
                                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            cwd=self.directory, start_new_session=True)
        finally:
            out.close()
        return self

    def mode(self) -> str | None:
        reply = four_letter(self.port, host=self.host)
        if "Mode:" not in reply:
            return None
        return reply.split("Mode:", 1)[1].split()[0]

    def wait_ready(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}; see "
                                   f"{self.directory / 'zookeeper.log'}")
            if self.mode() in ("standalone", "leader", "follower"):
                return self
            time.sleep(0.02)
        raise TimeoutError(f"ZooKeeper on port {self.port} not serving after {timeout_s}s")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        p = self.process
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout_s)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def freeze(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)


@dataclass
class ZooKeeperEnsemble:
    """``size`` servers forming one quorum, on 127.0.0.1 or each at ``hosts[i]`` run through ``wraps[i]``."""

    directory: Path
    size: int = 3
    tick_ms: int = 500
    servers: list[ZooKeeperServer] = field(default_factory=list)
    hosts: list[str] | None = None
    wraps: list[tuple[str, ...]] | None = None

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).absolute()
        if not self.servers:
            peers = {i: (free_port(), free_port()) for i in range(1, self.size + 1)}
            hosts = {i: self.hosts[i - 1] if self.hosts else "127.0.0.1" for i in peers}
            self.servers = [ZooKeeperServer(self.directory / f"zk{i}", tick_ms=self.tick_ms, myid=i, peers=peers,
                                            host=hosts[i], wrap=self.wraps[i - 1] if self.wraps else (),
                                            peer_hosts=hosts)
                            for i in peers]

    @property
    def connect(self) -> str:
        return ",".join(s.connect for s in self.servers)

    def start(self) -> ZooKeeperEnsemble:
        """Start every member that is not running (all of them at first; after a failure, the dead)."""
        for s in self.servers:
            if s.pid is None:
                s.start()
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> ZooKeeperEnsemble:
        for s in self.servers:
            s.wait_ready(timeout_s)
        return self

    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if s.pid is not None and s.mode() == "leader"), None)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
