"""Consolidation (KIP-1165 as Inkless builds it) on one broker with the local-directory store: diskless
batches replayed into the partition's local log, tiered by the RemoteLogManager, the WAL pruned below the
tiered offset and its objects deleted; every record still read from offset 0, with the partition's local
directory wiped too. Real clients over sockets, the broker as its own process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from tests.cluster.test_cluster_metrics import scrape
from tests.diskless.harness import create_diskless, diskless_broker, wal_objects
from tests.tiered.harness import wait_until

from strata.diskless.reader.complete import DISKLESS_LEADER_EPOCH

CONSOLIDATING = {
    "diskless.produce.commit.interval.ms": "20",
    "diskless.consolidation.interval.ms": "100",
    "diskless.consolidation.prune.interval.ms": "200",
    "diskless.file.cleaner.interval.ms": "200",
    "diskless.file.cleaner.retention.period.ms": "0",
}
N = 3000


def _read_all(bootstrap: str, topic: str, expected: int, isolation: str = "read_uncommitted",
              timeout_s: float = 60) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    try:
        c.assign([CkTopicPartition(topic, 0, 0)])
        out: list = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert not m.error(), m.error()
                out.append(m)
        return out
    finally:
        c.close()


def _tiers(bootstrap: str) -> str:
    return subprocess.run([sys.executable, "-m", "strata", "tiers", "--bootstrap", bootstrap, "--topic", "dl"],
                          capture_output=True, text=True, timeout=60, check=True).stdout


def _remote_segments(tmp: Path) -> list[Path]:
    return [p for p in (tmp / "remote").rglob("*.log") if "diskless" not in p.parts]


def test_wal_is_consolidated_tiered_and_pruned_and_a_wiped_partition_reads_from_offset_0(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path, **CONSOLIDATING).start()
    try:
        create_diskless(b.bootstrap, "dl", **{"segment.bytes": "16384", "local.retention.ms": "1000"})
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        for i in range(N):
            p.produce("dl", value=b"value-%06d" % i, key=b"k%d" % (i % 7), partition=0,
                      headers=[("i", b"%d" % i)])
            if i % 50 == 49:
                assert p.flush(30) == 0  # one WAL object per 50 records at most: many objects to prune
        uploaded = scrape(b)["strata_diskless_Writer_WalObjectsUploadedPerSec_total"]
        assert uploaded >= N // 50, uploaded  # (pruning starts while the producer still writes)

        # the replica replays the WAL into dl-0, the RemoteLogManager tiers its rolled segments, the leader
        # prunes the WAL below the tiered offset and the cleaner deletes the emptied objects (listed)
        wait_until("WAL objects deleted after tiering", lambda: len(wal_objects(tmp_path)) <= 8, 60)
        assert _remote_segments(tmp_path), "consolidated segments in the remote tier"
        table = wait_until("strata tiers shows the consolidation",
                           lambda: next((t for t in [_tiers(b.bootstrap)] if f"up to offset {N}" in t), None), 30)
        assert "diskless:" in table and "in WAL objects from offset" in table, table
        row = next(line.split() for line in table.splitlines() if line.startswith("dl "))
        assert row[5] == "0", table  # LOG-START: the cross-tier log start, not the pruned WAL's start

        # everything from offset 0: remote tier, local log, what is left of the WAL
        msgs = _read_all(b.bootstrap, "dl", N)
        assert [m.offset() for m in msgs] == list(range(N))
        assert [m.value() for m in msgs] == [b"value-%06d" % i for i in range(N)]
        assert msgs[0].headers() == [("i", b"0")] and msgs[-1].headers() == [("i", b"%d" % (N - 1))]
        assert {m.leader_epoch() for m in msgs} == {DISKLESS_LEADER_EPOCH}
        metrics = scrape(b)
        assert metrics["strata_diskless_Consolidation_BatchesPerSec_total"] >= N // 50
        assert metrics["strata_diskless_Consolidation_BatchesPrunedPerSec_total"] > 0
        assert metrics["strata_diskless_Consolidation_LagOffsets"] == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "w"})
        try:
            assert c.get_watermark_offsets(CkTopicPartition("dl", 0), timeout=10) == (0, N)
            # a timestamp lookup finds the first record in the remote tier, which the WAL no longer has
            first_ts = msgs[0].timestamp()[1]
            (found,) = c.offsets_for_times([CkTopicPartition("dl", 0, first_ts)], timeout=10)
            assert found.offset == 0
        finally:
            c.close()
    finally:
        b.stop()

    # the partition's local directory wiped: the replica restarts at the WAL's start, the rest is remote
    shutil.rmtree(b.data_dir / "logs" / "dl-0")
    b.start()
    try:
        msgs = _read_all(b.bootstrap, "dl", N)
        assert [m.offset() for m in msgs] == list(range(N))
        assert [m.value() for m in msgs] == [b"value-%06d" % i for i in range(N)]
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        p.produce("dl", value=b"after", partition=0)
        assert p.flush(30) == 0
        tail = _read_all(b.bootstrap, "dl", N + 1)
        assert len(tail) == N + 1 and tail[-1].value() == b"after" and tail[-1].offset() == N
    finally:
        b.stop()


def test_consolidation_keeps_transactions_and_delete_records_spans_both_tiers(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path, **CONSOLIDATING).start()
    try:
        create_diskless(b.bootstrap, "dl", **{"segment.bytes": "8192", "local.retention.ms": "1000"})
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "consolidate", "linger.ms": 5})
        p.init_transactions(30)
        committed = []
        n = 0
        for t in range(40):
            p.begin_transaction()
            values = [b"t%02d-%03d" % (t, i) for i in range(25)]
            for v in values:
                p.produce("dl", value=v, partition=0)
            assert p.flush(30) == 0  # sent before the abort (librdkafka would purge unsent records instead)
            if t % 3 == 2:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
                committed += values
            n += 26  # 25 records and the marker
        wait_until("the transactions consolidated, tiered and pruned", lambda: len(wal_objects(tmp_path)) <= 8, 60)
        assert _remote_segments(tmp_path)
        # the replayed markers built .txnindex: read_committed over the remote tier drops the aborted records
        got = _read_all(b.bootstrap, "dl", len(committed), isolation="read_committed")
        assert [m.value() for m in got] == committed
        assert list((b.data_dir / "logs" / "dl-0").glob("*.txnindex")) or \
            [q for q in (tmp_path / "remote").rglob("*") if q.name.endswith(".txnindex")]

        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        (done,) = admin.delete_records([CkTopicPartition("dl", 0, 100)]).values()
        assert done.result(30).low_watermark == 100  # below the WAL's start: the cross-tier log start moves
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "w"})
        try:
            assert c.get_watermark_offsets(CkTopicPartition("dl", 0), timeout=10) == (100, n)
        finally:
            c.close()
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "from-0", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        try:  # offset 0 is out of range now: the consumer resets to the new log start
            c.assign([CkTopicPartition("dl", 0, 0)])
            first = wait_until("a record after the reset", lambda: next(
                (m for m in [c.poll(0.5)] if m is not None and not m.error()), None), 30)
            assert first.offset() >= 100
        finally:
            c.close()
    finally:
        b.stop()
