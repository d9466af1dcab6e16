"""DescribeTransactions and ListTransactions (``kafka-transactions.sh describe`` / ``list``), and the
expiry of idle transactional ids (``transactional.id.expiration.ms``), which must survive a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic
from tests.cluster.harness import wait_until

from strata.errors import ErrorCode

DESCRIBE, LIST = 65, 66
TOPIC = "admin-txn"


@pytest.fixture
def expiring_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", {
        "transactional.id.expiration.ms": "1500",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "300",
        "transaction.state.log.num.partitions": "3"}).start()
    try:
        yield b
    finally:
        b.stop()


def _describe(b: BrokerProcess, *ids: str) -> dict[str, object]:
    with WireClient(b.bootstrap) as w:
        r = w.call(DESCRIBE, 0, transactional_ids=list(ids))
    return {s.transactional_id: s for s in r.transaction_states}


def _list(b: BrokerProcess, states: list[str] | None = None, pids: list[int] | None = None,
          duration: int = -1) -> tuple[int, list[str], dict[str, tuple[int, str]]]:
    with WireClient(b.bootstrap) as w:
        r = w.call(LIST, 1, state_filters=states or [], producer_id_filters=pids or [], duration_filter=duration)
    return int(r.error_code), list(r.unknown_state_filters), {
        s.transactional_id: (s.producer_id, s.transaction_state) for s in r.transaction_states}


def test_describe_and_list_transactions_then_the_id_expires(expiring_broker: BrokerProcess) -> None:
    b = expiring_broker
    with WireClient(b.bootstrap) as w:
        ensure_topic(w, TOPIC)
    open_ = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "open-one",
                      "transaction.timeout.ms": 60000})
    open_.init_transactions(30)
    open_.begin_transaction()
    open_.produce(TOPIC, b"v", partition=0)
    assert open_.flush(10) == 0
    done = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "done-one"})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(TOPIC, b"w", partition=0)
    done.commit_transaction(30)

    described = _describe(b, "open-one", "never-seen", "")
    d = described["open-one"]
    assert int(d.error_code) == 0 and d.transaction_state == "Ongoing" and d.producer_epoch == 0
    assert [(t.topic, list(t.partitions)) for t in d.topics] == [(TOPIC, [0])]
    assert d.transaction_timeout.total_seconds() == 60
    assert int(described["never-seen"].error_code) == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert int(described[""].error_code) == ErrorCode.INVALID_REQUEST

    # EndTxn is answered at PrepareCommit; CompleteCommit follows once the markers are written
    wait_until(lambda: _list(b)[2].get("done-one", (0, ""))[1] == "CompleteCommit", 10, "done-one complete")
    code, unknown, listed = _list(b)
    assert code == 0 and not unknown
    assert {k: v[1] for k, v in listed.items()} == {"open-one": "Ongoing", "done-one": "CompleteCommit"}
    assert set(_list(b, states=["Ongoing"])[2]) == {"open-one"}
    assert set(_list(b, pids=[listed["done-one"][0]])[2]) == {"done-one"}
    assert _list(b, states=["Ongoing", "Sleeping"])[1] == ["Sleeping"]
    # v1 (KIP-994): transactions started more than the duration ago, whatever their state
    assert set(_list(b, duration=0)[2]) == {"open-one", "done-one"}
    assert set(_list(b, duration=3_600_000)[2]) == set()

    # The idle id expires (a tombstone); the open one does not, however long it stays open.
    wait_until(lambda: int(_describe(b, "done-one")["done-one"].error_code) == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
               20, "done-one expired")
    assert int(_describe(b, "open-one")["open-one"].error_code) == 0
    open_.commit_transaction(30)
    b.restart()
    assert int(_describe(b, "done-one")["done-one"].error_code) == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    # a new producer of the expired id starts over (Empty; its start time -1 is more than kio's test decoder
    # takes in a DescribeTransactions response, so ListTransactions shows it)
    again = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "done-one"})
    again.init_transactions(30)
    assert _list(b, states=["Empty"])[2]["done-one"][1] == "Empty"
