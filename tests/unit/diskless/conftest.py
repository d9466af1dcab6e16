"""Every contract test runs against both coordinator implementations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strata.diskless.coordinator import InMemoryControlPlane, SqliteControlPlane
from strata.diskless.coordinator.api import ControlPlane


@pytest.fixture(params=["memory", "sqlite"])
def cp(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlPlane]:
    if request.param == "memory":
        yield InMemoryControlPlane()
        return
    plane = SqliteControlPlane(str(tmp_path / "coordinator.db"))  # file-backed: WAL mode, as a replica runs it
    yield plane
    plane.close()
