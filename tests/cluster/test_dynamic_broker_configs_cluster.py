"""Dynamic broker configs in a cluster: ``/config/brokers/<default>`` and ``/config/brokers/<id>`` in ZooKeeper.

A cluster-wide default set through one broker applies on every broker (each watches the znode), in
force in the logs each of them leads and reported by each of them; a per-broker value stays on its
broker; both survive a restart (they live in ZooKeeper, Kafka's JSON, with a ``/config/changes``
notification as Kafka's AdminZkClient writes it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kazoo.client import KazooClient
from tests.cluster.harness import Cluster, running_cluster, wait_until

TIMEOUT_S = 15
DYN_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DYN_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
DEFAULT_SRC = ConfigSource.DEFAULT_CONFIG.value


def _admin_of(cluster: Cluster, broker_id: int) -> AdminClient:
    """An admin client that knows only this broker (its answers are this broker's view)."""
    return AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap, "log_level": 3})


def _describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict[str, Any]:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)


def _source(admin: AdminClient, rtype: ResourceType, name: str, key: str) -> tuple[str, int]:
    entry = _describe(admin, rtype, name)[key]
    return entry.value, entry.source


def _produce(bootstrap: str, topic: str, partition: int, value: bytes) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 0, "acks": "all",
                         "message.max.bytes": 10_000_000, "message.timeout.ms": TIMEOUT_S * 1000})
    errors: list[KafkaError | None] = []
    producer.produce(topic, value=value, partition=partition, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    return errors[0]


def _zk_json(zk_connect: str, path: str) -> Any:
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        data, _stat = zk.get(path)
        changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in sorted(zk.get_children("/config/changes"))]
        return json.loads(data), changes
    finally:
        zk.stop()
        zk.close()


def test_a_cluster_default_set_through_one_broker_applies_on_every_broker(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, size=2) as cluster:
        admin = cluster.admin()
        # two partitions, one led by each broker (round-robin assignment)
        admin.create_topics([NewTopic("dyn-cluster", 2, 2)], operation_timeout=TIMEOUT_S)["dyn-cluster"].result(
            TIMEOUT_S)
        cluster.wait_full_isr("dyn-cluster")
        leaders = {cluster.leader_of("dyn-cluster", p) for p in (0, 1)}
        assert leaders == {1, 2}
        big = b"x" * 50_000
        assert _produce(cluster.bootstrap, "dyn-cluster", 0, big) is None

        # kafka-configs --bootstrap-server <broker 1> --entity-default: the legacy AlterConfigs on BROKER ""
        done = subprocess.run([sys.executable, "-m", "strata", "configs", "--bootstrap-server",
                               cluster.brokers[1].bootstrap, "--entity-type", "brokers", "--entity-default",
                               "--alter", "--add-config", "message.max.bytes=10000,log.cleaner.threads=2"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

        for broker_id in (1, 2):
            own = _admin_of(cluster, broker_id)
            wait_until(lambda own=own, broker_id=broker_id: _source(
                own, ResourceType.BROKER, str(broker_id), "message.max.bytes") == ("10000", DYN_DEFAULT),
                TIMEOUT_S, f"the default on broker {broker_id}")
            assert _source(own, ResourceType.TOPIC, "dyn-cluster", "max.message.bytes") == ("10000", DYN_DEFAULT)
            assert _source(own, ResourceType.BROKER, str(broker_id), "log.cleaner.threads") == ("2", DYN_DEFAULT)
        # in force on both leaders: a big batch is refused whichever broker leads the partition
        for partition in (0, 1):
            err = _produce(cluster.bootstrap, "dyn-cluster", partition, big)
            assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, (partition, err)
        assert _produce(cluster.bootstrap, "dyn-cluster", 1, b"small") is None

        config, changes = _zk_json(zk_connect, "/config/brokers/<default>")
        assert config == {"version": 1, "config": {"message.max.bytes": "10000", "log.cleaner.threads": "2"}} or \
            config == {"version": 1, "config": {"log.cleaner.threads": "2", "message.max.bytes": "10000"}}
        assert {"version": 2, "entity_path": "brokers/<default>"} in changes

        # a per-broker value on broker 2 (sent to broker 2 by the client) stays on broker 2 and wins there
        res = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
            ConfigEntry("message.max.bytes", "200000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
        assert _zk_json(zk_connect, "/config/brokers/2")[0] == {"version": 1, "config": {"message.max.bytes": "200000"}}
        two = _admin_of(cluster, 2)
        entry = _describe(two, ResourceType.BROKER, "2")["message.max.bytes"]
        assert (entry.value, entry.source) == ("200000", DYN_BROKER)
        assert _source(_admin_of(cluster, 1), ResourceType.BROKER, "1", "message.max.bytes") == ("10000", DYN_DEFAULT)
        led_by_two = next(p for p in (0, 1) if cluster.leader_of("dyn-cluster", p) == 2)
        assert _produce(cluster.bootstrap, "dyn-cluster", led_by_two, big) is None

        # both survive a restart: they are read back from ZooKeeper
        cluster.brokers[2].restart()
        wait_until(lambda: _source(_admin_of(cluster, 2), ResourceType.BROKER, "2", "message.max.bytes")
                   == ("200000", DYN_BROKER), 30, "broker 2 back with its dynamic config")
        assert _source(_admin_of(cluster, 2), ResourceType.BROKER, "2", "log.cleaner.threads") == ("2", DYN_DEFAULT)

        # deleting the default (through broker 2 this time) reaches broker 1
        res = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
            ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
        admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
        done = subprocess.run([sys.executable, "-m", "strata", "configs", "--bootstrap-server",
                               cluster.brokers[2].bootstrap, "--entity-type", "brokers", "--entity-default",
                               "--alter", "--delete-config", "message.max.bytes"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        one = _admin_of(cluster, 1)
        wait_until(lambda: _source(one, ResourceType.TOPIC, "dyn-cluster", "max.message.bytes")
                   == ("1048588", DEFAULT_SRC), TIMEOUT_S, "the default removed on broker 1")
        wait_until(lambda: all(_produce(cluster.bootstrap, "dyn-cluster", p, big) is None for p in (0, 1)),
                   TIMEOUT_S, "big batches accepted again")


def _custom(admin: AdminClient, name: str, key: str) -> tuple[str | None, int, bool, bool] | None:
    """(value, source, sensitive, read-only) of a key of a BROKER resource, None when the broker does not report it."""
    entry = _describe(admin, ResourceType.BROKER, name).get(key)
    return None if entry is None else (entry.value, entry.source, entry.is_sensitive, entry.is_read_only)


def test_custom_broker_configs_live_in_zookeeper_reach_every_broker_and_change_nothing(zk_connect: str,
                                                                                        tmp_path: Path) -> None:
    """Kafka's ZkAdminManager stores a name that is no broker config (a custom config) in /config/brokers/<id> or
    /config/brokers/<default> like a dynamic one: every broker reports it (no value: sensitive, Kafka knows no type),
    it survives a restart and is deleted like the others, and no broker uses it."""
    with running_cluster(zk_connect, tmp_path, size=2) as cluster:
        admin = cluster.admin()
        res = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("my.plugin.setting", "x", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S, validate_only=True)[res].result(TIMEOUT_S)
        two = _admin_of(cluster, 2)
        assert _custom(two, "2", "cleanup.policy") is None
        admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
        assert _zk_json(zk_connect, "/config/brokers/2")[0] == {
            "version": 1, "config": {"cleanup.policy": "compact", "my.plugin.setting": "x"}}

        # the cluster-wide default through broker 1 (kafka-configs --entity-default: the legacy AlterConfigs on "")
        done = subprocess.run([sys.executable, "-m", "strata", "configs", "--bootstrap-server",
                               cluster.brokers[1].bootstrap, "--entity-type", "brokers", "--entity-default",
                               "--alter", "--add-config", "my.cluster.setting=on"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        config, changes = _zk_json(zk_connect, "/config/brokers/<default>")
        assert config == {"version": 1, "config": {"my.cluster.setting": "on"}}
        assert {"version": 2, "entity_path": "brokers/<default>"} in changes
        for broker_id in (1, 2):
            own = _admin_of(cluster, broker_id)
            wait_until(lambda own=own, broker_id=broker_id: _custom(own, str(broker_id), "my.cluster.setting")
                       == (None, DYN_DEFAULT, True, True), TIMEOUT_S, f"the custom default on broker {broker_id}")
        assert _custom(two, "2", "cleanup.policy") == (None, DYN_BROKER, True, True)
        assert _custom(_admin_of(cluster, 1), "1", "cleanup.policy") is None  # broker 2's own, not broker 1's

        # used by nothing: a new topic led by either broker keeps the broker's log.cleanup.policy (delete)
        admin.create_topics([NewTopic("custom-cluster", 2, 2)], operation_timeout=TIMEOUT_S)["custom-cluster"].result(
            TIMEOUT_S)
        cluster.wait_full_isr("custom-cluster")
        for broker_id in (1, 2):
            assert _source(_admin_of(cluster, broker_id), ResourceType.TOPIC, "custom-cluster", "cleanup.policy") == (
                "delete", DEFAULT_SRC)
        for partition in (0, 1):  # a keyless record, which a compacted topic would refuse
            assert _produce(cluster.bootstrap, "custom-cluster", partition, b"no key") is None

        cluster.brokers[2].restart()
        wait_until(lambda: _custom(_admin_of(cluster, 2), "2", "cleanup.policy") == (None, DYN_BROKER, True, True),
                   30, "broker 2 back with its custom config")
        two = _admin_of(cluster, 2)  # a client connected after the restart (the old one may still be reconnecting)
        assert _custom(two, "2", "my.cluster.setting") == (None, DYN_DEFAULT, True, True)

        # deleted like any dynamic config, the default through broker 2 this time
        res = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
            ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)])
        two.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
        assert _zk_json(zk_connect, "/config/brokers/2")[0] == {"version": 1, "config": {"my.plugin.setting": "x"}}
        done = subprocess.run([sys.executable, "-m", "strata", "configs", "--bootstrap-server",
                               cluster.brokers[2].bootstrap, "--entity-type", "brokers", "--entity-default",
                               "--alter", "--delete-config", "my.cluster.setting"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert _zk_json(zk_connect, "/config/brokers/<default>")[0] == {"version": 1, "config": {}}
        one = _admin_of(cluster, 1)
        wait_until(lambda: _custom(one, "1", "my.cluster.setting") is None, TIMEOUT_S, "the default gone on broker 1")
        assert _custom(two, "2", "cleanup.policy") is None
