"""The transaction APIs' error codes, request by request over the wire (Kafka 3.9's answers).

Real clients hide these (they retry, or turn them into fatal errors); each case here is one request a
buggy or hostile client could send, and after all of them the coordinator must still serve a normal
transaction.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic
from tests.cluster.harness import wait_until
from tests.transactions.clients import until_end_confluent

from strata.errors import ErrorCode
from strata.protocol.records import BatchBuilder

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_MARKERS = 10, 22, 24, 25, 26, 27
TOPIC = "wire-txn"


def _coordinator(c: WireClient, txn_id: str) -> None:
    def found() -> bool:
        r = c.call(FIND_COORDINATOR, 3, key=txn_id, key_type=1)
        return int(r.error_code) == 0
    wait_until(found, 15, "the transaction coordinator")


def _init(c: WireClient, txn_id: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
    r = c.call(INIT_PRODUCER_ID, 4, transactional_id=txn_id, transaction_timeout=timeout_ms, producer_id=pid,
               producer_epoch=epoch)
    return int(r.error_code), r.producer_id, r.producer_epoch


def _add(c: WireClient, txn_id: str, pid: int, epoch: int, topic: str = TOPIC, partitions: tuple[int, ...] = (0,)
         ) -> list[int]:
    r = c.call(ADD_PARTITIONS, 3, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
               v3_and_below_producer_epoch=epoch, v3_and_below_topics=[{"name": topic, "partitions": list(partitions)}])
    return [int(p.partition_error_code) for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def _end(c: WireClient, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    return int(c.call(END_TXN, 3, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                      committed=commit).error_code)


def _produce(c: WireClient, txn_id: str | None, pid: int, epoch: int, seq: int = 0, value: bytes = b"v") -> int:
    batch = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    batch.append(value)
    r = c.call(0, 9, acks=-1, timeout=10_000, transactional_id=txn_id,
               topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch.build()}]}])
    return int(r.responses[0].partition_responses[0].error_code)


@pytest.fixture
def wire(txn_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(txn_broker.bootstrap) as c:
        ensure_topic(c, TOPIC)
        _coordinator(c, "t")
        yield c


def test_init_producer_id_errors(wire: WireClient) -> None:
    assert _init(wire, "")[0] == ErrorCode.INVALID_REQUEST
    assert _init(wire, "t", timeout_ms=900_001)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT  # > transaction.max
    assert _init(wire, "t", timeout_ms=0)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    code, pid, epoch = _init(wire, "t")
    assert code == 0 and pid >= 0 and epoch == 0
    code, pid2, epoch2 = _init(wire, "t")
    assert (code, pid2, epoch2) == (0, pid, 1)  # the same id: the next epoch fences the first
    # KIP-360: a producer that holds an epoch two behind (not the current, not the previous) is fenced
    assert _init(wire, "t", pid=pid, epoch=5)[0] == ErrorCode.PRODUCER_FENCED
    assert _init(wire, "t", pid=pid + 1000, epoch=1)[0] == ErrorCode.PRODUCER_FENCED
    code, _, epoch3 = _init(wire, "t", pid=pid, epoch=1)
    assert (code, epoch3) == (0, 2)


def test_add_partitions_and_end_txn_errors(wire: WireClient) -> None:
    _, pid, epoch = _init(wire, "t")
    assert _end(wire, "t", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE  # never begun
    assert _add(wire, "never-initialised", pid, epoch) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
    assert _add(wire, "t", pid + 1, epoch) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
    assert _add(wire, "t", pid, epoch - 1) == [ErrorCode.PRODUCER_FENCED]
    # an unknown partition fails the whole request: nothing is added
    assert _add(wire, "t", pid, epoch, partitions=(0, 99)) == [ErrorCode.OPERATION_NOT_ATTEMPTED,
                                                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert _end(wire, "t", pid, epoch, False) == ErrorCode.NONE  # nothing joined: nothing to undo (Kafka 4)
    assert _add(wire, "t", pid, epoch) == [0]
    assert _end(wire, "t", pid, epoch + 1, True) == ErrorCode.PRODUCER_FENCED
    assert _end(wire, "t", pid + 1, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _end(wire, "t", pid, epoch, True) == 0

    def complete() -> bool:  # a retried EndTxn: CONCURRENT_TRANSACTIONS while markers are written, then NONE
        return _end(wire, "t", pid, epoch, True) == 0
    wait_until(complete, 10, "the commit completed")
    assert _end(wire, "t", pid, epoch, False) == ErrorCode.NONE  # an abort after the commit: nothing joined since
    assert int(wire.call(ADD_OFFSETS, 3, transactional_id="t", producer_id=pid, producer_epoch=epoch - 1,
                         group_id="g").error_code) == ErrorCode.PRODUCER_FENCED


def test_transactional_batches_only_inside_a_transaction(wire: WireClient, txn_broker: BrokerProcess) -> None:
    """KIP-890 part 1: a transactional batch is refused unless its partition is in the producer's open
    transaction; otherwise one stray batch would pin the partition's LSO for ever."""
    idempotent = wire.call(INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=60_000, producer_id=-1,
                           producer_epoch=-1)
    # a transactional batch with an idempotent producer id, with and without a transactional id
    assert _produce(wire, None, idempotent.producer_id, 0) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _produce(wire, "t", idempotent.producer_id, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    _, pid, epoch = _init(wire, "t")
    assert _produce(wire, "t", pid, epoch) == ErrorCode.INVALID_TXN_STATE  # not added to the transaction
    _, pid, epoch = _init(wire, "t")  # epoch 1: the old epoch's batch is fenced
    assert _produce(wire, "t", pid, epoch - 1) == ErrorCode.INVALID_PRODUCER_EPOCH
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(TOPIC, b"plain", partition=0)
    assert plain.flush(10) == 0
    # nothing holds the LSO: read_committed reads to the end at once
    assert until_end_confluent(txn_broker.bootstrap, TOPIC, 1, "read_committed") == [b"plain"]
    assert _add(wire, "t", pid, epoch) == [0]
    assert _produce(wire, "t", pid, epoch, value=b"in-txn") == 0
    assert _end(wire, "t", pid, epoch, True) == 0
    wait_until(lambda: until_end_confluent(txn_broker.bootstrap, TOPIC, 1, "read_committed") == [b"plain", b"in-txn"],
               10, "the committed record")


def test_markers_from_a_client_are_written_without_an_authorizer(wire: WireClient, txn_broker: BrokerProcess) -> None:
    """Kafka checks CLUSTER_ACTION (or ALTER) on WriteTxnMarkers only through its authorizer: without one, a
    client's markers are written, which is what ``kafka-transactions.sh abort`` (Admin.abortTransaction) does
    to a hanging transaction. With an authorizer: tests/security/test_acls_groups_txns.py."""
    _, pid, epoch = _init(wire, "t")
    assert _add(wire, "t", pid, epoch) == [0]
    assert _produce(wire, "t", pid, epoch, value=b"open") == 0
    r = wire.call(WRITE_MARKERS, 1, markers=[{"producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
                                              "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                                              "coordinator_epoch": 0}])
    assert [int(p.error_code) for m in r.markers for t in m.topics for p in t.partitions] == [ErrorCode.NONE]
    wait_until(lambda: until_end_confluent(txn_broker.bootstrap, TOPIC, 1, "read_uncommitted") == [b"open"], 10,
               "the abort marker")
    assert until_end_confluent(txn_broker.bootstrap, TOPIC, 1, "read_committed") == []
