"""SCRAM credentials (RFC 5802) as Kafka derives, stores and validates them.

A credential is what a broker keeps for one user and one mechanism: the salt, the iteration count,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey = HMAC(SaltedPassword, "Server Key")``,
where ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``. Never the password.

Kafka's forms, kept byte for byte:

* ``ScramCredentialUtils``' string ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``
  (:func:`to_kafka_string`, :func:`from_kafka_string`);
* the ZooKeeper entity ``/config/users/<user>``, ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...",...}}``,
  whose ``config`` also holds the user's quota overrides: :func:`credentials_from_user_config` reads the SCRAM
  entries of that dict and :func:`with_user_credential` sets or removes one, leaving every other key as it was
  (the JSON itself is ``strata.cluster.znodes.ConfigEntityZNode``'s, with entity type ``users``);
* AlterUserScramCredentials sends the *salted* password, from which the controller derives the keys
  (:func:`credential_from_salted_password`) after checking the iteration count (:func:`validate_iterations`).

Passwords are encoded as UTF-8 with no SASLprep: Kafka's ``ScramFormatter.normalize`` does none, and a
credential must come out the same whichever side derived it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

__all__ = [
    "DEFAULT_ITERATIONS",
    "JAVA_INT_MAX",
    "MECHANISMS",
    "MECHANISM_TYPES",
    "ScramCredential",
    "ScramMechanismSpec",
    "UnacceptableCredentialError",
    "client_key",
    "credential_from_password",
    "credential_from_salted_password",
    "credentials_from_user_config",
    "from_kafka_string",
    "hmac_digest",
    "mechanism_spec",
    "salted_password",
    "server_key",
    "stored_key",
    "to_kafka_string",
    "validate_iterations",
    "with_user_credential",
]


class ScramMechanismSpec(NamedTuple):
    """Kafka's ``ScramMechanism``: the hash, the iteration bounds and the type byte of the admin APIs."""

    hash_name: str  # hashlib's name
    min_iterations: int  # the server refuses a credential with fewer, the client a server asking fewer
    max_iterations: int  # AlterUserScramCredentials refuses more (``ScramControlManager.MAX_ITERATIONS``)
    type: int  # the mechanism byte of Describe/AlterUserScramCredentials

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size


MECHANISMS: Mapping[str, ScramMechanismSpec] = MappingProxyType({
    "SCRAM-SHA-256": ScramMechanismSpec("sha256", 4096, 16384, 1),
    "SCRAM-SHA-512": ScramMechanismSpec("sha512", 4096, 16384, 2),
})
MECHANISM_TYPES: Mapping[int, str] = MappingProxyType({spec.type: name for name, spec in MECHANISMS.items()})
DEFAULT_ITERATIONS = 4096
JAVA_INT_MAX = 2**31 - 1  # Kafka reads iteration counts into an int

_SALT = "salt"
_STORED_KEY = "stored_key"
_SERVER_KEY = "server_key"
_ITERATIONS = "iterations"
_KEYS = (_SALT, _STORED_KEY, _SERVER_KEY, _ITERATIONS)


class UnacceptableCredentialError(ValueError):
    """A credential AlterUserScramCredentials refuses; Kafka answers UNACCEPTABLE_CREDENTIAL (93) with
    this message."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def __post_init__(self) -> None:
        for name in ("salt", "stored_key", "server_key"):
            if not isinstance(getattr(self, name), bytes):
                raise TypeError(f"ScramCredential.{name} must be bytes")
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int) or self.iterations <= 0:
            raise ValueError(f"ScramCredential.iterations must be a positive int, got {self.iterations!r}")


def mechanism_spec(mechanism: str) -> ScramMechanismSpec:
    spec = MECHANISMS.get(mechanism)
    if spec is None:
        raise ValueError(f"Unsupported SCRAM mechanism {mechanism!r}; supported: {', '.join(MECHANISMS)}")
    return spec


# -- the derivations of RFC 5802 section 3 ----------------------------------------------------------------

def hmac_digest(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(Normalize(password), salt, i)``: PBKDF2-HMAC with the mechanism's hash (Normalize is UTF-8, as in
    Kafka)."""
    if not 0 < iterations <= JAVA_INT_MAX:
        raise ValueError(f"iterations must be between 1 and {JAVA_INT_MAX}, got {iterations}")
    return hashlib.pbkdf2_hmac(mechanism_spec(mechanism).hash_name, password.encode("utf-8"), salt, iterations)


def client_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism_spec(mechanism).hash_name, salted, b"Client Key")


def stored_key(mechanism: str, salted: bytes) -> bytes:
    spec = mechanism_spec(mechanism)
    return hashlib.new(spec.hash_name, client_key(mechanism, salted)).digest()


def server_key(mechanism: str, salted: bytes) -> bytes:
    return hmac_digest(mechanism_spec(mechanism).hash_name, salted, b"Server Key")


def credential_from_salted_password(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The credential the controller stores for an AlterUserScramCredentials upsertion (which carries the salt,
    the salted password and the iteration count, never the password)."""
    return ScramCredential(bytes(salt), stored_key(mechanism, salted), server_key(mechanism, salted), iterations)


def credential_from_password(mechanism: str, password: str, salt: bytes | None = None,
                             iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """A new credential for ``password``, with a random 32-byte salt unless one is given."""
    spec = mechanism_spec(mechanism)
    if iterations < spec.min_iterations:
        raise ValueError(f"Iterations {iterations} is less than the minimum {spec.min_iterations} required "
                         f"for {mechanism}")
    if salt is None:
        salt = secrets.token_bytes(32)
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


def validate_iterations(mechanism: str, iterations: int) -> None:
    """AlterUserScramCredentials' bounds (``ScramControlManager.validateUpsertion``)."""
    spec = mechanism_spec(mechanism)
    if iterations < spec.min_iterations:
        raise UnacceptableCredentialError("Too few iterations")
    if iterations > spec.max_iterations:
        raise UnacceptableCredentialError("Too many iterations")


# -- Kafka's string form ----------------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def to_kafka_string(credential: ScramCredential) -> str:
    """``ScramCredentialUtils.credentialToString``."""
    return (f"{_SALT}={_b64(credential.salt)},{_STORED_KEY}={_b64(credential.stored_key)},"
            f"{_SERVER_KEY}={_b64(credential.server_key)},{_ITERATIONS}={credential.iterations}")


def _b64_field(name: str, value: str) -> bytes:
    # Java's Base64 decoder accepts a value without its padding; the alphabet is strict.
    padded = value + "=" * (-len(value) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"Credentials not valid: {name} is not base64") from None


def from_kafka_string(text: str) -> ScramCredential:
    """``ScramCredentialUtils.credentialFromString``: exactly the four keys, in any order. Errors name the
    faulty part without echoing the keys."""
    props: dict[str, str] = {}
    for token in text.split(","):
        key, eq, value = token.partition("=")
        if not eq or not key:
            raise ValueError("Credentials not valid: expected salt=...,stored_key=...,server_key=...,iterations=...")
        props[key] = value
    if len(props) != 4 or any(k not in props for k in _KEYS):
        unknown = sorted(k for k in props if k not in _KEYS)
        missing = [k for k in _KEYS if k not in props]
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + \
            ([f"unknown {', '.join(unknown)}"] if unknown else [])
        raise ValueError(f"Credentials not valid: {'; '.join(parts)}")
    iterations_text = props[_ITERATIONS]
    if not (iterations_text.isascii() and iterations_text.isdigit()):
        raise ValueError("Credentials not valid: iterations is not a number")
    iterations = int(iterations_text)
    if not 0 < iterations <= JAVA_INT_MAX:
        raise ValueError(f"Credentials not valid: iterations {iterations} out of range")
    return ScramCredential(_b64_field(_SALT, props[_SALT]), _b64_field(_STORED_KEY, props[_STORED_KEY]),
                           _b64_field(_SERVER_KEY, props[_SERVER_KEY]), iterations)


# -- the config of a /config/users/<user> entity ----------------------------------------------------------

def credentials_from_user_config(config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials of a user's entity config (``{"SCRAM-SHA-256": "salt=...", "producer_byte_rate":
    ...}``), by mechanism; other keys are ignored. A malformed credential raises ValueError naming the
    mechanism."""
    out: dict[str, ScramCredential] = {}
    for mechanism in MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = from_kafka_string(text)
        except ValueError as e:
            raise ValueError(f"{mechanism}: {e}") from None
    return out


def with_user_credential(config: Mapping[str, str], mechanism: str,
                         credential: ScramCredential | None) -> dict[str, str]:
    """A copy of a user's entity config with ``mechanism``'s credential set, or removed when ``credential`` is
    None; every other key (quotas, the other mechanism) is kept as it was, in its place."""
    mechanism_spec(mechanism)
    out = dict(config)
    if credential is None:
        out.pop(mechanism, None)
    else:
        out[mechanism] = to_kafka_string(credential)
    return out
