"""AllocateProducerIds (KIP-730): a broker asks the controller for a block of producer ids.

Kafka's brokers in ZooKeeper mode (IBP 3.0+) get their blocks this way, from the controller, which
advances ``/latest_producer_id_block``. Strata's brokers allocate from ZooKeeper themselves while they
reach it, and ask the controller with this request when they do not: a broker cut off from ZooKeeper but
not from its peers keeps serving InitProducerId. Needs CLUSTER_ACTION; any broker but the controller
answers NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strata.broker.wire.dispatch import RequestContext, handles
from strata.errors import ErrorCode, KafkaError
from strata.security.acl import AclOperation

ALLOCATE_PRODUCER_IDS = 67
ALLOCATION_TIMEOUT_S = 10.0


@handles(ALLOCATE_PRODUCER_IDS)
async def allocate_producer_ids(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker

    def answer(code: int, start: int = -1, length: int = 0) -> Any:
        return ctx.respond(throttle_time=0, error_code=code, producer_id_start=start, producer_id_len=length)

    if broker.authorization.enabled and not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    cluster = broker.cluster
    if cluster is None or broker.view.controller_id() != broker.node_id or not cluster.leadership_confirmed:
        return answer(ErrorCode.NOT_CONTROLLER)
    try:
        block = await asyncio.wait_for(cluster.zk.retry(cluster.allocate_producer_ids), ALLOCATION_TIMEOUT_S)
    except TimeoutError:
        return answer(ErrorCode.REQUEST_TIMED_OUT)
    except KafkaError as e:
        return answer(e.error_code)
    return answer(ErrorCode.NONE, block.first_producer_id, block.size)
