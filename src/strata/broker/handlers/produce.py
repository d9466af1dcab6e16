"""Produce: validate and append each partition's batches; errors are per partition.

acks 1 and -1 are the same on a single node (the ISR is the leader). acks=0 gets no response;
if such a request fails, the connection is closed instead, which is how Kafka tells a
fire-and-forget producer to refresh its metadata.
"""

from __future__ import annotations

import logging
from typing import Any

from strata.broker.dispatch import CloseConnection, RequestContext, handles
from strata.common import TopicPartition
from strata.errors import (
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    KafkaStorageError,
    RecordError,
    RecordValidationError,
)

log = logging.getLogger(__name__)

PRODUCE = 0


def _partition_error(index: int, code: int, message: str | None, batch_error: bool = False,
                     record_errors: list[RecordError] | None = None) -> dict[str, Any]:
    """``record_errors``: the rejected records by index in their batch (v8+ answers them; librdkafka
    fails those records with ``code`` and the rest of the batch with ``_INVALID_DIFFERENT_RECORD``).
    Without them, ``batch_error`` reports the batch as one record error at index 0."""
    if record_errors:
        errors = [{"batch_index": e.batch_index, "batch_index_error_message": e.message} for e in record_errors]
    elif batch_error:
        errors = [{"batch_index": 0, "batch_index_error_message": message}]
    else:
        errors = []
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1,
            "record_errors": errors, "error_message": message}


@handles(PRODUCE)
async def produce(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    topic_stats = broker.stats.topics
    acks = request.acks
    failed = False
    topics_out = []
    for topic in request.topic_data:
        name = getattr(topic, "name", None)
        info = broker.topics.get(name) if name else broker.topics.by_id(getattr(topic, "topic_id", None))
        parts = []
        for pdata in topic.partition_data:
            index = pdata.index
            if acks not in (0, 1, -1):
                parts.append(_partition_error(index, ErrorCode.INVALID_REQUIRED_ACKS, f"invalid acks {acks}"))
                continue
            if info is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
                parts.append(_partition_error(index, code, None))
                continue
            if info.is_internal:
                parts.append(_partition_error(index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                              f"Cannot append to internal topic {info.name}"))
                continue
            records = pdata.records
            if not records:
                parts.append(_partition_error(index, ErrorCode.INVALID_RECORD, "produce request carried no records",
                                              batch_error=True))
                continue
            try:
                result = broker.replicas.append(TopicPartition(info.name, index), records)
            except KafkaError as e:
                if isinstance(e, KafkaStorageError):
                    log.error("append to %s-%d failed: %s", info.name, index, e)
                elif not isinstance(e, InvalidRecordError) and e.error_code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("append to %s-%d failed", info.name, index)
                parts.append(_partition_error(index, e.error_code, str(e),
                                              batch_error=e.error_code in (ErrorCode.INVALID_RECORD,
                                                                           ErrorCode.INVALID_TIMESTAMP),
                                              record_errors=e.record_errors
                                              if isinstance(e, RecordValidationError) else None))
                continue
            topic_stats.BytesInPerSec.mark(info.name, len(records))
            topic_stats.MessagesInPerSec.mark(info.name, result.num_messages)
            parts.append({"index": index, "error_code": 0, "base_offset": result.first_offset,
                          "log_append_time": result.log_append_time, "log_start_offset": result.log_start_offset,
                          "record_errors": [], "error_message": None})
        failed = failed or any(p["error_code"] for p in parts)
        topics_out.append({"name": name if name else (info.name if info else ""),
                           "topic_id": info.topic_id if info else getattr(topic, "topic_id", None),
                           "partition_responses": parts})
    if acks == 0:
        if failed:
            raise CloseConnection("an acks=0 produce failed: closing so the producer refreshes metadata")
        return None
    return ctx.respond(responses=topics_out, throttle_time=0)
