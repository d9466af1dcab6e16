"""Dynamic broker configs without a broker process: precedence, reports, validation, persistence, application."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from strata.broker.config_views import (
    AlterOp,
    ConfigChange,
    ConfigSource,
    ConfigType,
    ConfigViews,
    ResourceType,
    Synonym,
    alter_resource,
    describe_resource,
    incremental_broker_configs,
)
from strata.broker.dynamic_config import (
    DYNAMIC_CONFIG_FILE,
    DynamicBrokerConfigs,
    check_dynamic_configs,
    check_thread_counts,
    loggable,
    sanitize,
)
from strata.broker.topics import TopicRegistry
from strata.config.broker_config import (
    DYNAMIC_BROKER_CONFIGS,
    DYNAMIC_SASL_LOGIN_CONFIGS,
    PER_BROKER_CONFIGS,
    BrokerConfig,
    broker_config_key,
    merge_dynamic_configs,
)
from strata.config.security_config import HIDDEN
from strata.errors import ApiError, ErrorCode

DB, DD = ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
S, D, T = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG
HOUR_MS = 3_600_000


def _by_name(views: list[Any]) -> dict[str, Any]:
    return {v.name: v for v in views}


def _dynamic(static: dict[str, str], default: dict[str, str], per_broker: dict[str, str]) -> BrokerConfig:
    return BrokerConfig.from_props(static).with_dynamic(default, per_broker)


# -- the catalogue and the precedence ------------------------------------------------------------


def test_dynamic_keys_follow_kafkas_all_dynamic_configs() -> None:
    # the first broker synonym of each topic config is dynamic, the lower ones are not (Kafka 3.9)
    assert {"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms", "message.max.bytes", "log.segment.bytes",
            "log.cleanup.policy", "log.local.retention.ms", "min.insync.replicas"} <= DYNAMIC_BROKER_CONFIGS
    assert not {"log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.dirs", "broker.id",
                "zookeeper.connect", "num.partitions", "log.retention.check.interval.ms"} & DYNAMIC_BROKER_CONFIGS
    assert {"log.cleaner.threads", "num.io.threads", "num.replica.fetchers", "background.threads",
            "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
            "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.copier.thread.pool.size",
            "leader.replication.throttled.rate", "producer.id.expiration.ms"} <= DYNAMIC_BROKER_CONFIGS
    assert PER_BROKER_CONFIGS == {"listeners", "listener.security.protocol.map", *DYNAMIC_SASL_LOGIN_CONFIGS}
    assert "sasl.kerberos.min.time.before.relogin" in PER_BROKER_CONFIGS  # librdkafka's 0081 alters it
    assert all(broker_config_key(k) is not None for k in DYNAMIC_BROKER_CONFIGS)


def test_per_broker_over_cluster_default_over_static_and_synonyms_below_are_dropped() -> None:
    static = {"log.retention.hours": "48", "log.segment.bytes": "5000000", "num.partitions": "3"}
    merged = merge_dynamic_configs(static, {"log.retention.ms": "1000", "log.segment.bytes": "4000000"},
                                   {"log.segment.bytes": "3000000"})
    # a dynamic log.retention.ms removes the static log.retention.hours (Kafka's overrideProps)
    assert merged == {"log.retention.ms": "1000", "log.segment.bytes": "3000000", "num.partitions": "3"}
    effective = _dynamic(static, {"log.retention.ms": "1000", "log.cleaner.delete.retention.ms": "77"},
                         {"log.segment.bytes": "3000000", "message.max.bytes": "2000"})
    assert (effective.log_config.retention_ms, effective.log_config.segment_bytes) == (1000, 3_000_000)
    assert effective.log_config.max_message_bytes == 2000
    assert effective.log_config.delete_retention_ms == 77  # a dynamic-only key that defaults a topic config
    assert effective.raw == static and effective.dynamic_configs_enabled and effective.num_partitions == 3


# -- what DescribeConfigs and CreateTopics report ------------------------------------------------


def test_broker_view_reports_dynamic_sources_with_the_whole_chain() -> None:
    config = _dynamic({"log.retention.ms": "90000", "num.partitions": "4"},
                      {"log.retention.ms": "60000", "log.segment.bytes": "200000", "log.cleaner.threads": "2"},
                      {"log.retention.ms": "30000"})
    got = _by_name(ConfigViews(config).broker_configs())
    ms = got["log.retention.ms"]
    assert (ms.value, ms.source, ms.read_only) == ("30000", DB, False)
    assert ms.synonyms == (Synonym("log.retention.ms", "30000", DB), Synonym("log.retention.ms", "60000", DD),
                           Synonym("log.retention.ms", "90000", S), Synonym("log.retention.hours", "168", D))
    seg = got["log.segment.bytes"]
    assert (seg.value, seg.source, seg.read_only) == ("200000", DD, False)
    assert seg.synonyms == (Synonym("log.segment.bytes", "200000", DD), Synonym("log.segment.bytes", "1073741824", D))
    # not dynamic: read-only, static and default as before
    partitions = got["num.partitions"]
    assert (partitions.value, partitions.source, partitions.read_only) == ("4", S, True)
    assert got["log.retention.hours"].read_only and got["log.dirs"].read_only
    # a key Strata takes only dynamically is listed once set, with Kafka's default below it
    threads = got["log.cleaner.threads"]
    assert (threads.value, threads.source, threads.read_only, threads.config_type) == ("2", DD, False, ConfigType.INT)
    assert threads.synonyms == (Synonym("log.cleaner.threads", "2", DD), Synonym("log.cleaner.threads", "1", D))
    assert "num.io.threads" not in got


def test_cluster_default_resource_lists_only_its_own_keys() -> None:
    config = _dynamic({"log.retention.ms": "90000"}, {"log.retention.ms": "60000", "num.io.threads": "16"},
                      {"log.retention.ms": "30000", "log.segment.bytes": "100000"})
    got = ConfigViews(config).default_broker_configs()
    assert [v.name for v in got] == ["log.retention.ms", "num.io.threads"]
    ms, io = got
    assert (ms.value, ms.source, ms.synonyms) == ("60000", DD, (Synonym("log.retention.ms", "60000", DD),))
    assert (io.value, io.source, io.read_only, io.config_type) == ("16", DD, False, ConfigType.INT)
    assert ConfigViews(BrokerConfig.from_props({})).default_broker_configs() == []


def test_topics_that_inherit_report_the_dynamic_source() -> None:
    config = _dynamic({"log.retention.hours": "2"}, {"log.retention.ms": "60000", "message.max.bytes": "5000"},
                      {"log.segment.bytes": "100000", "log.cleaner.delete.retention.ms": "1000"})
    views = ConfigViews(config)
    overrides = {"segment.bytes": "200000"}
    got = _by_name(views.describe_topic_configs(overrides, config.log_config.with_overrides(overrides)))
    ret = got["retention.ms"]
    assert (ret.value, ret.source) == ("60000", DD)
    assert ret.synonyms == (Synonym("log.retention.ms", "60000", DD), Synonym("log.retention.hours", "2", S),
                            Synonym("log.retention.hours", "168", D))
    assert (got["max.message.bytes"].value, got["max.message.bytes"].source) == ("5000", DD)
    seg = got["segment.bytes"]  # the topic's own override still wins
    assert (seg.value, seg.source) == ("200000", T)
    assert seg.synonyms[:2] == (Synonym("segment.bytes", "200000", T), Synonym("log.segment.bytes", "100000", DB))
    dr = got["delete.retention.ms"]  # a broker synonym Strata reports once it is set dynamically
    assert (dr.value, dr.source, dr.synonyms[0]) == ("1000", DB, Synonym("log.cleaner.delete.retention.ms", "1000", DB))
    created = _by_name(views.topic_configs({}, config.log_config))
    assert (created["retention.ms"].value, created["retention.ms"].source) == ("60000", DD)
    assert (created["segment.bytes"].value, created["segment.bytes"].source) == ("100000", DB)


def test_without_dynamic_configs_the_static_report_is_unchanged_but_dynamic_keys_are_writable() -> None:
    static = {"log.retention.hours": "2", "num.io.threads": "8"}
    before = ConfigViews(BrokerConfig.from_props(static))
    after = ConfigViews(_dynamic(static, {}, {}))
    config = BrokerConfig.from_props(static)
    assert before.describe_topic_configs({}, config.log_config) == after.describe_topic_configs({}, config.log_config)
    old, new = _by_name(before.broker_configs()), _by_name(after.broker_configs())
    assert old.keys() == new.keys()
    for name in old:
        assert (old[name].value, old[name].source, old[name].synonyms) == (
            new[name].value, new[name].source, new[name].synonyms), name
        assert old[name].read_only
        assert new[name].read_only == (name not in DYNAMIC_BROKER_CONFIGS), name


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("props", "per_broker", "message"), [
    ({"log.dirs": "/x"}, True, "Cannot update these configs dynamically: Set(log.dirs)"),
    ({"log.retention.hours": "1", "log.retention.ms": "1"}, True,
     "Cannot update these configs dynamically: Set(log.retention.hours)"),
    ({"cleanup.policy": "compact", "broker.id": "2", "log.dirs": "/x", "num.partitions": "3",
      "queued.max.requests": "5", "zookeeper.connect": "zk:2181"}, True,  # a static Kafka key Strata does not use too
     "Cannot update these configs dynamically: HashSet(broker.id, log.dirs, num.partitions, queued.max.requests, "
     "zookeeper.connect)"),
    ({"ssl.keystore.location": "/k.pem"}, True, "These security configs can be dynamically updated only "
                                                "per-listener using the listener prefix: Set(ssl.keystore.location)"),
    ({"listener.name.plaintext.max.connections": "many"}, True,
     "Invalid value 'many' for configuration max.connections"),
    ({"listener.name.plaintext.my.setting": "x", "my.setting": "y"}, False,
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "Set(listener.name.plaintext.my.setting)"),
    ({"log.segment.bytes": "many"}, True, "Invalid value 'many' for configuration log.segment.bytes"),
    ({"log.segment.bytes": "1"}, True, "log.segment.bytes: must be at least 14"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1"}, False,
     "Cannot update these configs at default cluster level, broker id must be specified: Set(listeners)"),
])
def test_invalid_dynamic_configs_are_refused_like_kafka(props: dict[str, str], per_broker: bool,
                                                        message: str) -> None:
    with pytest.raises(ApiError) as e:
        check_dynamic_configs(props, per_broker=per_broker)
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    assert message in str(e.value)


def test_names_that_are_no_broker_config_are_custom_configs_and_pass() -> None:
    """Kafka's ``customPropsAllowed``: a name no broker config has is not validated, at either level."""
    custom = {"cleanup.policy": "not-a-policy", "my.plugin.setting": "x", "listener.name.plaintext.my.setting": "1",
              "listener.name.plaintext.max.connections": "10", "rsm.config.dir": "/elsewhere", "listener.name.x": "y"}
    check_dynamic_configs(custom, per_broker=True)
    check_dynamic_configs({"cleanup.policy": "compact", "listener.name.plaintext.max.connections": "10"},
                          per_broker=False)  # max.connections is a cluster-level listener config
    assert sanitize(custom, per_broker=True, where="test") == custom  # and kept when read back


def test_custom_configs_are_kept_beside_the_config_and_change_nothing() -> None:
    static = {"log.cleanup.policy": "delete", "rsm.config.dir": "/static"}
    plain = BrokerConfig.from_props(static)
    custom = _dynamic(static, {"cleanup.policy": "compact"}, {"rsm.config.dir": "/dynamic", "log.retention.ms": "5",
                                                            "listener.name.plaintext.my.setting": "x"})
    assert custom.log_config.cleanup_policy == plain.log_config.cleanup_policy
    assert custom.remote == plain.remote and custom.listeners == plain.listeners
    assert custom.log_config.retention_ms == 5  # a known dynamic key beside them applies
    assert custom.dynamic_default_configs == {"cleanup.policy": "compact"}
    assert custom.dynamic_broker_configs["rsm.config.dir"] == "/dynamic"

    views = _by_name(ConfigViews(custom).broker_configs())
    for name, source in (("cleanup.policy", DD), ("rsm.config.dir", DB), ("listener.name.plaintext.my.setting", DB)):
        view = views[name]  # Kafka: no type, so sensitive; not in AllDynamicConfigs, so read-only
        assert (view.value, view.source, view.is_sensitive, view.read_only, view.config_type) == (
            None, source, True, True, ConfigType.UNKNOWN), name
        assert all(s.value is None for s in view.synonyms), name
    assert views["rsm.config.dir"].synonyms == (Synonym("rsm.config.dir", None, DB),  # over the static one
                                                Synonym("rsm.config.dir", None, S))
    assert [v.name for v in ConfigViews(custom).broker_configs()].count("rsm.config.dir") == 1
    (default,) = ConfigViews(custom).default_broker_configs()
    assert (default.name, default.value, default.source, default.is_sensitive) == ("cleanup.policy", None, DD, True)


def test_custom_values_are_hidden_in_log_lines() -> None:
    """Kafka's ``loggableValue``: a key without a type may hold anything, so its value is never logged."""
    assert loggable({"my.plugin.secret": "s", "listener.name.ssl.my.key": "k", "log.retention.ms": "5",
                     "listener.name.ssl.ssl.key.password": "p"}) == {
        "my.plugin.secret": HIDDEN, "listener.name.ssl.my.key": HIDDEN, "log.retention.ms": "5",
        "listener.name.ssl.ssl.key.password": HIDDEN}


def test_thread_counts_move_within_half_and_double() -> None:
    check_thread_counts({}, {"num.io.threads": "16", "background.threads": "5"})
    with pytest.raises(ValueError, match="num.io.threads=17, value should not be greater than double the current "
                                         "value 8"):
        check_thread_counts({}, {"num.io.threads": "17"})
    with pytest.raises(ValueError, match="value should be at least half the current value 8"):
        check_thread_counts({"num.io.threads": "8"}, {"num.io.threads": "3"})
    with pytest.raises(ValueError, match="Log cleaner threads cannot be increased to more than double"):
        check_thread_counts({}, {"log.cleaner.threads": "3"})


def test_incremental_changes_of_broker_configs() -> None:
    got = incremental_broker_configs({"log.retention.ms": "5", "log.segment.bytes": "100000"}, [
        ConfigChange("log.retention.ms", None, AlterOp.DELETE),
        ConfigChange("message.max.bytes", "5000", AlterOp.SET),
        ConfigChange("log.cleanup.policy", "compact", AlterOp.APPEND),  # from the built-in default "delete"
        ConfigChange("metric.reporters", "a,b", AlterOp.APPEND),
    ])
    assert got == {"log.segment.bytes": "100000", "message.max.bytes": "5000", "log.cleanup.policy": "delete,compact",
                   "metric.reporters": "a,b"}
    got = incremental_broker_configs(got, [ConfigChange("metric.reporters", "a", AlterOp.SUBTRACT)])
    assert got["metric.reporters"] == "b"
    with pytest.raises(ApiError, match="Config value append is not allowed for config key: log.segment.bytes") as e:
        incremental_broker_configs({}, [ConfigChange("log.segment.bytes", "1", AlterOp.APPEND)])
    assert e.value.error_code == ErrorCode.INVALID_CONFIG
    # custom configs: SET and DELETE like any key; APPEND/SUBTRACT fail as Kafka's configKeys(name) lookup throws
    got = incremental_broker_configs({"my.a": "1"}, [ConfigChange("my.a", None, AlterOp.DELETE),
                                                     ConfigChange("my.b", "2", AlterOp.SET)])
    assert got == {"my.b": "2"}
    for name in ("my.list", "listener.name.plaintext.metric.reporters"):
        with pytest.raises(ApiError, match=f"Unknown config name: {name}") as e:
            incremental_broker_configs({}, [ConfigChange(name, "x", AlterOp.APPEND)])
        assert e.value.error_code == ErrorCode.UNKNOWN_SERVER_ERROR


def test_stored_configs_that_are_not_valid_any_more_are_dropped() -> None:
    props = {"log.retention.ms": "1000", "log.dirs": "/x", "log.segment.bytes": "x", "listeners": "PLAINTEXT://:1"}
    assert sanitize(props, per_broker=True, where="test") == {"log.retention.ms": "1000",
                                                               "listeners": "PLAINTEXT://:1"}
    assert sanitize(props, per_broker=False, where="test") == {"log.retention.ms": "1000"}


# -- the store on a single node ------------------------------------------------------------------


class _Replicas:
    def __init__(self) -> None:
        self.applied: list[str] = []

    def apply_config(self, name: str) -> None:
        self.applied.append(name)


class _Broker:
    """What DynamicBrokerConfigs and alter_resource use of a Broker, over a real TopicRegistry."""

    def __init__(self, directory: Path, **props: str) -> None:
        self.config = BrokerConfig.from_props({"log.dirs": str(directory), **props})
        self.node_id = self.config.node_id
        self.topics = TopicRegistry(directory, self.config.log_config,
                                    remote_storage_system_enable=self.config.remote.enabled)
        self.replicas = _Replicas()
        self.cluster = None
        self.remote_log_manager = None
        self.log_cleaner = None
        self.listeners: list[Any] = []  # no TLS listener whose keystore could change
        self.tiering_checked: list[str] = []
        self.dynamic_configs = DynamicBrokerConfigs(self)  # type: ignore[arg-type]

    def apply_tiering_change(self, name: str, _was_tiered: bool) -> None:
        self.tiering_checked.append(name)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _alter(broker: _Broker, name: str, changes: list[ConfigChange], *, incremental: bool = True,
           validate_only: bool = False) -> None:
    _run(alter_resource(broker, ResourceType.BROKER, name, changes, incremental=incremental,  # type: ignore[arg-type]
                        validate_only=validate_only))


def test_changes_are_persisted_applied_to_topics_and_survive_a_restart(tmp_path: Path) -> None:
    broker = _Broker(tmp_path, **{"log.retention.hours": "48"})
    broker.topics.create("plain", 1)
    broker.topics.create("own", 1, {"retention.ms": "1000"})
    _run(broker.dynamic_configs.start())
    assert not (tmp_path / DYNAMIC_CONFIG_FILE).exists()

    _alter(broker, "", [ConfigChange("log.retention.ms", str(HOUR_MS)), ConfigChange("log.cleaner.threads", "2")])
    _alter(broker, "1", [ConfigChange("log.segment.bytes", "100000")])
    assert broker.topics.config("plain").retention_ms == HOUR_MS
    assert broker.topics.config("plain").segment_bytes == 100_000
    assert broker.topics.config("own").retention_ms == 1000  # its override wins
    assert sorted(broker.replicas.applied) == ["own", "own", "plain", "plain"]
    assert json.loads((tmp_path / DYNAMIC_CONFIG_FILE).read_text()) == {"version": 1, "brokers": {
        "<default>": {"log.cleaner.threads": "2", "log.retention.ms": str(HOUR_MS)},
        "1": {"log.segment.bytes": "100000"}}}

    views = ConfigViews(broker.config)
    got = _by_name(describe_resource(broker, views, ResourceType.BROKER, "", None))  # type: ignore[arg-type]
    assert {n: (v.value, v.source) for n, v in got.items()} == {"log.cleaner.threads": ("2", DD),
                                                                "log.retention.ms": (str(HOUR_MS), DD)}
    topic = _by_name(describe_resource(broker, views, ResourceType.TOPIC, "plain", None))  # type: ignore[arg-type]
    assert (topic["retention.ms"].source, topic["segment.bytes"].source) == (DD, DB)

    again = _Broker(tmp_path, **{"log.retention.hours": "48"})
    again.topics.load()
    _run(again.dynamic_configs.start())
    assert again.dynamic_configs.levels == {"": {"log.cleaner.threads": "2", "log.retention.ms": str(HOUR_MS)},
                                            "1": {"log.segment.bytes": "100000"}}
    assert again.topics.config("plain").segment_bytes == 100_000
    assert again.config.dynamic_default_configs == {"log.cleaner.threads": "2", "log.retention.ms": str(HOUR_MS)}


def test_legacy_alter_replaces_the_whole_set_and_validate_only_changes_nothing(tmp_path: Path) -> None:
    broker = _Broker(tmp_path)
    broker.topics.create("t", 1)
    _run(broker.dynamic_configs.start())
    _alter(broker, "1", [ConfigChange("log.segment.bytes", "100000"), ConfigChange("message.max.bytes", "5000")])
    _alter(broker, "1", [ConfigChange("message.max.bytes", "7000")], incremental=False)
    assert broker.dynamic_configs.levels["1"] == {"message.max.bytes": "7000"}
    assert broker.topics.config("t").segment_bytes == 1024**3
    _alter(broker, "1", [ConfigChange("message.max.bytes", "9000")], validate_only=True)
    assert broker.topics.config("t").max_message_bytes == 7000
    _alter(broker, "1", [], incremental=False)  # no entries: every dynamic config of the broker removed
    assert broker.dynamic_configs.levels["1"] == {} and broker.topics.config("t").max_message_bytes == 1_048_588


@pytest.mark.parametrize(("name", "changes", "message"), [
    ("1", [ConfigChange("log.dirs", "/x")], "Cannot update these configs dynamically: Set(log.dirs)"),
    ("", [ConfigChange("listeners", "PLAINTEXT://127.0.0.1:9")], "at default cluster level"),
    ("1", [ConfigChange("num.io.threads", "100")], "Invalid dynamic configuration: Dynamic thread count"),
    ("1", [ConfigChange("log.local.retention.ms", str(2 * HOUR_MS)), ConfigChange("log.retention.ms", str(HOUR_MS))],
     "Invalid dynamic configuration"),
    ("1", [ConfigChange("log.retention.ms", "1000")], "topic 'tiered' overrides"),
])
def test_refused_changes_leave_everything_as_it_was(tmp_path: Path, name: str, changes: list[ConfigChange],
                                                    message: str) -> None:
    broker = _Broker(tmp_path, **{"remote.log.storage.system.enable": "true"})
    broker.topics.create("tiered", 1, {"remote.storage.enable": "true", "local.retention.ms": "60000"})
    _run(broker.dynamic_configs.start())
    with pytest.raises(ApiError) as e:
        _alter(broker, name, changes)
    assert e.value.error_code == ErrorCode.INVALID_REQUEST and message in str(e.value)
    assert broker.dynamic_configs.levels == {"": {}, "1": {}}
    assert not (tmp_path / DYNAMIC_CONFIG_FILE).exists() and broker.replicas.applied == []


def test_a_stored_file_with_invalid_entries_still_starts(tmp_path: Path) -> None:
    (tmp_path / DYNAMIC_CONFIG_FILE).write_text(json.dumps({"version": 1, "brokers": {
        "<default>": {"log.retention.ms": "1000", "listeners": "PLAINTEXT://:1"},
        "1": {"log.dirs": "/elsewhere", "message.max.bytes": "x"}, "7": {"log.segment.bytes": "100000"}}}))
    broker = _Broker(tmp_path)
    broker.topics.create("t", 1)
    _run(broker.dynamic_configs.start())
    assert broker.dynamic_configs.levels == {"": {"log.retention.ms": "1000"}, "1": {}}
    assert broker.topics.config("t").retention_ms == 1000
    _alter(broker, "1", [ConfigChange("message.max.bytes", "5000")])
    kept = json.loads((tmp_path / DYNAMIC_CONFIG_FILE).read_text())["brokers"]
    assert kept["7"] == {"log.segment.bytes": "100000"}  # another node's entry is left alone


def test_a_broker_without_dynamic_configs_refuses_every_key(tmp_path: Path) -> None:
    broker = _Broker(tmp_path)
    broker.dynamic_configs = None  # type: ignore[assignment]
    with pytest.raises(ApiError, match="Cannot update these configs dynamically: log.retention.ms") as e:
        _alter(broker, "1", [ConfigChange("log.retention.ms", "1")])
    assert e.value.error_code == ErrorCode.INVALID_REQUEST


class _IndexCache:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def resize(self, size: int) -> None:
        self.sizes.append(size)


class _RemoteLogManager:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.index_cache = _IndexCache()


def test_the_remote_log_manager_takes_what_it_can_live_and_its_pools_at_the_next_start(tmp_path: Path) -> None:
    (tmp_path / DYNAMIC_CONFIG_FILE).write_text(json.dumps({"version": 1, "brokers": {
        "<default>": {"remote.log.manager.copier.thread.pool.size": "20"}}}))
    broker = _Broker(tmp_path, **{"remote.log.storage.system.enable": "true"})
    _run(broker.dynamic_configs.start())
    # start() runs before the broker starts tiering, which sizes the RemoteLogManager's pools from this
    assert broker.config.remote.copier_thread_pool_size == 20
    rlm = _RemoteLogManager(broker.config.remote)
    broker.remote_log_manager = rlm  # type: ignore[assignment]
    _alter(broker, "", [ConfigChange("remote.fetch.max.wait.ms", "100"),
                        ConfigChange("remote.list.offsets.request.timeout.ms", "2000"),
                        ConfigChange("remote.log.index.file.cache.total.size.bytes", "4096"),
                        ConfigChange("remote.log.manager.copier.thread.pool.size", "40")])
    assert (rlm.config.fetch_max_wait_ms, rlm.config.list_offsets_timeout_ms) == (100, 2000)
    assert rlm.config.index_cache_total_size_bytes == 4096 and rlm.index_cache.sizes == [4096]
    assert rlm.config.copier_thread_pool_size == 20  # the running pool keeps its size until the next start
    assert broker.config.remote.copier_thread_pool_size == 40
    with pytest.raises(ApiError, match="value should not be greater than double the current value 40"):
        _alter(broker, "1", [ConfigChange("remote.log.manager.copier.thread.pool.size", "81")])


def test_stored_levels_that_no_longer_fit_are_left_out_at_startup(tmp_path: Path) -> None:
    # stored while the topic did not exist: this broker's log.retention.ms is below the tiered topic's local retention
    (tmp_path / DYNAMIC_CONFIG_FILE).write_text(json.dumps({"version": 1, "brokers": {
        "<default>": {"message.max.bytes": "5000"}, "1": {"log.retention.ms": "1000"}}}))
    broker = _Broker(tmp_path, **{"remote.log.storage.system.enable": "true"})
    broker.topics.create("tiered", 1, {"remote.storage.enable": "true", "local.retention.ms": "60000"})
    _run(broker.dynamic_configs.start())
    assert broker.dynamic_configs.levels == {"": {"message.max.bytes": "5000"}, "1": {}}
    assert broker.topics.config("tiered").max_message_bytes == 5000
    _alter(broker, "1", [ConfigChange("log.segment.bytes", "100000")])  # the broker can be changed again
    assert broker.topics.config("tiered").segment_bytes == 100_000
