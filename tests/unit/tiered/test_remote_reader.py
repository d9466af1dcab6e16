"""The remote read path against real segments: a PartitionLog is written and rolled, its segments are
"uploaded" to an in-memory RSM, and every remote answer is checked against the local log's own answer
for the same offset or timestamp (the local copy stays on disk, so it is the oracle).

The fakes here (``DictRSM``, ``DictRLMM``, ``tier``) are also used by ``test_index_cache.py``.
"""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from strata.config import LogConfig
from strata.errors import OffsetOutOfRangeError
from strata.log.partition_log import FetchIsolation, PartitionLog
from strata.log.producer_state import AppendOrigin
from strata.log.txn_index import AbortedTxn
from strata.protocol.records import BatchBuilder, ControlRecordType, build_control_batch, iter_batches
from strata.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    TopicIdPartition,
)
from strata.tiered.index_cache import RemoteIndexCache
from strata.tiered.reader import RemoteFetchResult, RemoteLogReader, epoch_for_offset, find_offset_by_timestamp, read

TP = TopicIdPartition(uuid.UUID(int=0xC0FFEE), "t", 0)

# -- fakes -----------------------------------------------------------------------------------------


class DictRSM(RemoteStorageManager):
    """Keeps uploads in a dict and records every fetch, so tests can assert on ranges and counts."""

    def __init__(self) -> None:
        self.objects: dict[tuple[uuid.UUID, str], bytes] = {}
        self.segment_fetches: list[tuple[uuid.UUID, int, int | None]] = []
        self.index_fetches: list[tuple[uuid.UUID, IndexType]] = []
        self.lock = threading.Lock()

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        key = metadata.remote_log_segment_id.id
        files: dict[str, Path | None] = {"log": data.log_segment, IndexType.OFFSET.name: data.offset_index,
                                         IndexType.TIMESTAMP.name: data.time_index,
                                         IndexType.TRANSACTION.name: data.transaction_index}
        for kind, path in files.items():
            if path is not None and path.exists():
                self.objects[(key, kind)] = path.read_bytes()
        return None

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        key = metadata.remote_log_segment_id.id
        with self.lock:
            self.segment_fetches.append((key, start_position, end_position))
        data = self.objects[(key, "log")]
        return io.BytesIO(data[start_position: None if end_position is None else end_position + 1])

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        key = metadata.remote_log_segment_id.id
        with self.lock:
            self.index_fetches.append((key, index_type))
        try:
            return io.BytesIO(self.objects[(key, index_type.name)])
        except KeyError:
            raise RemoteResourceNotFoundError(f"no {index_type.name} index for {key}") from None

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        key = metadata.remote_log_segment_id.id
        for kind in [k for k in self.objects if k[0] == key]:
            del self.objects[kind]

    def index_fetch_count(self, md: RemoteLogSegmentMetadata, index_type: IndexType | None = None) -> int:
        key = md.remote_log_segment_id.id
        return sum(1 for k, t in self.index_fetches if k == key and (index_type is None or t is index_type))


class DictRLMM(RemoteLogMetadataManager):
    """Kafka's RemoteLogMetadataCache lookup rules over a plain dict (enough for read-path tests)."""

    def __init__(self) -> None:
        self.segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        assert metadata.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        self.segments[metadata.remote_log_segment_id] = metadata

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        md = self.segments[update.remote_log_segment_id]
        self.segments[update.remote_log_segment_id] = md.create_with_updates(update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        pass

    def _finished(self, tp: TopicIdPartition, epoch: int) -> list[RemoteLogSegmentMetadata]:
        return sorted((md for md in self.segments.values() if md.topic_id_partition == tp
                       and md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                       and epoch in md.segment_leader_epochs), key=lambda md: md.start_offset)

    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        candidates = [md for md in self._finished(tp, epoch_for_offset)
                      if md.segment_leader_epochs[epoch_for_offset] <= offset]
        if not candidates:
            return None
        md = candidates[-1]
        higher = [start for e, start in md.segment_leader_epochs.items() if e > epoch_for_offset]
        epoch_end = higher[0] - 1 if higher else md.end_offset
        return md if offset <= epoch_end else None

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        ends = [md.end_offset for md in self._finished(tp, leader_epoch)]
        return max(ends) if ends else None

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        return iter(sorted((md for md in self.segments.values() if md.topic_id_partition == tp
                            and md.state is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
                            and (leader_epoch is None or leader_epoch in md.segment_leader_epochs)),
                           key=lambda md: md.start_offset))

    def next_segment_with_txn_index(self, tp: TopicIdPartition, epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        return next((md for md in self._finished(tp, epoch)
                     if md.end_offset >= offset and not md.txn_idx_empty), None)

    def on_partition_leadership_changes(self, leaders: set[TopicIdPartition],
                                        followers: set[TopicIdPartition]) -> None:
        pass

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        pass


def tier(plog: PartitionLog, rsm: RemoteStorageManager,
         rlmm: RemoteLogMetadataManager) -> list[RemoteLogSegmentMetadata]:
    """Upload every segment but the active one, as the RLM copier would, and mark it finished."""
    segments = plog.segments
    snapshot = plog.dir.parent / "empty-producer-snapshot"  # outside the log dir: the loader owns that
    snapshot.touch()
    uploaded = []
    for segment, following in zip(segments, segments[1:], strict=False):
        end = following.base_offset
        epochs = plog.leader_epoch_cache.epoch_entries_in_range(segment.base_offset, end)
        txn = segment.txn_index.path if not segment.txn_index.is_empty else None
        segment.offset_index.settle()  # as the copier does: a roll may leave the cut to the background flush
        segment.time_index.settle()
        md = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(TP), segment.base_offset, end - 1, segment.max_timestamp_so_far,
            broker_id=0, event_timestamp_ms=0, segment_size_in_bytes=segment.size,
            segment_leader_epochs={e.epoch: e.start_offset for e in epochs}, txn_idx_empty=txn is None)
        rlmm.add_remote_log_segment_metadata(md)
        rsm.copy_log_segment_data(md, LogSegmentData(segment.log.path, segment.offset_index.path,
                                                     segment.time_index.path, txn,
                                                     snapshot, b""))
        update = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 0, None,
                                                RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0)
        rlmm.update_remote_log_segment_metadata(update)
        uploaded.append(md.create_with_updates(update))
    return uploaded


@dataclass
class Tiered:
    plog: PartitionLog
    rsm: DictRSM
    rlmm: DictRLMM
    cache: RemoteIndexCache
    reader: RemoteLogReader
    mds: list[RemoteLogSegmentMetadata]

    @property
    def epochs(self) -> list[tuple[int, int]]:
        return [tuple(e) for e in self.plog.leader_epoch_cache.epoch_entries()]  # type: ignore[misc]

    def read(self, offset: int, max_bytes: int, min_one: bool = True, committed: bool = False) -> RemoteFetchResult:
        return self.reader.read(TP, self.epochs, offset, max_bytes, min_one, committed)

    def local(self, offset: int, max_bytes: int, min_one: bool = True) -> bytes:
        info = self.plog.read(offset, max_bytes, FetchIsolation.LOG_END, min_one)
        return info.records.read() if info.records is not None else b""

    def md_of(self, offset: int) -> RemoteLogSegmentMetadata:
        return next(md for md in self.mds if md.start_offset <= offset <= md.end_offset)


T0 = 1_700_000_000_000 - 1_000_000
BATCHES = 30
RECORDS_PER_BATCH = 3


def record_ts(batch: int, record: int) -> int:
    """Timestamps grow by batch but not within one (2, 0, 1): the search must look at each record."""
    return T0 + 10 * batch + (2, 0, 1)[record]


def write_log(plog: PartitionLog) -> None:
    """30 batches of 3 records of varying size, epoch 0 then epoch 3, then a roll and a local tail."""
    for b in range(BATCHES):
        builder = BatchBuilder()
        for r in range(RECORDS_PER_BATCH):
            builder.append(b"v" * (20 + (b * 37) % 90), key=b"k%d" % b, timestamp=record_ts(b, r))
        plog.append_as_leader(builder.build(), leader_epoch=0 if b < 15 else 3)
    plog.roll()
    tail = BatchBuilder()
    tail.append(b"local", timestamp=T0 + 10_000)
    plog.append_as_leader(tail.build(), leader_epoch=3)


def make_tiered(plog: PartitionLog, tmp_path: Path, **reader_kwargs: Any) -> Tiered:
    rsm, rlmm = DictRSM(), DictRLMM()
    mds = tier(plog, rsm, rlmm)
    cache = RemoteIndexCache(rsm, tmp_path / "cache-dir", 1024 * 1024)
    return Tiered(plog, rsm, rlmm, cache, RemoteLogReader(rsm, rlmm, cache, **reader_kwargs), mds)


@pytest.fixture
def tiered(open_log, tmp_path) -> Iterator[Tiered]:
    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog)
    t = make_tiered(plog, tmp_path)
    assert len(t.mds) >= 4 and t.mds[-1].end_offset == BATCHES * RECORDS_PER_BATCH - 1
    yield t
    t.cache.close()


def batch_offsets(records: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(records)]


# -- reads -------------------------------------------------------------------------------------


def test_every_offset_reads_what_the_local_log_returns(tiered):
    """Segment start, middle, last offset and offsets inside batches, for several sizes."""
    for max_bytes in (0, 50, 150, 400, 10_000):
        for min_one in (True, False):
            for offset in range(BATCHES * RECORDS_PER_BATCH):
                got = tiered.read(offset, max_bytes, min_one)
                expected = tiered.local(offset, max_bytes, min_one)
                assert got.records == expected, (offset, max_bytes, min_one)
                if expected:
                    assert got.first_batch_offset <= offset <= batch_offsets(expected)[0][1]
                    assert got.upper_bound_offset == batch_offsets(expected)[-1][1] + 1
                    assert got.remote_segment == tiered.md_of(offset)
                else:
                    assert got.first_batch_offset == offset
                assert got.aborted_txns is None


def test_read_inside_a_batch_returns_that_whole_batch(tiered):
    result = tiered.read(4, 10_000)  # batch 1 holds offsets 3..5
    assert result.first_batch_offset == 3
    assert batch_offsets(result.records)[0] == (3, 5)
    # never past the segment holding the offset
    assert batch_offsets(result.records)[-1][1] == tiered.md_of(4).end_offset


def test_max_bytes_below_the_first_batch(tiered):
    first_size = len(tiered.local(0, 1))
    assert first_size > 100
    assert tiered.read(0, 100, min_one=False).records == b""
    one = tiered.read(0, 100, min_one=True)
    assert batch_offsets(one.records) == [(0, 2)] and len(one.records) == first_size


def test_records_are_whole_batches_within_max_bytes(tiered):
    sizes = [h.size for _, h in iter_batches(tiered.local(0, 10_000))]
    budget = sizes[0] + sizes[1] + sizes[2] // 2
    result = tiered.read(0, budget)
    assert len(result.records) == sizes[0] + sizes[1]
    assert batch_offsets(result.records) == [(0, 2), (3, 5)]


def test_segment_reads_are_bounded_ranges(open_log, tmp_path):
    """Every read is bounded by the skip the offset index allows (to the next entry) plus max_bytes
    and the slack; a fetch at a segment's start offset reads no skip at all."""
    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog)
    t = make_tiered(plog, tmp_path, scan_slack_bytes=64)
    md = t.mds[1]
    t.read(md.start_offset, 300)
    assert t.rsm.segment_fetches == [(md.remote_log_segment_id.id, 0, 300 + 64 - 1)]
    for max_bytes in (1, 100, 300):
        for offset in range(BATCHES * RECORDS_PER_BATCH):
            t.rsm.segment_fetches.clear()
            t.read(offset, max_bytes, min_one=False)
            md = t.md_of(offset)
            position, next_position = t.cache.lookup_offset(md, offset)
            skip = next_position - position if next_position is not None and offset > md.start_offset else 0
            for _, start, end in t.rsm.segment_fetches:
                assert end is not None and end - start + 1 <= skip + max_bytes + 64, (offset, max_bytes)
    t.cache.close()


def big_batch(records: int = 10, value_size: int = 3000) -> bytes:
    b = BatchBuilder()
    for i in range(records):
        b.append(bytes([i]) * value_size, timestamp=T0 + i)
    return b.build()


def test_a_first_batch_larger_than_the_window_is_in_the_one_read_when_an_index_entry_follows(open_log, tmp_path):
    """The entry after the big batch bounds where the batch holding offset 5 starts, so the single
    read covers the whole big batch: no second, exact read."""
    plog = open_log(LogConfig(segment_bytes=100_000, index_interval_bytes=200))
    plog.append_as_leader(big_batch(), leader_epoch=0)
    small = BatchBuilder()
    small.append(b"after", timestamp=T0 + 20)
    plog.append_as_leader(small.build(), leader_epoch=0)
    plog.roll()
    t = make_tiered(plog, tmp_path, scan_slack_bytes=1000)
    big_size = len(t.local(0, 1))
    assert big_size > 30_000
    md = t.mds[0]
    assert t.cache.lookup_offset(md, 5) == (0, big_size)
    result = t.read(5, 500)
    assert result.records == t.local(5, 500) and batch_offsets(result.records) == [(0, 9)]
    key = md.remote_log_segment_id.id
    assert t.rsm.segment_fetches == [(key, 0, md.segment_size_in_bytes - 1)]  # clipped to the segment
    t.rsm.segment_fetches.clear()
    assert t.read(5, 500, min_one=False).records == b""
    assert len(t.rsm.segment_fetches) == 1
    t.cache.close()


def test_a_first_batch_larger_than_the_window_costs_one_exact_extra_range(open_log, tmp_path):
    """No index entry bounds the batch (it is the segment's only one): the first read is
    ``max_bytes + slack`` and a second, exact read fetches the rest of the batch."""
    plog = open_log(LogConfig(segment_bytes=100_000, index_interval_bytes=200))
    plog.append_as_leader(big_batch(), leader_epoch=0)
    plog.roll()
    t = make_tiered(plog, tmp_path, scan_slack_bytes=1000)
    big_size = len(t.local(0, 1))
    assert big_size > 30_000
    md = t.mds[0]
    assert t.cache.lookup_offset(md, 5) == (0, None)
    result = t.read(5, 500)
    assert result.records == t.local(5, 500) and batch_offsets(result.records) == [(0, 9)]
    key = md.remote_log_segment_id.id
    assert t.rsm.segment_fetches == [(key, 0, 1500 - 1), (key, 1500, big_size - 1)]
    t.rsm.segment_fetches.clear()
    assert t.read(5, 500, min_one=False).records == b""
    assert t.rsm.segment_fetches == [(key, 0, 1500 - 1)]
    t.cache.close()


def consume(t: Tiered, max_bytes: int) -> list[tuple[RemoteFetchResult, int]]:
    """Fetch after fetch from offset 0 as a consumer does (each starts where the previous ended);
    each result with the number of ``fetch_log_segment`` calls it made. Checked against the local log."""
    out = []
    offset = 0
    while offset <= t.mds[-1].end_offset:
        before = len(t.rsm.segment_fetches)
        result = t.read(offset, max_bytes)
        assert result.records == t.local(offset, max_bytes), offset
        out.append((result, len(t.rsm.segment_fetches) - before))
        offset = result.upper_bound_offset
    return out


def write_batches(plog: PartitionLog, sizes: list[int], records: int = 4) -> None:
    for i, size in enumerate(sizes):
        b = BatchBuilder()
        for r in range(records):
            b.append(bytes([(i + r) % 251]) * (size // records), timestamp=T0 + i)
        plog.append_as_leader(b.build(), leader_epoch=0)


@pytest.mark.parametrize("max_bytes", [100_000, 256 * 1024, 1024 * 1024])
def test_consecutive_fetches_of_batches_larger_than_the_slack_make_one_read_each(open_log, tmp_path, max_bytes):
    """The benchmark's finding: a fetch at a batch boundary looks up the *previous* batch (entries are
    keyed by last offsets); with 64 KiB batches (bigger than the 16 KiB slack) the first read fell
    short and a second one fetched the tail. The next entry's position now sizes the one read."""
    plog = open_log(LogConfig(segment_bytes=3 * 1024 * 1024))  # default index.interval.bytes (4 KiB)
    write_batches(plog, [64 * 1024] * 100)
    plog.roll()
    t = make_tiered(plog, tmp_path)  # default 16 KiB slack
    assert len(t.mds) >= 2
    fetches = consume(t, max_bytes)
    assert len(fetches) > len(t.mds)  # fetches start mid-segment, at batch boundaries
    assert [reads for _, reads in fetches] == [1] * len(fetches)
    t.cache.close()


def test_consecutive_fetches_of_mixed_batch_sizes_make_one_read_each(open_log, tmp_path):
    """Small batches between big ones, so fetches also start past a segment's last index entry
    (where the skip is bounded by index.interval.bytes, within the slack)."""
    import random

    rng = random.Random(7)
    plog = open_log(LogConfig(segment_bytes=512 * 1024))
    write_batches(plog, [rng.choice((300, 2_000, 9_000, 40_000, 90_000)) for _ in range(150)], records=2)
    plog.roll()
    t = make_tiered(plog, tmp_path)
    for max_bytes in (100_000, 150_000, 400_000):
        fetches = consume(t, max_bytes)
        assert [reads for _, reads in fetches] == [1] * len(fetches), max_bytes
    t.cache.close()


def test_records_are_a_read_only_view_of_the_one_read_buffer(tiered):
    result = tiered.read(7, 10_000)
    assert isinstance(result.records, memoryview) and result.records.readonly
    assert result.records == tiered.local(7, 10_000)
    assert isinstance(result.records.obj, bytearray)  # what the store's readinto filled, not a copy


class ReadintoOnlyStream(io.RawIOBase):
    """A stream that fails on read(): proves the reader fills its buffer through readinto."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._data = memoryview(data)
        self.calls = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.calls += 1
        n = min(len(buffer), len(self._data), 1000)  # short reads: the reader must loop
        buffer[:n] = self._data[:n]
        self._data = self._data[n:]
        return n

    def read(self, size: int = -1) -> bytes:
        raise AssertionError("the reader must use readinto")


def test_a_stream_with_read_view_becomes_the_window_without_a_copy(open_log, tmp_path):
    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog)
    t = make_tiered(plog, tmp_path)
    fetch = t.rsm.fetch_log_segment
    streams: list[ViewStream] = []

    def wrapped(md: RemoteLogSegmentMetadata, start: int, end: int | None = None) -> Any:
        streams.append(ViewStream(fetch(md, start, end).read()))
        return streams[-1]

    t.rsm.fetch_log_segment = wrapped  # type: ignore[method-assign]
    result = t.read(7, 10_000)
    assert result.records == t.local(7, 10_000) and result.records.readonly
    assert len(streams) == 1 and streams[0].calls == 0  # no readinto: the stream's memory is the window
    assert result.records.obj is streams[0].buffer
    t.cache.close()


class ReadOnlyStream:
    """A third-party RSM's stream with read() only."""

    def __init__(self, data: bytes) -> None:
        self._stream = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._stream.read(min(size, 777))

    def close(self) -> None:
        pass


class ViewStream(ReadintoOnlyStream):
    """A stream holding its range in memory, like the S3 RSM's: ``read_view`` hands out that memory."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.buffer = data

    def read_view(self, size: int) -> memoryview:
        view = self._data[:size]
        self._data = self._data[len(view):]
        return view


@pytest.mark.parametrize("stream", [ReadintoOnlyStream, ReadOnlyStream, ViewStream])
def test_reads_through_readinto_or_read(open_log, tmp_path, stream):
    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog)
    t = make_tiered(plog, tmp_path)
    fetch = t.rsm.fetch_log_segment

    def wrapped(md: RemoteLogSegmentMetadata, start: int, end: int | None = None) -> Any:
        return stream(fetch(md, start, end).read())

    t.rsm.fetch_log_segment = wrapped  # type: ignore[method-assign]
    for offset in range(0, BATCHES * RECORDS_PER_BATCH, 5):
        assert t.read(offset, 400).records == t.local(offset, 400), offset
    t.cache.close()


def test_an_offset_in_a_gap_at_a_segment_end_is_served_from_the_next_segment(open_log, tmp_path):
    """A compacted (or aborted-gap) tail: segment [0..19] holds batches up to 12 only."""
    plog = open_log(LogConfig(segment_bytes=100_000))
    for base, count in ((0, 5), (5, 8)):
        b = BatchBuilder(base_offset=base, partition_leader_epoch=0)
        for i in range(count):
            b.append(b"x%d" % i, timestamp=T0 + base + i)
        plog.append_as_follower(b.build())
    plog.roll(20)
    b = BatchBuilder(base_offset=20, partition_leader_epoch=0)
    b.append(b"twenty", timestamp=T0 + 20)
    plog.append_as_follower(b.build())
    plog.roll()
    t = make_tiered(plog, tmp_path)
    assert [(md.start_offset, md.end_offset) for md in t.mds] == [(0, 19), (20, 20)]
    for offset in range(13, 20):
        result = t.read(offset, 10_000)
        assert batch_offsets(result.records) == [(20, 20)]
        assert result.remote_segment == t.mds[1] and result.first_batch_offset == 20
    t.cache.close()


def test_a_gap_with_no_following_segment_reads_empty(open_log, tmp_path):
    plog = open_log(LogConfig(segment_bytes=100_000))
    b = BatchBuilder(base_offset=0, partition_leader_epoch=0)
    b.append(b"only", timestamp=T0)
    plog.append_as_follower(b.build())
    plog.roll(10)
    t = make_tiered(plog, tmp_path)
    result = t.read(5, 10_000, committed=True)
    assert result.records == b"" and result.first_batch_offset == 5 and result.aborted_txns == []
    t.cache.close()


def test_unknown_offsets_are_out_of_range_with_kafkas_message(tiered):
    beyond = BATCHES * RECORDS_PER_BATCH  # the local-only active segment
    with pytest.raises(OffsetOutOfRangeError) as err:
        tiered.read(beyond, 1000)
    assert str(err.value) == (f"Received request for offset {beyond} for leader epoch 3 and partition t-0 "
                              f"which does not exist in remote tier.")
    with pytest.raises(OffsetOutOfRangeError, match="leader epoch NOT AVAILABLE"):
        tiered.reader.read(TP, [], 0, 1000, True, False)


def test_function_form(tiered):
    assert read(tiered.rsm, tiered.rlmm, tiered.cache, TP, tiered.epochs, 7, 1000, True, False).records == \
        tiered.local(7, 1000)


def test_epoch_for_offset_matches_the_leader_epoch_cache(tiered):
    cache = tiered.plog.leader_epoch_cache
    for offset in range(-1, 100):
        assert epoch_for_offset(tiered.epochs, offset) == cache.epoch_for_offset(offset)


# -- read_committed ------------------------------------------------------------------------------


def txn_batch(pid: int, seq: int, ts: int) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
    b.append(b"txn", timestamp=ts)
    return b.build()


def plain_batch(ts: int) -> bytes:
    b = BatchBuilder()
    b.append(b"plain", timestamp=ts)
    return b.build()


def abort(plog: PartitionLog, pid: int, ts: int) -> None:
    marker = build_control_batch(ControlRecordType.ABORT, producer_id=pid, producer_epoch=0, timestamp=ts)
    plog.append_as_leader(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)


@pytest.fixture
def txn_tiered(open_log, tmp_path) -> Iterator[Tiered]:
    """seg [0..6]: plain 0-3, pid 7 txn 4-5, plain 6 | seg [7..8]: plain 7, ABORT(7) 8
    | seg [9..10]: pid 9 txn 9, ABORT(9) 10 | seg [11]: plain 11 | active."""
    plog = open_log(LogConfig(segment_bytes=100_000))
    for i in range(4):
        plog.append_as_leader(plain_batch(T0 + i), leader_epoch=0)
    plog.append_as_leader(txn_batch(7, 0, T0 + 4), leader_epoch=0)
    plog.append_as_leader(txn_batch(7, 1, T0 + 5), leader_epoch=0)
    plog.append_as_leader(plain_batch(T0 + 6), leader_epoch=0)
    plog.roll()
    plog.append_as_leader(plain_batch(T0 + 7), leader_epoch=0)
    abort(plog, 7, T0 + 8)
    plog.roll()
    plog.append_as_leader(txn_batch(9, 0, T0 + 9), leader_epoch=0)
    abort(plog, 9, T0 + 10)
    plog.roll()
    plog.append_as_leader(plain_batch(T0 + 11), leader_epoch=0)
    plog.roll()
    t = make_tiered(plog, tmp_path)
    assert [(md.start_offset, md.end_offset, md.txn_idx_empty) for md in t.mds] == \
        [(0, 6, True), (7, 8, False), (9, 10, False), (11, 11, True)]
    yield t
    t.cache.close()


def test_read_committed_collects_aborted_txns_from_later_segments(txn_tiered):
    t = txn_tiered
    result = t.read(0, 10_000, committed=True)
    assert result.upper_bound_offset == 7
    assert result.aborted_txns == [AbortedTxn(7, 4, 8, 9)] == t.plog.collect_aborted_transactions(0, 7)
    assert result.aborted_txns_complete  # its last stable offset 9 reaches the bound: no later search
    # the first segment's index is known empty (KIP-1058): never fetched
    assert t.rsm.index_fetch_count(t.mds[0], IndexType.TRANSACTION) == 0


def test_read_committed_inside_the_aborting_segment(txn_tiered):
    result = txn_tiered.read(7, 10_000, committed=True)
    assert batch_offsets(result.records) == [(7, 7), (8, 8)]
    assert result.aborted_txns == [AbortedTxn(7, 4, 8, 9)] and result.aborted_txns_complete


def test_read_committed_past_the_last_txn_index_is_incomplete(txn_tiered):
    """Kafka goes on into the local segments: the caller must, from first_batch_offset to the bound."""
    result = txn_tiered.read(11, 10_000, committed=True)
    assert result.aborted_txns == [] and not result.aborted_txns_complete
    assert (result.first_batch_offset, result.upper_bound_offset) == (11, 12)


def test_read_uncommitted_has_no_aborted_txns(txn_tiered):
    result = txn_tiered.read(0, 10_000)
    assert result.aborted_txns is None
    assert txn_tiered.rsm.index_fetch_count(txn_tiered.mds[1], IndexType.TRANSACTION) == 0


# -- timestamps --------------------------------------------------------------------------------


def test_timestamp_lookups_match_the_local_log(tiered):
    remote_max = max(md.max_timestamp_ms for md in tiered.mds)
    timestamps = [T0 - 1_000, T0, T0 + 1, T0 + 5, remote_max - 1, remote_max, remote_max + 1, T0 + 10_000,
                  T0 + 20_000]
    timestamps += [record_ts(b, r) for b in range(BATCHES) for r in range(RECORDS_PER_BATCH)]
    for ts in timestamps:
        got = tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, ts, 0)
        expected = tiered.plog.fetch_offset_by_timestamp(ts)
        if ts > remote_max:
            assert got is None, ts  # only the local tail has it (or nothing has)
        else:
            assert got == expected, ts
    assert tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, T0 - 1_000, 0) == (T0 + 2, 0, 0)
    # an exact record timestamp: batch 4 has records (4*10+2, +0, +1) at offsets 12, 13, 14
    assert tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, T0 + 40, 0) == (T0 + 42, 12, 0)
    assert tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, T0 + 43, 0) == (T0 + 52, 15, 0)
    # epoch 3 segments carry their epoch
    assert tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, record_ts(20, 0), 0) == \
        (record_ts(20, 0), 60, 3)


def test_timestamp_lookup_honours_the_starting_offset(tiered):
    # ts T0 is first reached at offset 0; from 13 on, the first record at or after T0 is offset 13 itself
    assert tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, T0, 13) == (T0 + 40, 13, 0)
    assert tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, T0, 46) == (record_ts(15, 1), 46, 3)


def test_timestamp_lookup_defers_to_the_local_log_and_filters(tiered):
    md = tiered.mds[2]
    found = tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, md.max_timestamp_ms, 0,
                                                   local_log_start_offset=md.start_offset)
    assert found is None  # that segment is also local: the caller searches it there
    skip_first = find_offset_by_timestamp(tiered.rsm, tiered.rlmm, tiered.cache, TP, tiered.epochs, T0, 0,
                                          segment_filter=lambda m: m.start_offset > 0)
    assert skip_first is not None and skip_first.offset == tiered.mds[1].start_offset


def test_timestamp_lookup_skips_unfinished_segments(tiered):
    first = tiered.mds[0]
    tiered.rlmm.segments[first.remote_log_segment_id] = replace(
        first, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    found = tiered.reader.find_offset_by_timestamp(TP, tiered.epochs, T0, 0)
    assert found is not None and found.offset == tiered.mds[1].start_offset


# -- against the real local RSM ----------------------------------------------------------------------


def test_reads_and_timestamps_through_local_tiered_storage(open_log, tmp_path):
    """The same oracle checks through ``LocalTieredStorage`` (real files, real ranged streams)."""
    from strata.tiered.storage.local import EventType, LocalTieredStorage

    plog = open_log(LogConfig(segment_bytes=900, index_interval_bytes=200))
    write_log(plog)
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "bucket"), "events.log.enable": "false"})
    rlmm = DictRLMM()
    mds = tier(plog, rsm, rlmm)
    cache = RemoteIndexCache(rsm, tmp_path / "cache-dir", 1024 * 1024)
    t = Tiered(plog, DictRSM(), rlmm, cache, RemoteLogReader(rsm, rlmm, cache, scan_slack_bytes=100), mds)
    for max_bytes in (0, 150, 400, 10_000):
        for offset in range(BATCHES * RECORDS_PER_BATCH):
            assert t.read(offset, max_bytes).records == t.local(offset, max_bytes), (offset, max_bytes)
            assert t.read(offset, max_bytes, min_one=False).records == t.local(offset, max_bytes, False)
    for ts in range(T0 - 5, max(md.max_timestamp_ms for md in mds) + 1, 3):
        assert t.reader.find_offset_by_timestamp(TP, t.epochs, ts, 0) == plog.fetch_offset_by_timestamp(ts), ts
    fetches = rsm.events(EventType.FETCH_SEGMENT)
    assert fetches and all(e.end_position is not None and e.error is None for e in fetches)
    assert rsm.count(EventType.FETCH_OFFSET_INDEX) == len(mds)  # each index fetched once
    cache.close()
    rsm.close()


def test_consecutive_fetches_through_local_tiered_storage_are_one_fetch_segment_event_each(open_log, tmp_path):
    """The benchmark's measure (FETCH_SEGMENT events per remote read) on real files: 1 MiB fetches
    over 64 KiB batches, each fetch starting where the previous one ended."""
    from strata.tiered.storage.local import EventType, LocalTieredStorage

    plog = open_log(LogConfig(segment_bytes=3 * 1024 * 1024))
    write_batches(plog, [64 * 1024] * 100)
    plog.roll()
    rsm = LocalTieredStorage()
    rsm.configure({"dir": str(tmp_path / "bucket"), "events.log.enable": "false"})
    rlmm = DictRLMM()
    mds = tier(plog, rsm, rlmm)
    cache = RemoteIndexCache(rsm, tmp_path / "cache-dir", 1024 * 1024)
    t = Tiered(plog, DictRSM(), rlmm, cache, RemoteLogReader(rsm, rlmm, cache), mds)
    offset, fetches = 0, 0
    while offset <= mds[-1].end_offset:
        result = t.read(offset, 1024 * 1024)
        assert result.records == t.local(offset, 1024 * 1024), offset
        offset, fetches = result.upper_bound_offset, fetches + 1
    assert fetches > len(mds)
    assert rsm.count(EventType.FETCH_SEGMENT) == fetches
    cache.close()
    rsm.close()
