"""``make cluster``'s module end to end: ZooKeeper and three brokers up, a client through the printed
bootstrap string on an RF=3 topic, then SIGINT stops every child process."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strata.tools.local_cluster import LocalCluster, _port_free, main
from strata.tools.zookeeper import free_port, zookeeper_available

_PID = re.compile(r"\bpid (\d+)\b")


def consecutive_free_ports(n: int) -> int:
    for _ in range(50):
        base = free_port()
        if base + n < 65536 and all(_port_free("127.0.0.1", base + i) for i in range(n)):
            return base
    raise AssertionError(f"no {n} consecutive free ports")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_local_cluster_serves_clients_and_stops_every_child_on_sigint(tmp_path: Path) -> None:
    if not zookeeper_available():
        pytest.fail("ZooKeeper is not installed: `make test` installs Debian's zookeeper package "
                    "(apt-get install zookeeper)")
    base, zk_port = consecutive_free_ports(3), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata.tools.local_cluster", "--dir", str(tmp_path / "cluster"),
         "--base-port", str(base), "--zk-port", str(zk_port), "--metrics-base-port", "0",
         "--set", "group.initial.rebalance.delay.ms=0", "--set", "offsets.topic.num.partitions=3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()

    def read_until(prefix: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            output.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r}; output so far:\n" + "\n".join(output))

    pids: list[int] = []
    try:
        bootstrap = read_until("bootstrap.servers=", 120).split("=", 1)[1]
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        assert any(line.startswith(f"zookeeper.connect=127.0.0.1:{zk_port}/strata") for line in output)
        pids = [int(m.group(1)) for line in output if (m := _PID.search(line))]
        assert len(pids) == 4 and all(alive(p) for p in pids), output  # zookeeper and three brokers
        assert all((tmp_path / "cluster" / f"broker-{i}" / "broker.log").exists() for i in (1, 2, 3))

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("lc", 2, 3)])["lc"].result(30)

        def full_isr() -> bool:
            t = admin.list_topics(topic="lc", timeout=10).topics["lc"]
            return bool(t.partitions) and all(len(p.isrs) == 3 and p.leader >= 0 for p in t.partitions.values())

        deadline = time.monotonic() + 30
        while not full_isr():
            assert time.monotonic() < deadline, "full ISR of lc"
            time.sleep(0.2)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(100):
            producer.produce("lc", key=b"k%d" % i, value=b"v%d" % i)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lc", "auto.offset.reset": "earliest"})
        consumer.subscribe(["lc"])
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        try:
            while len(got) < 100 and time.monotonic() < deadline:
                for m in consumer.consume(100, timeout=1.0):
                    if not m.error():
                        got.add(m.value())
        finally:
            consumer.close()
        assert got == {b"v%d" % i for i in range(100)}

        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 0
        read_until("local cluster stopped", 10)
        assert not [p for p in pids if alive(p)], output
        assert not (tmp_path / "cluster" / "local-cluster.pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(10)
        assert proc.stdout is not None
        proc.stdout.close()
        for p in pids:  # a failed test leaves nothing running
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_without_zookeeper_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("strata.tools.local_cluster.zookeeper_available", lambda: False)
    assert main(["--dir", str(tmp_path)]) == 2
    assert "apt-get install zookeeper" in capsys.readouterr().err


def test_broker_settings(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, base_port=19092, zk_port=12181, metrics_base_port=19404,
                     overrides={"num.partitions": "3"})
    props = c.broker_props(2)
    assert props["broker.id"] == props["node.id"] == "2"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19093"
    assert props["zookeeper.connect"] == "127.0.0.1:12181/strata"
    assert props["metrics.port"] == "19405"
    assert props["log.dirs"] == str(tmp_path / "broker-2" / "logs")
    assert props["rsm.config.dir"] == str(tmp_path / "remote-storage")  # one "bucket" for every broker
    assert "remote.log.storage.system.enable" not in props  # server.properties' choice (on) stands
    assert props["rlmm.config.remote.log.metadata.topic.replication.factor"] == "3"
    assert props["default.replication.factor"] == "3" and props["num.partitions"] == "3"
    assert LocalCluster(tmp_path, metrics_base_port=0).broker_props(3)["metrics.port"] == "0"


def test_ports_in_use_are_named(tmp_path: Path) -> None:
    import socket

    from strata.tools.local_cluster import ClusterError

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        c = LocalCluster(tmp_path, base_port=port - 1, zk_port=free_port(), metrics_base_port=-1)
        with pytest.raises(ClusterError, match=f"{port} for broker 2 \\(--base-port\\)"):
            c.check_ports()
