"""Kafka client properties -> how Strata's clients connect (strata.client.security): the Java client's keys,
librdkafka's, the translation to librdkafka for the Spark sink, and errors that name the key, never a password."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki

from strata.client.security import (
    ClientSecurity,
    MaskedProperties,
    client_security,
    librdkafka_config,
    sasl_login_sync,
    security_properties,
)
from strata.errors import InvalidConfigError
from strata.spark.options import StrataOptionError, parse_sink_options, parse_source_options

SECRET = "pa55-Wd-Canary-77"
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
              f'password="{SECRET}";')
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="{SECRET}";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("client-pki"))


def _refused(props: dict[str, str], *words: str) -> str:
    with pytest.raises(InvalidConfigError) as e:
        client_security(props)
    message = str(e.value)
    assert SECRET not in message
    for word in words:
        assert word in message, message
    return message


def test_plaintext_is_the_default() -> None:
    assert client_security({}) == ClientSecurity()
    assert client_security({"client.id": "x", "security.protocol": "plaintext"}).protocol == "PLAINTEXT"


def test_sasl_plaintext_with_the_java_clients_jaas_config() -> None:
    s = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.jaas.config": SCRAM_JAAS})
    assert (s.protocol, s.ssl_context, s.sasl_mechanism, s.username, s.password) == \
        ("SASL_PLAINTEXT", None, "SCRAM-SHA-512", "alice", SECRET)
    assert SECRET not in repr(s)
    plain = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.jaas.config": PLAIN_JAAS})
    assert (plain.sasl_mechanism, plain.username, plain.password) == ("PLAIN", "bob", SECRET)


def test_sasl_with_librdkafkas_names() -> None:
    s = client_security({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "SCRAM-SHA-256",
                         "sasl.username": "carol", "sasl.password": SECRET})
    assert (s.protocol, s.sasl_mechanism, s.username, s.password) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol",
                                                                     SECRET)


def test_sasl_problems_name_the_key_and_hide_the_password() -> None:
    base = {"security.protocol": "SASL_PLAINTEXT"}
    _refused({**base, "sasl.jaas.config": SCRAM_JAAS}, "sasl.mechanism", "GSSAPI")  # Kafka's default mechanism
    _refused({**base, "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": SCRAM_JAAS}, "sasl.mechanism")
    _refused({**base, "sasl.mechanism": "PLAIN"}, "username", "sasl.jaas.config")
    _refused({**base, "sasl.mechanism": "PLAIN", "sasl.jaas.config": SCRAM_JAAS[:-1]}, "sasl.jaas.config",
             "semi-colon")
    _refused({**base, "sasl.mechanism": "PLAIN", "sasl.jaas.config": SCRAM_JAAS, "sasl.username": "x"},
             "sasl.jaas.config", "not both")
    _refused({**base, "sasl.mechanism": "PLAIN",
              "sasl.jaas.config": f'com.sun.security.auth.module.Krb5LoginModule required password="{SECRET}";'},
             "Krb5LoginModule", "PlainLoginModule")
    _refused({"security.protocol": "SASL_TLS"}, "security.protocol")


def test_tls_from_a_pem_truststore_checks_the_host_name(pki: Pki) -> None:
    s = client_security({"security.protocol": "SSL", **pki.truststore_props("PEM")})
    assert s.ssl_context is not None and s.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert s.ssl_context.check_hostname and s.server_hostname("127.0.0.1") == "127.0.0.1"
    off = client_security({"security.protocol": "SSL", **pki.truststore_props("PEM"),
                           "ssl.endpoint.identification.algorithm": ""})
    assert off.ssl_context is not None and not off.ssl_context.check_hostname and off.server_hostname("h") is None
    none = client_security({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert),
                            "ssl.endpoint.identification.algorithm": "none"})  # librdkafka's word
    assert none.ssl_context is not None and not none.ssl_context.check_hostname


def test_pkcs12_and_pem_keystores_and_librdkafkas_file_names(pki: Pki) -> None:
    for props in ({**pki.truststore_props("PKCS12"), **pki.keystore_props("PKCS12")},
                  {**pki.truststore_props("JKS-PKCS12"), **pki.keystore_props("JKS-PKCS12")},
                  {**pki.truststore_props("PEM"), **pki.keystore_props("PEM-encrypted")},
                  {"ssl.ca.location": str(pki.ca_cert), "ssl.certificate.location": str(pki.alice.cert),
                   "ssl.key.location": str(pki.alice.key)},
                  {"ssl.ca.location": str(pki.ca_cert), "ssl.certificate.location": str(pki.alice.pem),
                   "ssl.key.location": str(pki.alice.pem)}):
        s = client_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                             "sasl.jaas.config": PLAIN_JAAS, **props})
        assert s.protocol == "SASL_SSL" and s.ssl_context is not None and s.username == "bob"


def test_tls_problems_name_the_key(pki: Pki, tmp_path: Path) -> None:
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    message = _refused({"security.protocol": "SSL", "ssl.truststore.location": str(jks),
                        "ssl.truststore.password": SECRET}, "ssl.truststore.location", "keytool")
    assert "JKS" in message
    _refused({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
              "ssl.truststore.location": str(pki.truststore_p12), "ssl.truststore.password": SECRET},
             "ssl.truststore.password")
    _refused({"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "missing.pem"),
              "ssl.truststore.type": "PEM"}, "ssl.truststore.location", "does not exist")
    _refused({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert),
              "ssl.certificate.location": str(pki.alice.cert)}, "ssl.key.location")
    _refused({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert), **pki.truststore_props("PEM")},
             "ssl.ca.location", "ssl.truststore.location")
    _refused({"security.protocol": "SSL", **pki.truststore_props("PEM"),
              "ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification.algorithm")


def test_librdkafka_translation(pki: Pki) -> None:
    conf = librdkafka_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.jaas.config": SCRAM_JAAS, **pki.truststore_props("PEM"),
                              **pki.keystore_props("PEM-encrypted"), "acks": "1", "linger.ms": "5"})
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                    "sasl.password": SECRET, "ssl.ca.location": str(pki.truststore_pem),
                    "ssl.certificate.location": str(pki.server_pem_encrypted),
                    "ssl.key.location": str(pki.server_pem_encrypted), "ssl.key.password": pki.key_password,
                    "ssl.endpoint.identification.algorithm": "https", "acks": "1", "linger.ms": "5"}
    p12 = librdkafka_config({"security.protocol": "SSL", **pki.truststore_props("PKCS12"),
                             **pki.keystore_props("PKCS12"), "ssl.endpoint.identification.algorithm": ""})
    assert p12["ssl.ca.pem"] == pki.ca_cert.read_text()  # librdkafka reads CA certificates as PEM only
    assert (p12["ssl.keystore.location"], p12["ssl.keystore.password"]) == (str(pki.server_p12),
                                                                            pki.keystore_password)
    assert p12["ssl.endpoint.identification.algorithm"] == "none"
    assert not {"ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.type"} & set(p12)
    native = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert)}
    assert librdkafka_config(native) == {**native, "ssl.endpoint.identification.algorithm": "https"}
    plaintext = {"bootstrap.servers": "h:1", "sasl.jaas.config": SCRAM_JAAS}  # ignored, as Kafka ignores it
    assert librdkafka_config(plaintext) == {"bootstrap.servers": "h:1"}


def test_the_librdkafka_producer_accepts_the_translation(pki: Pki) -> None:
    from confluent_kafka import Producer

    conf = librdkafka_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
                              PLAIN_JAAS, **pki.truststore_props("PKCS12"), **pki.keystore_props("PEM")})
    Producer(conf).flush(0)  # no bootstrap servers: checks the properties without connecting


def test_masked_properties_hide_secrets_in_repr_and_pickle_round_trips() -> None:
    props = security_properties({"security.protocol": "SASL_SSL", "sasl.jaas.config": SCRAM_JAAS,
                                 "ssl.truststore.password": SECRET, "ssl.key.password": SECRET,
                                 "ssl.keystore.key": SECRET, "sasl.password": SECRET, "acks": "all"})
    assert "acks" not in props and props["security.protocol"] == "SASL_SSL"
    assert SECRET not in repr(props) and "sasl.jaas.config" in repr(props)
    back = pickle.loads(pickle.dumps(props))
    assert back == props and dict(back)["sasl.password"] == SECRET and isinstance(back, MaskedProperties)


def test_spark_options_carry_the_security_options_hidden(pki: Pki) -> None:
    options = {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.security.protocol": "SASL_SSL",
               "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": SCRAM_JAAS,
               **{f"kafka.{k}": v for k, v in pki.truststore_props("PEM").items()}}
    opts = parse_source_options(options)
    assert dict(opts.security)["sasl.jaas.config"] == SCRAM_JAAS
    assert SECRET not in repr(opts) and "sasl.jaas.config" in repr(opts)
    assert pickle.loads(pickle.dumps(opts)) == opts
    sink = parse_sink_options({**options, "topic": "t"})
    assert SECRET not in repr(sink)
    with pytest.raises(StrataOptionError) as e:
        parse_source_options({**options, "kafka.sasl.jaas.config": SCRAM_JAAS.replace("alice", "")})
    assert "kafka." in str(e.value) and SECRET not in str(e.value)


def test_the_sync_login_refuses_a_wrong_server_answer() -> None:
    """The token loop shared by the blocking and asyncio connections, driven with canned answers."""
    from types import SimpleNamespace

    from strata.client.security import AuthenticationFailed

    security = ClientSecurity("SASL_PLAINTEXT", None, "SCRAM-SHA-256", "alice", SECRET)
    sent: list[tuple[int, int]] = []

    def call(api_key: int, version: int, **fields: object) -> object:
        sent.append((api_key, version))
        if api_key == 17:
            return SimpleNamespace(error_code=0, mechanisms=["SCRAM-SHA-256"])
        return SimpleNamespace(error_code=58, error_message="Authentication failed during authentication due to "
                               "invalid credentials with SASL mechanism SCRAM-SHA-256", auth_bytes=b"")

    with pytest.raises(AuthenticationFailed) as e:
        sasl_login_sync(security, call)
    assert sent == [(17, 1), (36, 2)]
    assert "invalid credentials" in str(e.value) and "'alice'" in str(e.value) and SECRET not in str(e.value)
