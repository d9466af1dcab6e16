"""A broker asked about a partition it holds no replica of, over the wire (Kafka 3.9's ``getPartitionOrError``).

``ReplicaManager.getPartitionOrError``: a partition the metadata cache knows but this broker does not host is
NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata and goes to the leader; only a partition that
exists nowhere (an unknown topic, or a partition index past the topic's count) is UNKNOWN_TOPIC_OR_PARTITION.
Produce, Fetch, ListOffsets, DeleteRecords and OffsetForLeaderEpoch all go through that lookup. The topic
here has replication factor 1, both partitions on broker 1, so brokers 2 and 3 host no replica of it.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import NewTopic
from tests.broker.kafka_wire import WireClient, produce
from tests.cluster.harness import running_cluster, wait_until

from strata.protocol.records import BatchBuilder

PRODUCE, FETCH, LIST_OFFSETS, METADATA, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 0, 1, 2, 3, 21, 23
NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6
TOPIC = "on-one-broker"
HOST = 1
MISSING_PARTITION = 7  # the topic has partitions 0 and 1


def knows_topic(c: WireClient) -> bool:
    """This broker's metadata shows the topic with both partitions led by ``HOST``."""
    r = c.call(METADATA, 12, topics=[{"name": TOPIC, "topic_id": None}], allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)
    (t,) = r.topics
    return int(t.error_code) == NONE and sorted((p.partition_index, p.leader_id) for p in t.partitions) == [
        (0, HOST), (1, HOST)]


def records() -> bytes:
    batch = BatchBuilder()
    batch.append(b"v")
    return batch.build()


def codes(c: WireClient, topic: str, partition: int) -> dict[str, int]:
    """The error code of each API for one partition."""
    produced = produce(c, topic, partition, records(), acks=1)
    fetched = c.call(FETCH, 12, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                     session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                     topics=[{"topic": topic, "partitions": [
                         {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                          "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}])
    listed = c.call(LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[{"name": topic, "partitions": [
        {"partition_index": partition, "timestamp": -1, "current_leader_epoch": -1}]}])
    deleted = c.call(DELETE_RECORDS, 2, timeout=5000, topics=[{"name": topic, "partitions": [
        {"partition_index": partition, "offset": 0}]}])
    ended = c.call(OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=[{"topic": topic, "partitions": [
        {"partition": partition, "current_leader_epoch": -1, "leader_epoch": 0}]}])
    return {"produce": int(produced.error_code),
            "fetch": int(fetched.responses[0].partitions[0].error_code),
            "list_offsets": int(listed.topics[0].partitions[0].error_code),
            "delete_records": int(deleted.topics[0].partitions[0].error_code),
            "offset_for_leader_epoch": int(ended.topics[0].partitions[0].error_code)}


def every_api(code: int) -> dict[str, int]:
    return dict.fromkeys(("produce", "fetch", "list_offsets", "delete_records", "offset_for_leader_epoch"), code)


def test_a_broker_without_a_replica_says_not_leader_or_follower(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 2, replica_assignment=[[HOST], [HOST]])])[TOPIC].result(30)
        for broker_id, b in cluster.brokers.items():
            with WireClient(b.bootstrap) as c:
                wait_until(lambda c=c: knows_topic(c), 30, f"broker {broker_id} to know {TOPIC}")

        with WireClient(cluster.brokers[HOST].bootstrap) as c:  # the control: the replica's own broker answers
            assert codes(c, TOPIC, 0) == every_api(NONE)
        for broker_id in (2, 3):
            with WireClient(cluster.brokers[broker_id].bootstrap) as c:
                for partition in (0, 1):
                    assert codes(c, TOPIC, partition) == every_api(NOT_LEADER_OR_FOLLOWER), (broker_id, partition)
                # a partition that exists nowhere, and a topic that does not exist, stay unknown
                assert codes(c, TOPIC, MISSING_PARTITION) == every_api(UNKNOWN_TOPIC_OR_PARTITION), broker_id
                assert codes(c, "no-such-topic", 0) == every_api(UNKNOWN_TOPIC_OR_PARTITION), broker_id
        with WireClient(cluster.brokers[HOST].bootstrap) as c:
            assert codes(c, TOPIC, MISSING_PARTITION) == every_api(UNKNOWN_TOPIC_OR_PARTITION)
