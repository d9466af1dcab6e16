"""Broker registration: the ephemeral ``/brokers/ids/<id>`` znode, its epoch, and ``/cluster/id``.

The znode's ``czxid`` is the broker epoch (Kafka's ``registerBroker``): a broker that comes back
with a new session gets a new one, which is how the controller tells a bounced broker from one
that never left. After ``kill -9`` and a fast restart the old session's znode lingers until the
session expires; Kafka's ``checkedEphemeralCreate`` accepts a znode owned by its own session and
otherwise fails. Strata waits for the old owner's session to expire (at most one session timeout
plus ZooKeeper's tick) before it calls the id taken: a restarted broker should not need a human.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid

from strata.cluster.zk import AsyncZk, ZkNodeExistsError
from strata.cluster.znodes import BrokerIdZNode, BrokerRegistration, ClusterIdZNode

log = logging.getLogger(__name__)


class BrokerIdConflictError(Exception):
    """Another live broker holds this broker id."""


async def register_broker(zk: AsyncZk, registration: BrokerRegistration, *, wait_s: float) -> int:
    """Create ``/brokers/ids/<id>``; returns the broker epoch (the znode's czxid).

    A znode of another session is waited out for ``wait_s`` (the old session of this broker
    expiring after a crash); past that, :class:`BrokerIdConflictError` names the holder.
    """
    path = BrokerIdZNode.path(registration.broker_id)
    data = BrokerIdZNode.encode(registration, timestamp_ms=int(time.time() * 1000))
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            await zk.create(path, data, ephemeral=True)
        except ZkNodeExistsError:
            pass
        got = await zk.get_or_none(path)
        if got is None:
            continue  # the old znode just vanished: create again
        _, stat = got
        if stat.ephemeral_owner == zk.session_id:
            return stat.czxid
        if time.monotonic() >= deadline:
            raise BrokerIdConflictError(
                f"broker.id {registration.broker_id} is registered at {path} by another live broker "
                f"(ZooKeeper session 0x{stat.ephemeral_owner:x}); give this broker another broker.id")
        if not announced:
            log.info("%s is held by ZooKeeper session 0x%x (this broker before a restart?): waiting up to %.1fs "
                     "for it to expire", path, stat.ephemeral_owner, wait_s)
            announced = True
        await asyncio.sleep(0.25)


def new_cluster_id() -> str:
    """Kafka's ``CoreUtils.generateUuidAsBase64``: 22 characters, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


async def create_or_get_cluster_id(zk: AsyncZk, proposed: str | None = None) -> str:
    """``/cluster/id``: the first broker writes it, every later one reads it (``createOrGetClusterId``)."""
    got = await zk.get_or_none(ClusterIdZNode.PATH)
    if got is not None:
        return ClusterIdZNode.decode(got[0])
    try:
        await zk.create(ClusterIdZNode.PATH, ClusterIdZNode.encode(proposed or new_cluster_id()), makepath=True)
    except ZkNodeExistsError:
        pass
    data, _ = await zk.get(ClusterIdZNode.PATH)
    return ClusterIdZNode.decode(data)
