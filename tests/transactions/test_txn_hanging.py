"""Hanging transactions: open transactions no coordinator knows are aborted by their partition's leader.

With ``transaction.partition.verification.enable=false`` (Kafka's switch for KIP-890's check) a
transactional batch from a producer that never opened a transaction is accepted, as older brokers
accepted it: it holds the LSO, read_committed consumers stall and the partition stops tiering. Once
its producer has been silent for ``transaction.max.timeout.ms`` and no coordinator lists it, the leader
writes the ABORT marker itself. A live transaction whose records merely carry old timestamps is left
alone: its coordinator knows it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic, init_producer_id
from tests.cluster.harness import wait_until
from tests.transactions.clients import until_end_confluent

from strata.protocol.records import BatchBuilder

TOPIC = "hanging"


@pytest.fixture
def lax_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", {
        "transaction.partition.verification.enable": "false",
        "transaction.max.timeout.ms": "3000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
        "transaction.state.log.num.partitions": "3"}).start()
    try:
        yield b
    finally:
        b.stop()


def test_a_stray_transactional_batch_is_aborted_once_silent(lax_broker: BrokerProcess) -> None:
    with WireClient(lax_broker.bootstrap) as c:
        ensure_topic(c, TOPIC)
        pid, epoch = init_producer_id(c)  # an idempotent producer id: no coordinator has it
        batch = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
        batch.append(b"stray")
        r = c.call(0, 9, acks=-1, timeout=10_000, transactional_id="ghost",
                   topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch.build()}]}])
        assert int(r.responses[0].partition_responses[0].error_code) == 0  # accepted: verification is off
    plain = Producer({"bootstrap.servers": lax_broker.bootstrap})
    plain.produce(TOPIC, b"after", partition=0)
    assert plain.flush(10) == 0
    started = time.monotonic()
    assert until_end_confluent(lax_broker.bootstrap, TOPIC, 1, "read_committed") == []  # the LSO is held
    wait_until(lambda: until_end_confluent(lax_broker.bootstrap, TOPIC, 1, "read_committed") == [b"after"], 30,
               "the hanging transaction aborted")
    assert time.monotonic() - started >= 2.0  # not before its producer was silent for the max timeout (3 s)
    assert until_end_confluent(lax_broker.bootstrap, TOPIC, 1, "read_uncommitted") == [b"stray", b"after"]
    assert "aborted a hanging transaction of producer" in lax_broker.tail(20_000)


def test_a_live_transaction_with_old_timestamps_is_left_alone(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker", {
        "transaction.max.timeout.ms": "60000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
        "transaction.state.log.num.partitions": "3"}).start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "old-clock",
                      "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TOPIC, b"old", partition=0, timestamp=int(time.time() * 1000) - 3_600_000)  # an hour ago
        assert p.flush(10) == 0
        # several hanging checks (every 300 ms) see a producer silent for an hour: the coordinator knows it
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert until_end_confluent(b.bootstrap, TOPIC, 1, "read_committed") == []
        p.commit_transaction(30)
        assert until_end_confluent(b.bootstrap, TOPIC, 1, "read_committed") == [b"old"]
        assert "hanging" not in b.tail(200_000)
    finally:
        b.stop()
