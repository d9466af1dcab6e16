"""The data source's options: Spark's Kafka source names and rules, parsed once on the driver.

Pipelines move between ``format("kafka")`` and ``format("strata")`` by changing the format name,
so the option names, their defaults and their errors follow Spark's Kafka source
(``spark-sql-kafka-0-10``): exactly one of ``assign``/``subscribe``/``subscribePattern``;
``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets`` (the same for the
end); JSON offsets name every partition, with -2 for earliest and -1 for latest. The parsed
options are a frozen dataclass: it is pickled into every input partition.

On a secured cluster the ``kafka.security.protocol``, ``kafka.sasl.*`` and ``kafka.ssl.*`` options are the
Kafka client's (``sasl.jaas.config``, ``ssl.truststore.location``...; librdkafka's ``sasl.username``,
``ssl.ca.location``... work too): the driver's and the executors' connections use them, and the sink's
producer gets them in librdkafka's names. They are kept in a :class:`MaskedProperties`, whose ``repr``
hides passwords and JAAS configs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strata.client.security import ClientSecurity, MaskedProperties, client_security, security_properties
from strata.errors import InvalidConfigError

EARLIEST = -2
LATEST = -1
RSM_CLASS_KEY = "remote.log.storage.manager.class.name"
RSM_PREFIX = "rsm.config."

# Spark refuses these Kafka consumer settings: the source manages them itself.
_FORBIDDEN = ("kafka.group.id", "kafka.auto.offset.reset", "kafka.key.deserializer", "kafka.value.deserializer",
              "kafka.enable.auto.commit", "kafka.interceptor.classes")
_WRITE_FORBIDDEN = ("kafka.key.serializer", "kafka.value.serializer")


class StrataOptionError(ValueError):
    """An option is missing, malformed or not allowed here; the message names it."""


OffsetsByPartition = dict[tuple[str, int], int]


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: ``earliest``, ``latest``, per-partition offsets, or timestamps."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)  # kind offsets / timestamps
    timestamp: int | None = None  # kind timestamp: one for every partition


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: str  # "assign" | "subscribe" | "subscribePattern"
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str | None = None  # subscribePattern
    assigned: tuple[tuple[str, int], ...] = ()  # assign
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    include_headers: bool = False
    fail_on_data_loss: bool = True
    isolation_level: int = 0  # 0 read_uncommitted, 1 read_committed (Kafka's default for the consumer is 0)
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_bytes_per_partition: int = 128 << 20
    direct_remote_reads: bool = True
    fetch_max_bytes: int = 8 << 20
    timeout_s: float = 60.0
    rsm_class: str | None = None
    rsm_props: Mapping[str, str] = field(default_factory=dict)
    latest_per_key: bool = False  # Strata's: the table a compacted topic represents (batch reads only)
    security: MaskedProperties = MaskedProperties()  # kafka.security.protocol, kafka.sasl.*, kafka.ssl.*


def kafka_security(opts: Mapping[str, str]) -> MaskedProperties:
    """The ``kafka.security.*``, ``kafka.sasl.*`` and ``kafka.ssl.*`` options without the prefix, checked."""
    props = security_properties({k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")})
    security_of(props)
    return props


def security_of(props: Mapping[str, str]) -> ClientSecurity | None:
    """The connection settings of ``kafka.*`` security options (None: plaintext); StrataOptionError naming
    what is wrong (never a password)."""
    if not props:
        return None
    try:
        return client_security(props)
    except InvalidConfigError as e:
        raise StrataOptionError(f"invalid Kafka security option: {e} (options prefixed 'kafka.')") from None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise StrataOptionError(f"option {key!r} must be 'true' or 'false', got {raw!r}")
    return value == "true"


def _int(opts: Mapping[str, str], key: str, default: int | None, minimum: int = 1) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise StrataOptionError(f"option {key!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise StrataOptionError(f"option {key!r} must be >= {minimum}, got {value}")
    return value


def _json_partition_map(key: str, raw: str) -> dict[tuple[str, int], int]:
    """``{"topicA":{"0":23,"1":-1}}`` -> {(topicA, 0): 23, ...}."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise StrataOptionError(f"option {key!r}: invalid JSON ({e.msg}); expected e.g. "
                                '{"topicA":{"0":23,"1":-1}}') from None
    if not isinstance(data, dict):
        raise StrataOptionError(f"option {key!r} must be a JSON object of topics, got {raw!r}")
    out: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise StrataOptionError(f"option {key!r}: topic {topic!r} must map partitions to numbers")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise StrataOptionError(f"option {key!r}: {p!r} of topic {topic!r} is not a partition") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise StrataOptionError(f"option {key!r}: {topic}-{partition} must be an integer, got {value!r}")
            out[(topic, partition)] = value
    return out


def _offset_spec(opts: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """Spark's precedence: ``<which>Timestamp`` > ``<which>OffsetsByTimestamp`` > ``<which>Offsets``."""
    ts_key, by_ts_key, offsets_key = f"{which}Timestamp", f"{which}OffsetsByTimestamp", f"{which}Offsets"
    if (raw := opts.get(ts_key.lower())) is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(raw.strip()))
        except ValueError:
            raise StrataOptionError(f"option {ts_key!r} must be a timestamp in milliseconds, got {raw!r}") from None
    if (raw := opts.get(by_ts_key.lower())) is not None:
        return OffsetSpec("timestamps", offsets=_json_partition_map(by_ts_key, raw))
    raw = opts.get(offsets_key.lower(), default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower())
    return OffsetSpec("offsets", offsets=_json_partition_map(offsets_key, raw))


def _rsm(opts: Mapping[str, str], raw: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    props = {k[len(RSM_PREFIX):]: v for k, v in raw.items() if k.lower().startswith(RSM_PREFIX)}
    return opts.get(RSM_CLASS_KEY), props


def _isolation(opts: Mapping[str, str]) -> int:
    raw = opts.get("isolation.level", opts.get("kafka.isolation.level", "read_uncommitted")).strip().lower()
    if raw not in ("read_uncommitted", "read_committed"):
        raise StrataOptionError(f"option 'isolation.level' must be read_uncommitted or read_committed, got {raw!r}")
    return 1 if raw == "read_committed" else 0


def _subscription(opts: Mapping[str, str]) -> dict[str, Any]:
    given = [k for k in ("assign", "subscribe", "subscribepattern") if k in opts]
    if len(given) != 1:
        raise StrataOptionError("exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be set"
                                + (f" (got {', '.join(given)})" if given else ""))
    kind = given[0]
    value = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise StrataOptionError("option 'subscribe' names no topic")
        return {"subscription": "subscribe", "topics": topics}
    if kind == "subscribepattern":
        if not value:
            raise StrataOptionError("option 'subscribePattern' is empty")
        try:
            re.compile(value)
        except re.error as e:
            raise StrataOptionError(f"option 'subscribePattern' is not a valid regex: {e}") from None
        return {"subscription": "subscribePattern", "pattern": value}
    try:
        data = json.loads(value)
        assigned = tuple(sorted((str(t), int(p)) for t, ps in data.items() for p in ps))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise StrataOptionError(f'option \'assign\' must be JSON like {{"topicA":[0,1]}}, got {value!r}') from None
    if not assigned:
        raise StrataOptionError("option 'assign' names no partition")
    return {"subscription": "assign", "assigned": assigned}


def parse_source_options(options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    """Validate and parse; raises :class:`StrataOptionError` with Spark's wording where it has one."""
    opts = _lower(options)
    for key in _FORBIDDEN:
        if key in opts:
            raise StrataOptionError(f"Kafka option '{key[len('kafka.'):]}' is not supported as the source "
                                    "manages it itself")
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise StrataOptionError("option 'kafka.bootstrap.servers' must be specified for configuring the Kafka "
                                "consumer")
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(opts, "ending", "latest")
    if not streaming:
        if starting.kind == "latest" or (starting.kind == "offsets" and LATEST in starting.offsets.values()):
            raise StrataOptionError("starting offset can't be latest for batch queries on Kafka")
        if ending.kind == "earliest" or (ending.kind == "offsets" and EARLIEST in ending.offsets.values()):
            raise StrataOptionError("ending offset can't be earliest for batch queries on Kafka")
    elif any(k.startswith("ending") for k in opts):
        raise StrataOptionError("ending offset options are not supported by streaming queries")
    latest_per_key = _bool(opts, "latestPerKey", False)
    if streaming and latest_per_key:
        raise StrataOptionError("option 'latestPerKey' is not supported by streaming queries: it reduces a whole "
                                "offset range to one row per key, which a stream of micro-batches cannot do. Read "
                                "the topic with spark.read (a batch query), or keep the latest row per key in the "
                                "stream yourself (e.g. foreachBatch with a MERGE into a table)")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise StrataOptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'")
    rsm_class, rsm_props = _rsm(opts, options)
    return SourceOptions(
        bootstrap=bootstrap,
        **_subscription(opts),
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        isolation_level=_isolation(opts),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", None),
        min_partitions=_int(opts, "minPartitions", None),
        max_bytes_per_partition=_int(opts, "maxBytesPerPartition", 128 << 20, minimum=1 << 16) or 128 << 20,
        direct_remote_reads=_bool(opts, "directRemoteReads", True),
        fetch_max_bytes=_int(opts, "kafka.fetch.max.bytes", 8 << 20, minimum=1 << 10) or 8 << 20,
        timeout_s=(_int(opts, "kafka.request.timeout.ms", 60_000) or 60_000) / 1000,
        rsm_class=rsm_class,
        rsm_props=rsm_props,
        latest_per_key=latest_per_key,
        security=kafka_security(opts),
    )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    include_headers: bool
    producer_config: Mapping[str, str]  # a MaskedProperties: its repr hides passwords
    # Exactly-once (``transactional=true``): one Kafka transaction per task, transactional.id
    # ``<prefix>-<Spark partition id>``, progress markers keyed by partition 0 of ``marker_topic``.
    transactional: bool = False
    transactional_id_prefix: str | None = None
    marker_topic: str | None = None


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """``kafka.*`` options go to the producer (idempotent, acks=all unless overridden)."""
    opts = _lower(options)
    for key in _WRITE_FORBIDDEN:
        if key in opts:
            raise StrataOptionError(f"Kafka option '{key[len('kafka.'):]}' is not supported: values are bytes")
    if "kafka.transactional.id" in opts:
        raise StrataOptionError("Kafka option 'transactional.id' is not supported: every task needs its own; set "
                                "the options 'transactional' to 'true' and 'transactional.id.prefix' instead")
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise StrataOptionError("option 'kafka.bootstrap.servers' must be specified for configuring the Kafka "
                                "producer")
    producer = MaskedProperties({k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")})
    topic = opts.get("topic", "").strip() or None  # the option overrides a ``topic`` column, as in Spark
    transactional = _bool(opts, "transactional", False)
    prefix = opts.get("transactional.id.prefix", "").strip() or None
    marker_topic = opts.get("transactional.marker.topic", "").strip() or None
    if not transactional:
        given = [k for k, v in (("transactional.id.prefix", prefix), ("transactional.marker.topic", marker_topic)) if v]
        if given:
            raise StrataOptionError(f"option {given[0]!r} is set but 'transactional' is not 'true': the write would "
                                    "be at-least-once")
    else:
        if prefix is None:
            raise StrataOptionError("option 'transactional.id.prefix' must be set with 'transactional': each task "
                                    "writes as transactional.id '<prefix>-<partition id>', so the prefix must be "
                                    "unique to this write or streaming query and stable across its restarts")
        if any(c.isspace() for c in prefix):
            raise StrataOptionError(f"option 'transactional.id.prefix' must not contain whitespace, got {prefix!r}")
        marker_topic = marker_topic or topic
        if marker_topic is None:
            raise StrataOptionError("option 'transactional.marker.topic' must name an existing topic when the "
                                    "'topic' option is not set: the progress markers are committed offsets of its "
                                    "partition 0")
    return SinkOptions(bootstrap, topic, _bool(opts, "includeHeaders", True), producer, transactional, prefix,
                       marker_topic)
