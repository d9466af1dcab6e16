"""What a broker cut off from ZooKeeper can still learn: its peers' view of the partitions it leads.

In Kafka's ZooKeeper era the controller told brokers about new leaders over the network (LeaderAndIsr,
UpdateMetadata); Strata's brokers read partition states from ZooKeeper itself. So a leader that loses
ZooKeeper, and only ZooKeeper, would keep serving a partition the controller has already given to another
replica, and keep telling clients (its Metadata answers) that it leads: acknowledgements stop until the
network heals. And it cannot simply stop leading when ZooKeeper goes quiet: with the whole ensemble down,
every broker loses ZooKeeper at once, and Kafka's leaders keep serving then (nobody can elect anybody).

The way out is to ask the peers. While the session is suspended, :class:`LeadershipProbe` sends its peers a
Metadata request for the topics it leads, once a second:

- a peer reporting a partition at a higher leader epoch proves the controller replaced this broker there
  (only the controller bumps epochs, and only through ZooKeeper): that leadership is fenced at once, and
  this broker's Metadata answers name the new leader, so clients move without waiting for the heal;
- peers answering with this broker still leading means nobody took over (ZooKeeper is down for everyone,
  or the controller has not acted yet): it keeps serving, as Kafka's leaders do;
- no peer answering for a whole session timeout means it cannot know: it presumes its session expired and
  fences every leadership (it could not commit a write anyway: its followers cannot reach it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from strata.client.async_wire import AsyncBrokerConnection, WireError
from strata.client.security import ClientSecurity
from strata.common import TopicPartition

log = logging.getLogger(__name__)

METADATA, METADATA_VERSION = 3, 12


@dataclass(frozen=True)
class PeerState:
    """A partition as a peer's Metadata answer had it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass
class ProbeResult:
    reachable: bool  # at least one peer answered
    replaced: dict[TopicPartition, PeerState] = field(default_factory=dict)


class LeadershipProbe:
    """One Metadata round to every peer: which of this broker's leaderships they saw move on."""

    def __init__(self, node_id: int, peers: Callable[[], list[tuple[int, str, int]]],
                 led: Callable[[], dict[TopicPartition, int]], security: ClientSecurity | None = None,
                 timeout_s: float = 1.0) -> None:
        """``peers``: (broker id, host, port) of the other brokers' inter-broker endpoints; ``led``: the
        partitions this broker leads, with its leader epoch of each."""
        self.node_id = node_id
        self.peers = peers
        self.led = led
        self.security = security
        self.timeout_s = timeout_s
        self._conns: dict[int, AsyncBrokerConnection] = {}

    async def probe(self) -> ProbeResult:
        led = self.led()
        peers = [p for p in self.peers() if p[0] != self.node_id]
        topics = sorted({tp.topic for tp in led})
        answers = await asyncio.gather(*(self._ask(peer, topics) for peer in peers), return_exceptions=True)
        result = ProbeResult(reachable=False)
        for answer in answers:
            if isinstance(answer, BaseException):
                continue
            result.reachable = True
            for t in answer.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    mine = led.get(tp)
                    if mine is None or p.leader_epoch <= mine or p.leader_id == self.node_id:
                        continue
                    seen = result.replaced.get(tp)
                    if seen is None or p.leader_epoch > seen.leader_epoch:
                        result.replaced[tp] = PeerState(p.leader_id, p.leader_epoch, tuple(p.isr_nodes))
        return result

    async def _ask(self, peer: tuple[int, str, int], topics: list[str]) -> object:
        broker_id, host, port = peer
        conn = self._conns.get(broker_id)
        if conn is None or (conn.host, conn.port) != (host, port):
            if conn is not None:
                conn.close()
            conn = self._conns[broker_id] = AsyncBrokerConnection(
                host, port, client_id=f"broker-{self.node_id}-leadership-probe", timeout_s=self.timeout_s,
                security=self.security)
        try:
            return await conn.call(METADATA, METADATA_VERSION, timeout_s=self.timeout_s,
                                   topics=[{"name": t, "topic_id": None} for t in topics],
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        except WireError as e:
            log.debug("leadership probe of broker %d: %s", broker_id, e)
            raise

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
