"""A consume-transform-produce application (exactly-once), run as a child process by the EOS tests.

It reads ``input`` with read_committed from the group's committed offsets (manual assignment: no
rebalances to wait out after a ``kill -9``), writes each record to the same partition of ``output``
and commits the consumed offsets in the same transaction (``send_offsets_to_transaction``). A restarted
instance uses the same ``transactional.id``: ``init_transactions`` fences its dead predecessor and
aborts whatever it left open, so every input record lands in the output exactly once.

    python eos_app.py BOOTSTRAP GROUP TRANSACTIONAL_ID INPUT OUTPUT PARTITIONS
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, Producer, TopicPartition

BATCH = 20


def main() -> None:
    bootstrap, group, txn_id, inp, out, partitions = sys.argv[1:7]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                  "transaction.timeout.ms": 10_000})
    p.init_transactions(60)
    tps = [TopicPartition(inp, i) for i in range(int(partitions))]
    committed = c.committed(tps, 60)  # waits out offsets still pending in an aborting transaction
    c.assign([TopicPartition(inp, tp.partition, tp.offset if tp.offset >= 0 else 0) for tp in committed])
    print("ready", flush=True)
    while True:
        msgs = [m for m in c.consume(BATCH, 0.5) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(out, m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(60)
        print("committed", len(msgs), flush=True)


if __name__ == "__main__":
    main()
