"""Diskless faults on one broker: ``kill -9`` between upload and commit, and between commit and answer.

An idempotent producer keeps sending through the crash and the restart. Every acknowledged record must be
read back exactly once and in order; the object uploaded but never committed is swept once it is older
than ``diskless.orphan.grace.ms``, and an object committed whose answer was lost is deduplicated by the
producer's sequence numbers (its retry lands in a new object; the duplicate batch is not served twice).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.diskless.harness import create_diskless, diskless_broker, wal_objects
from tests.diskless.test_diskless_single_node import consume_all
from tests.reliability.crash_harness import environment


def committed_keys(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[0] for row in conn.execute("SELECT object_key FROM files")}


@pytest.mark.parametrize("point", ["diskless.after_upload", "diskless.after_commit"])
def test_a_broker_killed_mid_commit_loses_nothing_acknowledged_and_leaves_no_orphan(tmp_path: Path,
                                                                                     point: str) -> None:
    b = diskless_broker(tmp_path, **{"diskless.orphan.grace.ms": "1500",
                                      "diskless.produce.commit.interval.ms": "50"}).start()
    try:
        create_diskless(b.bootstrap, "dl")
        b.stop()
        with environment({"STRATA_CRASH_POINT": f"{point}:5"}):
            b.start()
        acked: list[tuple[int, bytes]] = []
        errors: list[object] = []

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(err)
            else:
                acked.append((msg.offset(), msg.value()))
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                      "message.timeout.ms": 120_000, "reconnect.backoff.max.ms": 500})
        sent = 0

        def send(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                p.produce("dl", value=b"%d" % sent, on_delivery=on_delivery)
                sent += 1
                p.poll(0.002)
        deadline = time.monotonic() + 60
        while b.proc is not None and b.proc.poll() is None and time.monotonic() < deadline:
            send(20)  # until the fifth upload (or commit) kills the broker on the way
            p.poll(0.05)
        assert b.proc is not None and b.proc.poll() is not None, "the crash point was not reached"
        assert b.stop() == -9 and f"crash point {point} reached" in b.tail()
        restarter = threading.Thread(target=b.start)
        restarter.start()
        send(200)
        restarter.join(60)
        assert p.flush(120) == 0 and not errors, errors[:3]
        values = [v for _, v in sorted(acked)]
        assert values == [b"%d" % i for i in range(sent)], "acknowledged in order, each once"
        msgs = consume_all(b.bootstrap, "dl", 1, sent)
        assert [m.value() for m in msgs] == [b"%d" % i for i in range(sent)]
        assert [m.offset() for m in msgs] == list(range(sent))
        time.sleep(3)  # the orphan's grace period and one sweep
    finally:
        b.stop()
    in_store = {str(p.relative_to(tmp_path / "remote")) for p in wal_objects(tmp_path)}
    committed = committed_keys(b.data_dir / "logs" / "diskless-coordinator-0.sqlite")
    assert in_store and in_store <= committed, f"not committed but kept: {sorted(in_store - committed)[:3]}"
