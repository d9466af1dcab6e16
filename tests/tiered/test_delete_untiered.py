"""Deleting topics on a broker with tiering on: never-tiered topics are a quiet no-op for the remote tier.

Client-conformance issue, item 6: the RemoteLogManager asked the metadata cache for partitions it never
loaded and logged an ERROR with a traceback per partition. Here topics of 4 partitions - not tiered
(``remote.storage.enable=false``), tiered with nothing rolled, never written, and tiered with uploaded
segments - are deleted with confluent-kafka's AdminClient; the topics, their partition directories and
the uploaded segments must be gone, and the broker must log no ERROR and no traceback.

Ordering: the RLM deletes remote data on its expiration pool, here one thread (FIFO). The topic with
uploaded segments is deleted last, in a request of its own, so each of its jobs is queued after the jobs
of the same rank of the earlier topics; the earlier topics' outcome is logged before its last upload is
gone, and that is the condition waited on. Directories are removed at once
(``log.segment.delete.delay.ms=0`` in the test defaults); the test waits for them, it never sleeps.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer
from tests.tiered.harness import WAIT_S, TieredBroker, wait_until

PARTITIONS = 4
UNTIERED = ["plain", "plain-empty"]
TIERED_IDLE = ["tiered-idle", "tiered-empty"]
TIERED = "tiered-data"


def _produce_each_partition(b: TieredBroker, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[object] = []
    for p in range(PARTITIONS):
        for i in range(records):
            producer.produce(topic, value=f"v{i}".encode(), key=b"k", partition=p,
                             on_delivery=lambda err, _m: errors.append(err) if err else None)
            assert producer.flush(WAIT_S) == 0
    assert not errors, errors


def _partition_dirs(b: TieredBroker, topic: str) -> list[str]:
    """Live and renamed (``*-delete``) directories of the topic's partitions."""
    logs = b.broker.data_dir / "logs"
    prefixes = tuple(f"{topic}-{p}" for p in range(PARTITIONS))
    return sorted(d.name for d in logs.iterdir()
                  if d.name in prefixes or any(d.name.startswith(f"{x}.") for x in prefixes))


def _assert_quiet(text: str) -> None:
    bad = [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not bad, "\n".join(bad[:20])


def test_deleting_topics_that_never_tiered_is_quiet(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **{"remote.log.manager.expiration.thread.pool.size": "1"}).start()
    try:
        b.create_topic("plain", PARTITIONS, enable_remote=False)
        b.create_topic("plain-empty", PARTITIONS, enable_remote=False)
        b.create_topic("tiered-idle", PARTITIONS, max_batches_per_segment=10_000)  # never rolls
        b.create_topic("tiered-empty", PARTITIONS)  # never written
        b.create_topic(TIERED, PARTITIONS)  # a segment per batch, uploaded, then deleted locally
        _produce_each_partition(b, "plain", 3)
        _produce_each_partition(b, "tiered-idle", 3)
        _produce_each_partition(b, TIERED, 3)
        for p in range(PARTITIONS):
            b.wait_offloaded(TIERED, p, [0, 1])
        assert all(not b.events("COPY_SEGMENT", t, p) for t in TIERED_IDLE for p in range(PARTITIONS))

        doomed = UNTIERED + TIERED_IDLE
        for fut in b.admin().delete_topics(doomed, operation_timeout=10).values():
            fut.result(timeout=WAIT_S)
        b.delete_topic(TIERED)

        wait_until(f"the uploaded segments of {TIERED} deleted",
                   lambda: all(b.remote_records(TIERED, p) == 0 for p in range(PARTITIONS)))
        listed = set(b.admin().list_topics(timeout=10).topics)
        assert not listed & {*doomed, TIERED}, listed
        for topic in [*doomed, TIERED]:
            wait_until(f"the partition directories of {topic} removed", lambda t=topic: not _partition_dirs(b, t))
        _assert_quiet(b.broker.tail(200_000))
    finally:
        b.stop()
    _assert_quiet(b.broker.tail(200_000))  # shutdown included


def test_deleting_many_untiered_topics_one_request_each(tmp_path: Path) -> None:
    """The other shape of a client deleting topics: one DeleteTopics request per topic; then a topic of a
    deleted name is created again and starts empty."""
    b = TieredBroker(tmp_path, **{"remote.log.manager.expiration.thread.pool.size": "1"}).start()
    names = [f"churn-{i}" for i in range(6)]
    try:
        b.create_topic(TIERED, 1)
        b.produce(TIERED, 0, [("k", "v0"), ("k", "v1")])
        b.wait_offloaded(TIERED, 0, [0])
        for i, name in enumerate(names):
            b.create_topic(name, PARTITIONS, enable_remote=bool(i % 2), max_batches_per_segment=10_000)
        _produce_each_partition(b, names[0], 2)
        for name in names:
            b.delete_topic(name)
        b.delete_topic(TIERED)  # last: its remote deletion is queued after theirs (see the module doc)
        wait_until(f"the uploaded segment of {TIERED} deleted", lambda: b.remote_records(TIERED, 0) == 0)
        for name in names:
            wait_until(f"the partition directories of {name} removed", lambda t=name: not _partition_dirs(b, t))

        b.create_topic(names[0], PARTITIONS, enable_remote=False)
        assert _partition_dirs(b, names[0]) == [f"{names[0]}-{p}" for p in range(PARTITIONS)]
        assert b.list_offsets(names[0], 0, -1) == (0, 0)  # latest: empty, nothing of the deleted topic
        _assert_quiet(b.broker.tail(200_000))
    finally:
        b.stop()
    _assert_quiet(b.broker.tail(200_000))
