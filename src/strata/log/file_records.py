"""A ``.log`` file: batches back to back, appended with ``pwrite`` and read as slices.

A :class:`FileSlice` is what a fetch returns: a byte range of a segment file that the broker can
hand to ``os.sendfile`` without the bytes ever entering Python. Header scans use ``pread`` of the
61-byte header only, never the records.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from strata.errors import CorruptRecordError, KafkaStorageError, TruncatedBatchError
from strata.protocol.records import RECORD_BATCH_OVERHEAD, BatchHeader, ensure_valid, parse_header

SCAN_CHUNK = 8 * 1024 * 1024
_IOV_MAX = 1024


class FileRecords:
    """One segment's ``.log``; the file descriptor opens lazily and serves appends and reads."""

    def __init__(self, path: Path, create: bool = False) -> None:
        self.path = path
        self._fd: int | None = None
        self._create = create
        if create:
            self.size = os.fstat(self._open()).st_size
        else:
            self.size = path.stat().st_size

    def _open(self) -> int:
        if self._fd is None:
            # Only a new segment may create its file: a read must never resurrect a deleted one.
            flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if self._create else 0)
            try:
                self._fd = os.open(self.path, flags, 0o644)
            except PermissionError:
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                raise KafkaStorageError(f"cannot open {self.path}: {e}") from e
        return self._fd

    def fileno(self) -> int:
        return self._open()

    def append(self, data: bytes | bytearray | memoryview | list[bytes | bytearray | memoryview]) -> int:
        """Write at the end of the file; a list of buffers goes out in one ``pwritev`` (no joining).

        All or nothing: ``size`` moves only once every byte is written. A failure part-way (ENOSPC
        after a short write) truncates the file back, so no partial batch stays in the ``.log``.
        """
        fd = self._open()
        try:
            written = self._write_at(fd, data, self.size)
        except OSError as e:
            self._undo_partial(fd)
            raise KafkaStorageError(f"write to {self.path} failed: {e}") from e
        self.size += written
        return written

    @staticmethod
    def _write_at(fd: int, data: bytes | bytearray | memoryview | list[bytes | bytearray | memoryview],
                  position: int) -> int:
        if isinstance(data, list):
            if len(data) == 1:
                data = data[0]
            elif len(data) <= _IOV_MAX:
                total = sum(map(len, data))
                written = os.pwritev(fd, data, position)
                if written == total:
                    return written
                # A short write (the disk filling up, say): finish plainly; an error on the rest
                # raises with nothing counted, and the caller truncates the part already written.
                rest = b"".join(bytes(c) for c in data)[written:]
                return written + FileRecords._write_at(fd, rest, position + written)
            else:
                data = b"".join(bytes(c) for c in data)
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], position + written)
        return written

    def _undo_partial(self, fd: int) -> None:
        """A partial write (ENOSPC mid-batch) must not stay: the next append would land after garbage."""
        try:
            os.ftruncate(fd, self.size)
        except OSError:
            pass

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._open(), size, position)

    def read_header(self, position: int) -> BatchHeader:
        """The header of the batch at ``position`` (framing checked, CRC not)."""
        return parse_header(self._read_header_bytes(position), 0, require_whole_batch=False)

    def _read_header_bytes(self, position: int) -> bytes:
        data = os.pread(self._open(), RECORD_BATCH_OVERHEAD, position)
        if len(data) < RECORD_BATCH_OVERHEAD:
            raise TruncatedBatchError(f"{self.path.name}: header cut short at end of file", position)
        return data

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Batch headers from ``start`` up to ``end`` (the file size by default), via pread."""
        end = self.size if end is None else min(end, self.size)
        position = start
        while position < end:
            header = parse_header(self._read_header_bytes(position), 0, require_whole_batch=False)
            if position + header.size > end:
                raise TruncatedBatchError(f"{self.path.name}: batch runs past {end}", position)
            yield position, header
            position += header.size

    def iter_batches(
        self, start: int = 0, *, verify_crc: bool = True
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Whole batches with their bytes, read in large chunks (recovery, dump, copy checks)."""
        fd = self._open()
        position = start
        file_size = os.fstat(fd).st_size
        while position < file_size:
            chunk = os.pread(fd, max(SCAN_CHUNK, RECORD_BATCH_OVERHEAD), position)
            view = memoryview(chunk)
            offset = 0
            while offset < len(view):
                try:
                    header = parse_header(view, offset)
                except TruncatedBatchError:
                    if position + len(view) >= file_size:
                        raise TruncatedBatchError(
                            f"{self.path.name}: partial batch at the end of the file", position + offset
                        ) from None
                    if offset == 0:  # a single batch larger than the chunk
                        need = self.read_header(position)
                        view = memoryview(os.pread(fd, need.size, position))
                        continue
                    break
                batch = view[offset : offset + header.size]
                if verify_crc:
                    try:
                        ensure_valid(batch, 0, header)
                    except CorruptRecordError as e:
                        raise CorruptRecordError(f"{self.path.name}: {e}", position + offset) from None
                yield position + offset, header, batch
                offset += header.size
            position += offset

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns how many bytes were removed."""
        removed = self.size - size
        if removed < 0:
            raise KafkaStorageError(f"cannot truncate {self.path.name} of {self.size} bytes up to {size}")
        os.ftruncate(self._open(), size)
        self.size = size
        return removed

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete_if_exists(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``size`` bytes of whole batches at ``position`` of a segment file (zero-copy on send)."""

    file: FileRecords
    position: int
    size: int

    def read(self) -> bytes:
        return self.file.read(self.position, self.size) if self.size else b""

    def fileno(self) -> int:
        return self.file.fileno()


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """Where an offset lives: the segment it falls in and the byte position of its batch."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position: int = -1


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    fetch_offset_metadata: LogOffsetMetadata
    records: FileSlice | None

    @property
    def size(self) -> int:
        return self.records.size if self.records is not None else 0
