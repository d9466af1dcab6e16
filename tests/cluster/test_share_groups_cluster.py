"""KIP-932 share groups in a 3-broker cluster: the broker leading the share-partition's state (its
``__share_group_state`` partition, replicated three times) is killed with -9 after half the records were
accepted. The state's new leader replays it: a new member gets exactly the records nobody accepted -- none
lost, none accepted twice.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from confluent_kafka import AcknowledgeType, Producer, TopicCollection
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import running_cluster, wait_until
from tests.support.share import (
    SHARE_BROKER_PROPS,
    assert_reads_the_committed_only,
    holding_consumer,
    poll_until,
    produce_around_an_abort,
    set_group_configs,
    share_consumer,
    stop_holder,
)

from strata.common.hashing import kafka_partition_for
from strata.coordinator.share.coordinator import coordinator_key

PROPS = {**SHARE_BROKER_PROPS, "offsets.topic.num.partitions": "3",
         "share.coordinator.state.topic.num.partitions": "3"}
STATE_TOPIC = "__share_group_state"


def test_share_group_state_survives_its_coordinator(zk_connect: str, tmp_path: Path) -> None:
    total = 300
    with running_cluster(zk_connect, tmp_path, props=PROPS) as cluster:
        admin = cluster.admin()
        admin.create_topics([NewTopic("sq", 1, 3, config={"min.insync.replicas": "2"})])["sq"].result(30)
        cluster.wait_full_isr("sq")
        set_group_configs(cluster.bootstrap, "sg", share_auto_offset_reset="earliest")
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 3})
        for i in range(total):
            p.produce("sq", value=b"%d" % i, partition=0)
        assert p.flush(30) == 0

        c = share_consumer(cluster.bootstrap, "sg", "sq", explicit=True, log_level=3)
        accepted: list[int] = []

        def accept_first_half(m: object) -> None:
            offset = m.offset()  # type: ignore[attr-defined]
            if offset < total // 2:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                accepted.append(offset)
            else:
                c.acknowledge(m, AcknowledgeType.RELEASE)

        try:
            poll_until(c, lambda _ms: len(accepted) >= total // 2, on_message=accept_first_half)
            c.commit_sync(30)
        finally:
            c.close()
        assert sorted(accepted) == list(range(total // 2))

        ck_id = admin.describe_topics(TopicCollection(["sq"]))["sq"].result(10).topic_id
        topic_id = uuid.UUID(int=((ck_id.get_most_significant_bits() & (2**64 - 1)) << 64)
                             | (ck_id.get_least_significant_bits() & (2**64 - 1)))
        state_partition = kafka_partition_for(coordinator_key("sg", topic_id, 0), 3)
        cluster.wait_full_isr(STATE_TOPIC, 60)
        coordinator = cluster.leader_of(STATE_TOPIC, state_partition)
        assert coordinator >= 0
        cluster.brokers[coordinator].kill()
        wait_until(lambda: cluster.leader_of(STATE_TOPIC, state_partition) not in (-1, coordinator), 60,
                   "a new leader of the share state")

        c = share_consumer(cluster.bootstrap, "sg", "sq", log_level=3)
        try:
            msgs = poll_until(c, lambda ms: len({m.offset() for m in ms}) >= total - total // 2, timeout_s=90)
            assert sorted({m.offset() for m in msgs}) == list(range(total // 2, total))
        finally:
            c.close()
        cluster.brokers[coordinator].start()


def test_group_configs_set_through_one_broker_are_honoured_by_the_share_partition_leader(
        zk_connect: str, tmp_path: Path) -> None:
    """The share GROUP configs (`/config/groups/<id>` in ZooKeeper, mirrored by every broker) reach the broker
    leading the share-partition when they are set through another one: `share.record.lock.duration.ms` (a
    frozen member's records come back after its 1 s, not the broker default's 60 s) and
    `share.isolation.level` (an aborted transaction is never delivered)."""
    props = {**PROPS, "group.share.record.lock.duration.ms": "60000",
             "group.share.max.record.lock.duration.ms": "60000"}
    with running_cluster(zk_connect, tmp_path, props=props) as cluster:
        admin = cluster.admin()
        admin.create_topics([NewTopic("sc", 1, 3)])["sc"].result(30)
        cluster.wait_full_isr("sc")
        leader = cluster.leader_of("sc", 0)
        elsewhere = next(b for b in cluster.brokers if b != leader)
        set_group_configs(cluster.brokers[elsewhere].bootstrap, "lock", share_auto_offset_reset="earliest",
                          share_record_lock_duration_ms="1000")
        set_group_configs(cluster.brokers[elsewhere].bootstrap, "rc", share_auto_offset_reset="earliest",
                          share_isolation_level="read_committed")
        produce_around_an_abort(cluster.bootstrap, "sc", "share-cluster-tx")

        proc, held = holding_consumer(cluster.bootstrap, "lock", "sc")
        os.kill(proc.pid, signal.SIGSTOP)  # its connection stays open: only the acquisition lock frees the records
        try:
            c = share_consumer(cluster.bootstrap, "lock", "sc", log_level=3)
            try:
                started = time.monotonic()
                msgs = poll_until(c, lambda ms: set(held) <= {m.offset() for m in ms}, timeout_s=40)
                assert time.monotonic() - started < 20, "the group's 1 s lock, not the broker's 60 s"
                assert {m.delivery_count() for m in msgs if m.offset() in held} == {2}
            finally:
                c.close()
        finally:
            stop_holder(proc)

        assert_reads_the_committed_only(cluster.bootstrap, "rc", "sc")
