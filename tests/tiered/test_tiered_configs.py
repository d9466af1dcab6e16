"""Kafka's tiered-storage config rules through a real admin client (RemoteTopicCrudTest's checks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.tiered.harness import TieredBroker


def create_error(admin: AdminClient, name: str, config: dict[str, str]) -> str:
    fut = admin.create_topics([NewTopic(name, 1, 1, config=config)], operation_timeout=10)[name]
    with pytest.raises(KafkaException) as e:
        fut.result(timeout=30)
    assert e.value.args[0].name() == "INVALID_CONFIG"
    return e.value.args[0].str()


def test_remote_topics_refused_when_the_broker_does_not_tier(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "plain").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert "Tiered Storage functionality is disabled" in create_error(admin, "t", {"remote.storage.enable": "true"})
    finally:
        b.stop()


def test_tiered_config_rules(tiered: TieredBroker) -> None:
    admin = tiered.admin()
    # KIP-1272: unlike Kafka, a compacted topic may be tiered (tests/tiered/test_tiered_compaction.py)
    admin.create_topics([NewTopic("c", 1, 1, config={"remote.storage.enable": "true", "cleanup.policy": "compact"})],
                        operation_timeout=10)["c"].result(timeout=30)
    with pytest.raises(KafkaException) as e:  # its remote segments have offset gaps: compact stays
        tiered.alter_topic("c", {"cleanup.policy": "delete"})
    assert "cleanup.policy cannot drop `compact`" in e.value.args[0].str()
    tiered.alter_topic("c", {"cleanup.policy": "compact,delete"})
    assert "local.retention.ms" in create_error(admin, "r", {"remote.storage.enable": "true", "retention.ms": "1000",
                                                             "local.retention.ms": "2000"})
    assert "local.retention.bytes" in create_error(admin, "r", {"remote.storage.enable": "true",
                                                                "retention.bytes": "1000",
                                                                "local.retention.bytes": "-1"})
    assert "remote.log.copy.disable" in create_error(admin, "d", {"remote.storage.enable": "true",
                                                                  "remote.log.copy.disable": "true",
                                                                  "local.retention.ms": "1000"})
    tiered.create_topic("t")
    with pytest.raises(KafkaException) as e:
        tiered.alter_topic("t", {"remote.storage.enable": "false"})
    assert "remote.log.delete.on.disable" in e.value.args[0].str()
    tiered.alter_topic("t", {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
