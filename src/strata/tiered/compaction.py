"""Compacted topics in tiered storage (KIP-1272's ground): the remote tier as the log cleaner sees it.

Kafka refuses ``remote.storage.enable`` on compacted topics, so changelog and CDC topics keep every byte
on broker disks. Strata tiers them: rolled segments are uploaded as they are (the cleaner never rewrites
a local segment the copier has not uploaded yet, so an upload never races a swap), and the log cleaner
of the partition's leader then cleans the remote segments like local ones - its offset map covers the
dirty range in whichever tier holds it - and :class:`RemoteCompaction` replaces each remote segment that
lost records:

1. the cleaned copy is uploaded under a new ``RemoteLogSegmentId`` covering the same offsets and leader
   epochs (COPY_SEGMENT_STARTED -> upload -> COPY_SEGMENT_FINISHED, the copier's own path, cluster checks
   included); from COPY_SEGMENT_FINISHED on, the metadata resolves the range to the new segment;
2. the old segment is retired through the state machine: DELETE_SEGMENT_STARTED at once, then remote
   retention's next run deletes it from the store and writes DELETE_SEGMENT_FINISHED (as it does for any
   delete left half done), so a segment has one deleter and a reader that resolved it just before the
   switch has a task interval to finish its read.

So a reader always finds exactly one complete version of every range: the old one until step 1 ends,
the new one after. A reader that resolved the old segment just before may find it deleted under it and
retries the fetch (the consumer sees a retriable error, never a gap).

**Crashes and leader changes** (``recover`` runs before every cleaning, on the leader):

* killed during the upload: a COPY_SEGMENT_STARTED segment stays; the copy task deletes dangling uploads
  on its next run (the cleaner's rewrites in flight are registered, so a live one is never taken for
  dangling);
* killed between the new segment's COPY_SEGMENT_FINISHED and the old one's DELETE_SEGMENT_STARTED: two
  finished segments cover the range and the metadata resolves it to the new one; ``recover`` deletes the
  superseded one;
* killed after it: DELETE_SEGMENT_STARTED, which remote retention deletes as always.

A new leader (or a restarted one) starts with ``clean_offset`` at the log start: its first cleaning maps
the whole log once and finishes whatever rewrite the previous leader left undone.

Pacing: every upload waits on the KIP-956 copy quota like the copier's, and a cleaning rewrites at most
``remote.log.cleaner.max.rewrite.bytes.per.pass`` (the pass then ends at the first segment left, which
the next pass maps again). Cost shows in ``RemoteLogCleanerSegmentsReplacedPerSec`` and
``RemoteLogCleanerBytesRewrittenPerSec``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from strata.common import Clock
from strata.common.crashpoints import crash_point
from strata.log.cleaner.remote import RemoteSegmentRef
from strata.log.errors import CleaningAbortedError
from strata.log.partition_log import PartitionLog
from strata.log.segment import LogSegment
from strata.log.txn_index import AbortedTxn
from strata.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
)
from strata.tiered.copier import describe
from strata.tiered.lineage import build_filtered_leader_epoch_map, is_remote_segment_within_leader_epochs

if TYPE_CHECKING:
    from strata.tiered.manager import RemoteLogManager

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
REWRITE = "rewrite"  # the detail of the crash points a rewrite passes (copy.after_upload/rewrite, ...)
_STREAM_CHUNK = 1 << 20


class RemoteCompaction:
    """One tiered compacted partition's remote tier, for its log cleaner (``PartitionLog.remote_cleaning``)."""

    def __init__(self, rlm: RemoteLogManager, tip: TopicIdPartition, plog: PartitionLog, clock: Clock,
                 is_leader: Callable[[], bool], loop: asyncio.AbstractEventLoop) -> None:
        self._rlm = rlm
        self.tip = tip
        self._plog = plog
        self._clock = clock
        self._is_leader = is_leader
        self._loop = loop
        self.clean_offset = plog.log_start_offset  # nothing vouched for yet: the first cleaning maps it all
        self.max_rewrite_bytes_per_pass = rlm.config.cleaner_max_rewrite_bytes_per_pass
        self._refs: list[RemoteSegmentRef] = []
        # Rewrites in flight (their COPY_SEGMENT_STARTED must not be taken for dangling by the copy task).
        self.rewriting: set[RemoteLogSegmentId] = set()
        self.lock = threading.Lock()

    # -- what the cleaner asks -----------------------------------------------------------------------

    def can_rewrite(self) -> bool:
        return self._is_leader() and self._plog.remote_cleaning is self

    def segments(self) -> list[RemoteSegmentRef]:
        """Readable segments in offset order (the log's thread): COPY_SEGMENT_FINISHED, in the lineage, and
        for a range two segments cover (a crash between a rewrite's two halves) only the one the metadata
        resolves it to."""
        plog, rlmm = self._plog, self._rlm.rlmm
        lineage = build_filtered_leader_epoch_map(
            [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.epoch_entries()])
        finished = sorted((md for md in rlmm.list_remote_log_segments(self.tip)
                           if md.state is S.COPY_SEGMENT_FINISHED
                           and is_remote_segment_within_leader_epochs(md, plog.log_end_offset, lineage)),
                          key=lambda md: (md.start_offset, md.end_offset))
        refs: list[RemoteSegmentRef] = []
        for md in finished:
            if refs and refs[-1].start_offset == md.start_offset:
                resolved = self._resolve(md)
                if resolved is None or resolved.remote_log_segment_id != md.remote_log_segment_id:
                    continue
                refs.pop()
            refs.append(RemoteSegmentRef(md.start_offset, md.end_offset, md.segment_size_in_bytes,
                                         md.max_timestamp_ms, md))
        self._refs = refs
        return refs

    def download(self, ref: RemoteSegmentRef, directory: Path) -> LogSegment:
        """The segment's log, offset, time and transaction indexes as a local (read-only) segment."""
        md = _md(ref)
        rsm = self._rlm.rsm
        stem = f"{md.start_offset:020d}"
        _copy_stream(rsm.fetch_log_segment(md, 0), directory / f"{stem}.log")
        _copy_stream(rsm.fetch_index(md, IndexType.OFFSET), directory / f"{stem}.index")
        _copy_stream(rsm.fetch_index(md, IndexType.TIMESTAMP), directory / f"{stem}.timeindex")
        if not md.txn_idx_empty:
            try:
                _copy_stream(rsm.fetch_index(md, IndexType.TRANSACTION), directory / f"{stem}.txnindex")
            except RemoteResourceNotFoundError:
                pass
        return LogSegment(directory, md.start_offset, self._plog.config, self._clock)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """From the remote transaction indexes, the segment holding ``start_offset`` on, until complete."""
        cache = self._rlm.index_cache
        if cache is None:
            return []
        found: dict[AbortedTxn, None] = {}
        for ref in self._refs:
            md = _md(ref)
            if md.end_offset < start_offset or md.txn_idx_empty:
                continue
            txns, complete = cache.collect_aborted_txns(md, start_offset, upper_bound_offset)
            found.update(dict.fromkeys(txns))
            if complete:
                break
        return list(found)

    def replace(self, ref: RemoteSegmentRef, cleaned: LogSegment) -> None:
        """Upload ``cleaned`` as the new version of ``ref``'s range, then retire the old segment."""
        old = _md(ref)
        rlm = self._rlm
        if not self.can_rewrite():
            raise CleaningAbortedError(f"{self.tip}: no longer the leader, remote rewrite abandoned")
        size = cleaned.size
        self._acquire_copy_quota(size)
        segment_id = RemoteLogSegmentId.generate_new(self.tip)
        now = self._clock.milliseconds()
        largest = cleaned.largest_timestamp
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id, start_offset=old.start_offset, end_offset=old.end_offset,
            max_timestamp_ms=largest if largest >= 0 else old.max_timestamp_ms, broker_id=rlm.broker_id,
            event_timestamp_ms=now, segment_size_in_bytes=size, segment_leader_epochs=old.segment_leader_epochs,
            txn_idx_empty=cleaned.txn_index.is_empty)
        scratch = cleaned.dir / f"rewrite-{segment_id.id.hex}"
        scratch.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.lock:
            self.rewriting.add(segment_id)
        try:
            snapshot = scratch / "producer.snapshot"
            _copy_stream(rlm.rsm.fetch_index(old, IndexType.PRODUCER_SNAPSHOT), snapshot)
            epochs = rlm.rsm.fetch_index(old, IndexType.LEADER_EPOCH)
            try:
                leader_epoch_index = epochs.read()
            finally:
                epochs.close()
            txn = cleaned.txn_index.path
            data = LogSegmentData(
                log_segment=cleaned.log.path, offset_index=cleaned.offset_index.path,
                time_index=cleaned.time_index.path,
                transaction_index=txn if txn.exists() and txn.stat().st_size > 0 else None,
                producer_snapshot_index=snapshot, leader_epoch_index=leader_epoch_index)
            rlm.stats.mark("RemoteCopyRequestsPerSec", self.tip.topic)
            rlm._copy_sync(md, data, REWRITE)
            rlm.stats.mark("RemoteCopyBytesPerSec", self.tip.topic, size)
        finally:
            with self.lock:
                self.rewriting.discard(segment_id)
            shutil.rmtree(scratch, ignore_errors=True)
        # From here the metadata resolves the range to the new segment: retire the old one. A crash now
        # leaves both finished, and recover() retires the superseded one. The store delete is remote
        # retention's (it retries DELETE_SEGMENT_STARTED segments every task interval): one deleter per
        # segment, and a reader that resolved the old segment just before has that long to finish.
        crash_point("remote.rewrite.before_retire")
        rlm._update_state(old, S.DELETE_SEGMENT_STARTED)
        rlm.stats.mark("RemoteLogCleanerSegmentsReplacedPerSec", self.tip.topic)
        rlm.stats.mark("RemoteLogCleanerBytesRewrittenPerSec", self.tip.topic, size)
        log.info("rewrote compacted %s as %s (%d -> %d bytes) in %.0f ms", describe(self.tip, old),
                 segment_id.id, old.segment_size_in_bytes, size, (time.monotonic() - started) * 1e3)

    def recover(self) -> None:
        """Delete finished segments that a later one superseded (a rewrite interrupted between its halves)."""
        if not self.can_rewrite():
            return
        rlm = self._rlm
        sync = getattr(rlm.rlmm, "sync", None)
        if sync is not None:
            sync(self.tip)
        for md in list(rlm.rlmm.list_remote_log_segments(self.tip)):
            if md.state is not S.COPY_SEGMENT_FINISHED:
                continue
            resolved = self._resolve(md)
            if resolved is None or resolved.remote_log_segment_id == md.remote_log_segment_id:
                continue
            if resolved.start_offset <= md.start_offset and resolved.end_offset >= md.end_offset:
                log.info("retiring %s: superseded by %s (a rewrite was interrupted)", describe(self.tip, md),
                         resolved.remote_log_segment_id.id)
                rlm._update_state(md, S.DELETE_SEGMENT_STARTED)

    # -- helpers ---------------------------------------------------------------------------------------

    def _resolve(self, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        epoch = next(iter(md.segment_leader_epochs))
        return self._rlm.rlmm.remote_log_segment_metadata(self.tip, epoch, md.start_offset)

    def _acquire_copy_quota(self, size: int) -> None:
        """KIP-956: a rewrite is an upload, so it waits on the broker's copy quota like the copier."""
        quota = self._rlm.copy_quota
        if quota.unbounded:
            return
        future = asyncio.run_coroutine_threadsafe(
            quota.acquire(size, lambda s: self._rlm.stats.record_copy_throttle(s * 1e3)), self._loop)
        future.result()


def _md(ref: RemoteSegmentRef) -> RemoteLogSegmentMetadata:
    md = ref.handle
    assert isinstance(md, RemoteLogSegmentMetadata)
    return md


def _copy_stream(stream, path: Path) -> None:  # type: ignore[no-untyped-def]
    """Write a store stream to ``path`` (chunked: a segment may be large)."""
    try:
        with open(path, "wb") as out:
            while chunk := stream.read(_STREAM_CHUNK):
                out.write(chunk)
    finally:
        stream.close()
