"""``strata tiers`` against a real tiered broker that has no admin HTTP endpoint (metrics.port -1).

Everything comes over the Kafka port: offsets from ListOffsets (-2, -4, -5, -1), the topics'
``remote.storage.enable`` and local retention from DescribeConfigs, local bytes from DescribeLogDirs
(checked against the segment files on disk), the remote tier's span in offsets from -5 and -2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.tiered.harness import TieredBroker
from tests.tiered.test_kafka_scenarios import kv

from strata.tools.tiers import format_bytes


def strata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", *args], capture_output=True, text=True, timeout=60)


def test_tiers_over_the_kafka_port_without_metrics(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **{"metrics.port": "-1"}).start()
    try:
        b.create_topic("t", max_batches_per_segment=1)
        b.create_topic("plain", enable_remote=False)
        b.produce("t", 0, kv(0, 4))
        b.produce("plain", 0, kv(0, 3))
        b.wait_offloaded("t", 0, [0, 1, 2])
        b.wait_earliest_local("t", 0, 3)

        def on_disk(topic: str) -> int:
            return sum(f.stat().st_size for f in b.log_dir(topic, 0).glob("*.log"))

        out = strata("tiers", "--bootstrap", b.bootstrap, "--json")
        assert out.returncode == 0, out.stderr
        assert out.stderr == ""
        doc = json.loads(out.stdout)
        assert [(x["broker_id"], "error" in x, "tiers_url" in x) for x in doc["brokers"]] == [(1, False, False)]
        assert [t["topic"] for t in doc["topics"]] == ["plain", "t"]
        assert doc["topics"][1]["configs"]["remote.storage.enable"] == "true"
        assert doc["topics"][1]["configs"]["local.retention.bytes"] == "1"
        rows = {p["topic"]: p for p in doc["partitions"]}
        assert sorted(rows) == ["plain", "t"]  # internal topics (__remote_log_metadata) only with --all
        t = rows["t"]
        assert (t["leader"], t["replicas"], t["isr"], t["remote_storage_enable"]) == (1, [1], [1], True)
        assert (t["log_start_offset"], t["local_log_start_offset"], t["highest_offset_in_remote_storage"],
                t["high_watermark"], t["remote_offsets"]) == (0, 3, 2, 4, 3)
        assert t["local_bytes"] == on_disk("t") > 0
        assert "remote_bytes" not in t and "remote_segments" not in t  # no Kafka API says these
        assert t["replica_states"] == [{"broker_id": 1, "role": "leader", "in_isr": True,
                                        "local_log_start_offset": 3, "local_bytes": on_disk("t")}]
        plain = rows["plain"]
        assert plain["remote_storage_enable"] is False
        assert (plain["log_start_offset"], plain["local_log_start_offset"], plain["high_watermark"]) == (0, 0, 3)
        assert plain["local_bytes"] == on_disk("plain") > 0

        table = strata("tiers", "--bootstrap", b.bootstrap)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOCAL-START",
                                    "REMOTE-END", "END", "LOCAL-SEGS", "LOCAL-BYTES", "REMOTE-OFFSETS",
                                    "REMOTE-SEGS", "REMOTE-BYTES", "COPY-LAG"]
        i = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["t", "0"])
        size = format_bytes(on_disk("t"))
        assert lines[i].split() == ["t", "0", "1", "1", "1", "0", "3", "2", "4", "-", *size.split(), "3", "-", "-",
                                    "-"]
        assert lines[i + 1] == f"  replica 1 (leader, in ISR): local log start 3, {size} local"
        assert ("topic t: remote.storage.enable=true; local retention: local.retention.bytes=1 (1 B), "
                "local.retention.ms=-2 (as retention.ms=604800000)") in lines
        assert not any(ln.startswith("WARNING") for ln in lines)

        assert strata("tiers", "--bootstrap", b.bootstrap, "--topic", "nope").returncode == 1
    finally:
        b.stop()
