"""A consume-transform-produce worker for group tests: one process, one group member, exactly once.

``python -m tests.support.eos_worker BOOTSTRAP GROUP PROTOCOL IN OUT TXN_ID``: reads ``IN`` as a member of
``GROUP`` (``PROTOCOL``: ``classic`` or ``consumer``, KIP-848) and copies each record to ``OUT`` in a
transaction that also commits the consumed offsets (KIP-447: ``send_offsets_to_transaction`` with the
group's metadata, so a zombie member's commit is fenced by its member epoch). A transaction that fails is
aborted and the member rewinds to its committed offsets. Killed with -9 at any moment, it loses nothing
and duplicates nothing: ``OUT`` read with read_committed holds every record once. SIGTERM closes it
cleanly (leaving the group). It prints ``ready`` once it has an assignment, for the test to pace churn.

A client call stuck past its own timeout ends the process (``faulthandler``'s watchdog: the stack to stderr,
exit 1), as a liveness probe would: librdkafka's ``send_offsets_to_transaction`` can wait forever when the
group coordinator it cached leaves the cluster's metadata (librdkafka issues 5511 and 5456, seen here when
the coordinator is killed); the group then hands the member's partitions to the others, as after a kill -9.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

API_TIMEOUT_S = 15
STUCK_S = API_TIMEOUT_S + 10  # a call overrunning its timeout by this much is stuck


def watchdog() -> None:
    """(Re)arm the stuck-call watchdog: the process ends unless this is called again within ``STUCK_S``."""
    faulthandler.dump_traceback_later(STUCK_S, exit=True)


def main(bootstrap: str, group: str, protocol: str, source: str, sink: str, txn_id: str) -> None:
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol, "log_level": 3,
            "client.id": txn_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": "cooperative-sticky"})
    consumer = Consumer(conf)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "log_level": 3,
                         "transaction.timeout.ms": 10000, "client.id": txn_id})
    producer.init_transactions(30)
    consumer.subscribe([source])
    announced = False
    last_status = time.monotonic()
    while not stop:
        batch = consumer.consume(200, 0.3)
        records = [m for m in batch if m.error() is None]
        for m in batch:
            if m.error() is not None:
                print(f"worker {txn_id}: consume error {m.error()}", file=sys.stderr, flush=True)
        if time.monotonic() - last_status > 10:
            last_status = time.monotonic()
            at = [(tp.partition, tp.offset) for tp in consumer.position(consumer.assignment())]
            print(f"worker {txn_id}: at {at}", file=sys.stderr, flush=True)
        watchdog()
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
                                                 consumer.consumer_group_metadata(), API_TIMEOUT_S)
            watchdog()
            producer.commit_transaction(API_TIMEOUT_S)
        except KafkaException as e:
            error = e.args[0]
            print(f"worker {txn_id}: transaction failed: {error}", file=sys.stderr, flush=True)
            if error.fatal():
                raise
            watchdog()
            try:
                producer.abort_transaction(API_TIMEOUT_S)
            except KafkaException:
                pass
            rewind(consumer)
    faulthandler.cancel_dump_traceback_later()
    consumer.close()
    producer.flush(10)


def rewind(consumer: Consumer) -> None:
    """Back to the committed offsets of the partitions still assigned (what the aborted batch moved past)."""
    assigned = consumer.assignment()
    if not assigned:
        return
    for _ in range(10):
        watchdog()
        try:
            for tp in consumer.committed(assigned, 10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            return
        except KafkaException as e:
            print(f"rewind: committed offsets not read: {e}", file=sys.stderr, flush=True)
            time.sleep(0.5)
    print("rewind: gave up", file=sys.stderr, flush=True)


def check_copied_once(bootstrap: str, sink: str, total: int, timeout_s: float = 90.0,
                      source: tuple[str, str] | None = None) -> None:
    """``sink`` (one partition), read with read_committed, holds the values 0..total-1 each exactly once.

    ``source``: (topic, group) the records were copied from, for a failure to say where the missing ones are."""
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
    assert not missing and not duplicates, (f"{len(missing)} missing (first {missing[:10]}), {duplicates} twice; "
                                            + sink_state(bootstrap, sink, set(missing))
                                            + (source_state(bootstrap, *source, set(missing)) if source else ""))


def source_state(bootstrap: str, topic: str, group: str, missing: set[int]) -> str:
    """Where the missing values sit in the source against the group's committed offsets: below them is
    loss (committed without their output), at or above them a member that stopped consuming."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        metadata = reader.list_topics(topic, 10).topics[topic]
        parts = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
        committed = {tp.partition: tp.offset for tp in reader.committed(parts, 10)}
        ends = {tp.partition: reader.get_watermark_offsets(tp, 10)[1] for tp in parts}
        reader.assign([TopicPartition(topic, p, 0) for p in ends])
        where: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(where) < sum(ends.values()):
            for m in reader.consume(500, 0.5):
                if m.error() is None:
                    where[int(m.value())] = (m.partition(), m.offset())
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
            g = admin.describe_consumer_groups([group])[group].result(10)
            members = {m.client_id or m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
                       for m in g.members}
            group_view = f", group {g.state} at {g.coordinator.id}: {members}"
        except Exception as e:  # noqa: BLE001 - a diagnostic
            group_view = f", group not described: {e}"
        lost = sorted(v for v in missing if v in where and where[v][1] < committed[where[v][0]])
        per_partition = {p: sum(1 for v in missing if where.get(v, (-1,))[0] == p) for p in ends}
        return (f"; source {topic}: committed {committed}, ends {ends}, missing per partition {per_partition}, "
                f"{len(lost)} missing below the committed offsets (first {lost[:5]}){group_view}")
    except KafkaException as e:
        return f"; source state unknown: {e}"
    finally:
        reader.close()


def sink_state(bootstrap: str, sink: str, missing: set[int]) -> str:
    """What a failed check needs to tell loss from a stuck transaction: watermarks, LSO, uncommitted reads."""
    out = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{sink}-diag", "log_level": 3,
                    "isolation.level": "read_uncommitted", "auto.offset.reset": "earliest"})
    try:
        low, high = out.get_watermark_offsets(TopicPartition(sink, 0), 10)
        out.assign([TopicPartition(sink, 0, 0)])
        found: dict[int, int] = {}
        deadline = time.monotonic() + 30
        read = 0
        while time.monotonic() < deadline and read < high:
            for m in out.consume(500, 0.5):
                if m.error() is None:
                    read = m.offset() + 1
                    if int(m.value()) in missing:
                        found.setdefault(int(m.value()), m.offset())
        committed = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{sink}-diag-rc", "log_level": 3,
                              "isolation.level": "read_committed"})
        try:
            lso = committed.get_watermark_offsets(TopicPartition(sink, 0), 10)[1]
        finally:
            committed.close()
        where = sorted(found.values())
        return (f"sink watermarks {low}..{high}, last stable offset {lso}; {len(found)} of the missing values are "
                f"in the log uncommitted (offsets {where[:1]}..{where[-1:]})")
    except KafkaException as e:
        return f"sink state unknown: {e}"
    finally:
        out.close()


if __name__ == "__main__":
    main(*sys.argv[1:7])
