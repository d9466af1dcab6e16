"""Kafka's ``TransactionMarkerChannelManager``: write a decided transaction's markers, then complete it.

Once PrepareCommit/PrepareAbort is in ``__transaction_state`` the outcome is decided, and only the
markers remain: one COMMIT or ABORT control batch on every partition of the transaction, written by
that partition's leader (WriteTxnMarkers, or a local append when the leader is this broker). They are
retried until every partition has acknowledged - through leader changes, a partition briefly without
ISR, a slow follower - and only then is CompleteCommit/CompleteAbort written, which lets the producer
begin its next transaction. A partition whose topic was deleted needs no marker.

Sending stops when this broker stops coordinating the id (its ``__transaction_state`` partition moved
or was unloaded): the new coordinator finds the transaction in a Prepare state when it loads the
partition and sends the markers again. A marker written twice is harmless: the second one closes no
transaction (the partition's producer state has none open) and changes neither the LSO nor the index.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from strata.common import TopicPartition
from strata.common.crashpoints import crash_point
from strata.coordinator.transaction.metadata import TransactionMetadata
from strata.coordinator.transaction.state_manager import TransactionStateManager
from strata.errors import ErrorCode

log = logging.getLogger("strata.coordinator.transaction")

RETRY_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0

# This coordinator is stale (a newer one wrote to the partition): stop, the new one completes it.
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                     ErrorCode.PRODUCER_FENCED})


class MarkerWriter(Protocol):
    """Writes one transaction's markers on partitions, wherever their leaders are (the broker implements it)."""

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """An error code per partition: NONE once the marker is in the ISR; UNKNOWN_TOPIC_OR_PARTITION
        for a partition that no longer exists (deleted topic); anything else is retried."""
        ...

    def partition_exists(self, tp: TopicPartition) -> bool: ...


class TransactionMarkerChannelManager:
    def __init__(self, writer: MarkerWriter, state: TransactionStateManager, now_ms: Callable[[], int]) -> None:
        self.writer = writer
        self.state = state
        self.now_ms = now_ms
        self._tasks: dict[int, set[asyncio.Task[None]]] = {}  # __transaction_state partition -> senders
        self.markers_written = 0

    def add_txn_markers_to_send(self, coordinator_epoch: int, commit: bool, md: TransactionMetadata) -> None:
        partition = self.state.partition_for(md.transactional_id)
        task = asyncio.get_running_loop().create_task(self._send(coordinator_epoch, commit, md),
                                                      name=f"txn-markers-{md.transactional_id}")
        tasks = self._tasks.setdefault(partition, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def remove_markers_for_partition(self, partition: int) -> None:
        for task in self._tasks.pop(partition, set()):
            task.cancel()

    async def close(self) -> None:
        tasks = [t for ts in self._tasks.values() for t in ts]
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def pending(self) -> int:
        return sum(len(ts) for ts in self._tasks.values())

    async def _send(self, coordinator_epoch: int, commit: bool, md: TransactionMetadata) -> None:
        tid = md.transactional_id
        backoff = RETRY_BACKOFF_S
        try:
            while md.partitions:
                if not self.state.owns_epoch(tid, coordinator_epoch):
                    return
                todo = sorted(md.partitions)
                results = await self.writer.write_markers(md.producer_id, md.producer_epoch, commit,
                                                          coordinator_epoch, todo)
                if not self.state.owns_epoch(tid, coordinator_epoch):
                    return
                retry = []
                for tp in todo:
                    code = results.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                    if code == ErrorCode.NONE or (code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                                  and not self.writer.partition_exists(tp)):
                        md.remove_partition(tp)
                        self.markers_written += code == ErrorCode.NONE
                    elif code in _FENCED:
                        log.warning("%s: the marker for %s was refused (%s): a newer coordinator owns the "
                                    "transaction", tid, tp, ErrorCode(code).name)
                        return
                    else:
                        retry.append((tp, code))
                if retry:
                    log.info("%s: retrying %s markers on %s", tid, "COMMIT" if commit else "ABORT",
                             ", ".join(f"{tp} ({ErrorCode(c).name})" for tp, c in retry[:5]))
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
            await self._complete(coordinator_epoch, md)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: writing the transaction markers failed", tid)

    async def _complete(self, coordinator_epoch: int, md: TransactionMetadata) -> None:
        """Every marker is written: CompleteCommit/CompleteAbort, retried while the log is unavailable."""
        crash_point("txn.before_complete")  # every marker written, the transaction not yet complete
        backoff = RETRY_BACKOFF_S
        while self.state.owns_epoch(md.transactional_id, coordinator_epoch):
            if md.pending:  # another transition is being written: wait for it
                await asyncio.sleep(backoff)
                continue
            transit = md.prepare_complete(self.now_ms())
            code = await self.state.append(md.transactional_id, coordinator_epoch, md, transit)
            if code == ErrorCode.NONE:
                return
            if code == ErrorCode.NOT_COORDINATOR:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
