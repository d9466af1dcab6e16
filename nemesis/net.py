"""Real network faults on one machine: each node in a Linux network namespace of its own.

Why namespaces: a broker and ZooKeeper on 127.0.0.1 can only be killed or frozen. Jepsen's findings in
Kafka-like systems came from faults a process cannot see coming: a leader that clients reach but
ZooKeeper does not, one direction of a link failing, packets dropped or delayed. Those need real TCP
connections crossing a real (virtual) network, which namespaces give without containers or VMs.

Topology: a bridge in the root namespace (the test process, its clients and its checker live there, at
``.1``), and per node a namespace with one veth pair, the inner end ``eth0`` at ``.<10 + n>``. Faults:

- **drop** ``src -> dst``: an nftables input rule in ``dst``'s namespace drops what ``src`` sends (no ICMP,
  no RST, no error at the sender): TCP connections hang until their timeouts, as they do behind a failed
  switch. Without nftables, a blackhole route in ``src``'s namespace (the sender's kernel then fails its
  sends with EINVAL: a partition, but a faster-failing one). One direction only; :meth:`Lab.partition`
  drops both ways. The root
  namespace (the clients) is a node too (:data:`CLIENTS`): ``drop(node, CLIENTS)`` makes a node
  unreachable for clients, in one direction or both.
- **loss**: a share of the packets a node sends dropped at random, an nftables rule (``numgen random``).
- **slow link**: a token bucket (``tc qdisc tbf``) on a node's ``eth0``: bandwidth capped, so queues and
  delays grow with load.
- **netem** (delay with jitter, reordering) where the kernel has ``sch_netem``: this CI kernel is built
  without it (``CONFIG_NET_SCH_NETEM`` unset), so :func:`netem_available` says no and the nemesis
  schedules the faults above instead.

Every name this module creates carries the lab's prefix, so :func:`cleanup_stale` can remove what a
killed run left behind. Needs root (CAP_NET_ADMIN) and iproute2; :func:`available` says whether this
machine can, and why not.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

CLIENTS = "clients"  # the root namespace: the test process and its clients
_CMD_TIMEOUT_S = 10.0


class NetError(RuntimeError):
    pass


def _run(argv: list[str], check: bool) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=_CMD_TIMEOUT_S)
    if check and r.returncode != 0:
        raise NetError(f"{' '.join(argv)}: {r.stderr.strip() or r.returncode}")
    return r


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *(["-n", netns] if netns else []), *args], check)


def _tc(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", "netns", "exec", netns, "tc", *args], check)


def _nft(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", "netns", "exec", netns, "nft", *args], check)


def _nft_root(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["nft", *args], check)


def _probe_qdisc(kind: Sequence[str]) -> bool:
    probe = f"snq{os.getpid() % 100000}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return False
    try:
        return _tc(probe, "qdisc", "add", "dev", "lo", "root", *kind, check=False).returncode == 0
    finally:
        _ip("netns", "del", probe, check=False)


def netem_available() -> bool:
    """Whether the kernel has ``sch_netem`` (delay, reordering)."""
    return _probe_qdisc(["netem", "delay", "1ms"])


def nft_available() -> bool:
    """Whether ``nft`` is installed (random loss); the kernel's nf_tables is assumed with it."""
    return shutil.which("nft") is not None


def available() -> str | None:
    """``None`` when namespaces can be made here, else the reason (for a clear skip message)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2) is not installed: apt-get install iproute2"
    probe = f"snprobe{os.getpid() % 100000}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def cleanup_stale(prefix: str = "sn") -> list[str]:
    """Delete namespaces and bridges named ``<prefix>...`` (a killed run's leftovers); what was removed."""
    removed = []
    listing = _ip("netns", "list", check=False).stdout.split("\n")
    for line in listing:
        name = line.split(" ")[0].strip()
        if name.startswith(prefix) and name:
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.split("\n"):
        parts = line.split(": ")
        if len(parts) > 1 and parts[1].split("@")[0].startswith(prefix):
            _ip("link", "del", parts[1].split("@")[0], check=False)
            removed.append(parts[1])
    if nft_available():
        for line in _nft_root("list", "tables", check=False).stdout.split("\n"):
            parts = line.split()
            if len(parts) == 3 and parts[2].startswith(f"{prefix}drop"):
                _nft_root("delete", "table", parts[1], parts[2], check=False)
                removed.append(parts[2])
    return removed


@dataclass
class Node:
    name: str
    index: int
    netns: str
    address: str
    host_veth: str


@dataclass
class Lab:
    """A bridge and one namespace per node; faults between them. Use as a context manager."""

    nodes_wanted: Sequence[str]
    lab_id: int = field(default_factory=lambda: os.getpid() % 250 + 1)
    prefix: str = "sn"
    nodes: dict[str, Node] = field(default_factory=dict)
    _drops: set[tuple[str, str]] = field(default_factory=set)
    _netem: set[str] = field(default_factory=set)
    _slow: set[str] = field(default_factory=set)
    _loss: dict[str, int] = field(default_factory=dict)
    receiver_drops: bool = field(default_factory=lambda: nft_available())

    def __post_init__(self) -> None:
        if len(set(self.nodes_wanted)) != len(self.nodes_wanted) or CLIENTS in self.nodes_wanted:
            raise ValueError(f"node names must be unique and not {CLIENTS!r}: {list(self.nodes_wanted)}")
        # 10.213.<lab>.0/24 inside namespaces this lab made: never an address outside this machine
        self.network = ipaddress.ip_network(f"10.213.{self.lab_id}.0/24")
        self.bridge = f"{self.prefix}br{self.lab_id}"
        self.gateway = str(self.network.network_address + 1)

    # -- set-up and tear-down -------------------------------------------------------------------

    def __enter__(self) -> Lab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Lab:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(self.nodes_wanted):
                self._add_node(name, i)
        except BaseException:
            self.close()
            raise
        return self

    def _add_node(self, name: str, i: int) -> None:
        netns = f"{self.prefix}{self.lab_id}-{name}"
        host_veth, inner = f"{self.prefix}{self.lab_id}v{i}", f"{self.prefix}{self.lab_id}p{i}"
        address = str(self.network.network_address + 10 + i)
        _ip("netns", "add", netns)
        node = Node(name, i, netns, address, host_veth)
        self.nodes[name] = node
        _ip("link", "add", host_veth, "type", "veth", "peer", "name", inner)
        _ip("link", "set", host_veth, "master", self.bridge)
        _ip("link", "set", host_veth, "up")
        _ip("link", "set", inner, "netns", netns)
        _ip("link", "set", inner, "name", "eth0", netns=netns)
        _ip("addr", "add", f"{address}/24", "dev", "eth0", netns=netns)
        _ip("link", "set", "eth0", "up", netns=netns)
        _ip("link", "set", "lo", "up", netns=netns)
        _ip("route", "add", "default", "via", self.gateway, netns=netns)

    def close(self) -> None:
        for node in self.nodes.values():
            _ip("netns", "del", node.netns, check=False)  # takes its veth pair with it
            _ip("link", "del", node.host_veth, check=False)
        self.nodes.clear()
        if self.receiver_drops:
            _nft_root("delete", "table", "inet", f"{self.prefix}drop{self.lab_id}", check=False)
        _ip("link", "del", self.bridge, check=False)
        self._drops.clear()
        self._netem.clear()
        self._slow.clear()
        self._loss.clear()

    # -- running things inside -------------------------------------------------------------------

    def command(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node``'s namespace (for ``subprocess.Popen``)."""
        return ["ip", "netns", "exec", self.nodes[node].netns, *argv]

    def address(self, node: str) -> str:
        return self.gateway if node == CLIENTS else self.nodes[node].address

    # -- faults ----------------------------------------------------------------------------------

    def drop(self, src: str, dst: str) -> None:
        """Packets from ``src`` to ``dst`` vanish (one direction). ``CLIENTS`` is the root namespace.

        With nftables the receiver drops them (an input rule in ``dst``'s namespace): the sender sees nothing
        at all, as behind a failed link, and its connections time out. Without it, a blackhole route in
        ``src``'s namespace: packets vanish as well, but the sender's own kernel answers a connect or send
        with EINVAL, a faster failure than a real network gives.
        """
        if (src, dst) in self._drops:
            return
        self._drops.add((src, dst))
        if self.receiver_drops:
            self._sync_input_drops(dst)
        else:
            netns = None if src == CLIENTS else self.nodes[src].netns
            _ip("route", "add", "blackhole", f"{self.address(dst)}/32", netns=netns)

    def undrop(self, src: str, dst: str) -> None:
        if (src, dst) not in self._drops:
            return
        self._drops.discard((src, dst))
        if self.receiver_drops:
            self._sync_input_drops(dst)
        else:
            netns = None if src == CLIENTS else self.nodes[src].netns
            _ip("route", "del", "blackhole", f"{self.address(dst)}/32", netns=netns, check=False)

    def _input_table(self, node: str) -> tuple[str | None, str]:
        """The namespace (None: the root one) and the nftables table holding ``node``'s input drops; the root
        namespace's table is named after the lab, so labs and the host's own rules never meet."""
        return (None, f"{self.prefix}drop{self.lab_id}") if node == CLIENTS else (self.nodes[node].netns,
                                                                                   "nemesis_drop")

    def _sync_input_drops(self, dst: str) -> None:
        """Rewrite ``dst``'s input chain from the drops in force (one flush and a rule per source)."""
        netns, table = self._input_table(dst)
        sources = sorted(self.address(s) for s, d in self._drops if d == dst)
        run = (lambda *a, check=True: _nft(netns, *a, check=check)) if netns else _nft_root
        if not sources:
            run("delete", "table", "inet", table, check=False)
            return
        run("add", "table", "inet", table)
        run("add", "chain", "inet", table, "in", "{ type filter hook input priority -10; policy accept; }")
        run("flush", "chain", "inet", table, "in")
        run("add", "rule", "inet", table, "in", "ip", "saddr", "{ " + ", ".join(sources) + " }", "drop")

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """No packet crosses between the two sides, either way."""
        b = list(side_b)
        for x in side_a:
            for y in b:
                self.drop(x, y)
                self.drop(y, x)

    def isolate(self, node: str, from_nodes: Iterable[str] | None = None) -> None:
        """``node`` cut off from ``from_nodes`` (default: every other node and the clients), both ways."""
        others = [n for n in [*self.nodes, CLIENTS] if n != node] if from_nodes is None else list(from_nodes)
        self.partition([node], others)

    def loss(self, node: str, pct: int) -> None:
        """``pct`` percent of the packets ``node`` sends dropped at random (nftables ``numgen random``)."""
        if not 0 < pct <= 100:
            raise ValueError(f"loss must be 1..100 percent, not {pct}")
        netns = self.nodes[node].netns
        if node in self._loss:
            _nft(netns, "delete", "table", "inet", "nemesis", check=False)
        _nft(netns, "add", "table", "inet", "nemesis")
        _nft(netns, "add", "chain", "inet", "nemesis", "out",
             "{ type filter hook output priority 0; policy accept; }")
        _nft(netns, "add", "rule", "inet", "nemesis", "out", "oifname", "eth0", "numgen", "random", "mod", "100",
             "<", str(pct), "drop")
        self._loss[node] = pct

    def clear_loss(self, node: str) -> None:
        if self._loss.pop(node, None) is not None:
            _nft(self.nodes[node].netns, "delete", "table", "inet", "nemesis", check=False)

    def slow(self, node: str, rate_kbit: int) -> None:
        """``node``'s outgoing bandwidth capped at ``rate_kbit`` (a token bucket): queueing delay under load."""
        netns = self.nodes[node].netns
        verb = "change" if node in self._slow else "add"
        _tc(netns, "qdisc", verb, "dev", "eth0", "root", "tbf", "rate", f"{rate_kbit}kbit", "burst", "16kb",
            "latency", "2s")
        self._slow.add(node)

    def clear_slow(self, node: str) -> None:
        if node in self._slow:
            _tc(self.nodes[node].netns, "qdisc", "del", "dev", "eth0", "root", check=False)
            self._slow.discard(node)

    def netem(self, node: str, *, loss_pct: float = 0.0, delay_ms: int = 0, jitter_ms: int = 0,
              reorder_pct: float = 0.0) -> None:
        """Loss, delay (with jitter) and reordering on everything ``node`` sends (kernels with sch_netem)."""
        if node in self._slow:
            raise NetError(f"{node} has a slow link already: one root qdisc per node")
        args = []
        if delay_ms or jitter_ms or reorder_pct:
            args += ["delay", f"{max(delay_ms, 1)}ms"] + ([f"{jitter_ms}ms"] if jitter_ms else [])
        if loss_pct:
            args += ["loss", f"{loss_pct}%"]
        if reorder_pct:
            args += ["reorder", f"{reorder_pct}%", "50%"]
        if not args:
            raise ValueError("netem needs loss, delay or reordering")
        netns = self.nodes[node].netns
        verb = "change" if node in self._netem else "add"
        _tc(netns, "qdisc", verb, "dev", "eth0", "root", "netem", *args)
        self._netem.add(node)

    def clear_netem(self, node: str) -> None:
        if node in self._netem:
            _tc(self.nodes[node].netns, "qdisc", "del", "dev", "eth0", "root", check=False)
            self._netem.discard(node)

    def heal(self) -> None:
        """Every drop and every netem removed."""
        for src, dst in list(self._drops):
            self.undrop(src, dst)
        for node in list(self._netem):
            self.clear_netem(node)
        for node in list(self._slow):
            self.clear_slow(node)
        for node in list(self._loss):
            self.clear_loss(node)

    @property
    def faults(self) -> list[str]:
        """The faults in force, readable (for the history and the report)."""
        return ([f"drop {s}->{d}" for s, d in sorted(self._drops)] + [f"netem {n}" for n in sorted(self._netem)]
                + [f"slow {n}" for n in sorted(self._slow)] + [f"loss {n} {p}%" for n, p in sorted(self._loss.items())])
