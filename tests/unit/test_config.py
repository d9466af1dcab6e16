"""Bad configs fail at parse time with Kafka's rules and a message naming the key."""

from __future__ import annotations

import pytest

from strata.config import LogConfig, parse_properties
from strata.errors import ErrorCode, InvalidConfigError


def test_defaults_are_kafkas():
    c = LogConfig.from_props({})
    assert (c.segment_bytes, c.segment_index_bytes, c.index_interval_bytes) == (1 << 30, 10 << 20, 4096)
    assert (c.retention_ms, c.retention_bytes, c.local_retention_ms) == (604_800_000, -1, -2)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"segment.bytes": "lots"}, "segment.bytes: expected a int"),
        ({"segment.bytes": "13"}, "segment.bytes: must be at least 14"),
        ({"retention.ms": "-5"}, "retention.ms: must be at least -1"),
        ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
        ({"remote.storage.enable": "maybe"}, "remote.storage.enable: expected a bool"),
        ({"cleanup.policy": "delete,shred"}, "'shred' is not one of"),
        ({"segment.byte": "100"}, "Unknown configuration 'segment.byte'"),
        ({"local.retention.ms": "2000", "retention.ms": "1000", "remote.storage.enable": "true"}, "local.retention.ms"),
        ({"local.retention.bytes": "-1", "retention.bytes": "100", "remote.storage.enable": "true"},
         "local.retention.bytes"),
    ],
)
def test_invalid_values_name_the_key(props, message):
    with pytest.raises(InvalidConfigError, match=message) as info:
        LogConfig.from_props(props)
    assert info.value.error_code == ErrorCode.INVALID_CONFIG


def test_local_retention_rules_apply_only_to_tiered_topics():
    """Kafka validates local.retention.* against retention.* only when remote.storage.enable is true."""
    c = LogConfig.from_props({"local.retention.ms": "2000", "retention.ms": "1000"})
    assert (c.local_retention_ms, c.retention_ms) == (2000, 1000)
    with pytest.raises(InvalidConfigError, match="local.retention.ms"):
        c.with_overrides({"remote.storage.enable": "true"})


def test_overrides_round_trip_through_kafka_names():
    c = LogConfig().with_overrides({"segment.ms": 1000, "cleanup.policy": "compact,delete"})
    assert c.segment_ms == 1000 and c.cleanup_policy == ("compact", "delete")
    assert LogConfig.from_props(c.to_props()) == c


def test_properties_file_syntax():
    text = "# comment\n! also a comment\nlog.dirs = /tmp/a\nnum.partitions: 3\n\n"
    assert parse_properties(text) == {"log.dirs": "/tmp/a", "num.partitions": "3"}
    with pytest.raises(InvalidConfigError, match="line 1"):
        parse_properties("no separator here")


def test_broker_local_retention_defaults_are_checked_only_with_the_remote_storage_system_on():
    """Kafka's validateBrokerLogConfigValues: log.local.retention.* within log.retention.* once tiering exists."""
    from strata.config.broker_config import BrokerConfig

    props = {"log.retention.bytes": "1000", "log.local.retention.bytes": "2000"}
    assert BrokerConfig.from_props(props).log_config.local_retention_bytes == 2000
    with pytest.raises(InvalidConfigError, match="log.local.retention.bytes"):
        BrokerConfig.from_props({**props, "remote.log.storage.system.enable": "true"})


def test_cluster_keys() -> None:
    import pytest

    from strata.config.broker_config import BrokerConfig
    from strata.errors import InvalidConfigError

    c = BrokerConfig.from_props({"zookeeper.connect": "127.0.0.1:2181,127.0.0.1:2182/strata", "broker.id": "3",
                                 "zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "5000"})
    assert c.node_id == 3 and c.cluster.enabled
    assert c.cluster.zookeeper_connection_timeout_ms == 6000  # defaults to the session timeout
    assert c.cluster.replica_lag_time_max_ms == 5000
    assert not BrokerConfig.from_props({}).cluster.enabled
    with pytest.raises(InvalidConfigError, match="zookeeper.connect"):
        BrokerConfig.from_props({"zookeeper.connect": "localhost"})
    with pytest.raises(InvalidConfigError, match="broker.id"):
        BrokerConfig.from_props({"broker.id": "1", "node.id": "2"})
    # tiered storage in a cluster (issue 14): accepted
    tiered = BrokerConfig.from_props({"zookeeper.connect": "127.0.0.1:2181",
                                      "remote.log.storage.system.enable": "true"})
    assert tiered.cluster.enabled and tiered.remote.enabled
