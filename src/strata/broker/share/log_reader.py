"""What a share-partition leader reads from its log for ShareFetch: whole batches from the next fetch offset,
up to the high watermark (``read_uncommitted``) or the last stable offset (``read_committed``), from the local
segments or, below the local log start, from the remote tier -- a share group reads both tiers as a consumer
does. The batches stay opaque bytes; only their 61-byte headers are decoded, for the offsets the
share-partition hands out and, under read_committed, the aborted transactions it must archive. A local read
is not even read: its headers are read in place (``pread``) and the acquired batches go out as a slice of
the segment file, with ``sendfile`` as Fetch sends them; the remote tier's bytes are already in memory.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata.log.file_records import FileSlice
from strata.log.partition_log import FetchIsolation
from strata.protocol.records.batch import BatchHeader, TruncatedBatchError, iter_batches
from strata.tiered.api import TopicIdPartition

if TYPE_CHECKING:
    from strata.log.partition_log import PartitionLog
    from strata.tiered.manager import RemoteLogManager

REMOTE_READ_TIMEOUT_S = 30.0


Records = bytes | FileSlice  # whole batches: in memory (remote tier) or in place in a segment file


def records_size(records: Records) -> int:
    return records.size if isinstance(records, FileSlice) else len(records)


@dataclass(frozen=True, slots=True)
class ShareRead:
    """Whole batches read for a share fetch: ``records`` and, per batch, its (position in them, header)."""

    records: Records
    batches: tuple[tuple[int, BatchHeader], ...]
    aborted: tuple[tuple[int, int], ...] = ()  # (first, last) offsets of aborted transactional batches

    def offsets(self) -> list[tuple[int, int]]:
        return [(h.base_offset, h.base_offset + h.last_offset_delta) for _, h in self.batches]

    def slice(self, first: int, last: int) -> Records:
        """The batches overlapping [first, last] (a contiguous run: the client drops the offsets it was not
        given), as bytes or as a slice of the same segment file."""
        lo = hi = None
        for position, h in self.batches:
            if h.base_offset + h.last_offset_delta < first or h.base_offset > last:
                continue
            if lo is None:
                lo = position
            hi = position + h.size
        if lo is None or hi is None:
            return b""
        records = self.records
        if isinstance(records, FileSlice):
            return FileSlice(records.file, records.position + lo, hi - lo)
        return records[lo:hi]


def whole_batches(buf: bytes, below: int) -> tuple[bytes, list[tuple[int, BatchHeader]]]:
    """The complete batches of ``buf`` that start below offset ``below`` (a read may end mid-batch)."""
    out: list[tuple[int, BatchHeader]] = []
    end = 0
    try:
        for position, header in iter_batches(buf):
            if header.base_offset >= below:
                break
            out.append((position, header))
            end = position + header.size
    except TruncatedBatchError:
        pass
    return buf[:end], out


def aborted_ranges(batches: list[tuple[int, BatchHeader]],
                   aborted: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The transactional batches of aborted transactions (Kafka's consumer-side filter, on the leader):
    ``aborted`` are (producer id, first offset) from the transaction index; a producer's batches count from
    its first offset until its abort marker."""
    if not aborted:
        return ()
    pending = sorted(aborted, key=lambda a: a[1])
    active: set[int] = set()
    out: list[tuple[int, int]] = []
    i = 0
    for _, h in batches:
        while i < len(pending) and pending[i][1] <= h.base_offset:
            active.add(pending[i][0])
            i += 1
        if h.producer_id not in active:
            continue
        last = h.base_offset + h.last_offset_delta
        if h.is_control:
            active.discard(h.producer_id)  # the abort marker ends it (its offset goes out as a gap)
        elif h.is_transactional:
            out.append((h.base_offset, last))
    return tuple(out)


def local_batches(sl: FileSlice, below: int, max_records: int | None) -> list[tuple[int, BatchHeader]]:
    """The whole batches of a local slice that start below offset ``below``, about ``max_records`` records
    (at least one batch), from their headers alone: the slice is only positions in the segment, so the
    megabytes a fetch's byte budget allows are never read (the share-partition acquires whole batches up to
    MaxRecords). Positions are relative to the slice."""
    out: list[tuple[int, BatchHeader]] = []
    position, end, records = sl.position, sl.position + sl.size, 0
    while position < end and (max_records is None or records < max_records):
        header = sl.file.read_header(position)
        if position + header.size > end or header.base_offset >= below:
            break
        out.append((position - sl.position, header))
        records += header.last_offset_delta + 1
        position += header.size
    return out


async def read_for_share(plog: PartitionLog, rlm: RemoteLogManager | None, tip: TopicIdPartition, offset: int,
                         max_bytes: int, read_committed: bool, max_records: int | None = None) -> ShareRead:
    """Whole batches from ``offset`` (at least one, whatever ``max_bytes``; about ``max_records`` records when
    given), bounded by the HWM or LSO. OffsetOutOfRangeError and the remote tier's errors propagate."""
    bound = plog.last_stable_offset if read_committed else plog.high_watermark
    if offset >= bound:
        return ShareRead(b"", ())
    if rlm is not None and plog.log_start_offset <= offset < plog.local_log_start_offset:
        future = rlm.read(tip, plog, offset, max_bytes, True, read_committed)
        result = await asyncio.wait_for(future, REMOTE_READ_TIMEOUT_S)
        raw = bytes(result.records)
        txns = None if result.aborted_txns is None else list(result.aborted_txns)
        if txns is not None and not result.aborted_txns_complete:
            txns += plog.collect_aborted_transactions(result.first_batch_offset, result.upper_bound_offset)
        records, batches = whole_batches(raw, bound)
    else:
        isolation = FetchIsolation.TXN_COMMITTED if read_committed else FetchIsolation.HIGH_WATERMARK
        data = plog.read(offset, max_bytes, isolation, min_one_message=True)
        sl = data.records
        if sl is None or not sl.size:
            return ShareRead(b"", ())
        batches = local_batches(sl, bound, max_records)
        if not batches:
            return ShareRead(b"", ())
        last_position, last = batches[-1]
        records = FileSlice(sl.file, sl.position, last_position + last.size)
        txns = None
        if read_committed:
            served = data.fetch_offset_metadata.segment_base_offset
            txns = plog.collect_aborted_transactions(offset, plog.aborted_transactions_upper_bound(served))
    aborted = aborted_ranges(batches, [(a.producer_id, a.first_offset) for a in txns or ()])
    return ShareRead(records, tuple(batches), aborted)
