"""``bin/kafka-acls.sh`` (``strata acls``): Kafka's flags, checks and output, and ACLs that do what they say.

One broker (module scope) with the ACL authorizer and two listeners: PLAINTEXT, whose anonymous principal is a
super user (where the tool runs, as librdkafka's tests run Kafka's), and SASL_PLAINTEXT, where alice and bob log
in with PLAIN. Every ACL the tool adds or removes is checked through an independent client: confluent-kafka's
AdminClient.describe_acls, and producers and consumers that are (or are no longer) refused.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from tests.broker.harness import BrokerProcess
from tests.security.clients import PASSWORDS, plain_client, plain_listener_props

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acls-cli"), {**plain_listener_props(), "num.partitions": "1"},
                      listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}).start()
    try:
        yield b
    finally:
        b.stop()


def acls(*args: str, bootstrap: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``bin/kafka-acls.sh [--bootstrap-server B] args...``, never a Python traceback."""
    argv = [str(REPO / "bin" / "kafka-acls.sh"), *(["--bootstrap-server", bootstrap] if bootstrap else []), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", input=stdin or "")
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def ok(b: BrokerProcess, *args: str, stdin: str | None = None) -> str:
    result = acls(*args, bootstrap=b.bootstrap, stdin=stdin)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def refused(b: BrokerProcess | None, *args: str) -> subprocess.CompletedProcess[str]:
    result = acls(*args, bootstrap=b.bootstrap if b else None)
    assert result.returncode == 1, f"{result.stdout}\n{result.stderr}"
    return result


_ADMINS: dict[str, AdminClient] = {}


def admin(b: BrokerProcess) -> AdminClient:
    if b.bootstrap not in _ADMINS:
        _ADMINS[b.bootstrap] = AdminClient({"bootstrap.servers": b.bootstrap})
    return _ADMINS[b.bootstrap]


def stored(b: BrokerProcess, rtype: ResourceType = ResourceType.ANY, name: str | None = None,
           pattern: ResourcePatternType = ResourcePatternType.ANY) -> set[tuple[Any, ...]]:
    """The ACLs the broker holds (confluent-kafka's DescribeAcls) as (type, name, pattern, principal, host,
    operation, permission) tuples."""
    f = AclBindingFilter(rtype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
    return {(x.restype, x.name, x.resource_pattern_type, x.principal, x.host, x.operation, x.permission_type)
            for x in admin(b).describe_acls(f).result(30)}


def topic(b: BrokerProcess, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin(b).create_topics([NewTopic(name, 1, 1)])[name].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce(name, b"v")
    assert p.flush(30) == 0
    return name


def consume_one(b: BrokerProcess, user: str, name: str, group: str) -> KafkaError | bytes:
    """The first message ``user`` reads from ``name`` in ``group``, or the error the consumer reports."""
    c = Consumer(plain_client(b, user, **{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        c.subscribe([name])
        for _ in range(30):
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                return m.error()
            return m.value()
        raise AssertionError(f"{user} read nothing from {name} in 30 s")
    finally:
        c.close()


def produce_one(b: BrokerProcess, user: str, name: str, **extra: Any) -> KafkaError | None:
    """None when ``user`` could write to ``name``, else the delivery (or init) error."""
    p = Producer(plain_client(b, user, **{"message.timeout.ms": 10000, **extra}))
    errors: list[KafkaError] = []
    try:
        if "transactional.id" in extra:
            p.init_transactions(30)
            p.begin_transaction()
        p.produce(name, b"x", on_delivery=lambda err, _m: errors.append(err) if err else None)
        if "transactional.id" in extra:
            p.commit_transaction(30)
        p.flush(30)
    except KafkaException as e:
        return e.args[0]
    return errors[0] if errors else None


# -- output and effect -----------------------------------------------------------------------------------------


def test_add_prints_kafka_s_lines_and_the_acl_takes_effect(broker: BrokerProcess) -> None:
    t = topic(broker)
    out = ok(broker, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
             "--topic", t)
    resource = f"ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)"
    read = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    describe = "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)"
    # Kafka 3.9's AclCommand: "Adding ACLs for resource `R`: \n \t(a)\n\t(b) \n" + println, then the list
    assert out == (f"Adding ACLs for resource `{resource}`: \n \t{read}\n\t{describe} \n\n"
                   f"Current ACLs for resource `{resource}`: \n \t{read}\n\t{describe} \n\n")
    assert stored(broker, ResourceType.TOPIC, t) == {
        (ResourceType.TOPIC, t, ResourcePatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW)
        for op in (AclOperation.READ, AclOperation.DESCRIBE)}
    ok(broker, "--add", "--allow-principal", "User:*", "--operation", "Read", "--group", "g-" + t)
    assert consume_one(broker, "alice", t, "g-" + t) == b"v"
    assert consume_one(broker, "bob", t, "g-" + t).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_beats_allow_and_remove_restores(broker: BrokerProcess) -> None:
    """librdkafka's 0119 with the tool: Describe allowed to everyone, Read denied; removing both ends it."""
    t = topic(broker)
    ok(broker, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", t, "--group", "*")
    assert consume_one(broker, "alice", t, "g1-" + t) == b"v"
    ok(broker, "--add", "--allow-principal", "User:*", "--operation", "Describe", "--allow-host", "*",
       "--topic", t)
    ok(broker, "--add", "--deny-principal", "User:*", "--operation", "Read", "--deny-host", "*", "--topic", t)
    assert consume_one(broker, "alice", t, "g2-" + t).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    out = ok(broker, "--remove", "--force", "--deny-principal", "User:*", "--operation", "Read", "--deny-host", "*",
             "--topic", t)
    assert "permissionType=DENY" not in out and "operation=READ, permissionType=ALLOW" in out
    assert consume_one(broker, "alice", t, "g3-" + t) == b"v"
    ok(broker, "--remove", "--force", "--topic", t)  # every ACL of the topic
    assert stored(broker, ResourceType.TOPIC, t) == set()
    assert consume_one(broker, "alice", t, "g4-" + t).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_producer_and_consumer_roles(broker: BrokerProcess) -> None:
    t, txn, group = topic(broker, "role"), "tx-" + uuid.uuid4().hex[:6], "g-" + uuid.uuid4().hex[:6]
    assert produce_one(broker, "bob", t).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    ok(broker, "--add", "--allow-principal", "User:bob", "--producer", "--topic", t, "--transactional-id", txn,
       "--idempotent")
    allow = AclPermissionType.ALLOW
    assert stored(broker) >= {
        *((ResourceType.TOPIC, t, ResourcePatternType.LITERAL, "User:bob", "*", op, allow)
          for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)),
        *((ResourceType.TRANSACTIONAL_ID, txn, ResourcePatternType.LITERAL, "User:bob", "*", op, allow)
          for op in (AclOperation.WRITE, AclOperation.DESCRIBE)),
        (ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob", "*",
         AclOperation.IDEMPOTENT_WRITE, allow)}
    assert produce_one(broker, "bob", t) is None
    assert produce_one(broker, "bob", t, **{"transactional.id": txn}) is None
    ok(broker, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", t, "--group", group)
    assert consume_one(broker, "bob", t, group) == b"v"
    out = ok(broker, "--list", "--topic", t, "--group", group)
    assert out.count("Current ACLs for resource") == 2
    assert f"ResourcePattern(resourceType=GROUP, name={group}, patternType=LITERAL)`: \n \t(principal=User:bob, " \
           "host=*, operation=READ, permissionType=ALLOW) \n" in out


def test_prefixed_patterns_and_list_filters(broker: BrokerProcess) -> None:
    prefix = "pre-" + uuid.uuid4().hex[:6] + "-"
    t = topic(broker, prefix + "x")
    assert produce_one(broker, "bob", t).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    ok(broker, "--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", prefix,
       "--resource-pattern-type", "prefixed")
    assert produce_one(broker, "bob", t) is None
    # LITERAL (the default) does not list the prefixed ACL for the topic's name; MATCH does, ANY needs the prefix
    assert "PREFIXED" not in ok(broker, "--list", "--topic", t)
    matched = ok(broker, "--list", "--topic", t, "--resource-pattern-type", "match")
    assert f"ResourcePattern(resourceType=TOPIC, name={prefix}, patternType=PREFIXED)" in matched
    assert "PREFIXED" in ok(broker, "--list", "--topic", prefix, "--resource-pattern-type", "any")
    # --principal keeps that principal's entries
    ok(broker, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", prefix,
       "--resource-pattern-type", "PREFIXED")
    by_alice = ok(broker, "--list", "--principal", "User:alice", "--topic", prefix, "--resource-pattern-type",
                  "prefixed")
    assert by_alice.startswith("ACLs for principal `User:alice`\n") and "User:bob" not in by_alice
    everything = ok(broker, "--list")
    assert f"name={prefix}, patternType=PREFIXED" in everything
    ok(broker, "--remove", "--force", "--topic", t, "--resource-pattern-type", "match")  # all that apply to t
    assert stored(broker, ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED) == set()


def test_remove_asks_first_without_force(broker: BrokerProcess) -> None:
    t = topic(broker)
    ok(broker, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", t)
    out = ok(broker, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", t, stdin="n\n")
    assert "Are you sure you want to remove ACLs: \n \t(principal=User:alice, host=*, operation=READ, " \
           f"permissionType=ALLOW) \n from resource filter `ResourcePattern(resourceType=TOPIC, name={t}, " \
           "patternType=LITERAL)`? (y/n)" in out
    assert len(stored(broker, ResourceType.TOPIC, t)) == 1
    out = ok(broker, "--remove", "--topic", t, stdin="y\n")
    assert "Are you sure you want to delete all ACLs for resource filter" in out
    assert stored(broker, ResourceType.TOPIC, t) == set()


# -- refusals --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--topic", "t"], "Command must include exactly one action: --list, --add, --remove."),
    (["--add", "--list", "--topic", "t"], "Command must include exactly one action"),
    (["--list", "--producer", "--topic", "t"], "Option \"[list]\" can't be used with option \"[producer]\""),
    (["--add", "--producer", "--allow-principal", "User:a"], "With --producer you must specify a --topic"),
    (["--add", "--producer", "--topic", "t", "--operation", "Read", "--allow-principal", "User:a"],
     "Option \"[producer]\" can't be used with option \"[operation]\""),
    (["--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"],
     "With --consumer you must specify a --topic and a --group"),
    (["--add", "--idempotent", "--topic", "t", "--allow-principal", "User:a"],
     "The --idempotent option is only available if --producer is set"),
    (["--add", "--topic", "t"],
     "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."),
    (["--add", "--allow-principal", "User:a"], "You must provide at least one resource: --topic <topic> or --cluster"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
     "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
    (["--list", "--resource-pattern-type", "fuzzy"], "Cannot parse argument 'fuzzy' of option resource-pattern-type"),
    (["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
     "ResourceType GROUP only supports operations ALL, READ, DELETE, DESCRIBE"),
    (["--remove", "--principal", "User:a", "--topic", "t"],
     "The --principal option is only available if --list is set"),
])
def test_usage_errors_print_kafka_s_message_and_the_usage(broker: BrokerProcess, args: list[str],
                                                          message: str) -> None:
    result = refused(broker, *args)
    assert message in result.stderr and "usage:" in result.stderr, result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--add", "--allow-principal", "alice", "--topic", "t"],
     "expected a string in format principalType:principalName but got alice"),
    (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "Unknown operation name Fly"),
])
def test_bad_principals_and_operations(broker: BrokerProcess, args: list[str], message: str) -> None:
    result = refused(broker, *args)
    assert result.stdout.startswith(f"Error while executing ACL command: {message}"), result.stdout
    assert stored(broker, ResourceType.TOPIC, "t") == set()


def test_no_bootstrap_server_and_the_zookeeper_options() -> None:
    assert "One of --bootstrap-server or --authorizer-properties must be specified" in refused(None, "--list").stderr
    result = refused(None, "--authorizer-properties", "zookeeper.connect=localhost:2181", "--list")
    assert "--authorizer-properties is not supported" in result.stderr and "--bootstrap-server" in result.stderr


def test_a_broker_without_an_authorizer_says_security_is_disabled(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "plain").start()
    try:
        result = refused(b, "--add", "--allow-principal", "User:a", "--topic", "t")
        assert "Error while executing ACL command: org.apache.kafka.common.errors.SecurityDisabledException" \
            in result.stdout, result.stdout
    finally:
        b.stop()


def test_command_config_logs_in_and_a_non_super_user_is_refused(broker: BrokerProcess, tmp_path: Path) -> None:
    def props(user: str) -> str:
        path = tmp_path / f"{user}.properties"
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                        f'    username="{user}" password="{PASSWORDS[user]}";\n')
        return str(path)

    sasl = broker.address("SASL_PLAINTEXT")
    t = topic(broker)
    result = acls("--command-config", props("admin"), "--add", "--allow-principal", "User:alice", "--topic", t,
                  bootstrap=sasl)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(stored(broker, ResourceType.TOPIC, t)) == 1  # operation All
    result = acls("--command-config", props("alice"), "--add", "--allow-principal", "User:bob", "--topic", t,
                  bootstrap=sasl)
    assert result.returncode == 1
    assert "Error while executing ACL command: org.apache.kafka.common.errors.ClusterAuthorizationException" \
        in result.stdout, result.stdout
    assert len(stored(broker, ResourceType.TOPIC, t)) == 1
