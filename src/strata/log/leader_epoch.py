"""Kafka's LeaderEpochFileCache: which leader epoch wrote which offsets, for one partition.

Followers and consumers ask "where did epoch E end?" (OffsetsForLeaderEpoch) to find the point where
their copy of the log diverged; tiered storage attaches the epochs of each segment to its remote
metadata. Both need Kafka's exact answers, so the rules here follow
``storage/.../epoch/LeaderEpochFileCache.java`` one for one.

Entries are kept sorted by epoch, and the cache maintains that start offsets increase with the epoch:
an assignment that would break that order removes the latest entries that conflict with it.

Unlike Kafka, every mutation writes the checkpoint synchronously (Kafka defers the flush after a
truncation to a background thread); the cache has a single owner, so it takes no locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strata.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from strata.log.errors import LogStateError

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET


class LeaderEpochFileCache:
    """The (epoch → start offset) history, persisted in ``leader-epoch-checkpoint``.

    With ``checkpoint=None`` the cache lives only in memory (Kafka's InMemoryLeaderEpochCheckpoint),
    which is what a throw-away copy for a remote segment needs.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None, *, load: bool = True) -> None:
        """``load=False`` starts empty without reading the file (the loader rebuilds a corrupt one)."""
        self.checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        if checkpoint is not None and load:
            # Replayed through the assignment rules, as Kafka does, so a hand-edited or stale file
            # cannot introduce non-monotonic entries.
            for entry in checkpoint.read():
                self._assign(entry)

    # -- mutations --------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (called for every leader append).

        A no-op when ``epoch`` is already the latest epoch and starts no later: once assigned, an
        epoch's start offset never moves forward. Anything else (a new epoch, or the latest epoch
        starting earlier) first removes the latest entries whose epoch is ``>= epoch`` or whose start
        is ``>= start_offset`` -- so a *lower* epoch than the latest is not ignored: it truncates the
        newer epochs, exactly like Kafka (test ``shouldEnforceMonotonicallyIncreasingEpochs``).
        """
        if self._assign(EpochEntry(epoch, start_offset)):
            self._flush()

    def clear(self) -> None:
        """Forget every entry (and write the empty checkpoint): the history is about to be rebuilt."""
        self._entries.clear()
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop history before ``start_offset`` (log start moved), keeping the epoch in force there.

        Entries starting at or before the offset go; the last of them comes back starting at
        ``start_offset``, so ``epoch_for_offset(start_offset)`` keeps its answer.
        """
        if _truncate_from_start(self._entries, start_offset):
            self._flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated to it).

        A negative offset (UNDEFINED_EPOCH_OFFSET) truncates nothing, as in Kafka.
        """
        if _truncate_from_end(self._entries, end_offset):
            self._flush()

    def clear_and_flush(self) -> None:
        """Forget every epoch and persist the empty file (used when a log is fully truncated)."""
        self._entries.clear()
        self._flush()

    # -- queries ----------------------------------------------------------------------------

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def is_empty(self) -> bool:
        return not self._entries

    def epoch_entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        return next((e for e in self._entries if e.epoch == epoch), None)

    def previous_epoch(self, epoch: int) -> int | None:
        """The highest cached epoch below ``epoch`` (RLM walks epochs backwards with it)."""
        lower = [e.epoch for e in self._entries if e.epoch < epoch]
        return lower[-1] if lower else None

    def next_epoch(self, epoch: int) -> int | None:
        """The lowest cached epoch above ``epoch``."""
        return next((e.epoch for e in self._entries if e.epoch > epoch), None)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the last entry starting at or before it."""
        found = None
        for entry in self._entries:
            if entry.start_offset == offset:
                return entry.epoch
            if entry.start_offset > offset:
                return found
            found = entry.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka ``endOffsetFor``: ``(epoch, end offset)`` answering OffsetsForLeaderEpoch.

        * the latest epoch ends at the log end offset;
        * an older epoch ends where the next higher cached epoch starts, reported with the largest
          cached epoch ``<=`` the requested one -- or with the requested epoch itself when it is
          below every cached epoch (its data is gone; the follower restarts at the first start);
        * an undefined, unknown-newer or uncached request gives ``(-1, -1)``.
        """
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch == UNDEFINED_EPOCH:
            return undefined
        if self.latest_epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return undefined
        floor = [e for e in self._entries if e.epoch <= requested_epoch]
        if not floor:
            return requested_epoch, higher.start_offset
        return floor[-1].epoch, higher.start_offset

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries covering ``[start_offset, end_offset)``, first one clamped to ``start_offset``.

        This is what RLM attaches to an uploaded segment; the cache itself is left untouched.
        """
        entries = list(self._entries)
        if start_offset >= 0:
            _truncate_from_start(entries, start_offset)
        _truncate_from_end(entries, end_offset)
        return entries

    # -- internals --------------------------------------------------------------------------

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise LogStateError(f"invalid partition leader epoch entry {entry}")
        latest = self.latest_entry
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return False
        removed = _remove_tail_while(
            self._entries, lambda e: e.epoch >= entry.epoch or e.start_offset >= entry.start_offset
        )
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            # A removal at the same start offset means no data was written under the old epoch:
            # expected after a leader change with no appends, not worth a warning.
            log.warning("new epoch entry %s truncated conflicting entries %s", entry, removed)
        self._entries.append(entry)
        return True

    def _flush(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.write(self._entries)


def _remove_tail_while(
    entries: list[EpochEntry], predicate: Callable[[EpochEntry], bool]
) -> list[EpochEntry]:
    """Pop entries from the end while they match; returned newest first (Kafka's removeWhileMatching)."""
    removed = []
    while entries and predicate(entries[-1]):
        removed.append(entries.pop())
    return removed


def _truncate_from_start(entries: list[EpochEntry], start_offset: int) -> bool:
    """In place; True when something changed."""
    count = 0
    while count < len(entries) and entries[count].start_offset <= start_offset:
        count += 1
    if count == 0:
        return False
    clamped = EpochEntry(entries[count - 1].epoch, start_offset)
    changed = count > 1 or entries[0] != clamped
    del entries[:count]
    entries.insert(0, clamped)
    return changed


def _truncate_from_end(entries: list[EpochEntry], end_offset: int) -> bool:
    """In place; True when something changed. Negative offsets are 'undefined' and change nothing."""
    if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
        return False
    return bool(_remove_tail_while(entries, lambda e: e.start_offset >= end_offset))
