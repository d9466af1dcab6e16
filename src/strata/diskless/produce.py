"""A produce request's records for a diskless partition: validated as a leader validates, offsets left relative.

The checks are the classic path's (``analyze_and_validate``: CRC, sizes against ``max.message.bytes``,
client rules, timestamps, keys on compacted topics) and batches are re-encoded to the topic's
``compression.type`` as a leader would. What differs is what is *not* done: no offsets are assigned (the
coordinator does that at commit, the reader injects them at fetch) and the LogAppendTime a fetch shows is
the commit time, stamped at read time (the batch is only marked LogAppendTime here).
"""

from __future__ import annotations

import uuid

from strata.common import TopicPartition
from strata.config.log_config import LogConfig
from strata.diskless.writer import WriteEntry
from strata.log.producer_state import AppendOrigin
from strata.log.validator import analyze_and_validate, recompress_to_target
from strata.protocol.records.batch import TimestampType, parse_header, set_log_append_time


def diskless_entry(topic_id: uuid.UUID, tp: TopicPartition, records: bytes | bytearray | memoryview,
                   config: LogConfig, now_ms: int) -> WriteEntry:
    """The writer's entry for one partition; raises the KafkaError a leader would answer with."""
    batches = analyze_and_validate(records, config, AppendOrigin.CLIENT, now_ms, tp)
    records, batches = recompress_to_target(records, batches, config, now_ms, tp)
    if config.log_append_time and any(h.timestamp_type is not TimestampType.LOG_APPEND_TIME for _, h in batches):
        # marked now so the commit records the type; the reader stamps the commit time over this one
        stamped = bytearray(records)
        for position, header in batches:
            set_log_append_time(stamped, position, header.size, now_ms)
        records, batches = stamped, [(pos, parse_header(stamped, pos)) for pos, _ in batches]
    return WriteEntry(topic_id, tp.topic, tp.partition, records, batches)
