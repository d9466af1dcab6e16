"""``strata tiers`` against a 3-broker cluster: each partition's row comes from its leader, with replicas and ISR
(and, each under its partition, a line per replica: tests/cluster/test_tiers_replicas_cluster.py checks them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import running_cluster, wait_until


def strata_tiers(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", "tiers", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def tiers_json(bootstrap: str) -> dict[str, Any]:
    out = strata_tiers(bootstrap, "--topic", "tt", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_tiers_shows_leader_replicas_and_isr_of_every_partition(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, 3, {"metrics.port": "0"}) as cluster:
        cluster.admin().create_topics([NewTopic("tt", 3, 3)])["tt"].result(30)
        cluster.wait_full_isr("tt")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(30):
            producer.produce("tt", value=b"v%d" % i, partition=i % 3)
        assert producer.flush(30) == 0
        via = cluster.brokers[1].bootstrap

        doc = tiers_json(via)
        meta = cluster.metadata("tt")
        assert sorted(b["broker_id"] for b in doc["brokers"]) == [1, 2, 3]  # every broker: DescribeLogDirs
        assert all("error" not in b for b in doc["brokers"])
        for row in doc["partitions"]:
            p = meta.partitions[row["partition"]]
            assert row["leader"] == p.leader and row["replicas"] == list(p.replicas)
            assert sorted(row["isr"]) == [1, 2, 3]
            assert row["log_end_offset"] == row["high_watermark"] == 10  # the leader's view: all acknowledged
        table = strata_tiers(via)
        assert table.returncode == 0, table.stderr
        lines = [ln for ln in table.stdout.splitlines() if not ln.startswith("  replica ")]
        assert lines[0].split()[:5] == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
        rows = {int(ln.split()[1]): ln.split() for ln in lines[1:] if ln.split()[0] == "tt"}
        assert sorted(rows) == [0, 1, 2] and len(lines) == 4  # no internal topic, no warning
        assert table.stdout.count("  replica ") == 9  # 3 partitions x 3 replicas
        for partition, cells in rows.items():
            p = meta.partitions[partition]
            assert cells[2:5] == [str(p.leader), ",".join(map(str, p.replicas)), cells[4]]
            assert sorted(map(int, cells[4].split(","))) == [1, 2, 3]
            assert cells[8] == "10"  # END

        # broker 3 dies: it leaves every ISR, its partitions get other leaders, and the tool follows them
        cluster.brokers[3].kill()

        def without_3() -> dict[str, Any] | None:
            d = tiers_json(via)
            ok = all(3 not in r["isr"] and r["leader"] in (1, 2) and "log_end_offset" in r for r in d["partitions"])
            return d if ok else None

        doc = wait_until(without_3, 30, "broker 3 out of every ISR in strata tiers")
        assert [b["broker_id"] for b in doc["brokers"] if b["broker_id"] == 3] == []
        assert all(r["replicas"] == list(meta.partitions[r["partition"]].replicas) for r in doc["partitions"])
        assert all(r["log_end_offset"] == 10 for r in doc["partitions"])
        table = strata_tiers(via)
        assert table.returncode == 0, table.stderr
        for ln in table.stdout.splitlines()[1:]:
            if ln.startswith("  replica "):
                continue
            cells = ln.split()
            assert cells[2] in ("1", "2") and "3" not in cells[4].split(",")
