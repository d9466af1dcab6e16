"""Record keys of ``__remote_log_metadata``, so the topic can be compacted (KIP-1266), and its version.

Kafka's RLMM wrote every event with a null key, so the topic could only be deleted by time and grew
with the history of every upload. KIP-1266 keys the records so that log compaction keeps, per
segment, its base record (COPY_SEGMENT_STARTED, the only record with the offsets, epochs and size)
and its latest update; the leader writes tombstones once a segment is DELETE_SEGMENT_FINISHED, and
the topic's size then follows the live segments instead of the history.

Keys (UTF-8; ids in Kafka's ``Uuid.toString`` form, URL-safe base64 without padding)::

    base record    topicId:topicName:partition:endOffset:brokerLeaderEpoch:segmentId
    update record  topicId:topicName:partition:endOffset:brokerLeaderEpoch:segmentId:UPDATE
    partition delete metadata   topicId:topicName:partition:DELETE_PARTITION

**Where Strata differs from Kafka:** Kafka's key stops at ``brokerLeaderEpoch``. That key names a
range uploaded by a leader, not an upload: when the same leader uploads the same range again - a
copy retried after a failed attempt (a new RemoteLogSegmentId each time, KIP-405), or a remote
segment rewritten by compaction (issue 28: same end offset, same leader epoch, new id) - two
segments share one key, and the cleaner would keep the base record of one and the update of the
other, or a tombstone written for the deleted one would remove the live one. Appending the segment
id makes a key name exactly one segment; the rest of the key is Kafka's, so tools that group by
partition or range still can. ``brokerLeaderEpoch`` is the segment's highest leader epoch (the
epoch of the leader that wrote its last record). Topic names cannot contain ``:`` and base64url has
none, so a key splits on ``:`` unambiguously.

**The version** (Kafka's ``remote.log.metadata.version`` feature, which Strata, having no KRaft
features, derives from the topic's ``cleanup.policy``): ``delete`` is 0 (null keys allowed, the
topic grows), ``compact,delete`` is 1 (the migration's transition: keyed records, the old null-key
ones expire by ``retention.ms`` while ``min.compaction.lag.ms`` keeps the cleaner off them),
``compact`` is 2. Strata writes keys (and tombstones) at every version: under ``delete`` they are
ordinary records that expire with the rest, and a migrated topic needs no broker restart.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from strata.tiered.api import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    uuid_to_str,
)
from strata.tiered.metadata.cache import RemotePartitionMetadataStore

__all__ = [
    "DELETE_PARTITION_SUFFIX", "UPDATE_SUFFIX", "KeyKind", "MetadataKey", "Tombstone", "compacted_away_delete_started",
    "metadata_version", "new_topic_configs", "parse_key", "partition_delete_key", "segment_key", "segment_update_key",
]

UPDATE_SUFFIX = "UPDATE"
DELETE_PARTITION_SUFFIX = "DELETE_PARTITION"
_SEP = ":"

VERSION_DELETE, VERSION_TRANSITION, VERSION_COMPACT = 0, 1, 2


class KeyKind(Enum):
    SEGMENT = "segment"  # the base record: RemoteLogSegmentMetadata (COPY_SEGMENT_STARTED)
    SEGMENT_UPDATE = "update"  # the segment's latest RemoteLogSegmentMetadataUpdate
    PARTITION_DELETE = "partition-delete"  # the partition's latest RemotePartitionDeleteMetadata


@dataclass(frozen=True, slots=True)
class MetadataKey:
    """A parsed key; ``end_offset``, ``broker_leader_epoch`` and ``segment_id`` are None for a partition's."""

    kind: KeyKind
    topic_id_partition: TopicIdPartition
    end_offset: int | None = None
    broker_leader_epoch: int | None = None
    segment_id: uuid.UUID | None = None

    @property
    def remote_log_segment_id(self) -> RemoteLogSegmentId | None:
        if self.segment_id is None:
            return None
        return RemoteLogSegmentId(self.topic_id_partition, self.segment_id)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A null-value record: the segment or partition its key names is gone (the cleaner drops the key)."""

    key: MetadataKey

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.key.topic_id_partition


def _prefix(tp: TopicIdPartition) -> str:
    return f"{uuid_to_str(tp.topic_id)}{_SEP}{tp.topic}{_SEP}{tp.partition}"


def _segment_text(md: RemoteLogSegmentMetadata) -> str:
    segment_id = md.remote_log_segment_id
    return (f"{_prefix(segment_id.topic_id_partition)}{_SEP}{md.end_offset}{_SEP}"
            f"{max(md.segment_leader_epochs)}{_SEP}{uuid_to_str(segment_id.id)}")


def segment_key(md: RemoteLogSegmentMetadata) -> bytes:
    """The key of a segment's base record (its RemoteLogSegmentMetadata)."""
    return _segment_text(md).encode()


def segment_update_key(md: RemoteLogSegmentMetadata) -> bytes:
    """The key of a segment's updates: each replaces the previous one once the topic is compacted."""
    return f"{_segment_text(md)}{_SEP}{UPDATE_SUFFIX}".encode()


def partition_delete_key(tp: TopicIdPartition) -> bytes:
    return f"{_prefix(tp)}{_SEP}{DELETE_PARTITION_SUFFIX}".encode()


def _uuid(text: str) -> uuid.UUID:
    if len(text) != 22:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    try:
        return uuid.UUID(bytes=base64.b64decode(text + "==", altchars=b"-_", validate=True))
    except (binascii.Error, ValueError):
        raise ValueError(f"not a Kafka Uuid: {text!r}") from None


def parse_key(key: bytes | bytearray | memoryview) -> MetadataKey:
    """The key's parts; ValueError for anything else (Kafka's own five-part keys included: they do not
    name a segment, so a tombstone under one cannot be applied)."""
    try:
        parts = bytes(key).decode().split(_SEP)
    except UnicodeDecodeError:
        raise ValueError(f"not a UTF-8 remote log metadata key: {bytes(key)!r}") from None
    try:
        if len(parts) == 4 and parts[3] == DELETE_PARTITION_SUFFIX:
            kind = KeyKind.PARTITION_DELETE
        elif len(parts) == 7 and parts[6] == UPDATE_SUFFIX:
            kind = KeyKind.SEGMENT_UPDATE
        elif len(parts) == 6:
            kind = KeyKind.SEGMENT
        else:
            raise ValueError("unknown layout")
        if not parts[1]:
            raise ValueError("empty topic name")
        tp = TopicIdPartition(_uuid(parts[0]), parts[1], _int(parts[2]))
        if kind is KeyKind.PARTITION_DELETE:
            return MetadataKey(kind, tp)
        return MetadataKey(kind, tp, _int(parts[3]), _int(parts[4]), _uuid(parts[5]))
    except ValueError as e:
        raise ValueError(f"not a remote log metadata key ({e}): {':'.join(parts)!r}") from None


def _int(text: str) -> int:
    """A decimal as Java's ``Long.toString`` writes it (no sign but ``-``, no spaces, no underscores)."""
    if not text or not (text.isdigit() or (text[0] == "-" and text[1:].isdigit())) or not text.isascii():
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


# -- the topic's version -------------------------------------------------------------------------


def _policies(cleanup_policy: str | Iterable[str]) -> set[str]:
    items = cleanup_policy.split(",") if isinstance(cleanup_policy, str) else cleanup_policy
    return {p.strip().lower() for p in items if p.strip()}


def metadata_version(cleanup_policy: str | Iterable[str]) -> int:
    """Kafka's ``remote.log.metadata.version`` from the topic's ``cleanup.policy``: delete 0,
    compact,delete 1, compact 2 (a policy without compact, even an empty one, cannot be compacted: 0)."""
    policies = _policies(cleanup_policy)
    if "compact" not in policies:
        return VERSION_DELETE
    return VERSION_TRANSITION if "delete" in policies else VERSION_COMPACT


def new_topic_configs(retention_ms: int) -> dict[str, str]:
    """The configs ``__remote_log_metadata`` is created with: compacted (version 2), Kafka's configs for a
    new cluster. A positive ``remote.log.metadata.topic.retention.ms`` asks for time-based deletion as
    well, which only ``compact,delete`` honours (version 1 by the rule above, with no null-key records to
    wait for: ``--upgrade-to-v2`` may follow at once)."""
    configs = {"cleanup.policy": "compact", "remote.storage.enable": "false"}
    if retention_ms > 0:
        configs.update({"cleanup.policy": "compact,delete", "retention.ms": str(retention_ms)})
    return configs


# -- replaying a compacted topic -------------------------------------------------------------------


def compacted_away_delete_started(store: RemotePartitionMetadataStore,
                                  md: RemoteLogMetadata) -> RemoteLogSegmentMetadataUpdate | None:
    """The DELETE_SEGMENT_STARTED to apply before ``md``, or None.

    ``md`` a DELETE_SEGMENT_FINISHED for a segment still COPY_SEGMENT_STARTED or _FINISHED in ``store``:
    compaction removed the DELETE_SEGMENT_STARTED it replaced under the segment's update key (every writer
    goes through that state first). Applied first, the segment goes as in the full history; Kafka's cache
    would refuse the transition and keep a segment whose data is gone. Every reader of the topic (the
    broker's RLMM, the client's replay) applies it.
    """
    if not isinstance(md, RemoteLogSegmentMetadataUpdate) or \
            md.state is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
        return None
    cache = store.get(md.topic_id_partition)
    current = cache.segment_metadata(md.remote_log_segment_id) if cache is not None else None
    if current is None or current.state not in (RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                                                RemoteLogSegmentState.COPY_SEGMENT_FINISHED):
        return None
    return replace(md, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
