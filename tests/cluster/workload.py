"""A producer that keeps writing while brokers die, and readers that check what it was told.

``AckedProducer`` runs one idempotent acks=all confluent-kafka producer on a thread and records
every acknowledgement (partition, offset, value). ``check_exactly_once`` reads every partition
from the beginning with a given client (confluent-kafka, kafka-python or aiokafka) and asserts
that each acknowledged record is there exactly once, at its acknowledged offset, in order, and
that nothing unacknowledged hides between them (every offset below the last acknowledged one
holds an acknowledged record: an idempotent producer's retries never duplicate).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


class _Kept(logging.Handler):
    """The producer's last log lines (librdkafka's: an epoch bump, a sequence error), shown when a check fails."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: deque[str] = deque(maxlen=300)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.created:.3f} {record.levelname} {record.getMessage()}")


class AckedProducer:
    def __init__(self, bootstrap: str, topic: str, *, rate_per_s: float = 500.0, **extra: Any) -> None:
        self.topic = topic
        self.log = _Kept()
        logger = logging.getLogger(f"acked-producer-{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self.log)
        self.acked: dict[int, dict[int, bytes]] = {}
        self.errors: list[Any] = []
        self.fatal: list[Any] = []
        self.sent = 0
        self._stop = threading.Event()
        self._rate = rate_per_s
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
                                   "error_cb": self._on_error, "debug": "eos", **extra}, logger=logger)
        self._thread = threading.Thread(target=self._run, name="acked-producer", daemon=True)

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self.fatal.append(err)

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
            return
        offsets = self.acked.setdefault(msg.partition(), {})
        assert msg.offset() not in offsets, f"offset {msg.offset()} of partition {msg.partition()} acknowledged twice"
        offsets[msg.offset()] = msg.value()

    def _run(self) -> None:
        interval = 1.0 / self._rate
        while not self._stop.is_set():
            value = b"r%08d" % self.sent
            try:
                self._producer.produce(self.topic, value=value, key=value, on_delivery=self._done)
                self.sent += 1
            except BufferError:
                pass
            self._producer.poll(interval)

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def stop(self, flush_timeout_s: float = 120.0) -> None:
        self._stop.set()
        self._thread.join(30)
        remaining = self._producer.flush(flush_timeout_s)
        assert remaining == 0, f"{remaining} records never acknowledged or failed"
        assert not self.fatal, f"fatal producer errors: {self.fatal[:3]}"
        assert not self.errors, f"failed deliveries: {self.errors[:3]}"


def _expected(acked: dict[int, bytes]) -> list[tuple[int, bytes]]:
    return sorted(acked.items())


def read_confluent(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ends}
    deadline = time.monotonic() + 120
    try:
        while any(got[p][-1][0] + 1 < end if got[p] else end > 0 for p, end in ends.items()):
            assert time.monotonic() < deadline, f"not everything read: {[(p, len(v)) for p, v in got.items()]}"
            for m in c.consume(1000, timeout=1.0):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                got[m.partition()].append((m.offset(), m.value()))
    finally:
        c.close()
    return got


def read_kafka_python(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=2000)
    c.assign([KTP(topic, p) for p in ends])
    c.seek_to_beginning()
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ends}
    deadline = time.monotonic() + 120
    try:
        while any(got[p][-1][0] + 1 < end if got[p] else end > 0 for p, end in ends.items()):
            assert time.monotonic() < deadline, "kafka-python did not read everything"
            for batch in c.poll(timeout_ms=1000).values():
                for m in batch:
                    got[m.partition].append((m.offset, m.value))
    finally:
        c.close()
    return got


def read_aiokafka(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def main() -> dict[int, list[tuple[int, bytes]]]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ends}
        try:
            c.assign([ATP(topic, p) for p in ends])
            await c.seek_to_beginning()
            async with asyncio.timeout(120):
                while any(got[p][-1][0] + 1 < end if got[p] else end > 0 for p, end in ends.items()):
                    for tp, msgs in (await c.getmany(timeout_ms=1000)).items():
                        got[tp.partition] += [(m.offset, m.value) for m in msgs]
        finally:
            await c.stop()
        return got

    return asyncio.run(main())


READERS = {"confluent-kafka": read_confluent, "kafka-python": read_kafka_python, "aiokafka": read_aiokafka}


def check_exactly_once(producer: AckedProducer, bootstrap: str, reader: str = "confluent-kafka") -> int:
    """Every acknowledged record exactly once at its offset; returns how many were checked."""
    ends = {p: max(offsets) + 1 for p, offsets in producer.acked.items()}
    got = READERS[reader](bootstrap, producer.topic, ends)
    checked = 0
    for p, acked in producer.acked.items():
        records = [r for r in got[p] if r[0] < ends[p]]
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets)), f"{reader}: partition {p} read out of order or twice"
        if dict(records) != acked:
            read = dict(records)
            missing = sorted(o for o in acked if read.get(o) != acked[o])
            extra = sorted(o for o in read if o not in acked)
            where = {v: o for o, v in acked.items()}
            raise AssertionError(
                f"{reader}: partition {p}: {len(missing)} acknowledged records missing or changed "
                f"{[(o, acked[o], read.get(o)) for o in missing[:10]]}, {len(extra)} unacknowledged ones below the "
                f"last acknowledged {[(o, read[o], where.get(read[o])) for o in extra[:10]]} "
                "(offset, value read, offset where that value was acknowledged); the producer's last log lines:\n"
                + "\n".join(producer.log.lines))
        checked += len(acked)
    return checked
