"""Array counts a frame cannot hold are refused before kio's native reader sees them.

kio (0.6) reserves ``8 * count`` bytes for an array before reading its first element, and Rust
aborts the process when that allocation fails: one frame declaring an int32 count of 2**31-1, or a
compact (uvarint) count of up to 2**35-2, killed the whole broker ("memory allocation of
85153162432 bytes failed", found by tests/broker/test_fuzz.py). ``strata.protocol.lengths`` checks
every count against the bytes left in the frame first. The tests here:

* prove the frames are the dangerous ones: kio's reader on them aborts a child process (with its
  address space capped, so the outcome does not depend on the machine's overcommit policy);
* decode, in this process, a frame with a huge count in each top-level array of every request
  class kio knows (every API and version), and every body of a "full" request (all arrays one
  element, all nullable structs and tagged fields present) with a huge count written at each
  byte offset: each must raise MalformedRequestError, and the top-level ones must name the field;
* check that the length check never refuses what kio reads, and ends where kio ends, on those full
  requests and on random ones (hypothesis: several elements, nulls, strings longer than 127 bytes).
"""

from __future__ import annotations

import dataclasses
import io
import os
import struct
import subprocess
import sys
import textwrap
import typing
import uuid
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import get_field_tag

from strata.protocol.build import make, zero_values
from strata.protocol.frame import MalformedRequestError, decode_request, known_versions, request_class
from strata.protocol.lengths import length_check

LEGACY_HUGE = struct.pack(">i", 0x7FFFFFFF)  # 2**31-1 elements: 16 GiB of pointers
COMPACT_HUGE = b"\xff\xff\xff\xff\x0f"  # 2**32-2 elements: 32 GiB
COMPACT_LARGEST = b"\xff\xff\xff\xff\x7f"  # 2**35-2 elements, the most a 5-byte uvarint says: 256 GiB


def all_request_classes() -> list[tuple[int, int, type]]:
    out = []
    for key, (lo, hi) in sorted(known_versions().items()):
        for version in range(lo, hi + 1):
            cls = request_class(key, version)
            if cls is not None:
                out.append((key, version, cls))
    return out


REQUESTS = all_request_classes()


def header(cls: type, correlation: int = 7) -> bytes:
    buf = io.BytesIO()
    header_cls = cls.__header_schema__  # type: ignore[attr-defined]
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=cls.__api_key__,  # type: ignore[attr-defined]
                                        request_api_version=cls.__version__,  # type: ignore[attr-defined]
                                        correlation_id=correlation, client_id="lengths"))
    return buf.getvalue()


def encode(cls: type, values: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, make(cls, **values))
    return buf.getvalue()


def top_level_array_prefixes(cls: type) -> list[tuple[str, bytes, bool]]:
    """(field, the body's bytes before that array's count, flexible) for each top-level array field.

    Found with kio's writer, not with the code under test: the body with every field at its zero value
    and the same body with one element in that array differ first at the array's count.
    """
    out = []
    zero = dict(zero_values(cls))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if get_field_tag(f) is not None or typing.get_origin(strip_optional(hints[f.name])) is not tuple:
            continue
        base = encode(cls, zero)
        one = encode(cls, {**zero, f.name: value_of(hints[f.name], True, kafka_type_of(f))})
        at = next(i for i, (x, y) in enumerate(zip(base, one, strict=False)) if x != y)
        if not cls.__flexible__ and at >= 3 and one[at - 3 : at + 1] == b"\0\0\0\1" and base[at - 3 : at] == b"\0\0\0":
            at -= 3  # a legacy count 0 -> 1 differs in its last byte
        out.append((f.name, base[:at], cls.__flexible__))  # type: ignore[attr-defined]
    return out


# -- values for any entity: "full" (every optional part present) or random --------------------------------


def strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0]
    return tp


def kafka_type_of(f: dataclasses.Field[Any]) -> str | None:
    return f.metadata.get("kafka_type")


def primitive(kafka_type: str | None, full: bool) -> Any:
    return {
        "bool": True, "float64": 1.5, "uuid": uuid.UUID(int=0x1234), "string": "s" if full else "",
        "bytes": b"b", "records": b"r", "error_code": 1, "timedelta_i32": 5, "timedelta_i64": 5,
        "datetime_i64": 1_700_000_000_000,
    }.get(kafka_type or "", 1)  # fmt: skip


def value_of(tp: Any, full: bool, kafka_type: str | None = None) -> Any:
    tp = strip_optional(tp)
    if typing.get_origin(tp) is tuple:
        return [value_of(typing.get_args(tp)[0], full, kafka_type)]
    if dataclasses.is_dataclass(tp):
        return full_values(tp)  # type: ignore[arg-type]
    return primitive(kafka_type, full)


@cache
def full_values(cls: type) -> dict[str, Any]:
    """Every field present: arrays of one element, nullable structs set, tagged fields not at their default."""
    hints = typing.get_type_hints(cls)
    return {f.name: value_of(hints[f.name], True, kafka_type_of(f))
            for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


INT_RANGES = {"int8": (-128, 127), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
              "int64": (-(2**63), 2**63 - 1), "uint8": (0, 255), "uint16": (0, 2**16 - 1),
              "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1), "timedelta_i32": (0, 2**31 - 1),
              "timedelta_i64": (0, 2**40), "datetime_i64": (0, 2**42)}
TEXT = st.text(alphabet="ab\u00e9\u4e2d", max_size=200)  # multi-byte UTF-8: lengths past 127 bytes


def strategy(tp: Any, kafka_type: str | None, depth: int = 0) -> st.SearchStrategy[Any]:
    optional = strip_optional(tp) is not tp
    tp = strip_optional(tp)
    if typing.get_origin(tp) is tuple:
        inner = strategy(typing.get_args(tp)[0], kafka_type, depth + 1)
        s: st.SearchStrategy[Any] = st.lists(inner, max_size=3 if depth < 2 else 1)
    elif dataclasses.is_dataclass(tp):
        s = entity_strategy(tp, depth + 1)  # type: ignore[arg-type]
    elif kafka_type in INT_RANGES:
        s = st.integers(*INT_RANGES[kafka_type])
    elif kafka_type == "string":
        s = TEXT
    elif kafka_type in ("bytes", "records"):
        s = st.binary(max_size=300)
    elif kafka_type == "bool":
        s = st.booleans()
    elif kafka_type == "uuid":
        s = st.uuids()
    elif kafka_type == "float64":
        s = st.floats(allow_nan=False)
    elif kafka_type == "error_code":
        s = st.sampled_from([0, 1, 3, 35])
    else:
        raise AssertionError(kafka_type)
    return st.one_of(st.none(), s) if optional else s


def entity_strategy(cls: type, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        s = strategy(hints[f.name], kafka_type_of(f), depth)
        if get_field_tag(f) is not None:  # tagged: never None on the wire, present or at the default
            s = strategy(strip_optional(hints[f.name]), kafka_type_of(f), depth)
        fields[f.name] = s
    return st.fixed_dictionaries(fields)


# -- the frames are the ones that killed the broker --------------------------------------------------------

CHILD = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # whatever the overcommit policy: > 4 GiB fails
    from kio.serial import entity_reader
    from strata.protocol.frame import request_class
    frame = bytes.fromhex(sys.argv[3])
    cls = request_class(int(sys.argv[1]), int(sys.argv[2]))
    _, pos = entity_reader(cls.__header_schema__)(frame, 0)
    try:
        entity_reader(cls)(frame, pos)
    except Exception as e:
        print("raised", type(e).__name__, e)
""")

SAMPLES = [(3, 1, "topics", LEGACY_HUGE), (3, 12, "topics", COMPACT_HUGE), (0, 3, "topic_data", LEGACY_HUGE),
           (0, 9, "topic_data", COMPACT_LARGEST), (1, 4, "topics", LEGACY_HUGE), (1, 12, "topics", COMPACT_HUGE),
           (8, 8, "topics", COMPACT_HUGE), (19, 5, "topics", COMPACT_HUGE)]


def sample_frame(key: int, version: int, field: str, count: bytes) -> bytes:
    cls = request_class(key, version)
    assert cls is not None
    prefix = {name: p for name, p, _ in top_level_array_prefixes(cls)}[field]
    return header(cls) + prefix + count


def test_kio_reader_aborts_the_process_on_these_frames() -> None:
    """Without the check: kio's reader dies on each sample (SIGABRT, "memory allocation of N bytes failed").

    If this starts failing after a kio upgrade, kio stopped pre-allocating: the check may then go.
    """
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    children = [(s, subprocess.Popen([sys.executable, "-c", CHILD, str(s[0]), str(s[1]), sample_frame(*s).hex()],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
                for s in SAMPLES]
    for sample, child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == -6, (sample, child.returncode, out, err)  # SIGABRT
        assert b"memory allocation of" in err and b"failed" in err, (sample, err)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: f"{s[0]}v{s[1]}-{s[2]}")
def test_the_same_frames_are_refused_in_process(sample: tuple[int, int, str, bytes]) -> None:
    key, version, field, _ = sample
    cls = request_class(key, version)
    assert cls is not None
    for count in (LEGACY_HUGE,) if not cls.__flexible__ else (COMPACT_HUGE, COMPACT_LARGEST):
        frame = sample_frame(key, version, field, count)
        for padded in (frame, frame + bytes(64)):  # with or without bytes after the count
            with pytest.raises(MalformedRequestError, match=rf"{cls.__name__}\.{field}\[\] declares \d+ elements"):
                decode_request(padded)


# -- every API and version ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version", "cls"), REQUESTS,
                         ids=[f"{cls.__name__}-v{v}" for _, v, cls in REQUESTS])
def test_a_huge_count_in_any_top_level_array_is_refused(key: int, version: int, cls: type) -> None:
    for field, prefix, flexible in top_level_array_prefixes(cls):
        for count in (COMPACT_HUGE, COMPACT_LARGEST) if flexible else (LEGACY_HUGE, struct.pack(">i", 1 << 24)):
            with pytest.raises(MalformedRequestError, match=rf"{cls.__name__}\.{field}\[\] declares"):
                decode_request(header(cls) + prefix + count + b"\x00" * 16)


def test_every_request_class_has_a_length_check() -> None:
    assert len(REQUESTS) > 250
    for _, _, cls in REQUESTS:
        assert callable(length_check(cls))


@pytest.mark.parametrize(("key", "version", "cls"), REQUESTS,
                         ids=[f"{cls.__name__}-v{v}" for _, v, cls in REQUESTS])
def test_huge_counts_anywhere_in_a_full_request_never_reach_kio(key: int, version: int, cls: type) -> None:
    """Every byte offset of the body gets a huge count; nested and tagged arrays included.

    An offset that is no array's count may decode (the bytes were an int, say) or not; what must never
    happen is kio allocating for the count (this process would abort). At least one refusal per array
    in the body shows the sweep reached them.
    """
    head = header(cls)
    body = encode(cls, full_values(cls))
    kio_body, used = entity_reader(cls)(head + body, len(head))
    assert used == len(body)
    refused = 0
    mutations = [COMPACT_HUGE, COMPACT_LARGEST] if cls.__flexible__ else [LEGACY_HUGE]
    for at in range(len(body)):
        for count in mutations:
            width = 1 if cls.__flexible__ else 4  # a one-element count: 0x02, or 00 00 00 01
            frame = head + body[:at] + count + body[at + width :]
            try:
                decode_request(frame)
            except MalformedRequestError as e:
                refused += "elements" in str(e)
    assert refused >= arrays_in(cls) * len(mutations)


def arrays_in(cls: type) -> int:
    """Arrays in a full request of this class: the lower bound of refusals of the sweep."""
    hints = typing.get_type_hints(cls)
    n = 0
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = strip_optional(hints[f.name])
        if typing.get_origin(tp) is tuple:
            n += 1
            tp = typing.get_args(tp)[0]
        if dataclasses.is_dataclass(tp):
            n += arrays_in(tp)  # type: ignore[arg-type]
    return n


# -- and never refuses what kio reads ----------------------------------------------------------------------


@pytest.mark.parametrize(("key", "version", "cls"), REQUESTS,
                         ids=[f"{cls.__name__}-v{v}" for _, v, cls in REQUESTS])
def test_the_check_ends_where_kio_ends_on_valid_requests(key: int, version: int, cls: type) -> None:
    check = length_check(cls)
    for values in (dict(zero_values(cls)), full_values(cls)):
        frame = header(cls) + encode(cls, values)
        pos = len(header(cls))
        _, used = entity_reader(cls)(frame, pos)
        assert check(frame, pos) == pos + used
        assert check(memoryview(frame).toreadonly(), pos) == pos + used  # large frames come as memoryviews
        assert decode_request(frame).body == make(cls, **values)


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_the_check_ends_where_kio_ends_on_random_requests(data: st.DataObject) -> None:
    _, _, cls = data.draw(st.sampled_from(REQUESTS))
    values = data.draw(entity_strategy(cls))
    head, body = header(cls), encode(cls, values)
    frame = head + body
    assert length_check(cls)(frame, len(head)) == len(frame)
    assert decode_request(frame).body == entity_reader(cls)(frame, len(head))[0]


def test_truncated_bodies_and_bad_tagged_fields_are_refused() -> None:
    cls = request_class(1, 12)
    assert cls is not None
    head, body = header(cls), encode(cls, full_values(cls))
    for cut in range(len(body)):
        with pytest.raises(MalformedRequestError):
            decode_request(head + body[:cut])
    # A tagged field whose value disagrees with its size prefix: kio would ignore the size, Kafka would not.
    top = encode(cls, {**full_values(cls), "cluster_id": None, "replica_state": None})  # v12: cluster_id is tag 0
    assert top.endswith(b"\x00")
    bad = top[:-1] + b"\x01\x00\x05\x02s"  # one tag: 0, size 5, a 1-char compact string (2 bytes)
    with pytest.raises(MalformedRequestError, match="tagged field 0 of FetchRequest declares 5 bytes but its value"):
        decode_request(head + bad)
    good = top[:-1] + b"\x01\x00\x02\x02s"
    assert decode_request(head + good).body.cluster_id == "s"
    unknown = top[:-1] + b"\x01\x09\x03abc"  # unknown tags are skipped by their size (kio refuses them anyway)
    assert length_check(cls)(head + unknown, len(head)) == len(head + unknown)


@pytest.mark.parametrize(("count", "name"), [(b"\x02", b"\x02a"), (b"\x82\x00", b"\x82\x80\x00a"),
                                             (b"\x82\x80\x80\x00", b"\x80\x00"), (b"\x02", b"\x80\x80\x80\x80\x00")])
def test_overlong_varints_are_read_as_kio_reads_them(count: bytes, name: bytes) -> None:
    """Clients write the shortest varint; kio (and the check) also take longer encodings of the same value."""
    cls = request_class(3, 12)  # topics: [topic_id, name (nullable compact string), tags], two bools, tags
    assert cls is not None
    head = header(cls)
    frame = head + count + bytes(16) + name + b"\x00" + b"\x01\x00" + b"\x00"
    _, used = entity_reader(cls)(frame, len(head))
    assert length_check(cls)(frame, len(head)) == len(frame) == len(head) + used
    too_long = head + b"\x82\x80\x80\x80\x80\x00" + bytes(20)  # a sixth byte: kio refuses it too
    with pytest.raises(MalformedRequestError, match="longer than 5 bytes"):
        decode_request(too_long)


@pytest.mark.parametrize("tagged", [(), (1,), (2,), (3,), (0, 4), (0, 1, 2, 3, 4)])
def test_fetch_partitions_with_and_without_tagged_fields(tagged: tuple[int, ...]) -> None:
    """Fetch v17's partitions are fixed-size but for a tagged field: stepped over at once when none has it."""
    cls = request_class(1, 17)
    assert cls is not None
    # All zeros but the tagged field (absent: its default, None), so that no other byte can stand for it.
    zeros = {"partition": 0, "current_leader_epoch": 0, "fetch_offset": 0, "last_fetched_epoch": 0,
             "log_start_offset": 0, "partition_max_bytes": 0}
    parts = [{**zeros, "replica_directory_id": uuid.UUID(int=i + 1)} if i in tagged else zeros for i in range(5)]
    values = {**full_values(cls), "topics": [{**full_values(cls)["topics"][0], "partitions": parts}]}
    head = header(cls)
    frame = head + encode(cls, values)
    assert length_check(cls)(frame, len(head)) == len(frame)
    body = decode_request(frame).body
    present = {i for i, p in enumerate(body.topics[0].partitions)
               if p.replica_directory_id not in (None, uuid.UUID(int=0))}
    assert present == set(tagged)


@pytest.mark.parametrize(("key", "version", "element", "least", "after"), [
    (1, 4, bytes(6), 6, b""),  # legacy topics: an empty name (int16 0) and no partitions (int32 0)
    (1, 12, b"\x01\x01\x00", 3, b"\x01\x01\x00"),  # compact: empty name, no partitions, no tagged fields
    (3, 1, bytes(2), 2, b""),  # Metadata v1: an array of topic names
])
def test_the_bound_is_the_smallest_element_times_the_count(key: int, version: int, element: bytes, least: int,
                                                           after: bytes) -> None:
    """As many elements as the bytes left can hold decode (here as empty ones); one more is refused."""
    cls = request_class(key, version)
    assert cls is not None
    field, prefix, flexible = top_level_array_prefixes(cls)[0]
    head = header(cls)

    def frame(count: int) -> bytes:  # ``after``: the fields that follow the array, empty
        encoded = bytes([count + 1]) if flexible else struct.pack(">i", count)
        return head + prefix + encoded + element * 20 + after

    assert len(getattr(decode_request(frame(20)).body, field)) == 20
    room = 20 * len(element) + len(after)
    with pytest.raises(MalformedRequestError, match=rf"{field}\[\] declares {room // least + 1} elements"):
        decode_request(frame(room // least + 1))
