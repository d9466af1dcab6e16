"""A producer's pipelined acks=all requests on one connection: the second is appended while the first waits
for the followers, and both are answered in request order once they caught up.

Kafka mutes a connection from a request until its answer went out, so each acks=all request pays a whole
replication round trip before the next is read. Strata defers only the wait (``Deferred``, as for diskless
commits): the follower then fetches both appends at once. The follower is frozen (SIGSTOP) to hold the first
answer back; what the leader wrote meanwhile is read from its files.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

from confluent_kafka.admin import NewTopic
from tests.broker.kafka_wire import WireClient
from tests.cluster.harness import running_cluster, wait_until
from tests.cluster.test_zombie_leader import produce_answer, replica_records, send_produce

# a frozen follower stays registered and in the ISR for the few seconds the test holds it
PROPS = {"zookeeper.session.timeout.ms": "20000", "replica.lag.time.max.ms": "20000"}


def test_a_pipelined_acks_all_request_is_appended_while_the_one_before_waits(zk_connect: str,
                                                                              tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, size=2, props=PROPS) as cluster:
        leader = cluster.admin().describe_cluster().result(10).controller.id  # the follower is not the controller
        follower = next(b for b in cluster.brokers if b != leader)
        cluster.admin().create_topics([NewTopic("pipe", 1, replica_assignment=[[leader, follower]], config={
            "min.insync.replicas": "2"})])["pipe"].result(30)
        cluster.wait_full_isr("pipe")
        leader_dir = cluster.brokers[leader].data_dir / "logs" / "pipe-0"
        with WireClient(cluster.brokers[leader].bootstrap, timeout_s=30) as w:
            first = produce_answer(w, send_produce(w, "pipe", [b"warm-up"], acks=-1))
            assert (int(first.error_code), first.base_offset) == (0, 0)

            pid = cluster.brokers[follower].pid()
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                a = send_produce(w, "pipe", [b"a-%d" % i for i in range(5)], acks=-1)
                b = send_produce(w, "pipe", [b"b-%d" % i for i in range(5)], acks=-1)
                # both appended on the leader while neither can be acknowledged
                wait_until(lambda: len(replica_records(leader_dir)) == 11, 10,
                           "the second request appended while the first waits for the follower")
                w.sock.settimeout(0.3)
                try:
                    w.sock.recv(1, socket.MSG_PEEK)
                    raise AssertionError("an acks=all answer went out before the follower had the records")
                except TimeoutError:
                    pass
                w.sock.settimeout(30)
            finally:
                os.kill(pid, signal.SIGCONT)
            answer_a, answer_b = produce_answer(w, a), produce_answer(w, b)  # in request order
        assert (int(answer_a.error_code), answer_a.base_offset) == (0, 1)
        assert (int(answer_b.error_code), answer_b.base_offset) == (0, 6)
        assert [v for _, v in replica_records(leader_dir)] == [b"warm-up", *(b"a-%d" % i for i in range(5)),
                                                               *(b"b-%d" % i for i in range(5))]
