"""Kafka's small text checkpoint files, byte for byte, and the durable write they all share.

Formats (Kafka ``CheckpointFile``, ``OffsetCheckpointFile``, ``LeaderEpochCheckpointFile``,
``PartitionMetadataFile``)::

    recovery-point-offset-checkpoint etc.   "0\\n<count>\\n<topic> <partition> <offset>\\n..."
    leader-epoch-checkpoint                  "0\\n<count>\\n<epoch> <start_offset>\\n..."
    partition.metadata                       "version: 0\\ntopic_id: <base64url uuid>"  (no final newline)

A Kafka broker must be able to open a log directory we wrote and vice versa, so the writers emit
exactly Kafka's bytes and the readers are as lenient as Kafka's (any whitespace between fields, an
empty file meaning "no entries") but reject what Kafka rejects (wrong version, count mismatch).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from strata.common import TopicPartition
from strata.common.crashpoints import crash_point
from strata.errors import KafkaStorageError
from strata.log.errors import CorruptCheckpointError

__all__ = [
    "CorruptCheckpointError", "EpochEntry", "LeaderEpochCheckpointFile", "OffsetCheckpointFile",
    "PartitionMetadataFile", "atomic_write", "epoch_entries_from_bytes", "epoch_entries_to_bytes",
    "fsync_dir", "topic_id_from_str",
    "topic_id_to_str",
]

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
_INT_TOKEN = re.compile(r"[+-]?[0-9]+")  # what Java's parseInt/parseLong accept (no "_", no Unicode digits)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine's terminators
_TOPIC_ID_TOKEN = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")
_INT32 = 32
_INT64 = 64


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


# -- durable write ----------------------------------------------------------------------------


def atomic_write(path: Path, data: bytes | Sequence[bytes | memoryview], durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file, never a torn one.

    Kafka's recipe: write ``<file>.tmp``, fsync it, rename it over the target, fsync the directory
    (the rename itself is only durable once the directory entry is on disk). ``data`` may be a list of
    buffers, written in order: a large file (the RLMM snapshot's arrays) is never joined into one copy.
    ``durable=False`` skips both fsyncs, for a file whose reader detects a torn copy (a CRC) and whose
    writer fsyncs it later off the event loop (:func:`fsync_file_and_dir`).
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            if isinstance(data, bytes | bytearray | memoryview):
                f.write(data)
            else:
                for chunk in data:
                    f.write(chunk)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        crash_point("checkpoint.before_rename", path.name)  # the new version is durable, not yet in place
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except OSError as e:
        _unlink_quietly(tmp)
        raise KafkaStorageError(f"cannot write {path}: {e}") from e


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (its entries: new, renamed or deleted files) after a rename."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path


def fsync_file_and_dir(path: Path) -> None:
    """Make a file written with ``atomic_write(durable=False)`` durable, its name included."""
    fsync_path(path)
    fsync_dir(path.parent)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # the original error is the one worth reporting


def _read_text(path: Path) -> str | None:
    """The file decoded as UTF-8, or None when it does not exist (Kafka treats that as empty)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KafkaStorageError(f"cannot read {path}: {e}") from e
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"checkpoint file {path} is not UTF-8: {e}") from None


# -- "version / count / one entry a line" framing -------------------------------------------


def _parse_int(token: str, bits: int, source: str | Path, line: str) -> int:
    """Java's Integer/Long.parseInt: optional sign, ASCII digits, in range; else the line is malformed."""
    if _INT_TOKEN.fullmatch(token):
        value = int(token)
        if -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
            return value
    raise CorruptCheckpointError(f"malformed line in checkpoint file {source}: {line!r}")


def _split_lines(text: str) -> list[str]:
    """Lines as ``readLine`` returns them: a final line break does not start an extra empty line."""
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _read_framed(path: Path, fields: int) -> list[list[str]]:
    """The entry lines of a version-0 checkpoint file; a missing file has none."""
    text = _read_text(path)
    return [] if text is None else _parse_framed(text, str(path), fields)


def _parse_framed(text: str, source: str, fields: int) -> list[list[str]]:
    """Kafka ``CheckpointReadBuffer.read``: each entry line split on whitespace into ``fields`` parts.

    An empty text, or one holding only the version, reads as no entries, as in Kafka.
    """
    lines = _split_lines(text)
    if not lines:
        return []
    version = _parse_int(lines[0], _INT32, source, lines[0])
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"unrecognised version {version} in checkpoint file {source}, expected {CHECKPOINT_VERSION}"
        )
    if len(lines) == 1:
        return []
    expected = _parse_int(lines[1], _INT32, source, lines[1])
    entries = []
    for line in lines[2:]:
        parts = line.split()
        if len(parts) != fields:
            raise CorruptCheckpointError(f"malformed line in checkpoint file {source}: {line!r}")
        entries.append(parts)
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"expected {expected} entries in checkpoint file {source}, but found {len(entries)}"
        )
    return entries


def _frame(lines: Sequence[str]) -> bytes:
    """Kafka ``CheckpointWriteBuffer.write``: version, count, entries, each ended by ``newLine()``."""
    body = "".join(f"{line}\n" for line in lines)
    return f"{CHECKPOINT_VERSION}\n{len(lines)}\n{body}".encode()


# -- offset checkpoints (recovery point, log start, high watermark, cleaner) -----------------


class OffsetCheckpointFile:
    """A per-log-dir map TopicPartition → offset, e.g. ``recovery-point-offset-checkpoint``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Entries in the mapping's iteration order (Kafka's order is its HashMap's, i.e. arbitrary)."""
        lines = []
        for tp, offset in offsets.items():
            if not tp.topic or any(ch.isspace() for ch in tp.topic):
                raise ValueError(f"topic name {tp.topic!r} cannot be written to {self.path}")
            lines.append(f"{tp.topic} {tp.partition} {offset}")
        atomic_write(self.path, _frame(lines))

    def read(self) -> dict[TopicPartition, int]:
        """The offsets; a missing or empty file is an empty map (a fresh log dir has none)."""
        result: dict[TopicPartition, int] = {}
        for topic, partition, offset in _read_framed(self.path, 3):
            line = f"{topic} {partition} {offset}"
            tp = TopicPartition(topic, _parse_int(partition, _INT32, self.path, line))
            result[tp] = _parse_int(offset, _INT64, self.path, line)
        return result


# -- leader-epoch-checkpoint -----------------------------------------------------------------


def epoch_entries_to_bytes(entries: Sequence[EpochEntry]) -> bytes:
    """The checkpoint text for ``entries``; also what RLM uploads as the LEADER_EPOCH index."""
    return _frame([f"{e.epoch} {e.start_offset}" for e in entries])


def epoch_entries_from_bytes(data: bytes, source: str = "<leader epoch bytes>") -> list[EpochEntry]:
    """Parse the checkpoint text held in memory, e.g. a LEADER_EPOCH index fetched from remote storage."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"checkpoint data {source} is not UTF-8: {e}") from None
    return _parse_epoch_rows(_parse_framed(text, source, 2), source)


def _parse_epoch_rows(rows: list[list[str]], source: str) -> list[EpochEntry]:
    out = []
    for epoch, start in rows:
        line = f"{epoch} {start}"
        parsed = EpochEntry(_parse_int(epoch, _INT32, source, line), _parse_int(start, _INT64, source, line))
        out.append(parsed)
    return out


class LeaderEpochCheckpointFile:
    """``leader-epoch-checkpoint``: the (epoch, start offset) history of one partition."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: Sequence[EpochEntry]) -> None:
        atomic_write(self.path, epoch_entries_to_bytes(entries))

    def read(self) -> list[EpochEntry]:
        """The entries in file order; a missing or empty file has none."""
        return _parse_epoch_rows(_read_framed(self.path, 2), str(self.path))


# -- partition.metadata ----------------------------------------------------------------------


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka ``Uuid.toString``: URL-safe base64 of the 16 big-endian bytes, padding stripped (22 chars)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_str(text: str) -> uuid.UUID:
    """Kafka ``Uuid.fromString``: 22 URL-safe base64 characters (optionally ``==`` padded)."""
    if not _TOPIC_ID_TOKEN.fullmatch(text):
        raise ValueError(f"{text!r} is not a base64url-encoded topic id")
    padded = text if text.endswith("==") else text + "=="
    try:
        raw = base64.urlsafe_b64decode(padded)
    except binascii.Error as e:  # pragma: no cover - the pattern above already rules this out
        raise ValueError(f"{text!r} is not a base64url-encoded topic id: {e}") from None
    return uuid.UUID(bytes=raw)


class PartitionMetadataFile:
    """``partition.metadata``: binds a partition directory to its topic id (guards against a
    recreated topic of the same name picking up the old topic's data)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, topic_id: uuid.UUID) -> None:
        content = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id_to_str(topic_id)}"
        atomic_write(self.path, content.encode("utf-8"))

    def read(self) -> uuid.UUID | None:
        """The topic id, or None when the file does not exist (a log dir written before topic ids)."""
        text = _read_text(self.path)
        if text is None:
            return None
        lines = _split_lines(text)
        version = self._value(lines, 0, "version")
        if not _INT_TOKEN.fullmatch(version):
            raise self._corrupt(f"malformed version {version!r}")
        if int(version) < PARTITION_METADATA_VERSION:  # Kafka accepts newer versions (downgrades)
            raise self._corrupt(f"unrecognized version {version}")
        try:
            topic_id = topic_id_from_str(self._value(lines, 1, "topic_id"))
        except ValueError as e:
            raise self._corrupt(f"malformed topic id: {e}") from None
        if topic_id.int == 0:
            raise self._corrupt("the zero topic id is not a valid topic id")
        return topic_id

    def exists(self) -> bool:
        return self.path.exists()

    def _value(self, lines: list[str], index: int, key: str) -> str:
        """The value of ``key: value`` on line ``index`` (Kafka splits on ``:\\s+``)."""
        line = lines[index] if index < len(lines) else None
        parts = re.split(r":\s+", line, maxsplit=1) if line is not None else []
        if len(parts) != 2 or parts[0] != key:
            raise self._corrupt(f"malformed line {line!r}")
        return parts[1]

    def _corrupt(self, problem: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"partition metadata file {self.path}: {problem}")
