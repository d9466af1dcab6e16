"""Small client-conformance points, over real sockets against a real broker process.

Authorized operations: without an authorizer Kafka reports, when asked, every operation the
resource type supports (``AclEntry.supportedOperations`` folded into ``1 << code`` bits), and
``Integer.MIN_VALUE`` when not asked. Checked with confluent-kafka's AdminClient (which decodes
the bits into ``AclOperation`` sets) and with raw Metadata / DescribeCluster / DescribeGroups
requests (the exact values).

Versions that are not enabled: Kafka's ``SocketServer`` closes the connection of a request whose
API key or version it does not serve (only ApiVersions is answered, with UNSUPPORTED_VERSION and
a v0 response, so a client can pick a version it shares with the broker).
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, decode_response, ensure_topic

TIMEOUT_S = 15
UNKNOWN_OPERATIONS = -2147483648
# Expected sets written out from Kafka's AclEntry.supportedOperations (not derived from Strata's table).
TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
             AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
               AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
GROUP_OPS = {AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}
TOPIC_BITS = (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11)
CLUSTER_BITS = (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
GROUP_BITS = (1 << 3) | (1 << 6) | (1 << 8)
SIZE = struct.Struct(">i")


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": shared_broker.bootstrap, "log_level": 3})


def _ops(found: Any) -> set[AclOperation] | None:
    return None if found is None else set(found)


# -- authorized operations: a real client --------------------------------------------------------


def test_admin_describe_topics_reports_every_topic_operation_when_asked(shared_broker: BrokerProcess,
                                                                        admin: AdminClient) -> None:
    topic = _name("ops")
    with WireClient(shared_broker.bootstrap) as wire:
        ensure_topic(wire, topic)
    asked = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                  request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert asked.name == topic and len(asked.partitions) == 1
    assert _ops(asked.authorized_operations) == TOPIC_OPS
    plain = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert not plain.authorized_operations  # None (librdkafka: not requested)


def test_admin_describe_cluster_reports_every_cluster_operation_when_asked(admin: AdminClient) -> None:
    asked = admin.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert [n.id for n in asked.nodes] == [1]
    assert _ops(asked.authorized_operations) == CLUSTER_OPS
    plain = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert not plain.authorized_operations


def test_admin_describe_consumer_groups_reports_every_group_operation_when_asked(shared_broker: BrokerProcess,
                                                                                admin: AdminClient) -> None:
    topic, group = _name("ops-g"), _name("grp")
    with WireClient(shared_broker.bootstrap) as wire:
        ensure_topic(wire, topic)
    # A commit outside a generation creates the (Empty) group, as in Kafka.
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group, "log_level": 3})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    asked = admin.describe_consumer_groups([group], include_authorized_operations=True,
                                           request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    assert asked.group_id == group
    assert _ops(asked.authorized_operations) == GROUP_OPS
    plain = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    assert not plain.authorized_operations


# -- authorized operations: the exact wire values ------------------------------------------------


def test_metadata_carries_the_bitmasks_only_when_asked(shared_broker: BrokerProcess) -> None:
    topic = _name("ops-wire")
    with WireClient(shared_broker.bootstrap) as wire:
        topic_id = ensure_topic(wire, topic).topic_id
        missing = _name("missing")
        wanted = [{"name": topic, "topic_id": None}, {"name": missing, "topic_id": None}]
        for version in (8, 10, 12):
            asked = wire.call(3, version, topics=wanted, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=True, include_cluster_authorized_operations=True)
            by_name = {t.name: t for t in asked.topics}
            assert int(by_name[topic].error_code) == 0 and by_name[topic].topic_authorized_operations == TOPIC_BITS
            # An unknown name is still a topic resource Kafka computes the bits for.
            assert int(by_name[missing].error_code) == 3
            assert by_name[missing].topic_authorized_operations == TOPIC_BITS
            if version <= 10:  # the cluster field exists in v8-v10 only
                assert asked.cluster_authorized_operations == CLUSTER_BITS
            plain = wire.call(3, version, topics=wanted, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False, include_cluster_authorized_operations=False)
            assert [t.topic_authorized_operations for t in plain.topics] == [UNKNOWN_OPERATIONS] * 2
            if version <= 10:
                assert plain.cluster_authorized_operations == UNKNOWN_OPERATIONS
        # Only one of the two asked for: each field follows its own flag.
        v9 = wire.call(3, 9, topics=None, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=True, include_cluster_authorized_operations=False)
        assert v9.topics and {t.topic_authorized_operations for t in v9.topics} == {TOPIC_BITS}
        assert v9.cluster_authorized_operations == UNKNOWN_OPERATIONS
        v9 = wire.call(3, 9, topics=None, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False, include_cluster_authorized_operations=True)
        assert {t.topic_authorized_operations for t in v9.topics} == {UNKNOWN_OPERATIONS}
        assert v9.cluster_authorized_operations == CLUSTER_BITS
        # By topic id (v12): a known id gets the bits; an unknown id keeps MIN_VALUE, as in Kafka.
        by_id = wire.call(3, 12, topics=[{"name": None, "topic_id": topic_id},
                                         {"name": None, "topic_id": uuid.uuid4()}],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=True)
        known, unknown = by_id.topics
        assert known.name == topic and known.topic_authorized_operations == TOPIC_BITS
        assert int(unknown.error_code) == 100 and unknown.topic_authorized_operations == UNKNOWN_OPERATIONS


def test_describe_cluster_carries_the_bitmask_only_when_asked(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as wire:
        for version in (0, 1):
            fields = {"endpoint_type": 1} if version >= 1 else {}
            asked = wire.call(60, version, include_cluster_authorized_operations=True, **fields)
            assert int(asked.error_code) == 0 and asked.cluster_authorized_operations == CLUSTER_BITS
            plain = wire.call(60, version, include_cluster_authorized_operations=False, **fields)
            assert plain.cluster_authorized_operations == UNKNOWN_OPERATIONS


def test_describe_groups_carries_the_bitmask_for_groups_without_error(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as wire:
        # v5: an unknown group is Dead with no error, so Kafka computes the bits; v6: GROUP_ID_NOT_FOUND, no bits.
        v5 = wire.call(15, 5, groups=[_name("nobody")], include_authorized_operations=True).groups[0]
        assert int(v5.error_code) == 0 and v5.group_state == "Dead" and v5.authorized_operations == GROUP_BITS
        v6 = wire.call(15, 6, groups=[_name("nobody")], include_authorized_operations=True).groups[0]
        assert int(v6.error_code) == 69 and v6.authorized_operations == UNKNOWN_OPERATIONS
        plain = wire.call(15, 5, groups=[_name("nobody")], include_authorized_operations=False).groups[0]
        assert plain.authorized_operations == UNKNOWN_OPERATIONS


# -- requests at a version that is not enabled ---------------------------------------------------


def _raw_request(key: int, version: int, correlation: int, body: bytes = b"") -> bytes:
    client_id = b"raw-conformance"
    payload = struct.pack(">hhih", key, version, correlation, len(client_id)) + client_id + body
    return SIZE.pack(len(payload)) + payload


def _closed_by_broker(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True when the broker closed the connection (EOF or reset) within ``timeout_s`` without answering."""
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    assert data == b"", f"the broker answered {data!r} instead of closing"
    return True


def _supported(bootstrap: str) -> dict[int, tuple[int, int]]:
    with WireClient(bootstrap) as wire:
        versions = wire.call(18, 3, client_software_name="raw", client_software_version="1")
        return {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}


def test_a_request_at_a_version_not_enabled_closes_the_connection(shared_broker: BrokerProcess) -> None:
    supported = _supported(shared_broker.bootstrap)
    meta_max = supported[3][1]
    log_start = shared_broker.log_path.stat().st_size
    cases = [
        (3, meta_max + 1, b""),  # Metadata one past the advertised maximum (kio may not know it either)
        (3, 999, b"\x00" * 8),  # far in the future
        (1, supported[1][0] - 1, b"\x00" * 30),  # Fetch below the advertised minimum
        (4242, 0, b""),  # an API key nobody defined
    ]
    for key, version, body in cases:
        with WireClient(shared_broker.bootstrap) as wire:
            # A normal request first: the connection works, then the bad one ends it.
            assert wire.call(18, 0).error_code == 0
            wire.send_raw(_raw_request(key, version, 77, body))
            assert _closed_by_broker(wire.sock), (key, version)
    # The broker is fine and says why, one line per connection, no traceback.
    meta = _supported(shared_broker.bootstrap)
    assert meta == supported
    deadline = time.monotonic() + 5
    while True:
        log = shared_broker.log_path.read_bytes()[log_start:].decode(errors="replace")
        if log.count("closing connection from") >= len(cases) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert f"api key 3 with version {meta_max + 1} which is not enabled" in log, log
    assert "api key 3 with version 999 which is not enabled" in log
    assert f"api key 1 with version {supported[1][0] - 1} which is not enabled" in log
    assert "Unknown API key 4242 (client id 'raw-conformance')" in log
    assert log.count("closing connection from") == len(cases) and "Traceback" not in log, log


def test_pipelined_requests_after_an_unsupported_one_are_not_answered(shared_broker: BrokerProcess) -> None:
    """Kafka stops at the bad request: what the client pipelined after it on that connection is dropped."""
    supported = _supported(shared_broker.bootstrap)
    with WireClient(shared_broker.bootstrap) as wire:
        wire.send_raw(_raw_request(3, supported[3][1] + 1, 5) + _raw_request(18, 0, 6))
        assert _closed_by_broker(wire.sock)


def test_api_versions_at_an_unsupported_version_is_still_answered(shared_broker: BrokerProcess) -> None:
    supported = _supported(shared_broker.bootstrap)
    with WireClient(shared_broker.bootstrap) as wire:
        # A future ApiVersions version: its body format is unknown, the broker must not parse it.
        wire.send_raw(_raw_request(18, supported[18][1] + 1, 4242, b"\x05hello\x00\x01\x02"))
        correlation, body = decode_response(18, 0, wire.recv_frame())
        assert correlation == 4242 and int(body.error_code) == 35  # UNSUPPORTED_VERSION, v0 layout
        listed = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert listed[18] == supported[18]
        # The connection stays open: the client retries with a version it now knows.
        again = wire.call(18, supported[18][1], client_software_name="raw", client_software_version="1")
        assert int(again.error_code) == 0
