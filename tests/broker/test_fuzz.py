"""Malformed input cannot take the broker down: >= 10,000 hostile frames, then real clients still work.

Hypothesis generates frames from valid requests of every API the broker serves (and a few it
does not): bytes flipped, bodies truncated or extended, headers with garbage bodies, unknown API
keys and versions, random bytes with and without framing, size prefixes that are negative or
above ``socket.request.max.bytes``, frames cut off mid-way. They go over a pool of connections;
after each framed one a ping (ApiVersions v0 with a reserved correlation id) shows the broker
processed it and whether it kept the connection (answer) or closed it (EOF, then reconnect).

Afterwards: the process is alive, its log has no traceback (a handler that raises is a bug even
though the connection layer turns it into UNKNOWN_SERVER_ERROR), and confluent-kafka can still
produce and consume. ``derandomize`` makes the frames the same on every run.

The second part pins down unknown-version answers with raw sockets: ApiVersions at an unknown
version gets a v0 response with UNSUPPORTED_VERSION (35) and the supported list, other APIs get
an error response at the requested version (or a bare header + error code when no schema
exists), and the connection stays open in both cases.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, decode_response, encode_request

from strata.protocol.records import BatchBuilder

MAX_REQUEST = 256 * 1024
TOPIC = "fuzz-topic"
PING_TIMEOUT_S = 1.0
PING_BASE = 0x40000000  # correlation ids of pings; seeds use small ones
SIZE = struct.Struct(">i")

EXAMPLES = 100
FRAMES_PER_EXAMPLE = (100, 130)


def _batch(*values: bytes, pid: int = -1, seq: int = -1) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    for v in values:
        b.append(v, key=b"k", headers=[("h", b"v")])
    return b.build()


def _fetch_topics(version: int) -> list[dict[str, object]]:
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 65536, "current_leader_epoch": -1,
            "log_start_offset": -1, "last_fetched_epoch": -1}
    return [{"topic": TOPIC, "topic_id": None, "partitions": [part]}]


def seed_frames() -> list[bytes]:
    """Valid requests (size prefix included) for the served APIs across versions, and a few others."""
    out = []
    corr = 1

    def add(key: int, version: int, **fields: object) -> None:
        nonlocal corr
        out.append(encode_request(key, version, corr, **fields))
        corr += 1

    for v in (0, 1, 2, 3, 4):
        add(18, v, client_software_name="fuzz", client_software_version="1.0")
    for v in (0, 1, 4, 9, 12, 13):
        add(3, v, topics=[{"name": TOPIC, "topic_id": None}], allow_auto_topic_creation=False,
            include_topic_authorized_operations=True, include_cluster_authorized_operations=True)
    add(3, 12, topics=None)
    for v in (3, 7, 9, 11):
        for acks in (-1, 0):
            add(0, v, acks=acks, timeout=1000, transactional_id=None, topic_data=[
                {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch(b"fuzz", b"value")}]}])
    add(0, 9, acks=1, timeout=1000, transactional_id=None, topic_data=[
        {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch(b"idem", pid=0, seq=0)}]}])
    for v in (4, 7, 11, 12, 13, 16, 17):
        add(1, v, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=v % 2, session_id=0,
            session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[], topics=_fetch_topics(v))
    for v in (1, 2, 5, 7, 9):
        add(2, v, replica_id=-1, isolation_level=0, topics=[{"name": TOPIC, "partitions": [
            {"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1} for ts in (-1, -2, -3, 0)]}])
    for v in (0, 2, 4):
        add(22, v, transactional_id=None, transaction_timeout=1000, producer_id=-1, producer_epoch=-1)
    for v in (2, 3, 4):
        add(23, v, replica_id=-1, topics=[{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}])
    for v in (0, 1):
        add(60, v, include_cluster_authorized_operations=True, endpoint_type=1)
    # APIs this broker may not serve: answered with an error or served by a later handler, never a crash.
    add(19, 5, timeout=1000, validate_only=True, topics=[
        {"name": "fuzz-created", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}])
    add(10, 4, key_type=0, coordinator_keys=["fuzz-group"])
    add(32, 4, include_synonyms=False, include_documentation=False, resources=[
        {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}])
    return out


SEEDS = seed_frames()


@dataclass(frozen=True)
class Frame:
    data: bytes
    kind: str
    final: bool = False  # leaves the connection mid-frame or is refused outright: send, then close


def _reframe(payload: bytes, kind: str) -> Frame:
    return Frame(SIZE.pack(len(payload)) + payload, kind)


@st.composite
def frames(draw: st.DrawFn) -> Frame:
    seed = draw(st.sampled_from(SEEDS))
    payload = seed[4:]
    kind = draw(st.sampled_from([
        "valid", "flip", "flip", "flip", "truncate", "extend", "garbage-body", "unknown-version", "unknown-key",
        "random-framed", "oversize", "negative-size", "raw-random", "partial", "zero-size", "short-header",
    ]))
    if kind == "valid":
        return Frame(seed, kind)
    if kind == "flip":
        body = bytearray(payload)
        for _ in range(draw(st.integers(1, 4))):
            body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
        return _reframe(bytes(body), kind)
    if kind == "truncate":
        return _reframe(payload[: draw(st.integers(0, len(payload) - 1))], kind)
    if kind == "extend":
        return _reframe(payload + draw(st.binary(min_size=1, max_size=32)), kind)
    if kind == "garbage-body":  # header from a real request (key, version, correlation id, client id)
        cut = draw(st.integers(8, min(len(payload), 40)))
        return _reframe(payload[:cut] + draw(st.binary(max_size=200)), kind)
    if kind == "unknown-version":
        version = draw(st.one_of(st.integers(-32768, -1), st.integers(19, 32767), st.integers(0, 20)))
        return _reframe(payload[:2] + struct.pack(">h", version) + payload[4:], kind)
    if kind == "unknown-key":
        key = draw(st.one_of(st.integers(-32768, -1), st.integers(93, 32767)))
        return _reframe(struct.pack(">h", key) + payload[2:], kind)
    if kind == "random-framed":
        return _reframe(draw(st.binary(max_size=300)), kind)
    if kind == "zero-size":
        return Frame(SIZE.pack(0), kind)
    if kind == "short-header":
        return _reframe(payload[: draw(st.integers(1, 7))], kind)
    if kind == "oversize":
        size = draw(st.integers(MAX_REQUEST + 1, 2**31 - 1))
        return Frame(SIZE.pack(size) + payload, kind, final=True)
    if kind == "negative-size":
        return Frame(SIZE.pack(draw(st.integers(-(2**31), -1))) + payload, kind, final=True)
    if kind == "raw-random":
        return Frame(draw(st.binary(min_size=1, max_size=300)), kind, final=True)
    assert kind == "partial"  # the original size prefix, then the connection ends mid-frame
    return Frame(seed[: draw(st.integers(1, len(seed) - 1))], kind, final=True)


@dataclass
class Stats:
    sent: int = 0
    answered: int = 0
    closed_by_broker: int = 0
    stalled: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


class FrameSender:
    """A pool of connections; each framed frame is followed by a ping to learn what the broker did."""

    def __init__(self, bootstrap: str, pool: int = 4) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.addr = (host, int(port))
        self.conns: list[socket.socket | None] = [None] * pool
        self.turn = 0
        self.pings = 0
        self.stats = Stats()

    def _conn(self, i: int) -> socket.socket:
        sock = self.conns[i]
        if sock is None:
            sock = socket.create_connection(self.addr, timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns[i] = sock
        return sock

    def _drop(self, i: int) -> None:
        sock = self.conns[i]
        self.conns[i] = None
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for i in range(len(self.conns)):
            self._drop(i)

    def send(self, frame: Frame) -> None:
        i = self.turn = (self.turn + 1) % len(self.conns)
        sock = self._conn(i)
        self.stats.sent += 1
        self.stats.kinds[frame.kind] = self.stats.kinds.get(frame.kind, 0) + 1
        try:
            sock.sendall(frame.data)
            if frame.final:
                if frame.kind in ("oversize", "negative-size"):
                    self._expect_close(sock)
                return self._drop(i)
            self.pings += 1
            ping = PING_BASE + self.pings
            sock.sendall(encode_request(18, 0, ping))
            self._await(sock, ping)
            self.stats.answered += 1
        except (ConnectionError, EOFError):
            self.stats.closed_by_broker += 1
            self._drop(i)
        except TimeoutError:  # e.g. a mutated Fetch long-polling for max_wait: leave it to the broker
            self.stats.stalled += 1
            self._drop(i)

    def _expect_close(self, sock: socket.socket) -> None:
        """A size prefix outside [0, socket.request.max.bytes] must close the connection at once."""
        sock.settimeout(5)
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        self.stats.closed_by_broker += 1

    def _await(self, sock: socket.socket, ping: int) -> None:
        deadline = time.monotonic() + PING_TIMEOUT_S
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            (size,) = SIZE.unpack(_recv_exact(sock, 4))
            frame = _recv_exact(sock, size)
            if size >= 4 and SIZE.unpack_from(frame)[0] == ping:
                _, body = decode_response(18, 0, frame)
                assert int(body.error_code) == 0
                return


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


@pytest.fixture(scope="module")
def fbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("fuzz"), {"socket.request.max.bytes": str(MAX_REQUEST)}).start()
    try:
        yield b
    finally:
        b.stop()


def test_ten_thousand_hostile_frames_leave_the_broker_serving(fbroker: BrokerProcess) -> None:
    with WireClient(fbroker.bootstrap) as wire:  # the topic the seeds name exists, so they reach the log
        wire.call(3, 12, topics=[{"name": TOPIC, "topic_id": None}], allow_auto_topic_creation=True,
                  include_topic_authorized_operations=False)
    sender = FrameSender(fbroker.bootstrap)
    started = time.monotonic()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.lists(frames(), min_size=FRAMES_PER_EXAMPLE[0], max_size=FRAMES_PER_EXAMPLE[1]))
    def send_batch(batch: list[Frame]) -> None:
        for frame in batch:
            sender.send(frame)

    try:
        send_batch()
    finally:
        sender.close()
    stats = sender.stats
    elapsed = time.monotonic() - started
    print(f"fuzz: {stats.sent} frames in {elapsed:.1f}s, {stats.answered} answered, {stats.closed_by_broker} "
          f"closed by the broker, {stats.stalled} stalled; kinds {sorted(stats.kinds.items())}")
    assert stats.sent >= 10_000
    assert stats.answered > 1000 and stats.closed_by_broker > 1000  # both paths exercised, not one
    assert fbroker.proc is not None and fbroker.proc.poll() is None, "broker died:\n" + fbroker.tail()
    log_text = fbroker.log_path.read_text(errors="replace")
    assert "Traceback" not in log_text, log_text[log_text.index("Traceback") - 2000 :][:6000]
    _real_client_still_works(fbroker)


def _real_client_still_works(b: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "log_level": 3})
    for i in range(100):
        p.produce("after-fuzz", key=b"%d" % i, value=b"v%d" % i)
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "after-fuzz", "log_level": 3,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("after-fuzz", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 100 and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(100, 0.2) if m.error() is None]
        assert got == [b"v%d" % i for i in range(100)]
    finally:
        c.close()


# -- unknown API versions, with raw sockets ----------------------------------------------------


def _raw_request(key: int, version: int, correlation: int, body: bytes = b"") -> bytes:
    client_id = b"raw"
    payload = struct.pack(">hhih", key, version, correlation, len(client_id)) + client_id + body
    return SIZE.pack(len(payload)) + payload


def test_api_versions_at_an_unknown_version_answers_v0_with_the_supported_list(fbroker: BrokerProcess) -> None:
    with WireClient(fbroker.bootstrap) as wire:
        # A future ApiVersions version: the body format is unknown, so the broker must not parse it.
        wire.send_raw(_raw_request(18, 77, 4242, b"\x05hello\x00\x01\x02"))
        correlation, body = decode_response(18, 0, wire.recv_frame())
        assert correlation == 4242
        assert int(body.error_code) == 35  # UNSUPPORTED_VERSION
        listed = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        for key in (0, 1, 2, 3, 18, 22):
            assert key in listed
        assert listed[18][0] == 0 and listed[18][1] >= 3
        # The connection stays usable: the client retries with a version from the list.
        again = wire.call(18, listed[18][1], client_software_name="raw", client_software_version="1")
        assert int(again.error_code) == 0


def test_other_apis_at_unknown_versions_get_an_error_and_the_connection_stays_open(fbroker: BrokerProcess) -> None:
    with WireClient(fbroker.bootstrap) as wire:
        versions = wire.call(18, 3, client_software_name="raw", client_software_version="1")
        supported = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        # Fetch v3 is below what the broker (and kio) speaks: no schema, so header + error code only.
        assert supported[1][0] > 3
        wire.send_raw(_raw_request(1, 3, 99, b"\x00" * 30))
        frame = wire.recv_frame()
        assert struct.unpack(">ih", frame) == (99, 35)
        # Metadata far in the future and an API key nobody defined: the same answer.
        wire.send_raw(_raw_request(3, 999, 100))
        assert struct.unpack(">ih", wire.recv_frame()) == (100, 35)
        wire.send_raw(_raw_request(4242, 0, 101))
        assert struct.unpack(">ih", wire.recv_frame()) == (101, 35)
        # Still open and in order: a real request on the same connection is answered normally.
        meta = wire.call(3, 12, topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
        assert [b.node_id for b in meta.brokers] == [1]


# -- connection lifetime -----------------------------------------------------------------------


def test_idle_connections_are_closed_and_busy_ones_kept(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``connections.max.idle.ms`` counts from the last request; a long poll in progress is not idle."""
    b = BrokerProcess(tmp_path_factory.mktemp("idle"), {"connections.max.idle.ms": "400"}).start()
    try:
        with WireClient(b.bootstrap) as idle, WireClient(b.bootstrap) as busy:
            busy.call(3, 12, topics=[{"name": "idle-t", "topic_id": None}], allow_auto_topic_creation=True,
                      include_topic_authorized_operations=False)
            started = time.monotonic()
            for _ in range(6):  # a request every 0.2 s keeps it open past the limit
                time.sleep(0.2)
                busy.call(18, 0)
            # A 0.9 s long poll outlasts the idle limit without being cut off.
            fetch = busy.call(1, 12, max_wait=900, min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0,
                              session_epoch=-1, replica_id=-1, rack_id="", forgotten_topics_data=[],
                              topics=[{"topic": "idle-t", "partitions": [
                                  {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024,
                                   "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}])
            assert int(fetch.responses[0].partitions[0].error_code) == 0
            assert time.monotonic() - started > 1.5
            idle.sock.settimeout(2)
            assert idle.sock.recv(1) == b""  # the broker closed the idle one long ago (an open one times out)
    finally:
        b.stop()


def test_a_failing_handler_answers_with_its_error_code_or_closes() -> None:
    from strata.broker.connection import _error_response
    from strata.protocol.frame import decode_request

    api_versions = decode_request(encode_request(18, 3, 1, client_software_name="a", client_software_version="1")[4:])
    assert int(_error_response(api_versions).error_code) == -1  # UNKNOWN_SERVER_ERROR
    produce = decode_request(encode_request(0, 9, 1, acks=1, timeout=10, transactional_id=None, topic_data=[])[4:])
    assert _error_response(produce) is None  # no top-level error code: the connection is closed instead
