"""ZooKeeper failing under a running cluster (replication reference 1.5 and 2.3): a three-node ensemble on
127.0.0.1, broker processes, real clients producing acks=all and fetching all along.

* One ensemble member killed, then the ensemble leader: clients see no error and every write is
  acknowledged (ZooKeeper is not on the produce or fetch path; a session moves to another member).
* The whole ensemble down for 30 s: leaders keep serving produce and fetch, nothing crashes, a broker
  stopped meanwhile stops cleanly; the ensemble comes back while the other brokers are frozen until
  their sessions have expired, and the cluster converges from there: every broker fenced, registered
  again, a new controller, full ISRs.
* A broker started while ZooKeeper is unreachable says so in one line and exits non-zero after
  ``zookeeper.connection.timeout.ms``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.cluster.test_replication import consume_all

from strata.tools.zookeeper import ZooKeeperEnsemble, free_port, zookeeper_available

OUTAGE_S = 30.0  # the whole ensemble down for the 30 s the issue names (fifteen session timeouts)


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    if not zookeeper_available():
        pytest.fail("ZooKeeper is not installed (apt-get install zookeeper)")
    zk = ZooKeeperEnsemble(tmp_path_factory.mktemp("ensemble")).start().wait_ready()
    try:
        yield zk
    finally:
        zk.stop()


def chroot(ensemble: ZooKeeperEnsemble) -> str:
    return f"{ensemble.connect}/t-{uuid.uuid4().hex[:12]}"


class Traffic:
    """A producer thread writing acks=all (idempotent) as fast as a few hundred records a second, and a
    consumer thread fetching them (assigned partitions: no group coordinator involved)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.consumed = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, name="producer"),
                         threading.Thread(target=self._consume, name="consumer")]

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _produce(self) -> None:
        def done(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 2, "message.timeout.ms": 60_000})
        i = 0
        while not self._stop.is_set():
            p.produce(self.topic, value=b"r%d" % i, key=b"k%d" % i, on_delivery=done)
            i += 1
            p.poll(0.002)
        if p.flush(45) != 0:
            self.errors.append("records not delivered when the traffic stopped")

    def _consume(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        try:
            while not self._stop.is_set():
                for m in c.consume(500, timeout=0.2):
                    if not m.error():
                        self.consumed += 1
        finally:
            c.close()

    def more(self, n: int, timeout_s: float, what: str) -> None:
        """Wait until ``n`` more records are acknowledged and ``n`` more fetched."""
        acked, consumed = len(self.acked), self.consumed
        wait_until(lambda: len(self.acked) >= acked + n and self.consumed >= consumed + n and not self.errors,
                   timeout_s, f"{n} more records acknowledged and fetched {what} (errors: {self.errors[:3]})")


def check_everything_acknowledged_is_there(cluster: Cluster, traffic: Traffic) -> None:
    assert not traffic.errors, traffic.errors[:5]
    got = consume_all(cluster.bootstrap, traffic.topic, traffic.partitions)
    for p in range(traffic.partitions):
        # librdkafka reports a retried batch the broker answered DUPLICATE_SEQUENCE_NUMBER as delivered
        # without an offset: such a record must be in the log exactly once, wherever it is
        acked = sorted((o, v) for part, o, v in traffic.acked if part == p and o is not None)
        unplaced = [v for part, o, v in traffic.acked if part == p and o is None]
        read = [(o, v) for o, v in got[p]]
        placed = [(o, v) for o, v in read if v not in set(unplaced)]
        assert placed == acked, f"partition {p}: {len(got[p])} records read, {len(acked)} acknowledged at an offset"
        values = [v for _, v in read]
        assert all(values.count(v) == 1 for v in unplaced), f"partition {p}: a record acknowledged without an " \
                                                            "offset is missing or duplicated"


def no_tracebacks(cluster: Cluster) -> None:
    for b in cluster.brokers.values():
        assert b.proc is not None and b.proc.poll() is None, f"{b.log_path}: the broker exited"
        text = b.log_path.read_text(errors="replace")
        assert "Traceback" not in text, text[text.index("Traceback") - 500:][:3000]


def test_ensemble_members_killed_during_traffic(ensemble: ZooKeeperEnsemble, tmp_path: Path) -> None:
    with running_cluster(chroot(ensemble), tmp_path, verbose=True) as cluster:
        cluster.admin().create_topics([NewTopic("t", 3, 3, config={"min.insync.replicas": "2"})])["t"].result(30)
        cluster.wait_full_isr("t")
        with Traffic(cluster.bootstrap, "t", 3) as traffic:
            traffic.more(200, 30, "before any failure")
            follower = wait_until(lambda: next((s for s in ensemble.servers if s.mode() == "follower"), None), 30,
                                  "a follower of the ensemble")
            follower.kill()
            traffic.more(300, 30, "without one follower of the ensemble")
            follower.start().wait_ready()
            leader = wait_until(ensemble.leader, 30, "the ensemble's leader")
            leader.kill()  # the ensemble elects another leader: sessions move to the members left
            traffic.more(300, 30, "after the ensemble leader was killed")
            leader.start().wait_ready()
            traffic.more(100, 30, "with the whole ensemble back")
        check_everything_acknowledged_is_there(cluster, traffic)
        cluster.wait_full_isr("t")
        no_tracebacks(cluster)


def registered_brokers(connect: str) -> list[str]:
    """``/brokers/ids`` read straight from ZooKeeper (a client of the test's own)."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=connect)
    zk.start(timeout=10)
    try:
        return sorted(zk.get_children("/brokers/ids"))
    finally:
        zk.stop()
        zk.close()


@pytest.mark.slow  # make soak (38 s): suite time; members killed during traffic stays in make test
def test_whole_ensemble_down_leaders_serve_and_the_cluster_converges(ensemble: ZooKeeperEnsemble,
                                                                     tmp_path: Path) -> None:
    connect = chroot(ensemble)
    # a controlled shutdown bounded to 2 s: (retries + 1) x backoff
    props = {"controlled.shutdown.max.retries": "0", "controlled.shutdown.retry.backoff.ms": "2000"}
    with running_cluster(connect, tmp_path, props=props, verbose=True) as cluster:
        cluster.admin().create_topics([NewTopic("t", 3, 3, config={"min.insync.replicas": "2"})])["t"].result(30)
        cluster.wait_full_isr("t")
        with Traffic(cluster.bootstrap, "t", 3) as traffic:
            traffic.more(200, 30, "before the outage")
            for server in ensemble.servers:
                server.kill()
            back_at = time.monotonic() + OUTAGE_S
            traffic.more(300, OUTAGE_S, "while ZooKeeper is down")  # leaders serve produce and fetch
            no_tracebacks(cluster)
            # a broker stopped meanwhile stops (its controlled shutdown cannot reach the controller), cleanly
            stopped = cluster.brokers[3]
            assert stopped.stop() == 0
            assert "strata broker stopped" in stopped.tail(2000)
            time.sleep(max(0.0, back_at - time.monotonic()))  # the outage's length, not a wait for anything
            # ZooKeeper restores the sessions when it comes back and gives them a new timeout: brokers that
            # reconnect in time keep them. These do not -- frozen until their sessions have expired (their
            # registrations gone) -- so they come back to LOST sessions: fenced leaderships, controller gone.
            pids = [b.pid() for b in cluster.brokers.values() if b is not stopped]
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                ensemble.start().wait_ready()
                wait_until(lambda: registered_brokers(connect) == [], 30, "the frozen brokers' sessions expired")
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            stopped.start()
            wait_until(lambda: registered_brokers(connect) == ["1", "2", "3"], 30, "every broker registered again")
            wait_until(lambda: cluster.admin().list_topics(timeout=5).controller_id in cluster.brokers, 30,
                       "a controller")
            cluster.wait_full_isr("t")
            traffic.more(200, 30, "after the outage")
        check_everything_acknowledged_is_there(cluster, traffic)
        no_tracebacks(cluster)
        for b in cluster.brokers.values():
            if b is not stopped:
                text = b.log_path.read_text(errors="replace")
                assert "ZooKeeper session expired" in text and "re-registered as broker" in text, b.log_path


def test_broker_started_while_zookeeper_is_unreachable_exits(tmp_path: Path) -> None:
    connect = f"127.0.0.1:{free_port()}"
    args = [sys.executable, "-m", "strata", "serve", "--set", f"log.dirs={tmp_path / 'logs'}",
            "--set", "listeners=PLAINTEXT://127.0.0.1:0", "--set", "broker.id=1",
            "--set", f"zookeeper.connect={connect}", "--set", "zookeeper.connection.timeout.ms=2000"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    said = f"cannot connect to ZooKeeper at {connect} within zookeeper.connection.timeout.ms=2000"
    assert any(said in line for line in lines), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and lines[0].startswith("strata serve:"), done.stderr
