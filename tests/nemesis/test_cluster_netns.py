"""A 3-broker cluster on a 3-node ZooKeeper ensemble, every process in a network namespace of its own:
the nemesis suite's set-up, and the first fault it found (issue 26 item 4): a leader cut off from
ZooKeeper, still reachable by clients, kept naming itself leader and taking writes it could not commit.

Root only (``nemesis.net.available``); skipped with the reason elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster.harness import Cluster, wait_until

from nemesis import net
from strata.tools.zookeeper import ZooKeeperEnsemble, zookeeper_available

REASON = net.available() or (None if zookeeper_available() else "ZooKeeper is not installed")
pytestmark = [pytest.mark.skipif(REASON is not None, reason=f"nemesis cluster: {REASON}"),
              pytest.mark.xdist_group("netns")]  # one lab at a time: they share the host's nftables

ZK = ["zk1", "zk2", "zk3"]
BROKERS = ["b1", "b2", "b3"]
TOPIC = "nem"


@pytest.fixture
def netns_cluster(tmp_path: Path) -> Iterator[tuple[net.Lab, Cluster]]:
    with net.Lab([*ZK, *BROKERS]) as lab:
        ensemble = ZooKeeperEnsemble(tmp_path / "zk", hosts=[lab.address(z) for z in ZK],
                                     wraps=[tuple(lab.command(z, [])) for z in ZK])
        ensemble.start()
        try:
            ensemble.wait_ready(90)
            cluster = Cluster(f"{ensemble.connect}/strata", tmp_path, placement=lambda i: (
                lab.address(f"b{i}"), tuple(lab.command(f"b{i}", []))))
            cluster.start()
            try:
                yield lab, cluster
            finally:
                lab.heal()
                cluster.stop()
        finally:
            ensemble.stop()


def leader_seen_by(cluster: Cluster, broker: int) -> int:
    """The leader of the partition in the Metadata answer of ``broker`` alone."""
    admin = AdminClient({"bootstrap.servers": cluster.brokers[broker].bootstrap})
    return admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions[0].leader


def acked_within(bootstrap: str, timeout_s: float) -> bool:
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(timeout_s * 1000),
                  "enable.idempotence": True})
    p.produce(TOPIC, value=b"v", partition=0, on_delivery=lambda e, _m: errors.append(e))
    p.flush(timeout_s + 5)
    return errors == [None]


def test_a_leader_cut_off_from_zookeeper_stops_leading_and_clients_move(
        netns_cluster: tuple[net.Lab, Cluster]) -> None:
    lab, cluster = netns_cluster
    cluster.admin().create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    cluster.wait_full_isr(TOPIC)
    assert acked_within(cluster.bootstrap, 20)

    # The leader loses ZooKeeper, not its clients or its followers. The controller elects another replica once
    # its session expires; its peers tell it so (strata.cluster.isolation), and its own Metadata answers name
    # the new leader: clients move, and writes are acknowledged again through the new leader.
    leader = cluster.leader_of(TOPIC, 0)
    lab.partition([f"b{leader}"], ZK)
    t = time.monotonic()
    other = next(b for b in cluster.brokers if b != leader)
    wait_until(lambda: leader_seen_by(cluster, other) not in (leader, -1), 60, "a new leader")
    new_leader = leader_seen_by(cluster, other)
    wait_until(lambda: leader_seen_by(cluster, leader) == new_leader, 30, "the cut-off broker to name the new leader")
    assert acked_within(cluster.bootstrap, 30)
    moved_s = time.monotonic() - t
    lab.heal()
    wait_until(lambda: sorted(cluster.metadata(TOPIC).partitions[0].isrs) == [1, 2, 3], 60, "full ISR again")

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": TOPIC, "isolation.level": "read_committed"})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"v", b"v"], got
    assert moved_s < 45, moved_s


def test_a_broker_cut_off_from_zookeeper_answers_init_producer_id_at_once(
        netns_cluster: tuple[net.Lab, Cluster]) -> None:
    """A broker with no producer id block cannot take one from ZooKeeper while it is unreachable. It used to
    hold InitProducerId until ZooKeeper came back, so an idempotent producer that asked it could not start for
    the whole fault; then it answered COORDINATOR_LOAD_IN_PROGRESS, but librdkafka asks the least idle broker
    again, often the same one (the flaky end of the test above). Now it answers retriably within a second and
    takes a block from the controller (AllocateProducerIds, as Kafka's brokers do): ids again during the fault."""
    from tests.broker.kafka_wire import WireClient

    lab, cluster = netns_cluster
    cluster.admin().create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    cluster.wait_full_isr(TOPIC)
    lab.partition(["b1"], ZK)  # no producer has started yet: no broker holds a block
    t = time.monotonic()
    with WireClient(cluster.brokers[1].bootstrap, timeout_s=10) as w:
        resp = w.call(22, 4, transactional_id=None, transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
    assert int(resp.error_code) in (0, 14), resp  # an id, or COORDINATOR_LOAD_IN_PROGRESS (retriable)
    assert time.monotonic() - t < 5
    wait_until(lambda: _init_producer_id_error(cluster.brokers[1].bootstrap) == 0, 45,
               "a producer id from b1 while it is cut off from ZooKeeper")
    lab.heal()  # and once ZooKeeper is back, the same broker hands out ids again
    wait_until(lambda: _init_producer_id_error(cluster.brokers[1].bootstrap) == 0, 30, "a producer id from b1")


def _init_producer_id_error(bootstrap: str) -> int:
    from tests.broker.kafka_wire import WireClient

    with WireClient(bootstrap, timeout_s=10) as w:
        return int(w.call(22, 4, transactional_id=None, transaction_timeout=60_000, producer_id=-1,
                          producer_epoch=-1).error_code)
