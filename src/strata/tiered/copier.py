"""Copying rolled segments to the remote tier (Kafka's ``RLMCopyTask``), one partition at a time.

Eligibility (Kafka): a segment is copied once it is not the active one and its whole range is
below the last stable offset (the next segment's base <= LSO), oldest first. Its remote
``end_offset`` is the next base offset minus one, so offset gaps belong to exactly one segment.

State machine per attempt, every attempt with a fresh ``RemoteLogSegmentId``:
COPY_SEGMENT_STARTED (durable before any byte is uploaded) -> RSM copy -> COPY_SEGMENT_FINISHED.
A failed copy is cleaned at once (DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED);
a crash leaves COPY_SEGMENT_STARTED behind, which the next run of the task finds and cleans.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from strata.log.checkpoints import epoch_entries_to_bytes
from strata.log.partition_log import PartitionLog
from strata.log.producer_state import encode_snapshot
from strata.log.segment import LogSegment
from strata.tiered.api import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

log = logging.getLogger(__name__)


class CustomMetadataSizeLimitExceededError(Exception):
    """The RSM returned custom metadata over ``remote.log.metadata.custom.metadata.max.bytes``."""


@dataclass(frozen=True, slots=True)
class CopyCandidate:
    segment: LogSegment
    next_segment_base_offset: int


def candidate_log_segments(plog: PartitionLog, from_offset: int, last_stable_offset: int) -> list[CopyCandidate]:
    """Rolled segments holding offsets >= ``from_offset`` whose next segment starts at or below the LSO."""
    segments = plog.segments
    out = []
    for segment, nxt in zip(segments, segments[1:], strict=False):
        if nxt.base_offset <= from_offset:
            continue  # wholly copied already
        if nxt.base_offset > last_stable_offset:
            break
        out.append(CopyCandidate(segment, nxt.base_offset))
    return out


def build_copy_request(plog: PartitionLog, candidate: CopyCandidate, segment_id: RemoteLogSegmentId,
                       broker_id: int, now_ms: int, scratch_dir: Path) -> tuple[RemoteLogSegmentMetadata,
                                                                                  LogSegmentData]:
    """The metadata and files of one upload; runs on the event loop (it reads the log's state)."""
    segment, next_base = candidate.segment, candidate.next_segment_base_offset
    cache = plog.leader_epoch_cache
    entries = cache.epoch_entries_in_range(segment.base_offset, next_base)
    epochs = {e.epoch: e.start_offset for e in entries}
    if not epochs:  # batches written before any epoch was recorded (epoch -1): Kafka's default epoch 0
        epochs = {0: segment.base_offset}
    snapshot = plog.producer_state.snapshot_file(next_base)
    if snapshot is None or not snapshot.exists():
        # Kafka fails the copy here; the snapshot only serves followers rebuilding producer state,
        # so an empty one (and a warning) keeps the upload - and local retention - moving.
        log.warning("%s: no producer snapshot at %d, uploading an empty one", plog.topic_partition, next_base)
        snapshot = scratch_dir / f"{plog.topic_partition}-{next_base:020d}.snapshot"
        snapshot.write_bytes(encode_snapshot([]))
    txn = segment.txn_index.path
    segment.offset_index.settle()  # a roll's trim may still leave the files at their preallocated size
    segment.time_index.settle()
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=segment_id, start_offset=segment.base_offset, end_offset=next_base - 1,
        max_timestamp_ms=segment.largest_timestamp, broker_id=broker_id, event_timestamp_ms=now_ms,
        segment_size_in_bytes=segment.size, segment_leader_epochs=epochs,
        txn_idx_empty=segment.txn_index.is_empty,
    )
    data = LogSegmentData(
        log_segment=segment.log.path, offset_index=segment.offset_index.path, time_index=segment.time_index.path,
        transaction_index=txn if txn.exists() and txn.stat().st_size > 0 else None,
        producer_snapshot_index=snapshot,
        leader_epoch_index=epoch_entries_to_bytes(cache.epoch_entries_in_range(-1, next_base)),
    )
    return metadata, data


def describe(tp: TopicIdPartition, md: RemoteLogSegmentMetadata) -> str:
    return f"{tp.topic}-{tp.partition} [{md.start_offset}..{md.end_offset}] ({md.segment_size_in_bytes} B)"
