"""Broker configuration: Kafka's ``server.properties`` keys, defaults and validation.

The ``log.*`` keys are the broker-wide defaults of topic configs (``log.segment.bytes`` is the
default ``segment.bytes``, ``message.max.bytes`` the default ``max.message.bytes`` ...), resolved
here into one :class:`LogConfig` that every topic starts from before its own overrides.

Unknown keys fail at startup with the key named: a typo in a config file must not silently fall
back to a default. Keys Kafka has but a single-node Python broker has no use for (thread counts,
replication tuning) are accepted and listed in ``IGNORED_KEYS`` so real configs still load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from strata.config.cleaner_config import CLEANER_KEYS, CLEANER_TOPIC_DEFAULTS, CleanerConfig
from strata.config.cluster_config import CLUSTER_KEYS, ClusterConfig
from strata.config.defs import ConfigDef, ConfigKey, at_least, between, list_of, one_of, parse_properties
from strata.config.diskless_config import DISKLESS_KEYS, DisklessConfig
from strata.config.group_config import GROUP_COORDINATOR_KEYS, ConsumerGroupConfig
from strata.config.kafka_broker_configs import KAFKA_BROKER_CONFIG_NAMES
from strata.config.log_config import LOG_CONFIG_DEF, LogConfig
from strata.config.remote_log_config import REMOTE_LOG_KEYS, RemoteLogManagerConfig
from strata.config.security_config import (
    LISTENER_PREFIX,
    METRICS_SSL_KEYS,
    SECURITY_KEYS,
    ListenerConfig,
    SslConfig,
    parse_listeners,
    parse_protocol_map,
    strip_listener_prefix,
)
from strata.config.share_config import (
    SHARE_COORDINATOR_KEYS,
    SHARE_GROUP_KEYS,
    ShareCoordinatorConfig,
    ShareGroupConfig,
)
from strata.config.transaction_config import TRANSACTION_KEYS, TransactionConfig
from strata.errors import InvalidConfigError

HOUR_MS = 60 * 60 * 1000

def _rebalance_protocols(protocols: list[str]) -> str | None:
    """Kafka's values are classic, consumer (KIP-848), share (KIP-932) and streams (KIP-1071), with classic
    required. A protocol Strata does not speak (streams) would be accepted and silently not honoured, so it
    is refused."""
    unknown = [p for p in protocols if p not in ("classic", "consumer", "share", "streams")]
    if unknown:
        return f"{unknown[0]!r} is not one of classic, consumer, share, streams"
    if "classic" not in protocols:
        return "disabling the 'classic' protocol is not supported"
    others = [p for p in protocols if p not in ("classic", "consumer", "share")]
    if others:
        return f"the {others[0]} group protocol is not supported by Strata's group coordinator"
    return None


BROKER_CONFIG_DEF = ConfigDef([
    ConfigKey("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], None, "Where the broker accepts connections"),
    ConfigKey("advertised.listeners", "list", None, None, "What clients are told to connect to"),
    ConfigKey("node.id", "int", 1, at_least(0), "This broker's id"),
    ConfigKey("broker.id", "int", None, at_least(-1), "This broker's id (ZooKeeper mode's name; node.id is its alias)"),
    ConfigKey("cluster.id", "string", None, None, "Cluster id for meta.properties (generated when unset)"),
    ConfigKey("log.dirs", "list", None, None, "Directories holding the partition logs"),
    ConfigKey("log.dir", "string", "/tmp/strata-logs", None, "Used when log.dirs is not set"),
    ConfigKey("num.partitions", "int", 1, at_least(1), "Partitions of an auto-created topic"),
    ConfigKey("default.replication.factor", "int", 1, at_least(1), "Replication factor of auto-created topics"),
    ConfigKey("auto.create.topics.enable", "bool", True, None, "Metadata for an unknown topic creates it"),
    ConfigKey("delete.topic.enable", "bool", True, None, "Allow DeleteTopics"),
    ConfigKey("socket.request.max.bytes", "int", 104_857_600, at_least(1), "Largest request frame accepted"),
    ConfigKey("max.incremental.fetch.session.cache.slots", "int", 1000, at_least(0),
              "Incremental fetch sessions (KIP-227) this broker keeps; 0: every fetch is answered sessionless"),
    # Kafka's default is 102400 for both; Strata's is the OS default (-1), which Linux tunes per connection
    ConfigKey("socket.send.buffer.bytes", "int", -1, at_least(-1), "SO_SNDBUF of client connections (-1: the OS's)"),
    ConfigKey("socket.receive.buffer.bytes", "int", -1, at_least(-1),
              "SO_RCVBUF of client connections (-1: the OS's)"),
    ConfigKey("connections.max.idle.ms", "long", 600_000, at_least(0), "Close idle connections after this"),
    ConfigKey("log.retention.check.interval.ms", "long", 300_000, at_least(1), "How often retention runs"),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", "int", 60_000, at_least(0), ""),
    ConfigKey("log.flush.scheduler.interval.ms", "long", 2**63 - 1, at_least(0), ""),
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000, at_least(0),
              "Wait this long for more members before the first rebalance of an empty group"),
    ConfigKey("group.min.session.timeout.ms", "int", 6000, at_least(0), ""),
    ConfigKey("group.max.session.timeout.ms", "int", 1_800_000, at_least(0), ""),
    ConfigKey("group.max.size", "int", 2**31 - 1, at_least(1), ""),
    ConfigKey("group.coordinator.rebalance.protocols", "list", ["classic", "consumer", "share"], _rebalance_protocols,
              "The group protocols the coordinator speaks: classic, and consumer (KIP-848) and share (KIP-932) "
              "unless left out"),
    ConfigKey("offsets.topic.num.partitions", "int", 50, at_least(1), "Partitions of __consumer_offsets"),
    ConfigKey("offsets.topic.replication.factor", "int", 3, at_least(1),
              "Replication factor of __consumer_offsets in cluster mode (a single node uses 1)"),
    ConfigKey("offsets.topic.segment.bytes", "int", 104_857_600, at_least(1), ""),
    ConfigKey("offsets.retention.minutes", "int", 7 * 24 * 60, at_least(1), ""),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600_000, at_least(1), ""),
    ConfigKey("offsets.remote.upload.interval.ms", "long", 0, at_least(0),
              "Strata: how often the group coordinators copy their groups' committed offsets to the remote store, "
              "for `strata bucket restore` to bring them back with the topics (issue 29); 0 (the default): never"),
    ConfigKey("producer.id.expiration.ms", "int", 86_400_000, at_least(1),
              "A producer id idle this long (no open transaction) is forgotten by each partition (dynamic)"),
    ConfigKey("producer.id.expiration.check.interval.ms", "int", 600_000, at_least(1),
              "How often partitions look for expired producer ids"),
    # broker-wide defaults of topic configs
    ConfigKey("log.segment.bytes", "int", 1024 * 1024 * 1024, at_least(14), "Default segment.bytes"),
    ConfigKey("log.roll.ms", "long", None, at_least(1), "Default segment.ms"),
    ConfigKey("log.roll.hours", "int", 7 * 24, at_least(1), "Default segment.ms, in hours"),
    ConfigKey("log.roll.jitter.ms", "long", None, at_least(0), ""),
    ConfigKey("log.roll.jitter.hours", "int", 0, at_least(0), ""),
    ConfigKey("log.retention.ms", "long", None, at_least(-1), "Default retention.ms"),
    ConfigKey("log.retention.minutes", "int", None, at_least(-1), ""),
    ConfigKey("log.retention.hours", "int", 168, at_least(-1), ""),
    ConfigKey("log.retention.bytes", "long", -1, at_least(-1), "Default retention.bytes"),
    ConfigKey("log.local.retention.ms", "long", -2, at_least(-2), "Default local.retention.ms"),
    ConfigKey("log.local.retention.bytes", "long", -2, at_least(-2), "Default local.retention.bytes"),
    ConfigKey("log.index.interval.bytes", "int", 4096, at_least(0), ""),
    ConfigKey("log.index.size.max.bytes", "int", 10 * 1024 * 1024, at_least(4), ""),
    ConfigKey("log.segment.delete.delay.ms", "long", 60_000, at_least(0), "Default file.delete.delay.ms"),
    ConfigKey("log.flush.interval.messages", "long", 2**63 - 1, at_least(1), "Default flush.messages"),
    ConfigKey("log.flush.interval.ms", "long", None, at_least(0), "Default flush.ms"),
    ConfigKey("log.cleanup.policy", "list", ["delete"], list_of("delete", "compact"), ""),
    ConfigKey("log.message.timestamp.type", "string", "CreateTime", one_of("CreateTime", "LogAppendTime"), ""),
    ConfigKey("log.message.timestamp.before.max.ms", "long", 2**63 - 1, at_least(0), ""),
    ConfigKey("log.message.timestamp.after.max.ms", "long", 3_600_000, at_least(0), ""),
    ConfigKey("message.max.bytes", "int", 1_048_588, at_least(0), "Default max.message.bytes"),
    ConfigKey("compression.type", "string", "producer",
              one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), ""),
    ConfigKey("min.insync.replicas", "int", 1, at_least(1), ""),
    ConfigKey("metrics.port", "int", -1, at_least(-1),
              "Port of the HTTP endpoint serving /metrics (Prometheus) and /v1/tiers; -1 disables, 0 picks one"),
    ConfigKey("metrics.host", "string", "127.0.0.1", None, "Address the metrics endpoint binds"),
    *METRICS_SSL_KEYS,  # metrics.ssl.enabled and the endpoint's metrics.ssl.* keystore/truststore
    ConfigKey("quota.window.num", "int", 11, at_least(1),
              "The number of samples client quota rates (produce, fetch, request time) are measured over"),
    ConfigKey("quota.window.size.seconds", "int", 1, at_least(1), "The time span of each client quota sample"),
    *REMOTE_LOG_KEYS,
    *CLUSTER_KEYS,
    *TRANSACTION_KEYS,
    *GROUP_COORDINATOR_KEYS,
    *SHARE_COORDINATOR_KEYS,
    *SHARE_GROUP_KEYS,
    *DISKLESS_KEYS,
    *CLEANER_KEYS,
    *SECURITY_KEYS,
])

# Kafka keys that configure machinery a single asyncio process does not have.
IGNORED_KEYS = frozenset({
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers", "controller.listener.names",
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir",
})


_NO_CONFIGS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    node_id: int
    listeners: tuple[ListenerConfig, ...]
    inter_broker_listener_name: str
    cluster_id: str | None
    log_dirs: tuple[Path, ...]
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    socket_request_max_bytes: int
    max_incremental_fetch_session_cache_slots: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    connections_max_idle_ms: int
    log_retention_check_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_scheduler_interval_ms: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    group_rebalance_protocols: tuple[str, ...]
    offsets_topic_num_partitions: int
    offsets_topic_segment_bytes: int
    offsets_retention_ms: int
    offsets_remote_upload_interval_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    log_initial_task_delay_ms: int
    metrics_port: int
    metrics_host: str
    metrics_ssl: SslConfig | None  # None: plain HTTP (metrics.ssl.enabled=false)
    remote: RemoteLogManagerConfig
    cluster: ClusterConfig
    transactions: TransactionConfig
    log_config: LogConfig
    raw: Mapping[str, str] = field(repr=False)  # holds passwords: never in a printed config
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    consumer_groups: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    share_coordinator: ShareCoordinatorConfig = field(default_factory=ShareCoordinatorConfig)
    share_groups: ShareGroupConfig = field(default_factory=ShareGroupConfig)
    diskless: DisklessConfig = field(default_factory=DisklessConfig)
    connections_max_reauth_ms: int = 0
    connection_failed_authentication_delay_ms: int = 100
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    # Dynamic broker configs (strata.broker.dynamic_config): what AlterConfigs stored for this broker
    # (resource "1") and cluster-wide (resource ""), as strings. ``raw`` stays the static config; only a
    # broker that can change them at run time (``dynamic_configs_enabled``) reports dynamic keys as writable.
    dynamic_broker_configs: Mapping[str, str] = field(default_factory=lambda: _NO_CONFIGS)
    dynamic_default_configs: Mapping[str, str] = field(default_factory=lambda: _NO_CONFIGS)
    dynamic_configs_enabled: bool = False

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> BrokerConfig:
        """Parse and validate; an unknown key or bad value raises InvalidConfigError naming the key."""
        prefixes = (str(props.get("remote.log.storage.manager.impl.prefix", "rsm.config.")),
                    str(props.get("remote.log.metadata.manager.impl.prefix", "rlmm.config.")))
        known = {k: v for k, v in props.items() if k not in IGNORED_KEYS and not k.startswith(prefixes)}
        listener_keys = {k: v for k, v in known.items() if k.startswith(LISTENER_PREFIX)}
        p = BROKER_CONFIG_DEF.parse({k: v for k, v in known.items() if k not in listener_keys})
        listeners = _listeners(props, p, listener_keys)
        inter_broker = _inter_broker_listener(p, listeners)
        if p["broker.id"] is not None and "node.id" in props and p["broker.id"] != p["node.id"]:
            raise InvalidConfigError(f"Invalid value for configuration broker.id: {p['broker.id']} differs from "
                                     f"node.id {p['node.id']} (node.id is an alias of broker.id; set one)")
        node_id = p["node.id"] if p["broker.id"] is None or "node.id" in props else p["broker.id"]
        dirs = p["log.dirs"] or [p["log.dir"]]
        return cls(
            node_id=node_id,
            listeners=listeners,
            inter_broker_listener_name=inter_broker,
            cluster_id=p["cluster.id"],
            log_dirs=tuple(Path(d).expanduser() for d in dirs),
            num_partitions=p["num.partitions"],
            default_replication_factor=p["default.replication.factor"],
            auto_create_topics_enable=p["auto.create.topics.enable"],
            delete_topic_enable=p["delete.topic.enable"],
            socket_request_max_bytes=p["socket.request.max.bytes"],
            max_incremental_fetch_session_cache_slots=p["max.incremental.fetch.session.cache.slots"],
            socket_send_buffer_bytes=p["socket.send.buffer.bytes"],
            socket_receive_buffer_bytes=p["socket.receive.buffer.bytes"],
            connections_max_idle_ms=p["connections.max.idle.ms"],
            log_retention_check_interval_ms=p["log.retention.check.interval.ms"],
            log_flush_offset_checkpoint_interval_ms=p["log.flush.offset.checkpoint.interval.ms"],
            log_flush_scheduler_interval_ms=p["log.flush.scheduler.interval.ms"],
            group_initial_rebalance_delay_ms=p["group.initial.rebalance.delay.ms"],
            group_min_session_timeout_ms=p["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=p["group.max.session.timeout.ms"],
            group_max_size=p["group.max.size"],
            group_rebalance_protocols=tuple(p["group.coordinator.rebalance.protocols"]),
            offsets_topic_num_partitions=p["offsets.topic.num.partitions"],
            offsets_topic_segment_bytes=p["offsets.topic.segment.bytes"],
            offsets_retention_ms=p["offsets.retention.minutes"] * 60_000,
            offsets_remote_upload_interval_ms=p["offsets.remote.upload.interval.ms"],
            producer_id_expiration_ms=p["producer.id.expiration.ms"],
            producer_id_expiration_check_interval_ms=p["producer.id.expiration.check.interval.ms"],
            log_initial_task_delay_ms=p["log.initial.task.delay.ms"],
            metrics_port=p["metrics.port"],
            metrics_host=p["metrics.host"],
            metrics_ssl=SslConfig.for_metrics(props),
            remote=RemoteLogManagerConfig.from_parsed(p, props),
            cluster=ClusterConfig.from_parsed(p),
            transactions=TransactionConfig.from_parsed(p),
            consumer_groups=ConsumerGroupConfig.from_parsed(p),
            share_coordinator=ShareCoordinatorConfig.from_parsed(p),
            share_groups=ShareGroupConfig.from_parsed(p),
            cleaner=CleanerConfig.from_parsed(p),
            diskless=DisklessConfig.from_parsed(p),
            connections_max_reauth_ms=p["connections.max.reauth.ms"],
            connection_failed_authentication_delay_ms=p["connection.failed.authentication.delay.ms"],
            quota_window_num=p["quota.window.num"],
            quota_window_size_seconds=p["quota.window.size.seconds"],
            log_config=_default_log_config(p, remote_system_enabled=p["remote.log.storage.system.enable"]),
            raw={k: str(v) for k, v in props.items()},
        )

    @property
    def listener(self) -> ListenerConfig:
        """The inter-broker listener: other brokers (and ``strata`` tools without a choice) use it."""
        return self.listener_named(self.inter_broker_listener_name)

    def listener_named(self, name: str) -> ListenerConfig:
        return next(li for li in self.listeners if li.name == name)

    @property
    def inter_broker_ssl(self) -> SslConfig | None:
        """TLS settings of this broker's own connections to others (the inter-broker listener's keys)."""
        return self.listener.ssl

    def with_dynamic(self, default: Mapping[str, str], per_broker: Mapping[str, str]) -> BrokerConfig:
        """This static config with dynamic broker configs over it (Kafka's ``updateCurrentConfig``).

        Every field is the effective value (``per_broker`` over ``default`` over ``raw``, see
        :func:`merge_dynamic_configs`) and ``log_config`` the effective topic defaults, the dynamic-only
        log keys (``log.cleaner.delete.retention.ms`` ...) included; ``raw`` stays the static props and the
        dynamic ones are kept beside it. Custom dynamic configs (:func:`is_custom_broker_config`) are kept
        beside it too but never reach a field: as in Kafka they change nothing in the broker, not even a static
        key of the same name (``rsm.config.*``, ``listener.name.<l>.*``). Raises InvalidConfigError naming the
        key at fault.
        """
        merged = merge_dynamic_configs(self.raw, _applicable(default), _applicable(per_broker))
        effective = BrokerConfig.from_props({k: v for k, v in merged.items() if k not in DYNAMIC_ONLY_CONFIG_DEF.keys})
        extras = {topic: merged[key] for key, topic in DYNAMIC_ONLY_TOPIC_SYNONYMS.items() if key in merged}
        log_config = effective.log_config.with_overrides(extras) if extras else effective.log_config
        return replace(effective, log_config=log_config, raw=self.raw,
                       dynamic_broker_configs=MappingProxyType(dict(per_broker)),
                       dynamic_default_configs=MappingProxyType(dict(default)), dynamic_configs_enabled=True)

    @classmethod
    def load(cls, path: Path | None = None, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        """``--config FILE`` then ``--set KEY=VALUE`` (overrides win)."""
        props: dict[str, object] = {}
        if path is not None:
            try:
                props.update(parse_properties(Path(path).read_text()))
            except OSError as e:
                raise InvalidConfigError(f"cannot read config file {path}: {e}") from e
        props.update(overrides or {})
        return cls.from_props(props)


def _listeners(props: Mapping[str, object], p: Mapping[str, Any],
               listener_keys: Mapping[str, object]) -> tuple[ListenerConfig, ...]:
    """``listeners`` with their protocols, TLS and SASL settings; ``listener.name.*`` keys checked by name."""
    protocol_map = parse_protocol_map(p["listener.security.protocol.map"])
    listeners = parse_listeners(props, p["listeners"], p["advertised.listeners"], protocol_map,
                                p["sasl.enabled.mechanisms"])
    names = {li.name.lower() for li in listeners}
    for key in listener_keys:
        listener, base = strip_listener_prefix(key)
        mechanism_key = base.split(".", 1)[1] if base.count(".") >= 2 and not base.startswith(("ssl.", "sasl.")) \
            else None
        if listener not in names:
            raise InvalidConfigError(f"Unknown configuration {key!r}: there is no listener named {listener!r}")
        if base not in BROKER_CONFIG_DEF.keys and mechanism_key not in _PER_MECHANISM_KEYS:
            raise InvalidConfigError(f"Unknown configuration {key!r}")
    return listeners


# Keys a listener takes per SASL mechanism: listener.name.<listener>.<mechanism>.<key>
_PER_MECHANISM_KEYS = frozenset({"sasl.jaas.config", "sasl.server.callback.handler.class"})


def _inter_broker_listener(p: Mapping[str, Any], listeners: tuple[ListenerConfig, ...]) -> str:
    """``inter.broker.listener.name``, else the listener of ``security.inter.broker.protocol``, else the
    first one (Kafka requires one; a single-node broker has no peers, so any will do)."""
    name = p["inter.broker.listener.name"]
    if name is not None:
        name = name.strip().upper()
        if name not in {li.name for li in listeners}:
            raise InvalidConfigError(f"Invalid value {name!r} for configuration inter.broker.listener.name: it must "
                                     f"be one of listeners ({', '.join(li.name for li in listeners)})")
        return name
    proto = p["security.inter.broker.protocol"]
    same = [li for li in listeners if li.name == proto] or [li for li in listeners if li.security_protocol == proto]
    return (same or list(listeners))[0].name


def _default_log_config(p: Mapping[str, Any], *, remote_system_enabled: bool) -> LogConfig:
    """Kafka's precedence: ``*.ms`` over ``*.minutes`` over ``*.hours``.

    With the remote storage system on, the defaults must keep ``log.local.retention.*`` within
    ``log.retention.*`` whether or not a topic turns tiering on (``validateBrokerLogConfigValues``).
    """
    config = _log_config_from(p)
    if remote_system_enabled:
        try:
            config.validate_remote_storage_retention()
        except InvalidConfigError as e:
            raise InvalidConfigError(str(e).replace("local.retention.", "log.local.retention.")) from None
    return config


def _log_config_from(p: Mapping[str, Any]) -> LogConfig:
    if p["log.retention.ms"] is not None:
        retention_ms = p["log.retention.ms"]
    elif p["log.retention.minutes"] is not None:
        retention_ms = p["log.retention.minutes"] * 60_000
    else:
        retention_ms = p["log.retention.hours"] * HOUR_MS
    retention_ms = -1 if retention_ms < 0 else retention_ms
    segment_ms = p["log.roll.ms"] if p["log.roll.ms"] is not None else p["log.roll.hours"] * HOUR_MS
    jitter = p["log.roll.jitter.ms"] if p["log.roll.jitter.ms"] is not None else p["log.roll.jitter.hours"] * HOUR_MS
    flush_ms = p["log.flush.interval.ms"] if p["log.flush.interval.ms"] is not None \
        else p["log.flush.scheduler.interval.ms"]
    return LogConfig.from_props({
        "segment.bytes": p["log.segment.bytes"],
        "segment.ms": segment_ms,
        "segment.jitter.ms": jitter,
        "segment.index.bytes": p["log.index.size.max.bytes"],
        "index.interval.bytes": p["log.index.interval.bytes"],
        "retention.ms": retention_ms,
        "retention.bytes": p["log.retention.bytes"],
        "local.retention.ms": p["log.local.retention.ms"],
        "local.retention.bytes": p["log.local.retention.bytes"],
        "file.delete.delay.ms": p["log.segment.delete.delay.ms"],
        "max.message.bytes": p["message.max.bytes"],
        "message.timestamp.type": p["log.message.timestamp.type"],
        "message.timestamp.before.max.ms": p["log.message.timestamp.before.max.ms"],
        "message.timestamp.after.max.ms": p["log.message.timestamp.after.max.ms"],
        "cleanup.policy": ",".join(p["log.cleanup.policy"]),
        "compression.type": p["compression.type"],
        "flush.messages": p["log.flush.interval.messages"],
        "flush.ms": flush_ms,
        "min.insync.replicas": p["min.insync.replicas"],
        "unclean.leader.election.enable": p["unclean.leader.election.enable"],
        **{topic: p[broker] for topic, broker in CLEANER_TOPIC_DEFAULTS.items()},
    })


# -- dynamic broker configs (Kafka 3.9's DynamicBrokerConfig) -------------------------------------------

MAX_INT = 2**31 - 1
MAX_LONG = 2**63 - 1

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: keys that set the same thing, highest precedence first
# (log.flush.scheduler.interval.ms only supplies the default of log.flush.interval.ms: it has no group of its own).
BROKER_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
_SYNONYMS_OF = {name: group for group in BROKER_SYNONYM_GROUPS for name in group
                if name != "log.flush.scheduler.interval.ms"}


def broker_config_synonyms(name: str) -> tuple[str, ...]:
    """``brokerConfigSynonyms(name)``: the group of ``name``, or ``name`` alone."""
    return _SYNONYMS_OF.get(name, (name,))


# DynamicLogConfig.ReconfigurableConfigs: the first broker synonym of every topic config
# (ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS), so log.retention.ms is dynamic and log.retention.hours is not.
DYNAMIC_LOG_CONFIGS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.index.size.max.bytes",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.retention.bytes", "log.retention.ms",
    "message.max.bytes", "log.index.interval.bytes", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms",
    "log.cleaner.min.cleanable.ratio", "log.cleanup.policy", "unclean.leader.election.enable",
    "min.insync.replicas", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "log.preallocate", "log.message.format.version", "log.message.timestamp.type",
    "log.message.timestamp.difference.max.ms", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "log.message.downconversion.enable", "log.local.retention.ms",
    "log.local.retention.bytes",
})
# LogCleaner.ReconfigurableConfigs
DYNAMIC_CLEANER_CONFIGS = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
})
# DynamicThreadPool.ReconfigurableConfigs
DYNAMIC_THREAD_POOL_CONFIGS = frozenset({
    "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads"})
# DynamicListenerConfig.ReconfigurableConfigs without its SSL and SASL keys (Strata has neither)
# the SASL client-login keys of DynamicListenerConfig.ReconfigurableConfigs (Kerberos and OAUTHBEARER logins,
# which Strata has not): accepted and stored like Kafka, with no effect
DYNAMIC_SASL_LOGIN_CONFIGS = frozenset({
    "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds"})
DYNAMIC_LISTENER_CONFIGS = frozenset({
    "listeners", "listener.security.protocol.map", "max.connections", "max.connection.creation.rate",
    "num.network.threads"}) | DYNAMIC_SASL_LOGIN_CONFIGS
# SocketServer.ReconfigurableConfigs
DYNAMIC_SOCKET_SERVER_CONFIGS = frozenset({
    "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections", "max.connection.creation.rate"})
# DynamicBrokerConfig.DynamicProducerStateManagerConfig
DYNAMIC_PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms", "transaction.partition.verification.enable"})
# DynamicRemoteLogConfig.ReconfigurableConfigs: Kafka 3.9's four, then the thread pools and the ListOffsets
# timeout that Kafka 4.0 added to the set
DYNAMIC_REMOTE_LOG_CONFIGS = frozenset({
    "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
    "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
    "remote.log.manager.copier.thread.pool.size", "remote.log.manager.expiration.thread.pool.size",
    "remote.log.manager.follower.thread.pool.size", "remote.log.reader.threads",
    "remote.list.offsets.request.timeout.ms",
})
# QuotaConfigs.brokerQuotaConfigs: the replication throttles (kafka-reassign-partitions --throttle sets them)
DYNAMIC_QUOTA_CONFIGS = frozenset({
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second"})

# DynamicBrokerConfig.AllDynamicConfigs (as far as Strata has the machinery's keys): every other known key
# (KNOWN_BROKER_CONFIGS) is refused with "Cannot update these configs dynamically"; an unknown one is custom.
DYNAMIC_BROKER_CONFIGS = frozenset().union(
    DYNAMIC_LOG_CONFIGS, DYNAMIC_CLEANER_CONFIGS, DYNAMIC_THREAD_POOL_CONFIGS, DYNAMIC_LISTENER_CONFIGS,
    DYNAMIC_SOCKET_SERVER_CONFIGS, DYNAMIC_PRODUCER_STATE_CONFIGS, DYNAMIC_REMOTE_LOG_CONFIGS, DYNAMIC_QUOTA_CONFIGS,
    {"metric.reporters"})
# ClusterLevelListenerConfigs; the other listener keys are PerBrokerConfigs: refused on the cluster-wide resource
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
PER_BROKER_CONFIGS = DYNAMIC_LISTENER_CONFIGS - CLUSTER_LEVEL_LISTENER_CONFIGS
# Thread counts: a change must stay between half and double the current count (DynamicThreadPool, LogCleaner)
DYNAMIC_THREAD_COUNT_CONFIGS = DYNAMIC_THREAD_POOL_CONFIGS | {
    "num.network.threads", "log.cleaner.threads", "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.expiration.thread.pool.size", "remote.log.manager.follower.thread.pool.size",
    "remote.log.reader.threads"}

# Dynamic broker keys that map to a topic config but that server.properties does not take: broker key -> topic key.
DYNAMIC_ONLY_TOPIC_SYNONYMS: dict[str, str] = {
    "log.preallocate": "preallocate",
    "log.message.downconversion.enable": "message.downconversion.enable",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
}


def _topic_default_key(broker_key: str, topic_key: str) -> ConfigKey:
    k = LOG_CONFIG_DEF.keys[topic_key]
    return ConfigKey(broker_key, k.type, k.default, k.validator, f"Default {topic_key}")


_NO_EFFECT = "Accepted and stored; Strata has no such machinery"

# Kafka's types, defaults and validators of the dynamic keys BROKER_CONFIG_DEF does not have (some of them are
# IGNORED_KEYS in server.properties): they can only be set dynamically, and are accepted, stored and reported.
DYNAMIC_ONLY_CONFIG_DEF = ConfigDef([
    *(_topic_default_key(b, t) for b, t in DYNAMIC_ONLY_TOPIC_SYNONYMS.items()),
    ConfigKey("log.message.format.version", "string", "3.0-IV1", None, "Accepted; batches are stored as produced"),
    ConfigKey("log.message.timestamp.difference.max.ms", "long", MAX_LONG, at_least(0),
              "Accepted (deprecated in Kafka); see log.message.timestamp.before/after.max.ms"),
    ConfigKey("num.io.threads", "int", 8, at_least(1), _NO_EFFECT),
    ConfigKey("num.network.threads", "int", 3, at_least(1), _NO_EFFECT),
    ConfigKey("num.recovery.threads.per.data.dir", "int", 1, at_least(1), _NO_EFFECT),
    ConfigKey("background.threads", "int", 10, at_least(1), _NO_EFFECT),
    ConfigKey("max.connections", "int", MAX_INT, at_least(0), _NO_EFFECT),
    ConfigKey("max.connection.creation.rate", "int", MAX_INT, at_least(0), _NO_EFFECT),
    ConfigKey("max.connections.per.ip", "int", MAX_INT, at_least(0), _NO_EFFECT),
    ConfigKey("max.connections.per.ip.overrides", "string", "", None, _NO_EFFECT),
    ConfigKey("metric.reporters", "list", [], None, _NO_EFFECT),
    ConfigKey("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", None, _NO_EFFECT),
    ConfigKey("sasl.kerberos.ticket.renew.window.factor", "double", 0.8, None, _NO_EFFECT),
    ConfigKey("sasl.kerberos.ticket.renew.jitter", "double", 0.05, None, _NO_EFFECT),
    ConfigKey("sasl.kerberos.min.time.before.relogin", "long", 60_000, None, _NO_EFFECT),
    ConfigKey("sasl.kerberos.principal.to.local.rules", "list", ["DEFAULT"], None, _NO_EFFECT),
    ConfigKey("sasl.login.refresh.window.factor", "double", 0.8, between(0.5, 1.0), _NO_EFFECT),
    ConfigKey("sasl.login.refresh.window.jitter", "double", 0.05, between(0.0, 0.25), _NO_EFFECT),
    ConfigKey("sasl.login.refresh.min.period.seconds", "int", 60, between(0, 900), _NO_EFFECT),
    ConfigKey("sasl.login.refresh.buffer.seconds", "int", 300, between(0, 3600), _NO_EFFECT),
    ConfigKey("leader.replication.throttled.rate", "long", MAX_LONG, at_least(0),
              "Bytes/s this broker sends to followers of leader.replication.throttled.replicas (KIP-73)"),
    ConfigKey("follower.replication.throttled.rate", "long", MAX_LONG, at_least(0),
              "Bytes/s this broker fetches for follower.replication.throttled.replicas (KIP-73)"),
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", "long", MAX_LONG, at_least(0), _NO_EFFECT),
])


def broker_config_key(name: str) -> ConfigKey | None:
    """The definition of a broker key, whether server.properties takes it or it can only be set dynamically
    (a ``listener.name.<l>.`` prefix has its unprefixed key's definition)."""
    if name.startswith(LISTENER_PREFIX):
        try:
            name = strip_listener_prefix(name)[1]
        except InvalidConfigError:
            return None
    return BROKER_CONFIG_DEF.keys.get(name) or DYNAMIC_ONLY_CONFIG_DEF.keys.get(name)


# SslConfigs.RECONFIGURABLE_CONFIGS: a listener's keystore and truststore change without a restart (per broker,
# as listener.name.<listener>.<key>; Kafka's dynamic keystore update)
RECONFIGURABLE_SSL_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates"})


class DynamicBrokerKeys(frozenset[str]):
    """``DYNAMIC_BROKER_CONFIGS`` plus every ``listener.name.<l>.<reconfigurable ssl key>`` (a set with a rule)."""

    def __contains__(self, name: object) -> bool:
        if frozenset.__contains__(self, name):
            return True
        return isinstance(name, str) and is_listener_ssl_key(name)


def is_listener_ssl_key(name: str) -> bool:
    if not name.startswith(LISTENER_PREFIX):
        return False
    try:
        return strip_listener_prefix(name)[1] in RECONFIGURABLE_SSL_CONFIGS
    except InvalidConfigError:
        return False


DYNAMIC_BROKER_KEYS = DynamicBrokerKeys(DYNAMIC_BROKER_CONFIGS)


# -- custom dynamic configs ---------------------------------------------------------------------------------
# Kafka's DynamicConfig.Broker.validate(customPropsAllowed = true): AlterConfigs on a BROKER resource refuses only the
# *known* keys that cannot change at run time (DynamicBrokerConfig.nonDynamicConfigs, KafkaConfig.configNames minus
# the dynamic ones); any other name is a custom config, stored with the dynamic ones (ZooKeeper, or Strata's file on
# one node), described, deleted like them, and used by nothing in the broker (Kafka hands them to plugins only).

# Every name that is a broker config: Kafka 3.9's, the dynamic-only ones (the replication throttles), and Strata's
# own server.properties keys (its metrics endpoint, remote reader tuning ...), which configure this broker and so are
# refused like any static key rather than stored as inert custom ones.
KNOWN_BROKER_CONFIGS: frozenset[str] = frozenset().union(
    KAFKA_BROKER_CONFIG_NAMES, BROKER_CONFIG_DEF.keys, DYNAMIC_ONLY_CONFIG_DEF.keys, IGNORED_KEYS,
    DYNAMIC_BROKER_CONFIGS)

# DynamicBrokerConfig.ListenerMechanismConfigs: listener.name.<l>.<mechanism>.<key> has <key>'s type
_LISTENER_MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                               "sasl.server.callback.handler.class", "connections.max.reauth.ms")


def listener_config_base(name: str) -> str | None:
    """``listener.name.<l>.<key>`` -> ``<key>`` (Kafka's ``ListenerConfigRegex``); None for any other name."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    try:
        return strip_listener_prefix(name)[1]
    except InvalidConfigError:
        return None


def non_dynamic_broker_configs(names: Iterable[str]) -> list[str]:
    """Kafka's ``nonDynamicConfigs``: the known broker configs among ``names`` that cannot change at run time.

    The unprefixed reconfigurable SSL keys are dynamic in Kafka (``DynamicSecurityConfigs``) but only per listener:
    they are refused with a message of their own, not here. A ``listener.name.<l>.<key>`` name is never a known one.
    """
    return [n for n in names if n in KNOWN_BROKER_CONFIGS and n not in DYNAMIC_BROKER_KEYS
            and n not in RECONFIGURABLE_SSL_CONFIGS]


def is_custom_broker_config(name: str) -> bool:
    """A dynamic broker config that is stored and described but applied to nothing.

    Kafka's custom configs, the names no broker config definition has; and every ``listener.name.<l>.<key>``
    but the reconfigurable SSL keys (TLS keystores), which Kafka takes as custom too (it validates only the value
    of a dynamic ``<key>``) and which Strata, without per-listener settings of its own, applies to nothing.
    """
    if listener_config_base(name) is not None:
        return not is_listener_ssl_key(name)
    return name not in KNOWN_BROKER_CONFIGS


def broker_config_type_known(name: str) -> bool:
    """Kafka's ``KafkaConfig.configType(name).isDefined``: the key's own type, or its listener-free name's.

    A config without a type is treated as sensitive (``KafkaConfig.maybeSensitive``): DescribeConfigs sends no value
    for it and the logs hide it, so a custom config is never shown, whatever it holds.
    """
    if name in KNOWN_BROKER_CONFIGS:
        return True
    base = listener_config_base(name)
    return base is not None and (base in KNOWN_BROKER_CONFIGS or base.endswith(_LISTENER_MECHANISM_CONFIGS))


def _applicable(level: Mapping[str, str]) -> dict[str, str]:
    """The dynamic configs of one level that the broker applies: all but the custom ones."""
    return {k: v for k, v in level.items() if not is_custom_broker_config(k)}


def merge_dynamic_configs(static: Mapping[str, str], default: Mapping[str, str],
                          per_broker: Mapping[str, str]) -> dict[str, str]:
    """Kafka's ``overrideProps``: the static props, then the cluster-wide dynamic ones, then this broker's.

    Setting a key drops its synonyms from what is below it (a dynamic ``log.retention.ms`` removes a static
    ``log.retention.hours``, a dynamic ``log.flush.interval.ms`` a static ``log.flush.scheduler.interval.ms``),
    so the dynamic value wins whatever precedence the names have among themselves.
    """
    props = dict(static)
    for level in (default, per_broker):
        for key, value in level.items():
            for synonym in broker_config_synonyms(key):
                props.pop(synonym, None)
            props[key] = value
    return props
