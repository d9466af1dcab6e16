"""Topic configs and partition counts changed through the admin APIs survive a restart, clean or not.

The registry file is replaced atomically (fsync, rename) before the admin call answers, so even
``kill -9`` right after the answer keeps the change; after the restart the overrides are not only
reported by DescribeConfigs but in force in the logs (a lowered ``max.message.bytes`` still
rejects a big batch), and the partitions added are there with their records.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)
from tests.broker.harness import BrokerProcess

TIMEOUT_S = 15


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})


def _ok(fut: Future[Any]) -> Any:
    return fut.result(TIMEOUT_S)


def _produce(b: BrokerProcess, topic: str, partition: int, value: bytes) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": b.bootstrap, "log_level": 3, "linger.ms": 0,
                         "message.max.bytes": 10_000_000})
    errors: list[KafkaError | None] = []
    # keyed: the topic becomes compacted below, and compacted topics refuse keyless records
    producer.produce(topic, key=b"k", value=value, partition=partition,
                     on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    return errors[0]


def _configure(b: BrokerProcess, topic: str) -> None:
    admin = _admin(b)
    _ok(admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "7200000"})],
                            operation_timeout=TIMEOUT_S)[topic])
    assert _produce(b, topic, 0, b"before") is None
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "10000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("segment.bytes", "500000", incremental_operation=AlterConfigOpType.SET)])
    _ok(admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res])
    _ok(admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=TIMEOUT_S)[topic])
    assert _produce(b, topic, 3, b"in the new partition") is None


def _check(b: BrokerProcess, topic: str) -> None:
    admin = _admin(b)
    res = ConfigResource("topic", topic)
    configs = _ok(admin.describe_configs([res], request_timeout=TIMEOUT_S)[res])
    overridden = {k: v.value for k, v in configs.items() if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert overridden == {"max.message.bytes": "10000", "cleanup.policy": "delete,compact", "segment.bytes": "500000"}
    described = _ok(admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic])
    assert len(described.partitions) == 4
    for partition, expected in ((0, 1), (3, 1), (2, 0)):
        tp = TopicPartition(topic, partition)
        assert _ok(admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=TIMEOUT_S)[tp]).offset == expected
    # the override is in force in the reloaded log, not only in the registry
    err = _produce(b, topic, 0, b"x" * 50_000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce(b, topic, 1, b"small") is None


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "kill-9"])
def test_topic_configs_and_partitions_survive_restart(tmp_path: Path, hard: bool) -> None:
    b = BrokerProcess(tmp_path / "b").start()
    try:
        _configure(b, "survivor")
        _check(b, "survivor")
        b.restart(hard=hard)
        _check(b, "survivor")
        # a change made right before the broker dies is kept too
        admin = _admin(b)
        res = ConfigResource("topic", "survivor", incremental_configs=[
            ConfigEntry("max.message.bytes", "20000", incremental_operation=AlterConfigOpType.SET)])
        _ok(admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res])
        _ok(admin.create_partitions([NewPartitions("survivor", 6)], operation_timeout=TIMEOUT_S)["survivor"])
        assert _produce(b, "survivor", 4, b"gone") is None and _produce(b, "survivor", 4, b"kept") is None
        trim = TopicPartition("survivor", 4, 1)
        assert _ok(admin.delete_records([trim], operation_timeout=TIMEOUT_S)[trim]).low_watermark == 1
        b.restart(hard=hard)
        admin = _admin(b)  # a client per broker start, kept referenced until its futures resolve
        res = ConfigResource("topic", "survivor")
        configs = _ok(admin.describe_configs([res], request_timeout=TIMEOUT_S)[res])
        assert configs["max.message.bytes"].value == "20000"
        described = _ok(admin.describe_topics(TopicCollection(["survivor"]), request_timeout=TIMEOUT_S)["survivor"])
        assert len(described.partitions) == 6
        assert _produce(b, "survivor", 5, b"y" * 15_000) is None
        first = TopicPartition("survivor", 4)
        assert _ok(admin.list_offsets({first: OffsetSpec.earliest()}, request_timeout=TIMEOUT_S)[first]).offset == 1
        assert (tmp_path / "b" / "logs" / "survivor-5").is_dir()
    finally:
        b.stop()
