"""A compacted ``__remote_log_metadata`` (KIP-1266) replays into the same cache as its full history.

The history is what the RemoteLogManager writes: uploads (some failing, left COPY_SEGMENT_STARTED and
cleaned later as dangling), retried copies of the same range under a new id, retention deleting the
oldest segments (some left DELETE_SEGMENT_STARTED for a while), leader changes - one whose new leader
re-uploads a range under the same end offset and epoch (issue 28's compaction rewrite), one that
diverged and deletes the old leader's segments past its lineage - and partition deletions. The topic is
then compacted with the log cleaner's rule (``InMemoryMetadataTopic.compact``: whole, with or without
tombstones, and cut at random offsets where cleanings could have stopped), replayed by a new manager, and
its cache compared with the one the full history built.

What the comparison allows, and only that: the full history's cache keeps an epoch entry whose segments
are all deleted, and a highest offset per epoch that counts segments since deleted (or being deleted);
the compacted replay's highest offset is that of the epoch's live COPY_SEGMENT_FINISHED segments.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from strata.tiered.metadata.cache import RemoteLogMetadataCache
from strata.tiered.metadata.keys import KeyKind, parse_key, segment_key, segment_update_key
from strata.tiered.metadata.memory import InMemoryMetadataTopic
from strata.tiered.metadata.serde import serialize
from strata.tiered.metadata.topic_based import TopicBasedRemoteLogMetadataManager

S = RemoteLogSegmentState
D = RemotePartitionDeleteState
PARTITIONS = 3


def new_manager(tmp_path: Path, topic: InMemoryMetadataTopic) -> TopicBasedRemoteLogMetadataManager:
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(tmp_path / "log"), "broker.id": 0,
                    "remote.log.metadata.topic.num.partitions": PARTITIONS,
                    "remote.log.metadata.snapshot.enable": False})
    rlmm.set_metadata_topic(topic)
    rlmm.initialize()
    return rlmm


def copy_of(topic: InMemoryMetadataTopic) -> InMemoryMetadataTopic:
    other = InMemoryMetadataTopic()
    assert topic._values is not None
    other._values = [list(records) for records in topic._values]
    other._start = list(topic._start)
    return other


# -- the history ----------------------------------------------------------------------------------------------


@dataclass
class Partition:
    tp: TopicIdPartition
    epoch: int = 0
    next_offset: int = 0
    live: list[RemoteLogSegmentMetadata] = field(default_factory=list)  # uploaded, not DELETE_FINISHED


class Writer:
    """Drives a manager as the RemoteLogManager would, one user partition at a time."""

    def __init__(self, rlmm: TopicBasedRemoteLogMetadataManager, rng: random.Random) -> None:
        self.rlmm = rlmm
        self.rng = rng
        self.clock = 1_000

    def now(self) -> int:
        self.clock += 1
        return self.clock

    def state(self, part: Partition, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentState:
        current = self.rlmm._store.get(part.tp).segment_metadata(md.remote_log_segment_id)
        assert current is not None
        return current.state

    def update(self, part: Partition, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        custom = b"c%d" % self.clock if state is S.COPY_SEGMENT_FINISHED else None
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, self.now(), custom, state, self.rng.choice([0, 1, 2])))
        if state is S.DELETE_SEGMENT_FINISHED:
            part.live.remove(md)

    def upload(self, part: Partition, start: int, end: int, epochs: dict[int, int], finish: bool = True
               ) -> RemoteLogSegmentMetadata:
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(part.tp), start, end, self.now(), 0,
                                      self.now(), (end - start + 1) * 10, epochs)
        self.rlmm.add_remote_log_segment_metadata(md)
        part.live.append(md)
        if finish:
            self.update(part, md, S.COPY_SEGMENT_FINISHED)
        return md

    def delete(self, part: Partition, md: RemoteLogSegmentMetadata, finish: bool = True) -> None:
        if self.state(part, md) is not S.DELETE_SEGMENT_STARTED:
            self.update(part, md, S.DELETE_SEGMENT_STARTED)
        if finish:
            self.update(part, md, S.DELETE_SEGMENT_FINISHED)

    def step(self, part: Partition) -> None:
        rng = self.rng
        roll = rng.random()
        # Deletions left half done (DELETE_SEGMENT_STARTED) are finished sooner or later.
        pending = [md for md in part.live if self.state(part, md) is S.DELETE_SEGMENT_STARTED]
        if pending and rng.random() < 0.5:
            self.delete(part, rng.choice(pending))
            return
        if roll < 0.45:  # the next upload: a failed attempt first sometimes, then the retry under a new id
            start, end = part.next_offset, part.next_offset + rng.randint(5, 40)
            epochs = {part.epoch: start}
            if rng.random() < 0.2:
                dangling = self.upload(part, start, end, epochs, finish=False)
                if rng.random() < 0.5:
                    self.delete(part, dangling)  # the copy task cleans it at once...
                # ... or the next run's dangling sweep does (below)
            self.upload(part, start, end, epochs)
            part.next_offset = end + 1
        elif roll < 0.55:  # the dangling sweep
            for md in [md for md in part.live if self.state(part, md) is S.COPY_SEGMENT_STARTED]:
                self.delete(part, md)
        elif roll < 0.75:  # retention: the oldest live segment goes
            finished = [md for md in part.live if self.state(part, md) is S.COPY_SEGMENT_FINISHED]
            if finished:
                self.delete(part, min(finished, key=lambda m: m.start_offset), finish=rng.random() < 0.7)
        elif roll < 0.85:  # a leader change; the new leader's first segment spans both epochs
            part.epoch += 1
            start, end = part.next_offset, part.next_offset + rng.randint(10, 40)
            self.upload(part, start, end, {part.epoch - 1: start, part.epoch: start + 3})
            part.next_offset = end + 1
        elif roll < 0.93:  # the same range uploaded again (compaction rewrite): same end, same epoch, new id
            finished = [md for md in part.live if self.state(part, md) is S.COPY_SEGMENT_FINISHED]
            if finished:
                old = rng.choice(finished)
                self.upload(part, old.start_offset, old.end_offset, dict(old.segment_leader_epochs))
                self.delete(part, old, finish=rng.random() < 0.8)
        else:  # a divergent leader: its last upload lies past the new leader's lineage and is deleted
            start, end = part.next_offset, part.next_offset + 30
            divergent = self.upload(part, start, end, {part.epoch: start})
            part.epoch += 1
            self.delete(part, divergent)
            keep = start + 10  # the new leader's log: epoch - 1 ended at start + 9
            self.upload(part, keep, keep + 20, {part.epoch: keep})
            part.next_offset = keep + 21


def build_history(rlmm: TopicBasedRemoteLogMetadataManager, seed: int, steps: int = 400
                  ) -> list[TopicIdPartition]:
    rng = random.Random(seed)
    writer = Writer(rlmm, rng)
    parts = [Partition(TopicIdPartition(uuid.UUID(int=rng.getrandbits(128)), f"t{i}", i % 2)) for i in range(5)]
    rlmm.on_partition_leadership_changes({p.tp for p in parts}, set())
    for _ in range(steps):
        writer.step(rng.choice(parts[:4]))
    # Partition 4: a short life, then its topic is deleted the way Kafka does it (segments one by one).
    for _ in range(20):
        writer.step(parts[4])
    for state in (D.DELETE_PARTITION_MARKED, D.DELETE_PARTITION_STARTED):
        rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(parts[4].tp, state, writer.now(), 0))
    for md in list(parts[4].live):
        writer.delete(parts[4], md)
    rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(parts[4].tp, D.DELETE_PARTITION_FINISHED, writer.now(), 0))
    # Partition 3: deletion in progress (its delete metadata is live).
    rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(parts[3].tp, D.DELETE_PARTITION_MARKED, writer.now(), 0))
    return [p.tp for p in parts]


# -- comparing caches -----------------------------------------------------------------------------------------


def epoch_end(md: RemoteLogSegmentMetadata, epoch: int) -> int:
    later = [start for e, start in md.segment_leader_epochs.items() if e > epoch]
    return min(later) - 1 if later else md.end_offset


def content(cache: RemoteLogMetadataCache | None) -> dict:
    """A cache's exact content, for comparison: segments by id, and per epoch holding a segment its
    referenced map, its unreferenced set and its highest offset."""
    if cache is None:
        return {}
    segments, epochs = cache.snapshot()
    return {
        "segments": {md.remote_log_segment_id: md for md in segments},
        "epochs": {epoch: (list(zip(state.referenced_offsets, state.referenced, strict=True)),
                           set(state.unreferenced), state.highest_log_offset)
                   for epoch, state in epochs.items() if state.referenced or state.unreferenced},
    }


def assert_same_cache(full: TopicBasedRemoteLogMetadataManager, replayed: TopicBasedRemoteLogMetadataManager,
                      tps: list[TopicIdPartition], fully_compacted: bool = True) -> int:
    """The replay holds what the full history holds; returns how many epochs had a highest offset that
    only deleted segments explained (the one difference allowed: exactly the live segments' highest offset
    once fully compacted, between that and the full history's when part of the history is left)."""
    explained = 0
    for tp in tps:
        expected, got = content(full._store.get(tp)), content(replayed._store.get(tp))
        assert got.get("segments") == expected.get("segments"), tp
        assert full._store.partition_delete_metadata(tp) == replayed._store.partition_delete_metadata(tp)
        if not expected:
            continue
        assert set(got["epochs"]) == set(expected["epochs"]), tp
        for epoch, (referenced, unreferenced, highest) in expected["epochs"].items():
            got_referenced, got_unreferenced, got_highest = got["epochs"][epoch]
            assert (got_referenced, got_unreferenced) == (referenced, unreferenced), (tp, epoch)
            live = [epoch_end(md, epoch) for md in expected["segments"].values()
                    if md.state is S.COPY_SEGMENT_FINISHED and epoch in md.segment_leader_epochs]
            live_highest = max(live) if live else None
            if fully_compacted:
                assert got_highest == live_highest, (tp, epoch)
            elif got_highest != live_highest:
                assert got_highest is not None and highest is not None and got_highest <= highest, (tp, epoch)
                assert live_highest is None or live_highest < got_highest, (tp, epoch)
            if got_highest != highest:
                assert highest is not None and (got_highest is None or got_highest < highest)
                explained += 1
        # What a reader of the partition sees: every readable offset maps to the same segment.
        for epoch in expected["epochs"]:
            for offset in range(0, 3000, 7):
                assert replayed._store.get(tp).remote_log_segment_metadata(epoch, offset) == \
                    full._store.get(tp).remote_log_segment_metadata(epoch, offset)
    return explained


@pytest.fixture
def history(tmp_path: Path) -> Iterator[tuple[InMemoryMetadataTopic, TopicBasedRemoteLogMetadataManager,
                                              list[TopicIdPartition]]]:
    topic = InMemoryMetadataTopic()
    writer = new_manager(tmp_path / "writer", topic)
    tps = build_history(writer, seed=28)
    full = new_manager(tmp_path / "full", copy_of(topic))
    yield topic, full, tps
    writer.close()
    full.close()


def test_full_replay_rebuilds_the_writers_cache(tmp_path):
    """The baseline the compacted replays are compared with: the writer's cache equals a full replay's."""
    topic = InMemoryMetadataTopic()
    writer = new_manager(tmp_path / "writer", topic)
    tps = build_history(writer, seed=28)
    full = new_manager(tmp_path / "full", copy_of(topic))
    for tp in tps:
        assert content(full._store.get(tp)) == content(writer._store.get(tp))


@pytest.mark.parametrize("drop_tombstones", [True, False])
def test_compacted_replay_rebuilds_the_same_cache(tmp_path, history, drop_tombstones, caplog):
    topic, full, tps = history
    compacted = copy_of(topic)
    before = compacted.total_records()
    removed = compacted.compact(drop_tombstones=drop_tombstones)
    live_segments = sum(len(full._store.get(tp) or ()) for tp in tps)
    # What stays: a base record and at most one update per live segment, the live partition delete metadata
    # (and the tombstones while delete.retention.ms has not passed).
    tombstones = sum(1 for p in range(PARTITIONS) for _, k, v in compacted.read(p, 0) if k is not None and v is None)
    assert compacted.total_records() - tombstones <= 2 * live_segments + 1
    assert tombstones == 0 if drop_tombstones else tombstones > 0
    print(f"records {before} -> {compacted.total_records()} ({removed} removed), {live_segments} live segments")
    with caplog.at_level(logging.WARNING, "strata.tiered.metadata"):
        replayed = new_manager(tmp_path / "replayed", compacted)
    assert replayed.load_stats.records_replayed >= compacted.total_records()  # and position markers
    explained = assert_same_cache(full, replayed, tps)
    assert explained > 0  # the generator does produce the one allowed difference (divergent leaders)
    # Nothing was refused: no transition dropped, no tombstone for a live segment.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    replayed.close()


def test_a_cleaning_may_stop_at_any_offset(tmp_path, history, caplog):
    """The cleaner compacts up to where its dirty range ends (the active segment, min.compaction.lag.ms):
    replays of the topic cut there (with or without the tombstones below it) give the same cache. This is
    where the base-key-first tombstone order and the DELETE_SEGMENT_FINISHED bridge matter."""
    topic, full, tps = history
    ends = [topic.end_offset(p) for p in range(PARTITIONS)]
    rng = random.Random(7)
    for i in range(12):
        compacted = copy_of(topic)
        for p in range(PARTITIONS):
            # Two cleanings: an earlier one whose tombstones have expired since, then a recent one.
            first = rng.randint(0, ends[p])
            compacted.compact(p, below=first, drop_tombstones=True)
            compacted.compact(p, below=rng.randint(first, ends[p]), drop_tombstones=False)
        with caplog.at_level(logging.WARNING, "strata.tiered.metadata"):
            replayed = new_manager(tmp_path / f"replayed-{i}", compacted)
        assert_same_cache(full, replayed, tps, fully_compacted=False)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        replayed.close()


def test_base_records_stay_before_their_updates(history):
    """The cache applies an update only after its segment's base record: a base record is written once,
    so after any compaction the one kept sits below every update of its segment."""
    topic, _, _ = history
    compacted = copy_of(topic)
    compacted.compact(drop_tombstones=False)
    for p in range(PARTITIONS):
        base_at: dict[uuid.UUID, int] = {}
        for offset, key, value in compacted.read(p, 0):
            parsed = parse_key(key)
            if parsed.kind is KeyKind.SEGMENT and value is not None:
                base_at[parsed.segment_id] = offset
            elif parsed.kind is KeyKind.SEGMENT_UPDATE and value is not None:
                assert parsed.segment_id in base_at or (offset, "no base: DELETE_SEGMENT_FINISHED only")
                if parsed.segment_id in base_at:
                    assert base_at[parsed.segment_id] < offset


def test_deletion_writes_tombstones_base_key_first(tmp_path):
    topic = InMemoryMetadataTopic()
    rlmm = new_manager(tmp_path, topic)
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), 0, 99, 1, 0, 1, 10, {0: 0})
    rlmm.add_remote_log_segment_metadata(md)
    for state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, None,
                                                                               state, 0))
    records = list(topic.read(rlmm.metadata_partition(tp), 0))
    assert [(k, v is None) for _, k, v in records] == [
        (segment_key(md), False), *[(segment_update_key(md), False)] * 3,
        (segment_key(md), True), (segment_update_key(md), True)]
    assert rlmm.read_offset_for_partition(rlmm.metadata_partition(tp)) == records[-1][0]  # applied too
    compacted = copy_of(topic)
    compacted.compact()
    assert compacted.total_records() == 0
    rlmm.close()


def test_partition_delete_finished_tombstones_the_segments_it_still_held(tmp_path):
    """A DELETE_PARTITION_FINISHED with segments never deleted one by one: their records must not bring the
    partition back in a replay of the compacted topic."""
    topic = InMemoryMetadataTopic()
    rlmm = new_manager(tmp_path / "w", topic)
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    for i in range(3):
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), i * 10, i * 10 + 9, 1, 0, 1, 10, {0: i})
        rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, 2, None, S.COPY_SEGMENT_FINISHED, 0))
    for state in D:
        rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(tp, state, 3, 0))
    assert tp not in rlmm.known_partitions()
    compacted = copy_of(topic)
    compacted.compact()
    assert compacted.total_records() == 0
    replayed = new_manager(tmp_path / "r", compacted)
    assert tp not in replayed.known_partitions()
    rlmm.close()
    replayed.close()


# -- tombstones and partial histories, one by one -----------------------------------------------------------


@pytest.fixture
def rlmm(tmp_path: Path) -> Iterator[TopicBasedRemoteLogMetadataManager]:
    manager = new_manager(tmp_path, InMemoryMetadataTopic())
    yield manager
    manager.close()


def _segment(tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), 0, 99, 1, 0, 1, 10, {0: 0})


def test_tombstone_of_an_unknown_or_deleted_segment_is_a_no_op(rlmm, caplog):
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    topic = rlmm._topic
    partition = rlmm.metadata_partition(tp)
    never_seen = _segment(tp)
    topic.append(partition, None, segment_key(never_seen))
    topic.append(partition, None, segment_update_key(never_seen))
    topic.append(partition, None, b"not:a:key")  # logged and skipped
    with caplog.at_level(logging.WARNING):
        rlmm.sync(tp)
    assert rlmm.read_offset_for_partition(partition) == 2
    assert [r.message for r in caplog.records if r.levelno >= logging.WARNING] == \
        [m for m in [r.message for r in caplog.records] if "Skipping the tombstone" in m]
    assert tp not in rlmm.known_partitions()


def test_tombstone_of_a_live_segment_keeps_it(rlmm, caplog):
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    md = _segment(tp)
    rlmm.add_remote_log_segment_metadata(md)
    rlmm._topic.append(rlmm.metadata_partition(tp), None, segment_key(md))
    with caplog.at_level(logging.WARNING):
        rlmm.sync(tp)
    assert list(rlmm.list_remote_log_segments(tp)) == [md]
    assert "Keeping" in caplog.text and "COPY_SEGMENT_STARTED" in caplog.text


@pytest.mark.parametrize("state", [S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED])
def test_delete_finished_after_its_started_was_compacted_away(rlmm, caplog, state):
    """The compacted topic holds the base record and DELETE_SEGMENT_FINISHED (the cleaning stopped before the
    tombstones): the segment goes, as it did in the full history."""
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    md = _segment(tp)
    rlmm.add_remote_log_segment_metadata(md)
    if state is S.COPY_SEGMENT_FINISHED:
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, None,
                                                                               state, 0))
    done = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 3, None, S.DELETE_SEGMENT_FINISHED, 0)
    rlmm._topic.append(rlmm.metadata_partition(tp), serialize(done), segment_update_key(md))
    with caplog.at_level(logging.WARNING):
        rlmm.sync(tp)
    assert list(rlmm.list_remote_log_segments(tp)) == []
    assert not caplog.records


# -- a snapshot older than the cleaning -----------------------------------------------------------------------


def test_a_snapshot_older_than_the_cleaning_is_not_resumed_from(tmp_path, caplog):
    """The snapshot is a position in the topic. If the cleaner removed records after it - a segment's
    DELETE_SEGMENT_FINISHED, then its tombstones once delete.retention.ms passed - resuming would keep that
    segment for ever: the gap proves it, and the metadata partition is replayed in full instead."""
    topic = InMemoryMetadataTopic()
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(tmp_path / "log"), "broker.id": 0, "remote.log.metadata.topic.num.partitions": 1})
    rlmm.set_metadata_topic(topic)
    rlmm.initialize()
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    rlmm.on_partition_leadership_changes({tp}, set())
    part = Partition(tp)
    writer = Writer(rlmm, random.Random(1))
    doomed = [writer.upload(part, i * 10, i * 10 + 9, {0: i * 10}) for i in range(4)]
    assert rlmm.snapshot_now() > 0
    for md in doomed[:3]:
        writer.delete(part, md)
    writer.upload(part, 40, 49, {0: 40})
    expected = content(rlmm._store.get(tp))
    crash_offset = topic.end_offset(0)
    rlmm._closing = True  # a crash: no final snapshot
    rlmm._snapshot_wakeup.set()
    topic.compact(0, below=crash_offset - 2)  # the last upload's two records are in the active segment

    restarted = TopicBasedRemoteLogMetadataManager()
    restarted.configure({"log.dir": str(tmp_path / "log"), "broker.id": 0,
                         "remote.log.metadata.topic.num.partitions": 1})
    restarted.set_metadata_topic(topic)
    with caplog.at_level(logging.WARNING):
        restarted.initialize()
    assert restarted.load_stats.snapshot_loaded and restarted.load_stats.full_replay_partitions == [0]
    assert "were compacted away since" in caplog.text
    assert content(restarted._store.get(tp))["segments"] == expected["segments"]
    restarted.close()


def test_a_snapshot_is_resumed_from_when_nothing_after_it_was_cleaned(tmp_path):
    topic = InMemoryMetadataTopic()
    configs = {"log.dir": str(tmp_path / "log"), "broker.id": 0, "remote.log.metadata.topic.num.partitions": 1}
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure(configs)
    rlmm.set_metadata_topic(topic)
    rlmm.initialize()
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    part = Partition(tp)
    writer = Writer(rlmm, random.Random(1))
    segments = [writer.upload(part, i * 10, i * 10 + 9, {0: i * 10}) for i in range(4)]
    writer.delete(part, segments[0])
    assert rlmm.snapshot_now() > 0
    snapshot_at = topic.end_offset(0)
    writer.delete(part, segments[1])
    expected = content(rlmm._store.get(tp))
    rlmm._closing = True
    topic.compact(0, below=snapshot_at)  # cleaned, but only below the snapshot's position
    restarted = TopicBasedRemoteLogMetadataManager()
    restarted.configure(configs)
    restarted.set_metadata_topic(topic)
    restarted.initialize()
    assert restarted.load_stats.full_replay_partitions == []
    assert restarted.load_stats.records_replayed == 4  # DELETE_STARTED, DELETE_FINISHED, two tombstones
    assert content(restarted._store.get(tp)) == expected
    restarted.close()


def test_the_clients_replay_reads_a_compacted_topic_as_the_broker_does(history):
    """``strata.client.remote_metadata`` (the Spark driver's view of the remote tier) replays the same records:
    cut anywhere, its segments are the broker's."""
    from strata.client.remote_metadata import RemoteLogMetadataReader

    topic, full, tps = history
    rng = random.Random(11)
    for _ in range(10):
        compacted = copy_of(topic)
        for p in range(PARTITIONS):
            compacted.compact(p, below=rng.randint(0, topic.end_offset(p)), drop_tombstones=False)
        reader = RemoteLogMetadataReader(cluster=None)  # type: ignore[arg-type]  # only replayed into here
        for p in range(PARTITIONS):
            for offset, _key, value in compacted.read(p, 0):
                reader._apply(p, offset, value)
        for tp in tps:
            assert content(reader.store.get(tp)).get("segments") == content(full._store.get(tp)).get("segments")
