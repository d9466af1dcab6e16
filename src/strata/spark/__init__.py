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

__all__ = ["explain", "local_session", "register"]

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


def local_session(app: str = "strata", master: str = "local[2]", **conf: str) -> Any:
    """A quiet local SparkSession bound to 127.0.0.1, for the demo, tests and benchmarks.

    Python workers run this interpreter (``PYSPARK_PYTHON``), which has Strata installed, so the
    data source's classes unpickle on the executors; the JVM logs only errors; filter pushdown is on
    and ``format("strata")`` is registered.
    """
    import os
    import sys
    from pathlib import Path

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(__file__).with_name("log4j2-quiet.properties")
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config(PUSHDOWN_CONF, "true")
               .config("spark.driver.extraJavaOptions",
                       f"-XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile=file:{log4j}")
               .config("spark.log.level", "ERROR"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    register(session)
    return session
