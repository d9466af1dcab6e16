"""ACLs on the consumer-group and transaction APIs: what Kafka 3.9's ``KafkaApis`` checks, with clients and on the wire.

One broker (module scope) with the ACL authorizer, a PLAINTEXT listener whose principal (User:ANONYMOUS) is a
super user - the admin's door for setup and checks - and a SASL_PLAINTEXT one where alice and bob log in with
PLAIN. alice may read and write ``acl-t`` and ``acl-txn``, read groups ``g-ok``, ``g-wire`` and ``g-txn``,
only describe ``g-describe``, write transactional id ``tx-ok`` and only describe ``tx-describe``; bob may
describe ``tx-ok`` and alter the cluster; ``broker`` (a broker's principal that is no super user) has
CLUSTER_ACTION on the cluster. Nobody but the admin has anything on ``acl-secret`` or ``g-none``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
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

from strata.errors import ErrorCode
from strata.security.acl import AUTHORIZED_OPERATIONS_OMITTED

TOPIC, TXN_TOPIC, SECRET, MARKERS = "acl-t", "acl-txn", "acl-secret", "acl-markers"
FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE_GROUPS, LIST_GROUPS = 10, 11, 12, 13, 14, 15, 16
OFFSET_COMMIT, OFFSET_FETCH, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 42, 47
INIT_PID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_MARKERS, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 27, 28
DESCRIBE_TXNS, LIST_TXNS = 65, 66
EC = ErrorCode


def _acl(rtype: ResourceType, name: str, user: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW)


ACLS = [
    _acl(ResourceType.TOPIC, TOPIC, "alice", AclOperation.READ),
    _acl(ResourceType.TOPIC, TOPIC, "alice", AclOperation.WRITE),
    _acl(ResourceType.TOPIC, TXN_TOPIC, "alice", AclOperation.READ),
    _acl(ResourceType.TOPIC, TXN_TOPIC, "alice", AclOperation.WRITE),
    _acl(ResourceType.GROUP, "g-ok", "alice", AclOperation.READ),
    _acl(ResourceType.GROUP, "g-wire", "alice", AclOperation.READ),
    _acl(ResourceType.GROUP, "g-txn", "alice", AclOperation.READ),
    _acl(ResourceType.GROUP, "g-describe", "alice", AclOperation.DESCRIBE),
    _acl(ResourceType.GROUP, "g-share", "alice", AclOperation.READ),  # a share group (the others are taken)
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-ok", "alice", AclOperation.WRITE),
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-describe", "alice", AclOperation.DESCRIBE),
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-ok", "bob", AclOperation.DESCRIBE),
    _acl(ResourceType.BROKER, "kafka-cluster", "bob", AclOperation.ALTER),
    _acl(ResourceType.BROKER, "kafka-cluster", "broker", AclOperation.CLUSTER_ACTION),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acls-groups-txns"), {
        **plain_listener_props(),
        "group.initial.rebalance.delay.ms": "0",
        "transaction.state.log.num.partitions": "2",
        "offsets.topic.num.partitions": "2",
    }, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for fut in admin.create_topics([NewTopic(t, 1, 1) for t in (TOPIC, TXN_TOPIC, SECRET, MARKERS)]).values():
            fut.result(30)
        for fut in admin.create_acls(ACLS).values():
            fut.result(30)
        yield b
    finally:
        b.stop()


def _conf(b: BrokerProcess, user: str) -> dict[str, Any]:
    if user == "admin":
        return {"bootstrap.servers": b.bootstrap}
    return plain_client(b, user)


def _wire(b: BrokerProcess, user: str) -> WireClient:
    """A raw connection as ``user``: SASL PLAIN (SaslHandshake v1, SaslAuthenticate v2) on the SASL listener;
    the admin on PLAINTEXT."""
    if user == "admin":
        return WireClient(b.bootstrap)
    w = WireClient(b.address("SASL_PLAINTEXT"))
    assert int(w.call(17, 1, mechanism="PLAIN").error_code) == 0
    r = w.call(36, 2, auth_bytes=b"\0" + user.encode() + b"\0" + PASSWORDS[user].encode())
    assert int(r.error_code) == 0, r.error_message
    return w


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _produce(b: BrokerProcess, topic: str, n: int) -> None:
    p = Producer({**_conf(b, "admin"), "acks": "all"})
    for i in range(n):
        p.produce(topic, b"v%d" % i)
    assert p.flush(30) == 0


def _simple_commit(w: WireClient, group: str, offsets: dict[str, int]) -> list[int]:
    """OffsetCommit v8 of partition 0 of each topic, outside any generation; the partitions' error codes."""
    r = w.call(OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
               group_instance_id=None, topics=[
                   {"name": t, "partitions": [{"partition_index": 0, "committed_offset": o,
                                               "committed_leader_epoch": -1, "committed_metadata": ""}]}
                   for t, o in offsets.items()])
    return [int(p.error_code) for t in r.topics for p in t.partitions]


def _fetch(w: WireClient, group: str, topics: list[str] | None) -> tuple[int, dict[str, tuple[int, int]]]:
    """OffsetFetch v8 of one group: (group error, topic -> (committed offset, error) of partition 0)."""
    r = w.call(OFFSET_FETCH, 8, require_stable=False, groups=[
        {"group_id": group, "topics": None if topics is None else
         [{"name": t, "partition_indexes": [0]} for t in topics]}])
    (g,) = r.groups
    return int(g.error_code), {t.name: (int(t.partitions[0].committed_offset), int(t.partitions[0].error_code))
                               for t in g.topics}


def _offset_delete(w: WireClient, group: str, topic: str) -> tuple[int, list[int]]:
    r = w.call(OFFSET_DELETE, 0, group_id=group, topics=[{"name": topic, "partitions": [{"partition_index": 0}]}])
    return int(r.error_code), [int(p.error_code) for t in r.topics for p in t.partitions]


def _committed(b: BrokerProcess, group: str, topic: str) -> int:
    with _wire(b, "admin") as w:
        return _fetch(w, group, [topic])[1][topic][0]


def _poll_until_error(c: Consumer, timeout_s: float = 20.0) -> KafkaError:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
            return m.error()
    raise AssertionError("no error from the consumer")


# -- consumer groups with real clients --------------------------------------------------------------------


def test_a_consumer_with_read_on_topic_and_group_consumes_and_commits(broker: BrokerProcess) -> None:
    _produce(broker, TOPIC, 5)
    c = Consumer({**_conf(broker, "alice"), "group.id": "g-ok", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        assert got == [b"v%d" % i for i in range(5)]
        c.commit(asynchronous=False)
        assert c.committed([TopicPartition(TOPIC, 0)], 10)[0].offset == 5
    finally:
        c.close()
    assert _committed(broker, "g-ok", TOPIC) == 5


@pytest.mark.parametrize("group", ["g-describe", "g-none"])
def test_a_consumer_without_read_on_the_group_gets_group_authorization_failed(broker: BrokerProcess,
                                                                              group: str) -> None:
    """g-describe: FindCoordinator answers, JoinGroup is refused; g-none: FindCoordinator is refused."""
    c = Consumer({**_conf(broker, "alice"), "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([TOPIC])
        assert _poll_until_error(c).code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()
    if group == "g-describe":  # with a coordinator, a commit is refused too (g-none never finds one)
        c = Consumer({**_conf(broker, "alice"), "group.id": group, "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(TOPIC, 0, 1)])
            with pytest.raises(KafkaException) as e:
                c.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
            assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        finally:
            c.close()
    assert _committed(broker, group, TOPIC) == -1


def test_list_groups_shows_only_describable_groups_and_delete_groups_is_refused(broker: BrokerProcess) -> None:
    with _wire(broker, "admin") as w:
        assert _simple_commit(w, "g-wire", {TOPIC: 1}) == [0]
        assert _simple_commit(w, "g-admin-only", {TOPIC: 1}) == [0]
    alice = AdminClient(_conf(broker, "alice"))
    seen = {g.group_id for g in alice.list_consumer_groups().result(30).valid}
    assert "g-wire" in seen and "g-admin-only" not in seen
    admin = AdminClient(_conf(broker, "admin"))  # kept: a client collected before its answer leaves it empty
    admin_seen = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    assert {"g-wire", "g-admin-only"} <= admin_seen  # DESCRIBE on the cluster: every group
    with _wire(broker, "alice") as w:
        r = w.call(LIST_GROUPS, 4, states_filter=[])
        assert int(r.error_code) == 0 and "g-wire" in {g.group_id for g in r.groups}
        assert {g.group_id for g in r.groups} <= {"g-ok", "g-wire", "g-txn", "g-describe"}
    with _wire(broker, "bob") as w:  # ALTER on the cluster implies DESCRIBE on it: every group
        r = w.call(LIST_GROUPS, 4, states_filter=[])
        assert {"g-wire", "g-admin-only"} <= {g.group_id for g in r.groups}
    with pytest.raises(KafkaException) as e:
        alice.delete_consumer_groups(["g-wire"])["g-wire"].result(30)
    assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _committed(broker, "g-wire", TOPIC) == 1  # still there
    with _wire(broker, "alice") as w:
        r = w.call(DELETE_GROUPS, 2, groups_names=["g-wire", "g-none"])
        assert [(g.group_id, int(g.error_code)) for g in r.results] == \
            [("g-wire", EC.GROUP_AUTHORIZATION_FAILED), ("g-none", EC.GROUP_AUTHORIZATION_FAILED)]


# -- consumer groups on the wire ---------------------------------------------------------------------------


def test_find_coordinator_needs_describe_on_the_key(broker: BrokerProcess) -> None:
    with _wire(broker, "alice") as w:
        r = w.call(FIND_COORDINATOR, 3, key="g-none", key_type=0)
        assert int(r.error_code) == EC.GROUP_AUTHORIZATION_FAILED and r.node_id == -1
        assert int(w.call(FIND_COORDINATOR, 3, key="g-describe", key_type=0).error_code) == 0
        r = w.call(FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["g-ok", "g-none"])
        assert [int(c.error_code) for c in r.coordinators] == [0, EC.GROUP_AUTHORIZATION_FAILED]
        r = w.call(FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["tx-describe", "tx-ok", "tx-none"])
        assert [int(c.error_code) for c in r.coordinators] == [0, 0, EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]


def test_membership_apis_need_read_on_the_group(broker: BrokerProcess) -> None:
    with _wire(broker, "alice") as w:
        r = w.call(JOIN, 5, group_id="g-describe", session_timeout=10_000, rebalance_timeout=10_000, member_id="",
                   group_instance_id=None, protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}])
        assert int(r.error_code) == EC.GROUP_AUTHORIZATION_FAILED and r.member_id == "" and r.generation_id == -1
        r = w.call(SYNC, 3, group_id="g-describe", generation_id=1, member_id="m", group_instance_id=None,
                   assignments=[])
        assert int(r.error_code) == EC.GROUP_AUTHORIZATION_FAILED
        r = w.call(HEARTBEAT, 3, group_id="g-describe", generation_id=1, member_id="m", group_instance_id=None)
        assert int(r.error_code) == EC.GROUP_AUTHORIZATION_FAILED
        r = w.call(LEAVE, 3, group_id="g-describe", members=[{"member_id": "m", "group_instance_id": None}])
        assert int(r.error_code) == EC.GROUP_AUTHORIZATION_FAILED and list(r.members) == []


def test_offset_commit_fetch_and_delete_check_group_then_topics(broker: BrokerProcess) -> None:
    with _wire(broker, "admin") as w:
        assert _simple_commit(w, "g-wire", {TOPIC: 2, SECRET: 7}) == [0, 0]
    with _wire(broker, "alice") as w:
        # READ on the group, then READ per topic; a topic she may not read is refused before it is looked up
        assert _simple_commit(w, "g-wire", {TOPIC: 3, SECRET: 8, "no-such-topic": 1}) == \
            [0, EC.TOPIC_AUTHORIZATION_FAILED, EC.TOPIC_AUTHORIZATION_FAILED]
        assert _simple_commit(w, "g-describe", {TOPIC: 1}) == [EC.GROUP_AUTHORIZATION_FAILED]
        # every committed topic: the ones she may not describe are left out
        assert _fetch(w, "g-wire", None) == (0, {TOPIC: (3, 0)})
        assert _fetch(w, "g-wire", [TOPIC, SECRET]) == (0, {TOPIC: (3, 0), SECRET: (-1, EC.TOPIC_AUTHORIZATION_FAILED)})
        assert _fetch(w, "g-describe", [TOPIC]) == (0, {TOPIC: (-1, 0)})  # DESCRIBE is enough to fetch
        assert _fetch(w, "g-none", [TOPIC]) == (EC.GROUP_AUTHORIZATION_FAILED, {})
        r = w.call(OFFSET_FETCH, 5, group_id="g-none", topics=None, require_stable=False)
        assert int(r.error_code) == EC.GROUP_AUTHORIZATION_FAILED
        assert _offset_delete(w, "g-wire", TOPIC) == (EC.GROUP_AUTHORIZATION_FAILED, [])  # READ is not DELETE
        r = w.call(DESCRIBE_GROUPS, 5, groups=["g-wire", "g-none"], include_authorized_operations=True)
        got = {g.group_id: (int(g.error_code), g.authorized_operations) for g in r.groups}
        assert got == {"g-wire": (0, (1 << 3) | (1 << 8)),  # READ, and the DESCRIBE it implies
                       "g-none": (EC.GROUP_AUTHORIZATION_FAILED, AUTHORIZED_OPERATIONS_OMITTED)}
    with _wire(broker, "admin") as w:
        assert _fetch(w, "g-wire", None) == (0, {TOPIC: (3, 0), SECRET: (7, 0)})
        assert _offset_delete(w, "g-wire", SECRET) == (0, [0])
        r = w.call(DESCRIBE_GROUPS, 5, groups=["g-wire"], include_authorized_operations=True)
        assert r.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)  # a super user: all of them


# -- transactions ------------------------------------------------------------------------------------------


def _txn_producer(b: BrokerProcess, user: str, tid: str) -> Producer:
    return Producer({**_conf(b, user), "transactional.id": tid, "transaction.timeout.ms": 60_000})


def test_a_transactional_producer_with_write_on_its_id_and_topic_commits(broker: BrokerProcess) -> None:
    p = _txn_producer(broker, "alice", "tx-ok")
    meta = Consumer({**_conf(broker, "alice"), "group.id": "g-txn"})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(3):
            p.produce(TXN_TOPIC, b"t%d" % i)
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 4)], meta.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    finally:
        meta.close()
    _wait("the transactional offset", lambda: _committed(broker, "g-txn", TOPIC) == 4)
    c = Consumer({**_conf(broker, "admin"), "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(TXN_TOPIC, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF:
                break
            got.append(m.value())
        assert got == [b"t0", b"t1", b"t2"]
    finally:
        c.close()


@pytest.mark.parametrize("tid", ["tx-describe", "tx-none"])
def test_init_transactions_without_write_on_the_transactional_id_fails(broker: BrokerProcess, tid: str) -> None:
    """tx-describe: FindCoordinator answers, InitProducerId is refused; tx-none: FindCoordinator is refused."""
    p = _txn_producer(broker, "alice", tid)
    with pytest.raises(KafkaException) as e:
        p.init_transactions(20)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_send_offsets_to_transaction_without_read_on_the_group_fails(broker: BrokerProcess) -> None:
    p = _txn_producer(broker, "alice", "tx-ok")
    meta = Consumer({**_conf(broker, "admin"), "group.id": "g-none"})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TXN_TOPIC, b"never")
        with pytest.raises(KafkaException) as e:
            p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)], meta.consumer_group_metadata(), 30)
        assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        assert e.value.args[0].txn_requires_abort()
        p.abort_transaction(30)
    finally:
        meta.close()
    assert _committed(broker, "g-none", TOPIC) == -1


def test_transaction_apis_on_the_wire(broker: BrokerProcess) -> None:
    offsets = [{"name": TXN_TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]},
               {"name": SECRET, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}]

    def add(w: WireClient, tid: str, other: str = SECRET) -> dict[str, int]:
        """AddPartitionsToTxn v3 of partition 0 of TXN_TOPIC (alice may write it) and of ``other``."""
        r = w.call(ADD_PARTITIONS, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=1,
                   v3_and_below_producer_epoch=0, v3_and_below_topics=[{"name": TXN_TOPIC, "partitions": [0]},
                                                                        {"name": other, "partitions": [0]}])
        return {t.name: int(t.results_by_partition[0].partition_error_code) for t in r.results_by_topic_v3_and_below}

    def txn_commit(w: WireClient, tid: str, group: str) -> dict[str, int]:
        r = w.call(TXN_OFFSET_COMMIT, 3, transactional_id=tid, group_id=group, producer_id=1, producer_epoch=0,
                   generation_id=-1, member_id="", group_instance_id=None, topics=offsets)
        return {t.name: int(t.partitions[0].error_code) for t in r.topics}

    with _wire(broker, "alice") as w:
        r = w.call(INIT_PID, 4, transactional_id="tx-describe", transaction_timeout=60_000, producer_id=-1,
                   producer_epoch=-1)
        assert (int(r.error_code), r.producer_id, r.producer_epoch) == \
            (EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        # an idempotent producer: WRITE on some topic is enough (Kafka 3.x)
        r = w.call(INIT_PID, 4, transactional_id=None, transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
        assert int(r.error_code) == 0 and r.producer_id >= 0
        assert add(w, "tx-describe") == {TXN_TOPIC: EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                         SECRET: EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        assert add(w, "tx-ok") == {TXN_TOPIC: EC.OPERATION_NOT_ATTEMPTED, SECRET: EC.TOPIC_AUTHORIZATION_FAILED}
        r = w.call(ADD_PARTITIONS, 4, transactions=[{"transactional_id": "tx-ok", "producer_id": 1, "producer_epoch": 0,
                                                     "verify_only": True,
                                                     "topics": [{"name": TXN_TOPIC, "partitions": [0]}]}])
        assert int(r.error_code) == EC.CLUSTER_AUTHORIZATION_FAILED and list(r.results_by_transaction) == []
        for tid, group, code in [("tx-describe", "g-txn", EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                 ("tx-ok", "g-none", EC.GROUP_AUTHORIZATION_FAILED)]:
            r = w.call(ADD_OFFSETS, 3, transactional_id=tid, producer_id=1, producer_epoch=0, group_id=group)
            assert int(r.error_code) == code
            assert txn_commit(w, tid, group) == {TXN_TOPIC: code, SECRET: code}
        assert txn_commit(w, "tx-ok", "g-txn")[SECRET] == EC.TOPIC_AUTHORIZATION_FAILED
        r = w.call(END_TXN, 3, transactional_id="tx-describe", producer_id=1, producer_epoch=0, committed=True)
        assert int(r.error_code) == EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with _wire(broker, "admin") as w:  # an internal topic is never written through a transaction, even by a super user
        assert add(w, "tx-ok", "__consumer_offsets") == {TXN_TOPIC: EC.OPERATION_NOT_ATTEMPTED,
                                                         "__consumer_offsets": EC.TOPIC_AUTHORIZATION_FAILED}
    with _wire(broker, "bob") as w:  # no WRITE on any topic, no IDEMPOTENT_WRITE
        r = w.call(INIT_PID, 4, transactional_id=None, transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
        assert int(r.error_code) == EC.CLUSTER_AUTHORIZATION_FAILED


def test_write_txn_markers_needs_cluster_action_or_alter(broker: BrokerProcess) -> None:
    markers = [{"producer_id": 987_654, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
                "topics": [{"name": MARKERS, "partition_indexes": [0]}, {"name": TXN_TOPIC, "partition_indexes": [0]}]}]
    with _wire(broker, "alice") as w:
        r = w.call(WRITE_MARKERS, 1, markers=markers)
        assert [int(p.error_code) for m in r.markers for t in m.topics for p in t.partitions] == \
            [EC.CLUSTER_AUTHORIZATION_FAILED] * 2
    for user in ("bob", "broker"):  # ALTER (kafka-transactions.sh abort) or CLUSTER_ACTION (a broker) on the cluster
        with _wire(broker, user) as w:
            r = w.call(WRITE_MARKERS, 1, markers=[{**markers[0], "topics": markers[0]["topics"][:1]}])
            assert [int(p.error_code) for m in r.markers for t in m.topics for p in t.partitions] == [0]
    with _wire(broker, "broker") as w:  # AddPartitionsToTxn v4 is broker-to-broker: CLUSTER_ACTION lets it in
        r = w.call(ADD_PARTITIONS, 4, transactions=[{"transactional_id": "tx-none", "producer_id": 1,
                                                     "producer_epoch": 0, "verify_only": True,
                                                     "topics": [{"name": TXN_TOPIC, "partitions": [0]}]}])
        assert int(r.error_code) == 0 and [t.transactional_id for t in r.results_by_transaction] == ["tx-none"]


def test_describe_and_list_transactions_show_only_what_may_be_described(broker: BrokerProcess) -> None:
    admin_txn = _txn_producer(broker, "admin", "tx-admin")
    admin_txn.init_transactions(30)
    admin_txn.begin_transaction()
    admin_txn.produce(MARKERS, b"admin")
    admin_txn.commit_transaction(30)
    p = _txn_producer(broker, "alice", "tx-ok")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TXN_TOPIC, b"open")
    assert p.flush(30) == 0

    def describe(user: str) -> dict[str, tuple[int, str, list[str]]]:
        with _wire(broker, user) as w:
            r = w.call(DESCRIBE_TXNS, 0, transactional_ids=["tx-ok", "tx-admin"])
        return {s.transactional_id: (int(s.error_code), s.transaction_state, [t.topic for t in s.topics])
                for s in r.transaction_states}

    def listed(user: str) -> set[str]:
        with _wire(broker, user) as w:
            r = w.call(LIST_TXNS, 1, state_filters=[], producer_id_filters=[], duration_filter=-1)
        assert int(r.error_code) == 0
        return {s.transactional_id for s in r.transaction_states}

    try:
        _wait("tx-admin's markers", lambda: describe("admin")["tx-admin"][1] == "CompleteCommit")
        assert describe("admin") == {"tx-ok": (0, "Ongoing", [TXN_TOPIC]), "tx-admin": (0, "CompleteCommit", [])}
        # bob may describe tx-ok but not the topic in it, nor tx-admin
        assert describe("bob") == {"tx-ok": (0, "Ongoing", []),
                                   "tx-admin": (EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "", [])}
        assert describe("alice")["tx-ok"] == (0, "Ongoing", [TXN_TOPIC])  # WRITE implies DESCRIBE
        assert {"tx-ok", "tx-admin"} <= listed("admin")
        assert listed("alice") == {"tx-ok"}
        assert listed("bob") == {"tx-ok"}
        # a broker's principal sees everything: brokers ask each other before aborting a transaction as hanging
        assert {"tx-ok", "tx-admin"} <= listed("broker")
        assert describe("broker") == describe("admin")
    finally:
        p.abort_transaction(30)


# -- KIP-848 consumer groups (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69) and the share-state RPCs --

CG_HEARTBEAT, CG_DESCRIBE, INITIALIZE_SHARE_STATE = 68, 69, 83


def _cg_join(w: WireClient, group: str, topics: list[str], regex: str | None = None) -> Any:
    return w.call(CG_HEARTBEAT, 1, group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
                  rebalance_timeout=30000, subscribed_topic_names=topics, subscribed_topic_regex=regex,
                  topic_partitions=[])


def test_consumer_group_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(broker: BrokerProcess) -> None:
    """Kafka's ``handleConsumerGroupHeartbeat``: READ on the group, DESCRIBE on every named topic; a regex
    leaves out, silently, the topics the member may not DESCRIBE."""
    with _wire(broker, "alice") as w:
        assert int(_cg_join(w, "g-none", [TOPIC]).error_code) == EC.GROUP_AUTHORIZATION_FAILED
        assert int(_cg_join(w, "g-describe", [TOPIC]).error_code) == EC.GROUP_AUTHORIZATION_FAILED
        refused = _cg_join(w, "g-ok", [TOPIC, SECRET])
        assert int(refused.error_code) == EC.TOPIC_AUTHORIZATION_FAILED and SECRET in refused.error_message
        joined = _cg_join(w, "g-ok", [], regex="acl-.*")  # acl-t, acl-txn, acl-secret, acl-markers exist
        assert int(joined.error_code) == EC.NONE

        def resolved() -> bool:
            d = w.call(CG_DESCRIBE, 1, group_ids=["g-ok"], include_authorized_operations=False)
            return int(d.groups[0].error_code) == EC.NONE and d.groups[0].group_epoch >= 2

        _wait("the regex resolved", resolved)
        w.call(CG_HEARTBEAT, 1, group_id="g-ok", member_id=joined.member_id, member_epoch=joined.member_epoch,
               topic_partitions=[])  # the next heartbeat computes the target over the resolved topics
        with _wire(broker, "admin") as admin:
            described = admin.call(CG_DESCRIBE, 1, group_ids=["g-ok"], include_authorized_operations=False)
        targets = {tp.topic_name for m in described.groups[0].members
                   for tp in m.target_assignment.topic_partitions}
        assert TOPIC in targets and SECRET not in targets  # alice may not DESCRIBE acl-secret: left out


def test_consumer_group_describe_needs_describe_on_the_group_and_its_topics(broker: BrokerProcess) -> None:
    with _wire(broker, "admin") as admin:
        assert int(_cg_join(admin, "g-describe", [SECRET]).error_code) == EC.NONE  # shows a topic alice can't see
    with _wire(broker, "alice") as w:
        d = w.call(CG_DESCRIBE, 1, group_ids=["g-none", "g-describe"], include_authorized_operations=False)
        codes = {g.group_id: int(g.error_code) for g in d.groups}
        assert codes == {"g-none": EC.GROUP_AUTHORIZATION_FAILED, "g-describe": EC.TOPIC_AUTHORIZATION_FAILED}


def test_share_state_rpcs_need_cluster_action(broker: BrokerProcess) -> None:
    topic = [{"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "state_epoch": 0, "start_offset": 0}]}]
    with _wire(broker, "alice") as w:
        r = w.call(INITIALIZE_SHARE_STATE, 0, group_id="sg", topics=topic)
        assert [int(p.error_code) for t in r.results for p in t.partitions] == [EC.CLUSTER_AUTHORIZATION_FAILED]
    with _wire(broker, "broker") as w:
        r = w.call(INITIALIZE_SHARE_STATE, 0, group_id="sg", topics=topic)
        assert [int(p.error_code) for t in r.results for p in t.partitions] != [EC.CLUSTER_AUTHORIZATION_FAILED]


# -- KIP-932 share-group administration (ShareGroupDescribe 77, DescribeShareGroupOffsets 90,
# AlterShareGroupOffsets 91, DeleteShareGroupOffsets 92, DeleteGroups on a share group) ----------------------

SG_HEARTBEAT, SG_DESCRIBE, SG_DESCRIBE_OFFSETS, SG_ALTER_OFFSETS, SG_DELETE_OFFSETS = 76, 77, 90, 91, 92


def _sg_alter(w: WireClient, group: str, topics: list[str]) -> tuple[int, dict[str, int]]:
    """AlterShareGroupOffsets of partition 0 of each topic to 0: (top-level error, topic -> partition error)."""
    r = w.call(SG_ALTER_OFFSETS, 0, group_id=group, topics=[
        {"topic_name": t, "partitions": [{"partition_index": 0, "start_offset": 0}]} for t in topics])
    return int(r.error_code), {t.topic_name: int(p.error_code) for t in r.responses for p in t.partitions}


def _sg_offsets(w: WireClient, group: str, topics: list[str] | None) -> tuple[int, dict[str, tuple[int, int]]]:
    """DescribeShareGroupOffsets v1: (group error, topic -> (start offset, error) of partition 0)."""
    r = w.call(SG_DESCRIBE_OFFSETS, 1, groups=[{"group_id": group, "topics": None if topics is None else
                                                [{"topic_name": t, "partitions": [0]} for t in topics]}])
    (g,) = r.groups
    return int(g.error_code), {t.topic_name: (t.partitions[0].start_offset, int(t.partitions[0].error_code))
                               for t in g.topics}


def _sg_delete_offsets(w: WireClient, group: str, topics: list[str]) -> tuple[int, dict[str, int]]:
    r = w.call(SG_DELETE_OFFSETS, 0, group_id=group, topics=[{"topic_name": t} for t in topics])
    return int(r.error_code), {t.topic_name: int(t.error_code) for t in r.responses}


def test_share_group_admin_apis_check_the_group_then_the_topics(broker: BrokerProcess) -> None:
    """Kafka's handlers: ShareGroupDescribe and DescribeShareGroupOffsets need DESCRIBE on the group and its
    topics, AlterShareGroupOffsets READ on both, DeleteShareGroupOffsets DELETE on the group and READ on the
    topics, DeleteGroups DELETE on the group; a group refused is refused whole, a topic refused alone."""
    admin_client = AdminClient(_conf(broker, "admin"))
    for fut in admin_client.create_acls([_acl(ResourceType.GROUP, "sg-read", "alice", AclOperation.READ),
                                         _acl(ResourceType.GROUP, "sg-del", "alice", AclOperation.DELETE),
                                         _acl(ResourceType.GROUP, "sg-see", "alice", AclOperation.DESCRIBE)]).values():
        fut.result(30)
    with _wire(broker, "admin") as w:  # share groups with offsets on a topic alice may read and one she may not
        for group in ("sg-read", "sg-del"):
            assert _sg_alter(w, group, [TOPIC, SECRET]) == (EC.NONE, {TOPIC: EC.NONE, SECRET: EC.NONE})
        r = w.call(SG_HEARTBEAT, 1, group_id="sg-see", member_id=uuid.uuid4().hex[:22], member_epoch=0,
                   rack_id=None, subscribed_topic_names=[SECRET])  # a member that shows a topic alice can't see
        assert int(r.error_code) == EC.NONE

    with _wire(broker, "alice") as w:
        # AlterShareGroupOffsets: READ on the group, then READ per topic
        assert _sg_alter(w, "sg-see", [TOPIC]) == (EC.GROUP_AUTHORIZATION_FAILED, {})
        assert _sg_alter(w, "g-none", [TOPIC]) == (EC.GROUP_AUTHORIZATION_FAILED, {})
        assert _sg_alter(w, "sg-read", [TOPIC, SECRET]) == \
            (EC.NONE, {TOPIC: EC.NONE, SECRET: EC.TOPIC_AUTHORIZATION_FAILED})

        # DescribeShareGroupOffsets: DESCRIBE on the group; a named topic refused, a listed one left out
        assert _sg_offsets(w, "g-none", None) == (EC.GROUP_AUTHORIZATION_FAILED, {})
        assert _sg_offsets(w, "sg-read", None) == (EC.NONE, {TOPIC: (0, EC.NONE)})
        assert _sg_offsets(w, "sg-read", [TOPIC, SECRET]) == \
            (EC.NONE, {TOPIC: (0, EC.NONE), SECRET: (-1, EC.TOPIC_AUTHORIZATION_FAILED)})

        # ShareGroupDescribe: DESCRIBE on the group and on every topic a member shows
        d = w.call(SG_DESCRIBE, 1, group_ids=["g-none", "sg-see", "sg-read"], include_authorized_operations=True)
        assert {g.group_id: int(g.error_code) for g in d.groups} == {
            "g-none": EC.GROUP_AUTHORIZATION_FAILED, "sg-see": EC.TOPIC_AUTHORIZATION_FAILED, "sg-read": EC.NONE}
        ops = next(g for g in d.groups if g.group_id == "sg-read").authorized_operations
        assert ops != AUTHORIZED_OPERATIONS_OMITTED and ops & (1 << 3) and ops & (1 << 8) and not ops & (1 << 6)

        # DeleteShareGroupOffsets: DELETE on the group, READ on each topic
        assert _sg_delete_offsets(w, "sg-read", [TOPIC]) == (EC.GROUP_AUTHORIZATION_FAILED, {})
        assert _sg_delete_offsets(w, "sg-del", [TOPIC, SECRET]) == \
            (EC.NONE, {TOPIC: EC.NONE, SECRET: EC.TOPIC_AUTHORIZATION_FAILED})

        # DeleteGroups of a share group: DELETE on it
        r = w.call(DELETE_GROUPS, 2, groups_names=["sg-read", "sg-del"])
        assert [(g.group_id, int(g.error_code)) for g in r.results] == \
            [("sg-read", EC.GROUP_AUTHORIZATION_FAILED), ("sg-del", EC.NONE)]
    with _wire(broker, "admin") as w:
        assert _sg_offsets(w, "sg-read", None)[1] == {TOPIC: (0, EC.NONE), SECRET: (0, EC.NONE)}  # untouched
        d = w.call(SG_DESCRIBE, 1, group_ids=["sg-del"], include_authorized_operations=False)
        assert int(d.groups[0].error_code) == EC.GROUP_ID_NOT_FOUND


# -- KIP-932 ShareGroupHeartbeat (76), ShareFetch (78), ShareAcknowledge (79) --

SG_HEARTBEAT, SHARE_FETCH, SHARE_ACK = 76, 78, 79


def _topic_id(w: WireClient, topic: str) -> uuid.UUID:
    md = w.call(3, 12, topics=[{"name": topic, "topic_id": None}], allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)
    return md.topics[0].topic_id


def test_share_apis_need_read_on_the_group_and_on_each_topic(broker: BrokerProcess) -> None:
    """Kafka's handlers: ShareGroupHeartbeat needs READ on the group and DESCRIBE on every named topic;
    ShareFetch and ShareAcknowledge fail whole without READ on the group and per partition without READ on
    its topic."""
    with _wire(broker, "admin") as admin:
        ok_id, secret_id = _topic_id(admin, TOPIC), _topic_id(admin, SECRET)
    member = uuid.uuid4().hex[:22]
    with _wire(broker, "alice") as w:
        def heartbeat(group: str, topics: list[str]) -> int:
            return int(w.call(SG_HEARTBEAT, 1, group_id=group, member_id=member, member_epoch=0, rack_id=None,
                              subscribed_topic_names=topics).error_code)

        def fetch(group: str, topic_ids: list[uuid.UUID]) -> Any:
            return w.call(SHARE_FETCH, 1, group_id=group, member_id=member, share_session_epoch=0, max_wait=0,
                          min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
                          topics=[{"topic_id": t, "partitions": [{"partition_index": 0,
                                                                   "acknowledgement_batches": []}]}
                                  for t in topic_ids], forgotten_topics_data=[])

        assert heartbeat("g-none", [TOPIC]) == EC.GROUP_AUTHORIZATION_FAILED
        assert heartbeat("g-describe", [TOPIC]) == EC.GROUP_AUTHORIZATION_FAILED
        assert heartbeat("g-share", [SECRET]) == EC.TOPIC_AUTHORIZATION_FAILED
        assert heartbeat("g-share", [TOPIC]) == EC.NONE
        assert int(fetch("g-none", [ok_id]).error_code) == EC.GROUP_AUTHORIZATION_FAILED
        answer = fetch("g-share", [ok_id, secret_id])
        assert int(answer.error_code) == EC.NONE
        codes = {t.topic_id: int(t.partitions[0].error_code) for t in answer.responses}
        assert codes[secret_id] == EC.TOPIC_AUTHORIZATION_FAILED and codes[ok_id] == EC.NONE
        ack = w.call(SHARE_ACK, 1, group_id="g-none", member_id=member, share_session_epoch=1, topics=[])
        assert int(ack.error_code) == EC.GROUP_AUTHORIZATION_FAILED
