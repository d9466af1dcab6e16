"""Dynamic broker configs over real sockets: AlterConfigs / IncrementalAlterConfigs on BROKER resources.

confluent-kafka's AdminClient changes and describes ``ConfigResource(BROKER, "1")``; librdkafka (and
kafka-python and aiokafka alike) refuse an empty resource name on the client side, so the cluster-wide
default, ``ConfigResource(BROKER, "")``, is reached the way operators reach it: ``kafka-configs
--entity-default`` (``strata configs``, Kafka's ConfigCommand over the wire), and checked field by field
with the raw wire client. Every change must take effect at once in the logs of topics that inherit it,
be reported with Kafka's sources on the broker and on those topics, and survive a restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient

TIMEOUT_S = 15
HOUR_MS = 3_600_000
STATIC = {"log.retention.hours": "48", "log.retention.check.interval.ms": "200", "log.initial.task.delay.ms": "200"}
DYN_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DYN_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
STATIC_SRC, DEFAULT_SRC = ConfigSource.STATIC_BROKER_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value
TOPIC_SRC = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
INVALID_REQUEST = 42


@pytest.fixture
def dyn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "dyn-broker", STATIC).start()
    try:
        yield b
    finally:
        b.stop()


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})


def _result(fut: Future[Any]) -> Any:
    return fut.result(TIMEOUT_S)


def _error(fut: Future[Any]) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        fut.result(TIMEOUT_S)
    return e.value.args[0]


def _describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict[str, Any]:
    res = ConfigResource(rtype, name)
    return _result(admin.describe_configs([res], request_timeout=TIMEOUT_S)[res])


def _incremental(admin: AdminClient, name: str, *entries: tuple[str, str | None, AlterConfigOpType],
                 validate_only: bool = False) -> Future[Any]:
    res = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in entries])
    return admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S, validate_only=validate_only)[res]


def _legacy(admin: AdminClient, name: str, configs: dict[str, str]) -> Future[Any]:
    res = ConfigResource(ResourceType.BROKER, name, set_config=configs)
    with pytest.warns(DeprecationWarning, match="alter_configs has been deprecated"):
        return admin.alter_configs([res], request_timeout=TIMEOUT_S)[res]


def _produce(bootstrap: str, topic: str, values: list[bytes], timestamps: list[int] | None = None,
             one_batch_each: bool = True) -> list[KafkaError | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 0,
                         "message.max.bytes": 10_000_000})
    errors: list[KafkaError | None] = [None] * len(values)
    for i, v in enumerate(values):
        kwargs = {"timestamp": timestamps[i]} if timestamps else {}
        producer.produce(topic, value=v, partition=0, on_delivery=lambda err, _m, i=i: errors.__setitem__(i, err),
                         **kwargs)
        if one_batch_each:
            assert producer.flush(TIMEOUT_S) == 0
    assert producer.flush(TIMEOUT_S) == 0
    return errors


def _segments(b: BrokerProcess, topic: str) -> int:
    return len(list((b.data_dir / "logs" / f"{topic}-0").glob("*.log")))


def _offset(admin: AdminClient, topic: str, spec: OffsetSpec) -> int:
    tp = TopicPartition(topic, 0)
    return _result(admin.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)[tp]).offset


def _configs_tool(b: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``kafka-configs.sh --bootstrap-server ...``: Strata's ConfigCommand, over the wire."""
    return subprocess.run([sys.executable, "-m", "strata", "configs", "--bootstrap-server", b.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def _wire_describe(b: BrokerProcess, name: str, keys: list[str] | None = None) -> Any:
    with WireClient(b.bootstrap) as c:
        resp = c.call(DESCRIBE_CONFIGS, 4, resources=[{"resource_type": 4, "resource_name": name,
                                                       "configuration_keys": keys}],
                      include_synonyms=True, include_documentation=False)
    (result,) = resp.results
    return result


def _wire_entries(result: Any) -> dict[str, tuple[str | None, int, bool, list[tuple[str, str | None, int]]]]:
    return {e.name: (e.value, int(e.config_source), bool(e.read_only),
                     [(s.name, s.value, int(s.source)) for s in e.synonyms]) for e in result.configs}


def _wait(cond: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# -- this broker: ConfigResource(BROKER, "1") ----------------------------------------------------


def test_per_broker_configs_apply_live_are_reported_and_survive_a_restart(dyn_broker: BrokerProcess) -> None:
    admin = _admin(dyn_broker)
    futs = admin.create_topics([NewTopic("dyn-inherit", 1, 1), NewTopic("dyn-own", 1, 1, config={
        "max.message.bytes": "200000", "segment.bytes": "1000000"})], operation_timeout=TIMEOUT_S)
    for fut in futs.values():
        _result(fut)
    big = b"x" * 50_000
    assert _produce(dyn_broker.bootstrap, "dyn-inherit", [big]) == [None]

    assert _result(_incremental(admin, "1", ("message.max.bytes", "10000", AlterConfigOpType.SET),
                                ("log.segment.bytes", "3000", AlterConfigOpType.SET),
                                ("log.cleaner.threads", "2", AlterConfigOpType.SET))) is None

    broker = _describe(admin, ResourceType.BROKER, "1")
    mmb = broker["message.max.bytes"]
    assert (mmb.value, mmb.source, mmb.is_read_only) == ("10000", DYN_BROKER, False)
    assert [(s.name, s.value, s.source) for s in mmb.synonyms.values()] == [
        ("message.max.bytes", "1048588", DEFAULT_SRC)]  # the client keeps one synonym per name: the last
    assert (broker["log.segment.bytes"].value, broker["log.segment.bytes"].source) == ("3000", DYN_BROKER)
    assert (broker["log.cleaner.threads"].value, broker["log.cleaner.threads"].source) == ("2", DYN_BROKER)
    hours = broker["log.retention.hours"]  # not dynamic in Kafka (log.retention.ms is)
    assert (hours.value, hours.source, hours.is_read_only) == ("48", STATIC_SRC, True)
    assert broker["log.dirs"].is_read_only and not broker["log.retention.ms"].is_read_only

    topic = _describe(admin, ResourceType.TOPIC, "dyn-inherit")
    assert (topic["max.message.bytes"].value, topic["max.message.bytes"].source) == ("10000", DYN_BROKER)
    assert (topic["segment.bytes"].value, topic["segment.bytes"].source) == ("3000", DYN_BROKER)
    own = _describe(admin, ResourceType.TOPIC, "dyn-own")
    assert (own["max.message.bytes"].value, own["max.message.bytes"].source) == ("200000", TOPIC_SRC)

    # in force at once: a topic that inherits refuses the big batch and rolls small segments; the other does not
    errors = _produce(dyn_broker.bootstrap, "dyn-inherit", [big, b"s" * 1000, b"s" * 1000, b"s" * 1000, b"s" * 1000])
    assert errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert errors[1:] == [None] * 4
    assert _segments(dyn_broker, "dyn-inherit") >= 3
    assert _produce(dyn_broker.bootstrap, "dyn-own", [big, big]) == [None, None]
    assert _segments(dyn_broker, "dyn-own") == 1

    # persisted beside the logs before the answer
    stored = json.loads((dyn_broker.data_dir / "logs" / "strata-dynamic-broker-configs.json").read_text())
    assert stored["brokers"]["1"] == {"log.cleaner.threads": "2", "log.segment.bytes": "3000",
                                      "message.max.bytes": "10000"}

    dyn_broker.restart()
    admin = _admin(dyn_broker)
    broker = _describe(admin, ResourceType.BROKER, "1")
    assert (broker["message.max.bytes"].value, broker["message.max.bytes"].source) == ("10000", DYN_BROKER)
    assert _describe(admin, ResourceType.TOPIC, "dyn-inherit")["max.message.bytes"].source == DYN_BROKER
    errors = _produce(dyn_broker.bootstrap, "dyn-inherit", [big, b"after restart"])
    assert errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE and errors[1] is None

    # DELETE gives the static/default value back, at once (log.segment.bytes too: a batch larger than a segment is
    # refused, as Kafka's UnifiedLog.append refuses it)
    assert _result(_incremental(admin, "1", ("message.max.bytes", None, AlterConfigOpType.DELETE),
                                ("log.segment.bytes", None, AlterConfigOpType.DELETE))) is None
    mmb = _describe(admin, ResourceType.BROKER, "1")["message.max.bytes"]
    assert (mmb.value, mmb.source) == ("1048588", DEFAULT_SRC)
    assert _produce(dyn_broker.bootstrap, "dyn-inherit", [big]) == [None]

    # the legacy AlterConfigs replaces the broker's whole set
    assert _result(_legacy(admin, "1", {"log.retention.ms": str(10 * HOUR_MS)})) is None
    broker = _describe(admin, ResourceType.BROKER, "1")
    assert (broker["log.retention.ms"].value, broker["log.retention.ms"].source) == (str(10 * HOUR_MS), DYN_BROKER)
    assert (broker["log.segment.bytes"].value, broker["log.segment.bytes"].source) == ("1073741824", DEFAULT_SRC)
    assert (broker["log.cleaner.threads"].value, broker["log.cleaner.threads"].source) == ("1", DEFAULT_SRC)


def test_read_only_and_invalid_broker_configs_are_refused(dyn_broker: BrokerProcess) -> None:
    admin = _admin(dyn_broker)
    for key, value in (("log.dirs", "/elsewhere"), ("log.retention.hours", "1"), ("broker.id", "7")):
        err = _error(_incremental(admin, "1", (key, value, AlterConfigOpType.SET)))
        assert err.code() == KafkaError.INVALID_REQUEST
        assert err.str() == f"Cannot update these configs dynamically: Set({key})"
    err = _error(_incremental(admin, "1", ("log.segment.bytes", "lots", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_REQUEST and "log.segment.bytes" in err.str()
    err = _error(_incremental(admin, "1", ("num.io.threads", "64", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "value should not be greater than double the current value 8" in err.str()
    err = _error(_incremental(admin, "1", ("log.segment.bytes", "5000", AlterConfigOpType.APPEND)))
    assert err.code() == KafkaError.INVALID_CONFIG
    with WireClient(dyn_broker.bootstrap) as c:  # librdkafka sends a BROKER "7" resource to broker 7 only
        resp = c.call(INCREMENTAL_ALTER_CONFIGS, 1, resources=[{"resource_type": 4, "resource_name": "7", "configs": [
            {"name": "log.segment.bytes", "config_operation": 0, "value": "5000"}]}], validate_only=False)
    (r,) = resp.responses
    assert (int(r.error_code), r.error_message) == (
        INVALID_REQUEST, "Unexpected broker id, expected 1 or empty string, but received 7")

    assert _result(_incremental(admin, "1", ("log.segment.bytes", "5000", AlterConfigOpType.SET),
                                validate_only=True)) is None
    seg = _describe(admin, ResourceType.BROKER, "1")["log.segment.bytes"]
    assert (seg.value, seg.source) == ("1073741824", DEFAULT_SRC)
    assert not (dyn_broker.data_dir / "logs" / "strata-dynamic-broker-configs.json").exists()

    # per-broker keys cannot be set cluster-wide (the request as any client would send it)
    with WireClient(dyn_broker.bootstrap) as c:
        resp = c.call(INCREMENTAL_ALTER_CONFIGS, 1, resources=[{
            "resource_type": 4, "resource_name": "", "configs": [
                {"name": "listeners", "config_operation": 0, "value": "PLAINTEXT://127.0.0.1:1"}]}],
            validate_only=False)
    (r,) = resp.responses
    assert (int(r.error_code), r.error_message) == (
        INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id must be specified: "
                         "Set(listeners)")


# -- the cluster-wide default: ConfigResource(BROKER, "") ----------------------------------------


def test_cluster_wide_defaults_apply_below_per_broker_values_and_survive_a_restart(dyn_broker: BrokerProcess) -> None:
    admin = _admin(dyn_broker)
    _result(admin.create_topics([NewTopic("dyn-retained", 1, 1)], operation_timeout=TIMEOUT_S)["dyn-retained"])
    two_hours_ago = int(time.time() * 1000) - 2 * HOUR_MS
    assert _produce(dyn_broker.bootstrap, "dyn-retained", [b"old"] * 3,
                    timestamps=[two_hours_ago + i for i in range(3)]) == [None] * 3

    done = _configs_tool(dyn_broker, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
                         f"log.retention.ms={HOUR_MS},log.roll.ms=60000,num.io.threads=16")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Completed updating default config for brokers in the cluster."

    # the records are two hours old, retention is now an hour: the next retention pass deletes them
    # (the active segment rolls first: log.roll.ms is a minute and they are older)
    assert _produce(dyn_broker.bootstrap, "dyn-retained", [b"new"]) == [None]
    _wait(lambda: _offset(admin, "dyn-retained", OffsetSpec.earliest()) == 3, "retention of the old records")

    default = _wire_describe(dyn_broker, "")
    assert int(default.error_code) == 0
    assert _wire_entries(default) == {
        "log.retention.ms": (str(HOUR_MS), DYN_DEFAULT, False, [("log.retention.ms", str(HOUR_MS), DYN_DEFAULT)]),
        "log.roll.ms": ("60000", DYN_DEFAULT, False, [("log.roll.ms", "60000", DYN_DEFAULT)]),
        "num.io.threads": ("16", DYN_DEFAULT, False, [("num.io.threads", "16", DYN_DEFAULT)]),
    }
    described = _configs_tool(dyn_broker, "--entity-type", "brokers", "--entity-default", "--describe")
    assert described.stdout.splitlines()[0] == "Default configs for brokers in the cluster are:"
    assert f"  log.retention.ms={HOUR_MS} sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:" \
           f"log.retention.ms={HOUR_MS}}}" in described.stdout.splitlines()

    # this broker's own value wins over the default; the chain shows every level
    assert _result(_incremental(admin, "1", ("log.retention.ms", str(3 * HOUR_MS), AlterConfigOpType.SET))) is None
    entries = _wire_entries(_wire_describe(dyn_broker, "1", ["log.retention.ms", "log.retention.hours"]))
    assert entries["log.retention.ms"] == (str(3 * HOUR_MS), DYN_BROKER, False, [
        ("log.retention.ms", str(3 * HOUR_MS), DYN_BROKER), ("log.retention.ms", str(HOUR_MS), DYN_DEFAULT),
        ("log.retention.hours", "48", STATIC_SRC), ("log.retention.hours", "168", DEFAULT_SRC)])
    topic = _describe(admin, ResourceType.TOPIC, "dyn-retained")
    assert (topic["retention.ms"].value, topic["retention.ms"].source) == (str(3 * HOUR_MS), DYN_BROKER)
    assert (topic["segment.ms"].value, topic["segment.ms"].source) == ("60000", DYN_DEFAULT)

    dyn_broker.restart()
    admin = _admin(dyn_broker)
    assert _wire_entries(_wire_describe(dyn_broker, "", ["log.retention.ms"]))["log.retention.ms"][:2] == (
        str(HOUR_MS), DYN_DEFAULT)
    topic = _describe(admin, ResourceType.TOPIC, "dyn-retained")
    assert (topic["retention.ms"].value, topic["segment.ms"].value) == (str(3 * HOUR_MS), "60000")

    # the legacy AlterConfigs on "" replaces the default set (kafka-configs --delete-config does that)
    done = _configs_tool(dyn_broker, "--entity-type", "brokers", "--entity-default", "--alter", "--delete-config",
                         "log.roll.ms,num.io.threads")
    assert done.returncode == 0, done.stderr
    assert list(_wire_entries(_wire_describe(dyn_broker, ""))) == ["log.retention.ms"]
    assert _describe(admin, ResourceType.TOPIC, "dyn-retained")["segment.ms"].source == DEFAULT_SRC

    with WireClient(dyn_broker.bootstrap) as c:
        resp = c.call(ALTER_CONFIGS, 2, resources=[{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.dirs", "value": "/x"}]}], validate_only=False)
    (r,) = resp.responses
    assert (int(r.error_code), r.error_message) == (INVALID_REQUEST,
                                                    "Cannot update these configs dynamically: Set(log.dirs)")


# -- custom configs: names that are no broker config ---------------------------------------------

UNKNOWN_SERVER_ERROR = -1


def _custom_entry(result: Any, name: str) -> tuple[str | None, int, bool, bool, int, list[tuple[str, str | None, int]]]:
    """(value, source, read-only, sensitive, config type, synonyms) of one entry of a raw DescribeConfigs answer."""
    (entry,) = [e for e in result.configs if e.name == name]
    return (entry.value, int(entry.config_source), bool(entry.read_only), bool(entry.is_sensitive),
            int(entry.config_type), [(s.name, s.value, int(s.source)) for s in entry.synonyms])


def test_unknown_names_are_stored_as_custom_configs_that_change_nothing(dyn_broker: BrokerProcess) -> None:
    """Kafka (``DynamicConfig.Broker.validate(customPropsAllowed = true)``) refuses only known static keys; a name
    that is no broker config (``cleanup.policy`` is a topic config, the broker's is ``log.cleanup.policy``) is a custom
    config: accepted, validate_only included, stored, described as read-only and sensitive (Kafka knows no type for
    it), kept across a restart, deleted like any dynamic config, and used by nothing."""
    admin = _admin(dyn_broker)
    assert _result(_incremental(admin, "1", ("cleanup.policy", "compact", AlterConfigOpType.SET),
                                validate_only=True)) is None
    assert "cleanup.policy" not in _describe(admin, ResourceType.BROKER, "1")
    assert _result(_incremental(admin, "1", ("cleanup.policy", "compact", AlterConfigOpType.SET),
                                ("my.plugin.secret", "s3cr3t", AlterConfigOpType.SET),
                                ("log.retention.ms", str(5 * HOUR_MS), AlterConfigOpType.SET))) is None
    with WireClient(dyn_broker.bootstrap) as c:  # the cluster-wide default, as kafka-configs --entity-default sends
        resp = c.call(INCREMENTAL_ALTER_CONFIGS, 1, resources=[{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "my.cluster.setting", "config_operation": 0, "value": "on"}]}], validate_only=False)
        assert [(int(r.error_code), r.error_message) for r in resp.responses] == [(0, None)]
        resp = c.call(INCREMENTAL_ALTER_CONFIGS, 1, resources=[{"resource_type": 4, "resource_name": "1", "configs": [
            {"name": "my.plugin.secret", "config_operation": 2, "value": "more"}]}], validate_only=False)
        assert [int(r.error_code) for r in resp.responses] == [UNKNOWN_SERVER_ERROR]  # APPEND: Kafka's lookup throws

    def check_described() -> None:
        broker = _describe(admin, ResourceType.BROKER, "1")
        for name, source in (("cleanup.policy", DYN_BROKER), ("my.plugin.secret", DYN_BROKER),
                             ("my.cluster.setting", DYN_DEFAULT)):
            e = broker[name]
            assert (e.value, e.source, e.is_read_only, e.is_sensitive) == (None, source, True, True), name
        assert broker["log.retention.ms"].value == str(5 * HOUR_MS)  # the known key beside them applies
        raw = _wire_describe(dyn_broker, "1", ["cleanup.policy", "my.cluster.setting"])
        assert _custom_entry(raw, "cleanup.policy") == (None, DYN_BROKER, True, True, 0,
                                                        [("cleanup.policy", None, DYN_BROKER)])
        assert _custom_entry(raw, "my.cluster.setting") == (None, DYN_DEFAULT, True, True, 0,
                                                            [("my.cluster.setting", None, DYN_DEFAULT)])
        default = _wire_describe(dyn_broker, "")
        assert [e.name for e in default.configs] == ["my.cluster.setting"]
        assert _custom_entry(default, "my.cluster.setting")[:4] == (None, DYN_DEFAULT, True, True)

    check_described()
    stored = json.loads((dyn_broker.data_dir / "logs" / "strata-dynamic-broker-configs.json").read_text())
    assert stored["brokers"] == {"<default>": {"my.cluster.setting": "on"}, "1": {
        "cleanup.policy": "compact", "log.retention.ms": str(5 * HOUR_MS), "my.plugin.secret": "s3cr3t"}}
    assert "s3cr3t" not in dyn_broker.log_path.read_text(errors="replace")  # never logged (Kafka's loggableValue)

    # never in force: a new topic still gets the broker's log.cleanup.policy (delete), not the custom key's compact
    _result(admin.create_topics([NewTopic("custom-plain", 1, 1)], operation_timeout=TIMEOUT_S)["custom-plain"])
    policy = _describe(admin, ResourceType.TOPIC, "custom-plain")["cleanup.policy"]
    assert (policy.value, policy.source) == ("delete", DEFAULT_SRC)
    assert _produce(dyn_broker.bootstrap, "custom-plain", [b"no key, so refused by a compacted topic"]) == [None]

    dyn_broker.restart()
    admin = _admin(dyn_broker)
    check_described()

    # deleted like any dynamic config: one by one, or with the whole set (legacy AlterConfigs)
    assert _result(_incremental(admin, "1", ("cleanup.policy", None, AlterConfigOpType.DELETE))) is None
    broker = _describe(admin, ResourceType.BROKER, "1")
    assert "cleanup.policy" not in broker and broker["my.plugin.secret"].source == DYN_BROKER
    assert _result(_legacy(admin, "1", {"log.retention.ms": str(5 * HOUR_MS)})) is None
    assert "my.plugin.secret" not in _describe(admin, ResourceType.BROKER, "1")
    with WireClient(dyn_broker.bootstrap) as c:
        resp = c.call(ALTER_CONFIGS, 2, resources=[{"resource_type": 4, "resource_name": "", "configs": []}],
                      validate_only=False)
    assert [int(r.error_code) for r in resp.responses] == [0]
    assert list(_wire_entries(_wire_describe(dyn_broker, ""))) == []
    stored = json.loads((dyn_broker.data_dir / "logs" / "strata-dynamic-broker-configs.json").read_text())
    assert stored["brokers"] == {"<default>": {}, "1": {"log.retention.ms": str(5 * HOUR_MS)}}
