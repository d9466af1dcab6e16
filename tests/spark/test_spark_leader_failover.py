"""``FailoverCluster`` without Spark: brokers learned from the metadata, bounded retries, errors not retried.

The cluster behaviour (leaders killed before and during reads) is in test_cluster.py; these use the
shared single broker and an address nothing listens on, standing for a broker that died.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.spark.datasets import create_topic, produce

from strata.client.cluster import UNKNOWN_TOPIC_OR_PARTITION, KafkaClientError
from strata.client.wire import WireError
from strata.spark.failover import FailoverCluster
from strata.spark.planning import BrokerSlice, ReadSettings
from strata.spark.reading import read_broker
from strata.tools.zookeeper import free_port

TOPIC = "spark-failover"


@pytest.fixture(scope="module")
def dead() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there


def test_brokers_from_the_metadata_are_used_when_the_bootstrap_list_is_down(broker: Any, dead: str) -> None:
    with FailoverCluster(dead, timeout_s=5, known_brokers=[broker.bootstrap]) as cluster:
        md = cluster.metadata([])
        assert cluster.known_brokers() == tuple(f"{h}:{p}" for h, p in md.brokers.values())
        assert broker.bootstrap in cluster.known_brokers()
        assert cluster.broker_configs().get("remote.log.storage.system.enable") == "true"


def test_retries_end_after_the_timeout(dead: str) -> None:
    started = time.monotonic()
    with FailoverCluster(dead, timeout_s=1.0) as cluster, pytest.raises(WireError, match="still failing after"):
        cluster.metadata([])
    assert 0.5 < time.monotonic() - started < 5
    assert cluster.retries >= 3


def test_errors_a_new_leader_cannot_resolve_are_not_retried(broker: Any) -> None:
    started = time.monotonic()
    with FailoverCluster(broker.bootstrap, timeout_s=30) as cluster, pytest.raises(KafkaClientError) as caught:
        cluster.list_offsets({("no-such-topic", 0): -1})
    assert caught.value.code == UNKNOWN_TOPIC_OR_PARTITION
    assert time.monotonic() - started < 5 and cluster.retries == 0


def test_a_broker_slice_is_read_through_the_brokers_the_planner_knew(broker: Any, dead: str) -> None:
    """An executor whose ``kafka.bootstrap.servers`` is down reads through the brokers of the plan."""
    create_topic(broker.admin(), TOPIC, 1, **{"retention.ms": "-1"})  # the records are stamped in 2023
    ds = produce(broker.bootstrap, TOPIC, 1, 2_000)
    settings = ReadSettings(dead, include_headers=False, fail_on_data_loss=True, isolation_level=0,
                            fetch_max_bytes=16 << 10, timeout_s=10, brokers=(broker.bootstrap,))
    batches = list(read_broker(BrokerSlice(TOPIC, 0, 100, 1_900, settings)))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(100, 1_900))
    assert ds.count(0, 100, 1_900) == len(offsets)
