"""A minimal blocking Kafka client for the command-line tools: one kio request, one response.

The tools ask a broker a handful of questions (its node id, a config value) and exit. A client
library would be a dependency for two requests, and would hide what the broker answered behind
retries; this speaks the wire format directly through kio over one socket. Only non-flexible
request versions are needed (request header v1), which every Kafka broker still accepts.

On a secured listener (``security``, a :class:`~strata.client.security.ClientSecurity`) the socket is
wrapped in TLS for ``SSL``/``SASL_SSL`` and the SASL login runs for ``SASL_*`` before the first request;
a refusal is a :class:`SecurityError` saying what to check.
"""

from __future__ import annotations

import io
import socket
import ssl
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from strata.client.security import AuthenticationFailed, ClientSecurity, sasl_login_sync
from strata.protocol.build import make, zero_values
from strata.protocol.lengths import length_check

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
DEFAULT_PORT = 9092


class WireError(Exception):
    """The broker could not be reached or answered something we cannot read."""


class SecurityError(WireError):
    """TLS or SASL refused the connection (an untrusted certificate, a wrong password, a mechanism the
    listener does not offer): trying again, or another broker, will not help."""


ADMIN_CLIENT_ID = "__admin_client"
"""Kafka's client id for a broker's own requests: the only one allowed to produce to internal topics."""

def parse_host_port(address: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, ``host`` -> (host, port); raises ValueError when malformed."""
    address = address.strip()
    if not address:
        raise ValueError("empty address")
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"malformed address {address!r}")
        port_text = rest[1:] if rest else ""
    elif address.count(":") == 1:
        host, port_text = address.split(":")
    elif ":" in address:  # a bare IPv6 address
        host, port_text = address, ""
    else:
        host, port_text = address, ""
    if not host:
        raise ValueError(f"no host in {address!r}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"invalid port in {address!r}")
    return host, int(port_text)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, **fields: Any) -> bytes:
    """A whole request frame (size prefix included); fields missing from ``fields`` are zero."""
    cls = load_request_schema(api_key, version)
    body = make(cls, **{**zero_values(cls), **fields})
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=api_key, request_api_version=version,
                                        correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buf, body)
    raw = buf.getvalue()
    return _SIZE.pack(len(raw)) + raw


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response body) from a frame without its size prefix."""
    cls = load_response_schema(api_key, version)
    header, used = entity_reader(cls.__header_schema__)(frame, 0)
    # A peer's response is checked like a client's request: an array count the frame cannot hold would make
    # kio's native reader reserve memory for it and abort the whole process (strata.protocol.lengths).
    length_check(cls)(frame, used)
    body, n = entity_reader(cls)(frame, used)
    if used + n != len(frame):
        raise ValueError(f"{len(frame) - used - n} trailing bytes after {cls.__name__} v{version}")
    return header.correlation_id, body


class KafkaWire:
    """One blocking connection to a broker; ``call`` sends a request and returns its response."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0, client_id: str = "strata-tools",
                 security: ClientSecurity | None = None) -> None:
        try:
            host, port = parse_host_port(bootstrap)
        except ValueError as e:
            raise WireError(f"bad bootstrap address: {e}") from None
        self.host = host
        self.port = port
        self.client_id = client_id
        self.security = security
        self._correlation = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise WireError(f"cannot connect to {bootstrap}: {e.strerror or e}") from None
        try:
            self._secure(security)
        except BaseException:
            self.sock.close()
            raise

    def _secure(self, security: ClientSecurity | None) -> None:
        if security is None:
            return
        where = f"{self.host}:{self.port}"
        if security.ssl_context is not None:
            try:
                self.sock = security.ssl_context.wrap_socket(self.sock,
                                                             server_hostname=security.server_hostname(self.host))
            except ssl.SSLCertVerificationError as e:
                raise SecurityError(f"TLS handshake with {where} failed: the broker's certificate is not trusted "
                                    f"({e.verify_message or e.reason}): check ssl.truststore.location (or "
                                    "ssl.ca.location) and, for a host name mismatch, the address used or "
                                    "ssl.endpoint.identification.algorithm") from None
            except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as e:
                raise WireError(f"TLS handshake with {where} failed: the broker closed the connection ({e})") \
                    from None
            except ssl.SSLError as e:
                raise SecurityError(f"TLS handshake with {where} failed: {e.reason or e} (is it a "
                                    f"{security.protocol} listener?)") from None
            except TimeoutError:
                raise WireError(f"TLS handshake with {where} timed out (is it a {security.protocol} listener?)") \
                    from None
            except OSError as e:
                raise WireError(f"TLS handshake with {where} failed: {e.strerror or e}") from None
        if security.sasl_mechanism is not None:
            try:
                sasl_login_sync(security, self.call)
            except AuthenticationFailed as e:
                raise SecurityError(f"authentication to {where} failed: {e}") from None
            except SecurityError:
                raise
            except WireError as e:
                raise WireError(f"SASL login to {where} failed: {e} (is it a {security.protocol} listener?)") \
                    from None

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise WireError("the broker closed the connection (does it support this request version?)")
            out += chunk
        return bytes(out)

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, self.client_id, **fields)
        try:
            self.sock.sendall(frame)
            (size,) = _SIZE.unpack(self._recv_exact(4))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise WireError(f"implausible response size {size}: is {self.host}:{self.port} a Kafka broker?")
            payload = self._recv_exact(size)
        except TimeoutError:
            raise WireError(f"no answer from {self.host}:{self.port} (timed out)") from None
        except OSError as e:
            raise WireError(f"connection to {self.host}:{self.port} failed: {e.strerror or e}") from None
        try:
            correlation, body = decode_response(api_key, version, payload)
        except Exception as e:
            raise WireError(f"cannot decode the response to api {api_key} v{version}: {e}") from None
        if correlation != self._correlation:
            raise WireError(f"response correlation id {correlation}, expected {self._correlation}")
        return body
