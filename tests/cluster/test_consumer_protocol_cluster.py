"""KIP-848 consumer groups in a 3-broker cluster: the coordinator dies mid-run and nothing is lost or doubled.

Four consume-transform-produce members (``tests/support/eos_worker.py``, ``group.protocol=consumer``)
copy a replicated topic in transactions while the broker coordinating their group is killed with -9.
The group's records are in ``__consumer_offsets`` with acks=all, so the partition's new leader replays
the same group (same epoch or later, same members) and the members carry on heartbeating there: the
output, read with read_committed, holds every input record exactly once.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster.harness import running_cluster, wait_until
from tests.support.eos_worker import check_copied_once

REPO = Path(__file__).resolve().parents[2]
PROPS = {"group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000",
         "group.consumer.min.heartbeat.interval.ms": "200", "group.consumer.heartbeat.interval.ms": "500",
         "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


def test_consumer_group_survives_its_coordinator(zk_connect: str, tmp_path: Path) -> None:
    total = 2000
    with running_cluster(zk_connect, tmp_path, props=PROPS) as cluster:
        admin = cluster.admin()
        for name, partitions in (("kin", 6), ("kout", 1)):
            admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])[name].result(30)
            cluster.wait_full_isr(name)
        workers = [subprocess.Popen([sys.executable, "-m", "tests.support.eos_worker", cluster.bootstrap, "g-kip848",
                                     "consumer", "kin", "kout", f"kip848-{n}"], cwd=REPO, stdout=subprocess.PIPE,
                                    text=True) for n in range(4)]
        done = threading.Event()

        def feed() -> None:
            p = Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 3, "acks": "all"})
            for i in range(total):
                p.produce("kin", key=b"%d" % i, value=b"%d" % i)
                if i % 100 == 99:
                    p.flush(30)
                    time.sleep(0.3)
            p.flush(60)
            done.set()

        try:
            for w in workers:
                assert w.stdout is not None and w.stdout.readline().strip() == "ready"
            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            time.sleep(2)

            def described():  # type: ignore[no-untyped-def]
                a = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
                return a.describe_consumer_groups(["g-kip848"])["g-kip848"].result(10)

            before = wait_until(lambda: (g := described()) and len(g.members) == 4 and g, 60, "4 members")
            cluster.wait_full_isr("__consumer_offsets", 60)
            coordinator = before.coordinator.id
            cluster.brokers[coordinator].kill()
            after = wait_until(lambda: (g := described()) and g.coordinator.id != coordinator and g, 60,
                               "the group at a new coordinator")
            # the group was replayed, not recreated: its members are still there (no rejoin from scratch)
            assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
            feeder.join(120)
            assert done.is_set(), "the feeder did not finish"
            cluster.brokers[coordinator].start()

            check_copied_once(cluster.bootstrap, "kout", total, 120, ("kin", "g-kip848"))
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                w.wait()
                w.stdout.close()  # type: ignore[union-attr]
