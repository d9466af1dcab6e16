"""KIP-1150's switch of a classic topic to diskless, on one broker with the local-directory store: the
classic part stays readable, new writes go diskless, an idempotent producer carries on across the seal
without a duplicate or a gap, an open transaction spanning the seal commits, and the reverse is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tests.diskless.harness import diskless_broker, wal_objects
from tests.diskless.test_diskless_consolidation import CONSOLIDATING, _read_all, _remote_segments
from tests.tiered.harness import wait_until

DISKLESS = 1500
TOTAL = 500 + DISKLESS + 2


def _alter(admin: AdminClient, topic: str, **configs: str) -> None:
    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(30)


def _wal_start_offset(bootstrap: str, topic: str) -> int:
    """The partition's WAL start as ``strata tiers --json`` reports it: it moves up as the WAL is pruned."""
    out = subprocess.run([sys.executable, "-m", "strata", "tiers", "--bootstrap", bootstrap, "--topic", topic,
                          "--json"], capture_output=True, text=True, timeout=60, check=True).stdout
    (partition,) = json.loads(out)["partitions"]
    return int(partition.get("wal_start_offset", -1))


def test_a_classic_topic_switched_to_diskless_keeps_its_past_and_its_producers(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path, **CONSOLIDATING).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("sw", 1, 1, config={"segment.bytes": "16384"})])["sw"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        for i in range(500):
            p.produce("sw", value=b"classic-%04d" % i, partition=0)
        assert p.flush(30) == 0
        t = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "span", "linger.ms": 5})
        t.init_transactions(30)
        t.begin_transaction()
        t.produce("sw", value=b"txn-before", partition=0)
        assert t.flush(30) == 0  # on the classic log, its transaction open across the seal

        _alter(admin, "sw", **{"diskless.enable": "true"})
        # the same idempotent producer carries on: its sequences continue in the coordinator
        for i in range(DISKLESS):  # about 20 KB: a consolidated segment rolls whatever the batching
            p.produce("sw", value=b"diskless-%04d" % i, partition=0)
        assert p.flush(60) == 0
        assert wal_objects(tmp_path), "the new writes went to WAL objects"
        t.produce("sw", value=b"txn-after", partition=0)
        t.commit_transaction(30)

        values = [m.value() for m in _read_all(b.bootstrap, "sw", TOTAL)]
        assert values[:500] == [b"classic-%04d" % i for i in range(500)]
        assert values.count(b"txn-before") == 1 and values.count(b"txn-after") == 1
        rest = [v for v in values[500:] if not v.startswith(b"txn-")]
        assert rest == [b"diskless-%04d" % i for i in range(DISKLESS)]  # no duplicate, no gap, in order
        committed = [m.value() for m in _read_all(b.bootstrap, "sw", TOTAL, isolation="read_committed")]
        assert sorted(committed) == sorted(values)
        # the classic part is tiered like the consolidated one, the WAL pruned; every record still read from 0
        # (the WAL's start passes the seal at offset 501 once a consolidated segment is tiered and pruned)
        wait_until("the switched topic tiered and its WAL pruned", lambda: _remote_segments(tmp_path)
                   and _wal_start_offset(b.bootstrap, "sw") > 501, 60)
        msgs = _read_all(b.bootstrap, "sw", TOTAL)
        assert [m.value() for m in msgs] == values
        assert [m.offset() for m in msgs] == sorted(m.offset() for m in msgs)
        epochs = {m.leader_epoch() for m in msgs}
        assert len(epochs) == 1, epochs  # the seal's epoch continues the classic one (no truncation seen)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "w"})
        try:
            low, high = c.get_watermark_offsets(CkTopicPartition("sw", 0), timeout=10)
            assert low == 0 and high >= TOTAL
        finally:
            c.close()

        with pytest.raises(KafkaException, match="diskless.enable"):
            _alter(admin, "sw", **{"diskless.enable": "false"})
    finally:
        b.stop()


def test_the_switch_is_refused_with_unclean_leader_election(tmp_path: Path) -> None:
    b = diskless_broker(tmp_path).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("u", 1, 1, config={"unclean.leader.election.enable": "true"})])["u"].result(30)
        with pytest.raises(KafkaException, match="unclean.leader.election.enable"):
            _alter(admin, "u", **{"diskless.enable": "true"})
    finally:
        b.stop()
