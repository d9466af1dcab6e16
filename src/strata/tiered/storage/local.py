"""``LocalTieredStorage``: a directory acting as the bucket, with an event history for tests.

The port of Kafka's test RSM of the same name (``storage/src/test/.../LocalTieredStorage.java``):
it is what the tiered-storage acceptance tests run against, because it lets them *count* what the
broker did (``COPY_SEGMENT``, ``FETCH_SEGMENT``, ``DELETE_SEGMENT`` ...) and read back what was
offloaded. It is also a usable single-host backend (an NFS mount, a second disk).

Differences from Kafka's, and why:

* The layout is the S3 backend's (``{topic}-{topicId}/{partition}/{start:020d}-{segmentId}.{ext}``
  under ``dir``), so tooling and tests can treat both backends alike.
* Every file is written to a temp name, fsynced, renamed into place and the directory fsynced:
  a crash never leaves a torn object, as on a real object store. A directory this creates is made
  durable too (its parent fsynced). A copy writes all of a segment's temp files first, then fsyncs
  them, renames them and fsyncs the directory once, so the small index files do not each pay a
  write-fsync-rename-fsync round trip of their own. On Linux the writes also start the kernel's
  writeback as they go (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, every 4 MiB of the ``.log``
  and each small file at once, smallest first): the disk works while the rest is still being
  copied, and the small files' block allocations land in the journal commit of the ``.log``'s
  fsync, which leaves their own fsyncs (largest file first) little to do. This only starts I/O
  early; every file is still fsynced before it is renamed.
* A ranged fetch returns a reader whose ``readinto`` reads the file straight into the caller's
  buffer (an unbuffered file: no intermediate copy), which the remote read path relies on.
* The broker runs in its own process in integration tests, so besides the in-memory history each
  event is appended as one JSON line to ``<dir>/.events.jsonl`` (``read_events`` parses it).
  Brokers sharing ``dir`` append to the same file; each line is one ``write`` on an ``O_APPEND``
  descriptor, so lines never interleave.
* ``fault.file``: while that path exists every operation raises ``RetriableRemoteStorageError``,
  so a process-level test can take the store down and bring it back by creating/removing a file.
  No event is recorded for a refused operation: the store never saw it.

* It is also an :class:`~strata.tiered.api.ObjectStore` (diskless WAL objects, coordinator
  snapshots): the object of key ``k`` is the file ``<dir>/k``, written like every other file (temp
  file in the same directory, fsync, rename, directory fsync; a new directory made durable too). A
  key is ``/``-separated, relative, never empty, and no component is empty, ``.`` or ``..`` (so no
  key escapes ``dir``); the names this store keeps for itself are refused too (``.events.jsonl`` at
  the top, anything with a temp file's ``.tmp-`` mark). Keep objects under a top-level directory of
  their own (``diskless/...``): a file system cannot hold both an object ``a`` and an object ``a/b``
  (S3 can), such a put fails with ``RemoteStorageError``; ``walk_segments`` only yields files named
  like segments and ``delete_partition`` only removes a partition's directory, so objects never
  show up there. A delete removes the directories it empties below the key's top-level directory
  (a concurrent put into one of them recreates it); ``list_objects`` skips the temp files of writes
  in progress. Object calls record no events (an event belongs to a partition), honour
  ``fault.file`` and ``fetch.delay.ms``, but not ``delete.enable`` (a segment-retention switch).

Configs (``rsm.config.`` prefix removed): ``dir`` (required), ``events.log.enable`` (true),
``fault.file`` (unset), ``delete.enable`` (true; false makes segment deletes no-ops, as in Kafka, to
simulate an eventually consistent store), ``fetch.delay.ms`` (0; every ranged fetch first sleeps
this long, to simulate an object store's first-byte latency without its CPU cost), ``broker.id``.
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import os
import re
import shutil
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

from strata.common.crashpoints import crash_point
from strata.log.checkpoints import fsync_path
from strata.tiered.api import (
    IndexType,
    LogSegmentData,
    ObjectInfo,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
    TopicIdPartition,
    uuid_to_str,
)
from strata.tiered.storage.common import (
    ALL_SUFFIXES,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    check_positions,
    config_bool,
    config_int,
    config_str,
    partition_path,
    segment_stem,
)
from strata.tiered.storage.manifests import BucketManifests
from strata.tiered.storage.object_format import ObjectFormat

EVENTS_FILE = ".events.jsonl"
_TMP_MARK = ".tmp-"
T = TypeVar("T")
Buffer = bytes | bytearray | memoryview
# what walk_segments yields: {topic}-{topicId}/{partition}/{start:020d}-{segmentId}.log (ids: 22 base64url chars)
_SEGMENT_LOG = re.compile(rf"[^/]+-[A-Za-z0-9_-]{{22}}/[0-9]+/[0-9]{{20}}-[A-Za-z0-9_-]{{22}}\.{LOG_SUFFIX}")
_PUT_ATTEMPTS = 10  # a put whose directory a concurrent delete pruned (before its temp file landed) tries again


def check_object_key(key: str) -> None:
    """ValueError unless ``key`` is a valid :class:`~strata.tiered.api.ObjectStore` key: not empty, relative,
    ``/``-separated, with no empty, ``.`` or ``..`` component and no NUL (the same rule on every backend;
    obstore refuses those paths too)."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"an object key must be a non-empty string, got {key!r}")
    if "\0" in key:
        raise ValueError(f"an object key must not contain NUL, got {key!r}")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError(f"an object key must be relative, with no empty, '.' or '..' component, got {key!r}")


def check_object_prefix(prefix: str) -> None:
    """ValueError unless ``prefix`` can start a valid key (``""`` lists everything)."""
    if not isinstance(prefix, str):
        raise ValueError(f"an object prefix must be a string, got {prefix!r}")
    directory, _, _ = prefix.rpartition("/")
    if prefix.startswith("/") or (directory and any(p in ("", ".", "..") for p in directory.split("/"))):
        raise ValueError(f"an object prefix must be relative, with no empty, '.' or '..' component, got {prefix!r}")


def check_object_range(start: int, end: int) -> None:
    """The ``[start, end)`` of ``get_object_range``: ``0 <= start <= end``."""
    if start < 0:
        raise ValueError(f"start {start} must be >= 0")
    if end < start:
        raise ValueError(f"end {end} is below start {start}")


class EventType(StrEnum):
    COPY_SEGMENT = "COPY_SEGMENT"
    FETCH_SEGMENT = "FETCH_SEGMENT"
    FETCH_OFFSET_INDEX = "FETCH_OFFSET_INDEX"
    FETCH_TIME_INDEX = "FETCH_TIME_INDEX"
    FETCH_TRANSACTION_INDEX = "FETCH_TRANSACTION_INDEX"
    FETCH_LEADER_EPOCH_CHECKPOINT = "FETCH_LEADER_EPOCH_CHECKPOINT"
    FETCH_PRODUCER_SNAPSHOT = "FETCH_PRODUCER_SNAPSHOT"
    DELETE_SEGMENT = "DELETE_SEGMENT"
    DELETE_PARTITION = "DELETE_PARTITION"


_INDEX_EVENTS = {
    IndexType.OFFSET: EventType.FETCH_OFFSET_INDEX,
    IndexType.TIMESTAMP: EventType.FETCH_TIME_INDEX,
    IndexType.TRANSACTION: EventType.FETCH_TRANSACTION_INDEX,
    IndexType.LEADER_EPOCH: EventType.FETCH_LEADER_EPOCH_CHECKPOINT,
    IndexType.PRODUCER_SNAPSHOT: EventType.FETCH_PRODUCER_SNAPSHOT,
}


@dataclass(frozen=True, slots=True)
class LocalTieredStorageEvent:
    """One operation on the store. ``error`` is set when it failed (the exception's repr)."""

    type: EventType
    broker_id: int
    topic_id_partition: TopicIdPartition
    segment_id: RemoteLogSegmentId | None
    start_offset: int | None
    end_offset: int | None
    timestamp_ms: int
    counter: int
    start_position: int | None = None
    end_position: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        tp = self.topic_id_partition
        return {
            "type": self.type.value, "broker_id": self.broker_id, "topic": tp.topic, "partition": tp.partition,
            "topic_id": uuid_to_str(tp.topic_id),
            "segment_id": uuid_to_str(self.segment_id.id) if self.segment_id else None,
            "start_offset": self.start_offset, "end_offset": self.end_offset, "timestamp_ms": self.timestamp_ms,
            "counter": self.counter, "pid": os.getpid(), "start_position": self.start_position,
            "end_position": self.end_position, "error": self.error,
        }


def read_events(directory: str | Path, type: str | EventType | None = None) -> list[dict[str, Any]]:
    """The events every broker using ``directory`` recorded, oldest first (optionally of one type).

    A torn last line (a writer killed mid-write) is skipped rather than failing the reader.
    """
    path = Path(directory) / EVENTS_FILE
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    wanted = None if type is None else EventType(type).value
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if wanted is None or event.get("type") == wanted:
            events.append(event)
    return events


class _BoundedReader(io.RawIOBase):
    """An open file, already positioned, that reports EOF after ``limit`` bytes (``None``: file end).

    ``file`` should be unbuffered (``FileIO``): then ``readinto`` is one ``read`` syscall into the
    caller's buffer and ``read`` one into a new ``bytes``, with no buffer layer copying in between.
    """

    def __init__(self, file: BinaryIO, limit: int | None) -> None:
        super().__init__()
        self._file = cast(io.FileIO, file)  # BinaryIO does not declare readinto
        self._remaining = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as raw, raw.cast("B") as view:
            target = view if self._remaining is None else view[: self._remaining]
            if not len(target):
                return 0
            n = self._file.readinto(target) or 0
        if self._remaining is not None:
            self._remaining -= n
        return n

    def read_view(self, size: int) -> memoryview:
        """Up to ``size`` bytes (fewer only at the end) in a buffer of their own, for the remote reader's
        window: ``read`` fills a new ``bytes`` straight from the file, where ``readinto`` would first need
        a zero-filled ``bytearray`` (a memset of every byte, 9% of a remote local-store read's broker CPU)."""
        parts = [self.read(size)]
        got = len(parts[0])
        while 0 < got < size and len(parts[-1]):  # a short read before the end: rare with regular files
            parts.append(self.read(size - got))
            got += len(parts[-1])
        return memoryview(parts[0] if len(parts) == 1 else b"".join(parts))

    def read(self, size: int | None = -1) -> bytes:
        """Straight from the file (RawIOBase's default reads into a temporary buffer, then copies)."""
        if size is None or size < 0:
            return self.readall()
        if self._remaining is not None:
            size = min(size, self._remaining)
        data = self._file.read(size) if size else b""
        if self._remaining is not None:
            self._remaining -= len(data)
        return data

    def readall(self) -> bytes:
        """The rest in one read (RawIOBase's default would loop in 8 KiB reads)."""
        data = self._file.read() if self._remaining is None else self._file.read(self._remaining)
        if self._remaining is not None:
            self._remaining -= len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


class LocalTieredStorage(RemoteStorageManager):
    """A directory as the remote store; thread-safe, every write atomic."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self.broker_id = -1
        self._events: list[LocalTieredStorageEvent] = []
        self._lock = threading.Lock()
        self._counter = 0
        self._events_fd: int | None = None
        self._fault_file: Path | None = None
        self._delete_enabled = True
        self._fetch_delay_s = 0.0
        self.object_format = ObjectFormat()
        self.manifests = BucketManifests(self)

    # -- configuration -------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, Any]) -> None:
        self._dir = Path(config_str(configs, "dir", required=True)).resolve()
        self._dir.mkdir(parents=True, exist_ok=True)
        self.broker_id = config_int(configs, "broker.id", -1)
        fault = config_str(configs, "fault.file")
        self._fault_file = Path(fault) if fault else None
        self._delete_enabled = config_bool(configs, "delete.enable", True)
        self._fetch_delay_s = config_int(configs, "fetch.delay.ms", 0, minimum=0) / 1000
        self.object_format = ObjectFormat.from_config(configs)
        self.manifests = BucketManifests.from_config(self, configs, self.broker_id)
        if config_bool(configs, "events.log.enable", True):
            self._events_fd = os.open(self._dir / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @property
    def storage_dir(self) -> Path:
        if self._dir is None:
            raise RemoteStorageError("LocalTieredStorage is not configured (missing configure() call)")
        return self._dir

    def close(self) -> None:
        with self._lock:
            if self._events_fd is not None:
                os.close(self._events_fd)
                self._events_fd = None

    # -- event history -------------------------------------------------------------------------

    def events(self, type: EventType | None = None,
               tp: TopicIdPartition | None = None) -> list[LocalTieredStorageEvent]:
        """A snapshot of this instance's history, oldest first, optionally filtered."""
        with self._lock:
            events = list(self._events)
        return [e for e in events if (type is None or e.type is type) and (tp is None or e.topic_id_partition == tp)]

    def count(self, type: EventType, tp: TopicIdPartition | None = None) -> int:
        return len(self.events(type, tp))

    def _record(self, type: EventType, tp: TopicIdPartition, metadata: RemoteLogSegmentMetadata | None,
                error: BaseException | None = None, **positions: int | None) -> None:
        with self._lock:
            self._counter += 1
            event = LocalTieredStorageEvent(
                type=type, broker_id=self.broker_id, topic_id_partition=tp,
                segment_id=metadata.remote_log_segment_id if metadata else None,
                start_offset=metadata.start_offset if metadata else None,
                end_offset=metadata.end_offset if metadata else None,
                timestamp_ms=int(time.time() * 1000), counter=self._counter,
                error=repr(error) if error is not None else None, **positions)
            self._events.append(event)
            if self._events_fd is not None:
                os.write(self._events_fd, (json.dumps(event.to_json(), separators=(",", ":")) + "\n").encode())

    def _operation(self, type: EventType, metadata: RemoteLogSegmentMetadata, action: Callable[[], T],
                   **positions: int | None) -> T:
        """Run one store operation: refuse it during a fault, record its event, translate errors."""
        if self._fault_file is not None and self._fault_file.exists():
            raise RetriableRemoteStorageError("store unavailable (fault file present)")
        try:
            result = action()
        except FileNotFoundError as e:
            self._record(type, metadata.topic_id_partition, metadata, e, **positions)
            raise RemoteResourceNotFoundError(
                f"{type.value}: {e.filename} not found for {metadata.remote_log_segment_id}") from e
        except RemoteStorageError as e:
            self._record(type, metadata.topic_id_partition, metadata, e, **positions)
            raise
        except OSError as e:
            self._record(type, metadata.topic_id_partition, metadata, e, **positions)
            raise RemoteStorageError(f"{type.value} failed for {metadata.remote_log_segment_id}: {e}") from e
        self._record(type, metadata.topic_id_partition, metadata, None, **positions)
        return result

    # -- paths ---------------------------------------------------------------------------------

    def _path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> Path:
        return self.storage_dir / f"{segment_stem(metadata)}.{suffix}"

    def partition_dir(self, tp: TopicIdPartition) -> Path:
        return self.storage_dir / partition_path(tp)

    def segment_files(self, metadata: RemoteLogSegmentMetadata) -> dict[str, Path]:
        """Suffix -> path of the files of this segment that exist (for tests and tools)."""
        return {s: p for s in ALL_SUFFIXES if (p := self._path(metadata, s)).exists()}

    # -- RemoteStorageManager --------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        self.object_format.forget(metadata)  # (Kafka never reuses a segment id; a test of the contract does)

        def copy() -> bytes | None:
            sources: dict[str, Path | bytes] = {
                LOG_SUFFIX: data.log_segment,
                INDEX_SUFFIXES[IndexType.OFFSET]: data.offset_index,
                INDEX_SUFFIXES[IndexType.TIMESTAMP]: data.time_index,
                INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT]: data.producer_snapshot_index,
                INDEX_SUFFIXES[IndexType.LEADER_EPOCH]: bytes(data.leader_epoch_index),
            }
            if data.transaction_index is not None:
                sources[INDEX_SUFFIXES[IndexType.TRANSACTION]] = data.transaction_index
            target_dir = self._path(metadata, LOG_SUFFIX).parent
            _make_dirs(target_dir)
            try:
                try:
                    if self.object_format.writes_v2:
                        with self.object_format.encode(metadata, sources) as encoded:
                            _atomic_copy_all({self._path(metadata, suffix): source
                                              for suffix, source in encoded.objects.items()})
                            _fsync_dir(target_dir)  # the objects are durable before the chain names them
                            self.manifests.added(metadata, encoded.manifest_bytes)
                            custom: bytes | None = encoded.custom_metadata
                    else:
                        _atomic_copy_all({self._path(metadata, suffix): source for suffix, source in sources.items()})
                        custom = None
                except FileNotFoundError as e:  # a local input vanished: not a missing remote object
                    raise RemoteStorageError(f"cannot copy {e.filename}: {e.strerror}") from e
                if data.transaction_index is None:  # an overwrite must not keep an older copy's index
                    _unlink_quietly(self._path(metadata, INDEX_SUFFIXES[IndexType.TRANSACTION]))
                _fsync_dir(target_dir)
            except BaseException:
                self._delete_files(metadata)  # Kafka: a failed copy leaves no partial fileset behind
                if self.object_format.writes_v2:
                    self.manifests.deleted_quietly(metadata)  # the chain's add may have landed
                raise
            return custom

        return self._operation(EventType.COPY_SEGMENT, metadata, copy)

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        check_positions(start_position, end_position)

        def fetch() -> BinaryIO:
            if self._fetch_delay_s:
                time.sleep(self._fetch_delay_s)
            manifest = self.object_format.manifest_of(metadata, self._read_whole(metadata))
            if manifest is not None:
                return self.object_format.fetch(manifest, LOG_SUFFIX, self._read_range(metadata), start_position,
                                                None if end_position is None else end_position + 1)
            # unbuffered: readinto goes straight into the caller's buffer
            file = open(self._path(metadata, LOG_SUFFIX), "rb", buffering=0)  # noqa: SIM115 - owned by the reader
            file.seek(start_position)
            limit = None if end_position is None else end_position - start_position + 1
            return cast(BinaryIO, _BoundedReader(file, limit))

        return self._operation(EventType.FETCH_SEGMENT, metadata, fetch, start_position=start_position,
                               end_position=end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        path = self._path(metadata, INDEX_SUFFIXES[index_type])

        def fetch() -> BinaryIO:
            manifest = self.object_format.manifest_of(metadata, self._read_whole(metadata))
            if manifest is not None:
                return self.object_format.fetch(manifest, INDEX_SUFFIXES[index_type], self._read_range(metadata))
            return io.BytesIO(path.read_bytes())
        return self._operation(_INDEX_EVENTS[index_type], metadata, fetch)

    def _read_whole(self, metadata: RemoteLogSegmentMetadata) -> Callable[[str], bytes]:
        return lambda suffix: self._path(metadata, suffix).read_bytes()

    def _read_range(self, metadata: RemoteLogSegmentMetadata) -> Callable[[str, int, int], bytes]:
        def read(suffix: str, start: int, end: int) -> bytes:
            with open(self._path(metadata, suffix), "rb", buffering=0) as f:
                return os.pread(f.fileno(), end - start, start) if end > start else b""
        return read

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        def delete() -> None:
            if self._delete_enabled:
                self._delete_files(metadata)
                if self.object_format.may_hold_v2:
                    self.manifests.deleted(metadata)
            self.object_format.forget(metadata)

        self._operation(EventType.DELETE_SEGMENT, metadata, delete)

    def delete_partition(self, tp: TopicIdPartition) -> None:
        """Kafka's ``LocalTieredStorage.deletePartition`` (not part of the RSM API): drop the partition's tree."""
        if self._fault_file is not None and self._fault_file.exists():
            raise RetriableRemoteStorageError("store unavailable (fault file present)")
        if self._delete_enabled:
            shutil.rmtree(self.partition_dir(tp), ignore_errors=True)
        self._record(EventType.DELETE_PARTITION, tp, None)

    def _delete_files(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Every file of the segment, and the temp files of a copy of it that a crash interrupted
        (``kill -9`` between the writes and the renames of ``_atomic_copy_all`` leaves them; nothing
        else would ever remove them). Only ever called for a segment id no copy is writing: every
        copy attempt has a fresh id, and it is deleted only after that attempt ended."""
        for suffix in ALL_SUFFIXES:
            _unlink_quietly(self._path(metadata, suffix))
        log_path = self._path(metadata, LOG_SUFFIX)
        stem = log_path.name[: -len(LOG_SUFFIX) - 1]
        for tmp in log_path.parent.glob(f"{stem}.*{_TMP_MARK}*"):
            _unlink_quietly(tmp)
        # the partition directory stays, even empty: a concurrent copy into it may have just created it

    def walk_segments(self) -> Iterator[Path]:
        """Every stored segment ``.log`` file (for tests that read back what was offloaded); files named
        otherwise, such as plain objects that happen to end in ``.log``, are not segments."""
        root = self.storage_dir
        yield from sorted(p for p in root.glob(f"*/*/*.{LOG_SUFFIX}")
                          if _SEGMENT_LOG.fullmatch(p.relative_to(root).as_posix()))

    # -- ObjectStore -------------------------------------------------------------------------------

    def _object_path(self, key: str) -> Path:
        check_object_key(key)
        if key == EVENTS_FILE or _TMP_MARK in key.rpartition("/")[2]:
            raise ValueError(f"object key {key!r} is a name LocalTieredStorage keeps for itself")
        return self.storage_dir / key

    def _check_available(self) -> None:
        if self._fault_file is not None and self._fault_file.exists():
            raise RetriableRemoteStorageError("store unavailable (fault file present)")

    def put_object(self, key: str, data: Buffer) -> None:
        """Write ``<dir>/<key>`` atomically and durably (the segments' temp-file, fsync, rename, fsync-dir)."""
        path = self._object_path(key)
        self._check_available()
        for attempt in range(1, _PUT_ATTEMPTS + 1):
            try:
                _make_dirs(path.parent)
                _atomic_copy_all({path: data}, mid_crash_point=None)
                _fsync_dir(path.parent)
                return
            except FileNotFoundError as e:  # the directory was pruned by a concurrent delete: make it again
                if attempt == _PUT_ATTEMPTS:
                    raise RemoteStorageError(f"put of object {key}: {e}") from e
            except (IsADirectoryError, NotADirectoryError) as e:
                raise RemoteStorageError(f"put of object {key}: the key conflicts with another object or "
                                         f"directory of this file system store: {e}") from e
            except OSError as e:
                raise RemoteStorageError(f"put of object {key}: {e}") from e

    def get_object_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object, fewer when it is shorter (``os.pread``: no seek, no buffering)."""
        path = self._object_path(key)
        check_object_range(start, end)
        self._check_available()
        if self._fetch_delay_s:
            time.sleep(self._fetch_delay_s)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):  # a directory: no object of that key
                    raise IsADirectoryError(errno.EISDIR, "not an object", str(path))
                stop = min(end, st.st_size)
                data = os.pread(fd, stop - start, start) if stop > start else b""
                if 0 < len(data) < stop - start:  # a short read (above 2 GiB, or the file changed)
                    parts = [data]
                    offset = start + len(data)
                    while offset < stop and (chunk := os.pread(fd, stop - offset, offset)):
                        parts.append(chunk)
                        offset += len(chunk)
                    data = b"".join(parts)
            finally:
                os.close(fd)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            raise RemoteResourceNotFoundError(f"get of object {key}: not found") from e
        except OSError as e:
            raise RemoteStorageError(f"get of object {key}: {e}") from e
        return data

    def delete_objects(self, keys: Sequence[str]) -> None:
        """Unlink each object (one already gone is fine), prune the directories that emptied below the key's
        top-level directory, and fsync each changed directory once."""
        paths = [(key, self._object_path(key)) for key in keys]  # every key checked before anything goes
        self._check_available()
        changed: set[Path] = set()
        root = self.storage_dir
        try:
            for key, path in paths:
                try:
                    os.unlink(path)
                except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                    continue
                changed.add(_prune_empty_dirs(path.parent, root / key.split("/", 1)[0]))
            for directory in changed:
                try:
                    _fsync_dir(directory)
                except FileNotFoundError:  # pruned by a concurrent delete: its removal is that one's to sync
                    pass
        except OSError as e:
            raise RemoteStorageError(f"delete of {len(paths)} object(s): {e}") from e

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``: a walk of the directory of the prefix's last ``/``.

        Lazy: the walk goes on as the caller iterates (errors then are ``RemoteStorageError`` too). Skips
        the temp files of writes in progress, the event log, and anything but regular files. With an
        empty prefix the segment files are objects too, as in an S3 listing of the whole bucket."""
        check_object_prefix(prefix)
        self._check_available()
        root = self.storage_dir
        directory = prefix.rpartition("/")[0]
        return self._walk_objects(root / directory if directory else root, directory, prefix)

    def _walk_objects(self, start: Path, start_key: str, prefix: str) -> Iterator[ObjectInfo]:
        pending = [(start, start_key)]
        try:
            while pending:
                directory, dir_key = pending.pop()
                try:
                    with os.scandir(directory) as it:
                        entries = list(it)
                except (FileNotFoundError, NotADirectoryError):  # nothing there (or pruned meanwhile)
                    continue
                for entry in entries:
                    key = f"{dir_key}/{entry.name}" if dir_key else entry.name
                    if not key.startswith(prefix):  # only at the start directory: deeper keys all match
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((Path(entry.path), key))
                            continue
                        if _TMP_MARK in entry.name or (not dir_key and entry.name == EVENTS_FILE):
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # deleted since the directory was read
                        continue
                    if stat.S_ISREG(st.st_mode):
                        yield ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000)
        except OSError as e:
            raise RemoteStorageError(f"list of objects under {prefix!r}: {e}") from e


# -- file helpers ---------------------------------------------------------------------------------

WRITEBACK_CHUNK = 4 * 1024 * 1024
"""Bytes of a copied file after which its writeback is started (and the copy goes on meanwhile)."""
_SYNC_FILE_RANGE_WRITE = 2
_COPY_FALLBACK_ERRNOS = {errno.EINVAL, errno.ENOSYS, errno.ENOTSOCK, errno.EOPNOTSUPP, errno.EXDEV}


def _load_sync_file_range() -> Any:
    """libc's ``sync_file_range`` (Linux only; Python's os module does not expose it), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


def _start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing ``[offset, offset + nbytes)`` out now (no wait, no durability
    promise: the fsync that follows still decides). A no-op where unsupported."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)  # a hint: its result does not matter


def _write_source(fd: int, target: Path, source: Path | Buffer) -> None:
    """Write ``source`` (a file or a buffer) to the new file ``fd`` (the temp file of ``target``),
    starting the writeback of every ``WRITEBACK_CHUNK`` as it is written."""
    if not isinstance(source, Path):
        with memoryview(source) as raw, raw.cast("B") as data:
            view = data
            while view:
                view = view[os.write(fd, view):]
            _start_writeback(fd, 0, len(data))
        return
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        offset = 0
        while True:
            try:
                n = os.sendfile(fd, src, offset, WRITEBACK_CHUNK)  # in the kernel: no copy through Python
            except OSError as e:
                if offset or e.errno not in _COPY_FALLBACK_ERRNOS:
                    raise
                _copy_by_reads(src, fd)  # a platform or file system without file-to-file sendfile
                return
            if n == 0:
                return
            _start_writeback(fd, offset, n)
            offset += n
    finally:
        os.close(src)


def _copy_by_reads(src: int, fd: int) -> None:
    buf = bytearray(1024 * 1024)
    view = memoryview(buf)
    while n := os.readv(src, [buf]):
        chunk = view[:n]
        while chunk:
            chunk = chunk[os.write(fd, chunk):]


def _fsync_file(fd: int, target: Path) -> None:
    """fsync the temp file of ``target`` (a function of its own so the benchmark can time it)."""
    os.fsync(fd)


def _source_size(source: Path | Buffer) -> int:
    if not isinstance(source, Path):
        return memoryview(source).nbytes
    try:
        return source.stat().st_size
    except FileNotFoundError:
        return 0  # reported by the copy itself


def _atomic_copy_all(files: Mapping[Path, Path | Buffer], mid_crash_point: str | None = "rsm.copy.mid") -> None:
    """Write each ``target: source`` (a file or a buffer) via a unique temp file, fsync them all, then
    rename them all into place. The caller fsyncs the directory once afterwards. ``mid_crash_point``
    is reached after each rename (a segment copy's; an object put has none).

    Smallest first, each one's writeback started as it is written (see the module docstring); then
    the fsyncs, largest first; no rename happens before every file's data is durable, so a crash
    leaves either the old objects or complete new ones (and temp files, which a failed copy
    removes). On failure every temp file is removed; targets already renamed are the caller's to
    clean up.
    """
    opened: list[tuple[int, Path, Path]] = []  # (fd, tmp, target), smallest source first
    closed = 0
    try:
        for target, source in sorted(files.items(), key=lambda item: _source_size(item[1])):
            tmp = target.with_name(f"{target.name}{_TMP_MARK}{uuid.uuid4().hex}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            opened.append((fd, tmp, target))
            _write_source(fd, target, source)
        for fd, _, target in reversed(opened):
            _fsync_file(fd, target)
        for fd, _, _ in opened:
            closed += 1
            os.close(fd)
        for _, tmp, target in opened:
            os.replace(tmp, target)
            if mid_crash_point is not None:
                crash_point(mid_crash_point)  # some files of the segment in place, the others still temp files
    except BaseException:
        for fd, _, _ in opened[closed:]:
            os.close(fd)
        for _, tmp, _ in opened:
            _unlink_quietly(tmp)
        raise


def _atomic_copy(source: Path | Buffer, target: Path) -> None:
    """Write ``source`` (a file or a buffer) to ``target`` via a unique temp file, fsync, rename.

    The one-file form; a segment copy uses ``_atomic_copy_all`` so its files share the fsync phase.
    """
    _atomic_copy_all({target: source})


def _make_dirs(directory: Path) -> None:
    """``mkdir -p`` that makes what it creates durable: each new directory's parent is fsynced
    (without that, a crash could lose the partition directory and every object renamed into it)."""
    if directory.is_dir():
        return
    missing = []
    d = directory
    while not d.is_dir():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:  # a concurrent copy made it, maybe not durable yet: fsync anyway
            pass
        _fsync_dir(d.parent)


def _prune_empty_dirs(directory: Path, floor: Path) -> Path:
    """Remove ``directory`` and its ancestors while they are empty, stopping at ``floor`` (kept, as is
    everything above it); returns the directory whose entries changed last (the one to fsync).

    ``rmdir`` refuses a directory that is not empty, so nothing stored is ever lost; a concurrent put
    that made a directory this removes before its temp file landed in it makes the directory again."""
    d = directory
    while d != floor and floor in d.parents:
        try:
            os.rmdir(d)
        except OSError:  # not empty (or already gone, or busy): stop here
            return d
        d = d.parent
    return d


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _fsync_dir(directory: Path) -> None:
    """Make the renames into ``directory`` durable."""
    fsync_path(directory)
