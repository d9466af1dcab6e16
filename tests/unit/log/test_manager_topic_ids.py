"""A partition directory left by a deleted topic is never inherited by a recreated one."""

from __future__ import annotations

import uuid

from strata.common import ManualClock, ManualScheduler, TopicPartition
from strata.config import LogConfig
from strata.log.manager import LogManager
from strata.protocol.records import build_batch


def test_stale_topic_id_log_is_replaced(tmp_path):
    clock, scheduler = ManualClock(), ManualScheduler()
    tp = TopicPartition("t", 0)
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    logs = LogManager([tmp_path], lambda _t: LogConfig(), clock, scheduler)
    logs.startup()
    plog = logs.get_or_create_log(tp, old_id)
    plog.append_as_leader(build_batch([b"old"], timestamp=clock.milliseconds()), 0)
    logs.shutdown()

    logs = LogManager([tmp_path], lambda _t: LogConfig(), clock, scheduler)
    logs.startup()
    assert logs.get_or_create_log(tp, old_id).log_end_offset == 1  # same topic: same data
    fresh = logs.get_or_create_log(tp, new_id)
    assert fresh.log_end_offset == 0
    assert logs.topic_id_of(tp) == new_id
    logs.shutdown()
