"""docs/diskless.md's examples run as written (Kafka's own kafka-topics.sh and kafka-configs.sh habits): one
makes a diskless topic, the other switches a classic topic to diskless."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.diskless.harness import diskless_broker, wal_objects
from tests.diskless.test_diskless_single_node import consume_all

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "diskless.md"
BLOCK = re.compile(r"<!-- docs-test: run -->\n```bash\n(?P<code>.*?)\n```", re.S)


def test_the_create_example_makes_a_diskless_topic(tmp_path: Path) -> None:
    code, _ = BLOCK.findall(DOC.read_text())
    b = diskless_broker(tmp_path).start()
    try:
        done = subprocess.run(["bash", "-c", code.replace("127.0.0.1:9092", b.bootstrap)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(60):
            p.produce("events", value=b"%d" % i, partition=i % 6)
        assert p.flush(30) == 0
        assert len(consume_all(b.bootstrap, "events", 6, 60)) == 60
        assert wal_objects(tmp_path)
    finally:
        b.stop()


def test_the_switch_example_makes_a_classic_topic_diskless(tmp_path: Path) -> None:
    _, code = BLOCK.findall(DOC.read_text())
    b = diskless_broker(tmp_path).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
        for i in range(30):
            p.produce("orders", value=b"classic-%d" % i)
        assert p.flush(30) == 0
        assert not wal_objects(tmp_path)
        done = subprocess.run(["bash", "-c", code.replace("127.0.0.1:9092", b.bootstrap)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        for i in range(30):
            p.produce("orders", value=b"diskless-%d" % i)
        assert p.flush(60) == 0
        assert wal_objects(tmp_path)
        assert [m.value() for m in consume_all(b.bootstrap, "orders", 1, 60)] == \
            [b"classic-%d" % i for i in range(30)] + [b"diskless-%d" % i for i in range(30)]
    finally:
        b.stop()
