"""Read replicas (issue 29, part 5): a topic created with ``remote.read.replica=true`` on a second broker whose
remote store is the origin's bucket is a read-only mirror served from it. It follows the origin's uploads while
the origin keeps producing, refuses produce with a clear message, follows the origin's retention, and deleting it
leaves the bucket alone."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import NewTopic
from tests.broker.kafka_wire import WireClient
from tests.broker.kafka_wire import produce as produce_request
from tests.support.keys import v2_broker_props
from tests.tiered.harness import WAIT_S, Record, S3TieredBroker, TieredBroker, read_range, wait_until

from strata.protocol.records import build_batch

TOPIC = "events"


def read(bootstrap: str, start: int, end: int) -> list[Record]:
    return read_range(bootstrap, TOPIC, 0, start, end)


def produce(b: TieredBroker, first: int, count: int) -> None:
    b.produce(TOPIC, 0, [(f"k{i}", f"event {i} " + "y" * 200) for i in range(first, first + count)])


def stored_logs(b: TieredBroker) -> list[str]:
    if isinstance(b, S3TieredBroker):
        return [f"{start:020d}-{sid}" for start, sid in b.segment_objects(TOPIC, 0)]
    return [p.name for p in b.remote_dir.rglob("*.log")]


def latest(b: TieredBroker) -> int:
    return b.list_offsets(TOPIC, 0, -1)[0]


@pytest.mark.parametrize("store_kind", ["local", "s3"])
def test_a_read_replica_follows_its_origin_refuses_produce_and_leaves_the_bucket_alone(
        tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> None:
    props = {**v2_broker_props(tmp_path / "keys"), "remote.log.scrubber.bytes.per.second": "0"}
    if store_kind == "s3":  # the replica's store is the origin's bucket: the same bucket and prefix
        seaweedfs = request.getfixturevalue("seaweedfs")
        prefix = f"replica-{uuid.uuid4().hex[:8]}/"
        origin: TieredBroker = S3TieredBroker(tmp_path / "origin", seaweedfs, key_prefix=prefix, **props)
        replica: TieredBroker = S3TieredBroker(tmp_path / "replica", seaweedfs, key_prefix=prefix, **props)
    else:  # the same directory
        origin = TieredBroker(tmp_path / "origin", **props)
        replica = TieredBroker(tmp_path / "replica", **{**props, "rsm.config.dir": str(origin.remote_dir)})
    origin.start()
    replica.start()
    try:
        origin.create_topic(TOPIC, max_batches_per_segment=2, segment_bytes="4096", retention_ms="-1")
        produce(origin, 0, 30)
        wait_until("the origin tiered", lambda: origin.list_offsets(TOPIC, 0, -5)[0] >= 20)
        expected = read(origin.bootstrap, 0, 30)

        futures = replica.admin().create_topics([NewTopic(TOPIC, -1, -1, config={"remote.read.replica": "true"})])
        futures[TOPIC].result(timeout=WAIT_S)
        end = wait_until("the replica serves the bucket", lambda: (e := latest(replica)) >= 21 and e)
        assert read(replica.bootstrap, 0, end) == expected[:end]

        # the origin keeps producing: the replica follows its uploads
        produce(origin, 30, 30)
        wait_until("the origin tiered the new records", lambda: origin.list_offsets(TOPIC, 0, -5)[0] >= 50)
        expected = read(origin.bootstrap, 0, 60)
        end = wait_until("the replica followed", lambda: (e := latest(replica)) >= 51 and e)
        assert read(replica.bootstrap, 0, end) == expected[:end]

        # produce is refused, with a message that says why
        p = Producer({"bootstrap.servers": replica.bootstrap, "message.timeout.ms": 10_000, "retries": 0})
        errors: list[KafkaError] = []
        p.produce(TOPIC, b"nope", partition=0, on_delivery=lambda err, _m: errors.append(err))
        p.flush(15)
        assert errors and errors[0] is not None and errors[0].code() == KafkaError.POLICY_VIOLATION, errors
        with WireClient(replica.bootstrap) as client:  # the broker's message, as Produce v8+ carries it
            answer = produce_request(client, TOPIC, 0, build_batch([(b"k", b"nope")]))
        assert int(answer.error_code) == KafkaError.POLICY_VIOLATION
        assert "is a read replica" in answer.error_message and "produce to that cluster" in answer.error_message
        # (the replica keeps following the origin's uploads meanwhile: its end may move, never by a refused record)
        assert b"nope" not in {v for _o, _k, v, _t in read(replica.bootstrap, 0, latest(replica))}

        # the origin's retention deletes old segments: the replica's log start follows
        origin.alter_topic(TOPIC, {"retention.bytes": "3000"})
        produce(origin, 60, 4)
        wait_until("the origin deleted old segments", lambda: origin.list_offsets(TOPIC, 0, -2)[0] > 10)
        wait_until("the replica's log start followed",
                   lambda: replica.list_offsets(TOPIC, 0, -2)[0] >= origin.list_offsets(TOPIC, 0, -2)[0] > 10)

        # deleting the read replica leaves the bucket (and the origin) alone
        stored = sorted(stored_logs(origin))
        replica.delete_topic(TOPIC)
        time.sleep(2)
        assert set(stored[-2:]) <= set(stored_logs(origin))  # (the origin's retention may have deleted the oldest
        # meanwhile; the replica deleted nothing)
        start = origin.list_offsets(TOPIC, 0, -2)[0]
        assert [r[0] for r in read(origin.bootstrap, start, start + 3)] == [start, start + 1, start + 2]
    finally:
        replica.stop()
        origin.stop()
