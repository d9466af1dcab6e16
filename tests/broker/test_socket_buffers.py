"""``socket.send.buffer.bytes`` / ``socket.receive.buffer.bytes`` are honoured (they used to be accepted and
ignored), and the keys Strata accepts only so Kafka's files load are named in a warning at start-up.

The broker's side of a client connection is read with ``ss -tm`` (its ``skmem``: ``rb`` the receive buffer,
``tb`` the send buffer; Linux reports twice the value set, the bookkeeping overhead it reserves).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from tests.broker.harness import BrokerProcess

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")


def _server_buffers(port: int, client: socket.socket) -> tuple[int, int]:
    """(rb, tb) of the broker's end of ``client``'s connection."""
    cport = client.getsockname()[1]
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} and dport = :{cport} )"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    m = re.search(r"rb(\d+),t\d+,tb(\d+)", out)
    assert m, f"no skmem for the broker's end of :{cport} in {out!r}"
    return int(m.group(1)), int(m.group(2))


def _connected(b: BrokerProcess) -> socket.socket:
    assert b.port is not None
    return socket.create_connection(("127.0.0.1", b.port), timeout=10)


def test_buffer_sizes_apply_to_every_client_connection(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "set", {"socket.receive.buffer.bytes": "50000",
                                         "socket.send.buffer.bytes": "30000",
                                         "num.io.threads": "8"}).start()
    try:
        with _connected(b) as c:
            assert _server_buffers(b.port, c) == (100_000, 60_000)
        assert re.search(r"WARNING .*accepted but not used by Strata.*num\.io\.threads=8", b.tail())
    finally:
        b.stop()


def test_without_them_the_os_sizes_the_buffers(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "default").start()
    try:
        with _connected(b) as c:
            assert _server_buffers(b.port, c) != (100_000, 60_000)
        assert "accepted but not used" not in b.tail()
    finally:
        b.stop()


def test_in_cluster_mode_every_broker_sizes_its_client_connections(zk_connect: str, tmp_path: Path) -> None:
    from tests.cluster.harness import running_cluster

    with running_cluster(zk_connect, tmp_path, size=2, props={"socket.receive.buffer.bytes": "50000",
                                                              "socket.send.buffer.bytes": "30000"}) as cluster:
        for b in cluster.brokers.values():
            with _connected(b) as c:
                assert _server_buffers(b.port, c) == (100_000, 60_000)
