"""``latestPerKey``: the table a compacted topic represents, reduced where the records are read.

For each key of a topic partition the record with the highest offset, tombstones (null values)
dropped, records without a key left out: what a consumer that applies every record to a map, key
by key, holds at the end of the range - and what the log cleaner converges to. The reduction is
done in two levels, both vectorised with Arrow (a hash aggregation per key, then a hash lookup of
the winning offsets), with no Python step per record:

1. every slice of the plan (a remote segment, or a piece of one; a broker range) is reduced to its
   latest record per key, tombstones kept (a tombstone must still cancel an older value of the key
   in an earlier slice). A slice reduces as it reads: Arrow batches are gathered and reduced when
   they exceed what is kept, so memory stays near the slice's distinct keys, not its records;
2. the slices' results are reduced again in offset order to the partition's latest record per key;
   the tombstones are dropped then, and the rows are returned in offset order.

Offsets are unique within a topic partition, so "the record with the highest offset of its key" is
found as the rows whose offset is the maximum of their key's offsets, which needs no ordering.

A key's versions may be in any slice of its partition, and a Python data source cannot add the
shuffle a Spark ``groupBy`` would need after its scan, so one task reads all the slices of one
topic partition (:class:`~strata.spark.planning.PartitionSlices`), the first level on up to
``MAX_THREADS`` threads (remote ranged GETs and the decoder's numpy/Arrow kernels overlap). Keys
are per partition as in Kafka: the same key in two partitions gives two rows (a producer's
partitioner keeps a key in one partition).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from strata.spark.columnar import DEFAULT_MAX_ROWS, arrow_schema
from strata.spark.planning import PartitionSlices, Slice

MAX_THREADS = 4
# Rows gathered before a reduction: at least this many, and at least as many as the reduction keeps,
# so each row is reduced a bounded number of times on average (geometric growth).
REDUCE_MIN_ROWS = 1 << 18


def last_per_key(table: pa.Table) -> pa.Table:
    """The rows whose offset is the highest of their key's (keys not null, offsets unique)."""
    if table.num_rows <= 1:
        return table
    latest = table.select(["key", "offset"]).group_by("key", use_threads=False).aggregate([("offset", "max")])
    return table.filter(pc.is_in(table.column("offset"), value_set=latest.column("offset_max")))


class LastPerKey:
    """Rows of one topic partition, reduced to the latest per key as they are added (tombstones kept).

    Rows with a null key are dropped as they come: they never belong to the table a compacted topic
    represents (and Kafka refuses to write them to one).
    """

    def __init__(self, schema: pa.Schema, min_rows: int = REDUCE_MIN_ROWS) -> None:
        self.schema = schema
        self.min_rows = min_rows
        self._parts: list[pa.Table] = []
        self._pending = 0  # rows added since the last reduction
        self._kept = 0  # rows the last reduction kept

    def add(self, data: pa.RecordBatch | pa.Table) -> None:
        keys = data.column("key")
        if keys.null_count:
            data = data.filter(pc.is_valid(keys))
        if not data.num_rows:
            return
        self._parts.append(pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data)
        self._pending += data.num_rows
        if self._pending >= max(self.min_rows, self._kept):
            self._reduce()

    def _reduce(self) -> None:
        if not self._pending:
            return
        reduced = last_per_key(pa.concat_tables(self._parts))
        self._parts, self._kept, self._pending = [reduced], reduced.num_rows, 0

    def table(self) -> pa.Table:
        """The latest row of every key added, tombstones included, in no particular order."""
        self._reduce()
        return self._parts[0] if self._parts else self.schema.empty_table()


def reduce_slice(s: Slice) -> pa.Table:
    """One slice read and reduced to its latest row per key (tombstones kept)."""
    from strata.spark.reading import read_slice

    acc = LastPerKey(arrow_schema(s.settings.include_headers))
    for batch in read_slice(s):
        acc.add(batch)
    return acc.table()


def _reduced_slices(slices: Sequence[Slice]) -> Iterator[pa.Table]:
    """``reduce_slice`` of each slice, in the slices' order, up to ``MAX_THREADS`` at a time."""
    if len(slices) == 1:
        yield reduce_slice(slices[0])
        return
    workers = min(MAX_THREADS, len(slices))
    window = 2 * workers  # results waiting to be merged stay few: memory of a few slices' keys
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="strata-latest") as pool:
        pending: deque[Future[pa.Table]] = deque(pool.submit(reduce_slice, s) for s in slices[:window])
        rest = iter(slices[window:])
        try:
            while pending:
                table = pending.popleft().result()
                following = next(rest, None)
                if following is not None:
                    pending.append(pool.submit(reduce_slice, following))
                yield table
        finally:
            for future in pending:  # a slice failed (or the task stopped): start no more reads
                future.cancel()


def latest_table(group: PartitionSlices) -> pa.Table:
    """The table of one topic partition: latest row per key, tombstones dropped, in offset order."""
    schema = arrow_schema(group.slices[0].settings.include_headers) if group.slices else arrow_schema(False)
    acc = LastPerKey(schema)
    for table in _reduced_slices(group.slices):
        acc.add(table)
    rows = acc.table()
    live = rows.filter(pc.is_valid(rows.column("value")))
    return live.sort_by("offset")


def read_latest_per_key(group: PartitionSlices) -> Iterator[pa.RecordBatch]:
    """Arrow batches (Spark's Kafka schema) of the table of one topic partition."""
    if not group.slices:
        return
    yield from latest_table(group).combine_chunks().to_batches(max_chunksize=DEFAULT_MAX_ROWS)
