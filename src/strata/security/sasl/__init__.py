"""SASL mechanisms without I/O: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), server and client
side, with Kafka's behaviour and Kafka's error messages.

The broker's authenticator feeds each SaslAuthenticate token to :meth:`SaslServer.evaluate_response` and sends
back what it returns; a :class:`SaslAuthenticationError` carries the message for the client
(SaslAuthenticateResponse ``error_message``, code SASL_AUTHENTICATION_FAILED, 58) and, in ``detail``, what went
wrong, for the broker's log only. An :class:`IllegalSaslStateError` (a token after the exchange ended) is
Kafka's ILLEGAL_SASL_STATE (34).

As in Kafka's ``SaslServerAuthenticator``, a SCRAM exchange that fails on the credentials, or on a message that
does not parse, tells the client no more than :func:`invalid_credentials_message` (so an unknown user and a
wrong password cannot be told apart); PLAIN's messages are ``PlainSaslServer``'s own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from strata.security.scram_credentials import MECHANISMS as SCRAM_MECHANISMS
from strata.security.scram_credentials import ScramCredential

__all__ = [
    "INVALID_CREDENTIALS_MESSAGE",
    "SUPPORTED_MECHANISMS",
    "IllegalSaslStateError",
    "PasswordCheck",
    "PlainSaslClient",
    "PlainSaslServer",
    "PlainUsers",
    "SaslAuthenticationError",
    "SaslClient",
    "SaslServer",
    "ScramSaslClient",
    "ScramCredentials",
    "ScramSaslServer",
    "UnsupportedSaslMechanismError",
    "client_mechanism",
    "invalid_credentials_message",
    "load_callback",
    "server_mechanism",
]

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)

# SaslServerAuthenticator.handleSaslToken: the only text a client gets for a SaslException, whatever its cause.
INVALID_CREDENTIALS_MESSAGE = "Authentication failed during {phase} due to invalid credentials with SASL mechanism " \
    "{mechanism}"


def invalid_credentials_message(mechanism: str, *, reauthentication: bool = False) -> str:
    return INVALID_CREDENTIALS_MESSAGE.format(phase="re-authentication" if reauthentication else "authentication",
                                              mechanism=mechanism)


class SaslAuthenticationError(Exception):
    """A failed SASL exchange. ``str(e)`` is the message for the client; ``detail`` the cause, for logs."""

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail if detail is not None else message


class IllegalSaslStateError(SaslAuthenticationError):
    """A token the mechanism cannot take in its state (Kafka's IllegalSaslStateException)."""


class UnsupportedSaslMechanismError(ValueError):
    """A mechanism this broker does not offer (Kafka answers the handshake with UNSUPPORTED_SASL_MECHANISM)."""


class SaslServer(Protocol):
    mechanism: str

    def evaluate_response(self, token: bytes) -> bytes:
        """The challenge to send back (``b""`` when none); raises SaslAuthenticationError."""
        ...

    @property
    def is_complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name; raises RuntimeError before the exchange completed."""
        ...


class SaslClient(Protocol):
    mechanism: str

    def initial_response(self) -> bytes: ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The next response, None when there is nothing more to send; raises SaslAuthenticationError."""
        ...

    @property
    def is_complete(self) -> bool: ...


# The mechanisms import the names above, so they come after them.
from strata.security.sasl.plain import (  # noqa: E402
    PasswordCheck,
    PlainSaslClient,
    PlainSaslServer,
    PlainUsers,
    load_callback,
)
from strata.security.sasl.scram import ScramSaslClient, ScramSaslServer  # noqa: E402

ScramCredentials = Callable[[str], ScramCredential | None]  # username -> the credential for the mechanism


def server_mechanism(name: str, *, plain_users: PlainUsers | None = None, plain_check: PasswordCheck | None = None,
                     scram_credentials: ScramCredentials | Mapping[str, ScramCredential] | None = None,
                     reauthentication: bool = False) -> SaslServer:
    """A new server for one exchange of mechanism ``name``.

    PLAIN: ``plain_check(username, password) -> bool`` (a ``sasl.server.callback.handler.class``, see
    :func:`load_callback`) if given, else ``plain_users``, ``{user: password}`` (the JAAS ``user_<name>``
    options; a check callable is accepted there too). SCRAM: ``scram_credentials(username) -> ScramCredential |
    None`` for mechanism ``name``, or a ``{username: credential}`` mapping. ``reauthentication`` only changes the
    wording of SCRAM's invalid-credentials message (KIP-368).
    """
    if name == "PLAIN":
        users = plain_check if plain_check is not None else plain_users
        if users is None:
            raise UnsupportedSaslMechanismError("SASL mechanism PLAIN has no users: configure user_<name> options "
                                                "in its JAAS config or sasl.server.callback.handler.class")
        return PlainSaslServer(users)
    if name in SCRAM_MECHANISMS:
        if scram_credentials is None:
            raise UnsupportedSaslMechanismError(f"SASL mechanism {name} has no credential store")
        lookup = scram_credentials.get if isinstance(scram_credentials, Mapping) else scram_credentials
        return ScramSaslServer(name, lookup, reauthentication=reauthentication)
    raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {name}")


def client_mechanism(name: str, username: str, password: str) -> SaslClient:
    """A new client for one exchange (a broker authenticating to another)."""
    if name == "PLAIN":
        return PlainSaslClient(username, password)
    if name in SCRAM_MECHANISMS:
        return ScramSaslClient(name, username, password)
    raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {name}")
