"""The share-partition leader's ``Persister`` (Kafka's ``DefaultStatePersister``): the five share-state
operations, answered by the share coordinator that owns the key.

The owner is the leader of ``__share_group_state``'s partition for ``group:topicId:partition``. When that is
this broker (always on a single node), the coordinator is called in-process; otherwise the inter-broker RPC
(API 83-87) goes to the leader over the inter-broker listener. A missing topic is created first, as Kafka's
FindCoordinator with key type 2 does. Failures are answered as error codes the callers already handle
(COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR: retriable), never raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from strata.client.async_wire import AsyncBrokerConnection
from strata.client.wire import ADMIN_CLIENT_ID, WireError
from strata.coordinator.share.coordinator import SHARE_GROUP_STATE_TOPIC, ReadResult, SummaryResult
from strata.coordinator.share.records import StateBatch
from strata.errors import ErrorCode

if TYPE_CHECKING:
    from strata.broker.cluster_services import ClusterView
    from strata.coordinator.share.coordinator import ShareCoordinator

log = logging.getLogger("strata.share")

INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = 83, 84, 85, 86, 87
REQUEST_TIMEOUT_S = 15.0
_UNREACHABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE


class PeerConnections:
    """One connection per peer broker, one request at a time on each; a failed connection is dropped so the
    next call reconnects (to wherever the peer's registration now points)."""

    def __init__(self, view: ClusterView, security: Any, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._view = view
        self._security = security
        self._timeout_s = timeout_s
        self._conns: dict[int, tuple[AsyncBrokerConnection, asyncio.Lock]] = {}

    async def call(self, broker_id: int, api_key: int, version: int, **fields: Any) -> Any:
        """The decoded response; WireError when the peer is unknown or the call failed."""
        broker = self._view.broker(broker_id)
        if broker is None:
            raise WireError(f"broker {broker_id} is not registered")
        entry = self._conns.get(broker_id)
        if entry is None or (entry[0].host, entry[0].port) != (broker["host"], broker["port"]):
            if entry is not None:
                entry[0].close()
            conn = AsyncBrokerConnection(broker["host"], broker["port"], client_id=ADMIN_CLIENT_ID,
                                         timeout_s=self._timeout_s, security=self._security)
            entry = self._conns[broker_id] = (conn, asyncio.Lock())
        conn, lock = entry
        try:
            async with lock:
                return await conn.call(api_key, version, timeout_s=self._timeout_s + 5, **fields)
        except (WireError, OSError, TimeoutError) as e:
            self._conns.pop(broker_id, None)
            conn.close()
            raise WireError(f"broker {broker_id}: {e}") from e

    def close(self) -> None:
        for conn, _ in self._conns.values():
            conn.close()
        self._conns.clear()


class SharePersister:
    """Initialize / Read / Write / Delete / ReadSummary of one share-partition's state, wherever it lives."""

    def __init__(self, coordinator: ShareCoordinator, view: ClusterView, node_id: int, security: Any) -> None:
        self._coordinator = coordinator
        self._view = view
        self._node_id = node_id
        self._peers = PeerConnections(view, security)

    def close(self) -> None:
        self._peers.close()

    async def _owner(self, group_id: str, topic_id: UUID, partition: int) -> tuple[int, int]:
        """(state partition, leader broker id): -1 as the leader when there is none (yet)."""
        if not await self._coordinator.ensure_topic():
            return -1, -1
        p = self._coordinator.partition_for(group_id, topic_id, partition)
        return p, self._view.partition(SHARE_GROUP_STATE_TOPIC, p).leader

    async def _remote(self, leader: int, api_key: int, version: int, group_id: str, topic_id: UUID,
                      partition_data: dict[str, Any]) -> Any | int:
        """One partition's result of an RPC to ``leader``, or an error code when the call failed."""
        if leader < 0:
            return _UNREACHABLE
        try:
            response = await self._peers.call(leader, api_key, version, group_id=group_id,
                                              topics=[{"topic_id": topic_id, "partitions": [partition_data]}])
        except WireError as e:
            log.debug("share-state call %d to broker %d failed: %s", api_key, leader, e)
            return _UNREACHABLE
        for result in response.results:
            for p in result.partitions:
                return p
        return _UNREACHABLE

    async def initialize(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int,
                         start_offset: int) -> int:
        _, leader = await self._owner(group_id, topic_id, partition)
        if leader == self._node_id:
            return await self._coordinator.initialize(group_id, topic_id, partition, state_epoch, start_offset)
        p = await self._remote(leader, INITIALIZE, 0, group_id, topic_id, {
            "partition": partition, "state_epoch": state_epoch, "start_offset": start_offset})
        return p if isinstance(p, int) else int(p.error_code)

    async def read(self, group_id: str, topic_id: UUID, partition: int, leader_epoch: int) -> ReadResult:
        _, leader = await self._owner(group_id, topic_id, partition)
        if leader == self._node_id:
            return await self._coordinator.read(group_id, topic_id, partition, leader_epoch)
        p = await self._remote(leader, READ, 0, group_id, topic_id,
                               {"partition": partition, "leader_epoch": leader_epoch})
        if isinstance(p, int):
            return ReadResult(p)
        if int(p.error_code):
            return ReadResult(int(p.error_code))
        return ReadResult(ErrorCode.NONE, int(p.state_epoch), int(p.start_offset), tuple(
            StateBatch(int(b.first_offset), int(b.last_offset), int(b.delivery_state), int(b.delivery_count))
            for b in p.state_batches))

    async def write(self, group_id: str, topic_id: UUID, partition: int, state_epoch: int, leader_epoch: int,
                    start_offset: int, delivery_complete_count: int, batches: Sequence[StateBatch]) -> int:
        _, leader = await self._owner(group_id, topic_id, partition)
        if leader == self._node_id:
            return await self._coordinator.write(group_id, topic_id, partition, state_epoch, leader_epoch,
                                                 start_offset, delivery_complete_count, batches)
        p = await self._remote(leader, WRITE, 1, group_id, topic_id, {
            "partition": partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
            "start_offset": start_offset, "delivery_complete_count": delivery_complete_count,
            "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                               "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                              for b in batches]})
        return p if isinstance(p, int) else int(p.error_code)

    async def delete(self, group_id: str, topic_id: UUID, partition: int) -> int:
        _, leader = await self._owner(group_id, topic_id, partition)
        if leader == self._node_id:
            return await self._coordinator.delete(group_id, topic_id, partition)
        p = await self._remote(leader, DELETE, 0, group_id, topic_id, {"partition": partition})
        return p if isinstance(p, int) else int(p.error_code)

    async def read_summary(self, group_id: str, topic_id: UUID, partition: int) -> SummaryResult:
        _, leader = await self._owner(group_id, topic_id, partition)
        if leader == self._node_id:
            return await self._coordinator.read_summary(group_id, topic_id, partition)
        p = await self._remote(leader, READ_SUMMARY, 1, group_id, topic_id,
                               {"partition": partition, "leader_epoch": -1})
        if isinstance(p, int):
            return SummaryResult(p)
        if int(p.error_code):
            return SummaryResult(int(p.error_code))
        return SummaryResult(ErrorCode.NONE, int(p.state_epoch), int(p.leader_epoch), int(p.start_offset),
                             int(p.delivery_complete_count))
