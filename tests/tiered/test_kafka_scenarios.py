"""Kafka's single-broker tiered-storage integration scenarios (``storage/src/test/java/org/apache/
kafka/tiered/storage/integration``), with their offload counts, earliest local offsets, remote
fetch counts and ListOffsets answers, against a real broker process and real clients; each on Kafka's
plain objects (format v1) and on Strata's compressed and encrypted ones (format v2, issue 29).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.keys import v2_broker_props
from tests.tiered.harness import TieredBroker, wait_until

DAY_MS = 24 * 3600 * 1000


@pytest.fixture(params=["v1", "v2"])
def tiered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TieredBroker]:
    props = v2_broker_props(tmp_path / "keys") if request.param == "v2" else {}
    b = TieredBroker(tmp_path, **props).start()
    try:
        yield b
    finally:
        b.stop()


def kv(start: int, end: int) -> list[tuple[str, str]]:
    return [(f"k{i}", f"v{i}") for i in range(start, end)]


def consume_and_check(b: TieredBroker, topic: str, partition: int, from_offset: int, total: int,
                      from_tier: int, fetches: int, first: int | None = None) -> None:
    """Kafka's ConsumeAction: ``total`` records from ``from_offset`` (or from ``first``, where the
    consumer is reset to the log start), the first ``from_tier`` of them held only in remote
    storage, read with exactly ``fetches`` FETCH_SEGMENT calls."""
    before = b.fetch_count(topic, partition)
    got = b.consume(topic, partition, from_offset, total)
    start = from_offset if first is None else first
    assert [(o, k, v) for o, k, v in got] == [(o, f"k{o}", f"v{o}") for o in range(start, start + total)]
    local_start = b.earliest_local_offset(topic, partition)
    assert sum(1 for o, _, _ in got if o < local_start) == from_tier
    assert b.fetch_count(topic, partition) - before == fetches


def test_offload_and_consume_from_leader_across_a_restart(tiered: TieredBroker) -> None:
    """OffloadAndConsumeFromLeaderTest."""
    b = tiered
    b.create_topic("topicA", max_batches_per_segment=1)
    b.create_topic("topicB", max_batches_per_segment=2)
    b.produce("topicA", 0, kv(0, 3))
    b.wait_offloaded("topicA", 0, [0, 1])
    b.wait_earliest_local("topicA", 0, 2)
    b.produce("topicB", 0, kv(0, 5))
    b.wait_offloaded("topicB", 0, [0, 2])
    b.wait_earliest_local("topicB", 0, 4)
    b.broker.restart()  # metadata must come back from __remote_log_metadata
    consume_and_check(b, "topicA", 0, 1, total=2, from_tier=1, fetches=1)
    consume_and_check(b, "topicB", 0, 1, total=4, from_tier=3, fetches=2)


def _delete_segments_scenario(b: TieredBroker, configs: dict[str, str]) -> None:
    """BaseDeleteSegmentsTest: k3 is dated a day ahead, so only segments 0..2 expire."""
    # Kafka 4.0 refuses timestamps over an hour ahead by default (KIP-1030); the test needs a day
    b.create_topic("t", max_batches_per_segment=1, **{"message.timestamp.after.max.ms": str(2 * DAY_MS)})
    now = int(time.time() * 1000)
    b.produce("t", 0, [("k0", "v0", now), ("k1", "v1", now), ("k2", "v2", now), ("k3", "v3", now + DAY_MS)])
    b.wait_offloaded("t", 0, [0, 1, 2])
    b.wait_earliest_local("t", 0, 3)
    b.alter_topic("t", configs)
    wait_until("3 remote segments deleted", lambda: b.delete_count("t", 0) == 3)
    assert b.list_offsets("t", 0, -2) == (3, 0)
    consume_and_check(b, "t", 0, 0, total=1, from_tier=0, fetches=0, first=3)


def test_delete_segments_by_retention_size(tiered: TieredBroker) -> None:
    _delete_segments_scenario(tiered, {"retention.bytes": "1"})


def test_delete_segments_by_retention_time(tiered: TieredBroker) -> None:
    _delete_segments_scenario(tiered, {"retention.ms": "1"})


def test_roll_and_offload_active_segment(tiered: TieredBroker) -> None:
    """RollAndOffloadActiveSegmentTest: a local.retention.ms breach rolls and offloads the active segment."""
    b = tiered
    b.create_topic("t", max_batches_per_segment=1)
    b.alter_topic("t", {"local.retention.ms": "1"})
    b.produce("t", 0, kv(0, 4))
    b.wait_offloaded("t", 0, [0, 1, 2, 3])
    b.wait_earliest_local("t", 0, 4)
    consume_and_check(b, "t", 0, 0, total=4, from_tier=4, fetches=4)


def test_list_offsets_across_tiers(tiered: TieredBroker) -> None:
    """ListOffsetsTest on one broker (no leader change, so every epoch is 0)."""
    b = tiered
    b.create_topic("t", max_batches_per_segment=2)
    t = int(time.time() * 1000) - 60_000
    b.produce("t", 0, [(f"k{i}", f"v{i}", t + i) for i in range(3)])
    b.wait_offloaded("t", 0, [0])
    b.wait_earliest_local("t", 0, 2)
    b.produce("t", 0, [(f"k{i}", f"v{i}", t + i) for i in range(3, 6)])
    b.wait_offloaded("t", 0, [2])
    b.wait_earliest_local("t", 0, 4)
    assert b.list_offsets("t", 0, -2) == (0, 0)  # earliest
    assert b.list_offsets("t", 0, -4) == (4, 0)  # earliest local
    assert b.list_offsets("t", 0, -5) == (3, 0)  # latest tiered
    assert b.list_offsets("t", 0, -1) == (6, 0)  # latest
    assert b.list_offsets("t", 0, t + 6) == (-1, -1)
    for ts, offset in ((t + 5, 5), (t + 4, 4), (t - 1, 0), (t, 0), (t + 1, 1), (t + 3, 3)):
        assert b.list_offsets("t", 0, ts) == (offset, 0), ts
    b.delete_records("t", 0, 3)
    wait_until("segment 0 deleted", lambda: b.delete_count("t", 0) == 1)
    assert b.list_offsets("t", 0, -2) == (3, 0)
    assert b.list_offsets("t", 0, -4) == (4, 0)
    b.delete_records("t", 0, 4)
    wait_until("segment 2 deleted", lambda: b.delete_count("t", 0) == 2)
    assert b.list_offsets("t", 0, -2) == (4, 0)
    assert b.list_offsets("t", 0, -4) == (4, 0)
    assert b.list_offsets("t", 0, -5)[0] == 3  # the highest remote offset never goes down
    assert b.list_offsets("t", 0, -1) == (6, 0)


def test_delete_topic_deletes_remote_data(tiered: TieredBroker) -> None:
    """DeleteTopicTest on one broker: every uploaded segment of both partitions is deleted."""
    b = tiered
    b.create_topic("t", partitions=2, max_batches_per_segment=1)
    for p in (0, 1):
        b.produce("t", p, kv(0, 3))
        b.wait_offloaded("t", p, [0, 1])
        b.wait_earliest_local("t", p, 2)
    b.delete_topic("t")
    for p in (0, 1):
        wait_until(f"remote segments of t-{p} deleted", lambda p=p: b.delete_count("t", p) == 2)
        assert b.remote_records("t", p) == 0
    # the store's empty directories are tidied away behind the deletes: walk without tripping over them
    wait_until("no remote file left", lambda: not [
        name for _, _, files in os.walk(b.remote_dir) for name in files if not name.startswith(".")])


def test_enable_remote_log_on_existing_topic(tiered: TieredBroker) -> None:
    """EnableRemoteLogOnTopicTest on one broker."""
    b = tiered
    b.create_topic("t", partitions=2, max_batches_per_segment=1, enable_remote=False)
    for p in (0, 1):
        b.produce("t", p, kv(0, 3))
    time.sleep(1.0)  # several copy/retention intervals: nothing may be offloaded or deleted
    for p in (0, 1):
        assert b.earliest_local_offset("t", p) == 0
        assert b.events("COPY_SEGMENT", "t", p) == []
    b.alter_topic("t", {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    for p in (0, 1):
        b.produce("t", p, kv(3, 5))
        b.wait_offloaded("t", p, [3])
        b.wait_earliest_local("t", p, 4)
    for p in (0, 1):
        consume_and_check(b, "t", p, 0, total=5, from_tier=4, fetches=4)


def test_disable_remote_log_on_topic(tiered: TieredBroker) -> None:
    """DisableRemoteLogOnTopicTest on one broker (KIP-950 copy disable, then delete on disable)."""
    b = tiered
    b.create_topic("t", max_batches_per_segment=1)
    b.produce("t", 0, kv(0, 3))
    b.wait_offloaded("t", 0, [0, 1])
    b.wait_earliest_local("t", 0, 2)
    b.alter_topic("t", {"remote.log.copy.disable": "true", "local.retention.bytes": "-2"})
    consume_and_check(b, "t", 0, 0, total=3, from_tier=2, fetches=2)
    b.alter_topic("t", {"remote.log.copy.disable": "false", "local.retention.bytes": "1"})
    b.produce("t", 0, kv(3, 4))
    b.wait_offloaded("t", 0, [2])
    b.wait_earliest_local("t", 0, 3)
    b.alter_topic("t", {"remote.log.copy.disable": "true", "local.retention.bytes": "-2"})
    consume_and_check(b, "t", 0, 0, total=4, from_tier=3, fetches=3)
    b.delete_records("t", 0, 1)  # remote retention keeps working while copy is disabled
    wait_until("segment 0 deleted", lambda: b.delete_count("t", 0) == 1)
    b.alter_topic("t", {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    wait_until("remote storage empty", lambda: b.remote_records("t", 0) == 0)
    consume_and_check(b, "t", 0, 3, total=1, from_tier=0, fetches=0)
    assert b.list_offsets("t", 0, -2)[0] == 3
