"""The remote chunk cache (``rsm.config.fetch.chunk.cache.*``) in a real broker, read by a real consumer: a
second consumer of the remote tier is served from the cache without touching the store (the local store's
event history proves it), with second-access admission only what is read again is kept, on S3 in both
object formats (plain, and chunked + encrypted), deleted segments leave the cache, and a bad cache config
stops the broker naming the key.
"""

from __future__ import annotations

import re
import urllib.request
import uuid
from pathlib import Path

import pytest
from tests.support.keys import v2_broker_props
from tests.support.seaweedfs import SeaweedFS
from tests.tiered.harness import S3TieredBroker, TieredBroker, wait_until

from strata.tools.tiers import metrics_endpoint

PREFIX = "kafka_log_remote_RemoteLogManager_RemoteLogChunkCache"
DISK_CACHE = {"rsm.config.fetch.chunk.cache.class": "disk", "rsm.config.fetch.chunk.cache.size": str(64 << 20),
              "rsm.config.chunk.size": "65536"}


def metric(b: TieredBroker, name: str) -> float:
    host, port = metrics_endpoint(b.bootstrap)
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{re.escape(PREFIX + name)} (\S+)$", text, re.MULTILINE)
    assert m is not None, f"no metric {PREFIX + name}"
    return float(m.group(1))


def offload(b: TieredBroker, segments: int) -> None:
    b.create_topic("t", max_batches_per_segment=1)
    b.produce("t", 0, [(f"k{i}", f"v{i}" * 50) for i in range(segments + 1)])
    b.wait_offloaded("t", 0, list(range(segments)))
    b.wait_earliest_local("t", 0, segments)


def consume_all(b: TieredBroker, total: int) -> None:
    got = b.consume("t", 0, 0, total)
    assert [(o, k, v) for o, k, v in got] == [(o, f"k{o}", f"v{o}" * 50) for o in range(total)]


def test_a_second_consumer_of_the_remote_tier_is_served_from_the_disk_cache(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **DISK_CACHE).start()
    try:
        offload(b, 6)
        consume_all(b, 7)
        store_reads = b.fetch_count("t", 0)
        assert store_reads == 6  # one chunk-aligned read per segment (each is smaller than a chunk)
        consume_all(b, 7)
        assert b.fetch_count("t", 0) == store_reads  # not one store read more
        assert metric(b, "Misses") == 6 and metric(b, "Hits") >= 6
        cache_dir = b.broker.data_dir / "logs" / "remote-chunk-cache"
        files = [p for p in cache_dir.iterdir() if p.is_file()]
        assert len(files) == 6 and metric(b, "Bytes") == sum(p.stat().st_size for p in files)
        b.delete_records("t", 0, 6)  # the six remote segments expire: their chunks leave the cache
        wait_until("the deleted segments' chunks dropped", lambda: metric(b, "Bytes") == 0)
        assert not [p for p in cache_dir.iterdir() if p.is_file()]
    finally:
        b.stop()


def test_with_second_access_admission_a_one_off_read_leaves_the_cache_empty(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **DISK_CACHE, **{"rsm.config.fetch.chunk.cache.admission": "second-access"}).start()
    try:
        offload(b, 4)
        consume_all(b, 5)
        assert metric(b, "Bytes") == 0 and metric(b, "NotAdmitted") == 4
        consume_all(b, 5)  # read again: kept
        reads = b.fetch_count("t", 0)
        assert reads == 8 and metric(b, "Bytes") > 0
        consume_all(b, 5)
        assert b.fetch_count("t", 0) == reads
    finally:
        b.stop()


@pytest.mark.parametrize("fmt", ["v1", "v2"])
def test_the_cache_serves_s3_segments_in_both_object_formats(tmp_path: Path, seaweedfs: SeaweedFS,
                                                              fmt: str) -> None:
    b = S3TieredBroker(tmp_path, seaweedfs, key_prefix=f"test-{uuid.uuid4().hex[:8]}/",
                       **{"remote.fetch.max.wait.ms": "10000", **DISK_CACHE,
                          **(v2_broker_props(tmp_path / "keys") if fmt == "v2" else {})}).start()
    try:
        offload(b, 4)
        consume_all(b, 5)
        assert metric(b, "Misses") == 4
        consume_all(b, 5)
        assert metric(b, "Misses") == 4 and metric(b, "Hits") >= 4
    finally:
        b.stop()


def test_a_bad_cache_config_stops_the_broker_naming_the_key(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **{"rsm.config.fetch.chunk.cache.class": "disk"})
    with pytest.raises(RuntimeError, match=r"fetch\.chunk\.cache\.size"):
        b.start()
    b.stop()
