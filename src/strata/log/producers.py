"""Glue between appended batches and :class:`ProducerStateManager`, shared by append and recovery.

Validation happens before bytes reach the segment (so a fenced or out-of-order producer changes
nothing); application happens after, and writes aborted transactions to the segment's
``.txnindex`` with the last stable offset Kafka records there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.log.local_log import LocalLog
from strata.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from strata.log.segment import BatchList, LogSegment
from strata.protocol.records import decode_batch


@dataclass(slots=True)
class ProducerUpdates:
    infos: dict[int, ProducerAppendInfo] = field(default_factory=dict)
    completed: list[CompletedTxn] = field(default_factory=list)
    duplicate: BatchMetadata | None = None


def validate_producers(state: ProducerStateManager, buf: bytes | bytearray | memoryview, batches: BatchList,
                       origin: AppendOrigin) -> ProducerUpdates:
    """Check every idempotent/transactional batch; a client retry of a stored batch is a duplicate."""
    updates = ProducerUpdates()
    for position, header in batches:
        if not header.has_producer_id:
            continue
        pid = header.producer_id
        if origin is AppendOrigin.CLIENT and not header.is_control:
            duplicate = state.find_duplicate_batch(pid, header.producer_epoch, header.base_sequence,
                                                   header.last_sequence)
            if duplicate is not None:
                return ProducerUpdates(duplicate=duplicate)
        info = updates.infos.get(pid)
        if info is None:
            info = updates.infos[pid] = state.prepare_update(pid, origin)
        control = decode_batch(buf, position, verify_crc=False).control_record if header.is_control else None
        completed = info.append_batch(header, control)
        if completed is not None:
            updates.completed.append(completed)
    return updates


def apply_producer_updates(state: ProducerStateManager, updates: ProducerUpdates,
                           segment: LogSegment | None) -> None:
    """Install validated updates; record aborted transactions in ``segment``'s txn index if given."""
    for info in updates.infos.values():
        state.update(info)
    for txn in updates.completed:
        last_stable_offset = state.last_stable_offset(txn)
        if txn.is_aborted and segment is not None:
            segment.update_txn_index(txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset)
        state.complete_txn(txn)


def rebuild_producer_state(local_log: LocalLog, state: ProducerStateManager, log_start_offset: int,
                           recovered: frozenset[int] | set[int] = frozenset()) -> None:
    """Newest snapshot at or below the log end, then replay the batches after it (recovery, and
    a follower's truncation). ``recovered``: segments whose aborted transactions are re-indexed."""
    end = local_log.log_end_offset
    state.truncate_and_reload(log_start_offset, end)
    start = max(state.map_end_offset, log_start_offset)
    if start >= end:
        state.update_map_end_offset(end)
        return
    for segment in local_log.segments.values_from(start):
        if segment.base_offset > start:
            # Recovery deleted the snapshots of the segments it replays (or a kill -9 came before the
            # roll wrote one): write them again at each segment base, as Kafka's rebuildProducerState
            # does, or the copy of the segment before would upload an empty producer snapshot.
            state.update_map_end_offset(segment.base_offset)
            state.take_snapshot()
        position = segment.offset_index.lookup(start).position if start > segment.base_offset else 0
        txn_target = segment if segment.base_offset in recovered else None
        for pos, header, batch in segment.log.iter_batches(position, verify_crc=False):
            if header.last_offset < start:
                continue
            updates = validate_producers(state, batch, [(0, header)], AppendOrigin.REPLICATION)
            apply_producer_updates(state, updates, txn_target)
            state.update_map_end_offset(header.next_offset)
            del pos
    state.update_map_end_offset(end)
