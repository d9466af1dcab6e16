"""KIP-932 share-group configs: the broker's ``group.share.*`` (Kafka 4.2's ``ShareGroupConfig``) and the
``share.*`` keys of a GROUP resource, each bad value refused with the key named; and the coordinator
answering a group's own session timeout and heartbeat interval."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from strata.broker.config_views import AlterOp, ConfigChange, ConfigSource, ConfigType, group_config_views
from strata.broker.group_configs import GroupConfigStore
from strata.common import ManualClock
from strata.config.broker_config import BrokerConfig
from strata.config.group_config import (
    GROUP_CONFIG_KEYS,
    ConsumerGroupConfig,
    GroupSettings,
    group_settings,
    parse_iso_duration_ms,
    parse_share_auto_offset_reset,
    validate_group_configs,
)
from strata.config.share_config import SHARE_GROUP_KEYS, ShareGroupConfig
from strata.coordinator.group.manager import GroupConfig, GroupMetadataManager
from strata.coordinator.group.share_manager import ShareGroupSettings
from strata.coordinator.group.timer import ManualTimer
from strata.errors import ApiError, ErrorCode, InvalidConfigError

CONSUMER = ConsumerGroupConfig()
SHARE = ShareGroupConfig()


# -- broker keys ---------------------------------------------------------------------------------

def test_defaults_are_kafka_4_2s() -> None:
    c = BrokerConfig.from_props({})
    assert c.share_groups == SHARE
    assert (SHARE.session_timeout_ms, SHARE.min_session_timeout_ms, SHARE.max_session_timeout_ms) == (
        45_000, 45_000, 60_000)
    assert (SHARE.heartbeat_interval_ms, SHARE.min_heartbeat_interval_ms, SHARE.max_heartbeat_interval_ms) == (
        5_000, 5_000, 15_000)
    assert (SHARE.record_lock_duration_ms, SHARE.min_record_lock_duration_ms,
            SHARE.max_record_lock_duration_ms) == (30_000, 15_000, 60_000)
    assert (SHARE.delivery_count_limit, SHARE.partition_max_record_locks, SHARE.max_share_sessions,
            SHARE.max_size, SHARE.initialize_retry_interval_ms) == (5, 2000, 2000, 200, 30_000)
    assert c.group_rebalance_protocols == ("classic", "consumer", "share")  # share groups on by default in 4.2
    assert {k.name for k in SHARE_GROUP_KEYS} >= {"group.share.enable", "group.share.assignors"}


def test_the_client_test_suites_overrides_load() -> None:
    """librdkafka's run-share-consumer-tests.sh and confluent-kafka-python's tests start Kafka this way."""
    c = BrokerConfig.from_props({
        "group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000",
        "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1"})
    assert (c.share_groups.min_record_lock_duration_ms, c.share_groups.record_lock_duration_ms) == (1000, 1000)


def test_every_key_is_read() -> None:
    c = BrokerConfig.from_props({
        "group.share.enable": "true", "group.share.session.timeout.ms": "50000",
        "group.share.min.session.timeout.ms": "40000", "group.share.max.session.timeout.ms": "55000",
        "group.share.heartbeat.interval.ms": "6000", "group.share.min.heartbeat.interval.ms": "1000",
        "group.share.max.heartbeat.interval.ms": "7000", "group.share.record.lock.duration.ms": "20000",
        "group.share.min.record.lock.duration.ms": "2000", "group.share.max.record.lock.duration.ms": "40000",
        "group.share.delivery.count.limit": "3", "group.share.partition.max.record.locks": "500",
        "group.share.max.share.sessions": "9", "group.share.max.size": "12", "group.share.assignors": "simple",
        "group.share.initialize.retry.interval.ms": "1500"})
    assert c.share_groups == ShareGroupConfig(50_000, 40_000, 55_000, 6000, 1000, 7000, 20_000, 2000, 40_000,
                                              3, 500, 9, 12, 1500)


@pytest.mark.parametrize(("props", "key"), [
    ({"group.share.session.timeout.ms": "44999"}, "group.share.session.timeout.ms"),
    ({"group.share.session.timeout.ms": "60001"}, "group.share.session.timeout.ms"),
    ({"group.share.min.session.timeout.ms": "0"}, "group.share.min.session.timeout.ms"),
    ({"group.share.min.session.timeout.ms": "70000", "group.share.session.timeout.ms": "70000"},
     "group.share.max.session.timeout.ms"),
    ({"group.share.heartbeat.interval.ms": "4999"}, "group.share.heartbeat.interval.ms"),
    ({"group.share.heartbeat.interval.ms": "15001"}, "group.share.heartbeat.interval.ms"),
    ({"group.share.max.heartbeat.interval.ms": "50000", "group.share.heartbeat.interval.ms": "45000"},
     "group.share.heartbeat.interval.ms: must be less than group.share.session.timeout.ms"),
    ({"group.share.record.lock.duration.ms": "999"}, "group.share.record.lock.duration.ms"),
    ({"group.share.record.lock.duration.ms": "1000"}, "group.share.record.lock.duration.ms"),  # below the min
    ({"group.share.record.lock.duration.ms": "60001"}, "group.share.record.lock.duration.ms"),
    ({"group.share.min.record.lock.duration.ms": "999"}, "group.share.min.record.lock.duration.ms"),
    ({"group.share.min.record.lock.duration.ms": "30001"}, "group.share.min.record.lock.duration.ms"),
    ({"group.share.max.record.lock.duration.ms": "29999"}, "group.share.max.record.lock.duration.ms"),
    ({"group.share.max.record.lock.duration.ms": "3600001"}, "group.share.max.record.lock.duration.ms"),
    ({"group.share.delivery.count.limit": "1"}, "group.share.delivery.count.limit"),
    ({"group.share.delivery.count.limit": "11"}, "group.share.delivery.count.limit"),
    ({"group.share.partition.max.record.locks": "99"}, "group.share.partition.max.record.locks"),
    ({"group.share.partition.max.record.locks": "10001"}, "group.share.partition.max.record.locks"),
    ({"group.share.max.share.sessions": "0"}, "group.share.max.share.sessions"),
    ({"group.share.max.size": "0"}, "group.share.max.size"),
    ({"group.share.max.size": "1001"}, "group.share.max.size"),
    ({"group.share.assignors": "simple,uniform"}, "group.share.assignors"),
    ({"group.share.initialize.retry.interval.ms": "0"}, "group.share.initialize.retry.interval.ms"),
    ({"group.share.enable": "maybe"}, "group.share.enable"),
    ({"group.share.max.groups": "10"}, "group.share.max.groups"),  # gone from Kafka 4.2: unknown
])
def test_bad_broker_values_name_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
        BrokerConfig.from_props(props)


def test_validate_names_the_key_at_fault() -> None:
    with pytest.raises(InvalidConfigError, match=r"group\.share\.max\.record\.lock\.duration\.ms: must be at least"):
        ShareGroupConfig(min_record_lock_duration_ms=40_000, max_record_lock_duration_ms=35_000).validate()
    ShareGroupConfig(min_record_lock_duration_ms=1000, record_lock_duration_ms=1000).validate()


@pytest.mark.parametrize(("value", "accepted"), [
    ("classic,consumer,share", True), ("classic,share", True), ("classic", True), ("classic,consumer", True),
    ("classic,streams", False), ("consumer,share", False), ("classic,shared", False)])
def test_rebalance_protocols(value: str, accepted: bool) -> None:
    props = {"group.coordinator.rebalance.protocols": value}
    if accepted:
        assert BrokerConfig.from_props(props).group_rebalance_protocols == tuple(value.split(","))
    else:
        with pytest.raises(InvalidConfigError, match=r"group\.coordinator\.rebalance\.protocols"):
            BrokerConfig.from_props(props)


def test_streams_is_refused_as_not_served() -> None:
    with pytest.raises(InvalidConfigError, match="the streams group protocol is not supported"):
        BrokerConfig.from_props({"group.coordinator.rebalance.protocols": "classic,consumer,streams"})


# -- share.auto.offset.reset -----------------------------------------------------------------------

@pytest.mark.parametrize(("value", "parsed"), [
    ("latest", ("latest", 0)), ("earliest", ("earliest", 0)),
    ("by_duration:PT1H", ("by_duration", 3_600_000)),
    ("by_duration:P1DT2H30M", ("by_duration", 95_400_000)),
    ("by_duration:P2D", ("by_duration", 172_800_000)),
    ("by_duration:PT0S", ("by_duration", 0)),
    ("by_duration:PT1.5S", ("by_duration", 1500)),
    ("by_duration:PT0,25S", ("by_duration", 250)),
    ("by_duration:pt10m", ("by_duration", 600_000)),  # Java's Duration.parse ignores case
    ("by_duration:+PT1M", ("by_duration", 60_000)),
    ("by_duration:P1DT-1H", ("by_duration", 23 * 3_600_000)),  # signed parts that add up to a positive
])
def test_share_auto_offset_reset_values(value: str, parsed: tuple[str, int]) -> None:
    assert parse_share_auto_offset_reset(value) == parsed


@pytest.mark.parametrize("value", [
    "sometimes", "", "none", "LATEST", "Earliest", "by_duration", "by_duration:", "by_duration:PT",
    "by_duration:P", "by_duration:1H", "by_duration:PT1H30", "by_duration:P1Y", "by_duration:P1M",
    "by_duration:P1W", "by_duration:-PT1H", "by_duration:PT-1S", "by_duration:PT-0.5S", "by_duration: PT1H",
    "by_duration:PT1.0000000001S", "BY_DURATION:PT1H"])
def test_bad_share_auto_offset_reset_values_name_the_key(value: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"share\.auto\.offset\.reset"):
        parse_share_auto_offset_reset(value)
    with pytest.raises(InvalidConfigError, match=r"share\.auto\.offset\.reset"):
        validate_group_configs(CONSUMER, {"share.auto.offset.reset": value})


def test_a_negative_duration_says_so() -> None:
    with pytest.raises(InvalidConfigError, match="negative"):
        parse_share_auto_offset_reset("by_duration:-P1D")
    with pytest.raises(ValueError, match="negative"):
        parse_iso_duration_ms("PT-1H")


# -- GROUP resource keys -----------------------------------------------------------------------------

def test_group_keys_and_their_defaults_are_the_brokers() -> None:
    assert set(GROUP_CONFIG_KEYS) >= {"share.session.timeout.ms", "share.heartbeat.interval.ms",
                                      "share.record.lock.duration.ms", "share.auto.offset.reset",
                                      "share.isolation.level"}
    share = ShareGroupConfig(session_timeout_ms=50_000, heartbeat_interval_ms=6000, record_lock_duration_ms=1000,
                             min_record_lock_duration_ms=1000)
    s = group_settings(CONSUMER, {}, share)
    assert (s.share_session_timeout_ms, s.share_heartbeat_interval_ms, s.share_record_lock_duration_ms) == (
        50_000, 6000, 1000)
    assert (s.share_auto_offset_reset, s.share_isolation_level) == ("latest", "read_uncommitted")
    s = group_settings(CONSUMER, {"share.session.timeout.ms": "60000", "share.heartbeat.interval.ms": "15000",
                                  "share.record.lock.duration.ms": "45000",
                                  "share.auto.offset.reset": "by_duration:PT1H",
                                  "share.isolation.level": "read_committed"})
    assert s == GroupSettings(45_000, 5000, 60_000, 15_000, 45_000, "by_duration:PT1H", "read_committed")


@pytest.mark.parametrize(("overrides", "message"), [
    ({"share.session.timeout.ms": "44999"}, "share.session.timeout.ms: must be between 45000 and 60000"),
    ({"share.session.timeout.ms": "60001"}, "share.session.timeout.ms"),
    ({"share.session.timeout.ms": "soon"}, "share.session.timeout.ms: expected a int"),
    ({"share.heartbeat.interval.ms": "4999"}, "share.heartbeat.interval.ms: must be between 5000 and 15000"),
    ({"share.heartbeat.interval.ms": "15001"}, "share.heartbeat.interval.ms"),
    ({"share.record.lock.duration.ms": "500"}, "share.record.lock.duration.ms: must be between 15000 and 60000"),
    ({"share.record.lock.duration.ms": "60001"}, "share.record.lock.duration.ms"),
    ({"share.auto.offset.reset": "sometimes"}, "share.auto.offset.reset"),
    ({"share.isolation.level": "read_dirty"}, "share.isolation.level: must be one of read_uncommitted, "
                                              "read_committed"),
    ({"share.isolation.level": "READ_COMMITTED"}, "share.isolation.level"),
    ({"share.delivery.count.limit": "3"}, "Unknown group config name: share.delivery.count.limit"),  # not in 4.2
])
def test_bad_group_values_name_the_key(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message.replace(".", r"\.")):
        validate_group_configs(CONSUMER, overrides)


def test_group_heartbeat_must_be_less_than_session() -> None:
    share = ShareGroupConfig(min_session_timeout_ms=5000, session_timeout_ms=10_000,
                             max_heartbeat_interval_ms=12_000)
    validate_group_configs(CONSUMER, {"share.session.timeout.ms": "6000"}, share)
    with pytest.raises(InvalidConfigError, match=r"share\.heartbeat\.interval\.ms: must be less than "
                                                 r"share\.session\.timeout\.ms \(6000\)"):
        validate_group_configs(CONSUMER, {"share.session.timeout.ms": "6000", "share.heartbeat.interval.ms": "6000"},
                               share)


def test_group_bounds_follow_the_brokers_min_and_max() -> None:
    suite = ShareGroupConfig(min_record_lock_duration_ms=1000, record_lock_duration_ms=1000)
    validate_group_configs(CONSUMER, {"share.record.lock.duration.ms": "1000"}, suite)
    with pytest.raises(InvalidConfigError, match=r"share\.record\.lock\.duration\.ms"):
        validate_group_configs(CONSUMER, {"share.record.lock.duration.ms": "1000"})  # Kafka's min is 15000


def test_describe_lists_every_group_key_with_the_broker_defaults() -> None:
    share = ShareGroupConfig(record_lock_duration_ms=20_000)
    overrides = {"share.isolation.level": "read_committed", "share.heartbeat.interval.ms": "7000"}
    views = {v.name: v for v in group_config_views(overrides, group_settings(CONSUMER, overrides, share),
                                                   CONSUMER, share)}
    assert list(views) == sorted(GROUP_CONFIG_KEYS)
    lock = views["share.record.lock.duration.ms"]
    assert (lock.value, lock.source, lock.config_type) == ("20000", ConfigSource.DEFAULT_CONFIG, ConfigType.INT)
    assert [(s.name, s.value) for s in lock.synonyms] == [("group.share.record.lock.duration.ms", "20000")]
    hb = views["share.heartbeat.interval.ms"]
    assert (hb.value, hb.source) == ("7000", ConfigSource.DYNAMIC_GROUP_CONFIG)
    assert [s.name for s in hb.synonyms] == ["share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms"]
    iso = views["share.isolation.level"]
    assert (iso.value, iso.source, iso.config_type) == ("read_committed", ConfigSource.DYNAMIC_GROUP_CONFIG,
                                                        ConfigType.STRING)
    assert [s.name for s in iso.synonyms] == ["share.isolation.level"]  # no broker key
    reset = views["share.auto.offset.reset"]
    assert (reset.value, reset.source, reset.synonyms) == ("latest", ConfigSource.DEFAULT_CONFIG, ())
    assert views["consumer.session.timeout.ms"].value == "45000"


def test_the_store_validates_and_stores_share_keys(tmp_path: Path) -> None:
    share = ShareGroupConfig(min_record_lock_duration_ms=1000, record_lock_duration_ms=1000)
    store = GroupConfigStore(tmp_path, CONSUMER, share_defaults=share)

    def alter(**configs: str) -> None:
        changes = [ConfigChange(k.replace("_", "."), v, AlterOp.SET) for k, v in configs.items()]
        asyncio.run(store.alter("g", changes, incremental=True, validate_only=False))

    asyncio.run(store.start())
    assert store.settings("g").share_record_lock_duration_ms == 1000  # the broker's
    alter(share_record_lock_duration_ms="2000")
    with pytest.raises(ApiError, match=r"share\.auto\.offset\.reset") as e:
        alter(share_auto_offset_reset="sometimes")
    assert e.value.error_code == ErrorCode.INVALID_CONFIG
    assert store.settings("g").share_record_lock_duration_ms == 2000
    stored = json.loads((tmp_path / "strata-group-configs.json").read_text())["groups"]
    assert stored == {"g": {"share.record.lock.duration.ms": "2000"}}


# -- the coordinator -------------------------------------------------------------------------------------

class _Topics:
    def topic(self, name: str) -> tuple[UUID, int] | None:
        return (UUID(int=1), 2) if name == "t" else None

    def name_of(self, topic_id: object) -> str | None:
        return "t" if topic_id == UUID(int=1) else None

    def names(self) -> list[str]:
        return ["t"]


def test_the_share_manager_answers_each_groups_own_session_and_heartbeat() -> None:
    clock = ManualClock()
    timer = ManualTimer(clock)
    own = {"mine": GroupSettings(45_000, 5000, share_session_timeout_ms=50_000, share_heartbeat_interval_ms=7000)}
    m = GroupMetadataManager(
        GroupConfig(), timer, clock, lambda *_: 0, topics=_Topics(),  # type: ignore[arg-type]
        group_settings=lambda gid: own.get(gid, GroupSettings(45_000, 5000)),
        share_settings=ShareGroupSettings(session_timeout_ms=46_000, heartbeat_interval_ms=6000))

    def join(group: str) -> dict[str, Any]:
        return m.share.heartbeat(group, "member", 0, None, ("t",), "client", "/127.0.0.1")

    assert join("mine")["heartbeat_interval"] == 7000
    assert timer.deadline(("share-session", "mine", "member")) == clock.milliseconds() + 50_000
    assert join("other")["heartbeat_interval"] == 5000  # the settings' share defaults
    assert timer.deadline(("share-session", "other", "member")) == clock.milliseconds() + 45_000

    plain = GroupMetadataManager(GroupConfig(), timer, clock, lambda *_: 0, topics=_Topics(),  # type: ignore[arg-type]
                                 share_settings=ShareGroupSettings(session_timeout_ms=46_000,
                                                                   heartbeat_interval_ms=6000))
    assert plain.share.heartbeat("g", "m", 0, None, ("t",), "c", "/h")["heartbeat_interval"] == 6000  # the broker's
    assert timer.deadline(("share-session", "g", "m")) == clock.milliseconds() + 46_000
