"""Kafka's ``RemoteLogMetadataSerde``: the value bytes of ``__remote_log_metadata`` records, byte for byte.

Why byte-exact: a Strata broker may share the metadata topic with Java brokers (or be replaced by
one), and ``kafka-console-consumer --formatter ...RemoteLogMetadataFormatter`` must read what we
write. Framing (``AbstractApiMessageSerde``)::

    uvarint(frame version = 1) | uvarint(apiKey) | uvarint(record version = 0) | flexible body

apiKey 0 ``RemoteLogSegmentMetadataRecord``, 1 ``RemoteLogSegmentMetadataUpdateRecord``,
2 ``RemotePartitionDeleteMetadataRecord``, 3 ``RemoteLogSegmentMetadataSnapshotRecord``. Every body
is a flexible-version message: big-endian ints, uuid as 16 bytes (msb then lsb), compact strings,
arrays and nullable bytes (uvarint length + 1), and a tagged-field section closing every struct.
The only known tag is ``TxnIndexEmpty`` (tag 0, apiKeys 0 and 3, KIP-1058), written only when true.

The encoders are hand-written (not generated from the JSON specs) because these four messages are
tiny, fixed and on the restart path, where a struct-based reader is several times faster than a
generic one. Decoding is strict: a wrong frame version, an unknown apiKey/version, a truncated field
or trailing bytes raise ``ValueError`` naming the record and field; unknown tagged fields are
skipped, as Kafka's generated readers do.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from strata.protocol.records.varint import encode_uvarint
from strata.tiered.api import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    uuid_to_str,
)

__all__ = [
    "FRAME_VERSION", "REMOTE_LOG_SEGMENT_METADATA_API_KEY", "REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY",
    "REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY", "REMOTE_PARTITION_DELETE_API_KEY", "ByteReader",
    "RemoteLogMetadataSerde", "RemoteLogSegmentMetadataSnapshot", "decode_partition_delete_body",
    "decode_snapshot_body", "decode_snapshot_metadata", "deserialize", "encode_partition_delete_body",
    "encode_snapshot_body", "encode_uvarint", "format_record", "kafka_str", "serialize",
]

FRAME_VERSION = 1  # AbstractApiMessageSerde.DEFAULT_FRAME_VERSION (its javadoc says 0; the code writes 1)
RECORD_VERSION = 0  # all four records have validVersions "0"

REMOTE_LOG_SEGMENT_METADATA_API_KEY = 0
REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY = 1
REMOTE_PARTITION_DELETE_API_KEY = 2
REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY = 3

_RECORD_NAMES = {
    REMOTE_LOG_SEGMENT_METADATA_API_KEY: "RemoteLogSegmentMetadataRecord",
    REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY: "RemoteLogSegmentMetadataUpdateRecord",
    REMOTE_PARTITION_DELETE_API_KEY: "RemotePartitionDeleteMetadataRecord",
    REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY: "RemoteLogSegmentMetadataSnapshotRecord",
}

_TXN_INDEX_EMPTY_TAG = 0
_TAGS_NONE = b"\x00"
_TAGS_TXN_INDEX_EMPTY = b"\x01\x00\x01\x01"  # one tag: tag 0, size 1, value true
_MAX_STRING_BYTES = 0x7FFF  # Kafka rejects longer strings (Short.MAX_VALUE)

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_EPOCH_ENTRY = struct.Struct(">iq")  # LeaderEpoch int32, Offset int64 (then its tagged section)
_TP_TAIL = struct.Struct(">16si")  # TopicIdPartition: Id uuid, Partition int32 (after Name)
# RemoteLogSegmentMetadataRecord after RemoteLogSegmentId: StartOffset, EndOffset, BrokerId,
# MaxTimestampMs, EventTimestampMs.
_SEGMENT_FIXED = struct.Struct(">qqiqq")
# RemoteLogSegmentMetadataSnapshotRecord: SegmentId, StartOffset, EndOffset, BrokerId, MaxTimestampMs,
# EventTimestampMs.
_SNAPSHOT_FIXED = struct.Struct(">16sqqiqq")
_UPDATE_FIXED = struct.Struct(">iq")  # BrokerId, EventTimestampMs
_DELETE_FIXED = struct.Struct(">iqb")  # BrokerId, EventTimestampMs, RemotePartitionDeleteState


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's ``RemoteLogSegmentMetadataSnapshot``: a segment's metadata without its topic partition.

    Kafka never writes apiKey 3 to the topic any more (it belonged to the removed file snapshot of
    KAFKA-12802) but still decodes it; Strata reuses its body as the per-segment entry of the RLMM's
    local snapshot file, where the partition is implied by the enclosing section.
    """

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState
    custom_metadata: bytes | None = None
    txn_idx_empty: bool = False

    @classmethod
    def create(cls, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        return cls(md.remote_log_segment_id.id, md.start_offset, md.end_offset, md.max_timestamp_ms, md.broker_id,
                   md.event_timestamp_ms, md.segment_size_in_bytes, md.segment_leader_epochs, md.state,
                   md.custom_metadata, md.txn_idx_empty)

    def to_metadata(self, tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, self.segment_id), self.start_offset, self.end_offset, self.max_timestamp_ms,
            self.broker_id, self.event_timestamp_ms, self.segment_size_in_bytes, self.segment_leader_epochs,
            self.state, self.custom_metadata, self.txn_idx_empty)


# -- encoding ----------------------------------------------------------------------------------


def _compact_string(value: str, field: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > _MAX_STRING_BYTES:
        raise ValueError(f"{field} is {len(raw)} bytes long; the limit is {_MAX_STRING_BYTES}")
    return encode_uvarint(len(raw) + 1) + raw


def _compact_nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\x00"
    return encode_uvarint(len(value) + 1) + bytes(value)


def _topic_id_partition(tp: TopicIdPartition) -> bytes:
    return _compact_string(tp.topic, "TopicIdPartition.Name") + _TP_TAIL.pack(tp.topic_id.bytes, tp.partition) \
        + _TAGS_NONE


def _segment_id(segment_id: RemoteLogSegmentId) -> bytes:
    return _topic_id_partition(segment_id.topic_id_partition) + segment_id.id.bytes + _TAGS_NONE


def _leader_epochs(epochs: Mapping[int, int]) -> bytes:
    parts = [encode_uvarint(len(epochs) + 1)]
    for epoch, offset in sorted(epochs.items()):  # Kafka iterates a TreeMap: ascending epochs
        parts.append(_EPOCH_ENTRY.pack(epoch, offset))
        parts.append(_TAGS_NONE)
    return b"".join(parts)


def _segment_tail(size: int, custom: bytes | None, state: int, txn_idx_empty: bool) -> bytes:
    return _I32.pack(size) + _compact_nullable_bytes(custom) + _I8.pack(state) + \
        (_TAGS_TXN_INDEX_EMPTY if txn_idx_empty else _TAGS_NONE)


def _encode_segment(md: RemoteLogSegmentMetadata) -> bytes:
    return b"".join((
        _segment_id(md.remote_log_segment_id),
        _SEGMENT_FIXED.pack(md.start_offset, md.end_offset, md.broker_id, md.max_timestamp_ms,
                            md.event_timestamp_ms),
        _leader_epochs(md.segment_leader_epochs),
        _segment_tail(md.segment_size_in_bytes, md.custom_metadata, md.state, md.txn_idx_empty),
    ))


def _encode_update(update: RemoteLogSegmentMetadataUpdate) -> bytes:
    return b"".join((
        _segment_id(update.remote_log_segment_id),
        _UPDATE_FIXED.pack(update.broker_id, update.event_timestamp_ms),
        _compact_nullable_bytes(update.custom_metadata),
        _I8.pack(update.state),
        _TAGS_NONE,
    ))


def encode_partition_delete_body(md: RemotePartitionDeleteMetadata) -> bytes:
    """The apiKey-2 body alone (no framing)."""
    try:
        return _topic_id_partition(md.topic_id_partition) + \
            _DELETE_FIXED.pack(md.broker_id, md.event_timestamp_ms, md.state) + _TAGS_NONE
    except struct.error as e:
        raise ValueError(f"cannot serialize {md}: {e}") from None


def encode_snapshot_body(snap: RemoteLogSegmentMetadataSnapshot) -> bytes:
    """The apiKey-3 body alone (no framing): the per-segment entry of the RLMM snapshot file."""
    try:
        return b"".join((
            _SNAPSHOT_FIXED.pack(snap.segment_id.bytes, snap.start_offset, snap.end_offset, snap.broker_id,
                                 snap.max_timestamp_ms, snap.event_timestamp_ms),
            _leader_epochs(snap.segment_leader_epochs),
            _segment_tail(snap.segment_size_in_bytes, snap.custom_metadata, snap.state, snap.txn_idx_empty),
        ))
    except struct.error as e:
        raise ValueError(f"cannot serialize {snap}: {e}") from None


def _frame(api_key: int) -> bytes:
    return bytes((FRAME_VERSION, api_key, RECORD_VERSION))  # each value < 0x80: one uvarint byte


def serialize(md: RemoteLogMetadata | RemoteLogSegmentMetadataSnapshot) -> bytes:
    """The record value for ``md``; ``ValueError`` if a field does not fit its Kafka type."""
    try:
        if isinstance(md, RemoteLogSegmentMetadata):
            return _frame(REMOTE_LOG_SEGMENT_METADATA_API_KEY) + _encode_segment(md)
        if isinstance(md, RemoteLogSegmentMetadataUpdate):
            return _frame(REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY) + _encode_update(md)
    except struct.error as e:
        raise ValueError(f"cannot serialize {md}: {e}") from None
    if isinstance(md, RemotePartitionDeleteMetadata):
        return _frame(REMOTE_PARTITION_DELETE_API_KEY) + encode_partition_delete_body(md)
    if isinstance(md, RemoteLogSegmentMetadataSnapshot):
        return _frame(REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY) + encode_snapshot_body(md)
    raise ValueError(f"no RemoteLogMetadataTransform for {type(md).__name__}")


# -- decoding ----------------------------------------------------------------------------------


class ByteReader:
    """A cursor over one record (or file); every error names the record and the field being read."""

    __slots__ = ("data", "pos", "record")

    def __init__(self, data: bytes | bytearray | memoryview, record: str, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.record = record

    def error(self, field: str, problem: str) -> ValueError:
        return ValueError(f"malformed {self.record}: {field}: {problem} (at byte {self.pos})")

    def uvarint(self, field: str) -> int:
        data, pos = self.data, self.pos
        value = shift = 0
        for i in range(5):  # Kafka's readUnsignedVarint: at most 5 bytes (32 bits)
            if pos + i >= len(data):
                raise self.error(field, "truncated varint")
            b = data[pos + i]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos + i + 1
                if value > 0xFFFFFFFF:
                    raise self.error(field, "varint does not fit in 32 bits")
                return value
            shift += 7
        raise self.error(field, "varint longer than 5 bytes")

    def fixed(self, st: struct.Struct, field: str) -> tuple:
        pos = self.pos
        if pos + st.size > len(self.data):
            raise self.error(field, f"truncated: needs {st.size} bytes, {len(self.data) - pos} left")
        self.pos = pos + st.size
        return st.unpack_from(self.data, pos)

    def take(self, n: int, field: str) -> bytes:
        pos = self.pos
        if n > len(self.data) - pos:
            raise self.error(field, f"length {n} exceeds the {len(self.data) - pos} bytes left")
        self.pos = pos + n
        return bytes(self.data[pos:pos + n])

    def compact_string(self, field: str) -> str:
        n = self.uvarint(field)
        if n == 0:
            raise self.error(field, "non-nullable field was serialized as null")
        n -= 1
        if n > _MAX_STRING_BYTES:
            raise self.error(field, f"string length {n} exceeds {_MAX_STRING_BYTES}")
        raw = self.take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(field, f"not UTF-8: {e}") from None

    def compact_nullable_bytes(self, field: str) -> bytes | None:
        n = self.uvarint(field)
        return None if n == 0 else self.take(n - 1, field)

    def array_length(self, field: str) -> int:
        n = self.uvarint(field)
        if n == 0:
            raise self.error(field, "non-nullable array was serialized as null")
        return n - 1

    def tagged_fields(self, field: str, known_bool_tag: int | None = None) -> bool:
        """Skip a tagged-field section; returns the value of the one boolean tag this struct knows."""
        flag = False
        for _ in range(self.uvarint(field)):
            tag = self.uvarint(field)
            size = self.uvarint(field)
            if tag == known_bool_tag:
                if size != 1:
                    raise self.error(field, f"tagged boolean {tag} has size {size}, expected 1")
                flag = self.take(1, field)[0] != 0
            else:
                self.take(size, field)  # unknown tag: skipped, like Kafka's unknownTaggedFields
        return flag

    def finish(self) -> None:
        left = len(self.data) - self.pos
        if left:
            raise self.error("end", f"found {left} byte(s) of garbage after the record")


def _read_topic_id_partition(r: ByteReader) -> TopicIdPartition:
    name = r.compact_string("TopicIdPartition.Name")
    topic_id, partition = r.fixed(_TP_TAIL, "TopicIdPartition.Id/Partition")
    r.tagged_fields("TopicIdPartition._tagged")
    return TopicIdPartition(uuid.UUID(bytes=topic_id), name, partition)


def _read_segment_id(r: ByteReader) -> RemoteLogSegmentId:
    tp = _read_topic_id_partition(r)
    segment_id = uuid.UUID(bytes=r.take(16, "RemoteLogSegmentId.Id"))
    r.tagged_fields("RemoteLogSegmentId._tagged")
    return RemoteLogSegmentId(tp, segment_id)


def _read_leader_epochs(r: ByteReader) -> dict[int, int]:
    epochs: dict[int, int] = {}
    for _ in range(r.array_length("SegmentLeaderEpochs")):
        epoch, offset = r.fixed(_EPOCH_ENTRY, "SegmentLeaderEpochs.LeaderEpoch/Offset")
        r.tagged_fields("SegmentLeaderEpochs._tagged")
        epochs[epoch] = offset  # Kafka builds a map: a repeated epoch keeps the last offset
    return epochs


def _segment_state(r: ByteReader, value: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(value)
    except ValueError:
        raise r.error("RemoteLogSegmentState", f"unknown state id {value}") from None


def _read_segment_tail(r: ByteReader) -> tuple[int, bytes | None, RemoteLogSegmentState, bool]:
    (size,) = r.fixed(_I32, "SegmentSizeInBytes")
    custom = r.compact_nullable_bytes("CustomMetadata")
    (state,) = r.fixed(_I8, "RemoteLogSegmentState")
    txn_idx_empty = r.tagged_fields("_tagged", _TXN_INDEX_EMPTY_TAG)
    return size, custom, _segment_state(r, state), txn_idx_empty


def _build(r: ByteReader, what: type, *args: object) -> object:
    try:
        return what(*args)
    except ValueError as e:  # the API's own invariants (empty epochs, end < start, ...)
        raise ValueError(f"malformed {r.record}: {e}") from None


def _read_segment(r: ByteReader) -> RemoteLogSegmentMetadata:
    segment_id = _read_segment_id(r)
    start, end, broker_id, max_ts, event_ts = r.fixed(_SEGMENT_FIXED, "StartOffset..EventTimestampMs")
    epochs = _read_leader_epochs(r)
    size, custom, state, txn_idx_empty = _read_segment_tail(r)
    return _build(r, RemoteLogSegmentMetadata, segment_id, start, end, max_ts, broker_id, event_ts, size,  # type: ignore[return-value]
                  epochs, state, custom, txn_idx_empty)


def _read_update(r: ByteReader) -> RemoteLogSegmentMetadataUpdate:
    segment_id = _read_segment_id(r)
    broker_id, event_ts = r.fixed(_UPDATE_FIXED, "BrokerId/EventTimestampMs")
    custom = r.compact_nullable_bytes("CustomMetadata")
    (state,) = r.fixed(_I8, "RemoteLogSegmentState")
    r.tagged_fields("_tagged")
    return RemoteLogSegmentMetadataUpdate(segment_id, event_ts, custom, _segment_state(r, state), broker_id)


def _read_partition_delete(r: ByteReader) -> RemotePartitionDeleteMetadata:
    tp = _read_topic_id_partition(r)
    broker_id, event_ts, state = r.fixed(_DELETE_FIXED, "BrokerId/EventTimestampMs/RemotePartitionDeleteState")
    r.tagged_fields("_tagged")
    try:
        delete_state = RemotePartitionDeleteState(state)
    except ValueError:
        raise r.error("RemotePartitionDeleteState", f"unknown state id {state}") from None
    return RemotePartitionDeleteMetadata(tp, delete_state, event_ts, broker_id)


def _read_snapshot(r: ByteReader) -> RemoteLogSegmentMetadataSnapshot:
    segment_id, start, end, broker_id, max_ts, event_ts = r.fixed(_SNAPSHOT_FIXED, "SegmentId..EventTimestampMs")
    epochs = _read_leader_epochs(r)
    size, custom, state, txn_idx_empty = _read_segment_tail(r)
    if not epochs:
        raise r.error("SegmentLeaderEpochs", "must not be empty")
    return RemoteLogSegmentMetadataSnapshot(uuid.UUID(bytes=segment_id), start, end, max_ts, broker_id, event_ts,
                                            size, dict(sorted(epochs.items())), state, custom, txn_idx_empty)


_READERS = {
    REMOTE_LOG_SEGMENT_METADATA_API_KEY: _read_segment,
    REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY: _read_update,
    REMOTE_PARTITION_DELETE_API_KEY: _read_partition_delete,
    REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY: _read_snapshot,
}


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata | RemoteLogSegmentMetadataSnapshot:
    """Decode one record value; ``ValueError`` on anything Kafka's serde would reject."""
    if data is None:
        raise ValueError("malformed remote log metadata: the record value is null")
    if len(data) > 3 and data[0] == FRAME_VERSION and data[2] == RECORD_VERSION:
        fast = _FAST_READERS.get(data[1])
        if fast is not None:
            try:
                return fast(data)
            except _FAST_ERRORS:
                pass  # the generic reader decides
    return _deserialize_generic(data)


def _deserialize_generic(data: bytes | bytearray | memoryview) -> RemoteLogMetadata | RemoteLogSegmentMetadataSnapshot:
    r = ByteReader(data, "remote log metadata record")
    frame_version = r.uvarint("frame version")
    if frame_version == 0:
        raise r.error("frame version", "frame version 0 is not supported (KRaft 2.8 preview format)")
    if frame_version != FRAME_VERSION:
        raise r.error("frame version", f"unsupported frame version {frame_version}, expected {FRAME_VERSION}")
    api_key = r.uvarint("apiKey")
    reader = _READERS.get(api_key)
    if reader is None:
        raise r.error("apiKey", f"no RemoteLogMetadataTransform for apiKey {api_key}")
    r.record = _RECORD_NAMES[api_key]
    version = r.uvarint("version")
    if version != RECORD_VERSION:
        raise r.error("version", f"unsupported version {version} (valid versions: 0)")
    md = reader(r)
    r.finish()
    return md


def decode_snapshot_body(data: bytes | bytearray | memoryview, start: int = 0,
                         end: int | None = None) -> RemoteLogSegmentMetadataSnapshot:
    """The apiKey-3 body in ``data[start:end]`` (no framing); it must fill the range exactly."""
    view = memoryview(data)[start:end] if (start or end is not None) else data
    r = ByteReader(view, _RECORD_NAMES[REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY])
    snap = _read_snapshot(r)
    r.finish()
    return snap


# -- fast paths ------------------------------------------------------------------------------------
#
# Restart time is spent decoding (the topic replay, the RLMM snapshot), so the shape every Strata and
# Kafka writer produces - one-byte varints, no tagged fields but TxnIndexEmpty - is decoded with a few
# ``unpack_from`` calls. Anything else (or anything wrong) raises _SlowPath or an indexing/struct
# error, and the record is decoded again by the strict generic reader above, which returns the same
# object or raises the proper ValueError: the fast paths never decide what is malformed.


class _SlowPath(Exception):
    """Not in the fast path's shape: decode with the generic reader."""


_EPOCH_ENTRY_UNTAGGED = struct.Struct(">iqB")  # an epoch entry whose tagged section is empty (count byte 0)
_SIZE_AND_NULL_CUSTOM = struct.Struct(">iBb")  # SegmentSizeInBytes, CustomMetadata null (0), RemoteLogSegmentState
_STATES = tuple(RemoteLogSegmentState)
_SNAPSHOT_FIXED_SIZE = _SNAPSHOT_FIXED.size
_SEGMENT_FIXED_SIZE = _SEGMENT_FIXED.size
_UPDATE_FIXED_SIZE = _UPDATE_FIXED.size
_TXN_TAG_PREFIX = _TAGS_TXN_INDEX_EMPTY[:3]
_FAST_ERRORS = (_SlowPath, IndexError, struct.error, ValueError)
# TopicIdPartition by its encoded bytes: thousands of records share a few partitions, and sharing
# one object per partition also saves the memory of a UUID and a str per cached segment.
_TP_MEMO: dict[bytes, TopicIdPartition] = {}
_TP_MEMO_MAX = 65_536


def _fast_segment_id(data: bytes | bytearray | memoryview, pos: int) -> tuple[RemoteLogSegmentId, int]:
    name_len = data[pos] - 1
    if not 0 <= name_len < 0x7F:
        raise _SlowPath
    tp_end = pos + 1 + name_len + _TP_TAIL.size
    if data[tp_end] or data[tp_end + 17]:  # the TopicIdPartition and RemoteLogSegmentId tag sections
        raise _SlowPath
    key = bytes(data[pos:tp_end])
    tp = _TP_MEMO.get(key)
    if tp is None:
        topic_id, partition = _TP_TAIL.unpack_from(key, 1 + name_len)
        tp = TopicIdPartition(uuid.UUID(bytes=topic_id), key[1:1 + name_len].decode("utf-8"), partition)
        if len(_TP_MEMO) < _TP_MEMO_MAX:
            _TP_MEMO[key] = tp
    return RemoteLogSegmentId(tp, uuid.UUID(bytes=bytes(data[tp_end + 1:tp_end + 17]))), tp_end + 18


def _fast_epochs_and_tail(data: bytes | bytearray | memoryview, pos: int,
                          end: int) -> tuple[dict[int, int], int, bytes | None, RemoteLogSegmentState, bool]:
    """SegmentLeaderEpochs .. the closing tagged section, which must end exactly at ``end``."""
    n = data[pos] - 1
    pos += 1
    if not 0 < n < 0x7F:
        raise _SlowPath
    epochs = {}
    for _ in range(n):
        epoch, offset, tags = _EPOCH_ENTRY_UNTAGGED.unpack_from(data, pos)
        if tags:
            raise _SlowPath
        epochs[epoch] = offset
        pos += 13
    custom_len = data[pos + 4]
    if custom_len == 0:
        size, _, state = _SIZE_AND_NULL_CUSTOM.unpack_from(data, pos)
        custom = None
        pos += 6
    elif custom_len < 0x80:
        (size,) = _I32.unpack_from(data, pos)
        custom = bytes(data[pos + 5:pos + 4 + custom_len])
        pos += 4 + custom_len
        (state,) = _I8.unpack_from(data, pos)
        pos += 1
        if len(custom) != custom_len - 1:
            raise _SlowPath
    else:
        raise _SlowPath
    if pos + 1 == end and data[pos] == 0:
        txn_idx_empty = False
    elif pos + 4 == end and bytes(data[pos:pos + 3]) == _TXN_TAG_PREFIX:
        txn_idx_empty = data[pos + 3] != 0
    else:
        raise _SlowPath
    if not 0 <= state < len(_STATES) or len(epochs) != n:
        raise _SlowPath
    return epochs, size, custom, _STATES[state], txn_idx_empty


def _fast_segment(data: bytes | bytearray | memoryview) -> RemoteLogSegmentMetadata:
    segment_id, pos = _fast_segment_id(data, 3)
    start_offset, end_offset, broker_id, max_ts, event_ts = _SEGMENT_FIXED.unpack_from(data, pos)
    epochs, size, custom, state, txn_idx_empty = _fast_epochs_and_tail(data, pos + _SEGMENT_FIXED_SIZE, len(data))
    return RemoteLogSegmentMetadata(segment_id, start_offset, end_offset, max_ts, broker_id, event_ts, size, epochs,
                                    state, custom, txn_idx_empty)


def _fast_update(data: bytes | bytearray | memoryview) -> RemoteLogSegmentMetadataUpdate:
    segment_id, pos = _fast_segment_id(data, 3)
    broker_id, event_ts = _UPDATE_FIXED.unpack_from(data, pos)
    pos += _UPDATE_FIXED_SIZE
    custom_len = data[pos]
    if custom_len == 0:
        custom = None
    elif custom_len < 0x80:
        custom = bytes(data[pos + 1:pos + custom_len])
        if len(custom) != custom_len - 1:
            raise _SlowPath
    else:
        raise _SlowPath
    pos += max(custom_len, 1)
    state = data[pos]
    if state >= len(_STATES) or data[pos + 1] or pos + 2 != len(data):
        raise _SlowPath
    return RemoteLogSegmentMetadataUpdate(segment_id, event_ts, custom, _STATES[state], broker_id)


_FAST_READERS = {REMOTE_LOG_SEGMENT_METADATA_API_KEY: _fast_segment,
                 REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY: _fast_update}


def decode_snapshot_metadata(data: bytes | bytearray | memoryview, start: int, end: int,
                             tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
    """The apiKey-3 body in ``data[start:end]`` as the RemoteLogSegmentMetadata of ``tp`` (the RLMM snapshot)."""
    try:
        segment_id, start_offset, end_offset, broker_id, max_ts, event_ts = _SNAPSHOT_FIXED.unpack_from(data, start)
        epochs, size, custom, state, txn_idx_empty = _fast_epochs_and_tail(data, start + _SNAPSHOT_FIXED_SIZE, end)
        return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, uuid.UUID(bytes=segment_id)), start_offset, end_offset,
                                        max_ts, broker_id, event_ts, size, epochs, state, custom, txn_idx_empty)
    except _FAST_ERRORS:
        return decode_snapshot_body(data, start, end).to_metadata(tp)


def decode_partition_delete_body(data: bytes | bytearray | memoryview) -> RemotePartitionDeleteMetadata:
    r = ByteReader(data, _RECORD_NAMES[REMOTE_PARTITION_DELETE_API_KEY])
    md = _read_partition_delete(r)
    r.finish()
    return md


class RemoteLogMetadataSerde:
    """Kafka's class name, for readers cross-referencing; the module functions do the work."""

    serialize = staticmethod(serialize)
    deserialize = staticmethod(deserialize)


# -- RemoteLogMetadataFormatter --------------------------------------------------------------------


def _optional_custom(value: bytes | None) -> str:
    return "Optional.empty" if value is None else f"Optional[CustomMetadata{{{len(value)} bytes}}]"


def _epochs_str(epochs: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{e}={o}" for e, o in epochs.items()) + "}"


def _segment_id_str(segment_id: RemoteLogSegmentId) -> str:
    return f"RemoteLogSegmentId{{topicIdPartition={segment_id.topic_id_partition}, id={uuid_to_str(segment_id.id)}}}"


def kafka_str(md: RemoteLogMetadata | RemoteLogSegmentMetadataSnapshot) -> str:
    """The Java ``toString()`` of the metadata object, so tool output matches Kafka's."""
    if isinstance(md, RemoteLogSegmentMetadata):
        return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_segment_id_str(md.remote_log_segment_id)}, "
                f"startOffset={md.start_offset}, endOffset={md.end_offset}, brokerId={md.broker_id}, "
                f"maxTimestampMs={md.max_timestamp_ms}, eventTimestampMs={md.event_timestamp_ms}, "
                f"segmentLeaderEpochs={_epochs_str(md.segment_leader_epochs)}, "
                f"segmentSizeInBytes={md.segment_size_in_bytes}, "
                f"customMetadata={_optional_custom(md.custom_metadata)}, "
                f"state={md.state.name}, txnIdxEmpty={'true' if md.txn_idx_empty else 'false'}}}")
    if isinstance(md, RemoteLogSegmentMetadataUpdate):
        return (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_segment_id_str(md.remote_log_segment_id)}, "
                f"customMetadata={_optional_custom(md.custom_metadata)}, state={md.state.name}, "
                f"eventTimestampMs={md.event_timestamp_ms}, brokerId={md.broker_id}}}")
    if isinstance(md, RemotePartitionDeleteMetadata):
        return (f"RemotePartitionDeleteMetadata{{topicPartition={md.topic_id_partition}, state={md.state.name}, "
                f"eventTimestampMs={md.event_timestamp_ms}, brokerId={md.broker_id}}}")
    if isinstance(md, RemoteLogSegmentMetadataSnapshot):
        return (f"RemoteLogSegmentMetadataSnapshot{{segmentId={uuid_to_str(md.segment_id)}, "
                f"startOffset={md.start_offset}, endOffset={md.end_offset}, maxTimestampMs={md.max_timestamp_ms}, "
                f"segmentLeaderEpochs={_epochs_str(md.segment_leader_epochs)}, "
                f"segmentSizeInBytes={md.segment_size_in_bytes}, "
                f"customMetadata={_optional_custom(md.custom_metadata)}, state={md.state.name}}}")
    raise ValueError(f"not remote log metadata: {type(md).__name__}")


def format_record(partition: int, offset: int, md: RemoteLogMetadata | RemoteLogSegmentMetadataSnapshot | bytes) -> str:
    """One line of Kafka's ``RemoteLogMetadataFormatter`` (without its trailing newline).

    ``md`` may be the raw record value, which is decoded first, as the console formatter does.
    """
    if isinstance(md, bytes | bytearray | memoryview):
        md = deserialize(md)
    return f"partition: {partition}, offset: {offset}, value: {kafka_str(md)}"
