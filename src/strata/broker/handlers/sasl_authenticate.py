"""SaslAuthenticate: one token of the SASL exchange started by SaslHandshake v1.

A failed login answers SASL_AUTHENTICATION_FAILED with the mechanism's message (the same whether the user
or the password was wrong) and closes the connection after ``connection.failed.authentication.delay.ms``.
v1+ answers carry the session lifetime (KIP-368, ``connections.max.reauth.ms``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from strata.broker.wire.authentication import log_failure
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.security.sasl import IllegalSaslStateError, SaslAuthenticationError

SASL_AUTHENTICATE = 36


@handles(SASL_AUTHENTICATE)
async def sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    session = ctx.session
    state = session.sasl if session is not None else None
    if session is None or state is None or state.server is None or state.handshake_version < 1:
        if session is not None:
            session.close_after_send_s = 0.0
        return ctx.respond(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                           error_message="Unexpected SaslAuthenticate request: no SASL handshake in progress",
                           auth_bytes=b"", session_lifetime=timedelta(0))
    try:
        challenge, principal = state.authenticate(bytes(request.auth_bytes), session.principal)
    except SaslAuthenticationError as e:
        log_failure(session, state.mechanism, e.detail or str(e))
        session.close_after_send_s = state.failure_delay_ms / 1000
        code = ErrorCode.ILLEGAL_SASL_STATE if isinstance(e, IllegalSaslStateError) \
            else ErrorCode.SASL_AUTHENTICATION_FAILED
        return ctx.respond(error_code=code, error_message=str(e), auth_bytes=b"", session_lifetime=timedelta(0))
    state.authenticate_version = ctx.version
    if principal is not None:
        session.principal = principal
    lifetime_ms = state.session_lifetime_ms() if principal is not None else 0
    return ctx.respond(error_code=ErrorCode.NONE, error_message=None, auth_bytes=challenge,
                       session_lifetime=timedelta(milliseconds=lifetime_ms))
