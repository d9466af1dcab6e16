"""Kafka frames: a 4-byte size, a request header, a body; responses the other way round.

Every API's message classes come from kio (generated from Kafka's JSON specs). This module only
knows the framing rules and two special cases Kafka has:

* ApiVersions responses always use response header v0 (a client that does not yet know the
  broker's versions must be able to read the answer), which kio encodes for us;
* a request for an API or version the broker does not serve ends the connection, as in Kafka
  (``SocketServer.parseRequestHeader`` throws "... which is not enabled" and the processor closes
  the channel): clients only send versions from the broker's ApiVersions answer, and an answer
  at a version the broker does not speak could not be encoded for them anyway. ApiVersions is
  the exception (a client sends its newest version before it knows the broker's): it is always
  answered, at an unknown version with a v0 response carrying ``UNSUPPORTED_VERSION`` and the
  supported list, which clients use to pick a version and ask again.

Fetch responses can carry record bytes that live in segment files: :func:`encode_response` takes
``splices``, placeholders put into ``records`` fields that are replaced by the real objects (file
slices) in the output parts, so record bytes never pass through Python (see :class:`Splice`).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import struct
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from strata.errors import CorruptRecordError
from strata.protocol.build import make, zero_values
from strata.protocol.lengths import length_check
from strata.protocol.records.varint import encode_uvarint

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
API_VERSIONS_KEY = 18


class MalformedRequestError(CorruptRecordError):
    """A frame whose header or body does not parse: the connection is closed, as Kafka does."""


class UnsupportedVersionError(MalformedRequestError):
    """A request for an API or version the broker does not serve (ApiVersions aside): closed, as Kafka does."""


@dataclass(frozen=True, slots=True)
class RequestHeaderInfo:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request; ``body`` is ``None`` only for ApiVersions at a version the broker does not speak."""

    header: RequestHeaderInfo
    body: Any
    size: int

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version


@cache
def known_versions() -> dict[int, tuple[int, int]]:
    """Every (api_key → (min, max)) version range that kio can encode and decode."""
    out = {}
    for key, name in api_key_map.items():
        versions = [v for v, kinds in schema_name_map[name].items() if EntityType.request in kinds]
        if versions:
            out[key] = (min(versions), max(versions))
    return out


@cache
def request_class(api_key: int, api_version: int) -> type | None:
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@cache
def response_class(api_key: int, api_version: int) -> type | None:
    try:
        return load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


def peek_header(frame: bytes | memoryview) -> RequestHeaderInfo:
    """Key, version and correlation id: the part of a header every version shares."""
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise MalformedRequestError(f"request frame of {len(frame)} bytes is shorter than a request header")
    key, version, correlation = _KEY_VERSION_CORRELATION.unpack_from(frame, 0)
    return RequestHeaderInfo(key, version, correlation, None)


def _peek_client_id(frame: bytes | memoryview) -> str | None:
    """Best effort, for log lines: the client id of a header that is not otherwise parsed.

    Every request header but ControlledShutdown v0's has it right after the correlation id, as an
    int16-length string, whatever the version (flexible headers only add tagged fields after it).
    """
    at = _KEY_VERSION_CORRELATION.size
    if len(frame) < at + 2:
        return None
    (n,) = struct.unpack_from(">h", frame, at)
    if n < 0 or len(frame) < at + 2 + n:
        return None
    return bytes(frame[at + 2 : at + 2 + n]).decode("utf-8", "replace")


def decode_request(frame: bytes, supported: dict[int, tuple[int, int]] | None = None) -> Request:
    """Parse one frame (the bytes after the size prefix).

    An API key or version outside ``supported`` (default: all kio knows) raises
    UnsupportedVersionError, except for ApiVersions: that gives a ``Request`` with no body, to be
    answered with :func:`api_versions_unsupported_response`. A header or body that does not parse
    raises MalformedRequestError.
    """
    info = peek_header(frame)
    ranges = supported if supported is not None else known_versions()
    lo_hi = ranges.get(info.api_key)
    cls = request_class(info.api_key, info.api_version) if lo_hi and lo_hi[0] <= info.api_version <= lo_hi[1] \
        else None
    if cls is None:
        if info.api_key == API_VERSIONS_KEY:
            return Request(info, None, len(frame))
        client = f" (client id {_peek_client_id(frame)!r})"
        if info.api_key not in api_key_map:
            raise UnsupportedVersionError(f"Unknown API key {info.api_key}{client}")
        served = f"versions {lo_hi[0]}-{lo_hi[1]} are" if lo_hi else "the API is not"
        raise UnsupportedVersionError(f"Received request api key {info.api_key} with version {info.api_version} "
                                      f"which is not enabled ({served} served){client}")
    try:
        read_header, check_lengths, read_body = _readers(cls)
        header, pos = read_header(frame, 0)  # returns (value, bytes consumed)
        check_lengths(frame, pos)
        body, used = read_body(frame, pos)
        end = pos + used
    except Exception as e:  # kio raises assorted errors (struct, unicode, value) on garbage
        raise MalformedRequestError(
            f"cannot decode {type(cls).__name__} {cls.__name__} v{info.api_version}: {type(e).__name__}: {e}"
        ) from e
    null_field = _null_array(body, cls)
    if null_field is not None:  # what Kafka's generated reader refuses, kio lets through as None
        raise MalformedRequestError(f"non-nullable field {null_field} of {cls.__name__} v{info.api_version} was "
                                    "serialized as null")
    if end != len(frame):
        # Kafka's generated readers ignore what follows the body, and clients rely on it:
        # librdkafka 2.x sends 3 extra bytes with AdminClient's Metadata v13.
        log.debug("%s v%d: ignoring %d trailing bytes after the body", cls.__name__, info.api_version,
                  len(frame) - end)
    return Request(RequestHeaderInfo(info.api_key, info.api_version, info.correlation_id, header.client_id),
                   body, len(frame))


@cache
def _readers(cls: type) -> tuple[Any, Any, Any]:
    """kio's header and body readers of a request class, and between them the length check.

    kio sizes an array by its declared count before reading it, and a failed allocation aborts the
    process: counts the frame cannot hold are refused first (headers have no arrays). See
    :mod:`strata.protocol.lengths`.
    """
    return entity_reader(cls.__header_schema__), length_check(cls), entity_reader(cls)  # type: ignore[attr-defined]


@cache
def _array_fields(cls: type) -> tuple[tuple[str, bool, bool, type | None], ...]:
    """(name, is an array, may be null, entity class of the items / the struct) of the fields that
    are arrays or nested structs: the parts of a message where a null array can hide."""
    plan = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        t: Any = f.type
        nullable = False
        if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
            args = typing.get_args(t)
            rest = [a for a in args if a is not type(None)]
            nullable = len(rest) < len(args)
            t = rest[0] if len(rest) == 1 else t
        if typing.get_origin(t) is tuple:
            item = typing.get_args(t)[0]
            entity = item if dataclasses.is_dataclass(item) else None
            if not nullable or entity is not None:
                plan.append((f.name, True, nullable, entity))
        elif dataclasses.is_dataclass(t):
            plan.append((f.name, False, nullable, t))
    return tuple(plan)


def _null_array(value: Any, cls: type) -> str | None:
    """The first non-nullable array that decoded as null (kio reads length -1 as None for every array).

    Kafka's generated readers throw "non-nullable field ... was serialized as null" and the request
    is refused; a handler iterating such a field would otherwise raise TypeError.
    """
    for name, is_array, nullable, entity in _array_fields(cls):
        v = getattr(value, name)
        if v is None:
            if is_array and not nullable:
                return f"{cls.__name__}.{name}"
            continue
        if entity is not None:
            for item in v if is_array else (v,):
                found = _null_array(item, entity)
                if found is not None:
                    return found
    return None


# -- responses ---------------------------------------------------------------------------------


class Splice:
    """A placeholder for record bytes that are sent from elsewhere (a file slice, via sendfile).

    Put ``splice.marker`` in a ``records`` field; :func:`encode_response` swaps marker and length
    prefix for the real length and yields ``splice.payload`` as its own output part.
    """

    _prefix = os.urandom(12)
    _counter = 0

    __slots__ = ("marker", "payload", "size")

    def __init__(self, payload: Any, size: int) -> None:
        Splice._counter += 1
        self.marker = Splice._prefix + _SIZE.pack(Splice._counter & 0x7FFFFFFF)
        self.payload = payload
        self.size = size


def encode_body(body: Any, correlation_id: int) -> bytes:
    """The whole frame, size prefix included (patched in place: one copy of the body, not three)."""
    header_cls = type(body).__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(type(body))(buf, body)
    view = buf.getbuffer()
    _SIZE.pack_into(view, 0, len(view) - 4)
    del view  # a live export would stop getvalue() from sharing the buffer
    return buf.getvalue()


def encode_response(body: Any, correlation_id: int, splices: list[Splice] | None = None) -> list[Any]:
    """The response frame as parts: ``bytes``, and each splice's payload where its records go.

    Splices may be listed in any order (a fetch adds remote reads after local ones): they are
    placed by where their markers sit in the encoded body.
    """
    raw = encode_body(body, correlation_id)
    if not splices:
        return [raw]
    flexible = type(body).__flexible__
    marker_len = len(splices[0].marker)
    prefix = encode_uvarint(marker_len + 1) if flexible else _SIZE.pack(marker_len)
    placed = sorted((raw.find(splice.marker, 4), splice) for splice in splices)
    parts: list[Any] = []
    total = len(raw) - 4
    pos = 4
    for at, splice in placed:
        start = at - len(prefix)
        if at < 0 or raw[start:at] != prefix:
            raise ValueError("a splice marker is missing from the encoded response")
        new_prefix = encode_uvarint(splice.size + 1) if flexible else _SIZE.pack(splice.size)
        parts.append(raw[pos:start] + new_prefix)
        parts.append(splice.payload)
        total += len(new_prefix) - len(prefix) + splice.size - marker_len
        pos = at + marker_len
    parts.append(raw[pos:])
    parts[0] = _SIZE.pack(total) + parts[0]
    return parts


def zero_response(cls: type, **values: Any) -> Any:
    """An instance of ``cls`` with every required field at its zero value (errors, empty lists)."""
    return make(cls, **{**zero_values(cls), **values})


def api_versions_unsupported_response(correlation_id: int, supported: dict[int, tuple[int, int]]) -> bytes:
    """Kafka's answer to ApiVersions at a version it does not speak: v0, UNSUPPORTED_VERSION (35).

    Kafka lists only ApiVersions' own range (what the client needs to ask again); Strata lists
    every supported API, a superset clients read the same way.
    """
    cls = response_class(API_VERSIONS_KEY, 0)
    assert cls is not None
    body = zero_response(cls, error_code=35, api_keys=[
        {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(supported.items())
    ])
    return b"".join(encode_response(body, correlation_id))
