"""Pipelined produce to diskless topics: a connection reads its next request while a diskless produce waits
for its WAL commit, and still answers in request order.

Each test sends several requests on one connection before reading any answer (as librdkafka does with
``max.in.flight``). Before pipelining, the broker read request N+1 only after answering request N, so every
request of a connection went into a WAL object of its own; the tests read the WAL objects in the store to
see which requests shared one.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, decode_response, encode_request
from tests.diskless.harness import create_diskless, diskless_broker, wal_objects

from strata.protocol.records import BatchBuilder
from strata.protocol.records.batch import iter_batches
from strata.protocol.records.record import decode_batch

INTERVAL_MS = 500
PRODUCE_V = 9


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("diskless-pipelining")
    b = diskless_broker(tmp, **{"diskless.produce.commit.interval.ms": str(INTERVAL_MS)}).start()
    try:
        yield b, tmp
    finally:
        b.stop()
        log = b.log_path.read_text(errors="replace")
        assert "Traceback" not in log, b.tail()
        assert "was destroyed but it is pending" not in log, b.tail()
        assert "was never awaited" not in log, b.tail()


def batch(value: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append(value, key=None)
    return builder.build()


def produce_frame(cid: int, topic: str, value: bytes, acks: int = -1, partition: int = 0) -> bytes:
    data = [{"name": topic, "partition_data": [{"index": partition, "records": batch(value)}]}]
    return encode_request(0, PRODUCE_V, cid, acks=acks, timeout=30_000, transactional_id=None, topic_data=data)


def metadata_frame(cid: int, topic: str) -> bytes:
    return encode_request(3, 12, cid, topics=[{"name": topic, "topic_id": None}], allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)


def api_versions_frame(cid: int) -> bytes:
    return encode_request(18, 3, cid, client_software_name="strata-test", client_software_version="1")


def read_answers(w: WireClient, apis: dict[int, tuple[int, int]], count: int) -> list[tuple[int, Any]]:
    """``count`` answers as (correlation id, body), decoded by the API each correlation id was sent as."""
    out = []
    for _ in range(count):
        frame = w.recv_frame()
        (cid,) = struct.unpack_from(">i", frame)
        out.append(decode_response(*apis[cid], frame))
    return out


def objects_holding(tmp: Path, prefix: bytes) -> dict[str, list[list[bytes]]]:
    """WAL objects holding records whose value starts with ``prefix``: their batches' values, in object order."""
    out: dict[str, list[list[bytes]]] = {}
    for path in wal_objects(tmp):
        data = path.read_bytes()
        for position, _ in iter_batches(data):
            values = [r.value or b"" for r in decode_batch(data, position).records]
            if values and values[0].startswith(prefix):
                out.setdefault(path.name, []).append(values)
    return out


def test_pipelined_requests_join_one_wal_object_and_are_answered_in_order(
        broker: tuple[BrokerProcess, Path]) -> None:
    b, tmp = broker
    create_diskless(b.bootstrap, "pipe", **{"message.timestamp.type": "LogAppendTime"})
    with WireClient(b.bootstrap) as w:
        started = time.monotonic()
        w.send_raw(b"".join(produce_frame(cid, "pipe", b"pipe-%d" % cid) for cid in range(1, 6)))
        answers = read_answers(w, dict.fromkeys(range(1, 6), (0, PRODUCE_V)), 5)
        elapsed_ms = (time.monotonic() - started) * 1000
    assert [cid for cid, _ in answers] == [1, 2, 3, 4, 5]
    parts = [body.responses[0].partition_responses[0] for _, body in answers]
    assert [int(p.error_code) for p in parts] == [0] * 5, parts
    assert [p.base_offset for p in parts] == [0, 1, 2, 3, 4]
    assert len({p.log_append_time for p in parts}) == 1, "one commit answered all five (its time is theirs)"
    objects = objects_holding(tmp, b"pipe-")
    assert list(objects.values()) == [[[b"pipe-%d" % i] for i in range(1, 6)]], objects  # one object, in order
    assert elapsed_ms < 4 * INTERVAL_MS, elapsed_ms  # one commit cycle, not five (loose: a busy machine)


def test_later_answers_wait_for_an_earlier_diskless_produce(broker: tuple[BrokerProcess, Path]) -> None:
    """Metadata and ApiVersions behind a diskless produce are answered after it, and do not stop the
    connection from reading on: the produce after them joins the same WAL object."""
    b, tmp = broker
    create_diskless(b.bootstrap, "order")
    apis = {1: (0, PRODUCE_V), 2: (3, 12), 3: (18, 3), 4: (0, PRODUCE_V), 5: (3, 12)}
    with WireClient(b.bootstrap) as w:
        w.send_raw(produce_frame(1, "order", b"order-1") + metadata_frame(2, "order") + api_versions_frame(3)
                   + produce_frame(4, "order", b"order-4") + metadata_frame(5, "order"))
        answers = read_answers(w, apis, 5)
    assert [cid for cid, _ in answers] == [1, 2, 3, 4, 5]
    first, metadata, versions, second, last = (body for _, body in answers)
    assert int(first.responses[0].partition_responses[0].error_code) == 0
    assert int(second.responses[0].partition_responses[0].error_code) == 0
    assert [first.responses[0].partition_responses[0].base_offset,
            second.responses[0].partition_responses[0].base_offset] == [0, 1]
    assert [t.name for t in metadata.topics] == ["order"] and int(metadata.topics[0].error_code) == 0
    assert int(versions.error_code) == 0 and versions.api_keys
    assert [t.name for t in last.topics] == ["order"]
    assert list(objects_holding(tmp, b"order-").values()) == [[[b"order-1"], [b"order-4"]]]


def test_acks_0_is_not_answered_and_its_failure_closes_after_earlier_answers(
        broker: tuple[BrokerProcess, Path]) -> None:
    b, tmp = broker
    create_diskless(b.bootstrap, "quiet")
    apis = {2: (0, PRODUCE_V), 4: (0, PRODUCE_V), 5: (3, 12)}
    with WireClient(b.bootstrap) as w:
        w.send_raw(produce_frame(1, "quiet", b"quiet-1", acks=0) + produce_frame(2, "quiet", b"quiet-2")
                   + produce_frame(3, "quiet", b"quiet-3", acks=0, partition=7)  # no partition 7: it fails
                   + produce_frame(4, "quiet", b"quiet-4") + metadata_frame(5, "quiet"))
        [(cid, body)] = read_answers(w, apis, 1)
        assert cid == 2 and int(body.responses[0].partition_responses[0].error_code) == 0
        assert body.responses[0].partition_responses[0].base_offset == 1  # after the acks=0 record
        with pytest.raises(ConnectionError):  # the failed acks=0 produce closed it: 4 and 5 are not answered
            w.recv_frame()
    committed = [v for batches in objects_holding(tmp, b"quiet-").values() for values in batches for v in values]
    assert b"quiet-1" in committed and b"quiet-2" in committed


def test_a_client_gone_with_answers_owed_leaves_the_broker_clean(broker: tuple[BrokerProcess, Path]) -> None:
    """The connection's owed answers are dropped cleanly; what it enqueued still commits."""
    b, tmp = broker
    create_diskless(b.bootstrap, "gone")
    with WireClient(b.bootstrap) as w:
        w.send_raw(b"".join(produce_frame(cid, "gone", b"gone-%d" % cid) for cid in range(1, 6)))
        time.sleep(0.05)  # read by the broker, not yet committed
    deadline = time.monotonic() + 10
    while sum(len(v) for v in objects_holding(tmp, b"gone-").values()) < 5:
        assert time.monotonic() < deadline, "the enqueued batches were not committed"
        time.sleep(0.1)
    with WireClient(b.bootstrap) as w:  # the broker serves on
        w.send_raw(produce_frame(1, "gone", b"gone-6"))
        [(_, body)] = read_answers(w, {1: (0, PRODUCE_V)}, 1)
        assert body.responses[0].partition_responses[0].base_offset == 5


def test_confluent_producer_with_five_in_flight_delivers_in_order(broker: tuple[BrokerProcess, Path]) -> None:
    """librdkafka's five requests in flight now share commit cycles. (Its idempotent producer keeps at most
    five *records* in flight per partition (``RD_KAFKA_IDEMP_MAX_INFLIGHT`` against ``rktp_msgs_inflight``),
    so with batches of five records or more it sends one request per partition at a time: not this test.)"""
    b, tmp = broker
    create_diskless(b.bootstrap, "flight")
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "max.in.flight.requests.per.connection": 5,
                  "acks": "all"})
    delivered: list[tuple[int, bytes]] = []
    latencies: list[float] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append((msg.offset(), msg.value()))
        latencies.append(msg.latency())

    n = 600
    for i in range(n):  # a steady stream for ~2.4 s: several requests per commit interval
        p.produce("flight", value=b"flight-%d" % i, partition=0, on_delivery=on_delivery)
        p.poll(0)
        time.sleep(0.004)
    assert p.flush(30) == 0
    assert delivered == [(i, b"flight-%d" % i) for i in range(n)]
    objects = objects_holding(tmp, b"flight-")
    in_objects = [v for batches in objects.values() for values in batches for v in values]
    assert in_objects == [b"flight-%d" % i for i in range(n)]  # objects sort by creation time: produce order
    batches = sum(len(batches) for batches in objects.values())
    # One request at a time per connection put exactly one batch (one request) in each object.
    assert max(len(batches) for batches in objects.values()) >= 3, [len(batches) for batches in objects.values()]
    assert len(objects) < batches / 2, (len(objects), batches)
    latencies.sort()
    print(f"delivery p50 {latencies[n // 2] * 1000:.0f} ms, p99 {latencies[n * 99 // 100] * 1000:.0f} ms, "
          f"{batches} batches in {len(objects)} objects")
