"""The group coordinator: ``__consumer_offsets`` on this broker, and the group state machine above it.

A single node coordinates every group, so there is no partition ownership to move: at start the
coordinator creates ``__consumer_offsets`` if it is missing (``offsets.topic.num.partitions``
partitions, compacted, ``offsets.topic.segment.bytes`` segments), then loads every partition from
its log start to its high watermark (first raised to the log end: this node is the whole ISR) and
replays the records into memory (last write per key wins, a null value deletes). Only then does
the broker start listening, so no client ever sees a half-loaded coordinator (Kafka answers
COORDINATOR_LOAD_IN_PROGRESS in that window instead).

Records go to partition ``abs(hashCode(group)) % partitions`` (Kafka's ``partitionFor``), each
operation's records in one batch appended with ``AppendOrigin.COORDINATOR``: the append is
synchronous on the event loop, so "acknowledge after the write" is simply "answer after append
returned". Offsets older than ``offsets.retention.minutes`` are expired every
``offsets.retention.check.interval.ms``.

The protocol logic itself lives in :class:`strata.broker.group.manager.GroupMetadataManager`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from strata.broker.group.manager import GroupConfig, GroupMetadataManager, Record
from strata.broker.group.records import partition_for
from strata.broker.group.timer import LoopTimer
from strata.common import TopicPartition
from strata.config.broker_config import BROKER_CONFIG_DEF
from strata.errors import CorruptRecordError, KafkaError, KafkaStorageError
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_records
from strata.protocol.records import BatchBuilder

if TYPE_CHECKING:
    from strata.broker.server import Broker

log = logging.getLogger("strata.broker.group")

OFFSETS_TOPIC = "__consumer_offsets"


def _config_value(raw: Mapping[str, str], name: str) -> int:
    """A broker key that ``BrokerConfig`` does not expose as a field, parsed by its ConfigKey."""
    key = BROKER_CONFIG_DEF.keys[name]
    return int(key.parse(raw[name]) if name in raw else key.default)


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.partitions = broker.config.offsets_topic_num_partitions
        self.manager: GroupMetadataManager | None = None
        self._timer: LoopTimer | None = None
        self._expiry: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self.manager is not None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        broker = self.broker
        cfg = broker.config
        info = broker.topics.get(OFFSETS_TOPIC)
        if info is None:
            info = broker.create_topic(OFFSETS_TOPIC, cfg.offsets_topic_num_partitions, {
                "cleanup.policy": "compact",
                "segment.bytes": str(cfg.offsets_topic_segment_bytes),
            })
        self.partitions = info.partitions
        loop = asyncio.get_running_loop()
        self._timer = LoopTimer(loop)
        manager = GroupMetadataManager(
            GroupConfig(
                min_session_timeout_ms=cfg.group_min_session_timeout_ms,
                max_session_timeout_ms=cfg.group_max_session_timeout_ms,
                max_size=cfg.group_max_size,
                initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
                offsets_retention_ms=cfg.offsets_retention_ms,
            ),
            self._timer, broker.clock, self._write)
        self._load(manager)
        manager.on_loaded()
        self.manager = manager
        interval = _config_value(cfg.raw, "offsets.retention.check.interval.ms")
        self._expiry = loop.create_task(self._expire_periodically(interval))

    async def stop(self) -> None:
        manager, self.manager = self.manager, None
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
            self._expiry = None
        if manager is not None:
            manager.unload()

    async def _expire_periodically(self, interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            if self.manager is not None:
                try:
                    removed = self.manager.expire_offsets()
                    if removed:
                        log.info("expired %d committed offsets", removed)
                except Exception:
                    log.exception("offset expiration failed")

    # -- storage ------------------------------------------------------------------------------

    def on_topic_deleted(self, topic: str) -> None:
        if self.manager is not None:
            removed = self.manager.on_topic_deleted(topic)
            if removed:
                log.info("removed %d committed offsets of deleted topic %s", removed, topic)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    def _write(self, group_id: str, records: list[Record]) -> None:
        builder = BatchBuilder()
        for key, value in records:
            builder.append(value, key=key)
        tp = TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))
        try:
            self.broker.replicas.append(tp, builder.build(), AppendOrigin.COORDINATOR)
        except KafkaError:
            raise
        except OSError as e:
            raise KafkaStorageError(f"append to {tp} failed: {e}") from e

    def _load(self, manager: GroupMetadataManager) -> None:
        """Replay every partition of ``__consumer_offsets`` from its log start to its high watermark.

        This node is the only replica, so it becomes leader with itself as the whole ISR and, as in
        Kafka, everything in its log is committed: the high watermark is first raised to the log end.
        (After a kill -9 the checkpointed high watermark is stale: records acknowledged after the
        last checkpoint would otherwise be skipped, and with them the latest commits.)
        """
        for p in range(self.partitions):
            tp = TopicPartition(OFFSETS_TOPIC, p)
            plog = self.broker.replicas.get_log(tp)
            plog.update_high_watermark(plog.log_end_offset)
            for record in iter_log_records(plog, plog.log_start_offset, plog.high_watermark):
                self._replay(manager, tp, record.offset, record.key, record.value)

    @staticmethod
    def _replay(manager: GroupMetadataManager, tp: TopicPartition, offset: int, key: bytes | None,
                value: bytes | None) -> None:
        try:
            manager.replay(key, value)
        except (CorruptRecordError, ValueError) as e:
            log.error("skipping unreadable record at %s offset %d: %s", tp, offset, e)
