"""KIP-848 consumer groups with real clients: confluent-kafka (librdkafka 2.15) with ``group.protocol=consumer``.

The broker's coordinator computes the assignment (server-side ``uniform``/``range`` assignors) and hands
it out heartbeat by heartbeat, revoking before assigning. These tests check what a user relies on: the
partitions are split between members and none is owned twice, members that join, leave or are killed
with -9 lose and duplicate nothing (exactly once through transactions, committed by member epoch), the
group survives a broker restart (its records are replayed from ``__consumer_offsets``), an empty classic
group is taken over with its offsets, and the admin APIs (ListGroups types, ConsumerGroupDescribe, GROUP
configs) answer as Kafka 4 does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from tests.broker.harness import BrokerProcess
from tests.cluster.test_cluster_metrics import scrape
from tests.support.eos_worker import check_copied_once

REPO = Path(__file__).resolve().parents[2]
FAST_GROUPS = {"group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "4000",
               "group.consumer.min.heartbeat.interval.ms": "200", "group.consumer.heartbeat.interval.ms": "300",
               "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3", "metrics.port": "0"}
GCM = "kafka_server_group_coordinator_metrics_"
WAIT_S = 60.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", FAST_GROUPS).start()
    try:
        yield b
    finally:
        b.stop()


def admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 3})


def create(b: BrokerProcess, topic: str, partitions: int) -> None:
    a = admin(b)  # kept alive until the result is in: a destroyed client fails its futures
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(b: BrokerProcess, topic: str, values: range) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "log_level": 3})
    for i in values:
        p.produce(topic, key=b"%d" % i, value=b"%d" % i)
    assert p.flush(30) == 0


def member(b: BrokerProcess, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3, **extra})


def until(check, what: str, timeout_s: float = WAIT_S, poll: list[Consumer] | None = None):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in poll or ():
            c.poll(0.05)
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def describe(b: BrokerProcess, group: str):  # type: ignore[no-untyped-def]
    a = admin(b)
    return a.describe_consumer_groups([group])[group].result(15)


def test_members_split_the_partitions_and_take_over_on_leave(broker: BrokerProcess) -> None:
    create(broker, "split", 6)
    consumers = [member(broker, "g-split") for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe(["split"])

        def balanced() -> bool:
            owned = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
            flat = [p for o in owned for p in o]
            return sorted(flat) == list(range(6)) and all(len(o) == 2 for o in owned)

        until(balanced, "three members with two partitions each", poll=consumers)
        group = describe(broker, "g-split")
        assert group.type == ConsumerGroupType.CONSUMER and group.state == ConsumerGroupState.STABLE
        assert group.partition_assignor == "uniform" and len(group.members) == 3
        assert sorted(tp.partition for m in group.members for tp in m.assignment.topic_partitions) == list(range(6))
        metrics = scrape(broker)
        assert metrics[GCM + 'group_count{protocol="consumer"}'] == 1
        assert metrics[GCM + 'consumer_group_count{state="Stable"}'] == 1
        assert metrics[GCM + "consumer_group_rebalance_total"] >= 3  # one epoch per join at least

        consumers.pop().close()  # leaves with epoch -1: its two partitions go to the others at once
        until(lambda: sorted(tp.partition for c in consumers for tp in c.assignment()) == list(range(6))
              and all(len(c.assignment()) == 3 for c in consumers), "the leaver's partitions reassigned",
              timeout_s=15, poll=consumers)
    finally:
        for c in consumers:
            c.close()


def test_consumes_commits_and_resumes_after_a_broker_restart(broker: BrokerProcess) -> None:
    create(broker, "resume", 3)
    produce(broker, "resume", range(30))
    c = member(broker, "g-resume")
    c.subscribe(["resume"])
    got: list[int] = []
    until(lambda: got.extend(int(m.value()) for m in c.consume(50, 0.2) if m.error() is None) or len(got) >= 30,
          "30 records")
    c.commit(asynchronous=False)
    epoch_before = describe(broker, "g-resume").members[0].member_id
    broker.restart(hard=True)  # kill -9: the coordinator dies with the member still in the group
    # the group came back from __consumer_offsets: same member, still owning every partition
    restored = describe(broker, "g-resume")
    assert [m.member_id for m in restored.members] == [epoch_before]
    assert sorted(tp.partition for tp in restored.members[0].assignment.topic_partitions) == [0, 1, 2]
    produce(broker, "resume", range(30, 40))
    more: list[int] = []
    until(lambda: more.extend(int(m.value()) for m in c.consume(50, 0.2) if m.error() is None) or len(more) >= 10,
          "the 10 new records after the restart")
    assert sorted(got) == list(range(30)) and sorted(more) == list(range(30, 40))
    c.commit(asynchronous=False)
    c.close()
    a = admin(broker)
    offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g-resume")])["g-resume"]
    assert sum(tp.offset for tp in offsets.result(15).topic_partitions) == 40


def test_a_killed_member_is_fenced_after_its_session_and_its_partitions_move(broker: BrokerProcess) -> None:
    create(broker, "fence", 4)
    script = ("import sys, time\nfrom confluent_kafka import Consumer\n"
              f"c = Consumer({{'bootstrap.servers': '{broker.bootstrap}', 'group.id': 'g-fence', "
              "'group.protocol': 'consumer', 'log_level': 3})\n"
              "c.subscribe(['fence'])\n"
              "while not c.assignment(): c.poll(0.1)\n"
              "print('ready', flush=True)\n"
              "while True: c.poll(0.1)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    survivor = member(broker, "g-fence")
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        survivor.subscribe(["fence"])
        until(lambda: len(survivor.assignment()) == 2, "the partitions split between two members", poll=[survivor])
        proc.kill()  # no leave: only the session timeout (4 s here) can free its partitions
        killed_at = time.monotonic()
        until(lambda: len(survivor.assignment()) == 4, "the dead member's partitions", timeout_s=30,
              poll=[survivor])
        assert time.monotonic() - killed_at >= 3.0  # not before the session timeout
        assert len(describe(broker, "g-fence").members) == 1
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        survivor.close()


def test_exactly_once_while_members_join_leave_and_are_killed(broker: BrokerProcess) -> None:
    """10 members copying a topic in transactions while the group churns: nothing lost, nothing twice."""
    create(broker, "eos-in", 10)
    create(broker, "eos-out", 1)
    total = 3000
    done = threading.Event()

    def feed() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3, "linger.ms": 5})
        for i in range(total):
            p.produce("eos-in", key=b"%d" % i, value=b"%d" % i)
            if i % 100 == 99:
                p.flush(10)
                time.sleep(0.35)  # spread over the churn below
        p.flush(30)
        done.set()

    workers: list[subprocess.Popen[str]] = []
    counter = iter(range(1000))

    def spawn() -> subprocess.Popen[str]:
        n = next(counter)
        proc = subprocess.Popen([sys.executable, "-m", "tests.support.eos_worker", broker.bootstrap, "g-eos",
                                 "consumer", "eos-in", "eos-out", f"eos-{n}"], cwd=REPO, stdout=subprocess.PIPE,
                                text=True)
        workers.append(proc)
        return proc

    try:
        for _ in range(10):
            spawn()
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        live = list(workers)
        for step in range(6):  # churn while the feeder runs: kill -9, graceful leave, new member
            time.sleep(2.0)
            if step % 2 == 0:
                live.pop(0).kill()
            else:
                live.pop(0).send_signal(signal.SIGTERM)
            live.append(spawn())
        feeder.join(WAIT_S)
        assert done.is_set(), "the feeder did not finish"
        check_copied_once(broker.bootstrap, "eos-out", total, source=("eos-in", "g-eos"))
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]


def test_an_empty_classic_group_becomes_a_consumer_group_with_its_offsets(broker: BrokerProcess) -> None:
    create(broker, "upgrade", 2)
    produce(broker, "upgrade", range(20))
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-upgrade", "log_level": 3,
                        "auto.offset.reset": "earliest", "enable.auto.commit": False,
                        "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    classic.subscribe(["upgrade"])
    got: list[int] = []
    until(lambda: got.extend(int(m.value()) for m in classic.consume(20, 0.2) if m.error() is None) or len(got) >= 10,
          "10 records with the classic protocol")
    classic.commit(asynchronous=False)
    classic.close()
    assert describe(broker, "g-upgrade").type == ConsumerGroupType.CLASSIC
    produce(broker, "upgrade", range(20, 30))
    modern = member(broker, "g-upgrade")
    modern.subscribe(["upgrade"])
    rest: list[int] = []
    until(lambda: rest.extend(int(m.value()) for m in modern.consume(50, 0.2) if m.error() is None)
          or len(set(got) | set(rest)) >= 30, "the rest with the consumer protocol")
    assert not set(got) & set(rest), "records the classic group had committed were consumed again"
    assert describe(broker, "g-upgrade").type == ConsumerGroupType.CONSUMER
    modern.close()


def test_admin_apis_list_describe_and_group_configs(broker: BrokerProcess) -> None:
    create(broker, "adm", 2)
    c = member(broker, "g-adm")
    c.subscribe(["^ad.*"])  # a regular expression, resolved by the coordinator
    until(lambda: len(c.assignment()) == 2, "both partitions through the regex", poll=[c])
    a = admin(broker)
    consumer_groups = a.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(15).valid
    assert [(g.group_id, g.type) for g in consumer_groups] == [("g-adm", ConsumerGroupType.CONSUMER)]
    assert a.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(15).valid == []
    group = describe(broker, "g-adm")
    assert group.members[0].client_id and group.state == ConsumerGroupState.STABLE

    ok = ConfigResource(ResourceType.GROUP, "g-adm", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([ok])[ok].result(15)
    entries = a.describe_configs([ConfigResource(ResourceType.GROUP, "g-adm")])
    configs = next(iter(entries.values())).result(15)
    assert configs["consumer.session.timeout.ms"].value == "5000"
    assert configs["consumer.heartbeat.interval.ms"].value == "300"  # the broker's default
    for name, value in (("consumer.session.timeout.ms", "10"), ("no.such.key", "1")):
        bad = ConfigResource(ResourceType.GROUP, "g-adm", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException, match=name):
            a.incremental_alter_configs([bad])[bad].result(15)
    c.close()
    # an empty consumer group can be deleted; its offsets go with it
    a.delete_consumer_groups(["g-adm"])["g-adm"].result(15)
    assert a.list_consumer_groups().result(15).valid == []


def test_disabled_protocol_is_refused(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b", {"group.coordinator.rebalance.protocols": "classic"}).start()
    try:
        create(b, "off", 1)
        c = member(b, "g-off")
        c.subscribe(["off"])
        errors: list[str] = []
        until(lambda: errors.extend(str(m.error()) for m in [c.poll(0.2)] if m is not None and m.error())
              or errors, "the consumer's error")
        assert any("API version not supported: ConsumerGroupHeartbeat" in e for e in errors), errors
        c.close()
    finally:
        b.stop()


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range", "roundrobin"])
def test_online_upgrade_and_downgrade_with_live_members(broker: BrokerProcess, strategy: str) -> None:
    """confluent-kafka's test_consumer_upgrade_downgrade: classic and consumer members in one group, the group
    converting online both ways while 10 partitions stay evenly split and the committed offsets stay."""
    create(broker, "mixed", 10)
    produce(broker, "mixed", range(100))

    def classic_member() -> Consumer:
        return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-mixed", "log_level": 3,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                         "partition.assignment.strategy": strategy})

    live: list[Consumer] = []

    def split(sizes: list[int], group_type: ConsumerGroupType) -> None:
        def ok() -> bool:
            owned = sorted(len(c.assignment()) for c in live)
            flat = sorted(tp.partition for c in live for tp in c.assignment())
            return owned == sorted(sizes) and flat == list(range(10)) and describe(broker, "g-mixed").type == group_type
        until(ok, f"{sizes} partitions in a {group_type} group", poll=live)

    first = classic_member()
    first.subscribe(["mixed"])
    live.append(first)
    split([10], ConsumerGroupType.CLASSIC)
    got: list[int] = []
    until(lambda: got.extend(int(m.value()) for m in first.consume(100, 0.2) if m.error() is None)
          or len(got) >= 100, "the first 100 records")
    first.commit(asynchronous=False)

    modern = member(broker, "g-mixed")  # a consumer-protocol member joins the live classic group: upgrade
    modern.subscribe(["mixed"])
    live.append(modern)
    split([5, 5], ConsumerGroupType.CONSUMER)
    group = describe(broker, "g-mixed")
    assert len(group.members) == 2

    live.remove(first)
    first.close()  # a classic member leaves the consumer group (LeaveGroup)
    split([10], ConsumerGroupType.CONSUMER)

    second = classic_member()  # a classic member joins the consumer group
    second.subscribe(["mixed"])
    live.append(second)
    split([5, 5], ConsumerGroupType.CONSUMER)

    live.remove(modern)
    modern.close()  # the last consumer-protocol member leaves: downgrade to a classic group
    split([10], ConsumerGroupType.CLASSIC)

    produce(broker, "mixed", range(100, 110))
    rest: list[int] = []
    until(lambda: rest.extend(int(m.value()) for m in second.consume(100, 0.2) if m.error() is None)
          or len(rest) >= 10, "the new records")
    assert sorted(rest) == list(range(100, 110)), "the committed offsets did not survive the conversions"
    second.close()


def test_a_join_that_moves_nothing_of_theirs_leaves_the_members_stable_and_committing(tmp_path: Path) -> None:
    """Members whose assignment a join does not change move to the new epoch with the target (no heartbeat
    needed): the group is Stable as soon as the joiner has its partitions, and their commits at the epoch they
    still know are accepted (KIP-1251 assignment epochs). Heartbeats every 10 s: without either, the group
    stays Reconciling and the commit fails with STALE_MEMBER_EPOCH until each member's next heartbeat."""
    b = BrokerProcess(tmp_path / "broker", {**FAST_GROUPS, "group.consumer.heartbeat.interval.ms": "10000",
                                            "group.consumer.session.timeout.ms": "45000",
                                            "group.consumer.min.session.timeout.ms": "45000"}).start()
    old = [member(b, "g-move"), member(b, "g-move")]
    joiner = member(b, "g-move")
    try:
        create(b, "mine", 2)
        create(b, "theirs", 1)
        for c in old:
            c.subscribe(["mine"])
        until(lambda: all(len(c.assignment()) == 1 for c in old) and describe(b, "g-move").state
              == ConsumerGroupState.STABLE, "two stable members", poll=old)
        joiner.subscribe(["theirs"])
        until(lambda: joiner.assignment(), "the joiner's partition", timeout_s=15, poll=[joiner])
        until(lambda: describe(b, "g-move").state == ConsumerGroupState.STABLE, "the group stable", timeout_s=4)
        tp = old[0].assignment()[0]
        committed = old[0].commit(offsets=[TopicPartition("mine", tp.partition, 0)], asynchronous=False)
        assert committed is not None and committed[0].error is None
    finally:
        for c in (*old, joiner):
            c.close()
        b.stop()
