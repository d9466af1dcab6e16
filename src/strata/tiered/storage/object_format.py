"""Remote object format v2 (issue 29): how a segment's objects are stored, and how they are read back.

Version 1 is Kafka's: each of a segment's files (``.log`` and its indexes) is one plain object. Version 2 keeps
the same keys (``{stem}.log``, ``{stem}.index``, ...), stores each object in the chunked form of
:mod:`strata.tiered.storage.envelope` (fixed-size chunks, zstd per chunk, AES-256-GCM under the segment's data
key wrapped by the key ring), and adds ``{stem}.manifest``: a JSON document that says what the segment is
(topic, partition, offsets, epochs, timestamps, record count), how each object is stored (its chunk index,
sizes, SHA-256 of the stored bytes) and which key-encryption key wrapped its data key. The layout is specified
in ``docs/bucket-format.md``.

Which objects are v2 travels with the segment's metadata: a v2 copy returns the custom metadata
:data:`V2_MARKER` (KIP-917), which the RLMM keeps with the segment, so reads never probe the store for the
format and a bucket holds v1 and v2 segments side by side (a cluster that turns the format on keeps reading
what it wrote before). Writes use the configured version; reads follow each segment's own.

Configs (``rsm.config.`` removed), shared by every object-store RSM (local directory, S3):
``object.format.version`` (1, or 2 when compression or encryption is on), ``chunk.size`` (4 MiB),
``compression.enabled`` (false), ``encryption.enabled`` (false), ``encryption.key.pair.id``,
``encryption.key.pairs``, ``encryption.key.pairs.<id>.public.key.file`` / ``.private.key.file``
(Aiven's names), ``encryption.key.manager.class`` (a KMS plug-in in place of the PEM key ring).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import struct
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from strata.tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    load_class,
    uuid_to_str,
)
from strata.tiered.storage.common import (
    LOG_SUFFIX,
    MANIFEST_SUFFIX,
    BufferReader,
    config_bool,
    config_int,
    config_str,
)
from strata.tiered.storage.envelope import ChunkIndex, DecryptionError, EncodedSegment, KeyRing, SegmentCodec

__all__ = ["V2_MARKER", "CorruptObjectError", "KeyEncryptionKeys", "ObjectFormat", "SegmentManifest", "is_v2"]

V2_MARKER = b"strata.v2"
MANIFEST_FORMAT = "strata.segment-manifest"
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024
# zstd level 1: measured on JSON events, 1.5-1.7x the speed of level 3 for the same ratio (bench/object_format_bench)
DEFAULT_COMPRESSION_LEVEL = 1
MIN_CHUNK_SIZE = 4 * 1024
MAX_CHUNK_SIZE = 256 * 1024 * 1024
SPOOL_ABOVE = 64 * 1024 * 1024  # an encoded .log larger than this goes through a temporary file, not memory
MANIFEST_CACHE_ENTRIES = 4096
DECODED_CHUNKS_KEPT = 4  # x chunk.size of memory (16 MiB by default)
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # Kafka's record batch header, 61 bytes


class KeyEncryptionKeys(Protocol):
    """What wraps data keys: the PEM :class:`KeyRing`, or a KMS (``encryption.key.manager.class``: a class
    with a no-argument constructor and ``configure(props)``)."""

    active: str

    def wrap(self, data_key: bytes, key_id: str | None = None) -> str: ...

    def unwrap(self, wrapped: str) -> bytes: ...

    def rewrap(self, wrapped: str) -> str: ...


class CorruptObjectError(RemoteStorageError):
    """A v2 object failed authentication or does not match its manifest: it is never served."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object of a v2 segment as its manifest records it."""

    suffix: str
    original_size: int
    stored_size: int
    sha256: str
    chunk_sizes: tuple[int, ...]
    chunk_size: int
    compression: str | None  # "zstd" per chunk, or None (off, or a segment of producer-compressed batches)
    aad: str | None  # base64; None when not encrypted

    def to_json(self) -> dict[str, Any]:
        return {"original_size": self.original_size, "stored_size": self.stored_size, "sha256": self.sha256,
                "chunk_size": self.chunk_size, "chunks": list(self.chunk_sizes), "compression": self.compression,
                "aad": self.aad}

    @classmethod
    def from_json(cls, suffix: str, d: Mapping[str, Any]) -> StoredObject:
        return cls(suffix, int(d["original_size"]), int(d["stored_size"]), str(d["sha256"]),
                   tuple(int(c) for c in d["chunks"]), int(d["chunk_size"]), d.get("compression"), d.get("aad"))


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """``{stem}.manifest``: everything needed to find, read and check a segment from the bucket alone."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    first_timestamp_ms: int
    record_count: int
    segment_size_in_bytes: int
    segment_leader_epochs: dict[int, int]
    broker_id: int
    event_timestamp_ms: int
    txn_idx_empty: bool
    compression: str | None  # "zstd" or None
    wrapped_key: str | None  # "<kek id>:<base64>" or None
    objects: dict[str, StoredObject] = field(default_factory=dict)
    version: int = 2

    @property
    def key_id(self) -> str | None:
        return None if self.wrapped_key is None else self.wrapped_key.partition(":")[0]

    def to_bytes(self) -> bytes:
        doc = {
            "format": MANIFEST_FORMAT, "version": self.version,
            "topic": self.topic, "topic_id": self.topic_id, "partition": self.partition,
            "segment_id": self.segment_id, "start_offset": self.start_offset, "end_offset": self.end_offset,
            "max_timestamp_ms": self.max_timestamp_ms, "first_timestamp_ms": self.first_timestamp_ms,
            "record_count": self.record_count, "segment_size_in_bytes": self.segment_size_in_bytes,
            "segment_leader_epochs": {str(k): v for k, v in sorted(self.segment_leader_epochs.items())},
            "broker_id": self.broker_id, "event_timestamp_ms": self.event_timestamp_ms,
            "txn_idx_empty": self.txn_idx_empty, "compression": self.compression,
            "encryption": None if self.wrapped_key is None else {
                "algorithm": "AES-256-GCM", "key_wrapping": "RSA-OAEP-SHA256", "wrapped_key": self.wrapped_key},
            "objects": {s: o.to_json() for s, o in sorted(self.objects.items())},
        }
        return (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> SegmentManifest:
        try:
            d = json.loads(bytes(data))
            if d.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format is {d.get('format')!r}")
            if int(d["version"]) != 2:
                raise ValueError(f"version {d['version']} is not one this broker reads")
            enc = d.get("encryption")
            return cls(
                topic=d["topic"], topic_id=d["topic_id"], partition=int(d["partition"]), segment_id=d["segment_id"],
                start_offset=int(d["start_offset"]), end_offset=int(d["end_offset"]),
                max_timestamp_ms=int(d["max_timestamp_ms"]), first_timestamp_ms=int(d["first_timestamp_ms"]),
                record_count=int(d["record_count"]), segment_size_in_bytes=int(d["segment_size_in_bytes"]),
                segment_leader_epochs={int(k): int(v) for k, v in d["segment_leader_epochs"].items()},
                broker_id=int(d["broker_id"]), event_timestamp_ms=int(d["event_timestamp_ms"]),
                txn_idx_empty=bool(d["txn_idx_empty"]), compression=d.get("compression"),
                wrapped_key=None if enc is None else str(enc["wrapped_key"]),
                objects={s: StoredObject.from_json(s, o) for s, o in d["objects"].items()})
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptObjectError(f"not a segment manifest this broker can read: {e}") from e

    def with_wrapped_key(self, wrapped: str) -> SegmentManifest:
        from dataclasses import replace
        return replace(self, wrapped_key=wrapped)


@dataclass(slots=True)
class EncodedObjects:
    """What a v2 copy stores: suffix -> bytes or a temporary file, the manifest among them."""

    objects: dict[str, Path | bytes]
    manifest: SegmentManifest
    custom_metadata: bytes = V2_MARKER

    @property
    def manifest_bytes(self) -> bytes:
        data = self.objects[MANIFEST_SUFFIX]
        assert isinstance(data, bytes)
        return data


def is_v2(metadata: RemoteLogSegmentMetadata) -> bool:
    custom = metadata.custom_metadata
    return custom is not None and bytes(custom[:len(V2_MARKER)]) == V2_MARKER


def _scan_batches(path: Path | bytes) -> tuple[int, int, int]:
    """(records, first timestamp, bytes of producer-compressed batches) from the batch headers only."""
    records, first_ts, compressed = 0, -1, 0
    if isinstance(path, bytes | bytearray | memoryview):
        f: Any = io.BytesIO(bytes(path))
    else:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    try:
        position = 0
        while True:
            f.seek(position)
            head = f.read(_BATCH_HEADER.size)
            if len(head) < _BATCH_HEADER.size:
                break
            fields = _BATCH_HEADER.unpack(head)
            length, attributes, first_timestamp, count = fields[1], fields[5], fields[7], fields[12]
            if length < _BATCH_HEADER.size - 12:
                break
            records += count
            if first_ts < 0:
                first_ts = first_timestamp
            if attributes & 0x07:
                compressed += 12 + length
            position += 12 + length
    finally:
        f.close()
    return records, first_ts, compressed


def _chunks_of(source: Path | bytes, size: int) -> Iterator[bytes]:
    if isinstance(source, Path):
        with open(source, "rb") as f:
            while chunk := f.read(size):
                yield chunk
        return
    view = memoryview(source)
    for start in range(0, len(view), size):
        yield bytes(view[start:start + size])


def _size_of(source: Path | bytes) -> int:
    return source.stat().st_size if isinstance(source, Path) else len(source)


class ObjectFormat:
    """The configured format of new objects and the codec for reading either version (see the module doc)."""

    def __init__(self, version: int = 1, chunk_size: int = DEFAULT_CHUNK_SIZE, compression: bool = False,
                 encryption: bool = False, keys: KeyEncryptionKeys | None = None,
                 compression_level: int = DEFAULT_COMPRESSION_LEVEL) -> None:
        self.version = version
        self.compression_level = compression_level
        self.chunk_size = chunk_size
        self.compression = compression
        self.encryption = encryption
        self.keys = keys
        self._manifests: OrderedDict[str, SegmentManifest | None] = OrderedDict()  # None: a v1 segment (probed)
        self._data_keys: OrderedDict[str, bytes] = OrderedDict()
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # decoded .log chunks, see read()
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, configs: Mapping[str, Any]) -> ObjectFormat:
        """Every problem is a ValueError naming its key (the broker refuses to start on it)."""
        compression = config_bool(configs, "compression.enabled", False)
        encryption = config_bool(configs, "encryption.enabled", False)
        default_version = 2 if compression or encryption else 1
        version = config_int(configs, "object.format.version", default_version, minimum=1)
        if version not in (1, 2):
            raise ValueError(f"config 'object.format.version' must be 1 or 2, got {version}")
        if version == 1 and (compression or encryption):
            raise ValueError("config 'object.format.version' is 1, which stores objects plain: compression.enabled "
                             "and encryption.enabled need version 2")
        chunk_size = config_int(configs, "chunk.size", DEFAULT_CHUNK_SIZE, minimum=MIN_CHUNK_SIZE)
        if chunk_size > MAX_CHUNK_SIZE:
            raise ValueError(f"config 'chunk.size' must be <= {MAX_CHUNK_SIZE}, got {chunk_size}")
        level = int(config_str(configs, "compression.level", str(DEFAULT_COMPRESSION_LEVEL)))
        if not -7 <= level <= 22 or level == 0:
            raise ValueError(f"config 'compression.level' must be a zstd level from -7 to 22 but not 0, got {level}")
        keys = _keys_from_config(configs, required=encryption)
        return cls(version, chunk_size, compression, encryption, keys, level)

    # -- writing ---------------------------------------------------------------------------------

    @property
    def writes_v2(self) -> bool:
        return self.version == 2

    @contextmanager
    def encode(self, metadata: RemoteLogSegmentMetadata,
               sources: Mapping[str, Path | bytes]) -> Iterator[EncodedObjects]:
        """The v2 objects of a segment (``sources``: suffix -> local file or bytes, as v1 stores them); a
        temporary file holding a large encoded ``.log`` is removed when the block ends."""
        keys = self.keys if self.encryption else None
        data_key = os.urandom(32) if keys is not None else None
        wrapped = keys.wrap(data_key) if keys is not None and data_key is not None else None
        log_source = sources[LOG_SUFFIX]
        records, first_ts, producer_compressed = _scan_batches(log_source)
        log_size = _size_of(log_source)
        # batches the producer compressed gain little from zstd: skip it for a segment made mostly of them
        compress_log = producer_compressed * 2 < log_size
        objects: dict[str, Path | bytes] = {}
        stored: dict[str, StoredObject] = {}
        temp: Path | None = None
        try:
            for suffix, source in sources.items():
                size = _size_of(source)
                digest = hashlib.sha256()
                if suffix == LOG_SUFFIX and size > SPOOL_ABOVE:
                    fd, name = tempfile.mkstemp(prefix="strata-v2-", suffix=".log")
                    temp = Path(name)
                    with os.fdopen(fd, "wb") as out:
                        def write(b: bytes, out: Any = out, digest: Any = digest) -> None:
                            digest.update(b)
                            out.write(b)
                        enc = _encode(source, size, write, data_key, self.compression and compress_log,
                                      self.chunk_size, self.compression_level)
                    objects[suffix] = temp
                else:
                    parts: list[bytes] = []

                    def collect(b: bytes, parts: list[bytes] = parts, digest: Any = digest) -> None:
                        digest.update(b)
                        parts.append(b)
                    chunk = self.chunk_size if suffix == LOG_SUFFIX else max(size, 1)
                    enc = _encode(source, size, collect, data_key,
                                  self.compression and (suffix != LOG_SUFFIX or compress_log), chunk,
                                  self.compression_level)
                    objects[suffix] = b"".join(parts)
                stored[suffix] = StoredObject(suffix, size, enc.index.stored_size, digest.hexdigest(),
                                              enc.index.stored_sizes, enc.index.original_chunk_size,
                                              "zstd" if enc.compressed else None,
                                              None if enc.aad is None else base64.b64encode(enc.aad).decode())
            tip = metadata.topic_id_partition
            manifest = SegmentManifest(
                topic=tip.topic, topic_id=uuid_to_str(tip.topic_id), partition=tip.partition,
                segment_id=uuid_to_str(metadata.remote_log_segment_id.id), start_offset=metadata.start_offset,
                end_offset=metadata.end_offset, max_timestamp_ms=metadata.max_timestamp_ms, first_timestamp_ms=first_ts,
                record_count=records, segment_size_in_bytes=metadata.segment_size_in_bytes,
                segment_leader_epochs=dict(metadata.segment_leader_epochs), broker_id=metadata.broker_id,
                event_timestamp_ms=metadata.event_timestamp_ms, txn_idx_empty=metadata.txn_idx_empty,
                compression="zstd" if self.compression else None, wrapped_key=wrapped, objects=stored)
            objects[MANIFEST_SUFFIX] = manifest.to_bytes()
            yield EncodedObjects(objects, manifest)
        finally:
            if temp is not None:
                temp.unlink(missing_ok=True)

    # -- reading ---------------------------------------------------------------------------------

    @property
    def may_hold_v2(self) -> bool:
        """Whether segments without the v2 marker in their metadata may still be v2 (a store this RSM writes v2
        to, or holds keys for): metadata read from elsewhere than the RLMM (a rebuilt one, a test's) may lack
        the custom metadata, so such a segment's manifest is looked for once."""
        return self.version == 2 or self.keys is not None

    def manifest_of(self, metadata: RemoteLogSegmentMetadata,
                    get: Callable[[str], bytes | memoryview]) -> SegmentManifest | None:
        """The manifest of a v2 segment, None for a v1 one: the metadata's marker says which; metadata without
        custom metadata on a store that may hold v2 is probed once (a missing manifest: v1), then cached."""
        if is_v2(metadata):
            return self.manifest(metadata, get)
        if metadata.custom_metadata is not None or not self.may_hold_v2:
            return None
        key = uuid_to_str(metadata.remote_log_segment_id.id)
        with self._lock:
            if key in self._manifests:
                return self._manifests[key]
        try:
            return self.manifest(metadata, get)
        except (RemoteResourceNotFoundError, FileNotFoundError):
            with self._lock:
                self._manifests[key] = None
            return None

    def manifest(self, metadata: RemoteLogSegmentMetadata,
                 get: Callable[[str], bytes | memoryview]) -> SegmentManifest:
        """The segment's manifest (``get(suffix)`` reads a whole object), cached by segment id."""
        key = uuid_to_str(metadata.remote_log_segment_id.id)
        with self._lock:
            cached = self._manifests.get(key)
            if cached is not None:
                self._manifests.move_to_end(key)
                return cached
        manifest = SegmentManifest.from_bytes(get(MANIFEST_SUFFIX))
        if manifest.segment_id != key:
            raise CorruptObjectError(f"the manifest of segment {key} describes segment {manifest.segment_id}")
        with self._lock:
            self._manifests[key] = manifest
            while len(self._manifests) > MANIFEST_CACHE_ENTRIES:
                self._manifests.popitem(last=False)
        return manifest

    def forget(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Drop a deleted (or copied again) segment's cached manifest, key and decoded chunks."""
        key = uuid_to_str(metadata.remote_log_segment_id.id)
        with self._lock:
            self._manifests.pop(key, None)
            self._data_keys.pop(key, None)
            for chunk in [c for c in self._chunks if c[0] == key]:
                del self._chunks[chunk]

    def read(self, manifest: SegmentManifest, suffix: str, get_range: Callable[[int, int], bytes | memoryview],
             start: int = 0, end: int | None = None) -> memoryview:
        """Original bytes ``[start, end)`` of one object (``get_range(a, b)``: stored bytes ``[a, b)``), as a
        view of the buffer they were decoded into. The ``.log``'s first and last decoded chunks are kept (a few,
        for all segments): the remote reader's windows start at batch boundaries, so consecutive windows share
        a chunk, which is then decoded once."""
        obj = manifest.objects.get(suffix)
        if obj is None:
            raise CorruptObjectError(f"segment {manifest.segment_id} has no {suffix} object in its manifest")
        end = obj.original_size if end is None else min(end, obj.original_size)
        start = min(start, end)
        encoded = EncodedSegment(ChunkIndex(obj.chunk_size, obj.original_size, obj.chunk_sizes),
                                 obj.compression == "zstd", manifest.wrapped_key,
                                 None if obj.aad is None else base64.b64decode(obj.aad))
        keyring = None
        if manifest.wrapped_key is not None:
            keyring = _UnwrappedKey(self._data_key(manifest))
        codec = SegmentCodec(obj.chunk_size, compression=encoded.compressed, keyring=keyring)  # type: ignore[arg-type]
        cache = None
        if suffix == LOG_SUFFIX:
            segment = manifest.segment_id

            def get(n: int) -> bytes | None:
                with self._lock:
                    return self._chunks.get((segment, n))

            def put(n: int, plain: bytes) -> None:
                with self._lock:
                    self._chunks[(segment, n)] = plain
                    while len(self._chunks) > DECODED_CHUNKS_KEPT:
                        self._chunks.popitem(last=False)
            cache = (get, put)
        try:
            return codec.decode(encoded, get_range, start, end, cache)
        except DecryptionError as e:
            raise CorruptObjectError(f"{suffix} object of segment {manifest.segment_id} ({manifest.topic}-"
                                     f"{manifest.partition}, offsets {manifest.start_offset}-{manifest.end_offset}) "
                                     f"is not served: {e}") from e
        except Exception as e:  # noqa: BLE001 - zstd refusing a tampered chunk of an unencrypted object
            raise CorruptObjectError(f"{suffix} object of segment {manifest.segment_id} does not decode: {e}") from e

    def fetch(self, manifest: SegmentManifest, suffix: str, get_range: Callable[[str, int, int], bytes | memoryview],
              start: int = 0, end: int | None = None) -> BinaryIO:
        """An RSM's fetch of a v2 segment's object (``get_range(suffix, a, b)``: its stored bytes ``[a, b)``):
        original bytes ``[start, end)`` as a stream. A transaction index the segment does not have is
        RemoteResourceNotFoundError, as a missing v1 object is."""
        if suffix not in manifest.objects and suffix != LOG_SUFFIX:
            raise RemoteResourceNotFoundError(f"segment {manifest.segment_id} has no {suffix} object")
        return BufferReader(self.read(manifest, suffix, lambda a, b: get_range(suffix, a, b), start, end))  # type: ignore[return-value]

    def _data_key(self, manifest: SegmentManifest) -> bytes:
        assert manifest.wrapped_key is not None
        with self._lock:
            key = self._data_keys.get(manifest.segment_id)
            if key is not None:
                return key
        if self.keys is None:
            raise CorruptObjectError(f"segment {manifest.segment_id} is encrypted (key pair {manifest.key_id!r}) and "
                                     "no encryption.key.pairs are configured")
        try:
            key = self.keys.unwrap(manifest.wrapped_key)
        except DecryptionError as e:
            raise CorruptObjectError(f"segment {manifest.segment_id}: {e}") from e
        with self._lock:
            self._data_keys[manifest.segment_id] = key
            while len(self._data_keys) > MANIFEST_CACHE_ENTRIES:
                self._data_keys.popitem(last=False)
        return key


class _UnwrappedKey:
    """The key ring interface over one already unwrapped data key (the codec unwraps per read)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def unwrap(self, wrapped: str) -> bytes:
        return self._key


def _encode(source: Path | bytes, size: int, write: Callable[[bytes], object], data_key: bytes | None,
            compress: bool, chunk_size: int, level: int) -> EncodedSegment:
    codec = SegmentCodec(chunk_size, compression=compress, keyring=None, level=level)
    return codec.encode(_chunks_of(source, chunk_size), size, write, data_key=data_key)


def _keys_from_config(configs: Mapping[str, Any], *, required: bool) -> KeyEncryptionKeys | None:
    manager = config_str(configs, "encryption.key.manager.class", "")
    if manager:
        cls = load_class(manager, {}, object)
        keys = cls()
        configure = getattr(keys, "configure", None)
        if configure is not None:
            configure({str(k): str(v) for k, v in configs.items()})
        for method in ("wrap", "unwrap", "rewrap"):
            if not callable(getattr(keys, method, None)):
                raise ValueError(f"config 'encryption.key.manager.class': {manager} has no {method}()")
        return keys  # type: ignore[no-any-return]
    if not config_str(configs, "encryption.key.pairs", ""):
        if required:
            raise ValueError("config 'encryption.key.pairs' is needed when 'encryption.enabled' is true")
        return None
    return KeyRing.from_config({str(k): str(v) for k, v in configs.items()})


class BatchFeed(Protocol):
    """What checks a decoded ``.log`` as it streams by (``strata bucket verify``'s and the scrubber's)."""

    def feed(self, data: bytes | bytearray | memoryview) -> None: ...

    def finish(self) -> str | None: ...


def check_stored_object(fmt: ObjectFormat | None, manifest: SegmentManifest, suffix: str, stored_size: int,
                        read: Callable[[int, int], bytes | memoryview], read_bytes: int,
                        chain: BatchFeed | None = None) -> str | None:
    """Check one stored v2 object against its manifest: the SHA-256 of every stored byte, and (with ``fmt``)
    every chunk decoded (authenticated, decompressed) and, for a ``.log`` with ``chain``, its batches. Reads a
    group of whole chunks at a time, at most ``read_bytes`` (one chunk when larger): ``read(start, end)``
    returns stored bytes. The problem found, or None. Shared by ``strata bucket verify`` and the scrubber."""
    obj = manifest.objects[suffix]
    digest = hashlib.sha256()
    decode_problem: str | None = None
    sizes = obj.chunk_sizes
    first = stored = 0
    while first < len(sizes):
        last, group = first + 1, sizes[first]
        while last < len(sizes) and group + sizes[last] <= read_bytes:
            group += sizes[last]
            last += 1
        data = read(stored, stored + group)
        digest.update(data)
        if fmt is not None and decode_problem is None:
            start, end = first * obj.chunk_size, min(last * obj.chunk_size, obj.original_size)
            try:
                plain = fmt.read(manifest, suffix, lambda a, b, d=data, s=stored: d[a - s:b - s], start, end)
            except CorruptObjectError as e:
                decode_problem = str(e)
            else:
                if len(plain) != end - start:
                    decode_problem = f"chunks {first}-{last - 1} decode to {len(plain)} bytes, {end - start} expected"
                elif chain is not None:
                    chain.feed(plain)
        stored += group
        first = last
    if digest.hexdigest() != obj.sha256:
        return (f"the SHA-256 of its {stored_size} stored bytes is {digest.hexdigest()[:16]}..., the manifest says "
                f"{obj.sha256[:16]}...")
    if decode_problem is not None:
        return decode_problem
    if chain is not None and (problem := chain.finish()) is not None:
        return f"decoded, {problem}"
    return None
