"""``LeaderProducer``: a broker's own writes to an internal partition led by another broker.

The diskless coordinator's commands go to ``__diskless_metadata`` through its leader: a Produce with
acks=all on the inter-broker listener, under the admin client id the produce handler lets write internal
topics (as the RLMM writes ``__remote_log_metadata``). One connection per leader, one request at a time;
a connection that failed is dropped and the next call looks the leader up again, so a moved leadership
costs one retriable error.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from strata.broker.cluster_services import ClusterView
from strata.client.async_wire import AsyncBrokerConnection
from strata.client.wire import ADMIN_CLIENT_ID, WireError
from strata.errors import ApiError, ErrorCode

PRODUCE, PRODUCE_VERSION = 0, 9
REQUEST_TIMEOUT_S = 30.0


class LeaderProducer:
    def __init__(self, view: ClusterView, topic: str, partition: int, security: Any) -> None:
        self._view = view
        self._topic = topic
        self._partition = partition
        self._security = security
        self._conns: dict[int, tuple[AsyncBrokerConnection, asyncio.Lock]] = {}

    async def append(self, batch: bytes) -> int:
        """Append ``batch`` through the partition's leader; the offset of its first record."""
        leader = self._view.partition(self._topic, self._partition).leader
        broker = self._view.broker(leader) if leader >= 0 else None
        if broker is None:
            raise ApiError(ErrorCode.LEADER_NOT_AVAILABLE, f"{self._topic}-{self._partition} has no leader")
        entry = self._conns.get(leader)
        if entry is None or (entry[0].host, entry[0].port) != (broker["host"], broker["port"]):
            conn = AsyncBrokerConnection(broker["host"], broker["port"], client_id=ADMIN_CLIENT_ID,
                                         timeout_s=REQUEST_TIMEOUT_S, security=self._security)
            entry = self._conns[leader] = (conn, asyncio.Lock())
        conn, lock = entry
        try:
            async with lock:
                response = await conn.call(
                    PRODUCE, PRODUCE_VERSION, timeout_s=REQUEST_TIMEOUT_S + 5, transactional_id=None, acks=-1,
                    timeout=timedelta(seconds=REQUEST_TIMEOUT_S),
                    topic_data=[{"name": self._topic,
                                 "partition_data": [{"index": self._partition, "records": batch}]}])
        except (WireError, OSError, TimeoutError) as e:
            self._conns.pop(leader, None)
            conn.close()
            raise ApiError(ErrorCode.NETWORK_EXCEPTION, f"produce to {self._topic}-{self._partition} on broker "
                           f"{leader} failed: {e}") from e
        p = response.responses[0].partition_responses[0]
        if int(p.error_code):
            raise ApiError(int(p.error_code), f"produce to {self._topic}-{self._partition} on broker {leader}: "
                           f"{ErrorCode(int(p.error_code)).name}")
        return int(p.base_offset)

    def close(self) -> None:
        for conn, _ in self._conns.values():
            conn.close()
        self._conns.clear()
