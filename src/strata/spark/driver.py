"""Planning entry points: a batch plan from options, and a summary of it for people.

``plan_batch`` runs where Spark plans the query (a Python planner worker), so it opens its own
connection to the cluster and closes it before returning; only the plan's slices travel on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from strata.spark.failover import FailoverCluster
from strata.spark.options import SourceOptions, parse_source_options, security_of
from strata.spark.planning import (
    BrokerSlice,
    Plan,
    Pushdown,
    RemoteSlice,
    apply_pushdown,
    by_partition,
    partition_ranges,
    plan_read,
    resolve_topics,
)


def plan_batch(opts: SourceOptions, pushdown: Pushdown | None = None) -> Plan:
    if opts.latest_per_key and opts.min_partitions:  # one task per topic partition reads all its slices
        opts = replace(opts, min_partitions=None)
    with FailoverCluster(opts.bootstrap, timeout_s=opts.timeout_s, client_id="strata-spark-driver",
                         security=security_of(opts.security)) as cluster:
        topics = resolve_topics(cluster, opts)
        ranges = apply_pushdown(cluster, opts, partition_ranges(cluster, opts, topics), pushdown)
        return plan_read(cluster, opts, ranges)


@dataclass(frozen=True)
class PlanSummary:
    """What a batch read of these options would read from each tier."""

    input_partitions: int
    remote_slices: int
    remote_segments: int
    remote_bytes: int
    remote_offsets: int
    broker_slices: int
    broker_offsets: int

    def __str__(self) -> str:
        return (f"{self.input_partitions} input partitions: {self.remote_slices} from {self.remote_segments} remote "
                f"segments ({self.remote_offsets:,} offsets, {self.remote_bytes / 2**20:,.1f} MiB straight from the "
                f"object store), {self.broker_slices} from the broker ({self.broker_offsets:,} offsets)")


def summarize(plan: Plan, latest_per_key: bool = False) -> PlanSummary:
    """``latest_per_key``: the input partitions are the topic partitions (each task reduces all its slices)."""
    remote = [s for s in plan.slices if isinstance(s, RemoteSlice)]
    broker = [s for s in plan.slices if isinstance(s, BrokerSlice)]
    segments = {s.segment.remote_log_segment_id: s for s in remote}
    remote_bytes = 0
    for s in remote:
        start = s.start_position or 0
        end = s.end_position if s.end_position is not None else s.segment.segment_size_in_bytes
        remote_bytes += max(0, end - start)
    remote_offsets = sum(s.end_offset - s.start_offset for s in segments.values())
    inputs = len(by_partition(plan.slices)) if latest_per_key else len(plan.inputs)
    return PlanSummary(inputs, len(remote), len(segments), remote_bytes, remote_offsets, len(broker),
                       sum(s.end_offset - s.start_offset for s in broker))


def explain(options: dict[str, str]) -> PlanSummary:
    """Plan a batch read of ``options`` (the same as ``spark.read.format("strata").options(...)``) and
    say what it would read from each tier, without reading anything."""
    opts = parse_source_options(options)
    return summarize(plan_batch(opts), opts.latest_per_key)
