"""The remote read path: Kafka's ``RemoteLogManager.read`` and the remote half of ListOffsets by timestamp.

Everything here is synchronous and blocks on the store: the broker runs it on the remote reader
thread pool (``remote.log.reader.threads``), never on the event loop. Inputs that the event loop owns
(the leader-epoch history) are passed in as snapshots, so nothing here reads mutable broker state
from a worker thread.

Two deliberate departures from Kafka:

* **Every segment read is a bounded range.** Kafka calls ``fetchLogSegment(md, startPos)`` with no
  end and stops reading the stream once ``maxBytes`` is filled, so an object store cannot bound the
  GET (reference §7.1 item 3). Here one request covers ``[startPos, max(nextPos, startPos) +
  maxBytes + scan slack)``, where ``nextPos`` is the index entry after ``startPos``'s: offset index
  entries are keyed by a batch's *last* offset, so a fetch at a batch boundary (every consumer fetch
  after the first) looks up the previous batch, and the batch holding the offset starts no later
  than ``nextPos``. The slack covers the header scan past the last index entry. A second, exact GET
  is made only when the first batch is larger than the window (``min_one_message``) or the skip was
  longer than expected (an ``index.interval.bytes`` above the slack, past the last entry).
* **No copies on the reader thread.** A read goes straight into one preallocated buffer through the
  stream's ``readinto``, and the records are returned as a read-only view of it. A stream that
  already holds the whole range in memory (the S3 RSM's: one ranged GET into a Rust-owned buffer)
  may offer ``read_view(n)``, up to ``n`` bytes as a read-only ``memoryview`` (fewer only at the end
  of the stream); that buffer then serves as the window itself, without even the one copy.
* **Whole batches only**, as Strata's local read returns: the bytes after the last whole batch within
  ``max_bytes`` are dropped instead of being sent as a partial batch. With ``min_one_message`` the
  first batch is returned whole even when it alone exceeds ``max_bytes``.

Batches stay opaque: only the 61-byte headers are parsed (``parse_header``), except that the
timestamp search decodes the records of the one batch that holds the answer, as the local
``LogSegment.find_offset_by_timestamp`` does.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from strata.errors import OffsetOutOfRangeError, TruncatedBatchError
from strata.log.segment import TimestampAndOffset
from strata.log.txn_index import AbortedTxn
from strata.protocol.records import RECORD_BATCH_OVERHEAD, BatchHeader, decode_batch, parse_header
from strata.tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from strata.tiered.index_cache import RemoteIndexCache

DEFAULT_SCAN_SLACK_BYTES = 16 * 1024
"""Extra bytes per read window: covers the skip from an index entry to the fetch offset (entries are
``index.interval.bytes`` = 4 KiB apart by default) and header scans for timestamps."""

LeaderEpochs = Sequence[tuple[int, int]]
"""``(epoch, start_offset)`` pairs ascending, e.g. ``LeaderEpochFileCache.epoch_entries()``."""


@dataclass(frozen=True, slots=True)
class RemoteFetchResult:
    """What a remote read returns, enough for the fetch response and the read_committed follow-up.

    ``records`` is whole batches from one remote segment (empty when nothing qualifies): a read-only
    ``memoryview`` of the buffer the store read into, so the bytes are never copied on the reader
    thread (``b""`` when empty). Consumers need only ``len()`` and the buffer protocol (the fetch
    handler splices it into the response or takes ``bytes()`` of a small one); the view keeps the
    whole read window alive, so do not hold on to it past the response.
    ``first_batch_offset`` is the base offset of the first batch, or the fetch offset when empty.
    ``aborted_txns`` is None unless the read was read_committed. If ``aborted_txns_complete`` is
    False, the remote txn indexes ran out before proving completeness (Kafka then goes on into the
    local segments): the caller must add the local log's aborted transactions in
    ``[first_batch_offset, upper_bound_offset)`` (``PartitionLog.collect_aborted_transactions``), on
    the thread that owns the log.
    """

    records: bytes | memoryview
    first_batch_offset: int
    aborted_txns: list[AbortedTxn] | None = None
    aborted_txns_complete: bool = True
    upper_bound_offset: int = -1
    remote_segment: RemoteLogSegmentMetadata | None = None
    start_position: int = 0


def epoch_for_offset(leader_epochs: LeaderEpochs, offset: int) -> int | None:
    """``LeaderEpochFileCache.epoch_for_offset`` on a snapshot: the epoch of the last entry starting at or
    before ``offset``; None before the first entry."""
    starts = [start for _, start in leader_epochs]
    i = bisect.bisect_right(starts, offset)
    return leader_epochs[i - 1][0] if i else None


def offset_out_of_range(tp: TopicIdPartition, offset: int, epoch: int | None) -> OffsetOutOfRangeError:
    """Kafka's message, word for word, so operators can grep logs across implementations."""
    epoch_str = str(epoch) if epoch is not None else "NOT AVAILABLE"
    return OffsetOutOfRangeError(
        f"Received request for offset {offset} for leader epoch {epoch_str} and partition "
        f"{tp.topic}-{tp.partition} which does not exist in remote tier."
    )


def fetch_remote_segment_bytes(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, start: int,
                               end: int) -> memoryview:
    """Bytes ``[start, end)`` of a remote segment in one bounded ranged read (fewer at the segment end),
    as a read-only view of the buffer they were read into (the stream's own with ``read_view``)."""
    if end <= start:
        return memoryview(b"")
    stream = rsm.fetch_log_segment(md, start, end - 1)  # the RSM API's end_position is inclusive
    try:
        read_view = getattr(stream, "read_view", None)
        if read_view is not None:
            return memoryview(read_view(end - start)).cast("B").toreadonly()[:end - start]
        buf = bytearray(end - start)
        got = _read_into(stream, memoryview(buf))
        return memoryview(buf).toreadonly()[:got]
    finally:
        stream.close()


def read_segment_range_into(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, start: int,
                            out: memoryview) -> int:
    """Fill ``out`` with the segment's bytes from ``start`` in one bounded ranged read; returns how
    many bytes came (fewer only at the segment end).

    ``end_position`` in the RSM API is inclusive, hence ``start + len(out) - 1``.
    """
    if not len(out):
        return 0
    stream = rsm.fetch_log_segment(md, start, start + len(out) - 1)
    try:
        return _read_into(stream, out)
    finally:
        stream.close()


def _read_into(stream: BinaryIO, out: memoryview) -> int:
    """Read until ``out`` is full or the stream ends; returns the bytes read.

    ``readinto`` lets the stream write straight into ``out`` (no per-read allocation, no join); a
    stream without it (a third-party RSM's) falls back to ``read``, one copy per chunk. Streams may
    return short reads; a store that ignores the range is cut off at ``len(out)``.
    """
    n = len(out)
    got = 0
    readinto = getattr(stream, "readinto", None)
    while got < n:
        if readinto is not None:
            k = readinto(out[got:]) or 0
        else:
            chunk = stream.read(n - got)
            k = min(len(chunk), n - got)
            out[got:got + k] = memoryview(chunk)[:k]
        if k <= 0:
            break
        got += k
    return got


class _SegmentWindow:
    """A contiguous window of one remote segment's bytes, grown by bounded ranged reads on demand.

    ``data`` is a read-only view of a buffer the store read straight into; slices of it are handed
    out as records, so a window's buffer is never written after the read that filled it.
    """

    def __init__(self, rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata) -> None:
        self._rsm = rsm
        self._md = md
        size = md.segment_size_in_bytes
        self.segment_size = size if size > 0 else None  # unknown size: rely on short reads
        self.start = 0
        self.data = memoryview(b"")
        self._eof_at: int | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.data)

    def at_eof(self, position: int) -> bool:
        limit = self._eof_at if self._eof_at is not None else self.segment_size
        return limit is not None and position >= limit

    def ensure(self, position: int, end: int, read_ahead_to: int = 0) -> bool:
        """Make ``[position, end)`` available, fetching up to ``read_ahead_to`` if a fetch is needed.

        Bytes before ``position`` are dropped when a fetch happens (scans only move forward). Returns
        False when the segment ends before ``end``; whatever exists up to there is then available.
        """
        if self.start <= position and end <= self.end:
            return True
        limit = self._eof_at if self._eof_at is not None else self.segment_size
        want = end if limit is None else min(end, limit)
        if self.start <= position and want <= self.end:
            return False  # the segment ends first and all of it is here
        if not self.start <= position <= self.end:
            self.start, self.data = position, memoryview(b"")
        fetch_from = self.end
        fetch_to = max(want, read_ahead_to)
        if limit is not None:
            fetch_to = min(fetch_to, limit)
        if fetch_to > fetch_from:
            self._fetch(position, fetch_from, fetch_to)
        return self.end >= end

    def _fetch(self, position: int, fetch_from: int, fetch_to: int) -> None:
        """Read ``[fetch_from, fetch_to)`` into a new buffer behind the kept ``[position, fetch_from)``.

        The store writes into the buffer directly; only the kept bytes are copied (a second read,
        which the first read's sizing makes rare).
        """
        keep = self.data[position - self.start:]
        if len(keep):
            buf = bytearray(len(keep) + fetch_to - fetch_from)
            with memoryview(buf) as view:
                view[:len(keep)] = keep
                got = read_segment_range_into(self._rsm, self._md, fetch_from, view[len(keep):])
            data = memoryview(buf).toreadonly()[:len(keep) + got]
        else:  # the common case: the window is this one read, in whatever buffer it arrived
            data = fetch_remote_segment_bytes(self._rsm, self._md, fetch_from, fetch_to)
            got = len(data)
        if got < fetch_to - fetch_from:
            self._eof_at = fetch_from + got
        self.data = data
        self.start = position

    def load(self, position: int, end: int) -> None:
        """One ranged read of ``[position, end)`` (clipped to the segment) before a scan from ``position``."""
        self.ensure(position, position + 1, end)

    def view(self, position: int, end: int) -> memoryview:
        return self.data[position - self.start:end - self.start]

    def header(self, position: int, read_ahead: int) -> BatchHeader | None:
        """The batch header at ``position``, None at the end of the segment's data."""
        if self.at_eof(position):
            return None
        if not self.ensure(position, position + RECORD_BATCH_OVERHEAD, position + read_ahead):
            if self.end <= position:
                return None
            raise TruncatedBatchError(
                f"remote segment {self._md.remote_log_segment_id} ends inside a batch header", position
            )
        return parse_header(self.data, position - self.start, require_whole_batch=False)

    def headers(self, position: int, read_ahead: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` to the end of the segment."""
        while True:
            header = self.header(position, read_ahead)
            if header is None:
                return
            yield position, header
            position += header.size


class RemoteLogReader:
    """Serves reads and timestamp lookups from remote segments (one per broker, shared by threads)."""

    def __init__(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, index_cache: RemoteIndexCache,
                 *, scan_slack_bytes: int = DEFAULT_SCAN_SLACK_BYTES) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self.scan_slack_bytes = max(scan_slack_bytes, RECORD_BATCH_OVERHEAD)

    # -- fetch ---------------------------------------------------------------------------------

    def read(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs, fetch_offset: int, max_bytes: int,
             min_one_message: bool, read_committed: bool) -> RemoteFetchResult:
        """Kafka's ``RemoteLogManager.read`` for one partition.

        Raises OffsetOutOfRangeError when no remote segment holds ``fetch_offset`` in its epoch.
        ``max_bytes`` is already ``min(fetch max bytes, partition max bytes)``.
        """
        if max_bytes < 0:
            raise ValueError(f"invalid max bytes {max_bytes} for a remote read of {tp}")
        epoch = epoch_for_offset(leader_epochs, fetch_offset)
        md = self.rlmm.remote_log_segment_metadata(tp, epoch, fetch_offset) if epoch is not None else None
        if md is None:
            raise offset_out_of_range(tp, fetch_offset, epoch)
        empty_txns: list[AbortedTxn] | None = [] if read_committed else None
        read_ahead = max_bytes + self.scan_slack_bytes
        # A segment may hold no batch at or after the offset (compaction, or aborted-transaction gaps
        # at its end): Kafka then moves to the segment holding end_offset + 1.
        while True:
            start_pos, next_pos = self.index_cache.lookup_offset(md, fetch_offset)
            # The wanted batch starts by next_pos, so one read covers the skip to it plus max_bytes
            # after it. At the segment's start offset it is the first batch: no skip.
            starts_by = start_pos if next_pos is None or fetch_offset <= md.start_offset else max(next_pos, start_pos)
            window = _SegmentWindow(self.rsm, md)
            window.load(start_pos, starts_by + read_ahead)
            first = next(((pos, h) for pos, h in window.headers(start_pos, read_ahead)
                          if h.last_offset >= fetch_offset), None)
            if first is not None:
                break
            md = self._next_segment(tp, leader_epochs, md)
            if md is None:
                return RemoteFetchResult(b"", fetch_offset, empty_txns)
        position, header = first
        if not min_one_message and header.size > max_bytes:
            return RemoteFetchResult(b"", fetch_offset, empty_txns, remote_segment=md, start_position=position)
        limit = max(max_bytes, header.size) if min_one_message else max_bytes
        window.ensure(position, position + limit)
        end, last_offset = _whole_batches_end(window, position, min(position + limit, window.end))
        if end == position:  # the window was sized for the first batch: the store cut the segment short
            raise TruncatedBatchError(f"remote segment {md.remote_log_segment_id} ends inside a batch", position)
        records = window.view(position, end)  # a view of the read buffer: no copy on this thread
        aborted, complete = None, True
        if read_committed:
            aborted, complete = self._collect_aborted_txns(tp, leader_epochs, md, header.base_offset,
                                                           last_offset + 1)
        return RemoteFetchResult(records, header.base_offset, aborted, complete, last_offset + 1, md, position)

    def _next_segment(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs,
                      md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """Kafka's ``findNextSegmentMetadata``: the segment holding ``end_offset + 1`` in its epoch."""
        next_offset = md.end_offset + 1
        epoch = epoch_for_offset(leader_epochs, next_offset)
        return self.rlmm.remote_log_segment_metadata(tp, epoch, next_offset) if epoch is not None else None

    def _collect_aborted_txns(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs,
                              md: RemoteLogSegmentMetadata, start_offset: int,
                              upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions from this segment's txn index and later remote ones until complete.

        Duplicates are dropped (Kafka collects into a set; the order here is kept for stable output).
        Segments flagged ``txn_idx_empty`` (KIP-1058) are skipped without fetching their index.
        """
        found: dict[AbortedTxn, None] = {}
        current: RemoteLogSegmentMetadata | None = md
        while current is not None:
            if not current.txn_idx_empty:
                txns, complete = self.index_cache.collect_aborted_txns(current, start_offset, upper_bound_offset)
                found.update(dict.fromkeys(txns))
                if complete:
                    return list(found), True
            # Not complete: a transaction that began below the upper bound may have been aborted in
            # a later segment, so keep walking (Kafka does the same, then goes on locally).
            current = self._next_segment_with_txn_index(tp, leader_epochs, current.end_offset + 1)
        return list(found), False

    def _next_segment_with_txn_index(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs,
                                     offset: int) -> RemoteLogSegmentMetadata | None:
        """Kafka's ``findNextSegmentWithTxnIndex``: from the epoch of ``offset`` upwards, ask the RLMM."""
        initial = epoch_for_offset(leader_epochs, offset)
        if initial is None:
            return None
        for epoch, start in leader_epochs:
            if epoch >= initial:
                found = self.rlmm.next_segment_with_txn_index(tp, epoch, max(start, offset))
                if found is not None:
                    return found
        return None

    # -- ListOffsets by timestamp --------------------------------------------------------------

    def find_offset_by_timestamp(
        self,
        tp: TopicIdPartition,
        leader_epochs: LeaderEpochs,
        timestamp: int,
        starting_offset: int,
        *,
        local_log_start_offset: int | None = None,
        segment_filter: Callable[[RemoteLogSegmentMetadata], bool] | None = None,
    ) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp`` and offset >= ``starting_offset`` in remote
        segments (Kafka's ``RemoteLogManager.findOffsetByTimestamp``).

        Walks epochs from the one holding ``starting_offset`` upwards; within an epoch, the segments
        (COPY_SEGMENT_FINISHED, ``max_timestamp_ms >= timestamp``, ``end_offset >= starting_offset``,
        accepted by ``segment_filter`` - pass the leader-epoch lineage check there) in start-offset order.
        None means "not in the remote-only part of the log": the caller then searches the local log.
        A segment starting at or after ``local_log_start_offset`` also stops the search with None,
        because the local copy answers it without a remote read (as Kafka does).

        Unlike Kafka, a segment whose batches do not yield a match (possible when the matching record
        sits before ``starting_offset`` in a batch that straddles it) does not end the search.
        """
        epoch = epoch_for_offset(leader_epochs, starting_offset)
        epochs = [e for e, _ in leader_epochs]
        seen: set[object] = set()
        while epoch is not None:
            for md in self.rlmm.list_remote_log_segments(tp, epoch):
                key = md.remote_log_segment_id
                if key in seen:
                    continue
                if (md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                        or md.max_timestamp_ms < timestamp or md.end_offset < starting_offset
                        or (segment_filter is not None and not segment_filter(md))):
                    continue
                seen.add(key)
                if local_log_start_offset is not None and md.start_offset >= local_log_start_offset:
                    return None
                found = self._lookup_timestamp(md, timestamp, starting_offset)
                if found is not None:
                    return found
            i = epochs.index(epoch) + 1
            epoch = epochs[i] if i < len(epochs) else None
        return None

    def _lookup_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int,
                          starting_offset: int) -> TimestampAndOffset | None:
        """Scan batch headers from the time index position; decode only the batch that must hold it."""
        position = self.index_cache.lookup_timestamp(md, timestamp, starting_offset)
        window = _SegmentWindow(self.rsm, md)
        for pos, header in window.headers(position, self.scan_slack_bytes):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            if not window.ensure(pos, pos + header.size, pos + header.size + self.scan_slack_bytes):
                raise TruncatedBatchError(f"remote segment {md.remote_log_segment_id} ends inside a batch", pos)
            batch = decode_batch(window.view(pos, pos + header.size), verify_crc=False)
            for record in batch.records:
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    epoch = header.partition_leader_epoch
                    return TimestampAndOffset(record.timestamp, record.offset, epoch if epoch >= 0 else None)
        return None


def _whole_batches_end(window: _SegmentWindow, position: int, limit: int) -> tuple[int, int]:
    """End of the last whole batch in ``[position, limit)`` and its last offset.

    The first batch is always included (the caller sized ``limit`` to hold it when it must be sent).
    """
    end = position
    last_offset = -1
    while end < limit:
        if end + RECORD_BATCH_OVERHEAD > limit:
            break
        header = parse_header(window.data, end - window.start, require_whole_batch=False)
        if end + header.size > limit:
            break
        end += header.size
        last_offset = header.last_offset
    return end, last_offset


# -- function forms ------------------------------------------------------------------------------


def read(rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, index_cache: RemoteIndexCache,
         tp: TopicIdPartition, leader_epochs: LeaderEpochs, fetch_offset: int, max_bytes: int,
         min_one_message: bool, read_committed: bool) -> RemoteFetchResult:
    """``RemoteLogReader(rsm, rlmm, index_cache).read(...)``."""
    return RemoteLogReader(rsm, rlmm, index_cache).read(tp, leader_epochs, fetch_offset, max_bytes,
                                                        min_one_message, read_committed)


def find_offset_by_timestamp(
    rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, index_cache: RemoteIndexCache,
    tp: TopicIdPartition, leader_epochs: LeaderEpochs, timestamp: int, starting_offset: int, *,
    local_log_start_offset: int | None = None,
    segment_filter: Callable[[RemoteLogSegmentMetadata], bool] | None = None,
) -> TimestampAndOffset | None:
    """``RemoteLogReader(rsm, rlmm, index_cache).find_offset_by_timestamp(...)``."""
    return RemoteLogReader(rsm, rlmm, index_cache).find_offset_by_timestamp(
        tp, leader_epochs, timestamp, starting_offset, local_log_start_offset=local_log_start_offset,
        segment_filter=segment_filter)
