"""Fixtures for the tiered-storage scenarios: a fresh broker with the ``local`` RSM per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.tiered.harness import TieredBroker


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[TieredBroker]:
    b = TieredBroker(tmp_path).start()
    try:
        yield b
    finally:
        b.stop()
