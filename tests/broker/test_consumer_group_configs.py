"""What the KIP-848 configs do, seen by a member over the wire (not what DescribeConfigs says).

``consumer.heartbeat.interval.ms`` on a GROUP resource is the interval the next heartbeat answers;
``group.consumer.max.size`` refuses one member too many; ``group.consumer.assignors`` decides which server
assignor a member may ask for (UNSUPPORTED_ASSIGNOR otherwise) and which one the group uses; a malformed
heartbeat gets INVALID_REQUEST naming what is wrong and the broker goes on serving. In a cluster the group
config is set through one broker and applied by the group's coordinator, wherever that is.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import running_cluster, wait_until

from strata.errors import ErrorCode

CG_HEARTBEAT, FIND_COORDINATOR = 68, 10
PROPS = {"group.consumer.min.heartbeat.interval.ms": "100", "group.consumer.heartbeat.interval.ms": "700",
         "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000",
         "group.consumer.max.size": "2", "group.consumer.assignors": "range",
         "offsets.topic.num.partitions": "3"}


def join(w: WireClient, group: str, topic: str, member: str | None = None, **extra: Any) -> Any:
    fields = {"group_id": group, "member_id": member or uuid.uuid4().hex[:22], "member_epoch": 0,
              "rebalance_timeout": 30000, "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
              "topic_partitions": [], **extra}
    return w.call(CG_HEARTBEAT, 1, **fields)


def set_group_config(bootstrap: str, group: str, key: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)


def test_group_configs_max_size_assignors_and_bad_requests(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b", PROPS).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
        admin.create_topics([NewTopic("cfg", 4, 1)])["cfg"].result(15)
        with WireClient(b.bootstrap) as w:
            first = join(w, "g-cfg", "cfg")
            assert int(first.error_code) == ErrorCode.NONE
            assert first.heartbeat_interval.total_seconds() * 1000 == 700  # the broker's default
            set_group_config(b.bootstrap, "g-cfg", "consumer.heartbeat.interval.ms", "300")
            again = w.call(CG_HEARTBEAT, 1, group_id="g-cfg", member_id=first.member_id,
                           member_epoch=first.member_epoch, topic_partitions=None)
            assert again.heartbeat_interval.total_seconds() * 1000 == 300  # the group's own, at once

            # group.consumer.assignors=range: only range may be asked for, and the group uses it
            refused = join(w, "g-cfg", "cfg", server_assignor="uniform")
            assert int(refused.error_code) == ErrorCode.UNSUPPORTED_ASSIGNOR
            assert int(join(w, "g-cfg", "cfg").error_code) == ErrorCode.NONE  # second member
            # group.consumer.max.size=2: a third member is refused
            third = join(w, "g-cfg", "cfg")
            assert int(third.error_code) == ErrorCode.GROUP_MAX_SIZE_REACHED
            described = admin.describe_consumer_groups(["g-cfg"])["g-cfg"].result(15)
            assert described.partition_assignor == "range" and len(described.members) == 2

            # malformed heartbeats: INVALID_REQUEST with the reason, and the broker keeps serving
            for fields, reason in (({"member_id": ""}, "MemberId"),
                                   ({"rebalance_timeout": -1}, "RebalanceTimeoutMs"),
                                   ({"topic_partitions": None}, "TopicPartitions"),
                                   ({"subscribed_topic_names": None}, "SubscribedTopicNames"),
                                   ({"member_epoch": -3}, "MemberEpoch")):
                bad = join(w, "g-bad", "cfg", **fields)
                assert int(bad.error_code) == ErrorCode.INVALID_REQUEST and reason in bad.error_message, fields
            assert int(join(w, "g-bad", "cfg", subscribed_topic_regex="cfg(").error_code) \
                == ErrorCode.INVALID_REGULAR_EXPRESSION
            assert int(join(w, "g-ok", "cfg").error_code) == ErrorCode.NONE
    finally:
        b.stop()


def test_a_group_config_set_through_any_broker_reaches_the_coordinator(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, props={**PROPS, "offsets.topic.replication.factor": "1"}) as cluster:
        cluster.admin().create_topics([NewTopic("ccfg", 2, 1)])["ccfg"].result(30)
        group = "g-cluster-cfg"
        with WireClient(cluster.brokers[1].bootstrap) as w:
            found = wait_until(lambda: (r := w.call(FIND_COORDINATOR, 3, key=group, key_type=0))
                               and int(r.error_code) == 0 and r, 60, "the group's coordinator")
        coordinator = cluster.brokers[found.node_id]
        other = next(b for i, b in cluster.brokers.items() if i != found.node_id)
        set_group_config(other.bootstrap, group, "consumer.heartbeat.interval.ms", "250")  # not the coordinator
        with WireClient(coordinator.bootstrap) as w:
            def interval() -> bool:
                r = join(w, group, "ccfg")
                return int(r.error_code) == 0 and r.heartbeat_interval.total_seconds() * 1000 == 250
            wait_until(interval, 30, "the coordinator answering the group's own heartbeat interval")


def test_share_group_configs_over_the_wire(tmp_path: Path) -> None:
    """KIP-932's share.* keys on a GROUP resource: set with IncrementalAlterConfigs, read back with
    DescribeConfigs (the unset ones at the broker's defaults), and a bad value refused naming the key."""
    b = BrokerProcess(tmp_path / "b", {"group.share.record.lock.duration.ms": "20000"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})
        group = "g-share-cfg"
        for key, value in (("share.record.lock.duration.ms", "45000"), ("share.auto.offset.reset", "earliest"),
                           ("share.isolation.level", "read_committed")):
            set_group_config(b.bootstrap, group, key, value)
        resource = ConfigResource(ResourceType.GROUP, group)
        got = admin.describe_configs([resource])[resource].result(15)
        assert {k: got[k].value for k in ("share.record.lock.duration.ms", "share.auto.offset.reset",
                                          "share.isolation.level")} == {
            "share.record.lock.duration.ms": "45000", "share.auto.offset.reset": "earliest",
            "share.isolation.level": "read_committed"}
        assert (got["share.session.timeout.ms"].value, got["share.heartbeat.interval.ms"].value) == ("45000", "5000")
        other = ConfigResource(ResourceType.GROUP, "g-share-unset")
        unset = admin.describe_configs([other])[other].result(15)
        assert unset["share.record.lock.duration.ms"].value == "20000"  # the broker's group.share.* default
        assert unset["share.auto.offset.reset"].value == "latest"

        for key, value in (("share.auto.offset.reset", "sometimes"), ("share.record.lock.duration.ms", "500"),
                           ("share.isolation.level", "read_dirty")):
            try:
                set_group_config(b.bootstrap, group, key, value)
            except KafkaException as e:
                assert e.args[0].code() == KafkaError.INVALID_CONFIG and key in e.args[0].str(), (key, e)
            else:
                raise AssertionError(f"{key}={value} was accepted")
        again = admin.describe_configs([resource])[resource].result(15)
        assert again["share.auto.offset.reset"].value == "earliest"  # the refused values changed nothing
        assert again["share.record.lock.duration.ms"].value == "45000"
    finally:
        b.stop()
