"""The bucket's own map (issue 29, part 2): a hash-linked manifest chain per partition and a topic manifest.

Without them the only map of a bucket is ``__remote_log_metadata``, which lives in the cluster: lose the cluster
and the bucket is a heap of segments whose order, liveness and completeness nobody can vouch for. With them the
bucket describes itself (``docs/bucket-format.md``):

``{topic}-{topicId}/{partition}/chain/{sequence:020d}.json``
    one entry per change of the partition's remote log: ``add`` (a segment's objects and manifest are stored),
    ``delete`` (they were removed), ``checkpoint`` (the live segments so far, written every
    :data:`CHECKPOINT_INTERVAL` entries so that older entries can go and the chain stays bounded). Each entry
    carries the SHA-256 of the entry before it and an ``add`` the SHA-256 of the segment's manifest, so a
    missing, reordered or edited entry, or a manifest swapped for another, breaks the chain where it happened.
``{topic}-{topicId}/topic-manifest.json``
    the topic's name, id, partition count and config overrides: what a restore re-creates the topic with.

Why per partition and append-only: object stores have no atomic read-modify-write, so a single rewritten
"partition manifest" (Redpanda's) loses an update whenever two writers race and is a large PUT per upload;
an entry per change is one small PUT, and the chain makes the order explicit. Only the partition's leader
appends (from its copier, cleaner and expiration threads, serialised here by a lock per partition); a new
leader finds the tail by listing. Two leaders appending at the same instant (a leadership change while an
upload finishes) could both write the same sequence number: the second PUT replaces the first, and ``strata
bucket verify`` then reports the lost entry's segment as not in the chain; no data is lost by it (the
segment's own manifest is intact), and a restore still finds the segment by its manifest.

Only format v2 segments are chained: v1 stays Kafka's layout, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strata.tiered.api import (
    ObjectStore,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    TopicIdPartition,
    uuid_to_str,
)
from strata.tiered.storage.common import config_int, partition_path

__all__ = ["CHAIN_DIR", "CHECKPOINT_INTERVAL", "BucketManifests", "ChainEntry", "ChainSegment", "ChainView",
           "TopicManifest", "chain_prefix", "read_chain", "read_topic_manifest", "topic_manifest_key"]

CHAIN_DIR = "chain"
CHAIN_FORMAT = "strata.partition-chain"
TOPIC_MANIFEST_FORMAT = "strata.topic-manifest"
TOPIC_MANIFEST_NAME = "topic-manifest.json"
CHAIN_VERSION = 1
TOPIC_MANIFEST_VERSION = 1
CHECKPOINT_INTERVAL = 256
"""Entries between checkpoints. Once a checkpoint is written, the entries before the previous one are deleted:
a chain holds between one and two intervals of history (each entry a few hundred bytes)."""
_ENTRY_NAME = re.compile(r"(?P<sequence>[0-9]{20})\.json")
ADD, DELETE, CHECKPOINT = "add", "delete", "checkpoint"
log = logging.getLogger(__name__)


def chain_prefix(tp: TopicIdPartition) -> str:
    """``{topic}-{topicId}/{partition}/chain/``."""
    return f"{partition_path(tp)}/{CHAIN_DIR}/"


def chain_entry_key(tp: TopicIdPartition, sequence: int) -> str:
    return f"{chain_prefix(tp)}{sequence:020d}.json"


def parse_chain_key(key: str) -> int | None:
    """The sequence number of a chain entry's key (whatever its partition), else None."""
    directory, _, name = key.rpartition("/")
    if not directory.endswith(f"/{CHAIN_DIR}"):
        return None
    m = _ENTRY_NAME.fullmatch(name)
    return None if m is None else int(m["sequence"])


def topic_manifest_key(topic: str, topic_id: Any) -> str:
    """``{topic}-{topicId}/topic-manifest.json`` (``topic_id`` a UUID or its Kafka string)."""
    tid = topic_id if isinstance(topic_id, str) else uuid_to_str(topic_id)
    return f"{topic}-{tid}/{TOPIC_MANIFEST_NAME}"


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainSegment:
    """A segment as the chain records it: enough to find its manifest and check it is the one chained."""

    segment_id: str
    start_offset: int
    end_offset: int
    manifest_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "start_offset": self.start_offset, "end_offset": self.end_offset,
                "manifest_sha256": self.manifest_sha256}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ChainSegment:
        return cls(str(d["segment_id"]), int(d["start_offset"]), int(d["end_offset"]), str(d["manifest_sha256"]))

    def stem(self, tp: TopicIdPartition) -> str:
        """The segment's key without suffix."""
        return f"{partition_path(tp)}/{self.start_offset:020d}-{self.segment_id}"


@dataclass(frozen=True, slots=True)
class ChainEntry:
    """One entry of a partition's chain (``docs/bucket-format.md``)."""

    topic: str
    topic_id: str
    partition: int
    sequence: int
    previous_sha256: str | None  # None only for sequence 0
    op: str  # add | delete | checkpoint
    broker_id: int
    timestamp_ms: int
    segment: ChainSegment | None = None  # add, delete
    segments: tuple[ChainSegment, ...] = ()  # checkpoint: the live segments, in the order they were added

    def to_bytes(self) -> bytes:
        d: dict[str, Any] = {
            "format": CHAIN_FORMAT, "version": CHAIN_VERSION, "topic": self.topic, "topic_id": self.topic_id,
            "partition": self.partition, "sequence": self.sequence, "previous_sha256": self.previous_sha256,
            "op": self.op, "broker_id": self.broker_id, "timestamp_ms": self.timestamp_ms}
        if self.segment is not None:
            d["segment"] = self.segment.to_json()
        if self.op == CHECKPOINT:
            d["segments"] = [s.to_json() for s in self.segments]
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> ChainEntry:
        """Parse an entry; ``ValueError`` naming what is wrong when it is not one."""
        try:
            d = json.loads(bytes(data))
            if d.get("format") != CHAIN_FORMAT or d.get("version") != CHAIN_VERSION:
                raise ValueError(f"not a chain entry of version {CHAIN_VERSION} "
                                 f"(format {d.get('format')!r}, version {d.get('version')!r})")
            op = d["op"]
            if op not in (ADD, DELETE, CHECKPOINT):
                raise ValueError(f"unknown op {op!r}")
            segment = ChainSegment.from_json(d["segment"]) if op in (ADD, DELETE) else None
            segments = tuple(ChainSegment.from_json(s) for s in d.get("segments", ())) if op == CHECKPOINT else ()
            return cls(str(d["topic"]), str(d["topic_id"]), int(d["partition"]), int(d["sequence"]),
                       d.get("previous_sha256"), op, int(d["broker_id"]), int(d["timestamp_ms"]), segment, segments)
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"not a chain entry: {type(e).__name__}: {e}") from None


@dataclass(slots=True)
class ChainView:
    """A partition's chain as read from the store: its live segments and what is wrong with it."""

    entries: list[tuple[str, ChainEntry, str]] = field(default_factory=list)  # (key, entry, its sha256)
    live: dict[str, ChainSegment] = field(default_factory=dict)  # segment id -> segment, in add order
    breaks: list[tuple[str, str]] = field(default_factory=list)  # (key, what is wrong)

    @property
    def tail(self) -> tuple[int, str] | None:
        """(sequence, sha256) of the last entry, None for an empty chain."""
        if not self.entries:
            return None
        _key, entry, digest = self.entries[-1]
        return entry.sequence, digest

    def apply(self, entry: ChainEntry) -> None:
        if entry.op == ADD and entry.segment is not None:
            self.live.pop(entry.segment.segment_id, None)
            self.live[entry.segment.segment_id] = entry.segment
        elif entry.op == DELETE and entry.segment is not None:
            self.live.pop(entry.segment.segment_id, None)
        elif entry.op == CHECKPOINT:
            self.live = {s.segment_id: s for s in entry.segments}


def read_chain(store: ObjectStore, tp: TopicIdPartition, *, after: tuple[int, str] | None = None,
               base: ChainView | None = None) -> ChainView:
    """Read (and check) ``tp``'s chain; with ``after`` (a tail already read, whose state is ``base``) only the
    entries past it, which is how a read replica follows its origin without reading the chain again.

    The chain must start at sequence 0 or at a checkpoint (older entries are deleted behind checkpoints); each
    entry must follow the one before it (next sequence, its SHA-256 as ``previous_sha256``) and name this
    partition. A break is recorded and the walk goes on from the entry after it, so one damaged entry does not
    hide the rest; an entry that cannot be parsed is skipped.
    """
    keys: list[tuple[int, str]] = []
    for info in store.list_objects(chain_prefix(tp)):
        sequence = parse_chain_key(info.key)
        if sequence is not None and info.key.startswith(chain_prefix(tp)) and "/" not in \
                info.key[len(chain_prefix(tp)):]:
            if after is None or sequence > after[0]:
                keys.append((sequence, info.key))
    keys.sort()
    view = base if base is not None else ChainView()
    previous = after
    for sequence, key in keys:
        try:
            data = store.get_object_range(key, 0, 1 << 30)
        except RemoteResourceNotFoundError:  # deleted behind a new checkpoint while this read listed
            continue
        digest = sha256_hex(data)
        try:
            entry = ChainEntry.from_bytes(data)
        except ValueError as e:
            view.breaks.append((key, str(e)))
            previous = None
            continue
        if entry.sequence != sequence or entry.partition != tp.partition or \
                entry.topic_id != uuid_to_str(tp.topic_id):
            view.breaks.append((key, f"the entry says {entry.topic}-{entry.partition} sequence {entry.sequence}"))
        elif previous is None:
            if view.entries or after is not None:
                pass  # after an unparsable entry: nothing to link to, already reported
            elif sequence != 0 and entry.op != CHECKPOINT:
                view.breaks.append((key, f"the chain starts at sequence {sequence}, which is not a checkpoint: "
                                         "the entries before it are missing"))
        elif sequence != previous[0] + 1:
            view.breaks.append((key, f"sequence {sequence} follows {previous[0]}: "
                                     f"{sequence - previous[0] - 1} entries missing"))
        elif entry.previous_sha256 != previous[1]:
            view.breaks.append((key, f"previous_sha256 is {entry.previous_sha256}, the entry before it hashes to "
                                     f"{previous[1]}"))
        view.apply(entry)
        view.entries.append((key, entry, digest))
        previous = (sequence, digest)
    return view


@dataclass(frozen=True, slots=True)
class TopicManifest:
    """``{topic}-{topicId}/topic-manifest.json``: what the topic is, for a restore to create it again."""

    topic: str
    topic_id: str
    partitions: int
    configs: dict[str, str]
    replication_factor: int | None = None
    broker_id: int = -1
    timestamp_ms: int = 0

    def content(self) -> dict[str, Any]:
        """What identifies this version of the topic (not who wrote it when)."""
        return {"topic": self.topic, "topic_id": self.topic_id, "partitions": self.partitions,
                "replication_factor": self.replication_factor, "configs": dict(sorted(self.configs.items()))}

    def to_bytes(self) -> bytes:
        return json.dumps({"format": TOPIC_MANIFEST_FORMAT, "version": TOPIC_MANIFEST_VERSION, **self.content(),
                           "broker_id": self.broker_id, "timestamp_ms": self.timestamp_ms},
                          separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> TopicManifest:
        try:
            d = json.loads(bytes(data))
            if d.get("format") != TOPIC_MANIFEST_FORMAT or d.get("version") != TOPIC_MANIFEST_VERSION:
                raise ValueError(f"not a topic manifest of version {TOPIC_MANIFEST_VERSION}")
            rf = d.get("replication_factor")
            return cls(str(d["topic"]), str(d["topic_id"]), int(d["partitions"]),
                       {str(k): str(v) for k, v in d.get("configs", {}).items()},
                       None if rf is None else int(rf), int(d.get("broker_id", -1)), int(d.get("timestamp_ms", 0)))
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"not a topic manifest: {type(e).__name__}: {e}") from None


def read_topic_manifest(store: ObjectStore, topic: str, topic_id: Any) -> TopicManifest | None:
    try:
        data = store.get_object_range(topic_manifest_key(topic, topic_id), 0, 1 << 30)
    except RemoteResourceNotFoundError:
        return None
    return TopicManifest.from_bytes(data)


class BucketManifests:
    """The writer side, one per remote storage manager: chain entries for each stored and deleted v2 segment,
    and the topic manifests. Every call blocks (the RSM's threads call it)."""

    @classmethod
    def from_config(cls, store: ObjectStore, configs: Mapping[str, Any], broker_id: int) -> BucketManifests:
        """``chain.checkpoint.interval`` (``rsm.config.`` removed): entries between checkpoints (at least 2)."""
        return cls(store, broker_id=broker_id,
                   checkpoint_interval=config_int(configs, "chain.checkpoint.interval", CHECKPOINT_INTERVAL,
                                                  minimum=2))

    def __init__(self, store: ObjectStore, *, broker_id: int = -1, clock_ms: Callable[[], int] | None = None,
                 checkpoint_interval: int = CHECKPOINT_INTERVAL) -> None:
        self.store = store
        self.broker_id = broker_id
        self.checkpoint_interval = checkpoint_interval
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._locks: dict[tuple[Any, int], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._topic_manifests: dict[str, dict[str, Any]] = {}  # topic id -> content last written
        self._views: dict[TopicIdPartition, ChainView] = {}  # the chains this writer appends to

    def _lock(self, tp: TopicIdPartition) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((tp.topic_id, tp.partition), threading.Lock())

    # -- the chain --

    def added(self, metadata: RemoteLogSegmentMetadata, manifest: bytes | bytearray | memoryview) -> None:
        """The segment's objects and its manifest are stored: chain it."""
        self._append(metadata, ADD, sha256_hex(manifest))

    def deleted(self, metadata: RemoteLogSegmentMetadata) -> None:
        """The segment's objects are gone: record it (a segment never chained is not recorded)."""
        self._append(metadata, DELETE, None)

    def deleted_quietly(self, metadata: RemoteLogSegmentMetadata) -> None:
        """:meth:`deleted` for a failed copy's cleanup, which must not hide the copy's own error."""
        try:
            self.deleted(metadata)
        except Exception as e:
            log.warning("could not record the removal of %s in its partition's chain: %s",
                        metadata.remote_log_segment_id, e)

    def _view(self, tp: TopicIdPartition) -> ChainView:
        """The chain as this writer last saw it, brought up to date: one LIST, and a GET only for entries
        another broker appended meanwhile (the partition's earlier or later leader)."""
        cached = self._views.get(tp)
        if cached is None or cached.tail is None:
            view = read_chain(self.store, tp)
        else:
            view = read_chain(self.store, tp, after=cached.tail, base=cached)
        self._views[tp] = view
        return view

    def _append(self, metadata: RemoteLogSegmentMetadata, op: str, manifest_sha256: str | None) -> None:
        tp = metadata.topic_id_partition
        segment_id = uuid_to_str(metadata.remote_log_segment_id.id)
        with self._lock(tp):
            try:
                view = self._view(tp)
                if op == DELETE:
                    chained = view.live.get(segment_id)
                    if chained is None:
                        return  # never chained (v1, or a failed copy's cleanup): nothing to record
                    segment = chained
                else:
                    assert manifest_sha256 is not None
                    segment = ChainSegment(segment_id, metadata.start_offset, metadata.end_offset, manifest_sha256)
                if view.tail is not None and (view.tail[0] + 1) % self.checkpoint_interval == 0:
                    self._checkpoint(tp, view)
                tail = view.tail
                self._put(tp, view, ChainEntry(tp.topic, uuid_to_str(tp.topic_id), tp.partition,
                                               0 if tail is None else tail[0] + 1, None if tail is None else tail[1],
                                               op, self.broker_id, self._clock_ms(), segment))
            except BaseException:
                self._views.pop(tp, None)  # read it again next time: a PUT may or may not have landed
                raise

    def _checkpoint(self, tp: TopicIdPartition, view: ChainView) -> None:
        """Append a checkpoint (the live segments), then delete the entries before the previous checkpoint."""
        tail = view.tail
        assert tail is not None
        before = [e.sequence for _k, e, _d in view.entries if e.op == CHECKPOINT]
        self._put(tp, view, ChainEntry(tp.topic, uuid_to_str(tp.topic_id), tp.partition, tail[0] + 1, tail[1],
                                       CHECKPOINT, self.broker_id, self._clock_ms(), None, tuple(view.live.values())))
        if before:
            old = [(k, e) for k, e, _d in view.entries if e.sequence < before[-1]]
            self.store.delete_objects([k for k, _e in old])
            view.entries = [x for x in view.entries if x[1].sequence >= before[-1]]

    def _put(self, tp: TopicIdPartition, view: ChainView, entry: ChainEntry) -> None:
        data = entry.to_bytes()
        key = chain_entry_key(tp, entry.sequence)
        self.store.put_object(key, data)
        view.apply(entry)
        view.entries.append((key, entry, sha256_hex(data)))

    def delete_partition(self, tp: TopicIdPartition) -> None:
        """The partition was deleted (its segments first): remove its chain and the topic's manifest."""
        with self._lock(tp):
            keys = [info.key for info in self.store.list_objects(chain_prefix(tp))]
            keys.append(topic_manifest_key(tp.topic, tp.topic_id))
            self.store.delete_objects(keys)
            self._views.pop(tp, None)
        self._topic_manifests.pop(uuid_to_str(tp.topic_id), None)

    # -- the topic manifest --

    def put_topic_manifest(self, manifest: TopicManifest) -> bool:
        """Store the topic manifest unless this writer already stored the same content; whether it did."""
        content = manifest.content()
        if self._topic_manifests.get(manifest.topic_id) == content:
            return False
        self.store.put_object(topic_manifest_key(manifest.topic, manifest.topic_id), manifest.to_bytes())
        self._topic_manifests[manifest.topic_id] = content
        return True

