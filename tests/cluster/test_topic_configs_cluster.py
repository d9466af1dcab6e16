"""Topic configs in cluster mode, checked by what every replica's log does rather than by what
DescribeConfigs answers (the brief: a cluster harness that rolled segments through
``segment.index.bytes`` hid that a small ``segment.bytes`` was not honoured).

Real ZooKeeper, three broker processes, confluent-kafka clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tests.cluster.harness import Cluster, running_cluster, wait_until

TOPIC = "segbytes"


def segment_sizes(cluster: Cluster, broker_id: int, topic: str = TOPIC) -> list[int]:
    d = cluster.brokers[broker_id].data_dir / "logs" / f"{topic}-0"
    return [f.stat().st_size for f in sorted(d.glob("*.log"))]


def produce(bootstrap: str, count: int, batch_size: int, start: int = 0) -> list[KafkaError]:
    """``count`` records of 100 bytes with acks=all; the delivery errors."""
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.size": batch_size, "linger.ms": 20,
                  "message.timeout.ms": 30_000, "enable.idempotence": False, "retries": 0})
    for i in range(start, start + count):
        p.produce(TOPIC, value=b"%099d" % i, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
        p.poll(0)
    assert p.flush(60) == 0
    return errors


def wait_replicas_equal(cluster: Cluster) -> None:
    """Every replica holds the same bytes (followers caught up)."""
    wait_until(lambda: len({sum(segment_sizes(cluster, b)) for b in cluster.brokers}) == 1, 30,
               "every replica caught up")


def alter(cluster: Cluster, topic: str, key: str, op: AlterConfigOpType, value: str | None = None) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])
    cluster.admin().incremental_alter_configs([res])[res].result(20)


def alter_segment_bytes(cluster: Cluster, op: AlterConfigOpType, value: str | None) -> None:
    alter(cluster, TOPIC, "segment.bytes", op, value)


def test_segment_bytes_is_honoured_by_leader_and_followers(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 1, 3, config={"segment.bytes": "65536"})])[TOPIC].result(20)
        cluster.wait_full_isr(TOPIC)

        # 1 MB of 100-byte records in batches of at most 16 KiB: every replica rolls near 64 KiB. Broker 3 is
        # down meanwhile and catches up after, fetching up to 1 MB at once (replica.fetch.max.bytes): appended
        # as one chunk, its segments were 1 MB.
        cluster.brokers[3].stop()
        wait_until(lambda: sorted(cluster.metadata(TOPIC).partitions[0].isrs) == [1, 2], 30, "broker 3 out of ISR")
        assert produce(cluster.bootstrap, 10_000, 16_384) == []
        cluster.brokers[3].start()
        wait_replicas_equal(cluster)
        for b in cluster.brokers:
            sizes = segment_sizes(cluster, b)
            assert max(sizes) <= 65_536, (b, sizes)
            assert len(sizes) >= sum(sizes) // 65_536, (b, sizes)

        # lowered: new segments roll at 32 KiB on every replica
        alter_segment_bytes(cluster, AlterConfigOpType.SET, "32768")
        before = {b: len(segment_sizes(cluster, b)) for b in cluster.brokers}
        assert produce(cluster.bootstrap, 5_000, 8_192, start=10_000) == []
        wait_replicas_equal(cluster)
        for b in cluster.brokers:
            new = segment_sizes(cluster, b)[before[b]:]
            assert len(new) >= 10 and max(new) <= 32_768, (b, new)

        # a batch larger than a segment is refused as Kafka refuses it (RECORD_LIST_TOO_LARGE), never written
        # into a segment of its own: librdkafka's default 1 MB batches
        # (a batch the producer sent before the rest arrived may be small enough, and is taken)
        errors = produce(cluster.bootstrap, 5_000, 1_000_000, start=15_000)
        assert errors and {e.code() for e in errors} == {KafkaError.RECORD_LIST_TOO_LARGE}, errors[:3]
        wait_replicas_equal(cluster)
        for b in cluster.brokers:
            assert max(segment_sizes(cluster, b)[before[b]:]) <= 32_768, b

        # the override deleted: the broker default (1 GiB) applies again, one segment takes everything
        alter_segment_bytes(cluster, AlterConfigOpType.DELETE, None)
        before = {b: len(segment_sizes(cluster, b)) for b in cluster.brokers}
        assert produce(cluster.bootstrap, 5_000, 1_000_000, start=20_000) == []
        wait_replicas_equal(cluster)
        for b in cluster.brokers:
            sizes = segment_sizes(cluster, b)
            assert len(sizes) <= before[b] + 1 and sizes[-1] > 400_000, (b, before[b], sizes)


# -- one cluster for the other keys: each test its own topic, RF=3, checked on every replica --------------

@pytest.fixture(scope="module")
def cluster(zookeeper: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    zk_connect = f"{zookeeper.connect}/t-topic-configs-{time.monotonic_ns()}"  # type: ignore[attr-defined]
    props = {"log.retention.check.interval.ms": "300", "log.initial.task.delay.ms": "0",
             "log.segment.delete.delay.ms": "0"}
    with running_cluster(zk_connect, tmp_path_factory.mktemp("topic-configs"), props=props) as c:
        yield c


def create(cluster: Cluster, topic: str, **configs: str) -> None:
    cluster.admin().create_topics([NewTopic(topic, 1, 3, config=configs)])[topic].result(20)
    cluster.wait_full_isr(topic)


def send(cluster: Cluster, topic: str, value: bytes, timestamp: int = 0) -> KafkaError | None:
    """One record with acks=all and no retries: its delivery error (None when acknowledged)."""
    result: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 20_000,
                  "enable.idempotence": False, "message.max.bytes": 10_000_000})
    p.produce(topic, value=value, partition=0, timestamp=timestamp, on_delivery=lambda e, _m: result.append(e))
    p.flush(30)
    assert result, "no delivery report"
    return result[0]


def wait_for_config(cluster: Cluster, topic: str, key: str, value: str) -> None:
    """Every broker answers ``value`` (each mirrors ZooKeeper on its own): the change reached them all."""
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def seen() -> bool:
        return all(cluster.admin().describe_configs([res])[res].result(10)[key].value == value
                   for _ in cluster.brokers)
    wait_until(seen, 20, f"{key}={value} on {topic}")


def test_max_message_bytes_created_altered_and_deleted(cluster: Cluster) -> None:
    topic = "maxmsg"
    create(cluster, topic, **{"max.message.bytes": "2000"})
    assert send(cluster, topic, b"x" * 5_000).code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert send(cluster, topic, b"x" * 1_000) is None
    alter(cluster, topic, "max.message.bytes", AlterConfigOpType.SET, "10000")
    wait_until(lambda: send(cluster, topic, b"x" * 5_000) is None, 20, "5,000 bytes taken under 10000")
    assert send(cluster, topic, b"x" * 20_000).code() == KafkaError.MSG_SIZE_TOO_LARGE
    alter(cluster, topic, "max.message.bytes", AlterConfigOpType.DELETE)  # back to message.max.bytes, 1 MB
    wait_until(lambda: send(cluster, topic, b"x" * 20_000) is None, 20, "20,000 bytes taken under the default")


def read_timestamps(cluster: Cluster, topic: str, count: int) -> list[tuple[int, int]]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"ts-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.timestamp())
    c.close()
    return out


def test_message_timestamp_type_created_altered_and_deleted(cluster: Cluster) -> None:
    topic = "tstype"
    old = int(time.time() * 1000) - 60_000
    create(cluster, topic, **{"message.timestamp.type": "LogAppendTime"})
    assert send(cluster, topic, b"a", timestamp=old) is None
    alter(cluster, topic, "message.timestamp.type", AlterConfigOpType.SET, "CreateTime")
    wait_for_config(cluster, topic, "message.timestamp.type", "CreateTime")
    assert send(cluster, topic, b"b", timestamp=old) is None
    alter(cluster, topic, "message.timestamp.type", AlterConfigOpType.DELETE)
    assert send(cluster, topic, b"c", timestamp=old + 1) is None
    (t1, ts1), (t2, ts2), (t3, ts3) = read_timestamps(cluster, topic, 3)
    assert t1 == TIMESTAMP_LOG_APPEND_TIME and ts1 > old + 50_000
    assert (t2, ts2) == (TIMESTAMP_CREATE_TIME, old)
    assert (t3, ts3) == (TIMESTAMP_CREATE_TIME, old + 1)


def test_message_timestamp_before_max_ms_created_and_deleted(cluster: Cluster) -> None:
    topic = "tsbefore"
    hour_ago = int(time.time() * 1000) - 3_600_000
    create(cluster, topic, **{"message.timestamp.before.max.ms": "60000"})
    assert send(cluster, topic, b"old", timestamp=hour_ago).code() == KafkaError.INVALID_TIMESTAMP
    assert send(cluster, topic, b"new") is None
    alter(cluster, topic, "message.timestamp.before.max.ms", AlterConfigOpType.DELETE)
    wait_until(lambda: send(cluster, topic, b"old", timestamp=hour_ago) is None, 20, "an hour-old record taken")


def test_retention_bytes_applies_on_every_replica(cluster: Cluster) -> None:
    topic = "retbytes"
    create(cluster, topic, **{"segment.bytes": "16384"})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.size": 4096, "linger.ms": 5})
    for i in range(2_000):
        p.produce(topic, value=b"%099d" % i, partition=0)
    assert p.flush(30) == 0
    wait_until(lambda: len({sum(segment_sizes(cluster, b, topic)) for b in cluster.brokers}) == 1, 30, "caught up")
    assert all(sum(segment_sizes(cluster, b, topic)) > 200_000 for b in cluster.brokers)
    # retention.bytes set afterwards: leader and followers each delete their oldest segments down to it
    alter(cluster, topic, "retention.bytes", AlterConfigOpType.SET, "40000")
    wait_until(lambda: all(sum(segment_sizes(cluster, b, topic)) <= 40_000 + 16_384 for b in cluster.brokers), 30,
               "every replica within retention.bytes")
    low, high = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "wm"}).get_watermark_offsets(
        TopicPartition(topic, 0), timeout=10)
    assert high == 2_000 and low > 1_000, (low, high)


def test_compression_type_is_applied_by_the_leader_and_kept_by_followers(cluster: Cluster) -> None:
    """``compression.type=zstd`` fed by an uncompressed producer: the leader stores zstd batches and the
    followers keep the leader's bytes (they never recompress); created, then altered to lz4 on every replica."""
    from strata.protocol.records import CompressionType, iter_batches

    topic = "codec"
    create(cluster, topic, **{"compression.type": "zstd"})

    def codecs(b: int) -> list[int]:
        d = cluster.brokers[b].data_dir / "logs" / f"{topic}-0"
        return [h.compression for f in sorted(d.glob("*.log")) for _, h in iter_batches(f.read_bytes())]

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "compression.type": "none"})
    for i in range(50):
        p.produce(topic, value=b"%099d" % i, partition=0)
    assert p.flush(30) == 0
    wait_until(lambda: all(len(codecs(b)) > 0 and len(codecs(b)) == len(codecs(1)) for b in cluster.brokers), 30,
               "every replica caught up")
    assert {c for b in cluster.brokers for c in codecs(b)} == {CompressionType.ZSTD}
    alter(cluster, topic, "compression.type", AlterConfigOpType.SET, "lz4")
    wait_for_config(cluster, topic, "compression.type", "lz4")
    before = len(codecs(1))
    for i in range(50):
        p.produce(topic, value=b"%099d" % i, partition=0)
    assert p.flush(30) == 0
    wait_until(lambda: all(len(codecs(b)) > before and len(codecs(b)) == len(codecs(1)) for b in cluster.brokers),
               30, "every replica caught up again")
    assert {c for b in cluster.brokers for c in codecs(b)[before:]} == {CompressionType.LZ4}
