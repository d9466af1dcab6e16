"""Planning on the driver: which offsets to read, and from which tier, as Spark input partitions.

A plan fixes one end offset per partition (the high watermark, or the last stable offset under
read_committed, at plan time) so that every task reads a consistent snapshot. Offsets held by
COPY_SEGMENT_FINISHED remote segments are read straight from the object store, one input
partition per segment (big segments are cut at offset-index entries into pieces of about
``maxBytesPerPartition``); the rest, the tail not yet uploaded (and any hole in the remote
chain), is read from the broker. Remote data wins even where a local copy still exists: every
byte read from the store is a byte the broker does not serve.

Under read_committed the plan also carries, for every remote slice, the aborted transactions it
must drop: from the ``.txnindex`` of the segments read, and, for markers not uploaded yet (or in
later segments), from one read_committed Fetch at the end of the remote range
(:func:`_remote_aborted_transactions`). The tail's Fetch responses carry their own.

In a cluster the plan names no broker: remote segments are read from the store whichever broker
led when they were copied (the store and ``__remote_log_metadata`` are shared), and a broker slice
fetches from whoever leads its partition when it runs, following the leadership if it moves
(:mod:`strata.spark.failover`). Every request of the planner is retried the same way.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from strata.client.cluster import EARLIEST as EARLIEST_QUERY
from strata.client.cluster import LATEST as LATEST_QUERY
from strata.client.cluster import OFFSET_OUT_OF_RANGE, KafkaCluster, TopicInfo
from strata.client.remote_metadata import RemoteLogMetadataReader
from strata.client.security import MaskedProperties
from strata.spark.options import EARLIEST, LATEST, RSM_CLASS_KEY, RSM_PREFIX, OffsetSpec, SourceOptions
from strata.spark.remote import OffsetIndexView, aborted_transactions, open_rsm, read_index
from strata.tiered.api import IndexType, RemoteLogSegmentMetadata, TopicIdPartition

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
_EMPTY_FETCH_BACKOFF_S = 0.2


class StrataDataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deletion) and ``failOnDataLoss`` is true."""


DATA_LOSS_HINT = ("Some data may have been lost because they are not available in Kafka any more; either the data "
                  "was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
                  "processed. If you don't want your query to fail in such cases, set the source option "
                  "\"failOnDataLoss\" to \"false\".")


@dataclass(frozen=True)
class ReadSettings:
    """What every task needs besides its slice (small: pickled into each input partition)."""

    bootstrap: str
    include_headers: bool
    fail_on_data_loss: bool
    isolation_level: int
    fetch_max_bytes: int
    timeout_s: float
    rsm_class: str | None = None
    rsm_props: tuple[tuple[str, str], ...] = ()
    brokers: tuple[str, ...] = ()  # every broker the planner knew: where executors look when bootstrap is down
    security: MaskedProperties = MaskedProperties()  # the kafka.* security options (repr hides passwords)


@dataclass(frozen=True)
class RemoteSlice:
    """Records [start_offset, end_offset) of one remote segment, bytes [start_position, end_position)."""

    topic: str
    partition: int
    segment: RemoteLogSegmentMetadata
    start_offset: int
    end_offset: int
    start_position: int | None  # None: found in the segment's offset index by the task
    end_position: int | None  # exclusive; None: to the end of the segment
    aborted: tuple[tuple[int, int, int], ...] | None  # read_committed: (producer id, first, last offset)
    settings: ReadSettings

    @property
    def tier(self) -> str:
        return "remote"


@dataclass(frozen=True)
class BrokerSlice:
    """Records [start_offset, end_offset) of a partition, fetched from its leader."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    settings: ReadSettings

    @property
    def tier(self) -> str:
        return "broker"


Slice = RemoteSlice | BrokerSlice


def slice_bytes(s: RemoteSlice) -> int:
    """The bytes a remote slice reads (to the segment's end when its start is left to the task's index lookup)."""
    start = s.start_position or 0
    end = s.end_position if s.end_position is not None else s.segment.segment_size_in_bytes
    return max(0, end - start)


@dataclass(frozen=True)
class SliceGroup:
    """Consecutive remote slices of one topic partition, read by one task one after another.

    A segment is a task by default, but small segments (``segment.bytes`` far below
    ``maxBytesPerPartition``) would then cost Spark a task each: ~30 ms of scheduling and Python worker
    time on ``local[2]`` (bench/spark_bench.py), more than reading an 8 MiB segment takes. Packing them up
    to ``maxBytesPerPartition`` gives tasks the size the split of large segments gives them.
    """

    slices: tuple[RemoteSlice, ...]

    @property
    def topic(self) -> str:
        return self.slices[0].topic

    @property
    def partition(self) -> int:
        return self.slices[0].partition

    @property
    def start_offset(self) -> int:
        return self.slices[0].start_offset

    @property
    def end_offset(self) -> int:
        return self.slices[-1].end_offset

    @property
    def tier(self) -> str:
        return "remote"


InputSlice = Slice | SliceGroup


def pack_slices(slices: Sequence[Slice], max_bytes: int, min_partitions: int | None = None) -> list[InputSlice]:
    """The input partitions of a plan: consecutive remote slices of a topic partition packed together up to
    ``max_bytes`` (with ``minPartitions``, up to the remote bytes over that count, so the packing never
    leaves fewer inputs than asked for); broker slices stay one each. ``slices`` is in plan order."""
    budget = max_bytes
    if min_partitions:
        total = sum(slice_bytes(s) for s in slices if isinstance(s, RemoteSlice))
        budget = min(budget, max(1, -(-total // min_partitions)))
    out: list[InputSlice] = []
    group: list[RemoteSlice] = []
    size = 0

    def close() -> None:
        if len(group) == 1:
            out.append(group[0])
        elif group:
            out.append(SliceGroup(tuple(group)))
        group.clear()

    for s in slices:
        if not isinstance(s, RemoteSlice):
            close()
            out.append(s)
            continue
        n = slice_bytes(s)
        if group and ((group[0].topic, group[0].partition) != (s.topic, s.partition) or size + n > budget):
            close()
        if not group:
            size = 0
        group.append(s)
        size += n
    close()
    return out


@dataclass(frozen=True)
class PartitionSlices:
    """``latestPerKey``: every slice of one topic partition, in offset order, for one task.

    A key's latest record may be in any slice of its partition, and a tombstone in a later slice
    cancels a value in an earlier one, so the slices of a partition are reduced together: each to
    its latest record per key (tombstones kept), then those to the partition's (tombstones dropped).
    """

    topic: str
    partition: int
    slices: tuple[Slice, ...]


def by_partition(slices: Sequence[Slice]) -> list[PartitionSlices]:
    """The slices of a plan grouped per topic partition, each group in offset order."""
    groups: dict[TopicPartitionKey, list[Slice]] = {}
    for s in slices:
        groups.setdefault((s.topic, s.partition), []).append(s)
    return [PartitionSlices(topic, partition, tuple(sorted(group, key=_slice_order)))
            for (topic, partition), group in sorted(groups.items())]


def _slice_order(s: Slice) -> tuple[int, int]:
    """Offset order; the pieces of one remote segment (same offsets) by byte position."""
    return s.start_offset, getattr(s, "start_position", 0) or 0


@dataclass
class PartitionRange:
    topic: str
    partition: int
    topic_id: object
    start: int
    end: int
    earliest: int
    latest: int


@dataclass
class Pushdown:
    """What pushed filters allow: partitions, an offset interval, a timestamp lower bound."""

    partitions: frozenset[int] | None = None
    min_offset: int = 0
    max_offset: int | None = None  # exclusive
    min_timestamp_ms: int | None = None  # records with a smaller timestamp are not wanted
    empty: bool = False

    def allows_partition(self, partition: int) -> bool:
        return self.partitions is None or partition in self.partitions


@dataclass
class Plan:
    slices: list[Slice] = field(default_factory=list)
    ranges: dict[TopicPartitionKey, PartitionRange] = field(default_factory=dict)
    inputs: list[InputSlice] = field(default_factory=list)
    """The input partitions: ``slices`` packed (:func:`pack_slices`)."""

    def describe(self) -> str:
        remote = sum(1 for s in self.slices if isinstance(s, RemoteSlice))
        return f"{len(self.inputs)} input partitions: {remote} remote segment slices, " \
               f"{len(self.slices) - remote} broker slices over {len(self.ranges)} topic partitions"


# -- topics and offsets ---------------------------------------------------------------------------


def resolve_topics(cluster: KafkaCluster, opts: SourceOptions) -> dict[TopicPartitionKey, TopicInfo]:
    """The topic partitions the subscription names, with their topic ids."""
    if opts.subscription == "subscribePattern":
        md = cluster.metadata(None)
        pattern = re.compile(opts.pattern or "")
        topics = [t for name, t in md.topics.items() if not t.internal and pattern.fullmatch(name)]
        return {(t.name, p): t for t in topics for p in t.partitions}
    if opts.subscription == "subscribe":
        md = cluster.metadata(list(opts.topics))
        return {(t.name, p): t for t in md.topics.values() for p in t.partitions}
    md = cluster.metadata(sorted({t for t, _ in opts.assigned}))
    out = {}
    for topic, partition in opts.assigned:
        info = md.topics.get(topic)
        if info is None or partition not in info.partitions:
            raise ValueError(f"assigned partition {topic}-{partition} does not exist")
        out[(topic, partition)] = info
    return out


def _check_all_named(spec: OffsetSpec, keys: Iterable[TopicPartitionKey], option: str) -> None:
    named, wanted = set(spec.offsets), set(keys)
    if named != wanted:
        raise ValueError(f"If {option} contains specific offsets, you must specify all TopicPartitions.\n"
                         "Use -1 for latest, -2 for earliest.\n"
                         f"Specified: {sorted(named)} Assigned: {sorted(wanted)}")


def resolve_offsets(cluster: KafkaCluster, opts: SourceOptions, keys: Sequence[TopicPartitionKey],
                    spec: OffsetSpec, *, earliest: Mapping[TopicPartitionKey, int],
                    latest: Mapping[TopicPartitionKey, int], starting: bool) -> dict[TopicPartitionKey, int]:
    """Offsets for a start or end spec; timestamps go through ListOffsets (remote time indexes first)."""
    option = "startingOffsets" if starting else "endingOffsets"
    if spec.kind == "earliest":
        return {k: earliest[k] for k in keys}
    if spec.kind == "latest":
        return {k: latest[k] for k in keys}
    if spec.kind == "offsets":
        _check_all_named(spec, keys, option)
        return {k: earliest[k] if v == EARLIEST else latest[k] if v == LATEST else v for k, v in spec.offsets.items()}
    if spec.kind == "timestamps":
        _check_all_named(spec, keys, option.replace("Offsets", "OffsetsByTimestamp"))
        queries = dict(spec.offsets)
    else:
        queries = dict.fromkeys(keys, spec.timestamp)
    found = cluster.list_offsets(queries, opts.isolation_level) if queries else {}
    out = {}
    for k in keys:
        offset = found[k]
        if offset == -1:  # no record at or after the timestamp
            if starting and opts.timestamp_strategy == "error":
                raise ValueError(f"No offset matched from request of topic-partition {k[0]}-{k[1]} and timestamp "
                                 f"{queries[k]}. Set startingOffsetsByTimestampStrategy to 'latest' to start "
                                 "from the latest offset instead.")
            offset = latest[k]
        out[k] = offset
    return out


def checked_start(opts: SourceOptions, key: TopicPartitionKey, start: int, earliest: int) -> int:
    """A start below what the log still holds: Spark's failOnDataLoss (fail, or start at the earliest)."""
    if start >= earliest:
        return start
    if opts.fail_on_data_loss:
        raise StrataDataLossError(f"Cannot fetch offset {start} of {key[0]}-{key[1]}: the earliest available "
                                  f"offset is {earliest}. {DATA_LOSS_HINT}")
    return earliest


def partition_ranges(cluster: KafkaCluster, opts: SourceOptions, topics: Mapping[TopicPartitionKey, TopicInfo],
                     *, starting: OffsetSpec | None = None, ending: OffsetSpec | None = None,
                     ) -> dict[TopicPartitionKey, PartitionRange]:
    """[start, end) per partition, checked against what the log still holds."""
    keys = sorted(topics)
    if not keys:
        return {}
    earliest = cluster.list_offsets(dict.fromkeys(keys, EARLIEST_QUERY), opts.isolation_level)
    latest = cluster.list_offsets(dict.fromkeys(keys, LATEST_QUERY), opts.isolation_level)
    starts = resolve_offsets(cluster, opts, keys, starting or opts.starting, earliest=earliest, latest=latest,
                             starting=True)
    ends = resolve_offsets(cluster, opts, keys, ending or opts.ending, earliest=earliest, latest=latest,
                           starting=False)
    out = {}
    for k in keys:
        start, end = starts[k], min(ends[k], latest[k])
        start = checked_start(opts, k, start, earliest[k])
        if start > end:
            raise ValueError(f"Beginning offset {start} is after the ending offset {end} for topic {k[0]} "
                             f"partition {k[1]}. You either provided an invalid fromOffset, or the Kafka topic has "
                             "been damaged")
        out[k] = PartitionRange(k[0], k[1], topics[k].topic_id, start, end, earliest[k], latest[k])
    return out


def apply_pushdown(cluster: KafkaCluster, opts: SourceOptions, ranges: dict[TopicPartitionKey, PartitionRange],
                   pushdown: Pushdown | None) -> dict[TopicPartitionKey, PartitionRange]:
    """Narrow the ranges with pushed filters (a timestamp lower bound becomes an offset via ListOffsets)."""
    if pushdown is None:
        return ranges
    if pushdown.empty:
        return {k: replace(r, end=r.start) for k, r in ranges.items()}
    out = {k: r for k, r in ranges.items() if pushdown.allows_partition(k[1])}
    for r in out.values():
        r.start = max(r.start, pushdown.min_offset)
        if pushdown.max_offset is not None:
            r.end = min(r.end, pushdown.max_offset)
        r.end = max(r.end, r.start)
    if pushdown.min_timestamp_ms is not None and out:
        # Kafka's offsetsForTimes: the first offset whose timestamp is >= T, so every earlier record is older.
        found = cluster.list_offsets(dict.fromkeys(out, pushdown.min_timestamp_ms), opts.isolation_level)
        for k, r in out.items():
            first = found[k]
            r.start = r.end if first == -1 else max(r.start, min(first, r.end))
    return out


# -- remote segments ------------------------------------------------------------------------------


def rsm_settings(cluster: KafkaCluster, opts: SourceOptions) -> tuple[str | None, dict[str, str]]:
    """The RSM to open on executors: from the options, else as the broker reports it (DescribeConfigs)."""
    if opts.rsm_class:
        return opts.rsm_class, dict(opts.rsm_props)
    configs = cluster.broker_configs()
    if str(configs.get("remote.log.storage.system.enable", "false")).lower() != "true":
        return None, {}
    prefix = configs.get("remote.log.storage.manager.impl.prefix") or RSM_PREFIX
    props = {k[len(prefix):]: v for k, v in configs.items() if k.startswith(prefix) and v is not None}
    for key in opts.rsm_props:  # a key the job passes as PEM text replaces the broker's key file (not on executors)
        if key.startswith("encryption.key.pairs.") and key.endswith(".private.key"):
            props.pop(key[: -len("private.key")] + "public.key.file", None)
    props.update(opts.rsm_props)
    return configs.get(RSM_CLASS_KEY), props


@dataclass
class _SegmentPlan:
    md: RemoteLogSegmentMetadata
    start: int
    end: int  # exclusive offsets to read from this segment
    positions: list[tuple[int | None, int | None]] = field(default_factory=list)


def _cover(r: PartitionRange, chain: Sequence[RemoteLogSegmentMetadata]) -> tuple[list[_SegmentPlan],
                                                                                   list[tuple[int, int]]]:
    """Split [r.start, r.end) into remote segment pieces and the holes between them (broker ranges)."""
    segments, holes = [], []
    cursor = r.start
    previous_end = -1
    for md in chain:
        seg_lo, seg_hi = max(md.start_offset, previous_end + 1), md.end_offset + 1
        previous_end = md.end_offset
        lo, hi = max(cursor, seg_lo), min(r.end, seg_hi)
        if lo >= hi:
            continue
        if lo > cursor:
            holes.append((cursor, lo))
        segments.append(_SegmentPlan(md, lo, hi))
        cursor = hi
        if cursor >= r.end:
            break
    if cursor < r.end:
        holes.append((cursor, r.end))
    return segments, holes


def _positions(rsm: object, plan: _SegmentPlan, max_bytes: int) -> list[tuple[int | None, int | None]]:
    """Byte ranges for a segment's pieces; the offset index is read only when it is needed."""
    md = plan.md
    whole_start = plan.start == md.start_offset
    if md.segment_size_in_bytes <= max_bytes:
        return [(0 if whole_start else None, None)]
    index = OffsetIndexView(md.start_offset, read_index(rsm, md, IndexType.OFFSET))  # type: ignore[arg-type]
    start_position = 0 if whole_start else index.position_for(plan.start)
    end_position = md.segment_size_in_bytes
    if plan.end <= md.end_offset:  # stops inside the segment: no need to read past the batch holding end - 1
        # An entry (o, p) says the batch at p ends at o, so whatever lies at or after the next entry's
        # position starts after o: once o >= end - 1 the rest is not needed.
        for i in range(1, len(index.offsets)):
            if index.offsets[i - 1] >= plan.end - 1:
                end_position = index.positions[i]
                break
    cuts = [start_position, *index.split_positions(start_position, end_position, max_bytes), end_position]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False)]


def _aborted_for(txns: Sequence[tuple[int, int, int]], lo: int, hi: int) -> tuple[tuple[int, int, int], ...]:
    """The aborted transactions overlapping [lo, hi), with their last offsets (a reader that starts
    after a transaction ended must not apply it to the same producer's later batches)."""
    return tuple(sorted((pid, first, last) for pid, first, last in txns if first < hi and last >= lo))


def plan_read(cluster: KafkaCluster, opts: SourceOptions, ranges: Mapping[TopicPartitionKey, PartitionRange],
              metadata: RemoteLogMetadataReader | None = None,
              rsm: tuple[str | None, Mapping[str, str]] | None = None) -> Plan:
    """The input partitions for ``ranges``: remote segment slices plus broker slices."""
    rsm_class, rsm_props = rsm if rsm is not None else (rsm_settings(cluster, opts) if opts.direct_remote_reads
                                                         else (None, {}))
    settings = ReadSettings(opts.bootstrap, opts.include_headers, opts.fail_on_data_loss, opts.isolation_level,
                            opts.fetch_max_bytes, opts.timeout_s, rsm_class,
                            tuple(sorted((str(k), str(v)) for k, v in rsm_props.items())),
                            tuple(sorted(f"{host}:{port}" for host, port in cluster.metadata_cache.brokers.values())),
                            opts.security)
    plan = Plan(ranges=dict(ranges))
    wanted = {k: r for k, r in ranges.items() if r.start < r.end}
    chains: dict[TopicPartitionKey, list[RemoteLogSegmentMetadata]] = {}
    if rsm_class and opts.direct_remote_reads and wanted:
        metadata = metadata or RemoteLogMetadataReader(cluster)
        tips = {k: TopicIdPartition(r.topic_id, r.topic, r.partition) for k, r in wanted.items()}  # type: ignore[arg-type]
        metadata.poll(tips.values())
        chains = {k: metadata.copied_segments(tip) for k, tip in tips.items()}
    store = open_rsm(rsm_class, rsm_props) if rsm_class and any(chains.values()) else None

    per_partition: list[tuple[TopicPartitionKey, list[_SegmentPlan], list[tuple[int, int]]]] = []
    for k, r in sorted(wanted.items()):
        segments, holes = _cover(r, chains.get(k, []))
        per_partition.append((k, segments, holes))

    jobs = [seg for _, segments, _ in per_partition for seg in segments]
    if jobs and store is not None:
        with ThreadPoolExecutor(max_workers=min(8, len(jobs))) as pool:  # index reads overlap (S3 latency)
            for seg, positions in zip(jobs, pool.map(lambda s: _positions(store, s, opts.max_bytes_per_partition),
                                                     jobs), strict=True):
                seg.positions = positions
    txns: dict[TopicPartitionKey, list[tuple[int, int, int]]] = {}
    if opts.isolation_level == 1 and store is not None:
        txns, lost = _remote_aborted_transactions(cluster, opts, store, per_partition)
        if lost:  # failOnDataLoss=false: the broker has deleted them (retention) since they were listed
            per_partition = [(k, [seg for seg in segments if id(seg) not in lost], holes)
                             for k, segments, holes in per_partition]

    for k, segments, holes in per_partition:
        for seg in segments:
            aborted = _aborted_for(txns.get(k, ()), seg.start, seg.end) if opts.isolation_level == 1 else None
            for start_position, end_position in seg.positions:
                plan.slices.append(RemoteSlice(k[0], k[1], seg.md, seg.start, seg.end, start_position, end_position,
                                               aborted, settings))
        for lo, hi in holes:
            plan.slices.append(BrokerSlice(k[0], k[1], lo, hi, settings))
    _split_broker_slices(plan, opts.min_partitions)
    plan.slices.sort(key=lambda s: (s.topic, s.partition, *_slice_order(s)))
    plan.inputs = pack_slices(plan.slices, opts.max_bytes_per_partition, opts.min_partitions)
    return plan


def _remote_aborted_transactions(cluster: KafkaCluster, opts: SourceOptions, store: object,
                                 per_partition: Sequence[tuple[TopicPartitionKey, list[_SegmentPlan],
                                                               list[tuple[int, int]]]],
                                 ) -> tuple[dict[TopicPartitionKey, list[tuple[int, int, int]]], set[int]]:
    """The aborted transactions a read_committed read of the remote segments must drop.

    Kafka records an aborted transaction in the ``.txnindex`` of the segment holding its ABORT
    marker, which may come after the data it aborts: in a later remote segment, or in the local
    tail the broker has not uploaded yet (the marker is often in the active segment). So two
    sources together give every transaction whose marker is at or after the first segment read:

    - the ``.txnindex`` of each segment read, from the store (markers inside the range read;
      KIP-1058's ``txn_idx_empty`` skips the empty ones without a request);
    - for each run of contiguous segments read, one read_committed Fetch of the run's last offset
      (one batch): the broker answers with the aborted transactions whose marker is at or after
      that offset, from its remote indexes and then its local segments' (Kafka's
      ``collectAbortedTransactions``, complete up to the last stable offset). Every record read is
      below the plan's end, itself at most the LSO of plan time, so those markers exist already.

    A Fetch answer carries no last offset: such an entry gets the run's last offset, a lower bound
    of its real one, which is all a slice starting at or before it needs.

    Returns the transactions per partition (producer id, first offset, last offset) and the
    ``id()`` of segment plans to leave out: under ``failOnDataLoss=false``, runs the broker has
    deleted since they were listed (with ``true`` that raises :class:`StrataDataLossError`).
    """
    out: dict[TopicPartitionKey, list[tuple[int, int, int]]] = {}
    lost: set[int] = set()
    indexed = [seg for _, segments, _ in per_partition for seg in segments if not seg.md.txn_idx_empty]
    entries: dict[int, list[tuple[int, int, int]]] = {}
    if indexed:
        def read(seg: _SegmentPlan) -> list[tuple[int, int, int]]:
            md = seg.md
            return aborted_transactions(read_index(store, md, IndexType.TRANSACTION),  # type: ignore[arg-type]
                                        f"{md.remote_log_segment_id}.txnindex")

        with ThreadPoolExecutor(max_workers=min(8, len(indexed))) as pool:  # index reads overlap (S3 latency)
            for seg, found in zip(indexed, pool.map(read, indexed), strict=True):
                entries[id(seg)] = found
    for k, segments, _ in per_partition:
        if not segments:
            continue
        txns: list[tuple[int, int, int]] = []
        for seg in segments:
            txns.extend(entries.get(id(seg), ()))
        for run in _runs(segments):
            last = run[-1].end - 1
            found = _aborted_after(cluster, opts, k, last)
            if found is None:
                lost.update(id(seg) for seg in run)
                continue
            txns.extend((pid, first, last) for pid, first in found)
        out[k] = sorted(set(txns))
    return out, lost


def _runs(segments: Sequence[_SegmentPlan]) -> list[list[_SegmentPlan]]:
    """Segment plans split where the broker reads a hole between two of them."""
    runs: list[list[_SegmentPlan]] = []
    for seg in segments:
        if runs and runs[-1][-1].end == seg.start:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    return runs


def _aborted_after(cluster: KafkaCluster, opts: SourceOptions, key: TopicPartitionKey,
                   offset: int) -> list[tuple[int, int]] | None:
    """(producer id, first offset) of the aborted transactions a read_committed Fetch at ``offset`` reports:
    those whose ABORT marker is at or after ``offset``, wherever the broker keeps it (remote or local).

    The broker reports them only with records, so an empty answer (a remote read that ran out of
    ``remote.fetch.max.wait.ms``) is asked again, for up to ``kafka.request.timeout.ms``. None: the
    offset was deleted meanwhile and ``failOnDataLoss`` is false.
    """
    topic, partition = key
    deadline = time.monotonic() + opts.timeout_s
    while True:
        fetched = cluster.fetch(topic, partition, offset, max_bytes=1, isolation_level=1)
        code = fetched.error_code
        if code == OFFSET_OUT_OF_RANGE:
            what = (f"offset {offset} of {topic}-{partition}, the end of remote segments planned to be read, "
                    "was deleted before it was read")
            if opts.fail_on_data_loss:
                raise StrataDataLossError(f"{what}. {DATA_LOSS_HINT}")
            log.warning("%s; its segments are skipped (failOnDataLoss=false)", what)
            return None
        if code != 0:
            raise RuntimeError(f"read_committed Fetch of {topic}-{partition} at offset {offset} (for the aborted "
                               f"transactions of its remote segments): error {code}")
        if fetched.records:
            return list(fetched.aborted)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no records from a read_committed Fetch of {topic}-{partition} at offset {offset} "
                               f"for {opts.timeout_s:g} s: the aborted transactions of its remote segments are "
                               "unknown")
        time.sleep(_EMPTY_FETCH_BACKOFF_S)


def _split_broker_slices(plan: Plan, min_partitions: int | None) -> None:
    """Spark's ``minPartitions``: cut the biggest broker ranges until there are enough input partitions."""
    if not min_partitions or len(plan.slices) >= min_partitions:
        return
    broker = [s for s in plan.slices if isinstance(s, BrokerSlice)]
    others = [s for s in plan.slices if not isinstance(s, BrokerSlice)]
    total = sum(s.end_offset - s.start_offset for s in broker)
    budget = min_partitions - len(others)
    if total <= 0 or budget <= len(broker):
        return
    out: list[Slice] = list(others)
    for s in broker:
        n = max(1, round(budget * (s.end_offset - s.start_offset) / total))
        step = max(1, -(-(s.end_offset - s.start_offset) // n))
        for lo in range(s.start_offset, s.end_offset, step):
            out.append(replace(s, start_offset=lo, end_offset=min(s.end_offset, lo + step)))
    plan.slices = out
