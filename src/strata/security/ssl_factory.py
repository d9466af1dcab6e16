"""TLS contexts from Kafka's ``ssl.*`` keys (one listener's :class:`SslConfig`).

What Kafka's ``DefaultSslEngineFactory`` does with a JVM, done with Python's ``ssl`` (OpenSSL):

* keystores: ``PEM`` (a file with the private key, possibly encrypted with ``ssl.key.password``, and the
  certificate chain; or inline ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``), ``PKCS12``
  (``ssl.keystore.password``, read with the ``cryptography`` package) and ``JKS``, Kafka's default
  type, which Java also uses to read PKCS12 files: a PKCS12 file is read, a real JKS file is refused
  with the ``keytool`` command that converts it. Truststores alike (PKCS12: certificates only).
* ``ssl.enabled.protocols`` -> minimum/maximum TLS version (TLS 1.2 and 1.3 only, never older),
  ``ssl.cipher.suites`` (IANA or OpenSSL names) -> TLS 1.2 cipher list, ``ssl.client.auth`` -> verify
  mode, ``ssl.endpoint.identification.algorithm`` -> host name checks of this broker's client side.
* Kafka's combination rules (``ssl.keystore.key`` only with PEM, no keystore password with PEM...).

Every problem is an :class:`InvalidConfigError` naming the key; passwords and inline keys never
appear in a message. :class:`SslContextHolder` is Kafka's dynamic keystore update: a new context
replaces the current one for new connections when the new keystore is valid and keeps the
certificate's identity (``ssl.allow.dn.changes``/``ssl.allow.san.changes``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import errno
import logging
import os
import platform
import re
import secrets
import shutil
import socket
import ssl
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from strata.config.security_config import SslConfig, metrics_key_names
from strata.errors import InvalidConfigError
from strata.security.principal import (
    CertificateInfo,
    CertificateParseError,
    KafkaPrincipal,
    SslPrincipalMapper,
    certificate_info,
    principal_from_tls,
    same_distinguished_name,
    subject_alt_names_kept,
)

log = logging.getLogger("strata.security.ssl")

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

# TLS 1.3 suites (RFC 8446 names, the same in Java and OpenSSL). Python 3.11's ssl cannot restrict
# them (OpenSSL's SSL_CTX_set_ciphersuites is not exposed; set_ciphers only governs TLS <= 1.2).
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                          "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})

# IANA (Java) names of the TLS 1.2 suites OpenSSL offers by default, from `openssl ciphers -stdname`.
# Python's ssl has no IANA map (get_ciphers() gives OpenSSL names only).
IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}

JKS_MAGIC = b"\xfe\xed\xfe\xed"
JCEKS_MAGIC = b"\xce\xce\xce\xce"

# OpenSSL 3's SSL_OP_ENABLE_KTLS is SSL_OP_BIT(3) in <openssl/ssl.h>; Python 3.11's ssl has no name for it
# (3.12 adds ssl.OP_ENABLE_KTLS). Linux's TCP_ULP socket option is 31 (<linux/tcp.h>).
SSL_OP_ENABLE_KTLS = 1 << 3
TCP_ULP = 31

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS are the keystore and truststore keys; the others need a restart.
_NOT_RECONFIGURABLE = {
    "protocol": "ssl.protocol", "enabled_protocols": "ssl.enabled.protocols", "cipher_suites": "ssl.cipher.suites",
    "client_auth": "ssl.client.auth", "endpoint_identification_algorithm": "ssl.endpoint.identification.algorithm",
    "principal_mapping_rules": "ssl.principal.mapping.rules",
}


# -- public API ------------------------------------------------------------------------------------

def server_context(cfg: SslConfig) -> ssl.SSLContext:
    """The context a TLS listener wraps accepted connections with."""
    return _build(cfg, server=True).context


def metrics_server_context(cfg: SslConfig | None) -> ssl.SSLContext | None:
    """The context of the metrics endpoint (``metrics.ssl.*``; None: plain HTTP). Built as a TLS listener's
    is, with every problem an InvalidConfigError naming the ``metrics.ssl.*`` key at fault."""
    if cfg is None:
        return None
    try:
        return _build(cfg, server=True).context
    except InvalidConfigError as e:
        message = metrics_key_names(str(e)).replace("a TLS listener needs", "the HTTPS metrics endpoint needs")
        raise InvalidConfigError(f"metrics endpoint TLS (metrics.ssl.enabled=true): {message}") from None


def client_context(cfg: SslConfig) -> ssl.SSLContext:
    """The context of this broker's connections to other brokers: presents the keystore if there is
    one, verifies the server against the truststore (the system's CA store without one, as Java falls
    back to its cacerts), checks the host name when ``ssl.endpoint.identification.algorithm=https``.
    Wrap with ``server_hostname=<the host connected to>``."""
    return _build(cfg, server=False).context


def keystore_certificate(cfg: SslConfig) -> CertificateInfo | None:
    """The certificate the keystore presents (its first, the leaf), or None without a keystore."""
    return _build(cfg, server=False).keystore


def peer_certificate_summary(conn: ssl.SSLSocket | ssl.SSLObject) -> str:
    """One line for logs: the peer's certificate (subject, issuer, validity, SANs), version and cipher."""
    der = conn.getpeercert(binary_form=True)
    cipher = conn.cipher()
    tail = f" ({conn.version()}, {cipher[0]})" if cipher else ""
    if not der:
        return "no peer certificate" + tail
    try:
        return certificate_info(der).summary() + tail
    except CertificateParseError as e:
        return f"unreadable peer certificate ({e}){tail}"


def connection_principal(conn: ssl.SSLSocket | ssl.SSLObject, mapper: SslPrincipalMapper | None) -> KafkaPrincipal:
    """The principal of an accepted TLS connection: ``User:<mapped DN>`` of a verified client
    certificate (the DN read from the certificate's DER, exactly as Java prints it), else
    ``User:ANONYMOUS``. Raises :class:`~strata.security.principal.NoMatchingRuleError` when no
    mapping rule applies: the connection must then be closed (Kafka fails the authentication)."""
    verified = conn.context.verify_mode != ssl.CERT_NONE
    der = conn.getpeercert(binary_form=True) if verified else None
    return principal_from_tls(der or None, mapper)


class SslContextHolder:
    """The server context of one TLS listener, replaced at run time (Kafka's dynamic keystore update).

    :meth:`reload` builds a context from a changed :class:`SslConfig` (or from the same one when the
    keystore/truststore files changed on disk) and swaps it in when it is valid: only the keystore and
    truststore keys may change (Kafka's reconfigurable SSL configs), the new certificate must keep the
    distinguished name (compared ignoring case) unless ``allow_dn_changes`` and must keep every subject
    alternative name (it may add some) unless ``allow_san_changes`` (Kafka's ``ssl.allow.dn.changes`` and
    ``ssl.allow.san.changes``, both false by default), and a listener without a truststore cannot get
    one. With ``verify_with_truststore`` (Kafka does this for the inter-broker listener) the old and new
    settings must also complete TLS handshakes with each other in both directions.

    Connections already accepted keep the context (and session) they were wrapped with; read
    :attr:`context` for every new connection.
    """

    def __init__(self, cfg: SslConfig, *, allow_dn_changes: bool = False, allow_san_changes: bool = False,
                 verify_with_truststore: bool = False) -> None:
        self.allow_dn_changes = allow_dn_changes
        self.allow_san_changes = allow_san_changes
        self.verify_with_truststore = verify_with_truststore
        self._lock = threading.Lock()
        self._cfg = cfg
        self._built = _build(cfg, server=True)

    @property
    def context(self) -> ssl.SSLContext:
        return self._built.context

    @property
    def config(self) -> SslConfig:
        return self._cfg

    @property
    def certificate(self) -> CertificateInfo:
        assert self._built.keystore is not None  # a server context always has a keystore
        return self._built.keystore

    def files_changed(self) -> bool:
        """Whether a keystore or truststore file changed on disk since the current context was built."""
        return _stamps(self._cfg) != self._built.stamps

    def validate(self, new_cfg: SslConfig) -> None:
        """Raise InvalidConfigError if :meth:`reload` with ``new_cfg`` would be refused."""
        self._candidate(new_cfg)

    def reload(self, new_cfg: SslConfig | None = None) -> bool:
        """Swap in a context built from ``new_cfg`` (default: the current config, re-read from disk).
        False when nothing changed; InvalidConfigError (the current context stays) when refused."""
        with self._lock:
            cfg = self._cfg if new_cfg is None else new_cfg
            if cfg == self._cfg and not self.files_changed():
                return False
            built = self._candidate(cfg)
            self._cfg, self._built = cfg, built
        assert built.keystore is not None
        log.info("TLS keystore reloaded: %s", built.keystore.summary())
        return True

    def _candidate(self, new: SslConfig) -> _Built:
        old = self._cfg
        for attr, key in _NOT_RECONFIGURABLE.items():
            if getattr(new, attr) != getattr(old, attr):
                raise InvalidConfigError(f"Cannot update configuration {key} dynamically: only the keystore and "
                                         "truststore keys of a listener can change without a restart")
        built = _build(new, server=True)
        cur = self._built
        assert cur.keystore is not None and built.keystore is not None
        if not self.allow_dn_changes and not same_distinguished_name(cur.keystore.subject, built.keystore.subject):
            raise InvalidConfigError(
                f"Invalid value for configuration {_keystore_key(new)}: keystore DistinguishedName does not match: "
                f"existing={cur.keystore.subject}, new={built.keystore.subject} (set ssl.allow.dn.changes=true "
                "to allow it)")
        if not self.allow_san_changes and not subject_alt_names_kept(cur.keystore.subject_alt_names,
                                                                     built.keystore.subject_alt_names):
            raise InvalidConfigError(
                f"Invalid value for configuration {_keystore_key(new)}: keystore SubjectAltNames do not match: "
                f"existing={_sans(cur.keystore)}, new={_sans(built.keystore)} (the new certificate must keep every "
                "subject alternative name; set ssl.allow.san.changes=true to allow it)")
        if cur.trusted is None and built.trusted is not None:
            raise InvalidConfigError("Cannot add SSL truststore to an existing listener for which no truststore was "
                                     "configured")
        if self.verify_with_truststore:
            for server_cfg, client_cfg, what in ((old, new, "a client with the new keystore"),
                                                 (new, old, "a client with the current truststore")):
                server = built.context if server_cfg is new else cur.context
                client = _build(dataclasses.replace(client_cfg, endpoint_identification_algorithm=""),
                                server=False).context
                try:
                    _handshake_in_memory(server, client)
                except (ssl.SSLError, OSError) as e:
                    side = "the current" if server_cfg is old else "the new"
                    raise InvalidConfigError(f"Invalid value for configuration {_keystore_key(new)}: {what} cannot "
                                             f"complete a TLS handshake with {side} server settings ({e})") from e
        return built


def kernel_tls_status() -> str:
    """Probe whether the kernel could do TLS record encryption here (kTLS), as one line.

    Linux attaches kTLS to a connected TCP socket with ``setsockopt(IPPROTO_TCP, TCP_ULP, "tls")``; OpenSSL 3
    then offloads records when ``SSL_OP_ENABLE_KTLS`` is set and it was built with kTLS. Strata does not
    turn it on (Python 3.11's ssl has no name for the option and sendfile through it is untested): this
    only tells an operator whether the kernel side is there.
    """
    if not sys.platform.startswith("linux"):
        return f"kernel TLS: not probed on {sys.platform} (Linux only)"
    available = _read_text("/proc/sys/net/ipv4/tcp_available_ulp")
    ulps = f"; available TCP ULPs: {available or 'none'}" if available is not None else ""
    try:
        listener = socket.create_server(("127.0.0.1", 0))
    except OSError as e:
        return f"kernel TLS: not probed (no loopback TCP socket: {e.strerror})"
    try:
        with listener, socket.create_connection(listener.getsockname(), timeout=2.0) as conn:
            accepted, _ = listener.accept()
            with accepted:
                conn.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
    except OSError as e:
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        if e.errno == errno.ENOENT:
            return (f"kernel TLS unavailable: Linux {platform.release()} has no 'tls' TCP upper-layer protocol "
                    f"(setsockopt TCP_ULP 'tls' -> ENOENT: the tls module is not built or not loaded, "
                    f"try modprobe tls{ulps}); TLS records are encrypted by OpenSSL in user space")
        return (f"kernel TLS unavailable: setsockopt TCP_ULP 'tls' on a loopback TCP socket failed with {name} "
                f"({e.strerror}{ulps}); TLS records are encrypted by OpenSSL in user space")
    return (f"kernel TLS available: the 'tls' TCP ULP attaches on Linux {platform.release()}{ulps}; "
            f"{ssl.OPENSSL_VERSION} could offload record encryption with SSL_OP_ENABLE_KTLS "
            f"(0x{SSL_OP_ENABLE_KTLS:x}), which Strata does not enable")


# -- building a context ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Built:
    context: ssl.SSLContext
    keystore: CertificateInfo | None  # the leaf certificate presented
    trusted: int | None  # certificates in the truststore; None without one
    stamps: tuple[tuple[str, tuple[int, int, int] | None], ...]


def _build(cfg: SslConfig, *, server: bool) -> _Built:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    lowest, highest = _versions(cfg, client=not server)
    lowest, highest = _apply_cipher_suites(ctx, cfg, lowest, highest)
    ctx.minimum_version, ctx.maximum_version = lowest, highest
    stamps = _stamps(cfg)
    keystore = _load_keystore(ctx, cfg)
    trusted = _load_truststore(ctx, cfg)
    if server:
        if keystore is None:
            raise InvalidConfigError("Missing required configuration ssl.keystore.location (or ssl.keystore.key with "
                                     "ssl.keystore.certificate.chain): a TLS listener needs a key and certificate")
        mode = _VERIFY_MODES.get(cfg.client_auth)
        if mode is None:
            raise InvalidConfigError(f"Invalid value {cfg.client_auth!r} for configuration ssl.client.auth: "
                                     "expected none, requested or required")
        if mode != ssl.CERT_NONE and trusted is None:
            raise InvalidConfigError(
                f"Invalid value {cfg.client_auth} for configuration ssl.client.auth: checking client certificates "
                "needs a truststore (ssl.truststore.location or ssl.truststore.certificates); the system's CA "
                "store is not used for client certificates")
        ctx.verify_mode = mode
    else:
        algorithm = (cfg.endpoint_identification_algorithm or "").strip()
        if algorithm.lower() not in ("https", ""):
            raise InvalidConfigError(f"Invalid value {algorithm!r} for configuration "
                                     "ssl.endpoint.identification.algorithm: expected https or empty")
        ctx.check_hostname = algorithm.lower() == "https"
        ctx.verify_mode = ssl.CERT_REQUIRED
        if trusted is None:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if keystore is not None:
        now = datetime.now(UTC)
        if keystore.not_after < now or keystore.not_before > now:
            log.warning("The TLS keystore certificate is not valid now (%s)", keystore.summary())
    return _Built(ctx, keystore, trusted, stamps)


def _versions(cfg: SslConfig, *, client: bool) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = [p.strip() for p in cfg.enabled_protocols if p.strip()]
    unknown = [p for p in names if p not in _VERSIONS]
    if unknown or not names:
        raise InvalidConfigError(f"Invalid value {','.join(cfg.enabled_protocols)!r} for configuration "
                                 "ssl.enabled.protocols: TLSv1.2 and/or TLSv1.3 (older versions are never enabled)")
    versions = sorted(_VERSIONS[p] for p in names)
    lowest, highest = versions[0], versions[-1]
    # ssl.protocol=TLSv1.2 keeps a client off TLS 1.3 even if enabled (Kafka's SslConfigs doc); a Java
    # server's enabled protocols override its context protocol.
    if client and cfg.protocol == "TLSv1.2":
        highest = min(highest, ssl.TLSVersion.TLSv1_2)
        if lowest > highest:
            raise InvalidConfigError("Invalid value TLSv1.2 for configuration ssl.protocol: ssl.enabled.protocols "
                                     f"({','.join(names)}) leaves no version below it")
    return lowest, highest


@lru_cache(maxsize=1)
def _openssl_tls12_names() -> frozenset[str]:
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.set_ciphers("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    return frozenset(c["name"] for c in probe.get_ciphers() if c["protocol"] != "TLSv1.3")


@lru_cache(maxsize=1)
def _default_tls13_suites() -> frozenset[str]:
    return frozenset(c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).get_ciphers()
                     if c["protocol"] == "TLSv1.3")


def _apply_cipher_suites(ctx: ssl.SSLContext, cfg: SslConfig, lowest: ssl.TLSVersion,
                         highest: ssl.TLSVersion) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """``ssl.cipher.suites`` -> set_ciphers for TLS 1.2; what the list means for the versions, as in Java:
    a version none of whose suites is listed cannot be negotiated."""
    names = [s.strip() for s in cfg.cipher_suites if s.strip()]
    if not names:
        return lowest, highest
    tls12: list[str] = []
    tls13: list[str] = []
    unknown: list[str] = []
    for name in names:
        if name in TLS13_SUITES:
            tls13.append(name)
        elif name in IANA_TO_OPENSSL:
            tls12.append(IANA_TO_OPENSSL[name])
        elif name in _openssl_tls12_names():
            tls12.append(name)
        else:
            unknown.append(name)
    if unknown:
        raise InvalidConfigError(
            f"Invalid value {','.join(names)!r} for configuration ssl.cipher.suites: unknown cipher suite(s) "
            f"{', '.join(unknown)} (IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or OpenSSL names "
            "such as ECDHE-RSA-AES128-GCM-SHA256)")
    if tls13 and not _default_tls13_suites() <= set(tls13):
        # Python 3.11's ssl cannot restrict TLS 1.3 suites (no SSL_CTX_set_ciphersuites): OpenSSL's defaults stay.
        log.warning("ssl.cipher.suites: TLS 1.3 suites cannot be restricted here; %s ignored, OpenSSL's TLS 1.3 "
                    "suites stay enabled", ", ".join(tls13))
    if not tls13 and highest == ssl.TLSVersion.TLSv1_3:
        if lowest == ssl.TLSVersion.TLSv1_3:
            raise InvalidConfigError(f"Invalid value {','.join(names)!r} for configuration ssl.cipher.suites: no "
                                     "TLS 1.3 suite, and ssl.enabled.protocols allows only TLSv1.3")
        log.info("ssl.cipher.suites lists no TLS 1.3 suite: TLS 1.3 is off (as in Java)")
        highest = ssl.TLSVersion.TLSv1_2
    if not tls12 and lowest == ssl.TLSVersion.TLSv1_2:
        if highest == ssl.TLSVersion.TLSv1_2:
            raise InvalidConfigError(f"Invalid value {','.join(names)!r} for configuration ssl.cipher.suites: no "
                                     "TLS 1.2 suite, and TLSv1.2 is the only protocol enabled")
        lowest = ssl.TLSVersion.TLSv1_3
    if tls12 and lowest == ssl.TLSVersion.TLSv1_2:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError as e:
            raise InvalidConfigError(f"Invalid value {','.join(names)!r} for configuration ssl.cipher.suites: none "
                                     f"of the TLS 1.2 suites is available in {ssl.OPENSSL_VERSION}") from e
        active = {c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3"}
        missing = [n for n in tls12 if n not in active]
        if missing:
            log.warning("ssl.cipher.suites: %s not available in %s (ignored)", ", ".join(missing), ssl.OPENSSL_VERSION)
    return lowest, highest


# -- keystores and truststores -----------------------------------------------------------------------

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


@dataclass(frozen=True)
class _PemContent:
    certificates: tuple[bytes, ...]  # DER, in file order
    keys: tuple[tuple[str, bool], ...]  # (label, encrypted)


def _scan_pem(text: str, key: str, what: str) -> _PemContent:
    certs: list[bytes] = []
    keys: list[tuple[str, bool]] = []
    for label, body in _PEM_BLOCK.findall(text):
        if label in ("CERTIFICATE", "X509 CERTIFICATE"):
            b64 = "".join(line for line in body.splitlines() if ":" not in line)
            try:
                certs.append(base64.b64decode(re.sub(r"\s+", "", b64), validate=True))
            except (binascii.Error, ValueError) as e:
                raise InvalidConfigError(f"Invalid value for configuration {key}: {what} holds a PEM certificate "
                                         "that is not valid base64") from e
        elif label.endswith("PRIVATE KEY"):
            keys.append((label, label == "ENCRYPTED PRIVATE KEY" or "Proc-Type: 4,ENCRYPTED" in body))
    return _PemContent(tuple(certs), tuple(keys))


def _keystore_key(cfg: SslConfig) -> str:
    return "ssl.keystore.key" if cfg.keystore_key is not None else "ssl.keystore.location"


def _check_keystore_keys(cfg: SslConfig) -> None:
    """Kafka's DefaultSslEngineFactory.createKeystore rules."""
    if cfg.keystore_key is not None:
        if cfg.keystore_type != "PEM":
            raise InvalidConfigError(f"Invalid value {cfg.keystore_type} for configuration ssl.keystore.type: "
                                     "ssl.keystore.key can be given only with ssl.keystore.type=PEM")
        if cfg.keystore_certificate_chain is None:
            raise InvalidConfigError("Missing required configuration ssl.keystore.certificate.chain: "
                                     "ssl.keystore.key is given without its certificate chain")
        if cfg.keystore_location is not None:
            raise InvalidConfigError("Invalid configuration ssl.keystore.location: both ssl.keystore.location and "
                                     "ssl.keystore.key are given")
        if cfg.keystore_password is not None:
            raise InvalidConfigError("Invalid configuration ssl.keystore.password: a PEM keystore has no store "
                                     "password (an encrypted key takes ssl.key.password)")
    elif cfg.keystore_certificate_chain is not None:
        raise InvalidConfigError("Missing required configuration ssl.keystore.key: "
                                 "ssl.keystore.certificate.chain is given without the private key")
    elif cfg.keystore_location is not None and cfg.keystore_type == "PEM":
        if cfg.keystore_password is not None:
            raise InvalidConfigError("Invalid configuration ssl.keystore.password: a PEM keystore has no store "
                                     "password (an encrypted key takes ssl.key.password)")
    elif cfg.keystore_location is None and cfg.keystore_password is not None:
        raise InvalidConfigError("Missing required configuration ssl.keystore.location: ssl.keystore.password is "
                                 "given without a keystore")
    elif cfg.keystore_location is not None and cfg.keystore_password is None:
        raise InvalidConfigError(f"Missing required configuration ssl.keystore.password: the {cfg.keystore_type} "
                                 f"keystore {cfg.keystore_location} needs it")


def _check_truststore_keys(cfg: SslConfig) -> None:
    """Kafka's DefaultSslEngineFactory.createTruststore rules."""
    if cfg.truststore_certificates is not None:
        if cfg.truststore_type != "PEM":
            raise InvalidConfigError(f"Invalid value {cfg.truststore_type} for configuration ssl.truststore.type: "
                                     "ssl.truststore.certificates can be given only with ssl.truststore.type=PEM")
        if cfg.truststore_location is not None:
            raise InvalidConfigError("Invalid configuration ssl.truststore.location: both ssl.truststore.location and "
                                     "ssl.truststore.certificates are given")
        if cfg.truststore_password is not None:
            raise InvalidConfigError("Invalid configuration ssl.truststore.password: a PEM truststore has no password")
    elif cfg.truststore_location is not None and cfg.truststore_type == "PEM":
        if cfg.truststore_password is not None:
            raise InvalidConfigError("Invalid configuration ssl.truststore.password: a PEM truststore has no password")
    elif cfg.truststore_location is None and cfg.truststore_password is not None:
        raise InvalidConfigError("Missing required configuration ssl.truststore.location: ssl.truststore.password "
                                 "is given without a truststore")


def _read_store(key: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InvalidConfigError(f"Invalid value {path} for configuration {key}: the file does not exist") from None
    except IsADirectoryError:
        raise InvalidConfigError(f"Invalid value {path} for configuration {key}: it is a directory") from None
    except PermissionError:
        raise InvalidConfigError(f"Invalid value {path} for configuration {key}: permission denied") from None
    except OSError as e:
        raise InvalidConfigError(f"Invalid value {path} for configuration {key}: cannot be read "
                                 f"({e.strerror})") from None


def _store_kind(data: bytes) -> str:
    if data.startswith(JKS_MAGIC):
        return "JKS"
    if data.startswith(JCEKS_MAGIC):
        return "JCEKS"
    if data[:1] == b"\x30":  # a DER SEQUENCE: PKCS12's PFX
        return "PKCS12"
    if b"-----BEGIN " in data[:65536]:
        return "PEM"
    return "unknown"


def _refuse_java_store(kind: str, location_key: str, type_key: str, path: str) -> InvalidConfigError:
    return InvalidConfigError(
        f"Invalid value {path} for configuration {location_key}: a Java {kind} keystore, which Strata cannot read; "
        f"convert it to PKCS12 with: keytool -importkeystore -srckeystore {path} -srcstoretype {kind} "
        f"-destkeystore {path}.p12 -deststoretype PKCS12, then set {location_key}={path}.p12 and {type_key}=PKCS12")


def _pem_text(data: bytes, kind: str, location_key: str, type_key: str, path: str) -> str:
    if kind in ("JKS", "JCEKS"):
        raise _refuse_java_store(kind, location_key, type_key, path)
    if kind == "PKCS12":
        raise InvalidConfigError(f"Invalid value {path} for configuration {location_key}: not a PEM file (binary DER: "
                                 f"for a PKCS12 file set {type_key}=PKCS12; convert a DER certificate with "
                                 f"openssl x509 -inform DER -in {path} -out {path}.pem)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidConfigError(f"Invalid value {path} for configuration {location_key}: not a PEM file") from None


def _load_keystore(ctx: ssl.SSLContext, cfg: SslConfig) -> CertificateInfo | None:
    _check_keystore_keys(cfg)
    if cfg.keystore_key is not None:
        assert cfg.keystore_certificate_chain is not None
        key_pem = _scan_pem(cfg.keystore_key, "ssl.keystore.key", "ssl.keystore.key")
        chain_pem = _scan_pem(cfg.keystore_certificate_chain, "ssl.keystore.certificate.chain",
                              "ssl.keystore.certificate.chain")
        content = _PemContent(chain_pem.certificates, key_pem.keys)
        leaf = _check_pem_keystore(content, cfg, "ssl.keystore.key", "ssl.keystore.certificate.chain",
                                   "the inline PEM keystore")
        data = (cfg.keystore_key.strip() + "\n" + cfg.keystore_certificate_chain.strip() + "\n").encode()
        with _private_file(data) as path:
            _load_cert_chain(ctx, path, cfg.key_password, "ssl.keystore.key", "the inline PEM keystore",
                             content.keys[0][1])
        return leaf
    path = cfg.keystore_location
    if path is None:
        return None
    data = _read_store("ssl.keystore.location", path)
    kind = _store_kind(data)
    if cfg.keystore_type == "PEM":
        text = _pem_text(data, kind, "ssl.keystore.location", "ssl.keystore.type", path)
        content = _scan_pem(text, "ssl.keystore.location", path)
        leaf = _check_pem_keystore(content, cfg, "ssl.keystore.location", "ssl.keystore.location", path)
        _load_cert_chain(ctx, path, cfg.key_password, "ssl.keystore.location", path, content.keys[0][1])
        return leaf
    if kind in ("JKS", "JCEKS"):
        raise _refuse_java_store(kind, "ssl.keystore.location", "ssl.keystore.type", path)
    if kind != "PKCS12":
        hint = " (it is PEM: set ssl.keystore.type=PEM)" if kind == "PEM" else ""
        raise InvalidConfigError(f"Invalid value {path} for configuration ssl.keystore.location: not a "
                                 f"{cfg.keystore_type} or PKCS12 keystore{hint}")
    key, cert, extra = _read_pkcs12(data, cfg.keystore_password, "ssl.keystore", path)
    if key is None or cert is None:
        raise InvalidConfigError(f"Invalid value {path} for configuration ssl.keystore.location: the PKCS12 file "
                                 "holds no private key with its certificate")
    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_urlsafe(24)  # the key is written re-encrypted, readable only for this load
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.BestAvailableEncryption(one_time.encode()))
    leaf_der = cert.public_bytes(serialization.Encoding.DER)
    chain = [cert] + [c for c in extra if c.public_bytes(serialization.Encoding.DER) != leaf_der]
    with _private_file(key_pem + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)) as tmp:
        _load_cert_chain(ctx, tmp, one_time, "ssl.keystore.location", path, True,
                         password_key="ssl.keystore.password")
    return _certificate(leaf_der, "ssl.keystore.location", path)


def _check_pem_keystore(content: _PemContent, cfg: SslConfig, key_key: str, chain_key: str,
                        what: str) -> CertificateInfo:
    if not content.keys:
        raise InvalidConfigError(f"Invalid value for configuration {key_key}: {what} holds no PEM private key "
                                 "(-----BEGIN PRIVATE KEY-----)")
    if len(content.keys) > 1:
        raise InvalidConfigError(f"Invalid value for configuration {key_key}: {what} holds {len(content.keys)} "
                                 "private keys; expected one")
    if not content.certificates:
        raise InvalidConfigError(f"Invalid value for configuration {chain_key}: {what} holds no PEM certificate "
                                 "(-----BEGIN CERTIFICATE-----)")
    if content.keys[0][1] and cfg.key_password is None:
        raise InvalidConfigError(f"Missing required configuration ssl.key.password: the private key in {what} is "
                                 "encrypted")
    return _certificate(content.certificates[0], chain_key, what)


def _certificate(der: bytes, key: str, what: str) -> CertificateInfo:
    try:
        return certificate_info(der)
    except CertificateParseError as e:
        raise InvalidConfigError(f"Invalid value for configuration {key}: the certificate in {what} cannot be "
                                 f"read ({e})") from None


class _PasswordNeeded(Exception):
    pass


def _load_cert_chain(ctx: ssl.SSLContext, path: str, password: str | None, key: str, what: str, encrypted: bool,
                     password_key: str = "ssl.key.password") -> None:
    def supply() -> str:
        if password is None:  # never let OpenSSL prompt on the terminal
            raise _PasswordNeeded
        return password

    try:
        ctx.load_cert_chain(path, password=supply)
    except _PasswordNeeded:
        raise InvalidConfigError(f"Missing required configuration {password_key}: the private key in {what} "
                                 f"({key}) is encrypted") from None
    except ssl.SSLError as e:
        if e.reason == "KEY_VALUES_MISMATCH":
            raise InvalidConfigError(f"Invalid value for configuration {key}: the private key in {what} does not "
                                     "match its certificate (the first of the chain)") from None
        if encrypted:
            raise InvalidConfigError(f"Invalid value for configuration {password_key}: it does not decrypt the "
                                     f"private key in {what} ({key})") from None
        raise InvalidConfigError(f"Invalid value for configuration {key}: the key and certificate chain in {what} "
                                 f"cannot be loaded ({e.reason or e.strerror or e})") from None


def _read_pkcs12(data: bytes, password: str | None, prefix: str, path: str) -> tuple[Any, Any, list[Any]]:
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise InvalidConfigError(f"Invalid value {path} for configuration {prefix}.location: reading PKCS12 files "
                                 "needs the 'cryptography' package (pip install cryptography)") from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password is not None else None)
    except (ValueError, TypeError):
        if password is None:
            raise InvalidConfigError(f"Missing required configuration {prefix}.password: the PKCS12 file {path} "
                                     f"({prefix}.location) cannot be read without it, or it is damaged") from None
        raise InvalidConfigError(f"Invalid value for configuration {prefix}.password: it does not open the PKCS12 "
                                 f"file {path} ({prefix}.location), or the file is damaged") from None
    return key, cert, list(extra)


def _load_truststore(ctx: ssl.SSLContext, cfg: SslConfig) -> int | None:
    _check_truststore_keys(cfg)
    if cfg.truststore_certificates is not None:
        content = _scan_pem(cfg.truststore_certificates, "ssl.truststore.certificates", "ssl.truststore.certificates")
        if not content.certificates:
            raise InvalidConfigError("Invalid value for configuration ssl.truststore.certificates: no PEM certificate "
                                     "(-----BEGIN CERTIFICATE-----)")
        _load_verify(ctx, "ssl.truststore.certificates", cadata=[ssl.DER_cert_to_PEM_cert(c)
                                                                  for c in content.certificates])
        return len(content.certificates)
    path = cfg.truststore_location
    if path is None:
        return None
    data = _read_store("ssl.truststore.location", path)
    kind = _store_kind(data)
    if cfg.truststore_type == "PEM":
        text = _pem_text(data, kind, "ssl.truststore.location", "ssl.truststore.type", path)
        content = _scan_pem(text, "ssl.truststore.location", path)
        if not content.certificates:
            raise InvalidConfigError(f"Invalid value {path} for configuration ssl.truststore.location: no PEM "
                                     "certificate (-----BEGIN CERTIFICATE-----)")
        _load_verify(ctx, "ssl.truststore.location", cadata=[ssl.DER_cert_to_PEM_cert(c) for c in content.certificates])
        return len(content.certificates)
    if kind in ("JKS", "JCEKS"):
        raise _refuse_java_store(kind, "ssl.truststore.location", "ssl.truststore.type", path)
    if kind != "PKCS12":
        hint = " (it is PEM: set ssl.truststore.type=PEM)" if kind == "PEM" else ""
        raise InvalidConfigError(f"Invalid value {path} for configuration ssl.truststore.location: not a "
                                 f"{cfg.truststore_type} or PKCS12 truststore{hint}")
    _key, cert, extra = _read_pkcs12(data, cfg.truststore_password, "ssl.truststore", path)
    certs = ([cert] if cert is not None else []) + extra
    if not certs:
        raise InvalidConfigError(f"Invalid value {path} for configuration ssl.truststore.location: the PKCS12 file "
                                 "holds no certificate")
    from cryptography.hazmat.primitives import serialization

    _load_verify(ctx, "ssl.truststore.location",
                 cadata=[c.public_bytes(serialization.Encoding.PEM).decode() for c in certs])
    return len(certs)


def _load_verify(ctx: ssl.SSLContext, key: str, cadata: list[str]) -> None:
    try:
        ctx.load_verify_locations(cadata="".join(cadata))
    except (ssl.SSLError, ValueError) as e:
        raise InvalidConfigError(f"Invalid value for configuration {key}: the certificates cannot be loaded "
                                 f"({getattr(e, 'reason', None) or e})") from None


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """``data`` in a file of a fresh 0700 directory (in RAM when /dev/shm is there), mode 0600, removed
    right after use: ``load_cert_chain`` reads only files."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    directory = tempfile.mkdtemp(prefix="strata-tls-", dir=base)
    try:
        path = os.path.join(directory, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _stamps(cfg: SslConfig) -> tuple[tuple[str, tuple[int, int, int] | None], ...]:
    out = []
    for path in (cfg.keystore_location, cfg.truststore_location):
        if path:
            try:
                st = os.stat(path)
                out.append((path, (st.st_mtime_ns, st.st_size, st.st_ino)))
            except OSError:
                out.append((path, None))
    return tuple(out)


def _sans(info: CertificateInfo) -> str:
    return "[" + ", ".join(f"{kind}:{value}" for kind, value in info.subject_alt_names) + "]"


def _handshake_in_memory(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> None:
    """A complete TLS handshake between two contexts through memory buffers (Kafka's SslEngineValidator)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_side=False)
    done = {"client": False, "server": False}
    for _ in range(20):
        for side, obj, out, peer_in in (("client", client, c_out, s_in), ("server", server, s_out, c_in)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()) and not c_out.pending and not s_out.pending:
            break
    if not all(done.values()):
        raise ssl.SSLError("the handshake did not complete")


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
