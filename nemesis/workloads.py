"""Clients that record every operation into a :class:`nemesis.history.History` while faults happen.

Each workload runs in its own thread and drives one client instance at a time (a *process* in the history);
a client replaced after a fatal error gets a new process name, so the checker's per-process ordering rules
hold. Outcomes are honest about what a client knows: a delivery report with an error after retries is
``info`` (the record may have been written: a timed-out request can still have been appended), never
``fail``, unless the error says the broker refused the write outright.

- :class:`IdempotentProducers`: acks=all idempotent producers at a steady rate per partition (the
  availability check compares acknowledgements per second before and during each fault).
- :class:`TransactionalWriter`: transactions over several partitions, some aborted on purpose.
- :class:`GroupConsumer`: a read_committed consumer in a group, committing its positions.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from nemesis.history import READ_COMMITTED, History, Op, tp

# Errors a broker answers when it refused a write outright: the record was certainly not appended.
_DEFINITE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.RECORD_LIST_TOO_LARGE,
             KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUIRED_ACKS}

COMMON = {"socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 1000,
          "metadata.max.age.ms": 3000, "log_level": 0}


class Workload(threading.Thread):
    def __init__(self, name: str, history: History, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.history = history
        self.stop_event = stop
        self.errors: list[str] = []  # unexpected exceptions (a workload bug, not an anomaly)

    def run(self) -> None:
        try:
            self.work()
        except Exception as e:  # noqa: BLE001 - reported by the runner
            self.errors.append(f"{self.name}: {e!r}")

    def work(self) -> None:
        raise NotImplementedError


class IdempotentProducers(Workload):
    """``count`` idempotent acks=all producers, each sending ``rate`` records/s round-robin over the partitions."""

    def __init__(self, history: History, stop: threading.Event, bootstrap: str, topic: str, partitions: int,
                 count: int = 2, rate: float = 60.0) -> None:
        super().__init__("producers", history, stop)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.count, self.rate = count, rate
        self.progress: dict[str, float] = {}  # process -> monotonic time of its last loop (the heartbeat reads it)

    def work(self) -> None:
        threads = [threading.Thread(target=self._one, args=(i,), daemon=True) for i in range(self.count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _one(self, index: int) -> None:
        try:
            self._produce(f"idem{index}")
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"producer {index}: {e!r}")

    def _produce(self, proc: str) -> None:
        h = self.history
        producer = Producer({**COMMON, "bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000,
                             "request.timeout.ms": 5000})

        def report(op: Op) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    h.ok(op, offset=msg.offset())
                elif err.code() in _DEFINITE:
                    h.fail(op, error=err.name())
                else:
                    h.info(op, error=err.name())
            return cb

        interval = 1.0 / self.rate
        seq = 0
        next_t = time.monotonic()
        while not self.stop_event.is_set():
            self.progress[proc] = time.monotonic()
            partition = seq % self.partitions
            value = f"{proc}-{seq}"
            op = h.send(proc, tp(self.topic, partition), value, idempotent=True)
            try:
                producer.produce(self.topic, value=value.encode(), partition=partition, on_delivery=report(op))
            except BufferError:
                h.fail(op, error="local queue full")
            seq += 1
            next_t = max(next_t + interval, time.monotonic() - interval)  # behind: catch up, never in a burst
            _poll_until(producer, next_t, self.stop_event)
        self.progress.pop(proc, None)
        producer.flush(90)


def _poll_until(producer: Producer, deadline: float, stop: threading.Event) -> None:
    """Serve delivery reports until ``deadline`` (monotonic). ``poll(t)`` returns as soon as it has served a
    report, so one ``poll`` per record let the schedule run ahead of the clock while acknowledgements flowed
    and then slept for seconds when they paused: that was the "producer stuck in poll()" the first runs
    reported at every broker kill or freeze."""
    while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        producer.poll(left)


class TransactionalWriter(Workload):
    """Transactions of 2-3 records over the partitions; one in four aborted on purpose."""

    def __init__(self, history: History, stop: threading.Event, bootstrap: str, topic: str, partitions: int,
                 seed: int, pause_s: float = 0.1) -> None:
        super().__init__("transactions", history, stop)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rng = random.Random(seed)
        self.pause_s = pause_s
        self.generation = 0

    def _producer(self) -> tuple[str, Producer]:
        self.generation += 1
        proc = f"txn-g{self.generation}"
        p = Producer({**COMMON, "bootstrap.servers": self.bootstrap, "transactional.id": "nemesis-txn",
                      "transaction.timeout.ms": 30_000, "message.timeout.ms": 30_000, "linger.ms": 5})
        while not self.stop_event.is_set():
            try:
                p.init_transactions(30)
                return proc, p
            except KafkaException:
                time.sleep(0.5)
        return proc, p

    def work(self) -> None:
        h = self.history
        proc, producer = self._producer()
        seq = 0
        while not self.stop_event.is_set():
            writes = [(tp(self.topic, self.rng.randrange(self.partitions)), f"{proc}-{seq}-{i}")
                      for i in range(self.rng.choice((2, 3)))]
            seq += 1
            op = h.txn(proc, writes, transactional_id="nemesis-txn")
            offsets: list[int | None] = [None] * len(writes)

            def delivered(i: int, offsets: list[int | None] = offsets) -> Callable[[Any, Any], None]:
                def cb(error: Any, msg: Any) -> None:
                    if error is None:
                        offsets[i] = msg.offset()
                return cb

            commit = self.rng.random() >= 0.25
            try:
                producer.begin_transaction()
                for i, (partition, value) in enumerate(writes):
                    producer.produce(self.topic, value=value.encode(), partition=int(partition.rsplit("-", 1)[1]),
                                     on_delivery=delivered(i))
                h.txn_end(op, "commit" if commit else "abort")
                if commit:
                    producer.commit_transaction(30)
                    h.complete_txn(op, "ok", offsets=offsets)
                else:
                    producer.abort_transaction(30)
                    h.complete_txn(op, "ok", offsets=[None] * len(writes))
            except KafkaException as e:
                err = e.args[0]
                if err.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                        h.complete_txn(op, "fail", error=err.name())  # aborted: certainly not committed
                    except KafkaException:
                        h.complete_txn(op, "info", error=err.name())
                elif err.retriable() and not commit:
                    h.complete_txn(op, "fail", error=err.name())  # never asked to commit
                else:
                    h.complete_txn(op, "info", error=err.name())  # the commit may or may not have happened
                    if err.fatal() or not err.retriable():
                        proc, producer = self._producer()
                    else:
                        proc, producer = self._producer()  # a commit in doubt: start over, fenced by epoch
            time.sleep(self.pause_s)


class GroupConsumer(Workload):
    """A read_committed consumer in ``group``: every poll recorded, positions committed every ``commit_s``."""

    def __init__(self, history: History, stop: threading.Event, bootstrap: str, topic: str, group: str,
                 name: str = "consumer", commit_s: float = 1.0) -> None:
        super().__init__(name, history, stop)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.commit_s = commit_s

    def work(self) -> None:
        h = self.history
        proc = self.name
        c = Consumer({**COMMON, "bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "isolation.level": READ_COMMITTED, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
                      "heartbeat.interval.ms": 1000})
        c.subscribe([self.topic])
        last_commit = time.monotonic()
        try:
            while not self.stop_event.is_set():
                op = h.read(proc, READ_COMMITTED, group=self.group)
                msgs = c.consume(200, 0.5)
                records = [(tp(m.topic(), m.partition()), m.offset(), m.value().decode())
                           for m in msgs if m.error() is None and m.value() is not None]
                h.ok(op, records=records)
                if time.monotonic() - last_commit >= self.commit_s:
                    last_commit = time.monotonic()
                    self._commit(c, proc)
        finally:
            c.close()

    def _commit(self, c: Consumer, proc: str) -> None:
        h = self.history
        try:
            positions = [p for p in c.position(c.assignment()) if p.offset >= 0]
        except KafkaException:
            return
        if not positions:
            return
        ops = [h.commit_offset(proc, self.group, tp(p.topic, p.partition), p.offset) for p in positions]
        try:
            c.commit(offsets=[CkTopicPartition(p.topic, p.partition, p.offset) for p in positions],
                     asynchronous=False)
            for op in ops:
                h.ok(op)
        except KafkaException as e:
            for op in ops:
                h.info(op, error=e.args[0].name())


def final_read(history: History, bootstrap: str, topic: str, partitions: int, timeout_s: float = 120.0) -> None:
    """Every partition from its log start to its end, through read_uncommitted and read_committed, recorded
    as the final reads, with each partition's log start, high watermark and last stable offset."""
    ends: dict[str, tuple[int, int, int]] = {}
    for isolation in ("read_uncommitted", READ_COMMITTED):
        c = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": f"final-{isolation}",
                      "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            records: list[tuple[str, int, str]] = []
            for p in range(partitions):
                low, high = c.get_watermark_offsets(CkTopicPartition(topic, p), timeout=30)
                key = tp(topic, p)
                prev = ends.get(key, (low, high, high))
                ends[key] = (low, high, prev[2]) if isolation == "read_uncommitted" else (prev[0], prev[1], high)
                if high <= low:
                    continue
                invoke = history.now()
                c.assign([CkTopicPartition(topic, p, low)])
                got: list[tuple[str, int, str]] = []
                deadline = time.monotonic() + timeout_s
                done = False
                while not done and time.monotonic() < deadline:
                    for m in c.consume(500, 1.0):
                        if m.error() is not None:
                            if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= high:
                                done = True
                            continue
                        if m.offset() >= high:
                            done = True
                            continue
                        got.append((key, m.offset(), m.value().decode()))
                    if c.position([CkTopicPartition(topic, p)])[0].offset >= high:
                        done = True
                if not done:
                    raise RuntimeError(f"the final {isolation} read of {key} did not reach {high}")
                records.extend(got)
                history.final_read("final", isolation, got, invoke_t=invoke)
        finally:
            c.close()
    for key, (low, high, lso) in ends.items():
        history.partition_final(key, low, high, lso)
