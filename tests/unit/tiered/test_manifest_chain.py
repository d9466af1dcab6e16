"""The per-partition manifest chain and the topic manifest (issue 29, part 2), on an in-memory object store.

The brokers' use of them (local directory and S3, v2 segments) is tested in tests/tiered/test_bucket_manifests.py.
"""

from __future__ import annotations

import json
import uuid

import pytest

from strata.tiered.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition, uuid_to_str
from strata.tiered.storage.manifests import (
    BucketManifests,
    ChainEntry,
    TopicManifest,
    chain_entry_key,
    chain_prefix,
    parse_chain_key,
    read_chain,
    read_topic_manifest,
    topic_manifest_key,
)
from strata.tiered.storage.memory_objects import MemoryObjectStore

TP = TopicIdPartition(uuid.uuid4(), "orders", 3)


def segment(start: int, end: int, tp: TopicIdPartition = TP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), start, end, 1_000 + end, 1, 1_000,
                                    end - start + 1, {0: start})


def keys(store: MemoryObjectStore, tp: TopicIdPartition = TP) -> list[str]:
    return sorted(i.key for i in store.list_objects(chain_prefix(tp)))


def test_adds_and_deletes_link_into_a_chain_whose_live_set_is_what_is_stored() -> None:
    store = MemoryObjectStore()
    writer = BucketManifests(store, broker_id=7)
    a, b, c = segment(0, 9), segment(10, 19), segment(20, 29)
    for md in (a, b, c):
        writer.added(md, f"manifest of {md.start_offset}".encode())
    writer.deleted(a)
    writer.deleted(segment(30, 39))  # never chained (a v1 segment, a failed copy): nothing recorded
    view = read_chain(store, TP)
    assert view.breaks == []
    assert [e.op for _k, e, _d in view.entries] == ["add", "add", "add", "delete"]
    assert [s.start_offset for s in view.live.values()] == [10, 20]
    first = view.entries[0][1]
    assert first.sequence == 0 and first.previous_sha256 is None and first.broker_id == 7
    for (_k, prev, digest), (_k2, entry, _d2) in zip(view.entries, view.entries[1:], strict=False):
        assert entry.sequence == prev.sequence + 1 and entry.previous_sha256 == digest
    assert keys(store) == [chain_entry_key(TP, n) for n in range(4)]
    assert parse_chain_key(chain_entry_key(TP, 12)) == 12 and parse_chain_key("orders-x/3/0.json") is None


def test_a_second_writer_continues_the_chain_another_one_wrote() -> None:
    store = MemoryObjectStore()
    BucketManifests(store, broker_id=1).added(segment(0, 9), b"m0")
    later = BucketManifests(store, broker_id=2)  # the next leader: it finds the tail by listing
    later.added(segment(10, 19), b"m1")
    BucketManifests(store, broker_id=1).added(segment(20, 29), b"m2")  # and back
    view = read_chain(store, TP)
    assert view.breaks == [] and [e.broker_id for _k, e, _d in view.entries] == [1, 2, 1]


def test_an_appending_writer_reads_only_what_it_did_not_write() -> None:
    store = MemoryObjectStore()
    writer = BucketManifests(store)
    for n in range(5):
        writer.added(segment(n * 10, n * 10 + 9), b"m")
    gets = store.calls["get"]
    writer.added(segment(50, 59), b"m")
    assert store.calls["get"] == gets  # its own entries are cached: one LIST, no GET


def test_checkpoints_keep_the_chain_bounded_and_the_live_set_exact() -> None:
    store = MemoryObjectStore()
    writer = BucketManifests(store, checkpoint_interval=4)
    live: list[RemoteLogSegmentMetadata] = []
    for n in range(30):
        md = segment(n * 10, n * 10 + 9)
        writer.added(md, b"m%d" % n)
        live.append(md)
        if n % 3 == 2:  # retention deletes the oldest
            writer.deleted(live.pop(0))
    view = read_chain(store, TP)
    assert view.breaks == []
    assert view.entries[0][1].op == "checkpoint"  # older entries went behind checkpoints
    assert len(view.entries) <= 2 * 4
    assert [s.start_offset for s in view.live.values()] == [md.start_offset for md in live]


def test_a_missing_edited_or_foreign_entry_breaks_the_chain_where_it_happened() -> None:
    store = MemoryObjectStore()
    writer = BucketManifests(store)
    for n in range(6):
        writer.added(segment(n * 10, n * 10 + 9), b"m")
    store.delete_objects([chain_entry_key(TP, 2)])
    edited = json.loads(store.get_object_range(chain_entry_key(TP, 4), 0, 1 << 20))
    edited["segment"]["end_offset"] = 999
    store.put_object(chain_entry_key(TP, 4), json.dumps(edited).encode())
    view = read_chain(store, TP)
    broken = dict(view.breaks)
    assert set(broken) == {chain_entry_key(TP, 3), chain_entry_key(TP, 5)}
    assert "1 entries missing" in broken[chain_entry_key(TP, 3)]
    assert "previous_sha256" in broken[chain_entry_key(TP, 5)]
    store.delete_objects([chain_entry_key(TP, 0)])
    assert any("not a checkpoint" in why for _k, why in read_chain(store, TP).breaks)
    store.put_object(chain_entry_key(TP, 9), b"{not json")
    assert any(k == chain_entry_key(TP, 9) for k, _why in read_chain(store, TP).breaks)


def test_entries_refuse_what_is_not_an_entry() -> None:
    with pytest.raises(ValueError, match="not a chain entry"):
        ChainEntry.from_bytes(b'{"format": "strata.partition-chain", "version": 9}')
    with pytest.raises(ValueError, match="not a chain entry"):
        ChainEntry.from_bytes(b"[]")


def test_the_topic_manifest_is_written_when_it_changes_and_removed_with_the_partition() -> None:
    store = MemoryObjectStore()
    writer = BucketManifests(store)
    tid = "x" * 22
    m = TopicManifest("orders", tid, 4, {"cleanup.policy": "delete", "remote.storage.enable": "true"}, 3, 1, 5)
    assert writer.put_topic_manifest(m)
    assert not writer.put_topic_manifest(TopicManifest("orders", tid, 4, dict(m.configs), 3, 2, 6))  # same content
    assert writer.put_topic_manifest(TopicManifest("orders", tid, 6, dict(m.configs), 3, 1, 7))  # partitions added
    got = read_topic_manifest(store, "orders", tid)
    assert got is not None and got.partitions == 6 and got.configs == m.configs and got.replication_factor == 3
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    writer.added(segment(0, 9, tp), b"m")
    writer.put_topic_manifest(TopicManifest("t", uuid_to_str(tp.topic_id), 1, {}))
    assert read_topic_manifest(store, "t", tp.topic_id) is not None
    writer.delete_partition(tp)
    assert keys(store, tp) == [] and read_topic_manifest(store, "t", tp.topic_id) is None
    with pytest.raises(ValueError, match="not a topic manifest"):
        TopicManifest.from_bytes(b'{"format": "x"}')
    assert topic_manifest_key("orders", tid) == f"orders-{tid}/topic-manifest.json"
