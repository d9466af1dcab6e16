"""Diskless topics in a 3-broker ZooKeeper cluster on S3 (SeaweedFS): leaderless produce, no replication.

Every broker takes produce for every diskless partition, commits through ``__diskless_metadata``'s leader
(other brokers forward their commands), and every broker's replica of the coordinator state ends the same.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.broker.kafka_wire import WireClient, produce
from tests.cluster.harness import Cluster, running_cluster
from tests.cluster.test_cluster_metrics import scrape
from tests.diskless.test_diskless_single_node import consume_all
from tests.support.seaweedfs import SeaweedFS

from strata.diskless.coordinator import SqliteControlPlane
from strata.protocol.records import BatchBuilder

FETCHER_BYTES = "kafka_server_FetcherStats_BytesPerSec_total"  # labelled per fetcher: summed over every series
PAD = b"x" * 1000
DATA_BYTES = 1500 * 1000


def test_every_broker_takes_produce_and_nothing_is_replicated(zk_connect: str, tmp_path: Path,
                                                               seaweedfs: SeaweedFS) -> None:
    prefix = f"dl-{uuid.uuid4().hex[:8]}/"
    rsm = {f"rsm.config.{k}": str(v) for k, v in seaweedfs.rsm_config().items() if k != "broker.id"}
    props = {"remote.log.storage.system.enable": "true", "remote.log.storage.manager.class.name": "s3",
             "rsm.config.key.prefix": prefix, "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
             "rlmm.config.remote.log.metadata.topic.num.partitions": "2", "metrics.port": "0", **rsm}
    with running_cluster(zk_connect, tmp_path, 3, props) as cluster:
        cluster.admin().create_topics([NewTopic("dl", 3, 3, config={"diskless.enable": "true"})])["dl"].result(60)
        # leaderless: a Produce to each broker for each partition is taken, whoever the "leader" is
        for broker_id, b in cluster.brokers.items():
            with WireClient(b.bootstrap) as w:
                for partition in range(3):
                    builder = BatchBuilder()
                    builder.append(b"from-%d-%d" % (broker_id, partition), key=None)
                    answer = produce(w, "dl", partition, builder.build())
                    assert int(answer.error_code) == 0, answer
        replicated_before = replicated_bytes(cluster)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        for i in range(1500):
            p.produce("dl", value=b"v%d" % i + PAD, partition=i % 3)
        assert p.flush(60) == 0
        diskless_replicated = replicated_bytes(cluster) - replicated_before
        msgs = consume_all(cluster.bootstrap, "dl", 3, 1509, timeout_s=60)
        assert len(msgs) == 1509
        for partition in range(3):
            got = [m for m in msgs if m.partition() == partition]
            assert [m.offset() for m in got] == list(range(503))
            assert {m.value() for m in got[:3]} == {b"from-%d-%d" % (b, partition) for b in (1, 2, 3)}
            assert [m.value() for m in got[3:]] == [b"v%d" % i + PAD for i in range(partition, 1500, 3)]
        wal = [k for k in seaweedfs.list_keys(prefix) if k.startswith(f"{prefix}diskless/wal/")]
        assert wal, "WAL objects are in the bucket"
        for b in cluster.brokers.values():  # no broker holds a copy of diskless data
            for partition in range(3):
                logs = list((b.data_dir / "logs" / f"dl-{partition}").glob("*.log"))
                assert all(f.stat().st_size == 0 for f in logs), (b.data_dir, logs)
        # the same workload on a classic RF=3 topic: its followers copy it twice; the diskless one was copied by
        # no broker (what replicated is __diskless_metadata's commands, a few bytes a batch)
        cluster.admin().create_topics([NewTopic("classic", 3, 3)])["classic"].result(60)
        cluster.wait_full_isr("classic")
        replicated_before = replicated_bytes(cluster)
        for i in range(1500):
            p.produce("classic", value=b"v%d" % i + PAD, partition=i % 3)
        assert p.flush(60) == 0
        deadline = time.monotonic() + 30
        while replicated_bytes(cluster) - replicated_before < 2 * DATA_BYTES and time.monotonic() < deadline:
            time.sleep(0.5)
        classic_replicated = replicated_bytes(cluster) - replicated_before
        assert classic_replicated >= 2 * DATA_BYTES
        print(f"replica fetchers appended {diskless_replicated:.0f} bytes for {DATA_BYTES} diskless bytes produced, "
              f"{classic_replicated:.0f} for as many classic (RF=3) bytes")
        assert diskless_replicated < 0.1 * DATA_BYTES, (diskless_replicated, classic_replicated)
        # every replica of the coordinator state applied the same commands
        deadline = time.monotonic() + 30
        while True:
            digests = set()
            for b in cluster.brokers.values():
                digests.add(_digest(b.data_dir / "logs" / "diskless-coordinator-0.sqlite"))
            if len(digests) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(digests) == 1


def replicated_bytes(cluster: Cluster) -> float:
    """Record bytes every broker's replica fetchers appended (Kafka's FetcherStats BytesPerSec)."""
    return sum(v for b in cluster.brokers.values() for k, v in scrape(b).items() if k.startswith(FETCHER_BYTES))


def _digest(path: Path) -> str:
    assert path.exists(), f"no coordinator state at {path}"
    state = SqliteControlPlane(str(path))
    try:
        assert state.applied_offset() > 0
        return state.state_digest()
    finally:
        state.close()
