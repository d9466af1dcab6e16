"""Fixed-size-entry index files shared by ``.index`` and ``.timeindex`` (Kafka's AbstractIndex).

The active segment's index is preallocated to ``segment.index.bytes`` (rounded down to whole
entries) and memory-mapped, so an append is a ``struct.pack_into``; on roll it is trimmed to its
entries, as Kafka does, and from then on is immutable. Rolled indexes are read lazily into
``bytes`` instead of staying mapped: a Python ``mmap`` holds a file descriptor, and a tiered
partition can have thousands of rolled segments.

The preallocated file is sparse: the first write to each of its pages takes a disk block. On a
full disk a store into the mapping cannot report ENOSPC, the kernel kills the process with
SIGBUS instead, so the blocks an append will touch are reserved first with ``posix_fallocate``
(:meth:`IndexFile.reserve`, a chunk at a time): a full disk then fails the append with
KAFKA_STORAGE_ERROR before anything is written.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
from pathlib import Path

from strata.errors import KafkaStorageError
from strata.log.checkpoints import fsync_path
from strata.log.errors import CorruptIndexError, IndexFullError

_MADV_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)
_fallocate = getattr(os, "posix_fallocate", None)  # absent on macOS: no reservation there
RESERVE_BYTES = 16 * 1024  # disk blocks are reserved for the next entries this much at a time


class IndexFile:
    entry_size: int = 0
    _entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1, writable: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self._mm: mmap.mmap | None = None
        self._data: bytes | None = None
        self._entries = 0
        self._max_entries = 0
        self._tail: tuple[int, ...] | None = None  # last entry, cached: appends compare against it
        self._reserved = 0  # bytes from the start of the mapped file known to have disk blocks
        self._unflushed = False  # trimmed without an fsync: the next flush makes it durable
        # A roll's trim leaves the file at its preallocated size; the flush on the scheduler's thread, or
        # whatever touches the file first, cuts it to this length (under the lock: both threads may).
        self._pending_length: int | None = None
        self._lock = threading.Lock()
        if writable:
            self._open_writable(max_index_size)

    # -- opening ------------------------------------------------------------------------------

    def _open_writable(self, max_index_size: int) -> None:
        """Map the file; a new file is preallocated, an existing one keeps its entries."""
        self.settle()
        existed = self.path.exists()
        with open(self.path, "a+b") as f:
            length = os.fstat(f.fileno()).st_size
            entries = length // self.entry_size if existed else 0
            target = max(self._round_down(max_index_size), entries * self.entry_size)
            if target != length:
                os.ftruncate(f.fileno(), target)
            self._max_entries = target // self.entry_size
            self._entries = entries
            self._tail = None
            self._reserved = entries * self.entry_size  # written entries have their blocks
            self._mm = mmap.mmap(f.fileno(), target) if target > 0 else None
            if self._mm is not None and _MADV_RANDOM is not None:
                # The file is mostly a preallocated hole: without this, the first fault reads
                # around it by the device's read-ahead (8 MiB here) and stalls an append for ~2 ms.
                self._mm.madvise(_MADV_RANDOM)

    def _round_down(self, size: int) -> int:
        return max(size, 0) // self.entry_size * self.entry_size

    def settle(self) -> None:
        """Apply a trim's deferred truncation now: before the file is read, reopened, renamed or fsynced here,
        and before anyone reads it by its path (the tiered copier uploads the files as they are)."""
        with self._lock:
            length, self._pending_length = self._pending_length, None
            if length is None:
                return
            try:
                with open(self.path, "r+b") as f:
                    os.ftruncate(f.fileno(), length)
            except FileNotFoundError:
                pass  # deleted meanwhile (retention, truncation): nothing to cut

    def _buffer(self) -> bytes | mmap.mmap:
        if self._mm is not None:
            return self._mm
        if self._data is None:
            self.settle()
            try:
                self._data = self.path.read_bytes()
            except FileNotFoundError:
                self._data = b""
            self._entries = len(self._data) // self.entry_size
            self._max_entries = self._entries
            self._tail = None
        return self._data

    # -- reading -------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        if self._mm is None and self._data is None:
            self._buffer()  # a rolled index is read on first use
        return self._entries

    @property
    def max_entries(self) -> int:
        if self._mm is None and self._data is None:
            self._buffer()
        return self._max_entries

    @property
    def writable(self) -> bool:
        return self._mm is not None

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def raw_entry(self, n: int) -> tuple[int, ...]:
        return self._entry.unpack_from(self._buffer(), n * self.entry_size)

    def last_raw_entry(self) -> tuple[int, ...] | None:
        if self._tail is None and self.entries:
            self._tail = self.raw_entry(self._entries - 1)
        return self._tail

    def _bisect(self, key_index: int, target: int, relative: bool) -> int:
        """Index of the last entry whose field ``key_index`` is <= target, or -1 (binary search)."""
        buf = self._buffer()
        unpack = self._entry.unpack_from
        size = self.entry_size
        if relative:
            target -= self.base_offset
        lo, hi = 0, self._entries - 1
        if hi < 0 or unpack(buf, 0)[key_index] > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if unpack(buf, mid * size)[key_index] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _bisect_ceiling(self, key_index: int, target: int) -> int:
        """Index of the first entry whose field ``key_index`` is >= target, or -1."""
        floor = self._bisect(key_index, target, relative=False)
        if floor >= 0 and self.raw_entry(floor)[key_index] == target:
            return floor
        nxt = floor + 1
        return nxt if nxt < self._entries else -1

    # -- writing -------------------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def reserve(self, entries: int) -> None:
        """Make sure the next ``entries`` appends have disk blocks (KafkaStorageError when the disk is full).

        A no-op until the reserved part is used up, then one ``posix_fallocate`` of the next
        ``RESERVE_BYTES`` (at most up to the preallocated size), or of just what is needed when
        the disk has less left.
        """
        if self._mm is None:
            return
        need = min(self._entries + entries, self._max_entries) * self.entry_size
        if need <= self._reserved or _fallocate is None:
            return
        end = min(max(need, self._reserved + RESERVE_BYTES), len(self._mm))
        try:
            fd = os.open(self.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            try:
                try:
                    _fallocate(fd, self._reserved, end - self._reserved)
                except OSError as e:
                    if e.errno != errno.ENOSPC or end == need:
                        raise
                    end = need
                    _fallocate(fd, self._reserved, end - self._reserved)
            finally:
                os.close(fd)
        except OSError as e:
            raise KafkaStorageError(f"cannot reserve space in index {self.path}: {e}") from e
        self._reserved = end

    def _write_entry(self, *fields: int) -> None:
        if self._mm is None:
            raise IndexFullError(f"index {self.path.name} is not open for appends")
        if self._entries >= self._max_entries:
            raise IndexFullError(f"attempt to append to a full index (size = {self._entries})")
        if (self._entries + 1) * self.entry_size > self._reserved:
            self.reserve(1)  # callers reserve ahead; this keeps a missed path from ending in SIGBUS
        self._entry.pack_into(self._mm, self._entries * self.entry_size, *fields)
        self._entries += 1
        self._tail = fields

    def _truncate_to_entries(self, n: int) -> None:
        self._buffer()
        self._entries = n
        self._tail = None
        if self._mm is None:
            self.settle()
            with open(self.path, "r+b") as f:
                os.ftruncate(f.fileno(), n * self.entry_size)
            self._data = None

    def truncate(self) -> None:
        self._truncate_to_entries(0)

    def flush(self) -> None:
        """Make the entries durable (a segment's flush: on the scheduler's thread after a roll)."""
        if self._mm is not None:
            self._mm.flush()
            return
        self.settle()
        if self._unflushed:
            self._unflushed = False
            try:
                fsync_path(self.path)
            except FileNotFoundError:  # deleted meanwhile (retention, truncation): nothing to make durable
                pass

    def resize(self, max_index_size: int) -> None:
        """Make the index writable with room up to ``max_index_size`` (the active segment on load)."""
        entries = self.entries
        self.close()
        self._data = None
        self._open_writable(max(self._round_down(max_index_size), entries * self.entry_size))
        self._entries = entries

    def trim_to_valid_size(self, sync: bool = True) -> None:
        """Shrink the file to its entries and drop the mapping: the segment became inactive.

        ``sync=False`` (a roll, on the event loop) leaves the cut of the preallocated file and the written
        pages to the segment's flush on the scheduler's thread (:meth:`flush`): an msync, an fsync and an
        ftruncate (freeing the preallocated blocks: an ext4 journal handle, which waits for the commit a
        large fsync elsewhere started) here stalled the broker for 30 to 50 ms at every roll under a heavy
        write load. Until then reads use the entries kept in memory."""
        if self._mm is None:
            if sync:
                self.flush()
            return
        n = self._entries
        data = bytes(self._mm[: n * self.entry_size])
        if sync:
            self._mm.flush()
        self._mm.close()  # unmapped, its dirty pages stay in the page cache until written or fsynced
        self._mm = None
        if sync:
            with open(self.path, "r+b") as f:
                os.ftruncate(f.fileno(), n * self.entry_size)
                os.fsync(f.fileno())
        else:
            self._pending_length = n * self.entry_size
        self._unflushed = not sync
        self._data = data
        self._entries = self._max_entries = n

    def close(self) -> None:
        if self._mm is not None:
            self._mm.flush()
            self._mm.close()
            self._mm = None
        self.settle()
        self._data = None

    def rename_to(self, path: Path) -> None:
        self.settle()
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete_if_exists(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def _check_length(self) -> None:
        length = self.path.stat().st_size if self._mm is None else len(self._mm)
        if length % self.entry_size:
            raise CorruptIndexError(
                f"index file {self.path} has size {length}, not a multiple of the entry size {self.entry_size}"
            )
