"""Sans-IO server side of one Kafka connection: bytes in, requests out (h11's shape).

The socket loop feeds whatever it read to :meth:`ServerConnection.receive_data` and then drains
:meth:`next_event` until it says :data:`NEED_DATA`. No I/O happens here, so the framing rules
(size prefix, ``socket.request.max.bytes``, malformed frames) are tested without sockets, and the
hypothesis fuzz test can throw anything at it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from strata.protocol.frame import MalformedRequestError, Request, decode_request

_SIZE = struct.Struct(">i")


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The peer broke framing; the connection must close (after logging ``reason``)."""

    reason: str


class ServerConnection:
    def __init__(self, max_request_size: int, supported: dict[int, tuple[int, int]] | None = None) -> None:
        self.max_request_size = max_request_size
        self._supported = supported
        self._buf = bytearray()
        self._closed: ProtocolViolation | None = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed is None:
            self._buf += data

    def next_event(self) -> Request | ProtocolViolation | _NeedData:
        """The next whole request, a violation (sticky: the connection is done), or NEED_DATA."""
        if self._closed is not None:
            return self._closed
        if len(self._buf) < 4:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buf, 0)
        if size < 0 or size > self.max_request_size:
            return self._violation(
                f"request frame of {size} bytes is outside [0, socket.request.max.bytes={self.max_request_size}]"
            )
        if len(self._buf) < 4 + size:
            return NEED_DATA
        frame = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        try:
            return decode_request(frame, self._supported)
        except MalformedRequestError as e:
            return self._violation(str(e))

    def _violation(self, reason: str) -> ProtocolViolation:
        self._closed = ProtocolViolation(reason)
        self._buf.clear()
        return self._closed
