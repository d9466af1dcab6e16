"""Kafka's TransactionsWithTieredStoreTest (``TransactionsTest`` over remote storage), on 3 brokers.

Kafka's settings: ``__transaction_state`` with 3 partitions, replication factor 2, min ISR 2; topics of
4 partitions on every broker with ``min.insync.replicas=2``, remote storage on with one batch per segment
and ``local.retention.bytes=1`` - so once a transaction ends, the segments below the LSO are uploaded and
leave every replica's local log (``maybeWaitForAtLeastOneSegmentUpload`` / ``maybeVerifyLocalLogStartOffsets``),
and the consumers read them back from remote storage. The scenarios are Kafka's, with its offsets.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from tests.broker.kafka_wire import WireClient
from tests.cluster.tiered_harness import TieredCluster
from tests.tiered.harness import wait_until

PROPS = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "2",
         "transaction.state.log.min.isr": "2", "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
         "offsets.topic.num.partitions": "1", "auto.create.topics.enable": "false"}


@pytest.fixture(scope="module")
def tc(zookeeper: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredCluster]:
    """One cluster for the module (a chroot of its own); each test makes its own topics and ids."""
    connect = f"{zookeeper.connect}/m-{uuid.uuid4().hex[:12]}"  # type: ignore[attr-defined]
    c = TieredCluster(connect, tmp_path_factory.mktemp("txn-tiered"), 3, **PROPS)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _topics(tc: TieredCluster, *names: str, leader: int | None = None) -> None:
    for name in names:
        if leader is None:
            tc.create_topic(name, 4, max_batches_per_segment=1, replication_factor=3, min_insync_replicas="2")
        else:
            others = [b for b in (1, 2, 3) if b != leader]
            tc.create_topic(name, max_batches_per_segment=1, min_insync_replicas="2",
                            assignment={p: [leader, *others] for p in range(4)})


def _producer(tc: TieredCluster, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": tc.bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    p.init_transactions(60)
    return p


def _consume(tc: TieredCluster, tps: list[tuple[str, int]], isolation: str, n: int,
             **extra: object) -> list[tuple[str, int, int, bytes | None, bytes]]:
    c = Consumer({"bootstrap.servers": tc.bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  **extra})
    try:
        c.assign([CkTopicPartition(t, p, 0) for t, p in tps])
        out: list[tuple[str, int, int, bytes | None, bytes]] = []
        deadline = time.monotonic() + 60
        while len(out) < n:
            assert time.monotonic() < deadline, f"{isolation}: {len(out)} of {n} records: {out}"
            m = c.poll(0.2)
            if m is not None and not m.error():
                out.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        extra_msg = c.poll(1.0)  # nothing more
        assert extra_msg is None or extra_msg.error(), extra_msg
        return out
    finally:
        c.close()


def _local_starts(tc: TieredCluster, expected: dict[tuple[str, int], int]) -> None:
    """``maybeVerifyLocalLogStartOffsets``: every replica's local log starts there."""
    def done() -> bool:
        return all(tc.earliest_local_offset(t, p, b) == off for (t, p), off in expected.items() for b in (1, 2, 3))
    wait_until(f"local log starts {expected} on every replica", done, timeout_s=60)


def _send(p: Producer, topic: str, partition: int, key: bytes, value: bytes, **kw: object) -> None:
    p.produce(topic, value, key=key, partition=partition, **kw)
    assert p.flush(30) == 0


def test_basic_transactions(tc: TieredCluster) -> None:
    _topics(tc, "basic1", "basic2")
    p = _producer(tc, "basic")
    p.begin_transaction()
    _send(p, "basic2", 2, b"2", b"2")
    _send(p, "basic1", 1, b"4", b"4")
    _local_starts(tc, {("basic1", 1): 0, ("basic2", 2): 0})
    p.abort_transaction(30)
    _local_starts(tc, {("basic1", 1): 1, ("basic2", 2): 1})  # the aborted data uploaded, the marker local
    p.begin_transaction()
    _send(p, "basic1", 1, b"1", b"1")
    _send(p, "basic2", 2, b"3", b"3")
    p.commit_transaction(30)
    _local_starts(tc, {("basic1", 1): 3, ("basic2", 2): 3})
    tps = [("basic1", 1), ("basic2", 2)]
    assert sorted(r[4] for r in _consume(tc, tps, "read_committed", 2)) == [b"1", b"3"]
    assert sorted(r[4] for r in _consume(tc, tps, "read_uncommitted", 4)) == [b"1", b"2", b"3", b"4"]
    assert sum(tc.fetch_count(t, p) for t, p in tps) > 0  # served from remote storage


def test_read_committed_consumer_should_not_see_undecided_data(tc: TieredCluster) -> None:
    _topics(tc, "undecided1", "undecided2")
    p1, p2 = _producer(tc, "undecided-1"), _producer(tc, "undecided-2")
    p1.begin_transaction()
    p2.begin_transaction()
    visible = int(time.time() * 1000)
    written = visible + 1
    for t in ("undecided1", "undecided2"):
        _send(p2, t, 0, b"x", b"1", timestamp=visible)
    _send(p1, "undecided1", 0, b"a", b"1", timestamp=written)
    _send(p1, "undecided1", 0, b"b", b"2", timestamp=written)
    _send(p1, "undecided2", 0, b"c", b"3", timestamp=written)
    _send(p1, "undecided2", 0, b"d", b"4", timestamp=written)
    for t in ("undecided1", "undecided2"):
        p2.produce(t, b"2", key=b"x", partition=0, timestamp=written)
    p2.commit_transaction(30)
    tps = [("undecided1", 0), ("undecided2", 0)]
    assert len(_consume(tc, tps, "read_uncommitted", 8)) == 8
    committed = _consume(tc, tps, "read_committed", 2)
    assert [(r[3], r[4]) for r in committed] == [(b"x", b"1"), (b"x", b"1")]
    for t, part in tps:
        leader = tc.cluster.brokers[tc.leader(t, part)]
        with WireClient(leader.bootstrap) as w:
            for isolation, timestamp, want in ((1, -1, 1), (1, written, -1), (0, written, 1)):
                r = w.call(2, 7, replica_id=-1, isolation_level=isolation, topics=[{"name": t, "partitions": [
                    {"partition_index": part, "current_leader_epoch": -1, "timestamp": timestamp}]}])
                got = r.topics[0].partitions[0]
                assert int(got.error_code) == 0 and got.offset == want, (t, isolation, timestamp, got)
    p1.abort_transaction(30)


def test_delayed_fetch_includes_aborted_transaction(tc: TieredCluster) -> None:
    _topics(tc, "delayed")
    p1, p2 = _producer(tc, "delayed-1"), _producer(tc, "delayed-2")
    p1.begin_transaction()
    p2.begin_transaction()
    _send(p2, "delayed", 0, b"x", b"1")
    p1.produce("delayed", b"1", key=b"y", partition=0)
    p1.produce("delayed", b"2", key=b"y", partition=0)
    assert p1.flush(30) == 0
    _send(p2, "delayed", 0, b"x", b"2")
    _local_starts(tc, {("delayed", 0): 0})
    p1.abort_transaction(30)
    p2.commit_transaction(30)
    # x1 at 0, y1-y2 at 1-2, x2 at 3, the ABORT at 4, the COMMIT at 5 (its segment stays local: the active one)
    _local_starts(tc, {("delayed", 0): 5})
    records = _consume(tc, [("delayed", 0)], "read_committed", 2, **{"fetch.min.bytes": 100000,
                                                                      "fetch.wait.max.ms": 100})
    assert [(r[3], r[4], r[2]) for r in records] == [(b"x", b"1", 0), (b"x", b"2", 3)]


def test_fencing_on_commit_and_send(tc: TieredCluster) -> None:
    _topics(tc, "fencing")
    p1 = _producer(tc, "fenced-id")
    p1.begin_transaction()
    _send(p1, "fencing", 0, b"1", b"zombie-1")
    p2 = _producer(tc, "fenced-id")  # aborts p1's transaction, fences p1
    p2.begin_transaction()
    _send(p2, "fencing", 0, b"2", b"live")
    p2.commit_transaction(30)
    with pytest.raises(KafkaException):
        p1.produce("fencing", b"zombie-2", key=b"3", partition=0)
        p1.flush(10)
        p1.commit_transaction(10)
    got = _consume(tc, [("fencing", 0)], "read_committed", 1)
    assert [r[4] for r in got] == [b"live"]


def test_multiple_markers_one_leader(tc: TieredCluster) -> None:
    _topics(tc, "markers1", "markers2", leader=1)
    p = _producer(tc, "markers")
    p.begin_transaction()
    values = []
    for t in ("markers1", "markers2"):
        for part in range(4):
            v = f"{t}-{part}".encode()
            p.produce(t, v, partition=part)
            values.append(v)
    assert p.flush(30) == 0
    p.commit_transaction(30)
    tps = [(t, part) for t in ("markers1", "markers2") for part in range(4)]
    assert sorted(r[4] for r in _consume(tc, tps, "read_committed", 8)) == sorted(values)
