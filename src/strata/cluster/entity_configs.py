"""Client entity configs in ZooKeeper: ``/config/users/<user>`` (SCRAM credentials, user quotas).

Kafka's ZooKeeper mode keeps a user's SCRAM credentials in the user's config znode
(``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}``)
next to its quota overrides, and announces every change with a ``/config/changes/config_change_N``
notification naming ``users/<user>``. Every broker mirrors the whole ``/config/users`` subtree with a
TreeCache, so a credential created through any broker (or Kafka's ``kafka-configs`` against the same
ZooKeeper) lets the user log in on all of them within milliseconds; the notification is still written
for Kafka's tools. Writes are conditional on the version read (a read-modify-write per user: two
brokers changing the same user must not lose either change).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strata.cluster.zk import AsyncZk, ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError, ZnodeStat
from strata.cluster.znodes import ConfigEntityChangeNotificationZNode, ConfigEntityZNode, ConfigType, ZNodeDecodeError

log = logging.getLogger(__name__)


class EntityConfigConflictError(Exception):
    """The entity's znode changed since it was read: read it again and retry."""


class EntityConfigsZk:
    """The mirror of ``/config/<entity_type>``: ``configs[name]`` is each entity's config.

    Names are the znode names below the root, sanitized as Kafka writes them: ``alice``, ``<default>``,
    and for users with a client-id ``alice/clients/app`` (``/config/users/alice/clients/app``, a quota
    entity of its own)."""

    def __init__(self, zk: AsyncZk, entity_type: str = ConfigType.USER) -> None:
        self.zk = zk
        self.entity_type = entity_type
        self.root = ConfigEntityZNode.type_path(entity_type)
        self.configs: dict[str, dict[str, str]] = {}
        self.versions: dict[str, int] = {}
        self._initialized = asyncio.Event()
        self._stop: Callable[[], None] | None = None
        self.on_change: list[Callable[[str, dict[str, str]], None]] = []

    async def start(self, timeout_s: float = 30.0) -> None:
        await self.zk.retry(lambda: self.zk.ensure_path(self.root))
        self._stop = self.zk.tree_cache(self.root, self._on_event)
        async with asyncio.timeout(timeout_s):
            await self._initialized.wait()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def _on_event(self, kind: str, path: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        if kind == "initialized":
            self._initialized.set()
            return
        if kind == "lost" or path == self.root or not path.startswith(self.root + "/"):
            return
        name = path[len(self.root) + 1:]
        parts = name.split("/")
        if len(parts) == 2 or len(parts) > 3 or (len(parts) == 3 and parts[1] != "clients"):
            return  # /config/users/<user>/clients itself holds nothing; <user>/clients/<id> is an entity
        if kind == "removed":
            self.configs.pop(name, None)
            self.versions.pop(name, None)
            config: dict[str, str] = {}
        else:
            try:
                config = ConfigEntityZNode.decode(data)
            except ZNodeDecodeError as e:
                log.error("ignoring the unreadable config of %s %s: %s", self.entity_type, name, e)
                return
            self.configs[name] = config
            self.versions[name] = stat.version if stat is not None else 0
        for fn in self.on_change:
            fn(name, config)

    async def read(self, name: str) -> tuple[dict[str, str], int]:
        """The entity's config as ZooKeeper has it now, with the znode version (-1: no znode)."""
        path = ConfigEntityZNode.path(self.entity_type, name)
        got = await self.zk.retry(lambda: self.zk.get_or_none(path))
        if got is None:
            return {}, -1
        try:
            return ConfigEntityZNode.decode(got[0]), got[1].version
        except ZNodeDecodeError:
            return {}, got[1].version

    async def write(self, name: str, config: dict[str, str], expected_version: int) -> int:
        """``AdminZkClient.changeConfigs``: see :func:`write_entity_config`."""
        return await write_entity_config(self.zk, self.entity_type, name, config, expected_version)

    async def wait_for(self, name: str, version: int, timeout_s: float) -> bool:
        """Wait until this broker's mirror has ``version`` (or later) of the entity."""
        return await wait_for_version(self.versions, name, version, timeout_s)

    async def update(self, name: str, edit: Callable[[dict[str, str]], dict[str, str]],
                     attempts: int = 10) -> None:
        """Read-modify-write of the entity's config with ``edit``, retried when another broker changed it
        meanwhile; returns once this broker's mirror has the result (so this broker applies it at once)."""
        for attempt in range(attempts):
            current, version = await self.read(name)
            try:
                written = await self.write(name, edit(current), version)
            except EntityConfigConflictError:
                if attempt == attempts - 1:
                    raise
                continue
            await self.wait_for(name, written, 10.0)
            return


async def write_entity_config(zk: AsyncZk, entity_type: str, name: str, config: dict[str, str],
                              expected_version: int) -> int:
    """An entity's config znode (only if still at ``expected_version``; -1: it must not exist yet), then a
    ``/config/changes`` notification for Kafka's tools. Returns the new version; EntityConfigConflictError
    when the znode changed meanwhile (read it again and retry)."""
    path = ConfigEntityZNode.path(entity_type, name)
    data = ConfigEntityZNode.encode(config)
    try:
        if expected_version < 0:
            await zk.create(path, data, makepath=True)
            version = 0
        else:
            version = (await zk.set(path, data, expected_version)).version
    except (ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError):
        raise EntityConfigConflictError(f"{path} changed meanwhile") from None
    entity_path = ConfigEntityChangeNotificationZNode.entity_path(entity_type, name)
    try:
        await zk.create(ConfigEntityChangeNotificationZNode.CREATE_PATH,
                        ConfigEntityChangeNotificationZNode.encode(entity_path), sequence=True, makepath=True)
    except Exception as e:  # noqa: BLE001 - the config is written; mirrors see it without the notification
        log.warning("could not write the config change notification for %s: %s", entity_path, e)
    return version


async def wait_for_version(versions: dict[str, int], name: str, version: int, timeout_s: float) -> bool:
    """Wait until a mirror's ``versions[name]`` reaches ``version`` (False after ``timeout_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while versions.get(name, -1) < version:
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True
