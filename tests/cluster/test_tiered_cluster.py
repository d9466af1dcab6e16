"""Tiered storage in a cluster (issue 14): KIP-405 followers and replicas rebuilt from remote storage.

Real ZooKeeper, brokers as processes, confluent-kafka clients, one local-directory store shared by
the brokers. What is checked is what an operator relies on: only the leader uploads (each segment
once), a follower's disk shrinks to its local retention once - and only once - its leader has
uploaded, a wiped replica comes back holding the local tail only, and that replica, made leader,
serves every offset from the remote tier.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import Cluster, running_cluster, wait_until
from tests.cluster.tiered_harness import (
    LOCAL_RETENTION_BYTES,
    SEGMENT_BYTES,
    consume_all,
    local_segments,
    produce,
    store_segments,
    tiered_props,
    tiered_topic_config,
    value,
)
from tests.reliability.crash_harness import remote_segments
from tests.support.seaweedfs import SeaweedFS

from strata.tiered.storage.local import read_events

TOPIC = "tiered"
RECORDS = 3000  # ~3 MB: about 45 segments of 64 KiB, local retention 2 segments


BOUND = LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES  # local retention, the segment being uploaded, the active one


def _replicated_topic_with_data(cluster: Cluster, records: int, replicas: int = 2) -> tuple[int, int]:
    """A tiered topic with ``replicas`` replicas and ``records`` acknowledged records: (leader, a follower)."""
    cluster.admin().create_topics([NewTopic(TOPIC, 1, replicas, config=tiered_topic_config())])[TOPIC].result(30)
    cluster.wait_full_isr(TOPIC)
    produce(cluster.bootstrap, TOPIC, 0, records)
    leader = cluster.leader_of(TOPIC, 0)
    return leader, next(b for b in cluster.metadata(TOPIC).partitions[0].replicas if b != leader)


def _wait_local_tail(cluster: Cluster, brokers: tuple[int, ...], timeout_s: float = 60) -> None:
    for broker in brokers:
        wait_until(lambda b=broker: sum(local_segments(cluster, b, TOPIC).values()) <= BOUND, timeout_s,
                   f"broker {broker}'s local log shrinking to its local retention")


def _wait_every_rolled_segment_tiered(cluster: Cluster, leader: int, timeout_s: float = 60) -> int:
    """The last tiered offset, once it is the one before the leader's active segment. The local tail can
    shrink to its bound while the last rolled segments are still being uploaded."""
    def last_tiered() -> int:
        last = max((s.end for s in remote_segments(cluster.bootstrap).values()
                    if s.topic == TOPIC and s.state == 1), default=-1)
        return last if last == max(local_segments(cluster, leader, TOPIC), default=0) - 1 else 0

    return wait_until(last_tiered, timeout_s, f"every rolled segment of broker {leader} tiered")


def _replica_end(cluster: Cluster, broker: int) -> int:
    """The broker's own log end offset of the partition (ListOffsets -1 as the debugging consumer, which any
    replica answers from its own log; -1 while it has no replica)."""
    with WireClient(cluster.brokers[broker].bootstrap) as w:
        r = w.call(2, 9, replica_id=-2, isolation_level=0, topics=[{"name": TOPIC, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    p = r.topics[0].partitions[0]
    return int(p.offset) if p.error_code == 0 else -1


def _restart_wiped(cluster: Cluster, broker: int, records: int) -> None:
    """Start a broker whose disk was wiped and wait until its replica has caught up and is in the ISR (the
    ISR may still list it from before it died: ``replica.lag.time.max.ms`` had no time to pass)."""
    cluster.brokers[broker].start()
    wait_until(lambda: _replica_end(cluster, broker) == records, 60, f"broker {broker}'s replica caught up")
    cluster.wait_full_isr(TOPIC, 60)


def _lead_and_read_all(cluster: Cluster, new_leader: int, old_leader: int, records: int) -> None:
    """Kill ``old_leader``; ``new_leader`` takes over and serves every offset, the remote ones included.
    First every ``__remote_log_metadata`` partition must have its other replica in sync (with two brokers,
    killing one otherwise leaves a metadata partition without a leader, and tiering without metadata)."""
    cluster.wait_full_isr("__remote_log_metadata", 60)
    cluster.brokers[old_leader].kill()
    wait_until(lambda: cluster.leader_of(TOPIC, 0) == new_leader, 30, f"broker {new_leader} leading")
    got = consume_all(cluster.brokers[new_leader].bootstrap, TOPIC, records)
    assert len(got) == records and all(v == value(i) for i, v in enumerate(got))


def _uploaded_up_to(store: Path, minimum_segments: int) -> bool:
    return len(store_segments(store, TOPIC)) >= minimum_segments


def _check_store_matches_metadata(bootstrap: str, store: Path, topic: str = TOPIC) -> list[tuple[int, int]]:
    """The store holds exactly the finished segments' objects (no copy twice, no orphan, no temp file), and
    their offsets leave no gap. Segments of different leaders may overlap (a replica rolls its own segments,
    so a new leader's first upload can start inside its predecessor's last one - Kafka's behaviour too), but
    no range is uploaded twice. Returns the sorted spans.

    A leader may be between writing a segment's objects and publishing COPY_SEGMENT_FINISHED (or between
    DELETE_SEGMENT_STARTED and removing them) when this is called, so the two sides are compared once they
    agree, within a deadline: an orphan or a lost object never does."""
    last: list[tuple[dict[str, Any], list[str]]] = []

    def agree() -> bool:
        finished = {sid: s for sid, s in remote_segments(bootstrap).items()
                    if s.topic == topic and s.state == 1}  # COPY_SEGMENT_FINISHED
        ids = sorted(sid for ids in store_segments(store, topic).values() for sid in ids)
        last[:] = [(finished, ids)]
        uploading = any(".tmp-" in f.name for f in store.glob(f"{topic}-*/*/*"))  # an upload in progress
        return sorted(finished) == ids and not uploading

    try:
        wait_until(agree, 30, "the store and the finished remote segments agreeing")
    except AssertionError:
        if not last:
            raise
        finished, ids = last[0]
        temp = [f.name for f in store.glob(f"{topic}-*/*/*") if ".tmp-" in f.name]
        raise AssertionError(f"store {ids} != metadata {sorted(finished)}, or temp files left: {temp}") from None
    finished = last[0][0]
    spans = sorted((s.start, s.end) for s in finished.values())
    assert len(set(spans)) == len(spans), f"a segment uploaded twice: {spans}"
    covered = spans[0][1] if spans else -1
    for start, end in spans[1:]:
        assert start <= covered + 1, f"remote segments leave a gap after {covered}: {spans}"
        assert end > covered, f"a segment inside another one (uploaded twice): {spans}"
        covered = end
    return spans


def test_followers_keep_the_local_tail_and_a_wiped_replica_rebuilds_from_remote(zk_connect: str,
                                                                                  tmp_path: Path) -> None:
    store = tmp_path / "store"
    with running_cluster(zk_connect, tmp_path, 2, tiered_props(store), verbose=True) as cluster:
        leader, follower = _replicated_topic_with_data(cluster, RECORDS)

        # Only the leader uploads, each segment once; both replicas shrink to the local retention.
        wait_until(lambda: _uploaded_up_to(store, 40), 90, "the leader uploading the rolled segments")
        _wait_local_tail(cluster, (leader, follower))
        _check_store_matches_metadata(cluster.bootstrap, store)
        total = RECORDS * 1000
        remote_bytes = sum(s.size for s in remote_segments(cluster.bootstrap).values()
                           if s.topic == TOPIC and s.state == 1)
        assert remote_bytes >= 20 * LOCAL_RETENTION_BYTES - SEGMENT_BYTES and remote_bytes < 1.2 * total

        # Wipe the follower's disk: it comes back with the local tail only (nothing below the leader's
        # local log start is written), then rejoins the ISR.
        cluster.brokers[follower].kill()
        leader_local_start = min(local_segments(cluster, leader, TOPIC))
        shutil.rmtree(cluster.brokers[follower].data_dir / "logs")
        _restart_wiped(cluster, follower, RECORDS)
        rebuilt = local_segments(cluster, follower, TOPIC)
        assert rebuilt and min(rebuilt) >= leader_local_start, (sorted(rebuilt), leader_local_start)
        assert sum(rebuilt.values()) <= BOUND
        assert "from the remote segment ending at" in cluster.brokers[follower].tail(200_000)

        # Made leader (the other broker dies), the rebuilt replica serves every offset, remote ones included.
        _lead_and_read_all(cluster, follower, leader, RECORDS)
        # It goes on tiering as leader: more records roll, and it uploads them after the old leader's.
        produce(cluster.brokers[follower].bootstrap, TOPIC, RECORDS, 600)
        wait_until(lambda: max(store_segments(store, TOPIC)) > leader_local_start + 500, 60,
                   "the new leader uploading")
        _check_store_matches_metadata(cluster.brokers[follower].bootstrap, store)


def test_leader_killed_while_uploading_leaves_one_copy_of_every_segment(zk_connect: str, tmp_path: Path) -> None:
    """``kill -9`` of the leader while it uploads, three times: the new leader cleans the upload its
    predecessor left half-done, resumes after what was uploaded, and every acknowledged record is read
    exactly once from the two tiers."""
    store = tmp_path / "store"
    with running_cluster(zk_connect, tmp_path, 3, tiered_props(store), verbose=True) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 1, 3, config=tiered_topic_config())])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        written = 0
        for _round in range(3):
            produce(cluster.bootstrap, TOPIC, written, 800)
            written += 800
            leader = cluster.leader_of(TOPIC, 0)
            before = len(store_segments(store, TOPIC))
            # kill as soon as the leader has started uploading this round's segments
            wait_until(lambda b=before: len(store_segments(store, TOPIC)) > b, 60, "an upload starting")
            cluster.brokers[leader].kill()
            wait_until(lambda old=leader: cluster.leader_of(TOPIC, 0) not in (old, -1), 30, "a new leader")
            cluster.brokers[leader].start()
            cluster.wait_full_isr(TOPIC, 60)
        leader = cluster.leader_of(TOPIC, 0)
        # everything rolled is uploaded once, by whoever leads now
        wait_until(lambda: max(store_segments(store, TOPIC), default=0) >= written - 3 * SEGMENT_BYTES // 1000, 90,
                   "the last rolled segments uploaded")
        # (each check waits up to 30 s for the two to agree; a timeout reports what the last one saw)
        spans = wait_until(lambda: _check_store_matches_metadata(cluster.bootstrap, store), 60,
                           "the store and the metadata agreeing")
        assert spans[0][0] == 0
        got = consume_all(cluster.bootstrap, TOPIC, written)
        assert len(got) == written and all(v == value(i) for i, v in enumerate(got))


def _settled(bootstrap: str, store: Path) -> bool:
    """No upload or delete in flight: every listed object is a finished segment and vice versa."""
    try:
        _check_store_matches_metadata(bootstrap, store)
    except AssertionError:
        return False
    return True


def test_followers_keep_what_is_not_uploaded_while_the_store_is_down(zk_connect: str, tmp_path: Path) -> None:
    """With the store unreachable nothing is uploaded, so no replica - leader or follower - deletes a local
    segment past its local retention; once the store is back both shrink to it."""
    store = tmp_path / "store"
    fault = tmp_path / "store-down"
    props = {**tiered_props(store), "rsm.config.fault.file": str(fault)}
    with running_cluster(zk_connect, tmp_path, 2, props) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 1, 2, config=tiered_topic_config())])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        fault.touch()
        produce(cluster.bootstrap, TOPIC, 0, 1500)  # ~1.5 MB: 23 segments, local retention 2
        leader = cluster.leader_of(TOPIC, 0)
        follower = 3 - leader
        wait_until(lambda: max(local_segments(cluster, follower, TOPIC)) >= 1400 - SEGMENT_BYTES // 1000, 30,
                   "the follower replicating")
        time.sleep(2)  # several retention checks (every 200 ms) and follower-task runs while the store is down
        for broker in (leader, follower):
            kept = local_segments(cluster, broker, TOPIC)
            assert min(kept) == 0 and sum(kept.values()) >= 1400 * 1000, (broker, sorted(kept))
        assert not store_segments(store, TOPIC)
        fault.unlink()
        _wait_local_tail(cluster, (leader, follower))  # both shrink once the store is back
        _check_store_matches_metadata(cluster.bootstrap, store)
        got = consume_all(cluster.bootstrap, TOPIC, 1500)
        assert len(got) == 1500


def test_deleting_a_tiered_topic_deletes_its_remote_data_once(zk_connect: str, tmp_path: Path) -> None:
    """Kafka's DeleteTopic scenario (2 partitions, RF 2): each partition's remote data is deleted once, by its
    leader, also when the other replica is down while the topic is deleted."""
    store = tmp_path / "store"
    with running_cluster(zk_connect, tmp_path, 3, tiered_props(store), verbose=True) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 2, 2, config=tiered_topic_config())])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        for p in (0, 1):
            produce(cluster.bootstrap, TOPIC, 0, 700, partition=p)
        wait_until(lambda: all(len(store_segments(store, TOPIC, p)) >= 8 for p in (0, 1)), 60, "both partitions tiered")
        meta = cluster.metadata(TOPIC)
        # a follower of partition 0 that leads nothing of the topic goes down before the delete
        leaders = {meta.partitions[p].leader for p in (0, 1)}
        down = next((r for r in meta.partitions[0].replicas if r not in leaders), None)
        if down is not None:
            cluster.wait_full_isr("__remote_log_metadata", 60)  # its metadata partitions keep a leader
            cluster.brokers[down].kill()
        # with a replica down the deletion completes only once it is back (it acknowledges then): no wait here
        cluster.admin().delete_topics([TOPIC], operation_timeout=5)
        wait_until(lambda: not store_segments(store, TOPIC, 0) and not store_segments(store, TOPIC, 1), 60,
                   "the remote data deleted")
        if down is not None:
            cluster.brokers[down].start()
            wait_until(lambda: TOPIC not in cluster.admin().list_topics(timeout=5).topics, 60, "the deletion done")

        def deletes() -> list[tuple[int, str]]:
            return [(e["partition"], e["segment_id"]) for e in read_events(store, "DELETE_SEGMENT")
                    if e["topic"] == TOPIC and not e.get("error")]

        def copied() -> set[tuple[int, str]]:  # the leaders may still have been uploading at the delete
            return {(e["partition"], e["segment_id"]) for e in read_events(store, "COPY_SEGMENT")
                    if e["topic"] == TOPIC}

        # the store records a delete just after the segment's files are gone: wait for the last record
        wait_until(lambda: set(deletes()) == copied(), 30, "every uploaded segment's delete recorded")
        time.sleep(1)  # a second delete of a segment would be recorded by now
        assert sorted(deletes()) == sorted(set(deletes())), "a segment deleted twice"
        assert set(deletes()) == copied(), "every uploaded segment deleted, by one broker, once"


def test_a_partition_reassigned_to_an_empty_broker_copies_the_tail_only(zk_connect: str, tmp_path: Path) -> None:
    """Kafka's ReassignReplicaMove / ReassignToEmptyReplica: [1, 2] -> [1, 3] with broker 3 empty. Broker 3
    builds its replica from the remote segment's indexes and the leader's tail, joins the ISR, and serves
    every offset once it leads."""
    store = tmp_path / "store"
    with running_cluster(zk_connect, tmp_path, 3, tiered_props(store)) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 2]],
                                                config=tiered_topic_config())])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        produce(cluster.bootstrap, TOPIC, 0, 1500)
        wait_until(lambda: sum(local_segments(cluster, 1, TOPIC).values()) <= LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES,
                   60, "the leader holding the local tail only")
        leader_local_start = min(local_segments(cluster, 1, TOPIC))
        controller = cluster.admin().list_topics(timeout=10).controller_id
        with WireClient(cluster.brokers[controller].bootstrap) as w:
            r = w.call(45, 0, timeout=30_000, topics=[{"name": TOPIC, "partitions": [
                {"partition_index": 0, "replicas": [1, 3]}]}])
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
        wait_until(lambda: sorted(cluster.metadata(TOPIC).partitions[0].replicas) == [1, 3], 60,
                   "the reassignment complete")
        cluster.wait_full_isr(TOPIC)
        moved = local_segments(cluster, 3, TOPIC)
        assert moved and min(moved) >= leader_local_start, (sorted(moved), leader_local_start)
        wait_until(lambda: not local_segments(cluster, 2, TOPIC), 30, "broker 2's replica deleted")
        cluster.brokers[1].kill()
        wait_until(lambda: cluster.leader_of(TOPIC, 0) == 3, 30, "broker 3 leading")
        got = consume_all(cluster.brokers[3].bootstrap, TOPIC, 1500)
        assert len(got) == 1500 and all(v == value(i) for i, v in enumerate(got))


def test_kip_1023_an_empty_follower_starts_after_the_last_tiered_offset(zk_connect: str, tmp_path: Path) -> None:
    """``follower.fetch.last.tiered.offset.enable``: a wiped follower starts at the last tiered offset + 1,
    past the tiered segments its leader still keeps in local retention; made leader it serves them remotely."""
    store = tmp_path / "store"
    props = {**tiered_props(store), "follower.fetch.last.tiered.offset.enable": "true"}
    with running_cluster(zk_connect, tmp_path, 2, props) as cluster:
        leader, follower = _replicated_topic_with_data(cluster, 1500)
        _wait_local_tail(cluster, (leader,))
        last_tiered = _wait_every_rolled_segment_tiered(cluster, leader)
        cluster.brokers[follower].kill()
        leader_local = sorted(local_segments(cluster, leader, TOPIC))
        assert leader_local[0] <= last_tiered  # the leader keeps tiered segments locally (its local retention)
        shutil.rmtree(cluster.brokers[follower].data_dir / "logs")
        _restart_wiped(cluster, follower, 1500)
        rebuilt = sorted(local_segments(cluster, follower, TOPIC))
        assert rebuilt[0] >= last_tiered + 1 > leader_local[0], (rebuilt, last_tiered, leader_local)
        _lead_and_read_all(cluster, follower, leader, 1500)


def test_on_s3_a_wiped_follower_rebuilds_from_the_bucket(zk_connect: str, tmp_path: Path,
                                                          seaweedfs: SeaweedFS) -> None:
    """The replacement scenario with the ``s3`` RSM on a real S3 server (SeaweedFS): both brokers use one
    bucket; the rebuilt replica fetches the remote segment's indexes from it and, leading, serves every
    offset from it; the bucket holds one object set per finished segment."""
    prefix = f"cluster-{uuid.uuid4().hex[:8]}/"
    rsm = {f"rsm.config.{k}": str(v) for k, v in seaweedfs.rsm_config().items() if k != "broker.id"}
    props = {**tiered_props(tmp_path / "unused"), "remote.log.storage.manager.class.name": "s3",
             "rsm.config.key.prefix": prefix, **rsm}

    def bucket_segments() -> list[str]:
        return [k for k in seaweedfs.list_keys(prefix) if k.endswith(".log") and f"/{TOPIC}-" in f"/{k[len(prefix):]}"]

    with running_cluster(zk_connect, tmp_path, 2, props) as cluster:
        leader, follower = _replicated_topic_with_data(cluster, 1500)
        _wait_local_tail(cluster, (leader, follower), 90)
        _wait_every_rolled_segment_tiered(cluster, leader)  # no upload between its objects and its metadata
        finished = [s for s in remote_segments(cluster.bootstrap).values() if s.topic == TOPIC and s.state == 1]
        assert len(bucket_segments()) == len(finished) >= 15
        cluster.brokers[follower].kill()
        leader_local_start = min(local_segments(cluster, leader, TOPIC))
        shutil.rmtree(cluster.brokers[follower].data_dir / "logs")
        _restart_wiped(cluster, follower, 1500)
        rebuilt = local_segments(cluster, follower, TOPIC)
        assert rebuilt and min(rebuilt) >= leader_local_start
        _lead_and_read_all(cluster, follower, leader, 1500)


def test_leaders_dying_between_upload_and_metadata_leave_one_copy(zk_connect: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every broker is armed to die (``kill -9`` at a crash point) right after its 3rd upload's objects are in
    the store and before its COPY_SEGMENT_FINISHED is written, so leaders in turn die at the worst moment
    of an upload: the next leader deletes the half-done upload (its objects too) and uploads the range again;
    the store ends with exactly the finished segments, each range once, and every record is read once."""
    store = tmp_path / "store"
    monkeypatch.setenv("STRATA_CRASH_POINT", "copy.after_upload:3")
    with running_cluster(zk_connect, tmp_path, 3, tiered_props(store)) as cluster:
        monkeypatch.delenv("STRATA_CRASH_POINT")  # restarted brokers are not armed
        cluster.admin().create_topics([NewTopic(TOPIC, 1, 3, config=tiered_topic_config())])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        producing = threading.Thread(target=produce, args=(cluster.bootstrap, TOPIC, 0, 1500))
        producing.start()  # brokers die while it produces: restarted below meanwhile
        died: set[int] = set()

        def restart_the_dead() -> bool:
            for broker_id, b in cluster.brokers.items():
                if b.proc is not None and b.proc.poll() is not None:
                    assert "strata crash point copy.after_upload reached" in b.tail(100_000)
                    died.add(broker_id)
                    b.proc = None
                    b.start()
            return len(died) >= 2

        # The first leader dies at its 3rd upload; its successor is one of the two armed brokers (the first is
        # restarting, out of the ISR), which dies at its own 3rd: at least two deaths, a third if it leads too.
        # The dead are restarted until the producer is done: the third can die while the other two are still
        # catching up, the partition's last ISR member, and then only its restart lets the producer finish.
        wait_until(lambda: restart_the_dead() and not producing.is_alive(), 150,
                   "two leaders dying in the middle of an upload, and the producer done", interval_s=0.2)
        for broker_id, b in cluster.brokers.items():  # a broker still armed could die later: restart it unarmed
            if broker_id not in died:
                b.kill()
                b.start()
        wait_until(lambda: restart_the_dead() and max(store_segments(store, TOPIC), default=0) >=
                   1400 - 3 * SEGMENT_BYTES // 1000, 90, "the rolled segments uploaded")
        cluster.wait_full_isr(TOPIC, 60)
        wait_until(lambda: restart_the_dead() and _settled(cluster.bootstrap, store), 60,
                   "the store and the metadata agreeing")
        spans = _check_store_matches_metadata(cluster.bootstrap, store)
        assert spans[0][0] == 0
        got = consume_all(cluster.bootstrap, TOPIC, 1500)
        assert len(got) == 1500 and all(v == value(i) for i, v in enumerate(got))


def test_each_broker_serves_re_reads_of_the_remote_tier_from_its_own_chunk_cache(zk_connect: str,
                                                                                  tmp_path: Path) -> None:
    """``rsm.config.fetch.chunk.cache.*`` in cluster mode: the leader's second read of the remote tier makes no
    store read (the shared store's event history says so); after a failover the new leader, whose cache is
    its own and empty, reads the store once and then serves from its cache too."""
    store = tmp_path / "store"
    props = {**tiered_props(store), "rsm.config.fetch.chunk.cache.class": "disk",
             "rsm.config.fetch.chunk.cache.size": str(64 << 20), "rsm.config.chunk.size": str(SEGMENT_BYTES)}
    records = 600

    def store_reads(broker: int) -> int:
        return sum(1 for e in read_events(store, "FETCH_SEGMENT") if e["topic"] == TOPIC and e["broker_id"] == broker)

    def read_all(broker: int) -> None:
        got = consume_all(cluster.brokers[broker].bootstrap, TOPIC, records)
        assert got == [value(i) for i in range(records)]

    with running_cluster(zk_connect, tmp_path, 2, props) as cluster:
        leader, follower = _replicated_topic_with_data(cluster, records)
        _wait_every_rolled_segment_tiered(cluster, leader)
        _wait_local_tail(cluster, (leader, follower))
        read_all(leader)
        first = store_reads(leader)
        assert first > 0
        read_all(leader)
        assert store_reads(leader) == first

        _lead_and_read_all(cluster, follower, leader, records)  # the old leader dies; the follower reads the store
        taken_over = store_reads(follower)
        assert taken_over > 0
        read_all(follower)
        assert store_reads(follower) == taken_over


def test_second_access_admission_is_honoured_in_cluster_mode(zk_connect: str, tmp_path: Path) -> None:
    """``rsm.config.fetch.chunk.cache.admission=second-access`` on a cluster's brokers: the leader's first read of
    the remote tier keeps nothing (its second read goes to the store again), the second keeps what it read (the
    third makes no store read)."""
    store = tmp_path / "store"
    props = {**tiered_props(store), "rsm.config.fetch.chunk.cache.class": "disk",
             "rsm.config.fetch.chunk.cache.size": str(64 << 20), "rsm.config.chunk.size": str(SEGMENT_BYTES),
             "rsm.config.fetch.chunk.cache.admission": "second-access"}
    records = 600

    with running_cluster(zk_connect, tmp_path, 2, props) as cluster:
        leader, follower = _replicated_topic_with_data(cluster, records)
        _wait_every_rolled_segment_tiered(cluster, leader)
        _wait_local_tail(cluster, (leader, follower))

        def read_all() -> int:
            assert consume_all(cluster.brokers[leader].bootstrap, TOPIC, records) == [value(i) for i in range(records)]
            return sum(1 for e in read_events(store, "FETCH_SEGMENT")
                       if e["topic"] == TOPIC and e["broker_id"] == leader)

        first = read_all()
        assert first > 0
        second = read_all()
        assert second > first  # what was read once only was not kept: the store again
        assert read_all() == second  # what was read twice is kept
