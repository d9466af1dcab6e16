"""Per-group configs (KIP-848 resource type GROUP): ``consumer.session.timeout.ms``, ``share.*`` and friends.

Kafka keeps them as KRaft ConfigRecords. In Strata they live where the other entity configs do: on a
single node in ``strata-group-configs.json`` in the first log dir (replaced atomically), in a cluster
in ``/config/groups/<group>`` (``{"version":1,"config":{...}}``), mirrored by every broker, so the
broker that coordinates the group (whichever leads its ``__consumer_offsets`` partition) always applies
the latest value at the group's next heartbeat. Values are validated against the broker's bounds
(:func:`strata.config.group_config.validate_group_configs`) before anything is stored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from strata.broker.config_views import AlterOp, ConfigChange
from strata.cluster.entity_configs import EntityConfigConflictError, EntityConfigsZk
from strata.cluster.zk import ZkError
from strata.config.group_config import (
    DEFAULT_SHARE_GROUP_CONFIG,
    ConsumerGroupConfig,
    GroupSettings,
    group_settings,
    validate_group_configs,
)
from strata.config.share_config import ShareGroupConfig
from strata.errors import ApiError, ErrorCode, InvalidConfigError, KafkaStorageError
from strata.log.checkpoints import atomic_write

log = logging.getLogger(__name__)

GROUP_CONFIG_FILE = "strata-group-configs.json"
GROUPS_ENTITY = "groups"


class GroupConfigStore:
    def __init__(self, log_dir: Path, defaults: ConsumerGroupConfig, zk: EntityConfigsZk | None = None, *,
                 share_defaults: ShareGroupConfig = DEFAULT_SHARE_GROUP_CONFIG) -> None:
        self._path = log_dir / GROUP_CONFIG_FILE
        self.defaults = defaults
        self.share_defaults = share_defaults  # the broker's group.share.*: defaults and bounds of share.* keys
        self._zk = zk
        self._local: dict[str, dict[str, str]] = {}

    async def start(self) -> None:
        if self._zk is not None:
            await self._zk.start()
            return
        if self._path.exists():
            try:
                groups = json.loads(self._path.read_text())["groups"]
                self._local = {str(g): {str(k): str(v) for k, v in c.items()} for g, c in groups.items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise KafkaStorageError(f"cannot read {self._path}: {e}") from None

    def stop(self) -> None:
        if self._zk is not None:
            self._zk.stop()

    def overrides(self, group_id: str) -> dict[str, str]:
        if self._zk is not None:
            return dict(self._zk.configs.get(group_id, {}))
        return dict(self._local.get(group_id, {}))

    def settings(self, group_id: str) -> GroupSettings:
        """The effective values; overrides that no longer fit the broker's bounds fall back to its defaults."""
        try:
            return group_settings(self.defaults, self.overrides(group_id), self.share_defaults)
        except InvalidConfigError as e:
            log.warning("ignoring the configs of group %s: %s", group_id, e)
            return group_settings(self.defaults, {}, self.share_defaults)

    async def alter(self, group_id: str, changes: Sequence[ConfigChange], *, incremental: bool,
                    validate_only: bool) -> None:
        """AlterConfigs / IncrementalAlterConfigs on GROUP ``group_id``; raises ApiError (INVALID_CONFIG naming
        the key, INVALID_REQUEST for an empty name)."""
        if not group_id:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Group name must not be empty.")
        new = self._apply(self.overrides(group_id) if incremental else {}, changes)
        try:
            validate_group_configs(self.defaults, new, self.share_defaults)
        except InvalidConfigError as e:
            raise ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if validate_only:
            return
        if self._zk is not None:
            try:
                await self._zk.update(group_id, lambda _current: new)
            except (EntityConfigConflictError, ZkError, OSError) as e:  # ZooKeeper unreachable, or a race lost
                raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Cannot store the configs of group {group_id}: {e}") \
                    from None
            return
        groups = {**self._local, group_id: new}
        if not new:
            groups.pop(group_id)
        try:
            atomic_write(self._path, json.dumps({"version": 1, "groups": groups}, indent=1, sort_keys=True).encode())
        except OSError as e:  # a full or read-only disk: refused, the old configs stay
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot store the configs of group {group_id}: {e}") \
                from None
        self._local = groups

    @staticmethod
    def _apply(current: Mapping[str, str], changes: Sequence[ConfigChange]) -> dict[str, str]:
        new = dict(current)
        for c in changes:
            op = AlterOp(c.op)
            if op is AlterOp.SET:
                new[c.name] = c.value or ""
            elif op is AlterOp.DELETE:
                new.pop(c.name, None)
            else:
                raise ApiError(ErrorCode.INVALID_CONFIG,
                               f"Config value {op.name.lower()} is not allowed for config key: {c.name}")
        return new
