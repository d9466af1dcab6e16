"""The metrics endpoint over HTTPS (``metrics.ssl.*``), with broker processes and ``openssl``-made certificates.

Two brokers (module scope): one with a PEM keystore (server-only TLS), one with a PKCS12 keystore, a PEM
truststore and ``metrics.ssl.client.auth=required``. A client trusting the CA reads ``/metrics`` and
``/v1/tiers``; plain HTTP to the port gets nothing; without a trusted client certificate the mutual-TLS
endpoint refuses the client. A broker whose metrics keystore is missing or does not open refuses to start
with the ``metrics.ssl.*`` key named (and the password not echoed).
"""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from tests.broker.harness import BrokerProcess
from tests.security.certs import Pki, make_pki

from strata.tools.zookeeper import free_port


def _metrics(pki_props: dict[str, str], port: int) -> dict[str, str]:
    return {"metrics.port": str(port), "metrics.ssl.enabled": "true",
            **{f"metrics.{k}": v for k, v in pki_props.items()}}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("metrics-tls"), _metrics(pki.keystore_props("PEM"), port)).start()
    try:
        yield b, port
    finally:
        b.stop()


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    props = _metrics({**pki.keystore_props("PKCS12"), **pki.truststore_props("PEM"), "ssl.client.auth": "required"},
                     port)
    b = BrokerProcess(tmp_path_factory.mktemp("metrics-mtls"), props).start()
    try:
        yield b, port
    finally:
        b.stop()


def _context(pki: Pki, client: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if client is not None:
        files = getattr(pki, client)
        ctx.load_cert_chain(str(files.cert), str(files.key))
    return ctx


def _get(url: str, ctx: ssl.SSLContext | None = None) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10, context=ctx) as r:
        return r.status, r.read().decode()


REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, urllib.error.URLError)


def test_metrics_over_https_with_the_ca(https_broker: tuple[BrokerProcess, int], pki: Pki) -> None:
    _, port = https_broker
    status, body = _get(f"https://127.0.0.1:{port}/metrics", _context(pki))
    assert status == 200 and "# TYPE" in body
    status, body = _get(f"https://localhost:{port}/v1/tiers", _context(pki))  # the DNS name of the certificate
    assert status == 200 and '"partitions"' in body


def test_a_client_not_trusting_the_ca_is_refused_by_itself(https_broker: tuple[BrokerProcess, int], pki: Pki) -> None:
    _, port = https_broker
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        _get(f"https://127.0.0.1:{port}/metrics", ssl.create_default_context(cafile=str(pki.untrusted_ca_cert)))


def test_plain_http_to_the_https_port_gets_nothing(https_broker: tuple[BrokerProcess, int], pki: Pki) -> None:
    b, port = https_broker
    with pytest.raises(REFUSED):
        _get(f"http://127.0.0.1:{port}/metrics")
    assert _get(f"https://127.0.0.1:{port}/metrics", _context(pki))[0] == 200  # still serving
    assert b.proc is not None and b.proc.poll() is None


def test_mutual_tls_refuses_a_client_without_certificate(mtls_broker: tuple[BrokerProcess, int], pki: Pki) -> None:
    _, port = mtls_broker
    for client in (None, "mallory"):  # no certificate; one the truststore does not trust
        with pytest.raises(REFUSED):
            _get(f"https://127.0.0.1:{port}/metrics", _context(pki, client))
    status, body = _get(f"https://127.0.0.1:{port}/metrics", _context(pki, "alice"))
    assert status == 200 and "# TYPE" in body


def test_metrics_tls_passwords_are_sensitive_in_describe_configs(mtls_broker: tuple[BrokerProcess, int],
                                                                  pki: Pki) -> None:
    b, _ = mtls_broker
    resource = ConfigResource(ResourceType.BROKER, "1")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept until the future resolves
    configs = admin.describe_configs([resource])[resource].result(30)
    entry = configs["metrics.ssl.keystore.password"]
    assert entry.is_sensitive and entry.value is None
    assert all(s.value is None for s in entry.synonyms.values())
    assert configs["metrics.ssl.enabled"].value == "true"
    assert configs["metrics.ssl.client.auth"].value == "required"
    assert configs["metrics.ssl.keystore.location"].value == str(pki.server_p12)
    assert all(pki.keystore_password not in str(e.value) for e in configs.values())
    assert pki.keystore_password not in b.log_path.read_text(errors="replace")


@pytest.mark.parametrize("problem", ["missing-keystore", "wrong-password", "client-auth-without-truststore"])
def test_a_bad_metrics_tls_config_stops_the_start(tmp_path: Path, pki: Pki, problem: str) -> None:
    wrong = "not-the-password-3c1f"
    props = {
        "missing-keystore": {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "absent.pem")},
        "wrong-password": {**pki.keystore_props("PKCS12"), "ssl.keystore.password": wrong},
        "client-auth-without-truststore": {**pki.keystore_props("PEM"), "ssl.client.auth": "required"},
    }[problem]
    expected = {
        "missing-keystore": f"Invalid value {tmp_path / 'absent.pem'} for configuration "
                            "metrics.ssl.keystore.location: the file does not exist",
        "wrong-password": "Invalid value for configuration metrics.ssl.keystore.password: it does not open the "
                          f"PKCS12 file {pki.server_p12} (metrics.ssl.keystore.location)",
        "client-auth-without-truststore": "Invalid value required for configuration metrics.ssl.client.auth: "
                                          "checking client certificates needs a truststore "
                                          "(metrics.ssl.truststore.location or metrics.ssl.truststore.certificates)",
    }[problem]
    b = BrokerProcess(tmp_path / "broker", _metrics(props, free_port()))
    with pytest.raises(RuntimeError, match="broker exited with 2") as failed:
        b.start()
    message = str(failed.value)
    assert "strata serve: invalid configuration: metrics endpoint TLS (metrics.ssl.enabled=true): " in message
    assert expected in message, message
    assert wrong not in message
