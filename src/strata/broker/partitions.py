"""``ReplicaManager``: partitions this broker leads, their logs, and waiting fetches.

Single node: every partition's only replica is this broker, so the ISR is ``{node_id}`` and the
high watermark follows the log end offset as soon as an append returns (what Kafka does when the
ISR has one member). The leader epoch is kept per partition from day one so replication can
later bump it; Produce stamps it into batches and OffsetForLeaderEpoch answers from the cache.

All appends run on the event loop thread, which is the active segment's only writer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from strata.broker.topics import TopicInfo, TopicRegistry
from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode
from strata.log.manager import LogManager
from strata.log.partition_log import PartitionLog
from strata.log.producer_state import AppendOrigin
from strata.log.validator import LogAppendInfo

log = logging.getLogger(__name__)

INITIAL_LEADER_EPOCH = 0


class ReplicaManager:
    def __init__(self, node_id: int, logs: LogManager, topics: TopicRegistry) -> None:
        self.node_id = node_id
        self.logs = logs
        self.topics = topics
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    # -- topology -----------------------------------------------------------------------------

    def leader_epoch(self, tp: TopicPartition) -> int:
        return INITIAL_LEADER_EPOCH

    def check_leader_epoch(self, tp: TopicPartition, requested: int) -> int:
        """Kafka's fencing of a client's ``current_leader_epoch`` (-1: not checked); returns ours."""
        current = self.leader_epoch(tp)
        if requested > current:
            raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                           f"{tp}: requested leader epoch {requested} is newer than {current}")
        if 0 <= requested < current:
            raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, f"{tp}: leader epoch {requested} is fenced by {current}")
        return current

    def leader_epoch_of(self, topic: str, partition: int) -> int:
        return self.leader_epoch(TopicPartition(topic, partition))

    def open_topic(self, info: TopicInfo) -> None:
        """Create (or load) the log of every partition of ``info``."""
        config = self.topics.config(info.name)
        for p in range(info.partitions):
            plog = self.logs.get_or_create_log(TopicPartition(info.name, p), info.topic_id, config)
            # This node is the only replica: everything in the log was acknowledged, so the HW is the
            # log end (the checkpointed HW lags after a kill -9).
            plog.update_high_watermark(plog.log_end_offset)

    def close_topic(self, info: TopicInfo) -> None:
        for p in range(info.partitions):
            tp = TopicPartition(info.name, p)
            self.logs.delete_log(tp)
            self._wake(tp)

    def apply_config(self, name: str) -> None:
        config = self.topics.config(name)
        for tp, plog in self.logs.logs.items():
            if tp.topic == name:
                plog.update_config(config)

    def get_log(self, tp: TopicPartition) -> PartitionLog:
        plog = self.logs.get_log(tp)
        if plog is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"This server does not host this topic-partition: {tp}")
        return plog

    # -- produce ------------------------------------------------------------------------------

    def append(self, tp: TopicPartition, records: bytes, origin: AppendOrigin = AppendOrigin.CLIENT
               ) -> LogAppendInfo:
        plog = self.get_log(tp)
        info = plog.append_as_leader(records, self.leader_epoch(tp), origin)
        if not info.duplicate:
            plog.update_high_watermark(plog.log_end_offset)
            self._wake(tp)
        return info

    # -- waiting fetches ----------------------------------------------------------------------

    def _wake(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_data(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of ``tps`` gets an append, or after ``timeout_s``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tps = list(tps)
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            # asyncio.wait, not wait_for: on 3.11 wait_for swallows a cancel that races with the
            # future completing, which would keep a connection alive through shutdown.
            await asyncio.wait({fut}, timeout=timeout_s)
        finally:
            fut.cancel()
            for tp in tps:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]

    def wake_all(self) -> None:
        for tp in list(self._waiters):
            self._wake(tp)

    # -- admin --------------------------------------------------------------------------------

    def add_partitions(self, info: TopicInfo, first_new: int) -> None:
        """CreatePartitions: create the logs of partitions ``first_new .. info.partitions - 1``.

        The registry already holds the new count, so a crash before every log exists is repaired
        at the next start (``Broker.start`` opens every partition the registry lists).
        """
        config = self.topics.config(info.name)
        for p in range(first_new, info.partitions):
            self.logs.get_or_create_log(TopicPartition(info.name, p), info.topic_id, config)
