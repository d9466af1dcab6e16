"""ListOffsets against a real tiered broker: MAX_TIMESTAMP (-3) when the record with the largest timestamp
is in a remote-only segment (KAFKA-17552), and the debugging consumer (``replica_id`` -2).

One record per batch and one batch per segment (the harness's ``max_batches_per_segment=1``), with
``local.retention.bytes=1``: every rolled segment is uploaded and then leaves the local disk.
"""

from __future__ import annotations

import time
from typing import Any

from tests.broker.kafka_wire import WireClient
from tests.tiered.harness import LIST_OFFSETS, TieredBroker

UNKNOWN_TOPIC_OR_PARTITION = 3


def list_offsets(b: TieredBroker, topic: str, partition: int, timestamp: int,
                 replica_id: int = -1) -> tuple[int, int, int]:
    """ListOffsets v9: ``(offset, timestamp, leader_epoch)``; asserts no error."""
    p = list_offsets_partition(b, topic, partition, timestamp, replica_id)
    assert int(p.error_code) == 0, p
    ts = p.timestamp
    ts = int(ts.timestamp() * 1000) if hasattr(ts, "timestamp") else int(ts)
    return p.offset, ts, p.leader_epoch


def list_offsets_partition(b: TieredBroker, topic: str, partition: int, timestamp: int, replica_id: int = -1) -> Any:
    with WireClient(b.bootstrap) as client:
        resp = client.call(LIST_OFFSETS, 9, replica_id=replica_id, isolation_level=0, topics=[
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": timestamp}]}])
    return resp.topics[0].partitions[0]


def test_max_timestamp_in_a_remote_only_segment(tiered: TieredBroker) -> None:
    b = tiered
    b.create_topic("t", max_batches_per_segment=1)
    t = int(time.time() * 1000) - 60_000
    b.produce("t", 0, [("k0", "v0", t), ("k1", "v1", t + 100), ("k2", "v2", t + 1), ("k3", "v3", t + 2),
                       ("k4", "v4", t + 3)])
    b.wait_offloaded("t", 0, [0, 1, 2, 3])
    b.wait_earliest_local("t", 0, 4)  # offset 1, the largest timestamp, is in remote storage only
    assert list_offsets(b, "t", 0, -4)[0] == 4

    before = b.fetch_count("t", 0)
    assert list_offsets(b, "t", 0, -3) == (1, t + 100, 0)
    assert b.fetch_count("t", 0) > before  # answered by reading the remote segment

    # a tie: the same timestamp again, in the local log; Kafka answers the earliest offset
    b.produce("t", 0, [("k5", "v5", t + 100)])
    assert list_offsets(b, "t", 0, -3) == (1, t + 100, 0)

    # a larger timestamp locally: the remote metadata alone rules the remote segments out
    b.produce("t", 0, [("k6", "v6", t + 200)])
    before = b.fetch_count("t", 0)
    assert list_offsets(b, "t", 0, -3) == (6, t + 200, 0)
    assert b.fetch_count("t", 0) == before


def test_max_timestamp_of_a_local_topic(tiered: TieredBroker) -> None:
    b = tiered
    b.create_topic("local", enable_remote=False)
    t = int(time.time() * 1000) - 60_000
    b.produce("local", 0, [("k0", "v0", t), ("k1", "v1", t + 50), ("k2", "v2", t + 50), ("k3", "v3", t + 1)])
    assert list_offsets(b, "local", 0, -3) == (1, t + 50, 0)


def test_the_debugging_consumer_asks_the_replica_itself(tiered: TieredBroker) -> None:
    """``replica_id`` -2 is answered from this broker's replica (here the leader; the follower case is
    ``tests/cluster/test_list_offsets_replicas.py``): earliest, earliest-local and its log end."""
    b = tiered
    b.create_topic("t", max_batches_per_segment=1)
    b.produce("t", 0, [(f"k{i}", f"v{i}") for i in range(4)])
    b.wait_earliest_local("t", 0, 3)
    for replica_id in (-1, -2):
        assert [list_offsets(b, "t", 0, spec, replica_id)[0] for spec in (-2, -4, -1)] == [0, 3, 4]
    p = list_offsets_partition(b, "t", 7, -1, replica_id=-2)
    assert int(p.error_code) == UNKNOWN_TOPIC_OR_PARTITION
