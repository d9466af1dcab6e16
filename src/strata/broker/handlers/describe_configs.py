"""DescribeConfigs: TOPIC and BROKER resources, with Kafka's sources, synonyms and types.

The rules live in :mod:`strata.broker.config_views`; this handler only walks the resources. A BROKER
resource is this broker's every key (``"<id>"``, dynamic values included) or the cluster-wide dynamic
defaults (``""``: only the keys set there), as in Kafka's ``ConfigHelper``. Each resource fails on its
own (unknown topic, another broker's id, an unsupported resource type) with an empty config list, as
in Kafka's ``ConfigHelper.describeConfigs``.

Authorization (Kafka's ``ConfigHelper.handleDescribeConfigsRequest``): DESCRIBE_CONFIGS on the topic for a
TOPIC resource (TOPIC_AUTHORIZATION_FAILED), on the group for a GROUP resource (GROUP_AUTHORIZATION_FAILED), on
the cluster for BROKER, BROKER_LOGGER and CLIENT_METRICS resources (CLUSTER_AUTHORIZATION_FAILED), each resource
on its own and before its existence.
"""

from __future__ import annotations

from typing import Any

from strata.broker.config_views import ConfigViews, ResourceType, describe_resource
from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation
from strata.security.acl import ResourceType as AclResourceType

DESCRIBE_CONFIGS = 32
CLUSTER_RESOURCES = frozenset({ResourceType.BROKER, ResourceType.BROKER_LOGGER, ResourceType.CLIENT_METRICS})


def config_authorization_error(ctx: RequestContext, operation: AclOperation, resource_type: int,
                               resource_name: str) -> tuple[int, str] | None:
    """(code, message) when the principal may not do ``operation`` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on a
    config resource: the topic for TOPIC, the cluster for broker-wide types; None when it may (or when the type
    is one Kafka has no rule for: the handler refuses that on its own)."""
    if resource_type == ResourceType.TOPIC:
        if not ctx.authorize(operation, AclResourceType.TOPIC, resource_name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
    elif resource_type in CLUSTER_RESOURCES:
        if not ctx.authorize_cluster(operation):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    elif resource_type == ResourceType.GROUP:
        if not ctx.authorize(operation, AclResourceType.GROUP, resource_name):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
    return None


@handles(DESCRIBE_CONFIGS)
async def describe_configs(ctx: RequestContext, request: Any) -> Any:
    include_synonyms = getattr(request, "include_synonyms", False)
    include_documentation = getattr(request, "include_documentation", False)
    views = ConfigViews(ctx.broker.config)
    checking = ctx.broker.authorization.enabled
    results = []
    for r in request.resources:
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                                 "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
        refused = checking and config_authorization_error(ctx, AclOperation.DESCRIBE_CONFIGS, r.resource_type,
                                                          r.resource_name)
        if refused:
            entry.update(error_code=refused[0], error_message=refused[1])
            results.append(entry)
            continue
        try:
            found = describe_resource(ctx.broker, views, r.resource_type, r.resource_name, r.configuration_keys)
        except KafkaError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
        else:
            entry["configs"] = [v.describe_entry(include_synonyms, include_documentation) for v in found]
        results.append(entry)
    return ctx.respond(throttle_time=0, results=results)
