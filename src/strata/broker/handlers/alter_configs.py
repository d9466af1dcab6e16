"""AlterConfigs (legacy): each resource's entries become its whole set of dynamic configs.

For a TOPIC that is its override set; for a BROKER (``"<id>"`` this broker, ``""`` the cluster-wide
default) its dynamic broker configs (:mod:`strata.broker.dynamic_config`). Keys left out of the
request go back to what is below them (the broker default, the static config), which is why clients
moved to IncrementalAlterConfigs; the semantics are kept exactly because old tools still rely on
them. Each resource is validated in full before anything is written and fails on its own; a
resource named twice fails both times; known broker keys that cannot change at run time are refused with
Kafka's "Cannot update these configs dynamically: Set(...)", while a name that is no broker config is stored
as a custom config (Kafka's ``customPropsAllowed``; :mod:`strata.broker.dynamic_config`). Rules:
:mod:`strata.broker.config_views`.

Authorization (Kafka's ``processLegacyAlterConfigsRequest`` / ``processIncrementalAlterConfigsRequest``):
ALTER_CONFIGS on the topic for a TOPIC resource (TOPIC_AUTHORIZATION_FAILED), on the cluster for BROKER,
BROKER_LOGGER and CLIENT_METRICS (CLUSTER_AUTHORIZATION_FAILED), per resource, after the duplicate check and
before any validation of the changes.
"""

from __future__ import annotations

from typing import Any

from strata.broker.config_views import ConfigChange, ResourceType, alter_resource, duplicate_resources
from strata.broker.handlers.describe_configs import config_authorization_error
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation

ALTER_CONFIGS = 33


async def alter(ctx: RequestContext, request: Any, *, incremental: bool) -> Any:
    """Shared by AlterConfigs and IncrementalAlterConfigs: one answer per resource, in request order."""
    dupes = duplicate_resources(request.resources)
    checking = ctx.broker.authorization.enabled
    responses = []
    for r in request.resources:
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                                 "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            if (r.resource_type, r.resource_name) in dupes:
                entry.update(error_code=ErrorCode.INVALID_REQUEST,
                             error_message="Each resource must appear at most once.")
            elif checking and (incremental or r.resource_type != ResourceType.BROKER_LOGGER) and (
                    refused := config_authorization_error(ctx, AclOperation.ALTER_CONFIGS, r.resource_type,
                                                          r.resource_name)):  # legacy: BROKER_LOGGER is invalid
                entry["error_code"] = refused[0]  # no message, as in Kafka (configsAuthorizationApiError)
            else:
                changes = [ConfigChange(c.name, c.value, getattr(c, "config_operation", 0)) for c in r.configs]
                await alter_resource(ctx.broker, r.resource_type, r.resource_name, changes, incremental=incremental,
                                     validate_only=request.validate_only)
        except KafkaError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
        responses.append(entry)
    return ctx.respond(throttle_time=0, responses=responses)


@handles(ALTER_CONFIGS)
async def alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await alter(ctx, request, incremental=False)
