"""An active segment finds the batches appended last without the index and its header scan (``LogSegment._tail``).

The shortcut must answer exactly what the scan from the sparse index answers, for every offset, after any
sequence of appends (many small batches, so the tail is trimmed), truncations, a recovery and a roll.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.common.clock import ManualClock
from strata.config import LogConfig
from strata.log.segment import TAIL_BATCHES, LogSegment
from strata.protocol.records import build_batch
from strata.protocol.records.batch import iter_batches

CONFIG = LogConfig(index_interval_bytes=4096)


def append(segment: LogSegment, next_offset: int, sizes: list[int]) -> int:
    """One append of a batch per size (that many records each); returns the next offset."""
    chunks = []
    for n in sizes:
        chunks.append(build_batch([b"v%d" % i for i in range(n)], base_offset=next_offset, timestamp=1))
        next_offset += n
    records = b"".join(chunks)
    segment.append(records, list(iter_batches(records)))
    return next_offset


def scanned(segment: LogSegment, offset: int) -> tuple[int, int, int] | None:
    """What the index and the scan answer (the tail set aside)."""
    kept = segment._tail
    segment._forget_tail()
    try:
        found = segment.translate_offset(offset)
    finally:
        segment._tail = kept
    return None if found is None else (found.offset, found.position, found.size)


def answered(segment: LogSegment, offset: int) -> tuple[int, int, int] | None:
    found = segment.translate_offset(offset)
    return None if found is None else (found.offset, found.position, found.size)


def check_every_offset(segment: LogSegment, end: int) -> None:
    for offset in range(segment.base_offset, end + 3):
        assert answered(segment, offset) == scanned(segment, offset), offset


@settings(max_examples=60, deadline=None)
@given(appends=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=40), min_size=1, max_size=12),
       cut=st.integers(0, 10_000))
def test_the_tail_answers_as_the_index_and_scan_do(tmp_path_factory, appends: list[list[int]], cut: int) -> None:
    directory: Path = tmp_path_factory.mktemp("seg")
    segment = LogSegment(directory, 100, CONFIG, ManualClock(), create=True)
    try:
        end = 100
        for sizes in appends:
            end = append(segment, end, sizes)
        assert len(segment._tail[0]) <= 2 * TAIL_BATCHES
        check_every_offset(segment, end)
        # truncated at a batch boundary: the tail is forgotten and rebuilt by the next appends
        boundaries = [pos_header[1].base_offset for pos_header in segment.log.iter_headers(0)]
        at = boundaries[cut % len(boundaries)]
        segment.truncate_to(at)
        check_every_offset(segment, at)
        end = append(segment, at, [1, 2, 3])
        check_every_offset(segment, end)
    finally:
        segment.close()


def test_the_tail_is_dropped_when_the_segment_stops_being_active(tmp_path: Path) -> None:
    segment = LogSegment(tmp_path, 0, CONFIG, ManualClock(), create=True)
    try:
        end = append(segment, 0, [2] * 10)
        assert answered(segment, 5) == scanned(segment, 5) and segment._tail[0]
        segment.on_become_inactive_segment()
        assert segment._tail == ([], [])
        check_every_offset(segment, end)
        segment.recover()
        check_every_offset(segment, end)
    finally:
        segment.close()
