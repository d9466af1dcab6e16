"""Inspect the files of a partition directory: Strata's ``kafka-dump-log`` (Kafka ``DumpLogSegments``).

Every file kind Kafka keeps in a partition directory is understood:

* ``.log``: one line per batch in Kafka's format, optionally one per record (``deep``) with key and
  payload (``print_data``); a CRC mismatch marks that batch ``isvalid: false`` and the scan goes on
  while the framing holds; a torn or garbled tail is reported as invalid trailing bytes. What the log
  cleaner leaves is shown, never reported as a problem: offsets absent between batches (and, with
  records, between the records of a batch) as notes, empty batches (kept for a producer's last
  sequence) with a note, a batch's delete horizon (KIP-534, attributes bit 6) as Kafka's
  ``deleteHorizonMs``, and records with a key and a null value as ``tombstone: true``.
* ``.index`` / ``.timeindex``: the entries, each verified against the matching ``.log`` (an offset
  entry must point at a batch start and name an offset of that batch; a time entry must name the
  last offset of a batch whose max timestamp it records; both must strictly increase).
* ``.txnindex``: the aborted transactions, each checked against its ABORT marker in the ``.log``.
* ``<offset>.snapshot``: producer state entries (CRC checked by the reader).
* ``leader-epoch-checkpoint``, ``partition.metadata`` and the log-dir offset checkpoints (the cleaner's
  ``cleaner-offset-checkpoint`` among them).
* The log cleaner's ``.cleaned`` and ``.swap`` segment files, when named: as the segment files they
  will become (a directory dump skips them).

Dumping produces a stream of :class:`Event` (so a large segment never has to be held in memory);
:func:`format_event` renders Kafka's text and :func:`collect_json` groups events per file. Any
``PROBLEM`` event means the files are not consistent (the CLI exits with 1).

Files are only ever opened read-only: the tool must be safe on a live or damaged directory, which is
why the ``.log`` is scanned here with ``pread`` rather than through :class:`FileRecords` (which opens
its file for writing).
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from strata.errors import KafkaError, TruncatedBatchError
from strata.log.checkpoints import (
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    topic_id_to_str,
)
from strata.log.errors import CorruptIndexError
from strata.log.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_from_file_name,
)
from strata.log.offset_index import OffsetIndex
from strata.log.producer_state import read_snapshot
from strata.log.time_index import TimeIndex
from strata.log.txn_index import TransactionIndex
from strata.protocol.records import (
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CompressionType,
    ControlRecordType,
    TimestampType,
    compute_crc,
    decode_batch,
    decode_records,
    decompress,
    parse_header,
)
from strata.protocol.records.batch import DELETE_HORIZON_MASK

__all__ = [
    "DumpOptions", "Event", "EventKind", "FileType", "collect_json", "dump_file", "dump_paths",
    "expand_paths", "file_type_of", "format_event", "has_problems",
]

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
_SEQUENCE_WRAP = 1 << 31
_CODEC_IDS = frozenset(int(c) for c in CompressionType)
_AT_BYTE = re.compile(r" \(at byte \d+\)$")


class FileType(StrEnum):
    LOG = "log"
    INDEX = "index"
    TIME_INDEX = "timeindex"
    TXN_INDEX = "txnindex"
    SNAPSHOT = "snapshot"
    LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
    PARTITION_METADATA = "partition-metadata"
    OFFSET_CHECKPOINT = "offset-checkpoint"
    UNKNOWN = "unknown"


class EventKind(StrEnum):
    FILE = "file"  # a file starts: path, type, base_offset
    BATCH = "batch"  # one record batch of a .log
    RECORD = "record"  # one record of the preceding batch (deep iteration)
    ENTRY = "entry"  # one entry of an index, snapshot or checkpoint
    NOTE = "note"  # information that is not a problem
    PROBLEM = "problem"  # an inconsistency: the dump fails
    SUMMARY = "summary"  # a file's closing verdict (or the header of its list of problems)


class Event(NamedTuple):
    kind: EventKind
    file_type: FileType
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """What to dump; the defaults are Kafka's ``kafka-dump-log --files F`` (batches only)."""

    deep: bool = False  # one line per record (Kafka --deep-iteration)
    print_data: bool = False  # also keys and payloads (Kafka --print-data-log; implies deep)
    index_sanity_check: bool = False  # run the broker's startup sanity check; do not list entries
    verify_index_only: bool = False  # verify index entries without listing them
    max_bytes: int | None = None  # dump only the batches within the first N bytes of a .log

    @property
    def deep_iteration(self) -> bool:
        return self.deep or self.print_data

    @property
    def list_index_entries(self) -> bool:
        return not (self.index_sanity_check or self.verify_index_only)


# -- which files ----------------------------------------------------------------------------

_SUFFIX_TYPES = {
    LOG_SUFFIX: FileType.LOG,
    INDEX_SUFFIX: FileType.INDEX,
    TIME_INDEX_SUFFIX: FileType.TIME_INDEX,
    TXN_INDEX_SUFFIX: FileType.TXN_INDEX,
    SNAPSHOT_SUFFIX: FileType.SNAPSHOT,
}
_SUFFIX_RANK = {t: i for i, t in enumerate(_SUFFIX_TYPES.values())}
_NAMED_TYPES = {
    PARTITION_METADATA: FileType.PARTITION_METADATA,
    LEADER_EPOCH_CHECKPOINT: FileType.LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT: FileType.OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT: FileType.OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT: FileType.OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT: FileType.OFFSET_CHECKPOINT,
}
_OFFSET_FILE_TYPES = frozenset(_SUFFIX_TYPES.values())


def _cleaner_suffix(name: str) -> str:
    """``.cleaned`` (a segment the log cleaner is writing) or ``.swap`` (one whose swap into the log a
    crash interrupted; the next load completes it) after a segment file's own suffix, else ``""``."""
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        if name.endswith(suffix):
            return suffix
    return ""


def file_type_of(path: Path) -> FileType:
    """The kind of file; a segment file with the cleaner's ``.cleaned`` or ``.swap`` after its suffix is
    of its segment file's kind (dumped when named, skipped in a directory)."""
    name = path.name
    if name in _NAMED_TYPES:
        return _NAMED_TYPES[name]
    suffix = _cleaner_suffix(name)
    if suffix:
        path = path.with_name(name.removesuffix(suffix))
    return _SUFFIX_TYPES.get(path.suffix, FileType.UNKNOWN)


def expand_paths(paths: Iterable[Path]) -> Iterator[Path]:
    """Files as given; a directory becomes its known files in offset order, then its subdirectories.

    Within a directory, segment files come by base offset (``.log``, ``.index``, ``.timeindex``,
    ``.txnindex``, ``.snapshot`` for each), then ``partition.metadata``, the leader epoch and offset
    checkpoints. Unknown files (``.deleted``, ``.tmp``, markers) and the log cleaner's ``.cleaned`` and
    ``.swap`` segment files are skipped there silently (name one to dump it).
    """
    for path in paths:
        if path.is_dir():
            yield from _expand_dir(path)
        else:
            yield path


def _expand_dir(directory: Path) -> Iterator[Path]:
    offset_files: list[tuple[int, int, str, Path]] = []
    named: list[tuple[int, Path]] = []
    subdirs: list[Path] = []
    named_order = list(_NAMED_TYPES)
    for path in directory.iterdir():
        if path.is_dir():
            subdirs.append(path)
            continue
        kind = file_type_of(path)
        if kind is FileType.UNKNOWN or path.name.endswith(DELETED_SUFFIX) or _cleaner_suffix(path.name):
            continue
        if kind in _OFFSET_FILE_TYPES:
            try:
                offset = offset_from_file_name(path.name)
            except ValueError:
                offset = -1  # reported when dumped
            offset_files.append((offset, _SUFFIX_RANK[kind], path.name, path))
        else:
            named.append((named_order.index(path.name), path))
    yield from (p for *_, p in sorted(offset_files))
    yield from (p for _, p in sorted(named))
    for sub in sorted(subdirs):
        yield from _expand_dir(sub)


# -- entry points ---------------------------------------------------------------------------


def dump_paths(paths: Sequence[Path], options: DumpOptions = DumpOptions()) -> Iterator[Event]:
    """Events for every file under ``paths`` (directories expanded, see :func:`expand_paths`)."""
    for path in paths:
        try:
            files = list(expand_paths([path]))
        except OSError as e:  # an unreadable directory
            yield Event(EventKind.FILE, FileType.UNKNOWN, {"path": str(path), "type": str(FileType.UNKNOWN),
                                                          "base_offset": None})
            yield _problem(FileType.UNKNOWN, f"Cannot list {path}: {e}")
            continue
        for file in files:
            yield from dump_file(file, options)


def dump_file(path: Path, options: DumpOptions = DumpOptions()) -> Iterator[Event]:
    """Events for one file; never raises for bad data (that is what PROBLEM events are for)."""
    kind = file_type_of(path)
    base_offset = None
    if kind in _OFFSET_FILE_TYPES:
        try:
            base_offset = offset_from_file_name(path.name)
        except ValueError:
            stem = path.name.split(".", 1)[0]
            if len(stem) > 21 and stem[20] == "-" and stem[:20].isdigit():
                base_offset = int(stem[:20])  # a remote segment's object: {base offset:020d}-{segment id}.log
    yield Event(EventKind.FILE, kind, {"path": str(path), "type": str(kind), "base_offset": base_offset})
    if kind is FileType.UNKNOWN:
        yield _note(kind, f"Ignoring unknown file {path}")
        return
    if not path.is_file():
        yield _problem(kind, f"No such file: {path}")
        return
    if kind in _OFFSET_FILE_TYPES and kind is not FileType.LOG and base_offset is None:
        yield _problem(kind, f"{path.name} is not named after an offset")
        return
    dumper = _DUMPERS[kind]
    try:
        yield from dumper(path, base_offset, options)
    except Exception as e:  # bad data is a PROBLEM line, never a traceback
        log.debug("dumping %s failed", path, exc_info=True)
        yield _problem(kind, f"Cannot dump {path}: {type(e).__name__}: {_message(e)}")


def has_problems(events: Iterable[Event]) -> bool:
    return any(e.kind is EventKind.PROBLEM for e in events)


def _note(kind: FileType, message: str, **data: Any) -> Event:
    return Event(EventKind.NOTE, kind, {"message": message, **data})


def _problem(kind: FileType, message: str, **data: Any) -> Event:
    return Event(EventKind.PROBLEM, kind, {"message": message, **data})


def _summary(kind: FileType, message: str, **data: Any) -> Event:
    return Event(EventKind.SUMMARY, kind, {"message": message, **data})


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _message(e: BaseException) -> str:
    """The error text without the "(at byte N)" a parse of a small buffer adds (always 0 here)."""
    return _AT_BYTE.sub("", str(e)) or type(e).__name__


# -- .log -----------------------------------------------------------------------------------


class _Span(NamedTuple):
    """Where a batch sits in a .log and what the indexes need to know about it."""

    position: int
    header: BatchHeader

    @property
    def end(self) -> int:
        return self.position + self.header.size


class _Tail(NamedTuple):
    """Bytes after the last whole batch that do not form one."""

    position: int
    length: int  # bytes from position to the end of the file
    reason: str


def _read_spans(fd: int, size: int, limit: int) -> Iterator[_Span | _Tail]:
    """Batch headers from position 0 (framing checked, CRC not), then a ``_Tail`` if the framing breaks.

    Stops quietly at ``limit`` (``--max-bytes``): the batches past it are not looked at.
    """
    position = 0
    while position < limit:
        head = os.pread(fd, RECORD_BATCH_OVERHEAD, position)
        try:
            header = parse_header(head, 0, require_whole_batch=False)
            if position + header.size > size:
                raise TruncatedBatchError(
                    f"batch of {header.size} bytes but only {size - position} bytes left in the file"
                )
        except KafkaError as e:  # CorruptRecordError, TruncatedBatchError, magic v0/v1
            reason = "all zero bytes" if _all_zero(fd, position, size) else _message(e)
            yield _Tail(position, size - position, reason)
            return
        if position + header.size > limit:
            return
        yield _Span(position, header)
        position += header.size


def _all_zero(fd: int, start: int, end: int) -> bool:
    """Whether ``[start, end)`` holds only zeros (a preallocated file, or a tail lost in a crash)."""
    chunk = 1 << 20
    for position in range(start, end, chunk):
        if os.pread(fd, min(chunk, end - position), position).strip(b"\0"):
            return False
    return True


def _scan_log_spans(log_path: Path) -> tuple[list[_Span], _Tail | None, int]:
    """Every batch of ``log_path`` by header, the broken tail if any, and the file size."""
    with open(log_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        spans: list[_Span] = []
        tail = None
        for item in _read_spans(f.fileno(), size, size):
            if isinstance(item, _Tail):
                tail = item
            else:
                spans.append(item)
    return spans, tail, size


def _timestamp_type_name(header: BatchHeader) -> str:
    """Kafka's ``TimestampType.toString`` (v2 batches have no NoTimestampType)."""
    return "LogAppendTime" if header.timestamp_type is TimestampType.LOG_APPEND_TIME else "CreateTime"


def _codec_name(codec: int) -> str:
    try:
        return CompressionType(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def _batch_data(span: _Span, computed_crc: int) -> dict[str, Any]:
    h = span.header
    return {
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "count": h.records_count,
        "is_empty": h.records_count == 0,
        "base_sequence": h.base_sequence,
        "last_sequence": h.last_sequence,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "partition_leader_epoch": h.partition_leader_epoch,
        "is_transactional": h.is_transactional,
        "is_control": h.is_control,
        "delete_horizon_ms": h.base_timestamp if h.attributes & DELETE_HORIZON_MASK else None,
        "position": span.position,
        "timestamp_type": _timestamp_type_name(h),
        "max_timestamp": h.max_timestamp,
        "size": h.size,
        "magic": h.magic,
        "compression": _codec_name(h.compression),
        "crc": h.crc,
        "computed_crc": computed_crc,
        "is_valid": computed_crc == h.crc,
    }


def _text(value: bytes) -> str:
    """Kafka's StringDecoder (UTF-8, invalid bytes replaced), kept on one line."""
    text = value.decode("utf-8", errors="replace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _record_sequence(header: BatchHeader, offset: int) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + offset - header.base_offset) % _SEQUENCE_WRAP


def _control_fields(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """Kafka's control record: key ``version int16, type int16``; an end marker's value has the epoch."""
    if key is None or len(key) < 4:
        return {"control_type": "UNKNOWN", "control_type_id": None}
    _version, type_id = struct.unpack_from(">hh", key)
    try:
        name = ControlRecordType(type_id).name
    except ValueError:
        return {"control_type": "UNKNOWN", "control_type_id": type_id}
    epoch = struct.unpack_from(">hi", value)[1] if value is not None and len(value) >= 6 else -1
    return {"control_type": name, "control_type_id": type_id, "coordinator_epoch": epoch}


def _offsets(first: int, last: int) -> str:
    return f"offset {first}" if first == last else f"offsets {first}-{last}"


def _absent_note(kind: FileType, first: int, last: int, position: int) -> Event:
    """Offsets ``first..last`` hold no record: the log cleaner removed them (never corruption: the
    offsets of a batch, and a segment's base offset, survive the records the cleaner drops)."""
    text = _offsets(first, last)
    return _note(kind, f"{text[0].upper()}{text[1:]} absent (compacted away)", absent_first=first,
                 absent_last=last, position=position)


def _empty_batch_note(kind: FileType, span: _Span) -> Event:
    """Kafka's cleaner keeps a producer's last batch, emptied, so its epoch and sequence survive."""
    h = span.header
    message = f"Empty batch at position {span.position}: {_offsets(h.base_offset, h.last_offset)} absent " \
              f"(compacted away)"
    if h.has_producer_id:
        sequence = "" if h.base_sequence == NO_SEQUENCE else f"last sequence {h.last_sequence}, "
        message += f"; kept for producer {h.producer_id}'s {sequence}epoch {h.producer_epoch}"
    return _note(kind, message, absent_first=h.base_offset, absent_last=h.last_offset, position=span.position,
                 empty_batch=True)


def _dump_log(path: Path, base_offset: int | None, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.LOG
    name = path.name
    batches = records = valid_bytes = problems = 0
    empty_batches = absent = tombstones = 0
    first_offset: int | None = None
    last_offset: int | None = None  # of the previous batch
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        limit = size if options.max_bytes is None else min(size, max(options.max_bytes, 0))
        tail = False
        for item in _read_spans(fd, size, limit):
            if isinstance(item, _Tail):
                tail = True
                problems += 1
                yield _problem(
                    kind,
                    f"Found {item.length} invalid bytes at the end of {name} (position {item.position}): "
                    f"{item.reason}",
                    invalid_bytes=item.length, position=item.position, reason=item.reason,
                )
                break
            span, header = item, item.header
            data = os.pread(fd, header.size, span.position)
            computed = compute_crc(data, 0, header.size)
            # Offsets the cleaner removed whole batches of; the segment keeps the base offset it is
            # named after even when its first batches went.
            expected = base_offset if last_offset is None else last_offset + 1
            if expected is not None and header.base_offset > expected:
                absent += header.base_offset - expected
                yield _absent_note(kind, expected, header.base_offset - 1, span.position)
            yield Event(EventKind.BATCH, kind, _batch_data(span, computed))
            batches += 1
            records += header.records_count
            absent += max(header.last_offset_delta + 1 - header.records_count, 0)
            valid_bytes = span.end
            first_offset = header.base_offset if first_offset is None else first_offset
            if header.records_count == 0:
                empty_batches += 1
                yield _empty_batch_note(kind, span)
            for message in _batch_problems(name, span, computed, base_offset, last_offset):
                problems += 1
                yield _problem(kind, message, position=span.position, offset=header.base_offset)
            last_offset = header.last_offset
            if options.deep_iteration:
                for event in _record_events(name, span, data, options):
                    if event.kind is EventKind.PROBLEM:
                        problems += 1
                    elif event.kind is EventKind.RECORD and event.data.get("tombstone"):
                        tombstones += 1
                    yield event
        if not tail and valid_bytes < size:  # only --max-bytes stops a scan early
            yield _note(kind, f"Stopped at --max-bytes {options.max_bytes}: bytes {valid_bytes} to {size} of "
                              f"{name} not dumped", position=valid_bytes)
    offsets = f"offsets {first_offset}-{last_offset}" if first_offset is not None else "no offsets"
    verdict = "no problems" if not problems else _count(problems, "problem")
    batch_text = f"{batches} batches" + (f" ({empty_batches} empty)" if empty_batches else "")
    record_text = f"{records} records" + (f" ({_count(tombstones, 'tombstone')})" if tombstones else "")
    absent_text = f", {_count(absent, 'offset')} absent (compacted away)" if absent else ""
    yield _summary(kind, f"{name}: {batch_text}, {record_text}, {offsets}{absent_text}, {valid_bytes} of {size} "
                         f"bytes in whole batches; {verdict}",
                   batches=batches, records=records, first_offset=first_offset, last_offset=last_offset,
                   valid_bytes=valid_bytes, size=size, problems=problems, empty_batches=empty_batches,
                   absent_offsets=absent, tombstones=tombstones if options.deep_iteration else None)


def _batch_problems(name: str, span: _Span, computed_crc: int, base_offset: int | None,
                    previous_last: int | None) -> Iterator[str]:
    h = span.header
    where = _where(name, span)
    if computed_crc != h.crc:
        yield f"Corrupt {where}: stored crc {h.crc}, computed {computed_crc}"
    if base_offset is not None and h.base_offset < base_offset:
        yield f"Offset below the segment base offset {base_offset} in {where}"
    if previous_last is not None and h.base_offset <= previous_last:
        yield f"Offsets out of order in {where}: the previous batch ends at offset {previous_last}"
    if h.records_count > h.last_offset_delta + 1:
        yield f"{h.records_count} records in {where}, more than its {h.last_offset_delta + 1} offsets"
    if h.compression not in _CODEC_IDS:
        yield f"Unknown compression codec id {h.compression} in {where}"


def _where(name: str, span: _Span) -> str:
    return f"batch at position {span.position} of {name} (baseOffset {span.header.base_offset})"


def _record_events(name: str, span: _Span, data: bytes, options: DumpOptions) -> Iterator[Event]:
    """The records of one batch, with a note for offsets of the batch that hold no record (the cleaner
    keeps a batch's base and last offset when it removes records) and a problem for a record outside
    the batch's offsets or not above the one before."""
    kind = FileType.LOG
    header = span.header
    if header.records_count == 0:
        return  # an empty batch: its note says so
    try:
        decoded = decode_records(header, decompress(header.compression, memoryview(data)[RECORD_BATCH_OVERHEAD:]))
    except KafkaError as e:
        yield _problem(kind, f"Cannot read the records of the {_where(name, span)}: {_message(e)}",
                       position=span.position, offset=header.base_offset)
        return
    timestamp_type = _timestamp_type_name(header)
    expected = header.base_offset  # the next offset if none is absent
    previous: int | None = None
    for record in decoded:
        offset = record.offset
        if offset < header.base_offset:
            yield _problem(kind, f"Record offset {offset} below the base offset of the {_where(name, span)}",
                           position=span.position, offset=offset)
        elif previous is not None and offset <= previous:
            yield _problem(kind, f"Record offsets out of order in the {_where(name, span)}: {previous} is "
                                 f"followed by {offset}", position=span.position, offset=offset)
        elif offset > header.last_offset:
            yield _problem(kind, f"Record offset {offset} past the last offset {header.last_offset} of the "
                                 f"{_where(name, span)}", position=span.position, offset=offset)
        elif offset > expected:
            yield _absent_note(kind, expected, offset - 1, span.position)
        previous = offset
        expected = max(expected, offset + 1)
        fields: dict[str, Any] = {
            "offset": offset,
            "timestamp_type": timestamp_type,
            "timestamp": record.timestamp,
            "key_size": -1 if record.key is None else len(record.key),
            "value_size": -1 if record.value is None else len(record.value),
            "sequence": _record_sequence(header, offset),
            "header_keys": [k for k, _ in record.headers],
        }
        if header.is_control:
            fields.update(_control_fields(record.key, record.value))
        else:
            fields["tombstone"] = record.key is not None and record.value is None
            if options.print_data:
                fields["key"] = None if record.key is None else _text(record.key)
                fields["payload"] = None if record.value is None else _text(record.value)
        yield Event(EventKind.RECORD, kind, fields)
    if decoded and expected <= header.last_offset:
        yield _absent_note(kind, expected, header.last_offset, span.position)


# -- .index and .timeindex ------------------------------------------------------------------


def _matching_log(path: Path) -> Path:
    """The segment's ``.log`` (``.log.cleaned`` / ``.log.swap`` for the cleaner's files of that name)."""
    return path.with_name(path.name.split(".", 1)[0] + LOG_SUFFIX + _cleaner_suffix(path.name))


def _log_spans_for(path: Path, kind: FileType) -> tuple[list[_Span] | None, int, list[Event]]:
    """The batches of the segment's .log for verification, or None (with a problem) when it is missing."""
    log_path = _matching_log(path)
    if not log_path.is_file():
        return None, 0, [_problem(kind, f"No log file {log_path.name} for {path.name}: entries cannot be verified")]
    spans, tail, size = _scan_log_spans(log_path)
    notes = []
    if tail is not None:
        notes.append(_note(kind, f"{log_path.name} has {tail.length} invalid bytes at position {tail.position}; "
                                 f"only the batches before them are used to verify {path.name}"))
    return spans, size, notes


def _used_entries(raw: bytes, entry_size: int) -> int:
    """Entries before the all-zero tail of a preallocated (active segment's) index file.

    Kafka's dump stops at the first entry (after the first) naming the base offset; a zero tail is
    the same thing made exact. An all-zero entry is never a real one: offset entries are never at
    position 0 (an entry is written only after ``index.interval.bytes`` went by).
    """
    return -(-len(raw.rstrip(b"\0")) // entry_size)


def _index_bytes(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _sanity_check(kind: FileType, path: Path, check: Callable[[], None]) -> Iterator[Event]:
    """The broker's own startup check of an index, reported as a note or a problem."""
    try:
        check()
        yield _note(kind, f"{path} passed sanity check.")
    except CorruptIndexError as e:
        yield _problem(kind, f"{path} failed sanity check: {e}")


def _size_problems(raw: bytes, entry_size: int, label: str) -> list[str]:
    if len(raw) % entry_size:
        return [f"{label} size {len(raw)} is not a multiple of the entry size {entry_size}"]
    return []


def _unused_slots_note(kind: FileType, path: Path, slots: int) -> Event:
    return _note(kind, f"{slots} unused (zero) slots at the end of {path.name}, as in the "
                       f"preallocated index of an active segment", unused_slots=slots)


def _dump_offset_index(path: Path, base_offset: int, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.INDEX
    raw = _index_bytes(path)
    index = OffsetIndex(path, base_offset)
    spans, log_size, log_events = _log_spans_for(path, kind)
    yield from log_events
    if options.index_sanity_check:
        yield from _sanity_check(kind, path, lambda: index.sanity_check(log_size if spans is not None else None))
    problems = _size_problems(raw, index.entry_size, "Index")
    by_position = {s.position: s for s in spans} if spans is not None else None
    count = index.entries
    in_use = _used_entries(raw, index.entry_size)
    used = 0
    previous = None
    for i in range(count):
        entry = index.entry(i)
        if i >= in_use:
            yield _unused_slots_note(kind, path, count - i)
            break
        used += 1
        if options.list_index_entries:
            yield Event(EventKind.ENTRY, kind, {"offset": entry.offset, "position": entry.position})
        if previous is not None and (entry.offset <= previous.offset or entry.position <= previous.position):
            problems.append(f"Index offset: {entry.offset}, position: {entry.position}: not above the previous "
                            f"entry (offset {previous.offset}, position {previous.position})")
        previous = entry
        if by_position is None:
            continue
        span = by_position.get(entry.position)
        if span is None:
            where = "past the end of" if entry.position >= log_size else "not the start of a batch in"
            problems.append(f"Index offset: {entry.offset}, position: {entry.position}: {where} the log "
                            f"({log_size} bytes)")
        elif not span.header.base_offset <= entry.offset <= span.header.last_offset:
            problems.append(f"Index offset: {entry.offset}, log offset: {span.header.last_offset} (batch "
                            f"[{span.header.base_offset}, {span.header.last_offset}] at position {span.position})")
    yield from _index_verdict(kind, path, "Index", used, problems, checked=spans is not None)


def _dump_time_index(path: Path, base_offset: int, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.TIME_INDEX
    raw = _index_bytes(path)
    index = TimeIndex(path, base_offset)
    spans, _log_size, log_events = _log_spans_for(path, kind)
    yield from log_events
    if options.index_sanity_check:
        yield from _sanity_check(kind, path, index.sanity_check)
    problems = _size_problems(raw, index.entry_size, "Time index")
    last_offsets = [s.header.last_offset for s in spans] if spans is not None else []
    count = index.entries
    in_use = _used_entries(raw, index.entry_size)
    used = 0
    previous = None
    for i in range(count):
        entry = index.entry(i)
        if i >= in_use:
            yield _unused_slots_note(kind, path, count - i)
            break
        used += 1
        if options.list_index_entries:
            yield Event(EventKind.ENTRY, kind, {"timestamp": entry.timestamp, "offset": entry.offset})
        if previous is not None:
            if entry.timestamp <= previous.timestamp:
                problems.append(f"Index timestamp: {entry.timestamp}, Previously indexed timestamp: "
                                f"{previous.timestamp} (offset {entry.offset})")
            if entry.offset < previous.offset:
                problems.append(f"Indexed offset: {entry.offset} is below the previous indexed offset "
                                f"{previous.offset}")
        previous = entry
        if spans is None:
            continue
        i_span = bisect.bisect_left(last_offsets, entry.offset)
        if i_span == len(spans):
            problems.append(f"Indexed offset: {entry.offset}, found log offset: -1 (past the end of the log)")
            continue
        span = spans[i_span]
        if span.header.last_offset != entry.offset:
            problems.append(f"Indexed offset: {entry.offset}, found log offset: {span.header.last_offset} "
                            f"(the batch at position {span.position})")
        elif span.header.max_timestamp != entry.timestamp:
            problems.append(f"Index timestamp: {entry.timestamp}, log timestamp: {span.header.max_timestamp} "
                            f"(offset {entry.offset})")
    yield from _index_verdict(kind, path, "Time index", used, problems, checked=spans is not None)


def _index_verdict(kind: FileType, path: Path, label: str, used: int, problems: list[str],
                   checked: bool) -> Iterator[Event]:
    """Kafka's closing lines for an index check: the mismatches, or that it is consistent."""
    if used == 0 and not problems:
        yield _note(kind, f"{path} is empty.")
    if problems:
        yield _summary(kind, f"Mismatches in :{path}", entries=used, problems=len(problems))
        for message in problems:
            yield _problem(kind, message, listed=True)
    elif checked:
        yield _summary(kind, f"{label} {path} is consistent ({_count(used, 'entry', 'entries')})",
                       entries=used, problems=0)


# -- .txnindex ------------------------------------------------------------------------------


def _dump_txn_index(path: Path, base_offset: int, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.TXN_INDEX
    index = TransactionIndex(path, base_offset)
    problems: list[str] = []
    try:
        index.sanity_check()
    except CorruptIndexError as e:
        problems.append(str(e))
    try:
        txns = index.all_aborted_txns()
    except CorruptIndexError as e:
        problems.append(str(e))
        txns = []
    log_path = _matching_log(path)
    spans_by_base: dict[int, _Span] | None = None
    if log_path.is_file():
        spans, _tail, _size = _scan_log_spans(log_path)
        spans_by_base = {s.header.base_offset: s for s in spans}
    else:
        problems.append(f"No log file {log_path.name} for {path.name}: entries cannot be verified")
    previous_last = None
    for txn in txns:
        yield Event(EventKind.ENTRY, kind, {
            "version": 0, "producer_id": txn.producer_id, "first_offset": txn.first_offset,
            "last_offset": txn.last_offset, "last_stable_offset": txn.last_stable_offset,
        })
        if txn.first_offset > txn.last_offset:
            problems.append(f"Aborted transaction of producer {txn.producer_id} starts at {txn.first_offset}, "
                            f"after its marker at {txn.last_offset}")
        if previous_last is not None and txn.last_offset <= previous_last:
            problems.append(f"Aborted transaction marker offsets do not increase: {txn.last_offset} after "
                            f"{previous_last}")
        previous_last = txn.last_offset
        if spans_by_base is not None:
            message = _check_abort_marker(txn.producer_id, txn.last_offset, spans_by_base, log_path)
            if message is not None:
                problems.append(f"Aborted transaction of producer {txn.producer_id} ending at offset "
                                f"{txn.last_offset}: {message}")
    if problems:
        yield _summary(kind, f"Mismatches in :{path}", entries=len(txns), problems=len(problems))
        for message in problems:
            yield _problem(kind, message, listed=True)
    else:
        yield _summary(kind, f"Transaction index {path} is consistent ({_count(len(txns), 'aborted transaction')})",
                       entries=len(txns), problems=0)


def _check_abort_marker(producer_id: int, offset: int, spans_by_base: dict[int, _Span],
                        log_path: Path) -> str | None:
    span = spans_by_base.get(offset)
    if span is None:
        return "no batch starts at that offset in the log"
    header = span.header
    if not header.is_control:
        return f"the batch at position {span.position} is not a control batch"
    if header.producer_id != producer_id:
        return f"the marker at position {span.position} belongs to producer {header.producer_id}"
    try:
        with open(log_path, "rb") as f:
            data = os.pread(f.fileno(), header.size, span.position)
        control = decode_batch(data, verify_crc=False).control_record
    except KafkaError as e:
        return f"the marker at position {span.position} cannot be read: {_message(e)}"
    if control is None or control.type is not ControlRecordType.ABORT:
        found = "no marker" if control is None else control.type.name
        return f"the control batch at position {span.position} holds {found}, not ABORT"
    return None


# -- producer snapshots and checkpoints -----------------------------------------------------


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _dump_snapshot(path: Path, base_offset: int, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.SNAPSHOT
    entries = read_snapshot(path)
    for entry in entries:
        data: dict[str, Any] = {
            "producer_id": entry.producer_id,
            "producer_epoch": entry.producer_epoch,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_first_offset": entry.current_txn_first_offset,
            "last_timestamp": entry.last_timestamp,
            "batch": None,
        }
        if entry.batch_metadata:
            b = entry.batch_metadata[0]
            data["batch"] = {"first_sequence": b.first_seq, "last_sequence": b.last_seq,
                             "last_offset": b.last_offset, "offset_delta": b.offset_delta,
                             "timestamp": b.timestamp}
        yield Event(EventKind.ENTRY, kind, data)
    yield _summary(kind, f"Producer snapshot {path.name} at offset {base_offset}: {_count(len(entries), 'producer')}",
                   entries=len(entries), problems=0)


def _dump_leader_epochs(path: Path, base_offset: int | None, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.LEADER_EPOCH_CHECKPOINT
    entries = LeaderEpochCheckpointFile(path).read()
    problems = []
    previous = None
    for entry in entries:
        yield Event(EventKind.ENTRY, kind, {"epoch": entry.epoch, "start_offset": entry.start_offset})
        if entry.epoch < 0 or entry.start_offset < 0:
            problems.append(f"Invalid leader epoch entry: epoch {entry.epoch} start offset {entry.start_offset}")
        if previous is not None and (entry.epoch <= previous.epoch or entry.start_offset <= previous.start_offset):
            problems.append(f"Leader epoch entry (epoch {entry.epoch}, start offset {entry.start_offset}) does "
                            f"not follow (epoch {previous.epoch}, start offset {previous.start_offset})")
        previous = entry
    if problems:
        yield _summary(kind, f"Mismatches in :{path}", entries=len(entries), problems=len(problems))
        for message in problems:
            yield _problem(kind, message, listed=True)
    else:
        yield _summary(kind, f"{path.name}: {_count(len(entries), 'leader epoch')}", entries=len(entries), problems=0)


def _dump_partition_metadata(path: Path, base_offset: int | None, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.PARTITION_METADATA
    topic_id = PartitionMetadataFile(path).read()
    first_line = path.read_text("utf-8").splitlines()[0]
    version = int(first_line.split(":", 1)[1])
    yield Event(EventKind.ENTRY, kind, {
        "version": version, "topic_id": None if topic_id is None else topic_id_to_str(topic_id),
    })


def _dump_offset_checkpoint(path: Path, base_offset: int | None, options: DumpOptions) -> Iterator[Event]:
    kind = FileType.OFFSET_CHECKPOINT
    offsets = OffsetCheckpointFile(path).read()
    for tp, offset in offsets.items():
        yield Event(EventKind.ENTRY, kind, {"topic": tp.topic, "partition": tp.partition, "offset": offset})
    yield _summary(kind, f"{path.name}: {_count(len(offsets), 'partition')}", entries=len(offsets), problems=0)


_DUMPERS: dict[FileType, Callable[[Path, Any, DumpOptions], Iterator[Event]]] = {
    FileType.LOG: _dump_log,
    FileType.INDEX: _dump_offset_index,
    FileType.TIME_INDEX: _dump_time_index,
    FileType.TXN_INDEX: _dump_txn_index,
    FileType.SNAPSHOT: _dump_snapshot,
    FileType.LEADER_EPOCH_CHECKPOINT: _dump_leader_epochs,
    FileType.PARTITION_METADATA: _dump_partition_metadata,
    FileType.OFFSET_CHECKPOINT: _dump_offset_checkpoint,
}


# -- rendering ------------------------------------------------------------------------------


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _format_batch(d: dict[str, Any]) -> str:
    horizon = "OptionalLong.empty" if d["delete_horizon_ms"] is None else f"OptionalLong[{d['delete_horizon_ms']}]"
    return (
        f"baseOffset: {d['base_offset']} lastOffset: {d['last_offset']} count: {d['count']} "
        f"baseSequence: {d['base_sequence']} lastSequence: {d['last_sequence']} producerId: {d['producer_id']} "
        f"producerEpoch: {d['producer_epoch']} partitionLeaderEpoch: {d['partition_leader_epoch']} "
        f"isTransactional: {_bool(d['is_transactional'])} isControl: {_bool(d['is_control'])} "
        f"deleteHorizonMs: {horizon} position: {d['position']} {d['timestamp_type']}: {d['max_timestamp']} "
        f"size: {d['size']} magic: {d['magic']} compresscodec: {d['compression']} crc: {d['crc']} "
        f"isvalid: {_bool(d['is_valid'])}"
    )


def _format_record(d: dict[str, Any]) -> str:
    line = (
        f"| offset: {d['offset']} {d['timestamp_type']}: {d['timestamp']} keySize: {d['key_size']} "
        f"valueSize: {d['value_size']} sequence: {d['sequence']} headerKeys: [{','.join(d['header_keys'])}]"
    )
    if "control_type" in d:
        if d["control_type"] in ("ABORT", "COMMIT"):
            line += f" endTxnMarker: {d['control_type']} coordinatorEpoch: {d['coordinator_epoch']}"
        else:
            line += f" controlType: {d['control_type']}({d['control_type_id']})"
    if d.get("tombstone"):
        line += " tombstone: true"  # before the key, which (no payload after it) ends the line
    if d.get("key") is not None:
        line += f" key: {d['key']}"
    if d.get("payload") is not None:
        line += f" payload: {d['payload']}"
    return line


def _format_entry(file_type: FileType, d: dict[str, Any]) -> str:
    if file_type is FileType.INDEX:
        return f"offset: {d['offset']} position: {d['position']}"
    if file_type is FileType.TIME_INDEX:
        return f"timestamp: {d['timestamp']} offset: {d['offset']}"
    if file_type is FileType.TXN_INDEX:
        return (f"version: {d['version']} producerId: {d['producer_id']} firstOffset: {d['first_offset']} "
                f"lastOffset: {d['last_offset']} lastStableOffset: {d['last_stable_offset']}")
    if file_type is FileType.SNAPSHOT:
        line = (f"producerId: {d['producer_id']} producerEpoch: {d['producer_epoch']} "
                f"coordinatorEpoch: {d['coordinator_epoch']} "
                f"currentTxnFirstOffset: {_optional_long(d['current_txn_first_offset'])} "
                f"lastTimestamp: {d['last_timestamp']}")
        b = d["batch"]
        if b is not None:
            line += (f" firstSequence: {b['first_sequence']} lastSequence: {b['last_sequence']} "
                     f"lastOffset: {b['last_offset']} offsetDelta: {b['offset_delta']} timestamp: {b['timestamp']}")
        return line
    if file_type is FileType.LEADER_EPOCH_CHECKPOINT:
        return f"epoch: {d['epoch']} startOffset: {d['start_offset']}"
    if file_type is FileType.PARTITION_METADATA:
        return f"version: {d['version']} topicId: {d['topic_id']}"
    if file_type is FileType.OFFSET_CHECKPOINT:
        return f"topic: {d['topic']} partition: {d['partition']} offset: {d['offset']}"
    return str(d)


def format_event(event: Event) -> str | None:
    """Kafka's text for one event (None for events that print nothing)."""
    kind, file_type, d = event
    if kind is EventKind.FILE:
        if file_type is FileType.LOG and d["base_offset"] is not None:
            return f"Dumping {d['path']}\nLog starting offset: {d['base_offset']}"
        return f"Dumping {d['path']}"
    if kind is EventKind.BATCH:
        return _format_batch(d)
    if kind is EventKind.RECORD:
        return _format_record(d)
    if kind is EventKind.ENTRY:
        return _format_entry(file_type, d)
    if kind is EventKind.PROBLEM and d.get("listed"):
        return "  " + d["message"]  # under its "Mismatches in :<file>" header, as Kafka prints them
    return str(d["message"])


def collect_json(events: Iterable[Event]) -> list[dict[str, Any]]:
    """One object per file: its batches (with records) or entries, notes, problems and verdict."""
    files: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for kind, file_type, data in events:
        if kind is EventKind.FILE:
            current = {**data, "valid": True, "problems": [], "notes": [], "summary": None}
            if file_type is FileType.LOG:
                current["batches"] = []
                current["invalid_bytes"] = None
                current["absent_offsets"] = []  # [first, last] ranges the cleaner removed
            else:
                current["entries"] = []
            files.append(current)
            continue
        if current is None:  # pragma: no cover - every stream starts with a FILE event
            raise ValueError("event before any file")
        if kind is EventKind.BATCH:
            current["batches"].append({**data, "records": []})
        elif kind is EventKind.RECORD:
            current["batches"][-1]["records"].append(data)
        elif kind is EventKind.ENTRY:
            current["entries"].append(data)
        elif kind is EventKind.NOTE:
            current["notes"].append(data["message"])
            if "absent_first" in data and "absent_offsets" in current:
                current["absent_offsets"].append([data["absent_first"], data["absent_last"]])
        elif kind is EventKind.PROBLEM:
            current["valid"] = False
            current["problems"].append(data)
            if "invalid_bytes" in data:
                current["invalid_bytes"] = {"count": data["invalid_bytes"], "position": data["position"]}
        elif kind is EventKind.SUMMARY:
            current["summary"] = data
    return files
