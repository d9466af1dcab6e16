"""``LogManager.delete_logs``: rename at once, one checkpoint rewrite per call (or per deferred block),
and a log recreated for a deleted partition never inherits the deleted log's checkpointed offsets."""

from __future__ import annotations

import uuid
from pathlib import Path

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.log.checkpoints import OffsetCheckpointFile
from strata.log.files import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from strata.log.manager import DELETE_DIR_SUFFIX, LogManager
from strata.protocol.records import build_batch

TPS = [TopicPartition("t", p) for p in range(4)]


def _manager(tmp_path: Path) -> tuple[LogManager, list[int], ManualScheduler]:
    scheduler = ManualScheduler()
    logs = LogManager([tmp_path], lambda _t: LogConfig(), ManualClock(), scheduler)
    logs.startup()
    calls: list[int] = []
    checkpoint = logs.checkpoint

    def counted() -> None:
        calls.append(1)
        checkpoint()

    logs.checkpoint = counted  # type: ignore[method-assign]
    return logs, calls, scheduler


def _write(logs: LogManager, tp: TopicPartition, topic_id: uuid.UUID, records: int, log_start: int) -> None:
    plog = logs.get_or_create_log(tp, topic_id)
    for i in range(records):
        plog.append_as_leader(build_batch([f"r{i}".encode()], timestamp=0), 0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_records(log_start)


def _checkpointed(tmp_path: Path, name: str) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(tmp_path / name).read()


def test_deleting_a_topic_rewrites_the_checkpoints_once(tmp_path: Path) -> None:
    logs, calls, scheduler = _manager(tmp_path)
    topic_id = uuid.uuid4()
    for tp in TPS:
        _write(logs, tp, topic_id, 3, 2)
    logs.checkpoint()
    assert set(_checkpointed(tmp_path, LOG_START_OFFSET_CHECKPOINT)) == set(TPS)
    calls.clear()

    logs.delete_logs(TPS)

    assert calls == [1]
    assert not _checkpointed(tmp_path, LOG_START_OFFSET_CHECKPOINT)
    assert not _checkpointed(tmp_path, RECOVERY_POINT_CHECKPOINT)
    renamed = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(DELETE_DIR_SUFFIX))
    assert [n.split(".")[0] for n in renamed] == [str(tp) for tp in TPS]  # renamed at once ...
    assert scheduler.run_pending() == len(TPS)  # ... removed by the scheduled task
    assert not any(p.name.endswith(DELETE_DIR_SUFFIX) for p in tmp_path.iterdir())
    logs.delete_logs(TPS)  # nothing left to delete: no rewrite
    assert calls == [1]


def test_a_deferred_block_checkpoints_once_at_its_end(tmp_path: Path) -> None:
    logs, calls, _ = _manager(tmp_path)
    ids = [uuid.uuid4(), uuid.uuid4()]
    for topic_id, topic in zip(ids, ["a", "b"], strict=True):
        for p in range(2):
            _write(logs, TopicPartition(topic, p), topic_id, 2, 1)
    logs.checkpoint()
    calls.clear()

    with logs.deferred_checkpoint():
        with logs.deferred_checkpoint():  # two requests at once: the outer end writes
            logs.delete_logs([TopicPartition("a", 0), TopicPartition("a", 1)])
        logs.delete_log(TopicPartition("b", 0))
        assert calls == []
        assert len(_checkpointed(tmp_path, LOG_START_OFFSET_CHECKPOINT)) == 4  # stale until the end
    assert calls == [1]
    assert set(_checkpointed(tmp_path, LOG_START_OFFSET_CHECKPOINT)) == {TopicPartition("b", 1)}

    with logs.deferred_checkpoint():
        pass
    assert calls == [1]  # nothing deleted: nothing written


def test_a_log_recreated_inside_a_deferred_block_does_not_inherit_the_deleted_offsets(tmp_path: Path) -> None:
    logs, calls, _ = _manager(tmp_path)
    tp = TPS[0]
    _write(logs, tp, uuid.uuid4(), 5, 4)
    logs.checkpoint()
    assert _checkpointed(tmp_path, LOG_START_OFFSET_CHECKPOINT) == {tp: 4}
    calls.clear()

    with logs.deferred_checkpoint():
        logs.delete_log(tp)
        assert calls == []
        fresh = logs.get_or_create_log(tp, uuid.uuid4())  # CreateTopics of the same name in between
        assert calls == [1]  # the checkpoints dropped the deleted log before the new one exists
        assert tp not in _checkpointed(tmp_path, LOG_START_OFFSET_CHECKPOINT)
        fresh.append_as_leader(build_batch([b"new"], timestamp=0), 0)
    assert calls == [1]

    # kill -9 now (no shutdown): the new log comes back from offset 0, not from the deleted log's 4
    again = LogManager([tmp_path], lambda _t: LogConfig(), ManualClock(), ManualScheduler())
    again.startup()
    plog = again.get_log(tp)
    assert plog is not None and plog.log_start_offset == 0 and plog.log_end_offset == 1
    again.shutdown()
