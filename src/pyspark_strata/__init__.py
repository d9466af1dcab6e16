"""Lets PySpark find ``format("strata")`` without a ``register`` call.

Spark looks up Python data sources in top-level modules named ``pyspark_*`` that define
``DefaultSource`` (``pyspark.sql.worker.lookup_data_sources``). This registers the plain variant;
``strata.spark.register(spark)`` registers the filter-pushdown one when the session allows it.
"""

from strata.spark.source import StrataDataSource as DefaultSource

__all__ = ["DefaultSource"]
