"""``__diskless_metadata`` over this broker's replicas: the :class:`CommandLog` the journal runs on.

Appends are leader appends with origin COORDINATOR (the topic is internal: clients cannot write it) and
the journal waits for the high watermark, so a command is applied only once the ISR has it. On a single
node the one replica is its own ISR: the high watermark follows every append.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from strata.common import TopicPartition
from strata.errors import ApiError, ErrorCode, KafkaStorageError
from strata.log.producer_state import AppendOrigin
from strata.log.reading import iter_log_records
from strata.protocol.records import BatchBuilder
from strata.replication.replica_manager import ReplicaManager

log = logging.getLogger("strata.diskless")

DISKLESS_METADATA_TOPIC = "__diskless_metadata"
METADATA_PARTITION = TopicPartition(DISKLESS_METADATA_TOPIC, 0)


class MetadataTopicLog:
    def __init__(self, replicas: ReplicaManager, clustered: bool) -> None:
        self.replicas = replicas
        self.clustered = clustered

    def append(self, key: bytes, value: bytes) -> int:
        builder = BatchBuilder()
        builder.append(value, key=key)
        try:
            info = self.replicas.append(METADATA_PARTITION, builder.build(), AppendOrigin.COORDINATOR,
                                        required_acks=-1 if self.clustered else 1)
        except OSError as e:
            raise KafkaStorageError(f"append to {METADATA_PARTITION} failed: {e}") from e
        return info.last_offset

    async def wait_committed(self, offset: int, timeout_s: float) -> None:
        code = await self.replicas.wait_for_replication(METADATA_PARTITION, offset + 1, timeout_s)
        if code:
            raise ApiError(code, f"{METADATA_PARTITION}: the command at offset {offset} was not replicated "
                                 f"({ErrorCode(code).name})")

    def high_watermark(self) -> int:
        plog = self.replicas.local_log(METADATA_PARTITION)
        return plog.high_watermark if plog is not None else -1

    def read(self, start: int, end: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        plog = self.replicas.local_log(METADATA_PARTITION)
        if plog is None:
            return
        for record in iter_log_records(plog, start, end):
            yield record.offset, record.key, record.value
