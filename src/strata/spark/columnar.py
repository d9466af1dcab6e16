"""Kafka record batches (v2) to Arrow record batches in Spark's Kafka-source schema, without per-record Python.

A Spark scan reads raw batch bytes (a Fetch response's records, or a byte range of a ``.log``
segment, local or remote) and must hand Arrow batches to PySpark. Decoding record by record in
Python runs at a few hundred thousand rows/s; this module decodes every field of every record of
many Kafka batches at once with numpy and assembles the Arrow arrays from buffers:

1. Batch headers are walked in Python, one step per Kafka batch (a client's batch holds ~100
   records): CRCs are checked, the consumer's read_committed filter drops aborted transactional
   batches, control batches are skipped. The batches left form a unit of up to 16 MiB / 1M
   records; uncompressed records sections are read in place, compressed ones inflated and joined.
2. Record starts: the one sequential step (each record starts with its length). In C when
   ``_recordwalk.c`` was built (``strata.spark.record_walk``: ~3 ns a record instead of ~400). Else all
   batches of the unit advance in lockstep, one numpy step per record index; the few long batches left
   at the end finish in a Python loop that checks runs of equal-size records at once.
3. Then, ``max_rows_per_batch`` records at a time: every field of every record is decoded at once (in
   the same C file, else with vectorised zig-zag varints), offsets and timestamps come from the batch
   headers, and keys and values are gathered out of the shared buffer into Arrow's buffers (in C, else by
   Arrow's ``filter`` kernel over a binary array whose elements alternate between field and gap). Many
   Kafka batches make one Arrow batch.

Spark's conventions (``KafkaRecordToRowConverter``): timestamps in microseconds, ``timestampType``
0 (CreateTime) or 1 (LogAppendTime, every record then carrying the batch's max timestamp), and a
null ``headers`` array for a record without headers.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from strata import errors
from strata.protocol.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    compute_crc,
    decode_records,
    decompress,
    parse_header,
)
from strata.protocol.records.batch import COMPRESSION_MASK, CURRENT_MAGIC, MAGIC_OFFSET
from strata.spark import record_walk

__all__ = [
    "HEADERS_DDL", "SPARK_KAFKA_DDL", "AbortedTxn", "ColumnarDecoder", "CorruptRecordError", "DecodeResult",
    "arrow_schema", "decode_batches", "spark_kafka_ddl",
]

SPARK_KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

DEFAULT_MAX_ROWS = 65536
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# Below this many batches still walking their records, one numpy step per record costs more than
# a Python loop over the records of those few batches (measured: a lockstep step is ~15 us).
_LOCKSTEP_MIN_BATCHES = 64
# Kafka batches decoded together: their records are walked in one lockstep pass (the more batches,
# the cheaper each step per record), then cut into Arrow batches. Bounds the memory in flight, and
# keeps the joined records (counted inflated) under glibc's 32 MiB mmap threshold, so the buffer
# is reused from the heap instead of being mapped (and page-faulted in) afresh for every unit.
_UNIT_ROWS = 1 << 20
_UNIT_BYTES = 16 * 1024 * 1024
_MAX_VARINT_BYTES = 10
# The long-batch walk guesses runs of equal-size records: from 16 at a time, doubling while right;
# after a wrong guess it walks 16, 32, ... 1024 records one by one before guessing again.
_SPECULATE_MIN = 16
_SPECULATE_MAX = 1 << 16
_SPECULATE_PATIENCE_MAX = 1024
_INT32_LIMIT = 2**31 - 1
_UNKNOWN_LAST = 2**63 - 1  # an aborted transaction whose marker offset is not known (a Fetch response's)
_I16_PAIR = struct.Struct(">hh")
# The 61-byte batch header as a numpy record (HEADER_STRUCT's layout), to read many at once.
_HEADER_DTYPE = np.dtype([
    ("base_offset", ">i8"), ("length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"), ("crc", ">u4"),
    ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"), ("max_timestamp", ">i8"),
    ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"), ("records_count", ">i4"),
])
assert _HEADER_DTYPE.itemsize == RECORD_BATCH_OVERHEAD
# The columns of a group's header table (``_header_table``).
_TABLE_FIELDS = ("base_offset", "length", "attributes", "base_timestamp", "max_timestamp", "records_count")
_BASE_OFFSET, _LENGTH, _ATTRIBUTES, _BASE_TIMESTAMP, _MAX_TIMESTAMP, _COUNT = range(len(_TABLE_FIELDS))


class CorruptRecordError(errors.CorruptRecordError, ValueError):
    """Bytes that are not a valid v2 record batch; names the batch's base offset and byte position.

    A ``ValueError`` for callers outside the broker, and still Strata's ``CorruptRecordError``.
    """


class AbortedTxn(NamedTuple):
    """An aborted transaction as a Fetch response (or a ``.txnindex`` entry) reports it.

    ``last_offset`` (its ABORT marker's offset; a ``.txnindex`` entry has it, a Fetch response
    does not) lets a caller pass a whole segment's list with every chunk: a transaction that
    ended before ``start_offset`` is then ignored, as the broker leaves it out of a Fetch response.
    """

    producer_id: int
    first_offset: int
    last_offset: int | None = None


def spark_kafka_ddl(include_headers: bool) -> str:
    """The schema Spark's Kafka source gives a DataFrame, as DDL."""
    return f"{SPARK_KAFKA_DDL}, {HEADERS_DDL}" if include_headers else SPARK_KAFKA_DDL


@cache
def arrow_schema(include_headers: bool) -> pa.Schema:
    """Exactly ``to_arrow_schema(StructType.fromDDL(spark_kafka_ddl(h)), timezone="UTC")`` of PySpark."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


@dataclass
class DecodeResult:
    """What one :func:`decode_batches` call produced, and where a caller reading ranges continues."""

    batches: list[pa.RecordBatch]
    next_offset: int  # offset after the last complete Kafka batch consumed (never below start_offset)
    bytes_consumed: int  # whole batches consumed; a trailing partial batch is left for the next read
    rows: int
    kafka_batches: int  # complete Kafka batches consumed, whatever became of them
    control_batches: int
    aborted_batches: int
    end_reached: bool  # stopped at a batch starting at or after end_offset


class _ReadCommitted:
    """The Java consumer's ``abortedProducerIds`` bookkeeping (``CompletedFetch``).

    Aborted transactions are consumed in first-offset order: reaching a batch moves every one that
    began at or before the batch's last offset into the aborted set, and the producer's ABORT
    marker takes it out again, so its later transactions are read. A transaction whose marker
    (``last_offset``) lies before the batch reached ended before this read began (a read starting
    inside a segment, with the segment's whole list): it is dropped, as the broker leaves such a
    transaction out of a Fetch response, so the producer's later transactions are not taken for it.
    """

    def __init__(self, aborted: Iterable[AbortedTxn], start_offset: int) -> None:
        self._queue = [(int(t.first_offset), int(t.producer_id),
                        _UNKNOWN_LAST if t.last_offset is None else int(t.last_offset)) for t in aborted
                       if t.last_offset is None or t.last_offset >= start_offset]
        heapq.heapify(self._queue)
        self._aborted_producers: set[int] = set()

    def skip(self, header: BatchHeader, abort_marker: bool) -> bool:
        """Whether the (producer-id carrying) batch is dropped; control batches never are here."""
        queue = self._queue
        while queue and queue[0][0] <= header.last_offset:
            _, producer_id, last = heapq.heappop(queue)
            if last >= header.base_offset:
                self._aborted_producers.add(producer_id)
        if abort_marker:
            self._aborted_producers.discard(header.producer_id)
            return False
        return bool(header.attributes & TRANSACTIONAL_MASK) and header.producer_id in self._aborted_producers


def _corrupt(message: str, position: int, base_offset: int | None = None) -> CorruptRecordError:
    where = f"batch at offset {base_offset}" if base_offset is not None else "batch"
    return CorruptRecordError(f"{where}: {message}", position)


class ColumnarDecoder:
    """Decodes successive chunks of one partition's batches; state carries over between chunks.

    ``decode(chunk)`` yields Arrow batches of at most ``max_rows_per_batch`` rows (and, unless one
    record is larger, ``max_bytes_per_batch`` bytes of records) as it goes, so memory stays bounded
    by one unit of Kafka batches (16 MiB of them). It consumes whole Kafka batches only: after the
    generator is exhausted ``bytes_consumed`` says where the unconsumed tail of ``chunk`` begins,
    to be sent again with the next range. ``aborted`` selects read_committed (None is
    read_uncommitted); the read_committed state carries over too. Rows below ``start_offset`` or
    below what was already consumed, and at or above ``end_offset``, are left out; the walk stops
    at the first batch that starts at or after ``end_offset`` (``end_reached``).
    """

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        start_offset: int = 0,
        end_offset: int | None = None,
        include_headers: bool = False,
        aborted: Sequence[AbortedTxn] | None = None,
        max_rows_per_batch: int = DEFAULT_MAX_ROWS,
        max_bytes_per_batch: int = DEFAULT_MAX_BYTES,
        verify_crc: bool = True,
    ) -> None:
        if max_rows_per_batch < 1:
            raise ValueError(f"max_rows_per_batch must be positive, got {max_rows_per_batch}")
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.include_headers = include_headers
        self.max_rows_per_batch = max_rows_per_batch
        self.max_bytes_per_batch = max_bytes_per_batch
        self.verify_crc = verify_crc
        self.schema = arrow_schema(include_headers)
        self._txn = _ReadCommitted(aborted, start_offset) if aborted is not None else None
        self.next_offset = start_offset
        self.bytes_consumed = 0
        self.rows = 0
        self.kafka_batches = 0
        self.control_batches = 0
        self.aborted_batches = 0
        self.end_reached = False

    # -- the walk over batch headers -----------------------------------------------------------

    def decode(self, data: bytes | bytearray | memoryview) -> Iterator[pa.RecordBatch]:
        """Yield the Arrow batches of the complete Kafka batches in ``data``."""
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        limit = len(view)
        self.bytes_consumed = 0
        unpack = HEADER_STRUCT.unpack_from
        txn = self._txn
        end_offset = self.end_offset
        verify_crc = self.verify_crc
        # One pass of plain Python per Kafka batch, on locals (written back before each yield): the
        # header tuple becomes a BatchHeader only where one is needed (transactions, errors).
        next_offset = self.next_offset
        consumed = 0  # Kafka batches
        low = next_offset  # rows below this were consumed before (or precede start_offset)
        positions: list[int] = []
        pieces: list[bytes | None] = []  # inflated records sections (None: uncompressed, read in place)
        compressed = False
        rows = group_bytes = group_end = 0
        position = 0
        while position < limit:
            remaining = limit - position
            if remaining < RECORD_BATCH_OVERHEAD:
                self._check_partial(view, position)
                break  # a ranged read that ends inside this batch's header: left for the next read
            fields = unpack(view, position)
            base_offset, length, _, magic, stored_crc, attributes, last_delta, _, _, producer_id, _, _, count = fields
            size = length + LOG_OVERHEAD
            if magic != CURRENT_MAGIC or size < RECORD_BATCH_OVERHEAD or last_delta < 0 or count < 0:
                self._raise_header(view, position)
            if end_offset is not None and base_offset >= end_offset:
                self.end_reached = True
                break
            if size > remaining:
                break  # a ranged read that ends inside this batch: left for the next read
            if verify_crc and crc32c(view[position + ATTRIBUTES_OFFSET : position + size]) != stored_crc:
                raise self._crc_error(view, position, fields)
            last_offset = base_offset + last_delta
            if attributes & CONTROL_MASK:
                self.control_batches += 1
                if txn is not None and producer_id >= 0:
                    header = BatchHeader._make(fields)
                    txn.skip(header, self._is_abort_marker(view, position, header))
            elif txn is not None and producer_id >= 0 and txn.skip(BatchHeader._make(fields), False):
                self.aborted_batches += 1
            elif count and last_offset >= low:
                piece = None
                piece_bytes = size
                if attributes & COMPRESSION_MASK:
                    piece = _inflate(view, position, size, attributes & COMPRESSION_MASK, base_offset)
                    piece_bytes = len(piece)
                if rows and (rows + count > _UNIT_ROWS or group_bytes + piece_bytes > _UNIT_BYTES):
                    self.next_offset, self.kafka_batches = next_offset, self.kafka_batches + consumed
                    consumed = 0
                    yield from self._flush(view, positions, pieces if compressed else None, group_end, low)
                    low = next_offset
                    positions, pieces, compressed = [], [], False
                    rows = group_bytes = 0
                positions.append(position)
                pieces.append(piece)
                compressed = compressed or piece is not None
                rows += count
                group_bytes += piece_bytes
            position += size
            consumed += 1
            if last_offset >= next_offset:
                next_offset = last_offset + 1
            if rows:
                group_end = position
            else:  # nothing pending: what was skipped is consumed now
                low = next_offset
        self.next_offset, self.kafka_batches = next_offset, self.kafka_batches + consumed
        if rows:
            yield from self._flush(view, positions, pieces if compressed else None, group_end, low)
        self.bytes_consumed = position

    def _crc_error(self, view: memoryview, position: int, fields: tuple) -> CorruptRecordError:
        header = BatchHeader._make(fields)
        actual = compute_crc(view, position, header.size)
        return _corrupt(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}", position,
                        header.base_offset)

    def _check_partial(self, view: memoryview, position: int) -> None:
        """A short tail is a partial batch unless what there is of its header is already impossible."""
        remaining = len(view) - position
        if remaining >= 8 and self.end_offset is not None:
            self.end_reached = struct.unpack_from(">q", view, position)[0] >= self.end_offset
        if remaining >= LOG_OVERHEAD:
            base_offset, length = struct.unpack_from(">qi", view, position)
            if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
                raise _corrupt(f"batch length {length} is below the v2 minimum of 49", position, base_offset)
            if remaining > MAGIC_OFFSET and view[position + MAGIC_OFFSET] != CURRENT_MAGIC:
                raise _corrupt(f"invalid magic {view[position + MAGIC_OFFSET]}", position, base_offset)

    def _raise_header(self, view: memoryview, position: int) -> None:
        base_offset = struct.unpack_from(">q", view, position)[0]
        try:
            parse_header(view, position)
        except errors.TruncatedBatchError:
            pass
        except (errors.CorruptRecordError, errors.UnsupportedForMessageFormatError) as e:
            message = str(e).split(" (at byte")[0]
            raise _corrupt(message, position, base_offset) from None
        raise _corrupt("impossible batch header", position, base_offset)

    def _is_abort_marker(self, view: memoryview, position: int, header: BatchHeader) -> bool:
        """Kafka's ``containsAbortMarker``: the first record's key says ABORT (type 0)."""
        if not header.records_count:
            return False
        records = self._records(view, position, header)
        if not records or records[0].key is None or len(records[0].key) < 4:
            return False
        return _I16_PAIR.unpack_from(records[0].key)[1] == 0

    def _records(self, view: memoryview, position: int, header: BatchHeader) -> list:
        """The reference decoder on one batch: control records, and the precise error for a bad batch."""
        body = view[position + RECORD_BATCH_OVERHEAD : position + header.size]
        try:
            return decode_records(header, decompress(header.compression, body))
        except errors.KafkaError as e:
            message = str(e).split(" (at byte")[0]
            raise _corrupt(message, position, header.base_offset) from None

    # -- one group of Kafka batches to Arrow ---------------------------------------------------

    def _flush(self, view: memoryview, positions: list[int], pieces: list[bytes | None] | None, end: int,
               low: int) -> Iterator[pa.RecordBatch]:
        """Decode a group: one record walk over all its batches, then Arrow batches slice by slice."""
        self.bytes_consumed = end
        table = _header_table(view, positions)
        counts = table[:, _COUNT]
        buf, starts, ends = _records_buffer(view, positions, table, pieces)
        try:
            body, body_end = _record_bodies(buf, starts, ends, counts)
        except (_Malformed, IndexError) as e:
            raise self._precise_error(view, positions, e) from None
        first_record = np.zeros(len(counts) + 1, np.int64)  # index of each Kafka batch's first record
        np.cumsum(counts, out=first_record[1:])
        for i, j in _slices(body, body_end, self.max_rows_per_batch, self.max_bytes_per_batch):
            first = int(np.searchsorted(first_record, i, "right")) - 1
            last = int(np.searchsorted(first_record, j, "left"))
            per_batch = np.diff(np.clip(first_record[first : last + 1], i, j))  # records of each in [i, j)
            try:
                cols = _decode_records(buf, body[i:j], body_end[i:j], self.include_headers)
                batch = self._assemble(buf, cols, table[first:last], per_batch, low)
            except (_Malformed, IndexError) as e:
                raise self._precise_error(view, positions, e) from None
            if batch is not None:
                self.rows += batch.num_rows
                yield batch

    def _precise_error(self, view: memoryview, positions: list[int], error: Exception) -> CorruptRecordError:
        """The reference decoder names the bad batch and what is wrong with it."""
        for p in positions:
            self._records(view, p, parse_header(view, p))  # raises
        return _corrupt(f"malformed records ({error})", positions[0], parse_header(view, positions[0]).base_offset)

    def _assemble(self, buf: np.ndarray, cols: _Columns, table: np.ndarray, counts: np.ndarray,
                  low: int) -> pa.RecordBatch | None:
        """Arrow columns of records decoded from the Kafka batches in ``table``, ``counts`` records of each."""
        n = len(cols.offset_delta)
        offsets = np.repeat(table[:, _BASE_OFFSET], counts)
        offsets += cols.offset_delta
        timestamps = np.repeat(table[:, _BASE_TIMESTAMP], counts)
        timestamps += cols.timestamp_delta
        log_append = (table[:, _ATTRIBUTES] & TIMESTAMP_TYPE_MASK) != 0
        if log_append.any():
            flags = np.repeat(log_append, counts)
            timestamps = np.where(flags, np.repeat(table[:, _MAX_TIMESTAMP], counts), timestamps)
            ts_type = flags.astype(np.int32)
        else:
            ts_type = np.zeros(n, np.int32)
        timestamps *= 1000

        columns = [
            _binary_column(buf, cols.key_start, cols.key_len),
            _binary_column(buf, cols.value_start, cols.value_len),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(offsets),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(timestamps)]),
            pa.array(ts_type),
        ]
        if self.include_headers:
            columns.append(_headers_column(buf, cols, self.schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)

        # Rows outside [low, end_offset): a batch straddling the range is common, and the kept rows
        # are then one contiguous run (offsets increase), so a zero-copy slice does.
        if offsets.min() >= low and (self.end_offset is None or offsets.max() < self.end_offset):
            return batch
        keep = offsets >= low
        if self.end_offset is not None:
            keep &= offsets < self.end_offset
        kept = np.flatnonzero(keep)
        if not kept.size:
            return None
        first, last = int(kept[0]), int(kept[-1])
        if last - first + 1 == kept.size:
            return batch.slice(first, kept.size)
        return batch.filter(pa.array(keep))


# -- vectorised record decoding ----------------------------------------------------------------


class _Malformed(Exception):
    """Raised inside the vectorised decoder; the reference decoder then names the bad batch."""


class _Columns(NamedTuple):
    timestamp_delta: np.ndarray
    offset_delta: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray  # -1 for null
    value_start: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray | None  # None when no record has headers
    header_key_start: np.ndarray | None
    header_key_len: np.ndarray | None
    header_value_start: np.ndarray | None
    header_value_len: np.ndarray | None


def _inflate(view: memoryview, position: int, size: int, codec: int, base_offset: int) -> bytes:
    """The batch's records section decompressed; a codec failure names the batch."""
    try:
        return decompress(codec, view[position + RECORD_BATCH_OVERHEAD : position + size])
    except errors.KafkaError as e:
        raise _corrupt(str(e).split(" (at byte")[0], position, base_offset) from None


def _records_buffer(view: memoryview, at: list[int], table: np.ndarray,
                    pieces: list[bytes | None] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The group's records sections in one buffer, with where each batch's section starts and ends.

    Uncompressed sections are read where they lie (``pieces`` None: the buffer spans from the
    first section to the end of the last); inflated ones are joined with any uncompressed ones.
    """
    positions = np.array(at, np.int64)
    sizes = table[:, _LENGTH] + LOG_OVERHEAD
    if pieces is None:
        lo = int(positions[0]) + RECORD_BATCH_OVERHEAD
        hi = int(positions[-1] + sizes[-1])
        return np.frombuffer(view, np.uint8, hi - lo, lo), positions + (RECORD_BATCH_OVERHEAD - lo), \
            positions + sizes - lo
    parts = [view[p + RECORD_BATCH_OVERHEAD : p + size] if piece is None else piece
             for p, size, piece in zip(at, sizes.tolist(), pieces, strict=True)]
    lengths = np.fromiter((len(b) for b in parts), np.int64, len(parts))
    ends = np.cumsum(lengths)
    return np.frombuffer(b"".join(parts), np.uint8), ends - lengths, ends


def _header_table(view: memoryview, positions: list[int]) -> np.ndarray:
    """The fields of ``_TABLE_FIELDS`` of the batches at ``positions``, one row each, in one gather."""
    records = np.ndarray((len(view) - RECORD_BATCH_OVERHEAD + 1,), _HEADER_DTYPE, view, strides=(1,))
    picked = records[np.array(positions, np.int64)]
    table = np.empty((len(positions), len(_TABLE_FIELDS)), np.int64)
    for i, name in enumerate(_TABLE_FIELDS):
        table[:, i] = picked[name]
    return table


def _varint(buf: np.ndarray, pos: np.ndarray, strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints at every position at once: ``(values int64, positions after them)``.

    One and two bytes (values -8192..8191: lengths of records under 8 KiB, small deltas) take a
    branch-free path; only the longer ones are finished one byte at a time on their subset.
    A read past the buffer is clipped: the garbage it yields fails the caller's length checks.
    ``strict=False`` (for guessed positions) gives -1 at position +0 for a varint over 10 bytes.
    """
    b = buf[pos]
    more = b >= 0x80
    if not more.any():
        values = (b >> 1).astype(np.int64)
        values ^= -(b & 1).astype(np.int64)
        return values, pos + 1
    b1 = buf.take(pos + 1, mode="clip")
    raw = (b1 & 0x7F).astype(np.int64)
    raw <<= 7
    raw *= more
    raw |= b & 0x7F
    size = more.astype(np.int64)
    size += 1
    longer = np.flatnonzero(more & (b1 >= 0x80))
    if longer.size:
        _varint_tail(buf, pos, raw, size, longer, strict)
    values = (raw.view(np.uint64) >> np.uint64(1)).view(np.int64)
    values ^= -(raw & 1)
    return values, pos + size


def _varint_tail(buf: np.ndarray, pos: np.ndarray, raw: np.ndarray, size: np.ndarray, idx: np.ndarray,
                 strict: bool) -> None:
    """Bytes three to ten of the varints at ``idx`` (whose first two bytes are in ``raw``)."""
    shift = 14
    while idx.size:
        if shift >= 7 * _MAX_VARINT_BYTES:
            if strict:
                raise _Malformed("varint longer than 10 bytes")
            raw[idx] = 1
            size[idx] = 0
            return
        nb = buf.take(pos[idx] + size[idx], mode="clip")
        raw[idx] |= (nb & 0x7F).astype(np.int64) << shift
        size[idx] += 1
        idx = idx[nb >= 0x80]
        shift += 7


def _record_bodies(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every record's body (after its length varint): the C walk when it is built
    (``strata.spark.record_walk``), else :func:`_record_bodies_numpy`."""
    if record_walk.NATIVE:
        try:
            return record_walk.native_record_bodies(buf, starts, ends, counts)
        except record_walk.WalkError as e:
            raise _Malformed(str(e)) from None
    return _record_bodies_numpy(buf, starts, ends, counts)


def _record_bodies_numpy(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                         counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every record's body (after its length varint), batches in lockstep."""
    nb = len(counts)
    out_base = np.zeros(nb, np.int64)
    np.cumsum(counts[:-1], out=out_base[1:])
    n = int(counts.sum())
    body = np.empty(n, np.int64)
    body_end = np.empty(n, np.int64)
    order = np.argsort(-counts, kind="stable")
    remaining = counts[order]
    pos = starts[order].copy()
    ends_sorted = ends[order]
    base = out_base[order]
    active = nb
    step = 0
    while True:
        while active and remaining[active - 1] <= step:
            active -= 1
        if not active:
            break
        if active < _LOCKSTEP_MIN_BATCHES:
            _walk_tail(buf, pos, base, remaining, ends_sorted, active, step, body, body_end)
            break
        length, after = _varint(buf, pos[:active])
        out = base[:active] + step
        body[out] = after
        end = after + length
        body_end[out] = end
        pos[:active] = end
        step += 1
    if not (body_end >= body).all() or not (pos == ends_sorted).all():
        raise _Malformed("record lengths do not add up to the records section")
    return body, body_end


def _walk_tail(buf: np.ndarray, pos: np.ndarray, base: np.ndarray, remaining: np.ndarray, ends: np.ndarray,
               active: int, step: int, body: np.ndarray, body_end: np.ndarray) -> None:
    """The records left in the few longest batches, one Python step each, with runs of equal size vectorised.

    Records of one size in a row are common (fixed-size values; only a varint growing a byte
    breaks the run): after each record, the next ``guess`` records are assumed to have its size
    and checked at once; a failed guess backs off so variable-size records pay almost nothing.
    """
    mv = memoryview(buf)
    for i in range(active):
        p = int(pos[i])
        end = int(ends[i])
        left = int(remaining[i]) - step
        bodies: list[int] = []
        body_ends: list[int] = []
        guess = patience = _SPECULATE_MIN
        wait = 0
        while left:
            start = p
            if p >= end:
                raise _Malformed("record runs past the records section")
            byte = mv[p]
            p += 1
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
            else:
                raw, shift = byte & 0x7F, 7
                while True:
                    if p >= end or shift >= 7 * _MAX_VARINT_BYTES:
                        raise _Malformed("bad record length")
                    byte = mv[p]
                    p += 1
                    raw |= (byte & 0x7F) << shift
                    if byte < 0x80:
                        break
                    shift += 7
                length = (raw >> 1) ^ -(raw & 1)
            if length < 0:
                raise _Malformed("negative record length")
            bodies.append(p)
            p += length
            body_ends.append(p)
            left -= 1
            if wait:
                wait -= 1
                continue
            size = p - start
            m = min(guess, left, (end - p) // size)
            if m < 2:
                continue
            cand = np.arange(p, p + size * m, size, dtype=np.int64)
            lengths, after = _varint(buf, cand, strict=False)
            ok = after + lengths == cand + size
            run = m if ok.all() else int(ok.argmin())
            if run:
                bodies.extend(after[:run].tolist())
                body_ends.extend((cand[:run] + size).tolist())
                p += size * run
                left -= run
            if run == m:
                guess = min(2 * guess, _SPECULATE_MAX)
                patience = _SPECULATE_MIN
            elif run < _SPECULATE_MIN:
                guess = _SPECULATE_MIN
                wait = patience
                patience = min(2 * patience, _SPECULATE_PATIENCE_MAX)
        out = int(base[i]) + step
        body[out : out + len(bodies)] = bodies
        body_end[out : out + len(bodies)] = body_ends
        pos[i] = p


def _slices(body: np.ndarray, body_end: np.ndarray, max_rows: int, max_bytes: int) -> list[tuple[int, int]]:
    """Record ranges of at most ``max_rows`` records and (unless one record alone is larger) ``max_bytes``."""
    n = len(body)
    if n and int(body_end[-1] - body[0]) <= max_bytes:  # the common case: rows alone decide
        return [(i, min(i + max_rows, n)) for i in range(0, n, max_rows)]
    sizes = np.zeros(n + 1, np.int64)
    np.cumsum(body_end - body, out=sizes[1:])
    out = []
    i = 0
    while i < n:
        j = int(np.searchsorted(sizes, sizes[i] + max_bytes, "right")) - 1
        j = min(max(j, i + 1), i + max_rows, n)
        out.append((i, j))
        i = j
    return out


def _decode_records(buf: np.ndarray, body: np.ndarray, body_end: np.ndarray, include_headers: bool) -> _Columns:
    """Every field of the records whose bodies span ``[body, body_end)``, all records at once (the C walk's
    when it is built, but for the headers of the records that have any)."""
    if record_walk.NATIVE:
        try:
            (ts_delta, offset_delta, key_start, key_len, value_start, value_len, header_count,
             p) = record_walk.native_record_fields(buf, body, body_end)
        except record_walk.WalkError as e:
            raise _Malformed(str(e)) from None
    else:
        ts_delta, p = _varint(buf, body + 1)  # +1: the attributes byte, unused
        offset_delta, p = _varint(buf, p)
        key_len, key_start = _varint(buf, p)
        p = key_start + np.maximum(key_len, 0)
        value_len, value_start = _varint(buf, p)
        p = value_start + np.maximum(value_len, 0)
        header_count, p = _varint(buf, p)
    hk_start = hk_len = hv_start = hv_len = None
    with_headers = np.flatnonzero(header_count)
    if with_headers.size:
        counts_h = header_count[with_headers]
        if (counts_h < 0).any() or (counts_h > body_end[with_headers] - p[with_headers]).any():
            raise _Malformed("bad header count")
        hk_start, hk_len, hv_start, hv_len, p_h = _decode_headers(buf, p[with_headers], counts_h)
        p[with_headers] = p_h
    else:
        header_count = None
    if not (p == body_end).all():
        raise _Malformed("record fields do not match the record length")
    if not include_headers:
        header_count = hk_start = hk_len = hv_start = hv_len = None
    return _Columns(ts_delta, offset_delta, key_start, key_len, value_start, value_len,
                    header_count, hk_start, hk_len, hv_start, hv_len)


def _decode_headers(buf: np.ndarray, pos: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Header fields of the records that have any, flattened in buffer order, one step per header index."""
    total = int(counts.sum())
    flat_base = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=flat_base[1:])
    key_start = np.empty(total, np.int64)
    key_len = np.empty(total, np.int64)
    value_start = np.empty(total, np.int64)
    value_len = np.empty(total, np.int64)
    pos = pos.copy()
    active = np.arange(len(counts))
    j = 0
    while active.size:
        p = pos[active]
        klen, ks = _varint(buf, p)
        if (klen < 0).any():
            raise _Malformed("null header key")
        vlen, vs = _varint(buf, ks + klen)
        out = flat_base[active] + j
        key_start[out] = ks
        key_len[out] = klen
        value_start[out] = vs
        value_len[out] = vlen
        pos[active] = vs + np.maximum(vlen, 0)
        j += 1
        active = active[counts[active] > j]
    return key_start, key_len, value_start, value_len, pos


def _binary_column(buf: np.ndarray, start: np.ndarray, length: np.ndarray,
                   type_: pa.DataType | None = None) -> pa.Array:
    """Variable-length fields cut out of ``buf`` in one pass: the C gather when it is built, else Arrow's
    filter kernel.

    For the filter: the fields lie in ``buf`` in order, so ``[start0, end0, start1, end1, ...]`` are valid offsets
    of a binary array whose elements alternate field, gap, field, ...; keeping the even elements
    copies exactly the fields into a fresh, compact array.
    """
    n = len(start)
    valid = length >= 0
    null_count = n - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    if not (length > 0).any():  # all null or empty (keys of keyless producers): nothing to copy
        out = pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(np.zeros(n + 1, np.int32)),
                                                     pa.py_buffer(b"")], null_count)
        return out if type_ is None else out.cast(type_)
    if record_walk.NATIVE:
        total = int(np.maximum(length, 0).sum())
        if total <= _INT32_LIMIT:
            try:
                offsets, data = record_walk.native_gather(buf, start, length, total)
            except record_walk.WalkError as e:
                raise _Malformed(str(e)) from None
            out = pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                        null_count)
            return out if type_ is None or type_ == pa.binary() else _cast_utf8(out, type_)
    end = start + np.maximum(length, 0)
    large = n and int(end[-1]) > _INT32_LIMIT
    interleaved = np.empty(2 * n + 1, np.int64 if large else np.int32)
    interleaved[0 : 2 * n : 2] = start
    interleaved[1 : 2 * n : 2] = end
    interleaved[2 * n] = end[-1] if n else 0
    spans = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), 2 * n,
                                  [None, pa.py_buffer(interleaved), pa.py_buffer(buf)])
    evens = pa.Array.from_buffers(pa.bool_(), 2 * n, [None, pa.py_buffer(b"\x55" * ((2 * n + 7) // 8))])
    fields = spans.filter(evens)
    if large:
        fields = fields.cast(pa.binary())
    out = pa.Array.from_buffers(pa.binary(), n, [validity, *fields.buffers()[1:]], null_count)
    return out if type_ is None or type_ == pa.binary() else _cast_utf8(out, type_)


def _cast_utf8(out: pa.Array, type_: pa.DataType) -> pa.Array:
    try:
        return out.cast(type_)
    except pa.ArrowInvalid as e:
        raise _Malformed(f"header key is not UTF-8: {e}") from None


def _headers_column(buf: np.ndarray, cols: _Columns, list_type: pa.ListType) -> pa.Array:
    """``array<struct<key:string,value:binary>>``, null for a record without headers (as Spark has it)."""
    n = len(cols.key_len)
    struct_type = list_type.value_type
    if cols.header_count is None:
        empty = np.zeros(0, np.int64)
        keys = _binary_column(buf, empty, empty, pa.string())
        values = _binary_column(buf, empty, empty)
        list_offsets = np.zeros(n + 1, np.int32)
        has = np.zeros(n, bool)
    else:
        keys = _binary_column(buf, cols.header_key_start, cols.header_key_len, pa.string())
        values = _binary_column(buf, cols.header_value_start, cols.header_value_len)
        list_offsets = np.zeros(n + 1, np.int32)
        np.cumsum(cols.header_count, out=list_offsets[1:])
        has = cols.header_count > 0
    entries = pa.StructArray.from_arrays([keys, values], fields=list(struct_type))
    null_count = n - int(np.count_nonzero(has))
    validity = pa.py_buffer(np.packbits(has, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(list_type, n, [validity, pa.py_buffer(list_offsets)], null_count,
                                 children=[entries])


def decode_batches(
    data: bytes | bytearray | memoryview,
    *,
    topic: str,
    partition: int,
    start_offset: int = 0,
    end_offset: int | None = None,
    include_headers: bool = False,
    aborted: Sequence[AbortedTxn] | None = None,
    max_rows_per_batch: int = DEFAULT_MAX_ROWS,
    max_bytes_per_batch: int = DEFAULT_MAX_BYTES,
    verify_crc: bool = True,
) -> DecodeResult:
    """Decode the complete Kafka batches in ``data`` into Arrow batches of :func:`arrow_schema`.

    ``aborted=None`` is read_uncommitted; a sequence (possibly empty) of aborted transactions is
    read_committed. Only control batches are always dropped. Raises :class:`CorruptRecordError`.
    """
    decoder = ColumnarDecoder(
        topic=topic, partition=partition, start_offset=start_offset, end_offset=end_offset,
        include_headers=include_headers, aborted=aborted, max_rows_per_batch=max_rows_per_batch,
        max_bytes_per_batch=max_bytes_per_batch, verify_crc=verify_crc,
    )
    batches = list(decoder.decode(data))
    return DecodeResult(
        batches=batches, next_offset=decoder.next_offset, bytes_consumed=decoder.bytes_consumed, rows=decoder.rows,
        kafka_batches=decoder.kafka_batches, control_batches=decoder.control_batches,
        aborted_batches=decoder.aborted_batches, end_reached=decoder.end_reached,
    )
