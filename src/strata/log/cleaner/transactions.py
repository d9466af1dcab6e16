"""Kafka's ``CleanedTransactionMetadata``: which transactional batches and markers a cleaning may drop.

The cleaner walks batches in offset order with the aborted transactions of the range (from the
transaction indexes). A data batch of an aborted transaction is dropped (its records never count as
the latest value of a key); an ABORT marker stays while batches of its transaction were still seen in
this pass (and its transaction goes into the cleaned segment's transaction index, so read_committed
readers keep filtering whatever remains), and may go once none were; a COMMIT marker may go once no
batch of its transaction was seen. A marker that may go is only dropped after its delete horizon
(KIP-534), so a consumer that read the transaction's data before the cleaning still sees the marker.
Nothing past the last stable offset is ever cleaned, so every transaction met here is complete.
"""

from __future__ import annotations

import heapq
import struct

from strata.log.txn_index import AbortedTxn
from strata.protocol.records import BatchHeader, ControlRecordType

_CONTROL_KEY = struct.Struct(">hh")


class _AbortedTxnState:
    __slots__ = ("txn", "last_observed_batch_offset")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # min-heap by first offset
        self._seq = 0
        self.cleaned_index: list[AbortedTxn] | None = None  # aborted transactions the cleaned segment keeps

    def add_aborted_transactions(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            self._seq += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch_read(self, header: BatchHeader, control_key: bytes | None) -> bool:
        """True when the marker may be discarded (``control_key``: its record's key; None if it has none)."""
        self._consume_aborted_up_to(header.last_offset)
        if control_key is None or len(control_key) < _CONTROL_KEY.size:
            return True  # an empty control batch was already cleaned
        kind = _CONTROL_KEY.unpack_from(control_key)[1]
        pid = header.producer_id
        if kind == ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.txn)
                return False  # retain the marker until every batch of the transaction is gone
            return True
        if kind == ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, header: BatchHeader) -> bool:
        """True when the data batch belongs to an aborted transaction (and so may be discarded)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.last_observed_batch_offset = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False
