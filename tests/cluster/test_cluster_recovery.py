"""A cluster restored from its bucket (issue 29, part 4): three brokers with a tiered, replicated topic are destroyed
(processes killed, every disk and the ZooKeeper data deleted); a new three-broker cluster on a fresh ZooKeeper
chroot and the same bucket gets the topic back with ``strata bucket restore`` (``remote.recovery=true``) and
serves every tiered record again with its offset, value and timestamp; the consumer groups' committed offsets,
copied to the bucket by the old cluster (``offsets.remote.upload.interval.ms``), are committed again.
The restored partitions then work as any: new records go after the restored ones, the followers join the ISR
holding only the local tail, and after the leader is killed the new leader (a replica that never held the
restored data) serves all of it from the bucket."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.cluster.tiered_harness import produce, tiered_props, tiered_topic_config
from tests.support.keys import v2_broker_props
from tests.tiered.harness import Record, read_range

TOPIC = "orders"
PARTITIONS = 3
RECORDS = 500  # per partition: ~8 segments of 64 KiB each

def read(bootstrap: str, partition: int, end: int, timeout_s: float = 60) -> list[Record]:
    return read_range(bootstrap, TOPIC, partition, 0, end, timeout_s)


def offset(cluster: Cluster, partition: int, spec: int) -> int:
    """ListOffsets ``spec`` (-1 latest, -2 earliest, -5 latest tiered) from the partition's leader; -1 on errors."""
    leader = cluster.leader_of(TOPIC, partition)
    if leader < 0:
        return -1
    try:
        with WireClient(cluster.brokers[leader].bootstrap) as w:
            r = w.call(2, 9, replica_id=-1, isolation_level=0, topics=[{"name": TOPIC, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": spec}]}])
    except OSError:
        return -1
    p = r.topics[0].partitions[0]
    return int(p.offset) if p.error_code == 0 else -1


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[CkTopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([CkTopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def bucket_restore(config: Path, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", "bucket", "restore", "--config", str(config),
                           "--bootstrap-server", bootstrap], capture_output=True, text=True, timeout=240)


def test_a_destroyed_cluster_is_restored_from_its_bucket(zk_connect: str, tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    props = {**tiered_props(bucket), **v2_broker_props(tmp_path / "keys"), "rsm.config.chain.checkpoint.interval": "4",
             "offsets.remote.upload.interval.ms": "300"}
    with running_cluster(zk_connect, tmp_path / "old", 3, props) as old:
        old.admin().create_topics([NewTopic(TOPIC, PARTITIONS, 3, config=tiered_topic_config(
            **{"max.message.bytes": "200000"}))])[TOPIC].result(30)
        old.wait_full_isr(TOPIC)
        for p in range(PARTITIONS):
            produce(old.bootstrap, TOPIC, 0, RECORDS, partition=p)
        for p in range(PARTITIONS):
            wait_until(lambda p=p: offset(old, p, -5) >= RECORDS // 2, 60, f"{TOPIC}-{p} mostly tiered")
        expected = {p: read(old.bootstrap, p, RECORDS) for p in range(PARTITIONS)}
        assert all(len(v) == RECORDS for v in expected.values())
        commit(old.bootstrap, "billing", {0: 100, 1: RECORDS})  # 1: past what the bucket will hold
        wait_until(lambda: any('"billing"' in f.read_text() for f in (bucket / "consumer-offsets").glob("*.json"))
                   if (bucket / "consumer-offsets").is_dir() else False, 30, "the group's offsets in the bucket")
    # destroyed: every broker killed (above), every disk and the ZooKeeper data gone; the bucket stays
    shutil.rmtree(tmp_path / "old")
    fresh = f"{zk_connect}-restored"
    try:
        with running_cluster(fresh, tmp_path / "new", 3, props, verbose=True) as new:
            config = tmp_path / "restore.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in {**props, "log.dirs": str(tmp_path / "tool")}.items()))
            run = bucket_restore(config, new.bootstrap)
            assert run.returncode == 0, (run.stdout, run.stderr)
            assert "1 topics restored" in run.stdout and "group billing: committed offsets of 2 partitions" in \
                run.stdout, run.stdout
            meta = new.metadata(TOPIC)
            assert len(meta.partitions) == PARTITIONS and all(len(p.replicas) == 3 for p in meta.partitions.values())
            ends = {}
            for p in range(PARTITIONS):
                ends[p] = wait_until(lambda p=p: (e := offset(new, p, -1)) >= RECORDS // 2 and e, 60,
                                     f"{TOPIC}-{p} restored")
                assert offset(new, p, -2) == 0
                assert read(new.bootstrap, p, ends[p]) == expected[p][: ends[p]]  # offsets, values, timestamps
            # the group resumes where it was; past the restored end (records never tiered), at the end
            assert committed(new.bootstrap, "billing") == {0: 100, 1: ends[1]}
            again = bucket_restore(config, new.bootstrap)  # nothing left to do: restored before
            assert again.returncode == 0 and "0 topics restored, 1 restored before" in again.stdout, again.stdout
            new.wait_full_isr(TOPIC, 60)  # followers built their state from the bucket, as KIP-405 followers do
            produce(new.bootstrap, TOPIC, 100_000, 10, partition=0)
            assert offset(new, 0, -1) == ends[0] + 10
            victim = new.leader_of(TOPIC, 0)
            new.brokers[victim].kill()
            wait_until(lambda: new.leader_of(TOPIC, 0) not in (-1, victim), 30, "a new leader of partition 0")
            got = read(new.bootstrap, 0, ends[0] + 10)
            assert got[: ends[0]] == expected[0][: ends[0]] and [r[0] for r in got[ends[0]:]] == \
                list(range(ends[0], ends[0] + 10))
    finally:
        zk = KazooClient(hosts=fresh.split("/", 1)[0])
        zk.start(timeout=10)
        try:
            zk.delete("/" + fresh.split("/", 1)[1], recursive=True)
        finally:
            zk.stop()
            zk.close()
