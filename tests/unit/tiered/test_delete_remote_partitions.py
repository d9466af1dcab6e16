"""``RemoteLogManager.stop_partitions(delete_remote=True)`` - what topic deletion runs for every partition.

A partition the RLMM holds no metadata of (never tiered) has nothing to delete: no ERROR, no traceback,
and the RLMM does not remember it as stopped. A real failure still logs, and leaves the partition known so
the orphan sweep of the next start retries it. A deletion asked for while the metadata is still loading
waits for it instead of failing (and leaking the remote data).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strata.common import ManualClock, TopicPartition
from strata.config.broker_config import BrokerConfig
from strata.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from strata.tiered.manager import RemoteLogManager
from strata.tiered.metadata.memory import InMemoryMetadataTopic
from strata.tiered.metadata.topic_based import TopicBasedRemoteLogMetadataManager

S = RemoteLogSegmentState


class FakeRSM(RemoteStorageManager):
    def __init__(self, fail: bool | int = False) -> None:
        self.fail = fail  # True: every delete fails; N: the first N deletes fail
        self.deleted: list[RemoteLogSegmentId] = []

    def copy_log_segment_data(self, metadata: Any, data: Any) -> bytes | None:
        raise NotImplementedError

    def fetch_log_segment(self, metadata: Any, start_position: int, end_position: int | None = None) -> Any:
        raise NotImplementedError

    def fetch_index(self, metadata: Any, index_type: Any) -> Any:
        raise NotImplementedError

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        if self.fail is True or (self.fail is not False and self.fail > 0):
            if self.fail is not True:
                self.fail -= 1
            raise RemoteStorageError("the store is down")
        self.deleted.append(metadata.remote_log_segment_id)


class GatedTopic(InMemoryMetadataTopic):
    """Reads block until ``gate`` is set: the metadata is still loading."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        assert self.gate.wait(30)
        return super().read(partition, from_offset)


def _rlmm(tmp_path: Path, topic: InMemoryMetadataTopic, background: bool = False) -> TopicBasedRemoteLogMetadataManager:
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure({"log.dir": str(tmp_path / "rlmm"), "broker.id": 0, "remote.log.metadata.topic.num.partitions": 3,
                    "remote.log.metadata.snapshot.enable": False})
    rlmm.set_metadata_topic(topic)
    rlmm.initialize(background=background)
    return rlmm


def _uploaded(rlmm: TopicBasedRemoteLogMetadataManager, tip: TopicIdPartition, n: int) -> list[RemoteLogSegmentId]:
    rlmm.on_partition_leadership_changes({tip}, set())
    ids = []
    for i in range(n):
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), i * 10, i * 10 + 9, -1, 0, 1000, 100,
                                      {0: i * 10})
        rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, 2000, None, S.COPY_SEGMENT_FINISHED, 0))
        ids.append(md.remote_log_segment_id)
    return ids


def _rlm(tmp_path: Path, rsm: RemoteStorageManager, rlmm: TopicBasedRemoteLogMetadataManager) -> RemoteLogManager:
    config = BrokerConfig.from_props({"log.dirs": str(tmp_path / "logs"), "remote.log.storage.system.enable": "true",
                                      "remote.log.manager.expiration.thread.pool.size": "1"})
    return RemoteLogManager(config.remote, broker_id=0, log_dir=tmp_path / "logs", cluster_id="c",
                            clock=ManualClock(), log_for=lambda _tp: None, rsm=rsm, rlmm=rlmm)


def _delete_topic(rlm: RemoteLogManager, name: str, topic_id: uuid.UUID, partitions: int = 4) -> None:
    async def run() -> None:
        task = rlm.stop_partitions([TopicPartition(name, p) for p in range(partitions)], delete_remote=True,
                                   topic_id=topic_id)
        assert task is not None
        await asyncio.wait_for(task, 30)
        await rlm.close()

    asyncio.run(run())


def _tips(name: str, topic_id: uuid.UUID, partitions: int = 4) -> list[TopicIdPartition]:
    return [TopicIdPartition(topic_id, name, p) for p in range(partitions)]


def test_untiered_partitions_are_a_quiet_no_op(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rlmm = _rlmm(tmp_path, InMemoryMetadataTopic())
    rsm = FakeRSM()
    tiered_id, plain_id = uuid.uuid4(), uuid.uuid4()
    uploaded = _uploaded(rlmm, TopicIdPartition(tiered_id, "tiered", 1), 2)
    rlm = _rlm(tmp_path, rsm, rlmm)

    async def run() -> None:
        plain = rlm.stop_partitions([TopicPartition("plain", p) for p in range(4)], delete_remote=True,
                                    topic_id=plain_id)
        tiered = rlm.stop_partitions([TopicPartition("tiered", p) for p in range(4)], delete_remote=True,
                                     topic_id=tiered_id)
        assert plain is not None and tiered is not None
        await asyncio.wait_for(asyncio.gather(plain, tiered), 30)
        await rlm.close()

    asyncio.run(run())
    assert sorted(rsm.deleted, key=str) == sorted(uploaded, key=str)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "Traceback" not in caplog.text
    stopped = rlmm._stopped
    assert TopicIdPartition(tiered_id, "tiered", 1) in stopped  # its events are ignored from now on
    assert not stopped & set(_tips("plain", plain_id))  # never seen: nothing to remember (nor snapshot)
    assert rlmm.known_partitions() == set()


def test_a_failed_deletion_is_retried_until_the_store_is_back(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    rlmm = _rlmm(tmp_path, InMemoryMetadataTopic())
    topic_id = uuid.uuid4()
    tip = TopicIdPartition(topic_id, "tiered", 0)
    uploaded = _uploaded(rlmm, tip, 1)
    rsm = FakeRSM(fail=2)
    _delete_topic(_rlm(tmp_path, rsm, rlmm), "tiered", topic_id, partitions=2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "deleting the remote data of tiered-0 failed (attempt 1, retried)" in warnings[0]
    assert "the store is down" in warnings[0]
    assert rsm.deleted == uploaded
    assert tip in rlmm._stopped and tip not in rlmm.known_partitions()


def test_a_deletion_still_failing_at_shutdown_keeps_the_partition_known(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    rlmm = _rlmm(tmp_path, InMemoryMetadataTopic())
    topic_id = uuid.uuid4()
    tip = TopicIdPartition(topic_id, "tiered", 0)
    _uploaded(rlmm, tip, 1)
    rlm = _rlm(tmp_path, FakeRSM(fail=True), rlmm)

    async def run() -> None:
        task = rlm.stop_partitions([TopicPartition("tiered", p) for p in range(2)], delete_remote=True,
                                   topic_id=topic_id)
        assert task is not None
        while "attempt 1, retried" not in caplog.text:
            await asyncio.sleep(0.01)
        await rlm.close()  # cancels the retries
        assert task.done()

    asyncio.run(asyncio.wait_for(run(), 30))
    assert tip in rlmm.known_partitions()  # the orphan sweep of the next start deletes it
    assert tip not in rlmm._stopped
    assert TopicIdPartition(topic_id, "tiered", 1) not in rlmm._stopped


def test_a_deletion_during_the_metadata_load_waits_for_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    topic = GatedTopic()
    writer = _rlmm(tmp_path, topic)
    topic_id = uuid.uuid4()
    uploaded = _uploaded(writer, TopicIdPartition(topic_id, "tiered", 2), 3)
    writer.close()

    topic.gate.clear()  # the next RLMM's load blocks on the topic
    rlmm = _rlmm(tmp_path, topic, background=True)
    assert not rlmm.wait_until_ready(0)
    rsm = FakeRSM()
    rlm = _rlm(tmp_path, rsm, rlmm)

    async def run() -> None:
        task = rlm.stop_partitions([TopicPartition("tiered", p) for p in range(4)], delete_remote=True,
                                   topic_id=topic_id)
        assert task is not None
        await asyncio.sleep(0.05)
        assert not task.done() and rsm.deleted == []
        topic.gate.set()
        await asyncio.wait_for(task, 30)
        await rlm.close()

    asyncio.run(run())
    assert sorted(rsm.deleted, key=str) == sorted(uploaded, key=str)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
