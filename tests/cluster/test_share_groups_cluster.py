"""KIP-932 share groups in a 3-broker cluster: the broker leading the share-partition's state (its
``__share_group_state`` partition, replicated three times) is killed with -9 after half the records were
accepted. The state's new leader replays it: a new member gets exactly the records nobody accepted -- none
lost, none accepted twice.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import AcknowledgeType, Producer, TopicCollection
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import running_cluster, wait_until
from tests.support.share import SHARE_BROKER_PROPS, poll_until, set_group_configs, share_consumer

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
