"""Kafka's command-line tools: ``bin/kafka-topics.sh``, ``kafka-configs.sh``, ``kafka-consumer-groups.sh``.

Every command runs the wrapper scripts as subprocesses against a real broker (one per module), the
way scripts written for Kafka's tools run them; results are checked through an independent client
(confluent-kafka) as well as through the tools' own output, which must be laid out like Kafka's.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from tests.broker.harness import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "bin"
T2020 = 1_577_836_800_000  # 2020-01-01T00:00:00Z
T2021 = 1_609_459_200_000  # 2021-01-01T00:00:00Z
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kafka-cli-broker")).start()
    try:
        yield b
    finally:
        b.stop()


def run(tool: str, *args: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
    """``bin/kafka-<tool>.sh [--bootstrap-server B] args...``; never a Python traceback."""
    argv = [str(BIN / f"kafka-{tool}.sh"), *(["--bootstrap-server", bootstrap] if bootstrap else []), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def ok(tool: str, *args: str, bootstrap: str) -> str:
    result = run(tool, *args, bootstrap=bootstrap)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def table(stdout: str, header: list[str]) -> list[list[str]]:
    """The rows under ``header`` (whitespace-separated cells), checking the header is there and preceded by a
    blank line as Kafka prints it."""
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split() == header)
    assert at > 0 and lines[at - 1] == "", stdout
    rows = []
    for line in lines[at + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def produce(bootstrap: str, topic: str, per_partition: dict[int, int], timestamp: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for partition, n in per_partition.items():
        for i in range(n):
            kwargs = {"timestamp": timestamp} if timestamp is not None else {}
            p.produce(topic, value=b"v%d" % i, partition=partition, **kwargs)
    assert p.flush(30) == 0


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in found}


def partition_count(bootstrap: str, topic: str) -> int | None:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return len(md.topics[topic].partitions) if topic in md.topics else None


# -- kafka-topics.sh ------------------------------------------------------------------------------

def test_topics_create_list_describe_alter_delete(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    out = ok("topics", "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1",
             "--config", "retention.ms=123456", "--config", "cleanup.policy=compact", bootstrap=b)
    assert out == "Created topic orders.\n"
    assert partition_count(b, "orders") == 3

    assert "orders" in ok("topics", "--list", bootstrap=b).splitlines()
    assert ok("topics", "--list", "--topic", "ord.*", bootstrap=b) == "orders\n"
    assert "__consumer_offsets" not in ok("topics", "--list", "--exclude-internal", bootstrap=b).splitlines()

    lines = ok("topics", "--describe", "--topic", "orders", bootstrap=b).splitlines()
    m = re.fullmatch(r"Topic: orders\tTopicId: ([\w-]{22})\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: (.*)",
                     lines[0])
    assert m, lines[0]
    # the overrides, and the broker's static settings (the harness sets log.segment.delete.delay.ms), as Kafka lists
    assert sorted(m.group(2).split(",")) == ["cleanup.policy=compact", "file.delete.delay.ms=0", "retention.ms=123456"]
    assert lines[1:] == [f"\tTopic: orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A"
                         for p in range(3)]
    topic_id = m.group(1)
    by_id = ok("topics", "--describe", "--topic-id", topic_id, bootstrap=b).splitlines()
    assert by_id[0].startswith("Topic: orders\t")

    assert ok("topics", "--alter", "--topic", "orders", "--partitions", "5", bootstrap=b) == ""
    assert partition_count(b, "orders") == 5
    assert "PartitionCount: 5" in ok("topics", "--describe", "--topic", "orders", bootstrap=b)

    assert ok("topics", "--delete", "--topic", "orders", bootstrap=b) == ""
    assert "orders" not in ok("topics", "--list", bootstrap=b).splitlines()
    assert partition_count(b, "orders") is None


def test_topics_describe_filters_and_defaults(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok("topics", "--create", "--topic", "plain", bootstrap=b)  # the broker's defaults: 1 partition, RF 1
    ok("topics", "--create", "--topic", "tuned", "--config", "segment.ms=600000", bootstrap=b)
    first = ok("topics", "--describe", "--topic", "plain", bootstrap=b).splitlines()[0]
    assert first.endswith("\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: file.delete.delay.ms=0")
    overrides = ok("topics", "--describe", "--topics-with-overrides", "--topic", "plain|tuned", bootstrap=b)
    assert [line.split("\t")[0] for line in overrides.splitlines()] == ["Topic: plain", "Topic: tuned"]
    assert ok("topics", "--describe", "--under-replicated-partitions", "--topic", "plain|tuned", bootstrap=b) == ""
    # a list of names with commas works like a regex alternative, as Kafka's TopicFilter
    names = [line.split("\t")[0] for line in ok("topics", "--describe", "--topic", "plain,tuned", bootstrap=b)
             .splitlines() if line.startswith("Topic:")]
    assert names == ["Topic: plain", "Topic: tuned"]
    # --if-not-exists: an existing topic is not an error; --if-exists: a missing one is not either
    assert ok("topics", "--create", "--if-not-exists", "--topic", "plain", bootstrap=b) == ""
    assert ok("topics", "--delete", "--if-exists", "--topic", "never-was", bootstrap=b) == ""
    assert ok("topics", "--describe", "--if-exists", "--topic", "never-was", bootstrap=b) == ""


def test_topics_errors_exit_non_zero_with_kafkas_messages(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    r = run("topics", "--describe", "--topic", "no-such-topic", bootstrap=b)
    assert r.returncode == 1
    assert r.stdout == "Error while executing topic command : Topic 'Optional[no-such-topic]' does not exist as " \
                       "expected\n"

    ok("topics", "--create", "--topic", "twice", bootstrap=b)
    r = run("topics", "--create", "--topic", "twice", bootstrap=b)
    assert r.returncode == 1
    assert r.stdout == "Error while executing topic command : Topic 'twice' already exists.\n"
    assert "org.apache.kafka.common.errors.TopicExistsException" in r.stderr

    r = run("topics", "--create", "--topic", "badconf", "--config", "retention.ms=soon", bootstrap=b)
    assert r.returncode == 1
    assert r.stdout.startswith("Error while executing topic command : ") and "retention.ms" in r.stdout
    assert "InvalidConfigurationException" in r.stderr
    assert partition_count(b, "badconf") is None

    r = run("topics", "--create", "--topic", "badconf", "--config", "retention.ms", bootstrap=b)
    assert r.returncode == 1
    assert "Invalid topic config: all configs to be added must be in the format \"key=val\"." in r.stdout

    r = run("topics", "--alter", "--topic", "twice", "--partitions", "1", bootstrap=b)
    assert r.returncode == 1 and r.stdout.startswith("Error while executing topic command : ")

    r = run("topics", "--delete", "--topic", "no-such-topic", bootstrap=b)
    assert r.returncode == 1 and "does not exist as expected" in r.stdout

    # Kafka's own argument checks: the message, the usage, exit code 1
    r = run("topics", "--topic", "x", bootstrap=b)
    assert r.returncode == 1
    assert r.stderr.startswith("Command must include exactly one action: --list, --describe, --create, --alter or "
                               "--delete\n")
    r = run("topics", "--alter", "--topic", "twice", "--config", "retention.ms=1", bootstrap=b)
    assert r.returncode == 1 and "can't be used with option \"[alter]\"" in r.stderr
    r = run("topics", "--alter", "--topic", "twice", bootstrap=b)
    assert r.returncode == 1 and r.stderr.startswith('Missing required argument "[partitions]"')
    r = run("topics", "--list")
    assert r.returncode == 1 and r.stderr.startswith("--bootstrap-server must be specified")
    r = run("topics", "--zookeeper", "localhost:2181", "--list")
    assert r.returncode == 1 and "--zookeeper is not supported" in r.stderr and "--bootstrap-server" in r.stderr

    r = run("topics", "--list", bootstrap="127.0.0.1:1")  # nothing listens there
    assert r.returncode == 1 and r.stdout.startswith("Error while executing topic command : ")


def test_librdkafka_test_suite_invocations_through_kafka_path(broker: BrokerProcess) -> None:
    """The commands librdkafka's tests run with ``system()`` (tests/test.c: test_kafka_topics)."""
    env = {**os.environ, "KAFKA_PATH": str(REPO), "BROKERS": broker.bootstrap}
    commands = [
        '$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server $BROKERS --create --topic "rdkafkatest_0052" '
        "--replication-factor 1 --partitions 1 --config message.timestamp.type=LogAppendTime",
        "$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server $BROKERS --create --topic \"rdkafkatest_0077\" "
        "--partitions 1 --replication-factor 1 --config cleanup.policy=compact --config segment.ms=500 "
        "--config segment.bytes=1048576 --config min.cleanable.dirty.ratio=0.01 --config delete.retention.ms=86400 "
        "--config file.delete.delay.ms=10000 --config max.compaction.lag.ms=100",
        "$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server $BROKERS --alter --topic rdkafkatest_0052 --partitions 4",
        "$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server $BROKERS --delete --topic rdkafkatest_0077 ",
    ]
    for command in commands:
        r = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{command}\n{r.stdout}\n{r.stderr}"
    assert partition_count(broker.bootstrap, "rdkafkatest_0052") == 4
    assert partition_count(broker.bootstrap, "rdkafkatest_0077") is None


# -- kafka-configs.sh -----------------------------------------------------------------------------

def test_configs_topic_add_delete_describe(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok("topics", "--create", "--topic", "conf", "--config", "retention.ms=100000", bootstrap=b)
    out = ok("configs", "--entity-type", "topics", "--entity-name", "conf", "--describe", bootstrap=b)
    assert out == ("Dynamic configs for topic conf are:\n"
                   "  retention.ms=100000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=100000}\n")

    out = ok("configs", "--entity-type", "topics", "--entity-name", "conf", "--alter",
             "--add-config", "segment.ms=600000,cleanup.policy=[compact,delete]", bootstrap=b)
    assert out == "Completed updating config for topic conf.\n"
    lines = ok("configs", "--topic", "conf", "--describe", bootstrap=b).splitlines()
    assert lines[0] == "Dynamic configs for topic conf are:"
    assert [line.split("=")[0].strip() for line in lines[1:]] == ["cleanup.policy", "retention.ms", "segment.ms"]
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                               "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete")

    resource = ConfigResource("topic", "conf")
    admin = AdminClient({"bootstrap.servers": b})  # kept: a collected client cancels its futures
    seen = admin.describe_configs([resource])[resource].result(timeout=10)
    assert (seen["segment.ms"].value, seen["cleanup.policy"].value) == ("600000", "compact,delete")

    out = ok("configs", "--entity-type", "topics", "--entity-name", "conf", "--alter",
             "--delete-config", "segment.ms,retention.ms", bootstrap=b)
    assert out == "Completed updating config for topic conf.\n"
    lines = ok("configs", "--entity-type", "topics", "--entity-name", "conf", "--describe", bootstrap=b).splitlines()
    assert [line.split("=")[0].strip() for line in lines[1:]] == ["cleanup.policy"]

    all_lines = ok("configs", "--entity-type", "topics", "--entity-name", "conf", "--describe", "--all",
                   bootstrap=b).splitlines()
    assert all_lines[0] == "All configs for topic conf are:"
    assert "  retention.ms=604800000 sensitive=false synonyms={}" in all_lines  # Kafka's default, no synonym
    assert "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact," \
           "delete, DEFAULT_CONFIG:log.cleanup.policy=delete}" in all_lines


def test_configs_broker_describe(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    assert ok("configs", "--entity-type", "brokers", "--entity-name", "1", "--describe", bootstrap=b) == \
        "Dynamic configs for broker 1 are:\n"
    lines = ok("configs", "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all",
               bootstrap=b).splitlines()
    assert lines[0] == "All configs for broker 1 are:"
    entries = {line.split("=")[0].strip(): line for line in lines[1:]}
    assert entries["num.partitions"].startswith("  num.partitions=1 sensitive=false synonyms={")
    assert list(entries) == sorted(entries)
    assert ok("configs", "--broker", "1", "--describe", bootstrap=b) == "Dynamic configs for broker 1 are:\n"
    assert ok("configs", "--entity-type", "brokers", "--describe", bootstrap=b) == \
        "Dynamic configs for broker 1 are:\nDefault configs for brokers in the cluster are:\n"


def test_configs_errors(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok("topics", "--create", "--topic", "conf-errors", bootstrap=b)
    r = run("configs", "--entity-type", "topics", "--entity-name", "conf-errors", "--alter",
            "--add-config", "retention.ms=soon", bootstrap=b)
    assert r.returncode == 1
    assert r.stderr.startswith("Error while executing config command with args '--bootstrap-server ")
    assert "org.apache.kafka.common.errors.InvalidConfigurationException:" in r.stderr and "retention.ms" in r.stderr

    r = run("configs", "--entity-type", "topics", "--entity-name", "conf-errors", "--alter",
            "--delete-config", "segment.ms", bootstrap=b)
    assert (r.returncode, r.stderr) == (1, "Invalid config(s): segment.ms\n")

    r = run("configs", "--entity-type", "topics", "--entity-name", "no-such-topic", "--describe", bootstrap=b)
    assert r.returncode == 1 and "UnknownTopicOrPartitionException" in r.stderr

    r = run("configs", "--entity-type", "topics", "--entity-name", "conf-errors", "--alter",
            "--add-config", "retention.ms", bootstrap=b)
    assert r.returncode == 1 and "all configs to be added must be in the format \"key=val\"" in r.stderr

    r = run("configs", "--entity-type", "brokers", "--entity-name", "one", "--describe", bootstrap=b)
    assert r.returncode == 1 and "must be a valid integer broker id" in r.stderr
    r = run("configs", "--entity-type", "topics", "--entity-name", "x", bootstrap=b)
    assert r.returncode == 1 and r.stderr.startswith("Command must include exactly one action: --describe, --alter")


# -- kafka-consumer-groups.sh ---------------------------------------------------------------------

def test_consumer_groups_describe_shows_offsets_and_lag(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok("topics", "--create", "--topic", "lag", "--partitions", "3", bootstrap=b)
    produce(b, "lag", {0: 10, 1: 7, 2: 4})
    commit(b, "lagging", {("lag", 0): 4, ("lag", 1): 7})

    assert "lagging" in ok("consumer-groups", "--list", bootstrap=b).splitlines()
    r = run("consumer-groups", "--describe", "--group", "lagging", bootstrap=b)
    assert r.returncode == 0
    assert "Consumer group 'lagging' has no active members." in r.stderr
    rows = table(r.stdout, OFFSETS_HEADER)
    assert rows == [["lagging", "lag", "0", "4", "10", "6", "-", "-", "-"],
                    ["lagging", "lag", "1", "7", "7", "0", "-", "-", "-"]]
    assert table(ok("consumer-groups", "--describe", "--offsets", "--group", "lagging", bootstrap=b),
                 OFFSETS_HEADER) == rows

    listed = ok("consumer-groups", "--list", "--state", bootstrap=b).splitlines()
    assert listed[0].split() == ["GROUP", "STATE"]
    assert ["lagging", "Empty"] in [line.split() for line in listed[1:]]
    assert ok("consumer-groups", "--list", "--state", "stable", bootstrap=b).splitlines()[1:] == []

    r = run("consumer-groups", "--describe", "--group", "no-such-group", bootstrap=b)
    assert r.returncode == 1 and "Error: Consumer group 'no-such-group' does not exist." in r.stdout


def test_consumer_groups_members_state_and_active_group(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    ok("topics", "--create", "--topic", "live", "--partitions", "3", bootstrap=b)
    produce(b, "live", {0: 5, 1: 5, 2: 5})
    c = Consumer({"bootstrap.servers": b, "group.id": "active", "client.id": "cli-member",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["live"])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 15 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen += 1
        assert seen == 15
        c.commit(offsets=[TopicPartition("live", 0, 5), TopicPartition("live", 1, 2)], asynchronous=False)

        rows = table(ok("consumer-groups", "--describe", "--group", "active", bootstrap=b), OFFSETS_HEADER)
        assert [r[1:6] for r in rows] == [["live", "0", "5", "5", "0"], ["live", "1", "2", "5", "3"],
                                          ["live", "2", "-", "5", "-"]]
        assert {(r[7], r[8]) for r in rows} == {("/127.0.0.1", "cli-member")}
        member_id = rows[0][6]
        assert member_id.startswith("cli-member-")

        members = ok("consumer-groups", "--describe", "--group", "active", "--members", "--verbose", bootstrap=b)
        # Kafka 4's layout: current and target epochs and assignments (a classic group has no epochs: "-")
        assert table(members, ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                               "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]) == [
            ["active", member_id, "/127.0.0.1", "cli-member", "3", "-", "live:0,1,2", "-", "-"]]
        state = ok("consumer-groups", "--describe", "--group", "active", "--state", bootstrap=b)
        assert table(state, ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]) == [
            ["active", f"127.0.0.1:{broker.port}", "(1)", "range", "Stable", "1"]]

        # Kafka refuses to reset the offsets of an active group
        r = run("consumer-groups", "--reset-offsets", "--group", "active", "--all-topics", "--to-earliest",
                "--execute", bootstrap=b)
        assert r.returncode == 1
        assert "Error: Assignments can only be reset if the group 'active' is inactive, but the current state is " \
               "Stable." in r.stdout
        assert committed(b, "active", "live", 2) == {0: 5, 1: 2}
    finally:
        c.close()


def test_consumer_groups_reset_offsets(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    # records of 2020 and 2021 are past the default 7-day retention: without retention.ms=-1 the first retention
    # run (30 s after the module's broker started) deleted them in slow runs, moving the log start to the end
    ok("topics", "--create", "--topic", "rewind", "--partitions", "2", "--config", "retention.ms=-1", bootstrap=b)
    produce(b, "rewind", {0: 3, 1: 3}, timestamp=T2020)
    produce(b, "rewind", {0: 4, 1: 2}, timestamp=T2021)  # offsets 3.. (partition 0: 3-6, partition 1: 3-4)
    commit(b, "rw", {("rewind", 0): 5, ("rewind", 1): 5})
    reset_header = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]

    # without --execute: a dry run (with Kafka's warning), nothing committed
    r = run("consumer-groups", "--reset-offsets", "--group", "rw", "--topic", "rewind", "--to-earliest", bootstrap=b)
    assert r.returncode == 0 and "WARN: No action will be performed as the --execute option is missing." in r.stderr
    assert table(r.stdout, reset_header) == [["rw", "rewind", "0", "0"], ["rw", "rewind", "1", "0"]]
    assert committed(b, "rw", "rewind", 2) == {0: 5, 1: 5}
    out = ok("consumer-groups", "--reset-offsets", "--group", "rw", "--all-topics", "--to-latest", "--dry-run",
             bootstrap=b)
    assert table(out, reset_header) == [["rw", "rewind", "0", "7"], ["rw", "rewind", "1", "5"]]
    assert committed(b, "rw", "rewind", 2) == {0: 5, 1: 5}

    out = ok("consumer-groups", "--reset-offsets", "--group", "rw", "--topic", "rewind", "--to-earliest",
             "--execute", bootstrap=b)
    assert table(out, reset_header) == [["rw", "rewind", "0", "0"], ["rw", "rewind", "1", "0"]]
    assert committed(b, "rw", "rewind", 2) == {0: 0, 1: 0}
    lags = table(ok("consumer-groups", "--describe", "--group", "rw", bootstrap=b), OFFSETS_HEADER)
    assert [r[2:6] for r in lags] == [["0", "0", "7", "7"], ["1", "0", "5", "5"]]

    ok("consumer-groups", "--reset-offsets", "--group", "rw", "--topic", "rewind:1", "--to-latest", "--execute",
       bootstrap=b)
    assert committed(b, "rw", "rewind", 2) == {0: 0, 1: 5}

    # the first offset whose timestamp is at or after the date: the 2021 records start at offset 3
    out = ok("consumer-groups", "--reset-offsets", "--group", "rw", "--all-topics", "--to-datetime",
             "2020-06-01T00:00:00.000", "--execute", bootstrap=b)
    assert table(out, reset_header) == [["rw", "rewind", "0", "3"], ["rw", "rewind", "1", "3"]]
    assert committed(b, "rw", "rewind", 2) == {0: 3, 1: 3}
    # after every record: Kafka's warning and the log end offset
    out = ok("consumer-groups", "--reset-offsets", "--group", "rw", "--all-topics", "--to-datetime",
             "2030-01-01T00:00:00.000+01:00", "--dry-run", bootstrap=b)
    assert "Warn: Partition 0 from topic rewind is empty. Falling back to latest known offset." in out
    assert table(out, reset_header) == [["rw", "rewind", "0", "7"], ["rw", "rewind", "1", "5"]]

    out = ok("consumer-groups", "--reset-offsets", "--group", "rw", "--all-topics", "--shift-by", "-2",
             "--dry-run", "--export", bootstrap=b)
    assert out == "rewind,0,1\nrewind,1,1\n\n"
    out = ok("consumer-groups", "--reset-offsets", "--group", "rw", "--all-topics", "--to-offset", "100",
             "--dry-run", bootstrap=b)
    assert table(out, reset_header) == [["rw", "rewind", "0", "7"], ["rw", "rewind", "1", "5"]]

    r = run("consumer-groups", "--reset-offsets", "--group", "rw", "--to-earliest", "--execute", bootstrap=b)
    assert r.returncode == 1
    assert r.stderr.startswith("One of the reset scopes should be defined: --all-topics, --topic.")
    r = run("consumer-groups", "--reset-offsets", "--group", "rw", "--all-topics", "--to-earliest", "--to-latest",
            bootstrap=b)
    assert r.returncode == 1 and "can't be used with option" in r.stderr
    assert committed(b, "rw", "rewind", 2) == {0: 3, 1: 3}

    assert ok("consumer-groups", "--delete", "--group", "rw", bootstrap=b) == \
        "Deletion of requested consumer groups ('rw') was successful.\n"
    assert "rw" not in ok("consumer-groups", "--list", bootstrap=b).splitlines()


# -- a cluster: the replication factor is passed through, describe shows replicas and ISR -----------

def test_replication_factor_in_a_cluster(zk_connect: str, tmp_path: Path) -> None:
    from tests.cluster.harness import running_cluster, wait_until

    with running_cluster(zk_connect, tmp_path, size=2, props={"offsets.topic.replication.factor": "2"}) as cluster:
        b = cluster.bootstrap
        assert ok("topics", "--create", "--topic", "replicated", "--partitions", "2", "--replication-factor", "2",
                  bootstrap=b) == "Created topic replicated.\n"
        cluster.wait_full_isr("replicated")
        lines = ok("topics", "--describe", "--topic", "replicated", bootstrap=b).splitlines()
        assert "\tPartitionCount: 2\tReplicationFactor: 2\t" in lines[0]
        for p, line in enumerate(lines[1:]):
            m = re.fullmatch(rf"\tTopic: replicated\tPartition: {p}\tLeader: (\d)\tReplicas: (\d,\d)\tIsr: (\d,\d)"
                             r"\tElr: N/A\tLastKnownElr: N/A", line)
            assert m, line
            assert sorted(m.group(2).split(",")) == sorted(m.group(3).split(",")) == ["1", "2"]
            assert m.group(1) == m.group(2)[0]  # the preferred replica leads
        r = run("topics", "--create", "--topic", "too-many", "--replication-factor", "3", bootstrap=b)
        assert r.returncode == 1 and "InvalidReplicationFactorException" in r.stderr

        produce(b, "replicated", {0: 3, 1: 1})
        commit(b, "cluster-group", {("replicated", 0): 1})
        wait_until(lambda: "cluster-group" in ok("consumer-groups", "--list", bootstrap=b).split(), 30, "group listed")
        rows = table(ok("consumer-groups", "--describe", "--group", "cluster-group", bootstrap=b), OFFSETS_HEADER)
        assert [r[1:6] for r in rows] == [["replicated", "0", "1", "3", "2"]]
        # a broker's configs are asked of that broker
        assert ok("configs", "--entity-type", "brokers", "--entity-name", "2", "--describe", bootstrap=b) == \
            "Dynamic configs for broker 2 are:\n"


# -- the parsing the tools share with Kafka (no broker) ---------------------------------------------

def test_kafka_formats_and_parsers() -> None:
    import argparse
    import io
    import uuid

    from kio.schema.consumer_protocol_assignment.v3 import ConsumerProtocolAssignment
    from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignedTopic
    from kio.serial import entity_writer

    from strata.tools.admin import decode_assignment, uuid_text
    from strata.tools.configs_cmd import ConfigError, parse_add_config
    from strata.tools.consumer_groups_cmd import parse_datetime, parse_duration_ms
    from strata.tools.topics_cmd import CommandError, parse_configs, parse_replica_assignment

    # Kafka's Uuid.toString(): URL-safe base64, no padding
    assert uuid_text(uuid.UUID("ff7f0000-0000-0000-0000-00000000fb7f")) == "_38AAAAAAAAAAAAAAAD7fw"

    # --to-datetime: no zone means UTC; Kafka's XXX and X zone patterns
    june = 1_590_969_600_000
    assert {parse_datetime("2020-06-01T00:00:00.000"), parse_datetime("2020-06-01T00:00:00.000Z"),
            parse_datetime("2020-06-01T02:00:00.000+02:00"), parse_datetime("2020-05-31T19:00:00.000-05")} == {june}
    assert parse_duration_ms("P1DT2H3M4.5S") == 93_784_500 and parse_duration_ms("-PT10S") == -10_000

    # --add-config: commas inside [] stay in the value, the brackets go
    args = argparse.Namespace(add_config="a=1, cleanup.policy=[compact,delete],c = 3", add_config_file=None)
    assert parse_add_config(args) == {"a": "1", "cleanup.policy": "compact,delete", "c": "3"}
    with pytest.raises(ConfigError, match="must be in the format"):
        parse_add_config(argparse.Namespace(add_config="a=1,b", add_config_file=None))
    with pytest.raises(ConfigError, match="Invalid character found for config key: a b"):
        parse_add_config(argparse.Namespace(add_config="a b=1", add_config_file=None))

    # kafka-topics.sh --config and --replica-assignment
    assert parse_configs(["retention.ms = 5", "x=y"]) == {"retention.ms": "5", "x": "y"}
    for bad in ("k=", "k=v=w", "k"):
        with pytest.raises(CommandError, match="Invalid topic config"):
            parse_configs([bad])
    assert parse_replica_assignment("1:2,2:3") == {0: [1, 2], 1: [2, 3]}
    with pytest.raises(CommandError, match="may not contain duplicate entries: 1"):
        parse_replica_assignment("1:1")
    with pytest.raises(CommandError, match=r"Partition 1 has different replication factor: \[2\]"):
        parse_replica_assignment("1:2,2")

    # a member's ConsumerProtocol assignment, as a Java or librdkafka consumer sends it (version, then body)
    buf = io.BytesIO()
    buf.write(b"\x00\x03")
    entity_writer(ConsumerProtocolAssignment)(buf, ConsumerProtocolAssignment(
        assigned_partitions=(AssignedTopic(topic="a", partitions=(1, 0)), AssignedTopic(topic="b", partitions=(2,))),
        user_data=None))
    assert decode_assignment(buf.getvalue()) == (("a", 1), ("a", 0), ("b", 2))
    assert decode_assignment(b"") == () and decode_assignment(b"\x00\x00\xff") == ()
