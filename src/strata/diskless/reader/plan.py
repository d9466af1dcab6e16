"""Fetch planning: which byte ranges of which WAL objects one fetch needs, and which path reads them.

Why group by object: one WAL object holds batches of many partitions, so a fetch for twenty partitions
produced by one broker often needs bytes of one or two objects. Planning per object turns that into one
read per object instead of one per partition (Inkless's ``FetchPlanner``).

Why hot vs lagging: the cache holds the tail. A consumer far behind reads objects nobody else reads
now; caching them would evict the tail every other consumer is about to hit, and serve nobody. So an
object whose newest batch was committed more than ``lagging_threshold_ms`` ago (by default the cache
lifespan: older objects would have expired from the cache anyway) is read around the cache.

Age is measured from the commit time (``log_append_timestamp``), not from the producer's
``batch_max_timestamp`` as Inkless does: CreateTime is the client's clock, and a producer replaying old
data (or with a skewed clock) would make the live tail look lagging and push it around the cache. All
batches of one object share one commit time, so the classification is per object either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strata.diskless.coordinator.api import FindBatchResponse
from strata.errors import ErrorCode

Range = tuple[int, int]  # [start, end) in bytes


@dataclass(frozen=True, slots=True)
class ObjectPlan:
    """The reads one fetch makes of one object: ``ranges`` sorted and merged (adjacent ranges joined)."""

    object_key: str
    lagging: bool
    ranges: tuple[Range, ...]
    newest_commit_ms: int

    @property
    def bounds(self) -> Range:
        """The one bounding range a lagging read GETs: fewer requests beat fewer bytes on object stores."""
        return self.ranges[0][0], self.ranges[-1][1]

    @property
    def byte_count(self) -> int:
        return sum(end - start for start, end in self.ranges)


def merge_ranges(ranges: Sequence[Range]) -> tuple[Range, ...]:
    """Sort and coalesce overlapping or touching ranges."""
    merged: list[Range] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return tuple(merged)


def is_lagging(newest_commit_ms: int, now_ms: int, lagging_threshold_ms: int) -> bool:
    return now_ms - newest_commit_ms > lagging_threshold_ms


def plan_reads(responses: Sequence[FindBatchResponse], *, now_ms: int, lagging_threshold_ms: int) -> list[ObjectPlan]:
    """One plan per object the successful answers refer to, in order of first reference."""
    ranges: dict[str, list[Range]] = {}
    newest: dict[str, int] = {}
    for resp in responses:
        if resp.error != ErrorCode.NONE:
            continue
        for b in resp.batches:
            ranges.setdefault(b.object_key, []).append((b.byte_offset, b.byte_offset + b.byte_size))
            newest[b.object_key] = max(newest.get(b.object_key, b.log_append_timestamp), b.log_append_timestamp)
    return [ObjectPlan(key, is_lagging(newest[key], now_ms, lagging_threshold_ms), merge_ranges(rs), newest[key])
            for key, rs in ranges.items()]
