"""A consume-transform-produce worker for group tests: one process, one group member, exactly once.

``python -m tests.support.eos_worker BOOTSTRAP GROUP PROTOCOL IN OUT TXN_ID``: reads ``IN`` as a member of
``GROUP`` (``PROTOCOL``: ``classic`` or ``consumer``, KIP-848) and copies each record to ``OUT`` in a
transaction that also commits the consumed offsets (KIP-447: ``send_offsets_to_transaction`` with the
group's metadata, so a zombie member's commit is fenced by its member epoch). A transaction that fails is
aborted and the member rewinds to its committed offsets. Killed with -9 at any moment, it loses nothing
and duplicates nothing: ``OUT`` read with read_committed holds every record once. SIGTERM closes it
cleanly (leaving the group). It prints ``ready`` once it has an assignment, for the test to pace churn.
"""

from __future__ import annotations

import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main(bootstrap: str, group: str, protocol: str, source: str, sink: str, txn_id: str) -> None:
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol, "log_level": 3,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": "cooperative-sticky"})
    consumer = Consumer(conf)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "log_level": 3,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(30)
    consumer.subscribe([source])
    announced = False
    while not stop:
        batch = consumer.consume(200, 0.3)
        records = [m for m in batch if m.error() is None]
        if not announced and consumer.assignment():
            print("ready", flush=True)
            announced = True
        if not records:
            continue
        try:
            producer.begin_transaction()
            for m in records:
                producer.produce(sink, key=m.key(), value=m.value())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        except KafkaException as e:
            error = e.args[0]
            if error.fatal():
                raise
            try:
                producer.abort_transaction(30)
            except KafkaException:
                pass
            rewind(consumer)
    consumer.close()
    producer.flush(10)


def rewind(consumer: Consumer) -> None:
    """Back to the committed offsets of the partitions still assigned (what the aborted batch moved past)."""
    assigned = consumer.assignment()
    if not assigned:
        return
    for _ in range(10):
        try:
            for tp in consumer.committed(assigned, 10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            return
        except KafkaException:
            time.sleep(0.5)


def check_copied_once(bootstrap: str, sink: str, total: int, timeout_s: float = 90.0) -> None:
    """``sink`` (one partition), read with read_committed, holds the values 0..total-1 each exactly once."""
    out = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{sink}-check", "log_level": 3,
                    "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    out.assign([TopicPartition(sink, 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(seen) < total:
        seen += [int(m.value()) for m in out.consume(500, 0.5) if m.error() is None]
    time.sleep(2)  # anything beyond the total would be a duplicate: give it a moment to show up
    seen += [int(m.value()) for m in out.consume(500, 1.0) if m.error() is None]
    out.close()
    duplicates = len(seen) - len(set(seen))
    missing = sorted(set(range(total)) - set(seen))
    assert not missing and not duplicates, f"{len(missing)} missing (first {missing[:10]}), {duplicates} twice"


if __name__ == "__main__":
    main(*sys.argv[1:7])
