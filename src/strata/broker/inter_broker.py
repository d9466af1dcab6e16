"""This broker's side of inter-broker connections: the protocol and login of ``inter.broker.listener.name``.

Kafka's broker connects to its peers' inter-broker listener with that listener's settings: TLS with
its keystore and truststore (``listener.name.<l>.ssl.*`` over ``ssl.*``), and on a SASL listener the
mechanism ``sasl.mechanism.inter.broker.protocol`` with the ``username``/``password`` options of the
listener's JAAS config for that mechanism. Built once per config and shared by the replica fetchers,
the transaction marker channel and the remote-log-metadata client.
"""

from __future__ import annotations

from collections.abc import Mapping

from strata.client.security import ClientSecurity
from strata.config.broker_config import BrokerConfig
from strata.config.security_config import ListenerConfig, listener_value
from strata.errors import InvalidConfigError
from strata.security.sasl.jaas import parse_jaas_config
from strata.security.ssl_factory import client_context

_CACHE: dict[tuple[ListenerConfig, frozenset[tuple[str, str]]], ClientSecurity | None] = {}


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """None for a PLAINTEXT inter-broker listener; InvalidConfigError when a SASL one has no login. One
    TLS context per listener settings (it holds the loaded keystore)."""
    key = (config.listener, frozenset(config.raw.items()))
    if key not in _CACHE:
        _CACHE[key] = _build(config.listener, config.raw)
    return _CACHE[key]


def _build(listener: ListenerConfig, raw: Mapping[str, str]) -> ClientSecurity | None:
    proto = listener.security_protocol
    if proto == "PLAINTEXT":
        return None
    context = client_context(listener.ssl) if listener.ssl is not None else None
    if not listener.uses_sasl:
        return ClientSecurity(proto, context)
    mechanism = str(raw.get("sasl.mechanism.inter.broker.protocol", "GSSAPI")).strip()
    if mechanism not in listener.sasl_mechanisms:
        raise InvalidConfigError(
            f"Invalid value {mechanism!r} for configuration sasl.mechanism.inter.broker.protocol: the inter-broker "
            f"listener {listener.name} offers {', '.join(listener.sasl_mechanisms)}")
    jaas = listener_value(raw, listener.name, f"{mechanism.lower()}.sasl.jaas.config") or raw.get("sasl.jaas.config")
    login = parse_jaas_config(str(jaas)) if jaas else None
    if login is None or not login.username or login.password is None:
        raise InvalidConfigError(
            f"the inter-broker listener {listener.name} uses SASL {mechanism}: set username and password in "
            f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config")
    return ClientSecurity(proto, context, mechanism, login.username, login.password)
