"""Kafka's ``RemoteIndexCache``: the offset, time and transaction indexes of remote segments, on local disk.

Every remote read starts with an index lookup (where in the segment does offset X start?), and the
indexes live in the remote store next to the segment. Fetching them per read would double the
store round trips, so they are cached under ``<log.dir>/remote-log-index-cache/`` with Kafka's names,
``<startOffset>_<segmentUuid base64url>.index|.timeindex|.txnindex`` (start offset not padded), and
reused across restarts.

Rules kept from Kafka (``RemoteIndexCache.java``):

* The budget is the bytes of the three files per entry (``remote.log.index.file.cache.total.size.bytes``);
  least recently used entries go first. (Kafka uses Caffeine's W-TinyLFU; plain LRU is close enough
  for a cache whose entries are touched once per remote fetch, and it makes eviction order testable.)
* One loader per key: concurrent misses for the same segment wait for the first one.
* A file already on disk is reused if it passes the sanity check, otherwise it is fetched again. A
  fetch streams into ``<name>.tmp`` (fsynced) and is renamed into place, so a crash never leaves a
  half-written file under a real name. A missing transaction index becomes an empty file; one the
  metadata already flags empty (KIP-1058 ``txn_idx_empty``) is not even asked for.
* Startup deletes ``*.deleted`` and ``*.tmp``, reloads complete triples and deletes the rest.
* Removed or evicted entries' files are renamed ``.deleted`` and then removed; ``close()`` keeps them.

**Why files are never pulled from under a reader.** Lookups hold a reference on the entry for their
duration. Eviction and ``remove`` take the entry out of the map at once, but its files are renamed
and deleted only when the last reference is released (a miss for the same segment in the meantime
revives the entry instead of fetching again). Without this, a transaction-index read racing an
eviction would find no file and silently report "no aborted transactions". The offset and time
indexes are read into memory on load (``IndexFile`` keeps rolled indexes as ``bytes``), so the
cache budget is also roughly its memory footprint, as Kafka's mmapped pages would be.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple, TypeVar

from strata.errors import KafkaStorageError
from strata.log.errors import CorruptIndexError
from strata.log.files import DELETED_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from strata.log.offset_index import OffsetIndex
from strata.log.time_index import TimeIndex
from strata.log.txn_index import AbortedTxn, TransactionIndex
from strata.tiered.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    uuid_to_str,
)

log = logging.getLogger(__name__)

DIR_NAME = "remote-log-index-cache"
TMP_SUFFIX = ".tmp"
_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_T = TypeVar("_T")
_INDEX_TYPES = {INDEX_SUFFIX: IndexType.OFFSET, TIME_INDEX_SUFFIX: IndexType.TIMESTAMP,
                TXN_INDEX_SUFFIX: IndexType.TRANSACTION}


class OffsetLookup(NamedTuple):
    """``RemoteIndexCache.lookup_offset``: where to scan from, and where the wanted batch starts at the latest."""

    position: int
    next_position: int | None


class OffsetEntryLookup(NamedTuple):
    """``lookup_offset`` plus the offset of the index entry ``position`` came from (None: no entry, position
    0). The batch there must hold that offset (entries are keyed by a batch's last offset): the reader
    checks it, as a batch's base offset lies outside its CRC."""

    position: int
    next_position: int | None
    entry_offset: int | None


class RemoteIndexCacheClosedError(RuntimeError):
    """Use of a closed cache (Kafka's IllegalStateException "Instance is already closed")."""


def file_stem(start_offset: int, segment_id: uuid.UUID) -> str:
    """``<startOffset>_<uuid>``: Kafka's ``remoteLogIndexFileName`` without the suffix."""
    return f"{start_offset}_{uuid_to_str(segment_id)}"


@dataclass(eq=False)
class _Entry:
    """The three parsed indexes of one remote segment, with the reference count that pins its files."""

    key: uuid.UUID
    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex
    weight: int
    refs: int = 0
    doomed: bool = False  # out of the map; files go when refs reaches 0

    @property
    def paths(self) -> list[Path]:
        return [self.offset_index.path, self.time_index.path, self.txn_index.path]

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()


@dataclass(eq=False)
class _Load:
    """A load in progress; other threads missing on the same key wait on ``done``."""

    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    removed: bool = False  # remove() arrived while loading: the entry must not stay cached


class RemoteIndexCache:
    """Thread-safe cache of remote segment indexes, bounded by ``max_size_bytes`` of index files."""

    def __init__(self, rsm: RemoteStorageManager, log_dir: Path | str, max_size_bytes: int) -> None:
        if max_size_bytes < 0:
            raise ValueError(f"index cache size must not be negative, got {max_size_bytes}")
        self._rsm = rsm
        self.cache_dir = Path(log_dir) / DIR_NAME
        self._max_size = max_size_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[uuid.UUID, _Entry] = OrderedDict()  # LRU first
        self._doomed: dict[uuid.UUID, _Entry] = {}  # evicted or removed, still referenced
        self._loading: dict[uuid.UUID, _Load] = {}
        self._size = 0
        self._closed = False
        self.hit_count = 0
        self.miss_count = 0
        self.load_count = 0  # entries built from the RSM or disk after a miss (one per key at a time)
        self.eviction_count = 0
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"cannot create the remote index cache directory {self.cache_dir}: {e}") from e
        self._init_from_disk()

    # -- public API ----------------------------------------------------------------------------

    def lookup_offset(self, md: RemoteLogSegmentMetadata, offset: int) -> OffsetLookup:
        """Where a scan for ``offset`` starts, and the position by which its batch has started.

        ``position`` is the file position of the largest indexed offset <= ``offset`` (0 if none), as
        Kafka's ``OffsetIndex.lookup``. Entries are keyed by a batch's *last* offset, so at a batch
        boundary (every consumer fetch after the first) that is the *previous* batch, which can be far
        bigger than the reader's scan slack. ``next_position`` is the next entry's position: that
        entry's batch holds a larger offset, so the batch holding ``offset`` starts no later. The
        reader sizes its single ranged read from it. None when no entry follows: the batch then
        starts within ``index.interval.bytes`` of ``position`` (the log adds an entry as soon as more
        than that many bytes were appended since the last one).
        """
        return OffsetLookup(*self.lookup_offset_entry(md, offset)[:2])

    def lookup_offset_entry(self, md: RemoteLogSegmentMetadata, offset: int) -> OffsetEntryLookup:
        """``lookup_offset`` with the offset of the entry it used (see :class:`OffsetEntryLookup`)."""
        entry = self._acquire(md)
        try:
            return _lookup_with_next(entry.offset_index, offset)
        finally:
            self._release(entry)

    def floor_position(self, md: RemoteLogSegmentMetadata, position: int) -> int:
        """The largest offset-index position at or below ``position`` (0 if none): a batch boundary
        from which a header scan up to ``position`` is at most ``index.interval.bytes`` plus a batch."""
        entry = self._acquire(md)
        try:
            found = entry.offset_index.lookup_by_position(position)
            return found.position if found is not None else 0
        finally:
            self._release(entry)

    def lookup_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int) -> int:
        """Position to scan from for the first record with a timestamp >= ``timestamp`` (Kafka's rule:
        the offset index position of ``max(starting_offset, timeIndex.lookup(ts).offset)``)."""
        entry = self._acquire(md)
        try:
            ts_offset = entry.time_index.lookup(timestamp)
            return entry.offset_index.lookup(max(starting_offset, ts_offset.offset)).position
        finally:
            self._release(entry)

    def collect_aborted_txns(self, md: RemoteLogSegmentMetadata, start_offset: int,
                             upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """This segment's aborted transactions overlapping ``[start_offset, upper_bound_offset)``;
        the flag says no later segment can hold more (see ``TransactionIndex.collect_aborted_txns``)."""
        entry = self._acquire(md)
        try:
            return entry.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
        finally:
            self._release(entry)

    def remove(self, segment_id: uuid.UUID) -> None:
        """Drop one segment's entry and files (the segment was deleted remotely)."""
        self.remove_all([segment_id])

    def remove_all(self, segment_ids: Iterable[uuid.UUID]) -> None:
        to_clean: list[_Entry] = []
        with self._lock:
            if self._closed:
                return  # shutdown races with segment deletion: the files are handled at the next start
            for key in segment_ids:
                entry = self._entries.pop(key, None)
                if entry is not None:
                    self._size -= entry.weight
                    if self._doom(entry):
                        to_clean.append(entry)
                load = self._loading.get(key)
                if load is not None:
                    load.removed = True
        self._delete_files(to_clean)

    def resize(self, max_size_bytes: int) -> None:
        """Change the budget at runtime (Kafka's ``resizeCacheSize``), evicting at once if it shrank."""
        if max_size_bytes < 0:
            raise ValueError(f"index cache size must not be negative, got {max_size_bytes}")
        with self._lock:
            self._check_open()
            self._max_size = max_size_bytes
            to_clean = self._evict_over_budget()
        self._delete_files(to_clean)

    def close(self) -> None:
        """Release handles and memory; the files stay for the next start. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            entries = [*self._entries.values(), *self._doomed.values()]
        for entry in entries:
            entry.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_size_bytes(self) -> int:
        return self._max_size

    @property
    def size_bytes(self) -> int:
        """Bytes of the cached entries' index files (the weight the budget bounds)."""
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, segment_id: object) -> bool:
        return segment_id in self._entries

    def cached_ids(self) -> list[uuid.UUID]:
        """Cached segment ids, least recently used first (tests and diagnostics)."""
        with self._lock:
            return list(self._entries)

    # -- reference counting ---------------------------------------------------------------------

    def _acquire(self, md: RemoteLogSegmentMetadata) -> _Entry:
        """The entry for ``md`` with one more reference; loads it on a miss (one loader per key)."""
        key = md.remote_log_segment_id.id
        while True:
            with self._lock:
                self._check_open()
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    self.hit_count += 1
                    entry.refs += 1
                    return entry
                entry = self._doomed.pop(key, None)
                if entry is not None:  # evicted while still in use: take it back instead of refetching
                    self.hit_count += 1
                    entry.doomed = False
                    entry.refs += 1
                    to_clean = self._insert(entry)
                    break
                load = self._loading.get(key)
                if load is None:
                    load = self._loading[key] = _Load()
                    self.miss_count += 1
                    owner = True
                else:
                    owner = False
            if owner:
                return self._load(md, load)
            load.done.wait()
            if load.error is not None:
                raise load.error
        self._delete_files(to_clean)
        return entry

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.refs -= 1
            clean = entry.doomed and entry.refs == 0 and self._doomed.get(entry.key) is entry
            if clean:
                del self._doomed[entry.key]
                self._mark_deleted(entry)
        if clean:
            self._delete_files([entry])

    def _load(self, md: RemoteLogSegmentMetadata, load: _Load) -> _Entry:
        key = md.remote_log_segment_id.id
        try:
            entry = self._create_entry(md)
        except BaseException as e:
            with self._lock:
                del self._loading[key]
                load.error = e
            load.done.set()
            raise
        with self._lock:
            del self._loading[key]
            self.load_count += 1
            entry.refs = 1
            if self._closed:
                load.error = RemoteIndexCacheClosedError("remote index cache is closed")
                to_clean: list[_Entry] = []
            elif load.removed:
                entry.doomed = True  # served to this caller only, then deleted
                self._doomed[key] = entry
                to_clean = []
            else:
                to_clean = self._insert(entry)
        load.done.set()
        self._delete_files(to_clean)
        if load.error is not None:
            entry.close()
            raise load.error
        return entry

    # -- LRU bookkeeping (callers hold the lock) ---------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteIndexCacheClosedError("remote index cache is closed")

    def _insert(self, entry: _Entry) -> list[_Entry]:
        self._entries[entry.key] = entry
        self._size += entry.weight
        return self._evict_over_budget()

    def _evict_over_budget(self) -> list[_Entry]:
        """Evict least recently used entries until the budget holds; returns those to delete now."""
        to_clean = []
        while self._size > self._max_size and self._entries:
            _, entry = self._entries.popitem(last=False)
            self._size -= entry.weight
            self.eviction_count += 1
            if self._doom(entry):
                to_clean.append(entry)
        return to_clean

    def _doom(self, entry: _Entry) -> bool:
        """Mark a removed entry; True if unreferenced, its files renamed ``.deleted`` for deletion now."""
        entry.doomed = True
        if entry.refs > 0:
            self._doomed[entry.key] = entry
            return False
        self._mark_deleted(entry)
        return True

    def _mark_deleted(self, entry: _Entry) -> None:
        """Rename to ``.deleted`` under the lock, so a concurrent loader of the same key never sees
        files that are about to disappear (it finds none and fetches afresh)."""
        entry.close()
        for path in entry.paths:
            try:
                os.replace(path, path.with_name(path.name + DELETED_SUFFIX))
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("cannot rename remote index cache file %s for deletion: %s", path, e)

    @staticmethod
    def _delete_files(entries: list[_Entry]) -> None:
        for entry in entries:
            for path in entry.paths:
                try:
                    path.with_name(path.name + DELETED_SUFFIX).unlink(missing_ok=True)
                except OSError as e:
                    log.warning("cannot delete remote index cache file %s: %s", path, e)

    # -- building entries -------------------------------------------------------------------------

    def _path(self, md: RemoteLogSegmentMetadata, suffix: str) -> Path:
        return self.cache_dir / f"{file_stem(md.start_offset, md.remote_log_segment_id.id)}{suffix}"

    def _create_entry(self, md: RemoteLogSegmentMetadata) -> _Entry:
        """Kafka's ``createCacheEntry``: reuse each valid file on disk, fetch the others."""
        offset_index = self._load_index(md, INDEX_SUFFIX, lambda p: _open_offset_index(p, md.start_offset))
        time_index = self._load_index(md, TIME_INDEX_SUFFIX, lambda p: _open_time_index(p, md.start_offset))
        txn_index = self._load_index(md, TXN_INDEX_SUFFIX, lambda p: _open_txn_index(p, md.start_offset))
        return _Entry(md.remote_log_segment_id.id, offset_index, time_index, txn_index,
                      _weight(offset_index, time_index, txn_index))

    def _load_index(self, md: RemoteLogSegmentMetadata, suffix: str, open_file: Callable[[Path], _T]) -> _T:
        path = self._path(md, suffix)
        if path.exists():
            try:
                return open_file(path)
            except CorruptIndexError as e:
                log.warning("remote index cache file %s is corrupt, fetching it again: %s", path, e)
                path.unlink(missing_ok=True)
        self._fetch_to(md, _INDEX_TYPES[suffix], path)
        try:
            return open_file(path)
        except CorruptIndexError:
            path.unlink(missing_ok=True)  # the store returned a bad index: do not keep it
            raise

    def _fetch_to(self, md: RemoteLogSegmentMetadata, index_type: IndexType, path: Path) -> None:
        """Stream the index from the RSM into ``<path>.tmp``, fsync, then rename into place."""
        tmp = path.with_name(path.name + TMP_SUFFIX)
        stream: BinaryIO | None = None
        if not (index_type is IndexType.TRANSACTION and md.txn_idx_empty):  # KIP-1058: known empty, no GET
            try:
                stream = self._rsm.fetch_index(md, index_type)
            except RemoteResourceNotFoundError:
                if index_type is not IndexType.TRANSACTION:
                    raise
                # Kafka: a segment without aborted transactions has no txn index: cache it empty
        try:
            with open(tmp, "wb") as out:
                if stream is not None:
                    shutil.copyfileobj(stream, out, 1024 * 1024)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            if stream is not None:
                stream.close()

    # -- startup -------------------------------------------------------------------------------------

    def _init_from_disk(self) -> None:
        """Kafka's ``init``: drop leftovers, reload complete and valid triples, delete the rest."""
        groups: dict[str, dict[str, Path]] = {}
        for path in self.cache_dir.iterdir():
            name = path.name
            if name.endswith((DELETED_SUFFIX, TMP_SUFFIX)):
                path.unlink(missing_ok=True)
                continue
            stem, dot, ext = name.rpartition(".")
            if not dot or f".{ext}" not in _SUFFIXES:
                continue  # not ours: leave it alone
            groups.setdefault(stem, {})[f".{ext}"] = path
        loaded: list[tuple[float, _Entry]] = []
        for stem, files in groups.items():
            entry = self._reload(stem, files)
            if entry is None:
                for path in files.values():
                    path.unlink(missing_ok=True)
                continue
            loaded.append((max(p.stat().st_mtime for p in files.values()), entry))
        loaded.sort(key=lambda item: item[0])  # oldest first: the best guess at least recently used
        with self._lock:
            for _, entry in loaded:
                to_clean = self._insert(entry)
                self._delete_files(to_clean)

    @staticmethod
    def _reload(stem: str, files: dict[str, Path]) -> _Entry | None:
        if len(files) != len(_SUFFIXES):
            log.info("deleting incomplete remote index cache files %s", sorted(p.name for p in files.values()))
            return None
        start, sep, id_str = stem.partition("_")
        try:
            start_offset = int(start)
            key = uuid.UUID(bytes=_decode_uuid(id_str))
            if not sep or file_stem(start_offset, key) != stem:
                raise ValueError(stem)
            offset_index = _open_offset_index(files[INDEX_SUFFIX], start_offset)
            time_index = _open_time_index(files[TIME_INDEX_SUFFIX], start_offset)
            txn_index = _open_txn_index(files[TXN_INDEX_SUFFIX], start_offset)
        except (ValueError, CorruptIndexError) as e:
            log.warning("deleting unusable remote index cache files %s: %s", stem, e)
            return None
        entry = _Entry(key, offset_index, time_index, txn_index, _weight(offset_index, time_index, txn_index))
        entry.close()  # validated; read again on first use, so a cold cache does not pin memory
        return entry


def _decode_uuid(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a segment id: {text!r}")
    return raw


def _lookup_with_next(index: OffsetIndex, offset: int) -> OffsetEntryLookup:
    """``index.lookup(offset).position`` plus the position of the entry after it (binary search:
    entries are strictly increasing in offset)."""
    lo, hi = 0, index.entries  # find the first entry whose offset is > ``offset``
    while lo < hi:
        mid = (lo + hi) // 2
        if index.entry(mid).offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    entry = index.entry(lo - 1) if lo > 0 else None
    next_position = index.entry(lo).position if lo < index.entries else None
    if entry is None:
        return OffsetEntryLookup(0, next_position, None)
    return OffsetEntryLookup(entry.position, next_position, entry.offset)


def _open_offset_index(path: Path, start_offset: int) -> OffsetIndex:
    index = OffsetIndex(path, start_offset)
    index.sanity_check()
    return index


def _open_time_index(path: Path, start_offset: int) -> TimeIndex:
    index = TimeIndex(path, start_offset)
    index.sanity_check()
    return index


def _open_txn_index(path: Path, start_offset: int) -> TransactionIndex:
    index = TransactionIndex(path, start_offset)
    index.sanity_check()
    return index


def _weight(offset_index: OffsetIndex, time_index: TimeIndex, txn_index: TransactionIndex) -> int:
    """Kafka's weigher: offset and time index sizes plus the txn index file length."""
    try:
        txn_size = txn_index.path.stat().st_size
    except FileNotFoundError:
        txn_size = 0
    return offset_index.size_in_bytes + time_index.size_in_bytes + txn_size
