"""SaslHandshake: pick the SASL mechanism of a SASL listener's connection (Kafka's SaslServerAuthenticator).

v0: the mechanism's tokens follow as bare frames; v1: in SaslAuthenticate requests. An unknown
mechanism is answered with UNSUPPORTED_SASL_MECHANISM and the enabled ones, then the connection closes.
On a listener without SASL the request is ILLEGAL_SASL_STATE (Kafka's KafkaApis answer).
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.authentication import log_failure
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode

SASL_HANDSHAKE = 17


@handles(SASL_HANDSHAKE)
async def sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    session = ctx.session
    state = session.sasl if session is not None else None
    if state is None:
        return ctx.respond(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    code = state.handshake(request.mechanism, ctx.version)
    if code != ErrorCode.NONE:
        assert session is not None
        log_failure(session, request.mechanism, f"SaslHandshake answered {ErrorCode(code).name}")
        session.close_after_send_s = 0.0
    return ctx.respond(error_code=code, mechanisms=list(state.mechanisms.mechanisms))
