"""One local Spark (``local[2]``) for the whole test session, quiet, bound to 127.0.0.1.

Creating a SparkSession costs 6-15 s on this machine, so every Spark test shares this one. The
Python workers run this interpreter (``PYSPARK_PYTHON``), which has Strata installed, so the data
source's classes unpickle on the executors.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def spark_session(app: str = "strata-tests") -> object:
    from strata.spark import local_session

    return local_session(app)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = spark_session()
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


@pytest.fixture(scope="session")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A tiering broker (``local`` backend) with a small transaction log, for the transactional Spark tests."""
    from tests.tiered.harness import TieredBroker

    b = TieredBroker(tmp_path_factory.mktemp("spark-txn-broker"), **{
        "transaction.state.log.num.partitions": "3",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}).start()
    try:
        yield b
    finally:
        b.stop()
