"""Keyless records on compacted topics are refused as Kafka refuses them, over real sockets.

A Produce to a topic whose ``cleanup.policy`` includes ``compact`` appends nothing of a batch that
holds a keyless record and answers INVALID_RECORD with one ``record_errors`` entry per keyless
record (its index in the batch). librdkafka then fails exactly those records with INVALID_RECORD
and the rest of the batch with ``_INVALID_DIFFERENT_RECORD`` (librdkafka's own test 0011 checks
the same against Kafka).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, produce

from strata.protocol.records import CompressionType, build_batch

TIMEOUT_S = 15
COMPACTED_MESSAGE = "Compacted topic cannot accept message without key in topic partition {}-0"


def _create(bootstrap: str, policies: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics(
        [NewTopic(name, 1, 1, config={"cleanup.policy": policy}) for name, policy in policies.items()],
        operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    for fut in futures.values():
        fut.result(TIMEOUT_S)


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 3})
    try:
        return c.get_watermark_offsets(CTopicPartition(topic, 0), timeout=TIMEOUT_S)
    finally:
        c.close()


def _leader(p: Producer, topic: str) -> int:
    partition = p.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions.get(0)
    return -1 if partition is None else partition.leader


def _produce_batch(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> list[Any]:
    """One batch (one partition; the batch leaves when it holds every record, so a loaded machine's slow
    produce loop cannot outlast a linger and split it); the delivery reports in produce order.

    The producer knows the partition's leader before the first record: otherwise the records wait in the
    topic's unassigned queue, and a flush() that starts while they are being moved to the partition sends
    what has arrived so far (a clean-clone run got four batches, and their delivery reports, that way)."""
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 10_000,
                  "batch.num.messages": len(records), "acks": "all",
                  "enable.idempotence": False, "retries": 0, "compression.type": "lz4"})
    deadline = time.monotonic() + TIMEOUT_S
    while _leader(p, topic) < 0:
        assert time.monotonic() < deadline, f"no leader of {topic}-0"
        time.sleep(0.05)
    reports: list[Any] = [None] * len(records)

    def on_delivery(i: int) -> Any:
        return lambda err, msg: reports.__setitem__(i, (err, msg))

    for i, (key, value) in enumerate(records):
        p.produce(topic, value=value, key=key, partition=0, on_delivery=on_delivery(i))
    assert p.flush(TIMEOUT_S) == 0
    assert all(r is not None for r in reports)
    return reports


MIXED = [(b"k0", b"v0"), (None, b"v1"), (b"k2", b"v2"), (None, b"v3"), (b"k4", b"v4")]


@pytest.fixture(scope="module")
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    """One broker for the module (a start is a second or two of CPU): every test uses topics of its own."""
    return shared_broker


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_confluent_kafka_keyless_records_fail_and_the_rest_of_the_batch_too(broker: BrokerProcess,
                                                                           policy: str) -> None:
    topic = "compacted-" + policy.replace(",", "-")
    _create(broker.bootstrap, {topic: policy})
    reports = _produce_batch(broker.bootstrap, topic, MIXED)
    codes = [err.code() if err is not None else None for err, _ in reports]
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD]
    # (the delivery report carries the code's description, not the broker's message: that is checked
    # on the wire below)
    assert _watermarks(broker.bootstrap, topic) == (0, 0)  # nothing of the batch was appended

    keyed = _produce_batch(broker.bootstrap, topic, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")])
    assert [err for err, _ in keyed] == [None, None, None]
    assert [msg.offset() for _, msg in keyed] == [0, 1, 2]
    assert _watermarks(broker.bootstrap, topic) == (0, 3)


def test_confluent_kafka_delete_topic_accepts_keyless_records(broker: BrokerProcess) -> None:
    _create(broker.bootstrap, {"delete-only": "delete"})
    reports = _produce_batch(broker.bootstrap, "delete-only", MIXED)
    assert [err for err, _ in reports] == [None] * len(MIXED)
    assert _watermarks(broker.bootstrap, "delete-only") == (0, len(MIXED))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_produce_response_names_the_keyless_records(broker: BrokerProcess, codec: CompressionType) -> None:
    compacted, both, plain = (f"{name}-{codec.name.lower()}" for name in ("compacted", "both", "plain"))
    _create(broker.bootstrap, {compacted: "compact", both: "compact,delete", plain: "delete"})
    mixed = build_batch([(b"k", b"v"), (None, b"v"), (b"k", b"v"), (None, b"v"), (None, None)], compression=codec)
    with WireClient(broker.bootstrap) as client:
        for topic in (compacted, both):
            resp = produce(client, topic, 0, mixed)
            assert int(resp.error_code) == 87  # INVALID_RECORD
            assert int(resp.base_offset) == -1
            message = COMPACTED_MESSAGE.format(topic)
            assert [(int(e.batch_index), e.batch_index_error_message) for e in resp.record_errors] == [
                (1, message), (3, message), (4, message)]
            assert resp.error_message == (
                "One or more records have been rejected due to 3 record errors in total, and only showing the "
                f"first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
                f"RecordError(batchIndex=3, message='{message}'), RecordError(batchIndex=4, message='{message}')]")

            keyed = produce(client, topic, 0, build_batch([(b"k", b"v"), (b"k", None)], compression=codec))
            assert (int(keyed.error_code), int(keyed.base_offset), list(keyed.record_errors)) == (0, 0, [])

        resp = produce(client, plain, 0, mixed)
        assert (int(resp.error_code), int(resp.base_offset), list(resp.record_errors)) == (0, 0, [])
    assert _watermarks(broker.bootstrap, compacted) == (0, 2)
    assert _watermarks(broker.bootstrap, both) == (0, 2)
    assert _watermarks(broker.bootstrap, plain) == (0, 5)
