"""The bucket describes itself (issue 29, part 2) on a real broker: each partition's hash-linked manifest chain
lists exactly the v2 segments in the store as uploads, retention and checkpoints go by; the topic manifest holds
the topic's configs and follows their changes; deleting the topic removes both. On the local directory store and
on S3 (SeaweedFS)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.support.keys import v2_broker_props
from tests.support.seaweedfs import SeaweedFS
from tests.tiered.harness import S3TieredBroker, TieredBroker, wait_until

from strata.tiered.api import TopicIdPartition
from strata.tiered.storage.local import LocalTieredStorage
from strata.tiered.storage.manifests import ChainView, read_chain, read_topic_manifest
from strata.tiered.storage.s3 import S3RemoteStorageManager
from strata.tools.bucket_verify import parse_segment_key

TOPIC = "described"
INTERVAL = 4  # chain entries between checkpoints: several checkpoints within the test


def kv(start: int, end: int) -> list[tuple[str, str]]:
    return [(f"k{i}", f"value-{i}-" + "x" * 200) for i in range(start, end)]


def store_of(b: TieredBroker, seaweedfs: SeaweedFS | None) -> Any:
    """An ObjectStore view of the broker's bucket, as a tool would open it."""
    if isinstance(b, S3TieredBroker):
        assert seaweedfs is not None
        s3 = S3RemoteStorageManager()
        s3.configure({**seaweedfs.rsm_config(), "key.prefix": b.key_prefix})
        return s3
    local = LocalTieredStorage()
    local.configure({"dir": str(b.remote_dir), "events.log.enable": "false"})
    return local


def v2_segments(store: Any, tip: TopicIdPartition) -> dict[str, int]:
    """segment id -> start offset of every v2 segment (one with a manifest) of the partition in the store."""
    out = {}
    for info in store.list_objects(f"{tip.topic}-"):
        parsed = parse_segment_key(info.key)
        if parsed is not None and parsed[1] == "manifest" and parsed[0].partition == tip.partition:
            out[parsed[0].segment_id] = parsed[0].start_offset
    return out


def chain_matches(store: Any, tip: TopicIdPartition) -> ChainView | None:
    view = read_chain(store, tip)
    stored = v2_segments(store, tip)
    if view.breaks or not stored or {sid: s.start_offset for sid, s in view.live.items()} != stored:
        return None
    return view


@pytest.fixture(params=["local", "s3"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    props = {**v2_broker_props(tmp_path / "keys"), "rsm.config.chain.checkpoint.interval": str(INTERVAL)}
    if request.param == "local":
        b: TieredBroker = TieredBroker(tmp_path, **props)
        seaweedfs = None
    else:
        seaweedfs = request.getfixturevalue("seaweedfs")
        b = S3TieredBroker(tmp_path, seaweedfs, key_prefix=f"manifests-{uuid.uuid4().hex[:8]}/", **props)
    b.start()
    try:
        yield b, seaweedfs
    finally:
        b.stop()


def test_the_chain_follows_uploads_retention_and_deletion_and_the_topic_manifest_the_configs(broker: Any) -> None:
    b, seaweedfs = broker
    b.create_topic(TOPIC, max_batches_per_segment=2, segment_bytes="4096", retention_ms="-1")
    b.produce(TOPIC, 0, kv(0, 25))
    store = store_of(b, seaweedfs)
    wait_until("tiered below offset 20", lambda: b.earliest_local_offset(TOPIC, 0) >= 20)
    (tid,) = {parse_segment_key(i.key)[0].topic_id_partition.topic_id  # type: ignore[index]
              for i in store.list_objects(f"{TOPIC}-") if parse_segment_key(i.key) is not None}
    tip = TopicIdPartition(tid, TOPIC, 0)
    view = wait_until("the chain lists every stored v2 segment", lambda: chain_matches(store, tip))
    assert len(view.live) >= 10
    ops = [e.op for _k, e, _d in view.entries]
    assert "checkpoint" in ops and len(view.entries) <= 2 * INTERVAL + 1  # older entries gone behind checkpoints
    manifest = read_topic_manifest(store, TOPIC, tid)
    assert manifest is not None and manifest.partitions == 1 and manifest.replication_factor == 1
    assert manifest.configs["segment.bytes"] == "4096" and manifest.configs["remote.storage.enable"] == "true"

    # retention deletes remote segments: each delete is chained, and a config change reaches the topic manifest
    b.alter_topic(TOPIC, {"retention.bytes": "2000"})
    b.produce(TOPIC, 0, kv(25, 30))
    wait_until("retention deleted remote segments", lambda: len(v2_segments(store, tip)) <= 4)
    view = wait_until("the chain lists the segments left", lambda: chain_matches(store, tip))
    assert any(e.op == "delete" for _k, e, _d in view.entries)
    wait_until("the topic manifest has the new retention",
               lambda: (m := read_topic_manifest(store, TOPIC, tid)) is not None
               and m.configs.get("retention.bytes") == "2000")

    b.delete_topic(TOPIC)
    wait_until("the topic's objects, chain and manifest removed",
               lambda: not any(True for _ in store.list_objects(f"{TOPIC}-")))
