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
