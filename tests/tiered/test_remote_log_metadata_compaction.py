"""``__remote_log_metadata`` compacted (KIP-1266) on a real broker: the real log cleaner keeps the topic's size
to the live remote segments, a restart that replays it in full rebuilds the same remote view, and
``kafka-remote-log-metadata-migration.sh`` moves a topic of the old format (version 0) to compaction.

The broker tiers a topic whose remote segments are deleted by retention all the time (one record per
segment, ``retention.bytes`` keeping a few), so every segment goes through its whole life: COPY_STARTED,
COPY_FINISHED, DELETE_STARTED, DELETE_FINISHED, then the two tombstones. The metadata topic gets small
segments (``segment.bytes``), ``min.cleanable.dirty.ratio`` and ``delete.retention.ms`` through
IncrementalAlterConfigs, as an operator would set them.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import ConfigResource
from tests.tiered.harness import TieredBroker, wait_until

from strata.client.wire import ADMIN_CLIENT_ID
from strata.tiered.api import RemotePartitionDeleteMetadata, RemotePartitionDeleteState, TopicIdPartition
from strata.tiered.metadata.keys import KeyKind, parse_key
from strata.tiered.metadata.serde import serialize
from strata.tiered.metadata.topic_based import SNAPSHOT_FILE_NAME

META = "__remote_log_metadata"
TOPIC = "t"
REPO = Path(__file__).resolve().parents[2]
BROKER = {"log.cleaner.backoff.ms": "100", "rlmm.config.remote.log.metadata.topic.num.partitions": "2"}
# Small segments so the cleaner gets rolled ones to clean; tombstones kept 1 s.
META_CLEANING = {"segment.bytes": "4096", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
                 "delete.retention.ms": "1000"}


def strata(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", *args], capture_output=True, text=True, timeout=timeout_s)


def migration(b: TieredBroker, *args: str) -> subprocess.CompletedProcess[str]:
    """The bin/ wrapper itself, as an operator runs it."""
    return subprocess.run([str(REPO / "bin" / "kafka-remote-log-metadata-migration.sh"),
                           "--bootstrap-server", b.bootstrap, *args], capture_output=True, text=True, timeout=120)


def topic_configs(b: TieredBroker, topic: str) -> dict[str, tuple[str, bool]]:
    """name -> (value, set on the topic itself)."""
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = b.admin().describe_configs([res])[res].result(timeout=30)
    return {name: (e.value, e.source == 1) for name, e in entries.items()}


def metadata_disk_bytes(b: TieredBroker) -> int:
    return sum(f.stat().st_size for d in (b.broker.data_dir / "logs").glob(f"{META}-*") for f in d.glob("*.log"))


def metadata_records(b: TieredBroker) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    """Every record of the metadata topic, read with a consumer: (partition, offset, key, value, timestamp)."""
    partitions = b.admin().list_topics(META, timeout=10).topics[META].partitions
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"meta-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out = []
    try:
        consumer.assign([CkTopicPartition(META, p, 0) for p in partitions])
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


def tiers_row(b: TieredBroker) -> dict:
    out = strata("tiers", "--bootstrap", b.bootstrap, "--json", "--topic", TOPIC)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["partitions"]
    return row


def remote_view(b: TieredBroker) -> dict:
    """What the broker says its remote tier holds, and every record a consumer reads from the log start."""
    row = tiers_row(b)
    view = {k: row[k] for k in ("log_start_offset", "local_log_start_offset", "highest_offset_in_remote_storage",
                                "log_end_offset", "remote_segments", "remote_bytes")}
    start, end = row["log_start_offset"], row["log_end_offset"]
    view["records"] = b.consume(TOPIC, 0, start, end - start)
    return view


def produce(b: TieredBroker, start: int, end: int, step: int = 4) -> None:
    """A few records at a time, each batch its own segment, waiting for them to be uploaded: faster, local
    retention would delete segments before the copier gets to them."""
    for first in range(start, end, step):
        last = min(first + step, end)
        b.produce(TOPIC, 0, [(f"k{i}", f"v{i}" * 8) for i in range(first, last)])
        wait_until(f"offsets up to {last - 2} uploaded", lambda last=last: b.list_offsets(TOPIC, 0, -5)[0] >= last - 2,
                   interval_s=0.05)


def settle(b: TieredBroker, produced: int) -> None:
    """Until every segment but the active one is uploaded, and retention has deleted what it will."""
    def settled() -> bool:
        row = tiers_row(b)
        return row["highest_offset_in_remote_storage"] == produced - 2 and row["copy_lag_segments"] == 0 \
            and row["remote_segments"] == b.remote_records(TOPIC, 0) and row["remote_segments"] <= 8
    wait_until("uploads and remote retention to settle", settled, timeout_s=90, interval_s=0.3)


def live_segments(b: TieredBroker) -> set[uuid.UUID]:
    """The ids of the segments in the store: uploaded and not deleted, from the ``local`` RSM's events."""
    copied = {e["segment_id"] for e in b.events("COPY_SEGMENT", TOPIC, 0)}
    deleted = {e["segment_id"] for e in b.events("DELETE_SEGMENT", TOPIC, 0)}
    return {uuid.UUID(bytes=base64.urlsafe_b64decode(s + "==")) for s in copied - deleted}


def latest_per_key(records: list) -> list:
    """The records a fully compacted topic would keep: the last one of each key (tombstones included)."""
    last = {}
    for record in sorted(records, key=lambda r: (r[0], r[1])):
        last[(record[0], record[2])] = record
    return list(last.values())


def live_segment_keys(records: list) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """(segments with a base record, segments with an update record) among the records with a value."""
    bases, updates = set(), set()
    for _p, _o, key, value, _ts in records:
        if value is None:
            continue
        parsed = parse_key(key)
        if parsed.kind is KeyKind.SEGMENT:
            bases.add(parsed.segment_id)
        elif parsed.kind is KeyKind.SEGMENT_UPDATE:
            updates.add(parsed.segment_id)
    return bases, updates


def test_compacted_metadata_follows_the_live_segments(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **BROKER).start()
    try:
        configs = topic_configs(b, META)
        assert configs["cleanup.policy"] == ("compact", True)  # a new cluster: version 2 from the start
        # History first, with the cleaner kept off the topic (min.compaction.lag.ms): the uncompacted size.
        b.alter_topic(META, {**META_CLEANING, "min.compaction.lag.ms": "3600000"})
        b.create_topic(TOPIC, max_batches_per_segment=1, retention_bytes="600")
        produce(b, 0, 80)
        settle(b, 80)
        history = metadata_records(b)
        uncompacted = metadata_disk_bytes(b)
        assert all(key is not None for _p, _o, key, _v, _ts in history)  # every record keyed
        tombstones = sum(1 for _p, _o, _k, value, _ts in history if value is None)
        deleted = b.delete_count(TOPIC, 0)
        assert deleted >= 70 and tombstones == 2 * deleted  # base key and update key of every deleted segment
        before = remote_view(b)

        # Now let the cleaner work: the topic shrinks to the live segments' base and last update records, plus
        # what the active segment (never cleaned: 4 KiB here) holds.
        b.alter_topic(META, {"min.compaction.lag.ms": "0"})
        live = live_segments(b)
        bound = 4096 + 2 * 300 * len(live) + 2048

        def compacted() -> bool:
            now = live_segments(b)  # (read again: a deletion after the settle drops its records rightly)
            bases, _ = live_segment_keys(metadata_records(b))
            return now <= bases and len(bases) <= len(now) + 6 and metadata_disk_bytes(b) <= bound
        wait_until("the cleaner to compact the metadata", compacted, timeout_s=90, interval_s=0.5)
        after_cleaning = metadata_disk_bytes(b)
        records = metadata_records(b)
        bases, updates = live_segment_keys(records)
        print(f"\n__remote_log_metadata: {len(history)} records / {uncompacted} bytes on disk before compaction, "
              f"{len(records)} records / {after_cleaning} bytes after; {len(live)} live remote segments, "
              f"{deleted} deleted")
        # No update without its base record, once the cleaner has caught up with the tombstones: the two of a
        # deleted segment (base key first) may fall in different segments of the topic, so for a moment the base
        # record can be cleaned away while the update's tombstone still waits in the active segment.
        wait_until("every update record's base record", lambda: set.issubset(*reversed(live_segment_keys(
            latest_per_key(metadata_records(b))))), timeout_s=30, interval_s=0.5)
        assert remote_view(b) == before  # the live cache did not notice anything

        # A restart that replays the compacted topic in full (no snapshot) rebuilds the same remote view.
        b.stop()
        (b.broker.data_dir / "logs" / SNAPSHOT_FILE_NAME).unlink()
        logged = b.broker.log_path.stat().st_size
        b.start()
        wait_until("the restarted broker to serve the remote tier", lambda: tiers_row(b)["remote_segments"] ==
                   before["remote_segments"], timeout_s=60, interval_s=0.3)
        assert remote_view(b) == before
        log_text = b.broker.log_path.read_bytes()[logged:].decode(errors="replace")
        assert "tombstone for its" not in log_text and "can not be transitioned" not in log_text, log_text

        # More history: the topic's size still follows the live segments, not the history.
        produce(b, 80, 160)
        settle(b, 160)
        live = live_segments(b)
        wait_until("the new history compacted too", compacted, timeout_s=90, interval_s=0.5)
        assert remote_view(b)["remote_segments"] == len(live)
        print(f"after 80 more uploads: {metadata_disk_bytes(b)} bytes, {len(metadata_records(b))} records")
    finally:
        b.stop()


# -- migration: version 0 -> 1 -> 2 --------------------------------------------------------------------------


def legacy_records(b: TieredBroker, n: int) -> None:
    """Records as Kafka's RLMM (and Strata's before keys) wrote them: null key, produced with the client id
    brokers write internal topics with. They are the metadata of partitions whose deletion finished, harmless
    to replay."""
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0,
                         "client.id": ADMIN_CLIENT_ID})
    errors: list = []
    for i in range(n):
        md = RemotePartitionDeleteMetadata(TopicIdPartition(uuid.uuid4(), "gone", i),
                                           RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
                                           int(time.time() * 1000), 1)
        producer.produce(META, value=serialize(md), partition=i % 2,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors


def test_migration_from_version_0(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **BROKER).start()
    try:
        # An existing cluster: the topic has cleanup.policy=delete (version 0) and null-key records.
        b.alter_topic(META, {"cleanup.policy": "delete", "segment.bytes": "4096", "segment.ms": "1000"})
        # The tiered topic's retention (2 s) is shorter than the metadata's at version 1 (10 s): its segments
        # are deleted before their metadata could expire, as Kafka advises.
        b.create_topic(TOPIC, max_batches_per_segment=1, retention_ms="2000")
        produce(b, 0, 10)
        wait_until("uploads", lambda: b.remote_records(TOPIC, 0) + b.delete_count(TOPIC, 0) >= 9)
        legacy_records(b, 20)
        legacy_written = time.time()

        check = migration(b, "--check")
        assert check.returncode == 1, check.stderr
        assert "remote.log.metadata.version 0 (cleanup.policy=delete)" in check.stdout
        assert "20 records without a key remain" in check.stdout, check.stdout
        assert "Scanning __remote_log_metadata: 2/2 partitions" in check.stderr  # progress
        refused = migration(b, "--check", "--upgrade-to-v2")
        assert refused.returncode == 1
        assert "not upgrading to version 2: 20 records without a key remain" in refused.stderr
        assert "Run --upgrade-to-v1 --retention-ms N first" in refused.stderr
        assert topic_configs(b, META)["cleanup.policy"][0] == "delete"

        usage = migration(b, "--upgrade-to-v1")
        assert usage.returncode == 1 and 'Missing required argument "[retention-ms]"' in usage.stderr

        # 30 s: long enough that the checks below run before the keyless records expire on a loaded machine (at
        # 10 s, the five tool runs since they were written once took longer in a busy run)
        v1 = migration(b, "--upgrade-to-v1", "--retention-ms", "30000")
        assert v1.returncode == 0, v1.stderr
        assert "Upgraded __remote_log_metadata to remote.log.metadata.version 1" in v1.stdout
        assert "WARNING" not in v1.stderr  # the tiered topic keeps its data 2 s only
        configs = topic_configs(b, META)
        assert (configs["cleanup.policy"][0], configs["retention.ms"], configs["min.compaction.lag.ms"]) == \
            ("compact,delete", ("30000", True), ("30000", True))

        assert time.time() - legacy_written < 25, "the machine is too slow for this test's 30 s retention"
        too_soon = migration(b, "--check", "--upgrade-to-v2")
        assert too_soon.returncode == 1
        assert "The newest expires at about" in too_soon.stderr and "Retry after" in too_soon.stderr

        # The tiered topic keeps going meanwhile; its new metadata is keyed and survives.
        produce(b, 10, 25)
        wait_until("the null-key records to expire by retention.ms", lambda: migration(b, "--check").returncode == 0,
                   timeout_s=90, interval_s=1.0)
        assert time.time() - legacy_written >= 30  # retention counts from the records' timestamps
        v2 = migration(b, "--check", "--upgrade-to-v2")
        assert v2.returncode == 0, v2.stderr
        assert "No record without a key" in v2.stdout
        assert "cleanup.policy=compact (retention.ms and min.compaction.lag.ms overrides removed)" in v2.stdout
        configs = topic_configs(b, META)
        assert configs["cleanup.policy"] == ("compact", True)
        assert not configs["retention.ms"][1] and not configs["min.compaction.lag.ms"][1]
        assert migration(b, "--upgrade-to-v2").stdout.endswith("is at version 2 already: nothing to do.\n")
        back = migration(b, "--upgrade-to-v1", "--retention-ms", "1000")
        assert back.returncode == 1 and "at version 2 already" in back.stderr

        # Compacted from now on; a full replay rebuilds what the broker holds (the topic keeps its data now).
        b.alter_topic(META, {"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"})
        b.alter_topic(TOPIC, {"retention.ms": "3600000", "retention.bytes": "600"})
        produce(b, 25, 60)
        settle(b, 60)
        records = metadata_records(b)
        assert records and all(key is not None for _p, _o, key, _v, _ts in records)
        before = remote_view(b)
        b.stop()
        (b.broker.data_dir / "logs" / SNAPSHOT_FILE_NAME).unlink()
        b.start()
        wait_until("the restarted broker to serve the remote tier", lambda: tiers_row(b)["remote_segments"] ==
                   before["remote_segments"], timeout_s=60, interval_s=0.3)
        assert remote_view(b) == before
    finally:
        b.stop()
