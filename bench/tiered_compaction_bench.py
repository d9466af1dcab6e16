"""Compacted topics in tiered storage (KIP-1272): cleaning a log's remote tier against cleaning the same log
locally, in one run.

    .venv/bin/python bench/tiered_compaction_bench.py [--quick] [--mib N] [--segment-mib N] [--reps N]
                                                      [--dir PATH] [--json PATH]

The dirty log is ``cleaner_bench``'s (batches of 100 records, ~100 B JSON-like values, keys drawn from
records / 10 so ~10% survive), ``--mib`` MiB (default 256) in ``--segment-mib`` segments, all rolled.

* **Local** (the baseline): ``Cleaner.clean`` over a fresh copy, as a cleaner thread runs it.
* **Remote**: the same log uploaded untimed to the ``local`` RemoteStorageManager through the RLM's own
  copier path, then cleaned by the leader's cleaner as a tiered log whose local copies are gone: each
  remote segment is downloaded to the scratch directory to map it, downloaded again to filter it, and the
  ones that lost records are uploaded as new segments and the old ones retired in the RLMM
  (``RemoteCompaction``: the code a broker runs). The RLMM is the topic-based one on an in-memory topic.

Ratio = remote MB/s / local MB/s (target >= 0.7). MB/s counts the dirty log's bytes; CPU-s/GiB is this
process's CPU time per GiB of it. Both variants are checked to leave exactly one record per distinct key.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(HERE), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import cleaner_bench as cb  # noqa: E402
from report import MiB  # noqa: E402
from strata.common import SystemClock  # noqa: E402
from strata.config.broker_config import BrokerConfig  # noqa: E402
from strata.log.cleaner.cleaner import Cleaner, LogToClean, Throttler  # noqa: E402
from strata.log.cleaner.offset_map import OffsetMap  # noqa: E402
from strata.log.partition_log import PartitionLog  # noqa: E402
from strata.protocol.records import CompressionType, iter_batches  # noqa: E402
from strata.tiered.api import RemoteLogSegmentId, RemoteLogSegmentState, TopicIdPartition  # noqa: E402
from strata.tiered.compaction import RemoteCompaction  # noqa: E402
from strata.tiered.copier import CopyCandidate, build_copy_request  # noqa: E402
from strata.tiered.manager import RemoteLogManager  # noqa: E402
from strata.tiered.metadata.memory import InMemoryMetadataTopic  # noqa: E402
from strata.tiered.metadata.topic_based import TopicBasedRemoteLogMetadataManager  # noqa: E402
from strata.tiered.storage.local import LocalTieredStorage  # noqa: E402

GiB = 1024 * MiB


@dataclass
class Run:
    seconds: float
    cpu_s: float
    records_left: int
    segments_replaced: int = 0
    bytes_uploaded: int = 0


def _rlm(work: Path, plog: PartitionLog) -> tuple[RemoteLogManager, TopicIdPartition]:
    store = work / "store"
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(store), "broker.id": 0})
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(work / "rlmm"), "broker.id": 0, "remote.log.metadata.topic.num.partitions": 1,
                    "remote.log.metadata.snapshot.enable": False})
    rlmm.set_metadata_topic(InMemoryMetadataTopic())
    rlmm.initialize()
    config = BrokerConfig.from_props({"log.dirs": str(work / "logs"), "remote.log.storage.system.enable": "true"})
    rlm = RemoteLogManager(config.remote, broker_id=0, log_dir=work / "logs", cluster_id="bench", clock=SystemClock(),
                           log_for=lambda _tp: plog, rsm=rsm, rlmm=rlmm)
    rlm.start()
    tip = TopicIdPartition(uuid.uuid4(), cb.TP.topic, cb.TP.partition)
    rlmm.on_partition_leadership_changes({tip}, set())
    return rlm, tip


def upload_all(rlm: RemoteLogManager, tip: TopicIdPartition, plog: PartitionLog, scratch: Path) -> None:
    """Every rolled segment to the store, as the copy task does (untimed)."""
    scratch.mkdir(parents=True, exist_ok=True)
    segments = plog.segments
    for segment, nxt in zip(segments, segments[1:], strict=False):
        md, data = build_copy_request(plog, CopyCandidate(segment, nxt.base_offset),
                                      RemoteLogSegmentId.generate_new(tip), 0, int(time.time() * 1000), scratch)
        rlm._copy_sync(md, data)
    plog.remote_log_enabled = True
    plog.update_highest_offset_in_remote_storage(segments[-1].base_offset - 1)


def remote_records(rlm: RemoteLogManager, tip: TopicIdPartition) -> int:
    total = 0
    for md in rlm.rlmm.list_remote_log_segments(tip):
        if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            with rlm.rsm.fetch_log_segment(md, 0) as stream:
                total += sum(h.records_count for _, h in iter_batches(stream.read()))
    return total


def clean_remote(work: Path, dirty: cb.DirtyLog, cfg: cb.BenchConfig) -> Run:
    plog = cb.open_copy(dirty, work / "remote-log" / f"{cb.TP.topic}-{cb.TP.partition}", cfg)
    rlm, tip = _rlm(work, plog)
    try:
        upload_all(rlm, tip, plog, work / "upload-scratch")
        tier = RemoteCompaction(rlm, tip, plog, SystemClock(), lambda: True, asyncio.new_event_loop())
        plog.remote_cleaning = tier
        cleaner = Cleaner(0, OffsetMap(cfg.dedupe_mib * MiB), Throttler(0), SystemClock(), lambda fn: fn(),
                          lambda _p: None)
        active = plog.segments[-1]
        end = 0
        replaced = uploaded = 0
        cpu0, t0 = time.process_time(), time.perf_counter()
        while end < active.base_offset:
            refs = tier.segments()
            ltc = LogToClean(plog, end, active.base_offset, 0, sum(r.size for r in refs), False, [active], refs,
                             active.base_offset)  # the local copies gone: everything below is remote
            end, stats = cleaner.clean(ltc)
            replaced += stats.remote_segments_replaced
            uploaded += stats.remote_bytes_rewritten
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        return Run(seconds, cpu, remote_records(rlm, tip), replaced, uploaded)
    finally:
        asyncio.run(rlm.close())
        cb.release(plog)


def clean_local(work: Path, dirty: cb.DirtyLog, cfg: cb.BenchConfig) -> Run:
    plog = cb.open_copy(dirty, work / "local-log" / f"{cb.TP.topic}-{cb.TP.partition}", cfg)
    try:
        run = cb.clean_fully(plog, cfg)
        return Run(run.seconds, run.cpu_s, run.records_left)
    finally:
        cb.release(plog)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32 MiB in 4 MiB segments, 2 repetitions")
    parser.add_argument("--mib", type=int)
    parser.add_argument("--segment-mib", type=int)
    parser.add_argument("--reps", type=int)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=HERE / "out" / "tiered_compaction.json")
    args = parser.parse_args(argv)
    mib = args.mib or (32 if args.quick else 256)
    cfg = cb.BenchConfig(segment_mib=args.segment_mib or (4 if args.quick else 16), reps=args.reps or (2 if args.quick
                                                                                                     else 3))
    work = args.dir or Path(tempfile.mkdtemp(prefix="tiered-compaction-bench-"))
    try:
        dirty = cb.build_dirty_log(work / "dirty" / f"{cb.TP.topic}-{cb.TP.partition}", cfg, mib,
                                   CompressionType.NONE)
        print(f"dirty log: {dirty.log_bytes / MiB:.0f} MiB, {dirty.records} records, {dirty.distinct_keys} "
              f"distinct keys, {dirty.segments} segments ({dirty.build_s:.1f} s to build)", flush=True)
        runs: dict[str, list[Run]] = {"local": [], "remote": []}
        for rep in range(cfg.reps):
            for name in (("local", "remote") if rep % 2 == 0 else ("remote", "local")):
                run = (clean_local if name == "local" else clean_remote)(work / f"{name}-{rep}", dirty, cfg)
                assert run.records_left == dirty.distinct_keys, (name, run.records_left, dirty.distinct_keys)
                runs[name].append(run)
                print(f"  {name:6s} rep {rep}: {dirty.log_bytes / 1e6 / run.seconds:7.1f} MB/s, "
                      f"{run.cpu_s / (dirty.log_bytes / GiB):6.1f} CPU-s/GiB"
                      + (f", {run.segments_replaced} segments replaced, {run.bytes_uploaded / MiB:.1f} MiB uploaded"
                         if name == "remote" else ""), flush=True)
        out: dict[str, Any] = {"dirty_mib": dirty.log_bytes / MiB, "segments": dirty.segments}
        for name, rs in runs.items():
            seconds = statistics.median(r.seconds for r in rs)
            out[name] = {"mb_s": dirty.log_bytes / 1e6 / seconds,
                         "cpu_s_per_gib": statistics.median(r.cpu_s for r in rs) / (dirty.log_bytes / GiB),
                         "seconds": seconds}
        out["ratio_remote_to_local"] = out["remote"]["mb_s"] / out["local"]["mb_s"]
        print(f"remote cleaning {out['remote']['mb_s']:.1f} MB/s vs local {out['local']['mb_s']:.1f} MB/s: "
              f"ratio {out['ratio_remote_to_local']:.2f} (target >= 0.7)")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        import json

        args.json.write_text(json.dumps(out, indent=2))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
