"""A remote read that arrives while its partition's remote metadata is still replaying (a restart, a new
leader) waits for the replay, up to half of ``remote.fetch.max.wait.ms``, instead of failing at once."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.unit.tiered.test_delete_remote_partitions import FakeRSM, GatedTopic, _rlmm, _uploaded

from strata.common import ManualClock
from strata.config.broker_config import BrokerConfig
from strata.errors import OffsetOutOfRangeError
from strata.tiered.api import RemoteStorageNotReadyError, TopicIdPartition
from strata.tiered.manager import RemoteLogManager


def _loading(tmp_path: Path, wait_ms: int) -> tuple[GatedTopic, RemoteLogManager, TopicIdPartition]:
    """An RLM whose RLMM is replaying a metadata topic (holding one segment, offsets 0-9) until the gate opens."""
    topic = GatedTopic()
    tip = TopicIdPartition(uuid.uuid4(), "tiered", 0)
    writer = _rlmm(tmp_path, topic)
    _uploaded(writer, tip, 1)
    writer.close()
    topic.gate.clear()
    rlmm = _rlmm(tmp_path, topic, background=True)
    rlmm.on_partition_leadership_changes({tip}, set())
    config = BrokerConfig.from_props({"log.dirs": str(tmp_path / "logs"), "remote.log.storage.system.enable": "true",
                                      "remote.fetch.max.wait.ms": str(wait_ms)})
    rlm = RemoteLogManager(config.remote, broker_id=0, log_dir=tmp_path / "logs", cluster_id="c",
                           clock=ManualClock(), log_for=lambda _tp: None, rsm=FakeRSM(), rlmm=rlmm)
    rlm.start()
    return topic, rlm, tip


def _plog() -> SimpleNamespace:
    """What ``RemoteLogManager.read`` asks of the partition's log: its leader epochs and cleanup policy."""
    epochs = SimpleNamespace(epoch_entries=lambda: [SimpleNamespace(epoch=0, start_offset=0)])
    return SimpleNamespace(leader_epoch_cache=epochs, config=SimpleNamespace(cleanup_policy=["delete"]))


def test_a_read_during_the_replay_waits_for_it_and_then_reads(tmp_path: Path) -> None:
    topic, rlm, tip = _loading(tmp_path, wait_ms=10_000)

    async def run() -> None:
        future = rlm.read(tip, _plog(), 50, 1024, True, False)  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        assert not future.done()  # waiting for the replay, not answered "not ready"
        topic.gate.set()
        # the replayed metadata is then read: its only segment ends at offset 9
        with pytest.raises(OffsetOutOfRangeError):
            await asyncio.wait_for(future, 10)
        await rlm.close()

    asyncio.run(run())


def test_a_replay_longer_than_half_the_wait_is_answered_not_ready(tmp_path: Path) -> None:
    topic, rlm, tip = _loading(tmp_path, wait_ms=400)

    async def run() -> None:
        started = time.monotonic()
        with pytest.raises(RemoteStorageNotReadyError):
            await asyncio.wait_for(rlm.read(tip, _plog(), 5, 1024, True, False), 10)  # type: ignore[arg-type]
        assert 0.15 <= time.monotonic() - started < 2  # half of remote.fetch.max.wait.ms, then the error
        topic.gate.set()
        await rlm.close()

    asyncio.run(run())
