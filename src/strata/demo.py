"""``strata demo`` (what ``make run`` runs until the broker exists): a sample partition log, dumped.

The log under ``DIR/demo-0`` is written through the real log layer (``load_partition_log`` and
``append_as_leader``) so it has everything a Kafka partition directory has: several segments (a small
``segment.bytes``), records in all five codecs, keys, values and headers, an idempotent producer, two
transactions -- one aborted, one committed -- with their COMMIT/ABORT markers written the way the
transaction coordinator writes them, a leader change, producer snapshots, ``.txnindex``,
``leader-epoch-checkpoint`` and ``partition.metadata``, plus the log-dir checkpoints in ``DIR``.

The clock is a fixed ManualClock, so the files are the same bytes on every run.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.log.checkpoints import OffsetCheckpointFile, PartitionMetadataFile
from strata.log.dump import DumpOptions, EventKind, FileType, dump_paths, format_event
from strata.log.files import LOG_START_OFFSET_CHECKPOINT, PARTITION_METADATA, RECOVERY_POINT_CHECKPOINT
from strata.log.loader import load_partition_log
from strata.log.partition_log import PartitionLog
from strata.log.producer_state import AppendOrigin
from strata.protocol.records import BatchBuilder, CompressionType, ControlRecordType, build_control_batch

MARKER = ".strata-demo"  # only a directory holding this (or an empty one) is ever wiped
TOPIC_PARTITION = TopicPartition("demo", 0)
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, "strata:demo")
START_MS = 1_700_000_000_000
CODECS = list(CompressionType)
CONFIG = LogConfig(segment_bytes=4 * 1024, index_interval_bytes=1024, segment_index_bytes=4096)

PLAIN = -1
IDEMPOTENT_PID = 1000
ABORTED_TXN_PID = 2000
COMMITTED_TXN_PID = 3000


class DemoError(Exception):
    """The demo cannot run (e.g. DIR is not a demo directory it may wipe)."""


@dataclass
class _Producer:
    producer_id: int
    epoch: int = 0
    sequence: int = 0


class _Writer:
    """Appends sample batches to a partition log, cycling through the codecs."""

    def __init__(self, log: PartitionLog, clock: ManualClock) -> None:
        self.log = log
        self.clock = clock
        self.leader_epoch = 0
        self.counter = 0
        self.batches = 0

    def data(self, records: int, producer: _Producer | None = None, transactional: bool = False) -> None:
        codec = CODECS[self.batches % len(CODECS)]
        builder = BatchBuilder(
            compression=codec,
            producer_id=producer.producer_id if producer else PLAIN,
            producer_epoch=producer.epoch if producer else -1,
            base_sequence=producer.sequence if producer else -1,
            transactional=transactional,
        )
        for i in range(records):
            n = self.counter
            self.counter += 1
            headers = [("source", b"strata-demo"), ("codec", codec.name.lower().encode())] if n % 3 == 0 else []
            value = (f'{{"n": {n}, "codec": "{codec.name.lower()}", "producer": '
                     f'{producer.producer_id if producer else -1}, "text": "{"lorem ipsum " * (1 + n % 4)}"}}')
            builder.append(value.encode(), key=f"key-{n % 17}".encode(), headers=headers,
                           timestamp=self.clock.milliseconds() + i)
        self.log.append_as_leader(builder.build(), self.leader_epoch)
        if producer is not None:
            producer.sequence += records
        self.batches += 1
        self.clock.advance(1_000)

    def marker(self, marker: ControlRecordType, producer: _Producer) -> None:
        batch = build_control_batch(marker, producer_id=producer.producer_id, producer_epoch=producer.epoch,
                                    coordinator_epoch=0, timestamp=self.clock.milliseconds())
        self.log.append_as_leader(batch, self.leader_epoch, origin=AppendOrigin.COORDINATOR)
        self.batches += 1
        self.clock.advance(1_000)


def write_sample_log(partition_dir: Path) -> PartitionLog:
    """Write the sample partition log and close it cleanly; returns the (closed) log."""
    clock = ManualClock(START_MS)
    scheduler = ManualScheduler()
    log = load_partition_log(partition_dir, TOPIC_PARTITION, CONFIG, clock, scheduler)
    PartitionMetadataFile(partition_dir / PARTITION_METADATA).write(TOPIC_ID)
    w = _Writer(log, clock)
    idempotent = _Producer(IDEMPOTENT_PID)
    aborted = _Producer(ABORTED_TXN_PID)
    committed = _Producer(COMMITTED_TXN_PID)

    for i in range(20):  # plain and idempotent producers, every codec
        w.data(6 + i % 5, idempotent if i % 2 else None)
    # Two transactions overlap: the aborted one's .txnindex entry records the other's first offset
    # as the last stable offset.
    w.data(5, aborted, transactional=True)
    w.data(4, committed, transactional=True)
    w.data(5, aborted, transactional=True)
    w.data(7)  # a plain producer is not held back by open transactions
    w.data(3, committed, transactional=True)
    w.marker(ControlRecordType.ABORT, aborted)
    w.marker(ControlRecordType.COMMIT, committed)
    w.leader_epoch = 1  # a leader change: a second leader-epoch-checkpoint entry
    for i in range(20):
        w.data(5 + i % 6, idempotent if i % 3 else None)
    scheduler.run_pending()
    log.update_high_watermark(log.log_end_offset)
    end = log.log_end_offset
    log.close()
    log_dir = partition_dir.parent
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write({TOPIC_PARTITION: end})
    OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write({TOPIC_PARTITION: log.log_start_offset})
    return log


def _prepare(directory: Path) -> None:
    if directory.exists():
        if not directory.is_dir():
            raise DemoError(f"{directory} exists and is not a directory")
        if any(directory.iterdir()) and not (directory / MARKER).exists():
            raise DemoError(f"refusing to empty {directory}: it is not empty and was not written by "
                            f"`strata demo` (no {MARKER} file); pass another --dir")
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / MARKER).write_text("written by `strata demo`; the next run empties this directory\n")


def run_demo(directory: Path, out: TextIO = sys.stdout) -> int:
    """Write the sample log under ``directory``, dump it with records; 0 if the dump finds no problem."""
    _prepare(directory)
    write_sample_log(directory / str(TOPIC_PARTITION))
    batches = records = segments = problems = 0
    for event in dump_paths([directory], DumpOptions(print_data=True)):
        if event.kind is EventKind.FILE and event.file_type is FileType.LOG:
            segments += 1
        elif event.kind is EventKind.BATCH:
            batches += 1
            records += event.data["count"]
        elif event.kind is EventKind.PROBLEM:
            problems += 1
        text = format_event(event)
        if text is not None:
            print(text, file=out)
    print(file=out)
    print(f"{batches} batches, {records} records in {segments} segments under {directory}; "
          f"inspect with: strata dump-log {directory} --records", file=out)
    if problems:
        print(f"dump-log found {problems} problems in the demo log", file=out)
        return 1
    return 0
