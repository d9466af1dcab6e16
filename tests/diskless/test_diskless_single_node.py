"""Diskless topics on one broker with the local-directory store, through real clients over sockets."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.kafka_wire import WireClient, produce
from tests.cluster.test_cluster_metrics import scrape
from tests.diskless.harness import create_diskless, diskless_broker, wal_objects

from strata.protocol.records import BatchBuilder


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([CkTopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append(m)
        return out
    finally:
        c.close()


def test_produce_and_consume_every_record_exactly_once_in_order(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path).start()
    try:
        create_diskless(b.bootstrap, "dl", partitions=3)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        acked: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
        base_ts = int(time.time() * 1000) - 60_000  # recent: older than retention.ms (7 days) would be deleted

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            acked[msg.partition()].append((msg.offset(), msg.value()))
        for i in range(3000):
            p.produce("dl", value=b"v%d" % i, key=b"k%d" % i, partition=i % 3, on_delivery=on_delivery,
                      headers=[("h", b"%d" % i)], timestamp=base_ts + i)
            if i % 500 == 0:
                p.poll(0)
        assert p.flush(30) == 0
        for part, records in acked.items():
            assert [o for o, _ in records] == list(range(1000)), part  # contiguous offsets from 0, in order
        msgs = consume_all(b.bootstrap, "dl", 3, 3000)
        assert len(msgs) == 3000
        for part in range(3):
            got = [m for m in msgs if m.partition() == part]
            assert [m.offset() for m in got] == list(range(1000))
            assert [m.value() for m in got] == [v for _, v in acked[part]]
            i0 = int(got[0].value()[1:])
            assert got[0].timestamp()[1] == base_ts + i0
            assert got[0].headers() == [("h", b"%d" % i0)]
        objects = wal_objects(tmp_path)
        assert objects, "the data went to WAL objects in the store"
        metrics = scrape(b)
        uploaded = metrics["strata_diskless_Writer_WalObjectsUploadedPerSec_total"]
        assert uploaded == len(objects) == metrics["strata_diskless_Writer_PutRequestsPerSec_total"]
        # the uploading broker keeps its objects in its fetch cache: reading the tail costs no GET
        assert metrics["strata_diskless_Reader_GetRequestsPerSec_total"] == 0
        assert metrics["strata_diskless_Reader_CacheHitsPerSec_total"] > 0
        assert metrics["strata_diskless_Coordinator_AppliedOffset"] >= uploaded
        assert metrics["strata_diskless_Produce_ProduceLatencyMs_p99"] >= 0
        # strata tiers: the partitions' offsets from the coordinator, their WAL bytes, the consolidated replica
        deadline = time.monotonic() + 30
        while True:
            table = subprocess.run([sys.executable, "-m", "strata", "tiers", "--bootstrap", b.bootstrap, "--topic",
                                    "dl"], capture_output=True, text=True, timeout=60, check=True).stdout
            # the view refreshes every 2 s; the coordinator's WAL figures and the consolidation each on its turn
            if table.count("in WAL objects from offset 0; consolidated into the local log up to offset 1000") == 3 \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert "diskless.enable=true" in table, table
        assert table.count("in WAL objects from offset 0; consolidated into the local log up to offset 1000") == 3, \
            table
        row = next(line.split() for line in table.splitlines() if line.startswith("dl ") and line.split()[1] == "0")
        assert "1000" in row, table  # the end offset
        assert len(objects) < 3000 / 3, "batches of many requests and partitions share objects"
        # the replica's consolidated copy holds the same batches (leader epoch 0), read back by a classic reader
        local = (b.data_dir / "logs" / "dl-0" / "00000000000000000000.log").read_bytes()
        assert all(b"v%d" % i in local for i in range(0, 3000, 3))
    finally:
        b.stop()


def test_restart_keeps_everything_acknowledged(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path).start()
    try:
        create_diskless(b.bootstrap, "dl")
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
        for i in range(200):
            p.produce("dl", value=b"%d" % i)
        assert p.flush(30) == 0
        b.stop()
        b.start()
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
        for i in range(200, 300):
            p.produce("dl", value=b"%d" % i)
        assert p.flush(30) == 0
        msgs = consume_all(b.bootstrap, "dl", 1, 300)
        assert [m.value() for m in msgs] == [b"%d" % i for i in range(300)]
        assert [m.offset() for m in msgs] == list(range(300))
    finally:
        b.stop()


def test_list_offsets_and_log_append_time(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path).start()
    try:
        create_diskless(b.bootstrap, "lat", **{"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
        for i in range(10):
            p.produce("lat", value=b"%d" % i, timestamp=1000)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x"})
        try:
            low, high = c.get_watermark_offsets(CkTopicPartition("lat", 0), timeout=10)
            assert (low, high) == (0, 10)
            (found,) = c.offsets_for_times([CkTopicPartition("lat", 0, before - 60_000)], timeout=10)
            assert found.offset == 0
        finally:
            c.close()
        msgs = consume_all(b.bootstrap, "lat", 1, 10)
        kinds = {m.timestamp()[0] for m in msgs}
        assert kinds == {2}  # TIMESTAMP_LOG_APPEND_TIME
        assert all(before - 1000 <= m.timestamp()[1] <= int(time.time() * 1000) + 1000 for m in msgs)
    finally:
        b.stop()


def test_refused_configs_name_the_key(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        futures = admin.create_topics([NewTopic("c", 1, 1, config={"diskless.enable": "true",
                                                                  "cleanup.policy": "compact"})])
        with pytest.raises(KafkaException, match="diskless.enable"):
            futures["c"].result(30)
    finally:
        b.stop()


def test_retention_and_delete_records_move_the_log_start_and_free_the_objects(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path, **{"diskless.file.cleaner.interval.ms": "200",
                                     "diskless.file.cleaner.retention.period.ms": "0",
                                     "diskless.produce.commit.interval.ms": "20"}).start()
    try:
        create_diskless(b.bootstrap, "old", **{"retention.ms": "3600000"})
        create_diskless(b.bootstrap, "del")
        now = int(time.time() * 1000)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
        for i in range(50):  # written two hours ago by their timestamps: past retention.ms
            p.produce("old", value=b"%d" % i, timestamp=now - 7_200_000)
            assert p.flush(30) == 0
        for i in range(50):
            p.produce("del", value=b"%d" % i)
            assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x"})
        try:
            deadline = time.monotonic() + 30
            while c.get_watermark_offsets(CkTopicPartition("old", 0), timeout=10) != (50, 50):
                assert time.monotonic() < deadline, "retention.ms did not delete the old records"
                time.sleep(0.2)
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            (done,) = admin.delete_records([CkTopicPartition("del", 0, 30)]).values()
            assert done.result(30).low_watermark == 30
            assert c.get_watermark_offsets(CkTopicPartition("del", 0), timeout=10) == (30, 50)
        finally:
            c.close()
        msgs = consume_all(b.bootstrap, "del", 1, 20)
        assert [m.offset() for m in msgs] == list(range(30, 50))
        # the 50 objects of "old" held nothing else: the cleaner deletes them; "del" keeps its last 20
        deadline = time.monotonic() + 30
        while len(wal_objects(tmp_path)) > 20:
            assert time.monotonic() < deadline, f"{len(wal_objects(tmp_path))} WAL objects left"
            time.sleep(0.2)
    finally:
        b.stop()


def test_the_coordinator_snapshots_truncates_its_log_and_a_wiped_state_is_rebuilt_from_the_snapshot(
        tmp_path: Path) -> None:
    b = diskless_broker(tmp_path, **{"diskless.metadata.snapshot.interval.ms": "300",
                                     "diskless.metadata.snapshot.min.commands": "20",
                                     "diskless.metadata.topic.segment.bytes": "4096",
                                     "diskless.produce.commit.interval.ms": "10"}).start()
    snapshots = tmp_path / "remote" / "diskless" / "coordinator"
    try:
        create_diskless(b.bootstrap, "dl")
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
        for i in range(100):
            p.produce("dl", value=b"%d" % i)
            assert p.flush(30) == 0  # one commit each
        deadline = time.monotonic() + 30
        while not list(snapshots.glob("*.sqlite")):
            assert time.monotonic() < deadline, "no snapshot"
            time.sleep(0.2)
        b.stop()
        segments = sorted((b.data_dir / "logs" / "__diskless_metadata-0").glob("*.log"))
        assert int(segments[0].stem) > 0, "the command log was truncated below the snapshot"
        for f in (b.data_dir / "logs").glob("diskless-coordinator-0.sqlite*"):
            f.unlink()  # the replica's state is gone: it must come back from the snapshot and the log's tail
        b.start()
        for i in range(100, 120):
            p.produce("dl", value=b"%d" % i)
        assert p.flush(30) == 0
        msgs = consume_all(b.bootstrap, "dl", 1, 120)
        assert [m.value() for m in msgs] == [b"%d" % i for i in range(120)]
        assert [m.offset() for m in msgs] == list(range(120))
        assert "restored from a snapshot" in b.tail(20000)
        assert len(list(snapshots.glob("*.sqlite"))) <= 3
    finally:
        b.stop()


def test_a_broker_that_cannot_serve_diskless_says_so_instead_of_using_its_empty_local_log(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path).start()
    try:
        create_diskless(b.bootstrap, "dl")
        b.stop()
        b.props["remote.log.storage.system.enable"] = "false"
        b.start()
        with WireClient(b.bootstrap) as w:
            builder = BatchBuilder()
            builder.append(b"v", key=None)
            answer = produce(w, "dl", 0, builder.build())
            assert int(answer.error_code) == 56, answer  # KAFKA_STORAGE_ERROR, retriable
            fetched = w.call(1, 12, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                             session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                             topics=[{"topic": "dl", "partitions": [{
                                 "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                 "last_fetched_epoch": -1, "log_start_offset": -1,
                                 "partition_max_bytes": 1 << 20}]}])
            assert int(fetched.responses[0].partitions[0].error_code) == 56
    finally:
        b.stop()
