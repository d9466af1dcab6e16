"""``strata transactions`` against a real broker, as a subprocess: a transaction left open by confluent-kafka
holds the LSO at its first offset, and the command shows it with that first offset, its producer and its
transactional id, then shows it gone once committed. A stray transactional batch no coordinator knows
(verification off, as on brokers before KIP-890) is flagged as hanging. The transaction metrics are read
through the broker's ``/metrics`` endpoint along the way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, ensure_topic, init_producer_id
from tests.cluster.harness import wait_until
from tests.unit.test_metrics import samples

from strata.broker.transaction_metrics import (
    MARKERS_WRITTEN,
    ONGOING_TRANSACTIONS,
    PENDING_MARKERS,
    PRODUCER_ID_COUNT,
    TRANSACTIONAL_ID_COUNT,
)
from strata.protocol.records import BatchBuilder
from strata.tools.tiers import metrics_endpoint
from strata.tools.transactions import format_duration

TOPIC = "cli-txn"
TXN_ID = "cli-enricher"


def strata(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "strata", *args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def report(bootstrap: str, *args: str) -> dict[str, Any]:
    out = strata("transactions", "--bootstrap", bootstrap, "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def partition(doc: dict[str, Any], p: int, topic: str = TOPIC) -> dict[str, Any]:
    (found,) = [x for x in doc["partitions"] if (x["topic"], x["partition"]) == (topic, p)]
    return found


def metrics(bootstrap: str) -> dict[str, float]:
    host, port = metrics_endpoint(bootstrap)
    return samples(urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode())


@pytest.fixture
def txn_cli_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", {
        "transaction.state.log.num.partitions": "3", "num.partitions": "2", "metrics.port": "0",
        # a stray transactional batch is taken, as before KIP-890, so a hanging transaction can be made
        "transaction.partition.verification.enable": "false"}).start()
    try:
        yield b
    finally:
        b.stop()


def test_an_open_transaction_holds_the_lso_until_committed(txn_cli_broker: BrokerProcess) -> None:
    bootstrap = txn_cli_broker.bootstrap
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        plain.produce(TOPIC, b"plain-%d" % i, partition=0)
    assert plain.flush(15) == 0
    before = metrics(bootstrap)

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, b"txn-%d" % i, partition=0)
    assert p.flush(15) == 0
    plain.produce(TOPIC, b"after", partition=0)  # written after the transaction began: above the LSO
    assert plain.flush(15) == 0
    idle = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cli-idle"})
    idle.init_transactions(30)  # an id that never began a transaction: Empty, no start time (-1)

    doc = report(bootstrap)
    p0 = partition(doc, 0)
    assert (p0["leader"], p0["high_watermark"], p0["last_stable_offset"]) == (1, 8, 4)  # held at the first offset
    (open_txn,) = p0["open_transactions"]
    assert open_txn["current_txn_start_offset"] == 4 and open_txn["producer_epoch"] == 0
    assert (open_txn["transactional_id"], open_txn["state"]) == (TXN_ID, "Ongoing")
    assert 0 <= p0["oldest_transaction_age_ms"] < 60_000 and p0["stuck"] is False
    assert partition(doc, 1)["open_transactions"] == [] and partition(doc, 1)["last_stable_offset"] == 0
    (listed,) = [t for t in doc["transactions"] if t["transactional_id"] == TXN_ID]
    assert listed["state"] == "Ongoing" and listed["producer_id"] == open_txn["producer_id"]
    assert listed["partitions"] == [[TOPIC, 0]] and listed["transaction_timeout_ms"] == 60_000
    assert listed["transaction_start_time_ms"] > 0
    (empty,) = [t for t in doc["transactions"] if t["transactional_id"] == "cli-idle"]
    assert empty["state"] == "Empty" and empty["partitions"] == [] and "error" not in empty

    table = strata("transactions", "--bootstrap", bootstrap)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "HIGH-WATERMARK", "LSO", "OPEN-TXNS",
                                "OLDEST-TXN-AGE", "STATUS"]
    row = next(i for i, ln in enumerate(lines) if ln.split()[:2] == [TOPIC, "0"])
    assert lines[row].split()[2:6] == ["1", "8", "4", "1"] and lines[row].split()[-1] == "open"
    assert lines[row + 1].startswith(f"  producer {open_txn['producer_id']} epoch 0: first offset 4, last write ")
    assert f"transactional id {TXN_ID} (Ongoing on coordinator 1" in lines[row + 1]
    txn_row = next(ln for ln in lines if ln.startswith(TXN_ID))
    assert txn_row.split()[1:6] == ["1", "Ongoing", str(open_txn["producer_id"]), "0", "60000"]
    assert txn_row.split()[-1] == f"{TOPIC}-0"
    assert "WARNING" not in table.stdout

    # the same transaction, with a threshold it has outlived: flagged, with who holds it
    stuck = strata("transactions", "--bootstrap", bootstrap, "--topic", TOPIC, "--stuck-after-ms", "0")
    assert stuck.returncode == 0, stuck.stderr
    assert next(ln for ln in stuck.stdout.splitlines() if ln.split()[:2] == [TOPIC, "0"]).split()[-1] == "STUCK?"
    assert (f"WARNING: {TOPIC}-0: LSO held at 4 for at least " in stuck.stdout
            and f"possible hanging transaction; transactional id {TXN_ID} (Ongoing)" in stuck.stdout)

    got = metrics(bootstrap)
    assert got[ONGOING_TRANSACTIONS] == 1 and got[TRANSACTIONAL_ID_COUNT] == 2  # with cli-idle (Empty)
    assert got[PRODUCER_ID_COUNT] == before[PRODUCER_ID_COUNT] + 1  # the transactional producer joined

    p.commit_transaction(30)

    def gone() -> bool:
        p0 = partition(report(bootstrap), 0)
        return p0["open_transactions"] == [] and p0["last_stable_offset"] == p0["high_watermark"] == 9
    wait_until(gone, 15, "the committed transaction to leave the report")
    opened = report(bootstrap, "--open-only")
    assert opened["partitions"] == [] and opened["transactions"] == []
    (listed,) = [t for t in report(bootstrap)["transactions"] if t["transactional_id"] == TXN_ID]
    assert listed["state"] == "CompleteCommit"
    got = metrics(bootstrap)
    assert got[ONGOING_TRANSACTIONS] == 0 and got[PENDING_MARKERS] == 0
    assert got[MARKERS_WRITTEN + "_total"] >= before.get(MARKERS_WRITTEN + "_total", 0) + 1


def test_a_transaction_no_coordinator_knows_is_flagged_hanging(txn_cli_broker: BrokerProcess) -> None:
    bootstrap = txn_cli_broker.bootstrap
    with WireClient(bootstrap) as c:
        ensure_topic(c, TOPIC)
        pid, epoch = init_producer_id(c)  # an idempotent producer id: no coordinator has it
        batch = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
        batch.append(b"stray")
        r = c.call(0, 9, acks=-1, timeout=10_000, transactional_id="ghost",
                   topic_data=[{"name": TOPIC, "partition_data": [{"index": 1, "records": batch.build()}]}])
        assert int(r.responses[0].partition_responses[0].error_code) == 0  # taken: verification is off

    p1 = partition(report(bootstrap, "--stuck-after-ms", "0"), 1)
    (stray,) = p1["open_transactions"]
    assert (stray["producer_id"], stray["current_txn_start_offset"]) == (pid, 0)
    assert "transactional_id" not in stray and p1["stuck"] is True and p1["hanging"] is True
    assert p1["oldest_transaction_age_ms"] == stray["last_write_age_ms"]  # no coordinator start time to go by

    table = strata("transactions", "--bootstrap", bootstrap, "--open-only", "--stuck-after-ms", "0")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert [ln.split()[:2] for ln in lines[1:] if ln.startswith(TOPIC)] == [[TOPIC, "1"]]  # only the open one
    row = next(ln for ln in lines if ln.split()[:2] == [TOPIC, "1"])
    assert row.split()[-1] == "HANGING?"
    assert f"  producer {pid} epoch {epoch}: first offset 0, last write " in table.stdout
    assert "; no coordinator lists it" in table.stdout
    assert f"WARNING: {TOPIC}-1: LSO held at 0" in table.stdout and "a hanging transaction" in table.stdout

    # with the default threshold (transaction.max.timeout.ms) a fresh stray batch is open, not yet suspicious
    assert partition(report(bootstrap), 1)["stuck"] is False


def test_usage_and_unreachable_broker() -> None:
    out = strata("transactions", "--stuck-after-ms", "-5")
    assert out.returncode == 2 and "negative" in out.stderr
    out = strata("transactions", "--bootstrap", "127.0.0.1:1", "--timeout", "2")
    assert out.returncode == 1 and out.stderr.startswith("strata transactions: broker unreachable")


@pytest.mark.parametrize(("ms", "text"), [(None, "-"), (5, "5ms"), (12_345, "12.3s"), (312_000, "5m12s"),
                                          (7_380_000, "2h03m"), (273_600_000, "3d04h")])
def test_format_duration(ms: int | None, text: str) -> None:
    assert format_duration(ms) == text
