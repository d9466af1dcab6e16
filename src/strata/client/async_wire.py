"""One asyncio connection to another broker: what follower fetchers and controlled shutdown speak.

The same kio encoding as the blocking tools' client (``strata.client.wire``), over an asyncio
``BufferedProtocol`` with a timeout per call. One request is in flight at a time: a replica fetcher waits
for each fetch anyway, and the order of requests on one connection is then the order of their answers.
Record batches in responses stay the bytes kio hands over; nothing here looks inside them.

A response is read straight into a buffer of its size once its size prefix arrived (only the first read of
a frame goes through a small staging buffer), not through ``StreamReader``: that copied every replicated
byte three times before kio saw it (the socket's ``bytes``, the stream's buffer, ``readexactly``'s slice),
a fifth of a follower's CPU under acks=all. kio's copy of a partition's records into ``bytes`` remains.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

from strata.client.security import AuthenticationFailed, ClientSecurity, sasl_login
from strata.client.wire import WireError, decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
STAGING_BYTES = 64 * 1024  # a frame's first read: its size prefix and as much of it as arrived


class _Frames(asyncio.BufferedProtocol):
    """Size-prefixed frames from the socket, each into a ``bytearray`` of its own: the socket reads into the
    frame's buffer directly once its size is known."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self._staging = bytearray(STAGING_BYTES)
        self._head = bytearray()  # a size prefix split across reads
        self._frame: bytearray | None = None
        self._filled = 0
        self._direct = False  # the last get_buffer handed out the frame's own buffer
        self._ready: deque[bytearray] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview | bytearray:
        frame = self._frame
        if frame is not None and len(frame) - self._filled >= STAGING_BYTES // 4:
            self._direct = True
            return memoryview(frame)[self._filled:]
        self._direct = False  # a small rest: read it with what follows through the staging buffer
        return self._staging

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:
            assert self._frame is not None
            self._filled += nbytes
            if self._filled == len(self._frame):
                self._complete()
            return
        self._consume(memoryview(self._staging)[:nbytes])

    def _consume(self, data: memoryview) -> None:
        i, end = 0, len(data)
        while i < end:
            if self._frame is None:
                take = min(4 - len(self._head), end - i)
                self._head += data[i:i + take]
                i += take
                if len(self._head) < 4:
                    return
                (size,) = _SIZE.unpack(self._head)
                self._head.clear()
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    self._fail(WireError(f"implausible response size {size} from {self.peer}"))
                    assert self.transport is not None
                    self.transport.abort()
                    return
                self._frame, self._filled = bytearray(size), 0
            frame = self._frame
            take = min(len(frame) - self._filled, end - i)
            frame[self._filled:self._filled + take] = data[i:i + take]
            self._filled += take
            i += take
            if self._filled == len(frame):
                self._complete()

    def _complete(self) -> None:
        assert self._frame is not None
        self._ready.append(self._frame)
        self._frame = None
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        self._fail(ConnectionError(f"{self.peer} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc if exc is not None else ConnectionError(f"connection to {self.peer} lost"))

    async def next_frame(self) -> bytearray:
        """The next whole frame (without its size prefix); the connection's error once it failed."""
        while not self._ready:
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._ready.popleft()


class AsyncBrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._transport: asyncio.Transport | None = None
        self._frames: _Frames | None = None
        self._correlation = 0

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def connect(self) -> None:
        """TCP, then TLS and the SASL login when the peer's inter-broker listener asks for them."""
        security = self.security
        tls = security.ssl_context if security is not None else None
        try:
            async with asyncio.timeout(self.timeout_s):
                peer = f"{self.host}:{self.port}"
                transport, self._frames = await asyncio.get_running_loop().create_connection(
                    lambda: _Frames(peer), self.host, self.port, ssl=tls,
                    server_hostname=security.server_hostname(self.host) if security is not None and tls else None)
                assert isinstance(transport, asyncio.Transport)
                self._transport = transport
        except (OSError, TimeoutError) as e:  # ssl.SSLError is an OSError: an untrusted certificate lands here
            raise WireError(f"cannot connect to {self.host}:{self.port}: {e}") from None
        if security is not None and security.sasl_mechanism is not None:
            try:
                await sasl_login(security, self.call)
            except AuthenticationFailed as e:
                self.close()
                raise WireError(f"{self.host}:{self.port}: {e}") from None
            except BaseException:  # cancelled mid-login: a half-authenticated connection must not be reused
                self.close()
                raise

    async def call(self, api_key: int, version: int, timeout_s: float | None = None, **fields: Any) -> Any:
        """Send one request and return its decoded response body; WireError on any failure (the
        connection is then closed: the next call reconnects). A call cancelled mid-way closes it too."""
        if not self.connected:
            await self.connect()
        transport, frames = self._transport, self._frames
        assert transport is not None and frames is not None
        self._correlation += 1
        correlation = self._correlation
        frame = encode_request(api_key, version, correlation, self.client_id, **fields)
        try:
            async with asyncio.timeout(self.timeout_s if timeout_s is None else timeout_s):
                transport.write(frame)  # one small request at a time: the transport's buffer is the flow control
                payload = await frames.next_frame()
        except (OSError, TimeoutError) as e:
            self.close()
            raise WireError(f"request {api_key} v{version} to {self.host}:{self.port} failed: "
                            f"{type(e).__name__} {e}") from None
        except BaseException:
            # A WireError, or the caller cancelled between the request and its answer (a coordinator giving up
            # its role, a task timed out from outside): the answer may still arrive, and the next call on this
            # connection would read it as its own ("response correlation id 1, expected 2"). Close instead.
            self.close()
            raise
        try:
            got, body = decode_response(api_key, version, memoryview(payload).toreadonly())  # kio reads read-only
        except Exception as e:
            self.close()
            raise WireError(f"cannot decode the response to api {api_key} v{version}: {e}") from None
        if got != correlation:
            self.close()
            raise WireError(f"response correlation id {got}, expected {correlation}")
        return body

    def close(self) -> None:
        transport, self._transport, self._frames = self._transport, None, None
        if transport is not None:
            transport.close()
