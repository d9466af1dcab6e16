"""Znode paths and JSON codecs against the bytes Kafka 3.9 writes and the JSON Kafka's own tests decode.

The GOLDEN strings were produced by running ZkData's encoders' exact recipe (Scala 2.13 collections + a default
Jackson ObjectMapper, from the scala-library and jackson jars) -- key order included.
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.cluster import znodes as z
from strata.cluster.znodes import (
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ConfigEntityChangeNotificationZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerRegistration,
    ControllerZNode,
    DeleteTopicsZNode,
    Endpoint,
    LeaderAndIsr,
    LeaderRecoveryState,
    PreferredReplicaElectionZNode,
    ProducerIdBlockZNode,
    ProducerIdsBlock,
    ReassignPartitionsZNode,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicZNode,
    ZNodeDecodeError,
)
from strata.common.types import TopicPartition
from strata.log.checkpoints import topic_id_from_str

RECOVERED, RECOVERING = LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING


# -- paths -----------------------------------------------------------------------------------------


def test_paths_are_kafkas() -> None:
    assert ClusterIdZNode.PATH == "/cluster/id"
    assert ControllerZNode.PATH == "/controller"
    assert ControllerEpochZNode.PATH == "/controller_epoch"
    assert z.BrokerIdsZNode.PATH == "/brokers/ids"
    assert BrokerIdZNode.path(7) == "/brokers/ids/7"
    assert z.BrokerSequenceIdZNode.PATH == "/brokers/seqid"
    assert z.TopicsZNode.PATH == "/brokers/topics"
    assert TopicZNode.path("t") == "/brokers/topics/t"
    assert TopicZNode.partitions_path("t") == "/brokers/topics/t/partitions"
    assert TopicZNode.partition_path("t", 3) == "/brokers/topics/t/partitions/3"
    assert TopicPartitionStateZNode.path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert ConfigEntityZNode.topic_path("t") == "/config/topics/t"
    assert ConfigEntityZNode.broker_path(2) == "/config/brokers/2"
    assert ConfigEntityZNode.broker_path(None) == "/config/brokers/<default>"
    assert ConfigEntityZNode.path("users", "alice") == "/config/users/alice"
    assert ConfigEntityChangeNotificationZNode.PATH == "/config/changes"
    assert ConfigEntityChangeNotificationZNode.CREATE_PATH == "/config/changes/config_change_"
    assert ConfigEntityChangeNotificationZNode.entity_path("topics", "t") == "topics/t"
    assert DeleteTopicsZNode.PATH == "/admin/delete_topics"
    assert DeleteTopicsZNode.path("t") == "/admin/delete_topics/t"
    assert ReassignPartitionsZNode.PATH == "/admin/reassign_partitions"
    assert PreferredReplicaElectionZNode.PATH == "/admin/preferred_replica_election"
    assert ProducerIdBlockZNode.PATH == "/latest_producer_id_block"
    assert z.ISR_CHANGE_NOTIFICATION_PATH == "/isr_change_notification"
    assert z.FEATURE_PATH == "/feature"


def test_persistent_paths_are_zkdata_persistent_zk_paths_in_order() -> None:
    assert z.PERSISTENT_PATHS == (
        "/consumers", "/brokers/ids", "/brokers/topics", "/config/changes", "/admin/delete_topics", "/brokers/seqid",
        "/isr_change_notification", "/latest_producer_id_block", "/log_dir_event_notification",
        "/config/topics", "/config/clients", "/config/users", "/config/brokers", "/config/ips",
    )


def test_sequence_number() -> None:
    path = "/config/changes/config_change_0000000042"
    assert z.sequence_number(path, ConfigEntityChangeNotificationZNode.SEQUENCE_PREFIX) == "0000000042"
    with pytest.raises(ValueError):
        z.sequence_number("/config/changes/other", "config_change_")


# -- golden bytes ------------------------------------------------------------------------------------


def test_cluster_id() -> None:
    data = ClusterIdZNode.encode("abc")
    assert data == b'{"version":"1","id":"abc"}'
    assert ClusterIdZNode.decode(data) == "abc"


def test_controller_v2_and_v1() -> None:
    data = ControllerZNode.encode(1, 123)
    assert data == b'{"version":2,"brokerid":1,"timestamp":"123","kraftControllerEpoch":-1}'
    assert ControllerZNode.decode(data) == ControllerRegistration(1, 123, -1)
    v1 = b'{"version":1,"brokerid":3,"timestamp":"1700000000000"}'
    assert ControllerZNode.decode(v1) == ControllerRegistration(3, 1700000000000, None)


def test_controller_epoch_is_a_plain_integer() -> None:
    assert ControllerEpochZNode.encode(5) == b"5"
    assert ControllerEpochZNode.decode(b"5") == 5
    assert ControllerEpochZNode.decode(b"+7") == 7  # Integer.parseInt accepts a sign
    for bad in (b" 5", b"5\n", b"1_0", b"", b"five", b"\xff"):
        with pytest.raises(ZNodeDecodeError):
            ControllerEpochZNode.decode(bad)


GOLDEN_STATES = [
    (LeaderAndIsr(1, 0, (1, 2), 1),
     b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'),
    (LeaderAndIsr(1, 6, (1,), 10, RECOVERING),
     b'{"controller_epoch":10,"leader":1,"version":1,"leader_recovery_state":1,"leader_epoch":6,"isr":[1]}'),
    (LeaderAndIsr(-1, 3, (2,), 2),
     b'{"controller_epoch":2,"leader":-1,"version":1,"leader_epoch":3,"isr":[2]}'),
]


@pytest.mark.parametrize(("state", "golden"), GOLDEN_STATES)
def test_partition_state_golden(state: LeaderAndIsr, golden: bytes) -> None:
    assert TopicPartitionStateZNode.encode(state) == golden
    assert TopicPartitionStateZNode.decode(golden, zk_version=5) == state.with_partition_epoch(5)


def test_partition_state_matches_kafka_docs_layout() -> None:
    # docs/implementation.html: {"controller_epoch":...,"leader":...,"version":...,"leader_epoch":...,"isr":[...]}
    keys = list(json.loads(TopicPartitionStateZNode.encode(LeaderAndIsr(0, 0, (0,), 1))))
    assert keys == ["controller_epoch", "leader", "version", "leader_epoch", "isr"]


def test_partition_state_kafka_test_vectors() -> None:
    # TopicPartitionStateZNodeTest: recovering and recovered round trips; an old value without the recovery key
    for recovery in (RECOVERING, RECOVERED):
        expected = LeaderAndIsr(1, 6, (1,), 10, recovery, partition_epoch=5)
        assert TopicPartitionStateZNode.decode(TopicPartitionStateZNode.encode(expected), 5) == expected
    old = json.dumps({"version": 1, "leader": 1, "leader_epoch": 6, "controller_epoch": 10, "isr": [1]}).encode()
    assert TopicPartitionStateZNode.decode(old, 5) == LeaderAndIsr(1, 6, (1,), 10, RECOVERED, 5)


def test_partition_state_decode_errors() -> None:
    good = {"version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": 1, "isr": [1]}
    for key, value in [("leader", "1"), ("leader", True), ("isr", [1, "2"]), ("isr", None), ("leader_epoch", 1.5),
                       ("leader_recovery_state", 2), ("controller_epoch", None)]:
        with pytest.raises(ZNodeDecodeError):
            TopicPartitionStateZNode.decode(json.dumps({**good, key: value}).encode(), 0)
    for raw in (b"", b"not json", b"[1]", b"null"):
        with pytest.raises(ZNodeDecodeError):
            TopicPartitionStateZNode.decode(raw, 0)


TOPIC_ID = topic_id_from_str("vDeEMFrQS0iv1jd4BCGuyg")


def test_topic_golden_with_id() -> None:
    data = TopicZNode.encode(TOPIC_ID, {0: [1, 2], 1: [2, 1]})
    assert data == (b'{"partitions":{"0":[1,2],"1":[2,1]},"topic_id":"vDeEMFrQS0iv1jd4BCGuyg",'
                    b'"adding_replicas":{},"removing_replicas":{},"version":3}')
    decoded = TopicZNode.decode("t", data)
    assert decoded == TopicAssignment("t", TOPIC_ID, {0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2, 1))})
    assert decoded.replicas(1) == (2, 1)
    assert decoded.replicas(9) == ()


def test_topic_golden_reassigning_without_id() -> None:
    partitions = {0: ReplicaAssignment((1, 2, 3), (3,), (1,)), 1: ReplicaAssignment((2, 3))}
    data = TopicZNode.encode(None, partitions)
    assert data == (b'{"partitions":{"0":[1,2,3],"1":[2,3]},"adding_replicas":{"0":[3]},'
                    b'"removing_replicas":{"0":[1]},"version":3}')
    assert TopicZNode.decode("t", data) == TopicAssignment("t", None, partitions)


def test_topic_partition_keys_in_scala_hash_order() -> None:
    # 13 partitions: the mutable.HashMap has grown to 32 buckets, which puts "11" and "12" first
    data = TopicZNode.encode(uuid.UUID(int=1), {p: [0] for p in range(13)})
    assert data == (b'{"partitions":{"11":[0],"12":[0],"0":[0],"1":[0],"2":[0],"3":[0],"4":[0],"5":[0],"6":[0],'
                    b'"7":[0],"8":[0],"9":[0],"10":[0]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","adding_replicas":{},'
                    b'"removing_replicas":{},"version":3}')
    # the order does not depend on the order the partitions are given in
    assert TopicZNode.encode(uuid.UUID(int=1), {p: [0] for p in reversed(range(13))}) == data


def test_topic_decode_older_versions_and_errors() -> None:
    v1 = b'{"version":1,"partitions":{"1":[2,3],"0":[1,2]}}'
    decoded = TopicZNode.decode("t", v1)
    assert decoded == TopicAssignment("t", None, {0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2, 3))})
    assert list(decoded.partitions) == [0, 1]
    # adding/removing only count for partitions listed under "partitions"
    stray = b'{"version":3,"partitions":{"0":[1]},"adding_replicas":{"5":[1]},"removing_replicas":{}}'
    assert TopicZNode.decode("t", stray).partitions == {0: ReplicaAssignment((1,))}
    for raw in (b'{"partitions":{"x":[1]}}', b'{"partitions":{"0":"1"}}', b'{"partitions":[1]}',
                b'{"partitions":{},"topic_id":"short"}', b'{"partitions":{},"topic_id":7}', b"garbage"):
        with pytest.raises(ZNodeDecodeError):
            TopicZNode.decode("t", raw)


def test_broker_golden_default() -> None:
    reg = BrokerRegistration(0, (Endpoint("PLAINTEXT", "localhost", 9092),), timestamp_ms=1700000000000)
    data = BrokerIdZNode.encode(reg)
    assert data == (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                    b'"endpoints":["PLAINTEXT://localhost:9092"],"jmx_port":-1,"port":9092,"host":"localhost",'
                    b'"version":5,"timestamp":"1700000000000"}')
    assert BrokerIdZNode.decode(0, data, epoch=42) == BrokerRegistration(
        0, (Endpoint("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),), None, -1, 1700000000000, {}, 5, 42)


def test_broker_golden_rack_ipv6_and_wildcard_host() -> None:
    reg = BrokerRegistration(1, (Endpoint("PLAINTEXT", "::1", 9092), Endpoint("SSL", None, 9093, "SSL")),
                             rack="dc1", jmx_port=9999)
    data = BrokerIdZNode.encode(reg, timestamp_ms=1700000000001)
    assert data == (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
                    b'"endpoints":["PLAINTEXT://[::1]:9092","SSL://:9093"],"rack":"dc1","jmx_port":9999,"port":9092,'
                    b'"host":"::1","version":5,"timestamp":"1700000000001"}')
    decoded = BrokerIdZNode.decode(1, data)
    assert decoded.endpoints == reg.endpoints
    assert decoded.rack == "dc1"
    assert decoded.endpoint("SSL") == Endpoint("SSL", None, 9093, "SSL")
    assert decoded.endpoint("NOPE") is None


def test_broker_golden_five_listeners_in_champ_order_and_no_plaintext() -> None:
    eps = (Endpoint("INTERNAL", "h", 1, "SSL"), Endpoint("EXTERNAL", "h", 2, "SASL_SSL"),
           Endpoint("CLIENT", "h", 3, "SSL"), Endpoint("REPLICATION", "h", 4, "SSL"),
           Endpoint("CONTROLLER", "h", 5, "SASL_PLAINTEXT"))
    data = BrokerIdZNode.encode(BrokerRegistration(3, eps, timestamp_ms=1))
    assert data == (b'{"features":{},"listener_security_protocol_map":{"REPLICATION":"SSL","CLIENT":"SSL",'
                    b'"INTERNAL":"SSL","EXTERNAL":"SASL_SSL","CONTROLLER":"SASL_PLAINTEXT"},'
                    b'"endpoints":["INTERNAL://h:1","EXTERNAL://h:2","CLIENT://h:3","REPLICATION://h:4",'
                    b'"CONTROLLER://h:5"],"jmx_port":-1,"port":-1,"host":null,"version":5,"timestamp":"1"}')
    assert BrokerIdZNode.decode(3, data).endpoints == eps


def test_broker_encode_needs_a_timestamp() -> None:
    with pytest.raises(ValueError):
        BrokerIdZNode.encode(BrokerRegistration(0, ()))


# BrokerEndPointTest (Kafka 3.9): every registration version Kafka still reads
def test_broker_decode_v1() -> None:
    reg = BrokerIdZNode.decode(
        1, b'{"jmx_port":-1,"timestamp":"1420485325400","host":"172.16.8.243","version":1,"port":9091}')
    assert reg.endpoints == (Endpoint("PLAINTEXT", "172.16.8.243", 9091, "PLAINTEXT"),)
    assert reg.version == 1
    assert reg.timestamp_ms == 1420485325400


def test_broker_decode_v2_and_future_version() -> None:
    v2 = b"""{"version":2, "host":"localhost", "port":9092, "jmx_port":9999, "timestamp":"1416974968782",
              "endpoints":["PLAINTEXT://localhost:9092"]}"""
    assert BrokerIdZNode.decode(1, v2).endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "localhost", 9092)
    future = b"""{"foo":"bar", "version":100, "host":"localhost", "port":9092, "jmx_port":9999,
                  "timestamp":"1416974968782", "endpoints":["SSL://localhost:9093"]}"""
    assert BrokerIdZNode.decode(1, future).endpoint("SSL") == Endpoint("SSL", "localhost", 9093, "SSL")


def test_broker_decode_v3_v4_v5() -> None:
    v3 = b"""{"version":3, "host":"localhost", "port":9092, "jmx_port":9999, "timestamp":"2233345666",
              "endpoints":["PLAINTEXT://host1:9092", "SSL://host1:9093"], "rack":"dc1"}"""
    reg = BrokerIdZNode.decode(1, v3)
    assert reg.endpoint("SSL") == Endpoint("SSL", "host1", 9093, "SSL")
    assert reg.rack == "dc1"
    v4 = b"""{"version":4, "host":"localhost", "port":9092, "jmx_port":9999, "timestamp":"2233345666",
              "endpoints":["CLIENT://host1:9092", "REPLICATION://host1:9093"],
              "listener_security_protocol_map":{"CLIENT":"SSL", "REPLICATION":"PLAINTEXT"}, "rack":null}"""
    reg = BrokerIdZNode.decode(1, v4)
    assert reg.endpoint("CLIENT") == Endpoint("CLIENT", "host1", 9092, "SSL")
    assert reg.endpoint("REPLICATION") == Endpoint("REPLICATION", "host1", 9093, "PLAINTEXT")
    assert reg.rack is None
    assert reg.features == {}
    v5 = b"""{"version":5, "host":"localhost", "port":9092, "jmx_port":9999, "timestamp":"2233345666",
              "endpoints":["CLIENT://host1:9092", "REPLICATION://host1:9093"],
              "listener_security_protocol_map":{"CLIENT":"SSL", "REPLICATION":"PLAINTEXT"}, "rack":"dc1",
              "features": {"feature1": {"min_version": 1, "max_version": 2},
                           "feature2": {"min_version": 2, "max_version": 4}}}"""
    reg = BrokerIdZNode.decode(1, v5)
    assert reg.features == {"feature1": {"min_version": 1, "max_version": 2},
                            "feature2": {"min_version": 2, "max_version": 4}}
    assert reg.jmx_port == 9999


def test_broker_decode_errors() -> None:
    base = {"version": 5, "host": "h", "port": 1, "jmx_port": -1, "timestamp": "1",
            "endpoints": ["PLAINTEXT://h:1"], "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}}
    for change in [{"version": 0}, {"jmx_port": None}, {"endpoints": ["PLAINTEXT:/h:1"]},
                   {"endpoints": ["OTHER://h:1"]}, {"endpoints": "PLAINTEXT://h:1"}, {"rack": 5},
                   {"features": {"f": 1}}, {"listener_security_protocol_map": ["PLAINTEXT"]},
                   {"listener_security_protocol_map": {"PLAINTEXT": "TLS"}},
                   {"listener_security_protocol_map": {"plaintext": "PLAINTEXT"}}]:
        with pytest.raises(ZNodeDecodeError):
            BrokerIdZNode.decode(1, json.dumps({**base, **change}).encode())
    with pytest.raises(ZNodeDecodeError):
        BrokerIdZNode.decode(1, json.dumps({"version": 1, "jmx_port": -1, "port": 1}).encode())


def test_endpoint_connection_strings() -> None:
    assert Endpoint("PLAINTEXT", "h", 1).connection_string == "PLAINTEXT://h:1"
    assert Endpoint("PLAINTEXT", "fe80::1", 1).connection_string == "PLAINTEXT://[fe80::1]:1"
    assert Endpoint("PLAINTEXT", None, 1).connection_string == "PLAINTEXT://:1"
    protocols = {"PLAINTEXT": "PLAINTEXT"}
    assert Endpoint.parse("plaintext://[fe80::1]:9092", protocols) == Endpoint("PLAINTEXT", "fe80::1", 9092)
    assert Endpoint.parse("PLAINTEXT://:9092", protocols) == Endpoint("PLAINTEXT", None, 9092)


def test_config_golden_small() -> None:
    data = ConfigEntityZNode.encode({"retention.ms": "86400000", "cleanup.policy": "compact"})
    assert data == b'{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"86400000"}}'
    assert ConfigEntityZNode.decode(data) == {"retention.ms": "86400000", "cleanup.policy": "compact"}


def test_config_golden_after_properties_resize() -> None:
    names = ["segment.bytes", "segment.ms", "retention.ms", "retention.bytes", "cleanup.policy",
             "min.insync.replicas", "remote.storage.enable", "local.retention.ms", "local.retention.bytes",
             "max.message.bytes", "compression.type", "unclean.leader.election.enable", "message.timestamp.type"]
    config = {name: str(i + 1) for i, name in enumerate(names)}
    data = ConfigEntityZNode.encode(config)
    assert data == (b'{"version":1,"config":{"compression.type":"11","remote.storage.enable":"7",'
                    b'"max.message.bytes":"10","message.timestamp.type":"13","min.insync.replicas":"6",'
                    b'"local.retention.bytes":"9","unclean.leader.election.enable":"12","retention.bytes":"4",'
                    b'"local.retention.ms":"8","cleanup.policy":"5","segment.bytes":"1","segment.ms":"2",'
                    b'"retention.ms":"3"}}')
    assert ConfigEntityZNode.decode(data) == config


def test_config_string_escapes_like_jackson() -> None:
    value = 'tab\there "quoted" back\\slash nl\n ctl\x01 é 中 \U0001F600'
    data = ConfigEntityZNode.encode({"k": value})
    assert data == ('{"version":1,"config":{"k":"tab\\there \\"quoted\\" back\\\\slash nl\\n ctl\\u0001 é 中 '
                    '\\uD83D\\uDE00"}}').encode()
    assert ConfigEntityZNode.decode(data) == {"k": value}


def test_config_decode_is_lenient_like_kafka() -> None:
    assert ConfigEntityZNode.decode(None) == {}
    assert ConfigEntityZNode.decode(b"") == {}
    assert ConfigEntityZNode.decode(b"not json") == {}
    assert ConfigEntityZNode.decode(b"[1]") == {}
    assert ConfigEntityZNode.decode(b'{"version":1}') == {}
    assert ConfigEntityZNode.decode(b'{"version":1,"config":[]}') == {}
    with pytest.raises(ZNodeDecodeError):
        ConfigEntityZNode.decode(b'{"version":1,"config":{"a":1}}')
    with pytest.raises(TypeError):
        ConfigEntityZNode.encode({"a": 1})  # type: ignore[dict-item]


def test_config_change_notification() -> None:
    data = ConfigEntityChangeNotificationZNode.encode("topics/t")
    assert data == b'{"version":2,"entity_path":"topics/t"}'
    assert ConfigEntityChangeNotificationZNode.decode(data) == ("topics", "t")
    # ZkConfigMigrationClientTest's notification for a broker; a nested (user/client) path keeps its tail
    assert ConfigEntityChangeNotificationZNode.decode(b'{"version":2,"entity_path":"brokers/1"}') == ("brokers", "1")
    nested = b'{"version":2,"entity_path":"users/alice/clients/c1"}'
    assert ConfigEntityChangeNotificationZNode.decode(nested) == ("users", "alice/clients/c1")
    v1 = b'{"version":1,"entity_type":"topics","entity_name":"t"}'
    assert ConfigEntityChangeNotificationZNode.decode(v1) == ("topics", "t")
    for bad in (b'{"version":1,"entity_type":"brokers","entity_name":"1"}', b'{"version":2,"entity_path":"x"}',
                b'{"version":3,"entity_path":"topics/t"}', b'{"version":2}'):
        with pytest.raises(ZNodeDecodeError):
            ConfigEntityChangeNotificationZNode.decode(bad)


def test_reassign_partitions() -> None:
    # ReassignPartitionsZNodeTest
    golden = b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2]}]}'
    assert ReassignPartitionsZNode.encode({TopicPartition("foo", 0): [1, 2]}) == golden
    assert ReassignPartitionsZNode.decode(golden) == {TopicPartition("foo", 0): (1, 2)}
    # docs/ops.html example
    ops = b'{"version":1,"partitions":[{"topic":"foo1","partition":0,"replicas":[5,6]},{"topic":"foo2","partition":1,"replicas":[2,3]}]}'  # noqa: E501
    assert ReassignPartitionsZNode.decode(ops) == {TopicPartition("foo1", 0): (5, 6), TopicPartition("foo2", 1): (2, 3)}
    for bad in (b'{"version":1}', b'{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}',
                b'{"version":1,"partitions":[1]}'):
        with pytest.raises(ZNodeDecodeError):
            ReassignPartitionsZNode.decode(bad)


def test_preferred_replica_election() -> None:
    tps = [TopicPartition("topic-a", 0), TopicPartition("topic-b", 0)]
    golden = b'{"version":1,"partitions":[{"topic":"topic-a","partition":0},{"topic":"topic-b","partition":0}]}'
    assert PreferredReplicaElectionZNode.encode(tps) == golden
    assert PreferredReplicaElectionZNode.encode([*tps, tps[0]]) == golden  # a set: duplicates collapse
    assert PreferredReplicaElectionZNode.decode(golden) == set(tps)


def test_producer_id_block() -> None:
    block = ProducerIdsBlock(1, 0, 1000)
    data = ProducerIdBlockZNode.encode(block)
    assert data == b'{"version":1,"broker":1,"block_start":"0","block_end":"999"}'
    assert ProducerIdBlockZNode.decode(data) == block
    assert block.last_producer_id == 999
    assert block.next_block_first_id == 1000
    for bad in (b'{"version":1,"broker":1,"block_start":0,"block_end":"999"}',
                b'{"version":1,"broker":1,"block_start":"0","block_end":"9223372036854775808"}',
                b'{"version":1,"broker":1,"block_start":"0","block_end":"4294967296"}',
                b'{"version":1,"block_start":"0","block_end":"9"}'):
        with pytest.raises(ZNodeDecodeError):
            ProducerIdBlockZNode.decode(bad)


def test_next_producer_id_block() -> None:
    first = ProducerIdBlockZNode.next_block(None, 3)
    assert first == ProducerIdsBlock(3, 0, 1000)
    assert ProducerIdBlockZNode.next_block(first, 4) == ProducerIdsBlock(4, 1000, 1000)
    max_long = (1 << 63) - 1
    # the last block Kafka hands out ends exactly at Long.MaxValue
    assert ProducerIdBlockZNode.next_block(ProducerIdsBlock(1, max_long - 1999, 1000), 2).last_producer_id == max_long
    with pytest.raises(OverflowError):
        ProducerIdBlockZNode.next_block(ProducerIdsBlock(1, max_long - 1998, 1000), 2)


# -- LeaderAndIsr (LeaderAndIsrTest) ---------------------------------------------------------------


def test_leader_and_isr_transitions() -> None:
    state = LeaderAndIsr.initial(1, [1, 2], controller_epoch=3)
    assert (state.leader, state.leader_epoch, state.isr, state.partition_epoch) == (1, 0, (1, 2), 0)
    recovering = state.new_recovering_leader_and_isr(3, [3])
    assert (recovering.leader, recovering.isr, recovering.leader_recovery_state) == (3, (3,), RECOVERING)
    moved = state.new_leader_and_isr(2, [1, 2])
    assert (moved.leader, moved.leader_epoch, moved.isr, moved.leader_recovery_state) == (2, 1, (1, 2), RECOVERED)
    assert LeaderAndIsr.initial(2, [1, 2, 3], 0).new_leader(3).isr == (1, 2, 3)
    assert LeaderAndIsr.initial(3, [1, 2, 3], 0).new_epoch().leader_epoch == 1
    assert state.has_leader and not state.new_leader(LeaderAndIsr.NO_LEADER).has_leader
    # the new_* methods keep both epochs; the writer stamps them
    bumped = state.with_partition_epoch(7).with_controller_epoch(9).new_leader(2)
    assert (bumped.partition_epoch, bumped.controller_epoch) == (7, 9)
    # a RECOVERING partition stays so through a clean change
    assert recovering.new_leader_and_isr(3, [3, 1]).leader_recovery_state == RECOVERING


def test_equals_allow_stale_partition_epoch() -> None:
    state = LeaderAndIsr(1, 2, (1, 2), 3, partition_epoch=4)
    assert state.equals_allow_stale_partition_epoch(state.with_partition_epoch(5))
    assert not state.equals_allow_stale_partition_epoch(state.with_partition_epoch(3))
    assert not state.equals_allow_stale_partition_epoch(state.new_epoch())


def test_replica_assignment_reassignment_views() -> None:
    moving = ReplicaAssignment((1, 2, 3)).reassign_to([3, 4, 5])
    assert moving == ReplicaAssignment((3, 4, 5, 1, 2), (4, 5), (1, 2))
    assert moving.origin_replicas == (3, 1, 2)
    assert moving.target_replicas == (3, 4, 5)
    assert moving.is_being_reassigned
    assert not ReplicaAssignment((1,)).is_being_reassigned
    assert moving.remove_replica(4) == ReplicaAssignment((3, 5, 1, 2), (5,), (1, 2))


# -- JVM orders --------------------------------------------------------------------------------------


def test_scala_immutable_map_keeps_insertion_order_up_to_four_keys() -> None:
    assert z._scala_immutable_map_order(["d", "c", "b", "a", "c"]) == ["d", "c", "b", "a"]
    keys = ["version", "leader", "leader_epoch", "controller_epoch", "isr"]
    assert z._scala_immutable_map_order(keys) == ["controller_epoch", "leader", "version", "leader_epoch", "isr"]


def test_java_string_hash() -> None:
    assert z._java_string_hash("") == 0
    assert z._java_string_hash("a") == 97
    assert z._java_string_hash("polygenelubricants") == (-2147483648) & 0xFFFFFFFF  # famous Integer.MIN_VALUE
    assert z._java_string_hash("\U0001F600") == (0xD83D * 31 + 0xDE00)


# -- properties ----------------------------------------------------------------------------------

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_replicas = st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple)


@st.composite
def _states(draw: st.DrawFn) -> LeaderAndIsr:
    return LeaderAndIsr(draw(st.integers(-2, 2**31 - 1)), draw(st.integers(-1, 2**31 - 1)), draw(_replicas),
                        draw(st.integers(0, 2**31 - 1)), draw(st.sampled_from(LeaderRecoveryState)),
                        draw(st.integers(0, 2**31 - 1)))


@given(_states())
def test_partition_state_round_trip(state: LeaderAndIsr) -> None:
    data = TopicPartitionStateZNode.encode(state)
    assert TopicPartitionStateZNode.decode(data, state.partition_epoch) == state
    assert b" " not in data  # compact, like Jackson


@given(st.dictionaries(st.integers(0, 5000), st.tuples(_replicas, _replicas, _replicas), max_size=60),
       st.none() | st.uuids())
def test_topic_round_trip(parts: dict[int, tuple[tuple[int, ...], ...]], topic_id: uuid.UUID | None) -> None:
    partitions = {p: ReplicaAssignment(*r) for p, r in parts.items()}
    data = TopicZNode.encode(topic_id, partitions)
    decoded = TopicZNode.decode("t", data)
    assert decoded == TopicAssignment("t", topic_id, partitions)
    obj = json.loads(data)
    assert set(obj["partitions"]) == {str(p) for p in partitions}
    assert set(obj["adding_replicas"]) == {str(p) for p, a in partitions.items() if a.adding_replicas}


@given(st.dictionaries(_names, _names, max_size=40))
def test_config_round_trip(config: dict[str, str]) -> None:
    data = ConfigEntityZNode.encode(config)
    assert ConfigEntityZNode.decode(data) == config
    assert json.loads(data) == {"version": 1, "config": config}
    # the order is a permutation that does not depend on values
    assert list(json.loads(ConfigEntityZNode.encode(dict.fromkeys(config, "")))["config"]) == list(
        json.loads(data)["config"])


_listener = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=10)
_endpoint = st.builds(Endpoint, _listener, st.none() | st.sampled_from(["h", "10.1.2.3", "::1", "a-b.c"]),
                      st.integers(0, 65535), st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]))


@given(st.integers(0, 2**31 - 1),
       st.lists(_endpoint, min_size=1, max_size=7, unique_by=lambda e: e.listener),
       st.none() | _names, st.integers(-1, 65535), st.integers(0, 2**53))
def test_broker_round_trip(broker_id: int, endpoints: list[Endpoint], rack: str | None, jmx: int, ts: int) -> None:
    reg = BrokerRegistration(broker_id, tuple(endpoints), rack, jmx, ts)
    decoded = BrokerIdZNode.decode(broker_id, BrokerIdZNode.encode(reg), epoch=11)
    assert decoded == BrokerRegistration(broker_id, tuple(endpoints), rack, jmx, ts, {}, 5, 11)


@given(st.text(max_size=30))
def test_cluster_id_round_trip(cluster_id: str) -> None:
    assert ClusterIdZNode.decode(ClusterIdZNode.encode(cluster_id)) == cluster_id
