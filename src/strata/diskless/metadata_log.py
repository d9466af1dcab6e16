"""``__diskless_metadata`` over this broker's replicas: the :class:`CommandLog` the journal runs on.

Appends are leader appends with origin COORDINATOR (the topic is internal: clients cannot write it) and
the journal waits for the high watermark, so a command is applied only once the ISR has it. On a single
node the one replica is its own ISR: the high watermark follows every append. In a cluster a broker that
does not lead the partition forwards its command to the leader (a Produce with acks=all, as the RLMM
writes ``__remote_log_metadata``) and waits for its own replica's high watermark to pass it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode, KafkaStorageError
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_records
from strata.protocol.records import BatchBuilder
from strata.replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.diskless")

DISKLESS_METADATA_TOPIC = "__diskless_metadata"
METADATA_PARTITION = TopicPartition(DISKLESS_METADATA_TOPIC, 0)


Forward = Callable[[bytes], Awaitable[int]]
"""Append a record batch to the partition through its leader on another broker (acks=all); its offset."""


class Observer(Protocol):
    """The partition's committed records read from its leader by a broker that holds no replica of it
    (``strata.broker.diskless_observer``)."""

    running: bool

    def start(self, from_offset: int) -> None: ...

    async def stop(self) -> None: ...

    def high_watermark(self) -> int: ...

    def log_start_offset(self) -> int: ...

    def read(self, start: int, end: int) -> Iterator[tuple[int, bytes | None, bytes | None]]: ...

    async def wait(self, timeout_s: float) -> None: ...


class MetadataTopicLog:
    """``observer``: how a broker without a replica (a cluster larger than the topic's replication factor)
    reads the commands; used whenever this broker holds no replica."""

    def __init__(self, replicas: ReplicaManager, clustered: bool, forward: Forward | None = None,
                 observer: Observer | None = None) -> None:
        self.replicas = replicas
        self.clustered = clustered
        self.forward = forward
        self.observer = observer

    def observing(self) -> bool:
        return self.observer is not None and self.replicas.local_log(METADATA_PARTITION) is None

    async def wait_for_commands(self, timeout_s: float) -> None:
        """Until new commands may be readable (a local append or fetch, or the observer's), at most ``timeout_s``."""
        if self.observer is not None and self.observing():
            await self.observer.wait(timeout_s)
        else:
            await self.replicas.wait_for_data([METADATA_PARTITION], timeout_s)

    def _leads(self) -> bool:
        part = self.replicas.partitions.get(METADATA_PARTITION)
        return part is not None and part.is_leader

    async def append(self, key: bytes, value: bytes) -> int:
        builder = BatchBuilder()
        builder.append(value, key=key)
        batch = builder.build()
        if self.clustered and not self._leads():
            if self.forward is None:
                raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"this broker does not lead {METADATA_PARTITION}")
            return await self.forward(batch)
        try:
            info = self.replicas.append(METADATA_PARTITION, batch, AppendOrigin.COORDINATOR,
                                        required_acks=-1 if self.clustered else 1)
        except OSError as e:
            raise KafkaStorageError(f"append to {METADATA_PARTITION} failed: {e}") from e
        return info.last_offset

    async def wait_committed(self, offset: int, timeout_s: float) -> None:
        if not self.clustered or self._leads():
            code = await self.replicas.wait_for_replication(METADATA_PARTITION, offset + 1, timeout_s)
            if code:
                raise ApiError(code, f"{METADATA_PARTITION}: the command at offset {offset} was not replicated "
                                     f"({ErrorCode(code).name})")
            return
        # a follower (or an observer): the leader's high watermark reaches us with the next fetch response
        deadline = time.monotonic() + timeout_s
        while self.high_watermark() <= offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ApiError(ErrorCode.REQUEST_TIMED_OUT, f"{METADATA_PARTITION}: offset {offset} did not reach "
                                                            f"this replica's high watermark in {timeout_s:.0f} s")
            await self.wait_for_commands(remaining)

    def high_watermark(self) -> int:
        plog = self.replicas.local_log(METADATA_PARTITION)
        if plog is None:
            return self.observer.high_watermark() if self.observer is not None else -1
        return plog.high_watermark

    def read(self, start: int, end: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        plog = self.replicas.local_log(METADATA_PARTITION)
        if plog is None:
            if self.observer is not None:
                yield from self.observer.read(start, end)
            return
        for record in iter_log_records(plog, start, end):
            yield record.offset, record.key, record.value

    def log_start_offset(self) -> int:
        plog = self.replicas.local_log(METADATA_PARTITION)
        if plog is None:
            return self.observer.log_start_offset() if self.observer is not None else 0
        return plog.log_start_offset
