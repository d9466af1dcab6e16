"""Where a broker of a cluster gets its producer id blocks: ZooKeeper, else the controller over the wire.

While this broker holds a live ZooKeeper session it advances ``/latest_producer_id_block`` itself (the
conditional write keeps blocks unique). Cut off from ZooKeeper it asks, with AllocateProducerIds (Kafka's
KIP-730 request), the controller it knows, and when that is itself or unknown, every other live broker:
only the controller answers, the others say NOT_CONTROLLER. Without this, a broker partitioned from
ZooKeeper alone could not let a new idempotent producer start (librdkafka keeps asking the broker it
talks to most), although its peers could allocate for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from strata.broker.cluster_services import ClusterView
from strata.client.async_wire import AsyncBrokerConnection
from strata.client.wire import ADMIN_CLIENT_ID, WireError
from strata.cluster.node import ClusterNode
from strata.errors import ApiError, ErrorCode

log = logging.getLogger("strata.broker.producer_ids")

ALLOCATE_PRODUCER_IDS, VERSION = 67, 0
PEER_TIMEOUT_S = 3.0
ZK_TIMEOUT_S = 5.0


class ProducerIdSource:
    def __init__(self, node: ClusterNode, view: ClusterView, node_id: int, security: Any) -> None:
        self._node = node
        self._view = view
        self._node_id = node_id
        self._security = security

    async def allocate(self) -> tuple[int, int]:
        """(first id, size) of a new block; raises when neither ZooKeeper nor a controller gives one."""
        node = self._node
        if node.leadership_confirmed:
            try:
                block = await asyncio.wait_for(node.zk.retry(node.allocate_producer_ids), ZK_TIMEOUT_S)
                return block.first_producer_id, block.size
            except (TimeoutError, ApiError, ConnectionError) as e:  # a session about to be lost: ask the peers
                log.warning("allocating producer ids in ZooKeeper failed (%s): asking the controller", e)
        controller = self._view.controller_id()
        peers = [controller] if controller not in (-1, self._node_id) else \
            [b["node_id"] for b in self._view.brokers() if b["node_id"] != self._node_id]
        last: Exception | None = None
        for peer in peers:
            try:
                return await self._ask(peer)
            except (ApiError, WireError, OSError, TimeoutError) as e:
                last = e
        raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       f"no producer id block: ZooKeeper is unreachable and no controller gave one ({last})")

    async def _ask(self, peer: int) -> tuple[int, int]:
        broker = self._view.broker(peer)
        if broker is None:
            raise ApiError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {peer} is not registered")
        conn = AsyncBrokerConnection(broker["host"], broker["port"], client_id=ADMIN_CLIENT_ID,
                                     timeout_s=PEER_TIMEOUT_S, security=self._security)
        try:
            response = await asyncio.wait_for(
                conn.call(ALLOCATE_PRODUCER_IDS, VERSION, timeout_s=PEER_TIMEOUT_S, broker_id=self._node_id,
                          broker_epoch=-1), PEER_TIMEOUT_S + 1)
        finally:
            conn.close()
        if int(response.error_code):
            raise ApiError(int(response.error_code), f"AllocateProducerIds on broker {peer}")
        log.info("producer id block %d+%d from broker %d (ZooKeeper unreachable here)",
                 response.producer_id_start, response.producer_id_len, peer)
        return int(response.producer_id_start), int(response.producer_id_len)
