"""Compaction and transactions, with real transactional producers: ``__transaction_state`` stays bounded by
the transactional ids and a restarted coordinator loads them from the compacted log; on a compacted user
topic, aborted records are removed, committed ones compacted, and read_committed readers see the same
table before and after the cleaning."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from tests.broker.harness import BrokerProcess
from tests.compaction.harness import create, read_all, wait_until

from strata.log.dump import DumpOptions, dump_paths

PROPS = {"log.cleaner.backoff.ms": "100", "transaction.state.log.num.partitions": "1",
         "transaction.state.log.segment.bytes": "4096", "log.retention.check.interval.ms": "200",
         "log.initial.task.delay.ms": "200"}


def log_records(directory: Path) -> int:
    """Records in the partition directory's .log files (what is on disk, as dump-log counts them)."""
    events = dump_paths([directory], DumpOptions())
    return sum(int(e.data["records"]) for e in events if e.kind == "summary" and "records" in e.data)


def read_committed(b: BrokerProcess, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([CkTopicPartition(topic, 0, 0)])
        out: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:
                    return out
                continue
            out.append((m.key(), m.value()))
        raise AssertionError("read_committed did not reach the end")
    finally:
        c.close()


def test_transaction_state_is_compacted_and_reloaded(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker", PROPS).start()
    try:
        create(b, "tx", **{"segment.bytes": "8192"})
        producers = {tid: Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 1})
                     for tid in ("a", "b", "c")}
        for p in producers.values():
            p.init_transactions(30)
        for i in range(60):
            for tid, p in producers.items():
                p.begin_transaction()
                p.produce("tx", key=f"{tid}-{i % 5}".encode(), value=b"%d" % i)
                if i % 4 == 3:
                    p.abort_transaction(30)
                else:
                    p.commit_transaction(30)
        state_dir = b.data_dir / "logs" / "__transaction_state-0"
        # every transaction wrote several __transaction_state records (Ongoing, PrepareCommit, CompleteCommit);
        # the cleaner keeps the last one per transactional id (plus the active segment)
        wait_until("__transaction_state compacted", lambda: log_records(state_dir) < 60, timeout_s=60)
        # the user topic: aborted records gone, committed ones compacted (5 keys per id)
        expected = {(f"{tid}-{k}".encode(), b"%d" % max(i for i in range(60) if i % 5 == k and i % 4 != 3))
                    for tid in producers for k in range(5)}

        def table() -> set[tuple[bytes | None, bytes | None]]:
            return {(k, v) for _, k, v in read_all(b, "tx")}

        before = dict(read_committed(b, "tx"))
        assert set(before.items()) == expected  # the latest committed value of each key
        for p in producers.values():
            p.flush(10)
        b.restart()
        # the coordinator loads the compacted state: each id continues with a bumped epoch, nothing pending
        for tid in producers:
            again = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
            again.init_transactions(30)
            again.begin_transaction()
            again.produce("tx", key=f"{tid}-0".encode(), value=b"after")
            again.commit_transaction(30)
        after = dict(read_committed(b, "tx"))
        assert all(after[f"{tid}-0".encode()] == b"after" for tid in producers)
        # a filler rolls the active segment; once cleaned, the plain read holds no aborted record either
        filler = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1, "batch.size": 4096})  # < segment.bytes
        for i in range(300):
            filler.produce("tx", key=b"filler-%d" % i, value=b"x" * 40)
        filler.flush(10)
        want = {(k, v) for k, v in expected if not k.endswith(b"-0")} | \
               {(f"{tid}-0".encode(), b"after") for tid in producers}
        wait_until("aborted records removed by the cleaner",
                   lambda: {r for r in table() if not (r[0] or b"").startswith(b"filler-")} == want, timeout_s=60)
    finally:
        b.stop()
