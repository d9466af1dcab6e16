"""FindCoordinator: this broker coordinates every group; there is no transaction coordinator yet.

v0-v3 ask for one key, v4+ for a batch (``coordinator_keys``). Key type 0 (group) answers with this
broker; key type 1 (transaction) and 2 (share group) get COORDINATOR_NOT_AVAILABLE, which clients
treat as "retry later" rather than as a fatal error; other key types are INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles
from strata.broker.group.api import manager_of
from strata.errors import ErrorCode

FIND_COORDINATOR = 10
GROUP_KEY = 0
TRANSACTION_KEY = 1
SHARE_KEY = 2


def _lookup(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    code: int = ErrorCode.NONE
    message = None
    if key_type == GROUP_KEY:
        if manager_of(ctx) is None:
            code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "The group coordinator is not available."
    elif key_type in (TRANSACTION_KEY, SHARE_KEY):
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        message = "This broker has no transaction coordinator." if key_type == TRANSACTION_KEY \
            else "This broker has no share coordinator."
    else:
        code, message = ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}"
    if code:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}
    entry = ctx.broker.broker_entry()
    return {"key": key, "node_id": entry["node_id"], "host": entry["host"], "port": entry["port"],
            "error_code": ErrorCode.NONE, "error_message": None}


@handles(FIND_COORDINATOR)
async def find_coordinator(ctx: RequestContext, request: Any) -> Any:
    key_type = getattr(request, "key_type", GROUP_KEY)
    if ctx.version >= 4:
        return ctx.respond(throttle_time=0,
                           coordinators=[_lookup(ctx, key_type, key) for key in request.coordinator_keys])
    found = _lookup(ctx, key_type, request.key)
    del found["key"]
    return ctx.respond(throttle_time=0, **found)
