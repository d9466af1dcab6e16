"""Unclean leader election, off and on: availability against loss (replication reference 2.1 "Unclean
leader election"). Real broker processes, a real ZooKeeper, real clients.

Three topics, each with the replicas [1, 2] (broker 3 stays up: it keeps a controller and answers
Metadata): the follower 2 is killed and leaves the ISR, more records are acknowledged by the leader
alone, then the leader 1 is killed (the ISR stays [1], no leader) and only 2 comes back.

* ``off`` (the default): offline until its last ISR member returns; nothing acknowledged is lost.
* ``on`` (``unclean.leader.election.enable=true``): 2 leads at once, with the documented loss -- what
  only 1 had is gone, new acks=all writes work, and 1 comes back as a follower truncated to 2's log.
* ``forced``: unclean election off, but an admin asks for it (ElectLeaders UNCLEAN).
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import ElectionType, KafkaError
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.kafka_wire import WireClient
from tests.broker.kafka_wire import produce as raw_produce
from tests.cluster.harness import running_cluster, wait_until
from tests.cluster.test_replication import consume_all, produce
from tests.cluster.test_zombie_leader import replica_records

from strata.protocol.records.builder import BatchBuilder

TOPICS = ("forced", "off", "on")


def test_unclean_election_off_waits_on_loses_and_can_be_forced(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path) as cluster:
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        admin = cluster.admin()
        unclean = {"on": "true"}
        futures = admin.create_topics([NewTopic(t, 1, replica_assignment=[[1, 2]], config={
            "min.insync.replicas": "1", "unclean.leader.election.enable": unclean.get(t, "false")}) for t in TOPICS])
        for f in futures.values():
            f.result(30)
        for t in TOPICS:
            cluster.wait_full_isr(t)
            assert cluster.leader_of(t, 0) == 1
        a = {t: produce(cluster.bootstrap, t, 100)[0] for t in TOPICS}

        b2.kill()  # the follower leaves the ISR
        wait_until(lambda: all(cluster.metadata(t).partitions[0].isrs == [1] for t in TOPICS), 30, "ISR [1]")
        b = {t: produce(cluster.bootstrap, t, 100, start=100)[0] for t in TOPICS}  # only broker 1 has these

        b1.kill()  # the last ISR member: no leader, the ISR stays [1]
        wait_until(lambda: all(cluster.metadata(t).partitions[0].leader == -1 for t in TOPICS), 30, "no leaders")
        assert all(cluster.metadata(t).partitions[0].isrs == [1] for t in TOPICS)

        b2.start()  # only the out-of-sync replica returns
        wait_until(lambda: cluster.leader_of("on", 0) == 2, 30, "broker 2 elected uncleanly for 'on'")
        # the same controller event handled 'forced' and 'off' (partitions in order) and left them offline
        b3_admin = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
        for t in ("forced", "off"):
            p = b3_admin.list_topics(t, timeout=10).topics[t].partitions[0]
            assert (p.leader, p.isrs) == (-1, [1]), t
            assert p.error is not None and p.error.code() == KafkaError.LEADER_NOT_AVAILABLE, t
        with WireClient(b2.bootstrap) as w:
            batch = BatchBuilder()
            batch.append(b"nowhere")
            assert int(raw_produce(w, "off", 0, batch.build()).error_code) == 6  # NOT_LEADER_OR_FOLLOWER

        # 'on': the documented loss, and the partition is writable again
        assert cluster.metadata("on").partitions[0].isrs == [2]
        assert consume_all(cluster.bootstrap, "on", 1)[0] == a["on"]
        c = produce(cluster.bootstrap, "on", 100, start=200)[0]
        assert [o for o, _ in c] == list(range(100, 200))

        # 'forced': an unclean election asked by an admin on a topic with it off
        result = admin.elect_leaders(ElectionType.UNCLEAN, [TP("forced", 0)]).result(30)
        assert list(result.values()) == [None], result
        wait_until(lambda: cluster.leader_of("forced", 0) == 2, 20, "broker 2 leads 'forced'")
        assert consume_all(cluster.bootstrap, "forced", 1)[0] == a["forced"]

        # the last ISR member returns: 'off' comes back whole; on the others it follows and is truncated
        b1.start()
        wait_until(lambda: cluster.leader_of("off", 0) == 1, 30, "broker 1 leads 'off' again")
        for t in TOPICS:
            cluster.wait_full_isr(t)
        assert consume_all(cluster.bootstrap, "off", 1)[0] == a["off"] + b["off"]
        expected = {"off": a["off"] + b["off"], "on": a["on"] + c, "forced": a["forced"]}
        for t in TOPICS:
            for broker in (b1, b2):
                wait_until(lambda t=t, broker=broker: replica_records(broker.data_dir / "logs" / f"{t}-0")
                           == expected[t], 20, f"{t}-0 on {broker.data_dir.name} = {len(expected[t])} records")
        for broker in cluster.brokers.values():
            assert "Traceback" not in broker.log_path.read_text(errors="replace")


def test_turning_unclean_election_on_elects_offline_partitions_at_once(zk_connect: str, tmp_path: Path) -> None:
    """Kafka's controller elects when unclean election is turned on (``TopicUncleanLeaderElectionEnable`` for
    a topic, ``enableDefaultUncleanLeaderElection`` for the broker default), not at the next broker change."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    with running_cluster(zk_connect, tmp_path) as cluster:
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        admin = cluster.admin()
        for f in admin.create_topics([NewTopic(t, 1, replica_assignment=[[1, 2]], config={"min.insync.replicas": "1"})
                                      for t in ("topic-level", "default-level")]).values():
            f.result(30)
        for t in ("topic-level", "default-level"):
            cluster.wait_full_isr(t)
        b2.kill()
        wait_until(lambda: all(cluster.metadata(t).partitions[0].isrs == [1] for t in ("topic-level", "default-level")),
                   30, "ISR [1]")
        b1.kill()
        b2.start()  # out of sync: both partitions stay offline (unclean election off)
        wait_until(lambda: cluster.metadata("topic-level").partitions[0].leader == -1, 30, "offline")
        assert cluster.metadata("default-level").partitions[0].leader == -1

        res = ConfigResource(ConfigResource.Type.TOPIC, "topic-level", incremental_configs=[
            ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(30)
        wait_until(lambda: cluster.leader_of("topic-level", 0) == 2, 20, "broker 2 elected for topic-level")
        assert cluster.metadata("default-level").partitions[0].leader == -1  # its config did not change

        with WireClient(cluster.brokers[3].bootstrap) as w:  # the cluster-wide default (resource "")
            r = w.call(44, 1, validate_only=False, resources=[{"resource_type": 4, "resource_name": "", "configs": [
                {"name": "unclean.leader.election.enable", "config_operation": 0, "value": "true"}]}])
        assert all(int(x.error_code) == 0 for x in r.responses), r
        wait_until(lambda: cluster.leader_of("default-level", 0) == 2, 20, "broker 2 elected for default-level")
