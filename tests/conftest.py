"""Shared fixtures: an isolated clock and scheduler, and a factory for partition logs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.log.loader import load_partition_log
from strata.log.partition_log import PartitionLog

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def scheduler() -> ManualScheduler:
    return ManualScheduler()


OpenLog = Callable[..., PartitionLog]


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock, scheduler: ManualScheduler) -> Iterator[OpenLog]:
    """``open_log(config=None, **load_kwargs)`` (re)opens the partition ``t-0`` under tmp_path.

    File handles of every log opened are released at teardown (tests often "crash" a log).
    """
    opened: list[PartitionLog] = []

    def _open(config: LogConfig | None = None, **kwargs: object) -> PartitionLog:
        plog = load_partition_log(tmp_path / "t-0", TopicPartition("t", 0), config or LogConfig(), clock,
                                  scheduler, **kwargs)  # type: ignore[arg-type]
        opened.append(plog)
        return plog

    yield _open
    for plog in opened:
        plog.local_log.close_handlers()
