"""The records of ``__consumer_offsets``, byte for byte as Apache Kafka writes and reads them.

kio has no classes for these (they are not wire messages), so they are encoded here by hand from
Kafka's schemas in ``group-coordinator/src/main/resources/common/message/``. Every key and value
starts with an int16 version; the key version says which record it is:

* key v0/v1 ``OffsetCommitKey``: group (string), topic (string), partition (int32). Kafka writes v1.
* key v2 ``GroupMetadataKey``: group (string).
* higher key versions are the KIP-848 consumer-group records, which a classic coordinator skips.

``OffsetCommitValue`` v0-v4: offset int64, leader_epoch int32 (v3+), metadata string,
commit_timestamp int64, expire_timestamp int64 (v1 only); v4 is the first flexible version.
Kafka writes v3, or v1 when the commit carried a retention time (OffsetCommit v2-v4).

``GroupMetadataValue`` v0-v4: protocol_type string, generation int32, protocol nullable string,
leader nullable string, current_state_timestamp int64 (v2+), members array of member_id,
group_instance_id (v3+, nullable), client_id, client_host, rebalance_timeout int32 (v1+),
session_timeout int32, subscription bytes, assignment bytes. Kafka writes v3.

A null value is a tombstone. Because a replica of Apache Kafka could read these logs (and
``kafka-console-consumer --formatter`` could print them), the layout must not drift: the unit tests
pin fixed byte vectors derived from the schema definitions.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.common.hashing import kafka_partition_for
from strata.errors import CorruptRecordError
from strata.protocol.message_fields import MessageReader, MessageWriter

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
FLEXIBLE_VALUE_VERSION = 4  # first flexible version of both value schemas


# -- the records ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OtherKey:
    """A key this coordinator does not handle (KIP-848 consumer groups, share groups...)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # stored only by value version 1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


# -- keys -----------------------------------------------------------------------------------

def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = MessageWriter()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return bytes(w.out)


def encode_group_metadata_key(group: str) -> bytes:
    w = MessageWriter()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | OtherKey:
    r = MessageReader(data, "__consumer_offsets key")
    version = r.int16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        return OtherKey(version)
    r.done()
    return key


# -- values ---------------------------------------------------------------------------------

def encode_offset_commit_value(value: OffsetCommitValue, version: int = OFFSET_COMMIT_VALUE_VERSION) -> bytes:
    if not 0 <= version <= FLEXIBLE_VALUE_VERSION:
        raise ValueError(f"OffsetCommitValue has versions 0-4, not {version}")
    w = MessageWriter(flexible=version >= FLEXIBLE_VALUE_VERSION)
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    w.tags()
    return bytes(w.out)


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    r = MessageReader(data, "OffsetCommitValue")
    version = r.int16()
    if version < 0:
        raise CorruptRecordError(f"OffsetCommitValue: negative version {version}")
    r.flexible = version >= FLEXIBLE_VALUE_VERSION
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.skip_tags()
    if version <= FLEXIBLE_VALUE_VERSION:
        r.done()  # a newer version may append fields we do not know (KIP-915): ignore them
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def encode_group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= FLEXIBLE_VALUE_VERSION:
        raise ValueError(f"GroupMetadataValue has versions 0-4, not {version}")
    w = MessageWriter(flexible=version >= FLEXIBLE_VALUE_VERSION)
    w.int16(version)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.array_len(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tags()
    w.tags()
    return bytes(w.out)


def decode_group_metadata_value(data: bytes | memoryview) -> GroupMetadataValue:
    r = MessageReader(data, "GroupMetadataValue")
    version = r.int16()
    if version < 0:
        raise CorruptRecordError(f"GroupMetadataValue: negative version {version}")
    r.flexible = version >= FLEXIBLE_VALUE_VERSION
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    # a member is at least 18 bytes (v0: three int16-length strings, an int32, two int32-length byte arrays),
    # or 15 flexible (v4: four one-byte lengths, two int32s, two one-byte lengths, the tag count)
    for _ in range(r.array_len(15 if r.flexible else 18)):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tags()
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                      session_timeout, subscription, assignment))
    r.skip_tags()
    if version <= FLEXIBLE_VALUE_VERSION:
        r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))


# -- partitioning ---------------------------------------------------------------------------

def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (``Utils.abs(MIN_VALUE)`` is 0)."""
    return kafka_partition_for(group_id, partitions)


# -- the embedded consumer protocol -----------------------------------------------------------

def subscribed_topics(subscription: bytes) -> set[str] | None:
    """Topics of a ``consumer`` protocol subscription (its v0 prefix, shared by every version).

    None when the bytes do not parse, which Kafka treats as "subscriptions unknown".
    """
    try:
        r = MessageReader(subscription, "ConsumerProtocolSubscription")
        if r.int16() < 0:
            return None
        return {r.string() for _ in range(r.array_len(2))}  # int16-length strings
    except CorruptRecordError:
        return None


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    """Kafka's ``ConsumerProtocolSubscription`` v0-v3 (the classic ``consumer`` protocol's member metadata)."""

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()  # v1+
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+


def decode_subscription(data: bytes | memoryview) -> ConsumerSubscription:
    """The whole subscription; a newer version is read as v3 (its extra fields ignored), as Kafka reads it.
    Raises CorruptRecordError for bytes that are not one."""
    r = MessageReader(data, "ConsumerProtocolSubscription")
    version = r.int16()
    if version < 0:
        raise CorruptRecordError(f"ConsumerProtocolSubscription: negative version {version}")
    topics = tuple(r.string() for _ in range(r.array_len(2)))
    length = r.int32()
    user_data = None if length < 0 else bytes(r.take(length))
    owned: list[tuple[str, tuple[int, ...]]] = []
    generation, rack = -1, None
    if version >= 1:
        for _ in range(r.array_len(6)):
            topic = r.string()
            owned.append((topic, tuple(r.int32() for _ in range(r.array_len(4)))))
    if version >= 2:
        generation = r.int32()
    if version >= 3:
        rack = r.nullable_string()
    return ConsumerSubscription(version, topics, user_data, tuple(owned), generation, rack)


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    """A ``ConsumerProtocolAssignment`` (the same layout in v0-v3): what SyncGroup hands a classic member of a
    consumer group, at the version of the member's own subscription (as Kafka answers)."""
    w = MessageWriter()
    w.int16(max(0, min(version, 3)))
    w.array_len(len(partitions))
    for topic in sorted(partitions):
        w.string(topic)
        ps = sorted(partitions[topic])
        w.array_len(len(ps))
        for p in ps:
            w.int32(p)
    w.int32(-1)  # no user data: the server-side assignor has none to give
    return bytes(w.out)


def decode_assignment_partitions(data: bytes | memoryview) -> dict[str, tuple[int, ...]]:
    """The partitions of a ``ConsumerProtocolAssignment`` (a classic member's last assignment); raises
    CorruptRecordError for bytes that are not one, ValueError when it carries user data (a custom assignor's,
    which a consumer group would lose: Kafka refuses that upgrade)."""
    r = MessageReader(data, "ConsumerProtocolAssignment")
    if r.int16() < 0:
        raise CorruptRecordError("ConsumerProtocolAssignment: negative version")
    out: dict[str, tuple[int, ...]] = {}
    for _ in range(r.array_len(6)):
        topic = r.string()
        out[topic] = tuple(r.int32() for _ in range(r.array_len(4)))
    if r.remaining() >= 4:
        length = r.int32()
        if length > 0:
            raise ValueError("the assignment carries user data from a custom assignor")
    return out
