"""Dynamic broker configs in ZooKeeper: ``/config/brokers/<id>`` and ``/config/brokers/<default>``.

Kafka's ZooKeeper mode keeps a broker's dynamic configs in ``/config/brokers/<id>`` and the
cluster-wide defaults in ``/config/brokers/<default>`` (``{"version":1,"config":{...}}``, the same JSON
as topic configs); ``AdminZkClient.changeBrokerConfig`` rewrites the znode and adds a
``/config/changes/config_change_NNNNNNNNNN`` notification naming ``brokers/<id>`` (or
``brokers/<default>``), which every broker's ``ZkConfigManager`` follows.

This module reads and writes those znodes. Each broker *watches* the two znodes it cares about
(its own and the default) with data watches, as the metadata cache watches topic configs, so a change
made through any broker (or by Kafka's own tools) reaches it within milliseconds; the notification
is still written, for tools that follow ``/config/changes``. Writes are conditional on the znode
version the writer read (an IncrementalAlterConfigs is a read-modify-write: two brokers editing the
same entity at once must not lose either change); :class:`BrokerConfigConflictError` means "read
again and retry". Everything runs on the event loop; the entity names are the DescribeConfigs
resource names: ``""`` for the cluster-wide default, ``"<id>"`` for a broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strata.cluster.entity_configs import EntityConfigConflictError, wait_for_version, write_entity_config
from strata.cluster.zk import AsyncZk, ZnodeStat
from strata.cluster.znodes import ConfigEntityZNode, ConfigType, ZNodeDecodeError

log = logging.getLogger(__name__)

DEFAULT_ENTITY = ""  # the cluster-wide defaults, as the BROKER resource names them


# The entity's znode changed since it was read: read it again and retry the change.
BrokerConfigConflictError = EntityConfigConflictError


def broker_config_path(entity: str) -> str:
    """``""`` -> ``/config/brokers/<default>``, ``"2"`` -> ``/config/brokers/2``."""
    return ConfigEntityZNode.broker_path(None if entity == DEFAULT_ENTITY else int(entity))


def _znode_name(entity: str) -> str:
    return ConfigEntityZNode.DEFAULT_BROKER if entity == DEFAULT_ENTITY else entity


def _decode(path: str, data: bytes | None) -> dict[str, str]:
    try:
        return ConfigEntityZNode.decode(data)
    except ZNodeDecodeError as e:
        log.error("ignoring the unreadable dynamic broker configs in %s: %s", path, e)
        return {}


class BrokerConfigZk:
    """This broker's view of its dynamic configs in ZooKeeper: watched, read and written."""

    def __init__(self, zk: AsyncZk, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.entities = (DEFAULT_ENTITY, str(broker_id))
        self.versions: dict[str, int] = {}  # last version seen per entity; -1 while the znode does not exist
        self._seen: dict[str, asyncio.Event] = {}
        self._stops: list[Callable[[], None]] = []

    async def start(self, on_change: Callable[[str, dict[str, str]], None], timeout_s: float = 30.0) -> None:
        """Watch both znodes; ``on_change(entity, config)`` runs on the loop now (once per entity, also when
        the znode does not exist: ``{}``) and at every change. Returns once both were delivered."""
        for entity in self.entities:
            self._seen[entity] = asyncio.Event()
            self._stops.append(self.zk.watch_data(broker_config_path(entity), self._watcher(entity, on_change)))
        async with asyncio.timeout(timeout_s):
            for event in self._seen.values():
                await event.wait()

    def _watcher(self, entity: str, on_change: Callable[[str, dict[str, str]], None]
                 ) -> Callable[[bytes | None, ZnodeStat | None], None]:
        path = broker_config_path(entity)

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            self.versions[entity] = -1 if stat is None else stat.version
            try:
                on_change(entity, _decode(path, data))
            finally:
                self._seen[entity].set()
        return on_data

    def stop(self) -> None:
        for stop in self._stops:
            stop()
        self._stops.clear()

    async def read(self, entity: str) -> tuple[dict[str, str], int]:
        """The entity's configs as ZooKeeper has them now, with the znode version (-1: no znode)."""
        path = broker_config_path(entity)
        got = await self.zk.retry(lambda: self.zk.get_or_none(path))
        if got is None:
            return {}, -1
        return _decode(path, got[0]), got[1].version

    async def write(self, entity: str, config: dict[str, str], expected_version: int) -> int:
        """``changeBrokerConfig``: see :func:`strata.cluster.entity_configs.write_entity_config`; raises
        BrokerConfigConflictError."""
        return await write_entity_config(self.zk, ConfigType.BROKER, _znode_name(entity), config, expected_version)

    async def wait_for(self, entity: str, version: int, timeout_s: float) -> bool:
        """Wait until the watch has delivered ``version`` (or a later one) of the entity."""
        return await wait_for_version(self.versions, entity, version, timeout_s)

