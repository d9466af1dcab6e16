"""Builders for the diskless coordinator tests: batches, WAL objects laid out byte by byte, short queries."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from typing import NamedTuple

from strata.diskless.coordinator.api import (
    CommitBatchRequest,
    CommitBatchResponse,
    CommitFileRequest,
    ControlPlane,
    ControlRecordType,
    CreatePartitionsRequest,
    FindBatchRequest,
    FindBatchResponse,
    IsolationLevel,
    ListOffsetsRequest,
    ListOffsetsResponse,
    LogInfo,
    TimestampType,
    TopicIdPartition,
)
from strata.diskless.coordinator.rules import INT32_MAX

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
NOW = 1_700_000_000_000
RC = IsolationLevel.READ_COMMITTED
_keys = itertools.count()


class Gap(NamedTuple):
    """Bytes in a WAL object that no batch of the commit claims."""

    size: int


def batch(partition: int = 0, records: int = 1, *, size: int = 100, topic: uuid.UUID = T1, ts: int = NOW - 1000,
          ts_type: TimestampType = TimestampType.CREATE_TIME, pid: int = -1, epoch: int = -1, seq: int = -1,
          txn: bool = False, magic: int = 2) -> CommitBatchRequest:
    last_seq = -1 if seq < 0 else (seq + records - 1) % (INT32_MAX + 1)
    return CommitBatchRequest(topic, f"topic-{topic.int}", partition, 0, size, 0, records - 1, ts, ts_type, magic,
                              pid, epoch, seq, last_seq, txn)


def marker(partition: int, pid: int, epoch: int, kind: ControlRecordType = ControlRecordType.COMMIT, *,
           coordinator_epoch: int = 0, topic: uuid.UUID = T1, size: int = 78) -> CommitBatchRequest:
    return CommitBatchRequest(topic, f"topic-{topic.int}", partition, 0, size, 0, 0, NOW, producer_id=pid,
                              producer_epoch=epoch, is_transactional=True, is_control=True, control_type=kind,
                              coordinator_epoch=coordinator_epoch)


def wal(*items: CommitBatchRequest | Gap, key: str | None = None, broker: int = 1) -> CommitFileRequest:
    """A WAL object holding ``items`` back to back (a :class:`Gap` leaves unclaimed bytes)."""
    pos, batches = 0, []
    for item in items:
        if isinstance(item, Gap):
            pos += item.size
            continue
        batches.append(dataclasses.replace(item, byte_offset=pos))
        pos += item.byte_size
    return CommitFileRequest(key or f"wal/{next(_keys):06d}", broker, pos, tuple(batches))


def commit(cp: ControlPlane, *items: CommitBatchRequest | Gap, now: int = NOW,
           key: str | None = None) -> list[CommitBatchResponse]:
    return cp.commit_file(wal(*items, key=key), now_ms=now)


def create(cp: ControlPlane, topic: uuid.UUID = T1, partitions: int = 2) -> None:
    cp.create_partitions([CreatePartitionsRequest(topic, f"topic-{topic.int}", partitions)], now_ms=NOW)


def find(cp: ControlPlane, partition: int = 0, offset: int = 0, *, topic: uuid.UUID = T1, max_bytes: int = 1 << 30,
         fetch_max: int = 1 << 30, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
         max_batches: int = 0) -> FindBatchResponse:
    return cp.find_batches([FindBatchRequest(topic, partition, offset, max_bytes)], fetch_max_bytes=fetch_max,
                           max_batches_per_partition=max_batches, isolation_level=isolation)[0]


def log_info(cp: ControlPlane, partition: int = 0, topic: uuid.UUID = T1) -> LogInfo:
    return cp.get_logs([TopicIdPartition(topic, partition)])[0]


def list_offset(cp: ControlPlane, timestamp: int, partition: int = 0, *, topic: uuid.UUID = T1,
                isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> ListOffsetsResponse:
    return cp.list_offsets([ListOffsetsRequest(topic, partition, timestamp)], isolation_level=isolation)[0]


def offsets(resp: FindBatchResponse) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in resp.batches]
