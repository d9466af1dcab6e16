"""Kafka's ``Cleaner``: one cleaning of one log, run on a cleaner thread.

1. **Map** the dirty section ``[first dirty, first uncleanable)``: key -> last offset, skipping
   aborted transactions and markers (:class:`OffsetMap`, bounded; a full map ends the section early).
2. **Group** every segment below the map's end into runs that fit one segment (size, index size,
   relative offsets) and **rewrite** each run into one ``.cleaned`` segment, keeping per batch what
   Kafka's ``MemoryRecords.filterTo`` with the cleaner's ``RecordFilter`` keeps: the latest record of
   each key (records past the map's end are all kept), tombstones until their batch's delete horizon
   (KIP-534: set to now + ``delete.retention.ms`` the first time a batch with tombstones is cleaned),
   transactional data of aborted transactions never, markers once their transaction's data is gone
   and their horizon passed, and the last batch of every live producer even if it ends up empty
   (its sequence and epoch must survive, or an idempotent producer sees OUT_OF_ORDER_SEQUENCE).
   Batches are rewritten with their codec; a batch losing nothing is copied byte for byte.
3. **Swap** the cleaned segment in on the log's thread (``PartitionLog.replace_segments``: Kafka's
   ``.cleaned`` -> ``.swap`` -> live protocol, checked against truncation and retention meanwhile).

Everything here reads rolled segments only, which never change: the log's own thread keeps
appending to the active segment meanwhile.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from strata.common import Clock
from strata.common.crashpoints import crash_point
from strata.log.cleaner.offset_map import OffsetMap
from strata.log.cleaner.remote import RemoteSegmentRef, RemoteTierCleaning
from strata.log.cleaner.transactions import CleanedTransactionMetadata
from strata.log.errors import CleaningAbortedError
from strata.log.files import CLEANED_SUFFIX
from strata.log.segment import INT32_MAX, LogSegment
from strata.log.txn_index import AbortedTxn
from strata.protocol.records import BatchHeader, parse_header
from strata.protocol.records.filtering import (
    RecordSpan,
    delete_horizon_ms,
    empty_batch,
    rebuild_batch,
    records_payload,
    scan_records,
)

if TYPE_CHECKING:
    from strata.log.partition_log import PartitionLog

log = logging.getLogger("strata.log.cleaner")

REMOTE_SCRATCH = "remote-log-scratch"  # under the log dir (the RLM's scratch too): never a partition dir
OUTPUT_CHUNK = 1 << 20  # bytes of retained batches buffered before an append to the cleaned segment


class LastRecord(NamedTuple):
    """Kafka's ``LastRecord``: a live producer's last data offset (None if its last entry is a marker)."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(slots=True)
class CleanerStats:
    start: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    end: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    invalid_messages_read: int = 0
    remote_segments_replaced: int = 0
    remote_bytes_rewritten: int = 0
    buffer_utilization: float = 0.0
    delete_horizon_ms: int | None = None  # the earliest horizon of the batches still holding tombstones/markers

    @property
    def elapsed_s(self) -> float:
        return max((self.end or time.monotonic()) - self.start, 1e-9)

    @property
    def map_elapsed_s(self) -> float:
        return max((self.map_done or self.start) - self.start, 0.0)

    def note_horizon(self, horizon: int) -> None:
        if self.delete_horizon_ms is None or horizon < self.delete_horizon_ms:
            self.delete_horizon_ms = horizon


@dataclass(slots=True)
class LogToClean:
    """A compacted log and its cleanable range, computed on the log's thread."""

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment boundary: nothing at or after it is cleaned
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False
    segments: list[LogSegment] = field(default_factory=list)  # the log's segments when chosen
    # A tiered compacted log led here: its remote segments (offset order) and the local log start then.
    # Empty otherwise (a follower, or an untiered log): only local segments are mapped and cleaned.
    remote: list[RemoteSegmentRef] = field(default_factory=list)
    local_log_start_offset: int = 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


class Throttler:
    """``log.cleaner.io.max.bytes.per.second``: sleep whenever the I/O since the last check ran ahead."""

    def __init__(self, bytes_per_second: float, check_interval_s: float = 0.3,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = bytes_per_second
        self._interval = check_interval_s
        self._clock = clock
        self._sleep = sleep
        self._since = clock()
        self._bytes = 0
        self._lock = threading.Lock()  # shared by the cleaner threads: the rate is for all of them

    def maybe_throttle(self, n: int) -> None:
        if self.rate <= 0 or self.rate >= 1e300:
            return
        with self._lock:
            self._bytes += n
            elapsed = self._clock() - self._since
            if elapsed < self._interval:
                return
            wanted = self._bytes / self.rate
            self._bytes = 0
            pause = wanted - elapsed
        if pause > 0:
            self._sleep(pause)
        with self._lock:
            self._since = self._clock()


def group_segments_by_size(segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[LogSegment]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose total log and index sizes fit one
    segment and whose offsets stay within a relative offset of the group's base."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        log_size = group[0].size
        index_size = group[0].offset_index.size_in_bytes
        time_size = group[0].time_index.size_in_bytes
        while rest:
            nxt = rest[0]
            last_offset = rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable_offset - 1
            if not (log_size + nxt.size <= max_size
                    and index_size + nxt.offset_index.size_in_bytes <= max_index_size
                    and time_size + nxt.time_index.size_in_bytes <= max_index_size
                    and (nxt.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)):
                break
            group.append(rest.pop(0))
            log_size += nxt.size
            index_size += nxt.offset_index.size_in_bytes
            time_size += nxt.time_index.size_in_bytes
        groups.append(group)
    return groups


class Cleaner:
    def __init__(self, cleaner_id: int, offset_map: OffsetMap, throttler: Throttler, clock: Clock,
                 call_on_log_thread: Callable[[Callable[[], object]], object],
                 check_done: Callable[[PartitionLog], None]) -> None:
        """``call_on_log_thread(fn)``: run ``fn`` where the log's state may be touched (the event loop)
        and return its result; ``check_done(log)`` raises :class:`CleaningAbortedError` to stop."""
        self.id = cleaner_id
        self.map = offset_map
        self.throttler = throttler
        self._clock = clock
        self._on_log_thread = call_on_log_thread
        self._check_done = check_done

    # -- one cleaning ----------------------------------------------------------------------------

    def clean(self, ltc: LogToClean) -> tuple[int, CleanerStats]:
        """Clean ``ltc``; returns the offset up to which the log is now clean, and the stats.

        A tiered compacted log led by this broker (``ltc.remote``) is cleaned across both tiers: the map
        covers the dirty range in whichever tier holds it (remote below the local log start), the remote
        segments are rewritten first (offset order, so the transaction state runs forward), then the
        local ones as always. A pass that hit the remote rewrite budget returns the start of the first
        remote segment it left, so the next pass maps from there and no superseded record is forgotten."""
        plog = ltc.log
        now = self._clock.milliseconds()
        stats = CleanerStats()
        segments = ltc.segments
        remote = plog.remote_cleaning if ltc.remote else None
        scratch = plog.dir.parent / REMOTE_SCRATCH / f"cleaner-{self.id}"
        try:
            try:
                if remote is not None:
                    remote.recover()
                    shutil.rmtree(scratch, ignore_errors=True)
                    scratch.mkdir(parents=True, exist_ok=True)
                self.build_offset_map(plog, segments, ltc.first_dirty_offset, ltc.first_uncleanable_offset, stats,
                                      ltc if remote is not None else None, scratch)
                end_offset = self.map.latest_offset + 1
                stats.map_done = time.monotonic()
                if remote is not None:
                    end_offset = self.clean_remote_segments(ltc, remote, end_offset, now, stats, scratch)
            except CleaningAbortedError:
                raise
            except Exception as e:
                if remote is None:
                    raise
                # The store or the metadata failing is no reason to give up on the partition until a restart
                # (what an error in a local cleaning means): this cleaning stops, the next one starts over.
                log.warning("%s: cleaning the remote tier failed, retried at the next cleaning: %s: %s",
                            plog.topic_partition, type(e).__name__, e)
                raise CleaningAbortedError(f"remote tier: {e}") from e
            config = plog.config
            groups = group_segments_by_size([s for s in segments if s.base_offset < end_offset],
                                            config.segment_bytes, config.segment_index_bytes,
                                            ltc.first_uncleanable_offset)
            txn_metadata = CleanedTransactionMetadata()
            for group in groups:
                self.clean_segments(plog, group, now, stats, txn_metadata, ltc.first_uncleanable_offset)
            if remote is not None and remote.can_rewrite():
                remote.clean_offset = max(remote.clean_offset, end_offset)
        finally:
            if remote is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        stats.buffer_utilization = self.map.utilization
        stats.end = time.monotonic()
        return end_offset, stats

    # -- the offset map ----------------------------------------------------------------------------

    def build_offset_map(self, plog: PartitionLog, segments: Sequence[LogSegment], start: int, end: int,
                         stats: CleanerStats, tiered: LogToClean | None = None, scratch: Path | None = None) -> None:
        """Map the keys of ``[start, end)``. Offsets below ``start`` count as mapped (they were cleaned
        before), so a cleaning with an empty dirty section still rewrites the clean section - what
        removes tombstones whose delete horizon has passed when no new data arrives.

        ``tiered``: the part of the range below the local log start is read from the remote segments
        (downloaded one at a time into ``scratch``)."""
        m = self.map
        m.clear()
        m.update_latest_offset(start - 1)
        dirty = [s for s in segments if s.base_offset < end and _next_base(segments, s, end) > start]
        txn_metadata = CleanedTransactionMetadata()
        remote = plog.remote_cleaning if tiered is not None else None
        txn_metadata.add_aborted_transactions(_aborted_transactions(plog, remote, start, end))
        if remote is not None and tiered is not None and scratch is not None:
            local_start = tiered.local_log_start_offset
            for ref in tiered.remote:
                if ref.start_offset >= min(end, local_start):
                    break
                if ref.end_offset < start:
                    continue
                segment = remote.download(ref, scratch)
                try:
                    full = self._map_segment(plog, segment, start, min(ref.end_offset + 1, end), txn_metadata,
                                             stats)
                finally:
                    segment.close_handlers()
                    segment.delete_if_exists()
                if full:
                    log.debug("%s: offset map full in remote segment %d", plog.topic_partition, ref.start_offset)
                    return
        for i, segment in enumerate(dirty):
            nxt = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            if self._map_segment(plog, segment, start, nxt, txn_metadata, stats):
                log.debug("%s: offset map full in segment %d", plog.topic_partition, segment.base_offset)
                return

    def _map_segment(self, plog: PartitionLog, segment: LogSegment, start: int, next_start: int,
                     txn_metadata: CleanedTransactionMetadata, stats: CleanerStats) -> bool:
        """Returns True when the map filled up inside this segment."""
        m = self.map
        position = segment.offset_index.lookup(start).position if start > segment.base_offset else 0
        for _pos, header, batch in segment.log.iter_batches(position, verify_crc=False):
            if header.base_offset >= next_start:
                break
            self._check_done(plog)
            stats.map_bytes_read += header.size
            self.throttler.maybe_throttle(header.size)
            if header.is_control:
                txn_metadata.on_control_batch_read(header, _control_key(header, batch))
                stats.map_messages_read += 1
            elif txn_metadata.on_batch_read(header):
                stats.map_messages_read += header.records_count
            else:
                base = header.base_offset
                spans = scan_records(header, records_payload(batch, 0, header))
                stats.map_messages_read += len(spans)
                entries = [(span[2], base + span[0]) for span in spans
                           if span[2] is not None and base + span[0] >= start]
                if not m.put_all(entries):
                    return True
            if header.last_offset >= start:
                m.update_latest_offset(header.last_offset)
        m.update_latest_offset(next_start - 1)  # offsets compacted away at the end of the segment
        return False

    # -- rewriting remote segments (the leader of a tiered compacted log) --------------------------

    def clean_remote_segments(self, ltc: LogToClean, remote: RemoteTierCleaning, end_offset: int, now_ms: int,
                              stats: CleanerStats, scratch: Path) -> int:
        """Clean every remote segment below ``end_offset`` with the map; upload those that changed as new
        segments (``remote.replace``). Returns the offset the log is clean below: ``end_offset``, or the
        start of the first segment left when the pass's rewrite budget ran out."""
        plog = ltc.log
        if not remote.can_rewrite():
            return min(end_offset, ltc.local_log_start_offset)  # leadership moved: the local part only
        last_records = self._on_log_thread(lambda: last_records_of_active_producers(plog))
        assert isinstance(last_records, dict)
        txn_metadata = CleanedTransactionMetadata()
        budget = remote.max_rewrite_bytes_per_pass
        rewritten = 0
        for ref in ltc.remote:
            if ref.start_offset >= end_offset:
                break
            if rewritten >= budget:
                log.info("%s: remote rewrite budget of %d bytes used: cleaning resumes at offset %d next pass",
                         plog.topic_partition, budget, ref.start_offset)
                return ref.start_offset
            self._check_done(plog)
            source = remote.download(ref, scratch)
            cleaned: LogSegment | None = None
            try:
                txn_metadata.cleaned_index = []
                txn_metadata.add_aborted_transactions(
                    _aborted_transactions(plog, remote, ref.start_offset, ref.end_offset + 1))
                cleaned = LogSegment(scratch, ref.start_offset, plog.config, self._clock, create=True,
                                     suffix=CLEANED_SUFFIX)
                changed, last_header = self._clean_into(plog, source, cleaned, now_ms, stats, txn_metadata,
                                                        last_records, ltc.first_uncleanable_offset)
                if not changed:
                    continue
                if cleaned.size == 0 and last_header is not None:
                    # Everything went: an empty batch keeps the segment's last offset, so the range stays
                    # covered (a reader skips it; a hole in the remote metadata would be out of range).
                    piece = empty_batch(last_header)
                    cleaned.append(piece, [(0, parse_header(piece, 0))])
                for txn in txn_metadata.cleaned_index:
                    cleaned.txn_index.append(txn)
                cleaned.on_become_inactive_segment()
                cleaned.flush()
                if _same_bytes(source, cleaned):
                    # An earlier cleaning left the segment as this one would (the empty batch of an emptied
                    # segment, or of a producer's last batch, is rebuilt identical): no upload. Without this
                    # every cleaning uploaded such segments again, and a cleaning stopped by the rewrite budget
                    # right after one never got further.
                    continue
                self._check_done(plog)
                remote.replace(ref, cleaned)
                rewritten += cleaned.size
                stats.remote_segments_replaced += 1
                stats.remote_bytes_rewritten += cleaned.size
            finally:
                source.close_handlers()
                source.delete_if_exists()
                if cleaned is not None:
                    cleaned.close_handlers()
                    cleaned.delete_if_exists()
        return end_offset

    # -- rewriting a group of segments -------------------------------------------------------------

    def clean_segments(self, plog: PartitionLog, group: list[LogSegment], now_ms: int, stats: CleanerStats,
                       txn_metadata: CleanedTransactionMetadata, upper_bound_offset: int) -> None:
        """Rewrite ``group`` into one ``.cleaned`` segment and swap it in on the log's thread."""
        base = group[0].base_offset
        for stale in LogSegment.file_paths(plog.dir, base):
            Path(f"{stale}{CLEANED_SUFFIX}").unlink(missing_ok=True)
        cleaned = LogSegment(plog.dir, base, plog.config, self._clock, create=True, suffix=CLEANED_SUFFIX)
        sizes = [s.size for s in group]
        swap_started = False
        try:
            txn_metadata.cleaned_index = []
            last_records = self._on_log_thread(lambda: last_records_of_active_producers(plog))
            assert isinstance(last_records, dict)
            for i, segment in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else segment.read_next_offset()
                txn_metadata.add_aborted_transactions(plog.collect_aborted_transactions(segment.base_offset, upper))
                self._clean_into(plog, segment, cleaned, now_ms, stats, txn_metadata, last_records,
                                 upper_bound_offset)
            for txn in txn_metadata.cleaned_index:
                cleaned.txn_index.append(txn)
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            mtime = os.stat(group[-1].log.path).st_mtime
            os.utime(cleaned.log.path, (mtime, mtime))
            crash_point("cleaner.before_swap")  # the whole .cleaned segment on disk, the old ones live
            self._check_done(plog)

            def swap() -> None:
                nonlocal swap_started
                plog.check_segments_unchanged(group, sizes)
                swap_started = True  # from here the files are (becoming) the log's: never delete them
                plog.replace_segments(cleaned, group, sizes)

            self._on_log_thread(swap)
        except BaseException:
            if not swap_started:
                cleaned.close_handlers()
                cleaned.delete_if_exists()
            raise

    def _clean_into(self, plog: PartitionLog, source: LogSegment, dest: LogSegment, now_ms: int,
                    stats: CleanerStats, txn_metadata: CleanedTransactionMetadata,
                    last_records: dict[int, LastRecord], upper_bound_offset: int) -> tuple[bool, BatchHeader | None]:
        """Filter ``source`` into ``dest``; returns whether anything changed (a batch dropped or rebuilt: a
        remote segment is uploaded again only then) and the source's last batch header."""
        changed = False
        last_header: BatchHeader | None = None
        delete_retention_ms = plog.config.delete_retention_ms
        m = self.map
        latest = m.latest_offset
        lookup = m.lookup
        out: list[bytes | memoryview] = []
        out_headers: list[tuple[int, BatchHeader]] = []
        out_size = 0
        for _pos, header, batch in source.log.iter_batches(0, verify_crc=False):
            self._check_done(plog)
            last_header = header
            stats.bytes_read += header.size
            self.throttler.maybe_throttle(header.size)
            # Kafka's checkBatchRetention
            if header.is_control:
                can_discard = txn_metadata.on_control_batch_read(header, _control_key(header, batch))
                horizon = delete_horizon_ms(header)
                discard_records = can_discard and horizon is not None and horizon <= now_ms
            else:
                can_discard = txn_metadata.on_batch_read(header)
                discard_records = can_discard
            retain_empty = (header.producer_id >= 0 and _is_last_batch_of_producer(header, last_records)) \
                or header.next_offset == upper_bound_offset
            if discard_records and not retain_empty:
                stats.messages_read += header.records_count
                changed = True
                continue
            payload = records_payload(batch, 0, header)
            spans = list(scan_records(header, payload))
            stats.messages_read += len(spans)
            horizon = delete_horizon_ms(header)
            retain_deletes = horizon is None or now_ms < horizon
            retained: list[RecordSpan] = []
            tombstones = False
            if not discard_records:
                base = header.base_offset
                control = header.is_control
                for span in spans:  # (offset delta, timestamp, key, has value, ...): see RecordSpan
                    if not control:
                        offset = base + span[0]
                        if offset <= latest:  # Kafka's shouldRetainRecord
                            key = span[2]
                            if key is None:
                                stats.invalid_messages_read += 1
                                continue
                            if offset < lookup(key, -1) or not (span[3] or retain_deletes):
                                continue
                    retained.append(span)
                    if not span[3]:
                        tombstones = True
            piece: bytes | memoryview
            if retained:
                marker_for_empty_txn = can_discard and header.is_control
                needs_horizon = (tombstones or marker_for_empty_txn) and horizon is None
                if needs_horizon:
                    horizon = now_ms + delete_retention_ms
                if len(retained) == len(spans) and not needs_horizon:
                    piece = batch
                else:
                    piece = rebuild_batch(header, payload, retained, horizon if needs_horizon else None)
                if horizon is not None and (tombstones or header.is_control):
                    stats.note_horizon(horizon)
            elif retain_empty:
                piece = empty_batch(header)
            else:
                changed = True
                continue
            changed = changed or piece is not batch
            new_header = header if piece is batch else parse_header(piece, 0)
            out.append(piece)
            out_headers.append((out_size, new_header))
            out_size += len(piece)
            stats.messages_written += len(retained)
            if out_size >= OUTPUT_CHUNK:
                self._append(dest, out, out_headers, stats)
                out, out_headers, out_size = [], [], 0
        if out:
            self._append(dest, out, out_headers, stats)
        return changed, last_header

    def _append(self, dest: LogSegment, out: list[bytes | memoryview], headers: list[tuple[int, BatchHeader]],
                stats: CleanerStats) -> None:
        data = b"".join(out)
        dest.append(data, headers)
        crash_point("cleaner.clean.after_append")  # a .cleaned segment half written
        stats.bytes_written += len(data)
        self.throttler.maybe_throttle(len(data))


def _same_bytes(a: LogSegment, b: LogSegment) -> bool:
    """Whether two segments' ``.log`` files hold the same bytes (read in pieces: segments can be large)."""
    if a.size != b.size:
        return False
    with open(a.log.path, "rb") as fa, open(b.log.path, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def _aborted_transactions(plog: PartitionLog, remote: RemoteTierCleaning | None, start: int,
                          end: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start, end)`` from the local transaction indexes and, for a tiered
    log, the remote ones (a transaction may begin in one tier and be aborted in the other)."""
    found = plog.collect_aborted_transactions(start, end)
    if remote is not None:
        found = list(dict.fromkeys([*remote.aborted_transactions(start, end), *found]))
        found.sort(key=lambda t: t.first_offset)
    return found


def _next_base(segments: Sequence[LogSegment], segment: LogSegment, default: int) -> int:
    later = [s.base_offset for s in segments if s.base_offset > segment.base_offset]
    return min(later) if later else default


def _control_key(header: BatchHeader, batch: memoryview) -> bytes | None:
    if header.records_count == 0:
        return None
    for span in scan_records(header, records_payload(batch, 0, header)):
        return span.key
    return None


def _is_last_batch_of_producer(header: BatchHeader, last_records: dict[int, LastRecord]) -> bool:
    """Kafka's ``isBatchLastRecordOfProducer``: the batch holding a live producer's last sequence, or,
    when its last entry is a marker, the marker carrying its epoch (needed to keep fencing it)."""
    last = last_records.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def last_records_of_active_producers(plog: PartitionLog) -> dict[int, LastRecord]:
    """Read on the log's thread: each live producer's last data offset and epoch."""
    out = {}
    for pid, entry in plog.producer_state.producers.items():
        offset = entry.last_data_offset
        out[pid] = LastRecord(offset if offset >= 0 else None, entry.producer_epoch)
    return out
