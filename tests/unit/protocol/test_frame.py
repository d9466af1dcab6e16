"""Frames without sockets: request decoding, response encoding, splices, unsupported versions.

The splice tests compare against the plain encoding: a response whose ``records`` hold splice
markers, with each payload's bytes put where its part is, must be byte-identical to the same
response encoded with those bytes inline, for legacy (int32 length) and flexible (uvarint
length + 1) Fetch versions, so sendfile can never desynchronise a client's parser.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from strata.protocol.build import make, zero_values
from strata.protocol.frame import (
    MalformedRequestError,
    Splice,
    UnsupportedVersionError,
    api_versions_unsupported_response,
    decode_request,
    encode_response,
    known_versions,
    peek_header,
    response_class,
)
from strata.protocol.records import BatchBuilder

SIZE = struct.Struct(">i")


def request_frame(key: int, version: int, correlation: int = 7, client_id: str | None = "unit", **fields: Any) -> bytes:
    """A request frame without the size prefix."""
    cls = load_request_schema(key, version)
    buf = io.BytesIO()
    header_cls = cls.__header_schema__
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=key, request_api_version=version,
                                        correlation_id=correlation, client_id=client_id))
    entity_writer(cls)(buf, make(cls, **{**zero_values(cls), **fields}))
    return buf.getvalue()


def decode_frame(key: int, version: int, data: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a whole response frame (size prefix included)."""
    (size,) = SIZE.unpack_from(data)
    assert size == len(data) - 4, "size prefix does not match the frame"
    cls = load_response_schema(key, version)
    header, used = entity_reader(cls.__header_schema__)(data, 4)
    body, n = entity_reader(cls)(data, 4 + used)
    assert 4 + used + n == len(data), "trailing bytes after the response"
    return header.correlation_id, body


# -- requests --------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version"), [(18, 0), (18, 3), (3, 0), (3, 9), (3, 12), (1, 4), (1, 12), (1, 16),
                                              (0, 3), (0, 9), (2, 1), (2, 7), (22, 4), (60, 1)])
def test_decode_request_reads_header_and_body_across_versions(key: int, version: int) -> None:
    frame = request_frame(key, version, correlation=123456, client_id="c-1")
    req = decode_request(frame)
    assert (req.api_key, req.api_version, req.header.correlation_id) == (key, version, 123456)
    assert req.header.client_id == "c-1"
    assert req.size == len(frame)
    assert type(req.body) is load_request_schema(key, version)


def test_null_client_id_is_kept() -> None:
    assert decode_request(request_frame(3, 1, client_id=None)).header.client_id is None


def test_versions_outside_the_supported_range_are_refused_as_kafka_does() -> None:
    """Kafka's ``parseRequestHeader``: "... which is not enabled" / "Unknown API key", and the connection closes."""
    frame = request_frame(3, 12, client_id="cid")
    with pytest.raises(UnsupportedVersionError, match=r"api key 3 with version 12 which is not enabled "
                                                      r"\(versions 0-11 are served\) \(client id 'cid'\)"):
        decode_request(frame, {3: (0, 11)})
    with pytest.raises(UnsupportedVersionError, match="version 12 which is not enabled .the API is not served"):
        decode_request(frame, {18: (0, 4)})
    assert decode_request(frame, {3: (12, 12)}).body is not None
    # Unknown to kio as well: refused without parsing the body, whatever it holds.
    with pytest.raises(UnsupportedVersionError, match="version 999 which is not enabled"):
        decode_request(struct.pack(">hhi", 3, 999, 5) + b"\xff" * 50)
    with pytest.raises(UnsupportedVersionError, match=r"Unknown API key -7 \(client id None\)"):
        decode_request(struct.pack(">hhi", -7, 0, 6))
    assert issubclass(UnsupportedVersionError, MalformedRequestError)  # what ServerConnection closes on


def test_api_versions_at_any_version_is_a_request_without_body() -> None:
    """The one exception: clients send their newest ApiVersions before they know the broker's."""
    for frame in (struct.pack(">hhih", 18, 99, 5, 0) + b"\xff" * 9, request_frame(18, 3)):
        req = decode_request(frame, {18: (0, 2)})
        assert req.body is None and req.api_key == 18


def test_trailing_bytes_after_a_body_are_ignored_as_kafka_does() -> None:
    """librdkafka's AdminClient sends Metadata v13 with 3 bytes after the body; Kafka ignores them."""
    frame = request_frame(3, 12)
    assert decode_request(frame + b"\x01\x00\x00").body == decode_request(frame).body


def test_malformed_requests_raise() -> None:
    frame = request_frame(3, 12)
    with pytest.raises(MalformedRequestError, match="cannot decode"):
        decode_request(frame[:-3])
    with pytest.raises(MalformedRequestError, match="shorter than a request header"):
        decode_request(b"\x00\x03\x00")
    with pytest.raises(MalformedRequestError, match="cannot decode"):
        decode_request(struct.pack(">hhih", 3, 1, 1, 50) + b"abc")  # client id longer than the frame


def test_peek_header_needs_only_eight_bytes() -> None:
    info = peek_header(struct.pack(">hhi", 1, 13, -2))
    assert (info.api_key, info.api_version, info.correlation_id, info.client_id) == (1, 13, -2, None)


def test_known_versions_cover_the_core_apis() -> None:
    known = known_versions()
    assert known[18][0] == 0 and known[0][1] >= 9 and known[1][1] >= 13


# -- responses -------------------------------------------------------------------------------


def test_encode_response_prefixes_the_size_and_uses_the_version_header() -> None:
    cls = load_response_schema(3, 12)  # flexible: response header v1 (tagged fields)
    body = make(cls, **{**zero_values(cls), "brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}]})
    (data,) = encode_response(body, 77)
    correlation, decoded = decode_frame(3, 12, data)
    assert correlation == 77 and decoded == body


def test_api_versions_responses_use_header_v0_even_when_flexible() -> None:
    cls = load_response_schema(18, 3)
    (data,) = encode_response(make(cls, **zero_values(cls)), 5)
    assert data[4:8] == struct.pack(">i", 5) and data[8:10] == b"\x00\x00"  # no tag buffer after the id


def _fetch_response(version: int, records: list[Any]) -> Any:
    cls = load_response_schema(1, version)
    return make(cls, **{**zero_values(cls), "responses": [{
        "topic": "t", "topic_id": None,
        "partitions": [{"partition_index": i, "error_code": 0, "high_watermark": 10 + i, "last_stable_offset": 10,
                        "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                        "records": r} for i, r in enumerate(records)],
    }]})


def _batch(n: int, size: int) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(bytes([i % 256]) * size)
    return b.build()


class _Payload:
    """Stands in for a FileSlice: the encoder must pass it through untouched."""

    def __init__(self, data: bytes) -> None:
        self.data = data


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 17])
@pytest.mark.parametrize("sizes", [[(1, 10)], [(3, 100), (1, 5)], [(50, 300), (2, 20_000), (1, 1)]])
def test_splices_are_byte_identical_to_inline_records(version: int, sizes: list[tuple[int, int]]) -> None:
    batches = [_batch(n, size) for n, size in sizes]
    splices = [Splice(_Payload(b), len(b)) for b in batches]
    spliced = _fetch_response(version, [s.marker for s in splices])
    parts = encode_response(spliced, 42, splices)
    payloads = [p for p in parts if isinstance(p, _Payload)]
    assert [p.data for p in payloads] == batches  # in order, untouched
    assert len(parts) == 2 * len(splices) + 1
    joined = b"".join(p.data if isinstance(p, _Payload) else p for p in parts)
    (inline,) = encode_response(_fetch_response(version, batches), 42)
    assert joined == inline
    _, decoded = decode_frame(1, version, joined)
    assert [p.records for p in decoded.responses[0].partitions] == batches


def test_a_splice_can_sit_beside_inline_and_empty_records() -> None:
    big = _batch(10, 1000)
    splice = Splice(_Payload(big), len(big))
    small = _batch(1, 3)
    for version in (11, 12):
        parts = encode_response(_fetch_response(version, [small, splice.marker, b""]), 1, [splice])
        joined = b"".join(p.data if isinstance(p, _Payload) else p for p in parts)
        (inline,) = encode_response(_fetch_response(version, [small, big, b""]), 1)
        assert joined == inline


def test_a_missing_marker_is_an_error_not_a_corrupt_frame() -> None:
    splice = Splice(_Payload(b"x"), 1)
    with pytest.raises(ValueError, match="missing"):
        encode_response(_fetch_response(12, [b"no marker here"]), 1, [splice])


def test_splice_markers_are_unique() -> None:
    markers = {Splice(None, 0).marker for _ in range(1000)}
    assert len(markers) == 1000


# -- unsupported versions --------------------------------------------------------------------


SUPPORTED = {0: (3, 9), 1: (4, 12), 3: (0, 12), 18: (0, 4)}


def test_api_versions_unknown_version_gets_v0_with_error_35_and_the_supported_list() -> None:
    data = api_versions_unsupported_response(31, SUPPORTED)
    correlation, body = decode_frame(18, 0, data)
    assert correlation == 31 and int(body.error_code) == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (0, 3, 9), (1, 4, 12), (3, 0, 12), (18, 0, 4)]


def test_every_response_class_has_a_zero_value_that_encodes() -> None:
    for key, (lo, hi) in known_versions().items():
        for version in range(lo, hi + 1):
            cls = response_class(key, version)
            if cls is None:
                continue
            (data,) = encode_response(make(cls, **zero_values(cls)), 1)
            assert decode_frame(key, version, data)[0] == 1
