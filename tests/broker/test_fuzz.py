"""Malformed input cannot take the broker down: >= 10,000 hostile frames, then real clients still work.

Hypothesis mutates seed frames (``tests/reliability/fuzz_harness.py``): valid requests of every API the
broker serves (and a few it does not), the frames confluent-kafka, kafka-python and aiokafka really
sent in a produce / group consume / admin session captured through a proxy in front of this broker,
and the golden compressed client batches in Produce requests. Mutations: bytes flipped, bodies
truncated or extended, headers with garbage bodies, unknown API keys and versions, random bytes with
and without framing, size prefixes that are negative or above ``socket.request.max.bytes``, frames cut
off mid-way. They go over a pool of connections; after each framed one a ping (ApiVersions v0 with a
reserved correlation id) shows the broker processed it and whether it kept the connection (answer)
or closed it (EOF, then reconnect).

Afterwards: the process is alive, its RSS stayed within 100 MiB of where it started, its log has no
traceback (a handler that raises is a bug even though the connection layer turns it into
UNKNOWN_SERVER_ERROR), and confluent-kafka can still produce and consume. ``derandomize`` makes the
mutations the same on every run. The soak (``tests/reliability/test_fuzz_soak.py``) sends >= 100k.

The second part pins down unknown-version answers with raw sockets: ApiVersions at an unknown
version gets a v0 response with UNSUPPORTED_VERSION (35) and the supported list and the connection
stays open; other APIs at a version the broker does not serve (or an unknown API key) close the
connection, as Kafka's ``SocketServer`` does (more in ``tests/broker/test_conformance_small.py``).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, decode_response, encode_request
from tests.reliability.fuzz_harness import (
    FuzzTarget,
    assert_broker_survived,
    fuzz,
    fuzz_target,
    real_client_still_works,
)

SIZE = struct.Struct(">i")
EXAMPLES = 100  # x 100-130 frames
RSS_GROWTH_LIMIT_KIB = 100 * 1024
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    yield from fuzz_target(tmp_path_factory.mktemp("fuzz"), CLIENTS)


@pytest.fixture(scope="module")
def fbroker(target: FuzzTarget) -> BrokerProcess:
    return target.broker


def test_ten_thousand_hostile_frames_leave_the_broker_serving(target: FuzzTarget) -> None:
    assert target.capture is not None and set(target.capture.by_client()) == set(CLIENTS)
    assert {0, 1, 3, 11, 14, 19}.issubset(target.capture.apis())  # produce, fetch, metadata, group, admin
    stats = fuzz(target.broker, target.seeds(), EXAMPLES)
    assert stats.sent >= 10_000
    assert stats.answered > 1000 and stats.closed_by_broker > 1000  # both paths exercised, not one
    assert stats.stalled < stats.sent // 100
    rss = stats.rss_samples_kib
    assert max(rss) - rss[0] < RSS_GROWTH_LIMIT_KIB, f"RSS grew from {rss[0]} to {max(rss)} KiB"
    assert_broker_survived(target.broker)
    real_client_still_works(target.broker.bootstrap)


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


def test_other_apis_at_unknown_versions_close_the_connection(fbroker: BrokerProcess) -> None:
    with WireClient(fbroker.bootstrap) as wire:
        versions = wire.call(18, 3, client_software_name="raw", client_software_version="1")
        supported = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert supported[1][0] > 3
    # Fetch v3 (below what the broker and kio speak), Metadata far in the future, an API key nobody defined.
    for key, version, body in ((1, 3, b"\x00" * 30), (3, 999, b""), (4242, 0, b"")):
        with WireClient(fbroker.bootstrap) as wire:
            wire.send_raw(_raw_request(key, version, 99, body))
            wire.sock.settimeout(5)
            assert wire.sock.recv(1) == b"", (key, version)  # EOF: closed without an answer
    # The broker still serves new connections normally.
    with WireClient(fbroker.bootstrap) as wire:
        meta = wire.call(3, 12, topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
        assert [b.node_id for b in meta.brokers] == [1]


# -- connection lifetime -----------------------------------------------------------------------


def test_array_counts_the_frame_cannot_hold_close_the_connection_not_the_broker(fbroker: BrokerProcess) -> None:
    """A count of ~2^32 elements in a 25-byte frame: kio's native reader would reserve 32 GiB for it and
    abort the process (found by the fuzz run under memory pressure); the broker refuses the frame instead."""
    from tests.unit.protocol.test_frame_lengths import SAMPLES, sample_frame

    for sample in SAMPLES:
        with WireClient(fbroker.bootstrap) as wire:
            frame = sample_frame(*sample)
            wire.send_raw(struct.pack(">i", len(frame)) + frame)
            wire.sock.settimeout(5)
            assert wire.sock.recv(1) == b"", sample  # closed without an answer
    assert fbroker.proc is not None and fbroker.proc.poll() is None, "the broker died"
    assert "declares" in fbroker.tail() and "elements of at least" in fbroker.tail()
    with WireClient(fbroker.bootstrap) as wire:
        meta = wire.call(3, 12, topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
        assert [b.node_id for b in meta.brokers] == [1]


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
    from strata.broker.wire.connection import _error_response
    from strata.protocol.frame import decode_request

    api_versions = decode_request(encode_request(18, 3, 1, client_software_name="a", client_software_version="1")[4:])
    assert int(_error_response(api_versions).error_code) == -1  # UNKNOWN_SERVER_ERROR
    produce = decode_request(encode_request(0, 9, 1, acks=1, timeout=10, transactional_id=None, topic_data=[])[4:])
    assert _error_response(produce) is None  # no top-level error code: the connection is closed instead
