"""The broker's background scrubber on a real broker (``remote.log.scrubber.*``, ``strata.tiered.scrubber``):
a byte flipped in a stored format v2 ``.log`` is found without any consumer reading it - one WARNING in the
broker log, the ``RemoteLogScrubberFindings`` gauge at 1 for the topic, ``strata tiers`` warning about the
partition - while the bytes-scrubbed counter grows; with ``remote.log.scrubber.bytes.per.second=0`` nothing is
read at all."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from tests.support.keys import v2_broker_props
from tests.support.segments import flip
from tests.tiered.harness import WAIT_S, TieredBroker, wait_until
from tests.tiered.test_kafka_scenarios import kv

from strata.tools.tiers import metrics_endpoint

TOPIC = "scrubbed"
SEGMENT_BYTES = 16 * 1024
METRICS = "kafka_server_BrokerTopicMetrics"


def strata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", *args], capture_output=True, text=True, timeout=60)


def metrics_text(b: TieredBroker) -> str:
    host, port = metrics_endpoint(b.bootstrap)
    return urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()


def metric(text: str, name: str, topic: str | None = TOPIC) -> float | None:
    labels = f'{{topic="{topic}"}}' if topic is not None else ""
    m = re.search(rf"^{re.escape(f'{METRICS}_{name}{labels}')} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def tier_row(b: TieredBroker) -> dict[str, object]:
    host, port = metrics_endpoint(b.bootstrap)
    doc = json.loads(urllib.request.urlopen(f"http://{host}:{port}/v1/tiers", timeout=10).read())
    return next(r for r in doc["partitions"] if (r["topic"], r["partition"]) == (TOPIC, 0))


def remote_files(b: TieredBroker, suffix: str) -> list[Path]:
    return sorted(p for p in b.remote_dir.rglob(f"*.{suffix}") if p.parent.parent.name.startswith(f"{TOPIC}-"))


def produce(b: TieredBroker, records: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": SEGMENT_BYTES // 4})
    errors: list[object] = []
    for i in range(records):
        p.produce(TOPIC, key=b"key-%06d" % i, value=b"value-%06d " % i + b"x" * 200, partition=0,
                  on_delivery=lambda err, _: errors.append(err) if err else None)
    assert p.flush(WAIT_S) == 0
    assert not errors, errors[:3]


def scrubber_warnings(b: TieredBroker) -> list[str]:
    return [ln for ln in b.broker.log_path.read_text(errors="replace").splitlines()
            if "remote log scrubber" in ln and "WARNING" in ln]



def test_a_flipped_byte_in_a_stored_segment_is_found_logged_counted_and_shown_by_tiers(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **v2_broker_props(tmp_path / "keys"), **{
        "remote.log.scrubber.bytes.per.second": str(100 * 1024**2),
        "remote.log.scrubber.interval.ms": "500"}).start()
    try:
        b.create_topic(TOPIC, max_batches_per_segment=10_000, segment_bytes=str(SEGMENT_BYTES))
        produce(b, 400)
        wait_until("several segments tiered", lambda: len(remote_files(b, "manifest")) >= 3
                   and len(remote_files(b, "manifest")) == len(remote_files(b, "log")))
        # clean passes first: segments are checked and bytes read, nothing is found
        wait_until("a clean scrub of the tiered segments",
                   lambda: (tier_row(b)["scrub"] or {}).get("scrubbed_segments", 0) >= 3)  # type: ignore[attr-defined]
        text = metrics_text(b)
        assert (metric(text, "RemoteLogScrubberBytesPerSec_total") or 0) > 0
        assert (metric(text, "RemoteLogScrubberSegmentsPerSec_total") or 0) >= 3
        assert metric(text, "RemoteLogScrubberFindings") == 0
        assert not scrubber_warnings(b)

        damaged = remote_files(b, "log")[0]
        key = damaged.relative_to(b.remote_dir).as_posix()
        flip(damaged, damaged.stat().st_size // 2)

        def warned() -> bool:
            return f"corrupt {key}: the SHA-256" in b.broker.log_path.read_text(errors="replace")
        wait_until("the scrubber's WARNING", warned, timeout_s=15)
        line = next(ln for ln in b.broker.log_path.read_text(errors="replace").splitlines() if key in ln)
        assert "WARNING" in line and f"remote log scrubber: {TOPIC}-0 segment " in line and "(offsets " in line
        wait_until("the findings gauge at 1",
                   lambda: metric(metrics_text(b), "RemoteLogScrubberFindings") == 1, timeout_s=10)
        before = metric(metrics_text(b), "RemoteLogScrubberBytesPerSec_total") or 0
        wait_until("another pass", lambda: (metric(metrics_text(b), "RemoteLogScrubberBytesPerSec_total") or 0)
                   > before, timeout_s=10)
        assert len(scrubber_warnings(b)) == 1  # a finding is logged when new, not at every pass

        out = strata("tiers", "--bootstrap", b.bootstrap, "--topic", TOPIC, "--json")
        assert out.returncode == 0, out.stderr
        (row,) = json.loads(out.stdout)["partitions"]
        assert row["scrub"]["findings"] == 1 and row["scrub"]["problems"][0]["key"] == key
        table = strata("tiers", "--bootstrap", b.bootstrap, "--topic", TOPIC)
        assert table.returncode == 0, table.stderr
        warning = next(ln for ln in table.stdout.splitlines() if "scrubber" in ln)
        assert warning.startswith(f"WARNING: {TOPIC}-0: the remote log scrubber found 1 damaged or missing object")
        assert key in warning
    finally:
        b.stop()


def test_a_rate_of_zero_disables_the_scrubber(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **{"remote.log.scrubber.bytes.per.second": "0",
                                  "remote.log.scrubber.interval.ms": "100"}).start()
    try:
        b.create_topic(TOPIC, max_batches_per_segment=1)
        b.produce(TOPIC, 0, kv(0, 4))
        b.wait_offloaded(TOPIC, 0, [0, 1, 2])
        flip(remote_files(b, "log")[0], 30)  # damage it would find at once
        time.sleep(1.5)  # many intervals
        text = metrics_text(b)
        assert metric(text, "RemoteLogScrubberBytesPerSec_total", topic=None) == 0
        assert metric(text, "RemoteLogScrubberSegmentsPerSec_total", topic=None) == 0
        assert metric(text, "RemoteLogScrubberBytesPerSec_total") is None  # never marked for the topic
        assert metric(text, "RemoteLogScrubberFindings") is None
        assert tier_row(b)["scrub"] is None
        assert "remote log scrubber" not in b.broker.log_path.read_text(errors="replace")  # not even its start
    finally:
        b.stop()
