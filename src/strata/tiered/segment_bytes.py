"""Bounded ranged reads of a remote segment's bytes through any RSM, shared by the remote reader and the chunk
cache: one ``fetch_log_segment`` per call, the bytes landing in one buffer (the stream's own when it offers
``read_view``, as the S3 RSM's does), never a copy per chunk of the stream."""

from __future__ import annotations

from typing import BinaryIO

from strata.tiered.api import RemoteLogSegmentMetadata, RemoteStorageManager

__all__ = ["fetch_remote_segment_bytes", "read_segment_range_into"]


def fetch_remote_segment_bytes(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, start: int,
                               end: int) -> memoryview:
    """Bytes ``[start, end)`` of a remote segment in one bounded ranged read (fewer at the segment end),
    as a read-only view of the buffer they were read into (the stream's own with ``read_view``)."""
    if end <= start:
        return memoryview(b"")
    stream = rsm.fetch_log_segment(md, start, end - 1)  # the RSM API's end_position is inclusive
    try:
        read_view = getattr(stream, "read_view", None)
        if read_view is not None:
            return memoryview(read_view(end - start)).cast("B").toreadonly()[:end - start]
        buf = bytearray(end - start)
        got = _read_into(stream, memoryview(buf))
        return memoryview(buf).toreadonly()[:got]
    finally:
        stream.close()


def read_segment_range_into(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, start: int,
                            out: memoryview) -> int:
    """Fill ``out`` with the segment's bytes from ``start`` in one bounded ranged read; returns how
    many bytes came (fewer only at the segment end).

    ``end_position`` in the RSM API is inclusive, hence ``start + len(out) - 1``.
    """
    if not len(out):
        return 0
    stream = rsm.fetch_log_segment(md, start, start + len(out) - 1)
    try:
        return _read_into(stream, out)
    finally:
        stream.close()


def _read_into(stream: BinaryIO, out: memoryview) -> int:
    """Read until ``out`` is full or the stream ends; returns the bytes read.

    ``readinto`` lets the stream write straight into ``out`` (no per-read allocation, no join); a
    stream without it (a third-party RSM's) falls back to ``read``, one copy per chunk. Streams may
    return short reads; a store that ignores the range is cut off at ``len(out)``.
    """
    n = len(out)
    got = 0
    readinto = getattr(stream, "readinto", None)
    while got < n:
        if readinto is not None:
            k = readinto(out[got:]) or 0
        else:
            chunk = stream.read(n - got)
            k = min(len(chunk), n - got)
            out[got:got + k] = memoryview(chunk)[:k]
        if k <= 0:
            break
        got += k
    return got
