"""``strata bucket verify``: check a remote store against its own format and, optionally, against the cluster.

Why a tool of its own: the broker only ever reads what ``__remote_log_metadata`` points at, and only when a
consumer asks, so an object lost, damaged or left behind in the bucket stays unnoticed until a read fails (or
forever, for what nobody reads: storage that is paid for and never freed). ``verify`` walks the whole store the
way another program would (``docs/bucket-format.md``) and reports, one line each:

``missing``
    an object a segment needs is not there: one its v2 manifest lists, or one of a v1 segment's ``index``,
    ``timeindex``, ``snapshot``, ``leader_epoch_checkpoint`` (a ``log`` too when the metadata lists the segment).
``corrupt``
    the bytes are not what they should be: a v2 object whose stored size or SHA-256 differs from its manifest,
    or a chunk that fails authentication or decompression; a ``.log`` (v1, or v2 decoded) whose record batches
    fail their CRC-32C, do not follow each other, or end with a partial batch; a manifest that cannot be parsed
    or describes another segment.
``orphan``
    an object that belongs to no complete segment: an index without its ``.log`` and without a manifest, an
    object of a v2 segment that its manifest does not list, a key that does not follow the segment layout; and,
    with ``--bootstrap-server``, a whole segment ``__remote_log_metadata`` does not list as live
    (COPY_SEGMENT_FINISHED or DELETE_SEGMENT_STARTED), or one whose copy started longer than the grace period ago
    and never finished.
``missing-manifest``
    a segment without a manifest whose ``.log`` is not plain Kafka batches (an encoded v2 ``.log``: nothing can
    read it), or that the metadata marks as v2.
``metadata-mismatch``
    (``--bootstrap-server``) a COPY_SEGMENT_FINISHED segment of which no object is in the bucket, or whose
    manifest (or ``.log`` size) disagrees with the metadata's offsets and size.
``unreadable``
    what cannot be checked: an encrypted segment whose data key no configured key pair unwraps, an object the
    store refuses to return. Not damage as far as is known, but not verified either.

Keys under the diskless prefix (WAL objects, coordinator snapshots) are not tiered segments: they are skipped
and counted. ``--repair`` removes orphans, and only orphans, last modified longer than the grace period ago (a
copy in progress writes its objects one by one, so a young orphan may be a segment that is about to be
complete); every other finding is reported, never changed: a wrong "fix" of a segment the cluster still serves
would lose data, an orphan is by definition data nothing reads.

Races with a running cluster are handled rather than reported: the store is listed before the metadata is read
(every listed segment's COPY_SEGMENT_STARTED is then already in the metadata), a segment that vanishes or changes
while it is checked is listed again and checked once more (deleted meanwhile: skipped), a COPY_SEGMENT_STARTED
segment younger than the grace period is a copy in progress (counted, not reported), and a DELETE_SEGMENT_STARTED
one is being deleted (counted, not checked).

Full mode (the default) reads every stored byte: every v2 object is hashed and every chunk decoded through
:class:`~strata.tiered.storage.object_format.ObjectFormat` (with the keys the properties file configures),
every ``.log`` is parsed batch by batch. ``--sample F`` does that for a fraction ``F`` of the segments (chosen
by hashing the segment id with ``--seed``, so a run can be repeated exactly); the others get the checks that
cost no data read (listing sizes against their manifest, which objects exist, the metadata) and the first bytes
of a manifest-less ``.log``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TextIO

from strata.errors import CorruptRecordError, TruncatedBatchError, UnsupportedForMessageFormatError
from strata.protocol.records import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, is_crc_valid, parse_header
from strata.tiered.api import (
    ObjectInfo,
    ObjectStore,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
    uuid_to_str,
)
from strata.tiered.storage.common import ALL_SUFFIXES, INDEX_SUFFIXES, LOG_SUFFIX, MANIFEST_SUFFIX, segment_stem
from strata.tiered.storage.envelope import ChunkIndex
from strata.tiered.storage.manifests import (
    CHAIN_DIR,
    TOPIC_MANIFEST_NAME,
    ChainSegment,
    TopicManifest,
    chain_prefix,
    read_chain,
    sha256_hex,
    topic_manifest_key,
)
from strata.tiered.storage.object_format import (
    CorruptObjectError,
    ObjectFormat,
    SegmentManifest,
    check_stored_object,
    is_v2,
)

__all__ = ["KINDS", "BatchChain", "BucketVerifier", "Finding", "VerifyOptions", "VerifyReport", "looks_plain",
           "parse_segment_key", "read_remote_log_metadata"]

MISSING = "missing"
CORRUPT = "corrupt"
ORPHAN = "orphan"
MISSING_MANIFEST = "missing-manifest"
METADATA_MISMATCH = "metadata-mismatch"
UNREADABLE = "unreadable"
CHAIN_BREAK = "chain-break"
KINDS = (MISSING, CORRUPT, ORPHAN, MISSING_MANIFEST, METADATA_MISMATCH, CHAIN_BREAK, UNREADABLE)
_TRANSIENT = (MISSING, MISSING_MANIFEST, ORPHAN)  # what a copy or a delete in progress also looks like

DEFAULT_GRACE_PERIOD_MS = 3_600_000
DEFAULT_PARALLELISM = 4
READ_BYTES = 8 * 1024 * 1024  # stored bytes per ranged GET of a content check (whole chunks: may be more)
PROGRESS_INTERVAL_S = 2.0
# what every segment stores besides its log (txnindex only when it has aborted transactions)
REQUIRED_INDEXES = tuple(s for s in INDEX_SUFFIXES.values() if s != "txnindex")
_ID = r"[A-Za-z0-9_-]{22}"
_SEGMENT_KEY = re.compile(rf"(?P<topic>[^/]+)-(?P<topic_id>{_ID})/(?P<partition>0|[1-9][0-9]{{0,9}})/"
                          rf"(?P<start>[0-9]{{20}})-(?P<segment_id>{_ID})\.(?P<suffix>[a-z_]+)")
_CHAIN_KEY = re.compile(rf"(?P<topic>[^/]+)-(?P<topic_id>{_ID})/(?P<partition>0|[1-9][0-9]{{0,9}})/"
                        rf"{CHAIN_DIR}/[0-9]{{20}}\.json")
_TOPIC_MANIFEST_KEY = re.compile(rf"(?P<topic>[^/]+)-(?P<topic_id>{_ID})/{re.escape(TOPIC_MANIFEST_NAME)}")
_FRAMING = struct.Struct(">qi")


# -- keys -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A segment as its keys name it: ``{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}``."""

    topic: str
    topic_id: str
    partition: int
    start_offset: int
    segment_id: str

    @property
    def stem(self) -> str:
        return f"{self.topic}-{self.topic_id}/{self.partition}/{self.start_offset:020d}-{self.segment_id}"

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(_uuid(self.topic_id), self.topic, self.partition)


def _uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def _canonical_id(text: str) -> bool:
    """Kafka's ``Uuid.toString`` of some UUID (22 base64url characters whose last 4 bits are zero)."""
    try:
        return uuid_to_str(_uuid(text)) == text
    except ValueError:
        return False


def parse_segment_key(key: str) -> tuple[SegmentRef, str] | None:
    """(segment, suffix) of a key that follows the segment layout exactly, else None."""
    m = _SEGMENT_KEY.fullmatch(key)
    if m is None or m["suffix"] not in ALL_SUFFIXES:
        return None
    if not (_canonical_id(m["topic_id"]) and _canonical_id(m["segment_id"])):
        return None
    return SegmentRef(m["topic"], m["topic_id"], int(m["partition"]), int(m["start"]), m["segment_id"]), m["suffix"]


# -- the content checks -----------------------------------------------------------------------------


def looks_plain(head: bytes | memoryview, start_offset: int, log_size: int) -> bool:
    """Whether a ``.log`` starts like Kafka's plain batches: a record batch v2 header (magic 2) whose base offset
    is the segment's start offset (or above it, within the 32-bit relative range of Kafka's indexes: a cleaned
    segment of a compacted tiered topic may begin after its base offset) and whose length fits the object.

    An encoded v2 ``.log`` starts with a random IV (encrypted) or a zstd frame (compressed only): the chance that
    it passes is below 2^-40. A v2 ``.log`` stored neither compressed nor encrypted is plain bytes, and passes."""
    if log_size == 0:
        return True
    if len(head) < LOG_OVERHEAD + 5:
        return False
    base_offset, length = _FRAMING.unpack_from(head, 0)
    return (head[16] == 2 and 0 <= base_offset - start_offset < 2**31
            and length >= RECORD_BATCH_OVERHEAD - LOG_OVERHEAD and LOG_OVERHEAD + length <= log_size)


class BatchChain:
    """A ``.log`` fed piece by piece (any split): every batch's framing, magic and CRC-32C, batches back to back
    to the last byte, offsets increasing from the segment's start offset (gaps are allowed: compaction,
    transactions) and not past its end offset when that is known. Keeps at most one batch in memory."""

    def __init__(self, start_offset: int, end_offset: int | None, total_size: int) -> None:
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.total_size = total_size
        self.next_offset = start_offset
        self.batches = 0
        self.records = 0
        self.problem: str | None = None
        self._buffer = bytearray()
        self._position = 0  # byte of the .log at which _buffer starts

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self.problem is not None:
            return
        self._buffer += data
        consumed = 0
        with memoryview(self._buffer) as view:
            while len(view) - consumed >= LOG_OVERHEAD:
                taken = self._one(view, consumed)
                if not taken:  # a problem, or the batch is not all there yet
                    break
                consumed += taken
        del self._buffer[:consumed]
        self._position += consumed

    def _one(self, view: memoryview, at: int) -> int:
        """Check the batch at ``view[at:]``; the bytes it takes (0: it is not all there yet, or a problem)."""
        where = self._position + at
        base_offset, length = _FRAMING.unpack_from(view, at)
        if where + LOG_OVERHEAD + length > self.total_size:
            self.problem = (f"the batch at byte {where} (offset {base_offset}) claims {LOG_OVERHEAD + length} bytes, "
                            f"past the end of the {self.total_size}-byte .log")
            return 0
        try:
            header = parse_header(view, at)
        except TruncatedBatchError:
            return 0
        except (CorruptRecordError, UnsupportedForMessageFormatError) as e:
            self.problem = f"byte {where}: {e}"
            return 0
        if not is_crc_valid(view, at, header):
            self.problem = (f"the batch at byte {where} (offsets {header.base_offset}-{header.last_offset}) fails "
                            "its CRC-32C")
            return 0
        if header.base_offset < self.next_offset:
            self.problem = (f"the batch at byte {where} starts at offset {header.base_offset}, below "
                            f"{self.next_offset} (the start offset, or the previous batch's last offset + 1)")
            return 0
        if header.last_offset - self.start_offset >= 2**31:  # Kafka's indexes hold offsets relative to the start
            self.problem = (f"the batch at byte {where} has offsets {header.base_offset}-{header.last_offset}, beyond "
                            f"the 2^31 offsets a segment from offset {self.start_offset} can hold (its base offset "
                            "is not covered by the CRC: damaged?)")
            return 0
        if self.end_offset is not None and header.last_offset > self.end_offset:
            self.problem = (f"the batch at byte {where} ends at offset {header.last_offset}, past the segment's end "
                            f"offset {self.end_offset}")
            return 0
        self.next_offset = header.last_offset + 1
        self.batches += 1
        self.records += header.records_count
        return header.size

    def finish(self) -> str | None:
        """The first problem, or None for a log that checked out to its last byte."""
        if self.problem is None and self._buffer:
            self.problem = f"the .log ends with a partial batch ({len(self._buffer)} bytes at byte {self._position})"
        return self.problem


# -- findings and the report ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem. ``objects``: for an orphan, what ``--repair`` would remove (with their age)."""

    kind: str
    key: str
    detail: str
    objects: tuple[ObjectInfo, ...] = ()
    stem: str | None = None  # the segment it belongs to (repair lists it again before removing anything)

    def line(self) -> str:
        return f"{self.kind:<17} {self.key}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "key": self.key, "detail": self.detail}
        if self.objects:
            doc["objects"] = [{"key": o.key, "size": o.size, "last_modified_ms": o.last_modified_ms}
                              for o in self.objects]
        return doc


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    sample: float = 1.0  # 0 < sample <= 1: the fraction of segments whose bytes are read
    seed: int | None = None  # None: a random one (printed, so a sampled run can be repeated)
    grace_period_ms: int = DEFAULT_GRACE_PERIOD_MS
    repair: bool = False
    skip_prefixes: tuple[str, ...] = ("diskless/",)
    parallelism: int = DEFAULT_PARALLELISM
    progress_interval_s: float = PROGRESS_INTERVAL_S
    read_bytes: int = READ_BYTES

    def __post_init__(self) -> None:
        if not 0 < self.sample <= 1:
            raise ValueError(f"the sample fraction must be in (0, 1], got {self.sample}")
        if self.grace_period_ms < 0:
            raise ValueError(f"the grace period must be >= 0 ms, got {self.grace_period_ms}")
        if self.parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {self.parallelism}")


@dataclass(slots=True)
class VerifyReport:
    """What a run found and did, with the counts of its summary line."""

    findings: list[Finding] = field(default_factory=list)
    segments: int = 0
    v1_segments: int = 0
    v2_segments: int = 0
    content_checked: int = 0  # segments whose bytes were read (all of them without --sample)
    objects: int = 0
    bytes_read: int = 0
    elapsed_s: float = 0.0
    skipped: int = 0  # objects under the diskless prefix
    in_flight: int = 0  # COPY_SEGMENT_STARTED within the grace period (--bootstrap-server)
    being_deleted: int = 0  # DELETE_SEGMENT_STARTED (--bootstrap-server)
    with_metadata: bool = False
    sample: float = 1.0
    seed: int | None = None
    removed: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (key, why --repair left that orphan)
    repaired: set[int] = field(default_factory=set)  # indexes into findings

    @property
    def unrepaired(self) -> list[Finding]:
        return [f for i, f in enumerate(self.findings) if i not in self.repaired]

    def by_kind(self) -> dict[str, int]:
        counts = Counter(f.kind for f in self.findings)
        return {k: counts[k] for k in KINDS if counts[k]}

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary_line(self) -> str:
        checked = ("every byte" if self.sample >= 1
                   else f"the bytes of {self.content_checked}: sample {self.sample:g}, seed {self.seed}")
        parts = [f"{self.segments} segments checked ({self.v2_segments} v2, {self.v1_segments} v1; {checked}), "
                 f"{self.objects} objects, {_mb(self.bytes_read)} read in {self.elapsed_s:.1f} s "
                 f"({self.mb_per_s:.1f} MB/s)"]
        if self.skipped:
            parts.append(f"{self.skipped} objects not of segments skipped (diskless, committed offsets)")
        if self.in_flight:
            parts.append(f"{self.in_flight} copies in progress skipped")
        if self.being_deleted:
            parts.append(f"{self.being_deleted} segments being deleted skipped")
        kinds = self.by_kind()
        parts.append(f"{len(self.findings)} findings: " + ", ".join(f"{k} {n}" for k, n in kinds.items())
                     if kinds else "no findings")
        if self.removed or self.kept:
            parts.append(f"{len(self.removed)} orphan objects removed, {len(self.kept)} kept")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "removed": list(self.removed),
            "kept": [{"key": k, "reason": why} for k, why in self.kept],
            "summary": {
                "segments": self.segments, "v1_segments": self.v1_segments, "v2_segments": self.v2_segments,
                "content_checked": self.content_checked, "objects": self.objects, "bytes_read": self.bytes_read,
                "elapsed_s": round(self.elapsed_s, 3), "mb_per_s": round(self.mb_per_s, 3),
                "skipped_diskless": self.skipped, "copies_in_progress": self.in_flight,
                "being_deleted": self.being_deleted, "with_metadata": self.with_metadata, "sample": self.sample,
                "seed": self.seed, "findings_by_kind": self.by_kind(), "unrepaired": len(self.unrepaired)},
        }


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} bytes"


# -- the verifier -------------------------------------------------------------------------------------

MetadataLoader = Callable[[set[TopicIdPartition]], Mapping[str, RemoteLogSegmentMetadata]]
"""Given the partitions found in the store: segment id (Kafka's string form) -> its metadata, every segment the
cluster has not finished deleting. Called once, after the store was listed."""


class _Vanished(Exception):
    """A listed object is gone (or changed) while it was being checked: list the segment again."""


@dataclass(slots=True)
class _Outcome:
    findings: list[Finding] = field(default_factory=list)
    version: int = 0  # 1, 2, or 0 when it is no segment (orphan objects, skipped)
    content_checked: bool = False
    in_flight: bool = False
    being_deleted: bool = False


class BucketVerifier:
    """One run of ``verify`` (see the module doc) over ``store``, reading v2 objects with ``fmt``."""

    def __init__(self, store: ObjectStore, fmt: ObjectFormat, options: VerifyOptions | None = None,
                 load_metadata: MetadataLoader | None = None, err: TextIO | None = None,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.store = store
        self.fmt = fmt
        self.options = options = options if options is not None else VerifyOptions()
        self.load_metadata = load_metadata
        self.err = err if err is not None else sys.stderr
        self.now_ms = now_ms
        self.seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "big")
        self._lock = threading.Lock()
        self._bytes_read = 0
        self._stems: dict[str, dict[str, ObjectInfo]] = {}
        self._refs: dict[str, SegmentRef] = {}
        self._metadata: Mapping[str, RemoteLogSegmentMetadata] | None = None
        self._chains: set[TopicIdPartition] = set()  # partitions with chain entries in the listing
        self._topic_manifests: dict[tuple[str, str], ObjectInfo] = {}  # (topic, topic id) -> its manifest
        self._manifest_sha: dict[str, str] = {}  # stem -> SHA-256 of its manifest as read

    # -- the run --

    def run(self) -> VerifyReport:
        started = time.monotonic()
        report = VerifyReport(sample=self.options.sample, seed=self.seed if self.options.sample < 1 else None)
        report.findings.extend(self._list(report))
        if self.load_metadata is not None:
            self._metadata = self.load_metadata({r.topic_id_partition for r in self._refs.values()})
            report.with_metadata = True
        stems = sorted(self._stems)
        self._check_all(stems, report, started)
        if self._metadata is not None:
            report.findings.extend(self._unlisted_segments())
        reported = {f.stem for f in report.findings if f.stem is not None}
        # a segment already reported (a damaged manifest, a missing object) is not reported again by its chain
        report.findings.extend(f for f in self._check_chains() if f.stem is None or f.stem not in reported)
        report.findings.sort(key=lambda f: (f.key, f.kind))
        if self.options.repair:
            self._repair(report)
        report.bytes_read = self._bytes_read
        report.elapsed_s = time.monotonic() - started
        return report

    def _list(self, report: VerifyReport) -> list[Finding]:
        """Group the store's objects by segment; the keys that fit no segment are orphans already."""
        findings = []
        for info in self.store.list_objects(""):
            if info.key.startswith(self.options.skip_prefixes):
                report.skipped += 1
                continue
            report.objects += 1
            if (m := _CHAIN_KEY.fullmatch(info.key)) is not None and _canonical_id(m["topic_id"]):
                self._chains.add(TopicIdPartition(_uuid(m["topic_id"]), m["topic"], int(m["partition"])))
                continue
            if (m := _TOPIC_MANIFEST_KEY.fullmatch(info.key)) is not None and _canonical_id(m["topic_id"]):
                self._topic_manifests[(m["topic"], m["topic_id"])] = info
                continue
            parsed = parse_segment_key(info.key)
            if parsed is None:
                findings.append(Finding(ORPHAN, info.key, "not a tiered segment's object: the key does not follow "
                                        "{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.{suffix}",
                                        (info,)))
                continue
            ref, suffix = parsed
            self._refs.setdefault(ref.stem, ref)
            self._stems.setdefault(ref.stem, {})[suffix] = info
        return findings

    def _check_all(self, stems: Sequence[str], report: VerifyReport, started: float) -> None:
        """Check the segments on ``parallelism`` threads (an object store's latency, not its bandwidth, bounds
        one reader), with a bounded number in flight, printing progress every ``progress_interval_s``."""
        last = time.monotonic()
        done = 0
        window = self.options.parallelism * 4
        queue = iter(stems)
        with ThreadPoolExecutor(self.options.parallelism, thread_name_prefix="bucket-verify") as pool:
            pending: set[Future[_Outcome]] = set()
            exhausted = False
            while pending or not exhausted:
                while not exhausted and len(pending) < window:
                    stem = next(queue, None)
                    if stem is None:
                        exhausted = True
                    else:
                        pending.add(pool.submit(self._check_stem, stem))
                if not pending:
                    break
                finished, pending = wait(pending, timeout=max(self.options.progress_interval_s, 0.01),
                                         return_when=FIRST_COMPLETED)
                for future in finished:
                    self._count(future.result(), report)
                    done += 1
                if time.monotonic() - last >= self.options.progress_interval_s:
                    last = time.monotonic()
                    elapsed = max(last - started, 1e-9)
                    with self._lock:
                        read = self._bytes_read
                    print(f"... {done}/{len(stems)} segments, {_mb(read)} read ({read / 1e6 / elapsed:.1f} MB/s), "
                          f"{len(report.findings)} findings", file=self.err, flush=True)

    @staticmethod
    def _count(outcome: _Outcome, report: VerifyReport) -> None:
        report.findings.extend(outcome.findings)
        if outcome.in_flight:
            report.in_flight += 1
        elif outcome.being_deleted:
            report.being_deleted += 1
        elif outcome.version:
            report.segments += 1
            report.v1_segments += outcome.version == 1
            report.v2_segments += outcome.version == 2
            report.content_checked += outcome.content_checked

    # -- one segment --

    def _check_stem(self, stem: str) -> _Outcome:
        """Check one segment; when something looks missing or orphaned, or vanishes meanwhile, list it again: a
        copy finishing (its objects land one by one) or a delete running while the store was walked is not a
        finding (a segment that changed is checked again; one gone entirely is skipped)."""
        ref = self._refs[stem]
        objects = self._stems[stem]
        outcome: _Outcome | None = None
        try:
            for attempt in range(2):
                try:
                    outcome = self._check_segment(ref, objects)
                except _Vanished:
                    outcome = None
                else:
                    if attempt or not any(f.kind in _TRANSIENT for f in outcome.findings):
                        return outcome
                if attempt:
                    break
                now = self._relist(stem)
                if not now:
                    return _Outcome()  # deleted while the store was checked
                if now == objects and outcome is not None:
                    return outcome
                objects = now
                with self._lock:
                    self._stems[stem] = now
        except RemoteStorageError as e:
            return _Outcome([Finding(UNREADABLE, _group_key(stem, objects), f"cannot be read: {e}", stem=stem)])
        return _Outcome([Finding(UNREADABLE, _group_key(stem, objects), "listed, then missing or shorter than listed "
                                 "when read, twice", stem=stem)])

    def _relist(self, stem: str) -> dict[str, ObjectInfo]:
        found = {}
        for info in self.store.list_objects(f"{stem}."):
            parsed = parse_segment_key(info.key)
            if parsed is not None and parsed[0].stem == stem:
                found[parsed[1]] = info
        return found

    def _check_segment(self, ref: SegmentRef, objects: Mapping[str, ObjectInfo]) -> _Outcome:
        out = _Outcome()
        md = None
        if self._metadata is not None:
            md = self._metadata.get(ref.segment_id)
            verdict = self._against_metadata(ref, objects, md, out)
            if verdict is not None:
                return verdict
        manifest_info = objects.get(MANIFEST_SUFFIX)
        log_info = objects.get(LOG_SUFFIX)
        if manifest_info is not None:
            out.version = 2
            self._check_v2(ref, objects, manifest_info, md, out)
        elif log_info is not None:
            out.version = 1
            self._check_v1(ref, objects, log_info, md, out)
        elif md is not None:  # listed as live, and neither a log nor a manifest is there
            out.version = 2 if is_v2(md) else 1
            for suffix in ((MANIFEST_SUFFIX,) if is_v2(md) else (LOG_SUFFIX,)):
                out.findings.append(Finding(MISSING, f"{ref.stem}.{suffix}", f"{_state(md)} in __remote_log_metadata; "
                                            f"the segment has {_names(objects)} but no .{suffix}", stem=ref.stem))
        else:
            out.findings.append(Finding(ORPHAN, _group_key(ref.stem, objects), f"{_names(objects)} without a .log and "
                                        "without a .manifest: part of no complete segment",
                                        tuple(objects.values()), ref.stem))
        return out

    def _against_metadata(self, ref: SegmentRef, objects: Mapping[str, ObjectInfo],
                          md: RemoteLogSegmentMetadata | None, out: _Outcome) -> _Outcome | None:
        """The segment's verdict when the metadata settles it (an orphan, a copy in progress, a segment being
        deleted), else None; a key that disagrees with the metadata is recorded in ``out``."""
        everything = tuple(objects.values())
        if md is None:
            out.findings.append(Finding(ORPHAN, _group_key(ref.stem, objects), f"{_names(objects)}: a segment that "
                                        "__remote_log_metadata does not list (never copied, or deleted)",
                                        everything, ref.stem))
            return out
        if md.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            age = self.now_ms() - max(o.last_modified_ms for o in everything)
            if age < self.options.grace_period_ms:
                out.in_flight = True
                return out
            out.findings.append(Finding(ORPHAN, _group_key(ref.stem, objects), f"{_names(objects)}: its copy started "
                                        f"and never finished (COPY_SEGMENT_STARTED, objects {age // 1000} s old)",
                                        everything, ref.stem))
            return out
        if md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            out.being_deleted = True
            return out
        tip = md.topic_id_partition
        if (tip.topic, uuid_to_str(tip.topic_id), tip.partition, md.start_offset) != \
                (ref.topic, ref.topic_id, ref.partition, ref.start_offset):
            out.findings.append(Finding(METADATA_MISMATCH, _group_key(ref.stem, objects), "__remote_log_metadata has "
                                        f"this segment id as {segment_stem(md)}", stem=ref.stem))
        return None

    def _sampled(self, ref: SegmentRef) -> bool:
        if self.options.sample >= 1:
            return True
        digest = hashlib.sha256(f"{self.seed}:{ref.segment_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") < self.options.sample * 2**64

    # -- v2 --

    def _check_v2(self, ref: SegmentRef, objects: Mapping[str, ObjectInfo], manifest_info: ObjectInfo,
                  md: RemoteLogSegmentMetadata | None, out: _Outcome) -> None:
        manifest_key = manifest_info.key
        try:
            manifest_bytes = self._get(manifest_info, 0, manifest_info.size)
            with self._lock:
                self._manifest_sha[ref.stem] = sha256_hex(manifest_bytes)
            manifest = SegmentManifest.from_bytes(manifest_bytes)
            problem = _manifest_problem(ref, manifest)
        except CorruptObjectError as e:
            manifest, problem = None, str(e)
        if manifest is None or problem is not None:
            out.findings.append(Finding(CORRUPT, manifest_key, f"{problem}; the segment's objects are not checked",
                                        stem=ref.stem))
            return
        for suffix, info in sorted(objects.items()):
            if suffix != MANIFEST_SUFFIX and suffix not in manifest.objects:
                out.findings.append(Finding(ORPHAN, info.key, "an object the segment's manifest does not list "
                                            "(no reader ever reads it)", (info,), ref.stem))
        if md is not None:
            theirs = (md.start_offset, md.end_offset, md.segment_size_in_bytes)
            ours = (manifest.start_offset, manifest.end_offset, manifest.segment_size_in_bytes)
            if theirs != ours:
                out.findings.append(Finding(METADATA_MISMATCH, manifest_key, "the manifest says offsets "
                                            f"{ours[0]}-{ours[1]}, {ours[2]} bytes; __remote_log_metadata says "
                                            f"{theirs[0]}-{theirs[1]}, {theirs[2]} bytes", stem=ref.stem))
        present = []
        for suffix, obj in sorted(manifest.objects.items()):
            info = objects.get(suffix)
            key = f"{ref.stem}.{suffix}"
            if info is None:
                out.findings.append(Finding(MISSING, key, "listed in the segment's manifest, not in the bucket",
                                            stem=ref.stem))
            elif info.size != obj.stored_size:
                out.findings.append(Finding(CORRUPT, key, f"{info.size} bytes stored, the manifest says "
                                            f"{obj.stored_size}", stem=ref.stem))
            else:
                present.append((suffix, info))
        if not self._sampled(ref):
            return
        out.content_checked = True
        decode = True
        unwrap_problem = self._data_key_problem(manifest)
        if unwrap_problem is not None:
            decode = False
            out.findings.append(Finding(UNREADABLE, manifest_key, f"{unwrap_problem}: only the SHA-256 of its objects "
                                        "is checked", stem=ref.stem))
        for suffix, info in present:
            chain = BatchChain(manifest.start_offset, manifest.end_offset, manifest.objects[suffix].original_size) \
                if suffix == LOG_SUFFIX and decode else None
            problem = self._check_v2_object(manifest, suffix, info, decode, chain)
            if problem is not None:
                out.findings.append(Finding(CORRUPT, info.key, problem, stem=ref.stem))
            elif chain is not None and chain.records != manifest.record_count:
                out.findings.append(Finding(CORRUPT, manifest_key, f"record_count is {manifest.record_count}, the "
                                            f".log's batches hold {chain.records} records", stem=ref.stem))

    def _data_key_problem(self, manifest: SegmentManifest) -> str | None:
        if manifest.wrapped_key is None:
            return None
        if self.fmt.keys is None:
            return f"encrypted under key pair {manifest.key_id!r} and no encryption.key.pairs are configured"
        try:
            self.fmt.keys.unwrap(manifest.wrapped_key)
        except Exception as e:  # noqa: BLE001 - a key manager plug-in raises what it raises
            return f"its data key does not unwrap: {e}"
        return None

    def _check_v2_object(self, manifest: SegmentManifest, suffix: str, info: ObjectInfo, decode: bool,
                         chain: BatchChain | None) -> str | None:
        """Hash every stored byte and decode every chunk, a group of whole chunks per ranged GET."""
        return check_stored_object(self.fmt if decode else None, manifest, suffix, info.size,
                                   lambda start, end: self._get(info, start, end), self.options.read_bytes, chain)

    # -- v1 --

    def _check_v1(self, ref: SegmentRef, objects: Mapping[str, ObjectInfo], log_info: ObjectInfo,
                  md: RemoteLogSegmentMetadata | None, out: _Outcome) -> None:
        manifest_key = f"{ref.stem}.{MANIFEST_SUFFIX}"
        sampled = self._sampled(ref)
        head = self._get(log_info, 0, min(log_info.size, self.options.read_bytes if sampled else 64))
        if md is not None and is_v2(md):
            out.version = 2
            out.findings.append(Finding(MISSING_MANIFEST, manifest_key, "__remote_log_metadata says format v2 "
                                        "(custom metadata strata.v2) and the segment has no manifest: the broker "
                                        "cannot read it", stem=ref.stem))
            return
        if not looks_plain(head, ref.start_offset, log_info.size):
            out.version = 2  # an encoded .log: a v2 segment that lost its manifest
            out.findings.append(Finding(MISSING_MANIFEST, manifest_key, f"the .log ({log_info.size} bytes) is not "
                                        "plain Kafka record batches (an encoded v2 .log?) and there is no manifest "
                                        "to read it with", stem=ref.stem))
            return
        for suffix in REQUIRED_INDEXES:
            if suffix not in objects:
                out.findings.append(Finding(MISSING, f"{ref.stem}.{suffix}", "a v1 segment (its .log is there) "
                                            f"without its {suffix}", stem=ref.stem))
        if md is not None and md.segment_size_in_bytes != log_info.size:
            out.findings.append(Finding(METADATA_MISMATCH, log_info.key, f"{log_info.size} bytes; "
                                        f"__remote_log_metadata says {md.segment_size_in_bytes}", stem=ref.stem))
        if not sampled:
            return
        out.content_checked = True
        chain = BatchChain(ref.start_offset, md.end_offset if md is not None else None, log_info.size)
        chain.feed(head)
        position = len(head)
        while position < log_info.size and chain.problem is None:
            end = min(position + self.options.read_bytes, log_info.size)
            chain.feed(self._get(log_info, position, end))
            position = end
        if (problem := chain.finish()) is not None:
            out.findings.append(Finding(CORRUPT, log_info.key, problem, stem=ref.stem))

    # -- the store --

    def _get(self, info: ObjectInfo, start: int, end: int) -> bytes | memoryview:
        """Stored bytes ``[start, end)`` of a listed object; _Vanished when it is gone or shorter than listed."""
        if end <= start:
            return b""
        try:
            data = self.store.get_object_range(info.key, start, end)
        except RemoteResourceNotFoundError as e:
            raise _Vanished(info.key) from e
        with self._lock:
            self._bytes_read += len(data)
        if len(data) != end - start:
            raise _Vanished(info.key)
        return data

    def _unlisted_segments(self) -> list[Finding]:
        """COPY_SEGMENT_FINISHED segments of which the store holds nothing (listed again: a segment copied after
        the listing is not a finding)."""
        assert self._metadata is not None
        findings = []
        in_bucket = {ref.segment_id for ref in self._refs.values()}  # (under another key: a mismatch already)
        for segment_id, md in sorted(self._metadata.items()):
            if md.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED or segment_id in in_bucket:
                continue
            stem = segment_stem(md)
            if stem in self._stems or self._relist(stem):
                continue
            suffix = MANIFEST_SUFFIX if is_v2(md) else LOG_SUFFIX
            findings.append(Finding(METADATA_MISMATCH, f"{stem}.{suffix}", f"{_state(md)} in __remote_log_metadata "
                                    f"(offsets {md.start_offset}-{md.end_offset}, {md.segment_size_in_bytes} bytes), "
                                    "but none of its objects is in the bucket", stem=stem))
        return findings

    # -- the chains and topic manifests (after the segments: a chain is read after its segments were listed) --

    def _check_chains(self) -> list[Finding]:
        """Every partition's chain read and checked link by link; its live segments against the bucket (each
        there, its manifest the one chained) and the bucket's v2 segments against it; each topic's manifest.

        Races with a running cluster: a chain is read after the store was listed, so a segment deleted since
        is not live in it (listed again: gone, no finding), and one copied since is live without objects
        (listed again: there, no finding); a chained segment gone from the store whose delete entry may not be
        written yet is checked against the chain read once more."""
        findings: list[Finding] = []
        v2_stems: dict[TopicIdPartition, list[str]] = {}
        for stem, ref in self._refs.items():
            if MANIFEST_SUFFIX in self._stems.get(stem, {}):
                v2_stems.setdefault(ref.topic_id_partition, []).append(stem)
        topics: set[tuple[str, str]] = set()
        for tip in sorted(self._chains | set(v2_stems), key=lambda t: (t.topic, t.partition, t.topic_id)):
            topics.add((tip.topic, uuid_to_str(tip.topic_id)))
            findings.extend(self._check_chain(tip, v2_stems.get(tip, [])))
        for (topic, tid), info in sorted(self._topic_manifests.items()):
            try:
                manifest = TopicManifest.from_bytes(self._get(info, 0, info.size))
                if (manifest.topic, manifest.topic_id) != (topic, tid):
                    findings.append(Finding(CORRUPT, info.key, f"describes topic {manifest.topic}-{manifest.topic_id}"))
            except ValueError as e:
                findings.append(Finding(CORRUPT, info.key, str(e)))
            except _Vanished:
                pass  # the topic was deleted meanwhile
        for topic, tid in sorted(topics - set(self._topic_manifests)):
            key = topic_manifest_key(topic, tid)
            if not any(i.key == key for i in self.store.list_objects(key)):  # (written after the listing)
                findings.append(Finding(MISSING, key, "the topic has format v2 segments but no topic manifest "
                                        "(a restore could not re-create its configs)"))
        return findings

    def _check_chain(self, tip: TopicIdPartition, stems: list[str]) -> list[Finding]:
        view = read_chain(self.store, tip)
        findings = [Finding(CHAIN_BREAK, key, why) for key, why in view.breaks]
        if not view.entries:
            if stems and any(self._relist(s) for s in stems):
                findings.append(Finding(CHAIN_BREAK, chain_prefix(tip), f"{len(stems)} format v2 segments and no "
                                        "chain: the partition's history cannot be vouched for"))
            return findings
        chained: dict[str, ChainSegment] = {seg.stem(tip): seg for seg in view.live.values()}
        suspects: list[tuple[str, Finding]] = []
        for stem, seg in chained.items():
            objects = self._stems.get(stem)
            if not objects:
                if not self._relist(stem):
                    suspects.append((stem, Finding(MISSING, f"{stem}.{MANIFEST_SUFFIX}", "the partition's chain lists "
                                                   f"this segment (offsets {seg.start_offset}-{seg.end_offset}), "
                                                   "none of its objects is in the bucket", stem=stem)))
            elif (sha := self._manifest_sha.get(stem)) is not None and sha != seg.manifest_sha256:
                findings.append(Finding(CORRUPT, f"{stem}.{MANIFEST_SUFFIX}", f"the manifest's SHA-256 is {sha}, the "
                                        f"chain's entry says {seg.manifest_sha256}: it was changed or replaced",
                                        stem=stem))
        now = self.now_ms()
        for stem in stems:
            if stem in chained:
                continue
            info = self._stems[stem][MANIFEST_SUFFIX]
            if now - info.last_modified_ms < self.options.grace_period_ms or not self._relist(stem):
                continue  # a copy that has not chained it yet, or deleted since the listing
            findings.append(Finding(CHAIN_BREAK, info.key, "a format v2 segment its partition's chain does not list "
                                    "(its entry lost, or the segment put there by hand)", stem=stem))
        if suspects:
            live_now = read_chain(self.store, tip).live
            findings.extend(f for stem, f in suspects
                            if (seg := chained[stem]).segment_id in live_now and not self._relist(stem))
        return findings

    # -- repair --

    def _repair(self, report: VerifyReport) -> None:
        """Remove the orphans older than the grace period, each after listing its segment again: one that gained
        or changed an object since it was checked is left alone (a copy may be under way). Segments the metadata
        does not know are not removed at all when it knows none of the bucket's: the wrong cluster, surely."""
        stranger = self._metadata is not None and bool(self._refs) and not any(
            r.segment_id in self._metadata for r in self._refs.values())
        now = self.now_ms()
        for i, f in enumerate(report.findings):
            if f.kind != ORPHAN or not f.objects:
                continue
            if stranger and f.stem is not None:
                report.kept.append((f.key, "no segment of the bucket is in this cluster's __remote_log_metadata: "
                                    "is it the cluster that writes to this bucket?"))
                continue
            young = [o for o in f.objects if now - o.last_modified_ms < self.options.grace_period_ms]
            if young:
                report.kept.append((f.key, f"modified {max(0, now - young[0].last_modified_ms) // 1000} s ago, within "
                                    f"the grace period of {self.options.grace_period_ms} ms"))
                continue
            if f.stem is not None and self._relist(f.stem) != self._stems.get(f.stem, {}):
                report.kept.append((f.key, "its segment changed since it was checked"))
                continue
            try:
                self.store.delete_objects([o.key for o in f.objects])
            except RemoteStorageError as e:
                report.kept.append((f.key, f"the delete failed: {e}"))
                continue
            report.removed.extend(o.key for o in f.objects)
            report.repaired.add(i)


def _manifest_problem(ref: SegmentRef, manifest: SegmentManifest) -> str | None:
    """What makes a parsed manifest unusable for this key: another segment's identity, objects it cannot
    describe consistently."""
    ours = (ref.topic, ref.topic_id, ref.partition, ref.start_offset, ref.segment_id)
    theirs = (manifest.topic, manifest.topic_id, manifest.partition, manifest.start_offset, manifest.segment_id)
    if ours != theirs:
        return (f"the manifest describes segment {theirs[4]} of {theirs[0]}-{theirs[2]} (topic id {theirs[1]}) from "
                f"offset {theirs[3]}, not this key's")
    lacking = [s for s in (LOG_SUFFIX, *REQUIRED_INDEXES) if s not in manifest.objects]
    if lacking:
        return f"the manifest lists no {', '.join(lacking)} object"
    for suffix, obj in sorted(manifest.objects.items()):
        if suffix not in ALL_SUFFIXES or suffix == MANIFEST_SUFFIX:
            return f"the manifest lists an object of unknown suffix {suffix!r}"
        if sum(obj.chunk_sizes) != obj.stored_size:
            return f"the manifest's {suffix} chunks add up to {sum(obj.chunk_sizes)} bytes, not its {obj.stored_size}"
        try:
            ChunkIndex(obj.chunk_size, obj.original_size, obj.chunk_sizes)
        except (ValueError, ZeroDivisionError) as e:
            return f"the manifest's {suffix} chunk index is inconsistent: {e}"
    return None


def _names(objects: Mapping[str, ObjectInfo]) -> str:
    return "objects " + ", ".join(f".{s}" for s in sorted(objects)) if len(objects) > 1 else \
        f"object .{next(iter(objects))}" if objects else "no object"


def _group_key(stem: str, objects: Mapping[str, ObjectInfo]) -> str:
    """The key of a finding about several objects of one segment: ``stem.{a,b}`` (the key itself for one)."""
    if len(objects) == 1:
        return next(iter(objects.values())).key
    return f"{stem}.{{{','.join(sorted(objects))}}}"


def _state(md: RemoteLogSegmentMetadata) -> str:
    return md.state.name


# -- the cluster's view ----------------------------------------------------------------------------------


def read_remote_log_metadata(bootstrap: str, partitions: Iterable[TopicIdPartition], *, security: Any = None,
                             timeout_s: float = 30.0) -> dict[str, RemoteLogSegmentMetadata]:
    """Every segment ``__remote_log_metadata`` has not finished deleting, of ``partitions`` and of every topic
    the cluster has, by segment id: a replay over the Kafka port with the Spark source's reader (the broker's own
    serde and cache), so it works against any cluster that uses the topic-based RLMM.

    RuntimeError when the cluster has no ``__remote_log_metadata``: every segment would be an orphan, which is
    far more likely the wrong cluster than the truth."""
    from strata.client.cluster import KafkaCluster
    from strata.client.remote_metadata import REMOTE_LOG_METADATA_TOPIC, RemoteLogMetadataReader

    with KafkaCluster(bootstrap, timeout_s, client_id="strata-bucket-verify", security=security) as cluster:
        md = cluster.metadata(None)
        if REMOTE_LOG_METADATA_TOPIC not in md.topics:
            raise RuntimeError(f"the cluster at {bootstrap} has no {REMOTE_LOG_METADATA_TOPIC} topic: is remote "
                               "storage enabled there, and is it the cluster that writes to this bucket?")
        wanted = set(partitions)
        for topic in md.topics.values():
            if not topic.internal:
                wanted.update(TopicIdPartition(topic.topic_id, topic.name, p) for p in topic.partitions)
        reader = RemoteLogMetadataReader(cluster)
        reader.poll(wanted)
        segments: dict[str, RemoteLogSegmentMetadata] = {}
        for _, cache in reader.store.items():
            for segment in cache.list_all_remote_log_segments():
                segments[uuid_to_str(segment.remote_log_segment_id.id)] = segment
        return segments


def print_report(report: VerifyReport, out: TextIO, as_json: bool = False) -> None:
    """The findings one per line, what repair removed or kept, and the summary line (or all of it as JSON)."""
    if as_json:
        json.dump(report.to_json(), out, indent=1)
        out.write("\n")
        return
    for f in report.findings:
        out.write(f.line() + "\n")
    for key in report.removed:
        out.write(f"removed {key}\n")
    for key, why in report.kept:
        out.write(f"kept {key}: {why}\n")
    out.write(report.summary_line() + "\n")
