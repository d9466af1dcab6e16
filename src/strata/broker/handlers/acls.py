"""CreateAcls, DescribeAcls, DeleteAcls (``kafka-acls``, ``AdminClient.create_acls``): Kafka's semantics and errors.

CreateAcls and DeleteAcls need ALTER on the cluster, DescribeAcls DESCRIBE; without an authorizer configured
all three answer SECURITY_DISABLED. Bindings with ANY/MATCH/UNKNOWN parts are refused with INVALID_REQUEST and
Kafka's messages (:func:`strata.security.acl.creation_error`); a DeleteAcls filter reports the bindings it
removed, each under the first filter that matched it.
"""

from __future__ import annotations

from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ApiError, ErrorCode
from strata.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.from_code(f.resource_type_filter), f.resource_name_filter,
                              PatternType.from_code(f.pattern_type_filter)),
        AccessControlEntryFilter(f.principal_filter, f.host_filter, AclOperation.from_code(f.operation),
                                 AclPermissionType.from_code(f.permission_type)))


@handles(DESCRIBE_ACLS)
async def describe_acls(ctx: RequestContext, request: Any) -> Any:
    authz = ctx.broker.authorization
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ctx.respond(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                           error_message="Cluster authorization failed.", resources=[])
    try:
        bindings = authz.describe(_filter(request))
    except ApiError as e:
        return ctx.respond(error_code=e.error_code, error_message=str(e), resources=[])
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    resources = [{"resource_type": p.resource_type, "resource_name": p.name, "pattern_type": p.pattern_type,
                  "acls": [{"principal": e.principal, "host": e.host, "operation": e.operation,
                            "permission_type": e.permission_type} for e in sorted(entries, key=lambda e: e.sort_key())]}
                 for p, entries in sorted(by_pattern.items(), key=lambda kv: kv[0].sort_key())]
    return ctx.respond(error_code=ErrorCode.NONE, error_message=None, resources=resources)


@handles(CREATE_ACLS)
async def create_acls(ctx: RequestContext, request: Any) -> Any:
    creations = list(request.creations)

    def every(code: int, message: str) -> Any:
        return ctx.respond(results=[{"error_code": code, "error_message": message} for _ in creations])

    if not ctx.authorize_cluster(AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    bindings = [AclBinding(ResourcePattern(ResourceType.from_code(c.resource_type), c.resource_name,
                                           PatternType.from_code(c.resource_pattern_type)),
                           AccessControlEntry(c.principal, c.host, AclOperation.from_code(c.operation),
                                              AclPermissionType.from_code(c.permission_type)))
                for c in creations]
    try:
        results = await ctx.broker.authorization.create(bindings)
    except ApiError as e:
        return every(e.error_code, str(e))
    return ctx.respond(results=[{"error_code": ErrorCode.NONE if r is None else r.error_code,
                                 "error_message": None if r is None else str(r)} for r in results])


@handles(DELETE_ACLS)
async def delete_acls(ctx: RequestContext, request: Any) -> Any:
    filters = list(request.filters)

    def every(code: int, message: str) -> Any:
        return ctx.respond(filter_results=[{"error_code": code, "error_message": message, "matching_acls": []}
                                           for _ in filters])

    if not ctx.authorize_cluster(AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    try:
        results = await ctx.broker.authorization.delete([_filter(f) for f in filters])
    except ApiError as e:
        return every(e.error_code, str(e))
    out = []
    for r in results:
        if r.error is not None:
            out.append({"error_code": r.error.error_code, "error_message": str(r.error), "matching_acls": []})
            continue
        be = r.binding_error
        out.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.NONE if be is None else be.error_code,
             "error_message": None if be is None else str(be),
             "resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
             "pattern_type": b.pattern.pattern_type, "principal": b.entry.principal, "host": b.entry.host,
             "operation": b.entry.operation, "permission_type": b.entry.permission_type} for b in r.bindings]})
    return ctx.respond(filter_results=out)
