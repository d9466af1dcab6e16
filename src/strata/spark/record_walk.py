"""The record walk in C (``_recordwalk.c``, built by ``setup.py`` when a C compiler is there), loaded with ctypes.

:func:`native_record_bodies` is ``columnar._record_bodies`` at C speed: where each record's body starts and
ends, for every record of a group of Kafka batches. The walk is sequential by nature (each record starts
with its length), which is why it is the one piece of the decoder that numpy cannot vectorise and that cost
two thirds of the Spark source's decode time in Python. ``STRATA_NATIVE_DECODE=0`` turns it off (the numpy
walk then runs; the tests run both).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ERRORS", "NATIVE", "native_gather", "native_record_bodies", "native_record_fields"]

ERRORS = {
    1: "record runs past the records section",
    2: "bad record length",
    3: "negative record length",
    4: "record lengths do not add up to the records section",
    5: "records section outside the buffer",
}


class WalkError(Exception):
    """What the C walk found wrong (columnar.py turns it into its own error)."""


def _load() -> tuple[Any, Any] | None:
    if os.environ.get("STRATA_NATIVE_DECODE", "1") == "0":
        return None
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_recordwalk{suffix}"
        if path.is_file():
            try:
                lib = ctypes.CDLL(str(path))
                walk, fields, gather = lib.strata_record_bodies, lib.strata_record_fields, lib.strata_gather
            except (OSError, AttributeError):
                return None
            for fn, pointers in ((walk, 5), (fields, 10)):
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * pointers,
                               ctypes.POINTER(ctypes.c_int64)]
            gather.restype = ctypes.c_int
            gather.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 4,
                               ctypes.c_int64]
            return walk, fields, gather
    return None


_LIB = _load()
_WALK = _LIB[0] if _LIB else None
_FIELDS = _LIB[1] if _LIB else None
_GATHER = _LIB[2] if _LIB else None
NATIVE = _LIB is not None


def _int64s(names: str, *arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays as C-contiguous int64 (what the C side indexes), all of one length."""
    out = [np.ascontiguousarray(a, np.int64) for a in arrays]
    if any(len(a) != len(out[0]) for a in out):
        raise ValueError(f"{names} differ in length")
    return out


def native_record_bodies(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                         counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every record's body (after its length varint), batch after batch; raises WalkError."""
    assert _WALK is not None, "the C record walk is not built"
    starts, ends, counts = _int64s("starts, ends and counts", starts, ends, counts)
    buf = np.ascontiguousarray(buf, np.uint8)
    if (counts < 0).any():
        raise WalkError("negative record count")
    n = int(counts.sum())
    body = np.empty(n, np.int64)
    body_end = np.empty(n, np.int64)
    failed = ctypes.c_int64(-1)
    code = _WALK(buf.ctypes.data, len(buf), len(counts), starts.ctypes.data, ends.ctypes.data, counts.ctypes.data,
                 body.ctypes.data, body_end.ctypes.data, ctypes.byref(failed))
    if code:
        raise WalkError(f"{ERRORS.get(code, f'error {code}')} (batch {failed.value} of the group)")
    return body, body_end


def native_record_fields(buf: np.ndarray, body: np.ndarray, body_end: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(ts_delta, offset_delta, key_start, key_len, value_start, value_len, header_count, after)`` of every
    record whose body is ``[body[i], body_end[i])``; the headers of records with any start at ``after``.
    Raises WalkError."""
    assert _FIELDS is not None, "the C record walk is not built"
    body, body_end = _int64s("body and body_end", body, body_end)
    buf = np.ascontiguousarray(buf, np.uint8)
    n = len(body)
    out = tuple(np.empty(n, np.int64) for _ in range(8))
    failed = ctypes.c_int64(-1)
    code = _FIELDS(buf.ctypes.data, len(buf), n, body.ctypes.data, body_end.ctypes.data,
                   *[a.ctypes.data for a in out], ctypes.byref(failed))
    if code:
        raise WalkError(f"{ERRORS.get(code, f'error {code}')} (record {failed.value} of the group)")
    return out


def native_gather(buf: np.ndarray, start: np.ndarray, length: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """An Arrow binary column's ``(int32 offsets, data)``: the fields ``[start, start + length)`` of ``buf``
    (a negative length is null: no bytes) back to back, ``total`` bytes in all. Raises WalkError."""
    assert _GATHER is not None, "the C record walk is not built"
    start, length = _int64s("start and length", start, length)
    buf = np.ascontiguousarray(buf, np.uint8)
    n = len(start)
    offsets = np.empty(n + 1, np.int32)
    data = np.empty(total, np.uint8)
    code = _GATHER(buf.ctypes.data, len(buf), n, start.ctypes.data, length.ctypes.data, offsets.ctypes.data,
                   data.ctypes.data, total)
    if code:
        raise WalkError(f"{ERRORS.get(code, f'error {code}')} (a field outside the records)")
    return offsets, data
