"""Leader-epoch lineage: which remote segments belong to this log's history.

Pure functions over ``{epoch: start_offset}`` maps (Kafka's ``RemoteLogManager`` statics), so
retention, reads and the copy task's restart logic agree on one definition and can be tested
against Kafka's own vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from strata.tiered.api import RemoteLogSegmentMetadata


def build_filtered_leader_epoch_map(epochs: Mapping[int, int] | Iterable[tuple[int, int]]) -> dict[int, int]:
    """Drop epochs that hold no records: of consecutive epochs sharing a start offset, keep the last.

    ``{0:0, 1:0, 2:0, 3:30, 4:40, 5:60, 6:60, 7:70, 8:70}`` -> ``{2:0, 3:30, 4:40, 6:60, 8:70}``.
    """
    items = sorted(epochs.items() if isinstance(epochs, Mapping) else epochs)
    out: dict[int, int] = {}
    for i, (epoch, offset) in enumerate(items):
        if i + 1 < len(items) and items[i + 1][1] == offset:
            continue
        out[epoch] = offset
    return out


def is_remote_segment_within_leader_epochs(segment: RemoteLogSegmentMetadata, log_end_offset: int,
                                           leader_epochs: Mapping[int, int]) -> bool:
    """Kafka's ``isRemoteSegmentWithinLeaderEpochs``; ``leader_epochs`` already filtered.

    A segment is valid when each of its epochs is in the lineage with the same boundaries, it may
    start inside the first lineage epoch (log start truncation), and it ends below the log end.
    """
    if not leader_epochs:
        return False
    seg = build_filtered_leader_epoch_map(segment.segment_leader_epochs)
    lineage = sorted(leader_epochs.items())
    first_lineage, last_lineage = lineage[0][0], lineage[-1][0]
    seg_epochs = sorted(seg)
    seg_last = seg_epochs[-1]
    if seg_last < first_lineage or seg_last > last_lineage:
        return False
    seg_first = next((e for e in seg_epochs if e >= first_lineage), None)
    if seg_first is None:
        return False
    for epoch, offset in sorted(seg.items()):
        if epoch < seg_first:
            continue
        if epoch not in leader_epochs:
            return False
        if epoch == seg_first and any(e < epoch for e in leader_epochs) and offset < leader_epochs[epoch]:
            return False
        higher_lineage = next(((e, o) for e, o in lineage if e > epoch), None)
        if epoch == seg_last:
            if higher_lineage is not None and segment.end_offset > higher_lineage[1] - 1:
                return False
        else:
            higher_seg = next(((e, o) for e, o in sorted(seg.items()) if e > epoch), None)
            if higher_lineage != higher_seg:
                return False
    return segment.end_offset < log_end_offset


def find_highest_remote_offset(epoch_entries: list[tuple[int, int]], log_end_offset: int,
                               highest_offset_for_epoch: Callable[[int], int | None]) -> tuple[int, int]:
    """``(offset, epoch)`` of the highest offset already in remote storage, or ``(-1, -1)``.

    Walks epochs from the latest down; the first epoch with remote data bounds the answer by that
    epoch's end in the local lineage (an unclean election may have truncated it).
    """
    for i in range(len(epoch_entries) - 1, -1, -1):
        epoch = epoch_entries[i][0]
        highest = highest_offset_for_epoch(epoch)
        if highest is None:
            continue
        end = epoch_entries[i + 1][1] if i + 1 < len(epoch_entries) else log_end_offset
        if end <= highest:
            return end - 1, epoch
        return highest, epoch
    return -1, -1


def epoch_for_offset(epoch_entries: list[tuple[int, int]], offset: int) -> int | None:
    """The epoch whose range holds ``offset`` (floor of the start offsets)."""
    found = None
    for epoch, start in epoch_entries:
        if start <= offset:
            found = epoch
        else:
            break
    return found
