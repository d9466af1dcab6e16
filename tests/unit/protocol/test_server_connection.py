"""``ServerConnection``: framing rules without sockets.

TCP delivers bytes in arbitrary chunks, so every split of a stream of frames must give the same
requests; a size prefix outside ``[0, socket.request.max.bytes]`` or a frame that does not parse
ends the connection (sticky: nothing after it is ever decoded), and so does a request for an API
or version the broker does not serve, except ApiVersions: at an unknown version it is a request
to answer, not a violation.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.protocol.test_frame import request_frame

from strata.protocol.connection import NEED_DATA, ProtocolViolation, ServerConnection
from strata.protocol.frame import Request

SIZE = struct.Struct(">i")


def framed(payload: bytes) -> bytes:
    return SIZE.pack(len(payload)) + payload


FRAMES = [framed(request_frame(18, 3, correlation=1, client_software_name="a", client_software_version="1")),
          framed(request_frame(3, 12, correlation=2, topics=None)),
          framed(request_frame(1, 12, correlation=3, max_wait=500, min_bytes=1, max_bytes=1024, topics=[])),
          framed(request_frame(0, 9, correlation=4, acks=-1, timeout=10, topic_data=[]))]
STREAM = b"".join(FRAMES)


def drain(conn: ServerConnection) -> list[object]:
    out = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
        if isinstance(event, ProtocolViolation):
            break
    return out


def test_nothing_until_a_whole_frame_arrives() -> None:
    conn = ServerConnection(1 << 20)
    assert conn.next_event() is NEED_DATA
    frame = FRAMES[1]
    for i in range(len(frame) - 1):
        conn.receive_data(frame[i : i + 1])
        assert conn.next_event() is NEED_DATA, f"event after {i + 1} of {len(frame)} bytes"
    assert conn.buffered == len(frame) - 1
    conn.receive_data(frame[-1:])
    event = conn.next_event()
    assert isinstance(event, Request) and event.header.correlation_id == 2
    assert conn.buffered == 0 and conn.next_event() is NEED_DATA


def test_several_frames_in_one_chunk_come_out_in_order() -> None:
    conn = ServerConnection(1 << 20)
    conn.receive_data(memoryview(STREAM + FRAMES[0][:5]))
    events = drain(conn)
    assert [e.header.correlation_id for e in events if isinstance(e, Request)] == [1, 2, 3, 4]
    assert conn.buffered == 5


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, len(STREAM)), max_size=20))
def test_any_split_of_the_stream_gives_the_same_requests(cuts: list[int]) -> None:
    conn = ServerConnection(1 << 20)
    got = []
    prev = 0
    for cut in [*sorted(cuts), len(STREAM)]:
        conn.receive_data(STREAM[prev:cut])
        prev = max(prev, cut)
        got += drain(conn)
    assert [(e.api_key, e.header.correlation_id) for e in got if isinstance(e, Request)] == [
        (18, 1), (3, 2), (1, 3), (0, 4)]


def test_the_size_limit_is_inclusive() -> None:
    frame = FRAMES[1]
    exact = ServerConnection(len(frame) - 4)
    exact.receive_data(frame)
    assert isinstance(exact.next_event(), Request)
    below = ServerConnection(len(frame) - 5)
    below.receive_data(frame[:4])  # the prefix alone is enough to refuse
    event = below.next_event()
    assert isinstance(event, ProtocolViolation) and "socket.request.max.bytes" in event.reason


def test_oversized_and_negative_prefixes_close_without_buffering() -> None:
    for size in (2**31 - 1, 100_000_001, -1, -(2**31)):
        conn = ServerConnection(100_000_000)
        conn.receive_data(SIZE.pack(size))
        event = conn.next_event()
        assert isinstance(event, ProtocolViolation), size
        conn.receive_data(b"x" * 1000)  # the socket loop closes; anything more is dropped
        assert conn.buffered == 0
        assert conn.next_event() is event  # sticky


def test_malformed_frame_is_a_violation_and_later_frames_are_never_decoded() -> None:
    conn = ServerConnection(1 << 20)
    bad = framed(FRAMES[1][4:-2])  # a body cut short inside a valid frame
    conn.receive_data(FRAMES[0] + bad + FRAMES[2])
    first, second = drain(conn)
    assert isinstance(first, Request)
    assert isinstance(second, ProtocolViolation) and "cannot decode" in second.reason
    assert conn.next_event() is second and conn.buffered == 0


def test_empty_and_short_frames_are_violations() -> None:
    for payload in (b"", b"\x00\x12\x00"):
        conn = ServerConnection(1 << 20)
        conn.receive_data(framed(payload))
        event = conn.next_event()
        assert isinstance(event, ProtocolViolation) and "shorter than a request header" in event.reason


def test_unknown_api_versions_version_is_a_request_to_answer_not_a_violation() -> None:
    conn = ServerConnection(1 << 20, {18: (0, 4), 3: (0, 12)})
    future = framed(struct.pack(">hhih", 18, 9, 77, 0) + b"\xde\xad")  # ApiVersions v9: body unparsed
    conn.receive_data(future + FRAMES[1])
    a, b = drain(conn)
    assert isinstance(a, Request) and a.body is None and (a.api_key, a.api_version) == (18, 9)
    assert isinstance(b, Request) and b.body is not None


def test_unserved_apis_and_versions_are_violations_as_in_kafka() -> None:
    for payload, reason in (
        (request_frame(1, 12, correlation=78), "api key 1 with version 12 which is not enabled (the API is not"),
        (request_frame(3, 9, correlation=79), "api key 3 with version 9 which is not enabled (versions 10-12 are"),
        (struct.pack(">hhih", 3, 999, 80, 3) + b"raw", "api key 3 with version 999 which is not enabled"),
        (struct.pack(">hhih", 4242, 0, 81, 3) + b"raw", "Unknown API key 4242 (client id 'raw')"),
    ):
        conn = ServerConnection(1 << 20, {18: (0, 4), 3: (10, 12)})
        conn.receive_data(framed(payload) + FRAMES[1])
        (event,) = drain(conn)
        assert isinstance(event, ProtocolViolation) and reason in event.reason, event
        assert conn.next_event() is event and conn.buffered == 0  # sticky: the Metadata after it is never read


def test_a_frame_larger_than_one_read_is_assembled() -> None:
    payload = request_frame(0, 9, correlation=5, acks=1, timeout=10, topic_data=[
        {"name": "t", "partition_data": [{"index": 0, "records": b"\x00" * 300_000}]}])
    frame = framed(payload)
    conn = ServerConnection(1 << 20)
    for i in range(0, len(frame), 65536):
        assert conn.next_event() is NEED_DATA
        conn.receive_data(frame[i : i + 65536])
    event = conn.next_event()
    assert isinstance(event, Request) and event.size == len(payload)
    assert bytes(event.body.topic_data[0].partition_data[0].records) == b"\x00" * 300_000
