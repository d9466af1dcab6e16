"""The compact store behind :class:`~strata.tiered.metadata.cache.RemoteLogMetadataCache` (issue 28, KIP-1266).

Why columnar: a broker keeps the metadata of every remote segment of every partition it hosts, for
ever (retention aside). As one Python ``RemoteLogSegmentMetadata`` per segment (plus its id, UUID,
epochs dict and the dict entries pointing at it) that is ~670 bytes a segment: 6.7 GB at 10M
segments, and a restart that rebuilds 10M objects. Here a user partition's segments are rows of
numpy columns (~62 bytes a row), its per-epoch referenced maps two arrays (12 bytes an entry), and
objects are built only when an API returns one.

:class:`SegmentTable` - one row per segment that is not DELETE_SEGMENT_FINISHED, in insertion order
(the order of Kafka's ``idToSegmentMetadata``, which Strata's dict kept and ``list`` calls return):

====================  =======  ====================================================================
column                dtype    what
====================  =======  ====================================================================
start / end           int64    ``start_offset`` / ``end_offset``
max_ts / event_ts     int64    ``max_timestamp_ms`` / ``event_timestamp_ms``
id_hi / id_lo         uint64   the segment UUID (its 16 bytes as two big-endian integers)
size                  int32    ``segment_size_in_bytes`` (an int32 in Kafka's record, like the next two)
broker                int32    ``broker_id``
epoch                 int32    the first leader epoch of ``segment_leader_epochs``
state                 uint8    the ``RemoteLogSegmentState``; 255 marks a dead row (deleted, awaiting compaction)
flags                 uint8    ``txn_idx_empty``; epochs in the side table; custom metadata; foreign partition
====================  =======  ====================================================================

Side tables, only for the rows that need them: ``segment_leader_epochs`` other than
``{epoch: start_offset}`` (a segment spanning several epochs) as three sorted columns (row, epoch,
start); ``custom_metadata`` in a dict by row (most RSMs return none); a segment id of another user
partition in a dict by row (never in a broker: the store routes by partition). Columns grow by 1.25x
(amortised O(1) appends, at most 25% slack); DELETE_SEGMENT_FINISHED marks the row dead, and once a
quarter of the rows are dead they are compacted away and every row number is remapped.

Segment id -> row (updates name a segment by id only): a permutation of the rows sorted by the high
half of the UUID (4 bytes a row, built lazily with one argsort), plus a dict of the rows appended
since it was built, dropped for a rebuild once it holds 1/32 of the rows (amortised: a few us an append).

:class:`EpochRefs` - Kafka's ``RemoteLogLeaderEpochState`` over rows: the referenced map (epoch start
offset within the segment -> segment) as a sorted int64 key array and an int32 row array with a
movable head (retention removes the oldest entry: O(1)); the unreferenced segments (COPY_STARTED,
DELETE_STARTED, superseded: a handful) in an insertion-ordered dict by segment id, exactly as before,
since Kafka resolves them by id (an id can die and be added again).

Everything here runs under the owning cache's lock; readers get :class:`SegmentRows`, a copy taken
under it, and build objects from that copy as they iterate.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

__all__ = ["COLUMNS", "DEAD", "FLAG_CUSTOM", "FLAG_EPOCHS", "FLAG_FOREIGN", "FLAG_TXN_IDX_EMPTY", "CacheColumns",
           "EpochRefs", "SegmentRows", "SegmentTable", "segment_uuid", "uuid_halves"]

DEAD = 0xFF
FLAG_TXN_IDX_EMPTY = 0x01
FLAG_EPOCHS = 0x02  # segment_leader_epochs is in the side table (not just {epoch: start_offset})
FLAG_CUSTOM = 0x04  # custom_metadata is in the side dict (None otherwise; b"" is kept as b"")
FLAG_FOREIGN = 0x08  # the segment id names another user partition (side dict)
_KNOWN_FLAGS = FLAG_TXN_IDX_EMPTY | FLAG_EPOCHS | FLAG_CUSTOM | FLAG_FOREIGN

# (attribute, dtype): the row columns, in the snapshot file's order (int64s first: every array stays aligned).
COLUMNS: tuple[tuple[str, type], ...] = (
    ("start", np.int64), ("end", np.int64), ("max_ts", np.int64), ("event_ts", np.int64),
    ("id_hi", np.uint64), ("id_lo", np.uint64),
    ("size", np.int32), ("broker", np.int32), ("epoch", np.int32),
    ("state", np.uint8), ("flags", np.uint8),
)
_COLUMN_NAMES = tuple(name for name, _ in COLUMNS)
_STATES = tuple(RemoteLogSegmentState)
_MASK64 = (1 << 64) - 1
_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)


def uuid_halves(value: uuid.UUID) -> tuple[int, int]:
    """The UUID's 16 bytes as (high, low) unsigned 64-bit integers."""
    n = value.int
    return n >> 64, n & _MASK64


def segment_uuid(hi: int, lo: int) -> uuid.UUID:
    return uuid.UUID(int=(hi << 64) | lo)


def _check(name: str, value: int, bounds: tuple[int, int]) -> None:
    # Kafka's record types: a value the metadata topic cannot carry is refused, never truncated.
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name}={value} does not fit its Kafka type "
                         f"({'int64' if bounds is _INT64 else 'int32'})")


_EMPTY = {np.dtype(t): np.empty(0, dtype=t) for t in (np.int64, np.uint64, np.int32, np.uint8)}
for _arr in _EMPTY.values():
    _arr.flags.writeable = False  # shared by every new table; nothing is written below a capacity of 0


def _empty(dtype: type) -> np.ndarray:
    return _EMPTY[np.dtype(dtype)]


def _grown(arr: np.ndarray, used: int, needed: int) -> np.ndarray:
    """A copy of ``arr[:used]`` with room for ``needed`` items: 1.25x growth, so appends are amortised O(1)
    and at most a fifth of a column is slack."""
    new = np.empty(max(needed, used + (used >> 2) + 16), dtype=arr.dtype)
    new[:used] = arr[:used]
    return new


@dataclass(slots=True)
class _Encoded:
    """A validated segment, ready to be written into a row."""

    values: tuple[int, ...]  # in _COLUMN_NAMES order
    epochs: list[tuple[int, int]]  # only when FLAG_EPOCHS
    custom: bytes | None
    tp: TopicIdPartition


class SegmentTable:
    """The rows of one user partition's segments; see the module docstring. Not thread-safe (the cache's lock)."""

    __slots__ = ("tp", "n", "dead", "cap", *_COLUMN_NAMES, "ext_row", "ext_epoch", "ext_start", "ext_n",
                 "custom", "foreign", "_perm", "_pending")

    # Compaction once this many rows, and a quarter of all rows, are dead (tests lower it).
    compact_min_dead = 1024

    def __init__(self, tp: TopicIdPartition | None = None) -> None:
        self.tp = tp
        self.n = 0  # rows in use, dead ones included
        self.dead = 0
        self.cap = 0
        for name, dtype in COLUMNS:
            setattr(self, name, _empty(dtype))
        self.ext_row = _empty(np.int32)  # sorted: each row's epochs are contiguous, ascending
        self.ext_epoch = _empty(np.int32)
        self.ext_start = _empty(np.int64)
        self.ext_n = 0
        self.custom: dict[int, bytes] = {}
        self.foreign: dict[int, TopicIdPartition] = {}
        self._perm: np.ndarray | None = None  # live rows sorted by id_hi (those < the n at build time)
        self._pending: dict[int, int] = {}  # uuid int -> row, for rows appended since _perm was built

    # -- construction from arrays (the snapshot loader, the benchmark's bulk path) --

    @classmethod
    def from_columns(cls, tp: TopicIdPartition, columns: Mapping[str, np.ndarray], ext_row: np.ndarray,
                     ext_epoch: np.ndarray, ext_start: np.ndarray, custom: dict[int, bytes]) -> SegmentTable:
        """Adopt exact-size arrays (no copy); ValueError if they are inconsistent (a snapshot is only trusted
        so far: a bad one must fail the load, falling back to a replay, not a read later)."""
        table = cls(tp)
        rows = len(columns["start"])
        for name, dtype in COLUMNS:
            arr = columns[name]
            if arr.dtype != np.dtype(dtype) or arr.ndim != 1 or len(arr) != rows:
                raise ValueError(f"column {name}: expected {rows} x {np.dtype(dtype)}, got {len(arr)} x {arr.dtype}")
            setattr(table, name, arr)
        table.n = table.cap = rows
        if rows:
            if int(table.state.max()) > RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                raise ValueError("a segment state is out of range")
            if np.any(table.flags & np.uint8(0xFF & ~(_KNOWN_FLAGS & ~FLAG_FOREIGN))):
                raise ValueError("unknown segment flags")
            if np.any(table.end < table.start) or int(table.start.min()) < 0:
                raise ValueError("a segment's offsets are out of order")
        n_ext = len(ext_row)
        if len(ext_epoch) != n_ext or len(ext_start) != n_ext:
            raise ValueError("epoch side table columns differ in length")
        flagged = np.flatnonzero(table.flags & FLAG_EPOCHS)
        if n_ext:
            row32 = ext_row.astype(np.int64)
            same_row = row32[1:] == row32[:-1]
            if int(row32.min()) < 0 or int(row32.max()) >= rows or np.any(row32[1:] < row32[:-1]) \
                    or np.any(same_row & (ext_epoch[1:] <= ext_epoch[:-1])):
                raise ValueError("epoch side table is not sorted by row and epoch")
            first = np.concatenate(([True], ~same_row))
            if not np.array_equal(np.unique(row32), flagged) or \
                    not np.array_equal(ext_epoch[first], table.epoch[flagged]):
                raise ValueError("epoch side table does not match the segments' flags")
        elif len(flagged):
            raise ValueError("epoch side table does not match the segments' flags")
        table.ext_row, table.ext_epoch, table.ext_start = (ext_row.astype(np.int32, copy=False), ext_epoch,
                                                           ext_start)
        table.ext_n = n_ext
        if sorted(custom) != np.flatnonzero(table.flags & FLAG_CUSTOM).tolist():
            raise ValueError("custom metadata does not match the segments' flags")
        table.custom = dict(custom)
        return table

    @classmethod
    def from_segments(cls, segments: Iterable[RemoteLogSegmentMetadata]
                      ) -> tuple[SegmentTable, dict[RemoteLogSegmentId, int]]:
        """Rows for ``segments`` built column by column (the version-1 snapshot's migration: ~2 us a segment,
        not the ~8 of appending one by one), and each id's row. A repeated id keeps its first place and its
        last value, as the object cache's dict did. ValueError if a value does not fit its Kafka type."""
        unique: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        for md in segments:
            unique[md.remote_log_segment_id] = md
        mds = list(unique.values())
        rows = {segment_id: row for row, segment_id in enumerate(unique)}
        table = cls(mds[0].topic_id_partition if mds else None)
        if not mds:
            return table, rows
        try:
            columns = {
                "start": np.array([md.start_offset for md in mds], dtype=np.int64),
                "end": np.array([md.end_offset for md in mds], dtype=np.int64),
                "max_ts": np.array([md.max_timestamp_ms for md in mds], dtype=np.int64),
                "event_ts": np.array([md.event_timestamp_ms for md in mds], dtype=np.int64),
                "size": np.array([md.segment_size_in_bytes for md in mds], dtype=np.int32),
                "broker": np.array([md.broker_id for md in mds], dtype=np.int32),
                "state": np.array([md.state for md in mds], dtype=np.uint8),
            }
            ids = [md.remote_log_segment_id.id.int for md in mds]
            columns["id_hi"] = np.array([u >> 64 for u in ids], dtype=np.uint64)
            columns["id_lo"] = np.array([u & _MASK64 for u in ids], dtype=np.uint64)
            epochs = [list(md.segment_leader_epochs.items()) for md in mds]
            columns["epoch"] = np.array([e[0][0] for e in epochs], dtype=np.int32)
            multi = [i for i, (md, e) in enumerate(zip(mds, epochs, strict=True))
                     if len(e) > 1 or e[0][1] != md.start_offset]
            ext = [(i, epoch, start) for i in multi for epoch, start in epochs[i]]
            ext_row = np.array([i for i, _, _ in ext], dtype=np.int32)
            ext_epoch = np.array([e for _, e, _ in ext], dtype=np.int32)
            ext_start = np.array([s for _, _, s in ext], dtype=np.int64)
        except OverflowError as e:
            raise ValueError(f"a segment's value does not fit its Kafka type: {e}") from None
        flags = np.where([md.txn_idx_empty for md in mds], FLAG_TXN_IDX_EMPTY, 0).astype(np.uint8)
        flags[multi] |= FLAG_EPOCHS
        table.custom = {i: bytes(md.custom_metadata) for i, md in enumerate(mds) if md.custom_metadata is not None}
        flags[list(table.custom)] |= FLAG_CUSTOM
        table.foreign = {i: md.topic_id_partition for i, md in enumerate(mds) if md.topic_id_partition != table.tp}
        flags[list(table.foreign)] |= FLAG_FOREIGN
        columns["flags"] = flags
        for name, _ in COLUMNS:
            setattr(table, name, columns[name])
        table.n = table.cap = len(mds)
        table.ext_row, table.ext_epoch, table.ext_start, table.ext_n = ext_row, ext_epoch, ext_start, len(ext)
        return table, rows

    # -- reads --

    @property
    def live(self) -> int:
        return self.n - self.dead

    def alive(self, row: int) -> bool:
        return self.state.item(row) != DEAD

    def state_of(self, row: int) -> RemoteLogSegmentState:
        return _STATES[self.state.item(row)]

    def txn_idx_empty(self, row: int) -> bool:
        return bool(self.flags.item(row) & FLAG_TXN_IDX_EMPTY)

    def live_rows(self) -> np.ndarray:
        return np.flatnonzero(self.state[:self.n] != DEAD)

    def epochs_of(self, row: int) -> list[tuple[int, int]]:
        """``segment_leader_epochs`` of ``row`` as (epoch, start offset) pairs, ascending."""
        if not self.flags.item(row) & FLAG_EPOCHS:
            return [(self.epoch.item(row), self.start.item(row))]
        rows = self.ext_row[:self.ext_n]
        i = int(rows.searchsorted(row, "left"))
        j = int(rows.searchsorted(row, "right"))
        return list(zip(self.ext_epoch[i:j].tolist(), self.ext_start[i:j].tolist(), strict=True))

    def epoch_end(self, row: int, leader_epoch: int) -> int:
        """Last offset of ``leader_epoch`` within the segment: the next epoch's start - 1, else the segment end."""
        if not self.flags.item(row) & FLAG_EPOCHS:
            return self.start.item(row) - 1 if self.epoch.item(row) > leader_epoch else self.end.item(row)
        for epoch, start in self.epochs_of(row):
            if epoch > leader_epoch:
                return start - 1
        return self.end.item(row)

    def segment_id(self, row: int) -> RemoteLogSegmentId:
        tp = self.foreign[row] if self.flags.item(row) & FLAG_FOREIGN else self.tp
        assert tp is not None
        return RemoteLogSegmentId(tp, segment_uuid(self.id_hi.item(row), self.id_lo.item(row)))

    def materialize(self, row: int) -> RemoteLogSegmentMetadata:
        """The ``RemoteLogSegmentMetadata`` of ``row``: equal to the object the segment was added as, updated."""
        flags = self.flags.item(row)
        epochs = dict(self.epochs_of(row))
        return RemoteLogSegmentMetadata(
            self.segment_id(row), self.start.item(row), self.end.item(row), self.max_ts.item(row),
            self.broker.item(row), self.event_ts.item(row), self.size.item(row), epochs,
            _STATES[self.state.item(row)], self.custom[row] if flags & FLAG_CUSTOM else None,
            bool(flags & FLAG_TXN_IDX_EMPTY))

    def gather(self, rows: np.ndarray) -> SegmentRows:
        """A copy of ``rows`` (any order) that builds their metadata objects as it is iterated."""
        flags = self.flags[rows]
        positions = np.flatnonzero(flags & (FLAG_EPOCHS | FLAG_CUSTOM | FLAG_FOREIGN)).tolist()
        rows_list = rows.tolist()
        epochs = {}
        custom = {}
        foreign = {}
        for pos in positions:
            row = rows_list[pos]
            flag = int(flags[pos])
            if flag & FLAG_EPOCHS:
                epochs[pos] = dict(self.epochs_of(row))
            if flag & FLAG_CUSTOM:
                custom[pos] = self.custom[row]
            if flag & FLAG_FOREIGN:
                foreign[pos] = self.foreign[row]
        assert self.tp is not None or not rows_list
        return SegmentRows(self.tp, {name: getattr(self, name)[rows] for name in _COLUMN_NAMES}, epochs, custom,
                           foreign)

    # -- segment id -> row --

    def find(self, segment_id: RemoteLogSegmentId) -> int:
        """The live row of ``segment_id``, else -1."""
        if self.n == self.dead:
            return -1
        if self.foreign:  # never in a broker: one scan is exact and simple
            return self._scan(segment_id)
        if segment_id.topic_id_partition != self.tp:
            return -1
        if self._perm is None:
            self._build_index()
        u = segment_id.id.int
        row = self._pending.get(u)
        if row is not None and self.state.item(row) != DEAD:
            return row
        hi, lo = u >> 64, u & _MASK64
        perm = self._perm
        assert perm is not None
        i = bisect.bisect_left(perm, hi, key=self.id_hi.item)
        while i < len(perm):
            row = int(perm[i])
            if self.id_hi.item(row) != hi:
                break
            if self.id_lo.item(row) == lo and self.state.item(row) != DEAD:
                return row
            i += 1
        return -1

    def _scan(self, segment_id: RemoteLogSegmentId) -> int:
        hi, lo = uuid_halves(segment_id.id)
        n = self.n
        for row in np.flatnonzero((self.id_hi[:n] == hi) & (self.id_lo[:n] == lo) & (self.state[:n] != DEAD)).tolist():
            if self.segment_id(row) == segment_id:
                return row
        return -1

    def _build_index(self) -> None:
        live = self.live_rows()
        self._perm = live[np.argsort(self.id_hi[live])].astype(np.int32)
        self._pending = {}

    def _indexed(self, u: int, row: int) -> None:
        if self._perm is not None:
            self._pending[u] = row
            if len(self._pending) > max(1024, self.n >> 5):
                self._perm = None  # rebuilt by the next find: amortised O(log n) per append
                self._pending = {}

    # -- writes --

    def encode(self, md: RemoteLogSegmentMetadata) -> _Encoded:
        """Validate ``md`` against the columns' Kafka types before anything is changed."""
        epochs = list(md.segment_leader_epochs.items())
        for epoch, start in epochs:
            _check("leader epoch", epoch, _INT32)
            _check("leader epoch start offset", start, _INT64)
        for name, value in (("start_offset", md.start_offset), ("end_offset", md.end_offset),
                            ("max_timestamp_ms", md.max_timestamp_ms),
                            ("event_timestamp_ms", md.event_timestamp_ms)):
            _check(name, value, _INT64)
        _check("segment_size_in_bytes", md.segment_size_in_bytes, _INT32)
        _check("broker_id", md.broker_id, _INT32)
        hi, lo = uuid_halves(md.remote_log_segment_id.id)
        first_epoch, first_start = epochs[0]
        flags = FLAG_TXN_IDX_EMPTY if md.txn_idx_empty else 0
        if len(epochs) > 1 or first_start != md.start_offset:
            flags |= FLAG_EPOCHS
        if md.custom_metadata is not None:
            flags |= FLAG_CUSTOM
        tp = md.topic_id_partition
        if self.tp is None:
            self.tp = tp
        if tp != self.tp:
            flags |= FLAG_FOREIGN
        values = (md.start_offset, md.end_offset, md.max_timestamp_ms, md.event_timestamp_ms, hi, lo,
                  md.segment_size_in_bytes, md.broker_id, first_epoch, int(md.state), flags)
        return _Encoded(values, epochs if flags & FLAG_EPOCHS else [],
                        bytes(md.custom_metadata) if md.custom_metadata is not None else None, tp)

    def append(self, enc: _Encoded) -> int:
        row = self.n
        if row == self.cap:
            self._reserve(row + 1)
        self.n = row + 1
        self._write(row, enc)
        if enc.epochs:  # the newest row: its epochs go at the end, keeping the side table sorted
            self._ext_insert(self.ext_n, row, enc.epochs)
        self._indexed((enc.values[4] << 64) | enc.values[5], row)
        return row

    def overwrite(self, row: int, enc: _Encoded) -> None:
        """Replace a live row in place (a COPY_SEGMENT_STARTED event repeated): it keeps its position."""
        if self.flags.item(row) & FLAG_EPOCHS:
            self._ext_delete(row)
        self.custom.pop(row, None)
        self.foreign.pop(row, None)
        self._write(row, enc)
        if enc.epochs:
            self._ext_insert(int(self.ext_row[:self.ext_n].searchsorted(row, "left")), row, enc.epochs)

    def _write(self, row: int, enc: _Encoded) -> None:
        for name, value in zip(_COLUMN_NAMES, enc.values, strict=True):
            getattr(self, name)[row] = value
        if enc.custom is not None:
            self.custom[row] = enc.custom
        if enc.values[-1] & FLAG_FOREIGN:
            self.foreign[row] = enc.tp

    def check_update(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        _check("broker_id", update.broker_id, _INT32)
        _check("event_timestamp_ms", update.event_timestamp_ms, _INT64)

    def apply_update(self, row: int, update: RemoteLogSegmentMetadataUpdate) -> None:
        """``create_with_updates``: broker id, event time, custom metadata and state."""
        self.broker[row] = update.broker_id
        self.event_ts[row] = update.event_timestamp_ms
        self.state[row] = int(update.state)
        flags = self.flags.item(row) & ~FLAG_CUSTOM
        self.custom.pop(row, None)
        if update.custom_metadata is not None:
            flags |= FLAG_CUSTOM
            self.custom[row] = bytes(update.custom_metadata)
        self.flags[row] = flags

    def kill(self, row: int) -> None:
        """DELETE_SEGMENT_FINISHED: the row is dead; ``compact`` drops dead rows later."""
        self.state[row] = DEAD
        self.dead += 1
        self.custom.pop(row, None)

    def should_compact(self) -> bool:
        return self.dead >= self.compact_min_dead and 4 * self.dead >= self.n

    def compact(self) -> np.ndarray:
        """Drop the dead rows; returns old row -> new row (-1 for a dead row). Every row number changes."""
        n = self.n
        alive = self.state[:n] != DEAD
        new_index = (np.cumsum(alive, dtype=np.int64) - 1).astype(np.int32)
        new_index[~alive] = -1
        live = int(alive.sum())
        cap = live + (live >> 2) + 16
        for name, dtype in COLUMNS:
            col = np.empty(cap, dtype=dtype)
            col[:live] = getattr(self, name)[:n][alive]
            setattr(self, name, col)
        if self.ext_n:
            rows = self.ext_row[:self.ext_n]
            keep = alive[rows]
            self.ext_row = new_index[rows[keep]]
            self.ext_epoch = self.ext_epoch[:self.ext_n][keep]
            self.ext_start = self.ext_start[:self.ext_n][keep]
            self.ext_n = len(self.ext_row)
        self.custom = {int(new_index[r]): v for r, v in self.custom.items()}
        self.foreign = {int(new_index[r]): v for r, v in self.foreign.items() if alive[r]}
        self.n, self.cap, self.dead = live, cap, 0
        self._perm, self._pending = None, {}
        return new_index

    def _reserve(self, needed: int) -> None:
        for name in _COLUMN_NAMES:
            setattr(self, name, _grown(getattr(self, name), self.n, needed))
        self.cap = len(self.start)

    def _ext_insert(self, at: int, row: int, epochs: list[tuple[int, int]]) -> None:
        k, n = len(epochs), self.ext_n
        if n + k > len(self.ext_row):
            self.ext_row = _grown(self.ext_row, n, n + k)
            self.ext_epoch = _grown(self.ext_epoch, n, n + k)
            self.ext_start = _grown(self.ext_start, n, n + k)
        for arr in (self.ext_row, self.ext_epoch, self.ext_start):
            arr[at + k:n + k] = arr[at:n].copy()
        self.ext_row[at:at + k] = row
        self.ext_epoch[at:at + k] = [e for e, _ in epochs]
        self.ext_start[at:at + k] = [s for _, s in epochs]
        self.ext_n = n + k

    def _ext_delete(self, row: int) -> None:
        rows = self.ext_row[:self.ext_n]
        i, j = int(rows.searchsorted(row, "left")), int(rows.searchsorted(row, "right"))
        n = self.ext_n
        for arr in (self.ext_row, self.ext_epoch, self.ext_start):
            arr[i:n - (j - i)] = arr[j:n].copy()
        self.ext_n = n - (j - i)

    # -- export (the snapshot file) --

    def export(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[int, bytes],
                              np.ndarray]:
        """Copies of the live rows (compacted), their epoch side table and custom metadata, and old -> new row.

        A segment id of another partition is written as this partition's (as the version-1 file did).
        """
        n = self.n
        if self.dead:
            alive = self.state[:n] != DEAD
            new_index = (np.cumsum(alive, dtype=np.int64) - 1).astype(np.int32)
            new_index[~alive] = -1
            columns = {name: getattr(self, name)[:n][alive] for name in _COLUMN_NAMES}
        else:
            alive = None
            new_index = np.arange(n, dtype=np.int32)
            columns = {name: getattr(self, name)[:n].copy() for name in _COLUMN_NAMES}
        columns["flags"] &= ~np.uint8(FLAG_FOREIGN)
        ext_rows = self.ext_row[:self.ext_n]
        keep = alive[ext_rows] if alive is not None else slice(None)
        ext = (new_index[ext_rows[keep]], self.ext_epoch[:self.ext_n][keep].copy(),
               self.ext_start[:self.ext_n][keep].copy())
        custom = {int(new_index[r]): v for r, v in sorted(self.custom.items())}
        return columns, *ext, custom, new_index

    def detach(self) -> None:
        """Copy every array into memory of its own (they may be views of a mapped snapshot file)."""
        for name in _COLUMN_NAMES:
            setattr(self, name, getattr(self, name)[:self.n].copy())
        self.cap = self.n
        self.ext_row = self.ext_row[:self.ext_n].copy()
        self.ext_epoch = self.ext_epoch[:self.ext_n].copy()
        self.ext_start = self.ext_start[:self.ext_n].copy()

    def nbytes(self) -> int:
        """Bytes of the numpy buffers (capacity included); the side dicts are not counted."""
        arrays = [getattr(self, name) for name in _COLUMN_NAMES] + [self.ext_row, self.ext_epoch, self.ext_start]
        if self._perm is not None:
            arrays.append(self._perm)
        return sum(a.nbytes for a in arrays)


@dataclass(slots=True)
class SegmentRows:
    """Segments copied out of a table under its lock; iterating builds their metadata objects."""

    tp: TopicIdPartition | None
    columns: dict[str, np.ndarray]
    epochs: dict[int, dict[int, int]]  # position -> segment_leader_epochs, when not {epoch: start}
    custom: dict[int, bytes]
    foreign: dict[int, TopicIdPartition]

    def __len__(self) -> int:
        return len(self.columns["start"])

    def __iter__(self) -> Iterator[RemoteLogSegmentMetadata]:
        c = {name: arr.tolist() for name, arr in self.columns.items()}
        epochs, custom, foreign, tp = self.epochs, self.custom, self.foreign, self.tp
        for i, (start, end, max_ts, event_ts, hi, lo, size, broker, epoch, state, flags) in enumerate(zip(
                *(c[name] for name in _COLUMN_NAMES), strict=True)):
            segment_id = RemoteLogSegmentId(foreign[i] if flags & FLAG_FOREIGN else tp,  # type: ignore[arg-type]
                                            uuid.UUID(int=(hi << 64) | lo))
            yield RemoteLogSegmentMetadata(
                segment_id, start, end, max_ts, broker, event_ts, size,
                epochs[i] if flags & FLAG_EPOCHS else {epoch: start}, _STATES[state],
                custom[i] if flags & FLAG_CUSTOM else None, bool(flags & FLAG_TXN_IDX_EMPTY))

    def total_size(self) -> int:
        return int(self.columns["size"].sum(dtype=np.int64))


class EpochRefs:
    """Kafka's ``RemoteLogLeaderEpochState`` over table rows (see the module docstring)."""

    __slots__ = ("keys", "rows", "lo", "hi", "unreferenced", "highest")

    def __init__(self, keys: np.ndarray | None = None, rows: np.ndarray | None = None,
                 unreferenced: dict[RemoteLogSegmentId, None] | None = None, highest: int | None = None) -> None:
        self.keys = keys if keys is not None else _empty(np.int64)  # ascending, unique
        self.rows = rows if rows is not None else _empty(np.int32)  # the segment at each key
        self.lo, self.hi = 0, len(self.keys)  # the entries are keys[lo:hi]
        self.unreferenced: dict[RemoteLogSegmentId, None] = unreferenced if unreferenced is not None else {}
        self.highest = highest

    def __len__(self) -> int:
        return self.hi - self.lo

    def ref_keys(self) -> np.ndarray:
        return self.keys[self.lo:self.hi]

    def ref_rows(self) -> np.ndarray:
        return self.rows[self.lo:self.hi]

    def floor_row(self, offset: int) -> int:
        """The row at the greatest key <= ``offset``, else -1 (Kafka's ``floorEntry``)."""
        i = int(self.keys[self.lo:self.hi].searchsorted(offset, "right"))
        return self.rows.item(self.lo + i - 1) if i else -1

    def copy_segment_finished(self, start: int, row: int, segment_id: RemoteLogSegmentId, epoch_end: int,
                              table: SegmentTable) -> None:
        # A new leader may upload a segment that covers (duplicate) or overlaps segments a lagging
        # previous leader uploaded for this epoch: those become unreferenced, so reads go to the new one.
        if self.highest is not None and self.highest <= epoch_end:
            cut = self.lo + int(self.keys[self.lo:self.hi].searchsorted(start, "left"))
            for r in self.rows[cut:self.hi][::-1].tolist():  # Kafka pops the last entry first
                self.unreferenced[table.segment_id(r)] = None
            self.hi = cut
        i = self.lo + int(self.keys[self.lo:self.hi].searchsorted(start, "left"))
        if i < self.hi and self.keys.item(i) == start:
            self.rows[i] = row  # an entry left at this key is replaced, as in Kafka's put
        else:
            self._insert(i, start, row)
        self.unreferenced.pop(segment_id, None)
        if self.highest is None or epoch_end > self.highest:
            self.highest = epoch_end

    def delete_segment_started(self, start: int, row: int, segment_id: RemoteLogSegmentId) -> None:
        i = self.lo + int(self.keys[self.lo:self.hi].searchsorted(start, "left"))
        if i < self.hi and self.keys.item(i) == start and self.rows.item(i) == row:  # remove(key, value)
            self._delete(i)
        # Stays listed as unreferenced so a failed deletion is retried from the list calls.
        self.unreferenced[segment_id] = None

    def remap(self, new_index: np.ndarray) -> None:
        """After the table's compaction; referenced rows are always live (COPY_SEGMENT_FINISHED)."""
        rows = new_index[self.rows[self.lo:self.hi]]
        assert not len(rows) or int(rows.min()) >= 0, "a referenced segment was compacted away"
        self.keys = self.keys[self.lo:self.hi].copy()
        self.rows = rows
        self.lo, self.hi = 0, len(rows)

    def _insert(self, i: int, key: int, row: int) -> None:
        """Insert before absolute position ``i`` (appends, in practice)."""
        if self.hi == len(self.keys):
            if self.lo > (self.hi - self.lo) >> 1:  # room at the head: slide down instead of growing
                n = self.hi - self.lo
                self.keys[:n] = self.keys[self.lo:self.hi].copy()
                self.rows[:n] = self.rows[self.lo:self.hi].copy()
                i -= self.lo
                self.lo, self.hi = 0, n
            else:
                self.keys = _grown(self.keys, self.hi, self.hi + 1)
                self.rows = _grown(self.rows, self.hi, self.hi + 1)
        if i < self.hi:
            self.keys[i + 1:self.hi + 1] = self.keys[i:self.hi].copy()
            self.rows[i + 1:self.hi + 1] = self.rows[i:self.hi].copy()
        self.keys[i] = key
        self.rows[i] = row
        self.hi += 1

    def _delete(self, i: int) -> None:
        if i == self.lo:  # retention deletes the oldest first: O(1)
            self.lo += 1
        elif i == self.hi - 1:
            self.hi -= 1
        else:
            self.keys[i:self.hi - 1] = self.keys[i + 1:self.hi].copy()
            self.rows[i:self.hi - 1] = self.rows[i + 1:self.hi].copy()
            self.hi -= 1
        if self.lo == self.hi:
            self.lo = self.hi = 0
        elif self.lo > 64 and self.lo > 3 * (self.hi - self.lo):  # mostly head room: give it back
            self.keys = self.keys[self.lo:self.hi].copy()
            self.rows = self.rows[self.lo:self.hi].copy()
            self.lo, self.hi = 0, len(self.keys)

    def detach(self) -> None:
        self.keys = self.keys[self.lo:self.hi].copy()
        self.rows = self.rows[self.lo:self.hi].copy()
        self.lo, self.hi = 0, len(self.keys)

    def nbytes(self) -> int:
        return self.keys.nbytes + self.rows.nbytes


@dataclass(slots=True)
class CacheColumns:
    """One user partition's cache as arrays: what the snapshot file holds (see ``snapshot.py``).

    ``unref_index`` points into the partition's rows, then into ``orphans`` (ids an epoch state names
    that no live segment has: Kafka keeps those too, and answers RemoteResourceNotFoundError for them).
    """

    columns: dict[str, np.ndarray]
    ext_row: np.ndarray
    ext_epoch: np.ndarray
    ext_start: np.ndarray
    custom: dict[int, bytes]
    epoch_ids: np.ndarray  # int32
    epoch_highest: np.ndarray  # int64, -1: none
    epoch_ref_count: np.ndarray  # uint32
    epoch_unref_count: np.ndarray  # uint32
    ref_keys: np.ndarray  # int64, per epoch ascending
    ref_rows: np.ndarray  # int32
    unref_index: np.ndarray  # uint32
    orphans: list[uuid.UUID] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.columns["start"])
