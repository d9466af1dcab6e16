"""A tiny thread-safe metrics registry rendered in Prometheus text format (0.0.4), no dependency.

Kafka exposes its metrics as JMX MBeans; operators scrape them through the Prometheus JMX
exporter. Strata has no JVM, so it renders the same metrics itself, named the way the exporter
names them (:func:`prometheus_name`): ``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec``
becomes ``kafka_server_BrokerTopicMetrics_BytesInPerSec``. Dashboards and alerts written for a
Kafka broker then only change the job, not the metric names.

Three kinds, each optionally labelled (``topic``):

- :class:`Meter` (Kafka's yammer Meter, the ``*PerSec`` metrics): a monotonic count exported as a
  Prometheus counter ``<name>_total`` plus a ``<name>_OneMinuteRate`` gauge. Marking is a lock and
  an integer add, because it runs on the produce and fetch paths; the rate is computed on read,
  from the counts seen at earlier reads (:meth:`Meter.one_minute_rate`).
- :class:`Gauge`: a value that is set, or a callback read at scrape time (queue depths, idleness).
- :class:`Timer`: count, sum and max of durations in ms, exported as a summary without quantiles
  (``_count``/``_sum``) plus a ``<name>_max`` gauge.

:class:`BrokerTopicMetrics` and :class:`RemoteStorageMetrics` pre-declare the exact names of
Kafka's tiered-storage metrics (KIP-405, ``RemoteStorageMetrics.java``).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RATE_WINDOW_S = 60.0

LabelKey = tuple[tuple[str, str], ...]
Number = int | float

_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_:]")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def prometheus_name(mbean: str) -> str:
    """The JMX exporter's name for a yammer MBean: ``domain:type=T,name=N`` -> ``domain_T_N``.

    Dots and other characters Prometheus does not allow become ``_``; any other key=value
    properties (``topic=``, ``partition=``) are labels, not part of the name, and are dropped here.
    """
    domain, sep, props = mbean.partition(":")
    if not sep:
        return _INVALID_NAME_CHARS.sub("_", mbean)
    values = dict(p.split("=", 1) for p in props.split(",") if "=" in p)
    parts = [domain] + [values[k] for k in ("type", "name") if k in values]
    return _INVALID_NAME_CHARS.sub("_", "_".join(parts))


def _label_key(labels: Mapping[str, str] | None) -> LabelKey:
    if not labels:
        return ()
    for name in labels:
        if not _LABEL_NAME.match(name) or name.startswith("__"):
            raise ValueError(f"invalid label name {name!r}")
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_labels(key: LabelKey) -> str:
    if not key:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label_value(v)}"' for k, v in key) + "}"


def _format_value(value: Number) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class Meter:
    """A monotonic count of events (or bytes); ``mark`` is cheap enough for the request path.

    The one-minute rate is derived from (time, count) samples taken when the rate is read, not
    when events are marked, so marking never calls the clock. It is the count over a window of at
    least a minute divided by the window: with Prometheus scraping every few seconds that is the
    last minute (slightly more); with rarer reads the window reaches back to the previous read.
    During the first minute it ramps up, like Kafka's EWMA, instead of spiking.
    """

    __slots__ = ("_count", "_lock", "_samples", "_clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._count = 0
        self._lock = threading.Lock()
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque([(clock(), 0)])

    def mark(self, n: int = 1) -> None:
        with self._lock:
            self._count += n

    @property
    def count(self) -> int:
        return self._count

    def one_minute_rate(self) -> float:
        """Events per second over about the last minute (see the class docstring)."""
        now = self._clock()
        with self._lock:
            count = self._count
            samples = self._samples
            if now - samples[-1][0] >= 1.0:
                samples.append((now, count))
            # keep one sample at or before the window start, so the window is a full minute
            while len(samples) >= 2 and samples[1][0] <= now - RATE_WINDOW_S:
                samples.popleft()
            t0, c0 = samples[0]
        # a full minute at least: right after start, 100 events in 1 ms is not 100,000 per second
        return (count - c0) / max(now - t0, RATE_WINDOW_S)


class Gauge:
    """A value that is either set or read from a callback at scrape time.

    A callback that raises or returns None makes the series absent from that scrape (logged at
    debug), because a scrape must never fail for one broken metric.
    """

    __slots__ = ("_value", "_fn", "_lock")

    def __init__(self, fn: Callable[[], Number | None] | None = None) -> None:
        self._value: Number = 0
        self._fn = fn
        self._lock = threading.Lock()

    def set(self, value: Number) -> None:
        with self._lock:
            self._value = value
            self._fn = None

    def add(self, delta: Number) -> None:
        with self._lock:
            self._value += delta

    def set_function(self, fn: Callable[[], Number | None] | None) -> None:
        """Read ``fn()`` at every scrape instead of a stored value (None: back to the stored value)."""
        with self._lock:
            self._fn = fn

    def value(self) -> Number | None:
        fn = self._fn
        if fn is None:
            return self._value
        try:
            return fn()
        except Exception:
            log.debug("gauge callback failed", exc_info=True)
            return None


class Timer:
    """Durations in ms: count, sum and (lifetime) max, like the fields of a yammer Timer we export."""

    __slots__ = ("_count", "_sum", "_max", "_lock")

    def __init__(self) -> None:
        self._count = 0
        self._sum = 0.0
        self._max = 0.0
        self._lock = threading.Lock()

    def update(self, ms: float) -> None:
        with self._lock:
            self._count += 1
            self._sum += ms
            if ms > self._max:
                self._max = ms

    @contextmanager
    def time(self) -> Iterator[None]:
        """Time the ``with`` block (failures included: Kafka's timer covers every ``rlm.read``)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.update((time.perf_counter() - start) * 1000.0)

    def snapshot(self) -> tuple[int, float, float]:
        """(count, sum ms, max ms), consistent with each other."""
        with self._lock:
            return self._count, self._sum, self._max

    @property
    def count(self) -> int:
        return self._count


class _Family:
    """One exported metric name: its TYPE, HELP and labelled children, read by ``read``."""

    __slots__ = ("name", "kind", "help", "read", "children", "metric_class")

    def __init__(self, name: str, kind: str, help_text: str, metric_class: type,
                 read: Callable[[Any], list[tuple[str, Number | None]]]) -> None:
        self.name = name
        self.kind = kind
        self.help = help_text
        self.metric_class = metric_class
        self.read = read
        self.children: dict[LabelKey, Any] = {}


def _read_counter(m: Meter) -> list[tuple[str, Number | None]]:
    return [("", m.count)]


def _read_rate(m: Meter) -> list[tuple[str, Number | None]]:
    return [("", m.one_minute_rate())]


def _read_gauge(g: Gauge) -> list[tuple[str, Number | None]]:
    return [("", g.value())]


def _read_summary(t: Timer) -> list[tuple[str, Number | None]]:
    count, total, _ = t.snapshot()
    return [("_count", count), ("_sum", total)]


def _read_max(t: Timer) -> list[tuple[str, Number | None]]:
    return [("", t.snapshot()[2])]


class Registry:
    """Get-or-create metrics by (name, labels) and render them all for a scrape.

    Names are the base names (no ``_total``); asking again for the same name and labels returns
    the same object, so callers may look metrics up instead of keeping references. Families are
    rendered in registration order and their series in creation order.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._clock = clock

    def _child(self, family_name: str, kind: str, help_text: str, cls: type,
               read: Callable[[Any], list[tuple[str, Number | None]]], key: LabelKey,
               factory: Callable[[], Any]) -> Any:
        fam = self._families.get(family_name)
        if fam is None:
            fam = self._families[family_name] = _Family(family_name, kind, help_text, cls, read)
        elif fam.metric_class is not cls or fam.read is not read:
            raise ValueError(f"metric {family_name} is already registered as a {fam.kind} "
                             f"of {fam.metric_class.__name__}")
        child = fam.children.get(key)
        if child is None:
            child = fam.children[key] = factory()
        return child

    def meter(self, name: str, help_text: str = "", labels: Mapping[str, str] | None = None) -> Meter:
        """A meter exported as counter ``<name>_total`` and gauge ``<name>_OneMinuteRate``."""
        key = _label_key(labels)
        with self._lock:
            m = self._child(name + "_total", "counter", help_text, Meter, _read_counter, key,
                            lambda: Meter(self._clock))
            self._child(name + "_OneMinuteRate", "gauge", f"{help_text} (per second, last minute)".strip(),
                        Meter, _read_rate, key, lambda: m)
        return m

    def gauge(self, name: str, help_text: str = "", labels: Mapping[str, str] | None = None,
              fn: Callable[[], Number | None] | None = None) -> Gauge:
        """A gauge; ``fn`` (when given) replaces the callback of an existing one too."""
        key = _label_key(labels)
        with self._lock:
            g: Gauge = self._child(name, "gauge", help_text, Gauge, _read_gauge, key, lambda: Gauge(fn))
        if fn is not None:
            g.set_function(fn)
        return g

    def timer(self, name: str, help_text: str = "", labels: Mapping[str, str] | None = None) -> Timer:
        """A timer exported as summary ``<name>`` (``_count``, ``_sum`` in ms) and gauge ``<name>_max``."""
        key = _label_key(labels)
        with self._lock:
            t = self._child(name, "summary", help_text, Timer, _read_summary, key, Timer)
            self._child(name + "_max", "gauge", f"{help_text} (max ms)".strip(), Timer, _read_max, key,
                        lambda: t)
        return t

    def remove(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Drop one series of the metric registered as ``name`` (e.g. a deleted topic's)."""
        key = _label_key(labels)
        with self._lock:
            for family_name in (name, name + "_total", name + "_OneMinuteRate", name + "_max"):
                fam = self._families.get(family_name)
                if fam is not None and (family_name == name or fam.metric_class is not Gauge):
                    fam.children.pop(key, None)

    def render(self) -> str:
        """Every series in Prometheus text exposition format 0.0.4.

        Values are read outside the registry lock: gauge callbacks may take other locks (the
        reader pool's, a partition's) and must not be able to deadlock against registration.
        """
        with self._lock:
            families = [(f, list(f.children.items())) for f in self._families.values()]
        out: list[str] = []
        for fam, children in families:
            lines: list[str] = []
            for key, metric in children:
                labels = _format_labels(key)
                for suffix, value in fam.read(metric):
                    if value is None:
                        continue
                    lines.append(f"{fam.name}{suffix}{labels} {_format_value(value)}")
            if not lines:
                continue
            out.append(f"# HELP {fam.name} {_escape_help(fam.help or fam.name)}")
            out.append(f"# TYPE {fam.name} {fam.kind}")
            out.extend(lines)
        return "\n".join(out) + "\n" if out else ""


# -- Kafka's tiered-storage metrics ---------------------------------------------------------------

BROKER_TOPIC_METRICS = "kafka_server_BrokerTopicMetrics"

#: meter name -> HELP text; every one exists per topic (label ``topic``) and for all topics.
TOPIC_METERS: dict[str, str] = {
    "BytesInPerSec": "Bytes appended by producers.",
    "BytesOutPerSec": "Bytes sent to fetchers.",
    "MessagesInPerSec": "Records appended by producers.",
    "ReplicationBytesInPerSec": "Bytes this broker's replica fetchers appended from leaders (Kafka's aggregate; "
                                "Strata labels each topic's share too).",
    "ReplicationBytesOutPerSec": "Bytes sent to followers' fetches (not counted in BytesOutPerSec, as in Kafka).",
    "RemoteCopyBytesPerSec": "Bytes uploaded to remote storage.",
    "RemoteCopyRequestsPerSec": "Segment upload attempts.",
    "RemoteCopyErrorsPerSec": "Failed segment uploads.",
    "RemoteFetchBytesPerSec": "Bytes read from remote storage.",
    "RemoteFetchRequestsPerSec": "Remote reads.",
    "RemoteFetchErrorsPerSec": "Failed remote reads.",
    "RemoteDeleteRequestsPerSec": "Remote segment deletes.",
    "RemoteDeleteErrorsPerSec": "Failed remote segment deletes.",
    "BuildRemoteLogAuxStateRequestsPerSec": "Followers' rebuilds of their log state from remote storage.",
    "BuildRemoteLogAuxStateErrorsPerSec": "Failed rebuilds of a follower's log state from remote storage.",
    "RemoteLogCleanerSegmentsReplacedPerSec": "Remote segments of compacted topics rewritten by the log cleaner "
                                              "(Strata: KIP-1272).",
    "RemoteLogCleanerBytesRewrittenPerSec": "Bytes the log cleaner uploaded again for compacted topics "
                                            "(Strata: KIP-1272).",
}

#: per-partition gauge name -> HELP text; exported summed per topic and over all topics.
PARTITION_GAUGES: dict[str, str] = {
    "RemoteCopyLagBytes": "Bytes not yet uploaded, excluding the active segment.",
    "RemoteCopyLagSegments": "Segments not yet uploaded, excluding the active segment.",
    "RemoteDeleteLagBytes": "Bytes pending deletion from remote storage.",
    "RemoteDeleteLagSegments": "Segments pending deletion from remote storage.",
    "RemoteLogMetadataCount": "Remote log segment metadata entries (not DELETE_SEGMENT_FINISHED).",
    "RemoteLogSizeBytes": "Bytes of COPY_SEGMENT_FINISHED and DELETE_SEGMENT_STARTED remote segments.",
    "RemoteLogSizeComputationTime": "Time taken to compute the remote log size, ms.",
}


class TopicMeter:
    """A Kafka ``BrokerTopicMetrics`` meter: marking a topic's series also marks the aggregate."""

    def __init__(self, registry: Registry, name: str, help_text: str) -> None:
        self.name = name
        self._registry = registry
        self._help = help_text
        self.all_topics = registry.meter(name, help_text)
        self._by_topic: dict[str, Meter] = {}

    def for_topic(self, topic: str) -> Meter:
        m = self._by_topic.get(topic)
        if m is None:  # races only create the same registry child twice, which get-or-create dedups
            m = self._by_topic[topic] = self._registry.meter(self.name, self._help, {"topic": topic})
        return m

    def mark(self, topic: str | None, n: int = 1) -> None:
        """Count ``n`` for ``topic`` and for all topics (``topic=None``: the aggregate only)."""
        if topic is not None:
            self.for_topic(topic).mark(n)
        self.all_topics.mark(n)

    def count(self, topic: str | None = None) -> int:
        if topic is None:
            return self.all_topics.count
        m = self._by_topic.get(topic)
        return 0 if m is None else m.count

    def remove_topic(self, topic: str) -> None:
        if self._by_topic.pop(topic, None) is not None:
            self._registry.remove(self.name, {"topic": topic})


class PartitionGauge:
    """A gauge recorded per (topic, partition) and exported as sums, like Kafka's BrokerTopicStats.

    Kafka has no partition tag on these: ``recordRemoteCopyLagBytes(topic, partition, v)`` keeps a
    per-partition value and the topic gauge reports the sum. Sums are kept up to date on each
    record, so a scrape costs one read per topic and no walk over partitions.
    """

    def __init__(self, registry: Registry, name: str, help_text: str) -> None:
        self.name = name
        self._registry = registry
        self._help = help_text
        self._lock = threading.Lock()
        self._values: dict[tuple[str, int], Number] = {}
        self._topic_sums: dict[str, Number] = {}
        self._partitions_per_topic: dict[str, int] = {}
        self._total: Number = 0
        registry.gauge(name, help_text, fn=self.value)

    def record(self, topic: str, partition: int, value: Number) -> None:
        key = (topic, partition)
        with self._lock:  # lock order: this lock, then the registry's (render takes neither together)
            old = self._values.get(key)
            if old is None:
                count = self._partitions_per_topic.get(topic, 0)
                self._partitions_per_topic[topic] = count + 1
                if count == 0:
                    self._registry.gauge(self.name, self._help, {"topic": topic}, fn=lambda: self.value(topic))
                old = 0
            self._values[key] = value
            self._topic_sums[topic] = self._topic_sums.get(topic, 0) + value - old
            self._total += value - old

    def remove(self, topic: str, partition: int) -> None:
        """Forget a partition (no longer led, deleted); its topic's series goes with its last one."""
        with self._lock:
            old = self._values.pop((topic, partition), None)
            if old is None:
                return
            self._total -= old
            left = self._partitions_per_topic[topic] - 1
            if left:
                self._partitions_per_topic[topic] = left
                self._topic_sums[topic] -= old
            else:
                del self._partitions_per_topic[topic]
                del self._topic_sums[topic]
                self._registry.remove(self.name, {"topic": topic})

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            partitions = [p for (t, p) in self._values if t == topic]
        for p in partitions:
            self.remove(topic, p)

    def value(self, topic: str | None = None, partition: int | None = None) -> Number:
        """The sum over all topics, over one topic, or one partition's value (0 when unknown)."""
        with self._lock:
            if topic is None:
                return self._total
            if partition is None:
                return self._topic_sums.get(topic, 0)
            return self._values.get((topic, partition), 0)


class BrokerTopicMetrics:
    """``kafka.server:type=BrokerTopicMetrics`` with Kafka's exact names as attributes.

    Meters: ``metrics.RemoteCopyBytesPerSec.mark(topic, n)``. Per-partition gauges:
    ``metrics.RemoteCopyLagBytes.record(topic, partition, value)``. Create one per registry (the
    per-partition values live here, not in the registry).
    """

    BytesInPerSec: TopicMeter
    BytesOutPerSec: TopicMeter
    MessagesInPerSec: TopicMeter
    ReplicationBytesInPerSec: TopicMeter
    ReplicationBytesOutPerSec: TopicMeter
    RemoteCopyBytesPerSec: TopicMeter
    RemoteCopyRequestsPerSec: TopicMeter
    RemoteCopyErrorsPerSec: TopicMeter
    RemoteFetchBytesPerSec: TopicMeter
    RemoteFetchRequestsPerSec: TopicMeter
    RemoteFetchErrorsPerSec: TopicMeter
    RemoteDeleteRequestsPerSec: TopicMeter
    RemoteDeleteErrorsPerSec: TopicMeter
    BuildRemoteLogAuxStateRequestsPerSec: TopicMeter
    BuildRemoteLogAuxStateErrorsPerSec: TopicMeter
    RemoteLogCleanerSegmentsReplacedPerSec: TopicMeter
    RemoteLogCleanerBytesRewrittenPerSec: TopicMeter
    RemoteCopyLagBytes: PartitionGauge
    RemoteCopyLagSegments: PartitionGauge
    RemoteDeleteLagBytes: PartitionGauge
    RemoteDeleteLagSegments: PartitionGauge
    RemoteLogMetadataCount: PartitionGauge
    RemoteLogSizeBytes: PartitionGauge
    RemoteLogSizeComputationTime: PartitionGauge

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.meters: dict[str, TopicMeter] = {}
        self.partition_gauges: dict[str, PartitionGauge] = {}
        for name, help_text in TOPIC_METERS.items():
            m = self.meters[name] = TopicMeter(registry, f"{BROKER_TOPIC_METRICS}_{name}", help_text)
            setattr(self, name, m)
        for name, help_text in PARTITION_GAUGES.items():
            g = self.partition_gauges[name] = PartitionGauge(registry, f"{BROKER_TOPIC_METRICS}_{name}", help_text)
            setattr(self, name, g)

    def remove_partition(self, topic: str, partition: int) -> None:
        """Drop a partition's gauge values (it moved away or was deleted)."""
        for g in self.partition_gauges.values():
            g.remove(topic, partition)

    def remove_topic(self, topic: str) -> None:
        """Drop every per-topic series of a deleted topic (Kafka's ``BrokerTopicStats.removeMetrics``)."""
        for m in self.meters.values():
            m.remove_topic(topic)
        for g in self.partition_gauges.values():
            g.remove_topic(topic)


def broker_topic_metrics(registry: Registry) -> BrokerTopicMetrics:
    return BrokerTopicMetrics(registry)


RLM_READER_FETCH_TIMER = "kafka_log_remote_RemoteLogManager_RemoteLogReaderFetchRateAndTimeMs"
RLM_TASKS_AVG_IDLE = "kafka_log_remote_RemoteLogManager_RemoteLogManagerTasksAvgIdlePercent"
DELAYED_REMOTE_FETCH_EXPIRES = "kafka_server_DelayedRemoteFetchMetrics_ExpiresPerSec"
RLM_PREFETCH_HITS = "kafka_log_remote_RemoteLogManager_RemoteLogReaderPrefetchHitsPerSec"
RLM_PREFETCH_MISSES = "kafka_log_remote_RemoteLogManager_RemoteLogReaderPrefetchMissesPerSec"
RLM_PREFETCH_BYTES = "kafka_log_remote_RemoteLogManager_RemoteLogReaderPrefetchBytes"
READER_POOL = "org_apache_kafka_storage_internals_log_RemoteStorageThreadPool"
READER_TASK_QUEUE_SIZE = f"{READER_POOL}_RemoteLogReaderTaskQueueSize"
READER_AVG_IDLE = f"{READER_POOL}_RemoteLogReaderAvgIdlePercent"


def _absent() -> None:
    return None


class RemoteStorageMetrics:
    """The RemoteLogManager, reader-pool and delayed-remote-fetch metrics (not per topic).

    The pool gauges read callbacks: ``metrics.RemoteLogReaderTaskQueueSize.set_function(fn)``;
    until one is set the series is absent rather than a misleading 0 (an idle fraction of 0 reads
    as "saturated"). Idle percentages are fractions in [0, 1], as Kafka reports them.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.RemoteLogReaderFetchRateAndTimeMs = registry.timer(
            RLM_READER_FETCH_TIMER, "Remote log reads (rlm.read): rate and time in ms.")
        self.DelayedRemoteFetchExpiresPerSec = registry.meter(
            DELAYED_REMOTE_FETCH_EXPIRES, "Remote fetches that timed out (remote.fetch.max.wait.ms).")
        self.RemoteLogReaderTaskQueueSize = registry.gauge(
            READER_TASK_QUEUE_SIZE, "Remote log reader tasks waiting in the queue.", fn=_absent)
        self.RemoteLogReaderAvgIdlePercent = registry.gauge(
            READER_AVG_IDLE, "Average idle fraction of the remote log reader threads.", fn=_absent)
        self.RemoteLogManagerTasksAvgIdlePercent = registry.gauge(
            RLM_TASKS_AVG_IDLE, "Average idle fraction of the remote log manager copy threads.", fn=_absent)
        self.RemoteLogReaderPrefetchHitsPerSec = registry.meter(
            RLM_PREFETCH_HITS, "Remote reads served from a read-ahead window (its store read done or under way).")
        self.RemoteLogReaderPrefetchMissesPerSec = registry.meter(
            RLM_PREFETCH_MISSES, "Remote reads with read-ahead on that found no window and read the store.")
        self.RemoteLogReaderPrefetchBytes = registry.gauge(
            RLM_PREFETCH_BYTES, "Bytes held or being read by the remote reader's read-ahead windows.", fn=_absent)


def remote_storage_metrics(registry: Registry) -> RemoteStorageMetrics:
    return RemoteStorageMetrics(registry)
