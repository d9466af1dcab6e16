"""Kafka's ``TransactionStateManager``: the cache of transactional ids over ``__transaction_state``.

A transactional id belongs to partition ``abs(hashCode(id)) % partitions`` of the topic, and its
coordinator is that partition's leader, so coordination moves with leadership exactly as the group
coordinator's does. A partition led here is *loading* while its log is replayed (requests get
COORDINATOR_LOAD_IN_PROGRESS and retry), then *owned* under a coordinator epoch, the partition's
leader epoch: every marker carries it, so a partition refuses markers from a coordinator that lost
its leadership (TRANSACTION_COORDINATOR_FENCED), and a write whose coordinator epoch changed while it
was in flight is answered NOT_COORDINATOR instead of being applied.

The log is reached through :class:`TxnLogStorage`, which the broker implements over its replicas
(acks=all), so this module knows nothing of the wire or of replication.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from strata.common.hashing import kafka_partition_for
from strata.coordinator.transaction.log_records import (
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strata.coordinator.transaction.metadata import TransactionMetadata, TxnTransitMetadata
from strata.errors import CorruptRecordError, ErrorCode, KafkaError

log = logging.getLogger("strata.coordinator.transaction")

# Kafka's appendTransactionToLog: what the append's error becomes for the client
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class TxnLogStorage(Protocol):
    """``__transaction_state`` as the coordinator needs it; implemented by the broker."""

    async def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Append one record as leader and return once the ISR has it; raise KafkaError otherwise."""
        ...

    def read(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of every record of the partition, from its log start to its log end."""
        ...


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndMetadata:
    coordinator_epoch: int
    metadata: TransactionMetadata


class TransactionStateManager:
    def __init__(self, storage: TxnLogStorage, num_partitions: int, max_timeout_ms: int) -> None:
        self.storage = storage
        self.num_partitions = num_partitions
        self.max_timeout_ms = max_timeout_ms
        self.owned: dict[int, int] = {}  # partition -> coordinator epoch, once loaded
        self.loading: set[int] = set()
        self.txns: dict[int, dict[str, TransactionMetadata]] = {}  # partition -> id -> metadata

    def partition_for(self, transactional_id: str) -> int:
        return kafka_partition_for(transactional_id, self.num_partitions)

    def validate_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.max_timeout_ms

    def get(self, transactional_id: str) -> CoordinatorEpochAndMetadata | None | int:
        """The id's metadata, None when unknown here, or the error code when this broker cannot answer."""
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        epoch = self.owned.get(p)
        if epoch is None:
            return ErrorCode.NOT_COORDINATOR
        md = self.txns.get(p, {}).get(transactional_id)
        return None if md is None else CoordinatorEpochAndMetadata(epoch, md)

    def put_if_absent(self, md: TransactionMetadata) -> CoordinatorEpochAndMetadata | int:
        p = self.partition_for(md.transactional_id)
        epoch = self.owned.get(p)
        if epoch is None:
            return ErrorCode.NOT_COORDINATOR
        current = self.txns.setdefault(p, {}).setdefault(md.transactional_id, md)
        return CoordinatorEpochAndMetadata(epoch, current)

    def all_metadata(self) -> Iterator[TransactionMetadata]:
        for p in self.owned:
            yield from self.txns.get(p, {}).values()

    async def append(self, transactional_id: str, coordinator_epoch: int, md: TransactionMetadata,
                     transit: TxnTransitMetadata) -> int:
        """Write ``transit`` for the id, then apply it (or forget it on failure); a Kafka error code."""
        p = self.partition_for(transactional_id)
        if self.owned.get(p) != coordinator_epoch:
            # Re-elected (or resigned) since the caller read the metadata: writing would put a stale record
            # in the log, which the new coordinator's cache does not have (Kafka checks before appending too).
            md.abort_transition()
            return ErrorCode.NOT_COORDINATOR
        value = None if transit.state is TransactionState.DEAD else encode_value(transit.to_log_value())
        try:
            await self.storage.append(p, encode_key(transactional_id), value)
        except KafkaError as e:
            md.abort_transition()
            code = _APPEND_ERRORS.get(e.error_code, e.error_code)
            log.info("writing %s of %s failed: %s", transit.state.name, transactional_id, e)
            return code
        if self.owned.get(p) != coordinator_epoch:
            # Leadership moved while the write was in flight: the new coordinator loads what we wrote.
            md.abort_transition()
            return ErrorCode.NOT_COORDINATOR
        md.complete_transition(transit)
        if transit.state is TransactionState.DEAD:
            self.txns.get(p, {}).pop(transactional_id, None)
        return ErrorCode.NONE

    # -- leadership -----------------------------------------------------------------------------

    def begin_loading(self, partition: int) -> None:
        self.loading.add(partition)
        self.owned.pop(partition, None)

    def load(self, partition: int, coordinator_epoch: int) -> list[TransactionMetadata]:
        """Replay the partition (last record per id wins, a tombstone removes it) and own it. Returns
        the transactions whose markers are still to be written (PrepareCommit/PrepareAbort)."""
        txns: dict[str, TransactionMetadata] = {}
        for offset, key, value in self.storage.read(partition):
            if key is None:
                continue
            try:
                tid = decode_key(key)
                if tid is None:
                    continue
                if value is None:
                    txns.pop(tid, None)
                else:
                    txns[tid] = TransactionMetadata.from_log(tid, decode_value(value))
            except CorruptRecordError as e:
                log.error("skipping unreadable record at __transaction_state-%d offset %d: %s", partition, offset, e)
        self.txns[partition] = txns
        self.loading.discard(partition)
        self.owned[partition] = coordinator_epoch
        pending = [md for md in txns.values()
                   if md.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)]
        log.info("coordinating %d transactional ids of __transaction_state-%d (coordinator epoch %d, %d to complete)",
                 len(txns), partition, coordinator_epoch, len(pending))
        return pending

    def unload(self, partition: int) -> int:
        self.loading.discard(partition)
        self.owned.pop(partition, None)
        return len(self.txns.pop(partition, {}))

    def owns_epoch(self, transactional_id: str, coordinator_epoch: int) -> bool:
        return self.owned.get(self.partition_for(transactional_id)) == coordinator_epoch

    # -- housekeeping ---------------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[TransactionMetadata]:
        """Open transactions past their timeout (Kafka's ``timedOutTransactions``)."""
        return [md for md in self.all_metadata() if md.state is TransactionState.ONGOING and not md.pending
                and md.txn_start_timestamp + md.txn_timeout_ms < now_ms]

    def expirable(self, now_ms: int, expiration_ms: int) -> list[TransactionMetadata]:
        """Idle ids not used for ``transactional.id.expiration.ms``."""
        idle = (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)
        return [md for md in self.all_metadata() if md.state in idle and not md.pending
                and md.txn_last_update_timestamp + expiration_ms <= now_ms]


def group_by_partition(tps: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return out
