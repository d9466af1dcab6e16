"""Kafka's ``.txnindex``: the aborted transactions whose ABORT marker sits in one segment.

A READ_COMMITTED fetch must tell the consumer which producer ranges to drop; scanning the log for
markers would cost a read of every batch, so the broker keeps this side file (Kafka
``TransactionIndex.java`` / ``AbortedTxn.java``). Each entry is 34 bytes, big-endian::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64 | last_stable_offset int64

Unlike the offset and time indexes it is never preallocated, and the file only comes into being with
its first entry, so most segments have none -- which is also what tiered storage uploads (no
transaction index at all). The file is opened unbuffered: aborts are rare and every append must be
visible to a reader that opens the path (the remote copier), without waiting for a flush.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from strata.errors import KafkaStorageError
from strata.log.errors import CorruptIndexError, LogStateError

CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, *self)


class TransactionIndex:
    """One segment's transaction index; ``start_offset`` is the segment's base offset."""

    def __init__(self, path: Path, start_offset: int) -> None:
        self._path = path
        self.start_offset = start_offset
        self._file: io.FileIO | None = None
        self._last_offset: int | None = self._last_entry_offset()

    # -- properties -------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def is_empty(self) -> bool:
        """No complete entry on disk (a missing file counts as empty)."""
        return self._size() < ENTRY_SIZE

    # -- writes -----------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry, creating the file if needed.

        Entries must arrive with strictly increasing last offsets (the order their ABORT markers were
        written); anything else means the caller replayed or reordered markers.
        """
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise LogStateError(
                f"the last offset of appended transactions must increase, but {txn.last_offset} is not "
                f"greater than the current last offset {self._last_offset} of index {self._path}"
            )
        handle = self._handle(create=True)
        assert handle is not None
        try:
            handle.seek(0, os.SEEK_END)
            _write_fully(handle, txn.to_bytes())
        except OSError as e:
            raise KafkaStorageError(f"cannot append to transaction index {self._path}: {e}") from e
        self._last_offset = txn.last_offset

    def flush(self) -> None:
        """fsync the entries (the segment flush calls this with the log and other indexes)."""
        if self._file is not None:
            try:
                os.fsync(self._file.fileno())
            except OSError as e:
                raise KafkaStorageError(f"cannot flush transaction index {self._path}: {e}") from e

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions that end at or after ``offset`` (log truncation)."""
        previous: int | None = None
        for position, txn in self._entries_with_position():
            if txn.last_offset >= offset:
                self._truncate_file(position)
                self._last_offset = previous
                return
            previous = txn.last_offset

    def reset(self) -> None:
        """Remove every entry but keep the (now empty) file, as Kafka does."""
        self._truncate_file(0)
        self._last_offset = None

    def rename_to(self, new_path: Path) -> None:
        """Move the file (e.g. to ``.deleted``); the index follows the new path even if none exists yet."""
        try:
            if self._path.exists():
                os.replace(self._path, new_path)
        except OSError as e:
            raise KafkaStorageError(f"cannot rename {self._path} to {new_path}: {e}") from e
        finally:
            self._path = new_path

    def delete_if_exists(self) -> bool:
        """Close and remove the file; False when there was nothing to delete."""
        self.close()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise KafkaStorageError(f"cannot delete transaction index {self._path}: {e}") from e
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- reads ------------------------------------------------------------------------------

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return [txn for _, txn in self._entries_with_position()]

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        The flag is True once an entry's last stable offset reaches the upper bound: no transaction
        aborted in a later segment can then overlap the range, so the caller can stop searching.
        """
        found = []
        for _, txn in self._entries_with_position():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        """Reject a file that is not whole entries of version 0 at or after the segment's base offset.

        Called when a segment is opened after an unclean shutdown; a failure makes the loader rebuild
        the index from the log.
        """
        size = self._size()
        if size % ENTRY_SIZE:
            raise CorruptIndexError(
                f"transaction index {self._path} has size {size}, not a multiple of {ENTRY_SIZE}"
            )
        for _, txn in self._entries_with_position():
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} in index {self._path} is less than "
                    f"start offset {self.start_offset}"
                )

    # -- internals --------------------------------------------------------------------------

    def _entries_with_position(self) -> Iterator[tuple[int, AbortedTxn]]:
        """Each complete entry with its byte position; a trailing partial entry is ignored (as Kafka)."""
        return iter_aborted_txns(self._read_all(), str(self._path))

    def _read_all(self) -> bytes:
        try:
            return self._path.read_bytes()
        except FileNotFoundError:
            return b""
        except OSError as e:
            raise KafkaStorageError(f"cannot read transaction index {self._path}: {e}") from e

    def _last_entry_offset(self) -> int | None:
        """The last offset already on disk, so a reopened index keeps rejecting out-of-order appends."""
        data = self._read_all()
        whole = len(data) // ENTRY_SIZE * ENTRY_SIZE
        if whole == 0:
            return None
        return int(_ENTRY.unpack_from(data, whole - ENTRY_SIZE)[3])

    def _handle(self, create: bool) -> io.FileIO | None:
        """The open file, opened on first use; None if it does not exist and ``create`` is False."""
        if self._file is None:
            if not create and not self._path.exists():
                return None
            try:
                self._file = io.FileIO(self._path, "a+" if create else "r+")
            except OSError as e:
                raise KafkaStorageError(f"cannot open transaction index {self._path}: {e}") from e
        return self._file

    def _truncate_file(self, size: int) -> None:
        handle = self._handle(create=False)
        if handle is None:
            return
        try:
            handle.truncate(size)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate transaction index {self._path}: {e}") from e

    def _size(self) -> int:
        try:
            return self._path.stat().st_size
        except FileNotFoundError:
            return 0
        except OSError as e:
            raise KafkaStorageError(f"cannot stat transaction index {self._path}: {e}") from e


def iter_aborted_txns(data: bytes, source: str) -> Iterator[tuple[int, AbortedTxn]]:
    """(byte position, entry) of the complete entries of ``.txnindex`` bytes (a local file or a
    remote copy); a trailing partial entry is ignored, an unknown version is corruption."""
    for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, position)
        if version != CURRENT_VERSION:
            raise CorruptIndexError(
                f"unexpected aborted transaction version {version} at byte {position} of "
                f"transaction index {source}, current version is {CURRENT_VERSION}"
            )
        yield position, AbortedTxn(*fields)


def _write_fully(handle: io.FileIO, data: bytes) -> None:
    """Raw (unbuffered) writes may be short; loop until every byte is out."""
    view = memoryview(data)
    while view:
        written = handle.write(view)
        if not written:
            raise OSError("short write")
        view = view[written:]
