"""``isolation.level=read_committed`` across both tiers: exactly what a read_committed consumer reads.

A tiered topic with tiny segments (3 one-record batches each, ``local.retention.bytes=1``) holds
committed and aborted transactions of three transactional producers, overlapping each other and
interleaved with plain writes. Partition 0 ends with an abort whose data is already in remote
segments while its ABORT marker is still in the local active segment: the remote ``.txnindex``
files do not know that transaction (Kafka records it in the index of the segment holding the
marker), so the plan must learn it from the broker. Partition 1 ends inside an open transaction
with plain records after it: nothing at or above the last stable offset may be read. Batch and
streaming (``availableNow``) reads are compared with a confluent-kafka consumer at each isolation
level, and with the values the test knows it committed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.tiered.harness import wait_until
from tests.transactions.clients import until_end_confluent

from strata.client.cluster import KafkaCluster
from strata.spark.driver import plan_batch
from strata.spark.options import parse_source_options
from strata.spark.planning import BrokerSlice, RemoteSlice

TOPIC = "spark-txn-read"
BULK_TOPIC = "spark-txn-read-bulk"
TIMEOUT_S = 180
LATEST_TIERED = -5


def _offset_sink(out: list[int]) -> Any:
    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        out.append(msg.offset())
    return on_delivery


def send(p: Producer, partition: int, values: list[str], topic: str = TOPIC) -> list[int]:
    """One record per batch (flushed one by one): segments roll every 3 batches. Returns the offsets."""
    offsets: list[int] = []
    for v in values:
        p.produce(topic, v.encode(), partition=partition, on_delivery=_offset_sink(offsets))
        assert p.flush(30) == 0
    return offsets


@dataclass
class Built:
    committed: dict[int, list[bytes]] = field(default_factory=dict)  # what read_committed must return
    everything: dict[int, list[bytes]] = field(default_factory=dict)  # what read_uncommitted must return
    split_abort: tuple[int, int] = (0, 0)  # partition 0: (first offset, marker offset) of the last abort
    open_txn: Producer | None = None
    after_lso: list[bytes] = field(default_factory=list)  # partition 1, committed once open_txn commits
    lso_1: int = 0  # partition 1's last stable offset: the open transaction's first offset


def build(broker: Any) -> Built:
    broker.create_topic(TOPIC, 2, max_batches_per_segment=3, retention_ms="-1")
    boot = broker.bootstrap
    plain = Producer({"bootstrap.servers": boot, "linger.ms": 0})
    a, b, c = (Producer({"bootstrap.servers": boot, "transactional.id": f"spark-read-{n}", "linger.ms": 0,
                         "transaction.timeout.ms": 300_000}) for n in "abc")
    for p in (a, b, c):
        p.init_transactions(30)
    built = Built(committed={0: [], 1: []}, everything={0: [], 1: []})

    def log(partition: int, values: list[str], committed: bool) -> None:
        built.everything[partition] += [v.encode() for v in values]
        if committed:
            built.committed[partition] += [v.encode() for v in values]

    def put(p: Producer, partition: int, values: list[str], committed: bool) -> list[int]:
        log(partition, values, committed)
        return send(p, partition, values)

    # partition 0: plain writes, a commit with a plain record inside it, two overlapping transactions
    # (one aborted, one committed), a commit, then an abort whose marker is the partition's last batch.
    put(plain, 0, ["p0-plain-0"], True)
    a.begin_transaction()
    put(a, 0, ["p0-A1-0", "p0-A1-1"], True)
    put(plain, 0, ["p0-plain-1"], True)
    put(a, 0, ["p0-A1-2"], True)
    a.commit_transaction(30)
    a.begin_transaction()
    c.begin_transaction()
    put(a, 0, ["p0-A2-0"], True)
    put(c, 0, ["p0-C1-0"], False)
    put(a, 0, ["p0-A2-1"], True)
    put(plain, 0, ["p0-plain-2"], True)
    put(c, 0, ["p0-C1-1"], False)
    c.abort_transaction(30)
    put(a, 0, ["p0-A2-2"], True)
    a.commit_transaction(30)
    c.begin_transaction()
    put(c, 0, ["p0-C2-0", "p0-C2-1"], True)
    c.commit_transaction(30)
    a.begin_transaction()
    aborted = put(a, 0, [f"p0-A3-{i}" for i in range(8)], False)
    a.abort_transaction(30)
    built.split_abort = (aborted[0], aborted[-1] + 1)  # nothing else is written to partition 0

    # partition 1: an abort, a plain record, a commit, then an open transaction with plain records after it.
    b.begin_transaction()
    put(b, 1, [f"p1-B1-{i}" for i in range(4)], False)
    b.abort_transaction(30)
    put(plain, 1, ["p1-plain-0"], True)
    b.begin_transaction()
    put(b, 1, [f"p1-B2-{i}" for i in range(3)], True)
    b.commit_transaction(30)
    b.begin_transaction()
    built.lso_1 = put(b, 1, ["p1-B3-0"], False)[0]
    put(plain, 1, ["p1-plain-1", "p1-plain-2"], False)
    built.open_txn = b
    built.after_lso = [b"p1-B3-0", b"p1-plain-1", b"p1-plain-2"]
    return built


@pytest.fixture(scope="module")
def built(txn_broker: Any) -> Iterator[Built]:
    built = build(txn_broker)
    first, marker = built.split_abort

    def tiered() -> int:
        with KafkaCluster(txn_broker.bootstrap) as cluster:
            return cluster.list_offsets({(TOPIC, 0): LATEST_TIERED})[(TOPIC, 0)]

    # The aborted transaction's first segments are uploaded (and deleted locally); its marker is in
    # the active segment, which is never uploaded while nothing is appended after it.
    wait_until("the last abort's data uploaded", lambda: tiered() >= first + 2, timeout_s=60)
    wait_until("its segments gone from the local disk", lambda: txn_broker.earliest_local_offset(TOPIC, 0) > first,
               timeout_s=60)
    assert tiered() < marker
    yield built
    if built.open_txn is not None:
        built.open_txn.abort_transaction(30)


def options(broker: Any, isolation: str, topic: str = TOPIC) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "kafka.isolation.level": isolation}


def values(rows: list[Any], partitions: int) -> list[bytes]:
    """Values in (partition, offset) order, as until_end_confluent lists them."""
    ordered = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in rows)
    assert len({(p, o) for p, o, _ in ordered}) == len(ordered)  # no offset twice
    return [v for p in range(partitions) for q, _, v in ordered if q == p]


def batch_read(spark: Any, broker: Any, isolation: str, topic: str = TOPIC, partitions: int = 2) -> list[bytes]:
    df = spark.read.format("strata").options(**options(broker, isolation, topic)).load()
    return values(df.select("partition", "offset", "value").collect(), partitions)


def stream_read(spark: Any, broker: Any, isolation: str, out: Path, checkpoint: Path) -> list[bytes]:
    stream = (spark.readStream.format("strata").options(**options(broker, isolation))
              .option("startingOffsets", "earliest").load().select("partition", "offset", "value"))
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT_S), "the availableNow query did not finish"
    assert query.exception() is None
    return values(spark.read.parquet(str(out)).collect(), 2)


def test_the_plan_learns_an_abort_whose_marker_is_still_local(txn_broker: Any, built: Built) -> None:
    first, marker = built.split_abort
    plan = plan_batch(parse_source_options(options(txn_broker, "read_committed")))
    remote = [s for s in plan.slices if isinstance(s, RemoteSlice) and s.partition == 0]
    holding = [s for s in remote if s.start_offset <= first < s.end_offset]
    assert holding, "the aborted transaction's first record is not read from a remote segment"
    assert all(s.end_offset <= marker for s in remote)  # the marker is read from the broker
    assert any(s.start_offset <= marker < s.end_offset for s in plan.slices if isinstance(s, BrokerSlice))
    # No remote .txnindex holds it: the entry comes from the broker's answer.
    assert any(f == first for s in holding for _, f, _ in (s.aborted or ()))
    # read_committed ends at the last stable offset: partition 1 stops at the open transaction.
    assert plan.ranges[(TOPIC, 1)].end == built.lso_1
    assert plan_batch(parse_source_options(options(txn_broker, "read_uncommitted"))).ranges[(TOPIC, 1)].end \
        == built.lso_1 + len(built.after_lso)


def test_batch_reads_equal_a_consumer_at_each_isolation_level(spark: Any, txn_broker: Any, built: Built) -> None:
    committed = until_end_confluent(txn_broker.bootstrap, TOPIC, 2, "read_committed")
    assert committed == built.committed[0] + built.committed[1]
    assert batch_read(spark, txn_broker, "read_committed") == committed

    uncommitted = until_end_confluent(txn_broker.bootstrap, TOPIC, 2, "read_uncommitted")
    assert uncommitted == built.everything[0] + built.everything[1]
    assert batch_read(spark, txn_broker, "read_uncommitted") == uncommitted


def test_streaming_read_committed_stops_at_the_lso_and_resumes(spark: Any, txn_broker: Any, built: Built,
                                                               tmp_path: Path) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = stream_read(spark, txn_broker, "read_committed", out, checkpoint)
    assert first == until_end_confluent(txn_broker.bootstrap, TOPIC, 2, "read_committed")
    assert first == built.committed[0] + built.committed[1]

    assert built.open_txn is not None
    built.open_txn.commit_transaction(30)  # the LSO of partition 1 moves to its end
    built.open_txn = None
    both = stream_read(spark, txn_broker, "read_committed", out, checkpoint)
    assert both == until_end_confluent(txn_broker.bootstrap, TOPIC, 2, "read_committed")
    assert both == built.committed[0] + built.committed[1] + built.after_lso


def test_many_overlapping_transactions_with_most_segments_remote(spark: Any, txn_broker: Any) -> None:
    """Bulk: two transactional producers and a plain one interleave over three partitions (batches of
    many records, lz4 and zstd); 64 KiB segments, most of them remote."""
    partitions = 3
    txn_broker.create_topic(BULK_TOPIC, partitions, max_batches_per_segment=10_000, retention_ms="-1",
                            segment_bytes=str(64 << 10), segment_index_bytes=str(1 << 20))
    boot = txn_broker.bootstrap
    rng = random.Random(15)
    plain = Producer({"bootstrap.servers": boot, "linger.ms": 2, "compression.type": "lz4"})
    txns = [Producer({"bootstrap.servers": boot, "transactional.id": f"spark-read-bulk-{n}", "linger.ms": 2,
                      "compression.type": codec}) for n, codec in enumerate(("zstd", "none"))]
    for p in txns:
        p.init_transactions(30)
    committed: set[bytes] = set()
    n = 0
    for round_ in range(24):
        for p in txns:
            p.begin_transaction()
        for i in range(300):
            who = rng.randrange(3)
            v = f"bulk-{round_}-{i}-{who}-{n}|".encode() * 6
            n += 1
            if who == 2:
                plain.produce(BULK_TOPIC, v, partition=rng.randrange(partitions))
                committed.add(v)
            else:
                txns[who].produce(BULK_TOPIC, v, partition=rng.randrange(partitions))
                if (round_ + who) % 3:
                    committed.add(v)
            if i % 50 == 0:
                for p in (plain, *txns):
                    p.poll(0)
        for p in (plain, *txns):  # aborted records too reach the log (an abort purges what is still queued)
            assert p.flush(30) == 0
        for who, p in enumerate(txns):
            if (round_ + who) % 3:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)

    def most_tiered() -> bool:
        with KafkaCluster(boot) as cluster:
            keys = [(BULK_TOPIC, p) for p in range(partitions)]
            tiered = cluster.list_offsets(dict.fromkeys(keys, LATEST_TIERED))
            ends = cluster.list_offsets(dict.fromkeys(keys, -1))
        return all(tiered[k] + 1 >= ends[k] // 2 for k in keys)

    wait_until("most of the bulk topic tiered", most_tiered, timeout_s=120, interval_s=0.5)

    expected = until_end_confluent(boot, BULK_TOPIC, partitions, "read_committed", timeout_s=60)
    assert sorted(expected) == sorted(committed)
    assert batch_read(spark, txn_broker, "read_committed", BULK_TOPIC, partitions) == expected
    everything = until_end_confluent(boot, BULK_TOPIC, partitions, "read_uncommitted", timeout_s=60)
    assert len(everything) == n
    assert batch_read(spark, txn_broker, "read_uncommitted", BULK_TOPIC, partitions) == everything
