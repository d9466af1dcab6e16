"""Sans-IO server side of one Kafka connection: bytes in, requests out (h11's shape).

The socket loop feeds whatever it read to :meth:`ServerConnection.receive_data` and then drains
:meth:`next_event` until it says :data:`NEED_DATA`. No I/O happens here, so the framing rules
(size prefix, ``socket.request.max.bytes``, malformed frames) are tested without sockets, and the
hypothesis fuzz test can throw anything at it.

Large frames (produce requests of up to ``socket.request.max.bytes``) get a buffer of their own
as soon as their size prefix is known, and :meth:`ServerConnection.get_buffer` hands the rest of
it to the socket loop to read into directly (asyncio's BufferedProtocol pattern): the bytes are
copied once, by the kernel, instead of being appended to a growing buffer, sliced out and
deleted from its front (three more copies of every produced byte). Like Kafka, the buffer is
allocated for the whole announced size once the prefix passed the size check, but left
uninitialised (:func:`_uninitialized`): only the pages the peer actually fills become resident,
so a client announcing ``socket.request.max.bytes`` and then trickling (or sending nothing)
costs the broker what it sent, not 100 MiB of zeroed memory per connection.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any, Final

from strata.protocol.frame import MalformedRequestError, Request, decode_request

_SIZE = struct.Struct(">i")

_new_bytearray: Any
try:  # CPython's constructor with a NULL source leaves the contents uninitialised (no memset)
    _new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
    _new_bytearray.restype = ctypes.py_object
    _new_bytearray.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
except (AttributeError, OSError):  # not CPython
    _new_bytearray = None


def _uninitialized(size: int) -> bytearray:
    """A ``bytearray`` of ``size`` bytes whose contents are whatever malloc returned.

    ``bytearray(size)`` zeroes every byte, making the whole buffer resident at once. Every byte
    of a frame buffer is written by a read before the frame is decoded, so it is never read
    uninitialised.
    """
    if _new_bytearray is None:
        return bytearray(size)
    buf: bytearray = _new_bytearray(None, size)
    return buf


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The peer broke framing; the connection must close (after logging ``reason``)."""

    reason: str


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A size-prefixed frame returned as it is: a SASL token after a v0 SaslHandshake (Kafka's
    pre-KIP-152 framing carries tokens without a request header)."""

    data: bytes


class ServerConnection:
    LARGE_FRAME = 32 * 1024  # frames from this size on are read into a buffer of their own

    def __init__(self, max_request_size: int, supported: dict[int, tuple[int, int]] | None = None) -> None:
        self.max_request_size = max_request_size
        self._supported = supported
        self._buf = bytearray()  # bytes not yet claimed by a large frame
        self._frame: bytearray | None = None  # the large frame being filled
        self._filled = 0
        self._closed: ProtocolViolation | None = None
        self.raw_frames = False  # the next frames are SASL tokens, not requests (set by the authenticator)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as a request."""
        return len(self._buf) + (self._filled if self._frame is not None else 0)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed is not None:
            return
        frame = self._frame
        if frame is not None and self._filled < len(frame):
            n = min(len(data), len(frame) - self._filled)
            frame[self._filled : self._filled + n] = data[:n]
            self._filled += n
            data = data[n:]
        if data:
            self._buf += data

    def get_buffer(self) -> memoryview | None:
        """Where the next read may go directly (the unfilled rest of a large frame), else None.

        Report what was read with :meth:`buffer_updated`; without a buffer, read anywhere and
        pass the bytes to :meth:`receive_data`.
        """
        frame = self._frame
        if frame is None or self._filled >= len(frame) or self._closed is not None:
            return None
        return memoryview(frame)[self._filled :]

    def buffer_updated(self, n: int) -> None:
        assert self._frame is not None and self._filled + n <= len(self._frame)
        self._filled += n

    def next_event(self) -> Request | RawFrame | ProtocolViolation | _NeedData:
        """The next whole request, a violation (sticky: the connection is done), or NEED_DATA."""
        if self._closed is not None:
            return self._closed
        frame = self._frame
        if frame is not None:
            if self._filled < len(frame):
                return NEED_DATA
            self._frame = None
            return self._decode(memoryview(frame).toreadonly())  # kio's reader wants a read-only buffer
        buf = self._buf
        if len(buf) < 4:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(buf, 0)
        if size < 0 or size > self.max_request_size:
            return self._violation(
                f"request frame of {size} bytes is outside [0, socket.request.max.bytes={self.max_request_size}]"
            )
        available = len(buf) - 4
        if available >= size:
            small = bytes(memoryview(buf)[4 : 4 + size])
            del buf[: 4 + size]
            return self._decode(small)
        if size >= self.LARGE_FRAME:
            self._frame = _uninitialized(size)
            self._frame[:available] = memoryview(buf)[4:]
            self._filled = available
            buf.clear()
        return NEED_DATA

    def _decode(self, frame: bytes | memoryview) -> Request | RawFrame | ProtocolViolation:
        if self.raw_frames:
            return RawFrame(bytes(frame))
        try:
            return decode_request(frame, self._supported)
        except MalformedRequestError as e:
            return self._violation(str(e))

    def _violation(self, reason: str) -> ProtocolViolation:
        self._closed = ProtocolViolation(reason)
        self._buf.clear()
        self._frame = None
        return self._closed
