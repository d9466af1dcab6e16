"""Share-group helpers for tests: real confluent-kafka ShareConsumers, GROUP configs over the wire, and a
child-process share consumer that can be frozen or killed while it holds records."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

# a broker that lets tests use short acquisition locks (as librdkafka's and confluent-kafka's suites do)
SHARE_BROKER_PROPS = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "2000",
    # members get their first assignment on their second heartbeat (after the coordinator initialized the
    # share-partitions): a short interval keeps the tests short
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
}


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET on the GROUP resource (keys with ``_`` for ``.``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("GROUP", group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res], request_timeout=30)[res].result(30)


def produce_around_an_abort(bootstrap: str, topic: str, transactional_id: str) -> None:
    """Three transactions of 10 records on partition 0: committed (``c1-*``), aborted (``ab-*``), committed
    (``c2-*``)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "log_level": 3})
    p.init_transactions(30)
    for commit, tag in ((True, b"c1"), (False, b"ab"), (True, b"c2")):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, value=tag + b"-%d" % i, partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)


def assert_reads_the_committed_only(bootstrap: str, group: str, topic: str) -> None:
    """A read_committed share group gets the 20 committed records of :func:`produce_around_an_abort`, once."""
    c = share_consumer(bootstrap, group, topic, log_level=3)
    try:
        msgs = poll_until(c, lambda ms: len(ms) >= 20)
        time.sleep(1)  # anything more (the aborted ones, a redelivery) would show up now
        msgs += list(c.poll(1.0))
        assert sorted(m.value() for m in msgs) == sorted([b"c1-%d" % i for i in range(10)]
                                                         + [b"c2-%d" % i for i in range(10)])
    finally:
        c.close()


def share_consumer(bootstrap: str, group: str, topic: str, explicit: bool = False, **conf: Any) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       **({"share.acknowledgement.mode": "explicit"} if explicit else {}), **conf})
    c.subscribe([topic])
    return c


def poll_until(consumer: ShareConsumer, done: Callable[[list[Any]], bool], timeout_s: float = 60,
               on_message: Callable[[Any], None] | None = None) -> list[Any]:
    """Poll until ``done(messages so far)``; each message passed to ``on_message`` (e.g. to acknowledge)."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while not done(out):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s with {len(out)} messages")
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            out.append(m)
            if on_message is not None:
                on_message(m)
    return out


HOLDER = r"""
import json, sys, time
from confluent_kafka import Producer, ShareConsumer
bootstrap, group, topic, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
c.subscribe([topic])
held = []
deadline = time.monotonic() + 60
while len(held) < want and time.monotonic() < deadline:
    for m in c.poll(0.5):
        if m.error() is None:
            held.append(m.offset())
    if held:
        break
print(json.dumps(held), flush=True)
time.sleep(600)  # holds its records, never acknowledging them, until killed or frozen
"""


def holding_consumer(bootstrap: str, group: str, topic: str, want: int = 1) -> tuple[subprocess.Popen[str], list[int]]:
    """A share consumer in its own process that acquired some records and holds them: (process, offsets)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, bootstrap, group, topic, str(want)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    held = json.loads(line) if line else []
    assert held, "the holding consumer acquired nothing"
    return proc, held


def stop_holder(proc: subprocess.Popen[str]) -> None:
    """kill -9 the holding consumer (SIGKILL ends a frozen one too) and close its pipe."""
    proc.kill()
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()
