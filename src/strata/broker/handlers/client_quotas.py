"""DescribeClientQuotas and AlterClientQuotas: client quotas by user and client-id (KIP-546).

Authorization (Kafka's ``handleDescribeClientQuotasRequest`` / ``handleAlterClientQuotasRequest``):
DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS to alter, else CLUSTER_AUTHORIZATION_FAILED
(for the whole request, or for every entry). A malformed filter or entity, an unknown key or a value that is
not positive is INVALID_REQUEST with Kafka's message; each AlterClientQuotas entry succeeds or fails alone.
"""

from __future__ import annotations

from typing import Any

from strata.broker.client_quotas import FilterComponent, QuotaOp
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode
from strata.quota.client import InvalidQuotaError
from strata.security.acl import AclOperation

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49


@handles(DESCRIBE_CLIENT_QUOTAS)
async def describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return ctx.respond(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                           error_message="Cluster authorization failed.", entries=None)
    store = ctx.broker.client_quotas
    if store is None:
        return ctx.respond(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="The broker is starting",
                           entries=None)
    components = [FilterComponent(c.entity_type, int(c.match_type), c.match) for c in request.components]
    try:
        entries = store.describe(components, bool(request.strict))
    except InvalidQuotaError as e:
        return ctx.respond(error_code=ErrorCode.INVALID_REQUEST, error_message=str(e), entries=None)
    return ctx.respond(error_code=ErrorCode.NONE, error_message=None, entries=entries)


@handles(ALTER_CLIENT_QUOTAS)
async def alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    entities = [[{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]
                for entry in request.entries]
    store = ctx.broker.client_quotas
    refusal = None
    if not ctx.authorize_cluster(AclOperation.ALTER_CONFIGS):
        refusal = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    elif store is None:
        refusal = (ErrorCode.COORDINATOR_NOT_AVAILABLE, "The broker is starting")
    if refusal is not None:
        return ctx.respond(entries=[{"error_code": refusal[0], "error_message": refusal[1], "entity": e}
                                    for e in entities])
    changes = [([(e.entity_type, e.entity_name) for e in entry.entity],
                [QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops]) for entry in request.entries]
    results = await store.alter(changes, bool(request.validate_only))
    return ctx.respond(entries=[{"error_code": code, "error_message": message, "entity": e}
                                for (code, message), e in zip(results, entities, strict=True)])
