"""``FaultInjectingRemoteStorageManager``: a real RSM wrapped with faults that can change at run time.

For chaos testing (Strata's own reliability suite, or an operator rehearsing an object-store
incident): load it as ``remote.log.storage.manager.class.name=faults``, name the real backend in
``rsm.config.faults.delegate.class.name`` and keep that backend's own ``rsm.config.*`` keys as they
are - every key not starting with ``faults.`` goes to the delegate unchanged (plus ``broker.id``).
With no fault spec it is a transparent pass-through that counts calls.

Faults are described by a JSON *spec* and may change while the broker runs: the spec is read from
``faults.control.file`` whenever that file's mtime, size or inode changes (checked with one
``stat`` per call), so one test (or one incident drill) can go baseline -> faults -> recovery
against one broker process. While the control file is absent, ``faults.spec`` (the same JSON,
inline) applies, else nothing. A control file that does not parse is logged and ignored (the
previous spec stays) and read again on its next change, so a half-written file never crashes the
broker. Write it atomically (temp file + rename) anyway.

The spec maps an operation - ``copy``, ``fetch_segment``, ``fetch_index``, ``delete`` (the segment
API), ``put_object``, ``get_object``, ``delete_objects``, ``list_objects`` (the
:class:`~strata.tiered.api.ObjectStore` API: ``put_object``, ``get_object_range``, ``delete_objects``,
``list_objects`` of the delegate, which must implement it), or ``all`` (every operation without an
entry of its own) - to its faults, applied in this order::

    {"copy":          {"latency_ms": 200, "partial": true, "error": "fatal", "limit": 3},
     "fetch_segment": {"hang_ms": 5000, "topics": ["orders"]},
     "fetch_index":   {"vanish": true, "probability": 0.1},
     "delete":        {"error": "retriable"},
     "put_object":    {"error": "retriable", "probability": 0.2}}

* ``latency_ms``: sleep this long before the call (a slow store); the call then proceeds.
* ``hang_ms``: block this long, then raise ``RetriableRemoteStorageError`` - a store that accepts
  the request and never answers, ending in the client's timeout.
* ``vanish`` (fetches): delete the segment's objects through the delegate first ("behind the
  broker's back"), so the real backend answers the fetch with ``RemoteResourceNotFoundError``.
* ``partial`` (copy): upload the segment with its ``.log`` truncated to half, then fail - what a
  crash or a cut connection in the middle of an upload leaves. The error is ``error`` (default
  ``fatal``). The RemoteLogManager must not publish COPY_SEGMENT_FINISHED and must delete it.
* ``error``: raise instead of calling the store - ``retriable`` (``RetriableRemoteStorageError``,
  a store that is down or throttling), ``fatal`` (``RemoteStorageError``) or ``not_found``
  (``RemoteResourceNotFoundError``).
* ``probability`` (1.0): the chance that a call is faulted; ``limit`` (unlimited): faulted calls
  at most, per operation and spec; ``topics`` (all): only calls for these topics are faulted.

The object operations take ``latency_ms``, ``hang_ms``, ``error``, ``probability`` and ``limit``.
``partial`` and ``vanish`` are refused for them (a PUT stores all of an object or nothing; an object
is deleted with ``delete_objects``, not behind a fetch), and so is ``topics``: an object is no one
topic's (a diskless WAL object holds batches of many), so a topic filter cannot select its calls.
For the same reason an ``all`` entry with ``topics`` covers the segment operations only.

A hanging or sleeping call wakes early when ``close()`` is called (a broker shutting down never
waits for an injected hang) or when a new spec no longer has that fault for the operation.

Counts: every call and every injected fault is counted per operation - ``calls``, ``ok``,
``failed`` (whatever raised, injected or from the real store) and ``faults`` by kind - exposed by
``status()`` (the object operations from their first call on: a broker that stores no plain objects
shows the segment operations only) and, with ``faults.status.file`` set, written to that path as JSON (atomically, at
most every ``faults.status.interval.ms``) so a test or a dashboard outside the broker can read
them. Each spec change and the first fault of each kind per spec are logged at WARNING (a broker
injecting faults should say so); the rest at DEBUG.

Configs (``rsm.config.`` prefix removed): ``faults.delegate.class.name`` (required: ``local``,
``s3`` or a dotted path), ``faults.control.file``, ``faults.spec``, ``faults.status.file``,
``faults.status.interval.ms`` (100), ``faults.seed`` (random; seeds ``probability``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from strata.tiered.api import (
    RSM_ALIASES,
    IndexType,
    LogSegmentData,
    ObjectInfo,
    ObjectStore,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
    load_class,
)
from strata.tiered.storage.common import config_int, config_str

log = logging.getLogger(__name__)

T = TypeVar("T")
Subject = RemoteLogSegmentMetadata | str  # what a call is about: a segment, or a description of objects
PREFIX = "faults."
SEGMENT_OPERATIONS = ("copy", "fetch_segment", "fetch_index", "delete")
OBJECT_OPERATIONS = ("put_object", "get_object", "delete_objects", "list_objects")
OPERATIONS = (*SEGMENT_OPERATIONS, *OBJECT_OPERATIONS)
ALL = "all"
ERRORS: dict[str, type[RemoteStorageError]] = {
    "retriable": RetriableRemoteStorageError,
    "fatal": RemoteStorageError,
    "not_found": RemoteResourceNotFoundError,
}
_FIELDS = {"latency_ms", "hang_ms", "vanish", "partial", "error", "probability", "limit", "topics"}
_WAIT_SLICE_S = 0.05  # how often a hang or latency re-checks the spec and close()


@dataclass(frozen=True, slots=True)
class OperationFaults:
    """The faults of one operation (see the module docstring for each field)."""

    latency_ms: int = 0
    hang_ms: int = 0
    vanish: bool = False
    partial: bool = False
    error: str | None = None
    probability: float = 1.0
    limit: int | None = None
    topics: frozenset[str] | None = None

    @classmethod
    def parse(cls, op: str, raw: Any) -> OperationFaults:
        if not isinstance(raw, dict):
            raise ValueError(f"faults of {op!r} must be a JSON object, got {raw!r}")
        unknown = set(raw) - _FIELDS
        if unknown:
            raise ValueError(f"unknown fault field(s) for {op!r}: {', '.join(sorted(unknown))}")
        error = raw.get("error")
        if error is not None and error not in ERRORS:
            raise ValueError(f"{op}.error must be one of {', '.join(ERRORS)}, got {error!r}")
        if op in OBJECT_OPERATIONS:
            for name, set_, why in (("partial", bool(raw.get("partial")), "a PUT stores all of an object or nothing"),
                                    ("vanish", bool(raw.get("vanish")), "objects are deleted with delete_objects"),
                                    ("topics", raw.get("topics") is not None, "an object is no one topic's")):
                if set_:
                    raise ValueError(f"{name!r} does not apply to {op!r} ({why})")
        if raw.get("partial") and op not in ("copy", ALL):
            raise ValueError(f"'partial' applies to copy only, not {op!r}")
        if raw.get("vanish") and op not in ("fetch_segment", "fetch_index", ALL):
            raise ValueError(f"'vanish' applies to fetch_segment and fetch_index only, not {op!r}")
        probability = float(raw.get("probability", 1.0))
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"{op}.probability must be within [0, 1], got {probability}")
        limit = raw.get("limit")
        topics = raw.get("topics")
        return cls(latency_ms=_non_negative(op, "latency_ms", raw.get("latency_ms", 0)),
                     hang_ms=_non_negative(op, "hang_ms", raw.get("hang_ms", 0)),
                     vanish=bool(raw.get("vanish", False)), partial=bool(raw.get("partial", False)),
                     error=error, probability=probability,
                     limit=None if limit is None else _non_negative(op, "limit", limit),
                     topics=None if topics is None else frozenset(str(t) for t in topics))

    @property
    def active(self) -> bool:
        return bool(self.latency_ms or self.hang_ms or self.vanish or self.partial or self.error)


def _non_negative(op: str, name: str, value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(f"{op}.{name} must be >= 0, got {value!r}")
    return number


def parse_spec(text: str) -> dict[str, OperationFaults]:
    """A JSON spec -> operation -> faults (``all`` expanded into the operations it covers)."""
    raw = json.loads(text) if text.strip() else {}
    if not isinstance(raw, dict):
        raise ValueError(f"a fault spec must be a JSON object, got {raw!r}")
    unknown = set(raw) - {*OPERATIONS, ALL}
    if unknown:
        raise ValueError(f"unknown operation(s) in fault spec: {', '.join(sorted(unknown))}")
    default = OperationFaults.parse(ALL, raw[ALL]) if ALL in raw else None
    spec: dict[str, OperationFaults] = {}
    for op in OPERATIONS:
        if op in raw:
            spec[op] = OperationFaults.parse(op, raw[op])
        elif default is not None:
            if op in OBJECT_OPERATIONS and default.topics is not None:
                continue  # a topic filter selects segment calls only: an object is no one topic's
            spec[op] = replace(default, partial=default.partial and op == "copy",
                               vanish=default.vanish and op.startswith("fetch"))
    return {op: f for op, f in spec.items() if f.active}


class _Closed(Exception):
    """close() was called while a call was sleeping or hanging."""


class FaultInjectingRemoteStorageManager(RemoteStorageManager):
    """Delegates every call to a real RSM, injecting the faults of the current spec. Thread-safe."""

    def __init__(self) -> None:
        self.delegate: RemoteStorageManager | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._control: Path | None = None
        self._control_key: tuple[int, int, int] | None = None
        self._static_spec: dict[str, OperationFaults] = {}
        self._spec: dict[str, OperationFaults] = {}
        self._spec_text = ""
        self.generation = 0  # spec changes so far (the first load included)
        self._injected: dict[str, int] = {}  # faults of each operation under the current spec (for ``limit``)
        self._logged: set[tuple[str, str]] = set()
        self._random = random.Random()
        # the object operations are added at their first call (see the module docstring)
        self._counts: dict[str, dict[str, Any]] = {op: _new_counts() for op in SEGMENT_OPERATIONS}
        self._status_file: Path | None = None
        self._status_interval_s = 0.1
        self._dirty = threading.Event()
        self._status_thread: threading.Thread | None = None

    # -- configuration -------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, Any]) -> None:
        name = config_str(configs, f"{PREFIX}delegate.class.name", required=True)
        if name in ("faults", f"{__name__}.{type(self).__name__}"):
            raise ValueError(f"config '{PREFIX}delegate.class.name' cannot name the fault injector itself")
        self._static_spec = parse_spec(config_str(configs, f"{PREFIX}spec", ""))
        delegate = load_class(name, RSM_ALIASES, RemoteStorageManager)()
        delegate.configure({k: v for k, v in configs.items() if not k.startswith(PREFIX)})
        self.delegate = delegate
        control = config_str(configs, f"{PREFIX}control.file")
        self._control = Path(control) if control else None
        seed = config_str(configs, f"{PREFIX}seed")
        if seed:
            self._random.seed(seed)
        status = config_str(configs, f"{PREFIX}status.file")
        self._status_file = Path(status) if status else None
        self._status_interval_s = config_int(configs, f"{PREFIX}status.interval.ms", 100, minimum=1) / 1000
        with self._lock:
            self._refresh_locked()
            if not self._control_exists() and self._static_spec:
                self._install_locked(self._static_spec, "faults.spec")
        if self._status_file is not None:
            self._write_status()
            self._status_thread = threading.Thread(target=self._status_loop, name="rsm-faults-status", daemon=True)
            self._status_thread.start()
        log.warning("fault-injecting RSM around %s (control file %s)", type(delegate).__name__,
                    self._control or "none")

    def close(self) -> None:
        self._closed.set()
        if self._status_thread is not None:
            self._dirty.set()
            self._status_thread.join(5)
        if self._status_file is not None:
            self._write_status()
        if self.delegate is not None:
            self.delegate.close()

    # -- the spec --------------------------------------------------------------------------------

    def _control_exists(self) -> bool:
        return self._control is not None and self._control.exists()

    def _refresh_locked(self) -> None:
        """Re-read the control file if it changed (one stat per call)."""
        if self._control is None:
            return
        try:
            st = os.stat(self._control)
        except FileNotFoundError:
            if self._control_key is not None:  # removed: back to the static spec
                self._control_key = None
                self._install_locked(self._static_spec, "faults.spec (control file removed)")
            return
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._control_key:
            return
        try:
            spec = parse_spec(self._control.read_text())
        except (OSError, ValueError, TypeError) as e:  # keep the old spec; read again on the next change
            log.error("fault control file %s ignored: %s", self._control, e)
            self._control_key = key
            return
        self._control_key = key
        self._install_locked(spec, str(self._control))

    def _install_locked(self, spec: dict[str, OperationFaults], source: str) -> None:
        self._spec = spec
        self._spec_text = json.dumps({op: _describe(f) for op, f in spec.items()}, sort_keys=True)
        self.generation += 1
        self._injected.clear()
        self._logged.clear()
        self._dirty.set()
        log.warning("fault injection spec #%d from %s: %s", self.generation, source,
                    self._spec_text if spec else "no faults")

    def current(self, op: str) -> OperationFaults | None:
        with self._lock:
            self._refresh_locked()
            return self._spec.get(op)

    def _decide(self, op: str, topic: str | None) -> OperationFaults | None:
        """The faults to inject into this call (counted against ``limit``), or None. ``topic`` is None for
        an object call, which a ``topics`` filter never selects."""
        with self._lock:
            self._refresh_locked()
            faults = self._spec.get(op)
            counts = self._counts.get(op)
            if counts is None:
                counts = self._counts[op] = _new_counts()
            counts["calls"] += 1
            self._dirty.set()
            if faults is None or (faults.topics is not None and (topic is None or topic not in faults.topics)):
                return None
            if faults.limit is not None and self._injected.get(op, 0) >= faults.limit:
                return None
            if faults.probability < 1.0 and self._random.random() >= faults.probability:
                return None
            self._injected[op] = self._injected.get(op, 0) + 1
            return faults

    def _count_fault(self, op: str, kind: str, subject: Subject) -> None:
        with self._lock:
            by_kind = self._counts[op]["faults"]
            by_kind[kind] = by_kind.get(kind, 0) + 1
            first = (op, kind) not in self._logged
            self._logged.add((op, kind))
            self._dirty.set()
        level = logging.WARNING if first else logging.DEBUG
        if isinstance(subject, RemoteLogSegmentMetadata):
            log.log(level, "injected %s fault into %s of %s [%d..%d]", kind, op, subject.remote_log_segment_id,
                    subject.start_offset, subject.end_offset)
        else:
            log.log(level, "injected %s fault into %s of %s", kind, op, subject)

    def _count_outcome(self, op: str, ok: bool) -> None:
        with self._lock:
            self._counts[op]["ok" if ok else "failed"] += 1
            self._dirty.set()

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Counts per operation and the current spec (what the status file holds)."""
        with self._lock:
            ops = {op: {**c, "faults": dict(c["faults"])} for op, c in self._counts.items()}
            total = sum(n for c in ops.values() for n in c["faults"].values())
            return {"generation": self.generation, "spec": json.loads(self._spec_text or "{}"),
                    "faults_injected": total, "operations": ops, "time_ms": int(time.time() * 1000)}

    def _write_status(self) -> None:
        assert self._status_file is not None
        tmp = self._status_file.with_name(f"{self._status_file.name}.tmp-{os.getpid()}")
        try:
            tmp.write_text(json.dumps(self.status(), sort_keys=True))
            os.replace(tmp, self._status_file)
        except OSError as e:
            log.warning("cannot write fault status file %s: %s", self._status_file, e)

    def _status_loop(self) -> None:
        while not self._closed.is_set():
            if self._dirty.wait(1.0):
                self._dirty.clear()
                self._write_status()
                self._closed.wait(self._status_interval_s)

    # -- injection ---------------------------------------------------------------------------------

    def _wait(self, op: str, seconds: float, still: Callable[[OperationFaults], bool]) -> bool:
        """Sleep up to ``seconds``; False if the spec stopped injecting this fault meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._closed.wait(min(left, _WAIT_SLICE_S)):
                raise _Closed()
            faults = self.current(op)
            if faults is None or not still(faults):
                return False
        return True

    def _run(self, op: str, subject: Subject, call: Callable[[], T],
             on_partial: Callable[[], None] | None = None) -> T:
        """One call of ``op`` on ``subject`` (a segment, or a description of the objects of an object call)."""
        topic = subject.topic_id_partition.topic if isinstance(subject, RemoteLogSegmentMetadata) else None
        faults = self._decide(op, topic)
        try:
            if faults is not None:
                self._inject(op, subject, faults, on_partial)
            result = call()
        except _Closed:
            self._count_outcome(op, False)
            raise RetriableRemoteStorageError(f"{op} interrupted: the remote storage manager is closing") from None
        except BaseException:
            self._count_outcome(op, False)
            raise
        self._count_outcome(op, True)
        return result

    def _inject(self, op: str, subject: Subject, faults: OperationFaults,
                on_partial: Callable[[], None] | None) -> None:
        name = subject.remote_log_segment_id if isinstance(subject, RemoteLogSegmentMetadata) else subject
        if faults.latency_ms:
            self._count_fault(op, "latency", subject)
            self._wait(op, faults.latency_ms / 1000, lambda f: f.latency_ms > 0)
        if faults.hang_ms:
            self._count_fault(op, "hang", subject)
            started = time.monotonic()
            if self._wait(op, faults.hang_ms / 1000, lambda f: f.hang_ms > 0):
                raise RetriableRemoteStorageError(f"{op} of {name} timed out after {faults.hang_ms} ms (injected hang)")
            log.debug("injected hang of %s released after %.0f ms", op, (time.monotonic() - started) * 1e3)
        if faults.vanish and isinstance(subject, RemoteLogSegmentMetadata):  # parse_spec: fetches only
            self._count_fault(op, "vanish", subject)
            assert self.delegate is not None
            self.delegate.delete_log_segment_data(subject)
        if faults.partial and on_partial is not None:
            self._count_fault(op, "partial", subject)
            on_partial()
            raise ERRORS[faults.error or "fatal"](f"copy of {name} failed after a partial upload (injected)")
        if faults.error:
            self._count_fault(op, faults.error, subject)
            raise ERRORS[faults.error](f"{op} of {name} failed (injected {faults.error} error)")

    # -- RemoteStorageManager --------------------------------------------------------------------

    @property
    def _store(self) -> RemoteStorageManager:
        if self.delegate is None:
            raise RemoteStorageError("FaultInjectingRemoteStorageManager is not configured")
        return self.delegate

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        store = self._store

        def partial() -> None:
            """Upload every file of the segment, but only the first half of the ``.log``."""
            scratch = Path(tempfile.mkdtemp(prefix="strata-faults-"))
            try:
                truncated = scratch / data.log_segment.name
                size = data.log_segment.stat().st_size
                with open(data.log_segment, "rb") as src:
                    truncated.write_bytes(src.read(max(1, size // 2)))
                store.copy_log_segment_data(metadata, replace(data, log_segment=truncated))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)

        return self._run("copy", metadata, lambda: store.copy_log_segment_data(metadata, data), partial)

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        store = self._store
        return self._run("fetch_segment", metadata,
                         lambda: store.fetch_log_segment(metadata, start_position, end_position))

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        store = self._store
        return self._run("fetch_index", metadata, lambda: store.fetch_index(metadata, index_type))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        store = self._store
        self._run("delete", metadata, lambda: store.delete_log_segment_data(metadata))

    # -- ObjectStore -------------------------------------------------------------------------------

    @property
    def _objects(self) -> ObjectStore:
        store = self._store
        if not isinstance(store, ObjectStore):
            raise RemoteStorageError(
                f"the delegate {type(store).__name__} does not implement the ObjectStore API (put_object, "
                "get_object_range, delete_objects, list_objects): it cannot store plain objects")
        return store

    def put_object(self, key: str, data: bytes | bytearray | memoryview) -> None:
        store = self._objects
        self._run("put_object", f"object {key}", lambda: store.put_object(key, data))

    def get_object_range(self, key: str, start: int, end: int) -> bytes | memoryview:
        store = self._objects
        return self._run("get_object", f"object {key} [{start}, {end})",
                         lambda: store.get_object_range(key, start, end))

    def delete_objects(self, keys: Sequence[str]) -> None:
        store = self._objects
        what = f"{len(keys)} object(s)" + (f" ({keys[0]} ...)" if keys else "")
        self._run("delete_objects", what, lambda: store.delete_objects(keys))

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """The delegate's listing, read whole within the call (so its failures are this call's, counted)."""
        store = self._objects
        return self._run("list_objects", f"objects under {prefix!r}",
                         lambda: iter(list(store.list_objects(prefix))))


def _new_counts() -> dict[str, Any]:
    return {"calls": 0, "ok": 0, "failed": 0, "faults": {}}


def _describe(faults: OperationFaults) -> dict[str, Any]:
    out: dict[str, Any] = {}
    default = OperationFaults()
    for name in _FIELDS:
        value = getattr(faults, name)
        if value != getattr(default, name):
            out[name] = sorted(value) if isinstance(value, frozenset) else value
    return out


def read_status(path: Path) -> dict[str, Any]:
    """The status file's counts (for tests and tools outside the broker process)."""
    return json.loads(path.read_text())
