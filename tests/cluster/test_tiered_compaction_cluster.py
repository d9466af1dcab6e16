"""Compacted topics in tiered storage (KIP-1272) in a 3-broker cluster on S3 (SeaweedFS).

Only the partition's leader rewrites remote segments; followers clean their local copies and see the
replacements through ``__remote_log_metadata``. The leader is killed twice in the middle of a remote
rewrite (a crash point armed on every broker, woken on the leader alone: after the new segment's upload,
before its COPY_SEGMENT_FINISHED, then after COPY_SEGMENT_FINISHED, before the old segment's retirement).
Right after each kill a consumer from offset 0 must still find every live key's latest value (the range
served by one complete version, never a gap); in the end it finds exactly those, and the bucket holds
exactly the segments the metadata lists as live, one per range.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewTopic
from tests.cluster.harness import running_cluster, wait_until
from tests.diskless.test_diskless_cluster import s3_props
from tests.support.seaweedfs import SeaweedFS
from tests.tiered.harness import metadata_states
from tests.tiered.test_tiered_compaction import FILLER, Latest, expected_view, produce_updates, read_all

TOPIC = "cdc"
PROPS = {"log.cleaner.backoff.ms": "200", "remote.log.manager.task.interval.ms": "200",
         "remote.log.manager.task.retry.backoff.ms": "200", "log.retention.check.interval.ms": "200",
         "log.initial.task.delay.ms": "200"}
TOPIC_CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": "true", "local.retention.bytes": "1",
                "segment.bytes": "65536", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "2000",
                "index.interval.bytes": "4096"}
# The default suite kills at the retirement step (two finished segments for one range); the kill after the
# upload (a dangling COPY_SEGMENT_STARTED) runs in make soak - single node, tests/tiered covers every step.
POINTS = [pytest.param("copy.after_upload/rewrite", marks=pytest.mark.slow), "remote.rewrite.before_retire"]


def _updates(rng: random.Random, round_: int, n: int) -> list[tuple[bytes, bytes | None]]:
    return [(b"key-%04d" % rng.randrange(400), b"r%d-%05d " % (round_, i) + rng.randbytes(rng.randrange(40, 160)))
            for i in range(n)]


def _merge(latest: Latest, got: Latest) -> None:
    for key, (offset, value) in got.items():
        if key not in latest or latest[key][0] < offset:
            latest[key] = (offset, value)


def _bucket_segments(s3: SeaweedFS, prefix: str) -> dict[str, int]:
    """segment id -> start offset of every ``.log`` object of the topic's partition 0 in the bucket."""
    out = {}
    for key in s3.list_keys(prefix):
        parts = key[len(prefix):].split("/")
        if len(parts) == 3 and parts[0][:-23] == TOPIC and parts[1] == "0" and parts[2].endswith(".log"):
            out[parts[2][21:-4]] = int(parts[2][:20])
    return out


def _high_watermark(bootstrap: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{time.monotonic_ns()}"})
    try:
        return int(c.get_watermark_offsets(CkTopicPartition(TOPIC, 0), timeout=10)[1])
    except Exception:  # noqa: BLE001 - no leader known yet: not there
        return -1
    finally:
        c.close()


@pytest.mark.parametrize("point", POINTS)
def test_leader_killed_mid_rewrite_the_new_leader_finishes_and_no_gap_is_served(
        zk_connect: str, tmp_path: Path, seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    prefix = f"tc-{point.split('.')[0]}-{time.monotonic_ns()}/"
    monkeypatch.setenv("STRATA_CRASH_POINT", point)
    monkeypatch.setenv("STRATA_CRASH_POINT_ARM", "signal")  # dormant until SIGUSR1: only the leader dies
    with running_cluster(zk_connect, tmp_path, 3, {**s3_props(seaweedfs, prefix), **PROPS}, verbose=True) as cluster:
        monkeypatch.delenv("STRATA_CRASH_POINT")  # a restarted broker is not armed
        monkeypatch.delenv("STRATA_CRASH_POINT_ARM")
        cluster.admin().create_topics([NewTopic(TOPIC, 1, 3, config=TOPIC_CONFIG)])[TOPIC].result(30)
        cluster.wait_full_isr(TOPIC)
        rng = random.Random(3)
        latest: Latest = {}
        _merge(latest, produce_updates(cluster.bootstrap, TOPIC, _updates(rng, 0, 3000)))
        leader = cluster.leader_of(TOPIC, 0)
        wait_until(lambda: len(_bucket_segments(seaweedfs, prefix)) >= 3, 60, "segments uploaded")
        os.kill(cluster.brokers[leader].pid(), signal.SIGUSR1)
        _merge(latest, produce_updates(cluster.bootstrap, TOPIC, _updates(rng, 1, 3000)))
        wait_until(lambda: cluster.brokers[leader].proc.poll() is not None, 60, "the leader dying mid-rewrite")
        assert f"strata crash point {point.split('/')[0]}" in cluster.brokers[leader].tail(100_000)
        wait_until(lambda: cluster.leader_of(TOPIC, 0) not in (leader, -1), 30, "a new leader")
        # At once: every live key's latest value is served (superseded ones may still be there too), once the new
        # leader's high watermark has reached the acknowledged end (on a loaded machine it lags a moment, and a
        # read up to a lower watermark missed the last values).
        end = max(offset for offset, _ in latest.values()) + 1
        wait_until(lambda: _high_watermark(cluster.bootstrap) >= end, 60, "the new leader's high watermark")
        seen = set(read_all(cluster.bootstrap, TOPIC))
        missing = [r for r in expected_view(latest, end) if r not in seen]
        assert not missing, f"{len(missing)} latest values not served after the leader change, first {missing[0]}"
        cluster.brokers[leader].proc = None
        cluster.brokers[leader].start()
        cluster.wait_full_isr(TOPIC, 60)
        filler = produce_updates(cluster.bootstrap, TOPIC, FILLER)
        tracked_end = min(offset for offset, _ in filler.values())
        wait_until(lambda: [r for r in read_all(cluster.bootstrap, TOPIC) if r[0] < tracked_end]
                   == expected_view(latest, tracked_end), 90, "exactly the latest value of every live key")

        def one_version_and_no_orphan() -> bool:
            bucket = _bucket_segments(seaweedfs, prefix)
            states = metadata_states(SimpleNamespace(bootstrap=cluster.bootstrap), TOPIC, 0)  # type: ignore[arg-type]
            live = {sid for sid, (_start, state) in states.items() if state == 1}
            return len(set(bucket.values())) == len(bucket) and set(bucket) == live

        wait_until(one_version_and_no_orphan, 60, "the bucket holding exactly the live segments, one per range")
