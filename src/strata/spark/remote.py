"""The remote store as the data source sees it: the RSM opened from options, and its indexes.

Executors open the same RemoteStorageManager as the broker (same class names and ``rsm.config.*``
keys; credentials from the environment), once per Python worker: Spark reuses workers across
tasks, so the store's client and its connection pool are kept in a module-level cache keyed by the
settings. Nothing here is pickled: slices carry plain settings and open the store where they run.
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections.abc import Mapping
from typing import Any

from strata.log.txn_index import iter_aborted_txns
from strata.tiered.api import (
    RSM_ALIASES,
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    load_class,
)

_RSM_CACHE: dict[tuple[str, tuple[tuple[str, str], ...]], RemoteStorageManager] = {}
_RSM_LOCK = threading.Lock()
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, byte position
OFFSET_ENTRY = _OFFSET_ENTRY.size


def open_rsm(class_name: str, props: Mapping[str, str]) -> RemoteStorageManager:
    """The configured RSM of this process for these settings (configured once, then reused)."""
    key = (class_name, tuple(sorted((str(k), str(v)) for k, v in props.items())))
    with _RSM_LOCK:
        rsm = _RSM_CACHE.get(key)
        if rsm is None:
            cls = load_class(class_name, RSM_ALIASES, RemoteStorageManager)
            rsm = cls()
            config: dict[str, Any] = dict(props)
            config.setdefault("broker.id", -1)
            rsm.configure(config)
            _RSM_CACHE[key] = rsm
        return rsm


def read_index(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
    """One index's bytes; a missing transaction index is empty (segments without aborts have none)."""
    try:
        with rsm.fetch_index(md, index_type) as stream:
            return stream.read()
    except RemoteResourceNotFoundError:
        if index_type is IndexType.TRANSACTION:
            return b""
        raise


class OffsetIndexView:
    """A remote segment's ``.index``: (absolute offset, byte position) of batch starts, sparse."""

    def __init__(self, base_offset: int, data: bytes) -> None:
        offsets, positions = [], []
        for i, (rel, pos) in enumerate(_OFFSET_ENTRY.iter_unpack(data[:len(data) - len(data) % OFFSET_ENTRY])):
            if i and rel == 0 and pos == 0:
                break  # preallocated tail (an index that was never trimmed)
            offsets.append(base_offset + rel)
            positions.append(pos)
        self.offsets = offsets
        self.positions = positions

    def position_for(self, offset: int) -> int:
        """The byte position of the batch holding ``offset`` or an earlier one (Kafka's lookup)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def split_positions(self, start_position: int, end_position: int, max_bytes: int) -> list[int]:
        """Batch-start positions cutting [start_position, end_position) into pieces of about max_bytes.

        Each piece is a byte range of whole batches, so pieces never share a record.
        """
        cuts: list[int] = []
        last = start_position
        for position in self.positions:
            if last < position < end_position and position - last >= max_bytes:
                cuts.append(position)
                last = position
        return cuts


def aborted_transactions(data: bytes, source: str = "remote .txnindex") -> list[tuple[int, int, int]]:
    """(producer id, first offset, last offset) of every entry of a ``.txnindex``."""
    return [(t.producer_id, t.first_offset, t.last_offset) for _, t in iter_aborted_txns(data, source)]
