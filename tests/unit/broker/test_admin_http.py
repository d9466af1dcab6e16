"""The admin HTTP endpoint: /metrics and /v1/tiers over a real socket, and that junk cannot kill it.

Each test runs its own event loop (``asyncio.run``) with the server on an ephemeral port and talks
to it with raw bytes, so malformed requests are exactly what the server receives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from strata.broker.admin_http import AdminHttpServer
from strata.common.metrics import Registry, broker_topic_metrics

PARTITION = {"topic": "t", "partition": 0, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "remote_storage_enable": True,
             "log_start_offset": 0, "local_log_start_offset": 100, "highest_offset_in_remote_storage": 99,
             "log_end_offset": 150, "high_watermark": 150, "local_segments": 2, "local_bytes": 4096,
             "remote_segments": 3, "remote_bytes": 12288, "copy_lag_segments": 1, "copy_lag_bytes": 2048,
             "last_copy_error": None}


async def exchange(port: int, request: bytes, half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` raw and read the whole response: (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        if half_close:
            writer.write_eof()
        raw = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    return int(status_line.split(" ")[1]), headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n".encode()


def run_with_server(test: Callable[[AdminHttpServer, int], Awaitable[None]], registry: Registry | None = None,
                    provider: Callable[[], list[dict[str, Any]]] = lambda: [PARTITION], **kwargs: Any) -> None:
    async def main() -> None:
        server = AdminHttpServer("127.0.0.1", 0, registry or Registry(), provider, broker_id=1, **kwargs)
        port = await server.start()
        assert port > 0
        try:
            await test(server, port)
        finally:
            await server.stop()

    asyncio.run(main())


def test_metrics_endpoint_serves_prometheus_text() -> None:
    registry = Registry()
    broker_topic_metrics(registry).RemoteCopyBytesPerSec.mark("t", 42)

    async def check(server: AdminHttpServer, port: int) -> None:
        status, headers, body = await exchange(port, get("/metrics"))
        assert status == 200
        assert headers["content-type"].startswith("text/plain; version=0.0.4")
        text = body.decode()
        assert 'kafka_server_BrokerTopicMetrics_RemoteCopyBytesPerSec_total{topic="t"} 42\n' in text
        assert "# TYPE kafka_server_BrokerTopicMetrics_RemoteCopyBytesPerSec_total counter\n" in text
        status, _, _ = await exchange(port, get("/metrics?name[]=x"))  # Prometheus may add parameters
        assert status == 200

    run_with_server(check, registry)


def test_tiers_endpoint_serves_json() -> None:
    async def check(server: AdminHttpServer, port: int) -> None:
        status, headers, body = await exchange(port, get("/v1/tiers"))
        assert status == 200
        assert headers["content-type"] == "application/json"
        assert json.loads(body) == {"broker_id": 1, "partitions": [PARTITION]}

    run_with_server(check)


def test_head_and_http10() -> None:
    async def check(server: AdminHttpServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /v1/tiers HTTP/1.0\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and raw.endswith(b"\r\n\r\n")

    run_with_server(check)


def test_unknown_path_is_404_and_wrong_method_405() -> None:
    async def check(server: AdminHttpServer, port: int) -> None:
        status, _, _ = await exchange(port, get("/nope"))
        assert status == 404
        status, headers, _ = await exchange(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert status == 405 and headers["allow"] == "GET, HEAD"

    run_with_server(check)


def test_garbage_gets_400_and_the_server_keeps_serving() -> None:
    junk = [
        b"\x00\x01\x02\x03\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"GET /metrics\r\n\r\n",
        b"GET /metrics HTTP/9.9\r\n\r\n",
        b"GET http://x/metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
        "GET /m\u00e9trics HTTP/1.1\r\n\r\n".encode(),
    ]

    async def check(server: AdminHttpServer, port: int) -> None:
        for request in junk:
            status, _, _ = await exchange(port, request)
            assert status == 400, request
        # a truncated head followed by EOF
        status, _, _ = await exchange(port, b"GET /metr", half_close=True)
        assert status == 400
        # a connection that says nothing and leaves
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        status, _, _ = await exchange(port, get("/metrics"))
        assert status == 200

    run_with_server(check)


def test_oversized_head_and_slow_client_are_bounded() -> None:
    async def check(server: AdminHttpServer, port: int) -> None:
        status, _, _ = await exchange(port, b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
        assert status == 431
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")  # never finishes the head
        raw = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        assert raw.startswith(b"HTTP/1.1 408 ")
        status, _, _ = await exchange(port, get("/v1/tiers"))
        assert status == 200

    run_with_server(check, max_request_bytes=1024, read_timeout_s=0.2)


def test_failing_provider_is_500_not_a_crash() -> None:
    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("boom")

    async def check(server: AdminHttpServer, port: int) -> None:
        status, _, _ = await exchange(port, get("/v1/tiers"))
        assert status == 500
        status, _, _ = await exchange(port, get("/metrics"))
        assert status == 200

    run_with_server(check, provider=broken)


def test_stop_with_an_idle_connection_open() -> None:
    async def check(server: AdminHttpServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.05)  # the server is now waiting for this connection's request
        await asyncio.wait_for(server.stop(), timeout=5)
        assert await asyncio.wait_for(reader.read(), timeout=5) == b""
        writer.close()

    run_with_server(check)
