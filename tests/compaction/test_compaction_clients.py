"""Log compaction seen by real clients over sockets: a broker process, confluent-kafka producers and
consumers. What a consumer reads from offset 0 after the cleaner ran is checked against a model of
what was produced: the latest value of each live key, at the offset it was written."""

from __future__ import annotations

import random
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.compaction.harness import create, read_all, wait_until, wait_until_equal

from strata.tools.tiers import metrics_endpoint

CLEANER = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "200",
           "log.initial.task.delay.ms": "200"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", CLEANER).start()
    try:
        yield b
    finally:
        b.stop()


def test_consumer_reads_the_latest_value_of_each_live_key_at_its_offset(broker: BrokerProcess) -> None:
    create(broker, "table")
    rng = random.Random(7)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                  "batch.size": 16384})  # batches well under segment.bytes, so the segments roll
    written: list[tuple[bytes, bytes | None]] = []
    for i in range(20_000):
        key = b"key-%d" % rng.randrange(2_000)
        value = None if rng.random() < 0.05 else b"value-%d-" % i + b"x" * rng.randrange(50)
        p.produce("table", key=key, value=value)
        written.append((key, value))
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    # Filler under other keys rolls the segments holding the data above: all of it becomes cleanable.
    for i in range(4_000):
        p.produce("table", key=b"filler-%d" % i, value=b"f" * 40)
    assert p.flush(30) == 0
    # The model: each key's last record at its offset (one idempotent producer, one partition: offsets
    # follow produce order). Tombstones stay (delete.retention.ms is longer than this test's cleaning).
    last: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (key, value) in enumerate(written):
        last[key] = (offset, value)
    expected = sorted((offset, key, value) for key, (offset, value) in last.items())

    def table() -> list[tuple[int, bytes | None, bytes | None]]:
        return [r for r in read_all(broker, "table") if r[0] < len(written)]

    got = wait_until_equal("the cleaner to leave exactly the latest record of each key", table, expected)
    assert len(got) < len(written) / 5


def test_tombstones_go_after_delete_retention_and_not_before(broker: BrokerProcess) -> None:
    create(broker, "tombs")
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(3000):
        p.produce("tombs", key=b"k%d" % (i % 300), value=b"v" * 100)
    for k in range(0, 300, 3):
        p.produce("tombs", key=b"k%d" % k, value=None)
    for i in range(3000):  # more data, so the tombstones end up in rolled (cleanable) segments
        p.produce("tombs", key=b"other%d" % (i % 300), value=b"w" * 100)
    assert p.flush(30) == 0
    deleted = {b"k%d" % k for k in range(0, 300, 3)}

    def tombstones() -> int:
        return sum(1 for _, k, v in read_all(broker, "tombs") if k in deleted and v is None)

    first_clean = time.monotonic()
    wait_until("the first cleaning", lambda: len(read_all(broker, "tombs")) < 1500)
    assert tombstones() == len(deleted)  # compacted, tombstones kept (delete.retention.ms = 3 s)
    got = read_all(broker, "tombs")
    assert not any(k in deleted and v is not None for _, k, v in got), "a deleted key's old value survived"
    wait_until("tombstones past delete.retention.ms to be removed", lambda: tombstones() == 0, timeout_s=60)
    assert time.monotonic() - first_clean >= 3.0 - 0.5


def test_idempotent_producer_keeps_producing_across_cleanings(broker: BrokerProcess) -> None:
    create(broker, "idem", **{"segment.bytes": "16384"})
    errors: list[str] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.num.messages": 20})

    def report(err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))

    sent = 0
    deadline = time.monotonic() + 120
    cleaned_rounds = 0
    last_size = None
    while cleaned_rounds < 3 and time.monotonic() < deadline:
        for _ in range(2000):
            p.produce("idem", key=b"k%d" % (sent % 50), value=b"v%d" % sent, on_delivery=report)
            sent += 1
        assert p.flush(30) == 0
        size = len(read_all(broker, "idem"))
        if last_size is not None and size < last_size + 2000:
            cleaned_rounds += 1
        last_size = size
    assert cleaned_rounds >= 3, "the cleaner did not run between the rounds"
    assert not errors, errors[:5]
    got = read_all(broker, "idem")
    values = {k: v for _, k, v in got}
    assert values == {b"k%d" % k: b"v%d" % max(i for i in range(sent) if i % 50 == k) for k in range(50)}
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))


def scrape(b: BrokerProcess) -> dict[str, float]:
    host, port = metrics_endpoint(b.bootstrap)
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_cleaner_metrics_on_the_prometheus_endpoint(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "broker", {**CLEANER, "metrics.port": "0"}).start()
    try:
        create(b, "m", **{"segment.bytes": "16384"})
        before = scrape(b)
        assert before["kafka_log_LogCleaner_max_clean_time_secs"] == 0
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.size": 4096})
        for i in range(5000):
            p.produce("m", key=b"k%d" % (i % 100), value=b"v" * 50)
        assert p.flush(30) == 0
        got = wait_until("a cleaning in the metrics",
                         lambda: (m := scrape(b))["kafka_log_LogCleaner_max_clean_time_secs"] > 0 and m)
        assert 0 < got["kafka_log_LogCleaner_cleaner_recopy_percent"] < 50  # 100 keys of 5000 records
        assert 0 < got["kafka_log_LogCleaner_max_buffer_utilization_percent"] <= 100
        assert got["kafka_log_LogCleaner_DeadThreadCount"] == 0
        assert got["kafka_log_LogCleanerManager_uncleanable_partitions_count"] == 0
        assert "kafka_log_LogCleanerManager_max_dirty_percent" in got
        assert got["kafka_log_LogCleanerManager_time_since_last_run_ms"] >= 0
    finally:
        b.stop()


@pytest.mark.timeout(900)
def test_one_million_updates_of_100k_keys(tmp_path: Path) -> None:
    """The issue's acceptance at full size: 100k keys, 1M updates with 5% deletes (~11 s on 2 cores)."""
    b = BrokerProcess(tmp_path / "broker", CLEANER).start()
    try:
        create(b, "big", **{"segment.bytes": str(4 << 20), "delete.retention.ms": "3600000"})
        rng = random.Random(11)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "enable.idempotence": True,
                      "batch.size": 65536, "queue.buffering.max.messages": 200_000})
        last: dict[bytes, tuple[int, bytes | None]] = {}

        def send(key: bytes, value: bytes | None) -> None:
            while True:
                try:
                    p.produce("big", key=key, value=value)
                    return
                except BufferError:  # the local queue is full: let deliveries drain it
                    p.poll(0.05)

        n = 1_000_000
        for i in range(n):
            key = b"key-%06d" % rng.randrange(100_000)
            value = None if rng.random() < 0.05 else b"v%07d" % i
            send(key, value)
            last[key] = (i, value)
        for i in range(60_000):  # filler, more than a segment: the data above ends in rolled segments
            send(b"filler-%d" % i, b"f" * 100)
        assert p.flush(120) == 0
        expected = sorted((o, k, v) for k, (o, v) in last.items())

        def table() -> list[tuple[int, bytes | None, bytes | None]]:
            return [r for r in read_all(b, "big") if r[0] < n]

        wait_until_equal("1M updates compacted to the latest record of each key", table, expected, timeout_s=600)
    finally:
        b.stop()
