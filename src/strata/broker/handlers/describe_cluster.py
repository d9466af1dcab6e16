"""DescribeCluster: the live brokers and the controller, from the broker's cluster view.

Admin clients (KIP-919) may ask for the controller endpoints (``endpoint_type`` 2); Strata's brokers
are their own controllers (ZooKeeper mode), so it answers with the brokers either way. The entries
use DescribeCluster's own field name (``broker_id``), not Metadata's ``node_id``.
``cluster_authorized_operations``, when asked, is the principal's cluster bitmask if it may DESCRIBE the
cluster and 0 otherwise; the request itself needs no permission (Kafka's ``AuthHelper.computeDescribeClusterResponse``).
"""

from __future__ import annotations

from typing import Any

from strata.broker.handlers.metadata import cluster_authorized_operations
from strata.broker.wire.dispatch import RequestContext, handles

DESCRIBE_CLUSTER = 60


@handles(DESCRIBE_CLUSTER)
async def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    b = ctx.broker
    return ctx.respond(
        throttle_time=0,
        error_code=0,
        error_message=None,
        endpoint_type=getattr(request, "endpoint_type", 1),
        cluster_id=b.cluster_id,
        controller_id=b.view.controller_id(),
        brokers=[{"broker_id": e["node_id"], "host": e["host"], "port": e["port"], "rack": e["rack"],
                  "is_fenced": False} for e in b.view.brokers(ctx.listener_name)],
        cluster_authorized_operations=cluster_authorized_operations(ctx, request.include_cluster_authorized_operations),
    )
