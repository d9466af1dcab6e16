"""One client socket: read → sans-IO connection → dispatch → write, in request order.

Kafka answers a connection's requests in the order they arrived, so requests are handled one
at a time per connection (clients pipeline up to ``max.in.flight`` requests; they queue in the
socket buffer). A long-polling Fetch therefore holds only its own connection. Handler errors
that escape (bugs) are logged and answered with the API's UNKNOWN_SERVER_ERROR response, never
allowed to kill the broker; framing violations close this connection only.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from strata.broker.dispatch import CloseConnection, RequestContext, Spliced, handlers, supported_versions
from strata.protocol.build import make, zero_values
from strata.protocol.connection import NEED_DATA, ProtocolViolation, ServerConnection
from strata.protocol.frame import Request, encode_response, response_class, unsupported_version_response

if TYPE_CHECKING:
    from strata.broker.server import Broker

log = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024


async def sendfile_slice(loop: asyncio.AbstractEventLoop, sock: socket.socket, fd: int, offset: int,
                         count: int) -> None:
    """``os.sendfile`` on a non-blocking socket, waiting for writability on EAGAIN."""
    out = sock.fileno()
    while count > 0:
        try:
            sent = os.sendfile(out, fd, offset, count)
        except BlockingIOError:
            sent = -1
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                sent = -1
            else:
                raise
        if sent == 0:
            raise ConnectionError("file slice ended early (segment truncated or deleted)")
        if sent < 0:
            waiter = loop.create_future()
            loop.add_writer(out, waiter.set_result, None)
            try:
                await waiter
            finally:
                loop.remove_writer(out)
            continue
        offset += sent
        count -= sent


class ClientConnection:
    def __init__(self, broker: Broker, sock: socket.socket, peer: str) -> None:
        self.broker = broker
        self.sock = sock
        self.peer = peer
        self.protocol = ServerConnection(broker.config.socket_request_max_bytes, supported_versions())
        self._loop = asyncio.get_running_loop()

    async def run(self) -> None:
        loop = self._loop
        buf = bytearray(RECV_BYTES)
        idle_s = self.broker.config.connections_max_idle_ms / 1000
        try:
            while True:
                event = self.protocol.next_event()
                if event is NEED_DATA:
                    try:
                        n = await asyncio.wait_for(loop.sock_recv_into(self.sock, buf), idle_s)
                    except TimeoutError:
                        log.info("closing idle connection from %s", self.peer)
                        return
                    if n == 0:
                        return
                    self.protocol.receive_data(memoryview(buf)[:n])
                    continue
                if isinstance(event, ProtocolViolation):
                    log.warning("closing connection from %s: %s", self.peer, event.reason)
                    return
                assert isinstance(event, Request)
                if not await self._serve(event):
                    return
        except (ConnectionError, OSError) as e:
            log.debug("connection from %s ended: %s", self.peer, e)
        finally:
            try:
                self.sock.close()
            except OSError:
                pass

    async def _serve(self, request: Request) -> bool:
        """Answer one request; False means close the connection."""
        cid = request.header.correlation_id
        if request.body is None:
            log.info("unsupported %s v%d from %s (%s)", request.api_key, request.api_version, self.peer,
                     request.header.client_id)
            await self._send([unsupported_version_response(request.api_key, request.api_version, cid,
                                                           supported_versions())])
            return True
        spec = handlers()[request.api_key]
        ctx = RequestContext(self.broker, request, self.peer)
        try:
            response = await spec.fn(ctx, request.body)
        except CloseConnection as e:
            log.info("closing connection from %s: %s", self.peer, e)
            return False
        except Exception:
            log.exception("handler for API %d v%d failed", request.api_key, request.api_version)
            response = _error_response(request)
        if response is None:
            return True
        if isinstance(response, Spliced):
            parts = encode_response(response.body, cid, response.splices)
        else:
            parts = encode_response(response, cid)
        await self._send(parts)
        return True

    async def _send(self, parts: list[Any]) -> None:
        loop = self._loop
        pending = bytearray()
        for part in parts:
            if isinstance(part, (bytes, bytearray)):
                pending += part
                continue
            if pending:
                await loop.sock_sendall(self.sock, pending)
                pending = bytearray()
            await sendfile_slice(loop, self.sock, part.fileno(), part.position, part.size)
        if pending:
            await loop.sock_sendall(self.sock, pending)


def _error_response(request: Request) -> Any:
    cls = response_class(request.api_key, request.api_version)
    if cls is None:
        return None
    values = zero_values(cls)
    if "error_code" in values:
        values["error_code"] = -1
    return make(cls, **values)
