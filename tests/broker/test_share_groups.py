"""KIP-932 share groups on one broker, with confluent-kafka's ShareConsumer over real sockets: records shared
among members with no record held by two at once, redelivery after a member dies or freezes, the delivery
limit, REJECT and RELEASE, read_committed, the remote tier, and state that survives a broker restart."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.cluster.test_cluster_metrics import scrape
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
from tests.tiered.harness import tiered_props, wait_until


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", {**SHARE_BROKER_PROPS, "group.share.delivery.count.limit": "3",
                                            "metrics.port": "0"}).start()
    try:
        yield b
    finally:
        b.stop()


def create(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)


def produce(bootstrap: str, topic: str, n: int, start: int = 0, **conf: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    failed: list[object] = []
    for i in range(start, start + n):
        p.produce(topic, value=b"r%05d" % i, partition=0, on_delivery=lambda e, _m: e and failed.append(e))
    assert p.flush(30) == 0 and not failed, failed[:3]


def test_five_members_share_one_partition_and_each_record_goes_to_one(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "q")
    # locks long enough that no record comes back on a slow machine: any second delivery is a bug here
    set_group_configs(broker.bootstrap, "five", share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="30000")
    n = 2000
    seen: list[tuple[int, int, int]] = []  # (offset, member, delivery count)
    lock = threading.Lock()
    stop = threading.Event()

    def member(i: int) -> None:
        c = share_consumer(broker.bootstrap, "five", "q", explicit=True, **{"max.poll.records": "50"})
        try:
            while not stop.is_set():
                for m in c.poll(0.5):
                    assert m.error() is None, m.error()
                    with lock:
                        seen.append((m.offset(), i, m.delivery_count()))
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                c.commit_sync(30)
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(5)]
    for t in threads:
        t.start()
    try:
        time.sleep(4)  # every member joined and was assigned the partition (shared by all five)
        for start in range(0, n, 100):  # records arriving while all five fetch
            produce(broker.bootstrap, "q", 100, start)
            time.sleep(0.05)
        wait_until("every record consumed", lambda: len({o for o, _, _ in seen}) >= n, timeout_s=120)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    counts = Counter(o for o, _, _ in seen)
    assert sorted(counts) == list(range(n))
    assert max(counts.values()) == 1, [o for o, c in counts.items() if c > 1][:10]  # accepted: never again
    assert len({i for _, i, _ in seen}) >= 2, "the partition's records were shared among the members"
    assert {d for _, _, d in seen} == {1}
    metrics = scrape(broker)
    assert metrics['kafka_server_group_coordinator_metrics_group_count{protocol="share"}'] == 1
    assert metrics["kafka_server_share_group_metrics_acquired_records"] == n
    assert metrics["kafka_server_share_group_metrics_acknowledged_records"] == n


def test_a_killed_member_s_records_go_to_another_member(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "k")
    set_group_configs(broker.bootstrap, "kill", share_auto_offset_reset="earliest")
    produce(broker.bootstrap, "k", 100)
    proc, held = holding_consumer(broker.bootstrap, "kill", "k")
    stop_holder(proc)
    c = share_consumer(broker.bootstrap, "kill", "k")
    try:
        msgs = poll_until(c, lambda ms: {m.offset() for m in ms} >= set(range(100)))
        again = {m.offset(): m.delivery_count() for m in msgs if m.offset() in held}
        assert again and set(again.values()) == {2}, again  # redelivered, its second delivery
    finally:
        c.close()


def test_a_frozen_member_s_locks_expire_and_its_records_are_redelivered(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "f")
    set_group_configs(broker.bootstrap, "freeze", share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="1500")
    produce(broker.bootstrap, "f", 50)
    proc, held = holding_consumer(broker.bootstrap, "freeze", "f")
    os.kill(proc.pid, signal.SIGSTOP)  # its connection stays open: only the acquisition lock frees the records
    try:
        c = share_consumer(broker.bootstrap, "freeze", "f")
        try:
            started = time.monotonic()
            msgs = poll_until(c, lambda ms: set(held) <= {m.offset() for m in ms})
            assert time.monotonic() - started < 30
            assert {m.delivery_count() for m in msgs if m.offset() in held} == {2}
        finally:
            c.close()
    finally:
        stop_holder(proc)


def test_released_records_are_archived_at_the_delivery_limit_and_rejected_ones_at_once(
        broker: BrokerProcess) -> None:
    create(broker.bootstrap, "lim")
    set_group_configs(broker.bootstrap, "limit", share_auto_offset_reset="earliest")
    produce(broker.bootstrap, "lim", 10)
    c = share_consumer(broker.bootstrap, "limit", "lim", explicit=True)
    deliveries: Counter[int] = Counter()

    def ack(m: object) -> None:
        offset = m.offset()  # type: ignore[attr-defined]
        deliveries[offset] += 1
        # 0-4 released every time, 5-9 rejected the first time
        c.acknowledge(m, AcknowledgeType.RELEASE if offset < 5 else AcknowledgeType.REJECT)

    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (sum(deliveries.values()) < 5 * 3 + 5):
            for m in c.poll(0.5):
                ack(m)
            c.commit_sync(30)
        time.sleep(2)  # anything still deliverable would come back now
        for m in c.poll(1.0):
            ack(m)
        assert {o: deliveries[o] for o in range(5)} == dict.fromkeys(range(5), 3)  # group.share.delivery.count.limit
        assert {o: deliveries[o] for o in range(5, 10)} == dict.fromkeys(range(5, 10), 1)
    finally:
        c.close()
    produce(broker.bootstrap, "lim", 1, start=10)  # the archived ones never come back; the new one does
    c = share_consumer(broker.bootstrap, "limit", "lim")
    try:
        assert [m.offset() for m in poll_until(c, lambda ms: len(ms) >= 1)] == [10]
    finally:
        c.close()


def test_read_committed_share_groups_skip_aborted_transactions(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "tx")
    set_group_configs(broker.bootstrap, "rc", share_auto_offset_reset="earliest",
                      share_isolation_level="read_committed")
    produce_around_an_abort(broker.bootstrap, "tx", "share-tx")
    assert_reads_the_committed_only(broker.bootstrap, "rc", "tx")


def test_acknowledged_records_stay_acknowledged_across_a_broker_restart(broker: BrokerProcess) -> None:
    create(broker.bootstrap, "r")
    set_group_configs(broker.bootstrap, "restart", share_auto_offset_reset="earliest")
    produce(broker.bootstrap, "r", 100)
    c = share_consumer(broker.bootstrap, "restart", "r", explicit=True)
    accepted: list[int] = []

    def accept_first_half(m: object) -> None:
        offset = m.offset()  # type: ignore[attr-defined]
        if offset < 50:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            accepted.append(offset)
        else:
            c.acknowledge(m, AcknowledgeType.RELEASE)

    try:
        poll_until(c, lambda ms: len(accepted) >= 50, on_message=accept_first_half)
        c.commit_sync(30)
    finally:
        c.close()
    broker.stop()
    broker.start()
    c = share_consumer(broker.bootstrap, "restart", "r")
    try:
        msgs = poll_until(c, lambda ms: len({m.offset() for m in ms}) >= 50)
        time.sleep(1)
        msgs += list(c.poll(1.0))
        assert sorted({m.offset() for m in msgs}) == list(range(50, 100))  # none lost, none accepted again
    finally:
        c.close()


def test_a_share_group_reads_records_only_the_remote_tier_holds(tmp_path: Path) -> None:
    props = {**SHARE_BROKER_PROPS, **tiered_props(tmp_path / "remote")}
    b = BrokerProcess(tmp_path / "broker", props).start()
    try:
        create(b.bootstrap, "t", **{"remote.storage.enable": "true", "segment.bytes": "2048",
                                    "local.retention.ms": "100"})
        produce(b.bootstrap, "t", 600, **{"batch.size": "1000"})  # batches smaller than a segment
        def local_start() -> int:
            return min(int(f.name.split(".")[0]) for f in (b.data_dir / "logs" / "t-0").glob("*.log"))

        wait_until("the first segments only in the remote tier", lambda: local_start() > 100, timeout_s=60)
        set_group_configs(b.bootstrap, "remote", share_auto_offset_reset="earliest")
        c = share_consumer(b.bootstrap, "remote", "t")
        try:
            msgs = poll_until(c, lambda ms: len({m.offset() for m in ms}) >= 600)
            assert sorted({m.offset() for m in msgs}) == list(range(600))
            assert {m.value() for m in msgs if m.offset() == 0} == {b"r00000"}
        finally:
            c.close()
    finally:
        b.stop()
