"""TLS listeners with real clients: SSL, mutual TLS and SASL_SSL, certificates made with ``openssl``.

One broker (module scope) with four listeners: PLAINTEXT (setup), SSL (a PEM keystore), MTLS (SSL with a
PKCS12 keystore and ``ssl.client.auth=required``) and SASL_SSL (SCRAM and PLAIN inside TLS). Clients of
every family connect, produce and consume with a consumer group; untrusted, expired and missing client
certificates and plaintext clients on a TLS port are refused while the broker keeps serving others;
Metadata answers with the addresses of the listener a client came in on; a keystore is replaced at run
time through IncrementalAlterConfigs (Kafka's dynamic keystore update).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from tests.broker.harness import BrokerProcess
from tests.security.certs import Pki, make_pki
from tests.security.clients import poll_kafka_python, round_trip_confluent

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')


def _prefixed(listener: str, props: dict[str, str]) -> dict[str, str]:
    return {f"listener.name.{listener.lower()}.{k}": v for k, v in props.items()}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    keystore = tmp_path_factory.mktemp("keystore") / "server.pem"  # replaced by the reload test
    shutil.copy(pki.server.pem, keystore)
    props = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "num.partitions": "2",
        **_prefixed("SSL", {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}),
        **_prefixed("MTLS", {**pki.keystore_props("PKCS12"), **pki.truststore_props("PKCS12"),
                             "ssl.client.auth": "required",
                             "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT"}),
        **_prefixed("SASL_SSL", {**pki.keystore_props("PEM-inline"), "plain.sasl.jaas.config": PLAIN_JAAS}),
    }
    b = BrokerProcess(tmp_path_factory.mktemp("tls"), props,
                      listeners={"SSL": "SSL", "MTLS": "SSL", "SASL_SSL": "SASL_SSL"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret")])["alice"].result(30)
        yield b
    finally:
        b.stop()


def _ssl(broker: BrokerProcess, pki: Pki, listener: str = "SSL", **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": broker.address(listener), "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_cert), **extra}


def _mtls(broker: BrokerProcess, pki: Pki, who: str) -> dict[str, object]:
    files = getattr(pki, who)
    return _ssl(broker, pki, "MTLS", **{"ssl.certificate.location": str(files.cert),
                                         "ssl.key.location": str(files.key)})


def _refused(conf: dict[str, object]) -> list[KafkaError]:
    """The errors a librdkafka client reports when it cannot get through (it keeps retrying; we stop)."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.1)
    assert errors, "the client was let in"
    return errors


def test_confluent_over_ssl(tls_broker: BrokerProcess, pki: Pki) -> None:
    round_trip_confluent(_ssl(tls_broker, pki), "ssl-ck")


def test_kafka_python_over_ssl(tls_broker: BrokerProcess, pki: Pki) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    conf = {"bootstrap_servers": tls_broker.address("SSL"), "security_protocol": "SSL",
            "ssl_cafile": str(pki.ca_cert)}
    producer = KafkaProducer(**conf, acks="all")
    for i in range(20):
        producer.send("ssl-kp", b"k%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("ssl-kp", **conf, group_id=f"kp-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                             metadata_max_age_ms=1000)  # see tests/broker/test_groups.py: a join before metadata
    got = poll_kafka_python(consumer, 20)
    consumer.close()
    assert sorted(got) == sorted(b"k%d" % i for i in range(20))


def test_aiokafka_with_a_client_certificate(tls_broker: BrokerProcess, pki: Pki) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    context = create_ssl_context(cafile=str(pki.ca_cert), certfile=str(pki.bob.cert), keyfile=str(pki.bob.key))
    conf = {"bootstrap_servers": tls_broker.address("MTLS"), "security_protocol": "SSL", "ssl_context": context}

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf, acks="all")
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait("mtls-aio", b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("mtls-aio", **conf, group_id=f"aio-{uuid.uuid4().hex[:6]}",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(got) < 20:
                    batch = await consumer.getmany(timeout_ms=500)
                    got += [m.value for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == sorted(b"a%d" % i for i in range(20))


@pytest.mark.skipif(KCAT is None, reason="kcat binary not installed (make test installs it as root)")
def test_kcat_over_mutual_tls(tls_broker: BrokerProcess, pki: Pki) -> None:
    assert KCAT is not None
    base = [KCAT, "-b", tls_broker.address("MTLS"), "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={pki.ca_cert}", "-X", f"ssl.certificate.location={pki.alice.cert}",
            "-X", f"ssl.key.location={pki.alice.key}"]
    done = subprocess.run([*base, "-P", "-t", "mtls-kcat", "-p", "0"], input="a\nb\n", capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*base, "-C", "-t", "mtls-kcat", "-p", "0", "-o", "beginning", "-e"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["a", "b"]


def test_mutual_tls_with_the_confluent_client(tls_broker: BrokerProcess, pki: Pki) -> None:
    round_trip_confluent(_mtls(tls_broker, pki, "alice"), "mtls-ck")


@pytest.mark.parametrize("who", ["mallory", "expired", None])
def test_untrusted_expired_and_missing_client_certificates_are_refused(
        tls_broker: BrokerProcess, pki: Pki, who: str | None) -> None:
    conf = _mtls(tls_broker, pki, who) if who else _ssl(tls_broker, pki, "MTLS")
    errors = _refused(conf)
    assert any(e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
               for e in errors), errors
    round_trip_confluent(_mtls(tls_broker, pki, "bob"), f"after-{who}", 5)


def test_an_untrusted_server_certificate_is_refused_by_the_client(tls_broker: BrokerProcess, pki: Pki) -> None:
    errors = _refused({**_ssl(tls_broker, pki), "ssl.ca.location": str(pki.untrusted_ca_cert)})
    assert any("certificate verify failed" in e.str() for e in errors), errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_sasl_inside_tls(tls_broker: BrokerProcess, pki: Pki, mechanism: str) -> None:
    round_trip_confluent({"bootstrap.servers": tls_broker.address("SASL_SSL"), "security.protocol": "SASL_SSL",
                 "ssl.ca.location": str(pki.ca_cert), "sasl.mechanisms": mechanism, "sasl.username": "alice",
                 "sasl.password": "alice-secret"}, f"sasl-ssl-{mechanism.lower()}")


def test_kafka_python_with_scram_inside_tls(tls_broker: BrokerProcess, pki: Pki) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=tls_broker.address("SASL_SSL"), security_protocol="SASL_SSL",
                             ssl_cafile=str(pki.ca_cert), sasl_mechanism="SCRAM-SHA-512",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret", acks="all")
    producer.send("sasl-ssl-kp", b"x").get(30)
    producer.close()


def test_metadata_answers_with_the_listener_the_client_came_in_on(tls_broker: BrokerProcess, pki: Pki) -> None:
    for listener, conf in (("PLAINTEXT", {"bootstrap.servers": tls_broker.bootstrap}),
                           ("SSL", _ssl(tls_broker, pki)), ("MTLS", _mtls(tls_broker, pki, "alice"))):
        brokers = AdminClient(conf).list_topics(timeout=10).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [tls_broker.address(listener)], listener


def test_plaintext_clients_and_garbage_on_a_tls_port_are_closed(tls_broker: BrokerProcess, pki: Pki) -> None:
    """A Kafka request, random bytes, and a TLS handshake followed by garbage: each connection is closed,
    none costs the broker more than its own socket, and TLS clients keep working."""
    host, port = tls_broker.address("SSL").split(":")
    payloads = [b"\x00\x00\x00\x16\x00\x12\x00\x03\x00\x00\x00\x01\x00\x04test\x00\x00\x00\x00", os.urandom(4096),
                b"\x16\x03\x01\x00\xc8" + os.urandom(200), b"\xff" * 70_000]
    # (the handshake record's length is fixed: a random one over 200 leaves the record incomplete, and the
    # broker rightly waits for the rest until connections.max.idle.ms)
    for payload in payloads * 5:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            try:
                s.sendall(payload)
                s.settimeout(10)
                while s.recv(65536):  # drained until the broker closes (TLS alerts may come first)
                    pass
            except (ConnectionResetError, BrokenPipeError):
                pass
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    for _ in range(10):  # a real handshake, then garbage inside TLS
        with socket.create_connection((host, int(port)), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as s:
            try:
                s.sendall(b"\x7f\xff\xff\xff" + os.urandom(100))
                while s.recv(65536):
                    pass
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                pass
    round_trip_confluent(_ssl(tls_broker, pki), "after-garbage", 5)


def _served_certificate(address: str, pki: Pki) -> bytes:
    host, port = address.split(":")
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(pem_path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_path.read_text())


def test_keystore_update_without_restart(tls_broker: BrokerProcess, pki: Pki) -> None:
    """Kafka's dynamic keystore update: new connections get the new certificate, a certificate with another
    identity is refused (INVALID_REQUEST), the password never shows in DescribeConfigs."""
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap})
    assert _served_certificate(tls_broker.address("SSL"), pki) == _der(pki.server.cert)
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "listener.name.ssl.ssl.keystore.location", str(pki.server_renewed.pem),
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert _served_certificate(tls_broker.address("SSL"), pki) == _der(pki.server_renewed.cert)
    round_trip_confluent(_ssl(tls_broker, pki), "after-reload", 5)
    other = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "listener.name.ssl.ssl.keystore.location", str(pki.other_server.pem),
        incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="DistinguishedName"):
        admin.incremental_alter_configs([other])[other].result(30)
    assert _served_certificate(tls_broker.address("SSL"), pki) == _der(pki.server_renewed.cert)
    described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
    configs = next(iter(described.values())).result(30)
    entry = configs["listener.name.mtls.ssl.keystore.password"]
    assert entry.value is None and entry.is_sensitive
    assert pki.keystore_password not in str({k: v.value for k, v in configs.items()})
