"""ACLs on the topic, cluster and config APIs: what each request needs, the codes a refusal answers with.

One broker (module scope) with ``authorizer.class.name`` set and two listeners: PLAINTEXT, whose anonymous
principal is a super user (the door for setup: topics, ACLs), and SASL_PLAINTEXT, where alice and bob log in
with PLAIN. Real clients show what users see (a producer's delivery error, the topics ``list_topics`` shows);
the wire client pins down the exact codes the clients hide. A second, authorizer-less broker checks that
nothing is refused without an authorizer and that the ACL APIs then answer SECURITY_DISABLED.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient
from tests.security.clients import PASSWORDS, plain_client, plain_listener_props

from strata.protocol.records import build_batch

TOPICS = ("a", "b", "pre-1", "c", "d")

# error codes
NONE, TOPIC_AUTH, CLUSTER_AUTH, TXN_AUTH, SECURITY_DISABLED = 0, 29, 31, 53, 54
# AclOperation codes, for the authorized-operations bit fields
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS = 10, 11
ALL_TOPIC_OPS = sum(1 << op for op in (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS,
                                       ALTER_CONFIGS))
# config resource types
CONFIG_TOPIC, CONFIG_BROKER = 2, 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acls"), {**plain_listener_props(), "num.partitions": "1"},
                      listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}).start()
    try:
        admin = _admin(b)
        for fut in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
            fut.result(30)
        _grant(b, _acl(ResourceType.TOPIC, "a", "alice", AclOperation.READ),
               _acl(ResourceType.GROUP, "ga", "alice", AclOperation.READ),
               _acl(ResourceType.TOPIC, "pre-", "bob", AclOperation.WRITE, ResourcePatternType.PREFIXED))
        p = Producer({"bootstrap.servers": b.bootstrap})
        for t in TOPICS:
            for i in range(3):
                p.produce(t, b"v%d" % i)
        assert p.flush(30) == 0
        yield b
    finally:
        b.stop()


_ADMINS: dict[str, AdminClient] = {}


def _admin(b: BrokerProcess) -> AdminClient:
    """The super user's admin client (PLAINTEXT, anonymous), kept: futures die with a collected client."""
    if b.bootstrap not in _ADMINS:
        _ADMINS[b.bootstrap] = AdminClient({"bootstrap.servers": b.bootstrap})
    return _ADMINS[b.bootstrap]


def _acl(rtype: ResourceType, name: str, user: str, op: AclOperation,
         pattern: ResourcePatternType = ResourcePatternType.LITERAL,
         permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", "*", op, permission)


def _grant(b: BrokerProcess, *bindings: AclBinding) -> None:
    for fut in _admin(b).create_acls(list(bindings)).values():
        fut.result(30)


def _revoke(b: BrokerProcess, *bindings: AclBinding) -> None:
    filters = [AclBindingFilter(x.restype, x.name, x.resource_pattern_type, x.principal, x.host, x.operation,
                                x.permission_type) for x in bindings]
    for fut in _admin(b).delete_acls(filters).values():
        assert fut.result(30), "nothing deleted"


def _conf(b: BrokerProcess, user: str) -> dict[str, Any]:
    return plain_client(b, user)


def _login(b: BrokerProcess, user: str) -> WireClient:
    """A wire client on the SASL_PLAINTEXT listener, logged in as ``user`` (SaslHandshake v1, SaslAuthenticate)."""
    w = WireClient(b.address("SASL_PLAINTEXT"))
    assert w.call(17, 1, mechanism="PLAIN").error_code == NONE
    r = w.call(36, 2, auth_bytes=f"\0{user}\0{PASSWORDS[user]}".encode())
    assert r.error_code == NONE, r
    return w


@pytest.fixture(scope="module")
def alice(broker: BrokerProcess) -> Iterator[WireClient]:
    with _login(broker, "alice") as w:
        yield w


@pytest.fixture(scope="module")
def bob(broker: BrokerProcess) -> Iterator[WireClient]:
    with _login(broker, "bob") as w:
        yield w


# -- wire helpers: one call, the codes -----------------------------------------------------------------------


def metadata(w: WireClient, names: list[str] | None, create: bool = False, ops: bool = False) -> dict[str | None, Any]:
    r = w.call(3, 10, topics=None if names is None else [{"name": n, "topic_id": None} for n in names],
               allow_auto_topic_creation=create, include_topic_authorized_operations=ops,
               include_cluster_authorized_operations=ops)
    return {t.name: t for t in r.topics}


def produce_code(w: WireClient, topic: str, records: bytes | None = None, transactional_id: str | None = None) -> int:
    records = records or build_batch([b"x"])
    r = w.call(0, 9, acks=1, timeout=10_000, transactional_id=transactional_id,
               topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": records}]}])
    return int(r.responses[0].partition_responses[0].error_code)


def fetch_codes(w: WireClient, topics: list[str], replica_id: int = -1) -> dict[str, tuple[int, bytes]]:
    r = w.call(1, 12, replica_id=replica_id, max_wait=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
               session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                   {"topic": t, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                "last_fetched_epoch": -1, "log_start_offset": -1,
                                                "partition_max_bytes": 1 << 20}]} for t in topics])
    return {t.topic: (int(t.partitions[0].error_code), bytes(t.partitions[0].records or b"")) for t in r.responses}


def list_offsets_code(w: WireClient, topic: str) -> int:
    r = w.call(2, 7, replica_id=-1, isolation_level=0, topics=[
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])
    return int(r.topics[0].partitions[0].error_code)


def leader_epoch_code(w: WireClient, topic: str) -> int:
    r = w.call(23, 4, replica_id=-1, topics=[
        {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}])
    return int(r.topics[0].partitions[0].error_code)


def delete_records_code(w: WireClient, topic: str) -> int:
    r = w.call(21, 2, timeout=10_000, topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": 1}]}])
    return int(r.topics[0].partitions[0].error_code)


def describe_producers_code(w: WireClient, topic: str) -> int:
    r = w.call(61, 0, topics=[{"name": topic, "partition_indexes": [0]}])
    return int(r.topics[0].partitions[0].error_code)


def create_topic_result(w: WireClient, name: str, validate_only: bool = True) -> Any:
    r = w.call(19, 7, timeout=10_000, validate_only=validate_only, topics=[
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}])
    return r.topics[0]


def delete_topic_code(w: WireClient, name: str) -> int:
    r = w.call(20, 6, timeout=10_000, topics=[{"name": name, "topic_id": uuid.UUID(int=0)}])
    return int(r.responses[0].error_code)


def create_partitions_code(w: WireClient, topic: str) -> int:
    r = w.call(37, 3, timeout=10_000, validate_only=True, topics=[{"name": topic, "count": 2, "assignments": None}])
    return int(r.results[0].error_code)


def describe_configs_code(w: WireClient, rtype: int, name: str) -> tuple[int, int]:
    r = w.call(32, 4, include_synonyms=False, include_documentation=False,
               resources=[{"resource_type": rtype, "resource_name": name, "configuration_keys": None}])
    return int(r.results[0].error_code), len(r.results[0].configs)


def alter_configs_code(w: WireClient, rtype: int, name: str) -> int:
    r = w.call(33, 2, validate_only=True, resources=[
        {"resource_type": rtype, "resource_name": name, "configs": [{"name": "retention.ms", "value": "60000"}]}])
    return int(r.responses[0].error_code)


def incremental_alter_configs_code(w: WireClient, rtype: int, name: str, key: str = "retention.ms") -> int:
    r = w.call(44, 1, validate_only=True, resources=[{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": key, "config_operation": 0, "value": "60000"}]}])
    return int(r.responses[0].error_code)


# -- the acceptance: a principal with READ on one topic (and its group) --------------------------------


def test_a_reader_consumes_its_topic_with_its_group(broker: BrokerProcess) -> None:
    c = Consumer({**_conf(broker, "alice"), "group.id": "ga", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["a"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert sorted(got) == [b"v0", b"v1", b"v2"]
    finally:
        c.close()


def test_a_reader_cannot_produce_to_its_topic(broker: BrokerProcess, alice: WireClient) -> None:
    errors: list[KafkaError] = []
    p = Producer({**_conf(broker, "alice"), "message.timeout.ms": 10_000})
    p.produce("a", b"nope", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert produce_code(alice, "a") == TOPIC_AUTH
    assert produce_code(alice, "no-such-topic") == TOPIC_AUTH  # refused before its existence is looked at


def test_a_reader_cannot_read_another_topic(broker: BrokerProcess, alice: WireClient) -> None:
    codes = fetch_codes(alice, ["a", "b", "no-such-topic"])
    assert codes["a"][0] == NONE and codes["a"][1]
    assert codes["b"] == (TOPIC_AUTH, b"")
    assert codes["no-such-topic"] == (TOPIC_AUTH, b"")
    c = Consumer({**_conf(broker, "alice"), "group.id": "ga", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["b"])
        deadline = time.monotonic() + 15
        error = None
        while error is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error():
                error = m.error()
            assert m is None or m.error(), "read a record of a topic it may not read"
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()


def test_a_reader_does_not_see_other_topics(broker: BrokerProcess, alice: WireClient) -> None:
    seen = AdminClient(_conf(broker, "alice")).list_topics(timeout=10).topics
    assert set(seen) == {"a"}
    assert set(_admin(broker).list_topics(timeout=10).topics) >= set(TOPICS)
    named = metadata(alice, ["a", "b", "no-such-topic"])
    assert named["a"].error_code == NONE and len(named["a"].partitions) == 1
    for name in ("b", "no-such-topic"):  # the same answer whether it exists or not: no id, no partitions
        assert named[name].error_code == TOPIC_AUTH
        assert named[name].topic_id in (None, uuid.UUID(int=0)) and not named[name].partitions
    # auto-creation needs DESCRIBE first, then CREATE on the cluster or the topic
    assert metadata(alice, ["auto-1"], create=True)["auto-1"].error_code == TOPIC_AUTH
    _grant(broker, _acl(ResourceType.TOPIC, "auto-", "alice", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED))
    assert metadata(alice, ["auto-1"], create=True)["auto-1"].error_code == TOPIC_AUTH
    assert "auto-1" not in _admin(broker).list_topics(timeout=10).topics
    _grant(broker, _acl(ResourceType.TOPIC, "auto-1", "alice", AclOperation.CREATE))
    assert metadata(alice, ["auto-1"], create=True)["auto-1"].error_code == NONE
    assert "auto-1" in _admin(broker).list_topics(timeout=10).topics


def test_a_reader_cannot_create_or_delete_topics(broker: BrokerProcess, alice: WireClient) -> None:
    admin = AdminClient(_conf(broker, "alice"))
    with pytest.raises(KafkaException) as e:
        admin.create_topics([NewTopic("alice-new", 1, 1)])["alice-new"].result(15)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as e:
        admin.delete_topics(["a"])["a"].result(15)
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert delete_topic_code(alice, "b") == TOPIC_AUTH
    assert delete_topic_code(alice, "no-such-topic") == TOPIC_AUTH  # not UNKNOWN_TOPIC_OR_PARTITION
    refused = create_topic_result(alice, "alice-new")
    assert (refused.error_code, refused.topic_config_error_code) == (TOPIC_AUTH, TOPIC_AUTH)
    assert set(_admin(broker).list_topics(timeout=10).topics) >= {"a", "b"}


def test_topics_named_by_id_reveal_the_id_only(broker: BrokerProcess, alice: WireClient) -> None:
    with _login(broker, "admin") as w:
        b_id = metadata(w, ["b"])["b"].topic_id
    r = alice.call(3, 12, topics=[{"name": None, "topic_id": b_id}], allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    assert [(t.error_code, t.name, t.topic_id) for t in r.topics] == [(TOPIC_AUTH, None, b_id)]
    r = alice.call(20, 6, timeout=10_000, topics=[{"name": None, "topic_id": b_id}])
    assert [(t.error_code, t.name) for t in r.responses] == [(TOPIC_AUTH, None)]
    unknown = uuid.uuid4()  # ids are not secret: an unknown one is said to be unknown
    r = alice.call(20, 6, timeout=10_000, topics=[{"name": None, "topic_id": unknown}])
    assert [t.error_code for t in r.responses] == [100]  # UNKNOWN_TOPIC_ID


def test_create_without_describe_configs_shows_nothing_of_the_topic(broker: BrokerProcess, bob: WireClient) -> None:
    grant = _acl(ResourceType.TOPIC, "bob-", "bob", AclOperation.CREATE, ResourcePatternType.PREFIXED)
    _grant(broker, grant)
    try:
        r = create_topic_result(bob, "bob-1")
        assert (r.error_code, r.topic_config_error_code, r.num_partitions, r.configs) == (NONE, TOPIC_AUTH, -1, ())
        _grant(broker, _acl(ResourceType.TOPIC, "bob-1", "bob", AclOperation.DESCRIBE_CONFIGS))
        r = create_topic_result(bob, "bob-1")
        assert (r.error_code, r.topic_config_error_code, r.num_partitions) == (NONE, NONE, 1) and r.configs
    finally:
        _revoke(broker, grant)


def test_wire_codes_of_topic_apis(alice: WireClient) -> None:
    assert list_offsets_code(alice, "a") == NONE  # READ implies DESCRIBE
    assert list_offsets_code(alice, "b") == TOPIC_AUTH
    assert leader_epoch_code(alice, "a") == NONE
    assert leader_epoch_code(alice, "b") == TOPIC_AUTH
    assert describe_producers_code(alice, "a") == NONE
    assert describe_producers_code(alice, "b") == TOPIC_AUTH
    assert delete_records_code(alice, "a") == TOPIC_AUTH  # DELETE, not READ
    assert create_partitions_code(alice, "a") == TOPIC_AUTH  # ALTER
    assert describe_configs_code(alice, CONFIG_TOPIC, "a") == (TOPIC_AUTH, 0)  # DESCRIBE_CONFIGS
    assert describe_configs_code(alice, CONFIG_BROKER, "1") == (CLUSTER_AUTH, 0)
    assert alter_configs_code(alice, CONFIG_TOPIC, "a") == TOPIC_AUTH
    assert alter_configs_code(alice, CONFIG_BROKER, "1") == CLUSTER_AUTH
    assert incremental_alter_configs_code(alice, CONFIG_TOPIC, "a") == TOPIC_AUTH
    assert incremental_alter_configs_code(alice, CONFIG_BROKER, "1", "log.cleaner.threads") == CLUSTER_AUTH
    # a follower's fetch needs CLUSTER_ACTION: every partition refused, even of a topic it may read
    assert fetch_codes(alice, ["a"], replica_id=2)["a"] == (TOPIC_AUTH, b"")


def test_config_grants_and_authorized_operations(broker: BrokerProcess, bob: WireClient) -> None:
    grants = (_acl(ResourceType.TOPIC, "c", "bob", AclOperation.DESCRIBE_CONFIGS),
              _acl(ResourceType.TOPIC, "c", "bob", AclOperation.ALTER),
              _acl(ResourceType.TOPIC, "c", "bob", AclOperation.DELETE))
    _grant(broker, *grants)
    try:
        code, n = describe_configs_code(bob, CONFIG_TOPIC, "c")
        assert code == NONE and n > 0
        assert alter_configs_code(bob, CONFIG_TOPIC, "c") == TOPIC_AUTH  # DESCRIBE_CONFIGS does not imply ALTER_CONFIGS
        assert create_partitions_code(bob, "c") == NONE  # validate_only
        assert delete_records_code(bob, "c") == NONE
        assert list_offsets_code(bob, "c") == NONE  # ALTER and DELETE imply DESCRIBE
        ops = metadata(bob, ["c"], ops=True)["c"].topic_authorized_operations
        assert ops == sum(1 << op for op in (DESCRIBE_CONFIGS, ALTER, DELETE, DESCRIBE))
    finally:
        _revoke(broker, *grants)


def test_cluster_apis_refuse_with_cluster_authorization_failed(bob: WireClient) -> None:
    r = bob.call(35, 4, topics=None)
    assert (r.error_code, r.results) == (CLUSTER_AUTH, ())
    r = bob.call(34, 2, dirs=[{"path": "/nowhere", "topics": [{"name": "pre-1", "partitions": [0]}]}])
    assert [p.error_code for t in r.results for p in t.partitions] == [CLUSTER_AUTH]
    r = bob.call(43, 2, election_type=0, timeout=10_000, topic_partitions=[{"topic": "pre-1", "partitions": [0]}])
    assert r.error_code == CLUSTER_AUTH
    assert [p.error_code for t in r.replica_election_results for p in t.partition_result] == [CLUSTER_AUTH]
    r = bob.call(45, 0, timeout=10_000, topics=[{"name": "pre-1", "partitions": [{"partition_index": 0,
                                                                                  "replicas": [1]}]}])
    assert r.error_code == CLUSTER_AUTH
    assert bob.call(46, 0, timeout=10_000, topics=None).error_code == CLUSTER_AUTH
    assert bob.call(50, 0, users=[{"name": "alice"}]).error_code == CLUSTER_AUTH
    r = bob.call(51, 0, deletions=[{"name": "alice", "mechanism": 1}], upsertions=[])
    assert [x.error_code for x in r.results] == [CLUSTER_AUTH]
    assert bob.call(48, 1, components=[], strict=False).error_code == CLUSTER_AUTH  # DESCRIBE_CONFIGS on it
    r = bob.call(49, 1, entries=[{"entity": [{"entity_type": "user", "entity_name": "bob"}],
                                  "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}],
                 validate_only=False)
    assert [e.error_code for e in r.entries] == [CLUSTER_AUTH]  # ALTER_CONFIGS: no raising your own quota
    # DescribeCluster itself needs nothing; its authorized operations are 0 without DESCRIBE on the cluster
    r = bob.call(60, 0, include_cluster_authorized_operations=True)
    assert (r.error_code, r.cluster_authorized_operations) == (NONE, 0)
    assert r.brokers


# -- ACL semantics through the APIs ------------------------------------------------------------------------------


def test_prefixed_acls_cover_names_that_start_with_the_prefix(bob: WireClient) -> None:
    assert produce_code(bob, "pre-1") == NONE
    assert produce_code(bob, "b") == TOPIC_AUTH
    assert metadata(bob, ["pre-1"])["pre-1"].error_code == NONE  # WRITE implies DESCRIBE
    assert fetch_codes(bob, ["pre-1"])["pre-1"][0] == TOPIC_AUTH  # but not READ


def test_deny_beats_allow(broker: BrokerProcess, bob: WireClient) -> None:
    allow = _acl(ResourceType.TOPIC, "d", "bob", AclOperation.READ)
    deny = _acl(ResourceType.TOPIC, "d", "*", AclOperation.READ, permission=AclPermissionType.DENY)
    _grant(broker, allow)
    assert fetch_codes(bob, ["d"])["d"][0] == NONE
    _grant(broker, deny)
    try:
        assert fetch_codes(bob, ["d"])["d"] == (TOPIC_AUTH, b"")
        assert metadata(bob, ["d"])["d"].error_code == NONE  # the DENY is READ only: DESCRIBE is still implied
    finally:
        _revoke(broker, allow, deny)


def test_an_acl_change_applies_to_the_next_request(broker: BrokerProcess, bob: WireClient) -> None:
    grant = _acl(ResourceType.TOPIC, "c", "bob", AclOperation.DESCRIBE)
    assert metadata(bob, ["c"])["c"].error_code == TOPIC_AUTH
    _grant(broker, grant)
    assert metadata(bob, ["c"])["c"].error_code == NONE  # same connection, no restart, no wait
    assert "c" in metadata(bob, None)
    _revoke(broker, grant)
    assert metadata(bob, ["c"])["c"].error_code == TOPIC_AUTH
    assert "c" not in metadata(bob, None)


def test_transactional_produce_needs_write_on_the_transactional_id(broker: BrokerProcess, bob: WireClient) -> None:
    batch = build_batch([b"t"], producer_id=1000, producer_epoch=0, base_sequence=0, transactional=True)
    assert produce_code(bob, "pre-1", batch, "txn-bob") == TXN_AUTH  # WRITE on the topic is not enough
    assert produce_code(bob, "pre-1", batch, None) == TXN_AUTH


def test_a_super_user_bypasses_acls(broker: BrokerProcess) -> None:
    with _login(broker, "admin") as w:
        assert produce_code(w, "b") == NONE
        assert fetch_codes(w, ["b"])["b"][0] == NONE
        assert set(metadata(w, None)) >= set(TOPICS)
        assert metadata(w, ["b"], ops=True)["b"].topic_authorized_operations == ALL_TOPIC_OPS
        assert describe_configs_code(w, CONFIG_BROKER, "1")[0] == NONE
        assert w.call(35, 4, topics=None).error_code == NONE
        assert w.call(60, 0, include_cluster_authorized_operations=True).cluster_authorized_operations > 0
    p = Producer(_conf(broker, "admin"))
    p.produce("b", b"admin")
    assert p.flush(15) == 0


# -- no authorizer: nothing changes ------------------------------------------------------------------------------


def test_without_an_authorizer_everything_is_allowed(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path, {"num.partitions": "1"}).start()
    try:
        with WireClient(b.bootstrap) as w:
            r = w.call(29, 2, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                       principal_filter=None, host_filter=None, operation=1, permission_type=1)
            assert r.error_code == SECURITY_DISABLED
            assert create_topic_result(w, "free", validate_only=False).error_code == NONE
            assert metadata(w, ["free"], ops=True)["free"].topic_authorized_operations == ALL_TOPIC_OPS
            assert produce_code(w, "free") == NONE
            assert fetch_codes(w, ["free"])["free"][0] == NONE
            assert fetch_codes(w, ["nope"])["nope"][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION, as before
            assert delete_records_code(w, "free") == NONE
            assert describe_configs_code(w, CONFIG_BROKER, "1")[0] == NONE
            assert w.call(35, 4, topics=None).error_code == NONE
            assert w.call(60, 0, include_cluster_authorized_operations=True).cluster_authorized_operations > 0
            assert delete_topic_code(w, "nope") == 3
            assert delete_topic_code(w, "free") == NONE
    finally:
        b.stop()
