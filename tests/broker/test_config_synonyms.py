"""DescribeConfigs synonyms of the time-based topic keys, as Kafka builds them, over real sockets.

Kafka's ``ConfigHelper.createTopicConfigEntry`` looks up only the *first* broker key of a topic
key (``retention.ms`` -> ``log.retention.ms``, ``segment.ms`` -> ``log.roll.ms``,
``segment.jitter.ms`` -> ``log.roll.jitter.ms``, ``flush.ms`` -> ``log.flush.interval.ms``) and
``configSynonyms`` drops the group's leading entries that are not that key. So a broker with only
``log.retention.hours`` set reports ``retention.ms`` with the value the hours give but source
``DEFAULT_CONFIG`` and no synonyms; setting ``log.retention.ms`` itself makes it
``STATIC_BROKER_CONFIG`` followed by the rest of the group. CreateTopics (Kafka's KRaft controller)
walks the whole group instead and says ``STATIC_BROKER_CONFIG`` in the first case too.

Each check goes through confluent-kafka's AdminClient (librdkafka, what clients see) and through
the raw wire client, since the AdminClient keys synonyms by name and so merges a key's static and
default entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient

TIMEOUT_S = 15
HOUR_MS = 3_600_000
LONG_MAX = str(2**63 - 1)
TOPIC_CFG, STATIC, DEFAULT = 1, 4, 5  # DescribeConfigsResponse.ConfigSource ids
KEYS = ("retention.ms", "segment.ms", "segment.jitter.ms", "flush.ms")

# Only the lower-ranked synonyms of each group: what most server.properties files set.
LOWER = {"log.retention.hours": "2", "log.roll.hours": "3", "log.roll.jitter.hours": "1",
         "log.flush.scheduler.interval.ms": "600000"}
# The same plus each group's first key, which Kafka's DescribeConfigs does report.
FIRST = {**LOWER, "log.retention.ms": "5400000", "log.roll.ms": "7200000", "log.roll.jitter.ms": "60000",
         "log.flush.interval.ms": "30000"}
OVERRIDES = {"retention.ms": "1000000", "segment.ms": "900000", "segment.jitter.ms": "1000", "flush.ms": "5000"}


def _broker(factory: pytest.TempPathFactory, name: str, props: dict[str, str]) -> Iterator[BrokerProcess]:
    b = BrokerProcess(factory.mktemp(name), props).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def lower_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory, "syn-lower", LOWER)


@pytest.fixture(scope="module")
def first_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker(tmp_path_factory, "syn-first", FIRST)


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})


def _create(admin: AdminClient, name: str, config: dict[str, str] | None = None) -> None:
    fut = admin.create_topics([NewTopic(name, 1, 1, config=config or {})], operation_timeout=TIMEOUT_S,
                              request_timeout=TIMEOUT_S)[name]
    assert fut.result(TIMEOUT_S) is None


def _describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)


def _wire_describe(broker: BrokerProcess, topic: str) -> dict[str, tuple[str | None, int, list[tuple[Any, ...]]]]:
    """name -> (value, source, [(synonym name, value, source), ...]) from DescribeConfigs v4."""
    with WireClient(broker.bootstrap) as c:
        resp = c.call(32, 4, include_synonyms=True, include_documentation=False, resources=[
            {"resource_type": 2, "resource_name": topic, "configuration_keys": list(KEYS)}])
    (result,) = resp.results
    assert int(result.error_code) == 0
    return {e.name: (e.value, int(e.config_source), [(s.name, s.value, int(s.source)) for s in e.synonyms])
            for e in result.configs}


def _client_view(entry: Any) -> tuple[str, int, bool, list[tuple[str, str, int]]]:
    return (entry.value, entry.source, entry.is_default,
            [(s.name, s.value, s.source) for s in entry.synonyms.values()])


def test_lower_synonym_only_reports_the_effective_value_as_a_default_without_synonyms(
        lower_broker: BrokerProcess) -> None:
    admin = _admin(lower_broker)
    _create(admin, "syn-plain")
    configs = _describe(admin, "syn-plain")
    expected = {"retention.ms": str(2 * HOUR_MS), "segment.ms": str(3 * HOUR_MS),
                "segment.jitter.ms": str(HOUR_MS), "flush.ms": "600000"}
    for key, value in expected.items():
        assert _client_view(configs[key]) == (value, ConfigSource.DEFAULT_CONFIG.value, True, []), key
    wire = _wire_describe(lower_broker, "syn-plain")
    assert wire == {key: (value, DEFAULT, []) for key, value in expected.items()}


def test_lower_synonym_only_with_a_topic_override_lists_the_override_alone(lower_broker: BrokerProcess) -> None:
    admin = _admin(lower_broker)
    _create(admin, "syn-override", OVERRIDES)
    configs = _describe(admin, "syn-override")
    for key, value in OVERRIDES.items():
        assert _client_view(configs[key]) == (
            value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False,
            [(key, value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)]), key
    assert _wire_describe(lower_broker, "syn-override") == {
        key: (value, TOPIC_CFG, [(key, value, TOPIC_CFG)]) for key, value in OVERRIDES.items()}


# What Kafka lists when the group's first key is set: that key, then the rest of the group as set
# in server.properties, then the group's built-in defaults.
FIRST_CHAINS = {
    "retention.ms": [("log.retention.ms", "5400000", STATIC), ("log.retention.hours", "2", STATIC),
                     ("log.retention.hours", "168", DEFAULT)],
    "segment.ms": [("log.roll.ms", "7200000", STATIC), ("log.roll.hours", "3", STATIC),
                   ("log.roll.hours", "168", DEFAULT)],
    "segment.jitter.ms": [("log.roll.jitter.ms", "60000", STATIC), ("log.roll.jitter.hours", "1", STATIC),
                          ("log.roll.jitter.hours", "0", DEFAULT)],
    "flush.ms": [("log.flush.interval.ms", "30000", STATIC), ("log.flush.scheduler.interval.ms", "600000", STATIC),
                 ("log.flush.scheduler.interval.ms", LONG_MAX, DEFAULT)],
}


def test_first_synonym_set_reports_static_broker_config_with_the_group(first_broker: BrokerProcess) -> None:
    admin = _admin(first_broker)
    _create(admin, "syn-static")
    configs = _describe(admin, "syn-static")
    for key, chain in FIRST_CHAINS.items():
        entry = configs[key]
        value = chain[0][1]
        assert (entry.value, entry.source, entry.is_default) == (
            value, ConfigSource.STATIC_BROKER_CONFIG.value, False), key
        # the AdminClient keys synonyms by name: a name's later (default) entry replaces its static one
        assert {s.name: (s.value, s.source) for s in entry.synonyms.values()} == {
            name: (v, src) for name, v, src in chain}, key
    assert _wire_describe(first_broker, "syn-static") == {
        key: (chain[0][1], STATIC, chain) for key, chain in FIRST_CHAINS.items()}


def test_first_synonym_set_with_a_topic_override_lists_the_override_then_the_group(
        first_broker: BrokerProcess) -> None:
    admin = _admin(first_broker)
    _create(admin, "syn-static-override", OVERRIDES)
    configs = _describe(admin, "syn-static-override")
    for key, value in OVERRIDES.items():
        entry = configs[key]
        assert (entry.value, entry.source, entry.is_default) == (
            value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False), key
        assert list(entry.synonyms)[:2] == [key, FIRST_CHAINS[key][0][0]], key
    assert _wire_describe(first_broker, "syn-static-override") == {
        key: (value, TOPIC_CFG, [(key, value, TOPIC_CFG), *FIRST_CHAINS[key]]) for key, value in OVERRIDES.items()}


def test_create_topics_reports_the_lower_synonym_as_static_like_kafkas_controller(
        lower_broker: BrokerProcess) -> None:
    with WireClient(lower_broker.bootstrap) as c:
        resp = c.call(19, 7, topics=[{"name": "syn-created", "num_partitions": 1, "replication_factor": 1,
                                      "assignments": [], "configs": []}], timeout=5000, validate_only=True)
    (topic,) = resp.topics
    assert int(topic.error_code) == 0
    got = {e.name: (e.value, int(e.config_source)) for e in topic.configs if e.name in KEYS}
    assert got == {"retention.ms": (str(2 * HOUR_MS), STATIC), "segment.ms": (str(3 * HOUR_MS), STATIC),
                   "segment.jitter.ms": (str(HOUR_MS), STATIC), "flush.ms": ("600000", STATIC)}


def test_broker_resource_still_reports_the_lower_synonym_itself(lower_broker: BrokerProcess) -> None:
    admin = _admin(lower_broker)
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.source) == ("2", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert configs["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["log.retention.ms"].synonyms == {}
