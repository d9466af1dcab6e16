"""What DescribeConfigs, CreateTopics (v5+) and the two AlterConfigs APIs say about configs.

Kafka answers a config question with more than a value: where the value came from
(``config_source``), the chain of places it could have come from (``synonyms``, highest precedence
first), whether it can be changed at runtime (``read_only``) and its type. Tools such as
``kafka-configs.sh --describe --all``, Cruise Control and the admin clients use the source to tell
a topic override from an inherited broker default, so it must follow Kafka's rules exactly:

* DescribeConfigs on a topic (Kafka's ``ConfigHelper.createTopicConfigEntry`` and
  ``configSynonyms``): a key's synonyms are its override (``TOPIC_CONFIG``, 1), then the broker
  synonym group of its *first* broker key (``retention.ms`` -> ``log.retention.ms`` /
  ``.minutes`` / ``.hours``) as set in ``server.properties`` (``STATIC_BROKER_CONFIG``, 4), then
  each that has a built-in default (``DEFAULT_CONFIG``, 5), with the leading broker entries that
  are not that first key dropped; the entry's source is the first synonym's source. So
  ``retention.ms`` is ``DEFAULT_CONFIG`` with no broker synonyms when only ``log.retention.hours``
  is set, although its value is the one ``log.retention.hours`` gives (see ``describe_topic_configs``);
* CreateTopics v5+ (Kafka's KRaft controller, ``KafkaConfigSchema.resolveEffectiveTopicConfig``):
  the source is that of the first synonym in the *whole* group that is set, so the same
  ``retention.ms`` is ``STATIC_BROKER_CONFIG`` there (``topic_configs``);
* a broker key's synonyms are the chain over its own synonym group (``log.retention.ms`` /
  ``.minutes`` / ``.hours``) with everything ranked above the key itself dropped;
* synonym values are the raw strings as configured (``log.retention.hours=168``), the entry's value
  is the effective parsed value of the key itself.

Dynamic broker configs (:mod:`strata.broker.dynamic_config`) add two levels above the static ones, in
every chain: this broker's (``DYNAMIC_BROKER_CONFIG``, resource ``"1"``), then the cluster-wide default
(``DYNAMIC_DEFAULT_BROKER_CONFIG``, resource ``""``). They reach the views through the broker's
``BrokerConfig`` (``dynamic_broker_configs`` / ``dynamic_default_configs``); without them every chain is
exactly the static one. Dynamic keys (Kafka's ``AllDynamicConfigs``) are reported writable
(``read_only=false``) by a broker that can change them; everything else is read-only, and altering a
known key among them is refused with Kafka's "Cannot update these configs dynamically". A name that is no
broker config is a custom config (Kafka's): stored and reported like a dynamic one, read-only and sensitive
(Kafka knows no type for it), applied to nothing. Topic overrides are replaced
(AlterConfigs) or edited (IncrementalAlterConfigs SET/DELETE/APPEND/SUBTRACT) here, validated by the
caller with ``TopicRegistry.check_configs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from strata.broker.topics import validate_topic_name
from strata.config.broker_config import (
    BROKER_CONFIG_DEF,
    BROKER_SYNONYM_GROUPS,
    DYNAMIC_BROKER_KEYS,
    DYNAMIC_ONLY_CONFIG_DEF,
    DYNAMIC_ONLY_TOPIC_SYNONYMS,
    IGNORED_KEYS,
    KNOWN_BROKER_CONFIGS,
    BrokerConfig,
    broker_config_key,
    broker_config_synonyms,
    broker_config_type_known,
    listener_config_base,
    merge_dynamic_configs,
)
from strata.config.group_config import (
    DEFAULT_SHARE_GROUP_CONFIG,
    ConsumerGroupConfig,
    GroupSettings,
    group_config_def,
)
from strata.config.log_config import LOG_CONFIG_DEF, TOPIC_CONFIG_ALIASES, LogConfig, canonical_topic_configs
from strata.config.security_config import is_sensitive
from strata.config.share_config import ShareGroupConfig
from strata.errors import ApiError, ErrorCode, InvalidConfigError

if TYPE_CHECKING:
    from strata.broker.cluster_services import TopicAdmin
    from strata.broker.topics import TopicRegistry


class BrokerConfigStore(Protocol):
    """What AlterConfigs needs of the dynamic broker configs (:class:`strata.broker.dynamic_config
    .DynamicBrokerConfigs`, which builds on this module: named here, not imported, so the two do not import
    each other)."""

    async def alter(self, resource_name: str, changes: Sequence[ConfigChange], *, incremental: bool,
                    validate_only: bool) -> None: ...


class ConfigResources(Protocol):
    """Where the configs of DescribeConfigs and AlterConfigs live: the topic registry (topic overrides),
    the topic admin (writes them, through the controller in a cluster) and the broker's id (BROKER
    resources); its ``dynamic_configs`` (:class:`DynamicBrokerConfigs`) when it has them."""

    node_id: int
    topics: TopicRegistry
    admin: TopicAdmin


class ResourceType(IntEnum):
    """``ConfigResource.Type`` ids (the DescribeConfigs/AlterConfigs ``resource_type``)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """``DescribeConfigsResponse.ConfigSource`` ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """``DescribeConfigsResponse.ConfigType`` ids (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterOp(IntEnum):
    """IncrementalAlterConfigs ``config_operation``."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_TYPES = {"bool": ConfigType.BOOLEAN, "string": ConfigType.STRING, "int": ConfigType.INT, "long": ConfigType.LONG,
          "double": ConfigType.DOUBLE, "list": ConfigType.LIST, "password": ConfigType.PASSWORD}

# Kafka's ServerTopicConfigSynonyms: topic key -> the broker key that supplies its default. Topic keys
# missing here (remote.storage.enable, remote.log.*) have no broker-wide default in Kafka either.
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
}

# Kafka broker keys that are topic synonyms but that Strata's server.properties does not accept
# (so statically they can only ever be at their Kafka default, which equals the topic default).
_EXTRA_BROKER_DEFAULTS = {"log.preallocate": "false"}

# Kafka's other ServerTopicConfigSynonyms: topic keys whose broker synonym Strata reports only once it is
# set dynamically (the static reports of these keys predate dynamic configs and stay as they were).
_DYNAMIC_TOPIC_SYNONYMS: dict[str, str] = {
    **{topic: broker for broker, topic in DYNAMIC_ONLY_TOPIC_SYNONYMS.items() if topic not in TOPIC_CONFIG_SYNONYMS},
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: keys that set the same thing, highest precedence first.
_SYNONYM_GROUPS = BROKER_SYNONYM_GROUPS

STRATA_READ_ONLY = ("this broker has no dynamic broker configs: set broker keys in server.properties "
                    "(or with --set) and restart the broker")


def broker_synonyms(name: str) -> tuple[str, ...]:
    return broker_config_synonyms(name)


def format_value(value: Any) -> str | None:
    """Kafka's ``ConfigDef.convertToString``: lists comma-joined, booleans lower case, null stays null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _broker_default(name: str) -> str | None:
    key = BROKER_CONFIG_DEF.keys.get(name)
    if key is not None:
        return format_value(key.default)
    if name in _EXTRA_BROKER_DEFAULTS:
        return _EXTRA_BROKER_DEFAULTS[name]
    key = DYNAMIC_ONLY_CONFIG_DEF.keys.get(name)
    return format_value(key.default) if key is not None else None


def scala_set(names: Iterable[str]) -> str:
    """A set of config names as Kafka's messages print one (``Set(a, b)``; Scala says ``HashSet`` above 4)."""
    ordered = sorted(set(names))
    return f"{'Set' if len(ordered) <= 4 else 'HashSet'}({', '.join(ordered)})"


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigView:
    """One key as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    config_type: ConfigType
    synonyms: tuple[Synonym, ...]
    documentation: str | None
    is_sensitive: bool = False

    def describe_entry(self, include_synonyms: bool, include_documentation: bool) -> dict[str, Any]:
        return {
            "name": self.name, "value": self.value, "read_only": self.read_only, "config_source": self.source,
            "is_sensitive": self.is_sensitive, "config_type": self.config_type,
            "synonyms": [{"name": s.name, "value": s.value, "source": s.source} for s in self.synonyms]
            if include_synonyms else [],
            "documentation": self.documentation if include_documentation else None,
        }

    def create_topics_entry(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "read_only": self.read_only, "config_source": self.source,
                "is_sensitive": self.is_sensitive}


class ConfigViews:
    """Describes topic and broker configs of one broker: its dynamic configs, ``server.properties`` and defaults."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.static: Mapping[str, str] = config.raw
        self.dynamic_broker: Mapping[str, str] = config.dynamic_broker_configs
        self.dynamic_default: Mapping[str, str] = config.dynamic_default_configs
        self.dynamic_enabled = config.dynamic_configs_enabled

    def _static_chain(self, names: Iterable[str]) -> list[Synonym]:
        """Every setting of the group by precedence (``configSynonyms`` before its drop): this broker's dynamic
        ones, the cluster-wide dynamic ones, the static ones, then every built-in default."""
        names = list(names)
        chain = [Synonym(n, self.dynamic_broker[n], ConfigSource.DYNAMIC_BROKER_CONFIG)
                 for n in names if n in self.dynamic_broker]
        chain += [Synonym(n, self.dynamic_default[n], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
                  for n in names if n in self.dynamic_default]
        chain += [Synonym(n, self.static[n], ConfigSource.STATIC_BROKER_CONFIG) for n in names if n in self.static]
        for n in names:
            default = _broker_default(n)
            if default is not None:
                chain.append(Synonym(n, default, ConfigSource.DEFAULT_CONFIG))
        return chain

    def _dynamically_set(self, name: str) -> bool:
        return name in self.dynamic_broker or name in self.dynamic_default

    def _read_only(self, name: str) -> bool:
        """Kafka: ``!AllDynamicConfigs.contains(name)``; a broker without dynamic configs has only read-only keys."""
        return not (self.dynamic_enabled and name in DYNAMIC_BROKER_KEYS)

    def _config_synonyms(self, name: str) -> list[Synonym]:
        """Kafka's ``ConfigHelper.configSynonyms(name, brokerSynonyms(name))``.

        The chain over ``name``'s synonym group, with the leading entries for other names of the group
        dropped (``allSynonyms.dropWhile(s => s.name != name)``): the keys that outrank ``name`` and,
        when ``name`` itself is neither set nor has a default, the whole chain.
        """
        chain = self._static_chain(broker_synonyms(name))
        while chain and chain[0].name != name:
            chain.pop(0)
        return chain

    def _topic_views(self, overrides: Mapping[str, str], effective: LogConfig, *,
                     describe: bool) -> list[ConfigView]:
        values = effective.to_props()
        out = []
        for name in sorted(LOG_CONFIG_DEF.keys):
            key = LOG_CONFIG_DEF.keys[name]
            value = values.get(name)
            synonyms: list[Synonym] = []
            if name in overrides:
                synonyms.append(Synonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
            broker_key = TOPIC_CONFIG_SYNONYMS.get(name)
            if broker_key is None and self._dynamically_set(_DYNAMIC_TOPIC_SYNONYMS.get(name, "")):
                broker_key = _DYNAMIC_TOPIC_SYNONYMS[name]
            if broker_key is not None:
                synonyms += (self._config_synonyms(broker_key) if describe
                             else self._static_chain(broker_synonyms(broker_key)))
            source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
            out.append(ConfigView(name, value, source, False, _TYPES.get(key.type, ConfigType.UNKNOWN),
                                  tuple(synonyms), key.doc or None))
        return out

    def describe_topic_configs(self, overrides: Mapping[str, str], effective: LogConfig) -> list[ConfigView]:
        """Every topic key as DescribeConfigs reports it, sorted by name (Kafka's ``createTopicConfigEntry``).

        Kafka looks up only the *first* broker key of a topic key (``ServerTopicConfigSynonyms
        .TOPIC_CONFIG_SYNONYMS``: ``retention.ms`` -> ``log.retention.ms``, ``segment.ms`` ->
        ``log.roll.ms``, ``segment.jitter.ms`` -> ``log.roll.jitter.ms``, ``flush.ms`` ->
        ``log.flush.interval.ms``) and ``configSynonyms`` drops every leading entry of the group that
        is not that key. So with ``log.retention.hours=1`` and no ``log.retention.ms`` Kafka answers
        ``retention.ms`` = ``3600000`` (the value is still the effective one, from ``LogConfig``)
        with source ``DEFAULT_CONFIG`` and no synonyms; only when ``log.retention.ms`` itself is set
        does it answer ``STATIC_BROKER_CONFIG`` with ``log.retention.ms`` (then the rest of the chain,
        ``log.retention.hours`` included). This is a Kafka quirk, kept on purpose: clients compare
        against Kafka's output (librdkafka's DescribeConfigs tests, ``kafka-configs.sh --describe
        --all``, tools that treat ``DEFAULT_CONFIG`` as "not set anywhere").
        """
        return self._topic_views(overrides, effective, describe=True)

    def topic_configs(self, overrides: Mapping[str, str], effective: LogConfig) -> list[ConfigView]:
        """Every topic key as CreateTopics v5+ reports it, sorted by name, with the value ``effective`` gives it.

        Kafka's KRaft controller builds these (``KafkaConfigSchema.resolveEffectiveTopicConfig``) from
        every synonym of the group, not only the first: ``retention.ms`` with only
        ``log.retention.hours`` set is ``STATIC_BROKER_CONFIG`` here, unlike in DescribeConfigs
        (``describe_topic_configs``). CreateTopics carries no synonyms; the chain kept here is the
        whole group's (static settings, then defaults), whose head gives the source.
        """
        return self._topic_views(overrides, effective, describe=False)

    def broker_configs(self) -> list[ConfigView]:
        """Every key of this broker (the ``resource_name`` = node id view), sorted by name.

        Values are the effective ones (Kafka's ``currentConfig``: dynamic settings over static ones, a
        dynamic key dropping its synonyms below it); keys Strata takes only dynamically are listed once set.
        """
        effective = merge_dynamic_configs(self.static, self.dynamic_default, self.dynamic_broker)
        known = {k: v for k, v in effective.items() if k not in IGNORED_KEYS}
        parsed = BROKER_CONFIG_DEF.parse(known, allow_unknown=True)
        out = []
        for name, key in BROKER_CONFIG_DEF.keys.items():
            chain = self._config_synonyms(name)  # drops what outranks the key itself
            source = chain[0].source if chain else ConfigSource.DEFAULT_CONFIG
            sensitive = key.type == "password"  # Kafka's PASSWORD keys: the value is never sent
            out.append(ConfigView(name, None if sensitive else format_value(parsed[name]), source,
                                  self._read_only(name), _TYPES.get(key.type, ConfigType.UNKNOWN),
                                  _hidden(chain) if sensitive else tuple(chain), key.doc or None,
                                  is_sensitive=sensitive))
        out.extend(self._listener_configs(effective))
        dynamic_only = {n for n in (*self.dynamic_broker, *self.dynamic_default)
                        if n not in BROKER_CONFIG_DEF.keys and listener_config_base(n) is None}
        out.extend(v for v in self._plugin_configs() if v.name not in dynamic_only)  # a custom one of that name wins
        for name in sorted((set(self.static) & IGNORED_KEYS) | dynamic_only):
            if name in dynamic_only:
                out.append(self._dynamic_only_view(name, self._config_synonyms(name)))
                continue
            value = self.static[name]
            out.append(ConfigView(name, value, ConfigSource.STATIC_BROKER_CONFIG, self._read_only(name),
                                  ConfigType.UNKNOWN,
                                  (Synonym(name, value, ConfigSource.STATIC_BROKER_CONFIG),),
                                  "Accepted for compatibility; not used by Strata"))
        out.sort(key=lambda v: v.name)
        return out

    def _listener_configs(self, effective: Mapping[str, str]) -> list[ConfigView]:
        """``listener.name.<listener>.<key>`` settings (per-listener TLS and SASL), secrets reported as null, as are
        custom ones whose ``<key>`` has no type (Kafka's ``maybeSensitive``)."""
        out = []
        for name in sorted(k for k in effective if listener_config_base(k) is not None):
            typed = broker_config_type_known(name)
            sensitive = is_sensitive(name) or not typed
            key = broker_config_key(name)
            chain = self._static_chain([name])
            source = chain[0].source if chain else ConfigSource.STATIC_BROKER_CONFIG
            out.append(ConfigView(name, None if sensitive else effective[name], source, self._read_only(name),
                                  ConfigType.UNKNOWN if not typed else ConfigType.PASSWORD if sensitive else
                                  (_TYPES.get(key.type, ConfigType.STRING) if key else ConfigType.STRING),
                                  _hidden(chain) if sensitive else tuple(chain), key.doc if key else None,
                                  is_sensitive=sensitive))
        return out

    def default_broker_configs(self) -> list[ConfigView]:
        """The cluster-wide dynamic defaults (resource ``""``), sorted by name: only the keys set there, each
        with the ``DYNAMIC_DEFAULT_BROKER_CONFIG`` part of its chain (Kafka's ``perBrokerConfig = false``)."""
        out = []
        for name in sorted(self.dynamic_default):
            chain = [s for s in self._config_synonyms(name) if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            out.append(self._dynamic_only_view(name, chain, self.dynamic_default[name]))
        return out

    def _dynamic_only_view(self, name: str, chain: list[Synonym], value: str | None = None) -> ConfigView:
        """A key set only dynamically. A custom one (no type: Kafka's ``maybeSensitive``) is sensitive: no value,
        in the entry or its synonyms, whatever it holds; ``config_type`` UNKNOWN, read-only, no documentation."""
        key = broker_config_key(name)
        if not broker_config_type_known(name):
            return ConfigView(name, None, chain[0].source if chain else ConfigSource.DEFAULT_CONFIG,
                              self._read_only(name), ConfigType.UNKNOWN, _hidden(chain), None, is_sensitive=True)
        source = chain[0].source if chain else ConfigSource.DEFAULT_CONFIG
        return ConfigView(name, chain[0].value if value is None and chain else value, source, self._read_only(name),
                          _TYPES.get(key.type, ConfigType.UNKNOWN) if key else ConfigType.UNKNOWN, tuple(chain),
                          (key.doc or None) if key else None)


    def _plugin_configs(self) -> list[ConfigView]:
        """The remote storage plugins' props, as their ``configure`` receives them, under their prefixes.

        Kafka reports only keys it defines; Strata also reports these so that a reader of the remote
        tier (the Spark data source) can open the same store from the bootstrap address alone. The
        embedded ``local`` backend's default directory is reported resolved to an absolute path.
        Credentials are reported as sensitive (value null), as Kafka does for PASSWORD keys.
        """
        remote = self.config.remote
        first_dir = self.config.log_dirs[0].absolute() if self.config.log_dirs else Path.cwd()
        rsm = remote.rsm_configs(self.config.node_id, first_dir)
        rsm.pop("broker.id", None)
        if remote.rsm_class_name == "local" and "dir" in rsm:
            rsm["dir"] = str(Path(str(rsm["dir"])).expanduser().absolute())
        out = []
        for prefix, props in ((remote.rsm_prefix, rsm), (remote.rlmm_prefix, remote.rlmm_props)):
            for key, value in sorted(props.items()):
                name = prefix + key
                sensitive = is_sensitive_key(key)
                source = ConfigSource.STATIC_BROKER_CONFIG if name in self.static else ConfigSource.DEFAULT_CONFIG
                view_value = None if sensitive else format_value(value)
                out.append(ConfigView(name, view_value, source, True,
                                      ConfigType.PASSWORD if sensitive else ConfigType.STRING,
                                      (Synonym(name, view_value, source),), "A remote storage plugin property",
                                      is_sensitive=sensitive))
        return out


_SENSITIVE_WORDS = ("password", "secret", "token", "credential", "access.key", "private")


def _hidden(chain: Iterable[Synonym]) -> tuple[Synonym, ...]:
    return tuple(Synonym(syn.name, None, syn.source) for syn in chain)


def is_sensitive_key(key: str) -> bool:
    """Plugin props that hold credentials: never reported, like Kafka's PASSWORD-typed keys."""
    lowered = key.lower()
    return any(word in lowered for word in _SENSITIVE_WORDS)


def select(views: Iterable[ConfigView], keys: Sequence[str] | None) -> list[ConfigView]:
    """DescribeConfigs ``configuration_keys``: null or empty means every key; unknown names are skipped."""
    if not keys:
        return list(views)
    wanted = set(keys)
    return [v for v in views if v.name in wanted]


def check_broker_resource_name(name: str, node_id: int, *, allow_empty: bool) -> None:
    """A BROKER resource names this node (or, where Kafka allows it, "" for cluster-wide defaults)."""
    if name == "" and allow_empty:
        return
    try:
        given = int(name)
    except ValueError:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
    if given != node_id:
        expected = f"{node_id} or empty string" if allow_empty else f"{node_id}"
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {expected}, but received {name}")


# -- altering ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigChange:
    name: str
    value: str | None
    op: int = AlterOp.SET


_OPS = frozenset(int(op) for op in AlterOp)


def check_changes(changes: Sequence[ConfigChange], *, incremental: bool) -> None:
    """Kafka's ``ConfigAdminManager.preprocess``: duplicate keys, null values, unknown operations."""
    names = [c.name for c in changes]
    if len(set(names)) != len(names):
        raise ApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    if incremental:
        for c in changes:
            if c.op not in _OPS:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {c.op}")
    nulls = [c.name for c in changes if c.value is None and not (incremental and c.op == AlterOp.DELETE)]
    if nulls:
        raise ApiError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))


def canonical_topic_changes(changes: Sequence[ConfigChange]) -> list[ConfigChange]:
    """Deprecated topic keys (``remote.log.storage.enable``, ``remote.log.retention.*``) renamed to Kafka's,
    so the stored override is the canonical key (DescribeConfigs then reports it as a topic override) and an
    alias set over an existing canonical override replaces it. The same key twice with different values
    (alias and canonical together) is INVALID_CONFIG."""
    if not any(c.name in TOPIC_CONFIG_ALIASES for c in changes):
        return list(changes)
    try:
        renamed = canonical_topic_configs({c.name: c.value for c in changes})
    except InvalidConfigError as e:
        raise ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
    out, seen = [], set()
    for c in changes:
        name = TOPIC_CONFIG_ALIASES.get(c.name, c.name)
        if name not in seen:
            seen.add(name)
            out.append(ConfigChange(name, renamed.get(name, c.value), c.op))
    return out


def replace_topic_overrides(changes: Sequence[ConfigChange]) -> dict[str, str]:
    """Legacy AlterConfigs: the request's entries become the topic's whole override set."""
    return {c.name: c.value for c in changes if c.value is not None}


def incremental_topic_overrides(current: Mapping[str, str], changes: Sequence[ConfigChange]) -> dict[str, str]:
    """IncrementalAlterConfigs on a topic's overrides (Kafka's ``incrementalAlterConfigResource``).

    APPEND and SUBTRACT work on LIST keys only; they start from the override, or from the key's
    built-in default when the topic has none (Kafka's ``KafkaConfigSchema.getDefault``).
    """
    new = dict(current)
    for c in changes:
        op = AlterOp(c.op)
        if op is AlterOp.SET:
            assert c.value is not None
            new[c.name] = c.value
        elif op is AlterOp.DELETE:
            new.pop(c.name, None)
        else:
            key = LOG_CONFIG_DEF.keys.get(c.name)
            if key is None or key.type != "list":
                raise ApiError(ErrorCode.INVALID_CONFIG,
                               f"Can't {op.name} to key {c.name} because its type is not LIST.")
            base = new.get(c.name)
            if base is None:
                base = format_value(key.default) or ""
            parts = [p for p in base.split(",") if p]
            for item in (c.value or "").split(","):
                if op is AlterOp.APPEND and item not in parts:
                    parts.append(item)
                elif op is AlterOp.SUBTRACT and item in parts:
                    parts.remove(item)
            new[c.name] = ",".join(parts)
    return new


def refuse_broker_changes(changes: Sequence[ConfigChange]) -> None:
    """A broker composed without dynamic configs refuses every key, with a hint where to set it. Nothing to refuse
    is a no-op. (A broker with them refuses what Kafka refuses: ``strata.broker.dynamic_config.check_dynamic_configs``.)
    """
    if changes:
        names = ", ".join(sorted(c.name for c in changes))
        raise ApiError(ErrorCode.INVALID_REQUEST,
                       f"Cannot update these configs dynamically: {names}. {STRATA_READ_ONLY}")


def incremental_broker_configs(current: Mapping[str, str], changes: Sequence[ConfigChange]) -> dict[str, str]:
    """IncrementalAlterConfigs on a broker's (or the cluster default's) dynamic configs.

    Kafka's ``ConfigAdminManager.prepareIncrementalConfigs`` over ``KafkaConfig.configKeys``: APPEND and
    SUBTRACT work on LIST keys only and start from the dynamic value, else from the key's built-in default.
    SET and DELETE take any name (a custom config's too); APPEND and SUBTRACT of a name that is no broker config
    (custom, or ``listener.name.<l>.<key>``) fail the way Kafka's do, where looking the name up in ``configKeys``
    throws: UNKNOWN_SERVER_ERROR.
    """
    new = dict(current)
    for c in changes:
        op = AlterOp(c.op)
        if op is AlterOp.SET:
            assert c.value is not None
            new[c.name] = c.value
        elif op is AlterOp.DELETE:
            new.pop(c.name, None)
        else:
            if c.name not in KNOWN_BROKER_CONFIGS:
                raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Unknown config name: {c.name}")
            key = broker_config_key(c.name)
            if key is None or key.type != "list":
                raise ApiError(ErrorCode.INVALID_CONFIG,
                               f"Config value {op.name.lower()} is not allowed for config key: {c.name}")
            base = new.get(c.name)
            if base is None:
                base = format_value(key.default) or ""
            parts = [p for p in base.split(",") if p]
            items = [item for item in (c.value or "").split(",") if item]
            if op is AlterOp.APPEND:
                parts += [item for item in items if item not in parts]
            else:
                parts = [p for p in parts if p not in items]
            new[c.name] = ",".join(parts)
    return new


def _type_name(resource_type: int) -> str:
    try:
        return ResourceType(resource_type).name
    except ValueError:
        return str(resource_type)


def duplicate_resources(resources: Iterable[Any]) -> set[tuple[int, str]]:
    """(type, name) pairs named more than once in one request: Kafka fails every copy."""
    seen: set[tuple[int, str]] = set()
    dupes: set[tuple[int, str]] = set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (dupes if key in seen else seen).add(key)
    return dupes


async def alter_resource(broker: ConfigResources, resource_type: int, resource_name: str,
                         changes: Sequence[ConfigChange], *, incremental: bool, validate_only: bool) -> None:
    """One resource of AlterConfigs (``incremental=False``) or IncrementalAlterConfigs; raises ApiError.

    Topic changes are validated in full (unknown keys, bad values, cross-key rules) before anything
    is written, then persisted and applied to the live logs unless ``validate_only``. BROKER changes
    (``"1"`` this broker, ``""`` the cluster-wide default) go to the broker's dynamic configs
    (:class:`strata.broker.dynamic_config.DynamicBrokerConfigs`), which validate, persist and apply them.
    """
    check_changes(changes, incremental=incremental)
    if resource_type == ResourceType.TOPIC:
        if not resource_name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        validate_topic_name(resource_name)
        info = broker.topics.get(resource_name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource_name}' does not exist.")
        changes = canonical_topic_changes(changes)
        if incremental:
            overrides = incremental_topic_overrides(info.configs, changes)
        else:
            overrides = replace_topic_overrides(changes)
        broker.topics.check_configs(overrides, resource_name)
        if not validate_only:
            await broker.admin.set_topic_configs(resource_name, overrides)
    elif resource_type == ResourceType.GROUP:
        groups = getattr(broker, "group_configs", None)
        if groups is None:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Group configs are not available on this broker")
        await groups.alter(resource_name, changes, incremental=incremental, validate_only=validate_only)
    elif resource_type == ResourceType.BROKER:
        check_broker_resource_name(resource_name, broker.node_id, allow_empty=True)
        store: BrokerConfigStore | None = getattr(broker, "dynamic_configs", None)
        if store is None:
            refuse_broker_changes(changes)
        else:
            await store.alter(resource_name, changes, incremental=incremental, validate_only=validate_only)
    else:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {_type_name(resource_type)}")


def describe_resource(broker: ConfigResources, views: ConfigViews, resource_type: int, resource_name: str,
                      keys: Sequence[str] | None) -> list[ConfigView]:
    """The configs of one DescribeConfigs resource; raises ApiError (Kafka's ``ConfigHelper``)."""
    if resource_type == ResourceType.TOPIC:
        validate_topic_name(resource_name)
        info = broker.topics.get(resource_name)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{resource_name}' does not exist.")
        return select(views.describe_topic_configs(info.configs, broker.topics.config(resource_name)), keys)
    if resource_type == ResourceType.BROKER:
        check_broker_resource_name(resource_name, broker.node_id, allow_empty=True)
        if resource_name == "":
            return select(views.default_broker_configs(), keys)  # the cluster-wide dynamic defaults
        return select(views.broker_configs(), keys)
    if resource_type == ResourceType.GROUP:
        groups = getattr(broker, "group_configs", None)
        if groups is None:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Group configs are not available on this broker")
        if not resource_name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Group name must not be empty.")
        return select(group_config_views(groups.overrides(resource_name), groups.settings(resource_name),
                                         groups.defaults, groups.share_defaults), keys)
    raise ApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {_type_name(resource_type)}")


def group_config_views(overrides: Mapping[str, str], settings: GroupSettings, defaults: ConsumerGroupConfig,
                       share_defaults: ShareGroupConfig = DEFAULT_SHARE_GROUP_CONFIG) -> list[ConfigView]:
    """Every GROUP key (Kafka's ``GroupConfig``, as :func:`group_config_def` defines them), sorted: the group's
    own value (DYNAMIC_GROUP_CONFIG) or the default (DEFAULT_CONFIG), with the broker's ``group.<key>`` as a
    synonym where there is one (``share.auto.offset.reset`` and ``share.isolation.level`` have none)."""
    definitions = group_config_def(defaults, share_defaults).keys
    effective = settings.values()
    out = []
    for name in sorted(definitions):
        key = definitions[name]
        synonyms: list[Synonym] = []
        if name in overrides:
            source = ConfigSource.DYNAMIC_GROUP_CONFIG
            synonyms.append(Synonym(name, overrides[name], source))
        else:
            source = ConfigSource.DEFAULT_CONFIG
        if f"group.{name}" in BROKER_CONFIG_DEF.keys:
            synonyms.append(Synonym(f"group.{name}", str(key.default), ConfigSource.DEFAULT_CONFIG))
        out.append(ConfigView(name, str(effective[name]), source, False, _TYPES.get(key.type, ConfigType.STRING),
                              tuple(synonyms), key.doc))
    return out
