"""Diskless under the failures of its two dependencies: the coordinator's leader and the object store.

* ``__diskless_metadata``'s leader is killed while three producers keep writing through every broker:
  commits resume on the new leader, every acknowledged record is read back once and in order, and the
  coordinator state of every replica ends identical (compared by digest).
* The S3 server (SeaweedFS) is stopped for 30 s under a steady producer: produce answers retriable errors or
  waits, nothing acknowledged is lost, and traffic resumes when the store is back.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.broker.harness import BrokerProcess
from tests.cluster.harness import running_cluster
from tests.diskless.harness import create_diskless
from tests.diskless.test_diskless_cluster import _digest
from tests.diskless.test_diskless_single_node import consume_all
from tests.support.seaweedfs import SeaweedFS

from strata.diskless.metadata_log import DISKLESS_METADATA_TOPIC


class Load:
    """An idempotent producer writing ``value(i)`` in order to one partition until stopped."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.acked: list[tuple[int, bytes]] = []
        self.errors: list[object] = []
        self.sent = 0
        self._stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10,
                                  "message.timeout.ms": 180_000, "log_level": 3})
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _report(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append((msg.offset(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"%d" % self.sent, partition=self.partition,
                                  on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0.01)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)
        assert self.producer.flush(180) == 0
        assert not self.errors, self.errors[:3]
        assert [v for _, v in sorted(self.acked)] == [b"%d" % i for i in range(self.sent)]


def test_the_coordinator_leader_killed_during_commits(zk_connect: str, tmp_path: Path) -> None:
    props = {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "local",
             "rsm.config.dir": str(tmp_path / "store"), "diskless.produce.commit.interval.ms": "50",
             "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
             "rlmm.config.remote.log.metadata.topic.num.partitions": "2"}
    with running_cluster(zk_connect, tmp_path, 3, props) as cluster:
        cluster.admin().create_topics([NewTopic("dl", 3, 3, config={"diskless.enable": "true"})])["dl"].result(60)
        cluster.wait_full_isr(DISKLESS_METADATA_TOPIC)
        loads = [Load(cluster.bootstrap, "dl", p) for p in range(3)]
        time.sleep(3)
        leader = cluster.leader_of(DISKLESS_METADATA_TOPIC, 0)
        cluster.brokers[leader].kill()
        time.sleep(5)
        cluster.brokers[leader].start()
        time.sleep(3)
        for load in loads:
            load.stop()
        got = consume_all(cluster.bootstrap, "dl", 3, sum(x.sent for x in loads), timeout_s=90)
        for p, load in enumerate(loads):
            mine = [m for m in got if m.partition() == p]
            assert [m.value() for m in mine] == [b"%d" % i for i in range(load.sent)]
            assert [m.offset() for m in mine] == list(range(load.sent))
        cluster.wait_full_isr(DISKLESS_METADATA_TOPIC, 60)
        deadline = time.monotonic() + 60
        while True:
            digests = {_digest(b.data_dir / "logs" / "diskless-coordinator-0.sqlite") for b in cluster.brokers.values()}
            if len(digests) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(digests) == 1, "the replicas of the coordinator state differ"


@pytest.mark.slow  # 30 s of outage by design: `make soak`
def test_the_store_unreachable_for_30_s(tmp_path: Path, seaweedfs: SeaweedFS) -> None:
    prefix = f"dl-{uuid.uuid4().hex[:8]}/"
    rsm = {f"rsm.config.{k}": str(v) for k, v in seaweedfs.rsm_config().items() if k != "broker.id"}
    b = BrokerProcess(tmp_path / "broker", {"remote.log.storage.system.enable": "true",
                                            "remote.log.storage.manager.class.name": "s3",
                                            "rsm.config.key.prefix": prefix, **rsm}).start()
    try:
        create_diskless(b.bootstrap, "dl")
        load = Load(b.bootstrap, "dl", 0)
        time.sleep(2)
        before = len(load.acked)
        seaweedfs.stop()
        try:
            time.sleep(30)
        finally:
            seaweedfs.start()
        during = len(load.acked)
        deadline = time.monotonic() + 60
        while len(load.acked) < during + 100 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(load.acked) >= during + 100, "traffic did not resume"
        load.stop()
        assert before > 0
        got = consume_all(b.bootstrap, "dl", 1, load.sent, timeout_s=60)
        assert [m.value() for m in got] == [b"%d" % i for i in range(load.sent)]
    finally:
        b.stop()
