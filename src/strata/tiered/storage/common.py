"""What the remote storage backends share: the object naming scheme and config parsing.

One naming scheme for every backend (Aiven's ``ObjectKeyFactory`` layout) so a bucket written by
the S3 backend and a directory written by the local one look the same, and a segment can be
found by hand from what the broker logs (topic, topic id, partition, start offset, segment id):

    {prefix}{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}.{suffix}

Ids are Kafka's URL-safe base64 ``Uuid.toString``. The start offset is zero-padded like local
segment files, so a plain lexicographic listing is in offset order.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from strata.tiered.api import IndexType, RemoteLogSegmentMetadata, TopicIdPartition, uuid_to_str

LOG_SUFFIX = "log"
INDEX_SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: "index",
    IndexType.TIMESTAMP: "timeindex",
    IndexType.PRODUCER_SNAPSHOT: "snapshot",
    IndexType.TRANSACTION: "txnindex",
    IndexType.LEADER_EPOCH: "leader_epoch_checkpoint",
}
MANIFEST_SUFFIX = "manifest"  # object format v2's per-segment manifest (strata.tiered.storage.object_format)
ALL_SUFFIXES: tuple[str, ...] = (LOG_SUFFIX, *INDEX_SUFFIXES.values(), MANIFEST_SUFFIX)


def partition_path(tp: TopicIdPartition) -> str:
    """``{topic}-{topicId}/{partition}`` (no trailing slash)."""
    return f"{tp.topic}-{uuid_to_str(tp.topic_id)}/{tp.partition}"


def segment_stem(metadata: RemoteLogSegmentMetadata) -> str:
    """``{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}``: every file of the segment minus suffix."""
    segment_id = metadata.remote_log_segment_id
    return (f"{partition_path(segment_id.topic_id_partition)}/"
            f"{metadata.start_offset:020d}-{uuid_to_str(segment_id.id)}")


def object_key(metadata: RemoteLogSegmentMetadata, suffix: str, prefix: str = "") -> str:
    return f"{prefix}{segment_stem(metadata)}.{suffix}"


# -- config parsing: Kafka passes strings (from properties) or typed values (from code) ------------


def config_str(configs: Mapping[str, Any], key: str, default: str | None = None, *, required: bool = False) -> str:
    value = configs.get(key)
    if value is None or (required and str(value).strip() == ""):
        if required:
            raise ValueError(f"missing required config {key!r}")
        return default if default is not None else ""
    return str(value)


def config_bool(configs: Mapping[str, Any], key: str, default: bool) -> bool:
    value = configs.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"config {key!r} must be true or false, got {value!r}")


def config_int(configs: Mapping[str, Any], key: str, default: int, *, minimum: int | None = None) -> int:
    value = configs.get(key)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"config {key!r} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"config {key!r} must be >= {minimum}, got {number}")
    return number


def check_positions(start_position: int, end_position: int | None) -> None:
    """Kafka's fetchLogSegment argument checks (IllegalArgumentException there)."""
    if start_position < 0:
        raise ValueError(f"start position {start_position} must be >= 0")
    if end_position is not None and end_position < start_position:
        raise ValueError(f"end position {end_position} is below start position {start_position}")


class BufferReader(io.RawIOBase):
    """A readable stream over one buffer (obstore's ``Bytes``, Rust-owned memory; a decoded v2 range).

    ``read_view`` hands out that memory itself (the remote reader uses it as its window: no copy
    at all between the network and the response); ``readinto`` copies straight from it into the
    caller's buffer; ``read`` returns one ``bytes`` slice.
    """

    def __init__(self, buffer: Any) -> None:
        super().__init__()
        self._buffer: Any = buffer  # keeps the Rust memory alive while the view is in use
        self._view = memoryview(buffer).cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def read_view(self, size: int) -> memoryview:
        """Up to ``size`` bytes as a read-only view of the fetched buffer (fewer only at its end).

        The view keeps the buffer alive after ``close``.
        """
        end = min(len(self._view), self._pos + max(size, 0))
        view = self._view[self._pos:end]
        self._pos = end
        return view

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as raw, raw.cast("B") as target:
            n = min(len(target), len(self._view) - self._pos)
            target[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        end = len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        data = self._view[self._pos:end].tobytes()
        self._pos = end
        return data

    def readall(self) -> bytes:
        return self.read()

    def close(self) -> None:
        if not self.closed:
            self._view.release()
            self._buffer = None
        super().close()
