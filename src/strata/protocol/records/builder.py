"""Build v2 record batches: for tests, tools and the broker's own internal topics.

Clients build the batches users produce; the broker only builds batches for records it writes
itself (transaction markers, internal-topic records), so simplicity beats speed here.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence

from strata.protocol.records.batch import (
    CONTROL_MASK,
    CURRENT_MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    TimestampType,
    reseal_crc,
)
from strata.protocol.records.compression import CompressionType, compress
from strata.protocol.records.record import ControlRecordType, Header
from strata.protocol.records.varint import write_varint

_HEADER_PREFIX = struct.Struct(">qiib")  # base_offset, length, leader epoch, magic
_HEADER_REST = struct.Struct(">Ihiqqqhii")  # crc .. records_count


def _write_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        write_varint(-1, out)
    else:
        write_varint(len(value), out)
        out += value


class BatchBuilder:
    """Accumulates records and encodes them as one batch; offsets are base + index."""

    def __init__(
        self,
        *,
        compression: CompressionType | int = CompressionType.NONE,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        transactional: bool = False,
        control: bool = False,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        log_append_time: int | None = None,
        snappy_raw: bool = False,
    ) -> None:
        self.compression = CompressionType(compression)
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self.control = control
        self.timestamp_type = TimestampType(timestamp_type)  # a plain int 1 must not be ignored
        self.log_append_time = log_append_time
        self.snappy_raw = snappy_raw
        self._body = bytearray()
        self._count = 0
        self._last_delta = -1
        self._base_timestamp: int | None = None
        self._max_timestamp = -1

    def __len__(self) -> int:
        return self._count

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] = (),
        timestamp: int | None = None,
        offset_delta: int | None = None,
    ) -> None:
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        if self._base_timestamp is None:
            self._base_timestamp = ts
        delta = self._last_delta + 1 if offset_delta is None else offset_delta
        if delta <= self._last_delta:
            raise ValueError(f"offset delta {delta} must exceed the previous {self._last_delta}")
        record = bytearray(b"\x00")  # attributes
        write_varint(ts - self._base_timestamp, record)
        write_varint(delta, record)
        _write_bytes(key, record)
        _write_bytes(value, record)
        write_varint(len(headers), record)
        for hkey, hvalue in headers:
            _write_bytes(hkey.encode("utf-8"), record)
            _write_bytes(hvalue, record)
        write_varint(len(record), self._body)
        self._body += record
        self._count += 1
        self._last_delta = delta
        self._max_timestamp = max(self._max_timestamp, ts)

    def build(self) -> bytes:
        if self._count == 0:
            raise ValueError("a record batch needs at least one record")
        attributes = int(self.compression)
        if self.transactional:
            attributes |= TRANSACTIONAL_MASK
        if self.control:
            attributes |= CONTROL_MASK
        max_timestamp = self._max_timestamp
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
            if self.log_append_time is not None:
                max_timestamp = self.log_append_time
        payload = compress(self.compression, self._body, snappy_raw=self.snappy_raw)
        size = RECORD_BATCH_OVERHEAD + len(payload)
        out = bytearray(size)
        _HEADER_PREFIX.pack_into(
            out, 0, self.base_offset, size - 12, self.partition_leader_epoch, CURRENT_MAGIC
        )
        _HEADER_REST.pack_into(
            out, 17, 0, attributes, self._last_delta, self._base_timestamp or 0, max_timestamp,
            self.producer_id, self.producer_epoch, self.base_sequence, self._count,
        )
        out[RECORD_BATCH_OVERHEAD:] = payload
        reseal_crc(out, 0, size)
        return bytes(out)


def build_batch(
    values: Iterable[bytes | None | tuple[bytes | None, bytes | None]],
    *,
    timestamp: int | None = None,
    **kwargs: object,
) -> bytes:
    """One batch from values, or ``(key, value)`` pairs; all with ``timestamp`` when given."""
    builder = BatchBuilder(**kwargs)  # type: ignore[arg-type]
    for item in values:
        if isinstance(item, tuple):
            builder.append(item[1], key=item[0], timestamp=timestamp)
        else:
            builder.append(item, timestamp=timestamp)
    return builder.build()


def build_control_batch(
    marker: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch (COMMIT or ABORT), as the transaction coordinator writes it."""
    builder = BatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(struct.pack(">hi", 0, coordinator_epoch), key=struct.pack(">hh", 0, int(marker)),
                   timestamp=timestamp)
    return builder.build()
