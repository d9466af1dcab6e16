"""Strata's own command-line tools on secured listeners, configured as Kafka's tools are (``--command-config``).

One broker (module scope) with a PLAINTEXT listener (setup), a SASL_SSL listener (SCRAM-SHA-512 user ``alice``)
and an SSL listener that requires a client certificate. ``strata tiers``, ``strata transactions`` and the
Kafka-style tools (topics, configs, consumer-groups) work through both with the Java client's properties;
a wrong password and an untrusted CA fail with exit code 1 and a message saying what went wrong, and no
password is ever printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from tests.broker.harness import BrokerProcess
from tests.security.certs import Pki, make_pki

TOPIC = "orders"
USER, PASSWORD = "alice", "alice-Canary-Pw-31"
WRONG_PASSWORD = "wrong-Canary-Pw-47"
SECRETS = (PASSWORD, WRONG_PASSWORD)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("tools-pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    props = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server.pem),
        "listener.name.ssl.ssl.client.auth": "required",
        **{f"listener.name.ssl.{k}": v for k, v in pki.truststore_props("PEM").items()},
    }
    b = BrokerProcess(tmp_path_factory.mktemp("secure-tools"), props,
                      listeners={"SASL_SSL": "SASL_SSL", "SSL": "SSL"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())])[USER].result(30)
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        yield b
    finally:
        b.stop()


def strata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata", *args], capture_output=True, text=True, timeout=60)


def command_config(directory: Path, name: str, props: dict[str, str]) -> str:
    """A properties file; the JAAS config continued over lines as Kafka's documentation writes it."""
    path = directory / f"{name}.properties"
    continued = " \\\n    password="
    lines = [f"{k}={v.replace(' password=', continued) if k == 'sasl.jaas.config' else v}" for k, v in props.items()]
    path.write_text("# " + name + "\n" + "\n".join(lines) + "\n")
    return str(path)


def sasl_ssl(pki: Pki, password: str = PASSWORD, ca: Path | None = None) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                f'username="{USER}" password="{password}";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca or pki.truststore_pem)}


def mutual_tls(pki: Pki) -> dict[str, str]:
    """PKCS12 truststore and keystore (the broker's certificate also serves as a client's)."""
    return {"security.protocol": "SSL", **pki.truststore_props("PKCS12"), **pki.keystore_props("PKCS12")}


def no_secret(out: subprocess.CompletedProcess[str]) -> None:
    for secret in SECRETS:
        assert secret not in out.stdout + out.stderr


def check_tools_work(broker: BrokerProcess, listener: str, config: str) -> None:
    address = broker.address(listener)
    tiers = strata("tiers", "--bootstrap", address, "--command-config", config, "--json", "--topic", TOPIC)
    assert tiers.returncode == 0, tiers.stderr
    rows = json.loads(tiers.stdout)["partitions"]
    assert sorted((r["topic"], r["partition"], r["leader"]) for r in rows) == [(TOPIC, 0, 1), (TOPIC, 1, 1)]
    assert [b["port"] for b in json.loads(tiers.stdout)["brokers"]] == [int(address.rsplit(":", 1)[1])]

    topics = strata("topics", "--bootstrap-server", address, "--command-config", config, "--describe",
                    "--topic", TOPIC)
    assert topics.returncode == 0, topics.stderr
    assert f"Topic: {TOPIC}\t" in topics.stdout and "PartitionCount: 2" in topics.stdout, topics.stdout
    for out in (tiers, topics):
        no_secret(out)


def test_tools_over_sasl_ssl_with_scram(broker: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    config = command_config(tmp_path, "alice", sasl_ssl(pki))
    check_tools_work(broker, "SASL_SSL", config)
    address = broker.address("SASL_SSL")
    listed = strata("topics", "--bootstrap-server", address, "--command-config", config, "--list")
    assert listed.returncode == 0 and TOPIC in listed.stdout.split(), listed.stderr
    configs = strata("configs", "--bootstrap-server", address, "--command-config", config, "--describe",
                     "--entity-type", "topics", "--entity-name", TOPIC)
    assert configs.returncode == 0 and f"topic {TOPIC}" in configs.stdout, configs.stderr
    groups = strata("consumer-groups", "--bootstrap-server", address, "--command-config", config, "--list")
    assert groups.returncode == 0, groups.stderr
    txns = strata("transactions", "--bootstrap", address, "--command-config", config, "--json", "--topic", TOPIC)
    assert txns.returncode == 0, txns.stderr
    assert sorted(p["partition"] for p in json.loads(txns.stdout)["partitions"]) == [0, 1]
    for out in (listed, configs, groups, txns):
        no_secret(out)


def test_tools_over_mutual_tls_with_pkcs12_stores(broker: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    check_tools_work(broker, "SSL", command_config(tmp_path, "mtls", mutual_tls(pki)))


def test_a_wrong_password_fails_clearly(broker: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    config = command_config(tmp_path, "wrong", sasl_ssl(pki, WRONG_PASSWORD))
    address = broker.address("SASL_SSL")
    tiers = strata("tiers", "--bootstrap", address, "--command-config", config)
    topics = strata("topics", "--bootstrap-server", address, "--command-config", config, "--list")
    txns = strata("transactions", "--bootstrap", address, "--command-config", config)
    for out in (tiers, topics, txns):
        assert out.returncode == 1, (out.stdout, out.stderr)
        assert "authentication to" in out.stderr and f"SASL SCRAM-SHA-512 login as '{USER}' failed" in out.stderr, \
            out.stderr
        assert "invalid credentials" in out.stderr, out.stderr
        no_secret(out)
    assert tiers.stderr.startswith("strata tiers: authentication to 127.0.0.1:"), tiers.stderr
    assert "org.apache.kafka.common.KafkaException" in topics.stderr  # Kafka's TopicCommand error line


def test_an_untrusted_broker_certificate_fails_clearly(broker: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    for listener, props in (("SASL_SSL", sasl_ssl(pki, ca=pki.untrusted_ca_cert)),
                            ("SSL", {**mutual_tls(pki), "ssl.truststore.type": "PEM",
                                     "ssl.truststore.location": str(pki.untrusted_ca_cert),
                                     "ssl.truststore.password": ""})):
        props = {k: v for k, v in props.items() if v != ""}
        config = command_config(tmp_path, f"untrusted-{listener}", props)
        address = broker.address(listener)
        tiers = strata("tiers", "--bootstrap", address, "--command-config", config)
        topics = strata("topics", "--bootstrap-server", address, "--command-config", config, "--list")
        for out in (tiers, topics):
            assert out.returncode == 1, (out.stdout, out.stderr)
            assert f"TLS handshake with {address} failed: the broker's certificate is not trusted" in out.stderr, \
                out.stderr
            assert "ssl.truststore.location" in out.stderr
            no_secret(out)


def test_a_bad_command_config_names_the_key(broker: BrokerProcess, tmp_path: Path) -> None:
    config = command_config(tmp_path, "gssapi", {"security.protocol": "SASL_SSL", "sasl.jaas.config":
                                                 'x.Y required password="' + PASSWORD + '";'})
    tiers = strata("tiers", "--bootstrap", broker.address("SASL_SSL"), "--command-config", config)
    topics = strata("topics", "--bootstrap-server", broker.address("SASL_SSL"), "--command-config", config, "--list")
    for out in (tiers, topics):
        assert out.returncode == 1 and "sasl.mechanism" in out.stderr and "GSSAPI" in out.stderr, out.stderr
        assert config in out.stderr
        no_secret(out)
