"""Log compaction in a replicated cluster: real broker processes on a real ZooKeeper, confluent-kafka clients.

As in Kafka, every replica cleans its own log (followers included), and a follower replicates compacted
data - batches whose offsets have gaps - from a leader whose log was already cleaned. Each replica's
files are read with ``dump-log``'s reader (:func:`strata.log.dump.dump_paths`, read-only, safe on a live
directory) and compared with a model of what was acknowledged: the latest value of each key at the
offset it was written.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import Cluster, running_cluster, wait_until

from strata.common import TopicPartition
from strata.coordinator.group.records import partition_for
from strata.log.checkpoints import OffsetCheckpointFile
from strata.log.dump import DumpOptions, EventKind, dump_paths

TOPIC = "table"
PROPS = {"log.cleaner.backoff.ms": "100", "offsets.topic.segment.bytes": "16384"}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
                "min.insync.replicas": "2"}
ALTER_PARTITION_REASSIGNMENTS = 45

Record = tuple[int, str, str | None]  # (offset, key, value) as dump-log prints them


class Model:
    """The acknowledged records: the latest (offset, value) per key."""

    def __init__(self) -> None:
        self.latest: dict[str, tuple[int, str | None]] = {}

    def produce(self, bootstrap: str, records: list[tuple[str, str | None]], topic: str = TOPIC) -> list[Record]:
        """Produce (acks=all) and wait for every delivery report; returns what was acknowledged."""
        acked: list[Record] = []
        errors: list[str] = []

        def done(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
                return
            value = msg.value()  # type: ignore[attr-defined]
            acked.append((msg.offset(), msg.key().decode(), None if value is None else value.decode()))  # type: ignore[attr-defined]

        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 2048,
                      "message.timeout.ms": 30_000})
        for i, (key, value) in enumerate(records):
            p.produce(topic, key=key.encode(), value=None if value is None else value.encode(), on_delivery=done)
            if i % 500 == 0:
                p.poll(0)
        assert p.flush(30) == 0
        assert not errors, errors[:3]
        for offset, key, value in acked:
            if offset > self.latest.get(key, (-1, None))[0]:
                self.latest[key] = (offset, value)
        return acked

    def expected(self) -> list[Record]:
        return sorted((offset, key, value) for key, (offset, value) in self.latest.items())

    def of(self, records: list[Record]) -> list[Record]:
        """The records of the model's keys, in offset order (filler and other keys left out)."""
        return [r for r in records if r[1] in self.latest]


def updates(keys: int, rounds: int, tag: str, tombstone_every: int = 0) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for r in range(rounds):
        for k in range(keys):
            last = r == rounds - 1
            value = None if last and tombstone_every and k % tombstone_every == 0 else f"{tag}-{r}-{k}-" + "x" * 30
            out.append((f"k{k}", value))
    return out


def filler(tag: str, n: int = 700) -> list[tuple[str, str | None]]:
    """Unique keys, > 2 segments: every replica rolls past the model's records, so they are all cleanable."""
    return [(f"filler-{tag}-{i}", "f" * 40) for i in range(n)]


def partition_dir(b: BrokerProcess, topic: str = TOPIC, partition: int = 0) -> Path | None:
    found = sorted(b.data_dir.glob(f"logs*/{topic}-{partition}"))
    return found[0] if found else None


def replica_records(b: BrokerProcess, topic: str = TOPIC, partition: int = 0) -> list[Record] | None:
    """Every data record in the replica's files, read as ``strata dump-log --print-data-log`` does; None
    if the directory is missing or the dump saw a problem (a segment swapped or deleted while read)."""
    path = partition_dir(b, topic, partition)
    if path is None:
        return None
    out: list[Record] = []
    control = False
    for e in dump_paths([path], DumpOptions(print_data=True)):
        if e.kind is EventKind.PROBLEM:
            return None
        if e.kind is EventKind.BATCH:
            control = e.data["is_control"]
        elif e.kind is EventKind.RECORD and e.file_type == "log" and not control:
            out.append((e.data["offset"], e.data["key"], e.data["payload"]))
    return out


def has_gaps(records: list[Record], start: int = 0) -> bool:
    """Whether offsets from ``start`` on hold no record: the cleaner removed them."""
    offsets = [o for o, _, _ in records if o >= start]
    return offsets != list(range(start, start + len(offsets)))


def served(cluster: Cluster, topic: str = TOPIC) -> list[Record]:
    """What a consumer reads from offset 0 to the high watermark (from the current leader)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    out: list[Record] = []
    try:
        c.assign([CkTopicPartition(topic, 0, 0)])
        eof = False

        def step() -> bool:
            nonlocal eof
            for m in c.consume(5000, timeout=0.5):
                if m.error():
                    eof = eof or m.error().code() == KafkaError._PARTITION_EOF
                    continue
                value = m.value()
                out.append((m.offset(), m.key().decode(), None if value is None else value.decode()))
            return eof
        wait_until(step, 30, f"{topic}-0 read to its end", interval_s=0)
    finally:
        c.close()
    return out


def wait_replicas_compacted(cluster: Cluster, model: Model, broker_ids: list[int], what: str,
                            topic: str = TOPIC, timeout_s: float = 30.0) -> dict[int, list[Record]]:
    """Until each replica's files hold exactly the model for its keys: the cleaner ran on every one."""
    expected = model.expected()
    got: dict[int, list[Record]] = {}

    def compacted() -> bool:
        for i in broker_ids:
            records = replica_records(cluster.brokers[i], topic)
            if records is None or model.of(records) != expected:
                return False
            got[i] = records
        return True
    try:
        wait_until(compacted, timeout_s, what, interval_s=0.3)
    except AssertionError:
        for i in broker_ids:
            records = replica_records(cluster.brokers[i], topic) or []
            print(f"broker {i}: {len(model.of(records))} model-key records, expected {len(expected)}")
        raise
    return got


def clean_offset(b: BrokerProcess, topic: str = TOPIC) -> int | None:
    """The replica's clean offset in its log dir's ``cleaner-offset-checkpoint``: its own cleaner ran."""
    path = partition_dir(b, topic)
    if path is None:
        return None
    return OffsetCheckpointFile(path.parent / "cleaner-offset-checkpoint").read().get(TopicPartition(topic, 0))


def said_since(b: BrokerProcess, position: int) -> str:
    return b.log_path.read_bytes()[position:].decode(errors="replace")


@contextmanager
def paused(*brokers: BrokerProcess) -> Iterator[None]:
    """SIGSTOP the brokers (our own processes) for the block: they neither fetch nor answer."""
    pids = [b.pid() for b in brokers]
    for pid in pids:
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)  # type: ignore[arg-type]


def produce_unreplicated(bootstrap: str, for_s: float = 0.6) -> list[Record]:
    """One record per produce request (acks=1) to the leader, every 50 ms for ``for_s``, its followers
    paused: a fetch they sent before the pause is answered within replica.fetch.wait.max.ms (200 ms), so
    the later records are on the leader only. Returns (offset, key, value) of each, in order."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False, "linger.ms": 0,
                  "message.timeout.ms": 10_000})
    acked: list[Record] = []

    def done(err: object, msg: object) -> None:
        assert err is None, err
        acked.append((msg.offset(), msg.key().decode(), msg.value().decode()))  # type: ignore[attr-defined]

    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline or len(acked) < 3:
        p.produce(TOPIC, key=b"unsafe-%d" % len(acked), value=b"u", on_delivery=done)
        assert p.flush(10) == 0
        time.sleep(0.05)  # pacing (a dozen records, not thousands), not a wait for a state
    return acked


def reassign(cluster: Cluster, replicas: list[int]) -> None:
    controller = cluster.admin().list_topics(timeout=10).controller_id
    with WireClient(cluster.brokers[controller].bootstrap) as w:
        r = w.call(ALTER_PARTITION_REASSIGNMENTS, 0, timeout=30_000, topics=[{"name": TOPIC, "partitions": [
            {"partition_index": 0, "replicas": replicas}]}])
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0, r
    wait_until(lambda: list(cluster.metadata(TOPIC).partitions[0].replicas) == replicas, 30,
               f"{TOPIC}-0 reassigned to {replicas}")


def test_every_replica_compacts_and_followers_replicate_compacted_logs(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, props=PROPS) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 1, 3, config=TOPIC_CONFIG)])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        model = Model()

        # 1. Several updates per key, then filler: every replica (followers too) compacts its own log,
        # and the leader serves exactly the model.
        model.produce(cluster.bootstrap, updates(300, 8, "a", tombstone_every=10))
        model.produce(cluster.bootstrap, filler("a"))
        wait_replicas_compacted(cluster, model, [1, 2, 3], "every replica compacted")
        first_filler = min(o for o, k, _ in served(cluster) if k.startswith("filler-a-"))
        for i, b in cluster.brokers.items():  # each replica's own cleaner, not only its leader's, cleaned it
            wait_until(lambda b=b: (clean_offset(b) or 0) >= first_filler, 10, f"broker {i}'s clean offset")
        wait_until(lambda: model.of(served(cluster)) == model.expected(), 30, "the leader to serve the model")

        # 2. Records only the leader has (its followers paused, acks=1), then kill -9 of the leader.
        cluster.wait_full_isr(TOPIC)
        old = cluster.leader_of(TOPIC, 0)
        others = [i for i in cluster.brokers if i != old]
        with paused(*(cluster.brokers[i] for i in others)):
            unsafe = produce_unreplicated(cluster.brokers[old].bootstrap)
            cluster.brokers[old].kill()
        new = wait_until(lambda: (lambda ldr: ldr if ldr not in (-1, old) else None)(cluster.leader_of(TOPIC, 0)),
                         30, "a new leader")
        wait_until(lambda: model.of(served(cluster)) == model.expected(), 30, "the new leader to serve the model")
        # A fetch answered just as the followers were paused can have carried the first few of them.
        survivors = [r for r in served(cluster) if r[1].startswith("unsafe-")]
        assert survivors == unsafe[:len(survivors)] and len(survivors) < len(unsafe), (survivors, unsafe)

        # More updates on the new leader; its log and its follower's get compacted before the old leader
        # comes back, so what the old leader fetches is compacted batches with offset gaps.
        model.produce(cluster.bootstrap, updates(300, 3, "b", tombstone_every=7))
        model.produce(cluster.bootstrap, filler("b"))
        live = wait_replicas_compacted(cluster, model, others, "the live replicas compacted after the failover")
        divergence = unsafe[0][0]  # where the old leader's log parts from the new leader's
        assert has_gaps(live[new], divergence), "the leader's log past the old leader's end is not compacted"

        log_before = cluster.brokers[old].log_path.stat().st_size
        cluster.brokers[old].start()
        cluster.wait_full_isr(TOPIC)
        said = said_since(cluster.brokers[old], log_before)
        assert f"{TOPIC}-0: truncating to {divergence + len(survivors)} " in said, "no truncation of the unsafe records"

        def converged(ids: list[int]) -> list[Record] | None:
            logs = [replica_records(cluster.brokers[i]) for i in ids]
            first = logs[0]
            if first is None or any(r != first for r in logs) or model.of(first) != model.expected():
                return None
            return first
        final = wait_until(lambda: converged([1, 2, 3]), 30, "every replica to hold the same compacted records")
        assert [r for r in final if r[1].startswith("unsafe-")] == survivors  # the others were truncated
        assert model.of(served(cluster)) == model.expected()

        # 3. A replica that starts empty: drop a follower from the assignment (its log is deleted), add it
        # back; it fetches the compacted log from offset 0 and ends with the leader's records.
        leader = cluster.leader_of(TOPIC, 0)
        replicas = list(cluster.metadata(TOPIC).partitions[0].replicas)
        fresh = next(i for i in replicas if i != leader)
        reassign(cluster, [i for i in replicas if i != fresh])
        wait_until(lambda: partition_dir(cluster.brokers[fresh]) is None, 30, "the removed replica's log deleted")
        reassign(cluster, replicas)
        cluster.wait_full_isr(TOPIC)
        final = wait_until(lambda: converged([leader, fresh]), 30, "the new replica to hold the leader's records")
        assert has_gaps(final)
        assert model.of(final) == model.expected()

        # 4. __consumer_offsets is compacted too, on every replica: one group committing many times.
        offsets_compacted(cluster)


def test_truncation_below_the_clean_offset(zk_connect: str, tmp_path: Path) -> None:
    """An unclean election makes the old leader truncate below the offset its own cleaner reached: the
    truncation lowers that clean offset (the cleaner never takes the refetched records for clean ones)
    and the replica converges to the new leader's compacted records."""
    topic = "unclean"
    with running_cluster(zk_connect, tmp_path, props=PROPS) as cluster:
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        cluster.admin().create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]], config={
            **TOPIC_CONFIG, "min.insync.replicas": "1", "unclean.leader.election.enable": "true"})])[topic].result(30)
        cluster.wait_full_isr(topic)
        assert cluster.leader_of(topic, 0) == 1
        model = Model()
        base = model.produce(cluster.bootstrap, updates(200, 2, "base"), topic=topic)
        end_of_2 = max(o for o, _, _ in base) + 1  # broker 2's log end when it dies

        b2.kill()  # out of the ISR: what follows is broker 1's alone, and its cleaner cleans it
        wait_until(lambda: cluster.metadata(topic).partitions[0].isrs == [1], 30, "ISR [1]")
        lost = Model()  # acknowledged by broker 1 alone (min.insync.replicas=1): lost in the unclean election
        lost.produce(cluster.bootstrap, updates(200, 6, "lost"), topic=topic)
        lost.produce(cluster.bootstrap, filler("lost"), topic=topic)
        wait_until(lambda: (clean_offset(b1, topic) or 0) > end_of_2 + 1000, 30, "broker 1 cleaning what 2 lacks")

        b1.kill()
        b2.start()  # the only replica left is elected uncleanly: broker 1's records past end_of_2 are gone
        wait_until(lambda: cluster.leader_of(topic, 0) == 2, 30, "broker 2 elected uncleanly")
        model.produce(cluster.bootstrap, updates(200, 4, "new", tombstone_every=5), topic=topic)
        model.produce(cluster.bootstrap, filler("new"), topic=topic)
        wait_replicas_compacted(cluster, model, [2], "broker 2 compacted", topic)

        log_before = b1.log_path.stat().st_size
        b1.start()
        cluster.wait_full_isr(topic)

        def converged() -> list[Record] | None:
            r1, r2 = replica_records(b1, topic), replica_records(b2, topic)
            return r1 if r1 is not None and r1 == r2 and model.of(r1) == model.expected() else None
        final = wait_until(converged, 30, "broker 1 to hold broker 2's compacted records")
        said = said_since(b1, log_before)
        assert f"{topic}-0: truncating to {end_of_2} " in said, said[-3000:]
        # the truncation lowered the clean offset at once: the cleaner never found it past the log end
        assert "past the log end" not in said, said[-3000:]
        assert not any(k.startswith("filler-lost") or (v or "").startswith("lost") for _, k, v in final)
        assert (clean_offset(b1, topic) or 0) <= final[-1][0] + 1


def offsets_compacted(cluster: Cluster) -> None:
    group = "committer"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.assign([CkTopicPartition(TOPIC, 0, 0)])
        metadata = "m" * 1000  # ~1 KB per commit record: segments of 16 KB roll every ~15 commits
        commits = 120
        for i in range(commits):
            c.commit(offsets=[CkTopicPartition(TOPIC, 0, i, metadata=metadata)], asynchronous=False)
    finally:
        c.close()
    partition = partition_for(group, 5)  # offsets.topic.num.partitions of the test brokers
    replicas = list(cluster.metadata("__consumer_offsets").partitions[partition].replicas)
    assert len(replicas) == 3

    def compacted(b: BrokerProcess) -> bool:
        path = partition_dir(b, "__consumer_offsets", partition)
        records = replica_records(b, "__consumer_offsets", partition)
        if path is None or records is None:
            return False
        active_base = max(int(p.name.split(".")[0]) for p in path.glob("*.log"))
        rolled = [r for r in records if r[0] < active_base]
        keys = [k for _, k, _ in rolled]
        # the commits rolled segments, and every rolled segment is deduplicated: one record per key below
        # the active segment (the offset commit's key, the group's metadata key)
        return bool(rolled) and len(keys) == len(set(keys)) and len(records) < commits / 2
    wait_until(lambda: all(compacted(cluster.brokers[i]) for i in replicas), 30,
               f"__consumer_offsets-{partition} compacted on every replica")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        got = c.committed([CkTopicPartition(TOPIC, 0)], timeout=10)
    finally:
        c.close()
    assert got[0].offset == commits - 1
