"""One asyncio connection to another broker: what follower fetchers and controlled shutdown speak.

The same kio encoding as the blocking tools' client (``strata.client.wire``), over asyncio streams
with a timeout per call. One request is in flight at a time: a replica fetcher waits for each
fetch anyway, and the order of requests on one connection is then the order of their answers.
Record batches in responses stay the bytes kio hands over; nothing here looks inside them.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from strata.client.security import AuthenticationFailed, ClientSecurity, sasl_login
from strata.client.wire import WireError, decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
STREAM_LIMIT = 4 * 1024 * 1024  # read buffer: a fetch response arrives in few large reads, not 64 KiB ones


class AsyncBrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        """TCP, then TLS and the SASL login when the peer's inter-broker listener asks for them."""
        security = self.security
        tls = security.ssl_context if security is not None else None
        try:
            async with asyncio.timeout(self.timeout_s):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, limit=STREAM_LIMIT, ssl=tls,
                    server_hostname=security.server_hostname(self.host) if security is not None and tls else None)
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
        assert self._reader is not None and self._writer is not None
        self._correlation += 1
        correlation = self._correlation
        frame = encode_request(api_key, version, correlation, self.client_id, **fields)
        try:
            async with asyncio.timeout(self.timeout_s if timeout_s is None else timeout_s):
                self._writer.write(frame)
                await self._writer.drain()
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    raise WireError(f"implausible response size {size} from {self.host}:{self.port}")
                payload = await self._reader.readexactly(size)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
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
            got, body = decode_response(api_key, version, payload)
        except Exception as e:
            self.close()
            raise WireError(f"cannot decode the response to api {api_key} v{version}: {e}") from None
        if got != correlation:
            self.close()
            raise WireError(f"response correlation id {got}, expected {correlation}")
        return body

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
