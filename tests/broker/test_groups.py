"""Consumer groups with real clients over real sockets: rebalancing, committed offsets, admin calls.

Three client libraries share one group (librdkafka via confluent-kafka, kafka-python, aiokafka in
its own event loop), all configured with the round-robin assignor they have in common, so the
broker's protocol selection and every client's JoinGroup/SyncGroup/Heartbeat/OffsetCommit/
OffsetFetch/LeaveGroup dialect are exercised together. Static membership, session-timeout
eviction of a killed member and the admin APIs use real clients too; the protocol corners no
client reaches by itself (FindCoordinator batches, topic-id offsets, v6 DescribeGroups...) are
checked with raw requests. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient

from strata.coordinator.group.classic import GROUP_SUBSCRIBED_TO_TOPIC
from strata.errors import ErrorCode

SESSION_MS = 6000
HEARTBEAT_MS = 500
MAX_POLL_MS = 15000
WAIT_S = 30.0


def wait_until(what: str, cond: Callable[[], bool], timeout: float = WAIT_S, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 0})
    for p in range(partitions):
        for i in range(start, start + per_partition):
            producer.produce(topic, value=f"{p}:{i}".encode(), partition=p)
    assert producer.flush(15) == 0


class Member:
    """One group member consuming in its own thread: records what it got and what it committed.

    ``skip_commit(partition, offset)`` lets a test leave chosen messages uncommitted, to check that
    exactly those are delivered again after the partition moves to another member.
    """

    kind = "?"

    def __init__(self, bootstrap: str, group: str, topic: str,
                 skip_commit: Callable[[int, int], bool] = lambda p, o: False, **extra: object) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.extra = extra
        self.skip_commit = skip_commit
        self.lock = threading.Lock()
        self.consumed: list[tuple[int, int]] = []
        self.committed: list[tuple[int, int]] = []
        self.assignment: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"{self.kind}-member", daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """Close the consumer (which leaves the group) and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.kind} member did not stop within {timeout}s"

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as e:  # reported by the test, not as an unhandled thread exception
            self.errors.append(f"{self.kind}: {e!r}")

    def _got(self, partition: int, offset: int) -> bool:
        """Record a message; True if it should be committed."""
        with self.lock:
            self.consumed.append((partition, offset))
        return not self.skip_commit(partition, offset)

    def _committed(self, partition: int, offset: int) -> None:
        with self.lock:
            self.committed.append((partition, offset))

    def run(self) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    kind = "confluent"

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "log_level": 3,
                      "client.id": "confluent-member", "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "partition.assignment.strategy": "roundrobin", "session.timeout.ms": SESSION_MS,
                      "heartbeat.interval.ms": HEARTBEAT_MS, "max.poll.interval.ms": MAX_POLL_MS, **self.extra})
        try:
            c.subscribe([self.topic])
            while not self._stop.is_set():
                m = c.poll(0.2)
                self.assignment = frozenset(tp.partition for tp in c.assignment())
                if m is None or m.error() is not None:
                    continue
                if self._got(m.partition(), m.offset()):
                    try:
                        c.commit(offsets=[CTopicPartition(self.topic, m.partition(), m.offset() + 1)],
                                 asynchronous=False)
                        self._committed(m.partition(), m.offset())
                    except KafkaException as e:
                        self.errors.append(f"commit failed: {e}")
        finally:
            c.close()


class KafkaPythonMember(Member):
    kind = "kafka-python"

    def run(self) -> None:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.structs import OffsetAndMetadata, TopicPartition

        c = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                          client_id="kafka-python-member", enable_auto_commit=False, auto_offset_reset="earliest",
                          partition_assignment_strategy=[RoundRobinPartitionAssignor],
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                          max_poll_interval_ms=MAX_POLL_MS,
                          # kafka-python may join before its first Metadata answer arrives; as leader it then
                          # assigns nothing ("No partition metadata") and rejoins only when its metadata changes,
                          # which its 5 min default refresh can leave past the test's wait
                          metadata_max_age_ms=1000)
        try:
            while not self._stop.is_set():
                batches = c.poll(timeout_ms=200)
                self.assignment = frozenset(tp.partition for tp in c.assignment())
                for tp, messages in batches.items():
                    for m in messages:
                        if self._got(tp.partition, m.offset):
                            c.commit({TopicPartition(self.topic, tp.partition): OffsetAndMetadata(m.offset + 1, "",
                                                                                                  -1)})
                            self._committed(tp.partition, m.offset)
        finally:
            c.close()


class AiokafkaMember(Member):
    kind = "aiokafka"

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                             client_id="aiokafka-member", enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                             max_poll_interval_ms=MAX_POLL_MS)
        await c.start()
        try:
            while not self._stop.is_set():
                batches = await c.getmany(timeout_ms=200)
                self.assignment = frozenset(tp.partition for tp in c.assignment())
                for tp, messages in batches.items():
                    for m in messages:
                        if self._got(tp.partition, m.offset):
                            await c.commit({TopicPartition(self.topic, tp.partition): m.offset + 1})
                            self._committed(tp.partition, m.offset)
        finally:
            await c.stop()


def describe(bootstrap: str, group: str) -> object:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return admin.describe_consumer_groups([group])[group].result(15)


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def test_mixed_client_group_splits_partitions_and_hands_over_committed_offsets(broker: BrokerProcess) -> None:
    topic, group, n = "mixed", "mixed-group", 6
    create_topic(broker.bootstrap, topic, n)
    per_partition = 10
    last = per_partition - 1
    kp_partitions: list[frozenset[int]] = []

    def leave_last_uncommitted(partition: int, offset: int) -> bool:
        return offset == last  # the leaving member never commits the last message of its partitions

    members: list[Member] = [ConfluentMember(broker.bootstrap, group, topic),
                             KafkaPythonMember(broker.bootstrap, group, topic, skip_commit=leave_last_uncommitted),
                             AiokafkaMember(broker.bootstrap, group, topic)]
    confluent, kp, aio = members
    try:
        for m in members:
            m.start()
        # Three clients joining one by one rebalance up to three times, each bounded by the rebalance timeout
        # (MAX_POLL_MS, 15 s) when a member is slow to rejoin: on a loaded machine 30 s was too short once.
        wait_until("3 members with 2 partitions each",
                   lambda: sorted(len(m.assignment) for m in members) == [2, 2, 2]
                   and frozenset().union(*(m.assignment for m in members)) == frozenset(range(n)), timeout=60)
        desc = describe(broker.bootstrap, group)
        assert desc.state.name == "STABLE" and desc.partition_assignor == "roundrobin"
        assert sorted(m.client_id for m in desc.members) == ["aiokafka-member", "confluent-member",
                                                            "kafka-python-member"]
        kp_partitions.append(kp.assignment)

        produce(broker.bootstrap, topic, n, per_partition)
        wait_until("every message of batch 1 consumed",
                   lambda: sum(len(m.consumed) for m in members) >= n * per_partition)
        expected_commits = {(p, o) for p in range(n) for o in range(per_partition)} - \
            {(p, last) for p in kp_partitions[0]}
        wait_until("batch 1 committed", lambda: {x for m in members for x in m.committed} == expected_commits)
        for m in members:  # each member got exactly its own partitions
            assert {p for p, _ in m.consumed} == m.assignment, m.kind

        kp.stop()  # LeaveGroup: its partitions move to the two others
        wait_until("2 members with 3 partitions each",
                   lambda: sorted(len(m.assignment) for m in (confluent, aio)) == [3, 3]
                   and confluent.assignment | aio.assignment == frozenset(range(n)))
        produce(broker.bootstrap, topic, n, per_partition, start=per_partition)
        total = 2 * n * per_partition + len(kp_partitions[0])  # + the redelivered uncommitted ones
        wait_until("batch 2 consumed", lambda: sum(len(m.consumed) for m in members) >= total)
        time.sleep(0.5)  # nothing more may arrive
        delivered = Counter(x for m in members for x in m.consumed)
        assert set(delivered) == {(p, o) for p in range(n) for o in range(2 * per_partition)}, "a gap"
        redelivered = {x for x, count in delivered.items() if count > 1}
        assert redelivered == {(p, last) for p in kp_partitions[0]}, "only uncommitted messages come again"
        assert all(count <= 2 for count in delivered.values())
        offsets = committed_offsets(broker.bootstrap, group)
        assert offsets == {(topic, p): 2 * per_partition for p in range(n)}
    finally:
        for m in members:
            if m._thread.is_alive():
                m.stop()
    for m in members:
        assert not [e for e in m.errors if "commit failed" not in e], m.errors


def test_admin_lists_describes_and_deletes_groups(broker: BrokerProcess) -> None:
    topic = "admin-groups"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 2, 3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})

    active = ConfluentMember(broker.bootstrap, "busy", topic).start()
    try:
        # A group that only commits (no membership) is a "simple" group; it is Empty.
        simple = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "idle", "log_level": 3})
        simple.commit(offsets=[CTopicPartition(topic, 0, 2)], asynchronous=False)
        simple.close()
        wait_until("busy group stable with both partitions", lambda: len(active.assignment) == 2)

        listed = admin.list_consumer_groups().result(15)
        assert not listed.errors
        states = {g.group_id: g.state.name for g in listed.valid}
        assert states == {"busy": "STABLE", "idle": "EMPTY"}
        from confluent_kafka import ConsumerGroupState
        only_empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(15)
        assert [g.group_id for g in only_empty.valid] == ["idle"]

        described = {g: f.result(15) for g, f in admin.describe_consumer_groups(["busy", "idle"]).items()}
        busy = described["busy"]
        assert busy.state.name == "STABLE" and len(busy.members) == 1
        assert sorted(tp.partition for tp in busy.members[0].assignment.topic_partitions) == [0, 1]
        assert busy.members[0].client_id == "confluent-member" and busy.members[0].host == "/127.0.0.1"
        assert described["idle"].state.name == "EMPTY" and described["idle"].members == []
        assert described["idle"].is_simple_consumer_group

        futures = admin.delete_consumer_groups(["busy", "idle", "never-existed"])
        with pytest.raises(KafkaException) as non_empty:
            futures["busy"].result(15)
        assert non_empty.value.args[0].name() == "NON_EMPTY_GROUP"
        futures["idle"].result(15)
        with pytest.raises(KafkaException) as missing:
            futures["never-existed"].result(15)
        assert missing.value.args[0].name() == "GROUP_ID_NOT_FOUND"
    finally:
        active.stop()
    # Once its member left, the group is Empty and can go; its offsets go with it.
    admin.delete_consumer_groups(["busy"])["busy"].result(15)
    assert admin.list_consumer_groups().result(15).valid == []
    assert committed_offsets(broker.bootstrap, "idle") == {}


KAFKA_PYTHON_MEMBER = """
import sys, time
from kafka import KafkaConsumer
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
c = KafkaConsumer(sys.argv[2], bootstrap_servers=sys.argv[1], group_id=sys.argv[3], client_id="doomed",
                  enable_auto_commit=False, partition_assignment_strategy=[RoundRobinPartitionAssignor],
                  session_timeout_ms=int(sys.argv[4]), heartbeat_interval_ms=500, max_poll_interval_ms=15000,
                  # kafka-python may lead a join before its first Metadata answer and assign nothing, then rejoin
                  # only at its next metadata refresh (5 min by default): on a loaded machine, past the test's wait
                  metadata_max_age_ms=1000)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    c.poll(timeout_ms=200)
    print("assigned", sorted(tp.partition for tp in c.assignment()), flush=True)
"""


def test_member_that_stops_heartbeating_is_evicted(broker: BrokerProcess) -> None:
    topic, group = "evict", "evict-group"
    create_topic(broker.bootstrap, topic, 4)
    doomed = subprocess.Popen([sys.executable, "-c", KAFKA_PYTHON_MEMBER, broker.bootstrap, topic, group,
                               str(SESSION_MS)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    survivor = ConfluentMember(broker.bootstrap, group, topic)
    try:
        assert doomed.stdout is not None
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # the subprocess owns everything first
            if doomed.stdout.readline().strip() == "assigned [0, 1, 2, 3]":
                break
        else:
            raise AssertionError("the kafka-python member never got its partitions")
        survivor.start()
        wait_until("partitions split between the two members", lambda: len(survivor.assignment) == 2)
        doomed.send_signal(signal.SIGKILL)  # no LeaveGroup, no more heartbeats
        doomed.wait(10)
        killed_at = time.monotonic()
        wait_until("the survivor owns every partition", lambda: len(survivor.assignment) == 4,
                   timeout=SESSION_MS / 1000 + 20)
        took = time.monotonic() - killed_at
        assert took >= SESSION_MS / 1000 - 1.5, f"reassigned after {took:.1f}s: before the session timeout"
        desc = describe(broker.bootstrap, group)
        assert [m.client_id for m in desc.members] == ["confluent-member"]
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
        if doomed.stdout is not None:
            doomed.stdout.close()
        survivor.stop()
    assert survivor.errors == []


def generation_of(bootstrap: str, group: str, member_id: str) -> int:
    """The group's generation, found the way a heartbeat would: the one it does not call ILLEGAL."""
    with WireClient(bootstrap) as w:
        for generation in range(1, 50):
            code = int(w.call(12, 4, group_id=group, generation_id=generation, member_id=member_id,
                              group_instance_id=None).error_code)
            if code != ErrorCode.ILLEGAL_GENERATION:
                assert code == ErrorCode.NONE, code
                return generation
    raise AssertionError("no generation accepted")


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(broker: BrokerProcess) -> None:
    topic, group = "static", "static-group"
    create_topic(broker.bootstrap, topic, 4)
    static = ConfluentMember(broker.bootstrap, group, topic, **{"group.instance.id": "instance-1",
                                                                 "client.id": "static-1"}).start()
    dynamic = ConfluentMember(broker.bootstrap, group, topic).start()
    replacement: Member | None = None
    try:
        wait_until("two members with two partitions each",
                   lambda: len(static.assignment) == len(dynamic.assignment) == 2)
        before = describe(broker.bootstrap, group)
        dynamic_id = next(m.member_id for m in before.members if m.group_instance_id is None)
        generation = generation_of(broker.bootstrap, group, dynamic_id)
        owned = static.assignment
        static.stop()  # a static member does not leave on close: its partitions wait for it
        desc = describe(broker.bootstrap, group)
        assert desc.state.name == "STABLE" and len(desc.members) == 2
        replacement = ConfluentMember(broker.bootstrap, group, topic, **{"group.instance.id": "instance-1",
                                                                          "client.id": "static-2"}).start()
        wait_until("the restarted static member owns its old partitions", lambda: replacement.assignment == owned)
        after = describe(broker.bootstrap, group)
        assert after.state.name == "STABLE"
        assert {m.group_instance_id for m in after.members} == {"instance-1", None}
        static_ids = {m.member_id for m in before.members if m.group_instance_id == "instance-1"}
        assert static_ids.isdisjoint(m.member_id for m in after.members)  # a new member id replaced the old
        assert dynamic.assignment == frozenset(range(4)) - owned
        assert generation_of(broker.bootstrap, group, dynamic_id) == generation  # no rebalance happened
    finally:
        for m in (static, dynamic, replacement):
            if m is not None and m._thread.is_alive():
                m.stop()
    assert dynamic.errors == []


# -- wire-level corners no client library reaches on its own -------------------------------------

def test_protocol_corners_over_the_wire(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "wire", 2)
    host, port = broker.bootstrap.rsplit(":", 1)
    with WireClient(broker.bootstrap) as w:
        # FindCoordinator: single key (v0-v3) and batches (v4+); a single node coordinates transactions
        # too, a share key needs v6 (KeyType 2), an empty transactional id is refused.
        v0 = w.call(10, 0, key="g")
        assert (int(v0.error_code), v0.host, v0.port) == (0, host, int(port))
        v3 = w.call(10, 3, key="tx", key_type=1)
        assert (int(v3.error_code), v3.host, v3.port) == (0, host, int(port))
        assert int(w.call(10, 3, key="", key_type=1).error_code) == ErrorCode.INVALID_REQUEST
        assert int(w.call(10, 3, key="s", key_type=2).error_code) == ErrorCode.INVALID_REQUEST  # SHARE needs v6
        v4 = w.call(10, 4, key_type=0, coordinator_keys=["a", "b"])
        assert [(c.key, int(c.error_code), c.port) for c in v4.coordinators] == [("a", 0, int(port)),
                                                                               ("b", 0, int(port))]

        # JoinGroup v9: MEMBER_ID_REQUIRED first, then a generation; v0 (no rebalance timeout) is refused
        # a session timeout below group.min.session.timeout.ms.
        protocols = [{"name": "range", "metadata": b"m"}]
        first = w.call(11, 9, group_id="wire-g", session_timeout=SESSION_MS, rebalance_timeout=10_000,
                       member_id="", group_instance_id=None, protocol_type="consumer", protocols=protocols,
                       reason=None)
        assert int(first.error_code) == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        joined = w.call(11, 9, group_id="wire-g", session_timeout=SESSION_MS, rebalance_timeout=10_000,
                        member_id=first.member_id, group_instance_id=None, protocol_type="consumer",
                        protocols=protocols, reason=None)
        assert int(joined.error_code) == 0 and joined.generation_id == 1 and joined.leader == first.member_id
        assert joined.protocol_name == "range" and [m.member_id for m in joined.members] == [first.member_id]
        short = w.call(11, 0, group_id="wire-g", session_timeout=100, member_id="", protocol_type="consumer",
                       protocols=protocols)
        assert int(short.error_code) == ErrorCode.INVALID_SESSION_TIMEOUT
        mid = first.member_id
        synced = w.call(14, 5, group_id="wire-g", generation_id=1, member_id=mid, group_instance_id=None,
                        protocol_type="consumer", protocol_name="range",
                        assignments=[{"member_id": mid, "assignment": b"A"}])
        assert (int(synced.error_code), synced.assignment, synced.protocol_name) == (0, b"A", "range")
        assert int(w.call(12, 4, group_id="wire-g", generation_id=0, member_id=mid,
                          group_instance_id=None).error_code) == ErrorCode.ILLEGAL_GENERATION

        # OffsetCommit v10 and OffsetFetch v10 name topics by id; v8 fetches several groups at once.
        topic_id = w.call(3, 12, topics=[{"name": "wire", "topic_id": None}], allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False).topics[0].topic_id
        unknown_id = uuid.uuid4()
        committed = w.call(8, 10, group_id="wire-g", generation_id_or_member_epoch=1, member_id=mid,
                           group_instance_id=None, topics=[
                               {"topic_id": topic_id, "partitions": [
                                   {"partition_index": 1, "committed_offset": 5, "committed_leader_epoch": 0,
                                    "committed_metadata": "md"},
                                   {"partition_index": 9, "committed_offset": 5, "committed_leader_epoch": 0,
                                    "committed_metadata": None}]},
                               {"topic_id": unknown_id, "partitions": [
                                   {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                    "committed_metadata": None}]}])
        assert [[int(p.error_code) for p in t.partitions] for t in committed.topics] == [
            [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], [ErrorCode.UNKNOWN_TOPIC_ID]]
        fetched = w.call(9, 10, require_stable=True, groups=[
            {"group_id": "wire-g", "member_id": None, "member_epoch": -1,
             "topics": [{"topic_id": topic_id, "partition_indexes": [0, 1]}]},
            {"group_id": "nobody", "member_id": None, "member_epoch": -1, "topics": None}])
        g1, g2 = fetched.groups
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in g1.topics[0].partitions] == [
            (0, -1, ""), (1, 5, "md")]
        assert g1.topics[0].topic_id == topic_id and g2.topics == () and int(g2.error_code) == 0
        by_name = w.call(9, 8, require_stable=False, groups=[{"group_id": "wire-g", "topics": None}])
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in by_name.groups[0].topics] == [
            ("wire", [5])]
        old = w.call(9, 1, group_id="wire-g", topics=[{"name": "wire", "partition_indexes": [1]}])
        assert old.topics[0].partitions[0].committed_offset == 5

        # ListGroups v5 with state and type filters; DescribeGroups v6 of a missing group.
        listed = w.call(16, 5, states_filter=["STABLE"], types_filter=["classic"])
        assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [("wire-g", "Stable",
                                                                                      "classic")]
        assert w.call(16, 5, states_filter=[], types_filter=["consumer"]).groups == ()
        missing = w.call(15, 6, groups=["missing"], include_authorized_operations=True).groups[0]
        assert int(missing.error_code) == ErrorCode.GROUP_ID_NOT_FOUND and missing.group_state == "Dead"
        assert w.call(15, 5, groups=["missing"], include_authorized_operations=False).groups[0].group_state == "Dead"

        # OffsetDelete while a member consumes: refused for a subscribed topic only.
        od = w.call(47, 0, group_id="wire-g", topics=[{"name": "wire", "partitions": [{"partition_index": 1}]}])
        assert int(od.error_code) == 0  # "m" is no consumer subscription: topics unknown, treated as subscribed
        assert int(od.topics[0].partitions[0].error_code) == GROUP_SUBSCRIBED_TO_TOPIC

        # LeaveGroup v5 batch: one real member, one stranger; then the group is Empty and deletable.
        left = w.call(13, 5, group_id="wire-g", members=[
            {"member_id": mid, "group_instance_id": None, "reason": "done"},
            {"member_id": "stranger", "group_instance_id": None, "reason": None}])
        assert [int(m.error_code) for m in left.members] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
        od = w.call(47, 0, group_id="wire-g", topics=[{"name": "wire", "partitions": [{"partition_index": 1}]}])
        assert int(od.topics[0].partitions[0].error_code) == 0
        assert w.call(9, 8, require_stable=False, groups=[{"group_id": "wire-g", "topics": None}]).groups[0].topics \
            == ()
        deleted = w.call(42, 2, groups_names=["wire-g", "wire-g-2"])
        assert [(r.group_id, int(r.error_code)) for r in deleted.results] == [
            ("wire-g", 0), ("wire-g-2", ErrorCode.GROUP_ID_NOT_FOUND)]

