"""Corrupt remote data is never served: bit flips and truncations of remote segments and indexes against
the remote read path (``RemoteLogReader``), with the local copy of every segment as the oracle.

The invariant, for every fetch: either the records are byte for byte what the local log answers (or a
leading run of its batches, when a corrupt batch follows them), or the fetch is refused - with
``CorruptRemoteSegmentError`` (action ``fail``) or by moving on to the next segment (``skip``). A corrupt
index never costs data at all. Positions and bits are drawn by hypothesis (derandomized, bounded).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.tiered.test_remote_reader import (
    BATCHES,
    RECORDS_PER_BATCH,
    T0,
    Tiered,
    abort,
    make_tiered,
    plain_batch,
    txn_batch,
    write_log,
)

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.errors import KafkaStorageError
from strata.log.errors import CorruptIndexError
from strata.log.loader import load_partition_log
from strata.protocol.records import iter_batches
from strata.tiered.api import IndexType, RemoteLogSegmentMetadata
from strata.tiered.reader import CorruptRemoteSegmentError, RemoteFetchResult

CONFIG = LogConfig(segment_bytes=900, index_interval_bytes=200)
LAST_REMOTE = BATCHES * RECORDS_PER_BATCH - 1
EXAMPLES = settings(max_examples=40, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    """``make(**reader_kwargs)``: a fresh tiered log (its own directory) per call, closed at teardown."""
    made: list[Tiered] = []

    def _make(**reader_kwargs: Any) -> Tiered:
        directory = tmp_path / uuid.uuid4().hex
        plog = load_partition_log(directory / "t-0", TopicPartition("t", 0), CONFIG, ManualClock(), ManualScheduler())
        write_log(plog)
        t = make_tiered(plog, directory, **reader_kwargs)
        made.append(t)
        return t

    yield _make
    for t in made:
        t.cache.close()
        t.plog.local_log.close_handlers()


def log_bytes(t: Tiered, md: RemoteLogSegmentMetadata) -> bytearray:
    return bytearray(t.rsm.objects[(md.remote_log_segment_id.id, "log")])


def store(t: Tiered, md: RemoteLogSegmentMetadata, data: bytes | bytearray, kind: str = "log") -> None:
    t.rsm.objects[(md.remote_log_segment_id.id, kind)] = bytes(data)


def segment_reads(t: Tiered, md: RemoteLogSegmentMetadata) -> int:
    return sum(1 for key, _, _ in t.rsm.segment_fetches if key == md.remote_log_segment_id.id)


def batch_at(data: bytes | bytearray, position: int) -> tuple[int, int]:
    """(base offset, last offset) of the batch holding byte ``position`` (read before the damage)."""
    for pos, header in iter_batches(bytes(data)):
        if pos <= position < pos + header.size:
            return header.base_offset, header.last_offset
    raise AssertionError(position)


def read(t: Tiered, offset: int, max_bytes: int) -> RemoteFetchResult | None:
    """The fetch's answer, or None when it was refused as corrupt."""
    try:
        return t.read(offset, max_bytes)
    except CorruptRemoteSegmentError:
        return None


def assert_never_corrupt(t: Tiered, offset: int, max_bytes: int, result: RemoteFetchResult | None) -> None:
    """Refused, or a leading run of the batches the local log answers (the whole answer off the damage)."""
    if result is None:
        return
    expected = t.local(offset, max_bytes)
    got = bytes(result.records)
    assert got and expected.startswith(got), (offset, max_bytes)
    assert [h.crc for _, h in iter_batches(got, verify_crc=True)]  # every batch checks out


# -- bit flips and truncations of segments -------------------------------------------------------


@EXAMPLES
@given(segment=st.integers(0, 100), where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7),
       max_bytes=st.sampled_from([1, 150, 10_000]))
def test_a_flipped_bit_anywhere_in_a_segment_is_never_served(make, segment, where, bit, max_bytes):
    """Fail action: offsets before the damaged batch are served (a leading run), the damaged batch and the
    rest of its segment answer CorruptRemoteSegmentError - at once, without reading the store again,
    once known - and every other segment reads exactly as the local log."""
    t = make()
    md = t.mds[segment % len(t.mds)]
    data = log_bytes(t, md)
    position = int(where * len(data))
    first_bad, _ = batch_at(data, position)
    data[position] ^= 1 << bit
    store(t, md, data)
    for offset in range(LAST_REMOTE + 1):
        result = read(t, offset, max_bytes)
        assert_never_corrupt(t, offset, max_bytes, result)
        if not md.start_offset <= offset <= md.end_offset:
            assert result is not None and result.records == t.local(offset, max_bytes), offset
        elif offset < first_bad:
            assert result is not None, (offset, first_bad)
        elif offset == first_bad:
            assert result is None, (offset, position, bit)
    reads = segment_reads(t, md)
    for offset in range(first_bad, md.end_offset + 1):
        assert read(t, offset, max_bytes) is None
    assert segment_reads(t, md) == reads
    [known] = t.reader.corrupt_segments()
    assert known.md == md and known.from_offset == first_bad


@EXAMPLES
@given(segment=st.integers(0, 100), where=st.floats(0, 1, exclude_max=True))
def test_a_truncated_segment_object_serves_its_whole_batches_only(make, segment, where):
    t = make()
    md = t.mds[segment % len(t.mds)]
    data = log_bytes(t, md)
    cut = int(where * len(data))
    first_bad, _ = batch_at(data, cut)
    store(t, md, data[:cut])
    for offset in range(md.start_offset, md.end_offset + 1):
        result = read(t, offset, 10_000)
        assert_never_corrupt(t, offset, 10_000, result)
        assert (result is None) == (offset >= first_bad), (offset, cut, first_bad)


def test_a_segment_cut_at_a_batch_boundary_is_not_a_quiet_end(make):
    """The object ends early exactly between two batches: that is not "no more batches here, try the
    next segment" (which would skip the missing offsets without a word)."""
    t = make()
    md = t.mds[1]
    data = log_bytes(t, md)
    (pos, header), *_ = [(p, h) for p, h in iter_batches(bytes(data)) if p > 0]
    store(t, md, data[:pos])
    assert read(t, header.base_offset, 10_000) is None
    assert read(t, md.start_offset, 10_000).records == t.local(md.start_offset, 10_000)[:pos]


@pytest.mark.parametrize("field,offset_in_batch", [("base offset low bit", 7), ("leader epoch", 15),
                                                   ("magic 2 -> 0", 16), ("length", 11)])
def test_header_fields_outside_the_crc_are_checked_too(make, field, offset_in_batch):
    """The base offset and the partition leader epoch are not covered by the CRC (Kafka's format); a magic
    turned into 0 would read as an old message format. All are corruption, never records."""
    t = make()
    md = t.mds[2]
    data = log_bytes(t, md)
    (pos, header), *_ = [(p, h) for p, h in iter_batches(bytes(data)) if p > 0]
    data[pos + offset_in_batch] ^= 2 if field.startswith("magic") else 1
    store(t, md, data)
    assert read(t, header.base_offset, 10_000) is None, field
    before = read(t, md.start_offset, 10_000)
    assert before is not None and before.records == t.local(md.start_offset, 10_000)[:pos], field


@EXAMPLES
@given(segment=st.integers(0, 100), where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_skip_action_moves_to_the_next_segment(make, segment, where, bit):
    """Skip action: a fetch that meets the damage is answered from the next segment (an offset gap), or,
    past the last remote segment, says where the local log takes over; nothing wrong is ever served."""
    t = make(corrupt_segment_action="skip")
    index = segment % len(t.mds)
    md = t.mds[index]
    data = log_bytes(t, md)
    position = int(where * len(data))
    first_bad, _ = batch_at(data, position)
    data[position] ^= 1 << bit
    store(t, md, data)
    for offset in range(md.start_offset, md.end_offset + 1):
        result = t.read(offset, 10_000)
        if offset < first_bad:
            assert_never_corrupt(t, offset, 10_000, result)
            assert result.records
        elif index + 1 < len(t.mds):
            following = t.mds[index + 1]
            assert result.first_batch_offset == following.start_offset, offset
            assert result.records == t.local(following.start_offset, 10_000)
        else:
            assert (result.records, result.resume_offset) == (b"", md.end_offset + 1)


def test_fail_is_the_default_and_unknown_actions_are_refused(make):
    assert make().reader.corrupt_segment_action == "fail"
    with pytest.raises(ValueError, match="corrupt segment action"):
        make(corrupt_segment_action="ignore")


def test_corruption_is_reported_once_per_segment_and_forgotten_with_it(make, caplog):
    reports: list[tuple[int, int]] = []
    t = make(on_corrupt_segment=lambda tp, n: reports.append((tp.partition, n)))
    for md in t.mds[:2]:
        data = log_bytes(t, md)
        data[100] ^= 0x10
        store(t, md, data)
    with caplog.at_level(logging.ERROR, logger="strata.tiered.reader"):
        for _ in range(3):
            for offset in range(t.mds[1].end_offset + 1):
                read(t, offset, 10_000)
    errors = [r for r in caplog.records if "is corrupt from offset" in r.getMessage()]
    assert len(errors) == 2 and reports == [(0, 1), (0, 2)]
    assert "t-0" in errors[0].getMessage() and str(t.mds[0].start_offset) in errors[0].getMessage()
    t.reader.forget_segment(t.mds[0].remote_log_segment_id.id)
    assert reports[-1] == (0, 1) and len(t.reader.corrupt_segments()) == 1


# -- indexes --------------------------------------------------------------------------------------


@EXAMPLES
@given(segment=st.integers(0, 100), entry=st.integers(0, 100), byte=st.integers(0, 7), bit=st.integers(0, 7))
def test_a_flipped_bit_in_a_remote_offset_index_costs_no_data(make, segment, entry, byte, bit):
    """Whatever entry goes wrong (an offset or a position, a batch boundary or not), every fetch still
    gets exactly what the local log answers: a wrong index falls back to a scan from position 0."""
    t = make()
    md = t.mds[segment % len(t.mds)]
    key = (md.remote_log_segment_id.id, IndexType.OFFSET.name)
    index = bytearray(t.rsm.objects[key])
    if not index:
        return
    index[(entry % (len(index) // 8)) * 8 + byte] ^= 1 << bit
    t.rsm.objects[key] = bytes(index)
    for offset in range(md.start_offset, md.end_offset + 1):
        for max_bytes in (1, 10_000):
            assert t.read(offset, max_bytes).records == t.local(offset, max_bytes), (offset, max_bytes)


def test_a_remote_offset_index_failing_its_sanity_check_is_not_used_and_not_refetched(make, caplog):
    t = make()
    md = t.mds[1]
    key = (md.remote_log_segment_id.id, IndexType.OFFSET.name)
    t.rsm.objects[key] += b"\x00\x01\x02"
    with pytest.raises(CorruptIndexError):  # the cache itself keeps Kafka's behaviour
        t.cache.lookup_offset(md, md.start_offset)
    with caplog.at_level(logging.ERROR, logger="strata.tiered.reader"):
        for _ in range(2):
            for offset in range(md.start_offset, md.end_offset + 1):
                assert t.read(offset, 100).records == t.local(offset, 100), offset
    assert t.rsm.index_fetch_count(md, IndexType.OFFSET) == 2  # the cache's own attempt, then the reader's one
    assert len([r for r in caplog.records if "remote offset index of segment" in r.getMessage()]) == 1


def test_an_index_pointing_inside_a_batch_is_reported_once(make, caplog):
    t = make()
    md = t.mds[2]
    key = (md.remote_log_segment_id.id, IndexType.OFFSET.name)
    index = bytearray(t.rsm.objects[key])
    assert len(index) >= 8
    last_offset = int.from_bytes(index[-8:-4], "big") + md.start_offset
    index[-4:] = (int.from_bytes(index[-4:], "big") + 5).to_bytes(4, "big")  # 5 bytes into the batch
    t.rsm.objects[key] = bytes(index)
    with caplog.at_level(logging.WARNING, logger="strata.tiered.reader"):
        for _ in range(3):
            assert t.read(last_offset, 1).records == t.local(last_offset, 1)
    assert len([r for r in caplog.records if "a fresh read from position 0 succeeded" in r.getMessage()]) == 1
    assert not t.reader.corrupt_segments()


@pytest.mark.parametrize("offset_in_batch", [0, 1, 2])
def test_a_base_offset_flip_in_the_batch_an_index_entry_names_is_caught_mid_batch(make, offset_in_batch):
    """The batch an index entry points at has no predecessor in the scan, so contiguity cannot catch a
    flipped base offset there; the entry can (it is keyed by that batch's last offset). Without that
    check a fetch inside the batch would get its records under shifted offsets."""
    t = make()
    md = t.mds[1]
    index = t.rsm.objects[(md.remote_log_segment_id.id, IndexType.OFFSET.name)]
    relative, position = int.from_bytes(index[:4], "big"), int.from_bytes(index[4:8], "big")
    data = log_bytes(t, md)
    header = next(h for p, h in iter_batches(bytes(data)) if p == position)
    assert header.last_offset == md.start_offset + relative and header.records_count == RECORDS_PER_BATCH
    data[position + 7] ^= 1  # base offset +-1: the CRC does not cover it
    store(t, md, data)
    assert read(t, header.base_offset + offset_in_batch, 1) is None


def test_a_corrupt_transaction_index_fails_only_read_committed(make, tmp_path):
    """Aborted transactions cannot be proven without the index: read_committed gets a storage error (never
    records with aborted data passed off as committed); read_uncommitted reads the segment as usual."""
    plog = load_partition_log(tmp_path / "txn" / "t-0", TopicPartition("t", 0), LogConfig(segment_bytes=100_000),
                              ManualClock(), ManualScheduler())
    plog.append_as_leader(plain_batch(T0), leader_epoch=0)
    plog.append_as_leader(txn_batch(7, 0, T0 + 1), leader_epoch=0)
    abort(plog, 7, T0 + 2)
    plog.roll()
    plog.append_as_leader(plain_batch(T0 + 3), leader_epoch=0)
    t = make_tiered(plog, tmp_path / "txn")
    try:
        md = t.mds[0]
        assert not md.txn_idx_empty
        t.rsm.objects[(md.remote_log_segment_id.id, IndexType.TRANSACTION.name)] += b"\x01"  # not whole entries
        assert t.read(0, 10_000).records == t.local(0, 10_000)
        with pytest.raises(KafkaStorageError):
            t.read(0, 10_000, committed=True)
    finally:
        t.cache.close()
        plog.local_log.close_handlers()
