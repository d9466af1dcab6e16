"""SASL_PLAINTEXT with real clients: PLAIN from the JAAS config, SCRAM-SHA-256/512 from AlterUserScramCredentials.

One broker (module scope) with a PLAINTEXT listener (for setup) and a SASL_PLAINTEXT one. Every client
family users run - librdkafka (confluent-kafka and kcat), kafka-python, aiokafka - logs in with each
mechanism, produces and consumes with a consumer group; wrong passwords and unknown users are refused
with the same message; re-authentication (KIP-368) keeps a librdkafka client working past its session.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from tests.broker.harness import BrokerProcess
from tests.broker.kafka_wire import WireClient, encode_request
from tests.security.clients import poll_kafka_python, round_trip_confluent

from strata.client import wire

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
REAUTH_MS = 3000
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("sasl"), {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": str(REAUTH_MS),
        "connection.failed.authentication.delay.ms": "300",
        "num.partitions": "2",
    }, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        mechanisms = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 4096), password.encode())
                   for user, password in USERS.items() for mech in mechanisms]
        for fut in admin.alter_user_scram_credentials(upserts).values():
            fut.result(30)
        yield b
    finally:
        b.stop()


def _conf(broker: BrokerProcess, mechanism: str, user: str = "alice", password: str | None = None) -> dict[str, object]:
    return {"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user,
            "sasl.password": USERS.get(user, "x") if password is None else password}


def _round_trip_confluent(broker: BrokerProcess, mechanism: str, topic: str, n: int = 50) -> None:
    round_trip_confluent(_conf(broker, mechanism), topic, n)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_produces_and_consumes_with_a_group(sasl_broker: BrokerProcess, mechanism: str) -> None:
    _round_trip_confluent(sasl_broker, mechanism, f"ck-{mechanism.lower()}")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_produces_and_consumes_with_a_group(sasl_broker: BrokerProcess, mechanism: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    conf = {"bootstrap_servers": sasl_broker.address("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": "bob", "sasl_plain_password": USERS["bob"]}
    topic = f"kp-{mechanism.lower()}"
    producer = KafkaProducer(**conf, acks="all")
    for i in range(30):
        producer.send(topic, b"k%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, **conf, group_id=f"kp-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                             metadata_max_age_ms=1000)  # see tests/broker/test_groups.py: a join before metadata
    got = poll_kafka_python(consumer, 30)
    consumer.commit()
    consumer.close()
    assert sorted(got) == sorted(b"k%d" % i for i in range(30))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256"])
def test_aiokafka_produces_and_consumes_with_a_group(sasl_broker: BrokerProcess, mechanism: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    conf = {"bootstrap_servers": sasl_broker.address("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": USERS["alice"]}
    topic = f"aio-{mechanism.lower()}"

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf, acks="all")
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **conf, group_id=f"aio-{uuid.uuid4().hex[:6]}",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                while len(got) < 20:
                    batch = await consumer.getmany(timeout_ms=500)
                    got += [m.value for msgs in batch.values() for m in msgs]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == sorted(b"a%d" % i for i in range(20))


@pytest.mark.skipif(KCAT is None, reason="kcat binary not installed (make test installs it as root)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_produces_and_consumes(sasl_broker: BrokerProcess, mechanism: str) -> None:
    assert KCAT is not None
    topic = f"kcat-{mechanism.lower()}"
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", "sasl.username=alice", "-X", f"sasl.password={USERS['alice']}"]
    base = [KCAT, "-b", sasl_broker.address("SASL_PLAINTEXT"), *auth]
    done = subprocess.run([*base, "-P", "-t", topic, "-p", "0"], input="one\ntwo\nthree\n", capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*base, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["one", "two", "three"]


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "mallory", "x"),
    ("SCRAM-SHA-256", "alice", "wrong"), ("SCRAM-SHA-256", "mallory", "x"),
    ("SCRAM-SHA-512", "bob", "wrong"),
])
def test_bad_logins_are_refused_with_one_message_and_others_keep_working(
        sasl_broker: BrokerProcess, mechanism: str, user: str, password: str) -> None:
    errors: list[KafkaError] = []
    producer = Producer({**_conf(sasl_broker, mechanism, user, password), "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.1)  # error callbacks are served by poll
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    text = auth[0].str()
    assert "Authentication failed" in text, text
    assert "mallory" not in text and "wrong" not in text  # no hint of which part was wrong
    ok = AdminClient(_conf(sasl_broker, mechanism, "alice" if user != "alice" else "bob"))
    assert ok.list_topics(timeout=10).brokers


def test_the_same_message_for_unknown_users_and_wrong_passwords(sasl_broker: BrokerProcess) -> None:
    """Over the wire: SaslAuthenticate answers 58 with identical messages either way."""
    def login(user: str, password: str) -> tuple[int, str]:
        with WireClient(sasl_broker.address("SASL_PLAINTEXT")) as w:
            assert w.call(17, 1, mechanism="PLAIN").error_code == 0
            r = w.call(36, 2, auth_bytes=b"\0" + user.encode() + b"\0" + password.encode())
            return r.error_code, r.error_message

    assert login("alice", "nope") == login("nobody", "nope") == (58, "Authentication failed: Invalid username or "
                                                                       "password")


def test_requests_before_authentication_close_the_connection(sasl_broker: BrokerProcess) -> None:
    with WireClient(sasl_broker.address("SASL_PLAINTEXT")) as w:
        assert w.call(18, 3, client_software_name="t", client_software_version="1").error_code == 0
        w.send(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        with pytest.raises((ConnectionError, OSError, wire.WireError, struct.error)):
            w.recv_frame()


def test_v0_handshake_then_bare_tokens(sasl_broker: BrokerProcess) -> None:
    """Pre-KIP-152 framing: after SaslHandshake v0 the token is a bare size-prefixed frame, and so is the answer."""
    host, port = sasl_broker.address("SASL_PLAINTEXT").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(17, 0, 1, mechanism="PLAIN"))
        size = struct.unpack(">i", _exact(s, 4))[0]
        _exact(s, size)
        token = b"\0alice\0alice-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert struct.unpack(">i", _exact(s, 4))[0] == 0  # an empty challenge: done
        s.sendall(encode_request(3, 1, 2, topics=None))
        size = struct.unpack(">i", _exact(s, 4))[0]
        assert struct.unpack(">i", _exact(s, size)[:4])[0] == 2  # the Metadata answer's correlation id


def _exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_reauthentication_keeps_a_librdkafka_client_working(sasl_broker: BrokerProcess) -> None:
    """KIP-368: the session lasts ``connections.max.reauth.ms``; librdkafka logs in again on the same connection
    before it ends, so a producer keeps producing across several session lifetimes without errors."""
    errors: list[str] = []
    p = Producer({**_conf(sasl_broker, "SCRAM-SHA-256"), "acks": "all",
                  "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        p.produce("reauth", b"x")
        sent += 1
        p.poll(0.2)
    assert p.flush(30) == 0
    assert sent > 10 and not errors, errors[:3]


def test_a_client_that_does_not_reauthenticate_is_closed_after_its_session(sasl_broker: BrokerProcess) -> None:
    with WireClient(sasl_broker.address("SASL_PLAINTEXT")) as w:
        assert w.call(17, 1, mechanism="PLAIN").error_code == 0
        r = w.call(36, 2, auth_bytes=b"\0alice\0alice-secret")
        lifetime_ms = r.session_lifetime.total_seconds() * 1000
        assert r.error_code == 0 and 0 < lifetime_ms <= REAUTH_MS
        assert w.call(3, 12, topics=None, allow_auto_topic_creation=False,
                      include_topic_authorized_operations=False).brokers
        time.sleep(lifetime_ms / 1000 + 0.2)  # the session's end is the condition under test
        w.send(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        with pytest.raises((ConnectionError, OSError, wire.WireError, struct.error)):
            w.recv_frame()


def test_scram_credentials_are_described_and_deleted(sasl_broker: BrokerProcess) -> None:
    from confluent_kafka.admin import UserScramCredentialDeletion

    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"carol-pw")])["carol"].result(30)
    described = {u: f.result(30) for u, f in admin.describe_user_scram_credentials(["carol", "alice"]).items()}
    assert [(i.mechanism, i.iterations) for i in described["carol"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    assert len(described["alice"].scram_credential_infos) == 2
    AdminClient(_conf(sasl_broker, "SCRAM-SHA-512", "carol", "carol-pw")).list_topics(timeout=10)
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)])[
        "carol"].result(30)
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["carol"])["carol"].result(30)
    errors: list[KafkaError] = []
    refused = Producer({**_conf(sasl_broker, "SCRAM-SHA-512", "carol", "carol-pw"), "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        refused.poll(0.1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_describing_scram_credentials_of_every_user_with_a_null_or_an_empty_list(sasl_broker: BrokerProcess) -> None:
    """Kafka describes every user when ``users`` is null or empty; librdkafka's "all users" is the empty array
    (``describe_user_scram_credentials()`` sends ``users=[]`` at v0), which must not describe nobody."""
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    described = admin.describe_user_scram_credentials().result(30)
    for user in USERS:  # other tests of this module may add users of their own
        assert [(i.mechanism, i.iterations) for i in described[user].scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
    with WireClient(sasl_broker.bootstrap) as w:
        answers = {str(users): w.call(50, 0, users=users) for users in (None, [])}
        named = w.call(50, 0, users=[{"name": "bob"}, {"name": "nobody"}, {"name": ""}])
    for users, r in answers.items():
        assert (r.error_code, r.error_message) == (0, None), users
        results = {x.user: (x.error_code, [(c.mechanism, c.iterations) for c in x.credential_infos])
                   for x in r.results}
        assert [x.user for x in r.results] == sorted(results), users  # sorted by name, as Kafka answers
        for user in USERS:
            assert results[user] == (0, [(1, 4096), (2, 4096)]), users
    assert [(x.user, x.error_code, x.error_message) for x in named.results] == [
        ("bob", 0, None),
        ("nobody", 91, "Attempt to describe a user credential that does not exist: nobody"),  # RESOURCE_NOT_FOUND
        ("", 91, "Username must not be empty")]


def test_too_few_iterations_are_refused(sasl_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    fut = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")])["dave"]
    with pytest.raises(KafkaException, match="Too few iterations"):
        fut.result(30)
