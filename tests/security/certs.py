"""Test certificates made with the ``openssl`` command line: a CA, a second CA nobody trusts, a broker
certificate for ``localhost``/``127.0.0.1``, client certificates, an expired one, and the broker's
key material in every keystore form Strata reads (PEM file, encrypted PEM, PKCS12, inline PEM).

``make_pki(directory)`` creates everything once per directory (a lock file makes concurrent callers
wait for the first) and returns a :class:`Pki` with the paths and passwords. EC P-256 keys keep the
whole run well under a second.

Subjects are given to ``openssl -subj`` most-general first (``/O=Strata/OU=eng/CN=alice``) so that the
RFC 2253 name Java (and :func:`strata.security.principal.distinguished_name`) prints, which lists the
RDNs in reverse, reads ``CN=alice,OU=eng,O=Strata``.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL_TIMEOUT_S = 30.0
MARKER = "pki.done"
KEYSTORE_PASSWORD = "ks-pass-Strata-1"
KEY_PASSWORD = "key-pass-Strata-2"
TRUSTSTORE_PASSWORD = "ts-pass-Strata-3"

_OPENSSL_CNF = """\
[req]
distinguished_name = req_dn
prompt = no
[req_dn]
CN = unused

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyAgreement
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[other_server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyAgreement
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:other.example
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[dns_only_server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyAgreement
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyAgreement
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[ca]
default_ca = ca_default
[ca_default]
database = index.txt
new_certs_dir = issued
serial = serial
default_md = sha256
policy = policy_any
unique_subject = no
email_in_dn = no
[policy_any]
commonName = supplied
organizationalUnitName = optional
organizationName = optional
"""


@dataclass(frozen=True)
class CertFiles:
    """One end entity: its unencrypted PKCS#8 key, certificate, certificate + issuing CA, and all
    three in one file (a ``ssl.keystore.type=PEM`` keystore)."""

    key: Path
    cert: Path
    chain: Path
    pem: Path
    dn: str  # RFC 2253, as Java's X500Principal.getName() prints it

    def key_text(self) -> str:
        return self.key.read_text()

    def chain_text(self) -> str:
        return self.chain.read_text()


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca_key: Path
    ca_cert: Path  # also the PEM truststore
    untrusted_ca_key: Path
    untrusted_ca_cert: Path
    server: CertFiles  # CN=localhost, SAN DNS:localhost, IP:127.0.0.1
    server_renewed: CertFiles  # a new key and certificate with the same DN and SANs (keystore rotation)
    server_dns_only: CertFiles  # the server's DN with SAN DNS:localhost only (drops IP:127.0.0.1)
    other_server: CertFiles  # CN=other.example, SAN DNS:other.example (a different identity)
    alice: CertFiles  # CN=alice,OU=eng,O=Strata
    bob: CertFiles  # CN=bob,OU=eng,O=Strata
    mallory: CertFiles  # CN=mallory,OU=eng,O=Strata, signed by the untrusted CA
    expired: CertFiles  # CN=carol,OU=eng,O=Strata, valid only in January 2020
    server_key_encrypted: Path  # PKCS#8 "ENCRYPTED PRIVATE KEY" (key_password)
    server_pem_encrypted: Path  # encrypted key + chain: a PEM keystore with ssl.key.password
    server_p12: Path  # PKCS12 keystore: key + chain (keystore_password)
    truststore_pem: Path
    truststore_p12: Path  # PKCS12 with the CA certificate only (truststore_password)
    keystore_password: str = KEYSTORE_PASSWORD
    key_password: str = KEY_PASSWORD
    truststore_password: str = TRUSTSTORE_PASSWORD

    def keystore_props(self, form: str = "PEM", which: str = "server") -> dict[str, str]:
        """``ssl.keystore.*`` keys for ``form``: PEM (file), PEM-encrypted, PEM-inline, PKCS12,
        JKS-PKCS12 (a PKCS12 file under Kafka's default type JKS)."""
        files: CertFiles = getattr(self, which)
        if form == "PEM":
            return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.pem)}
        if form == "PEM-encrypted":
            assert which == "server"
            return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.server_pem_encrypted),
                    "ssl.key.password": self.key_password}
        if form == "PEM-inline":
            return {"ssl.keystore.type": "PEM", "ssl.keystore.key": files.key_text(),
                    "ssl.keystore.certificate.chain": files.chain_text()}
        if form in ("PKCS12", "JKS-PKCS12"):
            assert which == "server"
            return {"ssl.keystore.type": "PKCS12" if form == "PKCS12" else "JKS",
                    "ssl.keystore.location": str(self.server_p12), "ssl.keystore.password": self.keystore_password}
        raise ValueError(f"unknown keystore form {form!r}")

    def truststore_props(self, form: str = "PEM") -> dict[str, str]:
        """``ssl.truststore.*`` keys for ``form``: PEM (file), PEM-inline, PKCS12, JKS-PKCS12."""
        if form == "PEM":
            return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.truststore_pem)}
        if form == "PEM-inline":
            return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": self.truststore_pem.read_text()}
        if form in ("PKCS12", "JKS-PKCS12"):
            return {"ssl.truststore.type": "PKCS12" if form == "PKCS12" else "JKS",
                    "ssl.truststore.location": str(self.truststore_p12),
                    "ssl.truststore.password": self.truststore_password}
        raise ValueError(f"unknown truststore form {form!r}")


_CACHE: dict[Path, Pki] = {}


def make_pki(directory: Path) -> Pki:
    """Create (once) and return the test PKI under ``directory``."""
    directory = Path(directory).resolve()
    if (cached := _CACHE.get(directory)) is not None:
        return cached
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".pki.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (directory / MARKER).exists():
                _generate(directory)
                (directory / MARKER).write_text("ok\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    pki = _layout(directory)
    _CACHE[directory] = pki
    return pki


def _entity(d: Path, name: str, dn: str) -> CertFiles:
    return CertFiles(d / f"{name}.key", d / f"{name}.pem", d / f"{name}-chain.pem", d / f"{name}-keystore.pem", dn)


def _layout(d: Path) -> Pki:
    return Pki(
        directory=d,
        ca_key=d / "ca.key", ca_cert=d / "ca.pem",
        untrusted_ca_key=d / "untrusted-ca.key", untrusted_ca_cert=d / "untrusted-ca.pem",
        server=_entity(d, "server", "CN=localhost,OU=brokers,O=Strata"),
        server_renewed=_entity(d, "server-renewed", "CN=localhost,OU=brokers,O=Strata"),
        server_dns_only=_entity(d, "server-dns-only", "CN=localhost,OU=brokers,O=Strata"),
        other_server=_entity(d, "other-server", "CN=other.example,OU=brokers,O=Strata"),
        alice=_entity(d, "alice", "CN=alice,OU=eng,O=Strata"),
        bob=_entity(d, "bob", "CN=bob,OU=eng,O=Strata"),
        mallory=_entity(d, "mallory", "CN=mallory,OU=eng,O=Strata"),
        expired=_entity(d, "expired", "CN=carol,OU=eng,O=Strata"),
        server_key_encrypted=d / "server-encrypted.key",
        server_pem_encrypted=d / "server-keystore-encrypted.pem",
        server_p12=d / "server.p12",
        truststore_pem=d / "ca.pem",
        truststore_p12=d / "truststore.p12",
    )


def _subj(dn: str) -> str:
    """``CN=alice,OU=eng,O=Strata`` -> ``/O=Strata/OU=eng/CN=alice`` (openssl's encoding order)."""
    return "/" + "/".join(reversed(dn.split(",")))


def _generate(d: Path) -> None:
    work = d / f".build-{secrets.token_hex(4)}"
    work.mkdir(mode=0o700)
    env = {**os.environ, "OPENSSL_CONF": str(work / "openssl.cnf"), "KS_PASS": KEYSTORE_PASSWORD,
           "KEY_PASS": KEY_PASSWORD, "TS_PASS": TRUSTSTORE_PASSWORD}

    def run(*args: str) -> None:
        proc = subprocess.run(["openssl", *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=OPENSSL_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")

    (work / "openssl.cnf").write_text(_OPENSSL_CNF)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc")

    def ca(name: str, subject: str) -> None:
        run("req", "-x509", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", subject,
            "-days", "3650", "-sha256", "-config", "openssl.cnf", "-extensions", "ca_ext")

    def leaf(name: str, dn: str, issuer: str, ext: str) -> None:
        run("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", _subj(dn),
            "-config", "openssl.cnf")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem", "-CAkey", f"{issuer}.key",
            "-set_serial", str(secrets.randbits(63)), "-days", "825", "-sha256", "-extfile", "openssl.cnf",
            "-extensions", ext, "-out", f"{name}.pem")
        _bundle(work, name, issuer)

    ca("ca", "/O=Strata/CN=Strata Test CA")
    ca("untrusted-ca", "/O=Elsewhere/CN=Untrusted Test CA")
    leaf("server", "CN=localhost,OU=brokers,O=Strata", "ca", "server_ext")
    leaf("server-renewed", "CN=localhost,OU=brokers,O=Strata", "ca", "server_ext")
    leaf("server-dns-only", "CN=localhost,OU=brokers,O=Strata", "ca", "dns_only_server_ext")
    leaf("other-server", "CN=other.example,OU=brokers,O=Strata", "ca", "other_server_ext")
    leaf("alice", "CN=alice,OU=eng,O=Strata", "ca", "client_ext")
    leaf("bob", "CN=bob,OU=eng,O=Strata", "ca", "client_ext")
    leaf("mallory", "CN=mallory,OU=eng,O=Strata", "untrusted-ca", "client_ext")

    # Expired: OpenSSL 3.0's `x509 -req` has no -not_before/-not_after (3.4 added them); `openssl ca`
    # takes explicit dates. -preserveDN keeps the subject's order as requested.
    (work / "issued").mkdir()
    (work / "index.txt").write_text("")
    (work / "serial").write_text(f"{secrets.randbits(62):x}".rjust(16, "0") + "\n")
    run("req", "-new", *ec, "-keyout", "expired.key", "-out", "expired.csr", "-subj", _subj("CN=carol,OU=eng,O=Strata"),
        "-config", "openssl.cnf")
    run("ca", "-batch", "-notext", "-preserveDN", "-config", "openssl.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
        "-in", "expired.csr", "-out", "expired.pem", "-startdate", "20200101000000Z", "-enddate", "20200131000000Z",
        "-extensions", "client_ext")
    _bundle(work, "expired", "ca")

    run("pkcs8", "-topk8", "-in", "server.key", "-out", "server-encrypted.key", "-v2", "aes-256-cbc",
        "-passout", "env:KEY_PASS")
    (work / "server-keystore-encrypted.pem").write_text(
        (work / "server-encrypted.key").read_text() + (work / "server-chain.pem").read_text())
    (work / "server-keystore-encrypted.pem").chmod(0o600)
    run("pkcs12", "-export", "-inkey", "server.key", "-in", "server.pem", "-certfile", "ca.pem", "-name", "kafka",
        "-out", "server.p12", "-passout", "env:KS_PASS")
    run("pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-name", "ca", "-out", "truststore.p12",
        "-passout", "env:TS_PASS")

    keep = {p.name for p in work.iterdir() if p.suffix in (".key", ".pem", ".p12")}
    for name in sorted(keep):
        os.replace(work / name, d / name)
    shutil.rmtree(work)


def _bundle(work: Path, name: str, issuer: str) -> None:
    key, cert, ca = ((work / f"{n}").read_text() for n in (f"{name}.key", f"{name}.pem", f"{issuer}.pem"))
    (work / f"{name}-chain.pem").write_text(cert + ca)
    (work / f"{name}-keystore.pem").write_text(key + cert + ca)
    (work / f"{name}.key").chmod(0o600)
    (work / f"{name}-keystore.pem").chmod(0o600)


def self_signed_der(directory: Path, subject: str, san: str | None = None) -> bytes:
    """A throwaway self-signed certificate (DER) with an ``openssl -subj`` style ``subject`` (encoding order,
    ``/`` separates RDNs, ``+`` joins attributes of one RDN) and an optional subjectAltName value."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"self-signed-{secrets.token_hex(4)}"
    args = ["openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc",
            "-keyout", f"{name}.key", "-out", f"{name}.der", "-outform", "DER", "-subj", subject, "-days", "1",
            "-utf8"]
    if san:
        args += ["-addext", f"subjectAltName={san}"]
    env = {**os.environ, "OPENSSL_CONF": str(directory / "openssl-req.cnf")}
    (directory / "openssl-req.cnf").write_text("[req]\ndistinguished_name = req_dn\n[req_dn]\n")
    proc = subprocess.run(args, cwd=directory, env=env, capture_output=True, text=True, timeout=OPENSSL_TIMEOUT_S,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl req failed ({proc.returncode}): {proc.stderr.strip()}")
    return (directory / f"{name}.der").read_bytes()
