"""Incremental fetch sessions (KIP-227) over the wire: Fetch v12 (topic names) and v13 (topic ids) with
sessions by hand, and kafka-python's consumer, which keeps a session on its own."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient

from strata.client.wire import decode_response
from strata.tools.tiers import metrics_endpoint

FETCH = 1
PARTITIONS = 6


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", {"metrics.port": "0"}).start()
    try:
        yield b
    finally:
        b.stop()


def _create(b: BrokerProcess, topic: str) -> Any:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    tid = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    mask = (1 << 64) - 1
    return uuid.UUID(int=(tid.get_most_significant_bits() & mask) << 64 | (tid.get_least_significant_bits() & mask))


def _produce(b: BrokerProcess, topic: str, partitions: list[int], tag: str) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap})
    for partition in partitions:
        p.produce(topic, f"{tag}-{partition}".encode(), partition=partition)
    assert p.flush(30) == 0


def _metric(b: BrokerProcess, name: str) -> float:
    host, port = metrics_endpoint(b.bootstrap)
    for line in urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} on the metrics endpoint")


def _fetch(wire: WireClient, version: int, topic: str, topic_id: Any, session_id: int, epoch: int,
           offsets: dict[int, int], max_wait_ms: int = 0, forgotten: list[int] | None = None) -> Any:
    key: dict[str, Any] = {"topic": topic} if version < 13 else {"topic_id": topic_id}
    return wire.call(FETCH, version, replica_id=-1, max_wait=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                     isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="",
                     topics=[{**key, "partitions": [
                         {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                          "log_start_offset": -1, "last_fetched_epoch": -1} for p, o in offsets.items()]}]
                     if offsets else [],
                     forgotten_topics_data=[{**key, "partitions": forgotten}] if forgotten else [])


def _answered(resp: Any) -> dict[int, bytes]:
    return {p.partition_index: bytes(p.records or b"") for t in resp.responses for p in t.partitions}


@pytest.mark.parametrize("version", [12, 13])
def test_a_session_answers_only_the_partitions_with_news(broker: BrokerProcess, version: int) -> None:
    topic_id = _create(broker, "s")
    _produce(broker, "s", list(range(PARTITIONS)), "first")
    with WireClient(broker.bootstrap) as wire:
        full = _fetch(wire, version, "s", topic_id, 0, 0, dict.fromkeys(range(PARTITIONS), 0))
        assert int(full.error_code) == 0 and full.session_id != 0
        session = full.session_id
        assert all(b"first" in records for records in _answered(full).values())
        assert set(_answered(full)) == set(range(PARTITIONS))
        assert _metric(broker, "kafka_server_FetchSessionCache_NumIncrementalFetchSessions") == 1
        assert _metric(broker, "kafka_server_FetchSessionCache_NumIncrementalFetchPartitionsCached") == PARTITIONS

        # every offset moves on, nothing new: an empty answer
        moved = _fetch(wire, version, "s", topic_id, session, 1, dict.fromkeys(range(PARTITIONS), 1))
        assert (int(moved.error_code), moved.session_id, _answered(moved)) == (0, session, {})

        # a long poll over the whole session, sending no partition at all: one record in partition 4 ends it
        started = time.monotonic()
        wire.send(FETCH, version, replica_id=-1, max_wait=10_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                  session_id=session, session_epoch=2, rack_id="", topics=[], forgotten_topics_data=[])
        time.sleep(0.5)
        _produce(broker, "s", [4], "second")
        _, polled = decode_response(FETCH, version, wire.recv_frame())
        assert time.monotonic() - started < 8
        assert list(_answered(polled)) == [4] and b"second-4" in _answered(polled)[4]

        # partitions 0-2 leave the session; 3 is told at once when it gets a record
        _produce(broker, "s", [1, 3], "third")
        partial = _fetch(wire, version, "s", topic_id, session, 3, {4: 2}, forgotten=[0, 1, 2])
        assert list(_answered(partial)) == [3] and b"third-3" in _answered(partial)[3]
        assert _metric(broker, "kafka_server_FetchSessionCache_NumIncrementalFetchPartitionsCached") == 3

        # the epoch must be the next one
        stale = _fetch(wire, version, "s", topic_id, session, 3, {})
        assert int(stale.error_code) == 71 and _answered(stale) == {}  # INVALID_FETCH_SESSION_EPOCH
        unknown = _fetch(wire, version, "s", topic_id, session + 1, 1, {})
        assert int(unknown.error_code) == 70  # FETCH_SESSION_ID_NOT_FOUND

        # epoch -1 closes it and is answered in full, sessionless
        closed = _fetch(wire, version, "s", topic_id, session, -1, {1: 1})
        assert closed.session_id == 0 and b"third-1" in _answered(closed)[1]
        assert _metric(broker, "kafka_server_FetchSessionCache_NumIncrementalFetchSessions") == 0


def test_kafka_python_keeps_a_session_and_reads_every_record(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    _create(broker, "kp")
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=200)
    consumer.assign([KTopicPartition("kp", p) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for burst in range(8):  # bursts to one or two partitions at a time: the others stay idle in the session
            for partition in (burst % PARTITIONS, (burst * 5) % PARTITIONS):
                for i in range(10):
                    value = f"{burst}-{partition}-{i}".encode()
                    producer.produce("kp", value, partition=partition)
                    sent[partition].append(value)
            assert producer.flush(30) == 0
            deadline = time.monotonic() + 20
            while sum(map(len, got.values())) < sum(map(len, sent.values())) and time.monotonic() < deadline:
                for tp, messages in consumer.poll(timeout_ms=200).items():
                    got[tp.partition] += [m.value for m in messages]
            assert got == sent
            if burst == 0:
                assert _metric(broker, "kafka_server_FetchSessionCache_NumIncrementalFetchSessions") == 1
        assert _metric(broker, "kafka_server_FetchSessionCache_NumIncrementalFetchPartitionsCached") == PARTITIONS
    finally:
        consumer.close()


@pytest.mark.parametrize("slots", [0, 1])
def test_the_session_cache_slots_are_honoured_on_a_single_node(tmp_path: Path, slots: int) -> None:
    """``max.incremental.fetch.session.cache.slots``: 0 answers every fetch sessionless; 1 gives the first
    fetcher a session and the second none (both are consumers: neither may evict the other's)."""
    b = BrokerProcess(tmp_path / "broker", {"metrics.port": "0",
                                            "max.incremental.fetch.session.cache.slots": str(slots)}).start()
    try:
        _create(b, "slots")
        _produce(b, "slots", [0], "x")
        with WireClient(b.bootstrap) as first, WireClient(b.bootstrap) as second:
            ids = [_fetch(w, 12, "slots", None, 0, 0, {0: 0}).session_id for w in (first, second)]
        assert [i != 0 for i in ids] == ([False, False] if slots == 0 else [True, False])
        assert _metric(b, "kafka_server_FetchSessionCache_NumIncrementalFetchSessions") == slots
    finally:
        b.stop()
