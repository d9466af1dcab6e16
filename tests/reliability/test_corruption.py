"""Corruption (issue 6): bit flips and truncations in every file the broker trusts, over a real broker.

Kafka's promise under test: corrupt bytes are detected (CRC-32C, sizes, offsets) and never served as
records; local recovery truncates at the first bad batch or rebuilds what can be rebuilt; a corrupt
checkpoint never keeps the broker from starting; a corrupt remote segment is reported once and then
handled by ``remote.log.reader.corrupt.segment.action`` without touching the store again; the broker
always starts and keeps serving the other partitions.

Each test runs one broker subprocess (``python -m strata serve``, the ``local`` RSM under the test's
tmp dir, or SeaweedFS for the S3 test) and damages files between runs, the way a disk or a store
would: flips one bit at a random position inside a batch, cuts a file in the middle of a batch,
writes garbage over a checkpoint. The broker is stopped with ``kill -9`` where recovery must run
(Kafka recovers only the segments after the recovery point, and only after an unclean shutdown).
Records are checked through the wire (Fetch v12, every batch's CRC verified here too) and with
confluent-kafka consumers. Random positions come from an RNG seeded per run (a fresh seed each run
widens the coverage); the seed is in the assertion messages, and ``STRATA_CORRUPTION_SEED`` replays it.

Soak (``make soak``): ``test_soak_random_corruptions`` runs ``STRATA_SOAK_CORRUPTIONS`` (default 40)
cycles of produce / tier / stop (kill -9 or clean) / corrupt one random file / restart / verify.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from tests.broker.kafka_wire import WireClient
from tests.support.seaweedfs import SeaweedFS
from tests.tiered.harness import S3TieredBroker, TieredBroker, wait_until

from strata.log.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile
from strata.protocol.records import decode_batch, iter_batches
from strata.tiered.metadata.topic_based import SNAPSHOT_FILE_NAME
from strata.tiered.storage.local import read_events
from strata.tools.tiers import metrics_endpoint

CORRUPT_MESSAGE = 2
REPLICA_NOT_AVAILABLE = 9  # remote reads while the remote log metadata is loading (retriable)
SEED = int(os.environ.get("STRATA_CORRUPTION_SEED", "0")) or random.randrange(1 << 30)
SOAK_CYCLES = int(os.environ.get("STRATA_SOAK_CORRUPTIONS", "40"))
PAD = "x" * 150  # records of ~200 bytes: most random positions fall in CRC-covered record bytes
T0_MS = int(time.time() * 1000) - 3_600_000
BROKER_PROPS = {"log.flush.offset.checkpoint.interval.ms": "200"}  # recovery points on disk, current


# -- helpers ---------------------------------------------------------------------------------------


def value(topic: str, partition: int, offset: int) -> str:
    return f"{topic}-{partition}-{offset}-{PAD}"


def produce(b: TieredBroker, topic: str, partition: int, start: int, count: int, idempotent: bool = False) -> None:
    """``count`` records, one batch each (a flush after each), acks=all; record i has value(…, start + i).

    Timestamps grow by 1 ms per offset, so every batch adds a time-index entry and the harness's
    ``max_batches_per_segment`` holds exactly (equal timestamps would leave the time index room)."""
    config = {"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": idempotent}
    producer = Producer(config)
    errors: list[Any] = []
    for i in range(start, start + count):
        producer.produce(topic, value=value(topic, partition, i).encode(), key=f"k{i}".encode(), partition=partition,
                         timestamp=T0_MS + i, on_delivery=lambda err, _m: errors.append(err) if err else None)
        assert producer.flush(30) == 0
    assert not errors, errors


def fetch(bootstrap: str, topic: str, partition: int, offset: int,
          max_bytes: int = 1 << 20) -> tuple[int, list[tuple[int, str]], int]:
    """One Fetch v12: (error code, [(offset, value)] of every record at or after ``offset``, high watermark).

    Every returned batch must pass its CRC check and hold the offsets it claims (a corrupt batch served
    by the broker fails here)."""
    with WireClient(bootstrap) as wire:
        resp = wire.call(1, 12, max_wait=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, session_id=0,
                         session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[],
                         topics=[{"topic": topic, "partitions": [
                             {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes,
                              "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}])
    p = resp.responses[0].partitions[0]
    raw = p.records or b""
    out = []
    expected = None
    for pos, header in iter_batches(raw, verify_crc=True):
        batch = decode_batch(raw, pos, verify_crc=True)
        assert expected is None or header.base_offset == expected, (header.base_offset, expected)
        expected = header.last_offset + 1
        out.extend((r.offset, r.value.decode()) for r in batch.records if r.offset >= offset)
    return int(p.error_code), out, p.high_watermark


def read_all(bootstrap: str, topic: str, partition: int, start: int = 0,
             timeout_s: float = 20.0) -> tuple[list[tuple[int, str]], int | None, int]:
    """Fetch from ``start`` to the high watermark: (records, error code that stopped it or None, HW).

    Empty answers (a remote read past ``remote.fetch.max.wait.ms``) and REPLICA_NOT_AVAILABLE (the remote
    metadata still loading after a restart) are retried until ``timeout_s``."""
    out: list[tuple[int, str]] = []
    offset = start
    deadline = time.monotonic() + timeout_s
    while True:
        error, records, hw = fetch(bootstrap, topic, partition, offset)
        if error == REPLICA_NOT_AVAILABLE and time.monotonic() < deadline:
            time.sleep(0.05)
            continue
        if error:
            return out, error, hw
        if records:
            out.extend(records)
            offset = records[-1][0] + 1
        if offset >= hw:
            return out, None, hw
        if not records and time.monotonic() > deadline:
            raise AssertionError(f"no progress at offset {offset} of {topic}-{partition} (HW {hw})")


def expected(topic: str, partition: int, offsets: Any) -> list[tuple[int, str]]:
    return [(o, value(topic, partition, o)) for o in offsets]


def consume(bootstrap: str, topic: str, partition: int, start: int, until: int,
            timeout_s: float = 20.0) -> tuple[list[tuple[int, str]], list[int]]:
    """confluent-kafka consumer from ``start`` until it passed offset ``until - 1``: records and error codes."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "check.crcs": True,
                         "fetch.error.backoff.ms": 50})
    out: list[tuple[int, str]] = []
    errors: list[int] = []
    try:
        consumer.assign([CkTopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while (not out or out[-1][0] < until - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error().code())
                continue
            out.append((msg.offset(), msg.value().decode()))
    finally:
        consumer.close()
    return out, errors


def batches(path: Path) -> list[tuple[int, Any]]:
    return list(iter_batches(path.read_bytes()))


def flip_bit(path: Path, position: int, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def detectable_position(rng: random.Random, size: int) -> int:
    """A byte of a batch whose flip must be caught at that very batch: the base offset (batches of a topic
    that is not compacted are contiguous), the length, the magic, the CRC and everything it covers - most
    often the latter. Not the partition leader epoch (bytes 12-15): it lies outside the CRC by Kafka's
    format, and only the remote reader can check it (against the segment's epochs)."""
    return rng.choice([rng.randrange(0, 12), rng.randrange(16, 21), rng.randrange(21, size), rng.randrange(21, size)])


def segment_files(b: TieredBroker, topic: str, partition: int, suffix: str) -> list[Path]:
    return sorted(b.log_dir(topic, partition).glob(f"*{suffix}"))


def remote_files(b: TieredBroker, topic: str, partition: int, start_offset: int, suffix: str) -> Path:
    found = list(b.remote_dir.glob(f"{topic}-*/{partition}/{start_offset:020d}-*{suffix}"))
    assert len(found) == 1, (topic, partition, start_offset, suffix, found)
    return found[0]


def segment_id_of(path: Path) -> str:
    return path.name[21:].rsplit(".", 1)[0]


def metrics_text(b: TieredBroker) -> str:
    host, port = metrics_endpoint(b.bootstrap)
    return urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()


def metric(b: TieredBroker, name: str, topic: str) -> float:
    m = re.search(re.escape(f'kafka_server_BrokerTopicMetrics_{name}{{topic="{topic}"}}') + r" ([0-9.e+-]+)",
                  metrics_text(b))
    return float(m.group(1)) if m else 0.0


def broker_log(b: TieredBroker) -> str:
    return b.broker.log_path.read_text(errors="replace")


def assert_no_traceback(b: TieredBroker) -> None:
    assert "Traceback" not in broker_log(b), b.broker.tail()


def wait_recovery_point(b: TieredBroker, topic: str, partition: int, offset: int) -> None:
    """Wait until ``recovery-point-offset-checkpoint`` says ``offset`` for the partition (rolled segments
    are flushed in the background; the file is written every 200 ms here)."""
    from strata.common import TopicPartition

    path = b.broker.data_dir / "logs" / "recovery-point-offset-checkpoint"
    wait_until(f"recovery point {offset} of {topic}-{partition}",
               lambda: OffsetCheckpointFile(path).read().get(TopicPartition(topic, partition), -1) >= offset)


def tiered_with_segments(b: TieredBroker, topic: str, partitions: int, records: int, per_segment: int) -> None:
    """A tiered topic whose segments of ``per_segment`` batches are all uploaded and gone locally."""
    b.create_topic(topic, partitions=partitions, max_batches_per_segment=per_segment)
    for p in range(partitions):
        produce(b, topic, p, 0, records)
    last_rolled = (records - 1) // per_segment * per_segment
    for p in range(partitions):
        b.wait_offloaded(topic, p, list(range(0, last_rolled, per_segment)))
        b.wait_earliest_local(topic, p, last_rolled)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[TieredBroker]:
    b = TieredBroker(tmp_path, **BROKER_PROPS).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def skip_broker(tmp_path: Path) -> Iterator[TieredBroker]:
    b = TieredBroker(tmp_path, **BROKER_PROPS, **{"remote.log.reader.corrupt.segment.action": "skip"}).start()
    try:
        yield b
    finally:
        b.stop()


# -- local log -------------------------------------------------------------------------------------


def test_local_corruption_after_kill9_is_truncated_or_rebuilt(broker: TieredBroker) -> None:
    """kill -9, then: a bit flipped inside a batch of the active segment (after the recovery point) and a
    torn write in another partition's active segment are cut at the first bad batch; a rolled segment's
    broken offset and time indexes (before the recovery point, so only the sanity check sees them) are
    rebuilt; an untouched partition is intact. Nothing corrupt is ever served."""
    b, rng = broker, random.Random(SEED)
    for topic in ("flip", "torn"):
        b.create_topic(topic, max_batches_per_segment=1000, enable_remote=False)
        produce(b, topic, 0, 0, 40)
    b.create_topic("idx", max_batches_per_segment=5, enable_remote=False)
    b.create_topic("calm", max_batches_per_segment=5, enable_remote=False)
    for topic in ("idx", "calm"):
        produce(b, topic, 0, 0, 40)
    assert len(segment_files(b, "idx", 0, ".log")) == 8
    wait_recovery_point(b, "idx", 0, 35)  # the rolled segments are flushed: only the active one is recovered
    b.broker.kill()

    # A bit flip in batch k of the active segment (the recovery point is 0: it was never flushed).
    log_file = segment_files(b, "flip", 0, ".log")[0]
    k = rng.randrange(5, 35)
    pos, header = batches(log_file)[k]
    where = detectable_position(rng, header.size)
    flip_bit(log_file, pos + where, rng.randrange(8))
    # A torn write: the active segment cut in the middle of batch j.
    torn = segment_files(b, "torn", 0, ".log")[0]
    j = rng.randrange(5, 40)
    tpos, theader = batches(torn)[j]
    with open(torn, "r+b") as f:
        f.truncate(tpos + rng.randrange(1, theader.size))
    # Rolled segments' indexes: an offset index no longer whole entries, a time index cut mid-entry.
    idx = segment_files(b, "idx", 0, ".index")
    with open(idx[1], "ab") as f:
        f.write(b"\x01\x02\x03")
    tidx = segment_files(b, "idx", 0, ".timeindex")
    with open(tidx[2], "r+b") as f:
        f.truncate(5)

    b.broker.start()
    why = f"seed {SEED}: flip in batch {k} at byte {where}, torn batch {j}"
    assert read_all(b.bootstrap, "flip", 0) == (expected("flip", 0, range(k)), None, k), why
    assert read_all(b.bootstrap, "torn", 0) == (expected("torn", 0, range(j)), None, j), why
    assert read_all(b.bootstrap, "idx", 0) == (expected("idx", 0, range(40)), None, 40)
    assert read_all(b.bootstrap, "calm", 0) == (expected("calm", 0, range(40)), None, 40)
    for offset in range(40):  # every offset found through the rebuilt indexes
        assert fetch(b.bootstrap, "idx", 0, offset, max_bytes=1)[1][0] == (offset, value("idx", 0, offset))
    assert idx[1].stat().st_size % 8 == 0 and tidx[2].stat().st_size % 12 == 0
    text = broker_log(b)
    assert "rebuilding the indexes" in text and "truncated" in text, text[-3000:]
    # The truncated logs take new records at the cut, as a consumer with a real client sees.
    produce(b, "flip", 0, k, 3)
    got, errors = consume(b.bootstrap, "flip", 0, 0, k + 3)
    assert got == expected("flip", 0, range(k + 3)) and not errors, why
    assert_no_traceback(b)


def test_index_entry_pointing_past_its_offset_is_not_trusted(broker: TieredBroker) -> None:
    """A flipped offset-index entry that passes the load-time sanity check (a clean shutdown, no
    recovery) but points at a later batch: a fetch of the offsets it skips must still get them."""
    b = broker
    b.create_topic("idx", max_batches_per_segment=6, enable_remote=False)
    produce(b, "idx", 0, 0, 20)
    b.broker.stop()
    index = segment_files(b, "idx", 0, ".index")[0]  # batches 0..5; entries for batches 1..5
    data = bytearray(index.read_bytes())
    assert len(data) == 5 * 8
    positions = [pos for pos, _ in batches(segment_files(b, "idx", 0, ".log")[0])]
    data[4:8] = positions[4].to_bytes(4, "big")  # entry of offset 1 -> the batch of offset 4
    index.write_bytes(bytes(data))
    b.broker.start()
    for offset in range(20):
        error, records, _ = fetch(b.bootstrap, "idx", 0, offset, max_bytes=1)
        assert (error, records[:1]) == (0, [(offset, value("idx", 0, offset))]), offset
    assert read_all(b.bootstrap, "idx", 0) == (expected("idx", 0, range(20)), None, 20)
    assert "scanning" in broker_log(b)
    assert_no_traceback(b)


# -- checkpoints and snapshots ---------------------------------------------------------------------


def corrupt_checkpoints(b: TieredBroker, rng: random.Random, partitions: list[tuple[str, int]]) -> None:
    """Garbage in every per-directory checkpoint, every listed partition's leader-epoch-checkpoint and
    producer snapshots, the RLMM snapshot, and the clean shutdown marker (when there is one)."""
    logs = b.broker.data_dir / "logs"
    (logs / "recovery-point-offset-checkpoint").write_bytes(b"0\n\xff\xfe garbage\n")  # not UTF-8
    (logs / "log-start-offset-checkpoint").write_text("0\n7\nidem 0 3\n")  # count mismatch
    (logs / "replication-offset-checkpoint").write_text("1\n0\n")  # unknown version
    marker = logs / ".kafka_cleanshutdown"
    if marker.exists():
        marker.write_bytes(os.urandom(64))
    snapshot = logs / SNAPSHOT_FILE_NAME
    if snapshot.exists():
        flip_bit(snapshot, rng.randrange(snapshot.stat().st_size), rng.randrange(8))
    for topic, partition in partitions:
        directory = b.log_dir(topic, partition)
        (directory / "leader-epoch-checkpoint").write_text("0\n2\n0 0\nnot-an-epoch\n")
        (directory / "partition.metadata").write_text("version: 0\ntopic_id: not-a-topic-id")
        for snap in directory.glob("*.snapshot"):
            flip_bit(snap, rng.randrange(snap.stat().st_size), rng.randrange(8))


@pytest.mark.parametrize("hard", [False, True], ids=["clean-stop", "kill-9"])
def test_corrupt_checkpoints_never_stop_the_broker(broker: TieredBroker, hard: bool) -> None:
    """recovery-point, log-start and replication offset checkpoints, leader-epoch-checkpoints,
    partition.metadata files, producer snapshots, the RLMM snapshot and the clean shutdown marker all
    garbage: the broker starts, every
    record is there (tiered ones read from the remote tier through the rebuilt leader epochs),
    idempotent producers go on, and the files are written whole again."""
    b, rng = broker, random.Random(SEED)
    b.create_topic("idem", max_batches_per_segment=4, enable_remote=False)
    produce(b, "idem", 0, 0, 10, idempotent=True)
    tiered_with_segments(b, "tier", 1, 9, 2)
    segments_before = metric_until(b, "RemoteLogMetadataCount", "tier", 4)
    b.broker.stop(signal.SIGKILL if hard else signal.SIGTERM)
    corrupt_checkpoints(b, rng, [("idem", 0), ("tier", 0)])
    b.broker.start()
    assert read_all(b.bootstrap, "idem", 0) == (expected("idem", 0, range(10)), None, 10)
    assert read_all(b.bootstrap, "tier", 0) == (expected("tier", 0, range(9)), None, 9)
    assert metric_until(b, "RemoteLogMetadataCount", "tier", segments_before) == segments_before
    produce(b, "idem", 0, 10, 5, idempotent=True)
    produce(b, "tier", 0, 9, 3)
    got, errors = consume(b.bootstrap, "tier", 0, 0, 12)
    assert got == expected("tier", 0, range(12)) and not errors
    assert read_all(b.bootstrap, "idem", 0) == (expected("idem", 0, range(15)), None, 15)
    text = broker_log(b)
    for what in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint",
                 "leader epoch checkpoint"):
        assert re.search(f"ignoring corrupt .*{what}", text), what
    assert len(re.findall("partition.metadata: malformed topic id.*rewriting it", text)) == 2
    assert LeaderEpochCheckpointFile(b.log_dir("tier", 0) / "leader-epoch-checkpoint").read()[0] == (0, 0)
    b.broker.stop()
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint"):
        OffsetCheckpointFile(b.broker.data_dir / "logs" / name).read()  # whole again: parses
    assert_no_traceback(b)


def metric_until(b: TieredBroker, name: str, topic: str, at_least: float) -> float:
    return wait_until(f"{name} of {topic} >= {at_least}",
                      lambda: (v := metric(b, name, topic)) >= at_least and v)


def test_corrupt_rlmm_snapshot_is_ignored_and_replayed(broker: TieredBroker) -> None:
    """A bit flip or a cut in ``__remote_log_metadata-snapshot``: ignored with a WARNING, the metadata
    topic replayed in full, the same remote segments served, and a good snapshot written again."""
    b, rng = broker, random.Random(SEED)
    tiered_with_segments(b, "tier", 2, 9, 2)
    counts = [metric_until(b, "RemoteLogMetadataCount", "tier", 8)]
    snapshot = b.broker.data_dir / "logs" / SNAPSHOT_FILE_NAME
    for damage in ("flip", "cut"):
        b.broker.stop()
        good = snapshot.read_bytes()
        if damage == "flip":
            flip_bit(snapshot, rng.randrange(len(good)), rng.randrange(8))
        else:
            snapshot.write_bytes(good[:rng.randrange(len(good))])
        b.broker.start()
        for p in range(2):
            assert read_all(b.bootstrap, "tier", p) == (expected("tier", p, range(9)), None, 9), damage
        counts.append(metric_until(b, "RemoteLogMetadataCount", "tier", counts[0]))
        assert len(re.findall("Ignoring the RLMM snapshot", broker_log(b))) == len(counts) - 1
    assert counts == [counts[0]] * 3
    b.broker.stop()
    assert snapshot.read_bytes()[:4] == b"SRLM"
    b.broker.start()
    assert len(re.findall("Ignoring the RLMM snapshot", broker_log(b))) == 2  # the rewritten one is used
    assert_no_traceback(b)


# -- remote segments and indexes ---------------------------------------------------------------------


def fetch_segment_count(b: TieredBroker, segment_id: str) -> int:
    """Ranged reads of one remote segment, from the ``local`` RSM's event history."""
    return sum(1 for e in read_events(b.remote_dir, "FETCH_SEGMENT") if e["segment_id"] == segment_id)


def test_corrupt_remote_segments_answer_corrupt_message_once_detected(broker: TieredBroker) -> None:
    """Action ``fail`` (the default). Partition 0: a bit flipped in the second batch of remote segment
    [4, 5]. Partition 1: remote segment [2, 3] cut in the middle of its second batch. Partition 2: the
    remote offset indexes of two segments broken (one fails the sanity check, one points inside a
    batch). The valid batches are served, then CORRUPT_MESSAGE for the bad offsets on every fetch
    without another read of the store; the ERROR is logged once per segment and counted in /metrics;
    the offsets after a corrupt segment stay readable; partition 2 and another topic read in full."""
    b, rng = broker, random.Random(SEED)
    tiered_with_segments(b, "rem", 3, 11, 2)
    b.create_topic("calm", max_batches_per_segment=2)
    produce(b, "calm", 0, 0, 11)

    seg0 = remote_files(b, "rem", 0, 4, ".log")
    pos, header = batches(seg0)[1]
    where = detectable_position(rng, header.size)
    flip_bit(seg0, pos + where, rng.randrange(8))
    seg1 = remote_files(b, "rem", 1, 2, ".log")
    pos1, header1 = batches(seg1)[1]
    with open(seg1, "r+b") as f:
        f.truncate(pos1 + rng.randrange(1, header1.size))
    with open(remote_files(b, "rem", 2, 2, ".index"), "ab") as f:
        f.write(b"\x00\x00\x05")  # not whole entries: fails the sanity check
    remote_files(b, "rem", 2, 6, ".index").write_bytes((1).to_bytes(4, "big") + (7).to_bytes(4, "big"))
    why = f"seed {SEED}: flip at byte {where} of the batch"

    assert read_all(b.bootstrap, "rem", 0) == (expected("rem", 0, range(5)), CORRUPT_MESSAGE, 11), why
    assert read_all(b.bootstrap, "rem", 1) == (expected("rem", 1, range(3)), CORRUPT_MESSAGE, 11)
    for offset in (7, 3):  # cold (no read-ahead window knows the batch boundaries): through the indexes
        assert fetch(b.bootstrap, "rem", 2, offset, max_bytes=1)[:2] == (0, expected("rem", 2, [offset])), offset
    assert read_all(b.bootstrap, "rem", 2) == (expected("rem", 2, range(11)), None, 11)
    for offset in range(11):  # one batch per fetch
        assert fetch(b.bootstrap, "rem", 2, offset, max_bytes=1)[:2] == (0, expected("rem", 2, [offset])), offset
    reads = fetch_segment_count(b, segment_id_of(seg0))
    for _ in range(20):
        assert fetch(b.bootstrap, "rem", 0, 5)[0] == CORRUPT_MESSAGE
        assert fetch(b.bootstrap, "rem", 1, 3)[0] == CORRUPT_MESSAGE
    assert fetch_segment_count(b, segment_id_of(seg0)) == reads  # remembered: the store is not read again
    assert fetch(b.bootstrap, "rem", 0, 4)[:2] == (0, expected("rem", 0, [4]))  # the valid prefix stays
    assert read_all(b.bootstrap, "rem", 0, start=6) == (expected("rem", 0, range(6, 11)), None, 11)
    got, errors = consume(b.bootstrap, "rem", 0, 0, 11, timeout_s=5)
    assert got == expected("rem", 0, range(5)) and errors, why  # a real client stops there, with an error
    assert set(errors) <= {KafkaError._BAD_MSG, CORRUPT_MESSAGE}, errors
    assert read_all(b.bootstrap, "calm", 0) == (expected("calm", 0, range(11)), None, 11)
    text = broker_log(b)
    for segment in (seg0, seg1):
        assert len(re.findall(f"remote segment {segment_id_of(segment)}.* is corrupt from offset", text)) == 1, text
    assert len(re.findall("remote offset index of segment .* is corrupt", text)) == 1
    assert len(re.findall("a fresh read from position 0 succeeded", text)) == 1  # the index pointing inside a batch
    assert metric(b, "RemoteLogCorruptSegments", "rem") == 2
    assert_no_traceback(b)


def test_skip_action_serves_around_corrupt_remote_segments(skip_broker: TieredBroker) -> None:
    """Action ``skip``: consumers see an offset gap where a remote segment is corrupt, also when it is the
    last remote one (the read resumes in the local log), and nothing else is lost."""
    b, rng = skip_broker, random.Random(SEED)
    tiered_with_segments(b, "rem", 1, 10, 2)  # remote [0,1] [2,3] [4,5] [6,7]; local [8,9]
    for start in (2, 6):
        seg = remote_files(b, "rem", 0, start, ".log")
        pos, header = batches(seg)[0]
        flip_bit(seg, pos + detectable_position(rng, header.size), rng.randrange(8))
    survivors = [0, 1, 4, 5, 8, 9]
    got, errors = consume(b.bootstrap, "rem", 0, 0, 10)
    assert got == expected("rem", 0, survivors) and not errors, f"seed {SEED}"
    records, error, _ = read_all(b.bootstrap, "rem", 0)
    assert (records, error) == (expected("rem", 0, survivors), None)
    assert metric(b, "RemoteLogCorruptSegments", "rem") == 2
    assert len(re.findall("is corrupt from offset", broker_log(b))) == 2
    assert_no_traceback(b)


def test_corrupt_object_in_s3_is_never_served(tmp_path: Path, seaweedfs: SeaweedFS) -> None:
    """The same over the ``s3`` RSM on SeaweedFS (its reads arrive in one buffer, ``read_view``): an object
    overwritten with one bit flipped answers CORRUPT_MESSAGE after its valid batches; the others read."""
    rng, weed = random.Random(SEED), seaweedfs
    b = S3TieredBroker(tmp_path, weed, key_prefix=f"corrupt-{rng.randrange(1 << 30)}/", **BROKER_PROPS).start()
    try:
        b.create_topic("rem", max_batches_per_segment=2)
        produce(b, "rem", 0, 0, 9)
        b.wait_offloaded("rem", 0, [0, 2, 4, 6])
        b.wait_earliest_local("rem", 0, 8)
        client = weed.boto3_client()
        key = next(k for k in weed.list_keys(b.key_prefix) if "/00000000000000000002-" in k and k.endswith(".log"))
        data = bytearray(client.get_object(Bucket=weed.bucket, Key=key)["Body"].read())
        pos, header = list(iter_batches(bytes(data)))[1]
        data[pos + detectable_position(rng, header.size)] ^= 1 << rng.randrange(8)
        client.put_object(Bucket=weed.bucket, Key=key, Body=bytes(data))
        assert read_all(b.bootstrap, "rem", 0) == (expected("rem", 0, range(3)), CORRUPT_MESSAGE, 9), f"seed {SEED}"
        assert read_all(b.bootstrap, "rem", 0, start=4) == (expected("rem", 0, range(4, 9)), None, 9)
        assert metric(b, "RemoteLogCorruptSegments", "rem") == 1
        assert_no_traceback(b)
    finally:
        b.stop()


# -- soak ----------------------------------------------------------------------------------------------


class Model:
    """What each partition must answer: ``values[key][o]`` is offset o's value; ``corrupt[key]`` holds the
    remote ranges [first bad offset, segment end] that answer CORRUPT_MESSAGE (action ``fail``)."""

    def __init__(self, keys: list[tuple[str, int]]) -> None:
        self.values: dict[tuple[str, int], list[str]] = {k: [] for k in keys}
        self.corrupt: dict[tuple[str, int], list[tuple[int, int]]] = {k: [] for k in keys}
        self.damaged: set[str] = set()  # remote segment files already made corrupt

    def produced(self, key: tuple[str, int], count: int) -> int:
        start = len(self.values[key])
        self.values[key].extend(value(key[0], key[1], o) for o in range(start, start + count))
        return start

    def verify(self, b: TieredBroker, key: tuple[str, int], why: str) -> None:
        topic, partition = key
        values, offset = self.values[key], 0
        while True:
            records, error, hw = read_all(b.bootstrap, topic, partition, start=offset)
            assert records == [(o, values[o]) for o in range(offset, offset + len(records))], (key, offset, why)
            offset += len(records)
            if error is None:
                assert offset == hw == len(values), (key, offset, hw, len(values), why)
                return
            bad = next(((s, e) for s, e in self.corrupt[key] if s == offset), None)
            assert error == CORRUPT_MESSAGE and bad is not None, (key, offset, error, self.corrupt[key], why)
            offset = bad[1] + 1


def all_tiered(b: TieredBroker, topic: str) -> bool:
    """Only the active segment is local, and the segment before it was uploaded."""
    logs = segment_files(b, topic, 0, ".log")
    if len(logs) != 1:
        return False
    base = int(logs[0].name[:20])
    return base == 0 or any(e["end_offset"] == base - 1 for e in b.events("COPY_SEGMENT", topic, 0))


def soak_cycle(b: TieredBroker, model: Model, rng: random.Random, cycle: int) -> str:
    """Produce, tier, stop, damage one random file, start; returns what was done (for the assertions)."""
    for key in model.values:
        produce(b, key[0], key[1], model.produced(key, 10), 10)
    for topic in ("tier", "calm"):  # segment boundaries shift after restarts: wait for "all but the active"
        wait_until(f"every rolled segment of {topic}-0 uploaded and gone locally", lambda t=topic: all_tiered(b, t))
    target = rng.choice(["local-flip", "local-torn", "local-index", "checkpoints", "rlmm-snapshot",
                         "remote-flip", "remote-cut", "remote-index"])
    hard = target in ("local-flip", "local-torn") or rng.random() < 0.5
    b.broker.stop(signal.SIGKILL if hard else signal.SIGTERM)
    what = f"cycle {cycle} seed {SEED}: {target} after {'kill -9' if hard else 'a clean stop'}"
    if target in ("local-flip", "local-torn"):  # the active segment: after the recovery point
        path = segment_files(b, "loc", 0, ".log")[-1]
        found = batches(path)
        k = rng.randrange(len(found))
        pos, header = found[k]
        if target == "local-flip":
            flip_bit(path, pos + detectable_position(rng, header.size), rng.randrange(8))
        else:
            with open(path, "r+b") as f:
                f.truncate(pos + rng.randrange(1, header.size))
        del model.values[("loc", 0)][header.base_offset:]
        what += f" in batch {header.base_offset}"
    elif target == "local-index":
        path = rng.choice(segment_files(b, "seg", 0, ".index") + segment_files(b, "seg", 0, ".timeindex"))
        if path.stat().st_size:
            flip_bit(path, rng.randrange(path.stat().st_size), rng.randrange(8))
    elif target == "checkpoints":
        corrupt_checkpoints(b, rng, [("loc", 0), ("seg", 0), ("tier", 0)])
    elif target == "rlmm-snapshot":
        snapshot = b.broker.data_dir / "logs" / SNAPSHOT_FILE_NAME
        if snapshot.exists():
            flip_bit(snapshot, rng.randrange(snapshot.stat().st_size), rng.randrange(8))
    else:
        bad = model.corrupt[("tier", 0)]
        path = rng.choice([p for p in sorted(b.remote_dir.glob("tier-*/0/*.log")) if p.name not in model.damaged])
        if target == "remote-index":
            index = path.with_suffix(".index")
            if index.stat().st_size:
                flip_bit(index, rng.randrange(index.stat().st_size), rng.randrange(8))
        else:
            found = batches(path)
            pos, header = found[rng.randrange(len(found))]
            if target == "remote-flip":
                flip_bit(path, pos + detectable_position(rng, header.size), rng.randrange(8))
            else:
                with open(path, "r+b") as f:
                    f.truncate(pos + rng.randrange(1, header.size))
            bad.append((header.base_offset, found[-1][1].last_offset))
            model.damaged.add(path.name)
            what += f" in batch {header.base_offset} of {path.name}"
    b.broker.start()
    return what


@pytest.mark.slow
@pytest.mark.timeout(120 + 10 * SOAK_CYCLES)  # a cycle takes 1-3 s, growing with the data re-verified
def test_soak_random_corruptions(broker: TieredBroker) -> None:
    """``STRATA_SOAK_CORRUPTIONS`` cycles (default 40) of produce, tier, stop (kill -9 or clean), one random
    corruption (local active segment flip or tear, local index, every checkpoint, the RLMM snapshot, a remote
    segment flip or cut, a remote index), restart: every partition answers exactly the model - no record lost
    but those after a local corruption point, nothing corrupt served, CORRUPT_MESSAGE exactly where a remote
    segment went bad - and the broker always starts."""
    b, rng = broker, random.Random(SEED)
    b.create_topic("loc", max_batches_per_segment=100_000, enable_remote=False)
    b.create_topic("seg", max_batches_per_segment=4, enable_remote=False)
    b.create_topic("tier", max_batches_per_segment=3)
    b.create_topic("calm", max_batches_per_segment=3)
    model = Model([("loc", 0), ("seg", 0), ("tier", 0), ("calm", 0)])
    started = time.monotonic()
    for cycle in range(SOAK_CYCLES):
        what = soak_cycle(b, model, rng, cycle)
        print(what)  # the captured output of a failed run replays the cycles (and names the seed)
        for key in model.values:
            model.verify(b, key, what)
        assert_no_traceback(b)
    print(f"corruption soak: {SOAK_CYCLES} cycles in {time.monotonic() - started:.1f} s, "
          f"{sum(len(v) for v in model.values.values())} records, remote corrupt ranges {model.corrupt[('tier', 0)]}")
