"""The KIP-848 consumer-group and KIP-932 share-group records of ``__consumer_offsets``, byte for byte.

Kafka 4.1/4.2 write these next to the classic records of :mod:`strata.coordinator.group.records`; kio has
no classes for them, so they are encoded here by hand from Kafka's schemas
``group-coordinator/src/main/resources/common/message/ConsumerGroup*{Key,Value}.json`` and
``ShareGroup*{Key,Value}.json`` (branch 4.2; the 4.1 files differ only in comments). The framing is
``coordinator-common``'s ``CoordinatorRecordSerde`` with ``MessageUtil.toCoordinatorTypePrefixedBytes``:

* key = int16 **record type** (the schema's ``apiKey``), then the key struct at version 0. Keys are not
  flexible: int16-length strings, a uuid is its 16 bytes, no tagged-field section;
* value = int16 value version (0 for all of these), then the struct. Values are flexible ("0+"): compact
  strings/arrays/bytes (unsigned varint length + 1, 0 = null) and a tagged-field section (unsigned varint
  count, then tag, size, data in ascending tag order) at the end of every struct, nested ones included;
* a null value is a tombstone (the caller's concern: there is nothing to decode).

Record types (0-2 are the classic records, 9 was 4.0's ShareGroupPartitionMetadata, 17-23 are streams
groups; :func:`decode_key` returns None for all of those):

====  ======================================  =====================  ==============================================
type  record                                  key                    value v0
====  ======================================  =====================  ==============================================
3     ConsumerGroupMetadata                   GroupId                Epoch int32; tag 0 MetadataHash int64 (def. 0)
4     ConsumerGroupPartitionMetadata          GroupId                Topics[TopicId, TopicName, NumPartitions,
                                                                     PartitionMetadata[Partition, Racks[]]]
5     ConsumerGroupMemberMetadata             GroupId, MemberId      InstanceId?, RackId?, ClientId, ClientHost,
                                                                     SubscribedTopicNames[], SubscribedTopicRegex?,
                                                                     RebalanceTimeoutMs, ServerAssignor?; tag 0
                                                                     ClassicMemberMetadata? {SessionTimeoutMs,
                                                                     SupportedProtocols[Name, Metadata bytes]}
6     ConsumerGroupTargetAssignmentMetadata   GroupId                AssignmentEpoch int32
7     ConsumerGroupTargetAssignmentMember     GroupId, MemberId      TopicPartitions[TopicId, Partitions[]]
8     ConsumerGroupCurrentMemberAssignment    GroupId, MemberId      MemberEpoch, PreviousMemberEpoch, State int8,
                                                                     AssignedPartitions[], PartitionsPendingRevocation[]
10    ShareGroupMemberMetadata                GroupId, MemberId      RackId?, ClientId, ClientHost,
                                                                     SubscribedTopicNames[]
11    ShareGroupMetadata                      GroupId                Epoch int32, MetadataHash int64 (not tagged)
12    ShareGroupTargetAssignmentMetadata      GroupId                AssignmentEpoch int32
13    ShareGroupTargetAssignmentMember        GroupId, MemberId      TopicPartitions[TopicId, Partitions[]]
14    ShareGroupCurrentMemberAssignment       GroupId, MemberId      MemberEpoch, PreviousMemberEpoch, State int8,
                                                                     AssignedPartitions[]
15    ShareGroupStatePartitionMetadata        GroupId                InitializingTopics[TopicId, TopicName,
                                                                     Partitions[]], InitializedTopics[same],
                                                                     DeletingTopics[TopicId, TopicName]
16    ConsumerGroupRegularExpression          GroupId, RegularExpr.  Topics[], Version int64, Timestamp int64
====  ======================================  =====================  ==============================================

Tagged fields follow Kafka's generated writer: a scalar is written only when it differs from its default. The
nullable struct ``ClassicMemberMetadata`` is written only when not null, and then its data starts with an
unsigned varint presence marker 1 (Kafka's reader takes 0 as null), so its size is the struct's size + 1.
Decoders skip tagged fields they do not know, at every level (4.3 adds tag 0 ``AssignmentTimestamp`` to types 6
and 12: dropped). 4.3's tag 0 ``AssignmentEpochs`` in the ``TopicPartitions`` of type 8 (KIP-1251) is read and
written: Strata fences zombie commits with it as 4.3 does. A value
version above 0 is read as v0 and any content after it ignored, as the classic decoder does.

Malformed input (truncation, negative or oversized lengths, null where the schema forbids it, a known tagged
field of the wrong size) is a :class:`CorruptRecordError`. Encoders raise ValueError for values the schema
cannot hold (out-of-range integers, None for a non-nullable string).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from strata.errors import CorruptRecordError
from strata.protocol.message_fields import I64, MessageReader, MessageWriter

VALUE_VERSION = 0  # every value schema here has validVersions "0"

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
CONSUMER_GROUP_REGULAR_EXPRESSION = 16

# Tagged fields: ConsumerGroupMetadataValue tag 0 MetadataHash (default 0, added in 4.1 by KIP-1101),
# ConsumerGroupMemberMetadataValue tag 0 ClassicMemberMetadata (default null).
TAG_METADATA_HASH = 0
TAG_CLASSIC_MEMBER_METADATA = 0


# -- shared structures ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """``TopicPartition(s)`` of types 7, 8, 13 and 14: a topic id and partition indexes; for type 8 also
    Kafka 4.3's tagged ``AssignmentEpochs`` (KIP-1251: the epoch each partition was assigned at, as long as
    ``partitions``; None when not written)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...] = ()
    assignment_epochs: tuple[int, ...] | None = None


# -- keys -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_PARTITION_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_MEMBER_METADATA
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_MEMBER_METADATA
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_TARGET_ASSIGNMENT_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_STATE_PARTITION_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_REGULAR_EXPRESSION
    group_id: str
    regular_expression: str


ModernKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
             | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
             | ConsumerGroupCurrentMemberAssignmentKey | ShareGroupMemberMetadataKey | ShareGroupMetadataKey
             | ShareGroupTargetAssignmentMetadataKey | ShareGroupTargetAssignmentMemberKey
             | ShareGroupCurrentMemberAssignmentKey | ShareGroupStatePartitionMetadataKey
             | ConsumerGroupRegularExpressionKey)

_GROUP_KEY_CLASSES = (ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey,
                      ConsumerGroupTargetAssignmentMetadataKey, ShareGroupMetadataKey,
                      ShareGroupTargetAssignmentMetadataKey, ShareGroupStatePartitionMetadataKey)
_MEMBER_KEY_CLASSES = (ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                       ConsumerGroupCurrentMemberAssignmentKey, ShareGroupMemberMetadataKey,
                       ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey)
# key constructors by record type, by shape: (GroupId) or (GroupId, MemberId / RegularExpression)
_ONE_STRING_KEYS: dict[int, Callable[[str], ModernKey]] = {cls.RECORD_TYPE: cls for cls in _GROUP_KEY_CLASSES}
_TWO_STRING_KEYS: dict[int, Callable[[str, str], ModernKey]] = {
    cls.RECORD_TYPE: cls for cls in (*_MEMBER_KEY_CLASSES, ConsumerGroupRegularExpressionKey)}


# -- values ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_METADATA
    epoch: int
    metadata_hash: int = 0  # tag 0; 0 means "not computed" (a 4.0 record, or no subscribed topics)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    racks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...] = ()  # unused since 4.0, written empty


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Deprecated by KIP-1101 in 4.1: still read, tombstoned by Kafka at the group's next epoch bump."""

    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_PARTITION_METADATA
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Set for a classic-protocol member of a consumer group (a mixed group); None for KIP-848 members."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_MEMBER_METADATA
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tag 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    topic_partitions: tuple[TopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """``state`` is Kafka's ``MemberState`` byte: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS,
    127 UNKNOWN (kept as a plain int: the record layer does not judge it)."""

    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...] = ()
    partitions_pending_revocation: tuple[TopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_MEMBER_METADATA
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_METADATA
    epoch: int
    metadata_hash: int  # a regular field here, unlike ConsumerGroupMetadataValue's tagged one


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_TARGET_ASSIGNMENT_METADATA
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER
    topic_partitions: tuple[TopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    RECORD_TYPE: ClassVar[int] = SHARE_GROUP_STATE_PARTITION_METADATA
    initializing_topics: tuple[TopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[TopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[TopicInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    RECORD_TYPE: ClassVar[int] = CONSUMER_GROUP_REGULAR_EXPRESSION
    topics: tuple[str, ...]
    version: int  # the metadata image version the regex was resolved against
    timestamp: int


ModernValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue | ConsumerGroupMemberMetadataValue
               | ConsumerGroupTargetAssignmentMetadataValue | ConsumerGroupTargetAssignmentMemberValue
               | ConsumerGroupCurrentMemberAssignmentValue | ShareGroupMemberMetadataValue | ShareGroupMetadataValue
               | ShareGroupTargetAssignmentMetadataValue | ShareGroupTargetAssignmentMemberValue
               | ShareGroupCurrentMemberAssignmentValue | ShareGroupStatePartitionMetadataValue
               | ConsumerGroupRegularExpressionValue)

RECORD_TYPES = frozenset(_ONE_STRING_KEYS) | frozenset(_TWO_STRING_KEYS)


# -- field helpers --------------------------------------------------------------------------------

def _required(v: str | None, what: str) -> str:
    if v is None:
        raise ValueError(f"{what} is not nullable")
    return v


def _write_int32s(w: MessageWriter, values: tuple[int, ...]) -> None:
    w.array_len(len(values))
    for v in values:
        w.int32(v)


def _read_int32s(r: MessageReader) -> tuple[int, ...]:
    n = r.array_len(4)
    return tuple(int(i) for i in struct.unpack(f">{n}i", r.take(4 * n)))


def _write_strings(w: MessageWriter, values: tuple[str, ...], what: str) -> None:
    w.array_len(len(values))
    for v in values:
        w.string(_required(v, what))


def _read_strings(r: MessageReader) -> tuple[str, ...]:
    return tuple(r.string() for _ in range(r.array_len(1)))


def _read_tagged_int64(field: MessageReader) -> int:
    if field.remaining() != 8:
        raise CorruptRecordError(f"{field.what}: int64 of {field.remaining()} bytes", field.pos)
    return field.int64()


TAG_ASSIGNMENT_EPOCHS = 0  # in type 8's TopicPartitions (Kafka 4.3, KIP-1251)


def _write_topic_partitions(w: MessageWriter, values: tuple[TopicPartitions, ...]) -> None:
    w.array_len(len(values))
    for tp in values:
        w.uuid(tp.topic_id)
        _write_int32s(w, tp.partitions)
        if tp.assignment_epochs is None:
            w.tags()
            continue
        if len(tp.assignment_epochs) != len(tp.partitions):
            raise ValueError("AssignmentEpochs must be as long as Partitions")
        field = MessageWriter(flexible=True)
        _write_int32s(field, tp.assignment_epochs)
        w.tagged_fields([(TAG_ASSIGNMENT_EPOCHS, bytes(field.out))])


def _read_topic_partitions(r: MessageReader, epochs: bool = False) -> tuple[TopicPartitions, ...]:
    """``epochs``: the struct of type 8, whose tag 0 is AssignmentEpochs (skipped elsewhere, as unknown)."""
    out = []
    for _ in range(r.array_len(18)):  # uuid, compact array count, tag count
        topic_id = r.uuid()
        partitions = _read_int32s(r)
        assignment_epochs = None
        for tag, field in r.tagged_fields():
            if epochs and tag == TAG_ASSIGNMENT_EPOCHS:
                n = field.nullable_array_len(4)
                if n is not None:
                    assignment_epochs = tuple(int(i) for i in struct.unpack(f">{n}i", field.take(4 * n)))
                    if n != len(partitions):
                        raise CorruptRecordError(f"{r.what}: {n} AssignmentEpochs for {len(partitions)} "
                                                 "partitions", r.pos)
        out.append(TopicPartitions(topic_id, partitions, assignment_epochs))
    return tuple(out)


def _encode_classic_member_metadata(v: ClassicMemberMetadata) -> bytes:
    w = MessageWriter(flexible=True)
    w.uvarint(1)  # presence marker of a nullable struct in a tagged field (Kafka reads 0 as null)
    w.int32(v.session_timeout_ms)
    w.array_len(len(v.supported_protocols))
    for p in v.supported_protocols:
        w.string(_required(p.name, "ClassicProtocol.Name"))
        w.bytes_(p.metadata)
        w.tags()
    w.tags()
    return bytes(w.out)


def _decode_classic_member_metadata(r: MessageReader) -> ClassicMemberMetadata | None:
    presence = r.uvarint()
    if presence == 0 or presence >= 1 << 31:  # Kafka: readUnsignedVarint() <= 0 as a Java int
        r.done()
        return None
    session_timeout_ms = r.int32()
    protocols = []
    for _ in range(r.array_len(3)):  # compact string, compact bytes, tag count
        name = r.string()
        metadata = r.bytes_()
        r.skip_tags()
        protocols.append(ClassicProtocol(name, metadata))
    r.skip_tags()
    r.done()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


# -- keys: encode/decode --------------------------------------------------------------------------

def encode_key(key: ModernKey) -> bytes:
    """int16 record type, then the v0 key struct (not flexible)."""
    w = MessageWriter()
    w.int16(key.RECORD_TYPE)
    w.string(_required(key.group_id, "GroupId"))
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        w.string(_required(key.regular_expression, "RegularExpression"))
    elif isinstance(key, _MEMBER_KEY_CLASSES):
        w.string(_required(key.member_id, "MemberId"))
    return bytes(w.out)


def decode_key(data: bytes | bytearray | memoryview) -> ModernKey | None:
    """The key, or None for a record type this module does not handle (classic 0-2, streams 17-23...)."""
    r = MessageReader(data, "__consumer_offsets key")
    record_type = r.int16()
    key: ModernKey
    if record_type in _ONE_STRING_KEYS:
        key = _ONE_STRING_KEYS[record_type](r.string())
    elif record_type in _TWO_STRING_KEYS:
        group_id = r.string()
        key = _TWO_STRING_KEYS[record_type](group_id, r.string())
    else:
        return None
    r.done()
    return key


# -- values: encode -------------------------------------------------------------------------------

def encode_value(value: ModernValue) -> bytes:
    """int16 value version 0, then the flexible v0 value struct (a tombstone is a null value, not this)."""
    w = MessageWriter(flexible=True)
    try:
        w.int16(VALUE_VERSION)
        tagged: list[tuple[int, bytes]] = []
        if isinstance(value, ConsumerGroupMetadataValue):
            w.int32(value.epoch)
            if value.metadata_hash != 0:
                tagged.append((TAG_METADATA_HASH, I64.pack(value.metadata_hash)))
        elif isinstance(value, ConsumerGroupPartitionMetadataValue):
            w.array_len(len(value.topics))
            for t in value.topics:
                w.uuid(t.topic_id)
                w.string(_required(t.topic_name, "TopicName"))
                w.int32(t.num_partitions)
                w.array_len(len(t.partition_metadata))
                for pm in t.partition_metadata:
                    w.int32(pm.partition)
                    _write_strings(w, pm.racks, "Racks")
                    w.tags()
                w.tags()
        elif isinstance(value, ConsumerGroupMemberMetadataValue):
            w.string(value.instance_id)
            w.string(value.rack_id)
            w.string(_required(value.client_id, "ClientId"))
            w.string(_required(value.client_host, "ClientHost"))
            _write_strings(w, value.subscribed_topic_names, "SubscribedTopicNames")
            w.string(value.subscribed_topic_regex)
            w.int32(value.rebalance_timeout_ms)
            w.string(value.server_assignor)
            if value.classic_member_metadata is not None:
                tagged.append((TAG_CLASSIC_MEMBER_METADATA,
                               _encode_classic_member_metadata(value.classic_member_metadata)))
        elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue | ShareGroupTargetAssignmentMetadataValue):
            w.int32(value.assignment_epoch)
        elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue | ShareGroupTargetAssignmentMemberValue):
            _write_topic_partitions(w, value.topic_partitions)
        elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue | ShareGroupCurrentMemberAssignmentValue):
            w.int32(value.member_epoch)
            w.int32(value.previous_member_epoch)
            w.int8(value.state)
            _write_topic_partitions(w, value.assigned_partitions)
            if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
                _write_topic_partitions(w, value.partitions_pending_revocation)
        elif isinstance(value, ShareGroupMemberMetadataValue):
            w.string(value.rack_id)
            w.string(_required(value.client_id, "ClientId"))
            w.string(_required(value.client_host, "ClientHost"))
            _write_strings(w, value.subscribed_topic_names, "SubscribedTopicNames")
        elif isinstance(value, ShareGroupMetadataValue):
            w.int32(value.epoch)
            w.int64(value.metadata_hash)
        elif isinstance(value, ShareGroupStatePartitionMetadataValue):
            for infos in (value.initializing_topics, value.initialized_topics):
                w.array_len(len(infos))
                for info in infos:
                    w.uuid(info.topic_id)
                    w.string(_required(info.topic_name, "TopicName"))
                    _write_int32s(w, info.partitions)
                    w.tags()
            w.array_len(len(value.deleting_topics))
            for topic in value.deleting_topics:
                w.uuid(topic.topic_id)
                w.string(_required(topic.topic_name, "TopicName"))
                w.tags()
        elif isinstance(value, ConsumerGroupRegularExpressionValue):
            _write_strings(w, value.topics, "Topics")
            w.int64(value.version)
            w.int64(value.timestamp)
        else:
            raise TypeError(f"not a consumer- or share-group record value: {value!r}")
        w.tagged_fields(tagged)
    except struct.error as e:
        raise ValueError(f"{type(value).__name__} field out of range: {e}") from None
    return bytes(w.out)


# -- values: decode -------------------------------------------------------------------------------

def _decode_consumer_group_metadata(r: MessageReader) -> ConsumerGroupMetadataValue:
    epoch = r.int32()
    metadata_hash = 0
    for tag, field in r.tagged_fields():
        if tag == TAG_METADATA_HASH:
            metadata_hash = _read_tagged_int64(field)
    return ConsumerGroupMetadataValue(epoch, metadata_hash)


def _decode_consumer_group_partition_metadata(r: MessageReader) -> ConsumerGroupPartitionMetadataValue:
    topics = []
    for _ in range(r.array_len(23)):  # uuid, compact string, int32, compact array count, tag count
        topic_id = r.uuid()
        topic_name = r.string()
        num_partitions = r.int32()
        partition_metadata = []
        for _ in range(r.array_len(6)):  # int32, compact array count, tag count
            partition = r.int32()
            racks = _read_strings(r)
            r.skip_tags()
            partition_metadata.append(PartitionMetadata(partition, racks))
        r.skip_tags()
        topics.append(TopicMetadata(topic_id, topic_name, num_partitions, tuple(partition_metadata)))
    r.skip_tags()
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _decode_consumer_group_member_metadata(r: MessageReader) -> ConsumerGroupMemberMetadataValue:
    instance_id = r.nullable_string()
    rack_id = r.nullable_string()
    client_id = r.string()
    client_host = r.string()
    subscribed_topic_names = _read_strings(r)
    subscribed_topic_regex = r.nullable_string()
    rebalance_timeout_ms = r.int32()
    server_assignor = r.nullable_string()
    classic = None
    for tag, field in r.tagged_fields():
        if tag == TAG_CLASSIC_MEMBER_METADATA:
            classic = _decode_classic_member_metadata(field)
    return ConsumerGroupMemberMetadataValue(instance_id, rack_id, client_id, client_host, subscribed_topic_names,
                                            subscribed_topic_regex, rebalance_timeout_ms, server_assignor, classic)


def _decode_consumer_group_target_assignment_metadata(r: MessageReader) -> ConsumerGroupTargetAssignmentMetadataValue:
    epoch = r.int32()
    r.skip_tags()  # 4.3's AssignmentTimestamp (tag 0) among them
    return ConsumerGroupTargetAssignmentMetadataValue(epoch)


def _decode_consumer_group_target_assignment_member(r: MessageReader) -> ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions = _read_topic_partitions(r)
    r.skip_tags()
    return ConsumerGroupTargetAssignmentMemberValue(topic_partitions)


def _decode_consumer_group_current_member_assignment(r: MessageReader) -> ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch = r.int32()
    previous_member_epoch = r.int32()
    state = r.int8()
    assigned = _read_topic_partitions(r, epochs=True)
    pending = _read_topic_partitions(r, epochs=True)
    r.skip_tags()
    return ConsumerGroupCurrentMemberAssignmentValue(member_epoch, previous_member_epoch, state, assigned, pending)


def _decode_share_group_member_metadata(r: MessageReader) -> ShareGroupMemberMetadataValue:
    rack_id = r.nullable_string()
    client_id = r.string()
    client_host = r.string()
    subscribed_topic_names = _read_strings(r)
    r.skip_tags()
    return ShareGroupMemberMetadataValue(rack_id, client_id, client_host, subscribed_topic_names)


def _decode_share_group_metadata(r: MessageReader) -> ShareGroupMetadataValue:
    epoch = r.int32()
    metadata_hash = r.int64()
    r.skip_tags()
    return ShareGroupMetadataValue(epoch, metadata_hash)


def _decode_share_group_target_assignment_metadata(r: MessageReader) -> ShareGroupTargetAssignmentMetadataValue:
    epoch = r.int32()
    r.skip_tags()
    return ShareGroupTargetAssignmentMetadataValue(epoch)


def _decode_share_group_target_assignment_member(r: MessageReader) -> ShareGroupTargetAssignmentMemberValue:
    topic_partitions = _read_topic_partitions(r)
    r.skip_tags()
    return ShareGroupTargetAssignmentMemberValue(topic_partitions)


def _decode_share_group_current_member_assignment(r: MessageReader) -> ShareGroupCurrentMemberAssignmentValue:
    member_epoch = r.int32()
    previous_member_epoch = r.int32()
    state = r.int8()
    assigned = _read_topic_partitions(r)
    r.skip_tags()
    return ShareGroupCurrentMemberAssignmentValue(member_epoch, previous_member_epoch, state, assigned)


def _decode_share_group_state_partition_metadata(r: MessageReader) -> ShareGroupStatePartitionMetadataValue:
    lists: list[tuple[TopicPartitionsInfo, ...]] = []
    for _ in range(2):  # InitializingTopics, InitializedTopics
        infos = []
        for _ in range(r.array_len(19)):  # uuid, compact string, compact array count, tag count
            topic_id = r.uuid()
            topic_name = r.string()
            partitions = _read_int32s(r)
            r.skip_tags()
            infos.append(TopicPartitionsInfo(topic_id, topic_name, partitions))
        lists.append(tuple(infos))
    deleting = []
    for _ in range(r.array_len(18)):  # uuid, compact string, tag count
        topic_id = r.uuid()
        topic_name = r.string()
        r.skip_tags()
        deleting.append(TopicInfo(topic_id, topic_name))
    r.skip_tags()
    return ShareGroupStatePartitionMetadataValue(lists[0], lists[1], tuple(deleting))


def _decode_consumer_group_regular_expression(r: MessageReader) -> ConsumerGroupRegularExpressionValue:
    topics = _read_strings(r)
    version = r.int64()
    timestamp = r.int64()
    r.skip_tags()
    return ConsumerGroupRegularExpressionValue(topics, version, timestamp)


_VALUE_DECODERS = {
    CONSUMER_GROUP_METADATA: ("ConsumerGroupMetadataValue", _decode_consumer_group_metadata),
    CONSUMER_GROUP_PARTITION_METADATA: ("ConsumerGroupPartitionMetadataValue",
                                        _decode_consumer_group_partition_metadata),
    CONSUMER_GROUP_MEMBER_METADATA: ("ConsumerGroupMemberMetadataValue", _decode_consumer_group_member_metadata),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: ("ConsumerGroupTargetAssignmentMetadataValue",
                                                _decode_consumer_group_target_assignment_metadata),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: ("ConsumerGroupTargetAssignmentMemberValue",
                                              _decode_consumer_group_target_assignment_member),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: ("ConsumerGroupCurrentMemberAssignmentValue",
                                               _decode_consumer_group_current_member_assignment),
    SHARE_GROUP_MEMBER_METADATA: ("ShareGroupMemberMetadataValue", _decode_share_group_member_metadata),
    SHARE_GROUP_METADATA: ("ShareGroupMetadataValue", _decode_share_group_metadata),
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: ("ShareGroupTargetAssignmentMetadataValue",
                                             _decode_share_group_target_assignment_metadata),
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: ("ShareGroupTargetAssignmentMemberValue",
                                           _decode_share_group_target_assignment_member),
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: ("ShareGroupCurrentMemberAssignmentValue",
                                            _decode_share_group_current_member_assignment),
    SHARE_GROUP_STATE_PARTITION_METADATA: ("ShareGroupStatePartitionMetadataValue",
                                           _decode_share_group_state_partition_metadata),
    CONSUMER_GROUP_REGULAR_EXPRESSION: ("ConsumerGroupRegularExpressionValue",
                                        _decode_consumer_group_regular_expression),
}


def decode_value(record_type: int, data: bytes | bytearray | memoryview) -> ModernValue:
    """The non-null value of a record of ``record_type`` (the ``RECORD_TYPE`` of its decoded key).

    ValueError for a record type this module does not handle; CorruptRecordError for malformed bytes.
    """
    try:
        what, decoder = _VALUE_DECODERS[record_type]
    except KeyError:
        raise ValueError(f"no consumer- or share-group record of type {record_type}") from None
    r = MessageReader(data, what)
    version = r.int16()
    if version < 0:
        raise CorruptRecordError(f"{what}: negative version {version}")
    r.flexible = True
    value: ModernValue = decoder(r)
    if version <= VALUE_VERSION:
        r.done()  # a newer version may append fields we do not know: ignore them
    return value
