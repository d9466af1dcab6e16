"""PRODUCER_FENCED (90) goes only to request versions that know it, over the wire (Kafka 3.9's KafkaApis).

KIP-588 added PRODUCER_FENCED and bumped the transaction APIs' versions with it; a client at an older
version only knows INVALID_PRODUCER_EPOCH (47) and shows "unknown error code 90" otherwise. Kafka answers 47
to InitProducerId < v4 and to AddPartitionsToTxn, AddOffsetsToTxn and EndTxn < v2, 90 from those versions on.
Each test fences a producer (a second InitProducerId of its transactional id bumps the epoch) and asks again
with the old epoch at every version the broker supports.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic
from tests.cluster.harness import wait_until

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 10, 22, 24, 25, 26
NONE, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 0, 47, 90
TOPIC = "fenced-versions"


@pytest.fixture
def wire(shared_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(shared_broker.bootstrap) as c:
        ensure_topic(c, TOPIC)
        yield c


def fenced_producer(c: WireClient, txn_id: str) -> tuple[int, int]:
    """A producer id and the epoch a second InitProducerId of ``txn_id`` fenced: (producer id, stale epoch)."""
    wait_until(lambda: int(c.call(FIND_COORDINATOR, 3, key=txn_id, key_type=1).error_code) == NONE, 30,
               f"the transaction coordinator of {txn_id}")

    def init() -> Any:
        r = c.call(INIT_PRODUCER_ID, 4, transactional_id=txn_id, transaction_timeout=60_000, producer_id=-1,
                   producer_epoch=-1)
        return r if int(r.error_code) == NONE else None
    first = wait_until(init, 30, f"InitProducerId of {txn_id}")
    second = init()
    assert second is not None and (second.producer_id, second.producer_epoch) == (first.producer_id,
                                                                                   first.producer_epoch + 1)
    return first.producer_id, first.producer_epoch


def expected(version: int, since: int) -> int:
    return PRODUCER_FENCED if version >= since else INVALID_PRODUCER_EPOCH


def test_init_producer_id_says_producer_fenced_from_v4(wire: WireClient) -> None:
    pid, _ = fenced_producer(wire, "fenced-init")
    # v3 is the first version to carry the producer id a client holds (KIP-360), the only way to be fenced here
    got = {v: int(wire.call(INIT_PRODUCER_ID, v, transactional_id="fenced-init", transaction_timeout=60_000,
                            producer_id=pid + 1000, producer_epoch=0).error_code) for v in (3, 4, 5)}
    assert got == {v: expected(v, 4) for v in (3, 4, 5)}


def test_add_partitions_to_txn_says_producer_fenced_from_v2(wire: WireClient) -> None:
    pid, stale = fenced_producer(wire, "fenced-add-partitions")
    got = {}
    for v in range(4):
        r = wire.call(ADD_PARTITIONS_TO_TXN, v, v3_and_below_transactional_id="fenced-add-partitions",
                      v3_and_below_producer_id=pid, v3_and_below_producer_epoch=stale,
                      v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}])
        [code] = [int(p.partition_error_code) for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]
        got[v] = code
    assert got == {v: expected(v, 2) for v in range(4)}


def test_add_offsets_to_txn_says_producer_fenced_from_v2(wire: WireClient) -> None:
    pid, stale = fenced_producer(wire, "fenced-add-offsets")
    got = {v: int(wire.call(ADD_OFFSETS_TO_TXN, v, transactional_id="fenced-add-offsets", producer_id=pid,
                            producer_epoch=stale, group_id="fenced-group").error_code) for v in range(5)}
    assert got == {v: expected(v, 2) for v in range(5)}


def test_end_txn_says_producer_fenced_from_v2(wire: WireClient) -> None:
    pid, stale = fenced_producer(wire, "fenced-end")
    for commit in (True, False):
        got = {v: int(wire.call(END_TXN, v, transactional_id="fenced-end", producer_id=pid, producer_epoch=stale,
                                committed=commit).error_code) for v in range(5)}
        assert got == {v: expected(v, 2) for v in range(5)}, f"committed={commit}"
