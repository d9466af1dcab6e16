"""The broker's authorizer: Kafka's ``authorizer.class.name``, ACLs kept where Kafka keeps them.

Without ``authorizer.class.name`` every request is allowed and the ACL APIs answer SECURITY_DISABLED
("No Authorizer is configured on the broker"), as in Kafka. With it (Kafka's
``kafka.security.authorizer.AclAuthorizer`` or ``org.apache.kafka.metadata.authorizer.StandardAuthorizer``,
both meaning this authorizer) every API checks what Kafka checks through :meth:`Authorization.authorize`,
with ``super.users`` (``User:admin;User:broker``) allowed everything and ``allow.everyone.if.no.acl.found``
deciding for resources no ACL mentions. Brokers talk to each other as their inter-broker listener's
principal: that principal needs CLUSTER_ACTION on the cluster, usually by being a super user (Kafka's advice).

ACLs are stored in ZooKeeper in a cluster (:mod:`strata.cluster.acls`: every broker mirrors them, so a
change applies everywhere at once) and in ``acls/acls.json`` in the first log dir on a single node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strata.cluster.acls import AclConflictError, AclZk
from strata.cluster.zk import AsyncZk, ZkError
from strata.errors import ApiError, ErrorCode, InvalidConfigError
from strata.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourceType,
    authorized_operations_bits,
    creation_error,
    deletion_filter_error,
    host_address,
    supported_operations,
)
from strata.security.acl_store import LocalAclStore
from strata.security.authorizer import (
    AclAuthorizer,
    AclChanges,
    AclDeleteResult,
    add_entries,
    delete_candidates,
    parse_super_users,
    remove_matching,
)

log = logging.getLogger(__name__)

AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "strata.acl"})
SECURITY_DISABLED_MESSAGE = "No Authorizer is configured on the broker"
CLUSTER_NAME = "kafka-cluster"
_WRITE_ATTEMPTS = 10


class Authorization:
    """What handlers ask: may this session do that? ``enabled`` False: yes, always."""

    def __init__(self, raw: dict[str, str] | Any, log_dir: Path, zk: AsyncZk | None) -> None:
        name = str(raw.get("authorizer.class.name", "") or "").strip()
        if name and name not in AUTHORIZER_CLASS_NAMES:
            raise InvalidConfigError(f"Invalid value {name!r} for configuration authorizer.class.name: Strata's "
                                     f"ACL authorizer answers to {', '.join(sorted(AUTHORIZER_CLASS_NAMES))}")
        self.enabled = bool(name)
        allow_everyone = str(raw.get("allow.everyone.if.no.acl.found", "false")).strip().lower() == "true"
        self.acls = AclAuthorizer(parse_super_users(raw.get("super.users")), allow_everyone)
        self._local = LocalAclStore(log_dir / "acls") if zk is None else None
        self._zk = AclZk(zk) if zk is not None else None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        if self._zk is not None:
            await self._zk.start(self.acls.apply_change)
        elif self._local is not None:
            self.acls.load(self._local.load())
        if self.enabled:
            log.info("ACL authorizer on: %d ACLs, super users %s", len(self.acls), sorted(self.acls.super_users))

    def stop(self) -> None:
        if self._zk is not None:
            self._zk.stop()

    # -- decisions ------------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if not self.enabled:
            return True
        return self.acls.authorize(principal, host_address(host), operation, resource_type, name)

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: could the principal do ``operation`` on some resource of the type?"""
        if not self.enabled:
            return True
        return self.acls.authorize_any(principal, host_address(host), operation, resource_type)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        if not self.enabled:
            return authorized_operations_bits(supported_operations(resource_type))
        return self.acls.authorized_operations(principal, host_address(host), resource_type, name)

    # -- CreateAcls / DeleteAcls / DescribeAcls -------------------------------------------------------

    def _require_enabled(self) -> None:
        if not self.enabled:
            raise ApiError(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        self._require_enabled()
        return self.acls.describe_acls(acl_filter)

    async def create(self, bindings: Sequence[AclBinding]) -> list[ApiError | None]:
        self._require_enabled()
        async with self._lock:
            if self._zk is None:
                return self.acls.create_acls(bindings, commit=self._save_local)
            return await self._create_zk(bindings)

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        self._require_enabled()
        async with self._lock:
            if self._zk is None:
                return self.acls.delete_acls(filters, commit=self._save_local)
            return await self._delete_zk(filters)

    def _save_local(self, changes: AclChanges) -> None:
        assert self._local is not None
        self._local.save(changes.all_bindings())

    async def _create_zk(self, bindings: Sequence[AclBinding]) -> list[ApiError | None]:
        zk = self._zk
        assert zk is not None
        results: list[ApiError | None] = [None] * len(bindings)
        groups: dict[Any, list[int]] = {}
        for i, binding in enumerate(bindings):
            problem = creation_error(binding)
            if problem is not None:
                results[i] = ApiError(ErrorCode.INVALID_REQUEST, problem)
            else:
                groups.setdefault(binding.pattern, []).append(i)
        for pattern, indexes in groups.items():
            try:
                for attempt in range(_WRITE_ATTEMPTS):
                    current, version = await zk.read(pattern)
                    new = add_entries(current, (bindings[i].entry for i in indexes))
                    if new == current:
                        break
                    try:
                        await zk.write(pattern, new, version)
                    except AclConflictError:
                        if attempt == _WRITE_ATTEMPTS - 1:
                            raise
                        continue
                    self.acls.apply_change(pattern, new)  # the mirror delivers it too; answer with it applied here
                    break
            except (AclConflictError, ZkError, ValueError) as e:
                for i in indexes:
                    results[i] = ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to create ACL: {e}")
        return results

    async def _delete_zk(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        zk = self._zk
        assert zk is not None
        out: list[AclDeleteResult] = [AclDeleteResult() for _ in filters]
        valid: list[tuple[int, AclBindingFilter]] = []
        for i, f in enumerate(filters):
            problem = deletion_filter_error(f)
            if problem is not None:
                out[i] = AclDeleteResult(error=ApiError(ErrorCode.INVALID_REQUEST, problem))
            else:
                valid.append((i, f))
        matched: dict[int, list[AclBinding]] = {i: [] for i, _ in valid}
        failures: dict[int, ApiError] = {}
        patterns = delete_candidates(self.acls.patterns(), [f for _, f in valid])
        for pattern in sorted(patterns, key=lambda p: p.sort_key()):
            try:
                for attempt in range(_WRITE_ATTEMPTS):
                    current, version = await zk.read(pattern)
                    kept, removed = remove_matching(pattern, current, valid)
                    if not removed:
                        break
                    try:
                        await zk.write(pattern, kept, version)
                    except AclConflictError:
                        if attempt == _WRITE_ATTEMPTS - 1:
                            raise
                        continue
                    self.acls.apply_change(pattern, kept)
                    for i, binding in removed:
                        matched[i].append(binding)
                    break
            except (AclConflictError, ZkError, ValueError) as e:
                for i, _ in valid:
                    failures.setdefault(i, ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to delete ACLs: {e}"))
        for i, _ in valid:
            out[i] = AclDeleteResult(tuple(matched[i]), None, failures.get(i))
        return out
