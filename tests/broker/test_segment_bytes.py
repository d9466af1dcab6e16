"""``segment.bytes`` on a single node, over the socket: a produce larger than a segment is refused with
RECORD_LIST_TOO_LARGE (Kafka's ``UnifiedLog.append``), one that fits is stored and rolls at the limit; the
cluster variant is ``tests/cluster/test_topic_configs_cluster.py``."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, produce

from strata.protocol.records.builder import build_batch


def test_a_produce_larger_than_a_segment_is_refused_and_segments_roll_at_the_limit(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("seg", 1, 1, config={"segment.bytes": "16384"})])["seg"].result(20)
    with WireClient(broker.bootstrap) as w:
        big = build_batch([b"x" * 100] * 200)  # ~21 KB in one batch
        r = produce(w, "seg", 0, big)
        assert int(r.error_code) == KafkaError.RECORD_LIST_TOO_LARGE
        assert "exceeds the maximum configured segment size of 16384" in (r.error_message or "")
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "batch.size": 4096, "linger.ms": 5})
    for i in range(2_000):
        p.produce("seg", value=b"%099d" % i, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
    assert p.flush(30) == 0 and errors == []
    sizes = [f.stat().st_size for f in sorted((broker.data_dir / "logs" / "seg-0").glob("*.log"))]
    assert len(sizes) >= sum(sizes) // 16384 and max(sizes) <= 16384, sizes
