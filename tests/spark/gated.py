"""``format("strata_gated")``: the batch source, paused after the first Arrow batch of each input partition.

A test kills a broker at a known point of a read: the executor writes ``paused-<partition>-<start>``
into the directory named by the ``test.gate`` option once its first batch is out, and goes on
when the test creates ``go`` there. The classes are pickled by value (:func:`register`), so Spark's
Python workers need nothing from ``tests`` on their path.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from strata.spark.source import StrataBatchReader, StrataDataSource

GATE_OPTION = "test.gate"
WAIT_S = 120.0


class GatedStrataDataSource(StrataDataSource):
    @classmethod
    def name(cls) -> str:
        return "strata_gated"

    def reader(self, schema: StructType) -> DataSourceReader:
        return GatedReader(dict(self.options))


class GatedReader(StrataBatchReader):
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.gate = options[GATE_OPTION]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from strata.spark.reading import read_slice

        piece = partition.value
        batches = read_slice(piece)
        first = next(batches, None)
        if first is None:
            return
        yield first
        gate = Path(self.gate)
        (gate / f"paused-{piece.partition}-{piece.start_offset}").touch()
        deadline = time.monotonic() + WAIT_S
        while not (gate / "go").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no 'go' in {gate} after {WAIT_S:g} s")
            time.sleep(0.05)
        yield from batches


def register(spark: Any) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(GatedStrataDataSource)
