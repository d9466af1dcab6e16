"""KIP-956 remote storage quotas through a real broker: ``remote.log.manager.copy.max.bytes.per.second`` paces
the uploads of rolled segments (and raising it with IncrementalAlterConfigs frees the rest at once), and
``remote.log.manager.fetch.max.bytes.per.second`` paces a consumer reading the remote tier without losing or
reordering a record. Rates are measured from what the store and the consumer saw, and from the broker's
metrics.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from tests.broker.kafka_wire import WireClient
from tests.tiered.harness import WAIT_S, TieredBroker, wait_until

from strata.tools.tiers import metrics_endpoint

COPY_QUOTA = 200_000  # bytes per second
FETCH_QUOTA = 200_000
INCREMENTAL_ALTER_CONFIGS, BROKER = 44, 4
SLACK = 1.3  # a measured rate may exceed its quota by this much (clock granularity, the last upload's duration)


def metric(b: TieredBroker, name: str) -> float | None:
    host, port = metrics_endpoint(b.bootstrap)
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def set_broker_config(b: TieredBroker, entity: str, key: str, value: str) -> None:
    """IncrementalAlterConfigs v1 SET on a BROKER resource; "" is the cluster-wide default, which client
    libraries refuse to name, so the request goes over the wire as ``kafka-configs --entity-default`` sends it."""
    with WireClient(b.bootstrap) as c:
        resp = c.call(INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[{
            "resource_type": BROKER, "resource_name": entity,
            "configs": [{"name": key, "config_operation": 0, "value": value}]}])
    (r,) = resp.responses
    assert int(r.error_code) == 0, r


def remote_segments(b: TieredBroker, topic: str) -> list[tuple[float, int, int]]:
    """(mtime, start offset, bytes) of every uploaded ``.log`` of ``topic``, oldest upload first."""
    out = []
    for path in b.remote_dir.glob(f"{topic}-*/0/*.log"):
        st = path.stat()
        out.append((st.st_mtime, int(path.name[:20]), st.st_size))
    return sorted(out)


def produce(b: TieredBroker, topic: str, records: int, per_segment: int, value_bytes: int) -> int:
    """``records`` one-record batches, segments rolled about every ``per_segment`` of them; the active
    segment's base offset (everything below it gets uploaded)."""
    b.create_topic(topic, max_batches_per_segment=per_segment)
    b.produce(topic, 0, [(f"k{i}", f"{i:08d}" + "x" * value_bytes) for i in range(records)])
    return max(int(p.name[:20]) for p in b.log_dir(topic, 0).glob("*.log"))


def wait_all_uploaded(b: TieredBroker, topic: str, active_base: int) -> None:
    wait_until(f"every segment of {topic} below {active_base} uploaded", lambda: any(
        e["end_offset"] == active_base - 1 for e in b.events("COPY_SEGMENT", topic, 0)))


def test_copy_quota_paces_uploads_and_raising_it_frees_the_rest(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path, **{"remote.log.manager.copy.max.bytes.per.second": str(COPY_QUOTA)}).start()
    try:
        # 64 records of 50 kB in segments of 4 to 7: some 3.2 MB, 16 s at the quota
        active = produce(b, "t", 64, 4, 50_000)
        # Throttled: the first segment is free (nothing recorded yet), each further one waits its size / quota.
        wait_until("4 segments uploaded", lambda: len(remote_segments(b, "t")) >= 4)
        uploaded = remote_segments(b, "t")
        assert max(start for _, start, _ in uploaded) < active - 16, "uploaded at once: the copy quota did nothing"
        # segment k starts once the k before it fit the quota: their bytes over the time from the first upload to
        # the last (the last one's own bytes wait on nothing yet)
        span = uploaded[-1][0] - uploaded[0][0]
        rate = sum(size for _, _, size in uploaded[:-1]) / span
        print(f"copy: {len(uploaded)} segments, {rate:,.0f} B/s measured for a {COPY_QUOTA:,} B/s quota")
        assert rate <= SLACK * COPY_QUOTA, (rate, uploaded)
        assert rate >= 0.4 * COPY_QUOTA, (rate, uploaded)  # paced, not stalled
        assert [start for _, start, _ in uploaded] == sorted(start for _, start, _ in uploaded)  # oldest first
        assert (metric(b, "kafka_server_RemoteLogManager_remote_copy_throttle_time_ms_total") or 0) > 0
        assert metric(b, "kafka_server_RLMCopy_quota_bytes_per_second") == COPY_QUOTA
        byte_rate = metric(b, "kafka_server_RLMCopy_byte_rate")
        # the next segment is recorded before its upload (Kafka's order): the rate runs up to one segment over
        assert byte_rate is not None and 0 < byte_rate < 2 * COPY_QUOTA, byte_rate

        # Raised cluster-wide at run time: the waiting copy task re-checks at once and the rest goes unpaced.
        before = remote_segments(b, "t")
        raised = time.monotonic()
        set_broker_config(b, "", "remote.log.manager.copy.max.bytes.per.second", str(1000 * COPY_QUOTA))
        wait_all_uploaded(b, "t", active)
        took = time.monotonic() - raised
        after = remote_segments(b, "t")
        left_bytes = sum(size for _, _, size in after) - sum(size for _, _, size in before)
        print(f"copy: the last {len(after) - len(before)} segments ({left_bytes:,} B) took {took:.2f} s after the "
              f"raise ({left_bytes / COPY_QUOTA:.1f} s at the old quota)")
        assert left_bytes >= 5 * COPY_QUOTA and took < 0.5 * left_bytes / COPY_QUOTA, (left_bytes, took)
        assert metric(b, "kafka_server_RLMCopy_quota_bytes_per_second") == 1000 * COPY_QUOTA
        b.wait_earliest_local("t", 0, active)
    finally:
        b.stop()


def test_fetch_quota_paces_remote_reads_and_loses_nothing(tmp_path: Path) -> None:
    b = TieredBroker(tmp_path).start()
    try:
        total, value_bytes = 41, 25_000  # ~1 MB in segments of ~100 kB: half a second of quota each
        active = produce(b, "t", total, 4, value_bytes)
        wait_all_uploaded(b, "t", active)
        b.wait_earliest_local("t", 0, active)  # offsets below it are only in the remote tier
        # Set per broker at run time (the broker started without one).
        set_broker_config(b, "1", "remote.log.manager.fetch.max.bytes.per.second", str(FETCH_QUOTA))
        wait_until("fetch quota applied", lambda: metric(b, "kafka_server_RLMFetch_quota_bytes_per_second")
                   == FETCH_QUOTA)

        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "quota", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 100, "log_level": 3})
        got: list[tuple[float, int, str, str]] = []
        try:
            consumer.assign([CkTopicPartition("t", 0, 0)])
            deadline = time.monotonic() + WAIT_S
            while len(got) < total and time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is None or msg.error():
                    continue
                got.append((time.monotonic(), msg.offset(), msg.key().decode(), msg.value().decode()))
        finally:
            consumer.close()

        # every record, in order, nothing lost or repeated
        assert [(o, k, v) for _, o, k, v in got] == [
            (i, f"k{i}", f"{i:08d}" + "x" * value_bytes) for i in range(total)]
        # The first segment's read is free; each further one waits until the bytes read before it fit the quota:
        # those bytes over the time from the first record to the first of the last remote segment.
        last_start = max(e["start_offset"] for e in b.events("COPY_SEGMENT", "t", 0))
        span = next(t for t, o, _, _ in got if o == last_start) - got[0][0]
        before_last = sum(len(k) + len(v) for _, o, k, v in got if o < last_start)
        rate = before_last / span
        print(f"fetch: {before_last:,} B of {last_start} remote records in {span:.2f} s, {rate:,.0f} B/s "
              f"measured for a {FETCH_QUOTA:,} B/s quota")
        assert rate <= SLACK * FETCH_QUOTA, rate
        throttled_ms = metric(b, "kafka_server_RemoteLogManager_remote_fetch_throttle_time_ms_total") or 0
        assert throttled_ms > 0
        read = metric(b, 'kafka_server_BrokerTopicMetrics_RemoteFetchBytesPerSec_total{topic="t"}') or 0
        assert read >= active * value_bytes  # every remote record was read once the quota let it
        assert read <= 1.5 * active * (value_bytes + 200)  # throttled fetches read nothing
    finally:
        b.stop()
