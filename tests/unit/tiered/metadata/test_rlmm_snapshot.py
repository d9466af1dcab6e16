"""The RLMM snapshot file (snapshot.py): version 2 (columns) round trips exactly, version 1 files are
migrated, an unknown version or any corruption means a full replay, never a crash or a wrong cache."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.tiered.metadata.test_rlmm_segment_store import observe
from tests.unit.tiered.metadata.test_rlmm_topic_based import (
    ALL,
    TP0,
    TP1,
    TP2,
    Managers,
    build_history,
    crash,
    observable,
)

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
from strata.tiered.metadata.snapshot import (
    VERSION,
    encode_snapshot,
    encode_snapshot_v1,
    read_snapshot,
    write_snapshot,
)

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID(int=7), "topic", 1)


@pytest.fixture
def managers(tmp_path: Path) -> Iterator[Managers]:
    m = Managers(tmp_path)
    yield m
    for rlmm in m.opened:
        crash(rlmm)


def cache_with_everything() -> RemoteLogMetadataCache:
    """Finished, superseded, started, deleting and deleted segments; several epochs; custom metadata; an orphan."""
    cache = RemoteLogMetadataCache()
    cache.mark_initialized()

    def add(start: int, end: int, epochs: dict[int, int], state: S, custom: bytes | None = None) -> None:
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, uuid.uuid4()), start, end, start, 1, 2, end - start,
                                      epochs, custom_metadata=custom, txn_idx_empty=start % 2 == 0)
        cache.add_copy_in_progress_segment(md)
        for s in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            if s > state:
                break
            cache.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, 5, custom, s, 2))

    add(0, 99, {0: 0, 1: 50}, S.COPY_SEGMENT_FINISHED)
    add(100, 199, {1: 100}, S.COPY_SEGMENT_FINISHED, b"\x01\x02\x03")
    add(50, 250, {2: 50}, S.COPY_SEGMENT_FINISHED)  # supersedes nothing (another epoch)
    add(100, 150, {1: 100}, S.COPY_SEGMENT_FINISHED)  # replaces the entry at 100
    add(200, 299, {1: 200, 3: 260}, S.DELETE_SEGMENT_STARTED, b"")
    add(300, 399, {3: 300}, S.DELETE_SEGMENT_FINISHED)
    add(400, 499, {3: 400}, S.COPY_SEGMENT_STARTED)
    # An orphan: a repeated COPY_SEGMENT_STARTED moved the segment to other epochs, then it was deleted.
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, uuid.uuid4()), 500, 599, 0, 0, 0, 1, {4: 500})
    cache.add_copy_in_progress_segment(md)
    cache.add_copy_in_progress_segment(RemoteLogSegmentMetadata(md.remote_log_segment_id, 500, 599, 0, 0, 0, 1,
                                                                {5: 500}))
    for s in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        cache.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 5, None,
                                                                                s, 2))
    return cache


def write(path: Path, caches: dict[TopicIdPartition, RemoteLogMetadataCache], offsets: list[int] | None = None,
          **kwargs) -> bytes:
    chunks = encode_snapshot(offsets or [3, -1], kwargs.get("stopped", []), kwargs.get("delete_metadata", []),
                             [(tp, cache.export_columns()) for tp, cache in caches.items()])
    write_snapshot(path, chunks)
    return path.read_bytes()


def test_version_2_round_trip_is_exact(tmp_path):
    cache = cache_with_everything()
    other = TopicIdPartition(uuid.uuid4(), "other", 0)
    stopped = [TopicIdPartition(uuid.uuid4(), "stopped", 2)]
    marked = RemotePartitionDeleteMetadata(other, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 9, 1)
    data = write(tmp_path / "snap", {TP: cache, other: RemoteLogMetadataCache()}, stopped=stopped,
                 delete_metadata=[marked])
    assert data[:6] == b"SRLM\x00\x02" and VERSION == 2
    snap = read_snapshot(tmp_path / "snap", 2)
    assert snap.offsets == [3, -1] and snap.stopped == stopped and snap.delete_metadata == [marked]
    assert list(snap.caches) == [TP, other] and len(snap.caches[other]) == 0
    restored = snap.caches[TP]
    assert not restored.is_initialized()
    restored.mark_initialized()
    assert observe(restored) == observe(cache)
    with pytest.raises(Exception, match="No remote log segment metadata found"):
        list(restored.list_remote_log_segments(4))  # the orphan answers as in Kafka


def test_arrays_are_little_endian_and_8_byte_aligned(tmp_path):
    cache = RemoteLogMetadataCache()
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, uuid.uuid4()), 0x0102030405060708, 0x0102030405060709,
                                  0, 0, 0, 1, {0: 0x0102030405060708})
    cache.add_copy_in_progress_segment(md)
    data = write(tmp_path / "snap", {TP: cache}, offsets=[0])
    (head_len,) = struct.unpack_from(">I", data, 10)
    first = (14 + head_len + 7) & ~7
    assert data[first:first + 8] == (0x0102030405060708).to_bytes(8, "little")
    assert len(data) % 8 == 0


def test_version_1_files_are_migrated(managers):
    rlmm = managers.new()
    build_history(rlmm)
    before = observable(rlmm, ALL)
    with rlmm._lock:  # noqa: SLF001 - what the version-1 writer took under the apply lock
        caches = [(tp, cache.snapshot()) for tp, cache in rlmm._store.items()]  # noqa: SLF001
        v1 = encode_snapshot_v1(list(rlmm._last_applied), [], rlmm._store.delete_metadata_items(), caches)  # noqa: SLF001
    rlmm.close()
    managers.snapshot.write_bytes(v1)
    assert v1[4:6] == b"\x00\x01"
    restarted = managers.new()
    assert restarted.load_stats.snapshot_loaded and restarted.load_stats.records_replayed == 0
    assert observable(restarted, ALL) == before
    restarted.snapshot_now()
    assert managers.snapshot.read_bytes()[4:6] == b"\x00\x02"  # rewritten as version 2
    again = managers.new()
    assert again.load_stats.snapshot_loaded and observable(again, ALL) == before


def test_an_unknown_version_means_a_full_replay(managers):
    rlmm = managers.new()
    build_history(rlmm)
    before = observable(rlmm, ALL)
    rlmm.close()
    data = bytearray(managers.snapshot.read_bytes())
    data[4:6] = b"\x00\x03"
    managers.snapshot.write_bytes(bytes(data))
    restarted = managers.new()
    assert restarted.load_stats.snapshot_error == "unsupported snapshot version 3"
    assert restarted.load_stats.records_replayed == managers.topic.total_records()
    assert observable(restarted, ALL) == before


def test_restart_from_version_2_replays_only_the_tail(managers):
    rlmm = managers.new()
    build_history(rlmm)
    rlmm.snapshot_now()
    rlmm.close()
    restarted = managers.new()
    stats = restarted.load_stats
    assert stats.snapshot_loaded and stats.records_replayed == 0 and stats.snapshot_segments == 9
    assert observable(restarted, ALL) == observable(managers.new(remote_log_metadata_snapshot_enable=False), ALL)
    assert {TP0, TP1, TP2} <= restarted.known_partitions()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_is_a_value_error(tmp_path, data):
    path = tmp_path / "snap"
    original = write(path, {TP: cache_with_everything()})
    damaged = bytearray(original)
    how = data.draw(st.sampled_from(["truncate", "flip", "extend"]))
    if how == "truncate":
        del damaged[data.draw(st.integers(0, len(damaged) - 1)):]
    elif how == "flip":
        damaged[data.draw(st.integers(0, len(damaged) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    else:
        damaged += bytes(data.draw(st.integers(1, 16)))
    path.write_bytes(bytes(damaged))
    with pytest.raises(ValueError):
        read_snapshot(path, 2)


def _recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 6, crc32c(bytes(data[10:])))
    return bytes(data)


def test_a_huge_count_is_refused_before_allocating(tmp_path):
    path = tmp_path / "snap"
    data = bytearray(write(path, {TP: cache_with_everything()}))
    (head_len,) = struct.unpack_from(">I", data, 10)
    counts_at = 14 + head_len - 32  # the last partition's eight counts end the head
    struct.pack_into(">I", data, counts_at, 0x7FFFFFFF)  # rows
    path.write_bytes(_recrc(data))
    with pytest.raises(ValueError, match="the head describes"):
        read_snapshot(path, 2)


def test_inconsistent_columns_with_a_valid_crc_are_refused(tmp_path):
    path = tmp_path / "snap"
    cache = cache_with_everything()
    columns = cache.export_columns()
    columns.ref_rows[:] = 1000  # past the rows
    write_snapshot(path, encode_snapshot([0, 0], [], [], [(TP, columns)]))
    with pytest.raises(ValueError, match="out of range"):
        read_snapshot(path, 2)
    columns = cache.export_columns()
    columns.columns["start"][0] = columns.columns["end"][0] + 1
    write_snapshot(path, encode_snapshot([0, 0], [], [], [(TP, columns)]))
    with pytest.raises(ValueError, match="out of order"):
        read_snapshot(path, 2)


def test_empty_caches_and_no_partitions(tmp_path):
    path = tmp_path / "snap"
    write_snapshot(path, encode_snapshot([-1] * 3, [], [], []))
    snap = read_snapshot(path, 3)
    assert snap.caches == {} and snap.offsets == [-1] * 3
    write(path, {TP: RemoteLogMetadataCache()}, offsets=[5])
    assert len(read_snapshot(path, 1).caches[TP]) == 0
