"""A minimal raw Kafka client for tests: kio requests over a blocking socket, no client library.

Real clients hide what the broker actually answered (they retry, reset offsets, refresh metadata),
so the tests that pin down one wire behaviour (a duplicate batch's offsets, an error code, a
long poll's latency, malformed frames) talk to the broker through this instead. Requests are
described like handler responses: ``call(api_key, version, **fields)`` with nested dicts, built
by :func:`strata.protocol.build.make` for that version.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from strata.client import wire

_SIZE = struct.Struct(">i")


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None = "strata-test",
                   **fields: Any) -> bytes:
    """A whole request frame (size prefix included) for ``api_key`` at ``version``."""
    return wire.encode_request(api_key, version, correlation_id, client_id, **fields)


decode_response = wire.decode_response


class WireClient:
    """One connection; ``call`` sends a request and returns the decoded response."""

    def __init__(self, bootstrap: str, timeout_s: float = 15.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self.recv_exact(4))
        return self.recv_exact(size)

    def send(self, api_key: int, version: int, **fields: Any) -> int:
        self._correlation += 1
        self.send_raw(encode_request(api_key, version, self._correlation, **fields))
        return self._correlation

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        correlation = self.send(api_key, version, **fields)
        got, body = decode_response(api_key, version, self.recv_frame())
        if got != correlation:
            raise AssertionError(f"correlation id {got}, expected {correlation}")
        return body


def produce(client: WireClient, topic: str, partition: int, records: bytes, acks: int = -1,
            version: int = 9) -> Any:
    """One partition's ProduceResponse partition entry."""
    resp = client.call(0, version, acks=acks, timeout=30_000, transactional_id=None,
                       topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}])
    return resp.responses[0].partition_responses[0]


def init_producer_id(client: WireClient, version: int = 4) -> tuple[int, int]:
    resp = client.call(22, version, transactional_id=None, transaction_timeout=60_000, producer_id=-1,
                       producer_epoch=-1)
    assert int(resp.error_code) == 0, resp
    return resp.producer_id, resp.producer_epoch


def ensure_topic(client: WireClient, topic: str) -> Any:
    """Auto-create ``topic`` through Metadata (Produce never creates topics, as in Kafka); its entry."""
    resp = client.call(3, 12, topics=[{"name": topic, "topic_id": None}], allow_auto_topic_creation=True,
                       include_topic_authorized_operations=False)
    (entry,) = resp.topics
    assert int(entry.error_code) == 0, entry
    return entry
