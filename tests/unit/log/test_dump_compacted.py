"""``strata dump-log`` on what the log cleaner leaves: offset gaps, tombstones, empty batches, delete horizons.

The segments are written byte by byte (the project's ``BatchBuilder``, then patched and re-sealed the way
the cleaner rewrites batches), so every offset, position and count below is known exactly.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from strata.common import TopicPartition
from strata.log.checkpoints import OffsetCheckpointFile
from strata.log.dump import (
    DumpOptions,
    Event,
    EventKind,
    FileType,
    collect_json,
    dump_file,
    dump_paths,
    file_type_of,
    format_event,
    has_problems,
)
from strata.protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    BatchBuilder,
    parse_header,
    reseal_crc,
)

SRC = Path(__file__).resolve().parents[3] / "src"
T0 = 1_700_000_000_000
HORIZON = T0 + 86_400_000  # delete.retention.ms after the cleaning that kept the tombstone
DELETE_HORIZON = 0x40  # attributes bit 6 (KIP-534)
LAST_OFFSET_DELTA_AT = ATTRIBUTES_OFFSET + 2
SEGMENT = "00000000000000000000.log"

Rec = tuple[int, bytes | None, bytes | None]  # offset delta, key, value


def build(base_offset: int, records: list[Rec], *, last_offset_delta: int | None = None,
          delete_horizon: int | None = None, **kwargs: Any) -> bytes:
    """A batch holding ``records`` (what the cleaner retained), keeping ``last_offset_delta`` of the original.

    With ``delete_horizon``: bit 6 set and the horizon as the base timestamp, the record timestamp deltas
    taken against it (as the cleaner re-encodes them), so each record keeps its own timestamp.
    """
    builder = BatchBuilder(base_offset=base_offset, partition_leader_epoch=0, **kwargs)
    if delete_horizon is not None:
        builder._base_timestamp = delete_horizon
    for delta, key, value in records:
        builder.append(value, key=key, timestamp=T0 + base_offset + delta, offset_delta=delta)
    data = bytearray(builder.build())
    if last_offset_delta is not None:
        struct.pack_into(">i", data, LAST_OFFSET_DELTA_AT, last_offset_delta)
    if delete_horizon is not None:
        (attributes,) = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)
        struct.pack_into(">h", data, ATTRIBUTES_OFFSET, attributes | DELETE_HORIZON)
    reseal_crc(data, 0, len(data))
    return bytes(data)


def empty_batch(base_offset: int, last_offset_delta: int, *, producer_id: int, producer_epoch: int,
                base_sequence: int, max_timestamp: int) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader``: 61 bytes, no records, the producer fields kept."""
    data = bytearray(RECORD_BATCH_OVERHEAD)
    HEADER_STRUCT.pack_into(data, 0, base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD, 0, 2, 0, 0,
                            last_offset_delta, NO_TIMESTAMP, max_timestamp, producer_id, producer_epoch,
                            base_sequence, 0)
    reseal_crc(data, 0, RECORD_BATCH_OVERHEAD)
    return bytes(data)


# A cleaned segment (offsets 0-21):
#   batch A [0, 4]: 0, 2, 3 retained (3 a tombstone); 1 and 4 (the batch's last record) removed
#   offsets 5-9: whole batches removed
#   batch B [10, 11]: a tombstone and a value, with a delete horizon
#   batch C [12, 14]: empty, kept for producer 7's last sequence (5 + 2) and epoch 3
#   offsets 15-19: whole batches removed
#   batch D [20, 21]: two records, the second with neither key nor value (not a tombstone: no key)
BATCHES = [
    build(0, [(0, b"k0", b"v0"), (2, b"k2", b"v2"), (3, b"k3", None)], last_offset_delta=4),
    build(10, [(0, b"k1", None), (1, b"k4", b"v4")], delete_horizon=HORIZON),
    empty_batch(12, 2, producer_id=7, producer_epoch=3, base_sequence=5, max_timestamp=T0 + 14),
    build(20, [(0, b"k5", b"v5"), (1, None, None)]),
]
POSITIONS = [sum(map(len, BATCHES[:i])) for i in range(len(BATCHES))]
SIZE = sum(map(len, BATCHES))


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    directory = tmp_path / "t-0"
    directory.mkdir()
    path = directory / SEGMENT
    path.write_bytes(b"".join(BATCHES))
    return path


def lines(events: list[Event]) -> list[str]:
    return [text for e in events if (text := format_event(e)) is not None]


def of_kind(events: list[Event], kind: EventKind) -> list[Event]:
    return [e for e in events if e.kind is kind]


# -- batches -------------------------------------------------------------------------------------


def test_batch_lines_show_the_delete_horizon(segment):
    events = list(dump_file(segment))
    batches = of_kind(events, EventKind.BATCH)
    assert [b.data["delete_horizon_ms"] for b in batches] == [None, HORIZON, None, None]
    text = [format_event(b) for b in batches]
    assert f"isControl: false deleteHorizonMs: OptionalLong[{HORIZON}] position: {POSITIONS[1]} " in text[1]
    assert all("deleteHorizonMs: OptionalLong.empty " in text[i] for i in (0, 2, 3))
    assert all(b.data["is_valid"] for b in batches)
    assert not has_problems(events)


def test_gaps_between_batches_are_notes_not_problems(segment):
    events = list(dump_file(segment))
    assert not has_problems(events)
    assert [e.data["message"] for e in of_kind(events, EventKind.NOTE)] == [
        "Offsets 5-9 absent (compacted away)",
        f"Empty batch at position {POSITIONS[2]}: offsets 12-14 absent (compacted away); kept for producer 7's "
        f"last sequence 7, epoch 3",
        "Offsets 15-19 absent (compacted away)",
    ]
    # Each gap note comes right before the batch after the gap.
    kinds = [(e.kind, e.data.get("base_offset")) for e in events if e.kind in (EventKind.NOTE, EventKind.BATCH)]
    assert kinds == [(EventKind.BATCH, 0), (EventKind.NOTE, None), (EventKind.BATCH, 10), (EventKind.BATCH, 12),
                     (EventKind.NOTE, None), (EventKind.NOTE, None), (EventKind.BATCH, 20)]
    (summary,) = of_kind(events, EventKind.SUMMARY)
    # Absent: 1 and 4 inside batch A (from its header: 3 records over 5 offsets), 5-9, 12-14, 15-19.
    assert summary.data["message"] == (
        f"{SEGMENT}: 4 batches (1 empty), 7 records, offsets 0-21, 15 offsets absent (compacted away), "
        f"{SIZE} of {SIZE} bytes in whole batches; no problems"
    )
    assert summary.data | {"message": None} == {
        "message": None, "batches": 4, "records": 7, "first_offset": 0, "last_offset": 21, "valid_bytes": SIZE,
        "size": SIZE, "problems": 0, "empty_batches": 1, "absent_offsets": 15, "tombstones": None,
    }


def test_empty_batch(segment):
    events = list(dump_file(segment))
    empty = of_kind(events, EventKind.BATCH)[2]
    assert empty.data["is_empty"] is True and empty.data["count"] == 0
    assert format_event(empty).startswith(
        "baseOffset: 12 lastOffset: 14 count: 0 baseSequence: 5 lastSequence: 7 producerId: 7 producerEpoch: 3 "
        "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        f"position: {POSITIONS[2]} CreateTime: {T0 + 14} size: 61 "
    )
    following = events[events.index(empty) + 1]
    assert following.kind is EventKind.NOTE and following.data["message"].startswith("Empty batch at position")
    assert [b.data["is_empty"] for b in of_kind(events, EventKind.BATCH)] == [False, False, True, False]


def test_empty_batch_without_sequence_or_producer(tmp_path):
    """A transactional marker's batch has no sequence; a batch without a producer names none."""
    path = tmp_path / SEGMENT
    path.write_bytes(empty_batch(0, 0, producer_id=9, producer_epoch=1, base_sequence=-1, max_timestamp=T0)
                     + empty_batch(1, 1, producer_id=-1, producer_epoch=-1, base_sequence=-1, max_timestamp=T0))
    notes = [e.data["message"] for e in of_kind(list(dump_file(path, DumpOptions(deep=True))), EventKind.NOTE)]
    assert notes == [
        "Empty batch at position 0: offset 0 absent (compacted away); kept for producer 9's epoch 1",
        "Empty batch at position 61: offsets 1-2 absent (compacted away)",
    ]


# -- records -------------------------------------------------------------------------------------


def test_deep_iteration_notes_offsets_absent_inside_a_batch(segment):
    events = list(dump_file(segment, DumpOptions(deep=True)))
    assert not has_problems(events)
    out = [line for text in lines(events) for line in text.splitlines() if not line.startswith("baseOffset: ")]
    rec = "| offset: {} CreateTime: {} keySize: {} valueSize: {} sequence: {} headerKeys: []"
    assert out == [
        f"Dumping {segment}",
        "Log starting offset: 0",
        rec.format(0, T0, 2, 2, -1),
        "Offset 1 absent (compacted away)",
        rec.format(2, T0 + 2, 2, 2, -1),
        rec.format(3, T0 + 3, 2, -1, -1) + " tombstone: true",
        "Offset 4 absent (compacted away)",  # the batch's last record: its last offset stays
        "Offsets 5-9 absent (compacted away)",
        rec.format(10, T0 + 10, 2, -1, -1) + " tombstone: true",  # timestamps survive the horizon base
        rec.format(11, T0 + 11, 2, 2, -1),
        f"Empty batch at position {POSITIONS[2]}: offsets 12-14 absent (compacted away); kept for producer 7's "
        f"last sequence 7, epoch 3",
        "Offsets 15-19 absent (compacted away)",
        rec.format(20, T0 + 20, 2, 2, -1),
        rec.format(21, T0 + 21, -1, -1, -1),  # no key: a null record, not a tombstone
        f"{SEGMENT}: 4 batches (1 empty), 7 records (2 tombstones), offsets 0-21, 15 offsets absent (compacted "
        f"away), {SIZE} of {SIZE} bytes in whole batches; no problems",
    ]
    (summary,) = of_kind(events, EventKind.SUMMARY)
    assert (summary.data["tombstones"], summary.data["absent_offsets"]) == (2, 15)


def test_print_data_marks_tombstones_before_the_key(segment):
    records = {e.data["offset"]: format_event(e)
               for e in dump_file(segment, DumpOptions(print_data=True)) if e.kind is EventKind.RECORD}
    assert records[3] == f"| offset: 3 CreateTime: {T0 + 3} keySize: 2 valueSize: -1 sequence: -1 headerKeys: [] " \
                         f"tombstone: true key: k3"
    assert records[2].endswith("headerKeys: [] key: k2 payload: v2")
    assert records[21].endswith("headerKeys: []")  # neither key nor payload, not a tombstone


def test_json(segment):
    (dump,) = collect_json(dump_paths([segment], DumpOptions(deep=True)))
    assert dump["valid"] is True
    assert dump["absent_offsets"] == [[1, 1], [4, 4], [5, 9], [12, 14], [15, 19]]
    assert [b["is_empty"] for b in dump["batches"]] == [False, False, True, False]
    assert [b["delete_horizon_ms"] for b in dump["batches"]] == [None, HORIZON, None, None]
    tombstones = [r["offset"] for b in dump["batches"] for r in b["records"] if r["tombstone"]]
    assert tombstones == [3, 10]
    assert dump["summary"]["tombstones"] == 2 and dump["summary"]["empty_batches"] == 1


def test_summary_is_unchanged_without_compaction(tmp_path):
    """Nothing absent, no tombstone, no empty batch: Kafka's line as before, and no note."""
    path = tmp_path / SEGMENT
    data = build(0, [(0, b"a", b"1"), (1, b"b", b"2")]) + build(2, [(0, b"c", b"3")])
    path.write_bytes(data)
    events = list(dump_file(path, DumpOptions(deep=True)))
    assert not of_kind(events, EventKind.NOTE)
    assert lines(events)[-1] == (f"{SEGMENT}: 2 batches, 3 records, offsets 0-2, {len(data)} of {len(data)} bytes "
                                 f"in whole batches; no problems")


def test_segment_whose_first_batches_were_removed(tmp_path):
    """A cleaned segment keeps the base offset it is named after; its first batch may start later."""
    path = tmp_path / "00000000000000000100.log"
    path.write_bytes(build(105, [(0, b"k", b"v")]))
    events = list(dump_file(path, DumpOptions(deep=True)))
    assert not has_problems(events)
    assert [e.data["message"] for e in of_kind(events, EventKind.NOTE)] == ["Offsets 100-104 absent (compacted away)"]
    assert "offsets 105-105, 5 offsets absent (compacted away)" in lines(events)[-1]


# -- what stays a problem ------------------------------------------------------------------------


def test_offsets_out_of_order_are_still_problems(tmp_path):
    path = tmp_path / SEGMENT
    # A record past its batch's last offset (the header says [0, 1], a record claims offset 3) ...
    past = bytearray(build(0, [(0, b"a", b"1"), (3, b"b", b"2")]))
    struct.pack_into(">i", past, LAST_OFFSET_DELTA_AT, 1)
    reseal_crc(past, 0, len(past))
    # ... a batch overlapping the one before, and one with more records than offsets.
    overlapping = build(1, [(0, b"c", b"3")])
    crowded = bytearray(build(5, [(0, b"d", b"4"), (1, b"e", b"5")]))
    struct.pack_into(">i", crowded, LAST_OFFSET_DELTA_AT, 0)
    reseal_crc(crowded, 0, len(crowded))
    path.write_bytes(bytes(past) + overlapping + bytes(crowded))
    events = list(dump_file(path, DumpOptions(deep=True)))
    problems = [e.data["message"] for e in of_kind(events, EventKind.PROBLEM)]
    where = "batch at position {} of " + SEGMENT + " (baseOffset {})"
    assert problems == [
        f"Record offset 3 past the last offset 1 of the {where.format(0, 0)}",
        f"Offsets out of order in {where.format(len(past), 1)}: the previous batch ends at offset 1",
        f"2 records in {where.format(len(past) + len(overlapping), 5)}, more than its 1 offsets",
        f"Record offset 6 past the last offset 5 of the {where.format(len(past) + len(overlapping), 5)}",
    ]
    assert "Offsets 2-4 absent (compacted away)" in [e.data["message"] for e in of_kind(events, EventKind.NOTE)]


def test_record_offsets_must_increase_within_a_batch(tmp_path):
    path = tmp_path / SEGMENT
    data = bytearray(build(0, [(0, b"a", b"1"), (2, b"b", b"2")]))
    # Rewrite the second record's offset delta (its 3rd byte: length, attributes, timestamp delta) to 0.
    second = RECORD_BATCH_OVERHEAD + 1 + data[RECORD_BATCH_OVERHEAD] // 2
    assert data[second + 3] == 2 * 2  # the zig-zag varint of delta 2
    data[second + 3] = 0
    reseal_crc(data, 0, len(data))
    path.write_bytes(data)
    assert parse_header(data).records_count == 2
    problems = [e.data["message"] for e in of_kind(list(dump_file(path, DumpOptions(deep=True))), EventKind.PROBLEM)]
    assert problems == [f"Record offsets out of order in the batch at position 0 of {SEGMENT} (baseOffset 0): "
                        f"0 is followed by 0"]


# -- indexes and the cleaner's checkpoint ----------------------------------------------------------


def test_indexes_of_a_compacted_segment_are_consistent(segment):
    """Entries for the batches after the first, as the cleaner's rebuilt indexes have them."""
    directory = segment.parent
    stem = SEGMENT.removesuffix(".log")
    index = b"".join(struct.pack(">ii", last, POSITIONS[i]) for i, last in ((1, 11), (2, 14), (3, 21)))
    (directory / f"{stem}.index").write_bytes(index)
    time_index = b"".join(struct.pack(">qi", T0 + last, last) for last in (11, 14, 21))
    (directory / f"{stem}.timeindex").write_bytes(time_index)
    events = list(dump_paths([directory]))
    assert not has_problems(events), lines(events)
    summaries = [e.data["message"] for e in of_kind(events, EventKind.SUMMARY)]
    assert f"Index {directory / stem}.index is consistent (3 entries)" in summaries
    assert f"Time index {directory / stem}.timeindex is consistent (3 entries)" in summaries


def test_cleaner_offset_checkpoint_is_an_offset_checkpoint(segment):
    log_dir = segment.parent.parent
    path = log_dir / "cleaner-offset-checkpoint"
    OffsetCheckpointFile(path).write({TopicPartition("t", 0): 12, TopicPartition("compacted", 3): 4096})
    assert path.read_text().splitlines()[:2] == ["0", "2"]
    assert file_type_of(path) is FileType.OFFSET_CHECKPOINT
    events = list(dump_paths([log_dir]))
    assert not has_problems(events)
    entries = {(e.data["topic"], e.data["partition"]): e.data["offset"]
               for e in events if e.file_type is FileType.OFFSET_CHECKPOINT and e.kind is EventKind.ENTRY}
    assert entries == {("t", 0): 12, ("compacted", 3): 4096}
    text = lines(events)
    assert f"Dumping {path}" in text and "topic: compacted partition: 3 offset: 4096" in text
    assert "cleaner-offset-checkpoint: 2 partitions" in text


@pytest.mark.parametrize("suffix", [".cleaned", ".swap"])
def test_cleaner_segment_files_dump_when_named(tmp_path, suffix):
    """The cleaner's output before (``.cleaned``) and during (``.swap``) its swap into the log: dumped as the
    segment files they become, the index verified against the log of the same suffix; a directory dump
    skips them (a ``.cleaned`` segment may be half written)."""
    stem = SEGMENT.removesuffix(".log")
    log_path = tmp_path / f"{SEGMENT}{suffix}"
    log_path.write_bytes(b"".join(BATCHES))
    index_path = tmp_path / f"{stem}.index{suffix}"
    index_path.write_bytes(struct.pack(">ii", 11, POSITIONS[1]))
    assert (file_type_of(log_path), file_type_of(index_path)) == (FileType.LOG, FileType.INDEX)
    events = list(dump_file(log_path))
    assert events[0].data == {"path": str(log_path), "type": "log", "base_offset": 0}
    assert not has_problems(events)
    assert "15 offsets absent (compacted away)" in of_kind(events, EventKind.SUMMARY)[0].data["message"]
    index_events = list(dump_file(index_path))
    assert not has_problems(index_events), lines(index_events)
    assert of_kind(index_events, EventKind.SUMMARY)[0].data["message"] == f"Index {index_path} is consistent (1 entry)"
    assert list(dump_paths([tmp_path])) == []


def test_cli_exit_code_is_zero_for_a_compacted_log(segment):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "strata", "dump-log", "--deep-iteration", str(segment.parent)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Offsets 5-9 absent (compacted away)" in result.stdout
    assert f"deleteHorizonMs: OptionalLong[{HORIZON}]" in result.stdout
    assert "7 records (2 tombstones)" in result.stdout
