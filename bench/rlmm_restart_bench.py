"""RLMM restart time: Kafka's full replay of ``__remote_log_metadata`` against Strata's snapshot + tail.

    .venv/bin/python bench/rlmm_restart_bench.py [--quick] [--reps N] [--segments N] [--deleted-segments N]
                                                 [--scale N,N] [--old-max N] [--no-scale | --scale-only]
                                                 [--json PATH]

The metadata topic (in memory, so only the RLMM's own work is timed) holds ``segments`` uploads
spread round-robin over ``user_partitions`` user partitions, each upload being the two events the
RemoteLogManager writes: COPY_SEGMENT_STARTED (a RemoteLogSegmentMetadataRecord) then
COPY_SEGMENT_FINISHED (an update record); every 10th segment spans two leader epochs.

* baseline, "full replay": what Kafka's TBRLMM does at every broker start - no snapshot, every record
  of every metadata partition decoded and applied;
* subject, "snapshot + tail": the snapshot written when all but the last ``tail_records`` records
  were applied, then the tail replayed.

``--deleted-segments N`` adds N segments that went through their whole life (copy started/finished,
delete started/finished: four records each) before the live ones, as retention produces over time:
the topic (retention -1) keeps all their events, the snapshot none of them.

Timed: ``configure`` + ``set_metadata_topic`` + ``initialize()`` of a fresh manager. The ratio (the
house style: subject rate / same-run baseline rate, MB/s over the topic's value bytes) is the restart
speed-up. Both restarts are checked to rebuild identical caches. Untimed: building the topic, and the
snapshot the subject's ``close()`` writes.

Scale (issue 28, KIP-1266: the remote log metadata's memory and restart), at 1M and 10M segments
(``--quick``: 100k) over 1000 user partitions, same shape (every 10th segment spans two epochs):

* the caches are built in bulk as columns (events through the public API would take minutes at 10M;
  the bulk path is checked, at 2000 segments, to build exactly what the events build) and written as
  a snapshot file by the real encoder; the metadata topic is empty, so a restart is the snapshot load;
* restart: ``initialize()`` of a fresh manager over that file, snapshot load to ready (median of reps);
* memory: in a fresh process (after a warm-up load, so imports are not counted), the RSS growth of
  the load per segment - the file's pages are mapped, so that is RssFile - and the anonymous memory per
  segment once the caches are detached from the file (what they hold after the next snapshot);
* lookups: ``remote_log_segment_metadata(tp, epoch, offset)`` through the manager at random offsets,
  each timed alone: p50, p99, max;
* the old representation, up to ``--old-max`` segments (1M; 10M would need ~7 GB): the same caches as
  a version-1 file (an object per segment), its restart timed as the old cache did it (decode to
  objects, then the dict and the per-epoch states), and its memory measured the same way. Ratios:
  segments/s of the new restart over the old one at the same count (the "MB/s" column is thousands
  of segments/s there). The issue's acceptance bounds are printed as PASS/FAIL lines.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from crc32c import crc32c

from report import Result, environment, format_table, run_and_save, summarize
from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from strata.tiered.metadata.cache import RemoteLogLeaderEpochState, RemoteLogMetadataCache
from strata.tiered.metadata.memory import InMemoryMetadataTopic
from strata.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from strata.tiered.metadata.segments import FLAG_EPOCHS, FLAG_TXN_IDX_EMPTY, CacheColumns
from strata.tiered.metadata.serde import serialize
from strata.tiered.metadata.snapshot import decode_v1_objects, encode_snapshot, encode_snapshot_v1, write_snapshot
from strata.tiered.metadata.topic_based import SNAPSHOT_FILE_NAME, TopicBasedRemoteLogMetadataManager

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"


@dataclass(frozen=True)
class BenchConfig:
    segments: int = 100_000
    deleted_segments: int = 0
    user_partitions: int = 1000
    metadata_partitions: int = 50
    tail_records: int = 1000
    segment_bytes: int = 128 * 1024 * 1024
    reps: int = 5
    target: float = 3.0  # the snapshot restart must be at least this many times faster (measured ~3.6x)
    seed: int = 405

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(segments=20_000, user_partitions=200, reps=3)


def build_records(cfg: BenchConfig) -> list[tuple[int, bytes]]:
    """(metadata partition, value) of every event, in the order the RLM would write them."""
    rng = random.Random(cfg.seed)
    partitioner = RemoteLogMetadataTopicPartitioner(cfg.metadata_partitions)
    topic_ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(max(1, cfg.user_partitions // 10))]
    tps = [TopicIdPartition(topic_ids[i % len(topic_ids)], f"topic-{i % len(topic_ids)}", i // len(topic_ids))
           for i in range(cfg.user_partitions)]
    next_offset = dict.fromkeys(tps, 0)
    now = 1_700_000_000_000
    records = []
    deleted = cfg.deleted_segments
    for i in range(deleted + cfg.segments):
        tp = tps[i % len(tps)]
        start = next_offset[tp]
        end = start + 9_999
        next_offset[tp] = end + 1
        epochs = {0: start} if i % 10 else {0: start, 1: start + 5_000}
        segment_id = RemoteLogSegmentId(tp, uuid.UUID(int=rng.getrandbits(128)))
        md = RemoteLogSegmentMetadata(segment_id, start, end, now + i, 0, now + i, cfg.segment_bytes, epochs,
                                      txn_idx_empty=True)
        update = RemoteLogSegmentMetadataUpdate(segment_id, now + i + 1, None,
                                                RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0)
        partition = partitioner.metadata_partition(tp)
        records.append((partition, serialize(md)))
        records.append((partition, serialize(update)))
        if i < deleted:
            for state in (RemoteLogSegmentState.DELETE_SEGMENT_STARTED, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED):
                update = RemoteLogSegmentMetadataUpdate(segment_id, now + i + 2, None, state, 0)
                records.append((partition, serialize(update)))
    return records


def _manager(topic: InMemoryMetadataTopic, log_dir: Path, cfg: BenchConfig,
             snapshot: bool) -> TopicBasedRemoteLogMetadataManager:
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(log_dir), "broker.id": 0,
                    "remote.log.metadata.topic.num.partitions": cfg.metadata_partitions,
                    "remote.log.metadata.snapshot.enable": snapshot,
                    "remote.log.metadata.snapshot.events": 10 * cfg.segments})  # no snapshot inside a timed run
    rlmm.set_metadata_topic(topic)
    return rlmm


def _timed_restart(topic: InMemoryMetadataTopic, log_dir: Path, cfg: BenchConfig,
                   snapshot: bool) -> tuple[float, TopicBasedRemoteLogMetadataManager]:
    gc.collect()
    started = time.perf_counter()
    rlmm = _manager(topic, log_dir, cfg, snapshot)
    rlmm.initialize()
    return time.perf_counter() - started, rlmm


def _state(rlmm: TopicBasedRemoteLogMetadataManager) -> dict:
    """Everything a reader can observe, per user partition, to compare two restarts."""
    out = {}
    for tp in rlmm._store.partitions():  # noqa: SLF001 - a benchmark may look inside
        epochs = sorted({e for md in rlmm.list_remote_log_segments(tp) for e in md.segment_leader_epochs})
        out[tp] = (
            sorted((md.remote_log_segment_id.id, md.state) for md in rlmm.list_remote_log_segments(tp)),
            {e: ([md.remote_log_segment_id.id for md in rlmm.list_remote_log_segments(tp, e)],
                 rlmm.highest_offset_for_epoch(tp, e)) for e in epochs},
        )
    return out


def run(work_dir: Path, cfg: BenchConfig) -> dict:
    work_dir.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="rlmm-bench-", dir=work_dir))
    try:
        t0 = time.perf_counter()
        records = build_records(cfg)
        topic = InMemoryMetadataTopic(cfg.metadata_partitions)
        head, tail = records[:-cfg.tail_records], records[-cfg.tail_records:]
        for partition, value in head:
            topic.append(partition, value)
        build_s = time.perf_counter() - t0

        # The snapshot as a running broker would have left it, before the tail was written.
        rlmm = _manager(topic, log_dir, cfg, snapshot=True)
        rlmm.initialize()
        t0 = time.perf_counter()
        snapshot_bytes = rlmm.snapshot_now()
        snapshot_write_s = time.perf_counter() - t0
        rlmm.close()
        snapshot_file = log_dir / SNAPSHOT_FILE_NAME
        snapshot_data = snapshot_file.read_bytes()
        for partition, value in tail:
            topic.append(partition, value)

        baseline = Result("full replay (Kafka: no snapshot)", "baseline", nbytes=topic.total_bytes(),
                          note=f"{len(records)} records")
        subject = Result(f"snapshot + {cfg.tail_records}-record tail", "subject", nbytes=topic.total_bytes(),
                         baseline=baseline.name, note=f"snapshot {snapshot_bytes} B")
        replayed = []
        states = []
        for rep in range(cfg.reps):
            order = [False, True] if rep % 2 == 0 else [True, False]
            for with_snapshot in order:
                snapshot_file.unlink(missing_ok=True)
                if with_snapshot:
                    snapshot_file.write_bytes(snapshot_data)
                seconds, rlmm = _timed_restart(topic, log_dir, cfg, snapshot=with_snapshot)
                (subject if with_snapshot else baseline).samples_s.append(seconds)
                if with_snapshot:
                    replayed.append(rlmm.load_stats.records_replayed)
                    assert rlmm.load_stats.snapshot_loaded, rlmm.load_stats
                if rep == 0:
                    states.append(_state(rlmm))
                rlmm.close()
        identical = states[0] == states[1]
        if not identical:
            raise AssertionError("the snapshot restart rebuilt a different cache than the full replay")
        results = [baseline, subject]
        return {
            "config": asdict(cfg),
            "environment": environment(),
            "records": len(records),
            "topic_value_bytes": topic.total_bytes(),
            "build_s": build_s,
            "snapshot_bytes": snapshot_bytes,
            "snapshot_write_s": snapshot_write_s,
            "tail_records_replayed": replayed,
            "full_replay_median_s": statistics.median(baseline.samples_s),
            "snapshot_restart_median_s": statistics.median(subject.samples_s),
            "caches_identical": identical,
            "results": summarize(results, cfg.target),
        }
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


# -- scale: memory, restart and lookups at 1M and 10M segments (issue 28) --------------------------------


@dataclass(frozen=True)
class ScaleConfig:
    segments: tuple[int, ...] = (1_000_000, 10_000_000)
    user_partitions: int = 1000
    metadata_partitions: int = 50
    reps: int = 3
    lookups: int = 20_000
    old_max_segments: int = 1_000_000  # the object-per-segment baseline up to this count (~670 B a segment)
    seed: int = 405
    target: float = 5.0  # new restart vs old, segments/s (measured ~20x at 1M)
    memory_target: float = 100.0  # bytes per segment (the acceptance bound)
    restart_target_s: float = 3.0  # at the largest count
    lookup_p99_target_ms: float = 1.0

    @classmethod
    def quick(cls) -> ScaleConfig:
        return cls(segments=(100_000,), user_partitions=200, reps=3, lookups=5_000, old_max_segments=100_000)


SEGMENT_OFFSETS = 10_000  # offsets per segment; every 10th segment's epoch 1 starts half way
NOW_MS = 1_700_000_000_000


def scale_partitions(n: int, seed: int) -> list[TopicIdPartition]:
    rng = random.Random(seed)
    topic_ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(max(1, n // 10))]
    return [TopicIdPartition(topic_ids[i % len(topic_ids)], f"topic-{i % len(topic_ids)}", i // len(topic_ids))
            for i in range(n)]


def bulk_columns(segments: int, tps: list[TopicIdPartition], seed: int) -> list[tuple[TopicIdPartition,
                                                                                     CacheColumns]]:
    """The caches ``segments`` finished uploads leave, spread round-robin over ``tps`` (segment i goes to
    tps[i % len(tps)]), built directly as the columns ``RemoteLogMetadataCache.export_columns`` returns."""
    rng = np.random.default_rng(seed)
    out = []
    for p, tp in enumerate(tps):
        i = np.arange(p, segments, len(tps), dtype=np.int64)  # global upload number of each row
        rows = len(i)
        start = np.arange(rows, dtype=np.int64) * SEGMENT_OFFSETS
        multi = i % 10 == 0
        columns = {
            "start": start, "end": start + SEGMENT_OFFSETS - 1, "max_ts": NOW_MS + i, "event_ts": NOW_MS + i + 1,
            "id_hi": rng.integers(0, 1 << 64, rows, dtype=np.uint64), "id_lo": rng.integers(0, 1 << 64, rows,
                                                                                            dtype=np.uint64),
            "size": np.full(rows, 128 << 20, dtype=np.int32), "broker": np.zeros(rows, dtype=np.int32),
            "epoch": np.zeros(rows, dtype=np.int32),
            "state": np.full(rows, int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED), dtype=np.uint8),
            "flags": np.where(multi, FLAG_TXN_IDX_EMPTY | FLAG_EPOCHS, FLAG_TXN_IDX_EMPTY).astype(np.uint8),
        }
        mrows = np.flatnonzero(multi).astype(np.int32)
        half = start[mrows] + SEGMENT_OFFSETS // 2
        ext_start = np.empty(2 * len(mrows), dtype=np.int64)
        ext_start[0::2], ext_start[1::2] = start[mrows], half
        epoch0_end = np.where(multi, start + SEGMENT_OFFSETS // 2 - 1, start + SEGMENT_OFFSETS - 1)
        epochs = [0, 1] if len(mrows) else ([0] if rows else [])
        highest = [int(epoch0_end[-1])] if rows else []
        if len(mrows):
            highest.append(int(start[mrows[-1]]) + SEGMENT_OFFSETS - 1)
        out.append((tp, CacheColumns(
            columns, np.repeat(mrows, 2), np.tile(np.array([0, 1], dtype=np.int32), len(mrows)), ext_start, {},
            np.array(epochs, dtype=np.int32), np.array(highest, dtype=np.int64),
            np.array([rows, len(mrows)][:len(epochs)], dtype=np.uint32), np.zeros(len(epochs), dtype=np.uint32),
            np.concatenate((start, half)), np.concatenate((np.arange(rows, dtype=np.int32), mrows)),
            np.zeros(0, dtype=np.uint32))))
    return out


def check_bulk_path(work_dir: Path) -> bool:
    """The bulk columns of 2000 segments equal what the same uploads build as events through the RLMM."""
    tps = scale_partitions(20, 1)
    bulk = bulk_columns(2000, tps, 1)
    segments = {tp: list(RemoteLogMetadataCache.from_columns(tp, data).list_all_remote_log_segments())
                for tp, data in bulk}
    log_dir = Path(tempfile.mkdtemp(prefix="rlmm-bulk-", dir=work_dir))
    try:
        rlmm = _manager(InMemoryMetadataTopic(5), log_dir, BenchConfig(metadata_partitions=5), snapshot=False)
        rlmm.initialize()
        for i in range(2000):
            md = segments[tps[i % len(tps)]][i // len(tps)]
            started = RemoteLogSegmentMetadata(md.remote_log_segment_id, md.start_offset, md.end_offset,
                                               md.max_timestamp_ms, 0, NOW_MS + i, md.segment_size_in_bytes,
                                               md.segment_leader_epochs, txn_idx_empty=True)
            rlmm.add_remote_log_segment_metadata(started)
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, NOW_MS + i + 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
        for tp, data in bulk:
            built = rlmm._store.get(tp).export_columns()  # noqa: SLF001 - a benchmark may look inside
            for name in ("ext_row", "ext_epoch", "ext_start", "epoch_ids", "epoch_highest", "epoch_ref_count",
                         "ref_keys", "ref_rows"):
                if not np.array_equal(getattr(built, name), getattr(data, name)):
                    return False
            if any(not np.array_equal(built.columns[k], v) for k, v in data.columns.items()):
                return False
        rlmm.close()
        return True
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _scale_manager(log_dir: Path, cfg: ScaleConfig) -> TopicBasedRemoteLogMetadataManager:
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(log_dir), "broker.id": 0,
                    "remote.log.metadata.topic.num.partitions": cfg.metadata_partitions,
                    "remote.log.metadata.snapshot.events": 1 << 30})
    rlmm.set_metadata_topic(InMemoryMetadataTopic(cfg.metadata_partitions))  # empty: restart = snapshot load
    return rlmm


def _epoch_for(tp_index: int, partitions: int, offset: int) -> int:
    i = (offset // SEGMENT_OFFSETS) * partitions + tp_index
    return 1 if i % 10 == 0 and offset % SEGMENT_OFFSETS >= SEGMENT_OFFSETS // 2 else 0


def time_lookups(rlmm: TopicBasedRemoteLogMetadataManager, tps: list[TopicIdPartition], segments: int,
                 count: int, seed: int) -> dict:
    rng = random.Random(seed)
    per_partition = segments // len(tps)
    samples = []
    for _ in range(count):
        p = rng.randrange(len(tps))
        offset = rng.randrange(per_partition * SEGMENT_OFFSETS)
        epoch = _epoch_for(p, len(tps), offset)
        t0 = time.perf_counter_ns()
        md = rlmm.remote_log_segment_metadata(tps[p], epoch, offset)
        samples.append(time.perf_counter_ns() - t0)
        if md is None or not md.start_offset <= offset <= md.end_offset:
            raise AssertionError(f"lookup of {tps[p]} epoch {epoch} offset {offset} returned {md}")
    samples.sort()
    return {"count": count, "p50_ms": samples[len(samples) // 2] / 1e6,
            "p99_ms": samples[int(len(samples) * 0.99)] / 1e6, "max_ms": samples[-1] / 1e6}


def _proc_memory() -> dict[str, int]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def _delta(after: dict[str, int], before: dict[str, int], segments: int) -> dict[str, float]:
    return {k: (after[k] - before[k]) / segments for k in after}


def measure_memory(log_dir: Path, segments: int, cfg: ScaleConfig) -> dict:
    """In this (fresh) process: the memory a restart adds per segment, and after ``detach``."""
    warm = Path(tempfile.mkdtemp(prefix="rlmm-warm-", dir=log_dir.parent))
    try:  # a first small load: imports and numpy's first-use allocations are not the caches' memory
        data = bulk_columns(1000, scale_partitions(10, 2), 2)
        write_snapshot(warm / SNAPSHOT_FILE_NAME, encode_snapshot([-1] * cfg.metadata_partitions, [], [], data))
        del data
        rlmm = _scale_manager(warm, cfg)
        rlmm.initialize()
        rlmm.close()
        del rlmm
    finally:
        shutil.rmtree(warm, ignore_errors=True)
    gc.collect()
    before = _proc_memory()
    rlmm = _scale_manager(log_dir, cfg)
    rlmm.initialize()
    assert rlmm.load_stats.snapshot_segments == segments, rlmm.load_stats
    gc.collect()
    loaded = _proc_memory()
    caches = [cache for _, cache in rlmm._store.items()]  # noqa: SLF001 - a benchmark may look inside
    numpy_bytes = sum(cache.memory_bytes() for cache in caches)
    for cache in caches:
        cache.detach()
    gc.collect()
    detached = _proc_memory()
    return {"loaded": _delta(loaded, before, segments), "detached": _delta(detached, before, segments),
            "numpy_bytes_per_segment": numpy_bytes / segments}


def _old_structures(partitions: list) -> list:
    """What the object-per-segment cache held per partition: a dict of the segments, the epoch states."""
    return [({md.remote_log_segment_id: md for md in segments},
             {epoch: RemoteLogLeaderEpochState.restore(state) for epoch, state in epochs.items()})
            for _tp, segments, epochs in partitions]


def load_old(path: Path, metadata_partitions: int) -> list:
    """The old restart: read, check and decode the version-1 file into objects, build the old caches - with
    the cyclic GC paused, as the old manager's load did."""
    gc.disable()
    try:
        data = path.read_bytes()
        if crc32c(data[10:]) != int.from_bytes(data[6:10], "big"):
            raise AssertionError("bad v1 file")
        return _old_structures(decode_v1_objects(data, metadata_partitions)[3])
    finally:
        gc.enable()


def measure_old_memory(path: Path, segments: int, cfg: ScaleConfig) -> dict:
    warm = path.with_name("warm-v1")
    try:
        rlmm_caches = [(tp, RemoteLogMetadataCache.from_columns(tp, d).snapshot())
                       for tp, d in bulk_columns(1000, scale_partitions(10, 2), 2)]
        warm.write_bytes(encode_snapshot_v1([-1] * cfg.metadata_partitions, [], [], rlmm_caches))
        load_old(warm, cfg.metadata_partitions)
    finally:
        warm.unlink(missing_ok=True)
    gc.collect()
    before = _proc_memory()
    caches = load_old(path, cfg.metadata_partitions)
    gc.collect()
    loaded = _proc_memory()
    assert sum(len(ids) for ids, _ in caches) == segments
    return {"loaded": _delta(loaded, before, segments)}


def _in_subprocess(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_scale(work_dir: Path, cfg: ScaleConfig) -> dict:
    work_dir.mkdir(parents=True, exist_ok=True)
    tps = scale_partitions(cfg.user_partitions, cfg.seed)
    report: dict = {"config": asdict(cfg), "bulk_path_checked": check_bulk_path(work_dir), "counts": []}
    if not report["bulk_path_checked"]:
        raise AssertionError("the bulk columns differ from what the events build")
    results = []
    for n in cfg.segments:
        log_dir = Path(tempfile.mkdtemp(prefix=f"rlmm-scale-{n}-", dir=work_dir))
        try:
            row: dict = {"segments": n}
            t0 = time.perf_counter()
            data = bulk_columns(n, tps, cfg.seed)
            row["build_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            row["snapshot_bytes"] = write_snapshot(log_dir / SNAPSHOT_FILE_NAME,
                                                   encode_snapshot([-1] * cfg.metadata_partitions, [], [], data))
            row["snapshot_write_s"] = time.perf_counter() - t0
            del data
            new = Result(f"restart, columns (v2), {n / 1e6:g}M", "subject", nbytes=n * 1000,
                         note=f"snapshot {row['snapshot_bytes'] / n:.1f} B/segment")
            for rep in range(cfg.reps):
                gc.collect()
                t0 = time.perf_counter()
                rlmm = _scale_manager(log_dir, cfg)
                rlmm.initialize()
                new.samples_s.append(time.perf_counter() - t0)
                assert rlmm.load_stats.snapshot_loaded and rlmm.load_stats.snapshot_segments == n, rlmm.load_stats
                if rep == 0:
                    row["lookups"] = time_lookups(rlmm, tps, n, cfg.lookups, cfg.seed)
                rlmm.close()  # nothing changed: no snapshot is written
                del rlmm
            row["restart_s"] = new.samples_s
            row["restart_median_s"] = statistics.median(new.samples_s)
            row["memory"] = _in_subprocess("--_memory", str(log_dir), str(n), json.dumps(asdict(cfg)))
            if n <= cfg.old_max_segments:
                old = Result(f"restart, an object a segment (v1), {n / 1e6:g}M", "baseline", nbytes=n * 1000)
                new.baseline = old.name
                row["old"] = run_old(log_dir, n, cfg, old)
                results.append(old)
            else:
                new.informational = True  # no same-count baseline: its rate is shown, no ratio
            results.append(new)
            report["counts"].append(row)
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
    report["results"] = summarize(results, cfg.target)
    report["acceptance"] = acceptance(report, cfg)
    return report


def run_old(log_dir: Path, n: int, cfg: ScaleConfig, old: Result) -> dict:
    """The same caches as a version-1 file, loaded as the old cache was (timed), and its memory."""
    rlmm = _scale_manager(log_dir, cfg)
    rlmm.initialize()
    caches = [(tp, cache.snapshot()) for tp, cache in rlmm._store.items()]  # noqa: SLF001
    rlmm.close()
    del rlmm
    v1 = log_dir / "v1-snapshot"
    v1.write_bytes(encode_snapshot_v1([-1] * cfg.metadata_partitions, [], [], caches))
    del caches
    out: dict = {"snapshot_bytes": v1.stat().st_size}
    for _ in range(cfg.reps):
        gc.collect()
        t0 = time.perf_counter()
        loaded = load_old(v1, cfg.metadata_partitions)
        old.samples_s.append(time.perf_counter() - t0)
        del loaded
    old.note = f"snapshot {out['snapshot_bytes'] / n:.1f} B/segment"
    out["restart_s"] = old.samples_s
    out["restart_median_s"] = statistics.median(old.samples_s)
    out["memory"] = _in_subprocess("--_old-memory", str(v1), str(n), json.dumps(asdict(cfg)))
    # The one-time migration: a version-1 file through the real load path, into columns.
    shutil.copy(v1, log_dir / SNAPSHOT_FILE_NAME)
    t0 = time.perf_counter()
    rlmm = _scale_manager(log_dir, cfg)
    rlmm.initialize()
    out["migration_s"] = time.perf_counter() - t0
    assert rlmm.load_stats.snapshot_segments == n
    rlmm.close()
    return out


def acceptance(report: dict, cfg: ScaleConfig) -> list[dict]:
    checks = []
    for row in report["counts"]:
        n = row["segments"]
        loaded = row["memory"]["loaded"]["VmRSS"]
        detached = row["memory"]["detached"]["VmRSS"]
        checks.append({"check": f"resident memory per segment at {n / 1e6:g}M <= {cfg.memory_target:.0f} B",
                       "value": f"{loaded:.1f} B after load (file pages), {detached:.1f} B detached",
                       "passed": max(loaded, detached) <= cfg.memory_target})
        checks.append({"check": f"lookup p99 at {n / 1e6:g}M < {cfg.lookup_p99_target_ms:g} ms",
                       "value": f"{row['lookups']['p99_ms']:.3f} ms",
                       "passed": row["lookups"]["p99_ms"] < cfg.lookup_p99_target_ms})
    largest = max(report["counts"], key=lambda r: r["segments"])
    checks.append({"check": f"restart at {largest['segments'] / 1e6:g}M < {cfg.restart_target_s:g} s",
                   "value": f"{largest['restart_median_s']:.2f} s (median)",
                   "passed": largest["restart_median_s"] < cfg.restart_target_s})
    return checks


def format_scale(report: dict) -> str:
    lines = [format_table(report["results"]).replace("MB/s median", "k seg/s med"), "",
             "RLMM at scale (bulk-built caches, restart = snapshot load to ready; bulk path checked against "
             f"events: {'yes' if report['bulk_path_checked'] else 'NO'}):"]
    for row in report["counts"]:
        n, mem = row["segments"], row["memory"]
        lk = row["lookups"]
        lines.append(f"  {n:>10,} segments: restart {row['restart_median_s']:.2f} s (median of "
                     f"{len(row['restart_s'])}); snapshot {row['snapshot_bytes'] / 1e6:.1f} MB "
                     f"({row['snapshot_bytes'] / n:.1f} B/segment, written in {row['snapshot_write_s']:.2f} s)")
        lines.append(f"  {'':>10}  memory/segment: {mem['loaded']['VmRSS']:.1f} B resident after load "
                     f"({mem['loaded']['RssFile']:.1f} B of it the mapped file), "
                     f"{mem['detached']['VmRSS']:.1f} B once detached; numpy buffers "
                     f"{mem['numpy_bytes_per_segment']:.1f} B")
        lines.append(f"  {'':>10}  lookups: p50 {lk['p50_ms'] * 1e3:.0f} us, p99 {lk['p99_ms'] * 1e3:.0f} us, "
                     f"max {lk['max_ms'] * 1e3:.0f} us ({lk['count']} lookups)")
        if "old" in row:
            old = row["old"]
            lines.append(f"  {'':>10}  old (an object a segment): restart {old['restart_median_s']:.2f} s, "
                         f"memory {old['memory']['loaded']['VmRSS']:.0f} B/segment, snapshot "
                         f"{old['snapshot_bytes'] / n:.1f} B/segment; one-time v1 -> v2 migration "
                         f"{old['migration_s']:.2f} s")
    lines.append("  acceptance:")
    for check in report["acceptance"]:
        lines.append(f"    {'PASS' if check['passed'] else 'FAIL'}  {check['check']}: {check['value']}")
    return "\n".join(lines)


def format_summary(report: dict) -> str:
    full, snap = report["full_replay_median_s"], report["snapshot_restart_median_s"]
    cfg = report["config"]
    return "\n".join([
        f"RLMM restart, {cfg['segments']} live segments"
        + (f" + {cfg['deleted_segments']} deleted" if cfg["deleted_segments"] else "")
        + f" ({report['records']} records, "
        f"{report['topic_value_bytes'] / 1e6:.1f} MB of values) over {cfg['user_partitions']} user partitions "
        f"and {cfg['metadata_partitions']} metadata partitions:",
        f"  full replay (Kafka):          {full:8.3f} s (median)",
        f"  snapshot + {cfg['tail_records']}-record tail: {snap:8.3f} s (median); "
        f"tail records replayed {report['tail_records_replayed']}",
        f"  speed-up:                     {full / snap:8.1f}x",
        f"  snapshot file: {report['snapshot_bytes'] / 1e6:.2f} MB "
        f"({report['snapshot_bytes'] / cfg['segments']:.0f} B/segment), written in {report['snapshot_write_s']:.3f} s",
        "  caches identical after both restarts: " + ("yes" if report["caches_identical"] else "NO"),
    ])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--_memory"], ["--_old-memory"]):  # the fresh process of a memory measurement
        cfg = ScaleConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(argv[3]).items()})
        measure = measure_memory if argv[0] == "--_memory" else measure_old_memory
        print(json.dumps(measure(Path(argv[1]), int(argv[2]), cfg)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k segments over 200 user partitions; scale: 100k")
    parser.add_argument("--reps", type=int, help="repetitions of each restart (>= 3 recommended)")
    parser.add_argument("--segments", type=int, help="live segments (two records each)")
    parser.add_argument("--deleted-segments", type=int, help="segments deleted before the restart (four records each)")
    parser.add_argument("--dir", type=Path, default=OUT / "work", help="scratch directory for the snapshot file")
    parser.add_argument("--json", type=Path, default=OUT / "rlmm_restart_bench.json", help="where to write results")
    parser.add_argument("--scale", help="segment counts of the scale part, comma-separated (default 1000000,10000000)")
    parser.add_argument("--old-max", type=int, help="largest count the old representation is measured at")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--no-scale", action="store_true", help="only the replay-vs-snapshot part")
    which.add_argument("--scale-only", action="store_true", help="only the scale part")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides = {k: v for k, v in (("reps", args.reps), ("segments", args.segments),
                                   ("deleted_segments", args.deleted_segments)) if v is not None}
    if overrides:
        cfg = BenchConfig(**{**asdict(cfg), **overrides})
    scale = ScaleConfig.quick() if args.quick else ScaleConfig()
    scale_overrides: dict = {}
    if args.scale:
        scale_overrides["segments"] = tuple(int(x) for x in args.scale.split(","))
    if args.old_max is not None:
        scale_overrides["old_max_segments"] = args.old_max
    if scale_overrides:
        scale = ScaleConfig(**{**asdict(scale), **scale_overrides})

    def run_all() -> dict:
        report = {"environment": environment()} if args.scale_only else run(args.dir, cfg)
        if not args.no_scale:
            report["scale"] = run_scale(args.dir, scale)
        return report

    return run_and_save(run_all, show_report, quick=args.quick, json_path=args.json)


def show_report(report: dict) -> None:
    if "results" in report:
        print(f"\n{format_table(report['results'])}\n\n{format_summary(report)}")
    if "scale" in report:
        print(f"\n{format_scale(report['scale'])}")


if __name__ == "__main__":
    sys.exit(main())
