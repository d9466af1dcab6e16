"""kcat (librdkafka's command-line client) against the broker: metadata, produce, consume.

kcat is what people reach for first to poke a Kafka-compatible endpoint, and it exercises
librdkafka paths the Python bindings do not (its own metadata printer, ``-e`` exit at end of
partition, which needs a correct high watermark). ``make test`` installs it where it can; only a
missing binary skips these tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker.harness import BrokerProcess

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
TIMEOUT_S = 30

pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat binary not installed (make test installs it as root)")


def kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    assert KCAT is not None
    done = subprocess.run([KCAT, "-b", bootstrap, *args], input=stdin, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kcat"), {"num.partitions": "2"}).start()
    try:
        yield b
    finally:
        b.stop()


def test_kcat_lists_metadata(kbroker: BrokerProcess) -> None:
    kcat(kbroker.bootstrap, "-P", "-t", "listed", "-p", "1", stdin="x\n")
    text = kcat(kbroker.bootstrap, "-L")
    assert f"broker 1 at {kbroker.bootstrap} (controller)" in text
    assert 'topic "listed" with 2 partitions:' in text
    assert "partition 1, leader 1, replicas: 1, isrs: 1" in text
    meta = json.loads(kcat(kbroker.bootstrap, "-L", "-J", "-t", "listed"))
    assert meta["controllerid"] == 1
    assert meta["brokers"] == [{"id": 1, "name": kbroker.bootstrap}]
    (topic,) = meta["topics"]
    assert topic["topic"] == "listed" and "error" not in topic
    assert [(p["partition"], p["leader"]) for p in topic["partitions"]] == [(0, 1), (1, 1)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "zstd"])
def test_kcat_produce_then_consume_to_the_end(kbroker: BrokerProcess, codec: str) -> None:
    topic = f"kcat-{codec}"
    lines = [f"key-{i}:value {i} " + "v" * (i % 50) for i in range(300)] + [":no key"]
    kcat(kbroker.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec, "-H", "origin=kcat", "-H", "n=1",
         stdin="\n".join(lines) + "\n")
    out = kcat(kbroker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
               "-f", "%p|%o|%k|%s|%h\n")
    got = out.splitlines()
    assert got == [f"0|{i}|{line.split(':', 1)[0]}|{line.split(':', 1)[1]}|origin=kcat,n=1"
                   for i, line in enumerate(lines)]
    # JSON output: offsets, timestamps, and -e stops at the high watermark of every partition.
    records = [json.loads(line) for line in kcat(kbroker.bootstrap, "-C", "-t", topic, "-e", "-q", "-J").splitlines()]
    firsts = [(r["partition"], r["offset"], r["payload"]) for r in records][:2]
    assert firsts == [(0, 0, "value 0 "), (0, 1, "value 1 v")]
    assert len(records) == len(lines) and all(r["tstype"] == "create" and r["ts"] > 0 for r in records)


def test_kcat_consumes_from_an_offset_and_a_partition(kbroker: BrokerProcess, tmp_path: Path) -> None:
    topic = "kcat-offsets"
    for p in (0, 1):
        kcat(kbroker.bootstrap, "-P", "-t", topic, "-p", str(p), stdin="".join(f"p{p}-{i}\n" for i in range(10)))
    tail = kcat(kbroker.bootstrap, "-C", "-t", topic, "-p", "1", "-o", "7", "-e", "-q", "-f", "%o=%s\n")
    assert tail.splitlines() == ["7=p1-7", "8=p1-8", "9=p1-9"]
    last = kcat(kbroker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-2", "-e", "-q", "-f", "%o=%s\n")
    assert last.splitlines() == ["8=p0-8", "9=p0-9"]
    # A file with binary content (newlines included), sent as one message, comes back byte for byte.
    blob = bytes(range(256)) * 40
    (tmp_path / "blob").write_bytes(blob)
    assert KCAT is not None
    subprocess.run([KCAT, "-b", kbroker.bootstrap, "-P", "-t", "kcat-blob", "-p", "0", str(tmp_path / "blob")],
                   check=True, timeout=TIMEOUT_S, capture_output=True)
    raw = subprocess.run([KCAT, "-b", kbroker.bootstrap, "-C", "-t", "kcat-blob", "-p", "0", "-e", "-q", "-f", "%s"],
                         check=True, timeout=TIMEOUT_S, capture_output=True).stdout
    assert raw == blob
