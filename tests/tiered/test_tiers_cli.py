"""``strata tiers`` and ``/metrics`` against a running tiered broker."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

from tests.tiered.harness import TieredBroker
from tests.tiered.test_kafka_scenarios import kv

from strata.tools.tiers import metrics_endpoint


def strata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", *args], capture_output=True, text=True, timeout=60)


def test_tiers_shows_both_tiers_per_partition(tiered: TieredBroker) -> None:
    b = tiered
    b.create_topic("t", max_batches_per_segment=1)
    b.produce("t", 0, kv(0, 4))
    b.wait_offloaded("t", 0, [0, 1, 2])
    b.wait_earliest_local("t", 0, 3)
    out = strata("tiers", "--bootstrap", b.bootstrap, "--json", "--topic", "t")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["partitions"]
    assert row["remote_storage_enable"] is True
    assert (row["log_start_offset"], row["local_log_start_offset"], row["highest_offset_in_remote_storage"],
            row["log_end_offset"]) == (0, 3, 2, 4)
    assert row["remote_segments"] == 3 and row["remote_bytes"] > 0
    assert row["local_segments"] == 1 and row["copy_lag_segments"] == 0
    assert (row["leader"], row["replicas"], row["isr"]) == (1, [1], [1])  # a single broker leads everything
    table = strata("tiers", "--bootstrap", b.bootstrap)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:5] == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
    line = next(ln for ln in table.stdout.splitlines() if ln.split()[:2] == ["t", "0"])
    assert line.split()[2:9] == ["1", "1", "1", "0", "3", "2", "4"]

    host, port = metrics_endpoint(b.bootstrap)
    metrics = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    assert 'kafka_server_BrokerTopicMetrics_RemoteCopyRequestsPerSec_total{topic="t"} 3' in metrics
    assert 'kafka_server_BrokerTopicMetrics_RemoteLogSizeBytes{topic="t"}' in metrics
