"""The broker's admin HTTP endpoint: ``GET /metrics`` (Prometheus) and ``GET /v1/tiers`` (JSON).

Kafka leaves HTTP to a JMX exporter agent; Strata serves the two read-only documents itself on a
separate port (``metrics.port``, bound to ``metrics.host``, 127.0.0.1 by default, because the
tiers view names topics and nothing here is authenticated). The server is deliberately minimal:
one request per connection (``Connection: close``), a bounded request head read under a timeout,
no request bodies. Anything malformed gets a 400 and the connection is closed; no request, however
broken, may take the server (or the broker's event loop) down.

With ``metrics.ssl.enabled=true`` the endpoint speaks HTTPS only (``ssl_config``, the ``metrics.ssl.*``
keys, made a context by ``strata.security.ssl_factory.metrics_server_context``); with
``metrics.ssl.client.auth=required`` a client must present a certificate the truststore trusts.
A failed or stalled handshake (a plain HTTP client, an untrusted certificate) only closes that
connection, within ``read_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any

from strata.common.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from strata.common.metrics import Registry
from strata.config.security_config import SslConfig
from strata.security.ssl_factory import metrics_server_context

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD_BYTES = 8192
READ_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64

TiersProvider = Callable[[], list[dict[str, Any]]]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class AdminHttpServer:
    """Serves ``/metrics`` from ``registry`` and ``/v1/tiers`` from ``tiers_provider()``.

    Both are produced on the event loop thread, so ``tiers_provider`` may read broker state that
    only the loop mutates; it should be quick (it runs once per request, not per partition).
    """

    def __init__(self, host: str, port: int, registry: Registry, tiers_provider: TiersProvider, *,
                 broker_id: int = -1, read_timeout_s: float = READ_TIMEOUT_S,
                 max_request_bytes: int = MAX_REQUEST_HEAD_BYTES, max_connections: int = MAX_CONNECTIONS,
                 ssl_config: SslConfig | None = None) -> None:
        self.host = host
        self.port = port
        self.registry = registry
        self.tiers_provider = tiers_provider
        self.broker_id = broker_id
        self.read_timeout_s = read_timeout_s
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        # built here, so a bad metrics.ssl.* config fails the broker's start with an InvalidConfigError
        self.ssl_context: ssl.SSLContext | None = metrics_server_context(ssl_config)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> int:
        """Bind and listen; returns the bound port (``port=0`` picks a free one)."""
        # the StreamReader limit bounds readuntil(): a longer head raises LimitOverrunError
        tls: dict[str, Any] = {}
        if self.ssl_context is not None:
            tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": self.read_timeout_s}
        self._server = await asyncio.start_server(self._handle, self.host, self.port,
                                                  limit=self.max_request_bytes, reuse_address=True, **tls)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("admin http listening on %s://%s:%d", self.scheme, self.host, self.port)
        return self.port

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), timeout=5.0)

    # -- one connection ------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            if len(self._tasks) > self.max_connections:
                response = _response(503, b"too many connections\n", "text/plain; charset=utf-8")
            else:
                response = await self._respond(reader)
            if response is not None:
                writer.write(response)
                await asyncio.wait_for(writer.drain(), timeout=WRITE_TIMEOUT_S)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or stalled: nothing to answer
        except Exception:
            log.exception("admin http connection failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), timeout=1.0)

    async def _respond(self, reader: asyncio.StreamReader) -> bytes | None:
        """The whole response for the request on ``reader``, or None when the client sent nothing."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=self.read_timeout_s)
        except asyncio.IncompleteReadError as e:
            if not e.partial.strip():
                return None
            return _text(400, "incomplete request\n")
        except asyncio.LimitOverrunError:
            return _text(431, "request head too large\n")
        except TimeoutError:
            return _text(408, "request timeout\n")
        try:
            method, path = _parse_head(head)
        except _BadRequest as e:
            return _text(e.status, f"{e}\n")
        return self._route(method, path)

    def _route(self, method: str, path: str) -> bytes:
        if path not in ("/metrics", "/v1/tiers"):
            return _text(404, "not found\n", head_only=method == "HEAD")
        if method not in ("GET", "HEAD"):
            return _response(405, b"method not allowed\n", "text/plain; charset=utf-8", extra={"Allow": "GET, HEAD"})
        try:
            if path == "/metrics":
                body = self.registry.render().encode()
                content_type = METRICS_CONTENT_TYPE
            else:
                doc = {"broker_id": self.broker_id, "partitions": list(self.tiers_provider())}
                body = (json.dumps(doc, default=str) + "\n").encode()
                content_type = "application/json"
        except Exception:
            log.exception("admin http %s failed", path)
            return _text(500, "internal error\n", head_only=method == "HEAD")
        return _response(200, body, content_type, head_only=method == "HEAD")


def _parse_head(head: bytes) -> tuple[str, str]:
    """(method, path without query) from a request head; raises _BadRequest for anything malformed."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise _BadRequest(400, "request head is not ASCII") from None
    request_line, *headers = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3:
        raise _BadRequest(400, "malformed request line")
    method, target, version = parts
    if not method.isalpha() or not method.isupper():
        raise _BadRequest(400, "malformed method")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise _BadRequest(400, "unsupported HTTP version")
    if not target.startswith("/"):
        raise _BadRequest(400, "request target must be a path")
    for line in headers:
        if line and (":" not in line or line[0] in " \t"):
            raise _BadRequest(400, "malformed header line")
    path = target.split("?", 1)[0].split("#", 1)[0]
    return method, path


def _text(status: int, message: str, head_only: bool = False) -> bytes:
    return _response(status, message.encode(), "text/plain; charset=utf-8", head_only=head_only)


def _response(status: int, body: bytes, content_type: str, head_only: bool = False,
              extra: dict[str, str] | None = None) -> bytes:
    headers = {"Content-Type": content_type, "Content-Length": str(len(body)), "Connection": "close",
               "Cache-Control": "no-store", **(extra or {})}
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return head if head_only else head + body
