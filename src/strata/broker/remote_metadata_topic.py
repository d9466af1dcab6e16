"""``__remote_log_metadata`` as the topic-based RLMM sees it: the broker's own log, no client.

Kafka's TopicBasedRemoteLogMetadataManager produces and consumes the topic through Kafka clients
over the broker's listener, then polls (every 50 ms) until its consumer has read its own write.
On a single node the log is right here: an append returns once the record is in the log (this
node is the whole ISR, so that is ``acks=all``), and the RLMM applies it to its cache at once.

Log access must happen on the event loop thread (the log's only writer); the RLMM calls from
worker threads, so each call is marshalled onto the loop and waited for.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from strata.common import TopicPartition
from strata.errors import KafkaStorageError
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_records
from strata.protocol.records import BatchBuilder

if TYPE_CHECKING:
    from strata.broker.server import Broker

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
CALL_TIMEOUT_S = 120.0  # remote.log.metadata.consume.wait.ms's default

T = TypeVar("T")


class BrokerMetadataTopic:
    """Implements ``strata.tiered.metadata.topic_based.MetadataTopic`` over the broker's log."""

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop) -> None:
        self._broker = broker
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def _on_loop(self, fn: Callable[[], T]) -> T:
        if threading.get_ident() == self._loop_thread:
            return fn()

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(CALL_TIMEOUT_S)

    def _log(self, partition: int):  # type: ignore[no-untyped-def]
        return self._broker.replicas.get_log(TopicPartition(REMOTE_LOG_METADATA_TOPIC, partition))

    def ensure_created(self, num_partitions: int, retention_ms: int) -> int:
        def create() -> int:
            info = self._broker.topics.get(REMOTE_LOG_METADATA_TOPIC)
            if info is None:
                info = self._broker.create_topic(REMOTE_LOG_METADATA_TOPIC, num_partitions, {
                    "retention.ms": str(retention_ms), "cleanup.policy": "delete", "remote.storage.enable": "false"})
            return info.partitions

        return self._on_loop(create)

    def append(self, partition: int, value: bytes) -> int:
        def write() -> int:
            builder = BatchBuilder()
            builder.append(value, key=None)
            tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC, partition)
            try:
                info = self._broker.replicas.append(tp, builder.build(), AppendOrigin.COORDINATOR)
            except OSError as e:
                raise KafkaStorageError(f"append to {tp} failed: {e}") from e
            return info.last_offset

        return self._on_loop(write)

    def read(self, partition: int, from_offset: int) -> Iterator[tuple[int, bytes]]:
        def read_all() -> list[tuple[int, bytes]]:
            plog = self._log(partition)
            plog.update_high_watermark(plog.log_end_offset)
            return [(r.offset, r.value) for r in iter_log_records(plog, from_offset) if r.value is not None]

        return iter(self._on_loop(read_all))

    def end_offset(self, partition: int) -> int:
        return self._on_loop(lambda: self._log(partition).log_end_offset)

    def start_offset(self, partition: int) -> int:
        return self._on_loop(lambda: self._log(partition).log_start_offset)
