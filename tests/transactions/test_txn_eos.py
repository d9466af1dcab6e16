"""Exactly-once consume-transform-produce under ``kill -9``.

The application (``eos_app.py``, confluent-kafka) is killed at random moments - inside a transaction,
between its produce and its offset commit, during the commit - and restarted each time. At the end the
output holds every input record exactly once and the group's committed offsets are the input's ends.
``make test`` runs a few kills; ``make soak`` runs ``STRATA_SOAK_EOS_CYCLES`` (50).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.cluster.harness import wait_until
from tests.transactions.clients import until_end_confluent

APP = Path(__file__).with_name("eos_app.py")
PARTITIONS = 3


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([CkTopicPartition(topic, p) for p in range(PARTITIONS)], 30)]
    finally:
        c.close()


def _run_with_kills(bootstrap: str, tmp: Path, cycles: int, records: int, seed: int) -> None:
    rng = random.Random(seed)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("eos-in", PARTITIONS, 1), NewTopic("eos-out", PARTITIONS, 1)]).values():
        f.result(30)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    values = [f"r-{i % PARTITIONS}-{i}".encode() for i in range(records)]
    for i, v in enumerate(values):
        plain.produce("eos-in", v, partition=i % PARTITIONS)
    assert plain.flush(30) == 0
    args = [sys.executable, str(APP), bootstrap, "eos-group", "eos-app", "eos-in", "eos-out", str(PARTITIONS)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def start(n: int) -> tuple[subprocess.Popen[bytes], Path]:
        out = tmp / f"app-{n}.log"
        with open(out, "wb") as f:
            return subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env), out

    kills = 0
    for n in range(cycles):
        proc, out = start(n)
        try:
            wait_until(lambda out=out, proc=proc: b"ready" in out.read_bytes() or proc.poll() is not None, 60,
                       "the app ready")
            assert proc.poll() is None, out.read_text()
            # kill it somewhere in its work: after 0-3 committed transactions plus a random fraction of one
            done = rng.randint(0, 3)
            wait_until(lambda out=out, done=done: out.read_bytes().count(b"committed") >= done, 60, "commits")
            time.sleep(rng.uniform(0, 0.05))
        finally:
            proc.kill()
            proc.wait(10)
        kills += 1
    proc, out = start(cycles)
    try:
        ends = [records // PARTITIONS + (1 if p < records % PARTITIONS else 0) for p in range(PARTITIONS)]
        wait_until(lambda: _committed(bootstrap, "eos-group", "eos-in") == ends, 120,
                   f"every input record processed (after {kills} kills)")
    finally:
        proc.kill()
        proc.wait(10)
    got = until_end_confluent(bootstrap, "eos-out", PARTITIONS, "read_committed", timeout_s=60)
    assert len(got) == len(set(got)), "a record written twice"
    assert sorted(got) == sorted(values)


def test_consume_transform_produce_killed_repeatedly_is_exactly_once(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", {"transaction.state.log.num.partitions": "3",
                                                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    broker.start()
    try:
        _run_with_kills(broker.bootstrap, tmp_path, cycles=5, records=3000, seed=20261125)
    finally:
        broker.stop()


@pytest.mark.slow
def test_consume_transform_produce_soak(tmp_path: Path) -> None:
    cycles = int(os.environ.get("STRATA_SOAK_EOS_CYCLES", "50"))
    seed = int(os.environ.get("STRATA_SOAK_SEED", str(random.randrange(1 << 30))))
    print(f"eos soak: {cycles} kills, seed {seed}")
    broker = BrokerProcess(tmp_path / "broker", {"transaction.state.log.num.partitions": "3",
                                                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    broker.start()
    try:
        _run_with_kills(broker.bootstrap, tmp_path, cycles=cycles, records=400 * cycles, seed=seed)
    finally:
        broker.stop()
