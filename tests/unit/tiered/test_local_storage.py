"""LocalTieredStorage beyond the shared contract: event history (memory and JSONL), atomic writes,
the fault file, and Kafka's test-only switches."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from tests.support.segments import MakeSegment

from strata.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RetriableRemoteStorageError,
    uuid_to_str,
)
from strata.tiered.storage.local import EVENTS_FILE, EventType, LocalTieredStorage, read_events


def local(root: Path, **configs: object) -> LocalTieredStorage:
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(root), "broker.id": 3, **configs})
    return rsm


def drain(stream) -> bytes:
    with stream:
        return stream.read()


def test_every_operation_is_recorded_in_memory_and_in_the_jsonl_file(tmp_path: Path,
                                                                        make_segment: MakeSegment) -> None:
    root = tmp_path / "remote"
    rsm = local(root)
    seg = make_segment(txn=True)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    drain(rsm.fetch_log_segment(seg.metadata, 0))
    drain(rsm.fetch_log_segment(seg.metadata, 100, 199))
    for index_type in IndexType:
        drain(rsm.fetch_index(seg.metadata, index_type))
    rsm.delete_log_segment_data(seg.metadata)
    rsm.delete_partition(seg.tp)

    want = {EventType.COPY_SEGMENT: 1, EventType.FETCH_SEGMENT: 2, EventType.FETCH_OFFSET_INDEX: 1,
            EventType.FETCH_TIME_INDEX: 1, EventType.FETCH_TRANSACTION_INDEX: 1,
            EventType.FETCH_LEADER_EPOCH_CHECKPOINT: 1, EventType.FETCH_PRODUCER_SNAPSHOT: 1,
            EventType.DELETE_SEGMENT: 1, EventType.DELETE_PARTITION: 1}
    assert Counter(e.type for e in rsm.events()) == want
    assert rsm.count(EventType.FETCH_SEGMENT, seg.tp) == 2
    assert [e.counter for e in rsm.events()] == list(range(1, 11))
    fetch = rsm.events(EventType.FETCH_SEGMENT)[1]
    assert (fetch.start_position, fetch.end_position, fetch.error) == (100, 199, None)

    lines = (root / EVENTS_FILE).read_text().splitlines()
    assert len(lines) == 10  # one line per event, flushed as it happens
    on_disk = read_events(root)
    assert Counter(e["type"] for e in on_disk) == {t.value: n for t, n in want.items()}
    copy = read_events(root, "COPY_SEGMENT")[0]
    assert copy == json.loads(lines[0])
    assert copy["broker_id"] == 3 and copy["topic"] == seg.tp.topic and copy["partition"] == seg.tp.partition
    assert copy["topic_id"] == uuid_to_str(seg.tp.topic_id)
    assert copy["segment_id"] == uuid_to_str(seg.metadata.remote_log_segment_id.id)
    assert (copy["start_offset"], copy["end_offset"]) == (seg.metadata.start_offset, seg.metadata.end_offset)
    assert copy["error"] is None and copy["timestamp_ms"] > 0
    assert read_events(root, EventType.DELETE_PARTITION)[0]["segment_id"] is None
    rsm.close()


def test_failed_operations_are_recorded_with_their_error(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = local(tmp_path / "remote")
    seg = make_segment(batches=2)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(seg.metadata, 0)
    (event,) = read_events(tmp_path / "remote", "FETCH_SEGMENT")
    assert "FileNotFoundError" in event["error"]
    rsm.close()


def test_brokers_sharing_a_directory_share_one_event_file(tmp_path: Path, make_segment: MakeSegment) -> None:
    root = tmp_path / "remote"
    brokers = [LocalTieredStorage() for _ in range(3)]
    for broker_id, rsm in enumerate(brokers):
        rsm.configure({"dir": str(root), "broker.id": str(broker_id)})
    segments = [make_segment(batches=2, partition=p) for p in range(3)]

    def work(i: int) -> None:
        for _ in range(20):
            brokers[i].copy_log_segment_data(segments[i].metadata, segments[i].data)
            drain(brokers[i].fetch_index(segments[i].metadata, IndexType.OFFSET))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = read_events(root)
    assert len(events) == 3 * 20 * 2  # no torn or interleaved lines
    assert Counter(e["broker_id"] for e in events) == {0: 40, 1: 40, 2: 40}
    assert all(len(b.events()) == 40 for b in brokers)  # each instance keeps only its own history
    for rsm in brokers:
        rsm.close()


def test_event_file_can_be_turned_off(tmp_path: Path, make_segment: MakeSegment) -> None:
    root = tmp_path / "remote"
    rsm = local(root, **{"events.log.enable": "false"})
    seg = make_segment(batches=2)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.count(EventType.COPY_SEGMENT) == 1
    assert not (root / EVENTS_FILE).exists() and read_events(root) == []


def test_writes_are_atomic_and_leave_no_temp_files(tmp_path: Path, make_segment: MakeSegment) -> None:
    root = tmp_path / "remote"
    rsm = local(root)
    seg = make_segment(txn=True)
    for _ in range(3):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    files = sorted(p.name for p in root.rglob("*") if p.is_file() and p.name != EVENTS_FILE)
    assert len(files) == 6 and not [f for f in files if ".tmp-" in f]
    stored = rsm.segment_files(seg.metadata)
    assert stored["log"].read_bytes() == seg.log_bytes()
    assert stored["leader_epoch_checkpoint"].read_bytes() == seg.data.leader_epoch_index


def test_a_failed_copy_leaves_no_partial_fileset(tmp_path: Path, make_segment: MakeSegment) -> None:
    root = tmp_path / "remote"
    rsm = local(root)
    seg = make_segment()
    broken = LogSegmentData(seg.data.log_segment, seg.data.offset_index, tmp_path / "no-such.timeindex",
                            None, seg.data.producer_snapshot_index, seg.data.leader_epoch_index)
    with pytest.raises(RemoteStorageError) as info:
        rsm.copy_log_segment_data(seg.metadata, broken)
    assert not isinstance(info.value, RemoteResourceNotFoundError)  # a local input is missing, not a remote object
    assert rsm.segment_files(seg.metadata) == {}
    assert not [p for p in root.rglob("*") if ".tmp-" in p.name]
    (event,) = rsm.events(EventType.COPY_SEGMENT)
    assert event.error is not None


def test_fault_file_makes_every_operation_retriable_until_removed(tmp_path: Path, make_segment: MakeSegment) -> None:
    fault = tmp_path / "store-down"
    rsm = local(tmp_path / "remote", **{"fault.file": str(fault)})
    seg = make_segment(batches=3)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    events_before = len(read_events(tmp_path / "remote"))

    fault.touch()
    operations = [lambda: rsm.copy_log_segment_data(seg.metadata, seg.data),
                  lambda: rsm.fetch_log_segment(seg.metadata, 0),
                  lambda: rsm.delete_log_segment_data(seg.metadata),
                  lambda: rsm.delete_partition(seg.tp)]
    operations += [lambda t=t: rsm.fetch_index(seg.metadata, t) for t in IndexType]
    for op in operations:
        with pytest.raises(RetriableRemoteStorageError, match="fault file present"):
            op()
    assert len(read_events(tmp_path / "remote")) == events_before  # refused calls never reached the store

    fault.unlink()
    assert drain(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log_bytes()


def test_delete_enable_false_keeps_the_files(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = local(tmp_path / "remote", **{"delete.enable": "false"})
    seg = make_segment(batches=2)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.delete_log_segment_data(seg.metadata)
    assert rsm.count(EventType.DELETE_SEGMENT) == 1
    assert drain(rsm.fetch_log_segment(seg.metadata, 0)) == seg.log_bytes()


def test_walk_segments_lists_what_was_offloaded(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = local(tmp_path / "remote")
    segs = [make_segment(batches=2, partition=p) for p in range(2)]
    for s in segs:
        rsm.copy_log_segment_data(s.metadata, s.data)
    assert sorted(p.read_bytes() for p in rsm.walk_segments()) == sorted(s.log_bytes() for s in segs)


def test_config_errors_name_the_key(tmp_path: Path, make_segment: MakeSegment) -> None:
    with pytest.raises(ValueError, match="'dir'"):
        LocalTieredStorage().configure({"broker.id": 0})
    with pytest.raises(ValueError, match="'events.log.enable'"):
        LocalTieredStorage().configure({"dir": str(tmp_path), "events.log.enable": "maybe"})
    with pytest.raises(RemoteStorageError, match="not configured"):
        LocalTieredStorage().fetch_index(make_segment(batches=1).metadata, IndexType.OFFSET)


def test_a_copy_writes_all_temp_files_then_fsyncs_then_renames_then_one_directory_fsync(
        tmp_path: Path, make_segment: MakeSegment, monkeypatch: pytest.MonkeyPatch) -> None:
    """The small index files do not pay a write-fsync-rename each: every temp file is written (smallest
    first) and fsynced (largest first) before the first rename, and the directory is fsynced once, last."""
    import strata.tiered.storage.local as local_module

    rsm = local(tmp_path / "remote")
    seg = make_segment(txn=True)
    rsm.copy_log_segment_data(seg.with_new_id().metadata, seg.data)  # the partition directory exists now
    steps: list[tuple[str, str]] = []
    write, fsync_file, fsync_path, replace = (local_module._write_source, local_module._fsync_file,
                                              local_module.fsync_path, local_module.os.replace)

    def written(fd: int, target: Path, source: Path | bytes) -> None:
        steps.append(("write", target.name))
        write(fd, target, source)

    def fsynced(fd: int, target: Path) -> None:
        steps.append(("fsync", target.name))
        fsync_file(fd, target)

    def dir_fsynced(path: Path) -> None:
        steps.append(("fsync dir", Path(path).name))
        fsync_path(path)

    def rename(src: Path, dst: Path) -> None:
        assert ".tmp-" in Path(src).name
        steps.append(("rename", Path(dst).name))
        replace(src, dst)

    monkeypatch.setattr(local_module, "_write_source", written)
    monkeypatch.setattr(local_module, "_fsync_file", fsynced)
    monkeypatch.setattr(local_module, "fsync_path", dir_fsynced)
    monkeypatch.setattr(local_module.os, "replace", rename)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    kinds = [kind for kind, _ in steps]
    assert kinds == ["write"] * 6 + ["fsync"] * 6 + ["rename"] * 6 + ["fsync dir"]
    assert steps[-1] == ("fsync dir", str(seg.tp.partition))
    files = rsm.segment_files(seg.metadata)
    sizes = {name: files[name.rsplit(".", 1)[1]].stat().st_size for _, name in steps[:6]}
    writes = [name for kind, name in steps if kind == "write"]
    assert [sizes[n] for n in writes] == sorted(sizes[n] for n in writes)  # smallest first
    fsyncs = [name for kind, name in steps if kind == "fsync"]
    assert fsyncs == writes[::-1] and fsyncs[0].endswith(".log")  # largest first
    assert sorted(files) == sorted(["log", "index", "timeindex", "snapshot", "txnindex", "leader_epoch_checkpoint"])
    assert files["log"].read_bytes() == seg.log_bytes()


def test_a_copy_starts_the_writeback_of_everything_it_writes(
        tmp_path: Path, make_segment: MakeSegment, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every byte of every file is handed to ``sync_file_range`` as it is written (the .log in
    WRITEBACK_CHUNK pieces); that only starts I/O early, the fsyncs still follow."""
    import strata.tiered.storage.local as local_module

    monkeypatch.setattr(local_module, "WRITEBACK_CHUNK", 64 * 1024)
    started: dict[int, list[tuple[int, int]]] = {}
    start = local_module._start_writeback

    def record(fd: int, offset: int, nbytes: int) -> None:
        started.setdefault(fd, []).append((offset, nbytes))
        start(fd, offset, nbytes)

    monkeypatch.setattr(local_module, "_start_writeback", record)
    rsm = local(tmp_path / "remote")
    seg = make_segment(batches=40, value_size=2000)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    files = rsm.segment_files(seg.metadata)
    sizes = sorted(p.stat().st_size for p in files.values())
    covered = sorted(sum(n for _, n in ranges) for ranges in started.values())
    assert covered == sizes
    log_ranges = max(started.values(), key=lambda r: sum(n for _, n in r))
    assert len(log_ranges) > 1 and all(n <= 64 * 1024 for _, n in log_ranges)
    assert [o for o, _ in log_ranges] == sorted(o for o, _ in log_ranges)


def test_a_copy_without_file_to_file_sendfile_copies_by_reads(
        tmp_path: Path, make_segment: MakeSegment, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import strata.tiered.storage.local as local_module

    def no_sendfile(*args: object) -> int:
        raise OSError(errno.EINVAL, "file-to-file sendfile unsupported")

    monkeypatch.setattr(local_module.os, "sendfile", no_sendfile)
    rsm = local(tmp_path / "remote")
    seg = make_segment()
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.segment_files(seg.metadata)["log"].read_bytes() == seg.log_bytes()
    assert rsm.segment_files(seg.metadata)["index"].read_bytes() == seg.data.offset_index.read_bytes()


def test_the_first_copy_into_a_partition_makes_its_new_directories_durable(
        tmp_path: Path, make_segment: MakeSegment, monkeypatch: pytest.MonkeyPatch) -> None:
    """The topic and partition directories the copy creates are fsynced into their parents: without
    that a crash could lose the directory, and every object renamed into it."""
    import strata.tiered.storage.local as local_module

    rsm = local(tmp_path / "remote")
    seg = make_segment()
    fsynced: list[Path] = []
    fsync_path = local_module.fsync_path

    def record(path: Path) -> None:
        fsynced.append(Path(path))
        fsync_path(path)

    monkeypatch.setattr(local_module, "fsync_path", record)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    partition_dir = rsm.partition_dir(seg.tp)
    assert fsynced == [rsm.storage_dir, partition_dir.parent, partition_dir]
    fsynced.clear()
    rsm.copy_log_segment_data(seg.with_new_id().metadata, seg.data)
    assert fsynced == [partition_dir]  # existing directories: the one fsync of the renames


def test_a_ranged_fetch_reads_straight_into_the_callers_buffer(tmp_path: Path, make_segment: MakeSegment) -> None:
    rsm = local(tmp_path / "remote")
    seg = make_segment()
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    data = seg.log_bytes()
    buf = bytearray(5000)
    with rsm.fetch_log_segment(seg.metadata, 10, 4009) as stream:
        assert stream.readinto(memoryview(buf)[100:]) == 4000  # one read, bounded by the range
        assert stream.readinto(buf) == 0 and stream.read(10) == b""
    assert buf[100:4100] == data[10:4010] and buf[:100] == bytes(100)
    with rsm.fetch_log_segment(seg.metadata, 10, 4009) as stream:
        assert stream.read(3000) == data[10:3010] and stream.read(3000) == data[3010:4010]


def test_a_ranged_fetch_hands_the_reader_a_buffer_of_its_own(tmp_path: Path, make_segment: MakeSegment) -> None:
    """``read_view``: the remote reader's window straight from the file (no zero-filled buffer first),
    bounded by the range, fewer bytes only at the object's end."""
    from strata.tiered.segment_bytes import fetch_remote_segment_bytes

    rsm = local(tmp_path / "remote")
    seg = make_segment()
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    data = seg.log_bytes()
    with rsm.fetch_log_segment(seg.metadata, 10, 4009) as stream:
        view = stream.read_view(10_000)
        assert bytes(view) == data[10:4010] and bytes(stream.read_view(10)) == b""
    assert bytes(fetch_remote_segment_bytes(rsm, seg.metadata, 7, 907)) == data[7:907]
    tail = fetch_remote_segment_bytes(rsm, seg.metadata, len(data) - 5, len(data) + 100)
    assert bytes(tail) == data[-5:] and tail.readonly


def test_fetch_delay_simulates_store_latency(tmp_path: Path, make_segment: MakeSegment) -> None:
    import time

    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "remote"), "fetch.delay.ms": "30"})
    seg = make_segment()
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    started = time.monotonic()
    with rsm.fetch_log_segment(seg.metadata, 0, 99) as stream:
        assert stream.read() == seg.log_bytes()[:100]
    assert time.monotonic() - started >= 0.03
    with pytest.raises(ValueError, match="fetch.delay.ms"):
        LocalTieredStorage().configure({"dir": str(tmp_path / "other"), "fetch.delay.ms": "-1"})
    rsm.close()
