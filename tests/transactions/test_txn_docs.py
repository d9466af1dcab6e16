"""docs/transactions.md's example runs as written against a real broker (so the page cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.transactions.clients import until_end_confluent

DOC = Path(__file__).resolve().parents[2] / "docs" / "transactions.md"
BLOCK = re.compile(r"<!-- docs-test: run -->\n```python\n(?P<code>.*?)\n```", re.S)


def test_the_consume_transform_produce_example_runs(txn_broker: BrokerProcess) -> None:
    blocks = BLOCK.findall(DOC.read_text())
    assert len(blocks) == 1, "docs/transactions.md should hold one runnable example"
    admin = AdminClient({"bootstrap.servers": txn_broker.bootstrap})
    for f in admin.create_topics([NewTopic("orders", 2, 1), NewTopic("orders-enriched", 2, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": txn_broker.bootstrap})
    values = [f"order-{i}".encode() for i in range(50)]
    for i, v in enumerate(values):
        p.produce("orders", v, key=str(i).encode(), partition=i % 2)
    assert p.flush(10) == 0

    exec(compile(blocks[0].replace("127.0.0.1:9092", txn_broker.bootstrap), str(DOC), "exec"), {})  # noqa: S102

    got = until_end_confluent(txn_broker.bootstrap, "orders-enriched", 2, "read_committed")
    assert sorted(got) == sorted(v.upper() for v in values)
    c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "enricher"})
    try:
        committed = c.committed([CkTopicPartition("orders", 0), CkTopicPartition("orders", 1)], 10)
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [25, 25]
