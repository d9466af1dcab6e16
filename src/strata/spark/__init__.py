"""PySpark data source ``strata``: a topic read across both tiers, streaming, and a sink.

    import strata.spark
    strata.spark.register(spark)
    df = (spark.read.format("strata")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .load())

Importing this package imports nothing from PySpark; ``register`` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["explain", "register"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any, *, pushdown: bool | None = None) -> None:
    """Register ``format("strata")`` with ``spark``.

    Filter pushdown (pruning remote segments by ``partition``/``offset``/``timestamp`` predicates)
    needs ``spark.sql.python.filterPushdown.enabled``; Spark refuses a reader that pushes filters
    while it is off, so the pushdown variant is registered only when it is on. ``pushdown=True``
    turns the setting on for this session first; ``False`` registers the plain variant.
    """
    from strata.spark.source import StrataDataSource, StrataPushdownDataSource

    if pushdown is None:
        pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    elif pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(StrataPushdownDataSource if pushdown else StrataDataSource)


def explain(options: dict[str, str]) -> Any:
    """What a batch read with these options would read from each tier (see :mod:`strata.spark.driver`)."""
    from strata.spark.driver import explain as _explain

    return _explain(options)
