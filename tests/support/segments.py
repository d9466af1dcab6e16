"""Real segments for tiered-storage tests, built by Strata's own log (appends, then a roll).

The ``.log``, trimmed ``.index``/``.timeindex`` and the ``.snapshot`` written at the roll are
exactly what the RemoteLogManager hands a RemoteStorageManager, so a backend is tested on the
files it will really see, not on made-up bytes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.log.loader import load_partition_log
from strata.log.txn_index import AbortedTxn, TransactionIndex
from strata.protocol.records import BatchBuilder
from strata.tiered.api import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

LEADER_EPOCH_CHECKPOINT = b"0\n1\n0 0\n"  # version 0, one entry: epoch 0 from offset 0


@dataclass(frozen=True)
class Segment:
    """A rolled local segment ready to upload: its remote metadata and its files."""

    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData

    @property
    def tp(self) -> TopicIdPartition:
        return self.metadata.topic_id_partition

    def log_bytes(self) -> bytes:
        return self.data.log_segment.read_bytes()

    def with_new_id(self) -> Segment:
        """The same files under a fresh segment id (what a retried copy of the same segment gets)."""
        md = self.metadata
        new_md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(md.topic_id_partition), md.start_offset,
                                          md.end_offset, md.max_timestamp_ms, md.broker_id, md.event_timestamp_ms,
                                          md.segment_size_in_bytes, md.segment_leader_epochs)
        return Segment(new_md, self.data)


MakeSegment = Callable[..., Segment]


def segment_factory(tmp_path: Path) -> MakeSegment:
    """A ``make(batches=20, records=5, value_size=1000, txn=False, topic=..., partition=0, topic_id=None)``
    building each segment in its own directory under ``tmp_path``.

    Appends idempotent-producer batches of random values at leader epoch 0, rolls, and returns the
    first segment with the producer snapshot written at the roll. ``txn=True`` adds a real
    ``.txnindex`` with two aborted transactions.
    """
    clock = ManualClock()
    counter = iter(range(1_000_000))

    def make(batches: int = 20, records: int = 5, value_size: int = 1000, txn: bool = False,
             topic: str = "tiered", partition: int = 0, topic_id: uuid.UUID | None = None) -> Segment:
        n = next(counter)
        directory = tmp_path / f"segments-{n}" / f"{topic}-{partition}"
        plog = load_partition_log(directory, TopicPartition(topic, partition), LogConfig(), clock, ManualScheduler())
        try:
            for i in range(batches):
                builder = BatchBuilder(producer_id=4000 + n, producer_epoch=0, base_sequence=i * records)
                for j in range(records):
                    builder.append(os.urandom(value_size), key=b"key-%d" % j, timestamp=clock.milliseconds() + i)
                plog.append_as_leader(builder.build(), leader_epoch=0)
            plog.roll()
            segment, next_base = plog.segments[0], plog.segments[1].base_offset
            size, max_ts = segment.size, segment.max_timestamp_so_far
        finally:
            plog.local_log.close_handlers()
        stem = directory / f"{0:020d}"
        txn_path = None
        if txn:
            txn_path = directory / "uploaded.txnindex"
            index = TransactionIndex(txn_path, 0)
            index.append(AbortedTxn(producer_id=7, first_offset=1, last_offset=3, last_stable_offset=1))
            index.append(AbortedTxn(producer_id=8, first_offset=4, last_offset=9, last_stable_offset=4))
            index.close()
        tp = TopicIdPartition(topic_id or uuid.uuid4(), topic, partition)
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp), start_offset=0, end_offset=next_base - 1, max_timestamp_ms=max_ts,
            broker_id=0, event_timestamp_ms=clock.milliseconds(), segment_size_in_bytes=size,
            segment_leader_epochs={0: 0})
        data = LogSegmentData(
            log_segment=stem.with_suffix(".log"), offset_index=stem.with_suffix(".index"),
            time_index=stem.with_suffix(".timeindex"), transaction_index=txn_path,
            producer_snapshot_index=directory / f"{next_base:020d}.snapshot",
            leader_epoch_index=LEADER_EPOCH_CHECKPOINT)
        return Segment(metadata, data)

    return make


def flip(file: Path, at: int) -> None:
    """Damage a stored object the way bit rot does: one bit of the byte at ``at`` flipped, in place."""
    data = bytearray(file.read_bytes())
    data[at] ^= 0x01
    file.write_bytes(bytes(data))
