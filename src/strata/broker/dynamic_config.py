"""Dynamic broker configs: Kafka's ``DynamicBrokerConfig``, changed at run time through the admin APIs.

AlterConfigs and IncrementalAlterConfigs on a BROKER resource change configs without a restart:
``"<id>"`` (this broker only) or ``""`` (the cluster-wide default of every broker). A broker's effective
config is, key by key, the first of: its own dynamic value (``DYNAMIC_BROKER_CONFIG``), the cluster-wide
dynamic value (``DYNAMIC_DEFAULT_BROKER_CONFIG``), ``server.properties`` (``STATIC_BROKER_CONFIG``),
the built-in default (``DEFAULT_CONFIG``); a dynamic key also hides its synonyms below it (Kafka's
``overrideProps``). Which keys can change is Kafka's ``AllDynamicConfigs``
(``strata.config.broker_config.DYNAMIC_BROKER_CONFIGS``); the listener keys are per broker only.

Where they are kept: on a single node, ``strata-dynamic-broker-configs.json`` in the first log dir,
replaced atomically on every change (``{"version": 1, "brokers": {"<default>": {...}, "1": {...}}}``,
the entity names of ZooKeeper); in a cluster, Kafka's znodes ``/config/brokers/<id>`` and
``/config/brokers/<default>`` (:mod:`strata.cluster.broker_configs`), watched by every broker, so a
default set through one broker applies on all of them.

What a change does (``_apply``): the broker-wide topic defaults (``log.retention.ms``,
``log.segment.bytes``, ``message.max.bytes`` ...) become ``TopicRegistry.defaults`` and every open log
not overriding them gets the new config at once; ``remote.fetch.max.wait.ms``,
``remote.list.offsets.request.timeout.ms``, ``remote.log.index.file.cache.total.size.bytes`` and the KIP-956
quotas ``remote.log.manager.copy/fetch.max.bytes.per.second`` reach the RemoteLogManager live; the
RemoteLogManager's thread pools are sized from the effective config when it starts (the next restart); in
a cluster the controller's default for ``unclean.leader.election.enable`` follows the dynamic value; the
replication throttle rates and ``num.replica.fetchers`` reach the quotas and the replica fetchers through
``on_apply`` (:mod:`strata.broker.replication_config`). Keys of machinery Strata does not have
(``log.cleaner.*``, ``num.io.threads``, connection quotas ...) are validated, stored and reported, and do nothing.

Validation follows ``DynamicBrokerConfig.validate`` as ``ConfigAdminManager`` answers it (every failure
is INVALID_REQUEST): known keys that are not dynamic, unprefixed SSL keys, bad values, per-broker keys on
the cluster-wide resource, then the whole resulting config (cross-key rules, thread counts within half and
double of the current ones, and, Strata's own rule, every topic's overrides still valid over the new
defaults). Persisted configs that are no longer valid are dropped with an error logged, as Kafka's
``fromPersistentProps`` does, so a broker always starts.

Custom configs (Kafka's ``customPropsAllowed``): a name that is no broker config at all (``cleanup.policy``,
``my.plugin.setting``; :data:`strata.config.broker_config.KNOWN_BROKER_CONFIGS` has Kafka 3.9's names and
Strata's own) is not refused but stored with the level's other configs, where it survives restarts, is
described (source DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG, read-only, sensitive: Kafka knows
no type for it, so neither its value nor a log line shows it) and can be deleted. It never changes the
broker: ``BrokerConfig.with_dynamic`` leaves it out of every field. So do ``listener.name.<l>.<key>``
settings other than the TLS keystores, which Kafka accepts the same way (values of a dynamic ``<key>``
checked, per broker unless ``<key>`` is a cluster-level listener config).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from strata.broker.config_views import ConfigChange, incremental_broker_configs, scala_set
from strata.cluster.broker_configs import DEFAULT_ENTITY, BrokerConfigConflictError, BrokerConfigZk
from strata.cluster.zk import ZkError
from strata.config.broker_config import (
    CLUSTER_LEVEL_LISTENER_CONFIGS,
    DYNAMIC_BROKER_KEYS,
    DYNAMIC_THREAD_COUNT_CONFIGS,
    PER_BROKER_CONFIGS,
    RECONFIGURABLE_SSL_CONFIGS,
    BrokerConfig,
    broker_config_key,
    broker_config_type_known,
    listener_config_base,
    merge_dynamic_configs,
    non_dynamic_broker_configs,
)
from strata.config.security_config import HIDDEN, redacted
from strata.errors import ApiError, ErrorCode, InvalidConfigError, KafkaStorageError
from strata.log.checkpoints import atomic_write

if TYPE_CHECKING:
    from strata.broker.topics import TopicRegistry
    from strata.cluster.node import ClusterNode
    from strata.config.defs import ConfigKey
    from strata.config.security_config import ListenerConfig, SslConfig
    from strata.log.cleaner.log_cleaner import LogCleaner
    from strata.replication.replica_manager import ReplicaManager
    from strata.tiered.manager import RemoteLogManager

log = logging.getLogger(__name__)


class TlsListener(Protocol):
    """A listener whose keystore a dynamic config may replace (``strata.broker.wire.listeners.ListenerRuntime``)."""

    name: str
    config: ListenerConfig

    def validate_tls(self, ssl_config: SslConfig) -> None: ...
    def reload_tls(self, ssl_config: SslConfig | None = None) -> bool: ...


class DynamicConfigHost(Protocol):
    """The parts of a broker that dynamic configs change, and nothing else: its config (replaced whole), the
    topic defaults and every log's config, the cleaner, the RemoteLogManager's quotas and caches, the TLS
    listeners' keystores; ``cluster`` to keep them in ZooKeeper."""

    config: BrokerConfig
    node_id: int
    cluster: ClusterNode | None
    topics: TopicRegistry
    replicas: ReplicaManager
    log_cleaner: LogCleaner | None
    remote_log_manager: RemoteLogManager | None
    listeners: Sequence[TlsListener]

    def apply_tiering_change(self, name: str, was_tiered: bool) -> None: ...

DYNAMIC_CONFIG_FILE = "strata-dynamic-broker-configs.json"
_DEFAULT_NAME = "<default>"  # the file's (and ZooKeeper's) name of the cluster-wide entity
_WRITE_ATTEMPTS = 10
_PROPAGATION_TIMEOUT_S = 10.0


def _file_name(entity: str) -> str:
    return _DEFAULT_NAME if entity == DEFAULT_ENTITY else entity


def _value_key(name: str) -> ConfigKey | None:
    """What a dynamic value is checked against (Kafka's ``validateConfigTypes``: the listener prefix stripped, then
    ``DynamicConfig.Broker``'s definitions, which are the dynamic keys'): None for a custom name, whose value Kafka
    takes as it is."""
    base = listener_config_base(name)
    plain = name if base is None else base
    return broker_config_key(name) if plain in DYNAMIC_BROKER_KEYS or plain in RECONFIGURABLE_SSL_CONFIGS else None


def _per_broker_only(name: str) -> bool:
    """``perBrokerConfigs``: the per-broker keys, and every ``listener.name.<l>.<key>`` but the cluster-level ones."""
    base = listener_config_base(name)
    return name in PER_BROKER_CONFIGS if base is None else base not in CLUSTER_LEVEL_LISTENER_CONFIGS


def check_dynamic_configs(props: Mapping[str, str], *, per_broker: bool) -> None:
    """``DynamicBrokerConfig.validateConfigs``: raises ApiError(INVALID_REQUEST) with Kafka's messages, in its order.

    Known keys that cannot change at run time are refused; unknown names are custom configs and pass (only
    ``listener.name.<l>.<dynamic key>`` has its value checked); the reconfigurable SSL keys only per listener;
    values must parse; per-broker keys not at the cluster-wide level.
    """
    refused = non_dynamic_broker_configs(props)
    if refused:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {scala_set(refused)}")
    unprefixed = [k for k in props if k in RECONFIGURABLE_SSL_CONFIGS]
    if unprefixed:
        raise ApiError(ErrorCode.INVALID_REQUEST, "These security configs can be dynamically updated only "
                                                  f"per-listener using the listener prefix: {scala_set(unprefixed)}")
    for name, value in props.items():
        key = _value_key(name)
        if key is None:
            continue
        try:
            key.parse(value)
        except InvalidConfigError as e:
            raise ApiError(ErrorCode.INVALID_REQUEST, str(e)) from None
    if not per_broker:
        refused = [k for k in props if _per_broker_only(k)]
        if refused:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                                                      f"broker id must be specified: {scala_set(refused)}")


def loggable(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` fit for a log line (Kafka's ``loggableValue``): secrets hidden, and so is every value of a key
    without a type, a custom config's."""
    return {k: HIDDEN if not broker_config_type_known(k) else v for k, v in redacted(props).items()}


def sanitize(props: Mapping[str, str], *, per_broker: bool, where: str) -> dict[str, str]:
    """Kafka's ``fromPersistentProps``: what is not (or no longer) a valid dynamic config is dropped, logged."""
    out: dict[str, str] = {}
    for name, value in props.items():
        try:
            check_dynamic_configs({name: value}, per_broker=per_broker)
        except ApiError as e:
            log.error("ignoring the dynamic broker config %s=%s in %s: %s", name, loggable({name: value})[name],
                      where, e)
            continue
        out[name] = value
    return out


def _int_value(merged: Mapping[str, str], name: str) -> int:
    key = broker_config_key(name)
    assert key is not None
    value = key.parse(merged[name]) if name in merged else key.default
    return int(value)


def check_thread_counts(current: Mapping[str, str], new: Mapping[str, str]) -> None:
    """``DynamicThreadPool`` / ``LogCleaner.validateReconfiguration``: a thread count that changes must be
    at least 1, at least half and at most double the current count."""
    for name in sorted(DYNAMIC_THREAD_COUNT_CONFIGS):
        old_value, new_value = _int_value(current, name), _int_value(new, name)
        if new_value == old_value:
            continue
        if name == "log.cleaner.threads":
            if new_value < 1:
                raise ValueError("Log cleaner threads should be at least 1")
            if new_value < old_value // 2:
                raise ValueError(f"Log cleaner threads cannot be reduced to less than half the current value "
                                 f"{old_value}")
            if new_value > old_value * 2:
                raise ValueError(f"Log cleaner threads cannot be increased to more than double the current value "
                                 f"{old_value}")
            continue
        problem = f"Dynamic thread count update validation failed for {name}={new_value}"
        if new_value < 1:
            raise ValueError(f"{problem}, value should be at least 1")
        if new_value < old_value // 2:
            raise ValueError(f"{problem}, value should be at least half the current value {old_value}")
        if new_value > old_value * 2:
            raise ValueError(f"{problem}, value should not be greater than double the current value {old_value}")


class DynamicBrokerConfigs:
    """The broker's dynamic configs: both levels, where they are kept, and their application."""

    def __init__(self, broker: DynamicConfigHost) -> None:
        self._broker = broker
        self.node_id = broker.node_id
        self.entity = str(broker.node_id)
        self.levels: dict[str, dict[str, str]] = {DEFAULT_ENTITY: {}, self.entity: {}}
        self.path = broker.config.log_dirs[0] / DYNAMIC_CONFIG_FILE
        self._file_extra: dict[str, Any] = {}  # other entities found in the file (kept as they are)
        self._zk: BrokerConfigZk | None = None
        self.effective: BrokerConfig | None = None  # the config the levels give, once applied
        self._lock = asyncio.Lock()
        self._started = False
        # told the effective config after every application (the broker's replication config follows it)
        self.on_apply: list[Callable[[BrokerConfig], None]] = []

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the stored configs and apply them (before tiering starts: its pools are sized from them)."""
        broker = self._broker
        if broker.cluster is not None:
            self._zk = BrokerConfigZk(broker.cluster.zk, self.node_id)
            await self._zk.start(self._on_stored_change)
            # the controller's fallback when a topic has no unclean.leader.election.enable of its own
            broker.cluster.controller.unclean_default = self._unclean_leader_election_enable
        else:
            for entity, props in self._load_file().items():
                self.levels[entity] = sanitize(props, per_broker=entity != DEFAULT_ENTITY, where=str(self.path))
        self._started = True
        stored = dict(self.levels)
        # Stored configs that do not make a valid config together (a topic created meanwhile, a changed
        # server.properties): this broker's level is left out first, then the cluster-wide one too.
        fallback: dict[str, dict[str, str]] = {}
        for fallback in ({}, {self.entity: {}}, {self.entity: {}, DEFAULT_ENTITY: {}}):
            self.levels = {**stored, **fallback}
            if self._apply():
                break
        left_out = {_file_name(e): stored[e] for e in fallback if stored[e]}
        if left_out:
            log.error("stored dynamic broker configs left out (they do not make a valid config with the rest): "
                      "%s; change them with AlterConfigs", {k: loggable(v) for k, v in left_out.items()})
        if any(self.levels.values()):
            log.info("dynamic broker configs: %s (cluster-wide), %s (broker %d)",
                     loggable(self.levels[DEFAULT_ENTITY]), loggable(self.levels[self.entity]), self.node_id)

    def _load_file(self) -> dict[str, dict[str, str]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            brokers = data["brokers"]
            out = {DEFAULT_ENTITY if name == _DEFAULT_NAME else name: {str(k): str(v) for k, v in props.items()}
                   for name, props in brokers.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise KafkaStorageError(f"cannot read the dynamic broker configs in {self.path}: {e}") from None
        self._file_extra = {k: v for k, v in out.items() if k not in self.levels}
        return {k: v for k, v in out.items() if k in self.levels}

    def _save_file(self, levels: Mapping[str, Mapping[str, str]]) -> None:
        brokers = {_file_name(entity): dict(sorted(props.items()))
                   for entity, props in {**self._file_extra, **levels}.items()}
        atomic_write(self.path, json.dumps({"version": 1, "brokers": brokers}, indent=1).encode())

    def _on_stored_change(self, entity: str, props: dict[str, str]) -> None:
        """A znode's configs as the watch delivered them (also this broker's own writes)."""
        if entity not in self.levels:
            return
        clean = sanitize(props, per_broker=entity != DEFAULT_ENTITY, where=f"/config/brokers/{_file_name(entity)}")
        if clean == self.levels[entity]:
            return
        old = self.levels[entity]
        self.levels[entity] = clean
        if self._started and not self._apply():
            self.levels[entity] = old  # Kafka: "could not be applied", the config stays as it was
            log.error("dynamic broker configs of %s not applied: %s", entity or "the cluster", clean)

    # -- changes ------------------------------------------------------------------------------

    async def alter(self, resource_name: str, changes: Sequence[ConfigChange], *, incremental: bool,
                    validate_only: bool) -> None:
        """One BROKER resource of (Incremental)AlterConfigs; raises ApiError. Legacy AlterConfigs replaces the
        entity's whole set (no entries: all of them removed), as in Kafka."""
        if not self._started:
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, "The broker is starting; retry")
        try:
            async with self._lock:
                await self._alter(resource_name, changes, incremental=incremental, validate_only=validate_only)
        except ZkError as e:  # answered for this resource only, as Kafka answers a ZooKeeper failure
            raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {e}") from None

    async def _alter(self, entity: str, changes: Sequence[ConfigChange], *, incremental: bool,
                     validate_only: bool) -> None:
        for _ in range(_WRITE_ATTEMPTS):
            current, version = await self._read(entity)
            if incremental:
                new = incremental_broker_configs(current, changes)
            else:
                new = {c.name: c.value for c in changes if c.value is not None}
            self.check(entity, new)
            if validate_only:
                return
            try:
                await self._write(entity, new, version)
            except BrokerConfigConflictError:
                continue  # changed through another broker meanwhile: start again from what is there
            log.info("dynamic broker configs of %s now %s", f"broker {entity}" if entity else "the cluster",
                     loggable(new))
            return
        raise ApiError(ErrorCode.REQUEST_TIMED_OUT,
                       f"The dynamic configs of {entity or 'the cluster'} kept changing meanwhile; retry")

    async def _read(self, entity: str) -> tuple[dict[str, str], int]:
        if self._zk is None:
            return dict(self.levels[entity]), 0
        props, version = await self._zk.read(entity)
        return sanitize(props, per_broker=entity != DEFAULT_ENTITY, where="ZooKeeper"), version

    async def _write(self, entity: str, props: dict[str, str], version: int) -> None:
        if self._zk is None:
            levels = {**self.levels, entity: props}
            self._save_file(levels)  # persisted before it is applied or answered
            self.levels = levels
            self._apply()
            return
        new_version = await self._zk.write(entity, props, version)
        # the watch applies it (here and on every other broker); answer once it has here
        if not await self._zk.wait_for(entity, new_version, _PROPAGATION_TIMEOUT_S):
            log.warning("dynamic broker configs of %s written but not seen back within %.0f s",
                        entity or "the cluster", _PROPAGATION_TIMEOUT_S)

    def check(self, entity: str, props: Mapping[str, str]) -> BrokerConfig:
        """Validate ``props`` as the entity's new dynamic configs; returns the effective config they give."""
        check_dynamic_configs(props, per_broker=entity != DEFAULT_ENTITY)
        levels = {**self.levels, entity: dict(props)}
        static = self._broker.config.raw
        try:
            effective = self._effective(levels)
            check_thread_counts(self._merged(self.levels, static), self._merged(levels, static))
            problem = self._broker.topics.check_defaults(effective.log_config)
            if problem:
                raise ValueError(problem)
            if entity != DEFAULT_ENTITY:
                self._check_listener_tls(effective)
        except (InvalidConfigError, ValueError) as e:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid dynamic configuration: {e}") from None
        return effective

    # -- application --------------------------------------------------------------------------

    def _merged(self, levels: Mapping[str, Mapping[str, str]], static: Mapping[str, str]) -> dict[str, str]:
        return merge_dynamic_configs(static, levels[DEFAULT_ENTITY], levels[self.entity])

    def _effective(self, levels: Mapping[str, Mapping[str, str]]) -> BrokerConfig:
        return self._broker.config.with_dynamic(levels[DEFAULT_ENTITY], levels[self.entity])

    def _apply(self) -> bool:
        """Make the current levels the broker's config; False (nothing changed) when they do not make a valid one."""
        broker = self._broker
        try:
            effective = self._effective(self.levels)
        except InvalidConfigError as e:
            log.error("invalid dynamic broker configs: %s", e)
            return False
        problem = broker.topics.check_defaults(effective.log_config)
        if problem:
            log.error("dynamic broker configs not applied: %s", problem)
            return False
        before = self.effective
        self.effective = effective
        # The broker's config keeps its static fields (listeners ...) and ``raw``; it takes the dynamic levels
        # (for DescribeConfigs and CreateTopics), the topic defaults and the tiering config (read when the
        # RemoteLogManager starts).
        broker.config = replace(broker.config, log_config=effective.log_config, remote=effective.remote,
                                cleaner=effective.cleaner,
                                dynamic_broker_configs=effective.dynamic_broker_configs,
                                dynamic_default_configs=effective.dynamic_default_configs,
                                dynamic_configs_enabled=True)
        self._apply_topic_defaults(effective)
        self._apply_remote(effective)
        self._apply_listener_tls(effective)
        if broker.log_cleaner is not None:  # Kafka's LogCleaner.reconfigure
            broker.log_cleaner.reconfigure(effective.cleaner)
        for fn in self.on_apply:
            fn(effective)
        if broker.cluster is not None and effective.cluster.unclean_leader_election_enable and not (
                before is not None and before.cluster.unclean_leader_election_enable):
            broker.cluster.controller.enqueue("unclean_enabled", None)  # the controller elects offline partitions
        return True

    def _apply_topic_defaults(self, effective: BrokerConfig) -> None:
        """Kafka's ``DynamicLogConfig.reconfigure``: new defaults, and every log that does not override them."""
        broker = self._broker
        topics = broker.topics
        if effective.log_config == topics.defaults:
            return
        tiered = {info.name: topics.remote_log_enabled(info.name) for info in topics}
        topics.set_defaults(effective.log_config)
        for info in topics:
            broker.replicas.apply_config(info.name)
            broker.apply_tiering_change(info.name, tiered[info.name])
        log.info("broker-wide topic defaults changed (dynamic broker configs): applied to %d topics",
                 len(tiered))

    def _apply_remote(self, effective: BrokerConfig) -> None:
        """``DynamicRemoteLogConfig.reconfigure`` for what the running RemoteLogManager can take."""
        rlm = self._broker.remote_log_manager
        if rlm is None:
            return
        new = effective.remote
        old = rlm.config
        rlm.config = replace(old, fetch_max_wait_ms=new.fetch_max_wait_ms,
                             list_offsets_timeout_ms=new.list_offsets_timeout_ms,
                             index_cache_total_size_bytes=new.index_cache_total_size_bytes,
                             copy_max_bytes_per_second=new.copy_max_bytes_per_second,
                             fetch_max_bytes_per_second=new.fetch_max_bytes_per_second)
        # KIP-956 (Kafka's updateCopyQuota/updateFetchQuota): copy tasks waiting on the old bound re-check at once
        if new.copy_max_bytes_per_second != old.copy_max_bytes_per_second:
            rlm.update_copy_quota(new.copy_max_bytes_per_second)
        if new.fetch_max_bytes_per_second != old.fetch_max_bytes_per_second:
            rlm.update_fetch_quota(new.fetch_max_bytes_per_second)
        if new.index_cache_total_size_bytes != old.index_cache_total_size_bytes and rlm.index_cache is not None:
            rlm.index_cache.resize(new.index_cache_total_size_bytes)
            log.info("remote.log.index.file.cache.total.size.bytes updated, old value: %d, new value: %d",
                     old.index_cache_total_size_bytes, new.index_cache_total_size_bytes)

    def _check_listener_tls(self, effective: BrokerConfig) -> None:
        """Kafka's ``SslFactory.validateReconfiguration``: a changed keystore must load and keep its identity."""
        for runtime in self._broker.listeners:
            new = effective.listener_named(runtime.name).ssl
            if new is not None and new != runtime.config.ssl:
                runtime.validate_tls(new)

    def _apply_listener_tls(self, effective: BrokerConfig) -> None:
        """New keystores/truststores of TLS listeners (``listener.name.<l>.ssl.keystore.location`` ...) are used
        for new connections at once; connections already open keep their session."""
        for runtime in self._broker.listeners:
            new = effective.listener_named(runtime.name).ssl
            if new is None or new == runtime.config.ssl:
                continue
            try:
                runtime.reload_tls(new)
            except InvalidConfigError as e:
                log.error("listener %s keeps its TLS keystore: %s", runtime.name, e)

    def _unclean_leader_election_enable(self) -> bool:
        effective = self.effective or self._broker.config
        return effective.cluster.unclean_leader_election_enable

