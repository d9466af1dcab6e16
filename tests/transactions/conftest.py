"""Fixtures for the transaction tests: a broker whose coordinator aborts timed-out transactions quickly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker.harness import BrokerProcess

TXN_PROPS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
    "transaction.state.log.num.partitions": "5",
}


@pytest.fixture
def txn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", TXN_PROPS).start()
    try:
        yield b
    finally:
        b.stop()
