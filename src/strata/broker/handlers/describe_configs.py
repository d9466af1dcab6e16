"""DescribeConfigs: TOPIC and BROKER resources, with Kafka's sources, synonyms and types.

The rules live in :mod:`strata.broker.config_views`; this handler only walks the resources. A BROKER
resource is this broker's every key (``"<id>"``, dynamic values included) or the cluster-wide dynamic
defaults (``""``: only the keys set there), as in Kafka's ``ConfigHelper``. Each resource fails on its
own (unknown topic, another broker's id, an unsupported resource type) with an empty config list, as
in Kafka's ``ConfigHelper.describeConfigs``.
"""

from __future__ import annotations

from typing import Any

from strata.broker.config_views import ConfigViews, describe_resource
from strata.broker.dispatch import RequestContext, handles
from strata.errors import ErrorCode, KafkaError

DESCRIBE_CONFIGS = 32


@handles(DESCRIBE_CONFIGS)
async def describe_configs(ctx: RequestContext, request: Any) -> Any:
    include_synonyms = getattr(request, "include_synonyms", False)
    include_documentation = getattr(request, "include_documentation", False)
    views = ConfigViews(ctx.broker.config)
    results = []
    for r in request.resources:
        entry: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                                 "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
        try:
            found = describe_resource(ctx.broker, views, r.resource_type, r.resource_name, r.configuration_keys)
        except KafkaError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
        else:
            entry["configs"] = [v.describe_entry(include_synonyms, include_documentation) for v in found]
        results.append(entry)
    return ctx.respond(throttle_time=0, results=results)
