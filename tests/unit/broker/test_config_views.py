"""Config sources, synonyms and alteration rules, checked against what Kafka reports for the same setup."""

from __future__ import annotations

import asyncio
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
    check_changes,
    describe_resource,
    incremental_topic_overrides,
    replace_topic_overrides,
    select,
)
from strata.broker.topics import TopicRegistry
from strata.config.broker_config import BrokerConfig
from strata.errors import ApiError, ErrorCode

S, D, T = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG


def _views(**props: str) -> ConfigViews:
    return ConfigViews(BrokerConfig.from_props(props))


def _by_name(views: list[Any]) -> dict[str, Any]:
    return {v.name: v for v in views}


def test_topic_key_without_override_or_static_setting_is_a_default_with_its_broker_synonym() -> None:
    config = BrokerConfig.from_props({})
    got = _by_name(ConfigViews(config).describe_topic_configs({}, config.log_config))
    seg = got["segment.bytes"]
    assert (seg.value, seg.source, seg.read_only, seg.is_sensitive) == ("1073741824", D, False, False)
    assert seg.synonyms == (Synonym("log.segment.bytes", "1073741824", D),)
    assert seg.config_type is ConfigType.INT
    # retention.ms: Kafka looks up log.retention.ms only (no default) and drops the group's leading
    # log.retention.hours=168 default, so there are no synonyms at all; the value is still the effective one
    assert got["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert (got["retention.ms"].source, got["retention.ms"].synonyms) == (D, ())
    for name, value in (("segment.ms", str(7 * 24 * 3600 * 1000)), ("segment.jitter.ms", "0"),
                        ("flush.ms", str(2**63 - 1))):
        assert (got[name].value, got[name].source, got[name].synonyms) == (value, D, ())
    assert got["max.message.bytes"].synonyms == (Synonym("message.max.bytes", "1048588", D),)
    assert got["cleanup.policy"].config_type is ConfigType.LIST
    assert got["cleanup.policy"].value == "delete"
    # a topic-only key has no broker synonym at all
    assert (got["remote.storage.enable"].source, got["remote.storage.enable"].synonyms) == (D, ())
    assert got["remote.storage.enable"].value == "false"


def test_static_broker_setting_outranks_defaults_and_a_topic_override_outranks_both() -> None:
    config = BrokerConfig.from_props({"log.retention.ms": "90000", "log.retention.minutes": "30",
                                      "log.segment.bytes": "2000000"})
    views = ConfigViews(config)
    overrides = {"segment.bytes": "500000"}
    got = _by_name(views.describe_topic_configs(overrides, config.log_config.with_overrides(overrides)))
    assert got["retention.ms"].value == "90000"
    assert got["retention.ms"].source is S
    # log.retention.ms heads the chain, so nothing is dropped: the rest of the group follows it
    assert got["retention.ms"].synonyms == (Synonym("log.retention.ms", "90000", S),
                                            Synonym("log.retention.minutes", "30", S),
                                            Synonym("log.retention.hours", "168", D))
    assert got["segment.bytes"].source is T
    assert got["segment.bytes"].value == "500000"
    assert got["segment.bytes"].synonyms == (Synonym("segment.bytes", "500000", T),
                                             Synonym("log.segment.bytes", "2000000", S),
                                             Synonym("log.segment.bytes", "1073741824", D))


def test_describe_drops_the_group_when_only_a_lower_synonym_is_set_but_create_topics_does_not() -> None:
    config = BrokerConfig.from_props({"log.retention.minutes": "30", "log.roll.hours": "2",
                                      "log.flush.scheduler.interval.ms": "100"})
    views = ConfigViews(config)
    overrides = {"retention.ms": "1000"}
    effective = config.log_config.with_overrides(overrides)
    got = _by_name(views.describe_topic_configs(overrides, effective))
    # Kafka's ConfigHelper: the effective value, but DEFAULT_CONFIG and no log.roll.hours synonym
    assert (got["segment.ms"].value, got["segment.ms"].source, got["segment.ms"].synonyms) == ("7200000", D, ())
    assert (got["flush.ms"].value, got["flush.ms"].source, got["flush.ms"].synonyms) == ("100", D, ())
    # an override keeps only itself: the broker chain is dropped whole
    assert got["retention.ms"].synonyms == (Synonym("retention.ms", "1000", T),)
    assert got["retention.ms"].source is T
    # Kafka's KRaft controller answers CreateTopics from every synonym of the group
    created = _by_name(views.topic_configs(overrides, effective))
    assert (created["segment.ms"].value, created["segment.ms"].source) == ("7200000", S)
    assert (created["flush.ms"].value, created["flush.ms"].source) == ("100", S)
    assert created["retention.ms"].source is T
    plain = _by_name(views.topic_configs({}, config.log_config))
    assert (plain["retention.ms"].value, plain["retention.ms"].source) == (str(30 * 60_000), S)


def test_broker_view_drops_synonyms_that_outrank_the_key_itself() -> None:
    got = _by_name(_views(**{"log.retention.ms": "1000", "num.partitions": "4"}).broker_configs())
    assert (got["log.retention.ms"].value, got["log.retention.ms"].source) == ("1000", S)
    assert got["log.retention.ms"].synonyms == (Synonym("log.retention.ms", "1000", S),
                                                Synonym("log.retention.hours", "168", D))
    # log.retention.hours is described on its own: the static log.retention.ms ranks above it and is dropped
    assert got["log.retention.hours"].synonyms == (Synonym("log.retention.hours", "168", D),)
    assert got["log.retention.hours"].source is D
    assert (got["num.partitions"].value, got["num.partitions"].source) == ("4", S)
    assert got["log.retention.minutes"].value is None
    assert all(v.read_only for v in got.values())
    assert got["log.cleanup.policy"].value == "delete"


def test_ignored_kafka_keys_given_in_the_properties_are_described_as_static() -> None:
    got = _by_name(_views(**{"num.io.threads": "8"}).broker_configs())
    assert (got["num.io.threads"].value, got["num.io.threads"].source) == ("8", S)


def test_select_keeps_only_asked_keys_and_empty_means_all() -> None:
    config = BrokerConfig.from_props({})
    views = ConfigViews(config).topic_configs({}, config.log_config)
    assert [v.name for v in select(views, ["retention.ms", "no.such.key"])] == ["retention.ms"]
    assert len(select(views, [])) == len(views) == len(select(views, None))


def test_describe_entry_leaves_out_synonyms_and_documentation_unless_asked() -> None:
    config = BrokerConfig.from_props({})
    seg = _by_name(ConfigViews(config).topic_configs({}, config.log_config))["segment.bytes"]
    plain = seg.describe_entry(False, False)
    assert plain["synonyms"] == [] and plain["documentation"] is None
    full = seg.describe_entry(True, True)
    assert full["synonyms"] == [{"name": "log.segment.bytes", "value": "1073741824", "source": D}]
    assert full["documentation"]


# -- altering ----------------------------------------------------------------------------------


def test_incremental_operations_on_overrides() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "100000"}
    got = incremental_topic_overrides(current, [
        ConfigChange("retention.ms", None, AlterOp.DELETE),
        ConfigChange("max.message.bytes", "5000", AlterOp.SET),
        ConfigChange("cleanup.policy", "compact", AlterOp.APPEND),  # from the default "delete"
        ConfigChange("no.such.override", None, AlterOp.DELETE),  # deleting what is not there: no-op
    ])
    assert got == {"segment.bytes": "100000", "max.message.bytes": "5000", "cleanup.policy": "delete,compact"}
    assert current == {"retention.ms": "1000", "segment.bytes": "100000"}  # not modified in place
    got = incremental_topic_overrides(got, [ConfigChange("cleanup.policy", "delete", AlterOp.SUBTRACT)])
    assert got["cleanup.policy"] == "compact"
    got = incremental_topic_overrides(got, [ConfigChange("cleanup.policy", "compact,delete", AlterOp.APPEND)])
    assert got["cleanup.policy"] == "compact,delete"  # no duplicates


@pytest.mark.parametrize("op", [AlterOp.APPEND, AlterOp.SUBTRACT])
def test_append_and_subtract_need_a_list_key(op: AlterOp) -> None:
    with pytest.raises(ApiError) as e:
        incremental_topic_overrides({}, [ConfigChange("retention.ms", "5", op)])
    assert e.value.error_code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in str(e.value) and "LIST" in str(e.value)


def test_change_sets_are_checked_like_kafka_preprocess() -> None:
    with pytest.raises(ApiError, match="duplicate config keys") as e:
        check_changes([ConfigChange("a", "1"), ConfigChange("a", "2")], incremental=False)
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    with pytest.raises(ApiError, match="Null value not supported for : a") as e:
        check_changes([ConfigChange("a", None)], incremental=False)
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    check_changes([ConfigChange("a", None, AlterOp.DELETE)], incremental=True)  # DELETE needs no value
    with pytest.raises(ApiError, match="Unknown operations type 7"):
        check_changes([ConfigChange("a", "1", 7)], incremental=True)
    assert replace_topic_overrides([ConfigChange("a", "1"), ConfigChange("b", "2")]) == {"a": "1", "b": "2"}


class _FakeBroker:
    """What alter_resource and describe_resource use of a Broker, over a real TopicRegistry."""

    def __init__(self, directory: Path, **props: str) -> None:
        self.config = BrokerConfig.from_props(props)
        self.node_id = self.config.node_id
        self.topics = TopicRegistry(directory, self.config.log_config)
        self.applied: list[str] = []
        self.admin = self  # the TopicAdmin service: here the fake itself

    async def set_topic_configs(self, name: str, overrides: dict[str, str]) -> Any:
        self.applied.append(name)
        return self.topics.set_configs(name, overrides)


def alter(broker: Any, *args: Any, **kwargs: Any) -> None:
    asyncio.run(alter_resource(broker, *args, **kwargs))


def test_alter_resource_validates_the_whole_result_before_writing(tmp_path: Path) -> None:
    broker = _FakeBroker(tmp_path)
    broker.topics.create("t", 1, {"retention.ms": "1000"})
    bad = [ConfigChange("segment.bytes", "12345"), ConfigChange("retention.ms", "minus one")]
    with pytest.raises(ApiError, match="retention.ms") as e:
        alter(broker, ResourceType.TOPIC, "t", bad, incremental=True, validate_only=False)
    assert e.value.error_code == ErrorCode.INVALID_CONFIG
    with pytest.raises(ApiError, match="bogus.key") as e:
        alter(broker, ResourceType.TOPIC, "t", [ConfigChange("bogus.key", "1")],
                       incremental=False, validate_only=False)
    assert e.value.error_code == ErrorCode.INVALID_CONFIG
    assert broker.topics.get("t").configs == {"retention.ms": "1000"} and broker.applied == []

    alter(broker, ResourceType.TOPIC, "t", [ConfigChange("segment.bytes", "12345")],
                   incremental=True, validate_only=True)
    assert broker.topics.get("t").configs == {"retention.ms": "1000"}
    alter(broker, ResourceType.TOPIC, "t", [ConfigChange("segment.bytes", "12345")],
                   incremental=True, validate_only=False)
    assert broker.topics.get("t").configs == {"retention.ms": "1000", "segment.bytes": "12345"}
    alter(broker, ResourceType.TOPIC, "t", [ConfigChange("segment.bytes", "54321")],
                   incremental=False, validate_only=False)
    assert broker.topics.get("t").configs == {"segment.bytes": "54321"}
    assert broker.topics.config("t").segment_bytes == 54321 and broker.applied == ["t", "t"]


@pytest.mark.parametrize(("rtype", "name", "code", "message"), [
    (ResourceType.TOPIC, "missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "missing"),
    (ResourceType.TOPIC, "bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, "illegal"),
    (ResourceType.BROKER, "7", ErrorCode.INVALID_REQUEST, "Unexpected broker id"),
    (ResourceType.BROKER, "one", ErrorCode.INVALID_REQUEST, "must be an integer"),
    (ResourceType.BROKER, "1", ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: log.retention.ms"),
    (ResourceType.BROKER_LOGGER, "1", ErrorCode.INVALID_REQUEST, "Unknown resource type BROKER_LOGGER"),
    (99, "x", ErrorCode.INVALID_REQUEST, "Unknown resource type 99"),
])
def test_alter_resource_errors(tmp_path: Path, rtype: int, name: str, code: ErrorCode, message: str) -> None:
    broker = _FakeBroker(tmp_path)
    with pytest.raises(ApiError, match=message) as e:
        alter(broker, rtype, name, [ConfigChange("log.retention.ms", "1")],
                       incremental=True, validate_only=False)
    assert e.value.error_code == code


def test_empty_broker_alteration_is_a_no_op(tmp_path: Path) -> None:
    alter(_FakeBroker(tmp_path), ResourceType.BROKER, "1", [], incremental=True,
          validate_only=False)


def test_describe_resource(tmp_path: Path) -> None:
    broker = _FakeBroker(tmp_path, **{"log.retention.hours": "2"})
    broker.topics.create("t", 1, {"max.message.bytes": "2000"})
    views = ConfigViews(broker.config)
    got = _by_name(describe_resource(broker, views, ResourceType.TOPIC, "t", None))
    assert (got["max.message.bytes"].value, got["max.message.bytes"].source) == ("2000", T)
    # log.retention.hours=2 gives the value; Kafka still reports DEFAULT_CONFIG (no log.retention.ms)
    assert (got["retention.ms"].value, got["retention.ms"].source) == ("7200000", D)
    assert got["retention.ms"].synonyms == ()
    assert describe_resource(broker, views, ResourceType.BROKER, "", None) == []
    got = _by_name(describe_resource(broker, views, ResourceType.BROKER, "1", ["log.retention.hours"]))
    assert list(got) == ["log.retention.hours"] and got["log.retention.hours"].value == "2"
    with pytest.raises(ApiError, match="Group configs are not available") as e:  # a broker without a group store
        describe_resource(broker, views, ResourceType.GROUP, "g", None)
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    with pytest.raises(ApiError, match="Unsupported resource type: CLIENT_METRICS") as e:
        describe_resource(broker, views, ResourceType.CLIENT_METRICS, "m", None)
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    with pytest.raises(ApiError) as e:
        describe_resource(broker, views, ResourceType.TOPIC, "nope", None)
    assert e.value.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_remote_storage_plugin_props_are_reported_with_credentials_hidden(tmp_path: Path) -> None:
    views = _by_name(_views(**{"log.dirs": str(tmp_path / "logs"), "remote.log.storage.system.enable": "true",
                               "remote.log.storage.manager.class.name": "s3",
                               "rsm.config.s3.bucket.name": "b", "rsm.config.aws.secret.access.key": "hush",
                               "rsm.config.aws.access.key.id": "AKIA", "rlmm.config.x.password": "p"}
                           ).broker_configs())
    assert views["rsm.config.s3.bucket.name"].value == "b"
    assert views["rsm.config.s3.bucket.name"].source == S
    for name in ("rsm.config.aws.secret.access.key", "rsm.config.aws.access.key.id", "rlmm.config.x.password"):
        assert views[name].value is None and views[name].is_sensitive and views[name].config_type == ConfigType.PASSWORD
    assert "broker.id" not in {n[len("rsm.config."):] for n in views if n.startswith("rsm.config.")}


def test_the_local_stores_default_directory_is_reported_absolute(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    views = _by_name(_views(**{"log.dirs": "logs", "remote.log.storage.system.enable": "true"}).broker_configs())
    assert views["rsm.config.dir"].value == str(tmp_path / "logs" / "remote-storage")
    assert views["rsm.config.dir"].source == D
