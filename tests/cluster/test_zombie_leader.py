"""A leader frozen (SIGSTOP) past its ZooKeeper session: the zombie case of the replication reference
(2.1 "acks=all and min.insync.replicas", 2.2 flow 5). Real broker processes, a real ZooKeeper, real clients.

While it is frozen its session expires, the controller elects another leader and acks=all writes go
on there. Right after SIGCONT the zombie still believes it leads for a moment: requests already
queued in its sockets are read first. It may append them (its divergent tail) but must never
acknowledge an acks=all write; then it learns the session is gone, re-registers, follows the new
leader and truncates that tail, so every replica ends with exactly the acknowledged records.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.kafka_wire import WireClient, decode_response
from tests.cluster.harness import running_cluster, wait_until
from tests.cluster.test_replication import consume_all, produce

from strata.log.dump import DumpOptions, EventKind, FileType, dump_paths
from strata.protocol.records.builder import BatchBuilder

PRODUCE = 0


def replica_records(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a replica's partition directory, read from its files
    (``strata dump-log --print-data-log``): what this replica would serve if it led."""
    out = []
    for event in dump_paths([partition_dir], DumpOptions(print_data=True)):
        if event.kind == EventKind.RECORD and event.file_type == FileType.LOG:
            out.append((event.data["offset"], (event.data.get("payload") or "").encode()))
    return out


def send_produce(client: WireClient, topic: str, values: list[bytes], acks: int) -> int:
    batch = BatchBuilder()
    for v in values:
        batch.append(v)
    return client.send(PRODUCE, 9, acks=acks, timeout=5000, transactional_id=None,
                       topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch.build()}]}])


def produce_answer(client: WireClient, correlation: int) -> Any:
    got, body = decode_response(PRODUCE, 9, client.recv_frame())
    assert got == correlation
    return body.responses[0].partition_responses[0]


def test_frozen_leader_cannot_acknowledge_and_rejoins_truncated(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, verbose=True) as cluster:
        # the zombie is the controller too: it must neither acknowledge as leader nor write as controller
        zombie_id = cluster.admin().describe_cluster().result(10).controller.id
        replicas = [zombie_id, *(b for b in cluster.brokers if b != zombie_id)]
        cluster.admin().create_topics([NewTopic("z", 1, replica_assignment=[replicas], config={
            "min.insync.replicas": "2"})])["z"].result(30)
        cluster.wait_full_isr("z")
        assert cluster.leader_of("z", 0) == zombie_id
        before = produce(cluster.bootstrap, "z", 200)[0]
        zombie = cluster.brokers[zombie_id]
        others = [b for b in cluster.brokers if b != zombie_id]
        live = ",".join(cluster.brokers[b].bootstrap for b in others)
        live_admin = AdminClient({"bootstrap.servers": live})

        def state() -> Any:
            return live_admin.list_topics("z", timeout=5).topics["z"].partitions[0]

        # connections opened now: what is sent on them while the broker is frozen waits in its
        # socket buffers and is the first thing it reads after SIGCONT
        w_one, w_all = WireClient(zombie.bootstrap, timeout_s=30), WireClient(zombie.bootstrap, timeout_s=30)
        pid = zombie.pid()
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: (s := state()).leader in others and zombie_id not in s.isrs, 30,
                       "a new leader elected without the frozen one")
            wait_until(lambda: live_admin.list_topics(timeout=5).controller_id in others, 30, "a new controller")
            after = produce(live, "z", 200, start=200)[0]  # acknowledged by the new leader and its ISR
            one = send_produce(w_one, "z", [b"zombie-acks1-%d" % i for i in range(5)], acks=1)
            every = send_produce(w_all, "z", [b"zombie-acksall-%d" % i for i in range(5)], acks=-1)
        finally:
            os.kill(pid, signal.SIGCONT)
        answer_one = produce_answer(w_one, one)
        answer_all = produce_answer(w_all, every)
        w_one.close()
        w_all.close()
        # acks=all: refused (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS...) or timed out, never acknowledged
        assert int(answer_all.error_code) != 0, f"the zombie acknowledged an acks=all write: {answer_all}"

        cluster.wait_full_isr("z")
        acknowledged = sorted(before + after)
        assert [o for o, _ in acknowledged] == list(range(400))
        assert consume_all(cluster.bootstrap, "z", 1)[0] == acknowledged
        # every replica (the zombie included) holds exactly the acknowledged records: its tail is gone
        dirs = {b: cluster.brokers[b].data_dir / "logs" / "z-0" for b in cluster.brokers}
        for b, d in dirs.items():
            wait_until(lambda d=d: replica_records(d) == acknowledged, 20, f"broker {b}'s replica = the acknowledged")

        text = zombie.log_path.read_text(errors="replace")
        assert "ZooKeeper session expired" in text
        assert f"re-registered as broker {zombie_id}" in text
        if int(answer_one.error_code) == 0:  # it appended under its old epoch: that tail was truncated
            assert "z-0: truncating to 200" in text, text[-3000:]
        assert "resigns as controller" in text
        assert "Traceback" not in text
