"""Who is on the other end of a connection: Kafka's channel authentication, per listener.

A PLAINTEXT connection is ``User:ANONYMOUS``; an SSL one is the client certificate's distinguished name
through ``ssl.principal.mapping.rules`` (``User:ANONYMOUS`` without a certificate); a SASL one is the
user its mechanism authenticated. SASL follows Kafka's ``SaslServerAuthenticator``:

- Before authentication a SASL connection may send ApiVersions, then SaslHandshake (the mechanism), then
  the mechanism's tokens, in SaslAuthenticate requests after a v1 handshake or as bare size-prefixed
  frames after a v0 one (pre-KIP-152 clients). Any other request closes the connection. Frames before
  authentication are limited to ``sasl.server.max.receive.size`` (512 KiB): an unauthenticated peer
  cannot make the broker hold a ``socket.request.max.bytes`` buffer.
- A failed login is answered with SASL_AUTHENTICATION_FAILED and a message that never says whether the
  user or the password was wrong, and the connection is closed after
  ``connection.failed.authentication.delay.ms`` (a password guesser gets one try per connection, slowly).
- KIP-368: with ``connections.max.reauth.ms`` the SaslAuthenticate v1+ answer carries the session
  lifetime; the client re-authenticates on the same connection (SaslHandshake + SaslAuthenticate again,
  same mechanism, same principal) before it ends, and a request after the end closes the connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strata.config.security_config import ListenerConfig, listener_value
from strata.errors import ErrorCode, InvalidConfigError
from strata.security.sasl import SaslAuthenticationError, SaslServer, server_mechanism
from strata.security.sasl.jaas import parse_jaas_config
from strata.security.sasl.plain import load_callback
from strata.security.scram_credentials import ScramCredential

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"
SASL_MAX_RECEIVE_SIZE = 512 * 1024  # Kafka's sasl.server.max.receive.size default
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

ScramLookup = Callable[[str, str], "ScramCredential | None"]  # (user, mechanism) -> credential


class SaslMechanisms:
    """The SASL servers one listener can start: its enabled mechanisms and where their users are.

    PLAIN checks passwords against the ``user_<name>`` options of the listener's PLAIN JAAS config
    (``listener.name.<l>.plain.sasl.jaas.config``) or a ``sasl.server.callback.handler.class`` given as
    ``module:callable``; SCRAM looks up the credentials AlterUserScramCredentials stored.
    """

    def __init__(self, listener: ListenerConfig, props: Mapping[str, Any], scram: ScramLookup) -> None:
        self.listener = listener.name
        self.mechanisms = listener.sasl_mechanisms
        self._scram = scram
        self._plain_users: dict[str, str] | None = None
        self._plain_check: Callable[[str, str], bool] | None = None
        if "PLAIN" in self.mechanisms:
            callback = listener_value(props, listener.name, "plain.sasl.server.callback.handler.class") or \
                listener_value(props, listener.name, "sasl.server.callback.handler.class")
            if callback:
                self._plain_check = load_callback(str(callback))
            else:
                jaas = listener_value(props, listener.name, "plain.sasl.jaas.config") or props.get("sasl.jaas.config")
                users = parse_jaas_config(str(jaas)).plain_users() if jaas else {}
                if not users:
                    raise InvalidConfigError(
                        f"SASL mechanism PLAIN on listener {listener.name} has no users: set "
                        f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config to a PlainLoginModule with "
                        'user_<name>="<password>" options, or a sasl.server.callback.handler.class')
                self._plain_users = users

    def create(self, mechanism: str, reauthentication: bool = False) -> SaslServer:
        if mechanism == "PLAIN":
            return server_mechanism("PLAIN", plain_users=self._plain_users, plain_check=self._plain_check)
        scram = self._scram
        return server_mechanism(mechanism, scram_credentials=lambda user: scram(user, mechanism),
                                reauthentication=reauthentication)


@dataclass
class Session:
    """One connection's security state: its listener, its peer and who it authenticated as."""

    listener: ListenerConfig
    peer: str
    principal: str = ANONYMOUS
    sasl: SaslState | None = None
    close_after_send_s: float | None = None  # set by a failed login: close this long after the answer

    @property
    def client_host(self) -> str:
        return self.peer.rsplit(":", 1)[0]

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or self.sasl.authenticated


@dataclass
class SaslState:
    """Kafka's SaslServerAuthenticator states, the mechanism in progress and the session's deadline."""

    mechanisms: SaslMechanisms
    reauth_ms: int
    failure_delay_ms: int
    authenticated: bool = False
    handshake_version: int = -1  # of the handshake in progress, -1: none yet
    mechanism: str | None = None  # of the session (re-authentication must keep it)
    server: SaslServer | None = field(default=None, repr=False)
    expires_at: float | None = None  # time.monotonic() when the session ends (KIP-368)
    authenticate_version: int = 0

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def allows(self, api_key: int) -> bool:
        """May a request of ``api_key`` come now? Before authentication only the SASL exchange may."""
        if self.authenticated and self.server is None:
            return True
        if self.server is not None:  # mid-exchange: only tokens
            return api_key == SASL_AUTHENTICATE
        return api_key in (API_VERSIONS, SASL_HANDSHAKE)

    def handshake(self, mechanism: str, version: int) -> int:
        """SaslHandshake: start ``mechanism``; an error code (the connection is then closed)."""
        if self.server is not None:
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms.mechanisms:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        if self.authenticated and mechanism != self.mechanism:
            return ErrorCode.ILLEGAL_SASL_STATE  # KIP-368: re-authentication keeps the mechanism
        self.server = self.mechanisms.create(mechanism, reauthentication=self.authenticated)
        self.handshake_version = version
        if not self.authenticated:
            self.mechanism = mechanism
        return ErrorCode.NONE

    def authenticate(self, token: bytes, principal: str) -> tuple[bytes, str | None]:
        """One token of the exchange: the challenge, and the principal once complete.

        Raises SaslAuthenticationError on a failed login (and on a re-authentication as someone else).
        """
        server = self.server
        if server is None:
            raise SaslAuthenticationError("SaslAuthenticate before SaslHandshake")
        try:
            challenge = server.evaluate_response(token)
        except SaslAuthenticationError:
            self.server = None
            raise
        if not server.is_complete:
            return challenge, None
        self.server = None
        who = f"User:{server.authorization_id}"
        if self.authenticated and who != principal:
            raise SaslAuthenticationError("Cannot change principals during re-authentication from "
                                          f"{principal}: {who}")
        self.authenticated = True
        self.expires_at = time.monotonic() + self.reauth_ms / 1000 if self.reauth_ms > 0 else None
        return challenge, who

    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ reports: the ms left until re-authentication is due, 0 for never."""
        if self.expires_at is None:
            return 0
        return max(1, int((self.expires_at - time.monotonic()) * 1000))


def new_session(listener: ListenerConfig, peer: str, mechanisms: SaslMechanisms | None, reauth_ms: int,
                failure_delay_ms: int) -> Session:
    session = Session(listener, peer)
    if listener.uses_sasl:
        assert mechanisms is not None
        session.sasl = SaslState(mechanisms, reauth_ms, failure_delay_ms)
    return session


def log_failure(session: Session, mechanism: str | None, reason: str) -> None:
    """Failed logins are logged at INFO with the peer and mechanism (never the password)."""
    log.info("failed authentication with %s (listener %s, mechanism %s): %s", session.peer, session.listener.name,
             mechanism, reason)
