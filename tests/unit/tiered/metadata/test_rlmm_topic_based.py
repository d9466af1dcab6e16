"""TopicBasedRemoteLogMetadataManager over an in-memory ``__remote_log_metadata``: write path, restart by
full replay and by snapshot + tail, readiness, partition tracking, and Kafka's TBRLMM test scenarios."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from strata.errors import InvalidConfigError
from strata.tiered.api import (
    RLMM_ALIASES,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageNotReadyError,
    TopicIdPartition,
    load_class,
)
from strata.tiered.metadata.keys import partition_delete_key, segment_key, segment_update_key
from strata.tiered.metadata.memory import InMemoryMetadataTopic
from strata.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from strata.tiered.metadata.serde import deserialize, serialize
from strata.tiered.metadata.topic_based import (
    SNAPSHOT_FILE_NAME,
    TopicBasedRemoteLogMetadataManager,
    TopicBasedRemoteLogMetadataManagerConfig,
)

S = RemoteLogSegmentState
PARTITIONS = 4


def tp_in(metadata_partition: int, n: int = PARTITIONS, topic: str = "t") -> TopicIdPartition:
    """A user partition that the partitioner maps to ``metadata_partition``."""
    partitioner = RemoteLogMetadataTopicPartitioner(n)
    while True:
        tp = TopicIdPartition(uuid.uuid4(), topic, 0)
        if partitioner.metadata_partition(tp) == metadata_partition:
            return tp


TP0, TP1, TP2 = tp_in(0), tp_in(1), tp_in(2)


def segment(tp: TopicIdPartition, epochs: dict[int, int], start: int, end: int, size: int = 100,
            txn_idx_empty: bool = False) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), start, end, -1, 0, 1000, size, epochs,
                                    txn_idx_empty=txn_idx_empty)


def update(md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2000, None, state, 1)


def upsert(rlmm: TopicBasedRemoteLogMetadataManager, md: RemoteLogSegmentMetadata,
           state: RemoteLogSegmentState = S.COPY_SEGMENT_FINISHED) -> RemoteLogSegmentMetadata:
    rlmm.add_remote_log_segment_metadata(md)
    if state is S.COPY_SEGMENT_STARTED:
        return md
    if state is S.DELETE_SEGMENT_FINISHED:
        rlmm.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED))
    u = update(md, state)
    rlmm.update_remote_log_segment_metadata(u)
    return md.create_with_updates(u)


def crash(rlmm: TopicBasedRemoteLogMetadataManager) -> None:
    """Stop the manager's threads without the final snapshot close() would write."""
    rlmm._closing = True
    rlmm._snapshot_wakeup.set()
    for thread in (rlmm._init_thread, rlmm._snapshot_thread):
        if thread is not None:
            thread.join()


class Managers:
    def __init__(self, tmp_path: Path) -> None:
        self.log_dir = tmp_path / "log"
        self.topic = InMemoryMetadataTopic()
        self.opened: list[TopicBasedRemoteLogMetadataManager] = []

    def new(self, topic: object = None, initialize: bool = True, background: bool = False,
            **configs: object) -> TopicBasedRemoteLogMetadataManager:
        rlmm = TopicBasedRemoteLogMetadataManager()
        rlmm.configure({"log.dir": str(self.log_dir), "broker.id": 0,
                        "remote.log.metadata.topic.num.partitions": PARTITIONS,
                        "remote.log.metadata.initialization.retry.interval.ms": 1,
                        **{k.replace("_", "."): v for k, v in configs.items()}})
        rlmm.set_metadata_topic(topic if topic is not None else self.topic)  # type: ignore[arg-type]
        self.opened.append(rlmm)
        if initialize:
            rlmm.initialize(background=background)
        return rlmm

    @property
    def snapshot(self) -> Path:
        return self.log_dir / SNAPSHOT_FILE_NAME


@pytest.fixture
def managers(tmp_path: Path) -> Iterator[Managers]:
    m = Managers(tmp_path)
    yield m
    for rlmm in m.opened:
        crash(rlmm)


def observable(rlmm: TopicBasedRemoteLogMetadataManager, tps: list[TopicIdPartition], epochs: range = range(6),
               offsets: range = range(0, 700, 13)) -> dict:
    """Everything the RLM can read about ``tps``: to compare two managers."""
    out = {}
    for tp in tps:
        try:
            listed = list(rlmm.list_remote_log_segments(tp))
        except RemoteResourceNotFoundError:
            out[tp] = "not found"
            continue
        out[tp] = (
            sorted(listed, key=lambda m: m.remote_log_segment_id.id),
            {e: (list(rlmm.list_remote_log_segments(tp, e)), rlmm.highest_offset_for_epoch(tp, e),
                 [rlmm.remote_log_segment_metadata(tp, e, o) for o in offsets]) for e in epochs},
        )
    return out


def build_history(rlmm: TopicBasedRemoteLogMetadataManager) -> list[RemoteLogSegmentMetadata]:
    """A few partitions with finished, superseded, started and deleted segments across epochs."""
    rlmm.on_partition_leadership_changes({TP0, TP1}, {TP2})
    out = [
        upsert(rlmm, segment(TP0, {0: 0, 1: 20, 2: 80}, 0, 100)),
        upsert(rlmm, segment(TP0, {2: 101}, 101, 200)),
        upsert(rlmm, segment(TP0, {2: 201, 3: 240}, 201, 300)),
        upsert(rlmm, segment(TP0, {3: 250, 4: 370}, 250, 400)),  # supersedes nothing, overlaps in epoch 3
        upsert(rlmm, segment(TP1, {0: 0}, 0, 99)),
        upsert(rlmm, segment(TP1, {0: 100}, 100, 199), S.DELETE_SEGMENT_STARTED),
        upsert(rlmm, segment(TP1, {0: 200}, 200, 299), S.COPY_SEGMENT_STARTED),
        upsert(rlmm, segment(TP2, {5: 0}, 0, 50)),
        upsert(rlmm, segment(TP2, {5: 0}, 0, 60)),  # supersedes the previous one
    ]
    upsert(rlmm, segment(TP1, {0: 300}, 300, 399), S.DELETE_SEGMENT_FINISHED)
    return out


ALL = [TP0, TP1, TP2]


# -- configuration ----------------------------------------------------------------------------------------


def test_config_defaults_and_parsing(tmp_path):
    cfg = TopicBasedRemoteLogMetadataManagerConfig.from_configs({
        "log.dir": str(tmp_path), "broker.id": "3",
        "remote.log.metadata.common.client.bootstrap.servers": "ignored:9092",
        "remote.log.metadata.topic.replication.factor": "1",
    })
    assert (cfg.log_dir, cfg.broker_id, cfg.metadata_topic_partitions_count, cfg.metadata_topic_retention_ms) == \
        (tmp_path, 3, 50, -1)
    assert (cfg.consume_wait_ms, cfg.initialization_retry_max_timeout_ms, cfg.initialization_retry_interval_ms) == \
        (120_000, 120_000, 100)
    assert cfg.metadata_topic_replication_factor == 1
    assert cfg.snapshot_enable and cfg.snapshot_events == 10_000


@pytest.mark.parametrize(("configs", "message"), [
    ({}, "log.dir can not be null or empty"),
    ({"log.dir": ""}, "log.dir can not be null or empty"),
    ({"log.dir": "/x", "remote.log.metadata.topic.retention.ms": "0"}, "retention.ms"),
    ({"log.dir": "/x", "remote.log.metadata.topic.num.partitions": "0"}, "num.partitions"),
    ({"log.dir": "/x", "remote.log.metadata.topic.num.partitions": "many"}, "num.partitions"),
])
def test_config_errors(configs, message):
    with pytest.raises(InvalidConfigError, match=message):
        TopicBasedRemoteLogMetadataManagerConfig.from_configs(configs)


def test_loaded_by_alias():
    assert load_class("topic", RLMM_ALIASES, RemoteLogMetadataManager) is TopicBasedRemoteLogMetadataManager
    kafka_name = "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
    assert load_class(kafka_name, RLMM_ALIASES, RemoteLogMetadataManager) is TopicBasedRemoteLogMetadataManager


# -- lifecycle and readiness ---------------------------------------------------------------------------------


def test_not_ready_before_initialize(managers):
    rlmm = managers.new(initialize=False)
    assert not rlmm.is_ready(TP0)
    with pytest.raises(RemoteStorageNotReadyError):
        rlmm.list_remote_log_segments(TP0)
    with pytest.raises(RemoteStorageNotReadyError):
        rlmm.add_remote_log_segment_metadata(segment(TP0, {0: 0}, 0, 9))
    assert managers.topic.num_partitions == 0


def test_initialize_needs_the_topic(tmp_path):
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(tmp_path)})
    with pytest.raises(RemoteStorageError, match="set_metadata_topic"):
        rlmm.initialize()


def test_initialize_creates_the_topic(managers):
    rlmm = managers.new(remote_log_metadata_topic_retention_ms=86_400_000)
    assert managers.topic.num_partitions == PARTITIONS
    assert managers.topic.retention_ms == 86_400_000
    rlmm.initialize()  # idempotent
    assert managers.topic.create_calls == 1


def test_partition_count_mismatch_fails_initialize(managers):
    topic = InMemoryMetadataTopic(num_partitions=3)
    rlmm = managers.new(topic=topic, initialize=False)
    with pytest.raises(RemoteStorageError, match=r"partition count 3 .*num\.partitions=4"):
        rlmm.initialize()
    with pytest.raises(RemoteStorageError, match="partition count 3"):
        rlmm.list_remote_log_segments(TP0)
    assert not rlmm.is_ready(TP0)


class FlakyTopic(InMemoryMetadataTopic):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def ensure_created(self, num_partitions: int, retention_ms: int, replication_factor: int = 1) -> int:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker not ready")
        return super().ensure_created(num_partitions, retention_ms, replication_factor)


def test_topic_creation_is_retried(managers):
    rlmm = managers.new(topic=FlakyTopic(failures=2))
    assert rlmm.is_ready(TP0) is False  # no cache yet (not assigned)
    rlmm.on_partition_leadership_changes({TP0}, set())
    assert rlmm.is_ready(TP0)


def test_topic_creation_gives_up_after_the_max_timeout(managers):
    rlmm = managers.new(topic=FlakyTopic(failures=10**9), initialize=False,
                        remote_log_metadata_initialization_retry_max_timeout_ms=30)
    with pytest.raises(RemoteStorageError, match="Timed out in initializing"):
        rlmm.initialize()


class GatedTopic(InMemoryMetadataTopic):
    """Reading ``gated_partition`` blocks until ``gate`` is set."""

    def __init__(self, gated_partition: int) -> None:
        super().__init__()
        self.gated_partition = gated_partition
        self.gate = threading.Event()
        self.reached = threading.Event()

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        if partition == self.gated_partition and not self.gate.is_set():
            self.reached.set()
            assert self.gate.wait(10)
        return super().read(partition, from_offset)


def test_background_initialize_serves_partitions_as_they_load(managers):
    writer = managers.new(remote_log_metadata_snapshot_enable=False)
    build_history(writer)
    expected = observable(writer, ALL)
    writer.close()
    topic = GatedTopic(gated_partition=2)
    topic._values, topic._start = managers.topic._values, managers.topic._start  # the same records
    rlmm = managers.new(topic=topic, background=True, remote_log_metadata_snapshot_enable=False)
    assert topic.reached.wait(10)
    assert rlmm.is_ready(TP0) and rlmm.is_ready(TP1)  # partitions 0 and 1 are loaded
    assert not rlmm.is_ready(TP2)
    with pytest.raises(RemoteStorageNotReadyError):
        rlmm.list_remote_log_segments(TP2)
    with pytest.raises(RemoteStorageNotReadyError):
        rlmm.highest_offset_for_epoch(TP2, 5)
    with pytest.raises(RemoteStorageNotReadyError):
        rlmm.add_remote_log_segment_metadata(segment(TP2, {5: 100}, 100, 200))
    assert len(list(rlmm.list_remote_log_segments(TP0))) == 4
    topic.gate.set()
    assert rlmm.wait_until_ready(10)
    assert rlmm.is_ready(TP2)
    assert observable(rlmm, ALL) == expected


# -- write path ----------------------------------------------------------------------------------------------


def test_read_your_writes_and_record_placement(managers):
    rlmm = managers.new()
    rlmm.on_partition_leadership_changes({TP1}, set())
    md = segment(TP1, {0: 0}, 0, 99)
    rlmm.add_remote_log_segment_metadata(md)
    assert list(rlmm.list_remote_log_segments(TP1)) == [md]
    assert rlmm.remote_log_segment_metadata(TP1, 0, 50) is None
    u = update(md, S.COPY_SEGMENT_FINISHED)
    rlmm.update_remote_log_segment_metadata(u)
    assert rlmm.remote_log_segment_metadata(TP1, 0, 50) == md.create_with_updates(u)
    # Both events are in TP1's metadata partition, in Kafka's bytes, in order.
    partition = rlmm.metadata_partition(TP1)
    assert partition == 1
    assert list(managers.topic.read(partition, 0)) == [(0, segment_key(md), serialize(md)),
                                                        (1, segment_update_key(md), serialize(u))]
    assert all(managers.topic.end_offset(p) == 0 for p in range(PARTITIONS) if p != partition)
    assert rlmm.read_offset_for_partition(partition) == 1
    assert rlmm.read_offset_for_partition(0) is None


def test_write_preconditions(managers):
    rlmm = managers.new()
    md = segment(TP0, {0: 0}, 0, 99)
    with pytest.raises(ValueError, match="should have state as COPY_SEGMENT_STARTED"):
        rlmm.add_remote_log_segment_metadata(md.create_with_updates(update(md, S.COPY_SEGMENT_FINISHED)))
    with pytest.raises(ValueError, match="should not have the state as: COPY_SEGMENT_STARTED"):
        rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_STARTED))
    with pytest.raises(RemoteResourceNotFoundError):
        rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED))
    assert managers.topic.total_records() == 0


def test_lifecycle_through_the_manager(managers):
    """RemoteLogSegmentLifecycleTest.testRemoteLogSegmentLifeCycle against the topic-based manager."""
    rlmm = managers.new()
    rlmm.on_partition_leadership_changes({TP0}, set())
    seg0 = segment(TP0, {0: 0, 1: 20, 2: 80}, 0, 100)
    rlmm.add_remote_log_segment_metadata(seg0)
    assert rlmm.remote_log_segment_metadata(TP0, 1, 40) is None
    assert [rlmm.highest_offset_for_epoch(TP0, e) for e in range(3)] == [None, None, None]
    u0 = update(seg0, S.COPY_SEGMENT_FINISHED)
    rlmm.update_remote_log_segment_metadata(u0)
    seg0 = seg0.create_with_updates(u0)
    seg1 = upsert(rlmm, segment(TP0, {2: 101}, 101, 200))
    seg2 = upsert(rlmm, segment(TP0, {2: 201, 3: 240}, 201, 300))
    seg3 = upsert(rlmm, segment(TP0, {3: 250, 4: 370}, 250, 400))
    expected = {(1, 40): seg0, (2, 110): seg1, (3, 240): seg2, (3, 250): seg3, (4, 375): seg3,
                (1, 110): None, (4, 401): None, (5, 301): None}
    for (epoch, offset), md in expected.items():
        assert rlmm.remote_log_segment_metadata(TP0, epoch, offset) == md
    rlmm.update_remote_log_segment_metadata(update(seg0, S.DELETE_SEGMENT_STARTED))
    assert rlmm.remote_log_segment_metadata(TP0, 0, 10) is None
    rlmm.update_remote_log_segment_metadata(update(seg0, S.DELETE_SEGMENT_FINISHED))
    assert rlmm.remote_log_segment_metadata(TP0, 0, 10) is None
    assert {e: rlmm.highest_offset_for_epoch(TP0, e) for e in range(6)} == \
        {0: 19, 1: 79, 2: 239, 3: 369, 4: 400, 5: None}


def test_remote_log_size_per_epoch(managers):
    """TopicBasedRemoteLogMetadataManagerTest.testRemoteLogSizeCalculation*."""
    rlmm = managers.new()
    rlmm.on_partition_leadership_changes({TP0}, set())
    upsert(rlmm, segment(TP0, {0: 0}, 0, 99, size=100), S.COPY_SEGMENT_STARTED)
    upsert(rlmm, segment(TP0, {1: 100}, 100, 199, size=200))
    upsert(rlmm, segment(TP0, {2: 200}, 200, 299, size=300), S.DELETE_SEGMENT_STARTED)
    assert [rlmm.remote_log_size(TP0, e) for e in range(4)] == [100, 200, 300, 0]


def test_next_segment_with_txn_index(managers):
    rlmm = managers.new()
    rlmm.on_partition_leadership_changes({TP0}, set())
    upsert(rlmm, segment(TP0, {0: 0}, 0, 99, txn_idx_empty=True))
    with_txn = upsert(rlmm, segment(TP0, {0: 100}, 100, 199))
    assert rlmm.next_segment_with_txn_index(TP0, 0, 10) == with_txn


def test_unknown_partition_is_not_found(managers):
    rlmm = managers.new()
    with pytest.raises(RemoteResourceNotFoundError, match="No resource found for partition"):
        rlmm.list_remote_log_segments(TP0)
    assert not rlmm.is_ready(TP0)
    rlmm.on_partition_leadership_changes({TP0}, set())
    assert rlmm.is_ready(TP0)
    assert list(rlmm.list_remote_log_segments(TP0)) == []
    assert rlmm.assigned_partitions == {TP0}


def test_concurrent_writers_to_one_metadata_partition(managers):
    rlmm = managers.new(remote_log_metadata_topic_num_partitions=1)
    tps = [TopicIdPartition(uuid.uuid4(), "c", i) for i in range(8)]
    rlmm.on_partition_leadership_changes(set(tps), set())
    errors: list[BaseException] = []

    def writer(tp: TopicIdPartition) -> None:
        try:
            for i in range(40):
                md = upsert(rlmm, segment(tp, {0: i * 10}, i * 10, i * 10 + 9))
                assert rlmm.remote_log_segment_metadata(tp, 0, i * 10 + 5) == md  # read-your-writes
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(tp,)) for tp in tps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert rlmm.read_offset_for_partition(0) == 8 * 40 * 2 - 1
    assert all(len(list(rlmm.list_remote_log_segments(tp))) == 40 for tp in tps)


def test_records_from_other_writers_are_applied_in_order(managers):
    rlmm = managers.new()
    rlmm.on_partition_leadership_changes({TP0}, set())
    foreign = segment(TP0, {0: 0}, 0, 9)
    managers.topic.append(0, serialize(foreign))
    managers.topic.append(0, b"\x01garbage")  # undecodable: logged and skipped
    md = segment(TP0, {0: 10}, 10, 19)
    rlmm.add_remote_log_segment_metadata(md)
    assert {m.start_offset for m in rlmm.list_remote_log_segments(TP0)} == {0, 10}
    assert rlmm.read_offset_for_partition(0) == 2


class LaggingTopic(InMemoryMetadataTopic):
    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        return iter(())  # never shows the appended record


def test_write_times_out_when_its_record_is_never_readable(managers):
    rlmm = managers.new(topic=LaggingTopic(), remote_log_metadata_consume_wait_ms=30)
    with pytest.raises(RemoteStorageError, match="Timed out after 30 ms"):
        rlmm.add_remote_log_segment_metadata(segment(TP0, {0: 0}, 0, 9))


def test_append_failure_is_a_remote_storage_error(managers):
    class Broken(InMemoryMetadataTopic):
        def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
            raise OSError("disk full")

    rlmm = managers.new(topic=Broken())
    with pytest.raises(RemoteStorageError, match="disk full"):
        rlmm.add_remote_log_segment_metadata(segment(TP0, {0: 0}, 0, 9))


# -- partition tracking --------------------------------------------------------------------------------------


def test_stop_drops_the_cache_and_reassignment_reloads_it(managers):
    rlmm = managers.new()
    build_history(rlmm)
    before = observable(rlmm, ALL)
    rlmm.on_stop_partitions({TP0})
    assert not rlmm.is_ready(TP0)
    with pytest.raises(RemoteResourceNotFoundError):
        rlmm.list_remote_log_segments(TP0)
    with pytest.raises(RemoteStorageError, match="stopped"):
        rlmm.add_remote_log_segment_metadata(segment(TP0, {9: 1000}, 1000, 1100))
    late = segment(TP0, {6: 500}, 500, 600)
    managers.topic.append(0, serialize(late))  # another writer; skipped while TP0 is stopped
    upsert(rlmm, segment(TP1, {0: 400}, 400, 499))  # catches partition 1 up; partition 0 untouched
    rlmm.add_remote_log_segment_metadata(segment(TP2, {5: 61}, 61, 70))
    rlmm.on_partition_leadership_changes({TP0}, set())
    assert rlmm.is_ready(TP0)
    assert observable(rlmm, [TP0])[TP0] == before[TP0]  # ``late`` is read when partition 0 is next caught up
    rlmm.add_remote_log_segment_metadata(segment(TP0, {6: 601}, 601, 700))
    assert late in list(rlmm.list_remote_log_segments(TP0))


def test_stopped_partitions_survive_a_snapshot_restart(managers):
    rlmm = managers.new()
    build_history(rlmm)
    before = observable(rlmm, ALL)
    rlmm.on_stop_partitions({TP0})
    rlmm.close()
    restarted = managers.new()
    assert restarted.load_stats.snapshot_loaded and restarted.load_stats.records_replayed == 0
    with pytest.raises(RemoteResourceNotFoundError):
        restarted.list_remote_log_segments(TP0)
    restarted.on_partition_leadership_changes({TP0}, set())
    assert observable(restarted, ALL) == before


def test_partition_delete_finished_drops_the_cache(managers):
    rlmm = managers.new()
    build_history(rlmm)
    for state in RemotePartitionDeleteState:
        rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(TP1, state, 3000, 0))
        if state is not RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            assert rlmm._store.partition_delete_metadata(TP1).state is state
    with pytest.raises(RemoteResourceNotFoundError):
        rlmm.list_remote_log_segments(TP1)
    assert len(list(rlmm.list_remote_log_segments(TP0))) == 4
    records = list(managers.topic.read(1, 0))
    assert [type(deserialize(v)).__name__ for _, _, v in records if v is not None][-3:] == \
        ["RemotePartitionDeleteMetadata"] * 3
    assert records[-1][1:] == (partition_delete_key(TP1), None)  # then the tombstone of its key


# -- restart -----------------------------------------------------------------------------------------------


def test_restart_by_full_replay(managers):
    rlmm = managers.new(remote_log_metadata_snapshot_enable=False)
    build_history(rlmm)
    before = observable(rlmm, ALL)
    rlmm.close()
    assert not managers.snapshot.exists()
    restarted = managers.new(remote_log_metadata_snapshot_enable=False)
    assert restarted.load_stats.records_replayed == managers.topic.total_records()
    assert not restarted.load_stats.snapshot_loaded
    assert observable(restarted, ALL) == before


def test_restart_with_snapshot_replays_only_the_tail(managers):
    rlmm = managers.new()
    build_history(rlmm)
    assert rlmm.snapshot_now() > 0
    upsert(rlmm, segment(TP0, {4: 401}, 401, 500))                     # 2 records in partition 0
    upsert(rlmm, segment(TP2, {5: 61, 6: 70}, 61, 90))                 # 2 records in partition 2
    rlmm.update_remote_log_segment_metadata(                           # 1 record in partition 1
        update(list(rlmm.list_remote_log_segments(TP1, 0))[0], S.DELETE_SEGMENT_STARTED))
    before = observable(rlmm, ALL)
    crash(rlmm)  # no final snapshot: the file is 5 records behind the topic
    restarted = managers.new()
    assert restarted.load_stats.snapshot_loaded
    assert restarted.load_stats.records_replayed == 5
    assert restarted.load_stats.snapshot_segments == 9  # live segments of build_history
    assert restarted.load_stats.full_replay_partitions == []
    assert observable(restarted, ALL) == before
    full = managers.new(remote_log_metadata_snapshot_enable=False)
    assert observable(full, ALL) == before
    assert [restarted.read_offset_for_partition(p) for p in range(PARTITIONS)] == \
        [full.read_offset_for_partition(p) for p in range(PARTITIONS)]


def test_close_writes_the_snapshot(managers):
    rlmm = managers.new()
    build_history(rlmm)
    before = observable(rlmm, ALL)
    rlmm.close()
    rlmm.close()  # idempotent
    with pytest.raises(RemoteStorageError, match="closing"):
        rlmm.list_remote_log_segments(TP0)
    assert managers.snapshot.exists()
    restarted = managers.new()
    assert restarted.load_stats.records_replayed == 0
    assert observable(restarted, ALL) == before
    mtime = managers.snapshot.stat().st_mtime_ns
    restarted.close()  # nothing changed: the file is left alone
    assert managers.snapshot.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "empty"])
def test_corrupt_snapshot_falls_back_to_a_full_replay(managers, damage):
    rlmm = managers.new()
    build_history(rlmm)
    before = observable(rlmm, ALL)
    rlmm.close()
    data = bytearray(managers.snapshot.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        del data[-3:]
    elif damage == "magic":
        data[0:4] = b"XXXX"
    else:
        data = bytearray()
    managers.snapshot.write_bytes(bytes(data))
    restarted = managers.new()
    stats = restarted.load_stats
    assert not stats.snapshot_loaded and stats.snapshot_error
    assert stats.records_replayed == managers.topic.total_records()
    assert observable(restarted, ALL) == before


def test_snapshot_for_another_partition_count_is_ignored(managers):
    rlmm = managers.new()
    build_history(rlmm)
    rlmm.close()
    other = InMemoryMetadataTopic()
    restarted = managers.new(topic=other, remote_log_metadata_topic_num_partitions=7)
    assert "written for 4 metadata partitions, configured 7" in restarted.load_stats.snapshot_error
    assert restarted.load_stats.records_replayed == 0


def test_retention_past_the_snapshot_replays_that_partition_in_full(managers):
    rlmm = managers.new()
    build_history(rlmm)
    rlmm.snapshot_now()
    extra = [upsert(rlmm, segment(TP0, {4: 401 + 100 * i}, 401 + 100 * i, 500 + 100 * i)) for i in range(3)]
    upsert(rlmm, segment(TP2, {5: 61}, 61, 90))
    crash(rlmm)
    end = managers.topic.end_offset(0)
    managers.topic.delete_records(0, end - 4)  # retention removed records the snapshot does not have
    restarted = managers.new()
    stats = restarted.load_stats
    assert stats.snapshot_loaded and stats.full_replay_partitions == [0]
    assert stats.records_replayed == 4 + 2  # what is left of partition 0, plus partition 2's tail
    # Partition 0 is what a Kafka broker would now rebuild from the topic: the last two uploads only.
    assert sorted(m.start_offset for m in restarted.list_remote_log_segments(TP0)) == \
        [extra[1].start_offset, extra[2].start_offset]
    full = managers.new(remote_log_metadata_snapshot_enable=False)
    assert observable(restarted, [TP0, TP2]) == observable(full, [TP0, TP2])
    assert observable(restarted, [TP1]) == observable(full, [TP1])


def test_recreated_topic_invalidates_the_snapshot(managers):
    rlmm = managers.new()
    build_history(rlmm)
    rlmm.close()
    restarted = managers.new(topic=InMemoryMetadataTopic())
    assert restarted.load_stats.full_replay_partitions == [0, 1, 2]  # partition 3 was empty: nothing to drop
    with pytest.raises(RemoteResourceNotFoundError):
        restarted.list_remote_log_segments(TP0)


def test_snapshot_thread_writes_after_n_events(managers):
    rlmm = managers.new(remote_log_metadata_snapshot_events=5)
    rlmm.on_partition_leadership_changes({TP0}, set())
    for i in range(3):
        upsert(rlmm, segment(TP0, {0: i * 10}, i * 10, i * 10 + 9))
    deadline = time.monotonic() + 10
    while not managers.snapshot.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert managers.snapshot.exists()


def test_snapshot_thread_writes_after_the_interval(managers):
    rlmm = managers.new(remote_log_metadata_snapshot_interval_ms=20)
    rlmm.on_partition_leadership_changes({TP0}, set())
    rlmm.add_remote_log_segment_metadata(segment(TP0, {0: 0}, 0, 9))
    deadline = time.monotonic() + 10
    while not managers.snapshot.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert managers.snapshot.exists()


def test_snapshot_write_failure_keeps_the_manager_running(managers, caplog):
    rlmm = managers.new()
    build_history(rlmm)
    managers.snapshot.mkdir()  # the rename target is a directory: the write fails
    rlmm.close()
    assert "Writing the RLMM snapshot" in caplog.text


class LoopTopic(InMemoryMetadataTopic):
    """Like the broker's topic: every call runs on one "event loop" thread (inline when already on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = ThreadPoolExecutor(max_workers=1)
        self.loop_thread = self.loop.submit(threading.get_ident).result()

    def on_loop(self, fn):  # type: ignore[no-untyped-def]
        if threading.get_ident() == self.loop_thread:
            return fn()
        return self.loop.submit(fn).result(timeout=10)

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        return iter(self.on_loop(lambda: list(InMemoryMetadataTopic.read(self, partition, from_offset))))

    def append(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        return self.on_loop(lambda: InMemoryMetadataTopic.append(self, partition, value, key))


def test_partition_tracking_on_the_topics_loop_thread_does_not_deadlock_writers(managers):
    """Writers never wait on the topic while holding the apply lock, so the loop thread may take it."""
    topic = LoopTopic()
    rlmm = managers.new(topic=topic, remote_log_metadata_topic_num_partitions=1)
    writers_tps = [TopicIdPartition(uuid.uuid4(), "w", i) for i in range(3)]
    churned = TopicIdPartition(uuid.uuid4(), "churn", 0)
    rlmm.on_partition_leadership_changes({*writers_tps, churned}, set())
    upsert(rlmm, segment(churned, {0: 0}, 0, 9))
    errors: list[BaseException] = []

    def writer(tp: TopicIdPartition) -> None:
        try:
            for i in range(30):
                upsert(rlmm, segment(tp, {0: i * 10}, i * 10, i * 10 + 9))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def churn_on_loop() -> None:
        for _ in range(30):
            rlmm.on_stop_partitions({churned})
            rlmm.on_partition_leadership_changes({churned}, set())

    threads = [threading.Thread(target=writer, args=(tp,)) for tp in writers_tps]
    for t in threads:
        t.start()
    topic.loop.submit(churn_on_loop).result(timeout=30)
    for t in threads:
        t.join()
    topic.loop.shutdown()
    assert errors == []
    assert len(list(rlmm.list_remote_log_segments(churned))) == 1
    assert all(len(list(rlmm.list_remote_log_segments(tp))) == 30 for tp in writers_tps)


class ShortReadTopic(InMemoryMetadataTopic):
    """Returns at most ``limit`` records per read, as a topic that is still catching up might."""

    limit: int | None = None
    empty_after_first: bool = False

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        records = list(super().read(partition, from_offset))
        if self.empty_after_first and from_offset > 0:
            return iter(())
        return iter(records if self.limit is None else records[:self.limit])


def test_reload_reads_until_it_covers_what_was_applied(managers):
    topic = ShortReadTopic()
    rlmm = managers.new(topic=topic)
    build_history(rlmm)
    before = observable(rlmm, ALL)
    rlmm.on_stop_partitions({TP0})
    topic.limit = 2  # the reload needs several reads of partition 0
    rlmm.on_partition_leadership_changes({TP0}, set())
    assert observable(rlmm, ALL) == before


def test_reload_uses_what_the_partition_still_holds(managers, caplog):
    topic = ShortReadTopic()
    rlmm = managers.new(topic=topic)
    build_history(rlmm)
    rlmm.on_stop_partitions({TP0})
    topic.limit, topic.empty_after_first = 3, True  # later records gone (say, the topic was truncated)
    rlmm.on_partition_leadership_changes({TP0}, set())
    assert "no longer holds offsets" in caplog.text
    assert rlmm.is_ready(TP0)
    # Three records: the first upload (started, finished) and the second one's COPY_SEGMENT_STARTED.
    assert [m.state for m in rlmm.list_remote_log_segments(TP0, 2)] == [S.COPY_SEGMENT_FINISHED,
                                                                        S.COPY_SEGMENT_STARTED]
