"""``strata tiers`` without a broker: the table it prints, and how it finds and reports the endpoints.

Fake Kafka listeners (kio-encoded Metadata v1 and DescribeConfigs v1 answers) and stdlib HTTP
servers stand in for the brokers, so the discovery path (Metadata for leaders, replicas and ISRs,
then each leader's ``metrics.port``) and the user-facing errors are pinned here; the end-to-end runs
against real brokers live with them (tests/tiered/test_tiers_cli.py, tests/cluster/test_tiers_cluster.py).
"""

from __future__ import annotations

import argparse
import http.server
import io
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_writer

from strata.client.wire import parse_host_port
from strata.protocol.build import make
from strata.tools.tiers import add_tiers_parser, fetch_tiers, format_bytes, format_table, main_tiers

PAYLOAD: dict[str, Any] = {"broker_id": 1, "partitions": [
    {"topic": "orders", "partition": 1, "topic_id": "x", "remote_storage_enable": True, "log_start_offset": 0,
     "local_log_start_offset": 5000, "highest_offset_in_remote_storage": 4999, "log_end_offset": 6000,
     "high_watermark": 6000, "local_segments": 2, "local_bytes": 1258291, "remote_segments": 5,
     "remote_bytes": 5 * 1024 * 1024 * 1024, "copy_lag_segments": 1, "copy_lag_bytes": 1536,
     "last_copy_error": "RemoteStorageException: bucket unavailable"},
    {"topic": "orders", "partition": 0, "topic_id": "x", "remote_storage_enable": True, "log_start_offset": 0,
     "local_log_start_offset": 0, "highest_offset_in_remote_storage": -1, "log_end_offset": 10,
     "high_watermark": 10, "local_segments": 1, "local_bytes": 512, "remote_segments": 0, "remote_bytes": 0,
     "copy_lag_segments": 0, "copy_lag_bytes": 0, "last_copy_error": None},
    {"topic": "audit", "partition": 0, "topic_id": "y", "remote_storage_enable": False, "log_start_offset": 3,
     "local_log_start_offset": 3, "highest_offset_in_remote_storage": -1, "log_end_offset": 3,
     "high_watermark": 3, "local_segments": 1, "local_bytes": 0, "remote_segments": 0, "remote_bytes": 0,
     "copy_lag_segments": 0, "copy_lag_bytes": 0, "last_copy_error": None},
]}


def test_format_bytes() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(1258291) == "1.2 MiB"
    assert format_bytes(5 * 1024**3) == "5.0 GiB"


def test_format_table() -> None:
    text = format_table(with_metadata(PAYLOAD))
    lines = text.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOCAL-START",
                                "REMOTE-END", "END", "LOCAL-SEGS", "LOCAL-BYTES", "REMOTE-SEGS", "REMOTE-BYTES",
                                "COPY-LAG"]
    # sorted by topic then partition; sizes human readable; no remote columns for a local-only topic
    assert lines[1].split() == ["audit", "0", "1", "1", "1", "3", "3", "-", "3", "1", "0", "B", "-", "-", "-"]
    assert lines[2].split() == ["orders", "0", "1", "1", "1", "0", "0", "-", "10", "1", "512", "B", "0", "0", "B",
                                "0", "B"]
    assert lines[3].split() == ["orders", "1", "1", "1", "1", "0", "5000", "4999", "6000", "2", "1.2", "MiB", "5",
                                "5.0", "GiB", "1.5", "KiB"]
    assert lines[4] == ("WARNING: orders-1: last copy to remote storage failed: "
                        "RemoteStorageException: bucket unavailable")
    assert len(lines) == 5
    # columns line up: every row as wide as the header once trailing space is stripped
    assert len({len(line) for line in lines[:4]}) == 1


def test_format_table_cluster_rows() -> None:
    """Leader, replicas and ISR as Metadata gives them; a partition without a leader (or whose leader could not
    be read) has no tier state: dashes, and a warning when it is offline."""
    payload = {"partitions": [
        {**PAYLOAD["partitions"][2], "leader": 2, "replicas": [2, 3, 1], "isr": [2, 1]},
        {"topic": "audit", "partition": 1, "leader": -1, "replicas": [3, 1, 2], "isr": [3]},
        {"topic": "audit", "partition": 2, "leader": 3, "replicas": [3, 1, 2], "isr": [3, 1, 2]},
    ]}
    lines = format_table(payload).splitlines()
    assert lines[1].split() == ["audit", "0", "2", "2,3,1", "2,1", "3", "3", "-", "3", "1", "0", "B", "-", "-", "-"]
    assert lines[2].split() == ["audit", "1", "-", "3,1,2", "3"] + ["-"] * 9
    assert lines[3].split() == ["audit", "2", "3", "3,1,2", "3,1,2"] + ["-"] * 9
    assert lines[4] == "WARNING: audit-1: no leader (offline)"
    assert len(lines) == 5 and len({len(line) for line in lines[:4]}) == 1


def test_format_table_empty() -> None:
    assert format_table({"broker_id": 1, "partitions": []}) == "no partitions\n"


def test_parse_host_port() -> None:
    assert parse_host_port("localhost:9092") == ("localhost", 9092)
    assert parse_host_port("localhost") == ("localhost", 9092)
    assert parse_host_port("[::1]:19092") == ("::1", 19092)
    for bad in ("", ":9092", "h:port", "h:70000", "[::1"):
        with pytest.raises(ValueError):
            parse_host_port(bad)


# -- discovery against fakes -------------------------------------------------------------------

def _response_frame(api_key: int, version: int, correlation: int, **body: Any) -> bytes:
    cls = load_response_schema(api_key, version)
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, make(cls.__header_schema__, correlation_id=correlation))
    entity_writer(cls)(buf, make(cls, **body))
    raw = buf.getvalue()
    return struct.pack(">i", len(raw)) + raw


def with_metadata(payload: dict[str, Any], leader: int = 1) -> dict[str, Any]:
    """The single-broker view ``strata tiers`` builds: every row with its leader, replicas and ISR."""
    return {"partitions": [{**p, "leader": leader, "replicas": [leader], "isr": [leader]}
                           for p in payload["partitions"]]}


def metadata_topics(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metadata v1 topics for rows carrying topic, partition, leader, replicas and isr."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        topics.setdefault(r["topic"], []).append({
            "error_code": 0, "partition_index": r["partition"], "leader_id": r["leader"],
            "replica_nodes": r["replicas"], "isr_nodes": r["isr"]})
    return [{"error_code": 0, "name": t, "is_internal": t.startswith("__"), "partitions": ps}
            for t, ps in topics.items()]


Metadata = Callable[[], dict[str, Any]]


@contextmanager
def fake_broker(configs: dict[str, str | None], node_id: int = 1, metadata: Metadata | None = None,
                port: int = 0) -> Iterator[int]:
    """A Kafka listener answering Metadata v1 and DescribeConfigs v1 for BROKER ``node_id``.

    ``metadata()`` gives the Metadata body (brokers, topics); by default this broker alone, leading PAYLOAD's
    partitions."""
    server = socket.create_server(("127.0.0.1", port))
    port = server.getsockname()[1]
    seen: list[Any] = []

    def default_metadata() -> dict[str, Any]:
        return {"brokers": [{"node_id": node_id, "host": "127.0.0.1", "port": port, "rack": None}],
                "topics": metadata_topics(with_metadata(PAYLOAD, node_id)["partitions"])}

    def recv_exact(conn: socket.socket, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise ConnectionError
            out += chunk
        return out

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    while True:
                        (size,) = struct.unpack(">i", recv_exact(conn, 4))
                        frame = recv_exact(conn, size)
                        api_key, version, correlation = struct.unpack(">hhi", frame[:8])
                        seen.append((api_key, version))
                        if api_key == 3:
                            conn.sendall(_response_frame(3, 1, correlation, controller_id=node_id,
                                                         **(metadata or default_metadata)()))
                        elif api_key == 32:
                            conn.sendall(_response_frame(32, 1, correlation, throttle_time=0, results=[{
                                "error_code": 0, "error_message": None, "resource_type": 4,
                                "resource_name": str(node_id),
                                "configs": [{"name": k, "value": v, "read_only": True, "config_source": 5,
                                             "is_sensitive": False, "synonyms": []} for k, v in configs.items()]}]))
                        else:
                            return
                except (ConnectionError, OSError):
                    continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        server.close()
        thread.join(5)
    assert (3, 1) in seen


@contextmanager
def fake_admin_http(payload: dict[str, Any]) -> Iterator[int]:
    body = json.dumps(payload).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path != "/v1/tiers":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="strata")
    add_tiers_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["tiers", *argv])


def test_discovers_the_endpoint_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_admin_http(PAYLOAD) as http_port, \
            fake_broker({"metrics.port": str(http_port), "metrics.host": "0.0.0.0"}) as port:
        doc = fetch_tiers(f"127.0.0.1:{port}")
        assert doc["brokers"] == [{"broker_id": 1, "host": "127.0.0.1", "port": port,
                                   "tiers_url": f"http://127.0.0.1:{http_port}/v1/tiers"}]
        assert sorted(doc["partitions"], key=lambda p: (p["topic"], p["partition"])) == sorted(
            with_metadata(PAYLOAD)["partitions"], key=lambda p: (p["topic"], p["partition"]))
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}"])) == 0
        out = capsys.readouterr().out
        assert out == format_table(with_metadata(PAYLOAD))
        args = parse(["--bootstrap", f"127.0.0.1:{port}", "--topic", "audit", "--json"])
        assert args.func(args, None) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [b["broker_id"] for b in doc["brokers"]] == [1] and [p["topic"] for p in doc["partitions"]] == ["audit"]
        assert doc["partitions"][0]["leader"] == 1 and doc["partitions"][0]["isr"] == [1]
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}", "--topic", "nope"])) == 1
        assert "topic 'nope' not found" in capsys.readouterr().err


def test_metrics_port_disabled(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_broker({"metrics.port": "-1", "metrics.host": "127.0.0.1"}) as port:
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}"])) == 1
    err = capsys.readouterr().err
    assert "metrics endpoint disabled on the broker: set metrics.port" in err


def test_metrics_port_not_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_broker({}) as port:
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}"])) == 1
    assert "does not report metrics.port" in capsys.readouterr().err


def test_broker_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}", "--timeout", "2"])) == 1
    err = capsys.readouterr().err
    assert err.startswith("strata tiers: broker unreachable: cannot connect to 127.0.0.1:") and err.count("\n") == 1


def test_metrics_endpoint_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead_port = s.getsockname()[1]
    with fake_broker({"metrics.port": str(dead_port), "metrics.host": "127.0.0.1"}) as port:
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}", "--timeout", "2"])) == 1
    assert f"metrics endpoint http://127.0.0.1:{dead_port}/v1/tiers unreachable" in capsys.readouterr().err


def _row(topic: str, partition: int, end: int) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "topic_id": "x", "remote_storage_enable": False,
            "log_start_offset": 0, "local_log_start_offset": 0, "highest_offset_in_remote_storage": -1,
            "log_end_offset": end, "high_watermark": end, "local_segments": 1, "local_bytes": 100, "remote_segments": 0,
            "remote_bytes": 0, "copy_lag_segments": 0, "copy_lag_bytes": 0, "last_copy_error": None}


def test_cluster_each_partition_from_its_leader(capsys: pytest.CaptureFixture[str]) -> None:
    """Three brokers in Metadata, one of them down: rows come from each partition's leader (followers' views of
    the same partition are ignored); the down broker's partitions show dashes, it is named, and the exit is 1."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead_port = s.getsockname()[1]
    ports: dict[int, int] = {3: dead_port}
    layout = [
        {"topic": "orders", "partition": 0, "leader": 1, "replicas": [1, 2, 3], "isr": [1, 2]},
        {"topic": "orders", "partition": 1, "leader": 2, "replicas": [2, 3, 1], "isr": [2, 3, 1]},
        {"topic": "audit", "partition": 0, "leader": 3, "replicas": [3, 1, 2], "isr": [3, 1, 2]},
        {"topic": "audit", "partition": 1, "leader": -1, "replicas": [3, 1, 2], "isr": [3]},
    ]

    def metadata() -> dict[str, Any]:
        return {"brokers": [{"node_id": i, "host": "127.0.0.1", "port": p, "rack": None} for i, p in ports.items()],
                "topics": metadata_topics(layout)}

    docs = {  # each broker's /v1/tiers: its own replicas, led or followed (a follower lags: END 5)
        1: {"broker_id": 1, "partitions": [_row("orders", 0, 10), _row("orders", 1, 5), _row("audit", 0, 5)]},
        2: {"broker_id": 2, "partitions": [_row("orders", 0, 5), _row("orders", 1, 20), _row("audit", 0, 5)]},
    }
    with ExitStack() as stack:
        for broker_id in (1, 2):
            http_port = stack.enter_context(fake_admin_http(docs[broker_id]))
            ports[broker_id] = stack.enter_context(fake_broker(
                {"metrics.port": str(http_port), "metrics.host": "127.0.0.1"}, broker_id, metadata))
        for via in (1, 2):
            assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{ports[via]}", "--timeout", "2"])) == 1
            captured = capsys.readouterr()
            lines = captured.out.splitlines()
            assert lines[1].split() == ["audit", "0", "3", "3,1,2", "3,1,2"] + ["-"] * 9
            assert lines[2].split() == ["audit", "1", "-", "3,1,2", "3"] + ["-"] * 9
            assert lines[3].split()[:9] == ["orders", "0", "1", "1,2,3", "1,2", "0", "0", "-", "10"]
            assert lines[4].split()[:9] == ["orders", "1", "2", "2,3,1", "2,3,1", "0", "0", "-", "20"]
            assert lines[5:] == ["WARNING: audit-1: no leader (offline)"]
            err = captured.err.splitlines()
            assert len(err) == 1 and err[0].startswith(
                f"strata tiers: broker 3: broker unreachable: cannot connect to 127.0.0.1:{dead_port}")
        args = parse(["--bootstrap", f"127.0.0.1:{ports[2]}", "--topic", "orders", "--json"])
        assert main_tiers(args) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [(b["broker_id"], "error" in b) for b in doc["brokers"]] == [(1, False), (2, False)]
        assert [(p["partition"], p["leader"], p["log_end_offset"]) for p in doc["partitions"]] == [(0, 1, 10),
                                                                                                    (1, 2, 20)]
