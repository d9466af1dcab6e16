"""DescribeCluster: this node is the whole cluster and its controller."""

from __future__ import annotations

from typing import Any

from strata.broker.dispatch import RequestContext, handles

DESCRIBE_CLUSTER = 60


@handles(DESCRIBE_CLUSTER)
async def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    b = ctx.broker
    return ctx.respond(
        throttle_time=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=b.cluster_id,
        controller_id=b.node_id,
        brokers=[b.broker_entry()],
        cluster_authorized_operations=-2147483648,
    )
