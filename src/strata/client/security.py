"""How this broker's own connections to other brokers authenticate: TLS and SASL on the client side.

Replica fetchers, transaction markers and the remote-log-metadata client connect to the
``inter.broker.listener.name`` listener of their peers with that listener's protocol: TLS with the
listener's keystore (presented to the peer) and truststore, then, on a SASL listener,
SaslHandshake v1 and SaslAuthenticate with ``sasl.mechanism.inter.broker.protocol`` and the
``username``/``password`` of the listener's JAAS config for that mechanism (Kafka's broker login).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from strata.security.sasl import client_mechanism

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class AuthenticationFailed(Exception):
    """The peer refused this broker's login (wrong inter-broker credentials, mechanism not enabled)."""


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


Call = Callable[..., Awaitable[Any]]


async def sasl_login(security: ClientSecurity, call: Call) -> None:
    """SaslHandshake v1 + SaslAuthenticate rounds over an open connection; AuthenticationFailed if refused."""
    if security.sasl_mechanism is None:
        return
    mechanism = security.sasl_mechanism
    handshake = await call(SASL_HANDSHAKE, 1, mechanism=mechanism)
    if handshake.error_code != 0:
        raise AuthenticationFailed(f"SASL mechanism {mechanism} refused (error {handshake.error_code}); the peer "
                                   f"offers {list(handshake.mechanisms)}")
    client = client_mechanism(mechanism, security.username or "", security.password or "")
    token: bytes | None = client.initial_response()
    while token is not None:
        answer = await call(SASL_AUTHENTICATE, 2, auth_bytes=token)
        if answer.error_code != 0:
            raise AuthenticationFailed(f"SASL {mechanism} login as {security.username!r} failed: "
                                       f"{answer.error_message or answer.error_code}")
        token = client.evaluate_challenge(bytes(answer.auth_bytes))
        if client.is_complete:
            break
