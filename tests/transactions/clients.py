"""Reading a topic to its end with each client library at a given isolation level."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, TopicPartition


def until_end_confluent(bootstrap: str, topic: str, partitions: int, isolation: str,
                        timeout_s: float = 30.0) -> list[bytes]:
    """Every record up to each partition's end (the LSO for read_committed), in partition order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{isolation}", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"confluent-kafka {isolation}: no end after {timeout_s}s: {at_end}"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(m.partition())
                    continue
                raise AssertionError(m.error())
            at_end.discard(m.partition())
            got[m.partition()].append(m.value())
        return [v for p in range(partitions) for v in got[p]]
    finally:
        c.close()


def until_end_kafka_python(bootstrap: str, topic: str, partitions: int, isolation: str,
                           timeout_s: float = 30.0) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=1000)
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)  # the LSO for read_committed
        got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"kafka-python {isolation}: stuck before {ends}"
            for tp, msgs in c.poll(timeout_ms=200).items():
                got[tp.partition] += [m.value for m in msgs]
        return [v for p in range(partitions) for v in got[p]]
    finally:
        c.close()


def until_end_aiokafka(bootstrap: str, topic: str, partitions: int, isolation: str,
                       timeout_s: float = 30.0) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[bytes]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            tps = [ATopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            ends = await c.end_offsets(tps)
            got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
            async with asyncio.timeout(timeout_s):
                while any([await c.position(tp) < ends[tp] for tp in tps]):
                    for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                        got[tp.partition] += [m.value for m in msgs]
            return [v for p in range(partitions) for v in got[p]]
        finally:
            await c.stop()

    return asyncio.run(run())


READERS = {"confluent-kafka": until_end_confluent, "kafka-python": until_end_kafka_python,
           "aiokafka": until_end_aiokafka}
