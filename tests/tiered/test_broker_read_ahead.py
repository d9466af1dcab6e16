"""Read-ahead of remote segments through a real broker and a real consumer: every remote segment is read
from the store once, the consumer's fetches after the first find their window ready (the broker's
metrics say so), and ``remote.log.reader.prefetch.total.size.bytes=0`` turns it off.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from tests.tiered.harness import TieredBroker

from strata.tools.tiers import metrics_endpoint

PREFIX = "kafka_log_remote_RemoteLogManager_RemoteLogReaderPrefetch"


def metric(b: TieredBroker, name: str) -> float:
    host, port = metrics_endpoint(b.bootstrap)
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def offload(b: TieredBroker, segments: int) -> None:
    b.create_topic("t", max_batches_per_segment=1)
    b.produce("t", 0, [(f"k{i}", f"v{i}") for i in range(segments + 1)])
    b.wait_offloaded("t", 0, list(range(segments)))
    b.wait_earliest_local("t", 0, segments)


def test_a_consumer_reads_each_remote_segment_once_and_hits_the_read_ahead(tiered: TieredBroker) -> None:
    b = tiered
    offload(b, 6)
    got = b.consume("t", 0, 0, 7)
    assert [(o, k, v) for o, k, v in got] == [(o, f"k{o}", f"v{o}") for o in range(7)]
    fetches = b.events("FETCH_SEGMENT", "t", 0)
    assert sorted(e["start_offset"] for e in fetches) == list(range(6))  # each segment read once
    hits, misses = metric(b, f"{PREFIX}HitsPerSec_total"), metric(b, f"{PREFIX}MissesPerSec_total")
    assert misses >= 1 and hits >= 1 and hits + misses >= 6


def test_read_ahead_off(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **{"remote.log.reader.prefetch.total.size.bytes": "0"}).start()
    try:
        offload(b, 3)
        assert len(b.consume("t", 0, 0, 4)) == 4
        assert len(b.events("FETCH_SEGMENT", "t", 0)) == 3
        assert metric(b, f"{PREFIX}HitsPerSec_total") == 0 and metric(b, f"{PREFIX}MissesPerSec_total") == 0
        assert metric(b, f"{PREFIX}Bytes") == 0
    finally:
        b.stop()
