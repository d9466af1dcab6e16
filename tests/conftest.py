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


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` runs two workers) each worker picks ports from its own share."""
    import os

    from strata.tools.zookeeper import share_ports

    _cache_bytecode_out_of_tree()
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count:
        share_ports(int(worker.removeprefix("gw")), int(count))


def _cache_bytecode_out_of_tree() -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` set (as on the 2-core test box) nothing under src/ has a ``.pyc``, so every
    broker process (``python -m strata serve``), tool subprocess and Spark Python worker compiled all of
    strata's ~290 modules again: 1.95 s of CPU to import the broker instead of 1.05 s, measured, and the
    suite starts hundreds of them. Keep the wish (no ``__pycache__`` in the tree) but cache the bytecode
    under .pytest_cache/pycache (``PYTHONPYCACHEPREFIX``; stale entries are checked by mtime like any .pyc;
    the first run also fills it with the venv's modules, ~50 MB, since a prefix replaces every __pycache__).
    Set here, in the controlling process, before pytest-xdist spawns its workers: they and every process
    they start inherit it. A PYTHONPYCACHEPREFIX of the user's own is left alone."""
    import os
    import sys

    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = str(REPO_ROOT / ".pytest_cache" / "pycache")
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix = prefix  # this process's own imports from now on (a run without xdist)
    sys.dont_write_bytecode = False


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


# -- SeaweedFS: one S3 server per test session (tests keep to key prefixes of their own) -------------------

pytest_plugins = ["tests.support.seaweedfs"]  # its ``seaweedfs`` fixture, for every module: one server, not one
# per importing module (a module-level import of a session fixture makes a fixture of that module's own)


# -- ZooKeeper: one server per test session, a chroot per test (replication reference 1.10) --------

@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real ZooKeeper (Debian's package) on 127.0.0.1, started once per test session."""
    from strata.tools.zookeeper import ZooKeeperServer, zookeeper_available

    if not zookeeper_available():
        pytest.fail("ZooKeeper is not installed: `make test` installs Debian's zookeeper package "
                    "(apt-get install zookeeper)")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start().wait_ready()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_connect(zookeeper: object, request: pytest.FixtureRequest) -> Iterator[str]:
    """``127.0.0.1:PORT/t-<uuid>``: this test's own chroot, deleted afterwards."""
    import uuid

    from kazoo.client import KazooClient

    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    base = zookeeper.connect  # type: ignore[attr-defined]
    yield f"{base}{chroot}"
    zk = KazooClient(hosts=base)
    zk.start(timeout=10)
    try:
        zk.delete(chroot, recursive=True)
    except Exception:  # noqa: BLE001 - a chroot never created, or already gone
        pass
    finally:
        zk.stop()
        zk.close()
