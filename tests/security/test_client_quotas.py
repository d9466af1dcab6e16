"""Client quotas against a broker process, with real clients: AlterClientQuotas / DescribeClientQuotas, a
producer held to its produce quota over 30 s while another runs at full speed, a consumer held to its fetch
quota, request-time quotas muting a connection, and quotas kept across a restart.

The broker measures over ``quota.window.num=4`` one-second windows (Kafka's default is 11): a new sensor
lets a client burst ``window.num - 1`` seconds' worth of its quota before throttling starts, and the
shorter window keeps that warm-up (which the 30 s measurement leaves out) short.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from tests.broker.harness import BrokerProcess
from tests.security.clients import plain_client, plain_listener_props

from strata.client.wire import KafkaWire

WINDOWS = 4
ALTER, DESCRIBE = 49, 48


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("quotas"), {
        **plain_listener_props(acls=False),
        "quota.window.num": str(WINDOWS),
        "quota.window.size.seconds": "1",
        "num.partitions": "1",
    }, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}).start()
    try:
        yield b
    finally:
        b.stop()


def _entity(user: str | None = "-", client: str | None = "-") -> list[dict[str, Any]]:
    out = []
    if user != "-":
        out.append({"entity_type": "user", "entity_name": user})
    if client != "-":
        out.append({"entity_type": "client-id", "entity_name": client})
    return out


def alter(broker: BrokerProcess, entity: list[dict[str, Any]], ops: dict[str, float | None],
          validate_only: bool = False) -> tuple[int, str | None]:
    with KafkaWire(broker.bootstrap) as w:
        r = w.call(ALTER, 1, entries=[{"entity": entity, "ops": [
            {"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()]}], validate_only=validate_only)
    (entry,) = r.entries
    return int(entry.error_code), entry.error_message


def describe(broker: BrokerProcess, components: list[dict[str, Any]], strict: bool = False) -> Any:
    with KafkaWire(broker.bootstrap) as w:
        return w.call(DESCRIBE, 1, components=components, strict=strict)


def _quotas(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == 0, response.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def test_alter_and_describe_like_kafka(broker: BrokerProcess) -> None:
    assert alter(broker, _entity("carol"), {"producer_byte_rate": 1024}) == (0, None)
    assert alter(broker, _entity("carol", "app"), {"consumer_byte_rate": 2048, "request_percentage": 50})[0] == 0
    assert alter(broker, _entity(client=None), {"request_percentage": 200}, validate_only=True) == (0, None)
    got = _quotas(describe(broker, [{"entity_type": "user", "match_type": 0, "match": "carol"}]))
    assert got == {(("user", "carol"),): {"producer_byte_rate": 1024.0},
                   (("user", "carol"), ("client-id", "app")): {"consumer_byte_rate": 2048.0,
                                                               "request_percentage": 50.0}}
    strict = _quotas(describe(broker, [{"entity_type": "user", "match_type": 0, "match": "carol"}], strict=True))
    assert list(strict) == [(("user", "carol"),)]
    assert _quotas(describe(broker, [{"entity_type": "client-id", "match_type": 1, "match": None}])) == {}
    # Kafka's INVALID_REQUEST cases, each entry on its own
    assert alter(broker, _entity("carol"), {"producer_byte_rate": -1})[0] == 42
    assert alter(broker, _entity("carol"), {"producer_byte_rate": 1.5})[0] == 42
    assert alter(broker, _entity("carol"), {"not_a_quota": 1})[0] == 42
    assert alter(broker, [], {"producer_byte_rate": 1})[0] == 42
    assert alter(broker, [{"entity_type": "ip", "entity_name": "10.0.0.1"}], {"connection_creation_rate": 1})[0] == 42
    bad = describe(broker, [{"entity_type": "user", "match_type": 0, "match": None}])
    assert bad.error_code == 42 and "MATCH_TYPE_EXACT" in bad.error_message
    assert alter(broker, _entity("carol"), {"producer_byte_rate": None}) == (0, None)
    assert alter(broker, _entity("carol", "app"), {"consumer_byte_rate": None, "request_percentage": None})[0] == 0
    assert _quotas(describe(broker, [{"entity_type": "user", "match_type": 0, "match": "carol"}])) == {}


class _Producing:
    """A producer thread sending 1 KiB values as fast as librdkafka takes them; deliveries time-stamped."""

    def __init__(self, config: dict[str, Any], topic: str, limit_bytes: int | None = None) -> None:
        self.throttles: list[int] = []
        self.delivered: list[tuple[float, int]] = []
        self.errors: list[str] = []
        # requests well under the (window.num - 1) windows' budget: with larger ones Kafka's throttle formula
        # overshoots once a whole window expires during a throttle (librdkafka's default batch is 1 MB)
        self.producer = Producer({**config, "linger.ms": 5, "acks": 1, "queue.buffering.max.kbytes": 2048,
                                  "batch.size": 65536,
                                  "throttle_cb": lambda event: self.throttles.append(int(event.throttle_time * 1000))})
        self.topic = topic
        self.limit = limit_bytes
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            if err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
                self.errors.append(str(err))
        else:
            self.delivered.append((time.monotonic(), len(msg.value())))

    def _run(self) -> None:
        value = b"x" * 1024
        sent = 0
        while not self.stop.is_set() and (self.limit is None or sent < self.limit):
            try:
                self.producer.produce(self.topic, value, on_delivery=self._delivered)
                sent += len(value)
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
        if self.stop.is_set():  # the measurement is over: what is still queued would take seconds at the quota
            self.producer.purge(in_queue=True, in_flight=True)
        self.producer.flush(60)

    def bytes_between(self, start: float, end: float) -> int:
        return sum(n for t, n in self.delivered if start <= t < end)


def test_a_producer_is_held_to_its_quota_and_others_are_not(broker: BrokerProcess) -> None:
    quota = 256 * 1024
    assert alter(broker, _entity("alice"), {"producer_byte_rate": quota}) == (0, None)
    topic = f"quota-{uuid.uuid4().hex[:6]}"
    alice = _Producing(plain_client(broker, "alice", **{"client.id": "throttled"}), topic)
    started = time.monotonic()
    alice.thread.start()
    # meanwhile another client (bob, no quota) runs at full speed, 16 MiB
    bob = _Producing(plain_client(broker, "bob", **{"client.id": "throttled"}), topic, limit_bytes=16 << 20)
    bob_started = time.monotonic()
    bob.thread.start()
    bob.thread.join(60)
    bob_s = max(t for t, _ in bob.delivered) - bob_started
    assert sum(n for _, n in bob.delivered) == 16 << 20 and not bob.errors
    assert bob.throttles == [] or max(bob.throttles) == 0
    assert (16 << 20) / bob_s > 8 * quota, f"bob (no quota) managed only {(16 << 20) / bob_s / 1024:.0f} KiB/s"

    warm = started + WINDOWS + 1  # the first windows' burst allowance is over
    end = warm + 30
    alice.stop.wait(end + 0.5 - time.monotonic())  # the 30 s of measurement (nothing sets it: a timed wait)
    alice.stop.set()
    alice.thread.join(60)
    assert not alice.errors
    rate = alice.bytes_between(warm, end) / 30
    print(f"alice {rate / 1024:.1f} KiB/s against {quota / 1024:.0f}; bob {(16 << 20) / bob_s / 1024:.0f} KiB/s")
    assert abs(rate - quota) <= 0.1 * quota, f"alice produced {rate / 1024:.1f} KiB/s against {quota / 1024:.0f}"
    assert alice.throttles and max(alice.throttles) > 0  # throttle_time_ms reported to the client


def test_a_consumer_is_held_to_its_fetch_quota(broker: BrokerProcess) -> None:
    topic = f"fetchq-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    total = 3 << 20
    for _ in range(total // 1024):
        p.produce(topic, b"y" * 1024)
        p.poll(0)
    assert p.flush(30) == 0
    quota = 512 * 1024
    assert alter(broker, _entity(client="slow-reader"), {"consumer_byte_rate": quota}) == (0, None)

    def read(client_id: str) -> tuple[float, list[int]]:
        throttles: list[int] = []
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                      "client.id": client_id, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "throttle_cb": lambda e: throttles.append(int(e.throttle_time * 1000))})
        c.subscribe([topic])
        got = 0
        start = time.monotonic()
        deadline = start + 60
        while got < total and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got += len(m.value())
        elapsed = time.monotonic() - start
        c.close()
        assert got == total
        return elapsed, throttles

    fast_s, fast_throttles = read("fast-reader")
    slow_s, slow_throttles = read("slow-reader")
    # the first (window.num - 1) seconds' worth goes at once, the rest at the quota
    floor = (total - (WINDOWS - 1) * quota) / quota
    assert slow_s >= 0.8 * floor, f"3 MiB in {slow_s:.1f} s at a quota of 512 KiB/s"
    assert max(slow_throttles, default=0) > 0
    assert fast_s < slow_s / 2 and max(fast_throttles, default=0) == 0


def test_request_time_quota_mutes_the_connection(broker: BrokerProcess) -> None:
    assert alter(broker, _entity(client="busy"), {"request_percentage": 0.5}) == (0, None)
    with KafkaWire(broker.bootstrap, client_id="busy") as w:
        throttle = 0
        for _ in range(20_000):
            r = w.call(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True)
            throttle = int(r.throttle_time.total_seconds() * 1000)
            if throttle:
                break
        assert 0 < throttle <= 1000  # capped at one quota window, as Kafka caps request-time throttles
        before = time.monotonic()
        w.call(18, 3, client_software_name="t", client_software_version="1")  # exempt, but the channel is muted
        assert time.monotonic() - before >= 0.8 * throttle / 1000
    with KafkaWire(broker.bootstrap, client_id="idle") as other:  # another client-id is not throttled
        r = other.call(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True)
        assert r.throttle_time.total_seconds() == 0


def test_quotas_survive_a_restart(broker: BrokerProcess) -> None:
    assert alter(broker, _entity(None), {"consumer_byte_rate": 1 << 30}) == (0, None)
    broker.restart()
    got = _quotas(describe(broker, [{"entity_type": "user", "match_type": 1, "match": None}], strict=True))
    assert got == {(("user", None),): {"consumer_byte_rate": float(1 << 30)}}
