"""Transactions on a 3-broker cluster: the coordinator moves with ``__transaction_state`` leadership.

The coordinator's broker is killed (``kill -9`` at a crash point) between the two writes that matter:
after PrepareCommit is durable but before any marker, and after every marker but before
CompleteCommit. Either way the new coordinator (the new leader of the id's partition) loads the
decided transaction and finishes it: the transaction commits, never half, and the producer goes on.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import running_cluster, wait_until
from tests.transactions.clients import until_end_confluent

TOPIC = "ha-out"
PROPS = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3",
         "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500", "offsets.topic.num.partitions": "3"}


@pytest.mark.parametrize("point", ["txn.after_prepare", "txn.before_complete"])
def test_coordinator_killed_mid_commit_the_transaction_completes(zk_connect: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    monkeypatch.setenv("STRATA_CRASH_POINT", point)
    monkeypatch.setenv("STRATA_CRASH_POINT_ARM", "signal")  # dormant until SIGUSR1: only the coordinator dies
    with running_cluster(zk_connect, tmp_path, 3, PROPS, verbose=True) as cluster:
        monkeypatch.delenv("STRATA_CRASH_POINT")  # a restarted broker is not armed
        monkeypatch.delenv("STRATA_CRASH_POINT_ARM")
        cluster.admin().create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "ha", "linger.ms": 5})
        p.init_transactions(60)
        cluster.wait_full_isr("__transaction_state")
        with WireClient(cluster.bootstrap.split(",")[0]) as w:
            coordinator = w.call(10, 3, key="ha", key_type=1).node_id
        os.kill(cluster.brokers[coordinator].pid(), signal.SIGUSR1)
        p.begin_transaction()
        first = [f"first-{i % 3}-{i}".encode() for i in range(30)]
        for i, v in enumerate(first):
            p.produce(TOPIC, v, partition=i % 3)
        p.commit_transaction(90)  # the coordinator dies during it; the client retries on the new one
        # EndTxn is answered once PrepareCommit is durable; the markers come after it
        wait_until(lambda: cluster.brokers[coordinator].proc.poll() is not None, 30, "the armed coordinator dying")
        dead = [i for i, b in cluster.brokers.items() if b.proc is not None and b.proc.poll() is not None]
        assert dead == [coordinator], f"only the armed coordinator {coordinator} should have died: {dead}"
        assert f"strata crash point {point} reached" in cluster.brokers[dead[0]].tail(100_000)
        got = until_end_confluent(cluster.bootstrap, TOPIC, 3, "read_committed", timeout_s=60)
        assert sorted(got) == sorted(first)

        # the producer goes on: a second transaction on the new coordinator, then with the old one back
        p.begin_transaction()
        p.produce(TOPIC, b"second-0-0", partition=0)
        p.commit_transaction(60)
        cluster.brokers[dead[0]].proc = None
        cluster.brokers[dead[0]].start()
        cluster.wait_full_isr("__transaction_state", 60)
        p.begin_transaction()
        p.produce(TOPIC, b"third-1-0", partition=1)
        p.commit_transaction(60)
        wait_until(lambda: sorted(until_end_confluent(cluster.bootstrap, TOPIC, 3, "read_committed")) ==
                   sorted([*first, b"second-0-0", b"third-1-0"]), 60, "every committed record")
        assert len(until_end_confluent(cluster.bootstrap, TOPIC, 3, "read_uncommitted")) == 32
