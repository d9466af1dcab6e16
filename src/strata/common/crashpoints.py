"""Named crash points: ``kill -9`` of the broker at an exact moment, for the crash suite.

A ``kill -9`` at a random time rarely lands inside the few microseconds between two writes that
must both happen (a segment uploaded but its COPY_SEGMENT_FINISHED not yet written, a ``.log``
appended but its index not). The code calls ``crash_point("copy.after_upload")`` at such moments;
in production it costs one global load and a return. A test arms points through the
environment of the broker process, read once at import:

    STRATA_CRASH_POINT="copy.after_upload"            die the first time the point is reached
    STRATA_CRASH_POINT="log.append.after_write:3"      die the third time
    STRATA_CRASH_POINT="checkpoint.before_rename/*.snapshot:2,copy.after_started"

Each spec is an ``fnmatch`` pattern (``*``, ``?``, ``[...]``) matched against the point's name,
or against ``name/detail`` for points that pass a detail (a file name, say), then an optional
``:N``. Several specs are separated by commas; the first whose count is reached fires.

``STRATA_CRASH_POINT_ARM=signal`` leaves the points dormant (reaching them counts nothing) until
the process receives SIGUSR1, so a test can restart a broker armed, check it, and only then let
the next crash happen, without one more restart.

Firing writes one line to stderr (``strata crash point <name> reached (hit N): kill -9``, a raw
``write(2)`` so nothing buffered is lost) and sends SIGKILL to the process itself: no ``finally``,
no ``atexit``, no flush runs - exactly what ``kill -9`` from outside does, at a chosen instruction.
"""

from __future__ import annotations

import fnmatch
import os
import signal
import threading
from dataclasses import dataclass

ENV_POINTS = "STRATA_CRASH_POINT"
ENV_ARM = "STRATA_CRASH_POINT_ARM"


@dataclass(slots=True)
class _Spec:
    pattern: str
    nth: int
    hits: int = 0


def parse_specs(text: str) -> list[_Spec]:
    """``pattern[:N], ...`` -> specs (N >= 1, default 1); raises ValueError on a malformed spec."""
    specs = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        pattern, sep, count = item.rpartition(":")
        if not sep or not count.isdigit():
            pattern, count = item, "1"
        if not pattern or int(count) < 1:
            raise ValueError(f"bad {ENV_POINTS} spec {item!r}: expected NAME or NAME:N with N >= 1")
        specs.append(_Spec(pattern, int(count)))
    return specs


_specs: list[_Spec] | None = None  # None: no crash point armed (the production case)
_active = False
_lock = threading.Lock()


def crash_point(name: str, detail: str | None = None) -> None:
    """Die here (SIGKILL to this process) if the environment armed this point; else do nothing."""
    if _specs is None:
        return
    _reached(name if detail is None else f"{name}/{detail}", name)


def armed() -> bool:
    """True when any point is armed: callers that build a point's name or detail check this first."""
    return _specs is not None


def _reached(full: str, name: str) -> None:
    if not _active or _specs is None:
        return
    with _lock:
        for spec in _specs:
            if fnmatch.fnmatchcase(full, spec.pattern) or fnmatch.fnmatchcase(name, spec.pattern):
                spec.hits += 1
                if spec.hits == spec.nth:
                    _die(full, spec.hits)


def _die(full: str, hits: int) -> None:
    try:
        os.write(2, f"strata crash point {full} reached (hit {hits}): kill -9\n".encode())
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def _activate(_signum: int, _frame: object) -> None:
    global _active
    _active = True
    os.write(2, b"strata crash points active\n")


def configure(points: str | None, arm: str | None = None) -> None:
    """(Re)arm from explicit values (the environment's at import); ``points`` None or empty disarms."""
    global _specs, _active
    specs = parse_specs(points) if points else []
    if not specs:
        _specs, _active = None, False
        return
    _specs = specs
    if arm == "signal":
        _active = False
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, _activate)
    else:
        _active = True


configure(os.environ.get(ENV_POINTS), os.environ.get(ENV_ARM))
