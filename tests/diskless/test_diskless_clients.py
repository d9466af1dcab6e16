"""Every client the issue names, on a diskless topic: confluent-kafka, kafka-python, aiokafka and kcat.

The data set and the per-client adapters are the classic client suite's (tests/broker/test_clients.py):
keys, null keys, tombstones, headers, values from 0 bytes to 20 kB, every codec. Each producer's records
are read back by another client, per partition exactly once and in produce order.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker.harness import BrokerProcess
from tests.broker.test_clients import CONSUMERS, PARTITIONS, PRODUCERS, make_records, verify
from tests.diskless.harness import create_diskless, diskless_broker, wal_objects

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
N = 2000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("diskless-clients")
    b = diskless_broker(tmp).start()
    try:
        yield b, tmp
    finally:
        b.stop()
        assert "Traceback" not in b.log_path.read_text(errors="replace"), b.tail()


@pytest.mark.parametrize(("producer", "codec", "consumer", "isolation"), [
    ("confluent", "zstd", "kafka-python", "read_uncommitted"),
    ("kafka-python", "lz4", "aiokafka", "read_committed"),
    ("aiokafka", "gzip", "confluent", "read_committed"),
    ("confluent", "snappy", "confluent", "read_uncommitted"),
])
def test_a_client_reads_what_another_wrote(broker: tuple[BrokerProcess, Path], producer: str, codec: str,
                                           consumer: str, isolation: str) -> None:
    b, tmp = broker
    topic = f"dl-{producer}-{codec}"
    create_diskless(b.bootstrap, topic, PARTITIONS)
    records = make_records(N, seed=len(topic))
    PRODUCERS[producer](b.bootstrap, topic, records, codec)
    verify(records, CONSUMERS[consumer](b.bootstrap, topic, len(records), isolation))
    assert wal_objects(tmp)


@pytest.mark.skipif(KCAT is None, reason="kcat binary not installed (make test installs it as root)")
def test_kcat_produces_and_consumes(broker: tuple[BrokerProcess, Path]) -> None:
    b, _ = broker
    create_diskless(b.bootstrap, "dl-kcat", 1)
    lines = "\n".join(f"k{i}:v{i}" for i in range(500)) + "\n"
    assert KCAT is not None
    subprocess.run([KCAT, "-b", b.bootstrap, "-P", "-t", "dl-kcat", "-K", ":", "-p", "0"], input=lines, text=True,
                   check=True, timeout=60, capture_output=True)
    out = subprocess.run([KCAT, "-b", b.bootstrap, "-C", "-t", "dl-kcat", "-e", "-o", "beginning", "-f",
                          "%o %k %s\n"], text=True, check=True, timeout=60, capture_output=True).stdout
    assert out.splitlines() == [f"{i} k{i} v{i}" for i in range(500)]
