"""Acknowledged records survive restarts: SIGTERM (clean shutdown) and ``kill -9`` (recovery).

With acks=-1 a delivery report means the record is in the log. After a ``kill -9`` nothing ran
at shutdown (no flush, no checkpoints, no clean-shutdown marker), so the broker must recover
segments and indexes from the files alone; the page cache still holds what was written, which
is exactly Kafka's durability contract without ``flush.messages``. Every delivered record must
then be readable at the offset its delivery report named, with nothing extra.

Idempotent producer state must survive both kinds of restart too: a client that retries a
batch whose response was lost in the restart must get the original offsets back, not a second
copy of the records.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic, init_producer_id, produce

from strata.protocol.records import BatchBuilder, decode_batch, iter_batches

PARTITIONS = 3
TIMEOUT_S = 30.0
Delivered = dict[tuple[int, int], tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]


@pytest.fixture
def rbroker(tmp_path: Any) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "b", {"num.partitions": str(PARTITIONS), "log.segment.bytes": str(1 << 20)}).start()
    try:
        yield b
    finally:
        b.stop()


def produce_acked(bootstrap: str, topic: str, n: int, start: int) -> Delivered:
    """Produce with acks=all and return what the delivery reports confirmed, by (partition, offset)."""
    delivered: Delivered = {}
    errors: list[Any] = []

    def on_delivery(headers: tuple[tuple[str, bytes], ...], err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:  # delivery reports carry no headers: keep the ones produced
            delivered[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers)

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
                  "compression.type": "lz4", "log_level": 3})
    for i in range(start, start + n):
        value = (b"%08d" % i) * (1 + i % 40)
        while True:
            try:
                headers = (("n", b"%d" % i),)
                p.produce(topic, key=b"k%d" % (i % 97), value=value, headers=list(headers),
                          partition=i % PARTITIONS, on_delivery=functools.partial(on_delivery, headers))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(TIMEOUT_S) == 0
    assert not errors, errors[:3]
    assert len(delivered) == n
    return delivered


def consume_all(bootstrap: str, topic: str, expected: int) -> Delivered:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}", "enable.auto.commit": False,
                  "log_level": 3, "enable.partition.eof": True})
    got: Delivered = {}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and (len(got) < expected or len(at_end) < PARTITIONS):
            for m in c.consume(10_000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF: read up to the high watermark
                        at_end.add(m.partition())
                        continue
                    raise KafkaException(err)
                at_end.discard(m.partition())
                key = (m.partition(), m.offset())
                assert key not in got, f"offset {key} delivered twice"
                got[key] = (m.key(), m.value(), tuple(m.headers() or ()))
    finally:
        c.close()
    return got


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "kill-9"])
def test_acknowledged_records_survive_a_restart(rbroker: BrokerProcess, hard: bool) -> None:
    topic = "acked"
    before = produce_acked(rbroker.bootstrap, topic, 20_000, 0)
    rbroker.restart(hard=hard)
    assert consume_all(rbroker.bootstrap, topic, len(before)) == before
    # The log continues where it was: new records get the next offsets, and a second restart keeps all.
    after = produce_acked(rbroker.bootstrap, topic, 5_000, 20_000)
    assert min(off for (p, off) in after if p == 0) == max(off for (p, off) in before if p == 0) + 1
    rbroker.restart(hard=hard)
    assert consume_all(rbroker.bootstrap, topic, len(before) + len(after)) == {**before, **after}
    assert "Traceback" not in rbroker.log_path.read_text(errors="replace"), rbroker.tail()


def _batch(pid: int, seq: int, values: list[bytes], epoch: int = 0) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for v in values:
        b.append(v)
    return b.build()


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "kill-9"])
def test_idempotent_producer_state_survives_a_restart(rbroker: BrokerProcess, hard: bool) -> None:
    topic = "idem-restart"
    with WireClient(rbroker.bootstrap) as wire:
        ensure_topic(wire, topic)
        pid, epoch = init_producer_id(wire)
        batches = [_batch(pid, 3 * i, [b"%d-%d" % (i, j) for j in range(3)]) for i in range(4)]
        offsets = [produce(wire, topic, 1, b).base_offset for b in batches]
        assert offsets == [0, 3, 6, 9]
    rbroker.restart(hard=hard)
    with WireClient(rbroker.bootstrap) as wire:
        # The response to the last batch was "lost": the client retries it. (As in Kafka, a producer
        # snapshot keeps only each producer's last batch, so that is the retry a restart can answer.)
        resp = produce(wire, topic, 1, batches[3])
        assert (int(resp.error_code), resp.base_offset) == (0, offsets[3])
        gap = produce(wire, topic, 1, _batch(pid, 20, [b"gap"]))
        assert int(gap.error_code) == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: the sequence state came back too
        resp = produce(wire, topic, 1, _batch(pid, 12, [b"next"]))
        assert (int(resp.error_code), resp.base_offset) == (0, 12)
        # A new producer id from the broker after the restart is never one handed out before.
        assert init_producer_id(wire)[0] != pid
    rbroker.restart(hard=hard)
    with WireClient(rbroker.bootstrap) as wire:
        resp = produce(wire, topic, 1, _batch(pid, 12, [b"next"]))
        assert (int(resp.error_code), resp.base_offset) == (0, 12)
        fetched = wire.call(1, 12, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                            session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[],
                            topics=[{"topic": topic, "partitions": [
                                {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                 "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}])
        raw = fetched.responses[0].partitions[0].records or b""
        values = [r.value for pos, _ in iter_batches(raw) for r in decode_batch(raw, pos).records]
        assert values == [b"%d-%d" % (i, j) for i in range(4) for j in range(3)] + [b"next"]
    assert "Traceback" not in rbroker.log_path.read_text(errors="replace"), rbroker.tail()


def test_sigterm_while_a_producer_streams_stops_promptly_and_keeps_acked_records(rbroker: BrokerProcess) -> None:
    """A connection whose read completes just as shutdown cancels it must not outlive the broker.

    (On Python 3.11 ``asyncio.wait_for`` around a read swallowed that cancellation, and the broker
    hung in shutdown for as long as a client kept sending.) Everything acknowledged before the
    signal is there after the restart.
    """
    topic = "streaming"
    delivered: Delivered = {}
    p = Producer({"bootstrap.servers": rbroker.bootstrap, "acks": "all", "linger.ms": 1, "log_level": 0,
                  "message.timeout.ms": 3000, "retries": 0, "enable.idempotence": False})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), ())

    value = b"s" * 1000
    p.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert p.flush(15) == 0
    sent = 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # keep the broker busy reading
        try:
            p.produce(topic, value=value, key=b"%d" % sent, partition=sent % PARTITIONS, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            p.poll(0.001)
        if sent == 20_000:
            stop_started = time.monotonic()
            assert rbroker.stop() == 0  # SIGTERM mid-stream
            assert time.monotonic() - stop_started < 10
            break
        p.poll(0)
    else:
        raise AssertionError("the producer never got 20,000 records queued")
    p.flush(10)  # the rest fail with the broker gone; delivered holds what was acknowledged
    acked = dict(delivered)
    rbroker.start()
    got = consume_all(rbroker.bootstrap, topic, len(acked))
    assert {k: v[1] for k, v in got.items() if k in acked} == {k: v[1] for k, v in acked.items()}
    assert "Traceback" not in rbroker.log_path.read_text(errors="replace"), rbroker.tail()
