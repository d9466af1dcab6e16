"""TLS and SASL on the client side: this broker's connections to its peers, and Strata's own clients.

Replica fetchers, transaction markers and the remote-log-metadata client connect to the
``inter.broker.listener.name`` listener of their peers with that listener's protocol: TLS with the
listener's keystore (presented to the peer) and truststore, then, on a SASL listener,
SaslHandshake v1 and SaslAuthenticate with ``sasl.mechanism.inter.broker.protocol`` and the
``username``/``password`` of the listener's JAAS config for that mechanism (Kafka's broker login).

The command-line tools and the Spark data source connect with a Kafka client's properties instead
(:func:`client_security`): the Java client's ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config`` and ``ssl.*`` keys, or librdkafka's ``sasl.username``/``sasl.password`` and
``ssl.ca.location``/``ssl.certificate.location``/``ssl.key.location``. :func:`librdkafka_config` turns
the Java keys into librdkafka's for the confluent-kafka clients (the Spark sink's producer).

The login exchange is written once (:func:`_login_steps`, a generator of requests) and driven by
:func:`sasl_login` over an asyncio connection and by :func:`sasl_login_sync` over a blocking one.
Passwords never appear in a message or a ``repr``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from strata.config.security_config import SASL_MECHANISMS, SECURITY_PROTOCOLS, SslConfig
from strata.errors import InvalidConfigError
from strata.security.sasl import SaslAuthenticationError, UnsupportedSaslMechanismError, client_mechanism
from strata.security.sasl.jaas import LOGIN_MODULES, PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config
from strata.security.ssl_factory import client_context

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36

# The client properties that say how to connect (Kafka's and librdkafka's share these prefixes).
SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
HIDDEN = "[hidden]"


class AuthenticationFailed(Exception):
    """The peer refused the login (wrong credentials, mechanism not enabled)."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def server_hostname(self, host: str) -> str | None:
        """The name TLS checks the peer's certificate against (None: no check, no SNI)."""
        if self.ssl_context is None or not self.ssl_context.check_hostname:
            return None
        return host


# -- the SASL login, shared by the asyncio and the blocking connection ----------------------------------

LoginRequest = tuple[int, int, dict[str, Any]]  # api key, version, fields
Call = Callable[..., Awaitable[Any]]


def _login_steps(security: ClientSecurity) -> Generator[LoginRequest, Any, None]:
    """SaslHandshake v1 + SaslAuthenticate rounds: yields each request, is sent its response body.
    Raises AuthenticationFailed when the peer (or the exchange itself) refuses the login."""
    mechanism = security.sasl_mechanism
    if mechanism is None:
        return
    handshake = yield SASL_HANDSHAKE, 1, {"mechanism": mechanism}
    if handshake.error_code != 0:
        raise AuthenticationFailed(f"SASL mechanism {mechanism} refused (error {handshake.error_code}); the peer "
                                   f"offers {list(handshake.mechanisms)}")
    who = f"SASL {mechanism} login as {security.username!r}"
    try:
        client = client_mechanism(mechanism, security.username or "", security.password or "")
        token: bytes | None = client.initial_response()
        while token is not None:
            answer = yield SASL_AUTHENTICATE, 2, {"auth_bytes": token}
            if answer.error_code != 0:
                raise AuthenticationFailed(f"{who} failed: {answer.error_message or answer.error_code}")
            token = client.evaluate_challenge(bytes(answer.auth_bytes))
            if client.is_complete:
                break
    except (SaslAuthenticationError, UnsupportedSaslMechanismError, ValueError) as e:
        raise AuthenticationFailed(f"{who} failed: {e}") from None


async def sasl_login(security: ClientSecurity, call: Call) -> None:
    """The login over an open asyncio connection (``await call(api_key, version, **fields)``)."""
    steps = _login_steps(security)
    try:
        api_key, version, fields = next(steps)
        while True:
            api_key, version, fields = steps.send(await call(api_key, version, **fields))
    except StopIteration:
        return


def sasl_login_sync(security: ClientSecurity, call: Callable[..., Any]) -> None:
    """The login over an open blocking connection (``call(api_key, version, **fields)``)."""
    steps = _login_steps(security)
    try:
        api_key, version, fields = next(steps)
        while True:
            api_key, version, fields = steps.send(call(api_key, version, **fields))
    except StopIteration:
        return


# -- client properties -----------------------------------------------------------------------------

def is_security_key(key: str) -> bool:
    return key.startswith(SECURITY_PREFIXES)


def is_secret_key(key: str) -> bool:
    """Keys whose values are never shown: passwords, JAAS configs, inline private keys, secrets."""
    key = key.lower()
    return (key.endswith(("password", "jaas.config", "secret", "ssl.keystore.key", "ssl.key.pem"))
            or "secret" in key)


class MaskedProperties(Mapping[str, str]):
    """Read-only properties whose ``repr`` hides secret values (picklable, hashable)."""

    __slots__ = ("_items",)

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self._items = tuple(sorted((str(k), str(v)) for k, v in (props or {}).items()))

    def __getitem__(self, key: str) -> str:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MaskedProperties):
            return self._items == other._items
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k!r}: {HIDDEN if is_secret_key(k) else repr(v)}" for k, v in self._items)
        return "{" + shown + "}"

    def __getstate__(self) -> tuple[tuple[str, str], ...]:
        return self._items

    def __setstate__(self, state: tuple[tuple[str, str], ...]) -> None:
        self._items = state


def security_properties(props: Mapping[str, str]) -> MaskedProperties:
    """The ``security.*``, ``sasl.*`` and ``ssl.*`` entries of ``props``."""
    return MaskedProperties({k: v for k, v in props.items() if is_security_key(str(k))})


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """How a client with these properties connects; InvalidConfigError naming the key (never a secret)
    for what is missing, malformed or unreadable. One TLS context per settings (and file versions)."""
    secure = tuple(sorted((str(k), str(v)) for k, v in props.items() if is_security_key(str(k))))
    stamps = tuple(_stamp(v) for k, v in secure if k.endswith(".location"))
    return _client_security(secure, stamps)


def _stamp(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return path, st.st_mtime_ns, st.st_size


@lru_cache(maxsize=32)
def _client_security(secure: tuple[tuple[str, str], ...], _stamps: tuple[Any, ...]) -> ClientSecurity:
    props = dict(secure)
    protocol = security_protocol(props)
    context = ssl_context(props) if protocol in TLS_PROTOCOLS else None
    if protocol not in SASL_PROTOCOLS:
        return ClientSecurity(protocol, context)
    mechanism, username, password = sasl_credentials(props)
    return ClientSecurity(protocol, context, mechanism, username, password)


def security_protocol(props: Mapping[str, str]) -> str:
    protocol = (props.get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise InvalidConfigError(f"Invalid value {protocol} for configuration security.protocol: expected one of "
                                 f"{', '.join(SECURITY_PROTOCOLS)}")
    return protocol


def sasl_credentials(props: Mapping[str, str]) -> tuple[str, str, str]:
    """(mechanism, username, password) from ``sasl.mechanism`` and ``sasl.jaas.config`` (Kafka's client) or
    ``sasl.username``/``sasl.password`` (librdkafka's)."""
    raw = props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI"  # Kafka's default
    mechanism = raw.strip().upper()
    if mechanism not in SASL_MECHANISMS:
        why = " (GSSAPI, Kafka's default, needs Kerberos, which Strata does not support)" \
            if mechanism == "GSSAPI" else ""
        raise InvalidConfigError(f"Invalid value {mechanism} for configuration sasl.mechanism: Strata's clients "
                                 f"support {', '.join(SASL_MECHANISMS)}{why}")
    jaas = props.get("sasl.jaas.config")
    username, password = props.get("sasl.username"), props.get("sasl.password")
    if jaas:
        if username is not None or password is not None:
            raise InvalidConfigError("Invalid configuration sasl.jaas.config: give the login either in "
                                     "sasl.jaas.config or in sasl.username and sasl.password, not both")
        login = parse_jaas_config(jaas)
        if login.login_module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
            raise InvalidConfigError(f"Invalid value {HIDDEN} for configuration sasl.jaas.config: the login module "
                                     f"{login.login_module} is not supported; use {LOGIN_MODULES[mechanism]} "
                                     f"for {mechanism}")
        username, password = login.username, login.password
        where = "the username and password options of sasl.jaas.config"
    else:
        where = "sasl.jaas.config (or sasl.username and sasl.password)"
    if not username or password is None:
        raise InvalidConfigError(f"Missing required configuration: SASL {mechanism} needs a username and a password "
                                 f"in {where}, e.g. sasl.jaas.config={LOGIN_MODULES[mechanism]} required "
                                 f'username="alice" password="...";')
    return mechanism, username, password


def ssl_config(props: Mapping[str, str]) -> SslConfig:
    """The Java client's ``ssl.*`` keys, with librdkafka's ``ssl.ca.location`` (a PEM truststore) and
    ``ssl.certificate.location`` + ``ssl.key.location`` (a PEM key and certificate chain) mapped onto them."""
    java = {k: v for k, v in props.items() if k.startswith("ssl.")}
    ca = java.pop("ssl.ca.location", None)
    cert = java.pop("ssl.certificate.location", None)
    key = java.pop("ssl.key.location", None)
    if ca:
        if java.get("ssl.truststore.location") or java.get("ssl.truststore.certificates"):
            raise InvalidConfigError("Invalid configuration ssl.ca.location: both ssl.ca.location and "
                                     "ssl.truststore.location are given")
        java.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": ca})
    if cert or key:
        if not (cert and key):
            given, missing = ("ssl.certificate.location", "ssl.key.location") if cert else \
                ("ssl.key.location", "ssl.certificate.location")
            raise InvalidConfigError(f"Missing required configuration {missing}: {given} is given without it")
        if java.get("ssl.keystore.location") or java.get("ssl.keystore.key"):
            raise InvalidConfigError("Invalid configuration ssl.certificate.location: both ssl.certificate.location "
                                     "and ssl.keystore.location are given")
        java["ssl.keystore.type"] = "PEM"
        if os.path.abspath(cert) == os.path.abspath(key):
            java["ssl.keystore.location"] = cert
        else:
            java["ssl.keystore.key"] = _read_text("ssl.key.location", key)
            java["ssl.keystore.certificate.chain"] = _read_text("ssl.certificate.location", cert)
    algorithm = java.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.strip().lower() == "none":  # librdkafka's word for Kafka's empty value
        java["ssl.endpoint.identification.algorithm"] = ""
    return SslConfig.for_listener(java, None)


def ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A client TLS context: the truststore (the system's CA store without one), the keystore when there is
    one (mutual TLS), a host name check unless ``ssl.endpoint.identification.algorithm`` is empty."""
    return client_context(ssl_config(props))


def _read_text(key: str, path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise InvalidConfigError(f"Invalid value {path} for configuration {key}: cannot be read "
                                 f"({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise InvalidConfigError(f"Invalid value {path} for configuration {key}: not a PEM file") from None


# -- librdkafka's names ----------------------------------------------------------------------------

# Kafka Java-client keys librdkafka does not know (it refuses unknown properties); their meaning is
# carried over by librdkafka_config.
_JAVA_ONLY = frozenset({
    "sasl.jaas.config", "sasl.mechanism",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.provider", "ssl.engine.factory.class",
    "ssl.endpoint.identification.algorithm", "security.protocol",
})


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with the Kafka Java client's security keys replaced by librdkafka's (other keys unchanged):
    ``sasl.jaas.config`` -> ``sasl.username``/``sasl.password``, a PEM truststore -> ``ssl.ca.location`` (a
    PKCS12 one -> ``ssl.ca.pem``), a PEM keystore -> ``ssl.certificate.location`` + ``ssl.key.location`` (a
    PKCS12 one -> librdkafka's PKCS12 ``ssl.keystore.location``), ``ssl.endpoint.identification.algorithm``
    https/empty -> https/none. The settings are checked as :func:`client_security` checks them."""
    out = {str(k): str(v) for k, v in props.items() if k not in _JAVA_ONLY}
    security = client_security(props)
    if "security.protocol" in props:
        out["security.protocol"] = security.protocol
    if security.sasl_mechanism is not None:
        out.update({"sasl.mechanisms": security.sasl_mechanism, "sasl.username": security.username or "",
                    "sasl.password": security.password or ""})
    if security.protocol not in TLS_PROTOCOLS:
        return out
    cfg = ssl_config(props)
    if "ssl.ca.location" not in props:
        if cfg.truststore_certificates is not None:
            out["ssl.ca.pem"] = cfg.truststore_certificates
        elif cfg.truststore_location is not None:
            if cfg.truststore_type == "PEM":
                out["ssl.ca.location"] = cfg.truststore_location
            else:  # PKCS12 (read under Kafka's default type JKS too): librdkafka takes CA certificates as PEM only
                out["ssl.ca.pem"] = _pkcs12_certificates_pem(cfg.truststore_location, cfg.truststore_password)
    if "ssl.certificate.location" not in props:
        if cfg.keystore_key is not None and cfg.keystore_certificate_chain is not None:
            out.update({"ssl.key.pem": cfg.keystore_key, "ssl.certificate.pem": cfg.keystore_certificate_chain})
        elif cfg.keystore_location is not None:
            if cfg.keystore_type == "PEM":  # one file with the key and the chain: librdkafka reads each part
                out.update({"ssl.certificate.location": cfg.keystore_location,
                            "ssl.key.location": cfg.keystore_location})
            else:
                out.update({"ssl.keystore.location": cfg.keystore_location,
                            "ssl.keystore.password": cfg.keystore_password or ""})
    out["ssl.endpoint.identification.algorithm"] = \
        "https" if cfg.endpoint_identification_algorithm.strip().lower() == "https" else "none"
    return out


def _pkcs12_certificates_pem(path: str, password: str | None) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    with open(path, "rb") as f:
        data = f.read()
    try:
        _key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except (ValueError, TypeError):
        raise InvalidConfigError(f"Invalid value for configuration ssl.truststore.password: it does not open the "
                                 f"PKCS12 file {path}") from None
    certs = ([cert] if cert is not None else []) + list(extra)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
