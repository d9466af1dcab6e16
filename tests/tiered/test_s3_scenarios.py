"""The main tiered-storage scenarios again, with the ``s3`` RSM on a real S3 server (SeaweedFS)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.keys import v2_broker_props
from tests.support.seaweedfs import SeaweedFS
from tests.tiered.harness import S3TieredBroker, wait_until
from tests.tiered.test_kafka_scenarios import consume_and_check, kv


@pytest.fixture(params=["v1", "v2"])
def s3_tiered(request: pytest.FixtureRequest, tmp_path: Path, seaweedfs: SeaweedFS) -> Iterator[S3TieredBroker]:
    # the S3 client's retries against a dead endpoint take ~0.5 s: wait longer than that for remote reads,
    # so a read during the outage answers its error instead of expiring empty; and the first read after a
    # restart (a cold S3 client) on a loaded machine took over 3 s once: that fetch expired and the consumer's
    # retry read the segment again, one FETCH more than Kafka's scenario counts
    b = S3TieredBroker(tmp_path, seaweedfs, key_prefix=f"test-{uuid.uuid4().hex[:8]}/",
                       **{"remote.fetch.max.wait.ms": "10000"},
                       **(v2_broker_props(tmp_path / "keys") if request.param == "v2" else {})).start()
    try:
        yield b
    finally:
        b.stop()


def test_offload_and_consume_across_a_restart_on_s3(s3_tiered: S3TieredBroker) -> None:
    b = s3_tiered
    b.create_topic("topicB", max_batches_per_segment=2)
    b.produce("topicB", 0, kv(0, 5))
    b.wait_offloaded("topicB", 0, [0, 2])
    b.wait_earliest_local("topicB", 0, 4)
    objects = b.s3.list_keys(b.key_prefix)
    assert {k.rsplit(".", 1)[1] for k in objects} >= {"log", "index", "timeindex", "snapshot",
                                                      "leader_epoch_checkpoint"}
    b.broker.restart()
    consume_and_check(b, "topicB", 0, 1, total=4, from_tier=3, fetches=2)


def test_retention_and_list_offsets_on_s3(s3_tiered: S3TieredBroker) -> None:
    b = s3_tiered
    b.create_topic("t", max_batches_per_segment=2)
    t = int(time.time() * 1000) - 60_000
    b.produce("t", 0, [(f"k{i}", f"v{i}", t + i) for i in range(6)])
    b.wait_offloaded("t", 0, [0, 2])
    b.wait_earliest_local("t", 0, 4)
    assert b.list_offsets("t", 0, -5) == (3, 0)
    assert b.list_offsets("t", 0, t + 1) == (1, 0)  # found through the remote time index
    assert b.list_offsets("t", 0, t + 3) == (3, 0)
    b.alter_topic("t", {"retention.bytes": "1"})
    wait_until("remote segments expired", lambda: b.remote_records("t", 0) == 0)
    assert b.delete_count("t", 0) == 2
    assert b.list_offsets("t", 0, -2) == (4, 0)


def test_delete_topic_empties_the_bucket_prefix(s3_tiered: S3TieredBroker) -> None:
    b = s3_tiered
    b.create_topic("t", max_batches_per_segment=1)
    b.produce("t", 0, kv(0, 3))
    b.wait_offloaded("t", 0, [0, 1])
    b.delete_topic("t")
    wait_until("bucket prefix empty", lambda: b.s3.list_keys(b.key_prefix) == [])


def test_s3_outage_then_catch_up(s3_tiered: S3TieredBroker) -> None:
    """The S3 server is stopped: local produce/consume go on, nothing not uploaded is deleted,
    remote reads fail fast with a retriable error; uploads catch up when it is back."""
    from tests.tiered.test_scale_and_faults import assert_remote_fetch_fails_retriably

    b = s3_tiered
    b.create_topic("t", max_batches_per_segment=1)
    b.produce("t", 0, kv(0, 3))
    b.wait_offloaded("t", 0, [0, 1])
    b.wait_earliest_local("t", 0, 2)
    with b.s3.outage():
        b.produce("t", 0, kv(3, 6))
        time.sleep(1.5)
        assert b.earliest_local_offset("t", 0) == 2
        assert [o for o, _, _ in b.consume("t", 0, 2, 4)] == [2, 3, 4, 5]
        started = time.monotonic()
        assert_remote_fetch_fails_retriably(b, "t", 0, 0)
        assert time.monotonic() - started < 5
    b.wait_offloaded("t", 0, [2, 3, 4])
    b.wait_earliest_local("t", 0, 5)
    assert [o for o, _, _ in b.consume("t", 0, 0, 6)] == list(range(6))
