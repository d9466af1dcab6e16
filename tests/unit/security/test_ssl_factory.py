"""TLS contexts from Kafka's ssl.* keys: real handshakes over socket pairs, config errors, keystore reloads."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import socket
import ssl
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.security.certs import Pki, make_pki

from strata.config.security_config import SslConfig
from strata.errors import InvalidConfigError
from strata.security import ssl_factory
from strata.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRuleError,
    SslPrincipalMapper,
    distinguished_name,
)
from strata.security.ssl_factory import (
    IANA_TO_OPENSSL,
    SslContextHolder,
    client_context,
    connection_principal,
    kernel_tls_status,
    keystore_certificate,
    peer_certificate_summary,
    server_context,
)

WRONG_PASSWORD = "Wrong-Secret-77"
BEGIN, END = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def cfg(**props: Any) -> SslConfig:
    return SslConfig.for_listener(props, None)


def server_cfg(pki: Pki, keystore: str = "PEM", truststore: str | None = "PEM", client_auth: str = "none",
               **extra: Any) -> SslConfig:
    props = {**pki.keystore_props(keystore), "ssl.client.auth": client_auth, **extra}
    if truststore:
        props.update(pki.truststore_props(truststore))
    return cfg(**props)


def client_cfg(pki: Pki, who: str | None = None, truststore: str | None = "PEM", form: str = "PEM",
               **extra: Any) -> SslConfig:
    props: dict[str, Any] = dict(extra)
    if who:
        props.update(pki.keystore_props(form, which=who))
    if truststore:
        props.update(pki.truststore_props(truststore))
    return cfg(**props)


@dataclass
class Outcome:
    server_error: BaseException | None = None
    client_error: BaseException | None = None
    peer_cert: dict[str, Any] | None = None
    server_cert: dict[str, Any] | None = None
    version: str | None = None
    cipher: str | None = None
    principal: KafkaPrincipal | None = None
    summary: str | None = None

    @property
    def ok(self) -> bool:
        return self.server_error is None and self.client_error is None


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str | None = "localhost",
              mapper: SslPrincipalMapper | None = None) -> Outcome:
    """A TLS connection over a socket pair (server in a thread) and one echoed message."""
    out = Outcome()
    a, b = socket.socketpair()
    a.settimeout(5.0)
    b.settimeout(5.0)

    def serve() -> None:
        try:
            with server.wrap_socket(a, server_side=True) as conn:
                out.peer_cert = conn.getpeercert()
                out.version, out.cipher = conn.version(), conn.cipher()[0]  # type: ignore[index]
                out.summary = peer_certificate_summary(conn)
                try:
                    out.principal = connection_principal(conn, mapper)
                except NoMatchingRuleError as e:
                    out.server_error = e
                    return
                conn.sendall(conn.recv(5).upper())
        except (OSError, ssl.SSLError) as e:
            out.server_error = e
        finally:
            a.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with client.wrap_socket(b, server_hostname=server_hostname) as conn:
            out.server_cert = conn.getpeercert()
            conn.sendall(b"hello")
            echo = conn.recv(5)
            if echo != b"HELLO":
                raise ConnectionError(f"no echo ({echo!r})")
    except (OSError, ssl.SSLError) as e:
        out.client_error = e
    finally:
        b.close()
    thread.join(10.0)
    assert not thread.is_alive()
    return out


# -- keystore and truststore forms -----------------------------------------------------------------------

KEYSTORE_FORMS = ["PEM", "PEM-encrypted", "PEM-inline", "PKCS12", "JKS-PKCS12"]
TRUSTSTORE_FORMS = ["PEM", "PEM-inline", "PKCS12", "JKS-PKCS12"]


@pytest.mark.parametrize("keystore", KEYSTORE_FORMS)
@pytest.mark.parametrize("truststore", TRUSTSTORE_FORMS)
def test_server_keystore_and_client_truststore_forms(pki: Pki, keystore: str, truststore: str) -> None:
    out = handshake(server_context(server_cfg(pki, keystore, truststore=None)),
                    client_context(client_cfg(pki, truststore=truststore)))
    assert out.ok, out
    assert out.version == "TLSv1.3"
    assert distinguished_name(out.server_cert or {}) == pki.server.dn
    assert out.principal == ANONYMOUS and out.peer_cert is None  # ssl.client.auth=none asks for no certificate


@pytest.mark.parametrize("truststore", TRUSTSTORE_FORMS)
@pytest.mark.parametrize("client_form", ["PEM", "PEM-inline"])
def test_mutual_tls_gives_the_mapped_principal(pki: Pki, truststore: str, client_form: str) -> None:
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),OU=eng,O=Strata$/$1/L,DEFAULT")
    server = server_context(server_cfg(pki, "PKCS12", truststore=truststore, client_auth="required"))
    for who, name in (("alice", "alice"), ("bob", "bob")):
        out = handshake(server, client_context(client_cfg(pki, who, form=client_form)), mapper=mapper)
        assert out.ok, out
        assert out.principal == KafkaPrincipal("User", name)
        assert out.peer_cert is not None and distinguished_name(out.peer_cert) == getattr(pki, who).dn
        assert out.summary is not None and out.summary.startswith(f"subject={getattr(pki, who).dn} ")
    # DEFAULT: the whole DN
    out = handshake(server, client_context(client_cfg(pki, "alice")))
    assert out.principal == KafkaPrincipal("User", "CN=alice,OU=eng,O=Strata")


def test_no_matching_rule_fails_the_connection(pki: Pki) -> None:
    server = server_context(server_cfg(pki, client_auth="required"))
    out = handshake(server, client_context(client_cfg(pki, "alice")), mapper=SslPrincipalMapper("RULE:^CN=x$/x/"))
    assert isinstance(out.server_error, NoMatchingRuleError)


def test_client_auth_modes(pki: Pki) -> None:
    anonymous = client_context(client_cfg(pki))
    alice = client_context(client_cfg(pki, "alice"))
    required = server_context(server_cfg(pki, client_auth="required"))
    requested = server_context(server_cfg(pki, client_auth="requested"))
    none = server_context(server_cfg(pki, client_auth="none"))
    assert required.verify_mode == ssl.CERT_REQUIRED and requested.verify_mode == ssl.CERT_OPTIONAL
    assert none.verify_mode == ssl.CERT_NONE

    refused = handshake(required, anonymous)
    assert isinstance(refused.server_error, ssl.SSLError) and refused.client_error is not None
    out = handshake(requested, anonymous)
    assert out.ok and out.principal == ANONYMOUS
    out = handshake(requested, alice)
    assert out.ok and out.principal == KafkaPrincipal("User", pki.alice.dn)
    out = handshake(none, alice)  # the certificate is not asked for: anonymous
    assert out.ok and out.principal == ANONYMOUS


@pytest.mark.parametrize("client_auth", ["required", "requested"])
@pytest.mark.parametrize("who", ["mallory", "expired"])
def test_untrusted_and_expired_client_certificates_are_refused(pki: Pki, client_auth: str, who: str) -> None:
    server = server_context(server_cfg(pki, client_auth=client_auth))
    client_cfg_ = cfg(**pki.keystore_props("PEM", which=who), **pki.truststore_props("PEM"))
    out = handshake(server, client_context(client_cfg_))
    assert isinstance(out.server_error, ssl.SSLError), out
    assert "certificate verify failed" in str(out.server_error)
    reason = "certificate has expired" if who == "expired" else "self-signed certificate in certificate chain"
    assert reason in str(out.server_error)  # mallory sends its chain up to the CA nobody trusts
    assert out.client_error is not None


def test_client_refuses_a_server_it_does_not_trust(pki: Pki) -> None:
    untrusted = cfg(**{"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.untrusted_ca_cert)})
    out = handshake(server_context(server_cfg(pki)), client_context(untrusted))
    assert isinstance(out.client_error, ssl.SSLCertVerificationError)


def test_host_name_checks_follow_endpoint_identification(pki: Pki) -> None:
    server = server_context(server_cfg(pki))
    https = client_context(client_cfg(pki))
    assert https.check_hostname and https.verify_mode == ssl.CERT_REQUIRED
    assert handshake(server, https, "localhost").ok
    assert handshake(server, https, "127.0.0.1").ok  # IP SAN
    wrong = handshake(server, https, "other.example")
    assert isinstance(wrong.client_error, ssl.SSLCertVerificationError)
    assert "Hostname mismatch" in str(wrong.client_error)
    off = client_context(client_cfg(pki, **{"ssl.endpoint.identification.algorithm": ""}))
    assert not off.check_hostname and off.verify_mode == ssl.CERT_REQUIRED
    assert handshake(server, off, "other.example").ok
    assert handshake(server, off, None).ok
    dns_only = server_context(cfg(**{"ssl.keystore.type": "PEM",
                                     "ssl.keystore.location": str(pki.server_dns_only.pem)}))
    assert not handshake(dns_only, https, "127.0.0.1").ok
    assert client_context(client_cfg(pki, **{"ssl.endpoint.identification.algorithm": "HTTPS"})).check_hostname


def test_client_presents_its_keystore_and_uses_the_system_store_without_truststore(pki: Pki) -> None:
    no_truststore = client_context(cfg())
    assert no_truststore.verify_mode == ssl.CERT_REQUIRED
    out = handshake(server_context(server_cfg(pki)), no_truststore)
    assert isinstance(out.client_error, ssl.SSLCertVerificationError)  # the test CA is not a system CA
    # a broker's client side with the broker's own keystore (clientAuth EKU) against a mutual-TLS listener
    broker_client = client_context(cfg(**pki.keystore_props("PKCS12"), **pki.truststore_props("PEM")))
    out = handshake(server_context(server_cfg(pki, client_auth="required")), broker_client)
    assert out.ok and out.principal == KafkaPrincipal("User", pki.server.dn)


# -- protocols and cipher suites ------------------------------------------------------------------------

def test_protocol_bounds(pki: Pki) -> None:
    tls13_server = server_context(server_cfg(pki, **{"ssl.enabled.protocols": "TLSv1.3"}))
    tls12_client = client_context(client_cfg(pki, **{"ssl.enabled.protocols": "TLSv1.2"}))
    assert tls13_server.minimum_version == ssl.TLSVersion.TLSv1_3
    assert tls12_client.maximum_version == ssl.TLSVersion.TLSv1_2
    out = handshake(tls13_server, tls12_client)
    assert not out.ok and isinstance(out.server_error, ssl.SSLError)
    default_server = server_context(server_cfg(pki))
    assert default_server.minimum_version == ssl.TLSVersion.TLSv1_2
    assert default_server.maximum_version == ssl.TLSVersion.TLSv1_3
    assert handshake(default_server, tls12_client).version == "TLSv1.2"
    assert handshake(default_server, client_context(client_cfg(pki))).version == "TLSv1.3"
    # ssl.protocol=TLSv1.2 keeps a client off TLS 1.3 (Kafka's SslConfigs doc); a server is not capped
    capped = client_context(client_cfg(pki, **{"ssl.protocol": "TLSv1.2"}))
    assert handshake(default_server, capped).version == "TLSv1.2"
    assert server_context(server_cfg(pki, **{"ssl.protocol": "TLSv1.2"})).maximum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(InvalidConfigError, match="ssl.protocol"):
        client_context(client_cfg(pki, **{"ssl.protocol": "TLSv1.2", "ssl.enabled.protocols": "TLSv1.3"}))


@pytest.mark.parametrize("protocols", [("TLSv1.1",), ("SSLv3", "TLSv1.2"), ()])
def test_only_tls12_and_tls13_are_ever_enabled(pki: Pki, protocols: tuple[str, ...]) -> None:
    bad = dataclasses.replace(server_cfg(pki), enabled_protocols=protocols)
    with pytest.raises(InvalidConfigError, match="ssl.enabled.protocols"):
        server_context(bad)


def test_iana_cipher_suite_names_map_to_openssl(pki: Pki) -> None:
    iana = server_context(server_cfg(pki, **{"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}))
    openssl = server_context(server_cfg(pki, **{"ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"}))
    tls12 = [c["name"] for c in iana.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert [c["name"] for c in openssl.get_ciphers()] == [c["name"] for c in iana.get_ciphers()]
    # no TLS 1.3 suite listed: TLS 1.3 cannot be negotiated (as in Java)
    assert iana.maximum_version == ssl.TLSVersion.TLSv1_2
    out = handshake(iana, client_context(client_cfg(pki)))
    assert out.ok and out.version == "TLSv1.2" and out.cipher == "ECDHE-ECDSA-AES128-GCM-SHA256"
    # a suite the client does not offer
    chacha = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
    only_chacha = client_context(client_cfg(pki, **{"ssl.cipher.suites": chacha}))
    assert not handshake(iana, only_chacha).ok
    # every IANA name of the table is an OpenSSL TLS 1.2 suite here
    assert set(IANA_TO_OPENSSL.values()) <= ssl_factory._openssl_tls12_names()


def test_tls13_suites(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="strata.security.ssl"):
        ctx = server_context(server_cfg(pki, **{"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"}))
    assert "TLS 1.3 suites cannot be restricted" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="strata.security.ssl"):  # OpenSSL's defaults listed: nothing lost
        server_context(server_cfg(pki, **{"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,"
                                          "TLS_CHACHA20_POLY1305_SHA256"}))
    assert caplog.text == ""
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3  # no TLS 1.2 suite listed
    assert handshake(ctx, client_context(client_cfg(pki))).version == "TLSv1.3"
    mixed = server_context(server_cfg(pki, **{"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,"
                                              "TLS_CHACHA20_POLY1305_SHA256,TLS_AES_128_CCM_SHA256,"
                                              "TLS_AES_128_CCM_8_SHA256,ECDHE-ECDSA-AES256-GCM-SHA384"}))
    assert mixed.minimum_version == ssl.TLSVersion.TLSv1_2 and mixed.maximum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(InvalidConfigError, match="ssl.cipher.suites"):
        server_context(server_cfg(pki, **{"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256",
                                          "ssl.enabled.protocols": "TLSv1.2"}))
    with pytest.raises(InvalidConfigError, match="ssl.cipher.suites"):
        server_context(server_cfg(pki, **{"ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256",
                                          "ssl.enabled.protocols": "TLSv1.3"}))


def test_unknown_cipher_suite_is_a_config_error(pki: Pki) -> None:
    with pytest.raises(InvalidConfigError, match="ssl.cipher.suites: unknown cipher suite.*TLS_NOPE_WITH_NOTHING"):
        server_context(server_cfg(pki, **{"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, "
                                          "TLS_NOPE_WITH_NOTHING"}))


# -- configuration errors -------------------------------------------------------------------------------

def _jks(tmp_path: Path) -> str:
    path = tmp_path / "kafka.keystore.jks"
    path.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + os.urandom(64))
    return str(path)


ERROR_CASES = {
    "missing keystore": (lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(t / "nope.pem")},
                         "ssl.keystore.location", "does not exist"),
    "keystore is a directory": (lambda p, t: {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(t),
                                              "ssl.keystore.password": WRONG_PASSWORD},
                                "ssl.keystore.location", "directory"),
    "PKCS12 wrong password": (lambda p, t: {**p.keystore_props("PKCS12"), "ssl.keystore.password": WRONG_PASSWORD},
                              "ssl.keystore.password", "does not open"),
    "JKS-type PKCS12 wrong password": (
        lambda p, t: {**p.keystore_props("JKS-PKCS12"), "ssl.keystore.password": WRONG_PASSWORD},
        "ssl.keystore.password", "does not open"),
    "PKCS12 without password": (
        lambda p, t: {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p.server_p12)},
        "ssl.keystore.password", "needs it"),
    "password without keystore": (lambda p, t: {"ssl.keystore.password": WRONG_PASSWORD}, "ssl.keystore.location",
                                  "without a keystore"),
    "encrypted PEM wrong key password": (
        lambda p, t: {**p.keystore_props("PEM-encrypted"), "ssl.key.password": WRONG_PASSWORD},
        "ssl.key.password", "does not decrypt"),
    "encrypted PEM without key password": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(p.server_pem_encrypted)},
        "ssl.key.password", "encrypted"),
    "encrypted inline key without key password": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": p.server_key_encrypted.read_text(),
                      "ssl.keystore.certificate.chain": p.server.chain_text()},
        "ssl.key.password", "encrypted"),
    "key does not match the certificate": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": p.alice.key_text(),
                      "ssl.keystore.certificate.chain": p.server.chain_text()},
        "ssl.keystore.key", "does not match its certificate"),
    "PEM keystore without key": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(p.server.chain)},
        "ssl.keystore.location", "no PEM private key"),
    "PEM keystore without certificate": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(p.server.key)},
        "ssl.keystore.location", "no PEM certificate"),
    "PEM keystore with a store password": (
        lambda p, t: {**p.keystore_props("PEM"), "ssl.keystore.password": WRONG_PASSWORD},
        "ssl.keystore.password", "PEM keystore has no store password"),
    "PKCS12 file as PEM": (lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(p.server_p12)},
                           "ssl.keystore.location", "ssl.keystore.type=PKCS12"),
    "PEM file as JKS": (lambda p, t: {"ssl.keystore.location": str(p.server.pem), "ssl.keystore.password": "x"},
                        "ssl.keystore.location", "ssl.keystore.type=PEM"),
    "inline key with PKCS12 type": (
        lambda p, t: {"ssl.keystore.type": "PKCS12", "ssl.keystore.key": p.server.key_text(),
                      "ssl.keystore.certificate.chain": p.server.chain_text()},
        "ssl.keystore.type", "only with ssl.keystore.type=PEM"),
    "inline key without chain": (lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": p.server.key_text()},
                                 "ssl.keystore.certificate.chain", "without its certificate chain"),
    "inline chain that is not PEM": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": p.server.key_text(),
                      "ssl.keystore.certificate.chain": "MIIBzjCCAXSgAwIBAgIU"},
        "ssl.keystore.certificate.chain", "no PEM certificate"),
    "certificate that is not base64": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": p.server.key_text(),
                      "ssl.keystore.certificate.chain": f"{BEGIN}\n#!?\n{END}\n"},
        "ssl.keystore.certificate.chain", "not valid base64"),
    "certificate that is not X.509": (
        lambda p, t: {"ssl.keystore.type": "PEM", "ssl.keystore.key": p.server.key_text(),
                      "ssl.keystore.certificate.chain": f"{BEGIN}\nAAAA\n{END}\n"},
        "ssl.keystore.certificate.chain", "cannot be read"),
    "truststore PKCS12 wrong password": (
        lambda p, t: {**p.keystore_props("PEM"), **p.truststore_props("PKCS12"),
                      "ssl.truststore.password": WRONG_PASSWORD},
        "ssl.truststore.password", "does not open"),
    "truststore PEM with password": (
        lambda p, t: {**p.keystore_props("PEM"), **p.truststore_props("PEM"), "ssl.truststore.password": "x"},
        "ssl.truststore.password", "no password"),
    "truststore missing": (
        lambda p, t: {**p.keystore_props("PEM"), "ssl.truststore.type": "PEM",
                      "ssl.truststore.location": str(t / "ca.pem")},
        "ssl.truststore.location", "does not exist"),
    "truststore DER certificate as PEM": (
        lambda p, t: {**p.keystore_props("PEM"), "ssl.truststore.type": "PEM", "ssl.truststore.location": _der(p, t)},
        "ssl.truststore.location", "not a PEM file"),
    "truststore PEM without certificates": (
        lambda p, t: {**p.keystore_props("PEM"), "ssl.truststore.type": "PEM",
                      "ssl.truststore.location": str(p.ca_key)},
        "ssl.truststore.location", "no PEM certificate"),
    "inline truststore that is not PEM": (
        lambda p, t: {**p.keystore_props("PEM"), "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "hello"},
        "ssl.truststore.certificates", "no PEM certificate"),
    "inline truststore with JKS type": (
        lambda p, t: {**p.keystore_props("PEM"), "ssl.truststore.certificates": p.ca_cert.read_text()},
        "ssl.truststore.type", "only with ssl.truststore.type=PEM"),
    "client auth without truststore": (lambda p, t: {**p.keystore_props("PEM"), "ssl.client.auth": "required"},
                                       "ssl.client.auth", "needs a truststore"),
    "requested client auth without truststore": (
        lambda p, t: {**p.keystore_props("PEM"), "ssl.client.auth": "requested"}, "ssl.client.auth", "system's CA"),
    "server without keystore": (lambda p, t: {**p.truststore_props("PEM")}, "ssl.keystore.location",
                                "needs a key and certificate"),
}


def _der(pki: Pki, tmp_path: Path) -> str:
    path = tmp_path / "ca.der"
    path.write_bytes(ssl.PEM_cert_to_DER_cert(pki.ca_cert.read_text()))
    return str(path)


def _all_text(e: BaseException) -> str:
    parts = []
    cur: BaseException | None = e
    while cur is not None:
        parts.append(f"{cur!s} {cur!r}")
        cur = cur.__cause__ or cur.__context__
    return " ".join(parts)


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_config_errors_name_the_key_never_the_password(pki: Pki, tmp_path: Path, case: str) -> None:
    props_of, key, what = ERROR_CASES[case]
    with pytest.raises(InvalidConfigError) as info:
        server_context(cfg(**props_of(pki, tmp_path)))
    message = str(info.value)
    assert key in message and what in message, message
    text = _all_text(info.value)
    for secret in (WRONG_PASSWORD, pki.keystore_password, pki.key_password, pki.truststore_password):
        assert secret not in text
    assert pki.server.key_text().splitlines()[1] not in text and pki.alice.key_text().splitlines()[1] not in text


@pytest.mark.parametrize(("type_key", "location_key", "kind"), [
    ("ssl.keystore.type", "ssl.keystore.location", "JKS"), ("ssl.keystore.type", "ssl.keystore.location", "PKCS12"),
    ("ssl.keystore.type", "ssl.keystore.location", "PEM"), ("ssl.truststore.type", "ssl.truststore.location", "JKS"),
    ("ssl.truststore.type", "ssl.truststore.location", "PKCS12"),
    ("ssl.truststore.type", "ssl.truststore.location", "PEM"),
])
def test_real_jks_files_are_refused_with_the_conversion_command(pki: Pki, tmp_path: Path, type_key: str,
                                                                 location_key: str, kind: str) -> None:
    jks = _jks(tmp_path)
    props = {**pki.keystore_props("PEM"), **pki.truststore_props("PEM")}
    props[type_key], props[location_key] = kind, jks
    prefix = type_key.rsplit(".", 1)[0]
    if kind == "PEM":
        props.pop(f"{prefix}.password", None)
    else:
        props[f"{prefix}.password"] = WRONG_PASSWORD
    with pytest.raises(InvalidConfigError) as info:
        server_context(cfg(**props))
    message = str(info.value)
    assert location_key in message and "Java JKS keystore" in message
    assert f"keytool -importkeystore -srckeystore {jks} -srcstoretype JKS" in message
    assert "-deststoretype PKCS12" in message and f"{type_key}=PKCS12" in message
    assert WRONG_PASSWORD not in _all_text(info.value)


def test_endpoint_identification_algorithm_must_be_https_or_empty(pki: Pki) -> None:
    with pytest.raises(InvalidConfigError, match="ssl.endpoint.identification.algorithm"):
        client_context(client_cfg(pki, **{"ssl.endpoint.identification.algorithm": "ldaps"}))


def test_key_material_files_are_private_and_removed(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int, int, bool]] = []
    original = ssl_factory._load_cert_chain

    def spy(ctx: ssl.SSLContext, path: str, *args: Any, **kwargs: Any) -> None:
        encrypted = "BEGIN ENCRYPTED PRIVATE KEY" in Path(path).read_text()
        seen.append((path, stat.S_IMODE(os.stat(path).st_mode), stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode),
                     encrypted))
        original(ctx, path, *args, **kwargs)

    monkeypatch.setattr(ssl_factory, "_load_cert_chain", spy)
    server_context(server_cfg(pki, "PEM-inline"))
    server_context(server_cfg(pki, "PKCS12"))
    assert [(mode, dir_mode) for _, mode, dir_mode, _ in seen] == [(0o600, 0o700)] * 2
    for path, *_ in seen:
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    # the key read from PKCS12 is written re-encrypted with a one-time password, never in the clear
    assert [encrypted for *_, encrypted in seen] == [False, True]


def test_keystore_certificate(pki: Pki) -> None:
    info = keystore_certificate(server_cfg(pki, "PKCS12"))
    assert info is not None and info.subject == pki.server.dn
    assert info.subject_alt_names == (("DNS", "localhost"), ("IP Address", "127.0.0.1"))
    assert keystore_certificate(client_cfg(pki)) is None


# -- reloading the keystore ----------------------------------------------------------------------------

def _pem_keystore(files: Any) -> SslConfig:
    return cfg(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.pem), "ssl.truststore.type": "PEM",
                  "ssl.truststore.location": str(files.chain.parent / "ca.pem")})


def test_reload_swaps_the_context_for_new_connections_only(pki: Pki) -> None:
    holder = SslContextHolder(_pem_keystore(pki.server))
    client = client_context(client_cfg(pki))
    assert holder.reload() is False and holder.reload(_pem_keystore(pki.server)) is False  # nothing changed
    old_ctx, old_serial = holder.context, holder.certificate.serial_number

    # a connection made before the reload keeps its session
    a, b = socket.socketpair()
    a.settimeout(5.0)
    b.settimeout(5.0)
    accepted: list[ssl.SSLSocket] = []
    thread = threading.Thread(target=lambda: accepted.append(old_ctx.wrap_socket(a, server_side=True)))
    thread.start()
    with client.wrap_socket(b, server_hostname="localhost") as before:
        thread.join(5.0)
        assert accepted
        assert holder.reload(_pem_keystore(pki.server_renewed)) is True
        assert holder.context is not old_ctx and holder.certificate.serial_number != old_serial
        before.sendall(b"still")
        assert accepted[0].recv(5) == b"still"
        accepted[0].sendall(b"here")
        assert before.recv(4) == b"here"
        accepted[0].close()
    # new connections get the renewed certificate
    out = handshake(holder.context, client)
    assert out.ok and out.server_cert is not None
    assert int(out.server_cert["serialNumber"], 16) == holder.certificate.serial_number


def test_reload_keeps_the_distinguished_name(pki: Pki) -> None:
    holder = SslContextHolder(_pem_keystore(pki.server))
    current = holder.context
    with pytest.raises(InvalidConfigError, match="DistinguishedName does not match.*ssl.allow.dn.changes"):
        holder.reload(_pem_keystore(pki.other_server))
    assert holder.context is current and holder.config == _pem_keystore(pki.server)
    holder.allow_dn_changes = True
    with pytest.raises(InvalidConfigError, match="SubjectAltNames do not match.*ssl.allow.san.changes"):
        holder.reload(_pem_keystore(pki.other_server))
    holder.allow_san_changes = True
    assert holder.reload(_pem_keystore(pki.other_server)) is True
    assert holder.certificate.subject == pki.other_server.dn


def test_reload_may_add_subject_alt_names_but_not_drop_any(pki: Pki) -> None:
    holder = SslContextHolder(_pem_keystore(pki.server))
    with pytest.raises(InvalidConfigError, match=r"SubjectAltNames do not match: existing=\[DNS:localhost, "
                                                 r"IP Address:127.0.0.1\], new=\[DNS:localhost\]"):
        holder.validate(_pem_keystore(pki.server_dns_only))
    holder = SslContextHolder(_pem_keystore(pki.server_dns_only))
    assert holder.reload(_pem_keystore(pki.server)) is True  # adds IP:127.0.0.1
    assert SslContextHolder(_pem_keystore(pki.server), allow_san_changes=True).reload(
        _pem_keystore(pki.server_dns_only))


def test_reload_across_keystore_forms_and_refusals(pki: Pki) -> None:
    holder = SslContextHolder(server_cfg(pki, "PEM"))
    assert holder.reload(server_cfg(pki, "PKCS12")) is True  # same certificate, another form
    current = holder.context
    with pytest.raises(InvalidConfigError, match="ssl.keystore.password"):
        holder.reload(dataclasses.replace(server_cfg(pki, "PKCS12"), keystore_password=WRONG_PASSWORD))
    with pytest.raises(InvalidConfigError, match="Cannot update configuration ssl.client.auth dynamically"):
        holder.reload(server_cfg(pki, "PKCS12", client_auth="required"))
    with pytest.raises(InvalidConfigError, match="Cannot update configuration ssl.cipher.suites dynamically"):
        holder.validate(server_cfg(pki, "PKCS12", **{"ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"}))
    assert holder.context is current
    no_truststore = SslContextHolder(server_cfg(pki, truststore=None))
    with pytest.raises(InvalidConfigError, match="Cannot add SSL truststore"):
        no_truststore.reload(server_cfg(pki))


def test_reload_notices_changed_files(pki: Pki, tmp_path: Path) -> None:
    path = tmp_path / "keystore.pem"
    shutil.copyfile(pki.server.pem, path)
    config = cfg(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)})
    holder = SslContextHolder(config)
    assert not holder.files_changed() and holder.reload() is False
    serial = holder.certificate.serial_number
    tmp = tmp_path / "keystore.pem.new"
    shutil.copyfile(pki.server_renewed.pem, tmp)
    os.replace(tmp, path)  # an atomic rotation: a new inode
    assert holder.files_changed()
    assert holder.reload() is True and holder.certificate.serial_number != serial
    assert not holder.files_changed() and holder.reload() is False


def test_reload_checked_by_handshakes_with_the_truststore(pki: Pki) -> None:
    untrusted = cfg(**{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.mallory.pem),
                       **pki.truststore_props("PEM")})
    loose = SslContextHolder(server_cfg(pki), allow_dn_changes=True, allow_san_changes=True)
    loose.validate(untrusted)  # identity checks off, nothing verifies the new certificate
    strict = SslContextHolder(server_cfg(pki), allow_dn_changes=True, allow_san_changes=True,
                              verify_with_truststore=True)
    with pytest.raises(InvalidConfigError, match="cannot complete a TLS handshake"):
        strict.validate(untrusted)
    assert strict.reload(server_cfg(pki, "PKCS12")) is True
    mutual = SslContextHolder(server_cfg(pki, client_auth="required"), verify_with_truststore=True)
    assert mutual.reload(dataclasses.replace(_pem_keystore(pki.server_renewed), client_auth="required")) is True


# -- kernel TLS -----------------------------------------------------------------------------------------

def test_kernel_tls_status_is_one_line() -> None:
    status = kernel_tls_status()
    assert status.startswith("kernel TLS") and "\n" not in status
    if "unavailable" in status and "ENOENT" in status:
        assert "modprobe tls" in status
    assert ssl_factory.SSL_OP_ENABLE_KTLS == 8  # OpenSSL 3 ssl.h: SSL_OP_BIT(3)
