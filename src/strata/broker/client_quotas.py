"""Where client quotas are kept and how DescribeClientQuotas / AlterClientQuotas read and change them.

In a cluster, Kafka's ZooKeeper layout: a user's quotas are keys of ``/config/users/<user>`` (next to its
SCRAM credentials, which an AlterClientQuotas leaves alone), a user with a client-id has
``/config/users/<user>/clients/<client-id>``, a client-id alone ``/config/clients/<client-id>``, the
default entity is the name ``<default>``, names are sanitized like Kafka's ``Sanitizer``, and every change
writes a ``/config/changes`` notification. Every broker mirrors both subtrees
(:class:`strata.cluster.entity_configs.EntityConfigsZk`), so a quota set through any broker (or Kafka's
``kafka-configs --zookeeper``) applies on all of them within milliseconds. On a single node the quotas are
``strata-client-quotas.json`` in the first log dir, replaced atomically on every change.

The quota managers (:mod:`strata.quota.client`) are told about every entity's quotas as they change; the
request path only asks them for throttle times.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.broker.user_credentials import DEFAULT_ENTITY, desanitize, sanitize
from strata.cluster.entity_configs import EntityConfigConflictError, EntityConfigsZk
from strata.errors import ErrorCode, KafkaStorageError
from strata.log.checkpoints import atomic_write
from strata.quota.client import (
    ABSENT,
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    QUOTA_KEYS,
    USER,
    ClientQuotaManagers,
    InvalidQuotaError,
    QuotaEntity,
    client_entity,
    format_quota_value,
    parse_entity,
    quota_values,
    user_client_entity,
    user_entity,
    validate_quota_value,
)

log = logging.getLogger(__name__)

QUOTA_CONFIG_FILE = "strata-client-quotas.json"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


@dataclass(frozen=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


EntryResult = tuple[int, str | None]  # (error code, message)


def _name(value: str | None) -> str:
    return DEFAULT_ENTITY if value is None else sanitize(value)


def _unname(name: str) -> str | None:
    return None if name == DEFAULT_ENTITY else desanitize(name)


class ClientQuotaStore:
    """The quota entities: ZooKeeper's ``/config/users`` and ``/config/clients``, or a local file."""

    def __init__(self, log_dir: Path, managers: ClientQuotaManagers, users_zk: EntityConfigsZk | None = None,
                 clients_zk: EntityConfigsZk | None = None) -> None:
        self._path = log_dir / QUOTA_CONFIG_FILE
        self.managers = managers
        self._users = users_zk
        self._clients = clients_zk
        self._local: dict[QuotaEntity, dict[str, float]] = {}
        if users_zk is not None:  # before the users mirror starts (the SCRAM store starts it): no event missed
            users_zk.on_change.append(self._on_user_change)

    async def start(self) -> None:
        if self._users is not None and self._clients is not None:
            for name, config in self._users.configs.items():
                self._on_user_change(name, config)
            self._clients.on_change.append(self._on_client_change)
            await self._clients.start()
            for name, config in self._clients.configs.items():
                self._on_client_change(name, config)
            return
        if self._path.exists():
            try:
                doc = json.loads(self._path.read_text())
                for item in doc["entities"]:
                    entity = QuotaEntity(item["user"] if "user" in item else ABSENT,
                                         item["client-id"] if "client-id" in item else ABSENT)
                    self._local[entity] = {str(k): float(v) for k, v in item["quotas"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise KafkaStorageError(f"cannot read {self._path}: {e}") from None
        for entity, values in self._local.items():
            self.managers.update(entity, values)

    def stop(self) -> None:
        if self._clients is not None:
            self._clients.stop()

    # -- the ZooKeeper mirrors ----------------------------------------------------------------------------

    def _on_user_change(self, name: str, config: Mapping[str, str]) -> None:
        parts = name.split("/")
        if len(parts) == 3:
            entity = user_client_entity(_unname(parts[0]), _unname(parts[2]))
        else:
            entity = user_entity(_unname(parts[0]))
        self.managers.update(entity, quota_values(config))

    def _on_client_change(self, name: str, config: Mapping[str, str]) -> None:
        self.managers.update(client_entity(_unname(name)), quota_values(config))

    @staticmethod
    def _znode(entity: QuotaEntity) -> tuple[str, str]:
        """(which mirror, znode name) of an entity: ``users``/``clients``."""
        if entity.has_user and entity.has_client_id:
            return "users", f"{_name(entity.user)}/clients/{_name(entity.client_id)}"  # type: ignore[arg-type]
        if entity.has_user:
            return "users", _name(entity.user)  # type: ignore[arg-type]
        return "clients", _name(entity.client_id)  # type: ignore[arg-type]

    # -- DescribeClientQuotas -----------------------------------------------------------------------------

    def describe(self, components: Iterable[FilterComponent], strict: bool) -> list[dict[str, Any]]:
        """Entries ``{"entity": [...], "values": [...]}`` of the entities that match; InvalidQuotaError."""
        by_type: dict[str, FilterComponent] = {}
        for c in components:
            if c.entity_type in by_type:
                raise InvalidQuotaError(f"Duplicate {c.entity_type} filter component entity type")
            if c.entity_type == IP:
                raise InvalidQuotaError("IP quotas (connection_creation_rate) are not supported by this broker")
            if c.entity_type not in ENTITY_TYPES:
                raise InvalidQuotaError(f"Custom entity type {c.entity_type!r} not supported")
            if c.match_type == MATCH_EXACT and c.match is None:
                raise InvalidQuotaError("Request specified MATCH_TYPE_EXACT, but set match string to null")
            if c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED) and c.match is not None:
                raise InvalidQuotaError("Request specified MATCH_TYPE_DEFAULT or MATCH_TYPE_SPECIFIED, but also "
                                        "specified a match string")
            if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise InvalidQuotaError(f"Unexpected match type: {c.match_type}")
            by_type[c.entity_type] = c
        entries = []
        for entity, values in sorted(self.managers.entities.items(), key=lambda kv: kv[0].sort_key()):
            if not values:
                continue
            if not (_matches(by_type.get(USER), entity.has_user, entity.user, strict)
                    and _matches(by_type.get(CLIENT_ID), entity.has_client_id, entity.client_id, strict)):
                continue
            entries.append({"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.components()],
                            "values": [{"key": k, "value": v} for k, v in sorted(values.items())]})
        return entries

    # -- AlterClientQuotas --------------------------------------------------------------------------------

    async def alter(self, entries: Iterable[tuple[list[tuple[str, str | None]], list[QuotaOp]]],
                    validate_only: bool) -> list[EntryResult]:
        """One (error code, message) per entry, in order; each entry is applied on its own."""
        results: list[EntryResult] = []
        for components, ops in entries:
            try:
                entity = parse_entity(components)
                for op in ops:
                    if op.remove:
                        if op.key not in QUOTA_KEYS:
                            raise InvalidQuotaError(f"Invalid configuration key {op.key}")
                    else:
                        validate_quota_value(op.key, op.value)
            except InvalidQuotaError as e:
                results.append((ErrorCode.INVALID_REQUEST, str(e)))
                continue
            if validate_only:
                results.append((ErrorCode.NONE, None))
                continue
            try:
                await self._apply(entity, ops)
            except (EntityConfigConflictError, KafkaStorageError, OSError) as e:
                results.append((ErrorCode.UNKNOWN_SERVER_ERROR, f"Cannot store the quotas of {entity}: {e}"))
                continue
            log.info("client quotas of %s changed: %s", entity,
                     ", ".join(f"{op.key} removed" if op.remove else f"{op.key}={op.value:g}" for op in ops))
            results.append((ErrorCode.NONE, None))
        return results

    async def _apply(self, entity: QuotaEntity, ops: list[QuotaOp]) -> None:
        def edit(config: Mapping[str, str]) -> dict[str, str]:
            out = dict(config)
            for op in ops:
                if op.remove:
                    out.pop(op.key, None)
                else:
                    out[op.key] = format_quota_value(op.key, op.value)
            return out

        if self._users is None or self._clients is None:
            current = {k: format_quota_value(k, v) for k, v in self._local.get(entity, {}).items()}
            values = quota_values(edit(current))
            local = {**self._local, entity: values}
            if not values:
                local.pop(entity)
            items = []
            for e, v in sorted(local.items(), key=lambda kv: kv[0].sort_key()):
                item: dict[str, Any] = dict(e.components())
                item["quotas"] = v
                items.append(item)
            atomic_write(self._path, json.dumps({"version": 1, "entities": items}, indent=1).encode())
            self._local = local
            self.managers.update(entity, values)
            return
        which, name = self._znode(entity)
        await (self._users if which == "users" else self._clients).update(name, edit)


def _matches(component: FilterComponent | None, present: bool, name: Any, strict: bool) -> bool:
    """Kafka's ``describeClientQuotas`` matching of one entity type."""
    if component is None:
        return not strict or not present
    if not present:
        return False
    if component.match_type == MATCH_EXACT:
        return name == component.match
    if component.match_type == MATCH_DEFAULT:
        return name is None
    return True
