"""Kafka's multi-broker tiered-storage integration scenarios (``storage/src/test/java/org/apache/kafka/tiered/
storage/integration``), with their offload counts, earliest local offsets, remote fetch counts and
ListOffsets answers, on a real cluster of broker processes sharing one ``local`` store (Kafka's brokers
0 and 1 are Strata's 1 and 2).

Segments hold exactly one batch (``max_batches_per_segment=1``) and local retention is one byte, so every
rolled segment leaves the local disk once uploaded: ``earliest local offset`` is the active segment's base.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import NewPartitions
from tests.broker.kafka_wire import WireClient
from tests.cluster.tiered_harness import TieredCluster
from tests.support.keys import v2_broker_props
from tests.tiered.harness import wait_until
from tests.tiered.test_kafka_scenarios import consume_and_check, kv

A = "topicA"


@contextmanager
def _running(c: TieredCluster) -> Iterator[TieredCluster]:
    """Start ``c``; stop it at the end, showing the brokers' log tails if the test failed."""
    c.start()
    try:
        yield c
    except BaseException:
        for broker_id, b in c.cluster.brokers.items():
            print(f"---- broker {broker_id} ({b.log_path}) ----\n{b.tail(6000)}")
        raise
    finally:
        c.stop()


@pytest.fixture(params=["v1", "v2"])
def tc(request: pytest.FixtureRequest, zk_connect: str, tmp_path: Path) -> Iterator[TieredCluster]:
    """Each scenario on Kafka's plain objects and on format v2's compressed and encrypted ones (issue 29)."""
    props = v2_broker_props(tmp_path / "keys") if request.param == "v2" else {}
    with _running(TieredCluster(zk_connect, tmp_path, 2, **props)) as c:
        yield c


def test_reassign_replica_expand(tc: TieredCluster) -> None:
    """ReassignReplicaExpandTest: [1] -> [1, 2], then broker 2 made leader serves the tiered offsets."""
    tc.create_topic(A, assignment={0: [1]})
    tc.produce(A, 0, kv(0, 3))
    tc.wait_offloaded(A, 0, [0, 1])
    tc.wait_earliest_local(A, 0, 2)
    tc.reassign(A, 0, [1, 2])
    assert tc.leader(A, 0) == 1
    # the new replica built its state from the remote tier: its local log starts at the leader's
    assert tc.earliest_local_offset(A, 0, broker=2) == 2
    tc.reassign(A, 0, [2, 1])
    tc.elect_preferred(A, 0)
    consume_and_check(tc, A, 0, 0, total=3, from_tier=2, fetches=2)
    assert len(tc.events("COPY_SEGMENT", A, 0)) == 2  # broker 2 uploaded nothing again


def test_reassign_replica_move_and_shrink(tc: TieredCluster) -> None:
    """ReassignReplicaMoveTest and ReassignReplicaShrinkTest: [1] -> [2] (a move), then [2, 1] -> [1]."""
    tc.create_topic(A, assignment={0: [1]})
    tc.produce(A, 0, kv(0, 3))
    tc.wait_offloaded(A, 0, [0, 1])
    tc.wait_earliest_local(A, 0, 2)
    tc.reassign(A, 0, [2])
    assert tc.leader(A, 0) == 2 and tc.earliest_local_offset(A, 0, broker=2) == 2
    wait_until("broker 1's replica deleted", lambda: not tc.log_dir(A, 0, broker=1).exists())
    tc.produce(A, 0, kv(3, 5))  # the new leader goes on tiering from where broker 1 stopped
    tc.wait_offloaded(A, 0, [0, 1, 2, 3])
    tc.wait_earliest_local(A, 0, 4)
    consume_and_check(tc, A, 0, 0, total=5, from_tier=4, fetches=4)
    tc.reassign(A, 0, [2, 1])
    tc.reassign(A, 0, [1])  # shrink to the other broker: it leads and serves every offset
    assert tc.leader(A, 0) == 1
    consume_and_check(tc, A, 0, 0, total=5, from_tier=4, fetches=4)
    copies = [e["start_offset"] for e in tc.events("COPY_SEGMENT", A, 0)]
    assert sorted(copies) == [0, 1, 2, 3], copies  # each segment uploaded once across three leaders


def test_partitions_expand(tc: TieredCluster) -> None:
    """PartitionsExpandTest: a tiered topic grown from 2 to 3 partitions tiers the new one too."""
    tc.create_topic(A, assignment={0: [1, 2], 1: [2, 1]})
    tc.produce(A, 0, kv(0, 3))
    tc.produce(A, 1, kv(0, 3))
    for p in (0, 1):
        tc.wait_offloaded(A, p, [0, 1])
        tc.wait_earliest_local(A, p, 2)
    tc.admin().create_partitions([NewPartitions(A, 3, [[1, 2]])])[A].result(30)
    tc.cluster.wait_full_isr(A)
    tc.produce(A, 2, kv(0, 3))
    tc.wait_offloaded(A, 2, [0, 1])
    tc.wait_earliest_local(A, 2, 2)
    for p in (0, 1, 2):
        consume_and_check(tc, A, p, 0, total=3, from_tier=2, fetches=2)


def test_list_offsets_across_a_leader_change(tc: TieredCluster) -> None:
    """ListOffsetsTest (multi-broker part): the same answers from the new leader after an election."""
    tc.create_topic(A, assignment={0: [1, 2]})
    t0 = int(time.time() * 1000) - 10_000
    tc.produce(A, 0, [("k0", "v0", t0), ("k1", "v1", t0 + 1000), ("k2", "v2", t0 + 3000), ("k3", "v3", t0 + 2000)])
    tc.wait_offloaded(A, 0, [0, 1, 2])
    tc.wait_earliest_local(A, 0, 3)
    answers = {spec: tc.list_offsets(A, 0, spec)[0] for spec in (-2, -4, -5, -1, -3, t0 + 1000, t0 + 2500)}
    # -3: the largest timestamp is remote-only (offset 2), answered from the remote tier (KAFKA-17552)
    assert answers == {-2: 0, -4: 3, -5: 2, -1: 4, -3: 2, t0 + 1000: 1, t0 + 2500: 2}
    tc.reassign(A, 0, [2, 1])
    tc.elect_preferred(A, 0)
    assert tc.leader(A, 0) == 2
    wait_until("the new leader answering like the old one",
               lambda: {spec: tc.list_offsets(A, 0, spec)[0] for spec in answers} == answers)


def test_delete_segments_due_to_log_start_offset_breach(tc: TieredCluster) -> None:
    """DeleteSegmentsDueToLogStartOffsetBreachTest on RF 2: DeleteRecords moves the log start; the leader
    deletes the remote segments below it, once; the follower learns the new log start through Fetch."""
    tc.create_topic(A, assignment={0: [1, 2]}, max_batches_per_segment=2)
    tc.produce(A, 0, kv(0, 6))
    tc.wait_offloaded(A, 0, [0, 2])
    tc.wait_earliest_local(A, 0, 4)
    tc.delete_records(A, 0, 3)
    wait_until("the first remote segment deleted", lambda: tc.delete_count(A, 0) == 1)
    assert tc.list_offsets(A, 0, -2)[0] == 3
    consume_and_check(tc, A, 0, 3, total=3, from_tier=1, fetches=1)
    tc.reassign(A, 0, [2, 1])
    tc.elect_preferred(A, 0)
    wait_until("the follower, now leader, starting at 3", lambda: tc.list_offsets(A, 0, -2)[0] == 3)
    consume_and_check(tc, A, 0, 3, total=3, from_tier=1, fetches=1)
    assert tc.delete_count(A, 0) == 1


def test_enable_then_disable_remote_log_on_a_replicated_topic(tc: TieredCluster) -> None:
    """EnableRemoteLogOnTopicTest and DisableRemoteLogOnTopicTest on RF 2 (KIP-950): turned on, the leader
    tiers; turned off with remote.log.delete.on.disable, the leader deletes the remote data once and the
    log start becomes the local log start on both replicas."""
    tc.create_topic(A, assignment={0: [1, 2]}, enable_remote=False)
    tc.produce(A, 0, kv(0, 3))
    assert not tc.events("COPY_SEGMENT", A, 0)
    tc.alter_topic(A, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    tc.wait_offloaded(A, 0, [0, 1])
    tc.wait_earliest_local(A, 0, 2)
    consume_and_check(tc, A, 0, 0, total=3, from_tier=2, fetches=2)
    tc.alter_topic(A, {"remote.log.copy.disable": "true", "local.retention.bytes": "-2"})
    consume_and_check(tc, A, 0, 0, total=3, from_tier=2, fetches=2)
    tc.alter_topic(A, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    wait_until("the remote segments deleted once", lambda: tc.remote_records(A, 0) == 0)
    assert tc.delete_count(A, 0) == 2
    wait_until("log start = local log start", lambda: tc.list_offsets(A, 0, -2)[0] == 2)
    tc.reassign(A, 0, [2, 1])
    tc.elect_preferred(A, 0)
    wait_until("the follower's log start too", lambda: tc.list_offsets(A, 0, -2)[0] == 2)
    assert tc.delete_count(A, 0) == 2
    # enabled again: the new leader (whose metadata manager had stopped the partition) tiers it again
    tc.alter_topic(A, {"remote.storage.enable": "true", "remote.log.copy.disable": "false",
                       "local.retention.bytes": "1"})
    tc.produce(A, 0, kv(3, 5))
    tc.wait_offloaded(A, 0, [2, 3])
    tc.wait_earliest_local(A, 0, 4)
    consume_and_check(tc, A, 0, 2, total=3, from_tier=2, fetches=2)


def test_fetch_from_leader_with_a_corrupted_checkpoint(tc: TieredCluster) -> None:
    """FetchFromLeaderWithCorruptedCheckpointTest: the leader's checkpoint files are corrupted while it is
    down; it recovers, and every offset - the tiered ones included - is served after it leads again."""
    # The leader is the controller too: its successor may be elected only after it registered again, and
    # must hand its leadership back under a new state (a bounce the successor never saw; found here).
    leader = tc.admin().list_topics(timeout=10).controller_id
    tc.create_topic(A, assignment={0: [leader, 3 - leader]})
    tc.produce(A, 0, kv(0, 3))
    tc.wait_offloaded(A, 0, [0, 1])
    tc.wait_earliest_local(A, 0, 2)
    broker = tc.cluster.brokers[leader]
    epoch = tc.cluster.leader_epoch(A, 0)
    broker.kill()
    logs = broker.data_dir / "logs"
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                 "log-start-offset-checkpoint"):
        if (logs / name).exists():
            (logs / name).write_text("garbage\n")
    (logs / f"{A}-0" / "leader-epoch-checkpoint").write_text("garbage\n")
    broker.start()
    tc.cluster.wait_rejoined(A, 0, epoch)
    tc.elect_preferred(A, 0)
    consume_and_check(tc, A, 0, 0, total=3, from_tier=2, fetches=2)


def test_alter_log_dir(zk_connect: str, tmp_path: Path) -> None:
    """AlterLogDirTest: each broker has two log dirs; the leader's replica moves to its other dir
    (AlterReplicaLogDirs) and goes on tiering from there without uploading anything again; the follower's
    moves too, and it serves every offset once it leads."""
    c = TieredCluster(zk_connect, tmp_path, 2)
    for b in c.cluster.brokers.values():
        b.props["log.dirs"] = f"{b.data_dir / 'logs'},{b.data_dir / 'logs2'}"
    with _running(c):
        c.create_topic(A, assignment={0: [1, 2]})
        c.produce(A, 0, kv(0, 3))
        c.wait_offloaded(A, 0, [0, 1])
        c.wait_earliest_local(A, 0, 2)
        for broker in (1, 2):
            b = c.cluster.brokers[broker]
            first = next(d for d in (b.data_dir / "logs", b.data_dir / "logs2") if (d / f"{A}-0").is_dir())
            other = b.data_dir / ("logs2" if first.name == "logs" else "logs")
            with WireClient(b.bootstrap) as w:
                r = w.call(34, 2, dirs=[{"path": str(other), "topics": [{"name": A, "partitions": [0]}]}])
            assert r.results[0].partitions[0].error_code == 0
            wait_until(f"broker {broker}'s replica in {other}",
                       lambda o=other, f=first: (o / f"{A}-0").is_dir() and not (f / f"{A}-0").exists())
            with WireClient(b.bootstrap) as w:
                dirs = w.call(35, 4, topics=None).results
            held = {d.log_dir: [(t.name, p.partition_index, p.is_future_key) for t in d.topics for p in t.partitions]
                    for d in dirs}
            assert (A, 0, False) in held[str(other.resolve())] and (A, 0, False) not in held[str(first.resolve())]
        c.produce(A, 0, kv(3, 5))  # the moved leader replica goes on tiering
        c.wait_offloaded(A, 0, [0, 1, 2, 3])
        assert sorted(e["start_offset"] for e in c.events("COPY_SEGMENT", A, 0)) == [0, 1, 2, 3]  # none again
        consume_and_check(c, A, 0, 0, total=5, from_tier=4, fetches=4)
        c.reassign(A, 0, [2, 1])
        c.elect_preferred(A, 0)
        consume_and_check(c, A, 0, 0, total=5, from_tier=4, fetches=4)
