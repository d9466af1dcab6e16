"""Record keys of ``__remote_log_metadata`` (KIP-1266 plus the segment id) and the version rule."""

from __future__ import annotations

import uuid

import pytest

from strata.tiered.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition, uuid_to_str
from strata.tiered.metadata.keys import (
    KeyKind,
    MetadataKey,
    metadata_version,
    new_topic_configs,
    parse_key,
    partition_delete_key,
    segment_key,
    segment_update_key,
)

TOPIC_ID = uuid.UUID("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")
SEGMENT_ID = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")
TP = TopicIdPartition(TOPIC_ID, "orders.v1_eu-west", 7)


def segment(segment_id: uuid.UUID = SEGMENT_ID, end: int = 1999, epochs: dict[int, int] | None = None
            ) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, segment_id), 1000, end, -1, 0, 1, 10,
                                    epochs if epochs is not None else {3: 1000, 5: 1500})


def test_segment_keys_are_kafkas_plus_the_segment_id():
    md = segment()
    prefix = f"{uuid_to_str(TOPIC_ID)}:orders.v1_eu-west:7:1999:5"  # Kafka's key: the highest leader epoch
    assert segment_key(md) == f"{prefix}:{uuid_to_str(SEGMENT_ID)}".encode()
    assert segment_update_key(md) == f"{prefix}:{uuid_to_str(SEGMENT_ID)}:UPDATE".encode()
    assert partition_delete_key(TP) == f"{uuid_to_str(TOPIC_ID)}:orders.v1_eu-west:7:DELETE_PARTITION".encode()
    assert uuid_to_str(TOPIC_ID) == "CxwtPk9QYXKDlKW2x9jp8A"  # Kafka's Uuid.toString: base64url, unpadded


def test_a_re_upload_of_the_same_range_by_the_same_leader_has_keys_of_its_own():
    """A retried copy, or a compaction rewrite of a remote segment: same end offset and leader epoch."""
    first, again = segment(), segment(uuid.uuid4())
    assert first.end_offset == again.end_offset and max(first.segment_leader_epochs) == 5
    assert segment_key(first) != segment_key(again)
    assert segment_update_key(first) != segment_update_key(again)
    # Kafka's part of the keys is the same: they group by range.
    assert segment_key(first).rsplit(b":", 1)[0] == segment_key(again).rsplit(b":", 1)[0]


def test_parse_round_trips():
    md = segment()
    segment_id = RemoteLogSegmentId(TP, SEGMENT_ID)
    base = parse_key(segment_key(md))
    assert base == MetadataKey(KeyKind.SEGMENT, TP, 1999, 5, SEGMENT_ID)
    assert base.remote_log_segment_id == segment_id
    update = parse_key(segment_update_key(md))
    assert update == MetadataKey(KeyKind.SEGMENT_UPDATE, TP, 1999, 5, SEGMENT_ID)
    delete = parse_key(partition_delete_key(TP))
    assert delete == MetadataKey(KeyKind.PARTITION_DELETE, TP)
    assert delete.remote_log_segment_id is None
    # A leading "-" in a base64url id (one in 64) is not a sign.
    dash = next(u for u in iter(uuid.uuid4, None) if uuid_to_str(u).startswith("-"))
    assert parse_key(segment_key(segment(dash))).segment_id == dash


@pytest.mark.parametrize("key", [
    b"",
    b"not a key",
    b"CxwtPk9QYXKDlKW2x9jp8A:t:0:99:3",  # Kafka's own key: names a range, not a segment
    b"CxwtPk9QYXKDlKW2x9jp8A:t:0:99:3:UPDATE",
    b"CxwtPk9QYXKDlKW2x9jp8A::0:99:3:__7dzLuqmYh3ZlVEMyIRAA",  # empty topic name
    b"CxwtPk9QYXKDlKW2x9jp8A:t:x:99:3:__7dzLuqmYh3ZlVEMyIRAA",  # partition not a number
    b"CxwtPk9QYXKDlKW2x9jp8A:t:0:9 9:3:__7dzLuqmYh3ZlVEMyIRAA",
    b"CxwtPk9QYXKDlKW2x9jp8A:t:0:99:3:short",  # not a Uuid
    b"CxwtPk9QYXKDlKW2x9jp8A:t:0:99:3:__7dzLuqmYh3ZlVEMyIRAA:DELETE",
    b"CxwtPk9QYXKDlKW2x9jp8A:t:0:UPDATE",
    b"\xff\xfe:t:0:DELETE_PARTITION",  # not UTF-8
])
def test_parse_refuses_anything_else(key: bytes):
    with pytest.raises(ValueError, match="remote log metadata key"):
        parse_key(key)


@pytest.mark.parametrize(("policy", "version"), [
    ("delete", 0), ("compact,delete", 1), ("delete,compact", 1), (" compact , delete ", 1), ("compact", 2),
    (["compact"], 2), (["compact", "delete"], 1), ("", 0), ("COMPACT", 2),
])
def test_version_from_cleanup_policy(policy, version):
    assert metadata_version(policy) == version


def test_new_topic_configs():
    assert new_topic_configs(-1) == {"cleanup.policy": "compact", "remote.storage.enable": "false"}
    assert metadata_version(new_topic_configs(-1)["cleanup.policy"]) == 2
    # A time-based retention asked for is honoured: compact,delete (no null-key record ever to wait for).
    assert new_topic_configs(86_400_000) == {"cleanup.policy": "compact,delete", "retention.ms": "86400000",
                                             "remote.storage.enable": "false"}
