"""Kafka's security keys of ``server.properties``: listeners and their protocols, TLS, SASL.

A broker has named listeners (``listeners=INTERNAL://:9093,EXTERNAL://:9094``), each mapped to a
security protocol by ``listener.security.protocol.map`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
TLS and SASL keys are read per listener: ``listener.name.<name>.ssl.keystore.location`` wins over
``ssl.keystore.location`` (Kafka lower-cases the listener name in the prefix), and a SASL mechanism's
JAAS config is ``listener.name.<name>.<mechanism>.sasl.jaas.config``. Secrets (passwords, inline keys,
JAAS configs) are marked so DescribeConfigs and logs never show them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strata.config.defs import ConfigDef, ConfigKey, at_least, list_of, one_of
from strata.errors import InvalidConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LISTENER_PREFIX = "listener.name."

SSL_KEYS = [
    ConfigKey("ssl.protocol", "string", "TLSv1.3", one_of("TLSv1.2", "TLSv1.3", "TLS"),
              "The TLS protocol of the context (the highest version a peer may use)"),
    ConfigKey("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], list_of("TLSv1.2", "TLSv1.3"),
              "TLS versions accepted"),
    ConfigKey("ssl.cipher.suites", "list", None, None, "Cipher suites (OpenSSL or IANA names); default: OpenSSL's"),
    ConfigKey("ssl.keystore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM"),
              "PEM or PKCS12 (a JKS file is refused with how to convert it)"),
    ConfigKey("ssl.keystore.location", "string", None, None, "The broker's key and certificate chain"),
    ConfigKey("ssl.keystore.password", "password", None, None, "Password of the keystore file"),
    ConfigKey("ssl.keystore.key", "password", None, None, "PEM private key given inline (ssl.keystore.type=PEM)"),
    ConfigKey("ssl.keystore.certificate.chain", "string", None, None, "PEM certificate chain given inline"),
    ConfigKey("ssl.key.password", "password", None, None, "Password of the private key"),
    ConfigKey("ssl.truststore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM"), "PEM or PKCS12"),
    ConfigKey("ssl.truststore.location", "string", None, None, "Certificates of the trusted CAs"),
    ConfigKey("ssl.truststore.password", "password", None, None, "Password of the truststore file"),
    ConfigKey("ssl.truststore.certificates", "string", None, None, "Trusted certificates, PEM, given inline"),
    ConfigKey("ssl.client.auth", "string", "none", one_of("none", "requested", "required"),
              "Ask TLS clients for a certificate (mutual TLS)"),
    ConfigKey("ssl.endpoint.identification.algorithm", "string", "https", None,
              "https: check the host name in a server certificate (this broker's connections to others); "
              "empty: do not"),
    ConfigKey("ssl.principal.mapping.rules", "string", "DEFAULT", None,
              "Rules from a client certificate's distinguished name to a principal name"),
    ConfigKey("ssl.allow.dn.changes", "bool", False, None,
              "A dynamic keystore update may change the certificate's distinguished name"),
    ConfigKey("ssl.allow.san.changes", "bool", False, None,
              "A dynamic keystore update may drop subject alternative names"),
    # Java's machinery: accepted so real configs load, no meaning here
    ConfigKey("ssl.keymanager.algorithm", "string", "SunX509", None, "Accepted for compatibility"),
    ConfigKey("ssl.trustmanager.algorithm", "string", "PKIX", None, "Accepted for compatibility"),
    ConfigKey("ssl.secure.random.implementation", "string", None, None, "Accepted for compatibility"),
    ConfigKey("ssl.provider", "string", None, None, "Accepted for compatibility"),
    ConfigKey("ssl.engine.factory.class", "string", None, None, "Accepted for compatibility"),
]

SASL_KEYS = [
    ConfigKey("sasl.enabled.mechanisms", "list", ["GSSAPI"], list_of("GSSAPI", *SASL_MECHANISMS),
              "SASL mechanisms the SASL listeners offer (GSSAPI/Kerberos is not supported)"),
    ConfigKey("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", one_of("GSSAPI", *SASL_MECHANISMS),
              "The mechanism this broker uses towards others on a SASL inter-broker listener"),
    ConfigKey("sasl.jaas.config", "password", None, None,
              "JAAS login config (listener.name.<l>.<mechanism>.sasl.jaas.config takes precedence)"),
    ConfigKey("sasl.server.callback.handler.class", "string", None, None,
              "module:callable checking PLAIN passwords (listener.name.<l>.plain.sasl.server.callback.handler.class)"),
    ConfigKey("connections.max.reauth.ms", "long", 0, at_least(0),
              "KIP-368: a SASL session lasts at most this long; the client must re-authenticate (0: forever)"),
    ConfigKey("connection.failed.authentication.delay.ms", "int", 100, at_least(0),
              "How long a failed login waits before its connection is closed"),
    ConfigKey("sasl.kerberos.service.name", "string", None, None, "Accepted for compatibility (no GSSAPI)"),
]

AUTHORIZER_KEYS = [
    ConfigKey("authorizer.class.name", "string", "", None,
              "kafka.security.authorizer.AclAuthorizer (or StandardAuthorizer): check every request against ACLs; "
              "empty: allow everything"),
    ConfigKey("super.users", "string", None, None, "Principals allowed everything, ';'-separated (User:admin;User:b)"),
    ConfigKey("allow.everyone.if.no.acl.found", "bool", False, None,
              "A resource no ACL mentions is open to everyone (default: closed)"),
]

# The metrics endpoint (metrics.port) over HTTPS: the server-side ssl.* keys of a TLS listener under
# ``metrics.``. Nothing is inherited from the unprefixed ssl.* keys: the endpoint's TLS is set on its own.
METRICS_PREFIX = "metrics."
METRICS_SSL_ENABLED = "metrics.ssl.enabled"
_METRICS_SSL_BASES = frozenset({
    "ssl.protocol", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.keystore.type", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.client.auth"})
METRICS_SSL_KEYS = [
    ConfigKey(METRICS_SSL_ENABLED, "bool", False, None,
              "Serve /metrics and /v1/tiers over HTTPS with the metrics.ssl.* keystore (and truststore)"),
    *(ConfigKey(METRICS_PREFIX + k.name, k.type, k.default, k.validator, f"Metrics endpoint: {k.doc}")
      for k in SSL_KEYS if k.name in _METRICS_SSL_BASES),
]

SECURITY_KEYS = [
    ConfigKey("listener.security.protocol.map", "list",
              [f"{k}:{v}" for k, v in DEFAULT_PROTOCOL_MAP.items()], None,
              "LISTENER_NAME:PROTOCOL pairs; a listener named after a protocol needs no entry"),
    ConfigKey("inter.broker.listener.name", "string", None, None,
              "The listener other brokers connect to (default: the one of security.inter.broker.protocol)"),
    ConfigKey("security.inter.broker.protocol", "string", "PLAINTEXT", one_of(*SECURITY_PROTOCOLS),
              "Used when inter.broker.listener.name is not set"),
    *SSL_KEYS,
    *SASL_KEYS,
    *AUTHORIZER_KEYS,
]

_SSL_DEF = ConfigDef(SSL_KEYS)
_SSL_DEF_METRICS = ConfigDef(METRICS_SSL_KEYS[:1])
_SSL_KEY_NAMES = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(n) for n in sorted(_METRICS_SSL_BASES, key=len,
                                                                                      reverse=True)) + r")(?![\w-])")


def metrics_key_names(message: str) -> str:
    """A TLS config error about ``ssl.keystore.location`` ... reworded for the metrics endpoint's keys."""
    return _SSL_KEY_NAMES.sub(lambda m: METRICS_PREFIX + m.group(1), message)


SECRET_TYPES = frozenset({"password"})


def secret_keys() -> frozenset[str]:
    """Names whose values are never shown (DescribeConfigs answers null with is_sensitive)."""
    return frozenset(k.name for k in (*SECURITY_KEYS, *METRICS_SSL_KEYS) if k.type in SECRET_TYPES)


def is_sensitive(name: str) -> bool:
    """A listener-prefixed key is as secret as its unprefixed name; any ``sasl.jaas.config`` is."""
    base = strip_listener_prefix(name)[1]
    return base in secret_keys() or base.endswith("sasl.jaas.config")


HIDDEN = "[hidden]"


def redacted(props: Mapping[str, Any]) -> dict[str, Any]:
    """``props`` fit for a log line: the value of every sensitive key (:func:`is_sensitive`) replaced."""
    out: dict[str, Any] = {}
    for name, value in props.items():
        try:
            secret = is_sensitive(name)
        except InvalidConfigError:  # a malformed listener.name.* key: hide rather than guess
            secret = True
        out[name] = HIDDEN if secret and value is not None else value
    return out


def strip_listener_prefix(name: str) -> tuple[str | None, str]:
    """``listener.name.sasl_ssl.ssl.key.password`` -> (``sasl_ssl``, ``ssl.key.password``)."""
    if not name.startswith(LISTENER_PREFIX):
        return None, name
    rest = name[len(LISTENER_PREFIX):]
    listener, dot, key = rest.partition(".")
    if not dot or not listener or not key:
        raise InvalidConfigError(f"Unknown configuration {name!r}: expected listener.name.<listener>.<key>")
    return listener, key


def listener_value(props: Mapping[str, Any], listener: str | None, key: str) -> Any:
    """``listener.name.<listener>.<key>`` if set, else ``<key>`` (None when neither is)."""
    if listener is not None:
        prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        if prefixed in props:
            return props[prefixed]
    return props.get(key)


@dataclass(frozen=True, slots=True)
class SslConfig:
    """One listener's TLS settings (or the inter-broker client's), Kafka's names in snake case."""

    protocol: str = "TLSv1.3"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = field(default=None, repr=False)
    keystore_key: str | None = field(default=None, repr=False)
    keystore_certificate_chain: str | None = None
    key_password: str | None = field(default=None, repr=False)
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = field(default=None, repr=False)
    truststore_certificates: str | None = None
    client_auth: str = "none"
    endpoint_identification_algorithm: str = "https"
    principal_mapping_rules: str = "DEFAULT"
    allow_dn_changes: bool = False
    allow_san_changes: bool = False

    @classmethod
    def for_listener(cls, props: Mapping[str, Any], listener: str | None, protocol: str = "SSL") -> SslConfig:
        """The ``ssl.*`` keys of ``props`` with ``listener.name.<listener>.ssl.*`` over them, validated.

        On a SASL_SSL listener the broker-wide ``ssl.client.auth`` does not count, only the listener's own
        (Kafka's ``ChannelBuilders``: SASL authenticates the client; a certificate is asked for there only
        when that listener says so)."""
        raw = {k.name: v for k in SSL_KEYS if (v := listener_value(props, listener, k.name)) is not None}
        if protocol == "SASL_SSL" and listener is not None:
            raw.pop("ssl.client.auth", None)
            own = props.get(f"{LISTENER_PREFIX}{listener.lower()}.ssl.client.auth")
            if own is not None:
                raw["ssl.client.auth"] = own
        return cls._from_ssl_props(raw)

    @classmethod
    def for_metrics(cls, props: Mapping[str, Any]) -> SslConfig | None:
        """The metrics endpoint's TLS settings (``metrics.ssl.*``), None unless ``metrics.ssl.enabled=true``.

        Only the ``metrics.``-prefixed keys count (no fallback to the broker-wide ``ssl.*`` ones); the
        keystore files are read when the endpoint starts (``ssl_factory.metrics_server_context``)."""
        given = {k: v for k, v in props.items() if k == METRICS_SSL_ENABLED and v is not None}
        if not _SSL_DEF_METRICS.parse(given)[METRICS_SSL_ENABLED]:
            return None
        raw = {k.name: v for k in SSL_KEYS
               if k.name in _METRICS_SSL_BASES and (v := props.get(METRICS_PREFIX + k.name)) is not None}
        try:
            return cls._from_ssl_props(raw)
        except InvalidConfigError as e:
            raise InvalidConfigError(metrics_key_names(str(e))) from None

    @classmethod
    def _from_ssl_props(cls, raw: Mapping[str, Any]) -> SslConfig:
        p = _SSL_DEF.parse(raw)
        return cls(
            protocol=p["ssl.protocol"],
            enabled_protocols=tuple(p["ssl.enabled.protocols"]),
            cipher_suites=tuple(p["ssl.cipher.suites"] or ()),
            keystore_type=p["ssl.keystore.type"],
            keystore_location=p["ssl.keystore.location"] or None,
            keystore_password=p["ssl.keystore.password"],
            keystore_key=p["ssl.keystore.key"],
            keystore_certificate_chain=p["ssl.keystore.certificate.chain"],
            key_password=p["ssl.key.password"],
            truststore_type=p["ssl.truststore.type"],
            truststore_location=p["ssl.truststore.location"] or None,
            truststore_password=p["ssl.truststore.password"],
            truststore_certificates=p["ssl.truststore.certificates"],
            client_auth=p["ssl.client.auth"],
            endpoint_identification_algorithm=p["ssl.endpoint.identification.algorithm"],
            principal_mapping_rules=p["ssl.principal.mapping.rules"],
            allow_dn_changes=p["ssl.allow.dn.changes"],
            allow_san_changes=p["ssl.allow.san.changes"],
        )

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_key)


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """One of ``listeners``: its name, where it binds, its protocol and what clients are told."""

    name: str
    host: str
    port: int
    security_protocol: str
    advertised_host: str
    advertised_port: int
    ssl: SslConfig | None = None  # SSL and SASL_SSL listeners
    sasl_mechanisms: tuple[str, ...] = ()  # SASL_PLAINTEXT and SASL_SSL listeners

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(entries: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in entries:
        name, colon, proto = entry.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not colon or not name or proto not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(f"Invalid value {entry!r} for configuration listener.security.protocol.map: "
                                     f"expected LISTENER_NAME:PROTOCOL with PROTOCOL one of "
                                     f"{', '.join(SECURITY_PROTOCOLS)}")
        out[name] = proto
    return out


def _split_endpoint(text: str, key: str) -> tuple[str, str, int]:
    name, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not name or not colon or not port.isdigit():
        raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: expected NAME://HOST:PORT")
    return name.strip().upper(), host.strip("[]"), int(port)


def parse_listeners(props: Mapping[str, Any], listeners: list[str], advertised: list[str] | None,
                    protocol_map: dict[str, str], mechanisms: list[str]) -> tuple[ListenerConfig, ...]:
    """``listeners`` + ``advertised.listeners`` + the protocol map -> one :class:`ListenerConfig` each.

    Kafka's rules: names are unique, every name maps to a protocol, every advertised name is a
    listener; a listener without an advertised entry advertises its own host (a wildcard host
    advertises 127.0.0.1 here, where Kafka would use the canonical host name).
    """
    bound: dict[str, tuple[str, int]] = {}
    for text in listeners:
        name, host, port = _split_endpoint(text, "listeners")
        if name in bound:
            raise InvalidConfigError(f"Invalid value for configuration listeners: listener {name} is given twice")
        if name not in protocol_map:
            raise InvalidConfigError(f"Invalid value {text!r} for configuration listeners: listener {name} is not in "
                                     "listener.security.protocol.map")
        bound[name] = (host or "0.0.0.0", port)
    if not bound:
        raise InvalidConfigError("Invalid value for configuration listeners: at least one listener is needed")
    adv: dict[str, tuple[str, int]] = {}
    for text in advertised or []:
        name, host, port = _split_endpoint(text, "advertised.listeners")
        if name not in bound:
            raise InvalidConfigError(f"Invalid value {text!r} for configuration advertised.listeners: {name} is not "
                                     "one of listeners")
        adv[name] = (host, port)
    out = []
    for name, (host, port) in bound.items():
        proto = protocol_map[name]
        a_host, a_port = adv.get(name, (host if host not in ("0.0.0.0", "::") else "127.0.0.1", port))
        ssl = SslConfig.for_listener(props, name, proto) if proto in ("SSL", "SASL_SSL") else None
        mechs: tuple[str, ...] = ()
        if proto in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechs = tuple(listener_value(props, name, "sasl.enabled.mechanisms") and
                          _as_list(listener_value(props, name, "sasl.enabled.mechanisms")) or mechanisms)
            unsupported = [m for m in mechs if m not in SASL_MECHANISMS]
            if unsupported or not mechs:
                raise InvalidConfigError(
                    f"Invalid value {','.join(mechs)!r} for configuration sasl.enabled.mechanisms (listener {name}): "
                    f"Strata offers {', '.join(SASL_MECHANISMS)} (not GSSAPI/Kerberos or OAUTHBEARER)")
        out.append(ListenerConfig(name, host or "0.0.0.0", port, proto, a_host, a_port, ssl, mechs))
    return tuple(out)


def _as_list(raw: Any) -> list[str]:
    if isinstance(raw, list | tuple):
        return [str(x).strip() for x in raw]
    return [x.strip() for x in str(raw).split(",") if x.strip()]
