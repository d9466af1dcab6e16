"""``readStream.format("strata")``: micro-batches over offset ranges, remote segments read directly.

Offsets are Spark's Kafka source offsets, JSON per topic and partition (``{"events": {"0": 1500}}``),
so checkpoints read like Spark's own. Each micro-batch is planned like a batch read of
[previous end, new end): whatever is already in the remote tier by then is read from the object
store. The reader lives on the driver between micro-batches and keeps its replay of
``__remote_log_metadata`` and its broker connections, so planning a batch reads only the metadata
appended since the last one. In a cluster every request follows the partitions' leaders
(:mod:`strata.spark.failover`): a leader that dies between two micro-batches, or while one is
planned or read, costs a retry, not the query, and the offsets of the checkpoint are the same
whichever broker answered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from strata.spark.options import SourceOptions, parse_source_options, security_of

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]


def to_offsets(positions: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_offsets(offsets: dict[str, Any] | None) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in (offsets or {}).items() for p, o in parts.items()}


def rate_limit(start: dict[tuple[str, int], int], end: dict[tuple[str, int], int],
               limit: int) -> dict[tuple[str, int], int]:
    """Spark's ``KafkaMicroBatchStream.rateLimit``: the limit shared in proportion to what each partition has."""
    sizes = {k: end[k] - start.get(k, end[k]) for k in end}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= limit:
        return dict(end)
    out = {}
    for k, e in end.items():
        begin = start.get(k, e)
        size = sizes[k]
        if size <= 0:
            out[k] = e
            continue
        prorate = limit * (size / total)
        step = int(-(-prorate // 1)) if prorate < 1 else int(prorate // 1)
        out[k] = min(e, begin + step)
    return out


class StrataStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts: SourceOptions = parse_source_options(options, streaming=True)
        self._target: dict[tuple[str, int], int] | None = None
        self._state: dict[str, Any] = {}  # cluster connection, metadata replay, rsm settings (driver only)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = {}  # sockets and replays stay where they were made
        return state

    # -- driver-side state --

    def _cluster(self) -> Any:
        cluster = self._state.get("cluster")
        if cluster is None:
            from strata.spark.failover import FailoverCluster

            cluster = FailoverCluster(self.opts.bootstrap, timeout_s=self.opts.timeout_s,
                                      client_id="strata-spark-stream", security=security_of(self.opts.security))
            self._state["cluster"] = cluster
        return cluster

    def _topics(self) -> dict[tuple[str, int], Any]:
        from strata.spark.planning import resolve_topics

        return resolve_topics(self._cluster(), self.opts)

    def _ends(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not keys:
            return {}
        return self._cluster().list_offsets(dict.fromkeys(keys, -1), self.opts.isolation_level)

    def _earliest(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not keys:
            return {}
        return self._cluster().list_offsets(dict.fromkeys(keys, -2), self.opts.isolation_level)

    # -- Spark's stream reader API --

    def initialOffset(self) -> dict:
        from strata.spark.planning import resolve_offsets

        keys = sorted(self._topics())
        earliest, latest = self._earliest(keys), self._ends(keys)
        starts = resolve_offsets(self._cluster(), self.opts, keys, self.opts.starting, earliest=earliest,
                                 latest=latest, starting=True)
        return to_offsets(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """The end of what ``availableNow`` reads: the partitions' ends now."""
        self._target = self._ends(sorted(self._topics()))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_offsets(start)
        keys = sorted(set(self._topics()) | set(begin))
        ends = self._target if self._target is not None else self._ends(keys)
        new = [k for k in ends if k not in begin]
        if new:  # partitions added since the last batch start at their earliest offset (Spark's rule)
            begin.update(self._earliest(new))
        ends = {k: max(v, begin.get(k, v)) for k, v in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(begin, ends, limit.max_rows)
        return to_offsets(ends)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        from strata.client.remote_metadata import RemoteLogMetadataReader
        from strata.spark.planning import PartitionRange, checked_start, plan_read, rsm_settings

        begin, stop = from_offsets(start), from_offsets(end)
        cluster = self._cluster()
        topics = self._topics()
        missing = [k for k in stop if k not in begin]
        begin.update(self._earliest(missing) if missing else {})
        earliest = self._earliest(sorted(k for k in stop if k in topics))
        ranges = {}
        for k, e in stop.items():
            info = topics.get(k)
            if info is None:
                continue  # the topic or partition is gone: nothing left to read
            s = checked_start(self.opts, k, begin[k], earliest.get(k, begin[k]))
            ranges[k] = PartitionRange(k[0], k[1], info.topic_id, s, max(s, e), earliest.get(k, s), e)
        if "rsm" not in self._state:
            self._state["rsm"] = rsm_settings(cluster, self.opts) if self.opts.direct_remote_reads else (None, {})
            self._state["metadata"] = RemoteLogMetadataReader(cluster)
        plan = plan_read(cluster, self.opts, ranges, metadata=self._state["metadata"], rsm=self._state["rsm"])
        return [InputPartition(s) for s in plan.inputs]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from strata.spark.reading import read_slice

        return read_slice(partition.value)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint is the position (Spark calls this lazily, one batch late)."""

    def stop(self) -> None:
        cluster = self._state.pop("cluster", None)
        if cluster is not None:
            cluster.close()
        self._state.clear()
