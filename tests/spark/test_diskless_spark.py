"""Spark on a consolidated diskless topic: ``format("strata")`` reads it across both tiers, and the
exactly-once sink writes it exactly once across a task's death.

Every replica of a diskless partition replays the committed WAL batches into its local log, the
RemoteLogManager tiers the rolled segments and writes ``__remote_log_metadata``, and the WAL is pruned
below the tiered offset (docs/diskless.md). So the source plans a diskless topic as any tiered topic: the
consolidated segments are remote slices read straight from the store (the ``local`` store's event history
shows the executors' ``FETCH_SEGMENT``s, broker id -1), and what is not tiered yet (the WAL's tail, the
active segment) is a broker slice fetched from any broker. Each test runs its own broker with fast
consolidation (tests/diskless/test_diskless_consolidation.py's knobs) and small segments. Local retention is
left long: a partition idle for ``local.retention.ms`` has its active segment rolled and offloaded too
(``PartitionLog.delete_old_segments``), which would tier the tail the first test wants read from a broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.test_cluster_metrics import scrape
from tests.diskless.test_diskless_consolidation import CONSOLIDATING
from tests.spark.test_txn_sink import PAD, REPO
from tests.tiered.harness import TieredBroker, wait_until
from tests.transactions.clients import until_end_confluent

from strata.client.cluster import KafkaCluster
from strata.spark.driver import plan_batch, summarize
from strata.spark.options import parse_source_options
from strata.spark.planning import BrokerSlice, Plan, RemoteSlice
from strata.tiered.api import uuid_to_str
from strata.tiered.storage.local import read_events

LATEST_TIERED = -5
LATEST = -1


@pytest.fixture
def dl_broker(tmp_path: Path) -> Iterator[TieredBroker]:
    """A broker that consolidates diskless partitions at once and prunes their WAL, with a small
    transaction log (as ``txn_broker``)."""
    b = TieredBroker(tmp_path, **CONSOLIDATING, **{
        "transaction.state.log.num.partitions": "3",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}).start()
    try:
        yield b
    finally:
        b.stop()


def create_diskless(b: TieredBroker, partitions: int, **configs: str) -> str:
    from confluent_kafka.admin import NewTopic

    topic = f"dl-spark-{uuid.uuid4().hex[:8]}"
    b.admin().create_topics([NewTopic(topic, partitions, 1, config={"diskless.enable": "true", **configs})],
                            operation_timeout=10)[topic].result(60)
    return topic


def wal_objects(b: TieredBroker) -> list[Path]:
    root = b.remote_dir / "diskless" / "wal"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def offsets(b: TieredBroker, topic: str, partitions: int, query: int) -> dict[int, int]:
    with KafkaCluster(b.bootstrap) as c:
        return {p: o for (_, p), o in c.list_offsets({(topic, p): query for p in range(partitions)}).items()}


def wait_tiering_idle(b: TieredBroker, topic: str, partitions: int, min_fraction: float,
                      timeout_s: float = 60) -> dict[int, int]:
    """Until at least ``min_fraction`` of every partition is in the remote tier and the tiered offsets
    stayed the same for a second (nothing more rolls and uploads while Spark plans and reads)."""
    deadline = time.monotonic() + timeout_s
    last: dict[int, int] | None = None
    while True:
        ends = offsets(b, topic, partitions, LATEST)
        tiered = offsets(b, topic, partitions, LATEST_TIERED)
        if all(tiered[p] + 1 >= min_fraction * ends[p] for p in ends) and tiered == last:
            return tiered
        if time.monotonic() > deadline:
            raise AssertionError(f"only {tiered} of {ends} of {topic} tiered after {timeout_s}s")
        last = tiered
        time.sleep(1.0)


def source_options(b: TieredBroker, topic: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": b.bootstrap, "subscribe": topic, **extra}


def plan_of(options: dict[str, str]) -> Plan:
    return plan_batch(parse_source_options(options))


def fetch_events(b: TieredBroker) -> int:
    return len(read_events(b.remote_dir, "FETCH_SEGMENT"))


def fetched_by_spark(b: TieredBroker, topic: str, since: int) -> set[str]:
    """Segments Spark's executors read from the store (the broker's own reads carry its broker id)."""
    return {e["segment_id"] for e in read_events(b.remote_dir, "FETCH_SEGMENT")[since:]
            if e["topic"] == topic and e["broker_id"] == -1 and not e.get("error")}


def remote_segment_ids(plan: Plan) -> set[str]:
    return {uuid_to_str(s.segment.remote_log_segment_id.id) for s in plan.slices if isinstance(s, RemoteSlice)}


# -- the source across the consolidated segments and the WAL's tail ---------------------------------


PARTITIONS, N, TAIL = 2, 2000, 40  # about 7 segments of 16 KiB per partition; a tail of 40 records, 5 KiB


def value(i: int) -> bytes:
    return (b"value-%06d-" % i).ljust(96, b"x")


def test_the_source_reads_consolidated_segments_from_the_store_and_the_wal_tail_from_brokers(
        spark: Any, dl_broker: TieredBroker) -> None:
    from confluent_kafka import Producer

    b = dl_broker
    topic = create_diskless(b, PARTITIONS, **{"segment.bytes": "16384"})
    expected: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})

    def produce(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            p.produce(topic, value=value(i), key=b"k%d" % i, partition=i % PARTITIONS)
            expected[i % PARTITIONS].append((b"k%d" % i, value(i)))
            if i % 50 == 49:
                assert p.flush(30) == 0  # many WAL objects, most of which pruning empties
        assert p.flush(30) == 0

    produce(0, N)
    uploaded = scrape(b.broker)["strata_diskless_Writer_WalObjectsUploadedPerSec_total"]
    assert uploaded >= N // 50, uploaded
    # consolidated, tiered, and the WAL pruned below the tiered offsets (its emptied objects deleted)
    wait_until("remote segments of every partition",
               lambda: min(offsets(b, topic, PARTITIONS, LATEST_TIERED).values()) >= N // PARTITIONS // 2, 60)
    wait_until("the WAL pruned and its objects deleted", lambda: len(wal_objects(b)) <= 8, 60)
    # a tail smaller than a segment: still in the WAL, consolidated into the active segment, which is not tiered
    produce(N, N + TAIL * PARTITIONS)
    ends = {q: len(expected[q]) for q in range(PARTITIONS)}
    wait_until("the tail committed", lambda: offsets(b, topic, PARTITIONS, LATEST) == ends, 30)
    tiered = wait_tiering_idle(b, topic, PARTITIONS, 0.5)
    assert all(tiered[q] + 1 < ends[q] for q in range(PARTITIONS)), (tiered, ends)

    opts = source_options(b, topic)
    plan = plan_of(opts)
    summary = summarize(plan)
    remote = [s for s in plan.slices if isinstance(s, RemoteSlice)]
    broker = [s for s in plan.slices if isinstance(s, BrokerSlice)]
    assert remote and summary.remote_offsets == sum(tiered[q] + 1 for q in range(PARTITIONS)), summary
    # the broker reads exactly what is not tiered: from the tiered offset to the end, in every partition
    assert sorted((s.partition, s.start_offset, s.end_offset) for s in broker) == \
        [(q, tiered[q] + 1, ends[q]) for q in range(PARTITIONS)]

    since = fetch_events(b)
    df = spark.read.format("strata").options(**opts).load()
    rows = df.select("partition", "offset", "key", "value").collect()
    got: dict[int, list[tuple[int, bytes, bytes]]] = {q: [] for q in range(PARTITIONS)}
    for r in rows:
        got[r["partition"]].append((r["offset"], bytes(r["key"]), bytes(r["value"])))
    for q in range(PARTITIONS):  # every record once, at its offset
        assert sorted(got[q]) == [(o, k, v) for o, (k, v) in enumerate(expected[q])], q
    # every consolidated segment of the plan read straight from the store by the executors
    assert fetched_by_spark(b, topic, since) == remote_segment_ids(plan)


# -- the exactly-once sink with a task dying mid-write ----------------------------------------------


def test_the_exactly_once_sink_writes_a_diskless_topic_once_across_a_task_death(
        spark: Any, dl_broker: TieredBroker, tmp_path: Path) -> None:
    """tests/spark/test_txn_sink.py's task death against a diskless topic: task 1's first attempt dies
    (``os._exit``) once records of its open transaction are committed in the WAL; the retry fences it and
    its records are aborted. Then, consolidated and tiered (the aborted transaction, replayed with its
    marker, in the remote tier), Spark's read_committed reads every row once, most of them from the store."""
    b = dl_broker
    rows, tasks = 20_000, 4  # as the classic test: with fewer, the rows the doomed task has sent may not reach its
    # sink's producer before it waits for them in the topic (the child then fails that attempt by a timeout)
    per_task = rows // tasks
    topic = create_diskless(b, tasks, **{"segment.bytes": str(1 << 20)})
    args = json.dumps([b.bootstrap, topic, f"batch-{topic}", rows, tasks])
    code = f"import json; from tests.spark.test_txn_sink import _child_batch_write as run; run(*json.loads({args!r}))"
    log = tmp_path / "child.log"
    with log.open("wb") as out:
        child = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                               timeout=600, check=False)
    assert child.returncode == 0, log.read_text()[-5000:]

    expected = Counter(f"value-{i}-{'x' * PAD}".encode() for i in range(rows))
    assert Counter(until_end_confluent(b.bootstrap, topic, tasks, "read_committed", timeout_s=60)) == expected
    everything = Counter(until_end_confluent(b.bootstrap, topic, tasks, "read_uncommitted", timeout_s=60))
    duplicated = {v: n for v, n in everything.items() if n > 1}
    # the dead attempt's records are in the topic, in the transaction its retry aborted; only task 1's
    assert len(duplicated) >= per_task // 4, len(duplicated)
    assert all(per_task <= int(v.split(b"-")[1]) < 2 * per_task and n == 2 for v, n in duplicated.items())
    assert set(everything) == set(expected)

    tiered = wait_tiering_idle(b, topic, tasks, 0.5)
    opts = source_options(b, topic, **{"kafka.isolation.level": "read_committed"})
    plan = plan_of(opts)
    remote = [s for s in plan.slices if isinstance(s, RemoteSlice)]
    assert {s.partition for s in remote} == set(range(tasks)), plan.describe()
    # partition 1 starts with the aborted attempt: its first remote slices carry that transaction
    assert any(s.aborted for s in remote if s.partition == 1 and s.start_offset == 0), \
        [(s.start_offset, s.aborted) for s in remote if s.partition == 1]
    assert tiered[1] + 1 > len(duplicated)  # the whole aborted attempt (offsets 0 ..) in the remote tier

    since = fetch_events(b)
    df = spark.read.format("strata").options(**opts).load()
    values = [bytes(r["value"]) for r in df.select("value").collect()]
    assert Counter(values) == expected  # each row exactly once
    assert fetched_by_spark(b, topic, since) == remote_segment_ids(plan)
