"""DescribeUserScramCredentials: which SCRAM mechanisms (and iteration counts) each user has, never the keys."""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.errors import ErrorCode

DESCRIBE_USER_SCRAM_CREDENTIALS = 50


@handles(DESCRIBE_USER_SCRAM_CREDENTIALS)
async def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    store = ctx.broker.user_credentials
    users = None if request.users is None else [u.name for u in request.users]
    if store is None:
        return ctx.respond(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="The broker is starting",
                           results=[])
    return ctx.respond(error_code=ErrorCode.NONE, error_message=None, results=store.describe(users))
