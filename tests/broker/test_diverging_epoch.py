"""KIP-320's truncation on fetch, the leader's half, over the wire: a follower's Fetch (``replica_id`` set)
carries the epoch of its last batch, and a log that is not a prefix of the leader's is answered with the
diverging epoch (where the leader's history of that epoch ends) instead of records.

On a single node the partition's leader is at epoch 0, so a "follower" claiming more records under epoch 0
than the leader has, or a later epoch the leader never had, stands in for a replica with a divergent tail
(the cluster tests cover the follower's half: zombie leaders, unclean elections, compacted followers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient

FETCH = 1


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("d", 1, 1)])["d"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(10):
            p.produce("d", b"%d" % i)
            p.flush(30)  # ten batches
        yield b
    finally:
        b.stop()


def follower_fetch(wire: WireClient, fetch_offset: int, last_fetched_epoch: int, replica_id: int = 1) -> Any:
    resp = wire.call(FETCH, 12, replica_id=replica_id, max_wait=0, min_bytes=1, max_bytes=1 << 20,
                     isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                     topics=[{"topic": "d", "partitions": [
                         {"partition": 0, "fetch_offset": fetch_offset, "partition_max_bytes": 1 << 20,
                          "current_leader_epoch": -1, "log_start_offset": -1,
                          "last_fetched_epoch": last_fetched_epoch}]}])
    assert int(resp.error_code) == 0, resp
    return resp.responses[0].partitions[0]


def test_a_follower_log_longer_than_the_leaders_epoch_is_told_where_it_ends(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as wire:
        p = follower_fetch(wire, 15, 0)  # five records past the end of epoch 0 here
        assert int(p.error_code) == 0
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 10)
        assert not p.records  # nothing appended on top of a divergent tail
        assert p.high_watermark == 10


def test_a_follower_whose_log_is_a_prefix_fetches_on(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as wire:
        p = follower_fetch(wire, 4, 0)
        assert int(p.error_code) == 0 and p.diverging_epoch.epoch == -1
        assert p.records and p.high_watermark == 10
        at_end = follower_fetch(wire, 10, 0)  # caught up exactly: no divergence either
        assert at_end.diverging_epoch.epoch == -1 and not at_end.records
        empty = follower_fetch(wire, 0, -1)  # an empty follower log has no epoch to check
        assert empty.diverging_epoch.epoch == -1 and empty.records


def test_an_epoch_the_leader_never_had_is_out_of_range(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as wire:
        p = follower_fetch(wire, 3, 7)
        assert int(p.error_code) == 1  # OFFSET_OUT_OF_RANGE: the follower asks for the leader's offsets
        assert p.diverging_epoch.epoch == -1 and not p.records


def test_consumers_are_not_checked(broker: BrokerProcess) -> None:
    """librdkafka sends its last fetched epoch too but validates positions with OffsetForLeaderEpoch itself
    and ignores a diverging epoch: consumers are answered as before."""
    with WireClient(broker.bootstrap) as wire:
        p = follower_fetch(wire, 4, 7, replica_id=-1)
        assert int(p.error_code) == 0 and p.diverging_epoch.epoch == -1 and p.records
