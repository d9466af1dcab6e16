"""ACLs in ZooKeeper, Kafka's ZooKeeper-mode layout: ``/kafka-acl/<Type>/<name>`` (LITERAL patterns) and
``/kafka-acl-extended/prefixed/<Type>/<name>`` (PREFIXED), one znode per resource pattern holding its whole
ACL set, and a sequential change notification per write (``/kafka-acl-changes/acl_changes_N`` for literal,
``/kafka-acl-extended-changes/acl_changes_N`` for extended patterns) for Kafka's own brokers and tools.

Every Strata broker mirrors both trees with a TreeCache, so an ACL created through any broker (or by
``kafka-acls --authorizer-properties zookeeper.connect=...``) applies on all of them within milliseconds.
Writes are conditional on the znode version read (CreateAcls and DeleteAcls are read-modify-writes of a
pattern's set; two brokers changing one pattern at once must not lose either change).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strata.cluster.zk import AsyncZk, ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError, ZnodeStat
from strata.security.acl import AccessControlEntry, ResourcePattern
from strata.security.acl_store import (
    EXTENDED_ACL_PATH,
    LITERAL_ACL_PATH,
    acl_path,
    acl_paths_to_create,
    change_notification,
    decode_acls,
    encode_acls,
    parse_acl_path,
)

log = logging.getLogger(__name__)

OnChange = Callable[[ResourcePattern, frozenset[AccessControlEntry]], None]


class AclConflictError(Exception):
    """The pattern's znode changed since it was read: read it again and retry."""


class AclZk:
    def __init__(self, zk: AsyncZk) -> None:
        self.zk = zk
        self._stops: list[Callable[[], None]] = []
        self._initialized: dict[str, asyncio.Event] = {}

    async def start(self, on_change: OnChange, timeout_s: float = 30.0) -> None:
        """Create Kafka's ACL paths, mirror both trees; ``on_change`` for every pattern now and at every change."""
        for path in acl_paths_to_create():
            await self.zk.retry(lambda p=path: self.zk.ensure_path(p))  # type: ignore[misc]
        for root in (LITERAL_ACL_PATH, EXTENDED_ACL_PATH):
            done = self._initialized[root] = asyncio.Event()
            self._stops.append(self.zk.tree_cache(root, self._handler(root, on_change)))
        async with asyncio.timeout(timeout_s):
            for done in self._initialized.values():
                await done.wait()

    def _handler(self, root: str, on_change: OnChange) -> Callable[[str, str, bytes | None, ZnodeStat | None], None]:
        def on_event(kind: str, path: str, data: bytes | None, stat: ZnodeStat | None) -> None:
            if kind == "initialized":
                self._initialized[root].set()
                return
            if kind == "lost":
                return
            try:
                pattern = parse_acl_path(path)
            except ValueError:
                return  # a type directory or the root
            if kind == "removed":
                on_change(pattern, frozenset())
                return
            try:
                on_change(pattern, frozenset(decode_acls(data)))
            except ValueError as e:
                log.error("ignoring the unreadable ACLs of %s: %s", path, e)
        return on_event

    def stop(self) -> None:
        for stop in self._stops:
            stop()
        self._stops.clear()

    async def read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        """The pattern's ACL set in ZooKeeper now, with its znode version (-1: no znode)."""
        got = await self.zk.retry(lambda: self.zk.get_or_none(acl_path(pattern)))
        if got is None:
            return frozenset(), -1
        return frozenset(decode_acls(got[0])), got[1].version

    async def write(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry], version: int) -> None:
        """Replace the pattern's set (an empty set deletes the znode) if still at ``version``, then notify."""
        path = acl_path(pattern)
        try:
            if not entries:
                if version >= 0:
                    await self.zk.delete(path, version)
            elif version < 0:
                await self.zk.create(path, encode_acls(entries), makepath=True)
            else:
                await self.zk.set(path, encode_acls(entries), version)
        except (ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError):
            raise AclConflictError(f"{path} changed meanwhile") from None
        create_path, data = change_notification(pattern)
        try:
            await self.zk.create(create_path, data, sequence=True, makepath=True)
        except Exception as e:  # noqa: BLE001 - the ACLs are written; mirrors see them without the notification
            log.warning("could not write the ACL change notification for %s: %s", path, e)
