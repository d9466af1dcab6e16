"""``strata tiers`` without a broker: the table it prints, the Kafka requests it sends, and how it reports.

Fake Kafka listeners answer what the tool asks (kio-encoded Metadata, DescribeConfigs, ListOffsets and
DescribeLogDirs at the versions it sends) from a small model of each broker's logs, and stdlib HTTP
servers stand in for admin endpoints. The runs against real brokers live with them
(tests/tiered/test_tiers_cli.py, tests/tiered/test_tiers_kafka_port.py, tests/cluster/test_tiers_*.py).
"""

from __future__ import annotations

import argparse
import http.server
import io
import json
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from strata.client.wire import parse_host_port
from strata.protocol.build import make
from strata.tools.tiers import (
    add_tiers_parser,
    fetch_tiers,
    format_bytes,
    format_replica,
    format_table,
    main_tiers,
    metrics_endpoint,
)

HTTP_ROWS: list[dict[str, Any]] = [  # a leader's /v1/tiers rows
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
]


def single(row: dict[str, Any], leader: int = 1) -> dict[str, Any]:
    """A row as ``fetch_tiers`` builds it for a single broker leading everything."""
    return {**row, "leader": leader, "replicas": [leader], "isr": [leader], "replica_states": [
        {"broker_id": leader, "role": "leader", "in_isr": True,
         "local_log_start_offset": row["local_log_start_offset"], "local_bytes": row["local_bytes"]}]}


def test_format_bytes() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(1258291) == "1.2 MiB"
    assert format_bytes(5 * 1024**3) == "5.0 GiB"


def test_format_replica() -> None:
    assert format_replica({"broker_id": 2, "role": "follower", "in_isr": True, "local_log_start_offset": 41200,
                           "local_bytes": 3250586}) == (
        "replica 2 (follower, in ISR): local log start 41200, 3.1 MiB local")
    assert format_replica({"broker_id": 3, "role": "follower", "in_isr": False, "local_log_start_offset": None,
                           "local_bytes": 100, "error": "ListOffsets: NOT_LEADER_OR_FOLLOWER"}) == (
        "replica 3 (follower, not in ISR): local log start ?, 100 B local (ListOffsets: NOT_LEADER_OR_FOLLOWER)")


def test_format_table() -> None:
    payload = {"partitions": [single(r) for r in HTTP_ROWS], "topics": [
        {"topic": "audit", "configs": {"remote.storage.enable": "false"}},
        {"topic": "orders", "configs": {"remote.storage.enable": "true", "local.retention.bytes": "1048576",
                                        "local.retention.ms": "-2", "retention.bytes": "-1",
                                        "retention.ms": "604800000"}}]}
    lines = format_table(payload).splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOCAL-START",
                                "REMOTE-END", "END", "LOCAL-SEGS", "LOCAL-BYTES", "REMOTE-OFFSETS", "REMOTE-SEGS",
                                "REMOTE-BYTES", "COPY-LAG"]
    # sorted by topic then partition, each followed by its replicas; sizes human readable; no remote columns for a
    # local-only topic; REMOTE-OFFSETS is [log start, remote end]
    assert lines[1].split() == ["audit", "0", "1", "1", "1", "3", "3", "-", "3", "1", "0", "B", "-", "-", "-", "-"]
    assert lines[2] == "  replica 1 (leader, in ISR): local log start 3, 0 B local"
    assert lines[3].split() == ["orders", "0", "1", "1", "1", "0", "0", "-", "10", "1", "512", "B", "0", "0", "0",
                                "B", "0", "B"]
    assert lines[4] == "  replica 1 (leader, in ISR): local log start 0, 512 B local"
    assert lines[5].split() == ["orders", "1", "1", "1", "1", "0", "5000", "4999", "6000", "2", "1.2", "MiB", "5000",
                                "5", "5.0", "GiB", "1.5", "KiB"]
    assert lines[6] == "  replica 1 (leader, in ISR): local log start 5000, 1.2 MiB local"
    assert lines[7] == ("topic orders: remote.storage.enable=true; local retention: local.retention.bytes=1048576 "
                        "(1.0 MiB), local.retention.ms=-2 (as retention.ms=604800000)")
    assert lines[8] == ("WARNING: orders-1: last copy to remote storage failed: "
                        "RemoteStorageException: bucket unavailable")
    assert len(lines) == 9
    # columns line up: every row as wide as the header once trailing space is stripped
    assert len({len(lines[i]) for i in (0, 1, 3, 5)}) == 1


def test_format_table_kafka_port_only() -> None:
    """Without an admin endpoint: no segment counts, remote bytes or copy lag; the remote span from -2 and -5."""
    row = {"topic": "t", "partition": 0, "leader": 1, "replicas": [1, 2], "isr": [1], "remote_storage_enable": True,
           "log_start_offset": 100, "local_log_start_offset": 900, "highest_offset_in_remote_storage": 949,
           "high_watermark": 1000, "local_bytes": 2048, "replica_states": [
               {"broker_id": 1, "role": "leader", "in_isr": True, "local_log_start_offset": 900, "local_bytes": 2048},
               {"broker_id": 2, "role": "follower", "in_isr": False, "local_log_start_offset": 800,
                "local_bytes": 4096}]}
    lines = format_table({"partitions": [row]}).splitlines()
    assert lines[1].split() == ["t", "0", "1", "1,2", "1", "100", "900", "949", "1000", "-", "2.0", "KiB", "850", "-",
                                "-", "-"]
    assert lines[2:] == ["  replica 1 (leader, in ISR): local log start 900, 2.0 KiB local",
                         "  replica 2 (follower, not in ISR): local log start 800, 4.0 KiB local"]
    assert format_table({"partitions": [{**row, "highest_offset_in_remote_storage": -1}]}).splitlines()[1].split()[
        7:14] == ["-", "1000", "-", "2.0", "KiB", "0", "-"]  # tiered, nothing uploaded yet: 0 offsets remote


def test_format_table_cluster_rows() -> None:
    """Leader, replicas and ISR as Metadata gives them; a partition without a leader (or whose leader could not
    be read) has no tier state: dashes, and a warning saying why."""
    payload = {"partitions": [
        {**HTTP_ROWS[2], "leader": 2, "replicas": [2, 3, 1], "isr": [2, 1]},
        {"topic": "audit", "partition": 1, "leader": -1, "replicas": [3, 1, 2], "isr": [3],
         "error": "no leader (offline)"},
        {"topic": "audit", "partition": 2, "leader": 3, "replicas": [3, 1, 2], "isr": [3, 1, 2],
         "error": "leader 3 unreachable"},
    ]}
    lines = format_table(payload).splitlines()
    assert lines[1].split() == ["audit", "0", "2", "2,3,1", "2,1", "3", "3", "-", "3", "1", "0", "B", "-", "-", "-",
                                "-"]
    assert lines[2].split() == ["audit", "1", "-", "3,1,2", "3"] + ["-"] * 10
    assert lines[3].split() == ["audit", "2", "3", "3,1,2", "3,1,2"] + ["-"] * 10
    assert lines[4:] == ["WARNING: audit-1: no leader (offline)", "WARNING: audit-2: leader 3 unreachable"]
    assert len({len(line) for line in lines[:4]}) == 1


def test_format_table_empty() -> None:
    assert format_table({"partitions": []}) == "no partitions\n"


def test_parse_host_port() -> None:
    assert parse_host_port("localhost:9092") == ("localhost", 9092)
    assert parse_host_port("localhost") == ("localhost", 9092)
    assert parse_host_port("[::1]:19092") == ("::1", 19092)
    for bad in ("", ":9092", "h:port", "h:70000", "[::1"):
        with pytest.raises(ValueError):
            parse_host_port(bad)


# -- fake brokers --------------------------------------------------------------------------------

@dataclass
class Log:
    """One replica's log on a fake broker."""

    log_start: int = 0
    local_start: int = 0
    remote_end: int = -1
    end: int = 10
    size: int = 100


@dataclass
class Layout:
    """The fake cluster: partitions (topic, partition) -> (leader, replicas, isr), each broker's port and logs,
    topic configs."""

    partitions: dict[tuple[str, int], tuple[int, list[int], list[int]]]
    ports: dict[int, int] = field(default_factory=dict)
    logs: dict[int, dict[tuple[str, int], Log]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)


def _response_frame(api_key: int, version: int, correlation: int, **body: Any) -> bytes:
    cls = load_response_schema(api_key, version)
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, make(cls.__header_schema__, correlation_id=correlation))
    entity_writer(cls)(buf, make(cls, **body))
    raw = buf.getvalue()
    return struct.pack(">i", len(raw)) + raw


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise ConnectionError
        out += chunk
    return out


class FakeBroker:
    """A Kafka listener for broker ``node_id`` of ``layout``; ``seen`` records (api key, version, request)."""

    def __init__(self, layout: Layout, node_id: int, broker_configs: dict[str, str | None],
                 debugging_consumer: bool = True) -> None:
        self.layout = layout
        self.node_id = node_id
        self.broker_configs = broker_configs
        self.debugging_consumer = debugging_consumer  # answers ListOffsets replica_id -2 as a follower too
        self.seen: list[tuple[int, int, Any]] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        layout.ports[node_id] = self.port
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.server.close()
        self.thread.join(5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    (size,) = struct.unpack(">i", _recv_exact(conn, 4))
                    frame = _recv_exact(conn, size)
                    api_key, version = struct.unpack(">hh", frame[:4])
                    cls = load_request_schema(api_key, version)
                    header, used = entity_reader(cls.__header_schema__)(frame, 0)
                    request, _ = entity_reader(cls)(frame, used)
                    self.seen.append((api_key, version, request))
                    body = self._answer(api_key, request)
                    if body is None:
                        return
                    conn.sendall(_response_frame(api_key, version, header.correlation_id, **body))
            except (ConnectionError, OSError):
                return

    def _answer(self, api_key: int, request: Any) -> dict[str, Any] | None:
        layout = self.layout
        if api_key == 3:
            topics: dict[str, list[dict[str, Any]]] = {}
            for (t, p), (leader, replicas, isr) in layout.partitions.items():
                topics.setdefault(t, []).append({
                    "error_code": 0, "partition_index": p, "leader_id": leader, "leader_epoch": 0,
                    "replica_nodes": replicas, "isr_nodes": isr, "offline_replicas": []})
            wanted = None if request.topics is None else {str(t.name) for t in request.topics}
            return {"throttle_time": 0, "cluster_id": "c", "controller_id": min(layout.ports),
                    "brokers": [{"node_id": i, "host": "127.0.0.1", "port": p, "rack": None}
                                for i, p in sorted(layout.ports.items())],
                    "topics": [{"error_code": 0, "name": t, "topic_id": None, "is_internal": t.startswith("__"),
                                "partitions": ps, "topic_authorized_operations": -2147483648}
                               for t, ps in topics.items() if wanted is None or t in wanted]}
        if api_key == 32:
            results = []
            for r in request.resources:
                if int(r.resource_type) == 4:
                    configs = self.broker_configs
                else:
                    configs = {k: v for k, v in layout.topic_configs.get(str(r.resource_name), {}).items()
                               if r.configuration_keys is None or k in r.configuration_keys}
                results.append({"error_code": 0, "error_message": None, "resource_type": int(r.resource_type),
                                "resource_name": str(r.resource_name), "configs": [
                                    {"name": k, "value": v, "read_only": True, "config_source": 5,
                                     "is_sensitive": False, "is_default": False, "synonyms": [], "config_type": 0,
                                     "documentation": None} for k, v in configs.items()]})
            return {"throttle_time": 0, "results": results}
        if api_key == 2:
            logs = layout.logs.get(self.node_id, {})
            out = []
            for t in request.topics:
                parts = []
                for p in t.partitions:
                    tp = (str(t.name), int(p.partition_index))
                    log = logs.get(tp)
                    leads = layout.partitions[tp][0] == self.node_id
                    entry = {"partition_index": tp[1], "error_code": 0, "timestamp": -1, "offset": -1,
                             "leader_epoch": -1}
                    if log is None:
                        entry["error_code"] = 3
                    elif not leads and not (self.debugging_consumer and request.replica_id == -2):
                        entry["error_code"] = 6
                    else:
                        entry["offset"] = {-2: log.log_start, -4: log.local_start, -5: log.remote_end,
                                           -1: log.end}[int(p.timestamp)]
                    parts.append(entry)
                out.append({"name": str(t.name), "partitions": parts})
            return {"throttle_time": 0, "topics": out}
        if api_key == 35:
            logs = layout.logs.get(self.node_id, {})
            wanted = None if request.topics is None else {(str(t.topic), int(p)) for t in request.topics
                                                          for p in t.partitions}
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (t, p), log in sorted(logs.items()):
                if wanted is None or (t, p) in wanted:
                    by_topic.setdefault(t, []).append({"partition_index": p, "partition_size": log.size,
                                                       "offset_lag": 0, "is_future_key": False})
            return {"throttle_time": 0, "results": [{"error_code": 0, "log_dir": "/data", "topics": [
                {"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
        return None  # anything else: close the connection, as a broker does for what it cannot parse


@contextmanager
def fake_admin_http(rows: list[dict[str, Any]], broker_id: int = 1) -> Iterator[int]:
    body = json.dumps({"broker_id": broker_id, "partitions": rows}).encode()

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


@contextmanager
def brokers(layout: Layout, configs: dict[int, dict[str, str | None]],
            debugging_consumer: bool = True) -> Iterator[dict[int, FakeBroker]]:
    with ExitStack() as stack:
        out = {}
        for node_id, broker_configs in configs.items():
            b = FakeBroker(layout, node_id, broker_configs, debugging_consumer)
            stack.callback(b.close)
            out[node_id] = b
        yield out


def dead_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="strata")
    add_tiers_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["tiers", *argv])


def single_layout() -> Layout:
    """One broker leading a tiered topic (orders) and a local-only one (audit)."""
    return Layout(
        partitions={("orders", 0): (1, [1], [1]), ("orders", 1): (1, [1], [1]), ("audit", 0): (1, [1], [1])},
        logs={1: {("orders", 0): Log(0, 0, -1, 10, 512), ("orders", 1): Log(0, 5000, 4999, 6000, 1258291),
                  ("audit", 0): Log(3, 3, -1, 3, 0)}},
        topic_configs={"orders": {"remote.storage.enable": "true", "local.retention.bytes": "1",
                                  "local.retention.ms": "-2", "retention.bytes": "-1", "retention.ms": "604800000"},
                       "audit": {"remote.storage.enable": "false", "local.retention.bytes": "-2",
                                 "local.retention.ms": "-2", "retention.bytes": "-1", "retention.ms": "604800000"}})


# -- the Kafka port alone ------------------------------------------------------------------------

@pytest.mark.parametrize("metrics_port", [None, "-1"])
def test_kafka_port_only(metrics_port: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    """A broker without an admin endpoint: offsets, local bytes and the remote span all come over the Kafka port."""
    layout = single_layout()
    configs: dict[str, str | None] = {} if metrics_port is None else {"metrics.port": metrics_port}
    with brokers(layout, {1: configs}) as fakes:
        port = fakes[1].port
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}"])) == 0
        captured = capsys.readouterr()
        assert captured.err == ""
        lines = captured.out.splitlines()
        assert lines[1].split() == ["audit", "0", "1", "1", "1", "3", "3", "-", "3", "-", "0", "B", "-", "-", "-",
                                    "-"]
        assert lines[2] == "  replica 1 (leader, in ISR): local log start 3, 0 B local"
        assert lines[3].split()[5:] == ["0", "0", "-", "10", "-", "512", "B", "0", "-", "-", "-"]
        assert lines[5].split()[5:] == ["0", "5000", "4999", "6000", "-", "1.2", "MiB", "5000", "-", "-", "-"]
        assert lines[6] == "  replica 1 (leader, in ISR): local log start 5000, 1.2 MiB local"
        assert lines[7].startswith("topic orders: remote.storage.enable=true; local retention: "
                                   "local.retention.bytes=1 (1 B), local.retention.ms=-2")
        assert len(lines) == 8

        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}", "--topic", "orders", "--json"])) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["brokers"] == [{"broker_id": 1, "host": "127.0.0.1", "port": port}]
        assert [t["topic"] for t in doc["topics"]] == ["orders"]
        p1 = doc["partitions"][1]
        assert {k: p1[k] for k in ("leader", "replicas", "isr", "remote_storage_enable", "log_start_offset",
                                   "local_log_start_offset", "highest_offset_in_remote_storage", "high_watermark",
                                   "remote_offsets", "local_bytes")} == {
            "leader": 1, "replicas": [1], "isr": [1], "remote_storage_enable": True, "log_start_offset": 0,
            "local_log_start_offset": 5000, "highest_offset_in_remote_storage": 4999, "high_watermark": 6000,
            "remote_offsets": 5000, "local_bytes": 1258291}
        assert "remote_bytes" not in p1
        assert p1["replica_states"] == [{"broker_id": 1, "role": "leader", "in_isr": True,
                                         "local_log_start_offset": 5000, "local_bytes": 1258291}]

        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}", "--topic", "nope"])) == 1
        assert "topic 'nope' not found" in capsys.readouterr().err

    # what went over the wire: one ListOffsets per spec, as the consumer, to the leader; DescribeLogDirs
    listed = [(int(r.replica_id), {int(p.timestamp) for t in r.topics for p in t.partitions},
               sum(len(t.partitions) for t in r.topics)) for k, v, r in fakes[1].seen if k == 2]
    assert listed[:4] == [(-1, {-2}, 3), (-1, {-4}, 3), (-1, {-5}, 3), (-1, {-1}, 3)]
    assert {(k, v) for k, v, _ in fakes[1].seen} == {(3, 12), (32, 4), (32, 1), (2, 9), (35, 1)}


def test_http_endpoint_adds_remote_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    """With metrics.port the leader's /v1/tiers rows add segments, remote bytes, copy lag and copy errors;
    offsets and local bytes stay the Kafka port's."""
    layout = single_layout()
    with fake_admin_http(HTTP_ROWS) as http_port, \
            brokers(layout, {1: {"metrics.port": str(http_port), "metrics.host": "0.0.0.0"}}) as fakes:
        port = fakes[1].port
        doc = fetch_tiers(f"127.0.0.1:{port}")
        assert doc["brokers"] == [{"broker_id": 1, "host": "127.0.0.1", "port": port,
                                   "tiers_url": f"http://127.0.0.1:{http_port}/v1/tiers"}]
        p1 = next(p for p in doc["partitions"] if (p["topic"], p["partition"]) == ("orders", 1))
        assert (p1["remote_segments"], p1["remote_bytes"], p1["copy_lag_bytes"], p1["local_segments"]) == (
            5, 5 * 1024**3, 1536, 2)
        assert p1["last_copy_error"] == "RemoteStorageException: bucket unavailable"
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}"])) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[5].split()[5:] == ["0", "5000", "4999", "6000", "2", "1.2", "MiB", "5000", "5", "5.0", "GiB",
                                        "1.5", "KiB"]
        assert lines[-1] == ("WARNING: orders-1: last copy to remote storage failed: "
                             "RemoteStorageException: bucket unavailable")

        # --no-http: the endpoint is not even looked up
        before = len(fakes[1].seen)
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}", "--no-http"])) == 0
        assert capsys.readouterr().out.splitlines()[5].split()[-4:] == ["5000", "-", "-", "-"]
        assert all(not (k == 32 and int(r.resources[0].resource_type) == 4) for k, _, r in fakes[1].seen[before:])


def test_http_endpoint_unreachable_is_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    layout = single_layout()
    port_gone = dead_port()
    with brokers(layout, {1: {"metrics.port": str(port_gone), "metrics.host": "127.0.0.1"}}) as fakes:
        assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{fakes[1].port}", "--timeout", "2"])) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"strata tiers: broker 1: metrics endpoint http://127.0.0.1:{port_gone}/v1/tiers unreachable: ")
    assert err[0].endswith("(remote bytes, segments and copy lag of its partitions not shown)")
    assert captured.out.splitlines()[5].split()[5:12] == ["0", "5000", "4999", "6000", "-", "1.2", "MiB"]


def test_broker_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    port = dead_port()
    assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{port}", "--timeout", "2"])) == 1
    err = capsys.readouterr().err
    assert err.startswith("strata tiers: broker unreachable: cannot connect to 127.0.0.1:") and err.count("\n") == 1


@pytest.mark.parametrize("debugging_consumer", [True, False])
def test_cluster_every_replica(debugging_consumer: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """Three brokers in Metadata, broker 3 down: offsets from each partition's leader, each replica's local log
    start from its own broker (ListOffsets -4 as the debugging consumer) and its bytes from DescribeLogDirs. A
    broker that answers replica_id -2 only as leader gives ``?``; the down broker is named, and the exit is 1."""
    layout = Layout(
        partitions={("orders", 0): (1, [1, 2, 3], [1, 2]), ("orders", 1): (2, [2, 3, 1], [2, 3, 1]),
                    ("audit", 0): (3, [3, 1, 2], [3, 1, 2]), ("audit", 1): (-1, [3, 1, 2], [3])},
        logs={1: {("orders", 0): Log(0, 40, 39, 100, 6000), ("orders", 1): Log(0, 30, -1, 90, 7000),
                  ("audit", 0): Log(0, 0, -1, 5, 50), ("audit", 1): Log(0, 0, -1, 5, 51)},
              2: {("orders", 0): Log(0, 20, -1, 100, 8000), ("orders", 1): Log(0, 60, 59, 100, 3000),
                  ("audit", 0): Log(0, 0, -1, 5, 52), ("audit", 1): Log(0, 0, -1, 5, 53)}},
        topic_configs={"orders": {"remote.storage.enable": "true", "local.retention.bytes": "-2",
                                  "local.retention.ms": "3600000", "retention.bytes": "-1", "retention.ms": "-1"},
                       "audit": {"remote.storage.enable": "false"}})
    layout.ports[3] = dead_port()
    with brokers(layout, {1: {}, 2: {}}, debugging_consumer) as fakes:
        for via in (1, 2):
            assert main_tiers(parse(["--bootstrap", f"127.0.0.1:{fakes[via].port}", "--timeout", "2"])) == 1
            captured = capsys.readouterr()
            err = captured.err.splitlines()
            assert len(err) == 1 and err[0].startswith(
                f"strata tiers: broker 3: broker unreachable: cannot connect to 127.0.0.1:{layout.ports[3]}")
            lines = captured.out.splitlines()
            follower = ("local log start 20, 7.8 KiB local" if debugging_consumer
                        else "local log start ?, 7.8 KiB local (ListOffsets: NOT_LEADER_OR_FOLLOWER)")
            assert lines[1].split() == ["audit", "0", "3", "3,1,2", "3,1,2"] + ["-"] * 10
            assert lines[2:5] == ["  replica 3 (leader, in ISR): local log start ?, ? local (broker 3 unreachable)",
                                  "  replica 1 (follower, in ISR): local log start "
                                  + ("0, 50 B local" if debugging_consumer
                                     else "?, 50 B local (ListOffsets: NOT_LEADER_OR_FOLLOWER)"),
                                  "  replica 2 (follower, in ISR): local log start "
                                  + ("0, 52 B local" if debugging_consumer
                                     else "?, 52 B local (ListOffsets: NOT_LEADER_OR_FOLLOWER)")]
            assert lines[5].split() == ["audit", "1", "-", "3,1,2", "3"] + ["-"] * 10
            assert lines[9].split() == ["orders", "0", "1", "1,2,3", "1,2", "0", "40", "39", "100", "-", "5.9", "KiB",
                                        "40", "-", "-", "-"]
            assert lines[10:13] == ["  replica 1 (leader, in ISR): local log start 40, 5.9 KiB local",
                                    "  replica 2 (follower, in ISR): " + follower,
                                    "  replica 3 (follower, not in ISR): local log start ?, ? local "
                                    "(broker 3 unreachable)"]
            assert lines[13].split()[:9] == ["orders", "1", "2", "2,3,1", "2,3,1", "0", "60", "59", "100"]
            assert lines[14] == "  replica 2 (leader, in ISR): local log start 60, 2.9 KiB local"
            assert lines[17:] == ["topic orders: remote.storage.enable=true; local retention: "
                                  "local.retention.bytes=-2 (as retention.bytes=-1), local.retention.ms=3600000",
                                  "WARNING: audit-0: leader 3 unreachable",
                                  "WARNING: audit-1: no leader (offline)"]
        args = parse(["--bootstrap", f"127.0.0.1:{fakes[2].port}", "--topic", "orders", "--json"])
        assert main_tiers(args) == 1
        doc = json.loads(capsys.readouterr().out)
        assert [(b["broker_id"], "error" in b) for b in doc["brokers"]] == [(1, False), (2, False), (3, True)]
        assert [(p["partition"], p["leader"], p["high_watermark"]) for p in doc["partitions"]] == [(0, 1, 100),
                                                                                                   (1, 2, 100)]
        assert doc["partitions"][1]["replica_states"][2] == {
            "broker_id": 1, "role": "follower", "in_isr": True, "local_bytes": 7000,
            **({"local_log_start_offset": 30} if debugging_consumer else
               {"local_log_start_offset": None, "error": "ListOffsets: NOT_LEADER_OR_FOLLOWER"})}

    # followers are asked -4 only, as the debugging consumer; leaders every spec, as the consumer, one spec a request
    for node_id, fake in fakes.items():
        for _, _, r in (s for s in fake.seen if s[0] == 2):
            specs = [int(p.timestamp) for t in r.topics for p in t.partitions]
            assert len(set(specs)) == 1
            keys = {(str(t.name), int(p.partition_index)) for t in r.topics for p in t.partitions}
            leads = {layout.partitions[k][0] == node_id for k in keys}
            assert (int(r.replica_id), leads) in ((-1, {True}), (-2, {False})), (node_id, r)
            assert int(r.replica_id) == -1 or specs[0] == -4


# -- metrics_endpoint (the test harnesses find /metrics with it) --------------------------------

def test_metrics_endpoint() -> None:
    layout = single_layout()
    with brokers(layout, {1: {"metrics.port": "9404", "metrics.host": "0.0.0.0"}}) as fakes:
        assert metrics_endpoint(f"127.0.0.1:{fakes[1].port}") == ("127.0.0.1", 9404)
    with brokers(layout, {1: {"metrics.port": "-1", "metrics.host": "127.0.0.1"}}) as fakes:
        with pytest.raises(Exception, match="metrics endpoint disabled on the broker: set metrics.port"):
            metrics_endpoint(f"127.0.0.1:{fakes[1].port}")
    with brokers(layout, {1: {}}) as fakes:
        with pytest.raises(Exception, match="does not report metrics.port"):
            metrics_endpoint(f"127.0.0.1:{fakes[1].port}")
