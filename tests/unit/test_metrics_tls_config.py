"""``metrics.ssl.*``: parsing into an SslConfig, sensitivity, the endpoint's context and its error messages."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki

from strata.broker.admin_http import AdminHttpServer
from strata.broker.config_views import ConfigViews
from strata.common.metrics import Registry
from strata.config.broker_config import BrokerConfig
from strata.config.security_config import HIDDEN, SslConfig, is_sensitive, metrics_key_names, redacted
from strata.errors import InvalidConfigError
from strata.security.ssl_factory import metrics_server_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _config(tmp_path: Path, **props: str) -> BrokerConfig:
    return BrokerConfig.from_props({"log.dirs": str(tmp_path), **props})


def test_plain_http_by_default(tmp_path: Path) -> None:
    assert _config(tmp_path).metrics_ssl is None
    # metrics.ssl.* keys without metrics.ssl.enabled=true change nothing
    assert _config(tmp_path, **{"metrics.ssl.keystore.location": "/x.pem"}).metrics_ssl is None
    assert metrics_server_context(None) is None


def test_the_metrics_keys_are_parsed_without_falling_back_to_broker_ssl_keys(tmp_path: Path) -> None:
    cfg = _config(tmp_path, **{
        "metrics.ssl.enabled": "true", "metrics.ssl.keystore.type": "PKCS12",
        "metrics.ssl.keystore.location": "/k.p12", "metrics.ssl.keystore.password": "pw",
        "metrics.ssl.truststore.type": "PEM", "metrics.ssl.truststore.location": "/ca.pem",
        "metrics.ssl.client.auth": "required", "metrics.ssl.enabled.protocols": "TLSv1.3",
        "ssl.keystore.location": "/broker.pem", "ssl.truststore.password": "broker-wide",
    }).metrics_ssl
    assert cfg == SslConfig(keystore_type="PKCS12", keystore_location="/k.p12", keystore_password="pw",
                            truststore_type="PEM", truststore_location="/ca.pem", client_auth="required",
                            enabled_protocols=("TLSv1.3",))
    assert "pw" not in repr(cfg)


@pytest.mark.parametrize(("key", "value"), [("metrics.ssl.enabled", "yes"), ("metrics.ssl.client.auth", "maybe"),
                                            ("metrics.ssl.keystore.type", "JCEKS"),
                                            ("metrics.ssl.enabled.protocols", "TLSv1.1")])
def test_bad_values_name_the_metrics_key(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=f"for configuration {key}"):
        _config(tmp_path, **{"metrics.ssl.enabled": "true", key: value})


def test_an_unknown_metrics_ssl_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="metrics.ssl.keystore.locaton"):
        _config(tmp_path, **{"metrics.ssl.keystore.locaton": "/x.pem"})


def test_passwords_are_sensitive() -> None:
    for name in ("metrics.ssl.keystore.password", "metrics.ssl.key.password", "metrics.ssl.truststore.password",
                 "metrics.ssl.keystore.key"):
        assert is_sensitive(name), name
    for name in ("metrics.ssl.keystore.location", "metrics.ssl.enabled", "metrics.port"):
        assert not is_sensitive(name), name
    assert redacted({"metrics.ssl.key.password": "pw", "metrics.port": "9404", "metrics.ssl.keystore.key": None}) == \
        {"metrics.ssl.key.password": HIDDEN, "metrics.port": "9404", "metrics.ssl.keystore.key": None}


def test_describe_configs_hides_the_metrics_passwords(tmp_path: Path) -> None:
    views = {v.name: v for v in ConfigViews(_config(tmp_path, **{
        "metrics.ssl.enabled": "true", "metrics.ssl.keystore.password": "ks-secret",
        "metrics.ssl.key.password": "key-secret"})).broker_configs()}
    for name in ("metrics.ssl.keystore.password", "metrics.ssl.key.password", "metrics.ssl.truststore.password"):
        assert views[name].is_sensitive and views[name].value is None, name
        assert all(s.value is None for s in views[name].synonyms), name
    assert views["metrics.ssl.enabled"].value == "true" and not views["metrics.ssl.enabled"].is_sensitive
    assert all("secret" not in str(v.value) for v in views.values())


def test_key_names_are_reworded_but_not_paths() -> None:
    assert metrics_key_names("Invalid value /etc/ssl.keystore.location for configuration ssl.keystore.location: "
                             "set ssl.keystore.type=PEM (ssl.truststore.location or ssl.truststore.certificates). "
                             "metrics.ssl.key.password") == (
        "Invalid value /etc/ssl.keystore.location for configuration metrics.ssl.keystore.location: "
        "set metrics.ssl.keystore.type=PEM (metrics.ssl.truststore.location or metrics.ssl.truststore.certificates). "
        "metrics.ssl.key.password")


def _metrics_ssl(tmp_path: Path, props: dict[str, str]) -> SslConfig | None:
    return _config(tmp_path, **{"metrics.ssl.enabled": "true", **{f"metrics.{k}": v for k, v in props.items()}}) \
        .metrics_ssl


@pytest.mark.parametrize("form", ["PEM", "PEM-encrypted", "PEM-inline", "PKCS12"])
def test_the_context_from_each_keystore_form(tmp_path: Path, pki: Pki, form: str) -> None:
    ctx = metrics_server_context(_metrics_ssl(tmp_path, pki.keystore_props(form)))
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_NONE
    ctx = metrics_server_context(_metrics_ssl(tmp_path, {**pki.keystore_props(form), **pki.truststore_props("PKCS12"),
                                                         "ssl.client.auth": "required"}))
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(("props", "expected"), [
    ({}, "Missing required configuration metrics.ssl.keystore.location (or metrics.ssl.keystore.key with "
         "metrics.ssl.keystore.certificate.chain): the HTTPS metrics endpoint needs a key and certificate"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent/server.pem"},
     "Invalid value /nonexistent/server.pem for configuration metrics.ssl.keystore.location: the file does not exist"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "P12", "ssl.keystore.password": "wrong-pw-77"},
     "Invalid value for configuration metrics.ssl.keystore.password: it does not open the PKCS12 file"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "ENCRYPTED"},
     "Missing required configuration metrics.ssl.key.password"),
])
def test_bad_keystores_are_config_errors_naming_the_metrics_key(tmp_path: Path, pki: Pki, props: dict[str, str],
                                                                expected: str) -> None:
    files = {"P12": str(pki.server_p12), "ENCRYPTED": str(pki.server_pem_encrypted)}
    props = {k: files.get(v, v) for k, v in props.items()}
    with pytest.raises(InvalidConfigError) as failed:
        metrics_server_context(_metrics_ssl(tmp_path, props))
    message = str(failed.value)
    assert message.startswith("metrics endpoint TLS (metrics.ssl.enabled=true): "), message
    assert expected in message, message
    assert "wrong-pw-77" not in message


def test_the_server_answers_https_only(tmp_path: Path, pki: Pki) -> None:
    server = AdminHttpServer("127.0.0.1", 0, Registry(), list, ssl_config=_metrics_ssl(tmp_path, pki.keystore_props()))
    client = ssl.create_default_context(cafile=str(pki.ca_cert))

    async def get(tls: ssl.SSLContext | None) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=tls,
                                                       server_hostname="127.0.0.1" if tls else None)
        writer.write(b"GET /v1/tiers HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await reader.read()
        writer.close()
        return data

    async def run() -> tuple[bytes, bytes]:
        await server.start()
        assert server.scheme == "https"
        try:
            return await get(client), await get(None)
        finally:
            await server.stop()

    over_tls, plain = asyncio.run(run())
    assert over_tls.startswith(b"HTTP/1.1 200 OK") and b'"partitions": []' in over_tls
    assert not plain.startswith(b"HTTP/")
