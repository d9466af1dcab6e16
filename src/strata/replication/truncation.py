"""Where a follower must cut its log after a leader change (KIP-101 and KIP-279), as a pure function.

A follower may hold records the new leader never had: written by an old leader that died before they were
replicated, or by an uncleanly elected leader. Truncating to the high watermark is not enough (KIP-101 shows
how that loses or diverges committed data), so the follower asks the leader where its own latest epoch ends
(OffsetsForLeaderEpoch, or the DivergingEpoch of a Fetch response) and compares with its own epoch history:

* the leader answers with ``end_offset_for``: the largest epoch it has that is <= the one asked about, and the
  offset where that epoch ends in the leader's log;
* :func:`offset_truncation_state` turns that answer into the offset to truncate to, and says whether that is
  final or whether the follower must ask again with an earlier epoch (KIP-279: when the leader's epoch is one
  the follower never saw, one round cannot find the divergence point).

This is Kafka 3.9's ``AbstractFetcherThread.getOffsetTruncationState`` with ``UnifiedLog.endOffsetForEpoch``.
The epoch lookup itself is not duplicated here: both sides use the log's own port of
``LeaderEpochFileCache.endOffsetFor``, :meth:`strata.log.leader_epoch.LeaderEpochFileCache.end_offset_for`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from strata.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochFileCache

__all__ = [
    "EpochHistory",
    "OffsetTruncationState",
    "end_offset_for",
    "epoch_cache",
    "follower_end_offset_for_epoch",
    "offset_truncation_state",
]

EpochHistory = LeaderEpochFileCache | Sequence[tuple[int, int]]
"""A replica's epoch history: its live cache, or ``(epoch, start offset)`` pairs in ascending order."""


class OffsetTruncationState(NamedTuple):
    """Kafka's ``OffsetTruncationState``. The follower truncates its log to ``offset`` and fetches from there;
    if ``truncation_completed`` is False it first sends another OffsetsForLeaderEpoch with its (new) latest epoch.

    When ``offset`` is not below the log end no record goes, but the epoch cache must still lose its entries
    starting at the log end, as ``UnifiedLog.truncateTo`` does: a replica that led an epoch without writing has
    such an entry, and without the trim the next round asks about the same epoch again, forever (or, in some
    histories, keeps a diverging tail).
    """

    offset: int
    truncation_completed: bool


def epoch_cache(epochs: EpochHistory) -> LeaderEpochFileCache:
    """``epochs`` as a cache: a cache is used as is; pairs are replayed through a throw-away in-memory cache's
    assignment rules (like loading a checkpoint), so a list a real log could not have is normalised the way
    Kafka would normalise it."""
    if isinstance(epochs, LeaderEpochFileCache):
        return epochs
    cache = LeaderEpochFileCache(None, load=False)
    for epoch, start_offset in epochs:
        cache.assign(epoch, start_offset)
    return cache


def end_offset_for(epochs: EpochHistory, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
    """The leader's answer to OffsetsForLeaderEpoch (``LeaderEpochFileCache.endOffsetFor``).

    * the latest epoch ends at the log end offset: ``(requested, log_end_offset)``;
    * an older epoch ends where the next higher epoch starts, reported with the largest epoch <= the requested
      one -- or with the requested epoch itself when it is below every known epoch;
    * an undefined epoch, one above every known epoch, or an empty history: ``(-1, -1)``.
    """
    return epoch_cache(epochs).end_offset_for(requested_epoch, log_end_offset)


def follower_end_offset_for_epoch(epochs: EpochHistory, epoch: int, log_end_offset: int) -> tuple[int, int] | None:
    """``UnifiedLog.endOffsetForEpoch``: ``(epoch found, its end offset)`` in this replica's own log, or None
    when the history cannot answer (undefined end offset)."""
    found_epoch, found_offset = end_offset_for(epochs, epoch, log_end_offset)
    if found_offset == UNDEFINED_EPOCH_OFFSET:
        return None
    return found_epoch, found_offset


def offset_truncation_state(
    leader_epoch: int,
    leader_end_offset: int,
    *,
    epochs: EpochHistory,
    log_end_offset: int,
    fetch_offset: int,
) -> OffsetTruncationState:
    """Where to truncate, given the leader's ``(leader_epoch, leader_end_offset)`` answer
    (``AbstractFetcherThread.getOffsetTruncationState``).

    ``epochs`` and ``log_end_offset`` describe the follower's log; ``fetch_offset`` is the offset the follower
    would fetch from, which for a partition that just became a follower is its high watermark.

    * The leader has no end offset for the epoch (``-1``: the follower's epoch is older than the leader's
      oldest, or the leader has no epochs): truncate to ``fetch_offset`` -- the high watermark is all that is
      known to be shared. Done.
    * The leader sent an offset but no epoch (pre-2.0 protocol): truncate to ``min(leader offset, LEO)``. Done.
    * The follower knows the leader's epoch: the logs agree up to where that epoch ends on *both* sides, so
      truncate to ``min(leader end, follower end of that epoch, LEO)``. Done.
    * The follower never saw that epoch: truncate to the end of its largest epoch below it (capped at its LEO)
      and ask again, now with that smaller epoch as its latest. Not done.
    * The follower's history cannot answer at all: truncate to ``min(leader end, LEO)``, as before KIP-279. Done.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(fetch_offset, True)
    if leader_epoch == UNDEFINED_EPOCH:
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    found = follower_end_offset_for_epoch(epochs, leader_epoch, log_end_offset)
    if found is None:
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    follower_epoch, follower_end_offset = found
    if follower_epoch != leader_epoch:
        return OffsetTruncationState(min(follower_end_offset, log_end_offset), False)
    return OffsetTruncationState(min(follower_end_offset, leader_end_offset, log_end_offset), True)
