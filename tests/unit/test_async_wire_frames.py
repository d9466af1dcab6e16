"""The inter-broker connection's framing (``client.async_wire._Frames``): size-prefixed frames cut at any
byte by the socket come out whole and in order, large ones read straight into their own buffer; a hostile
size closes the connection with a clear error. Driven as the event loop drives a ``BufferedProtocol``
(``get_buffer`` then ``buffer_updated``), then over a real socket pair."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.client.async_wire import STAGING_BYTES, _Frames
from strata.client.wire import WireError


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def _feed(protocol: _Frames, data: bytes, cuts: list[int]) -> None:
    """Hand ``data`` to the protocol in reads ending at ``cuts`` (each read also capped by the buffer offered)."""
    i = 0
    for end in [*sorted(set(cuts)), len(data)]:
        while i < end:
            buf = protocol.get_buffer(-1)
            n = min(len(buf), end - i)
            buf[:n] = data[i:i + n]
            protocol.buffer_updated(n)
            i += n


def _framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def _drain(protocol: _Frames) -> list[bytes]:
    async def take(n: int) -> list[bytes]:
        return [bytes(await protocol.next_frame()) for _ in range(n)]

    return asyncio.run(take(len(protocol._ready)))


# large payloads from a size and a seed: hypothesis's own byte budget (8 KiB) is smaller than one of them
_large = st.builds(lambda n, seed: random.Random(seed).randbytes(n),
                   st.integers(STAGING_BYTES // 3, STAGING_BYTES // 3 + 5), st.integers(0, 2**16))


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.one_of(st.binary(max_size=40), _large), min_size=1, max_size=6),
       cut_points=st.lists(st.floats(min_value=0, max_value=1), max_size=12))
def test_frames_cut_anywhere_come_out_whole_and_in_order(payloads: list[bytes], cut_points: list[float]) -> None:
    data = _framed(payloads)
    protocol = _Frames("peer")
    protocol.connection_made(_Transport())
    _feed(protocol, data, [int(c * len(data)) for c in cut_points])
    assert _drain(protocol) == payloads


def test_a_large_frame_is_read_into_its_own_buffer() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    protocol = _Frames("peer")
    protocol.connection_made(_Transport())
    head = struct.pack(">i", len(payload)) + payload[:100]
    _feed(protocol, head, [])
    buf = protocol.get_buffer(-1)
    assert len(buf) == len(payload) - 100  # the rest of the frame, not the staging buffer
    _feed(protocol, payload[100:], [])
    assert _drain(protocol) == [payload]


def test_an_implausible_size_fails_the_connection() -> None:
    protocol = _Frames("peer")
    transport = _Transport()
    protocol.connection_made(transport)
    _feed(protocol, struct.pack(">i", -5), [])
    assert transport.aborted
    with pytest.raises(WireError, match="implausible response size -5"):
        asyncio.run(protocol.next_frame())


def test_over_a_socket_pair_and_a_peer_that_closes() -> None:
    async def run() -> None:
        ours, theirs = socket.socketpair()
        transport, protocol = await asyncio.get_running_loop().create_connection(lambda: _Frames("peer"),
                                                                                 sock=ours)
        payloads = [b"", b"x" * 10, bytes(3 * STAGING_BYTES)]
        theirs.sendall(_framed(payloads))
        assert [bytes(await protocol.next_frame()) for _ in payloads] == payloads
        theirs.sendall(struct.pack(">i", 10) + b"half")
        theirs.close()
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(protocol.next_frame(), 5)
        transport.close()

    asyncio.run(run())
