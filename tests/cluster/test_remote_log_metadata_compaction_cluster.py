"""``__remote_log_metadata`` compacted (KIP-1266) in a 3-broker cluster with ZooKeeper.

The metadata topic is created compacted by the cluster's RLMM (``ClusterMetadataTopic``); each replica's
log cleaner compacts its own copy while a tiered topic's remote segments are uploaded and deleted by
retention over and over. Then a follower of the tiered partition is restarted without its RLMM snapshot,
so it replays the compacted topic in full (reading it from the metadata partitions' leaders, past the
batches the cleaner emptied), is made leader, and must serve the same remote tier: the same log start,
the same last tiered offset, the same records from the log start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from tests.cluster.tiered_harness import TieredCluster
from tests.tiered.harness import wait_until
from tests.tiered.test_remote_log_metadata_compaction import (
    META,
    META_CLEANING,
    TOPIC,
    latest_per_key,
    live_segment_keys,
    live_segments,
    metadata_records,
    produce,
    topic_configs,
)

from strata.tiered.metadata.keys import KeyKind, parse_key
from strata.tiered.metadata.topic_based import SNAPSHOT_FILE_NAME


@pytest.fixture
def tc(zk_connect: str, tmp_path: Path) -> Iterator[TieredCluster]:
    c = TieredCluster(zk_connect, tmp_path, 3, **{"log.cleaner.backoff.ms": "100",
                                                   "rlmm.config.remote.log.metadata.topic.num.partitions": "2"})
    c.start()
    try:
        yield c
    except BaseException:
        for broker_id, b in c.cluster.brokers.items():
            print(f"---- broker {broker_id} ({b.log_path}) ----\n{b.tail(6000)}")
        raise
    finally:
        c.stop()


def active_segment_base(tc: TieredCluster, partition: int) -> int:
    """The base offset of the active segment of ``__remote_log_metadata-<partition>`` on its leader."""
    leader = tc.cluster.leader_of(META, partition)
    directory = tc.cluster.brokers[leader].data_dir / "logs" / f"{META}-{partition}"
    return max(int(f.name.split(".")[0]) for f in directory.glob("*.log"))


def metadata_disk_bytes(tc: TieredCluster, broker: int) -> int:
    logs = tc.cluster.brokers[broker].data_dir / "logs"
    return sum(f.stat().st_size for d in logs.glob(f"{META}-*") for f in d.glob("*.log"))


def view(tc: TieredCluster, produced: int) -> tuple[int, int, list]:
    start = tc.list_offsets(TOPIC, 0, -2)[0]
    return start, tc.list_offsets(TOPIC, 0, -5)[0], tc.consume(TOPIC, 0, start, produced - start)


def _configs_if_created(tc: TieredCluster) -> dict[str, tuple[str, bool]] | None:
    try:
        return topic_configs(tc, META)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
        return None


def test_a_follower_replays_the_compacted_metadata_and_leads(tc: TieredCluster) -> None:
    # the brokers create the topic in the background at startup, as Kafka's RLMM does: wait until it is seen
    configs = wait_until(f"{META} created and visible", lambda: _configs_if_created(tc), timeout_s=60)
    assert configs["cleanup.policy"] == ("compact", True)
    tc.alter_topic(META, META_CLEANING)
    tc.create_topic(TOPIC, max_batches_per_segment=1, replication_factor=3, retention_bytes="600")
    produce(tc, 0, 80)
    wait_until("the remote tier to settle", lambda: tc.list_offsets(TOPIC, 0, -5)[0] == 78 and
               len(live_segments(tc)) <= 8, timeout_s=60, interval_s=0.5)
    live = live_segments(tc)
    deleted = tc.delete_count(TOPIC, 0)
    assert deleted >= 70

    def compacted() -> bool:
        """Every live segment keeps its base record; every deleted one whose tombstone the cleaner may clean
        lost it. The live set is read again each time (retention may still delete after the settle), and a
        tombstone still in its partition's active segment waits: nothing appends to the metadata topic once the
        tier settles, so that segment never rolls (a fixed slack of 6 was too small for that tail once)."""
        now = live_segments(tc)
        records = metadata_records(tc)
        bases, _ = live_segment_keys(records)
        last: dict[uuid.UUID, tuple[int, int]] = {}  # the last record of each base key: (partition, offset)
        for partition, offset, key, _value, _ts in records:
            parsed = parse_key(key)
            if parsed.kind is KeyKind.SEGMENT:
                last[parsed.segment_id] = (partition, offset)
        active = {p: active_segment_base(tc, p) for p in {p for p, _o in last.values()}}
        waiting = {s for s in bases - now if last[s][1] >= active[last[s][0]]}
        lp_bases, lp_updates = live_segment_keys(latest_per_key(records))
        print(f"compaction: {len(now)} live, {len(bases)} base records, {len(bases - now - waiting)} cleanable "
              f"left, {len(lp_updates - lp_bases)} updates without base")
        return now <= bases and bases - now <= waiting and lp_updates <= lp_bases
    wait_until("the metadata compacted", compacted, timeout_s=90, interval_s=0.5)
    live = live_segments(tc)
    sizes = {b: metadata_disk_bytes(tc, b) for b in tc.cluster.brokers}
    print(f"\n__remote_log_metadata on disk per broker after compaction: {sizes}; {len(live)} live remote "
          f"segments, {deleted} deleted")
    before = view(tc, 80)

    leader = tc.leader(TOPIC, 0)
    follower = next(b for b in tc.cluster.brokers if b != leader)
    broker = tc.cluster.brokers[follower]
    broker.stop()
    (broker.data_dir / "logs" / SNAPSHOT_FILE_NAME).unlink()
    logged = broker.log_path.stat().st_size
    broker.start()
    tc.cluster.wait_full_isr(TOPIC, 60)
    tc.cluster.wait_full_isr(META, 60)
    others = [b for b in tc.cluster.brokers if b != follower]
    tc.reassign(TOPIC, 0, [follower, *others])
    tc.elect_preferred(TOPIC, 0)
    assert tc.leader(TOPIC, 0) == follower
    # The last tiered offset is known once the new leader's RLM task has run (ListOffsets -5 says -1 before).
    wait_until("the new leader's view", lambda: view(tc, 80) == before, timeout_s=30, interval_s=0.5)
    # It goes on tiering and deleting from the replayed metadata: nothing uploaded twice, nothing forgotten.
    produce(tc, 80, 100)
    wait_until("its uploads", lambda: tc.list_offsets(TOPIC, 0, -5)[0] == 98, timeout_s=60)
    copied = [e["segment_id"] for e in tc.events("COPY_SEGMENT", TOPIC, 0)]
    assert len(copied) == len(set(copied))
    wait_until("retention by the new leader", lambda: len(live_segments(tc)) <= 8, timeout_s=60, interval_s=0.5)
    text = broker.log_path.read_bytes()[logged:].decode(errors="replace")
    assert "tombstone for its" not in text and "can not be transitioned" not in text, text[-4000:]
