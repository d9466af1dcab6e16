"""The records of ``__share_group_state``, byte for byte as Apache Kafka's share coordinator writes them.

kio has no classes for these, so they are encoded here by hand from Kafka's schemas
``share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,Value}.json`` (branch 4.2).
The framing is ``coordinator-common``'s ``CoordinatorRecordSerde`` (as ``ShareCoordinatorRecordSerde``), the
same as the group records of ``__consumer_offsets``:

* key = int16 **record type**, then the key struct at version 0, not flexible: GroupId (int16-length
  string), TopicId (uuid, 16 bytes), Partition (int32). Type 0 is ShareSnapshot, type 1 ShareUpdate;
* value = int16 value version (0), then the flexible v0 struct: compact arrays, a tagged-field section at
  the end of the value and of every ``StateBatch``;
* a null value is a tombstone (the share-partition's state is deleted).

``ShareSnapshotValue`` v0: SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32, StartOffset int64,
CreateTimestamp int64, WriteTimestamp int64, StateBatches[FirstOffset int64, LastOffset int64,
DeliveryState int8 (0 available, 2 acked, 4 archived), DeliveryCount int16].

``ShareUpdateValue`` v0: SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64 (-1 = unchanged),
StateBatches[same].

Both carry tag 0 ``DeliveryCompleteCount`` int32 (default -1, added in 4.2 by KIP-1226). The schema lists it
between StartOffset and the next field, but a tagged field lives in the tagged-field section at the end of
the struct, after StateBatches; it is written only when it is not -1, so a 4.1 reader (which skips it as an
unknown tag) and a 4.2 reader agree on the other fields.

Decoders skip tagged fields they do not know, read a value version above 0 as v0 and ignore content after
it, and raise :class:`CorruptRecordError` on malformed input. Encoders raise ValueError for values the schema
cannot hold.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import ClassVar

from strata.errors import CorruptRecordError
from strata.protocol.message_fields import I32, MessageReader, MessageWriter

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
VALUE_VERSION = 0
SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
TAG_DELIVERY_COMPLETE_COUNT = 0
NO_DELIVERY_COMPLETE_COUNT = -1  # the tagged field's default

# DeliveryState values of a StateBatch
AVAILABLE = 0
ACKNOWLEDGED = 2
ARCHIVED = 4


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    RECORD_TYPE: ClassVar[int] = SHARE_SNAPSHOT
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    RECORD_TYPE: ClassVar[int] = SHARE_UPDATE
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    RECORD_TYPE: ClassVar[int] = SHARE_SNAPSHOT
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT  # tag 0


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    RECORD_TYPE: ClassVar[int] = SHARE_UPDATE
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: the start offset is not being updated
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = NO_DELIVERY_COMPLETE_COUNT  # tag 0


ShareKey = ShareSnapshotKey | ShareUpdateKey
ShareValue = ShareSnapshotValue | ShareUpdateValue
_KEYS: dict[int, type[ShareSnapshotKey] | type[ShareUpdateKey]] = {
    SHARE_SNAPSHOT: ShareSnapshotKey, SHARE_UPDATE: ShareUpdateKey}
_VALUE_NAMES = {SHARE_SNAPSHOT: "ShareSnapshotValue", SHARE_UPDATE: "ShareUpdateValue"}


# -- keys -----------------------------------------------------------------------------------------

def encode_key(key: ShareKey) -> bytes:
    """int16 record type, then GroupId, TopicId, Partition (v0, not flexible)."""
    if key.group_id is None:
        raise ValueError("GroupId is not nullable")
    w = MessageWriter()
    try:
        w.int16(key.RECORD_TYPE)
        w.string(key.group_id)
        w.uuid(key.topic_id)
        w.int32(key.partition)
    except struct.error as e:
        raise ValueError(f"{type(key).__name__} field out of range: {e}") from None
    return bytes(w.out)


def decode_key(data: bytes | bytearray | memoryview) -> ShareKey | None:
    """The key, or None for a record type this module does not handle."""
    r = MessageReader(data, "__share_group_state key")
    record_type = r.int16()
    cls = _KEYS.get(record_type)
    if cls is None:
        return None
    group_id = r.string()
    topic_id = r.uuid()
    partition = r.int32()
    r.done()
    return cls(group_id, topic_id, partition)


# -- values ---------------------------------------------------------------------------------------

def encode_value(value: ShareValue) -> bytes:
    """int16 value version 0, then the flexible v0 struct (a tombstone is a null value, not this)."""
    w = MessageWriter(flexible=True)
    try:
        w.int16(VALUE_VERSION)
        if isinstance(value, ShareSnapshotValue):
            w.int32(value.snapshot_epoch)
            w.int32(value.state_epoch)
            w.int32(value.leader_epoch)
            w.int64(value.start_offset)
            w.int64(value.create_timestamp)
            w.int64(value.write_timestamp)
        elif isinstance(value, ShareUpdateValue):
            w.int32(value.snapshot_epoch)
            w.int32(value.leader_epoch)
            w.int64(value.start_offset)
        else:
            raise TypeError(f"not a share-coordinator record value: {value!r}")
        w.array_len(len(value.state_batches))
        for b in value.state_batches:
            w.int64(b.first_offset)
            w.int64(b.last_offset)
            w.int8(b.delivery_state)
            w.int16(b.delivery_count)
            w.tags()
        w.tagged_fields([] if value.delivery_complete_count == NO_DELIVERY_COMPLETE_COUNT
                        else [(TAG_DELIVERY_COMPLETE_COUNT, I32.pack(value.delivery_complete_count))])
    except struct.error as e:
        raise ValueError(f"{type(value).__name__} field out of range: {e}") from None
    return bytes(w.out)


def decode_value(record_type: int, data: bytes | bytearray | memoryview) -> ShareValue:
    """The non-null value of a record of ``record_type`` (the ``RECORD_TYPE`` of its decoded key).

    ValueError for a record type this module does not handle; CorruptRecordError for malformed bytes.
    """
    what = _VALUE_NAMES.get(record_type)
    if what is None:
        raise ValueError(f"no share-coordinator record of type {record_type}")
    r = MessageReader(data, what)
    version = r.int16()
    if version < 0:
        raise CorruptRecordError(f"{what}: negative version {version}")
    r.flexible = True
    snapshot_epoch = r.int32()
    state_epoch = r.int32() if record_type == SHARE_SNAPSHOT else 0
    leader_epoch = r.int32()
    start_offset = r.int64()
    create_timestamp = write_timestamp = 0
    if record_type == SHARE_SNAPSHOT:
        create_timestamp = r.int64()
        write_timestamp = r.int64()
    batches = []
    for _ in range(r.array_len(20)):  # two int64s, int8, int16, tag count
        first_offset = r.int64()
        last_offset = r.int64()
        delivery_state = r.int8()
        delivery_count = r.int16()
        r.skip_tags()
        batches.append(StateBatch(first_offset, last_offset, delivery_state, delivery_count))
    delivery_complete_count = NO_DELIVERY_COMPLETE_COUNT
    for tag, field in r.tagged_fields():
        if tag == TAG_DELIVERY_COMPLETE_COUNT:
            if field.remaining() != 4:
                raise CorruptRecordError(f"{what}: tagged int32 {tag} of {field.remaining()} bytes", r.pos)
            delivery_complete_count = field.int32()
        # any other tag is a field from a newer Kafka: skipped, as Kafka's reader does
    if version <= VALUE_VERSION:
        r.done()  # a newer version may append fields we do not know: ignore them
    if record_type == SHARE_SNAPSHOT:
        return ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start_offset, create_timestamp,
                                  write_timestamp, tuple(batches), delivery_complete_count)
    return ShareUpdateValue(snapshot_epoch, leader_epoch, start_offset, tuple(batches), delivery_complete_count)
