"""What the log cleaner needs from the remote tier of a tiered compacted partition (KIP-1272's ground).

The cleaner lives in the log layer and must not know the tiered-storage plugins, so the tiering layer
hands each tiered compacted log a :class:`RemoteTierCleaning` (``PartitionLog.remote_cleaning``) and the
cleaner talks to it alone:

* ``segments()``: the readable remote segments (COPY_SEGMENT_FINISHED, in the log's leader-epoch lineage)
  in offset order, as :class:`RemoteSegmentRef` - what the dirty-ratio and min-compaction-lag checks count
  and what a cleaning maps and rewrites;
* ``download(ref, directory)``: one segment's bytes and indexes as a read-only :class:`LogSegment` in a
  scratch directory, so the cleaner's own code maps and filters it exactly as it does a local segment;
* ``aborted_transactions(start, end)``: the aborted transactions the remote transaction indexes hold;
* ``replace(ref, cleaned)``: upload the cleaned segment under a new segment id and retire the old one
  through the metadata state machine (done by the tiering layer, which owns the plugins);
* ``recover()``: finish or undo what a crash or a leader change interrupted, before a cleaning starts;
* ``can_rewrite()``: only the partition's leader rewrites remote data (followers clean their local copy).

Every call blocks (store round trips): the cleaner calls them on its own thread, never on the event loop,
except ``segments()`` and ``clean_offset``, which read in-memory metadata and are cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from strata.log.segment import LogSegment
from strata.log.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class RemoteSegmentRef:
    """One remote segment as the cleaner sees it; ``handle`` is the tier's own metadata object."""

    start_offset: int
    end_offset: int  # inclusive: the next segment's base - 1, so a compaction gap belongs to one segment
    size: int
    max_timestamp_ms: int
    handle: object


class RemoteTierCleaning(Protocol):
    """The remote half of one tiered compacted partition, for its log cleaner (see the module docstring)."""

    clean_offset: int
    """Below it every remote segment was cleaned against a map that this leader built: a new leader (or a
    restart) starts at the log start, so its first cleaning maps the whole log once (the remote segments
    were cleaned by another broker against dirty ranges this one cannot vouch for)."""

    max_rewrite_bytes_per_pass: int

    def can_rewrite(self) -> bool: ...

    def segments(self) -> list[RemoteSegmentRef]: ...

    def download(self, ref: RemoteSegmentRef, directory: Path) -> LogSegment: ...

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]: ...

    def replace(self, ref: RemoteSegmentRef, cleaned: LogSegment) -> None: ...

    def recover(self) -> None: ...
