"""Listener and security keys of server.properties: Kafka's names, rules and error messages."""

from __future__ import annotations

import pytest

from strata.config.broker_config import BrokerConfig, broker_config_key, is_listener_ssl_key
from strata.config.security_config import is_sensitive
from strata.errors import InvalidConfigError


def test_named_listeners_with_their_protocols_and_advertised_addresses() -> None:
    c = BrokerConfig.from_props({
        "listeners": "INTERNAL://0.0.0.0:9093,EXTERNAL://10.0.0.5:9094,PLAINTEXT://127.0.0.1:9092",
        "advertised.listeners": "EXTERNAL://broker1.example:9094",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SSL,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.external.ssl.client.auth": "required",
    })
    by_name = {li.name: li for li in c.listeners}
    assert by_name["INTERNAL"].security_protocol == "SASL_SSL"
    assert by_name["INTERNAL"].sasl_mechanisms == ("SCRAM-SHA-512",)
    assert by_name["INTERNAL"].advertised_host == "127.0.0.1"  # a wildcard bind advertises loopback here
    assert (by_name["EXTERNAL"].advertised_host, by_name["EXTERNAL"].advertised_port) == ("broker1.example", 9094)
    assert by_name["EXTERNAL"].ssl is not None and by_name["EXTERNAL"].ssl.client_auth == "required"
    assert by_name["INTERNAL"].ssl is not None and by_name["INTERNAL"].ssl.client_auth == "none"
    assert c.listener.name == "INTERNAL"  # the inter-broker one


def test_the_inter_broker_listener_defaults_to_the_protocol_named_by_security_inter_broker_protocol() -> None:
    c = BrokerConfig.from_props({"listeners": "SSL://:9093,PLAINTEXT://:9092",
                                 "listener.name.ssl.ssl.keystore.type": "PEM"})
    assert c.listener.name == "PLAINTEXT"
    c = BrokerConfig.from_props({"listeners": "SSL://:9093,PLAINTEXT://:9092", "security.inter.broker.protocol": "SSL"})
    assert c.listener.name == "SSL"


@pytest.mark.parametrize(("props", "message"), [
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "given twice"),
    ({"listeners": "FOO://:1"}, "not in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "OTHER://h:1"}, "is not one of listeners"),
    ({"listeners": "PLAINTEXT://:1", "inter.broker.listener.name": "INTERNAL"}, "must be one of listeners"),
    ({"listeners": "PLAINTEXT://:1", "listener.security.protocol.map": "PLAINTEXT:TLS"}, "PROTOCOL one of"),
    ({"listeners": "SASL_PLAINTEXT://:1"}, "GSSAPI"),  # Kafka's default mechanism: not offered here
    ({"listeners": "PLAINTEXT://:1", "listener.name.other.ssl.keystore.type": "PEM"}, "no listener named"),
    ({"listeners": "SSL://:1", "listener.name.ssl.ssl.keystore.typo": "PEM"}, "Unknown configuration"),
    ({"listeners": "SSL://:1", "listener.name.ssl.ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"listeners": "PLAINTEXT://:1", "ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    ({"listeners": "PLAINTEXT-only"}, "NAME://HOST:PORT"),
])
def test_bad_listener_configs_are_refused_with_the_key_named(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_props(props)


def test_per_mechanism_jaas_keys_are_accepted_per_listener() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'
    c = BrokerConfig.from_props({"listeners": "SASL_PLAINTEXT://:1", "sasl.enabled.mechanisms": "PLAIN",
                                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    assert c.listeners[0].sasl_mechanisms == ("PLAIN",)


def test_secrets_are_sensitive_and_listener_keystores_are_dynamic() -> None:
    for name in ("ssl.keystore.password", "listener.name.ssl.ssl.key.password", "sasl.jaas.config",
                 "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", "ssl.keystore.key"):
        assert is_sensitive(name), name
    assert not is_sensitive("ssl.keystore.location")
    assert is_listener_ssl_key("listener.name.external.ssl.keystore.location")
    assert not is_listener_ssl_key("listener.name.external.ssl.client.auth")
    assert not is_listener_ssl_key("ssl.keystore.location")  # Kafka: only per listener
    key = broker_config_key("listener.name.external.ssl.truststore.password")
    assert key is not None and key.type == "password"


def test_broker_wide_client_auth_applies_to_ssl_listeners_only() -> None:
    """Kafka's ChannelBuilders: a SASL_SSL listener asks for client certificates only when its own
    listener.name.<l>.ssl.client.auth says so; the unprefixed ssl.client.auth is for SSL listeners."""
    c = BrokerConfig.from_props({
        "listeners": "S://127.0.0.1:9093,SS://127.0.0.1:9094,SS2://127.0.0.1:9095",
        "listener.security.protocol.map": "S:SSL,SS:SASL_SSL,SS2:SASL_SSL",
        "ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.ss2.ssl.client.auth": "requested",
    })
    auth = {li.name: li.ssl.client_auth for li in c.listeners if li.ssl is not None}
    assert auth == {"S": "required", "SS": "none", "SS2": "requested"}
