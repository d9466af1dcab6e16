"""The broker's background scrubber: reads back the remote segments of the partitions this broker leads and
checks every stored byte, so damage in the bucket is found before a consumer needs the data.

Why in the broker, beside the offline ``strata bucket verify``: the broker only reads a remote segment when a
consumer asks for it, so bit rot, a lost object or a truncated upload of cold data stays unnoticed until the
one read that cannot be answered - often long after the local copy was deleted and the producer's data is
gone. The scrubber keeps that window short without an operator running anything: it is rate-limited
(``remote.log.scrubber.bytes.per.second``, 0 turns it off) so it never competes with fetches and uploads,
only the leader of a partition scrubs it (each segment is read by one broker of the cluster, not by every
replica), and what it finds is visible where operators already look: one WARNING per new finding, the
``RemoteLogScrubberFindings`` gauge and the ``scrub`` field of ``/v1/tiers`` (``strata tiers``).

What is checked, per COPY_SEGMENT_FINISHED segment (listed once per pass from the RLMM):

* format v2 (a ``.manifest`` is there, or the metadata says v2): the manifest parses and describes this
  segment; every object it lists is in the store with its stored size, the SHA-256 of its stored bytes is
  the manifest's, and every chunk decodes (authenticates, decompresses) through :class:`ObjectFormat`;
* format v1: the indexes are there and the ``.log`` has the metadata's size;
* both: the ``.log`` (decoded, for v2) is a chain of valid record batches, validated by the remote reader's
  own check (:func:`strata.tiered.reader._valid_batches_end`: CRC-32C, offsets increasing within the
  segment's, leader epochs the segment's) - what the scrubber passes, a fetch serves. Offset gaps are
  allowed (a compacted topic's segments, KIP-1272): the scrubber checks integrity, not contiguity.

``strata bucket verify`` (``strata.tools``) checks the same and more (orphans, chains, the whole bucket);
its code is a layer above the broker's and cannot be imported here, so the few lines of hashing and chunk
walking are repeated and the batch chain is the reader's.

Reads go through the RSM's :class:`ObjectStore` face (one LIST per segment for the sizes, then ranged GETs)
on a thread of the scrubber's own, paced to the configured rate. A segment deleted meanwhile (gone from the
store and no longer COPY_SEGMENT_FINISHED in the metadata) is not a finding; a store error leaves the
segment unchecked for this pass (its earlier findings stand). A pass remembers the segments it has checked,
so the partition's listing can be read again to pick up segments uploaded during the pass.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from strata.common import TopicPartition
from strata.common.metrics import PartitionGauge, TopicMeter
from strata.protocol.records import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD
from strata.tiered.api import (
    ObjectInfo,
    ObjectStore,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
    uuid_to_str,
)
from strata.tiered.reader import _SegmentWindow, _valid_batches_end
from strata.tiered.storage.common import INDEX_SUFFIXES, LOG_SUFFIX, MANIFEST_SUFFIX, object_key, segment_stem
from strata.tiered.storage.object_format import (
    CorruptObjectError,
    ObjectFormat,
    SegmentManifest,
    check_stored_object,
    is_v2,
)

__all__ = ["PartitionScrubState", "RemoteScrubber", "ScrubFinding", "ScrubberMetrics", "SegmentChecker",
           "SegmentScrub"]

log = logging.getLogger("strata.tiered.scrubber")

READ_BYTES = 4 * 1024 * 1024  # stored bytes per ranged GET (whole chunks of a v2 object: may be more)
FIRST_PASS_DELAY_S = 30.0  # after the broker starts (or the interval, when shorter): startup traffic first
PROBLEMS_SHOWN = 10  # findings listed per partition in /v1/tiers
# what every segment stores besides its log (the transaction index only with aborted transactions)
REQUIRED_INDEXES = tuple(s for s in INDEX_SUFFIXES.values() if s != "txnindex")
_FRAMING = struct.Struct(">qi")

MISSING = "missing"
CORRUPT = "corrupt"
UNREADABLE = "unreadable"
METADATA_MISMATCH = "metadata-mismatch"


@dataclass(frozen=True, slots=True)
class ScrubFinding:
    """One damaged (or missing) object of a remote segment; the same object is one finding however it fails."""

    segment_id: str
    start_offset: int
    end_offset: int
    kind: str  # missing, corrupt, unreadable, metadata-mismatch (``strata bucket verify``'s words)
    key: str  # the object's key in the store (relative to the RSM's prefix)
    detail: str

    @property
    def ident(self) -> tuple[str, str]:
        return self.segment_id, self.key

    def to_json(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "start_offset": self.start_offset, "end_offset": self.end_offset,
                "kind": self.kind, "key": self.key, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class SegmentScrub:
    """The outcome of checking one segment."""

    findings: list[ScrubFinding]
    bytes_read: int


@dataclass(frozen=True, slots=True)
class ScrubberMetrics:
    """Where the scrubber reports (``TieredStats`` owns them: ``kafka_server_BrokerTopicMetrics_...``)."""

    findings: PartitionGauge  # RemoteLogScrubberFindings, per partition
    bytes: TopicMeter  # RemoteLogScrubberBytesPerSec: stored bytes read back
    segments: TopicMeter  # RemoteLogScrubberSegmentsPerSec: segments checked


class _Stopped(Exception):
    """The scrubber is closing: the check in progress gives up."""


class _Vanished(Exception):
    """A listed object is gone, or shorter than listed, when read."""


class _Throttle:
    """Paces reads to ``bytes_per_second`` (blocking, on the scrubber's thread): a read of ``n`` bytes may
    start once the reads before it are paid for, so the rate holds over any stretch longer than one read."""

    def __init__(self, bytes_per_second: int, stop: threading.Event) -> None:
        self.rate = bytes_per_second
        self._stop = stop
        self._next = 0.0

    def acquire(self, n: int) -> None:
        now = time.monotonic()
        if self._next > now and self._stop.wait(self._next - now):
            raise _Stopped
        if self._stop.is_set():
            raise _Stopped
        self._next = max(self._next, now) + n / self.rate


class SegmentChecker:
    """The check of one segment (see the module doc), blocking: run it on a worker thread.

    ``fmt`` decodes v2 objects (None: they are only hashed); give the checker its own instance, as
    :meth:`RemoteScrubber.format_for` does, so its decoded chunks never displace the remote reader's.
    ``throttle(n)`` is called before each read of ``n`` stored bytes.
    """

    def __init__(self, store: ObjectStore, rsm: RemoteStorageManager, fmt: ObjectFormat | None, *,
                 read_bytes: int = READ_BYTES, throttle: Callable[[int], None] = lambda _n: None) -> None:
        self.store = store
        self.rsm = rsm  # only for the reader's batch window type; nothing is read through it
        self.fmt = fmt
        self.read_bytes = read_bytes
        self.throttle = throttle
        self._bytes = 0

    def check(self, md: RemoteLogSegmentMetadata) -> SegmentScrub:
        """The findings of segment ``md``; store errors other than a missing object propagate (not checked).

        An object that vanishes while it is read is looked for once more (a manifest rewrapped meanwhile is
        replaced, not lost); the caller drops the findings of a segment the metadata no longer lists."""
        self._bytes = 0
        vanished: _Vanished | None = None
        try:
            for _ in range(2):
                try:
                    return SegmentScrub(self._check(md), self._bytes)
                except _Vanished as e:
                    vanished = e
            assert vanished is not None
            return SegmentScrub([self._finding(md, MISSING, str(vanished), "listed, then gone or shorter than listed "
                                               "when read (twice)")], self._bytes)
        finally:
            if self.fmt is not None:
                self.fmt.forget(md)  # no cached manifest, key or chunk: the next pass reads the store again

    def _check(self, md: RemoteLogSegmentMetadata) -> list[ScrubFinding]:
        stem = segment_stem(md)
        listed: dict[str, ObjectInfo] = {}
        for info in self.store.list_objects(f"{stem}."):
            suffix = info.key[len(stem) + 1:]
            if "/" not in suffix:
                listed[suffix] = info
        findings: list[ScrubFinding] = []
        if not listed:
            suffix = MANIFEST_SUFFIX if is_v2(md) else LOG_SUFFIX
            findings.append(self._finding(md, MISSING, object_key(md, suffix), "none of the segment's objects is in "
                                          "remote storage"))
        elif MANIFEST_SUFFIX in listed or is_v2(md):
            self._check_v2(md, listed, findings)
        else:
            self._check_v1(md, listed, findings)
        return findings

    # -- v1 --

    def _check_v1(self, md: RemoteLogSegmentMetadata, listed: dict[str, ObjectInfo],
                  findings: list[ScrubFinding]) -> None:
        for suffix in REQUIRED_INDEXES:  # (a .txnindex is optional: metadata older than KIP-1058 cannot say)
            if suffix not in listed:
                findings.append(self._finding(md, MISSING, object_key(md, suffix), f"the segment has no {suffix}"))
        info = listed.get(LOG_SUFFIX)
        if info is None:
            findings.append(self._finding(md, MISSING, object_key(md, LOG_SUFFIX), "the segment has no .log"))
            return
        if info.size != md.segment_size_in_bytes:
            findings.append(self._finding(md, CORRUPT, info.key, f"{info.size} bytes stored, the remote log metadata "
                                          f"says {md.segment_size_in_bytes}"))
            return
        chain = _BatchCheck(self.rsm, md, info.size)
        position = 0
        while position < info.size and chain.problem is None:
            end = min(position + self.read_bytes, info.size)
            chain.feed(self._read(info, position, end))
            position = end
        if (problem := chain.finish()) is not None:
            findings.append(self._finding(md, CORRUPT, info.key, problem))

    # -- v2 --

    def _check_v2(self, md: RemoteLogSegmentMetadata, listed: dict[str, ObjectInfo],
                  findings: list[ScrubFinding]) -> None:
        manifest_key = object_key(md, MANIFEST_SUFFIX)
        info = listed.get(MANIFEST_SUFFIX)
        if info is None:
            findings.append(self._finding(md, MISSING, manifest_key, "the remote log metadata says format v2 "
                                          "(custom metadata strata.v2) and the segment has no manifest"))
            return
        try:
            manifest: SegmentManifest | None = SegmentManifest.from_bytes(self._read(info, 0, info.size))
        except CorruptObjectError as e:
            manifest, problem = None, str(e)
        else:
            problem = _manifest_problem(md, manifest)
        if manifest is None or problem is not None:
            findings.append(self._finding(md, CORRUPT if manifest is None else METADATA_MISMATCH, manifest_key,
                                          f"{problem}; the segment's objects are not checked"))
            return
        decode, why_not = self._decodable(manifest)
        if why_not is not None:
            findings.append(self._finding(md, UNREADABLE, manifest_key, f"{why_not}: only the SHA-256 of its "
                                          "objects is checked"))
        for suffix, obj in sorted(manifest.objects.items()):
            key = object_key(md, suffix)
            stored = listed.get(suffix)
            if stored is None:
                findings.append(self._finding(md, MISSING, key, "listed in the segment's manifest, not in remote "
                                              "storage"))
            elif stored.size != obj.stored_size:
                findings.append(self._finding(md, CORRUPT, key, f"{stored.size} bytes stored, the manifest says "
                                              f"{obj.stored_size}"))
            elif (problem := self._check_stored(md, manifest, suffix, stored, decode)) is not None:
                findings.append(self._finding(md, CORRUPT, key, problem))

    def _decodable(self, manifest: SegmentManifest) -> tuple[bool, str | None]:
        """Whether the objects can be decoded, and why not when that is a finding (the broker could not read
        them either); a scrubber without a format only hashes, which is no finding."""
        if self.fmt is None:
            return False, None
        if manifest.wrapped_key is None:
            return True, None
        if self.fmt.keys is None:
            return False, f"encrypted under key pair {manifest.key_id!r} and no encryption.key.pairs are configured"
        try:
            self.fmt.keys.unwrap(manifest.wrapped_key)
        except Exception as e:  # noqa: BLE001 - a key manager plug-in raises what it raises
            return False, f"its data key does not unwrap: {e}"
        return True, None

    def _check_stored(self, md: RemoteLogSegmentMetadata, manifest: SegmentManifest, suffix: str, info: ObjectInfo,
                      decode: bool) -> str | None:
        """Hash every stored byte of one object and decode every chunk, a group of whole chunks per ranged GET
        (as ``strata bucket verify`` does); the decoded ``.log`` goes through the batch check."""
        assert self.fmt is not None or not decode
        obj = manifest.objects[suffix]
        chain = _BatchCheck(self.rsm, md, obj.original_size) if suffix == LOG_SUFFIX and decode else None
        return check_stored_object(self.fmt if decode else None, manifest, suffix, info.size,
                                   lambda start, end: self._read(info, start, end), self.read_bytes, chain)

    # -- the store --

    def _read(self, info: ObjectInfo, start: int, end: int) -> bytes | memoryview:
        if end <= start:
            return b""
        self.throttle(end - start)
        try:
            data = self.store.get_object_range(info.key, start, end)
        except RemoteResourceNotFoundError as e:
            raise _Vanished(info.key) from e
        self._bytes += len(data)
        if len(data) != end - start:
            raise _Vanished(info.key)
        return data

    @staticmethod
    def _finding(md: RemoteLogSegmentMetadata, kind: str, key: str, detail: str) -> ScrubFinding:
        return ScrubFinding(uuid_to_str(md.remote_log_segment_id.id), md.start_offset, md.end_offset, kind, key,
                            detail)


def _manifest_problem(md: RemoteLogSegmentMetadata, manifest: SegmentManifest) -> str | None:
    """What makes a parsed manifest wrong for this segment: another segment's identity or offsets, objects it
    lacks or cannot describe consistently."""
    tip = md.topic_id_partition
    ours = (tip.topic, uuid_to_str(tip.topic_id), tip.partition, uuid_to_str(md.remote_log_segment_id.id),
            md.start_offset, md.end_offset, md.segment_size_in_bytes)
    theirs = (manifest.topic, manifest.topic_id, manifest.partition, manifest.segment_id, manifest.start_offset,
              manifest.end_offset, manifest.segment_size_in_bytes)
    if ours != theirs:
        return (f"the manifest describes segment {theirs[3]} of {theirs[0]}-{theirs[2]} (offsets {theirs[4]}-"
                f"{theirs[5]}, {theirs[6]} bytes), the remote log metadata segment {ours[3]} of {ours[0]}-{ours[2]} "
                f"(offsets {ours[4]}-{ours[5]}, {ours[6]} bytes)")
    lacking = [s for s in (LOG_SUFFIX, *REQUIRED_INDEXES) if s not in manifest.objects]
    if lacking:
        return f"the manifest lists no {', '.join(lacking)} object"
    for suffix, obj in sorted(manifest.objects.items()):
        if sum(obj.chunk_sizes) != obj.stored_size:
            return f"the manifest's {suffix} chunks add up to {sum(obj.chunk_sizes)} bytes, not its {obj.stored_size}"
    return None


class _BatchCheck:
    """A ``.log`` fed piece by piece through the remote reader's batch validation; keeps at most one batch."""

    def __init__(self, rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, total_size: int) -> None:
        self.rsm = rsm
        self.md = md
        self.total_size = total_size
        self.position = 0  # byte of the .log at which ``_carry`` starts
        self.previous: int | None = None  # the last offset of the last valid batch
        self.problem: str | None = None
        self._carry = b""
        self._prefix = f"remote segment {uuid_to_str(md.remote_log_segment_id.id)}: "

    def feed(self, data: bytes | memoryview) -> None:
        if self.problem is not None:
            return
        buf = self._carry + bytes(data)
        window = _SegmentWindow(self.rsm, self.md, self.position, memoryview(buf))
        end, last, error = _valid_batches_end(window, self.position, self.position + len(buf), self.md,
                                              self.previous, gaps=True)
        if error is not None:
            text = str(error)
            self.problem = text[len(self._prefix):] if text.startswith(self._prefix) else text
            return
        if end > self.position:
            self.previous = last
        rest = buf[end - self.position:]
        if len(rest) >= LOG_OVERHEAD:  # a length past the object's end would be carried to the end: not that
            base_offset, length = _FRAMING.unpack_from(rest, 0)
            if length >= RECORD_BATCH_OVERHEAD - LOG_OVERHEAD and end + LOG_OVERHEAD + length > self.total_size:
                self.problem = (f"the batch at byte {end} (offset {base_offset}) claims {LOG_OVERHEAD + length} "
                                f"bytes, past the end of the {self.total_size}-byte .log")
                return
        self._carry = rest
        self.position = end

    def finish(self) -> str | None:
        if self.problem is None and self._carry:
            self.problem = f"the .log ends with a partial batch ({len(self._carry)} bytes at byte {self.position})"
        return self.problem


# -- the background task ------------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionScrubState:
    """What the scrubber knows of one led partition (``/v1/tiers``' ``scrub``)."""

    tip: TopicIdPartition
    findings: dict[tuple[str, str], ScrubFinding] = field(default_factory=dict)
    last_pass_ms: int | None = None  # when the last complete walk of its segments ended
    scrubbed_segments: int = 0  # segments that walk checked

    def to_json(self) -> dict[str, Any]:
        shown = sorted(self.findings.values(), key=lambda f: (f.start_offset, f.key))[:PROBLEMS_SHOWN]
        return {"findings": len(self.findings), "last_pass_ms": self.last_pass_ms,
                "scrubbed_segments": self.scrubbed_segments, "problems": [f.to_json() for f in shown]}


@dataclass(slots=True)
class _PassTotals:
    partitions: int = 0
    segments: int = 0
    bytes: int = 0
    new_findings: int = 0
    cleared: int = 0
    unchecked: int = 0
    last_error: str | None = None


class RemoteScrubber:
    """The background task (see the module doc): ``start()`` on the event loop, ``await close()``.

    ``targets()`` lists the partitions to scrub (led, tiered, metadata loaded) and ``leading(tip)`` says
    whether one still is; both are called on the event loop. Everything that blocks - the RLMM's listing,
    the store - runs on the scrubber's single thread.
    """

    def __init__(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, *,
                 targets: Callable[[], Sequence[TopicIdPartition]], leading: Callable[[TopicIdPartition], bool],
                 metrics: ScrubberMetrics, bytes_per_second: int, interval_ms: int,
                 clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
                 read_bytes: int = READ_BYTES) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self._targets = targets
        self._leading = leading
        self.metrics = metrics
        self.bytes_per_second = bytes_per_second
        self.interval_ms = interval_ms
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._throttle = _Throttle(max(bytes_per_second, 1), self._stop)
        store = rsm if isinstance(rsm, ObjectStore) else None
        self.checker = None if store is None else SegmentChecker(
            store, rsm, self.format_for(rsm), read_bytes=min(read_bytes, max(bytes_per_second, 64 * 1024)),
            throttle=self._throttle.acquire)
        self._states: dict[TopicPartition, PartitionScrubState] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    @staticmethod
    def format_for(rsm: RemoteStorageManager) -> ObjectFormat | None:
        """A private copy of the RSM's object format (same keys; own caches), or None when it has none."""
        fmt = getattr(rsm, "object_format", None)
        if not isinstance(fmt, ObjectFormat):
            fmt = getattr(getattr(rsm, "delegate", None), "object_format", None)  # the fault injector's store
        if not isinstance(fmt, ObjectFormat):
            return None
        return ObjectFormat(fmt.version, fmt.chunk_size, fmt.compression, fmt.encryption, fmt.keys,
                            fmt.compression_level)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self.bytes_per_second <= 0 or self._task is not None:
            return
        if self.checker is None:
            log.info("remote log scrubber off: the remote storage manager %s stores no plain objects (the scrubber "
                     "reads segments through the object API)", type(self.rsm).__name__)
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="remote-log-scrubber")
        log.info("remote log scrubber: reading the led partitions' remote segments back at up to %d bytes/s, "
                 "a pass every %d ms", self.bytes_per_second, self.interval_ms)

    async def close(self) -> None:
        self._stop.set()
        task, pool = self._task, self._pool
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if pool is not None:  # the check in progress stops at its next read
            await asyncio.get_running_loop().run_in_executor(None, lambda: pool.shutdown(wait=True,
                                                                                       cancel_futures=True))

    def state(self, tp: TopicPartition) -> PartitionScrubState | None:
        return self._states.get(tp)

    async def _run(self) -> None:
        await asyncio.sleep(min(self.interval_ms / 1000, FIRST_PASS_DELAY_S))
        while True:
            try:
                await self.scrub_pass()
            except _Stopped:
                return  # closing
            except Exception:  # a bug, not the store (store errors are counted per segment): the next pass
                log.warning("remote log scrubber: the pass failed", exc_info=True)
            await asyncio.sleep(self.interval_ms / 1000)

    async def scrub_pass(self) -> None:
        """One walk over every target partition's segments; one log line at its end when it checked any."""
        if self.checker is None:
            return
        started = time.monotonic()
        targets = list(self._targets())
        wanted = {TopicPartition(tip.topic, tip.partition) for tip in targets}
        for tp in [tp for tp in self._states if tp not in wanted]:  # no longer led (or tiered): not ours
            self._forget(tp)
        totals = _PassTotals()
        for tip in targets:
            if self._stop.is_set():
                return
            if self._leading(tip):
                totals.partitions += 1
                await self._scrub_partition(tip, totals)
        self.passes += 1
        if totals.segments or totals.unchecked:
            found = sum(len(st.findings) for st in self._states.values())
            log.log(logging.WARNING if totals.unchecked else logging.INFO,
                    "remote log scrubber: pass %d checked %d segments (%d bytes) of %d partitions in %.1f s: %d "
                    "findings (%d new, %d cleared)%s", self.passes, totals.segments, totals.bytes, totals.partitions,
                    time.monotonic() - started, found, totals.new_findings, totals.cleared,
                    f"; {totals.unchecked} segments could not be read: {totals.last_error}" if totals.unchecked else "")

    def _forget(self, tp: TopicPartition) -> None:
        self._states.pop(tp, None)
        self.metrics.findings.remove(tp.topic, tp.partition)

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn`` on the scrubber's one thread: reads go one at a time, paced, never on the event loop."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, "remote-log-scrubber")
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _finished(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        return [md for md in self.rlmm.list_remote_log_segments(tip)
                if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]

    async def _scrub_partition(self, tip: TopicIdPartition, totals: _PassTotals) -> None:
        """Check every COPY_SEGMENT_FINISHED segment of ``tip`` once (listing again at the end, for segments
        uploaded meanwhile), then make this walk's findings the partition's."""
        assert self.checker is not None
        tp = TopicPartition(tip.topic, tip.partition)
        state = self._states.get(tp)
        if state is None or state.tip != tip:  # (a topic deleted and created again: another partition)
            state = self._states[tp] = PartitionScrubState(tip)
        seen: set[RemoteLogSegmentId] = set()
        found: dict[tuple[str, str], ScrubFinding] = {}
        checked = 0
        while True:
            try:
                listed: list[RemoteLogSegmentMetadata] = await self._blocking(self._finished, tip)
            except RemoteStorageError as e:  # not loaded, no metadata yet: next pass
                log.debug("%s: remote log scrubber: no listing: %s", tp, e)
                return
            todo = [md for md in listed if md.remote_log_segment_id not in seen]
            if not todo:
                break
            for md in todo:
                if self._stop.is_set() or not self._leading(tip) or self._states.get(tp) is not state:
                    return  # leadership moved: the walk is incomplete, its findings so far stay
                seen.add(md.remote_log_segment_id)
                segment_id = uuid_to_str(md.remote_log_segment_id.id)
                try:
                    result: SegmentScrub = await self._blocking(self.checker.check, md)
                except RemoteStorageError as e:  # the store failed (not a missing object): unchecked this pass
                    totals.unchecked += 1
                    totals.last_error = f"{type(e).__name__}: {e}"
                    found.update((k, f) for k, f in state.findings.items() if f.segment_id == segment_id)
                    continue
                totals.segments += 1
                totals.bytes += result.bytes_read
                checked += 1
                self.metrics.segments.mark(tip.topic)
                self.metrics.bytes.mark(tip.topic, result.bytes_read)
                if result.findings and await self._blocking(self._deleted_meanwhile, md):
                    continue  # retention (or a cleaning) deleted it while it was read: not damage
                for f in result.findings:
                    found[f.ident] = f
                    if f.ident not in state.findings:
                        state.findings[f.ident] = f
                        totals.new_findings += 1
                        log.warning("remote log scrubber: %s segment %s (offsets %d-%d): %s %s: %s", tp, f.segment_id,
                                    f.start_offset, f.end_offset, f.kind, f.key, f.detail)
                self.metrics.findings.record(tp.topic, tp.partition, len(state.findings))
        totals.cleared += sum(1 for k in state.findings if k not in found)
        state.findings = found
        state.last_pass_ms = self._clock_ms()
        state.scrubbed_segments = checked
        self.metrics.findings.record(tp.topic, tp.partition, len(found))

    def _deleted_meanwhile(self, md: RemoteLogSegmentMetadata) -> bool:
        """Whether the metadata no longer lists the segment as COPY_SEGMENT_FINISHED (read after the store)."""
        segment_id = md.remote_log_segment_id
        try:
            return not any(m.remote_log_segment_id == segment_id for m in self._finished(md.topic_id_partition))
        except RemoteStorageError:
            return False
