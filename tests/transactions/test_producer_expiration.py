"""``producer.id.expiration.ms``: a partition forgets producers idle that long, never one with an open
transaction (Kafka's ``ProducerStateManager.removeExpiredProducers``, every
``producer.id.expiration.check.interval.ms``). Seen through DescribeProducers."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic
from tests.cluster.harness import wait_until


def _producers(b: BrokerProcess, topic: str) -> set[int]:
    with WireClient(b.bootstrap) as w:
        r = w.call(61, 0, topics=[{"name": topic, "partition_indexes": [0]}])
    part = r.topics[0].partitions[0]
    assert int(part.error_code) == 0, part
    return {p.producer_id for p in part.active_producers}


def test_idle_producers_expire_but_not_one_with_an_open_transaction(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker", {"producer.id.expiration.ms": "1500",
                                            "producer.id.expiration.check.interval.ms": "200",
                                            "transaction.state.log.num.partitions": "3"}).start()
    try:
        with WireClient(b.bootstrap) as w:
            ensure_topic(w, "expiring")
        txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "slow",
                        "transaction.timeout.ms": 60000})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("expiring", b"open", partition=0)
        assert txn.flush(10) == 0
        idem = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
        idem.produce("expiring", b"done", partition=0)
        assert idem.flush(10) == 0
        both = _producers(b, "expiring")
        assert len(both) == 2
        # the idempotent producer goes once idle for 1.5 s; the one inside its transaction stays
        def one_left() -> set[int] | None:
            left = _producers(b, "expiring")
            return left if len(left) == 1 else None

        remaining = wait_until(one_left, 20, "the idle producer expired")
        txn.commit_transaction(30)
        assert len(remaining) == 1 and remaining < both
        wait_until(lambda: not _producers(b, "expiring"), 20, "the committed producer expired too")
    finally:
        b.stop()
