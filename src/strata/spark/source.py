"""``format("strata")``: the PySpark data source (batch reader, stream reader, writers).

Spark runs these classes in Python workers: ``schema``/``reader``/``partitions`` in a planner
worker, ``read`` in executor workers, after pickling the reader. So the classes hold only parsed
options and plans (no sockets, no locks), and everything heavy is imported inside methods.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from strata.spark.columnar import spark_kafka_ddl
from strata.spark.options import parse_source_options
from strata.spark.planning import PartitionSlices, Pushdown, by_partition

FORMAT_NAME = "strata"


class StrataDataSource(DataSource):
    """Reads a topic across both tiers (remote segments straight from the store) and writes to topics."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return spark_kafka_ddl(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StrataBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> Any:
        from strata.spark.streaming import StrataStreamReader

        return StrataStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from strata.spark.sink import StrataBatchWriter, StrataSaveModeError

        if overwrite:  # Spark's Kafka sink refuses it too: a topic is appended to, never replaced
            raise StrataSaveModeError("Overwrite")
        return StrataBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from strata.spark.sink import StrataStreamWriter

        return StrataStreamWriter(dict(self.options), schema)


class StrataPushdownDataSource(StrataDataSource):
    """The same source with filter pushdown: registered when ``spark.sql.python.filterPushdown.enabled``
    is true (Spark refuses a reader implementing ``pushFilters`` when it is not)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        return StrataPushdownBatchReader(dict(self.options))


class StrataBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = parse_source_options(options)
        self.pushdown: Pushdown | None = None

    def partitions(self) -> Sequence[InputPartition]:
        from strata.spark.driver import plan_batch

        plan = plan_batch(self.options, self.pushdown)
        if self.options.latest_per_key:  # one task per topic partition: a key's versions meet there
            return [InputPartition(g) for g in by_partition(plan.slices)]
        return [InputPartition(s) for s in plan.inputs]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition.value, PartitionSlices):
            from strata.spark.latest import read_latest_per_key

            return read_latest_per_key(partition.value)
        from strata.spark.reading import read_slice

        return read_slice(partition.value)


class StrataPushdownBatchReader(StrataBatchReader):
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Prune by ``partition``, ``offset`` and ``timestamp``; Spark still applies every filter.

        Under ``latestPerKey`` the filters apply to the latest row of each key, so an upper bound on
        ``offset`` must not narrow the read: the records below it would yield older versions of keys
        whose latest record lies above it. Partitions and lower bounds (``offset``, and ``timestamp``
        through the first offset at or after it, every earlier record being older) keep the result.
        """
        self.pushdown = pushdown_from_filters(filters)
        if self.options.latest_per_key:
            self.pushdown.max_offset = None
        return filters


def pushdown_from_filters(filters: Iterable[Filter]) -> Pushdown:
    """The AND of the filters Strata can use; the others leave the pushdown as wide as it was."""
    p = Pushdown()
    for f in filters:
        column = getattr(f, "attribute", None)
        if not column or len(column) != 1:
            continue
        name = column[0].lower()
        if name == "partition":
            allowed = _partition_values(f)
            if allowed is not None:
                p.partitions = allowed if p.partitions is None else p.partitions & allowed
        elif name == "offset":
            _narrow_offsets(p, f)
        elif name == "timestamp" and isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
            us = _us(f.value)
            if us is not None:  # Kafka timestamps are whole milliseconds
                bound = us // 1000 + 1 if isinstance(f, GreaterThan) else -(-us // 1000)
                p.min_timestamp_ms = bound if p.min_timestamp_ms is None else max(p.min_timestamp_ms, bound)
    if p.partitions is not None and not p.partitions:
        p.empty = True
    if p.max_offset is not None and p.max_offset <= p.min_offset:
        p.empty = True
    return p


def _us(value: Any) -> int | None:
    """A filter's timestamp value in microseconds since the epoch (naive datetimes are UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _partition_values(f: Filter) -> frozenset[int] | None:
    if isinstance(f, EqualTo) and isinstance(f.value, int):
        return frozenset({f.value})
    if isinstance(f, In):
        return frozenset(v for v in f.value if isinstance(v, int))
    return None


def _narrow_offsets(p: Pushdown, f: Filter) -> None:
    value = getattr(f, "value", None)
    if isinstance(f, In):
        values = [v for v in f.value if isinstance(v, int)]
        if not values:
            p.empty = True
            return
        lo, hi = min(values), max(values) + 1
    elif not isinstance(value, int):
        return
    elif isinstance(f, EqualTo):
        lo, hi = value, value + 1
    elif isinstance(f, GreaterThan):
        lo, hi = value + 1, None
    elif isinstance(f, GreaterThanOrEqual):
        lo, hi = value, None
    elif isinstance(f, LessThan):
        lo, hi = 0, value
    elif isinstance(f, LessThanOrEqual):
        lo, hi = 0, value + 1
    else:
        return
    p.min_offset = max(p.min_offset, lo)
    if hi is not None:
        p.max_offset = hi if p.max_offset is None else min(p.max_offset, hi)
