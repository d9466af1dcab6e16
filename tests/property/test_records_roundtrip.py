"""Property tests: build → decode round trips, iteration, corruption detection, fuzzing."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strata.errors import CorruptRecordError, KafkaError
from strata.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    CompressionType,
    Record,
    decode_batch,
    decode_records,
    iter_batches,
    parse_header,
    reseal_crc,
)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

small_bytes = st.binary(max_size=2048)
maybe_bytes = st.none() | small_bytes
headers = st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=64)), max_size=5)
# Sane timestamps: from the epoch to year ~2300, plus the -1 "no timestamp" sentinel.
timestamps = st.integers(0, 10_000_000_000_000) | st.just(-1)
record_input = st.fixed_dictionaries(
    {"key": maybe_bytes, "value": maybe_bytes, "headers": headers, "ts": timestamps,
     "gap": st.integers(1, 1000)}
)
codecs = st.sampled_from(list(CompressionType))


@st.composite
def batch_specs(draw: st.DrawFn) -> dict:
    return {
        "records": draw(st.lists(record_input, min_size=1, max_size=12)),
        "codec": draw(codecs),
        "snappy_raw": draw(st.booleans()),
        "base_offset": draw(st.integers(0, 2**62)),
        "partition_leader_epoch": draw(INT32),
        "producer_id": draw(st.integers(-1, 2**63 - 1)),
        "producer_epoch": draw(INT16),
        "base_sequence": draw(INT32),
        "transactional": draw(st.booleans()),
        "first_delta": draw(st.integers(0, 5)),
    }


def _build(spec: dict) -> tuple[bytes, list[Record]]:
    builder = BatchBuilder(
        compression=spec["codec"], snappy_raw=spec["snappy_raw"], base_offset=spec["base_offset"],
        partition_leader_epoch=spec["partition_leader_epoch"], producer_id=spec["producer_id"],
        producer_epoch=spec["producer_epoch"], base_sequence=spec["base_sequence"],
        transactional=spec["transactional"],
    )
    expected = []
    delta = spec["first_delta"]
    for i, r in enumerate(spec["records"]):
        if i:
            delta += r["gap"]
        builder.append(r["value"], key=r["key"], headers=r["headers"], timestamp=r["ts"], offset_delta=delta)
        offset = spec["base_offset"] + delta
        expected.append(Record(offset, r["ts"], r["key"], r["value"], tuple(r["headers"])))
    return builder.build(), expected


@SETTINGS
@given(batch_specs())
@example({
    "records": [{"key": None, "value": None, "headers": [("", None)], "ts": -1, "gap": 1}],
    "codec": CompressionType.LZ4, "snappy_raw": False, "base_offset": 0, "partition_leader_epoch": -1,
    "producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "transactional": False, "first_delta": 0,
})
def test_build_then_decode_is_identity(spec: dict) -> None:
    buf, expected = _build(spec)
    d = decode_batch(buf)
    assert d.records == expected
    h = d.header
    assert h.size == len(buf)
    assert h.compression == spec["codec"]
    assert h.records_count == len(expected)
    assert h.base_offset == spec["base_offset"]
    assert h.last_offset == expected[-1].offset
    assert h.partition_leader_epoch == spec["partition_leader_epoch"]
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        spec["producer_id"], spec["producer_epoch"], spec["base_sequence"])
    assert h.is_transactional is spec["transactional"] and not h.is_control
    assert h.base_timestamp == spec["records"][0]["ts"]
    assert h.max_timestamp == max(-1, *(r["ts"] for r in spec["records"]))


@SETTINGS
@given(st.lists(batch_specs(), min_size=1, max_size=5), st.binary(max_size=30))
def test_concatenated_batches_iterate_back(specs: list[dict], prefix: bytes) -> None:
    built = [_build(s) for s in specs]
    buf = prefix + b"".join(b for b, _ in built)
    expected_positions, pos = [], len(prefix)
    for b, _ in built:
        expected_positions.append(pos)
        pos += len(b)
    got = list(iter_batches(buf, len(prefix), verify_crc=True))
    assert [p for p, _ in got] == expected_positions
    assert [h.size for _, h in got] == [len(b) for b, _ in built]
    for (p, _), (_, records) in zip(got, built, strict=True):
        assert decode_batch(buf, p).records == records
    # Cutting the buffer anywhere inside the last batch is a truncation at that batch.
    last = expected_positions[-1]
    cut = last + (len(built[-1][0]) * 3) // 4
    try:
        list(iter_batches(buf[:cut], len(prefix)))
    except CorruptRecordError as e:
        assert e.position == last
    else:
        raise AssertionError("truncated trailing batch went unnoticed")


@SETTINGS
@given(batch_specs(), st.data())
def test_any_mutation_in_crc_range_is_detected(spec: dict, data: st.DataObject) -> None:
    buf, _ = _build(spec)
    mutated = bytearray(buf)
    positions = data.draw(
        st.lists(st.integers(17, len(buf) - 1), min_size=1, max_size=4, unique=True), label="positions"
    )
    for p in positions:
        mutated[p] ^= data.draw(st.integers(1, 255), label=f"xor@{p}")
    try:
        decode_batch(mutated)
    except CorruptRecordError:
        pass
    else:
        raise AssertionError(f"mutation at {positions} went undetected")
    try:
        list(iter_batches(mutated, verify_crc=True))
    except CorruptRecordError:
        pass
    else:
        raise AssertionError(f"mutation at {positions} went undetected by iter_batches")


def _only_kafka_errors(buf: bytes | bytearray) -> None:
    try:
        for position, _ in iter_batches(buf, verify_crc=False):
            decode_batch(buf, position, verify_crc=False)
    except KafkaError:
        pass
    try:
        decode_batch(buf)
    except KafkaError:
        pass


@SETTINGS
@given(st.binary(max_size=600))
@example(b"")
@example(b"\x00" * 61)
@example(struct.pack(">qiib", 0, 49, 0, 2) + b"\x00" * 44)
def test_random_bytes_only_raise_kafka_errors(buf: bytes) -> None:
    _only_kafka_errors(buf)


@st.composite
def plausible_batches(draw: st.DrawFn) -> bytes:
    """A well-framed v2 header with a correct CRC over arbitrary fields and payload.

    This gets the fuzzer past framing and checksum into the codecs and the record decoder.
    """
    payload = draw(st.binary(max_size=400))
    codec = draw(st.integers(0, 7))
    attributes = codec | draw(st.sampled_from([0, 0x08, 0x10, 0x20, 0x30, 0x40]))
    header = struct.pack(
        ">qiibIhiqqqhii", draw(st.integers(0, 2**40)), RECORD_BATCH_OVERHEAD - 12 + len(payload),
        draw(INT32), 2, 0, attributes, draw(st.integers(0, 2**31 - 1)), draw(INT64), draw(INT64),
        draw(INT64), draw(INT16), draw(INT32), draw(st.integers(0, 2**31 - 1) | st.integers(0, 20)),
    )
    buf = bytearray(header + payload)
    reseal_crc(buf, 0, len(buf))
    return bytes(buf)


@SETTINGS
@given(plausible_batches())
def test_validly_signed_garbage_only_raises_kafka_errors(buf: bytes) -> None:
    _only_kafka_errors(buf)


@SETTINGS
@given(batch_specs(), st.data())
def test_resealed_mutations_only_raise_kafka_errors(spec: dict, data: st.DataObject) -> None:
    """Damage that a valid CRC hides (a buggy producer) must still fail cleanly, or decode."""
    buf, _ = _build(spec)
    mutated = bytearray(buf)
    for p in data.draw(st.lists(st.integers(21, len(buf) - 1), min_size=1, max_size=3), label="positions"):
        mutated[p] = data.draw(st.integers(0, 255), label=f"byte@{p}")
    reseal_crc(mutated, 0, len(mutated))
    _only_kafka_errors(mutated)
    if data.draw(st.booleans(), label="truncate"):
        _only_kafka_errors(mutated[: data.draw(st.integers(0, len(mutated)), label="cut")])


@SETTINGS
@given(batch_specs(), st.binary(max_size=200))
def test_decode_records_on_garbage_payload(spec: dict, payload: bytes) -> None:
    buf, _ = _build(spec)
    header = parse_header(buf)
    try:
        decode_records(header, payload)
    except KafkaError:
        pass
