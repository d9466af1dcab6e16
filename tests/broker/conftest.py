"""Broker fixtures: a fresh broker process per test (``broker``) or per module (``shared_broker``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker.harness import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("shared-broker")).start()
    try:
        yield b
    finally:
        b.stop()
