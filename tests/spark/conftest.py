"""One local Spark (``local[2]``) for the whole test session, quiet, bound to 127.0.0.1.

Creating a SparkSession costs 6-15 s on this machine, so every Spark test shares this one. The
Python workers run this interpreter (``PYSPARK_PYTHON``), which has Strata installed, so the data
source's classes unpickle on the executors.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def spark_session(app: str = "strata-tests") -> object:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    log4j = HERE / "log4j2-quiet.properties"
    return (SparkSession.builder.master("local[2]").appName(app)
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2").config("spark.default.parallelism", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.python.filterPushdown.enabled", "true")
            .config("spark.driver.extraJavaOptions",
                    f"-XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile=file:{log4j}")
            .config("spark.log.level", "ERROR")
            .getOrCreate())


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = spark_session()
    import strata.spark

    strata.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One tiering broker (``local`` backend) shared by the Spark tests; each test uses its own topics."""
    from tests.tiered.harness import TieredBroker

    b = TieredBroker(tmp_path_factory.mktemp("spark-broker")).start()
    try:
        yield b
    finally:
        b.stop()
