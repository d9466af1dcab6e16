"""The columnar decoder against the reference per-record decoder, and Spark's Kafka schema."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata import errors
from strata.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    CompressionType,
    ControlRecordType,
    TimestampType,
    build_batch,
    build_control_batch,
    decode_batch,
    iter_batches,
    reseal_crc,
    set_base_offset,
)
from strata.spark import columnar, record_walk
from strata.spark.columnar import (
    AbortedTxn,
    ColumnarDecoder,
    CorruptRecordError,
    arrow_schema,
    decode_batches,
    spark_kafka_ddl,
)

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "client-batches"
TOPIC = "events"
PARTITION = 7

Row = tuple


def arrow_rows(batches: list[pa.RecordBatch], include_headers: bool = True) -> list[Row]:
    """(key, value, offset, timestamp µs, timestampType, headers) of every row; checks the constant columns."""
    rows: list[Row] = []
    for b in batches:
        assert b.schema.equals(arrow_schema(include_headers))
        cols = {name: b.column(name).to_pylist() for name in b.schema.names if name != "timestamp"}
        assert set(cols["topic"]) <= {TOPIC} and set(cols["partition"]) <= {PARTITION}
        ts = b.column("timestamp").cast(pa.int64()).to_pylist()
        headers = cols["headers"] if include_headers else [None] * b.num_rows
        for i in range(b.num_rows):
            hs = None if headers[i] is None else [(h["key"], h["value"]) for h in headers[i]]
            rows.append((cols["key"][i], cols["value"][i], cols["offset"][i], ts[i], cols["timestampType"][i], hs))
    return rows


def reference_rows(data: bytes, start: int = 0, end: int | None = None, include_headers: bool = True) -> list[Row]:
    """The same rows through ``decode_batch``, one record at a time."""
    rows: list[Row] = []
    for pos, header in iter_batches(data):
        if end is not None and header.base_offset >= end:
            break
        if header.is_control:
            continue
        ts_type = 1 if header.timestamp_type is TimestampType.LOG_APPEND_TIME else 0
        for r in decode_batch(data, pos).records:
            if r.offset < start or (end is not None and r.offset >= end):
                continue
            hs = ([(k, v) for k, v in r.headers] or None) if include_headers else None
            rows.append((r.key, r.value, r.offset, r.timestamp * 1000, ts_type, hs))
    return rows


@pytest.fixture(autouse=True, params=["c-walk", "numpy-walk"])
def record_walk_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with the C record walk and with the numpy one (the fallback where it is not built)."""
    if request.param == "numpy-walk":
        monkeypatch.setattr(record_walk, "NATIVE", False)
    return str(request.param)


def test_the_c_record_walk_is_built() -> None:
    """``make`` builds it (setup.py); without it the decoder is ~3x slower (bench/spark_bench.py)."""
    assert record_walk._WALK is not None


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.tuples(st.integers(-2, 310), st.integers(-2, 310),
                                                             st.integers(-1, 40)), min_size=1, max_size=5))
def test_the_c_walk_and_the_numpy_walk_agree_on_any_input(data: bytes, cuts: list[tuple[int, int, int]]) -> None:
    """Same bodies for the same input, or both refuse it (never a read outside the buffer)."""
    buf = np.frombuffer(data, np.uint8)
    starts = np.array([c[0] for c in cuts], np.int64)
    ends = np.array([c[1] for c in cuts], np.int64)
    counts = np.array([c[2] for c in cuts], np.int64)
    try:
        expected = columnar._record_bodies_numpy(buf, starts, ends, counts)
    except (columnar._Malformed, IndexError, ValueError):
        expected = None
    try:
        got = record_walk.native_record_bodies(buf, starts, ends, counts)
    except record_walk.WalkError:
        got = None
    if expected is None or got is None:
        # the numpy walk does not check the sections (its callers make them), the C walk does: it may refuse
        # what the numpy walk reads past, never the other way round
        assert got is None
    else:
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=1, max_size=200), spans=st.lists(st.tuples(st.integers(0, 199), st.integers(0, 60)),
                                                                 min_size=1, max_size=6),
       include_headers=st.booleans())
def test_the_c_fields_and_the_numpy_fields_agree_on_any_input(data: bytes, spans: list[tuple[int, int]],
                                                              include_headers: bool) -> None:
    """Record fields from arbitrary bytes: the same columns both ways, or the C decoder refuses."""
    buf = np.frombuffer(data, np.uint8)
    body = np.array([min(s, len(data) - 1) for s, _ in spans], np.int64)
    body_end = np.array([min(min(s, len(data) - 1) + n, len(data)) for s, n in spans], np.int64)

    def fields(native: bool) -> tuple | None:
        saved, record_walk.NATIVE = record_walk.NATIVE, native
        try:
            cols = columnar._decode_records(buf, body, body_end, include_headers)
        except (columnar._Malformed, IndexError):
            return None
        finally:
            record_walk.NATIVE = saved
        return tuple(None if c is None else c.tolist() for c in cols)

    expected, got = fields(False), fields(True)
    if got is not None:
        assert got == expected


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=100), fields=st.lists(st.tuples(st.integers(0, 99), st.integers(-1, 30)),
                                                                  min_size=1, max_size=20))
def test_the_c_gather_builds_the_same_binary_column(data: bytes, fields: list[tuple[int, int]]) -> None:
    """Fields in buffer order (as records have them): the same Arrow column both ways; out of bounds: refused."""
    buf = np.frombuffer(data, np.uint8)
    starts, lengths, at, outside = [], [], 0, False
    for gap, n in fields:
        at = min(at + gap % 7, len(data))
        starts.append(at)
        lengths.append(n)
        at += max(n, 0)
        outside = outside or at > len(data)
    start, length = np.array(starts, np.int64), np.array(lengths, np.int64)
    if outside:
        with pytest.raises(record_walk.WalkError):
            record_walk.native_gather(buf, start, length, int(np.maximum(length, 0).sum()))
        return
    saved = record_walk.NATIVE
    try:
        record_walk.NATIVE = False
        expected = columnar._binary_column(buf, start, length)
        record_walk.NATIVE = True
        got = columnar._binary_column(buf, start, length)
    finally:
        record_walk.NATIVE = saved
    assert got.equals(expected) and got.to_pylist() == [data[s:s + n] if n >= 0 else None
                                                        for s, n in zip(starts, lengths, strict=True)]


def valid_records(sizes: list[int]) -> bytes:
    out = bytearray()
    for size in sizes:
        raw = size << 1
        while raw >= 0x80:
            out.append(raw & 0x7F | 0x80)
            raw >>= 7
        out.append(raw)
        out += bytes(size)
    return bytes(out)


@settings(max_examples=100, deadline=None)
@given(groups=st.lists(st.lists(st.integers(0, 20_000), max_size=30), min_size=1, max_size=6))
def test_the_c_walk_matches_the_numpy_walk_on_valid_records(groups: list[list[int]]) -> None:
    data = b""
    starts, ends = [], []
    for sizes in groups:
        starts.append(len(data))
        data += valid_records(sizes)
        ends.append(len(data))
    buf = np.frombuffer(data, np.uint8)
    args = (np.array(starts, np.int64), np.array(ends, np.int64), np.array([len(g) for g in groups], np.int64))
    got = record_walk.native_record_bodies(buf, *args)
    expected = columnar._record_bodies_numpy(buf, *args)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    assert len(got[0]) == sum(len(g) for g in groups)


def decode(data: bytes | bytearray | memoryview, **kwargs: object) -> columnar.DecodeResult:
    return decode_batches(data, topic=TOPIC, partition=PARTITION, **kwargs)  # type: ignore[arg-type]


# -- schema --------------------------------------------------------------------------------------


@pytest.mark.parametrize("include_headers", [False, True])
def test_schema_is_what_pyspark_expects(include_headers: bool) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    # StructType.fromDDL needs a JVM; this is what it returns for the DDL (checked against a live
    # session), and the DDL text is checked against it field by field below.
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    spark_schema = StructType(fields)
    ddl = spark_kafka_ddl(include_headers)
    columns = [c.strip().split(" ", 1) for c in re.split(r",\s*(?![^<]*>)", ddl)]
    aliases = {"long": "bigint"}
    assert [(name, aliases.get(t, t)) for name, t in columns] == [
        (f.name, f.dataType.simpleString()) for f in spark_schema.fields]

    expected = to_arrow_schema(spark_schema, timezone="UTC")
    assert arrow_schema(include_headers).equals(expected, check_metadata=True)
    if include_headers:  # nullability inside the list and the struct too
        item = arrow_schema(True).field("headers").type.value_field
        assert item.equals(expected.field("headers").type.value_field)
        assert [f.nullable for f in item.type] == [f.nullable for f in expected.field("headers").type.value_type]


def test_module_does_not_import_pyspark() -> None:
    import subprocess
    import sys

    code = "import sys, strata.spark.columnar; assert 'pyspark' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- equivalence with the reference decoder ------------------------------------------------------

CODECS = list(CompressionType)
values = st.one_of(
    st.none(),
    st.binary(max_size=24),
    st.integers(60, 20_000).map(lambda n: bytes(i % 251 for i in range(n))),  # 2- and 3-byte lengths
)
headers = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
record = st.tuples(values, values, st.one_of(st.just(()), headers), st.integers(-(2**42), 2**42))
batch_spec = st.tuples(
    st.sampled_from(CODECS),
    st.booleans(),  # LogAppendTime
    st.lists(record, min_size=1, max_size=12),
    st.integers(0, 3),  # offset gap before the batch (compaction, markers)
    st.booleans(),  # gaps between offset deltas (a compacted batch)
)


def build_log(specs: list) -> tuple[bytes, int]:
    out = bytearray()
    offset = 0
    for codec, log_append, records, gap, sparse in specs:
        offset += gap
        builder = BatchBuilder(
            compression=codec, base_offset=offset,
            timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
            log_append_time=1_700_000_000_123 if log_append else None,
        )
        delta = -1
        for key, value, hs, ts in records:
            delta += 2 if sparse else 1
            builder.append(value, key=key, headers=hs, timestamp=1_600_000_000_000 + ts, offset_delta=delta)
        out += builder.build()
        offset += delta + 1
    return bytes(out), offset


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    specs=st.lists(batch_spec, min_size=1, max_size=6),
    bounds=st.tuples(st.integers(0, 60), st.one_of(st.none(), st.integers(0, 90))),
    max_rows=st.integers(1, 40),
    include_headers=st.booleans(),
    cut=st.integers(0, 200),
)
def test_matches_reference_decoder(specs: list, bounds: tuple, max_rows: int, include_headers: bool,
                                   cut: int) -> None:
    data, next_offset = build_log(specs)
    start, end = bounds
    # A ranged read that ends inside one more batch: left unconsumed.
    tail = build_batch([b"tail"], base_offset=next_offset, timestamp=0)
    partial = tail[: min(cut, len(tail) - 1)]
    result = decode(data + partial, start_offset=start, end_offset=end, include_headers=include_headers,
                    max_rows_per_batch=max_rows)
    expected = reference_rows(data, start, end, include_headers)
    assert arrow_rows(result.batches, include_headers) == expected
    assert result.rows == len(expected)
    assert all(0 < b.num_rows <= max_rows for b in result.batches)
    headers_ = [h for _, h in iter_batches(data)]
    consumed = [h for h in headers_ if end is None or h.base_offset < end]
    assert result.bytes_consumed == sum(h.size for h in consumed)
    assert result.next_offset == max([start] + [h.next_offset for h in consumed])
    assert result.kafka_batches == len(consumed)
    assert result.end_reached == (end is not None and (
        len(consumed) < len(headers_) or (len(partial) >= 8 and next_offset >= end)))


def test_all_codecs_and_timestamp_types() -> None:
    data = b""
    for i, codec in enumerate(CODECS):
        for log_append in (False, True):
            builder = BatchBuilder(compression=codec, base_offset=1000 * (2 * i + log_append),
                                   timestamp_type=TimestampType(int(log_append)), log_append_time=9_999)
            for j in range(50):
                builder.append(b"v%d" % j if j % 3 else None, key=b"k" * (j % 4) if j % 5 else None,
                               headers=[("h", b"x"), ("\u00e9", None)] if j % 7 == 0 else (), timestamp=5_000 - j)
            data += builder.build()
    result = decode(data, include_headers=True)
    rows = arrow_rows(result.batches)
    assert rows == reference_rows(data)
    assert {r[4] for r in rows} == {0, 1}
    assert all(r[3] == 9_999_000 for r in rows if r[4] == 1)


@pytest.mark.parametrize("lockstep_min", [1, 10**9])
def test_long_batches_walk_alike_in_lockstep_and_one_by_one(lockstep_min: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Long batches (fixed-size runs, variable sizes) beside many short ones, through both walks."""
    monkeypatch.setattr(columnar, "_LOCKSTEP_MIN_BATCHES", lockstep_min)
    out = bytearray()
    offset = 0
    rng = np.random.default_rng(7)
    for n, fixed in [(3000, True), (2500, False)] + [(5, False)] * 80 + [(700, True)]:
        builder = BatchBuilder(base_offset=offset)
        for j in range(n):
            size = 90 if fixed else int(rng.integers(0, 300))
            builder.append(bytes(size), key=None if j % 2 else b"key", timestamp=1_000 + j)
        out += builder.build()
        offset += n
    data = bytes(out)
    result = decode(data, max_rows_per_batch=4096)
    assert arrow_rows(result.batches, include_headers=False) == reference_rows(data, include_headers=False)
    assert [b.num_rows for b in result.batches] == [4096] * (result.rows // 4096) + [result.rows % 4096]


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.batch")), ids=lambda p: p.stem)
def test_golden_client_batches(path: Path) -> None:
    buf = path.read_bytes()
    rows = decode(buf, include_headers=True)
    assert arrow_rows(rows.batches) == reference_rows(buf)
    assert rows.rows == 1 and rows.bytes_consumed == len(buf)


def test_golden_client_batches_concatenated() -> None:
    files = sorted(GOLDEN.glob("*.batch"))
    assert files, f"no golden batches in {GOLDEN}"
    out = bytearray()
    for i, path in enumerate(files):
        position = len(out)
        out += path.read_bytes()
        set_base_offset(out, position, 10 * i)  # the base offset is outside the CRC
    data = bytes(out)
    result = decode(data, include_headers=True)
    assert arrow_rows(result.batches) == reference_rows(data)
    assert result.rows == len(files) and result.kafka_batches == len(files)
    assert len(result.batches) == 1


# -- transactions --------------------------------------------------------------------------------


def _txn_log() -> tuple[bytes, list[AbortedTxn]]:
    """Producers 1 (commits), 2 (aborts, then commits, then aborts again) and 3 (no transaction), interleaved."""
    parts: list[bytes] = []
    offset = 0

    def data(pid: int, n: int, transactional: bool = True) -> None:
        nonlocal offset
        parts.append(build_batch([b"p%d-%d" % (pid, offset + i) for i in range(n)], base_offset=offset,
                                 producer_id=pid if transactional else -1, producer_epoch=0,
                                 transactional=transactional, timestamp=1))
        offset += n

    def marker(pid: int, kind: ControlRecordType) -> None:
        nonlocal offset
        parts.append(build_control_batch(kind, producer_id=pid, producer_epoch=0, base_offset=offset, timestamp=1))
        offset += 1

    data(1, 3)  # 0-2
    data(2, 2)  # 3-4: aborted
    data(3, 2, transactional=False)  # 5-6
    data(2, 1)  # 7: aborted
    data(1, 2)  # 8-9
    marker(2, ControlRecordType.ABORT)  # 10
    marker(1, ControlRecordType.COMMIT)  # 11
    data(2, 2)  # 12-13: committed
    marker(2, ControlRecordType.COMMIT)  # 14
    data(2, 2)  # 15-16: aborted
    data(1, 1)  # 17: committed
    marker(2, ControlRecordType.ABORT)  # 18
    marker(1, ControlRecordType.COMMIT)  # 19
    data(3, 1, transactional=False)  # 20
    return b"".join(parts), [AbortedTxn(2, 3, 10), AbortedTxn(2, 15, 18)]


def _offsets(result: columnar.DecodeResult) -> list[int]:
    return [o for b in result.batches for o in b.column("offset").to_pylist()]


COMMITTED = [0, 1, 2, 5, 6, 8, 9, 12, 13, 17, 20]
ALL_DATA = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 20]


def test_read_committed_drops_aborted_transactions() -> None:
    data, aborted = _txn_log()
    committed = decode(data, aborted=aborted)
    assert _offsets(committed) == COMMITTED
    assert committed.control_batches == 5 and committed.aborted_batches == 3
    assert committed.next_offset == 21 and committed.bytes_consumed == len(data)
    # A Fetch response has no last offsets; and the order of the list does not matter.
    assert _offsets(decode(data, aborted=[AbortedTxn(2, 15), AbortedTxn(2, 3)])) == COMMITTED
    uncommitted = decode(data)
    assert _offsets(uncommitted) == ALL_DATA
    assert uncommitted.control_batches == 5 and uncommitted.aborted_batches == 0
    assert _offsets(decode(data, aborted=[])) == ALL_DATA  # read_committed, nothing aborted


def test_read_committed_across_chunks() -> None:
    """Batch by batch through one decoder, and chunk by chunk through fresh calls with the segment's list."""
    data, aborted = _txn_log()
    positions = [p for p, _ in iter_batches(data)] + [len(data)]
    decoder = ColumnarDecoder(topic=TOPIC, partition=PARTITION, aborted=[AbortedTxn(p, f) for p, f, _ in aborted])
    got = []
    for a, b in zip(positions, positions[1:], strict=False):
        got += [o for batch in decoder.decode(data[a:b]) for o in batch.column("offset").to_pylist()]
        assert decoder.bytes_consumed == b - a
    assert got == COMMITTED
    # Stateless calls, each starting where the last stopped, all given every aborted transaction of the
    # segment with its last offset (a .txnindex): those already over are ignored.
    got = []
    offset = 0
    for a, b in zip(positions, positions[1:], strict=False):
        result = decode(data[a:b], start_offset=offset, aborted=aborted)
        got += _offsets(result)
        offset = result.next_offset
    assert got == COMMITTED


def test_aborted_transaction_from_before_the_range_start() -> None:
    data, aborted = _txn_log()
    start = next(p for p, h in iter_batches(data) if h.base_offset == 7)
    result = decode(data[start:], start_offset=7, aborted=aborted)
    assert _offsets(result) == [o for o in COMMITTED if o >= 7]


# -- ranges, partial batches, splitting ----------------------------------------------------------


def _three_batches() -> tuple[bytes, list[bytes]]:
    batches = [build_batch([b"a%d" % i for i in range(10)], base_offset=100 * k, timestamp=k) for k in range(3)]
    return b"".join(batches), batches


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 40, RECORD_BATCH_OVERHEAD, RECORD_BATCH_OVERHEAD + 5, -1])
def test_trailing_partial_batch_is_left_unconsumed(cut: int) -> None:
    data, batches = _three_batches()
    first_two = len(batches[0]) + len(batches[1])
    chunk = data[: first_two + (cut if cut > 0 else len(batches[2]) + cut)]
    result = decode(chunk)
    assert result.bytes_consumed == first_two
    assert result.next_offset == 110
    assert _offsets(result) == list(range(10)) + list(range(100, 110))
    # The caller continues from there with the rest.
    decoder = ColumnarDecoder(topic=TOPIC, partition=PARTITION, start_offset=result.next_offset)
    rest = list(decoder.decode(chunk[result.bytes_consumed :] + data[len(chunk) :]))
    assert [o for b in rest for o in b.column("offset").to_pylist()] == list(range(200, 210))
    assert decoder.bytes_consumed == len(batches[2])


def test_offset_range_filters_rows_and_stops_at_the_end() -> None:
    data, batches = _three_batches()
    result = decode(data, start_offset=5, end_offset=104)
    assert _offsets(result) == [5, 6, 7, 8, 9, 100, 101, 102, 103]
    assert result.end_reached and result.next_offset == 110
    assert result.bytes_consumed == len(batches[0]) + len(batches[1])
    assert decode(data, start_offset=300).rows == 0
    assert decode(data, start_offset=300).next_offset == 300
    empty = decode(b"", start_offset=42)
    assert (empty.batches, empty.next_offset, empty.bytes_consumed, empty.rows) == ([], 42, 0, 0)


def test_max_rows_per_batch_merges_and_splits() -> None:
    small = b"".join(build_batch([b"x"] * 7, base_offset=7 * k, timestamp=0) for k in range(10))
    result = decode(small, max_rows_per_batch=5)
    assert [b.num_rows for b in result.batches] == [5] * 14
    assert len(decode(small).batches) == 1  # many Kafka batches, one Arrow batch
    big = build_batch([b"y"] * 100, timestamp=0)
    assert [b.num_rows for b in decode(big, max_rows_per_batch=30).batches] == [30, 30, 30, 10]
    # A byte budget cuts too (never below one row).
    sized = build_batch([b"z" * 1000] * 10, timestamp=0)
    assert [b.num_rows for b in decode(sized, max_bytes_per_batch=2500).batches] == [2, 2, 2, 2, 2]
    assert [b.num_rows for b in decode(sized, max_bytes_per_batch=10).batches] == [1] * 10


def test_empty_batch_is_consumed_without_rows() -> None:
    batch = bytearray(build_batch([b"gone"], base_offset=5, compression=CompressionType.ZSTD, timestamp=0))
    empty = batch[:RECORD_BATCH_OVERHEAD]  # what compaction leaves of a batch: the header, no records
    struct.pack_into(">i", empty, 8, RECORD_BATCH_OVERHEAD - 12)
    struct.pack_into(">i", empty, 57, 0)
    reseal_crc(empty, 0, len(empty))
    data = bytes(empty) + build_batch([b"kept"], base_offset=6, timestamp=0)
    result = decode(data)
    assert _offsets(result) == [6] and result.kafka_batches == 2


# -- corruption ----------------------------------------------------------------------------------


def test_flipped_bit_is_a_crc_error() -> None:
    data, batches = _three_batches()
    damaged = bytearray(data)
    where = len(batches[0]) + RECORD_BATCH_OVERHEAD + 3
    damaged[where] ^= 0x10
    with pytest.raises(CorruptRecordError, match=rf"batch at offset 100: CRC mismatch.*at byte {len(batches[0])}") as e:
        decode(damaged)
    assert isinstance(e.value, ValueError) and isinstance(e.value, errors.CorruptRecordError)
    assert e.value.position == len(batches[0])


@pytest.mark.parametrize("codec", CODECS)
def test_malformed_records_without_crc_check(codec: CompressionType) -> None:
    """Records that disagree with the header: found by the vectorised checks, named by the reference decoder."""
    batch = bytearray(build_batch([b"a", b"bb", b"ccc"], base_offset=50, compression=codec, timestamp=0))
    struct.pack_into(">i", batch, 57, 4)  # records count 4, three records present
    reseal_crc(batch, 0, len(batch))
    data = build_batch([b"ok"], base_offset=49, timestamp=0) + bytes(batch)
    with pytest.raises(CorruptRecordError, match="batch at offset 50"):
        decode(data)
    if codec:
        garbage = bytearray(batch)
        garbage[RECORD_BATCH_OVERHEAD + 2 :] = bytes(len(garbage) - RECORD_BATCH_OVERHEAD - 2)
        with pytest.raises(CorruptRecordError, match="batch at offset 50"):
            decode(garbage, verify_crc=False)


def test_record_length_past_the_batch() -> None:
    batch = bytearray(build_batch([b"abc"], base_offset=3, timestamp=0))
    batch[RECORD_BATCH_OVERHEAD] = 0x7E  # the record's length varint: 63 bytes
    reseal_crc(batch, 0, len(batch))
    with pytest.raises(CorruptRecordError, match="batch at offset 3"):
        decode(bytes(batch))


@pytest.mark.parametrize("patch", ["magic", "length", "magic-partial"])
def test_impossible_headers(patch: str) -> None:
    data, batches = _three_batches()
    damaged = bytearray(data)
    at = len(batches[0])
    if patch == "length":
        struct.pack_into(">i", damaged, at + 8, -5)
    else:
        damaged[at + 16] = 7
    if patch == "magic-partial":
        damaged = damaged[: at + 30]
    with pytest.raises(CorruptRecordError, match=rf"batch at offset 100: .*(magic|length).*at byte {at}"):
        decode(damaged)


def test_header_key_must_be_utf8() -> None:
    builder = BatchBuilder(base_offset=0)
    builder.append(b"v", headers=[("Q", b"1")], timestamp=0)
    batch = bytearray(builder.build())
    batch[batch.index(b"Q")] = 0xFF
    reseal_crc(batch, 0, len(batch))
    with pytest.raises(errors.CorruptRecordError):
        decode_batch(bytes(batch))  # the reference refuses it...
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode(bytes(batch), include_headers=True)  # ...and so do we


def test_headers_are_null_for_records_without_any() -> None:
    builder = BatchBuilder()
    builder.append(b"a", timestamp=0)
    builder.append(b"b", headers=[("k", None), ("k", b"")], timestamp=0)
    result = decode(builder.build(), include_headers=True)
    assert result.batches[0].column("headers").to_pylist() == [
        None, [{"key": "k", "value": None}, {"key": "k", "value": b""}]]
    without = decode(builder.build())
    assert without.batches[0].schema.equals(arrow_schema(False))


def test_inputs_of_every_buffer_kind_and_no_lingering_exports() -> None:
    data, _ = _three_batches()
    expected = _offsets(decode(data))
    buffer = bytearray(data)
    assert _offsets(decode(buffer)) == expected
    assert _offsets(decode(memoryview(buffer))) == expected
    assert _offsets(decode(np.frombuffer(data, np.uint8).data)) == expected
    buffer += b"more"  # the decoder let go of the bytearray (no buffer export left behind)
    batches = decode(data).batches
    del data
    assert [o for b in batches for o in b.column("offset").to_pylist()] == expected  # rows own their memory


def test_generator_can_stop_early() -> None:
    batches = [build_batch([b"r"] * 10, base_offset=10 * k, timestamp=0) for k in range(30)]
    data = b"".join(batches)
    decoder = ColumnarDecoder(topic=TOPIC, partition=PARTITION, max_rows_per_batch=50)
    first = next(iter(decoder.decode(data)))
    assert first.num_rows == 50
    assert decoder.rows == 50


def test_offsets_past_two_gib_take_the_large_binary_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "_INT32_LIMIT", 100)  # as if the records section were over 2 GiB
    data = build_batch([(b"k%d" % i, b"value-%d" % i) for i in range(40)], timestamp=0)
    result = decode(data)
    assert arrow_rows(result.batches, include_headers=False) == reference_rows(data, include_headers=False)
