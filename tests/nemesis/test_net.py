"""``nemesis.net``: namespaces whose faults cut real TCP connections (no process is told).

Root only: elsewhere the module is skipped with the reason ``nemesis.net.available`` gives.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from nemesis import net

REASON = net.available()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=f"network namespaces: {REASON}"),
              pytest.mark.xdist_group("netns")]  # one lab at a time: they share the host's nftables

ECHO = """
import socket, sys
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 7000)); srv.listen(8)
print("ready", flush=True)
while True:
    c, _ = srv.accept()
    c.settimeout(30)
    try:
        while data := c.recv(4096):
            c.sendall(data)
    except OSError:
        pass
    c.close()
"""

CONNECT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], 7000), timeout=float(sys.argv[2]))
    s.sendall(b"x"); s.settimeout(float(sys.argv[2]))
    sys.exit(0 if s.recv(1) == b"x" else 1)
except TimeoutError:
    sys.exit(2)
except OSError:
    sys.exit(3)
"""


@pytest.fixture
def lab() -> Iterator[net.Lab]:
    with net.Lab(["a", "b"]) as lab:
        servers = [subprocess.Popen(lab.command(n, [sys.executable, "-c", ECHO, lab.address(n)]),
                                    stdout=subprocess.PIPE, text=True) for n in ("a", "b")]
        try:
            for s in servers:
                assert s.stdout is not None and s.stdout.readline().strip() == "ready"
            yield lab
        finally:
            for s in servers:
                s.kill()
                s.wait(10)
                if s.stdout is not None:
                    s.stdout.close()


def reachable_from_clients(lab: net.Lab, node: str, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((lab.address(node), 7000), timeout=timeout_s) as s:
            s.sendall(b"x")
            return s.recv(1) == b"x"
    except OSError:
        return False


def connect_result(lab: net.Lab, src: str, dst: str, timeout_s: float = 1.0) -> int:
    """0 connected and echoed, 2 timed out, 3 another error (e.g. EINVAL from a blackhole route)."""
    cmd = lab.command(src, [sys.executable, "-c", CONNECT, lab.address(dst), str(timeout_s)])
    return subprocess.run(cmd, timeout=30).returncode


def reachable(lab: net.Lab, src: str, dst: str, timeout_s: float = 1.0) -> bool:
    return connect_result(lab, src, dst, timeout_s) == 0


def test_partitions_cut_node_to_node_connections_and_heal(lab: net.Lab) -> None:
    assert reachable(lab, "a", "b") and reachable(lab, "b", "a")
    lab.partition(["a"], ["b"])
    assert not reachable(lab, "a", "b") and not reachable(lab, "b", "a")
    assert reachable_from_clients(lab, "a") and reachable_from_clients(lab, "b")  # only a<->b is cut
    lab.heal()
    assert reachable(lab, "a", "b") and reachable(lab, "b", "a")
    assert lab.faults == []


@pytest.mark.skipif(not net.nft_available(), reason="nft (nftables) is not installed: apt-get install nftables")
def test_a_dropped_sender_hears_nothing_it_times_out(lab: net.Lab) -> None:
    assert lab.receiver_drops
    lab.drop("b", "a")  # a discards b's SYNs: b's connect neither succeeds nor fails, it times out
    assert connect_result(lab, "b", "a") == 2
    lab.heal()
    assert connect_result(lab, "b", "a") == 0


def test_one_direction_drop_stalls_an_open_connection_until_healed(lab: net.Lab) -> None:
    with socket.create_connection((lab.address("a"), 7000), timeout=2) as s:
        s.sendall(b"1")
        assert s.recv(1) == b"1"
        lab.drop("a", net.CLIENTS)  # a's answers vanish; nothing tells either side
        s.sendall(b"2")
        s.settimeout(1.0)
        with pytest.raises(TimeoutError):
            s.recv(1)
        assert lab.faults == ["drop a->clients"]
        lab.heal()
        s.settimeout(10.0)  # TCP retransmits: the same connection goes on, nothing was reset
        assert s.recv(1) == b"2"


def test_isolate_cuts_a_node_from_everyone(lab: net.Lab) -> None:
    lab.isolate("a")
    assert not reachable_from_clients(lab, "a") and not reachable(lab, "b", "a")
    assert reachable_from_clients(lab, "b")
    lab.heal()
    assert reachable_from_clients(lab, "a")


def transfer_s(lab: net.Lab, node: str, size: int) -> float:
    """Seconds to send ``size`` bytes to ``node``'s echo server and read them back."""
    t = time.monotonic()
    with socket.create_connection((lab.address(node), 7000), timeout=30) as s:
        s.settimeout(30)
        s.sendall(b"x" * size)
        got = 0
        while got < size:
            got += len(s.recv(65536))
    return time.monotonic() - t


def test_slow_link_caps_what_a_node_sends(lab: net.Lab) -> None:
    assert transfer_s(lab, "a", 200_000) < 0.5
    lab.slow("a", rate_kbit=800)  # 100 KB/s: the echo of 200 KB takes about 2 s
    assert transfer_s(lab, "a", 200_000) > 1.2
    lab.heal()
    assert transfer_s(lab, "a", 200_000) < 0.5


@pytest.mark.skipif(not net.nft_available(), reason="nft (nftables) is not installed: apt-get install nftables")
def test_loss_drops_a_share_of_packets(lab: net.Lab) -> None:
    def answered(n: int) -> int:
        """Connections of ``n`` whose SYN-ACK (sent by ``a``) came back within 0.5 s (a SYN is resent after 1 s)."""
        ok = 0
        for _ in range(n):
            try:
                socket.create_connection((lab.address("a"), 7000), timeout=0.5).close()
                ok += 1
            except OSError:
                pass
        return ok

    assert answered(30) >= 27
    lab.loss("a", 50)
    assert 5 <= answered(40) <= 35
    assert lab.faults == ["loss a 50%"]
    lab.heal()
    assert answered(30) >= 27


@pytest.mark.skipif(not net.netem_available(), reason="this kernel has no sch_netem (CONFIG_NET_SCH_NETEM)")
def test_netem_delays_what_a_node_sends(lab: net.Lab) -> None:
    def connect_ms() -> float:
        t = time.monotonic()
        assert reachable_from_clients(lab, "a", timeout_s=5)
        return (time.monotonic() - t) * 1000

    lab.netem("a", delay_ms=150)
    assert connect_ms() >= 2 * 150 - 20  # SYN-ACK and the echo each leave a through the delay
    lab.clear_netem("a")
    assert connect_ms() < 100


def test_cleanup_stale_removes_a_killed_runs_namespaces() -> None:
    lab = net.Lab(["x"], lab_id=249, prefix="snt").start()
    assert any(n.startswith("snt249-") for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                               text=True).stdout.split())
    removed = net.cleanup_stale("snt")
    assert "snt249-x" in removed
    assert not any(n.startswith("snt") for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                              text=True).stdout.split())
    lab.close()  # nothing left to remove: no error
