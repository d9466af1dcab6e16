"""Hostile handshakes cannot take the broker down: SASL frames and TLS garbage, then real clients still log in.

Hypothesis (derandomized) builds SASL exchanges on a SASL_PLAINTEXT listener: handshakes with random
mechanism names and versions, SaslAuthenticate tokens that are random bytes or mutated SCRAM/PLAIN messages,
bare frames after a v0 handshake, oversized frames, requests before authentication and garbage after it;
and on an SSL listener random bytes, truncated ClientHellos and garbage inside an established TLS session.
Each connection must end in an answer or a clean close; afterwards the process is alive, its RSS grew
less than 100 MiB, its log has no traceback, and a client logs in and produces.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import encode_request
from tests.reliability.fuzz_harness import assert_broker_survived, rss_kib
from tests.security.certs import Pki, make_pki

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
RSS_GROWTH_LIMIT_KIB = 100 * 1024
SIZE = struct.Struct(">i")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("fuzz-pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("handshake-fuzz"), {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "0",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(pki.server.pem),
    }, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SSL": "SSL"}).start()
    try:
        yield b
    finally:
        b.stop()


def _exchange(address: str, frames: list[bytes]) -> None:
    """Send the frames one by one, reading whatever comes back, until the broker answers or closes."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        for frame in frames:
            try:
                s.sendall(frame)
                head = s.recv(4)
                if len(head) < 4:
                    return  # closed: a clean end
                (size,) = SIZE.unpack(head)
                left = size
                while left > 0:
                    chunk = s.recv(min(left, 65536))
                    if not chunk:
                        return
                    left -= len(chunk)
            except (ConnectionResetError, BrokenPipeError):
                return


SCRAM_FIRST = b"n,,n=alice,r=rOprNGfwEbeRWgbNEkqO"
MUTATIONS = st.sampled_from([
    b"", b"\x00alice\x00alice-secret", b"\x00\x00", b"alice\x00alice\x00x", SCRAM_FIRST, b"y,,n=a,r=x", b"n,,",
    b"c=biws,r=x,p=AAAA", b"n,,n=a=ZZ,r=x", b"n,,n=alice,r=x,tokenauth=true", b"\xff" * 64])


@st.composite
def sasl_session(draw: st.DrawFn) -> list[bytes]:
    mechanism = draw(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "", "x" * 300]))
    version = draw(st.sampled_from([0, 1]))
    frames = [encode_request(17, version, 1, mechanism=mechanism)]
    for i in range(draw(st.integers(1, 4))):
        token = draw(st.one_of(st.binary(max_size=600), MUTATIONS, MUTATIONS.map(lambda b: b + os.urandom(8))))
        if version == 0:
            frames.append(SIZE.pack(len(token)) + token)
        else:
            frames.append(encode_request(36, draw(st.sampled_from([0, 1, 2])), i + 2, auth_bytes=token))
    if draw(st.booleans()):
        frames.append(encode_request(3, 12, 99, topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False))
    if draw(st.booleans()):
        frames.append(SIZE.pack(600 * 1024) + b"\x00" * 16)  # above sasl.server.max.receive.size
    return frames


def test_hostile_sasl_exchanges_and_tls_garbage_leave_the_broker_serving(broker: BrokerProcess, pki: Pki) -> None:
    assert broker.proc is not None
    start_rss = rss_kib(broker.proc.pid)

    @settings(max_examples=400, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sasl_session())
    def one(frames: list[bytes]) -> None:
        _exchange(broker.address("SASL_PLAINTEXT"), frames)

    one()
    host, port = broker.address("SSL").split(":")
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    for i in range(60):
        garbage = [os.urandom(300), b"\x16\x03\x01\x02\x00" + os.urandom(40), b"\x16\x03\x03\xff\xff"][i % 3]
        with socket.create_connection((host, int(port)), timeout=10) as s:
            try:  # a record cut short waits for its rest (as in Kafka) until the client gives up: EOF closes it
                s.sendall(garbage)
                s.shutdown(socket.SHUT_WR)
                while s.recv(4096):
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass
        with socket.create_connection((host, int(port)), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            try:
                tls.sendall(os.urandom(64) if i % 2 else SIZE.pack(2**31 - 1) + b"x")
                tls.shutdown(socket.SHUT_WR)  # a frame whose size prefix is plausible waits for its rest: EOF ends it
                while tls.recv(4096):
                    pass
            except OSError:  # reset, or closed by the broker before our half-close (ssl.SSLError is an OSError)
                pass
    assert_broker_survived(broker)
    assert rss_kib(broker.proc.pid) - start_rss < RSS_GROWTH_LIMIT_KIB
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
    p.produce("after-fuzz", b"x")
    assert p.flush(30) == 0
