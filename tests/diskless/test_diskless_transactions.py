"""Transactions on a diskless topic, which no diskless system offers: markers committed through the WAL,
the last stable offset and the aborted list served to read_committed fetches.

One transactional producer writes the same records to a diskless and a classic topic in each transaction,
committing some and aborting others; read_committed consumers must see exactly the same values on both, and
read_uncommitted ones everything on the diskless topic, aborted records included.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.diskless.harness import create_diskless, diskless_broker


def read(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        ended: set[int] = set()
        deadline = time.monotonic() + 30
        while len(ended) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    ended.add(m.partition())
                continue
            out.append(m.value())
        assert len(ended) == partitions, "did not reach the end"
        return out
    finally:
        c.close()


def test_committed_and_aborted_transactions_read_like_a_classic_topic(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path).start()
    try:
        create_diskless(b.bootstrap, "dtx", partitions=2)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("ctx", 2, 1)])["ctx"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "t1", "linger.ms": 5})
        p.init_transactions(30)
        committed, aborted = [], []
        for n in range(20):
            p.begin_transaction()
            values = [b"%d-%d" % (n, i) for i in range(10)]
            for i, v in enumerate(values):
                for topic in ("dtx", "ctx"):
                    p.produce(topic, value=v, partition=i % 2)
            if n % 3 == 2:
                assert p.flush(30) == 0  # written, then aborted (abort_transaction drops what is not sent yet)
                p.abort_transaction(30)
                aborted += values
            else:
                p.commit_transaction(30)
                committed += values
        # an open transaction at the end: its records are past the last stable offset
        p.begin_transaction()
        for i in range(4):
            p.produce("dtx", value=b"open-%d" % i, partition=i % 2)
        p.flush(30)
        diskless_rc = read(b.bootstrap, "dtx", "read_committed")
        classic_rc = read(b.bootstrap, "ctx", "read_committed")
        assert sorted(diskless_rc) == sorted(classic_rc) == sorted(committed)
        everything = read(b.bootstrap, "dtx", "read_uncommitted")
        assert sorted(everything) == sorted(committed + aborted + [b"open-%d" % i for i in range(4)])
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
        try:
            low, high = c.get_watermark_offsets(CkTopicPartition("dtx", 0), timeout=10)
        finally:
            c.close()
        p.commit_transaction(30)
        after = read(b.bootstrap, "dtx", "read_committed")
        assert sorted(after) == sorted(committed + [b"open-%d" % i for i in range(4)])
        assert low == 0 and high > 0
    finally:
        b.stop()


def test_consume_transform_produce_between_diskless_topics_is_exactly_once(tmp_path: Path) -> None:
    """Kafka's exactly-once loop with both topics diskless: read_committed input, a transactional producer
    writing the output and committing the input offsets in the same transaction (sendOffsetsToTransaction),
    one transaction aborted and retried, and one producer replaced mid-stream (fenced by its successor)."""
    b = diskless_broker(tmp_path).start()
    try:
        create_diskless(b.bootstrap, "ctp-in")
        create_diskless(b.bootstrap, "ctp-out")
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        for i in range(300):
            p.produce("ctp-in", value=b"%d" % i, partition=0)
        assert p.flush(30) == 0

        def run(limit: int, abort_once: bool) -> int:
            """Transform up to ``limit`` records, 50 per transaction; returns how many were committed."""
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ctp", "isolation.level": "read_committed",
                          "enable.auto.commit": False, "auto.offset.reset": "earliest"})
            t = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "ctp-loop", "linger.ms": 5})
            t.init_transactions(30)  # fences any earlier producer with this id, aborting what it left open
            c.subscribe(["ctp-in"])
            done, aborted = 0, not abort_once
            try:
                deadline = time.monotonic() + 60
                while done < limit and time.monotonic() < deadline:
                    msgs = [m for m in c.consume(50, 1.0) if not m.error()]
                    if not msgs:
                        continue
                    t.begin_transaction()
                    for m in msgs:
                        t.produce("ctp-out", value=b"out-" + m.value(), partition=0)
                    t.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
                    if not aborted:  # the first batch is aborted: its records reappear after a rewind
                        aborted = True
                        assert t.flush(30) == 0
                        t.abort_transaction(30)
                        committed = c.committed(c.assignment(), timeout=10)
                        for tp in committed:
                            c.seek(CkTopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                        continue
                    t.commit_transaction(30)
                    done += len(msgs)
            finally:
                c.close()
            return done

        first = run(100, abort_once=True)  # then a "crash": the next producer with the same id takes over
        second = run(300 - first, abort_once=False)
        assert first + second >= 300
        out = read(b.bootstrap, "ctp-out", "read_committed", partitions=1)
        assert sorted(out, key=lambda v: int(v[4:])) == [b"out-%d" % i for i in range(300)]  # each exactly once
    finally:
        b.stop()
