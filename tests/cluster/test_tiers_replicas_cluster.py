"""``strata tiers`` over the Kafka port only, against a 2-broker cluster: one line per replica, leader and follower.

No broker has an admin HTTP endpoint (metrics.port stays -1) and tiering stays off (cluster-mode tiering
is not there yet): the table comes from Metadata, DescribeConfigs, ListOffsets and DescribeLogDirs. Each
replica's local bytes are checked against the segment files in that broker's own log directory.

A follower's local log start is asked with ListOffsets replica_id -2 (Kafka's debugging consumer, which
any replica answers); a broker that answers ListOffsets only as leader says NOT_LEADER_OR_FOLLOWER and
the tool shows ``?``, which this test accepts too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import Cluster, running_cluster, wait_until

from strata.tools.tiers import format_bytes

TOPIC = "rt"
RECORDS = 40  # per partition


def strata_tiers(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", "tiers", "--bootstrap", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def tiers_json(bootstrap: str) -> dict[str, Any]:
    out = strata_tiers(bootstrap, "--topic", TOPIC, "--json")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return json.loads(out.stdout)


def disk_bytes(cluster: Cluster, broker_id: int, partition: int) -> int:
    """What the partition's segment files take on that broker's disk (DescribeLogDirs' partition size)."""
    log_dir = cluster.brokers[broker_id].data_dir / "logs" / f"{TOPIC}-{partition}"
    return sum(f.stat().st_size for f in log_dir.glob("*.log"))


def follower_start_ok(state: dict[str, Any]) -> bool:
    """0 from the follower's own log, or ``?`` while followers answer ListOffsets only as leaders."""
    if state["local_log_start_offset"] is not None:
        return state["local_log_start_offset"] == 0 and "error" not in state
    return "NOT_LEADER_OR_FOLLOWER" in state.get("error", "")


def test_tiers_shows_each_replica_over_the_kafka_port(zk_connect: str, tmp_path: Path) -> None:
    with running_cluster(zk_connect, tmp_path, 2, {"offsets.topic.replication.factor": "2"}) as cluster:
        cluster.admin().create_topics([NewTopic(TOPIC, 2, 2)])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(2 * RECORDS):
            producer.produce(TOPIC, value=b"value-%04d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        via = cluster.brokers[2].bootstrap
        meta = cluster.metadata(TOPIC)

        def caught_up() -> dict[str, Any] | None:  # acks=all: the followers have it all; sizes on disk agree
            d = tiers_json(via)
            ok = all(s["local_bytes"] == disk_bytes(cluster, s["broker_id"], p["partition"]) > 0
                     for p in d["partitions"] for s in p["replica_states"])
            return d if ok else None

        doc = wait_until(caught_up, 30, "every replica's local bytes as on its disk")
        assert [(b["broker_id"], "error" in b, "tiers_url" in b) for b in doc["brokers"]] == [(1, False, False),
                                                                                             (2, False, False)]
        assert doc["topics"] == [{"topic": TOPIC, "configs": {
            "remote.storage.enable": "false", "local.retention.bytes": "-2", "local.retention.ms": "-2",
            "retention.bytes": "-1", "retention.ms": "604800000", "diskless.enable": "false"}}]
        for p in doc["partitions"]:
            m = meta.partitions[p["partition"]]
            assert (p["leader"], p["replicas"], sorted(p["isr"])) == (m.leader, list(m.replicas), [1, 2])
            assert p["remote_storage_enable"] is False
            assert (p["log_start_offset"], p["local_log_start_offset"], p["high_watermark"]) == (0, 0, RECORDS)
            assert p["highest_offset_in_remote_storage"] == -1
            assert "remote_bytes" not in p and "local_segments" not in p  # no admin HTTP endpoint
            states = {s["broker_id"]: s for s in p["replica_states"]}
            assert [s["broker_id"] for s in p["replica_states"]] == list(m.replicas)
            leader, follower = states[m.leader], states[3 - m.leader]
            assert (leader["role"], leader["in_isr"], leader["local_log_start_offset"]) == ("leader", True, 0)
            assert "error" not in leader
            assert (follower["role"], follower["in_isr"]) == ("follower", True)
            assert follower_start_ok(follower), follower
            # a follower holds the leader's batches byte for byte
            assert follower["local_bytes"] == leader["local_bytes"] == p["local_bytes"]

        table = strata_tiers(via, "--topic", TOPIC)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split()[:5] == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
        for p in doc["partitions"]:
            i = next(i for i, ln in enumerate(lines) if ln.split()[:2] == [TOPIC, str(p["partition"])])
            cells = lines[i].split()
            assert cells[2:5] == [str(p["leader"]), ",".join(map(str, p["replicas"])), cells[4]]
            assert sorted(cells[4].split(",")) == ["1", "2"]
            assert cells[5:10] == ["0", "0", "-", str(RECORDS), "-"]  # LOG-START LOCAL-START REMOTE-END END SEGS
            assert cells[-4:] == ["-"] * 4  # not tiered: no remote columns
            size_text = format_bytes(p["local_bytes"])
            sub = lines[i + 1:i + 3]
            for line, r in zip(sub, p["replicas"], strict=True):
                if r == p["leader"]:
                    assert line == f"  replica {r} (leader, in ISR): local log start 0, {size_text} local"
                else:
                    assert line in (f"  replica {r} (follower, in ISR): local log start 0, {size_text} local",
                                    f"  replica {r} (follower, in ISR): local log start ?, {size_text} local "
                                    f"(ListOffsets: NOT_LEADER_OR_FOLLOWER)"), line
        assert not any(ln.startswith(("WARNING", "topic ")) for ln in lines)  # nothing offline, nothing tiered

        # broker 2 dies: broker 1 leads both partitions alone; broker 2's replicas leave the ISR, no longer known
        cluster.brokers[2].kill()
        via = cluster.brokers[1].bootstrap

        def without_2() -> dict[str, Any] | None:
            d = tiers_json(via)
            ok = all(p["leader"] == 1 and p["isr"] == [1] and "high_watermark" in p for p in d["partitions"])
            return d if ok else None

        doc = wait_until(without_2, 30, "broker 2 out of every ISR in strata tiers")
        assert [b["broker_id"] for b in doc["brokers"]] == [1]
        for p in doc["partitions"]:
            states = {s["broker_id"]: s for s in p["replica_states"]}
            assert states[1] == {"broker_id": 1, "role": "leader", "in_isr": True, "local_log_start_offset": 0,
                                 "local_bytes": disk_bytes(cluster, 1, p["partition"])}
            assert states[2] == {"broker_id": 2, "role": "follower", "in_isr": False, "local_log_start_offset": None,
                                 "local_bytes": None, "error": "broker 2 not in the cluster metadata"}
        table = strata_tiers(via, "--topic", TOPIC)
        assert table.returncode == 0, table.stderr
        assert table.stdout.count("  replica 2 (follower, not in ISR): local log start ?, ? local "
                                  "(broker 2 not in the cluster metadata)\n") == 2
