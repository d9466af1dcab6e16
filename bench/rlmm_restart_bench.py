"""RLMM restart time: Kafka's full replay of ``__remote_log_metadata`` against Strata's snapshot + tail.

    .venv/bin/python bench/rlmm_restart_bench.py [--quick] [--reps N] [--segments N] [--deleted-segments N]
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
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from report import Result, environment, format_table, run_and_save, summarize
from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from strata.tiered.metadata.memory import InMemoryMetadataTopic
from strata.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from strata.tiered.metadata.serde import serialize
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k segments over 200 user partitions")
    parser.add_argument("--reps", type=int, help="repetitions of each restart (>= 3 recommended)")
    parser.add_argument("--segments", type=int, help="live segments (two records each)")
    parser.add_argument("--deleted-segments", type=int, help="segments deleted before the restart (four records each)")
    parser.add_argument("--dir", type=Path, default=OUT / "work", help="scratch directory for the snapshot file")
    parser.add_argument("--json", type=Path, default=OUT / "rlmm_restart_bench.json", help="where to write results")
    args = parser.parse_args(argv)
    cfg = BenchConfig.quick() if args.quick else BenchConfig()
    overrides = {k: v for k, v in (("reps", args.reps), ("segments", args.segments),
                                   ("deleted_segments", args.deleted_segments)) if v is not None}
    if overrides:
        cfg = BenchConfig(**{**asdict(cfg), **overrides})
    return run_and_save(lambda: run(args.dir, cfg), show_report, quick=args.quick,
                        json_path=args.json)


def show_report(report: dict) -> None:
    print(f"\n{format_table(report['results'])}\n\n{format_summary(report)}")


if __name__ == "__main__":
    sys.exit(main())
