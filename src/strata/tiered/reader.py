"""The remote read path: Kafka's ``RemoteLogManager.read`` and the remote half of ListOffsets by timestamp
(and of ListOffsets MAX_TIMESTAMP, which Kafka answers from local segments only: KAFKA-17552).

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

**Corruption** (bit rot in the store, a truncated object, a bad index). Every batch served is
validated first (``_valid_batches_end``): its CRC-32C, that its offsets follow the previous batch's
and stay within the segment's metadata, and that its leader epoch is one of the segment's - the base
offset and the epoch lie outside the CRC. The header scan to the first batch checks the chain too
(``_find_batch``): contiguous offsets, and a first batch that is the one its offset index entry names
(entries are keyed by a batch's last offset), so a flipped base offset cannot renumber records. A
segment whose bytes end before its metadata size, or whose header chain does not end exactly there,
is truncated. Cost, measured on a 64 MiB window: 15 ms instead of 4 for 16 KiB batches, 7 ms for
1 MiB batches (4-9 GiB/s).

The batches before the first invalid one are served; a fetch that starts at an invalid batch is
retried once with a fresh read from position 0 (ignoring the offset index and read-ahead), which
tells a corrupt index or a transient bad read from corrupt data. Still invalid: the segment is
remembered as corrupt from that offset (logged at ERROR once, counted by ``on_corrupt_segment``) and
``remote.log.reader.corrupt.segment.action`` decides, for this and every later fetch without touching
the store again: ``fail`` answers CORRUPT_MESSAGE, ``skip`` serves from the next segment (the consumer
sees an offset gap; ``resume_offset`` says where the local log takes over when no remote segment
follows). A remote offset index that fails its sanity check is not used (scans start at position 0),
reported once; so is a transaction index (read_committed reads of that segment then fail with
KAFKA_STORAGE_ERROR: its aborted transactions cannot be proven).

**Read-ahead** (``ReadAhead``, ``remote.log.reader.prefetch.*``; Aiven's chunk-cache prefetch and
Redpanda's ``cloud_storage_chunk_prefetch`` do the same). A consumer keeps one fetch in flight per
broker, so without it every remote fetch waits for a store round trip in series with the consumer's
own work. After serving ``[pos, end)`` of a segment the reader queues the read of the partition's
next window - ``[end, end + w)`` of the same segment, or the start of the next segment once ``end``
is the segment's end, with ``w`` the fetch's ``max_bytes`` but at least ``...window.bytes`` (8 MiB)
- on the reader pool, and ``...windows`` (2) windows are kept ahead this way: each is queued when
the one before it has arrived (its last whole batch says where the next starts), or at once when the
one before ends its segment. A window larger than the fetches is served to several of them, so the
store's latency is paid once per window. The windows live in a small cache keyed by ``(remote
segment id, byte position)``: a remote segment's bytes never change under its id, so an entry can
never be stale; deleting the segment drops its entries anyway (memory). An entry starts at a batch
boundary and records the highest offset of the batches before it, which is what makes it usable for
a fetch without knowing that offset's position: a fetch for offset ``f`` may scan from the entry when
every batch before it ends below ``f`` (or when the offset index itself points into the entry). A
fetch served from an entry takes it out of the cache and is answered from its bytes alone (whole
batches up to ``max_bytes`` or the entry's end, so it may be shorter than ``max_bytes``); the rest of
the entry, when it holds whole batches, goes back as an entry of its own (a slice: no copy). An entry
still being read is waited for; one still queued is read by the fetch itself (no deadlock on a
saturated pool, no second GET). A failed read-ahead is dropped and the fetch reads as if there had
been none. The cache is bounded by ``...total.size.bytes``, reads in flight included. Only idle
finished windows (untouched for ``PREFETCH_IDLE_EVICT_S``: their consumer stopped or went elsewhere)
are evicted for new ones; when the budget is held by windows in use a new window is not read ahead,
so many consumers degrade to plain reads instead of evicting each other's windows before use.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from strata.errors import (
    CorruptRecordError,
    KafkaError,
    OffsetOutOfRangeError,
    TruncatedBatchError,
    UnsupportedForMessageFormatError,
)
from strata.log.errors import CorruptIndexError
from strata.log.segment import TimestampAndOffset
from strata.log.txn_index import AbortedTxn
from strata.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    compute_crc,
    decode_batch,
    parse_header,
)
from strata.tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
    RemoteStorageNotReadyError,
    TopicIdPartition,
    uuid_to_str,
)
from strata.tiered.chunk_cache import CachedSegmentReads, ChunkCache
from strata.tiered.index_cache import OffsetEntryLookup, RemoteIndexCache
from strata.tiered.segment_bytes import fetch_remote_segment_bytes, read_segment_range_into
from strata.tiered.storage.object_format import CorruptObjectError

log = logging.getLogger(__name__)

DEFAULT_SCAN_SLACK_BYTES = 16 * 1024
"""Extra bytes per read window: covers the skip from an index entry to the fetch offset (entries are
``index.interval.bytes`` = 4 KiB apart by default) and header scans for timestamps."""

LeaderEpochs = Sequence[tuple[int, int]]
"""``(epoch, start_offset)`` pairs ascending, e.g. ``LeaderEpochFileCache.epoch_entries()``."""

DEFAULT_PREFETCH_WINDOWS = 2
DEFAULT_PREFETCH_WINDOW_BYTES = 8 * 1024 * 1024
"""A read-ahead window is at least this, or the fetch's ``max_bytes`` when larger. Bigger than a
consumer's usual fetch (1 MiB) on purpose: one store round trip then serves several fetches (the
rest of a window is kept and served as it is), so the latency is paid once per window, not per fetch."""
PREFETCH_IDLE_EVICT_S = 1.0
"""A finished window untouched this long belongs to a consumer that stopped or went elsewhere: it
may be evicted to make room. Windows of consumers still reading are never evicted for others' (that
would thrash: windows dropped before use, each read twice); a window that does not fit is skipped."""


INVALID_DATA = (CorruptRecordError, UnsupportedForMessageFormatError, CorruptObjectError)
"""What bytes that are not a valid batch raise (a magic of 0 or 1 in a remote segment is corruption), and a
format v2 object that fails its authentication tag or does not decode (tampered with in the bucket)."""
CORRUPT_SEGMENT_ACTIONS = ("fail", "skip")
"""``remote.log.reader.corrupt.segment.action``: answer CORRUPT_MESSAGE, or skip to the next segment."""


class CorruptRemoteSegmentError(CorruptRecordError):
    """A fetch needs offsets of a remote segment whose bytes failed validation (action ``fail``).

    A CORRUPT_MESSAGE (2) answer for that partition; the segment is not read again."""


@dataclass(frozen=True, slots=True)
class CorruptSegment:
    """A remote segment found corrupt: offsets from ``from_offset`` to its end cannot be served."""

    md: RemoteLogSegmentMetadata
    from_offset: int
    reason: str


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
    read_ahead_hit: bool | None = None
    """True when the records came from a read-ahead window, False when the read went to the store,
    None when read-ahead is off."""
    resume_offset: int | None = None
    """Set (with no records) when corrupt remote data was skipped and no remote segment follows it:
    the partition's data resumes at this offset, in the local log."""


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


class _SegmentWindow:
    """A contiguous window of one remote segment's bytes, grown by bounded ranged reads on demand.

    ``data`` is a read-only view of a buffer the store read straight into; slices of it are handed
    out as records, so a window's buffer is never written after the read that filled it.
    """

    def __init__(self, rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, start: int = 0,
                 data: memoryview | None = None, eof_at: int | None = None) -> None:
        """An empty window, or one around bytes already read from ``start`` (a read-ahead entry's)."""
        self._rsm = rsm
        self._md = md
        size = md.segment_size_in_bytes
        self.segment_size = size if size > 0 else None  # unknown size: rely on short reads
        self.start = start
        self.data = data if data is not None else memoryview(b"")
        self._eof_at: int | None = eof_at
        self.after_offset: int | None = None  # a read-ahead window's: no batch before ``start`` ends above it

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
            self._eof_at = fetch_from + got  # shorter than its metadata says: ``header`` reports it there
        self.data = data
        self.start = position

    def load(self, position: int, end: int) -> None:
        """One ranged read of ``[position, end)`` (clipped to the segment) before a scan from ``position``."""
        self.ensure(position, position + 1, end)

    def view(self, position: int, end: int) -> memoryview:
        return self.data[position - self.start:end - self.start]

    def header(self, position: int, read_ahead: int) -> BatchHeader | None:
        """The batch header at ``position``, None at the end of the segment's data.

        The chain of batches must end exactly at the segment's size: ending earlier (the object is
        shorter than its metadata says) or later (a corrupt batch length jumped past it) is corruption,
        never a quiet end of the segment.
        """
        if not self.at_eof(position):
            if self.ensure(position, position + RECORD_BATCH_OVERHEAD, position + read_ahead):
                return parse_header(self.data, position - self.start, require_whole_batch=False)
            if self.end > position:
                raise TruncatedBatchError(
                    f"remote segment {_id(self._md)} ends inside a batch header", position)
        if self.segment_size is not None and position != self.segment_size:
            raise TruncatedBatchError(f"remote segment {_id(self._md)}: the batches end at byte {position}, its "
                                      f"metadata says {self.segment_size} bytes", position)
        return None

    def headers(self, position: int, read_ahead: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` to the end of the segment."""
        while True:
            header = self.header(position, read_ahead)
            if header is None:
                return
            yield position, header
            position += header.size


_PENDING, _RUNNING, _DONE, _FAILED = range(4)


class _Prefetch:
    """One read-ahead window: bytes ``[position, position + size)`` of a remote segment.

    ``position`` is a batch boundary and ``after_offset`` bounds the last offsets of every batch before
    it in the segment. ``size`` is what was asked for; ``data`` (once DONE) may be shorter only at
    the segment's end. ``charged`` is what the cache's budget counts for it while it is cached.
    """

    __slots__ = ("md", "position", "after_offset", "size", "state", "data", "done", "chain", "tp", "epochs",
                 "window_bytes", "charged", "cached", "aligned", "touched")

    def __init__(self, md: RemoteLogSegmentMetadata, position: int, after_offset: int, size: int, *,
                 tp: TopicIdPartition, epochs: LeaderEpochs, window_bytes: int, chain: int,
                 data: memoryview | None = None) -> None:
        self.md = md
        self.position = position
        self.after_offset = after_offset
        self.size = size
        self.state = _DONE if data is not None else _PENDING
        self.data = data if data is not None else memoryview(b"")
        self.done = threading.Event()
        if data is not None:
            self.done.set()
        self.chain = chain  # windows still to read ahead after this one, once it has arrived
        self.tp = tp
        self.epochs = epochs
        self.window_bytes = window_bytes
        self.charged = len(self.data) if data is not None else size
        self.cached = False
        self.aligned: tuple[int, int] | None = None  # (end of the last whole batch, after_offset there)
        self.touched = 0.0  # when a reader last found it on its way (the clock of the ReadAhead)

    @property
    def key(self) -> tuple[uuid.UUID, int]:
        return self.md.remote_log_segment_id.id, self.position

    @property
    def end(self) -> int:
        """Where the window's bytes end (requested while not DONE)."""
        return self.position + (len(self.data) if self.state == _DONE else self.size)

    @property
    def eof(self) -> bool:
        """The segment ends inside (or at the end of) the window."""
        seg_size = self.md.segment_size_in_bytes
        if self.state == _DONE and len(self.data) < self.size:
            return True
        return 0 < seg_size <= self.position + self.size


class ReadAhead:
    """The read-ahead windows of sequential remote reads (see the module docstring); thread-safe.

    ``take`` hands a fetch the window it can be served from, ``after_read`` queues what comes next,
    ``forget`` drops a deleted segment's entries. ``hits``/``misses`` count fetches served from a
    window or not (the broker also meters them); ``bytes`` is what the budget counts now.
    """

    def __init__(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, index_cache: RemoteIndexCache,
                 *, total_bytes: int, submit: Callable[[Callable[[], None]], Any],
                 windows: int = DEFAULT_PREFETCH_WINDOWS, window_bytes: int = DEFAULT_PREFETCH_WINDOW_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if total_bytes <= 0 or windows <= 0 or window_bytes <= 0:
            raise ValueError(f"read-ahead needs a positive budget, window count and window size, got "
                             f"{total_bytes}, {windows}, {window_bytes}")
        self._rsm = rsm
        self._rlmm = rlmm
        self._index_cache = index_cache
        self.total_bytes = total_bytes
        self.windows = windows
        self.window_bytes = window_bytes
        self._submit = submit
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[uuid.UUID, int], _Prefetch] = OrderedDict()  # least recently touched first
        self._by_segment: dict[uuid.UUID, dict[int, _Prefetch]] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self.reads = 0  # windows read from the store
        self.failures = 0
        self.evictions = 0  # idle finished windows dropped unused to make room
        self.skipped = 0  # windows not read ahead: the budget was taken by windows in use

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    # -- serving -------------------------------------------------------------------------------

    def take(self, md: RemoteLogSegmentMetadata, fetch_offset: int,
             index_position: int) -> tuple[_SegmentWindow | None, bool]:
        """A window of ``md`` a fetch of ``fetch_offset`` may scan from, taken out of the cache (None if
        none), and whether that was a hit: the fetch did not read the store itself.

        ``index_position`` is the offset index's position for the offset: scanning from there is
        always valid, so an entry holding it qualifies too. An entry being read is waited for (a hit:
        the read was under way); one still queued is read here (a miss, though its window is used);
        a failed one is a miss without a window.
        """
        segment = md.remote_log_segment_id.id
        with self._lock:
            best: _Prefetch | None = None
            for entry in self._by_segment.get(segment, {}).values():
                if entry.after_offset >= fetch_offset and entry.position > index_position:
                    continue  # a batch before the entry may hold the offset
                if max(entry.position, index_position) >= entry.end:
                    continue  # the scan would start past the entry's bytes
                if best is None or entry.position > best.position:
                    best = entry
            if best is None:
                self.misses += 1
                return None, False
            self._unlink(best)
            run_here = best.state == _PENDING
            if run_here:
                best.state = _RUNNING
        if run_here:
            self._read(best)
        else:
            best.done.wait()
        hit = best.state == _DONE and not run_here
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
        if best.state != _DONE:
            return None, False
        eof_at = best.position + len(best.data) if best.eof else None
        window = _SegmentWindow(self._rsm, best.md, best.position, best.data, eof_at)
        window.after_offset = best.after_offset
        return window, hit

    def after_read(self, tp: TopicIdPartition, epochs: LeaderEpochs, md: RemoteLogSegmentMetadata,
                   served_from: _SegmentWindow | None, end: int, last_offset: int, max_bytes: int) -> None:
        """A fetch was answered with ``md``'s batches up to ``end`` (last offset ``last_offset``): keep
        what is left of the read-ahead window it was served from, and read the next windows ahead.
        Never raises: read-ahead is an optimisation, the fetch it follows has its answer."""
        try:
            window_bytes = max(max_bytes, self.window_bytes)
            if served_from is not None and end < served_from.end:
                rest = served_from.view(end, served_from.end)
                if _starts_with_whole_batch(rest):
                    at_eof = served_from.at_eof(served_from.end)  # then size > len(data) marks the end
                    entry = _Prefetch(md, end, last_offset, len(rest) + int(at_eof), tp=tp, epochs=epochs,
                                      window_bytes=window_bytes, chain=0, data=rest)
                    with self._lock:
                        if entry.key not in self._entries and self._make_room(entry.charged):
                            self._link(entry)
            self._extend(tp, epochs, md, end, last_offset, window_bytes, self.windows)
        except Exception as e:
            log.debug("no read-ahead after %s: %s: %s", md.remote_log_segment_id, type(e).__name__, e)

    def forget(self, segment_id: uuid.UUID) -> None:
        with self._lock:
            for entry in list(self._by_segment.get(segment_id, {}).values()):
                self._unlink(entry)

    def clear(self) -> None:
        with self._lock:
            for entry in list(self._entries.values()):
                self._unlink(entry)

    # -- reading ahead -------------------------------------------------------------------------

    def _extend(self, tp: TopicIdPartition, epochs: LeaderEpochs, md: RemoteLogSegmentMetadata, position: int,
                after_offset: int, window_bytes: int, windows: int) -> None:
        """Make sure ``windows`` windows from ``position`` are cached or on their way, walking through
        those that are. A window is queued once the one before it has arrived (its last whole batch
        says where the next starts), or at once when the one before ends its segment."""
        for i in range(windows):
            seg_size = md.segment_size_in_bytes
            if 0 < seg_size <= position:
                following = next_segment(self._rlmm, tp, epochs, md)
                if following is None:
                    return
                md, position, after_offset = following, 0, following.start_offset - 1
                seg_size = md.segment_size_in_bytes
            key = (md.remote_log_segment_id.id, position)
            queued = False
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    size = min(window_bytes, max(1, self.total_bytes // self.windows))
                    if seg_size > 0:
                        size = min(size, seg_size - position)
                    if size <= 0 or not self._make_room(size):
                        return
                    entry = _Prefetch(md, position, after_offset, size, tp=tp, epochs=epochs,
                                      window_bytes=window_bytes, chain=windows - i - 1)
                    self._link(entry)
                    queued = True
                else:
                    self._touch(entry)
                done = entry.state == _DONE
                if not done:  # its arrival continues the walk (the state changes under this lock)
                    entry.chain = max(entry.chain, windows - i - 1)
            if queued:
                try:
                    self._submit(lambda entry=entry: self._run(entry))
                except RuntimeError:  # the pool is shut down: the broker is stopping
                    with self._lock:
                        self._unlink(entry)
                    return
            if not done:
                if not entry.eof:
                    return
                position = seg_size  # it ends the segment: the next window is the next segment's start
                continue
            position, after_offset = self._aligned_end(entry)
            if entry.eof and position < entry.end:
                return  # the segment ends inside a batch: nothing sensible follows

    def _run(self, entry: _Prefetch) -> None:
        """The pool task of a queued window."""
        with self._lock:
            if entry.state != _PENDING:
                return  # a fetch claimed it and reads it itself, or it was dropped
            entry.state = _RUNNING
        self._read(entry, chain=True)

    def _read(self, entry: _Prefetch, chain: bool = False) -> None:
        """Read the window's bytes (on a pool thread, or the fetch's own); a failure only drops it.

        With ``chain`` the windows after it are queued before a fetch waiting for this one is woken:
        that fetch then finds them queued instead of racing this thread to queue them (and a window
        it has already taken would otherwise be queued again, and read twice).
        """
        try:
            data = fetch_remote_segment_bytes(self._rsm, entry.md, entry.position, entry.position + entry.size)
        except Exception as e:
            log.debug("read-ahead of %s [%d, %d) failed: %s: %s", entry.md.remote_log_segment_id, entry.position,
                      entry.position + entry.size, type(e).__name__, e)
            with self._lock:
                self.failures += 1
                entry.state = _FAILED
                self._unlink(entry)
            entry.done.set()
            return
        with self._lock:
            self.reads += 1
            entry.data = data
            entry.state = _DONE
            if entry.cached:
                self._bytes += len(data) - entry.charged
                self._touch(entry)
            entry.charged = len(data)
            more = entry.chain if chain and entry.cached else 0  # a fetch that took it extends from there
        try:
            if more > 0:
                position, after_offset = self._aligned_end(entry)
                if not (entry.eof and position < entry.end):
                    self._extend(entry.tp, entry.epochs, entry.md, position, after_offset, entry.window_bytes, more)
        except Exception as e:  # the chain just stops; the next fetch extends it again
            log.debug("read-ahead after %s stopped: %s: %s", entry.md.remote_log_segment_id, type(e).__name__, e)
        finally:
            entry.done.set()

    def _aligned_end(self, entry: _Prefetch) -> tuple[int, int]:
        """End of the last whole batch in a finished window, and a bound on the offsets before it.

        The scan starts at the last offset-index entry whose header lies in the window, so it crosses
        at most ``index.interval.bytes`` plus a batch whatever the window's size.
        """
        if entry.aligned is not None:
            return entry.aligned
        data, start = entry.data, entry.position
        stop = start + len(data)
        position, after = start, entry.after_offset
        if len(data) >= RECORD_BATCH_OVERHEAD:
            floor = self._index_cache.floor_position(entry.md, stop - RECORD_BATCH_OVERHEAD)
            if floor > start:
                position = floor
                after = parse_header(data, floor - start, require_whole_batch=False).base_offset - 1
            while position + RECORD_BATCH_OVERHEAD <= stop:
                header = parse_header(data, position - start, require_whole_batch=False)
                if position + header.size > stop:
                    break  # ``after`` is exact: the last whole batch's, or the bound at the scan's start
                position += header.size
                after = header.last_offset
        entry.aligned = (position, after)
        return entry.aligned

    # -- the cache (under the lock) ------------------------------------------------------------

    def _link(self, entry: _Prefetch) -> None:
        self._entries[entry.key] = entry
        self._by_segment.setdefault(entry.key[0], {})[entry.position] = entry
        self._bytes += entry.charged
        entry.cached = True
        entry.touched = self._clock()

    def _touch(self, entry: _Prefetch) -> None:
        """A reader is on its way to it: the last to be evicted, and not idle."""
        self._entries.move_to_end(entry.key)
        entry.touched = self._clock()

    def _unlink(self, entry: _Prefetch) -> None:
        if not entry.cached:
            return
        entry.cached = False
        self._entries.pop(entry.key, None)
        per_segment = self._by_segment.get(entry.key[0])
        if per_segment is not None:
            per_segment.pop(entry.position, None)
            if not per_segment:
                del self._by_segment[entry.key[0]]
        self._bytes -= entry.charged

    def _make_room(self, size: int) -> bool:
        """Evict idle finished windows, least recently touched first, until ``size`` more bytes fit;
        False (and nothing evicted) if they do not free enough."""
        if self._bytes + size <= self.total_bytes:
            return True
        idle_before = self._clock() - PREFETCH_IDLE_EVICT_S
        idle = []
        freed = 0
        for entry in self._entries.values():  # least recently touched first
            if entry.touched > idle_before:
                break
            if entry.state == _DONE:
                idle.append(entry)
                freed += entry.charged
                if self._bytes - freed + size <= self.total_bytes:
                    for victim in idle:
                        self._unlink(victim)
                    self.evictions += len(idle)
                    return True
        self.skipped += 1
        return False


def _starts_with_whole_batch(data: memoryview) -> bool:
    if len(data) < RECORD_BATCH_OVERHEAD:
        return False
    return parse_header(data, 0, require_whole_batch=False).size <= len(data)


def next_segment(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, leader_epochs: LeaderEpochs,
                 md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
    """Kafka's ``findNextSegmentMetadata``: the segment holding ``end_offset + 1`` in its epoch."""
    next_offset = md.end_offset + 1
    epoch = epoch_for_offset(leader_epochs, next_offset)
    return rlmm.remote_log_segment_metadata(tp, epoch, next_offset) if epoch is not None else None


class RemoteLogReader:
    """Serves reads and timestamp lookups from remote segments (one per broker, shared by threads)."""

    def __init__(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, index_cache: RemoteIndexCache,
                 *, scan_slack_bytes: int = DEFAULT_SCAN_SLACK_BYTES, prefetch_total_bytes: int = 0,
                 prefetch_windows: int = DEFAULT_PREFETCH_WINDOWS,
                 prefetch_window_bytes: int = DEFAULT_PREFETCH_WINDOW_BYTES,
                 prefetch_submit: Callable[[Callable[[], None]], Any] | None = None,
                 corrupt_segment_action: str = "fail",
                 on_corrupt_segment: Callable[[TopicIdPartition, int], None] | None = None,
                 chunk_cache: ChunkCache | None = None) -> None:
        """``chunk_cache`` (``fetch.chunk.cache.*``) puts every segment read through cached chunks
        (:mod:`strata.tiered.chunk_cache`). ``prefetch_submit`` runs a read-ahead task on the reader pool
        (``Executor.submit``); read-ahead
        is on when it is given and ``prefetch_total_bytes`` and ``prefetch_windows`` are positive.
        ``on_corrupt_segment(tp, n)`` is called (on a reader thread) when a segment of ``tp`` is found
        corrupt or forgotten, with the number of its segments now known corrupt (a metric)."""
        if corrupt_segment_action not in CORRUPT_SEGMENT_ACTIONS:
            raise ValueError(f"corrupt segment action must be one of {CORRUPT_SEGMENT_ACTIONS}, "
                             f"got {corrupt_segment_action!r}")
        self.chunk_cache = chunk_cache
        if chunk_cache is not None:
            rsm = cast(RemoteStorageManager, CachedSegmentReads(rsm, chunk_cache))
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self.scan_slack_bytes = max(scan_slack_bytes, RECORD_BATCH_OVERHEAD)
        self.corrupt_segment_action = corrupt_segment_action
        self._on_corrupt_segment = on_corrupt_segment
        self._lock = threading.Lock()
        self._corrupt: dict[uuid.UUID, CorruptSegment] = {}
        self._unusable_indexes: set[uuid.UUID] = set()  # failed the sanity check: scans start at 0
        self._reported_indexes: set[uuid.UUID] = set()  # an index that pointed wrong was reported once
        self.read_ahead: ReadAhead | None = None
        # Partitions of compacted topics (KIP-1272): their segments have offset gaps, so a batch only has to
        # start after the one before it, not right after it. Set by the RLM before each read.
        self.compacted: set[TopicIdPartition] = set()
        # The last remote read's store error, cleared by the next read that succeeds. A remote fetch that
        # expires while this is set answers KAFKA_STORAGE_ERROR instead of Kafka's empty records: the
        # store is known to be failing, and the consumer should see it (and back off) rather than poll
        # empty responses in silence. A store that is merely slow still gets Kafka's empty answer.
        self.store_error: str | None = None
        self._store_error_at = 0.0
        if prefetch_submit is not None and prefetch_total_bytes > 0 and prefetch_windows > 0:
            self.read_ahead = ReadAhead(rsm, rlmm, index_cache, total_bytes=prefetch_total_bytes,
                                        windows=prefetch_windows, window_bytes=prefetch_window_bytes,
                                        submit=prefetch_submit)

    def forget_segment(self, segment_id: uuid.UUID) -> None:
        """The segment was deleted: drop its read-ahead entries (their bytes are not stale, but dead weight)
        and what was known about its corruption."""
        if self.read_ahead is not None:
            self.read_ahead.forget(segment_id)
        if self.chunk_cache is not None:
            self.chunk_cache.forget(segment_id)
        with self._lock:
            known = self._corrupt.pop(segment_id, None)
            self._unusable_indexes.discard(segment_id)
            self._reported_indexes.discard(segment_id)
            count = self._corrupt_count(known.md.topic_id_partition) if known is not None else 0
        if known is not None and self._on_corrupt_segment is not None:
            self._on_corrupt_segment(known.md.topic_id_partition, count)

    def corrupt_segments(self, tp: TopicIdPartition | None = None) -> list[CorruptSegment]:
        """The remote segments found corrupt (of one partition), for tools and tests."""
        with self._lock:
            return [c for c in self._corrupt.values() if tp is None or c.md.topic_id_partition == tp]

    def close(self) -> None:
        if self.read_ahead is not None:
            self.read_ahead.clear()
        if self.chunk_cache is not None:
            self.chunk_cache.close()

    # -- fetch ---------------------------------------------------------------------------------

    def read(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs, fetch_offset: int, max_bytes: int,
             min_one_message: bool, read_committed: bool) -> RemoteFetchResult:
        """Kafka's ``RemoteLogManager.read`` for one partition.

        Raises OffsetOutOfRangeError when no remote segment holds ``fetch_offset`` in its epoch, and
        CorruptRemoteSegmentError when the segment that does is corrupt there (action ``fail``).
        ``max_bytes`` is already ``min(fetch max bytes, partition max bytes)``.
        """
        if max_bytes < 0:
            raise ValueError(f"invalid max bytes {max_bytes} for a remote read of {tp}")
        started = time.monotonic()
        try:
            result = self._read(tp, leader_epochs, fetch_offset, max_bytes, min_one_message, read_committed)
        except CorruptRecordError:
            self._store_answered(started)  # its bytes are bad, which is another matter
            raise
        except (KafkaError, RemoteStorageNotReadyError):
            raise  # about the offsets asked for, or the metadata still loading: says nothing of the store
        except Exception as e:
            self.store_error, self._store_error_at = f"{type(e).__name__}: {e}", time.monotonic()
            raise
        self._store_answered(started)
        return result

    def _store_answered(self, started: float) -> None:
        """Only a read that began after the last failure proves the store works again: one that hung
        since before it and finished late says nothing about now."""
        if started >= self._store_error_at:
            self.store_error = None

    def _read(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs, fetch_offset: int, max_bytes: int,
              min_one_message: bool, read_committed: bool) -> RemoteFetchResult:
        epoch = epoch_for_offset(leader_epochs, fetch_offset)
        md = self.rlmm.remote_log_segment_metadata(tp, epoch, fetch_offset) if epoch is not None else None
        if md is None:
            raise offset_out_of_range(tp, fetch_offset, epoch)
        empty_txns: list[AbortedTxn] | None = [] if read_committed else None
        hit: bool | None = None
        # A segment may hold no batch at or after the offset (compaction, or aborted-transaction gaps at its
        # end), or be corrupt there with the action ``skip``: Kafka moves to the segment holding end_offset + 1.
        while True:
            corrupt = self._known_corrupt(md, fetch_offset)
            if corrupt is None:
                result, hit = self._read_segment(tp, leader_epochs, md, fetch_offset, max_bytes, min_one_message)
                if isinstance(result, RemoteFetchResult):
                    break
                corrupt = result
            if corrupt is not None and self.corrupt_segment_action == "fail":
                raise CorruptRemoteSegmentError(
                    f"remote segment {_id(corrupt.md)} of {tp.topic}-{tp.partition} is corrupt "
                    f"from offset {corrupt.from_offset} to {corrupt.md.end_offset}: {corrupt.reason}")
            following = self._next_segment(tp, leader_epochs, md)
            if following is None:
                resume = md.end_offset + 1 if corrupt is not None else None
                return RemoteFetchResult(b"", fetch_offset, empty_txns, read_ahead_hit=hit, resume_offset=resume)
            md = following
        if read_committed and len(result.records):
            aborted, complete = self._collect_aborted_txns(tp, leader_epochs, md, result.first_batch_offset,
                                                           result.upper_bound_offset)
            return RemoteFetchResult(result.records, result.first_batch_offset, aborted, complete,
                                     result.upper_bound_offset, md, result.start_position, read_ahead_hit=hit)
        if read_committed:
            return RemoteFetchResult(result.records, result.first_batch_offset, empty_txns,
                                     remote_segment=result.remote_segment, start_position=result.start_position,
                                     read_ahead_hit=hit)
        return result

    def _known_corrupt(self, md: RemoteLogSegmentMetadata, fetch_offset: int) -> CorruptSegment | None:
        """The corruption a fetch from ``fetch_offset`` would run into at once in ``md``, if known."""
        with self._lock:
            known = self._corrupt.get(md.remote_log_segment_id.id)
        if known is None or max(fetch_offset, md.start_offset) < known.from_offset:
            return None
        return known

    def _read_segment(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs, md: RemoteLogSegmentMetadata,
                      fetch_offset: int, max_bytes: int,
                      min_one_message: bool) -> tuple[RemoteFetchResult | CorruptSegment | None, bool | None]:
        """One segment's answer: its batches (validated), None (no batch at or after the offset: try the
        next segment) or the corruption found at the offset (now remembered); and the read-ahead hit."""
        try:
            return self._read_segment_once(tp, leader_epochs, md, fetch_offset, max_bytes, min_one_message)
        except INVALID_DATA as first:
            problem: Exception = first
        if self.chunk_cache is not None:  # the bad bytes may be a cached transfer that went bad
            self.chunk_cache.forget(md.remote_log_segment_id.id)
        try:  # once more from scratch: a corrupt index or a bad transfer, or really corrupt data?
            result, _ = self._read_segment_once(tp, leader_epochs, md, fetch_offset, max_bytes, min_one_message,
                                                fresh=True)
        except INVALID_DATA as e:
            return self._mark_corrupt(md, fetch_offset, str(e)), None
        segment_id = md.remote_log_segment_id.id
        with self._lock:
            first_report = segment_id not in self._reported_indexes
            self._reported_indexes.add(segment_id)
        if first_report:
            log.warning("remote segment %s of %s-%d: a read of offset %d through its offset index and read-ahead "
                        "failed validation (%s); a fresh read from position 0 succeeded, so the index (or that "
                        "transfer) was bad. Falling back to a scan whenever it happens again", _id(md),
                        tp.topic, tp.partition, fetch_offset, problem)
        return result, False

    def _mark_corrupt(self, md: RemoteLogSegmentMetadata, from_offset: int, reason: str) -> CorruptSegment:
        """Remember the corruption (earliest offset wins) and report it once per segment."""
        tp = md.topic_id_partition
        segment_id = md.remote_log_segment_id.id
        with self._lock:
            known = self._corrupt.get(segment_id)
            first_report = known is None
            if known is None or from_offset < known.from_offset:
                known = self._corrupt[segment_id] = CorruptSegment(md, max(from_offset, md.start_offset), reason)
            count = self._corrupt_count(tp)
        if first_report:
            log.error("remote segment %s of %s-%d (offsets %d to %d) is corrupt from offset %d: %s; "
                      "remote.log.reader.corrupt.segment.action=%s: %s", _id(md), tp.topic, tp.partition,
                      md.start_offset, md.end_offset, known.from_offset, reason, self.corrupt_segment_action,
                      "fetches of these offsets answer CORRUPT_MESSAGE" if self.corrupt_segment_action == "fail"
                      else "fetches skip to the next segment (these records are lost to consumers)")
            if self._on_corrupt_segment is not None:
                self._on_corrupt_segment(tp, count)
        return known

    def _corrupt_count(self, tp: TopicIdPartition) -> int:
        return sum(1 for c in self._corrupt.values() if c.md.topic_id_partition == tp)

    def _offset_lookup(self, md: RemoteLogSegmentMetadata, fetch_offset: int) -> OffsetEntryLookup:
        """The index's answer, or position 0 for an index that fails its sanity check (it is never used
        again for this segment, and reported once)."""
        segment_id = md.remote_log_segment_id.id
        if segment_id not in self._unusable_indexes:
            try:
                return self.index_cache.lookup_offset_entry(md, fetch_offset)
            except CorruptIndexError as e:
                with self._lock:
                    self._unusable_indexes.add(segment_id)
                log.error("the remote offset index of segment %s of %s-%d is corrupt (%s): reads of the segment "
                          "scan it from position 0", _id(md), md.topic_id_partition.topic,
                          md.topic_id_partition.partition, e)
        return OffsetEntryLookup(0, None, None)

    @staticmethod
    def _find_batch(md: RemoteLogSegmentMetadata, window: _SegmentWindow, scan_from: int, read_ahead: int,
                    fetch_offset: int, previous: int | None, entry_offset: int | None,
                    strict_entry: bool, gaps: bool = False) -> tuple[tuple[int, BatchHeader] | None, int | None]:
        """The first batch from ``scan_from`` whose last offset reaches ``fetch_offset`` (None: none), and the
        last offset of the batch before it (None: unknown).

        The header chain is checked on the way, because a batch's base offset lies outside its CRC: each
        batch must follow ``previous`` (the last offset before ``scan_from`` when known: the segment's
        start - 1 at position 0, a read-ahead window's exact bound) and the batches scanned before it;
        the first batch must be the one the offset index entry it was found through names
        (``entry_offset``: Strata's entries are keyed by a batch's last offset; ``strict_entry=False``
        accepts any batch holding it, as entries of older Kafka logs may span several batches).
        """
        first = True
        for pos, h in window.headers(scan_from, read_ahead):
            if previous is not None and (h.base_offset <= previous if gaps else h.base_offset != previous + 1):
                raise CorruptRecordError(f"remote segment {_id(md)}: batch base offset {h.base_offset} does not "
                                         f"follow offset {previous}", pos)
            if first and entry_offset is not None and not (
                    h.last_offset == entry_offset if strict_entry else h.base_offset <= entry_offset <= h.last_offset):
                raise CorruptRecordError(f"remote segment {_id(md)}: the offset index entry of offset {entry_offset} "
                                         f"points at a batch of offsets [{h.base_offset}, {h.last_offset}]", pos)
            first = False
            if h.last_offset >= fetch_offset:
                return (pos, h), previous
            previous = h.last_offset
        return None, previous

    def _read_segment_once(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs, md: RemoteLogSegmentMetadata,
                           fetch_offset: int, max_bytes: int, min_one_message: bool,
                           fresh: bool = False) -> tuple[RemoteFetchResult | None, bool | None]:
        """Validated batches of ``md`` from ``fetch_offset`` (None: none at or after it), and the read-ahead hit.

        ``fresh``: scan from position 0 with a read of its own, trusting neither index nor read-ahead.
        Raises CorruptRecordError when the batch the fetch must start with is invalid.
        """
        read_ahead = max_bytes + self.scan_slack_bytes
        ahead = None if fresh else self.read_ahead
        start_pos, next_pos, entry_offset = OffsetEntryLookup(0, None, None) if fresh \
            else self._offset_lookup(md, fetch_offset)
        window, hit = ahead.take(md, fetch_offset, start_pos) if ahead is not None else (None, None)
        from_ahead = window is not None
        after: int | None = None  # the last offset before the scan's first batch, when known
        if window is not None:  # the bytes are here: scan from the entry's start (or the index's, if later)
            scan_from = max(start_pos, window.start)
            if scan_from == window.start and window.after_offset is not None:
                after = window.after_offset
        else:
            # The wanted batch starts by next_pos, so one read covers the skip to it plus max_bytes
            # after it. At the segment's start offset it is the first batch: no skip.
            starts_by = start_pos if next_pos is None or fetch_offset <= md.start_offset \
                else max(next_pos, start_pos)
            window = _SegmentWindow(self.rsm, md)
            window.load(start_pos, starts_by + read_ahead)
            scan_from = start_pos
        if scan_from == 0:
            after = md.start_offset - 1
        gaps = md.topic_id_partition in self.compacted
        first, previous = self._find_batch(md, window, scan_from, read_ahead, fetch_offset, after,
                                           entry_offset if scan_from == start_pos else None,
                                           md.remote_log_segment_id.id not in self._reported_indexes, gaps)
        if first is None:
            return None, hit
        position, header = first
        if header.base_offset > max(fetch_offset, md.start_offset) and not gaps:
            # Offsets are contiguous in a segment: the batch holding the offset was skipped (the index
            # pointed past it) or its offsets are corrupt.
            raise CorruptRecordError(f"remote segment {_id(md)}: the first batch at or after "
                                     f"offset {fetch_offset} starts at offset {header.base_offset}", position)
        if not min_one_message and header.size > max_bytes:
            return RemoteFetchResult(b"", fetch_offset, remote_segment=md, start_position=position,
                                     read_ahead_hit=hit), hit
        limit = max(max_bytes, header.size) if min_one_message else max_bytes
        if not (from_ahead and position + header.size <= window.end):
            window.ensure(position, position + limit)
        # else: a read-ahead window answers with what it holds (whole batches), without another read
        end, last_offset, problem = _valid_batches_end(window, position, min(position + limit, window.end), md,
                                                       previous, gaps)
        if end == position:  # the first batch is invalid, or the store cut the segment short
            raise problem or TruncatedBatchError(f"remote segment {_id(md)} ends inside a batch", position)
        records = window.view(position, end)  # a view of the read buffer: no copy on this thread
        if ahead is not None and problem is None:
            ahead.after_read(tp, leader_epochs, md, window if from_ahead else None, end, last_offset, max_bytes)
        return RemoteFetchResult(records, header.base_offset, None, True, last_offset + 1, md, position,
                                 read_ahead_hit=hit), hit

    def _next_segment(self, tp: TopicIdPartition, leader_epochs: LeaderEpochs,
                      md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        return next_segment(self.rlmm, tp, leader_epochs, md)

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

    def find_max_timestamp(
        self,
        tp: TopicIdPartition,
        starting_offset: int,
        local_log_start_offset: int,
        local_max_timestamp: int | None,
        *,
        segment_filter: Callable[[RemoteLogSegmentMetadata], bool] | None = None,
    ) -> TimestampAndOffset | None:
        """ListOffsets MAX_TIMESTAMP (-3) over the remote-only part of the log (KAFKA-17552): the first
        record holding the largest timestamp of the remote segments below ``local_log_start_offset``,
        when that timestamp is at least ``local_max_timestamp`` (the local log's largest; None: the local
        log holds no records). None means the local answer stands.

        Candidates are the COPY_SEGMENT_FINISHED segments with ``end_offset >= starting_offset`` (the log
        start: an expired segment not yet deleted does not count) accepted by ``segment_filter`` (pass the
        leader-epoch lineage check there), taken by ``max_timestamp_ms`` descending, then start offset:
        Kafka answers the earliest offset holding the maximum, so on a tie the remote-only copy, which
        lies below every local offset, wins over the local one, and an earlier segment over a later one.
        Only the first candidate is read (its time index, then the one batch holding the record), unless
        it yields nothing: its maximum may belong to a record below ``starting_offset`` (DeleteRecords
        inside the segment), or be the file's mtime when its records carry no timestamps (the copier's
        ``largest_timestamp``); the next candidate is tried then. In the first case the segment's own
        records at or above the log start are not rescanned for a lower maximum (a whole-segment read
        for a rare case; Kafka's local search ignores the log start altogether).
        """
        candidates: dict[object, RemoteLogSegmentMetadata] = {}
        for md in self.rlmm.list_remote_log_segments(tp):
            if (md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED or md.end_offset < starting_offset
                    or md.start_offset >= local_log_start_offset
                    or (local_max_timestamp is not None and md.max_timestamp_ms < local_max_timestamp)
                    or (segment_filter is not None and not segment_filter(md))):
                continue
            candidates[md.remote_log_segment_id] = md
        for md in sorted(candidates.values(), key=lambda m: (-m.max_timestamp_ms, m.start_offset)):
            found = self._lookup_timestamp(md, md.max_timestamp_ms, starting_offset)
            if found is not None and (local_max_timestamp is None or found.timestamp >= local_max_timestamp):
                return found
        return None

    def _lookup_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int,
                          starting_offset: int) -> TimestampAndOffset | None:
        """Scan batch headers from the time index position; decode only the batch that must hold it
        (checking its CRC: a corrupt batch raises rather than answer with a wrong offset)."""
        if md.remote_log_segment_id.id in self._unusable_indexes:
            position = 0
        else:
            try:
                position = self.index_cache.lookup_timestamp(md, timestamp, starting_offset)
            except CorruptIndexError as e:
                log.warning("remote indexes of segment %s are corrupt (%s): scanning it from position 0",
                            _id(md), e)
                position = 0
        window = _SegmentWindow(self.rsm, md)
        for pos, header in window.headers(position, self.scan_slack_bytes):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            if not window.ensure(pos, pos + header.size, pos + header.size + self.scan_slack_bytes):
                raise TruncatedBatchError(f"remote segment {md.remote_log_segment_id} ends inside a batch", pos)
            batch = decode_batch(window.view(pos, pos + header.size), verify_crc=True)
            for record in batch.records:
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    epoch = header.partition_leader_epoch
                    return TimestampAndOffset(record.timestamp, record.offset, epoch if epoch >= 0 else None)
        return None


def _id(md: RemoteLogSegmentMetadata) -> str:
    """A segment id as Kafka prints it and the stores name objects (base64url)."""
    return uuid_to_str(md.remote_log_segment_id.id)


def _valid_batches_end(window: _SegmentWindow, position: int, limit: int, md: RemoteLogSegmentMetadata,
                       previous: int | None = None, gaps: bool = False) -> tuple[int, int, CorruptRecordError | None]:
    """End of the last whole, valid batch in ``[position, limit)``, its last offset, and what stopped the
    run if it was an invalid batch (None when it was the limit).

    Valid: the header parses, the CRC-32C matches, the base offset follows the previous batch's last
    offset (offsets are contiguous, except in a compacted topic's segments: ``gaps``, where it must only
    follow it), the last offset
    is within the segment's metadata and the partition leader epoch is one of the segment's (or -1: no
    epoch). The base offset and the epoch are not covered by the CRC, hence the extra checks. The first
    batch is always examined (the caller sized ``limit`` to hold it when it must be sent); ``previous`` is
    the last offset before it, when known.
    """
    end = position
    last_offset = -1 if previous is None else previous
    epochs = md.segment_leader_epochs
    data = window.data
    while end < limit:
        if end + RECORD_BATCH_OVERHEAD > limit:
            break
        at = end - window.start
        try:
            header = parse_header(data, at, require_whole_batch=False)
        except INVALID_DATA as e:
            return end, (last_offset if end > position else -1), CorruptRecordError(f"remote segment {_id(md)}: {e}",
                                                                                    end)
        if end + header.size > limit:
            break
        problem = None
        if compute_crc(data, at, header.size) != header.crc:
            problem = f"CRC-32C mismatch in the batch at offset {header.base_offset}"
        elif (end > position or previous is not None) and (
                header.base_offset <= last_offset if gaps else header.base_offset != last_offset + 1):
            problem = f"batch base offset {header.base_offset} does not follow offset {last_offset}"
        elif not md.start_offset <= header.base_offset <= header.last_offset <= md.end_offset:
            problem = (f"batch offsets [{header.base_offset}, {header.last_offset}] are outside the segment's "
                       f"[{md.start_offset}, {md.end_offset}]")
        elif epochs and header.partition_leader_epoch not in epochs and header.partition_leader_epoch != -1:
            problem = f"batch leader epoch {header.partition_leader_epoch} is not one of the segment's {sorted(epochs)}"
        if problem is not None:
            return end, (last_offset if end > position else -1), CorruptRecordError(
                f"remote segment {_id(md)}: {problem}", end)
        end += header.size
        last_offset = header.last_offset
    return end, (last_offset if end > position else -1), None


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


def find_max_timestamp(
    rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, index_cache: RemoteIndexCache,
    tp: TopicIdPartition, starting_offset: int, local_log_start_offset: int, local_max_timestamp: int | None, *,
    segment_filter: Callable[[RemoteLogSegmentMetadata], bool] | None = None,
) -> TimestampAndOffset | None:
    """``RemoteLogReader(rsm, rlmm, index_cache).find_max_timestamp(...)``."""
    return RemoteLogReader(rsm, rlmm, index_cache).find_max_timestamp(
        tp, starting_offset, local_log_start_offset, local_max_timestamp, segment_filter=segment_filter)
