"""ApiVersions: the supported set, straight from the dispatch registry (never hand-listed)."""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles, supported_versions

API_VERSIONS = 18


@handles(API_VERSIONS)
async def api_versions(ctx: RequestContext, request: Any) -> Any:
    return ctx.respond(
        error_code=0,
        api_keys=[{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in supported_versions().items()],
        throttle_time=0,
    )
