"""The deprecated topic keys ``remote.log.storage.enable`` and ``remote.log.retention.ms`` / ``.bytes``
(Strata's original spec) through real clients: CreateTopics and both AlterConfigs APIs accept them as
``remote.storage.enable`` and ``retention.*``, with a deprecation WARNING in the broker's log; an alias
contradicting its canonical key is INVALID_CONFIG naming both; DescribeConfigs reports the canonical key."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from tests.broker.kafka_wire import WireClient
from tests.tiered.harness import TieredBroker, wait_until
from tests.tiered.test_tiered_configs import create_error

ALTER_CONFIGS = 33
TOPIC = 2
INVALID_CONFIG = 40


def describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    (fut,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return fut.result(timeout=30)


def alter_configs(b: TieredBroker, topic: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """Legacy AlterConfigs (the whole override set), over the wire."""
    with WireClient(b.bootstrap) as client:
        resp = client.call(ALTER_CONFIGS, 1, validate_only=False, resources=[
            {"resource_type": TOPIC, "resource_name": topic,
             "configs": [{"name": k, "value": v} for k, v in configs.items()]}])
    (r,) = resp.responses
    return int(r.error_code), r.error_message


def test_deprecated_aliases_through_real_clients(tiered: TieredBroker) -> None:
    b = tiered
    admin = b.admin()
    config = {"remote.log.storage.enable": "true", "remote.log.retention.ms": "86400000",
              "segment.index.bytes": "12", "index.interval.bytes": "1", "local.retention.bytes": "1"}
    admin.create_topics([NewTopic("a", 1, 1, config=config)], operation_timeout=10)["a"].result(timeout=30)
    described = describe(admin, "a")
    assert described["remote.storage.enable"].value == "true"
    assert described["retention.ms"].value == "86400000"
    assert not {"remote.log.storage.enable", "remote.log.retention.ms", "remote.log.retention.bytes"} & set(described)
    # stored under Kafka's keys: topic overrides, as kafka-configs --describe lists them
    assert described["remote.storage.enable"].source == described["retention.ms"].source == \
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    b.produce("a", 0, [("k0", "v0"), ("k1", "v1")])
    b.wait_offloaded("a", 0, [0])  # the alias really turned tiering on

    b.alter_topic("a", {"remote.log.retention.bytes": "1048576"})  # IncrementalAlterConfigs
    assert describe(admin, "a")["retention.bytes"].value == "1048576"
    b.alter_topic("a", {"remote.log.retention.ms": "172800000"})  # replaces the canonical override it aliases
    assert describe(admin, "a")["retention.ms"].value == "172800000"
    assert alter_configs(b, "a", {"remote.log.storage.enable": "true", "remote.log.retention.bytes": "2097152",
                                  "local.retention.bytes": "1"}) == (0, None)
    described = describe(admin, "a")
    assert (described["retention.bytes"].value, described["retention.ms"].value) == ("2097152", "604800000")

    message = create_error(admin, "c", {"retention.ms": "1000", "remote.log.retention.ms": "2000"})
    assert "retention.ms" in message and "remote.log.retention.ms" in message
    code, message = alter_configs(b, "a", {"remote.storage.enable": "true", "remote.log.storage.enable": "false"})
    assert code == INVALID_CONFIG and "remote.storage.enable" in message and "remote.log.storage.enable" in message

    for alias, canonical in (("remote.log.storage.enable", "remote.storage.enable"),
                             ("remote.log.retention.ms", "retention.ms"),
                             ("remote.log.retention.bytes", "retention.bytes")):
        line = f"WARNING strata.config.log_config topic config {alias} is deprecated: use {canonical}"
        wait_until(f"the {alias} warning", lambda line=line: line in b.broker.log_path.read_text())
