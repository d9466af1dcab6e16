"""SCRAM credentials by user: what SASL/SCRAM logins check and AlterUserScramCredentials changes.

Stored like Kafka: a user's entity config holds one ``salt=...,stored_key=...,server_key=...,iterations=N``
string per mechanism (never the password; AlterUserScramCredentials carries the salted password only).
In a cluster that config is ZooKeeper's ``/config/users/<user>`` (Kafka's ZooKeeper-mode layout, mirrored
by every broker: :mod:`strata.cluster.entity_configs`); on a single node it is
``strata-user-configs.json`` in the first log dir, replaced atomically on every change. User names are
sanitized in znode names as Kafka's ``Sanitizer`` does (URL encoding, ``*`` as ``%2A``).

AlterUserScramCredentials follows Kafka's rules and messages: an unknown mechanism is
UNSUPPORTED_SASL_MECHANISM, an empty user name or an iteration count outside 4096..16384
UNACCEPTABLE_CREDENTIAL, the same user and mechanism twice in one request DUPLICATE_RESOURCE, deleting a
credential that does not exist RESOURCE_NOT_FOUND; the answer has one result per user.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.cluster.entity_configs import EntityConfigConflictError, EntityConfigsZk
from strata.errors import ErrorCode, KafkaStorageError
from strata.log.checkpoints import atomic_write
from strata.security.scram_credentials import (
    ScramCredential,
    UnacceptableCredentialError,
    credential_from_salted_password,
    credentials_from_user_config,
    validate_iterations,
    with_user_credential,
)

log = logging.getLogger(__name__)

USER_CONFIG_FILE = "strata-user-configs.json"
DEFAULT_ENTITY = "<default>"
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # org.apache.kafka.clients.admin.ScramMechanism
CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}


def sanitize(user: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encode (UTF-8), spaces as ``%20``, ``*`` as ``%2A``."""
    return urllib.parse.quote(user, safe="-_.").replace("*", "%2A")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


@dataclass(frozen=True)
class Deletion:
    user: str
    mechanism: int


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


UserResult = tuple[str, int, str | None]  # (user, error code, message)


class UserCredentials:
    """The credentials this broker checks logins against; ``zk`` None on a single node."""

    def __init__(self, log_dir: Path, zk: EntityConfigsZk | None = None) -> None:
        self._path = log_dir / USER_CONFIG_FILE
        self._zk = zk
        self._local: dict[str, dict[str, str]] = {}
        self._credentials: dict[str, dict[str, ScramCredential]] = {}  # user -> mechanism -> credential

    async def start(self) -> None:
        if self._zk is not None:
            self._zk.on_change.append(self._on_change)
            await self._zk.start()
            for name, config in self._zk.configs.items():
                self._on_change(name, config)
            return
        if self._path.exists():
            try:
                users = json.loads(self._path.read_text())["users"]
                self._local = {str(u): {str(k): str(v) for k, v in c.items()} for u, c in users.items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise KafkaStorageError(f"cannot read {self._path}: {e}") from None
        for user, config in self._local.items():
            self._index(user, config)

    def stop(self) -> None:
        if self._zk is not None:
            self._zk.stop()

    def _on_change(self, name: str, config: Mapping[str, str]) -> None:
        if "/" not in name and name != DEFAULT_ENTITY:  # users/<u>/clients/<c> and <default>: quotas only
            self._index(desanitize(name), config)

    def _index(self, user: str, config: Mapping[str, str]) -> None:
        try:
            creds = credentials_from_user_config(config)
        except ValueError as e:
            log.error("ignoring the SCRAM credentials of user %r: %s", user, e)
            creds = {}
        if creds:
            self._credentials[user] = creds
        else:
            self._credentials.pop(user, None)

    # -- what logins use --------------------------------------------------------------------------

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    # -- DescribeUserScramCredentials ---------------------------------------------------------------

    def describe(self, users: list[str] | None) -> list[dict[str, Any]]:
        """One result per user: ``{"user", "error_code", "error_message", "credential_infos"}``.

        Kafka's ``describeUserScramCredentials`` (``describingAllUsers = users.isEmpty || users.get.isEmpty``):
        a null *or empty* list means every user that has a credential, sorted by name. Both matter: the Java
        admin client sends null for "all", librdkafka (confluent-kafka's ``describe_user_scram_credentials()``)
        an empty array. Named users are answered once each, in request order, with Kafka's messages.
        """
        if not users:
            return [self._describe_one(u) for u in sorted(self._credentials)]
        dupes = {u for u in users if users.count(u) > 1}
        out = []
        for user in dict.fromkeys(users):
            if not user:
                out.append(_result(user, ErrorCode.RESOURCE_NOT_FOUND, "Username must not be empty"))
            elif user in dupes:
                out.append(_result(user, ErrorCode.DUPLICATE_RESOURCE,
                                   f"Cannot describe SCRAM credentials for the same user twice in a single request: "
                                   f"{user}"))
            elif user not in self._credentials:
                out.append(_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                   f"Attempt to describe a user credential that does not exist: {user}"))
            else:
                out.append(self._describe_one(user))
        return out

    def _describe_one(self, user: str) -> dict[str, Any]:
        infos = [{"mechanism": CODE_OF[m], "iterations": c.iterations}
                 for m, c in sorted(self._credentials[user].items())]
        return {**_result(user, ErrorCode.NONE, None), "credential_infos": infos}

    # -- AlterUserScramCredentials ------------------------------------------------------------------

    async def alter(self, deletions: Iterable[Deletion], upsertions: Iterable[Upsertion]) -> list[UserResult]:
        deletions, upsertions = list(deletions), list(upsertions)
        order = list(dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions]))
        failed: dict[str, UserResult] = {}
        seen: dict[tuple[str, int], int] = {}
        for change in [*deletions, *upsertions]:
            seen[(change.user, change.mechanism)] = seen.get((change.user, change.mechanism), 0) + 1

        def fail(user: str, code: int, message: str) -> None:
            failed.setdefault(user, (user, code, message))

        for change in [*deletions, *upsertions]:
            user = change.user
            if not user:
                fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif change.mechanism not in MECHANISM_CODES:
                fail(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            elif seen[(user, change.mechanism)] > 1:
                fail(user, ErrorCode.DUPLICATE_RESOURCE,
                     "A user credential cannot be altered twice in the same request")
            elif isinstance(change, Upsertion):
                try:
                    validate_iterations(MECHANISM_CODES[change.mechanism], change.iterations)
                except UnacceptableCredentialError as e:
                    fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(e))
                if not change.salt or not change.salted_password:
                    fail(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
            elif self.scram_credential(user, MECHANISM_CODES[change.mechanism]) is None:
                fail(user, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        results = []
        for user in order:
            if user in failed:
                results.append(failed[user])
                continue
            changes: list[tuple[str, ScramCredential | None]] = [
                (MECHANISM_CODES[d.mechanism], None) for d in deletions if d.user == user]
            changes += [(MECHANISM_CODES[u.mechanism],
                         credential_from_salted_password(MECHANISM_CODES[u.mechanism], u.salt, u.salted_password,
                                                         u.iterations)) for u in upsertions if u.user == user]
            try:
                await self._apply(user, changes)
            except (EntityConfigConflictError, KafkaStorageError, OSError) as e:
                results.append((user, ErrorCode.UNKNOWN_SERVER_ERROR, f"Cannot store the credentials: {e}"))
                continue
            results.append((user, ErrorCode.NONE, None))
        return results

    async def _apply(self, user: str, changes: list[tuple[str, ScramCredential | None]]) -> None:
        def edit(config: Mapping[str, str]) -> dict[str, str]:
            out = dict(config)
            for mechanism, credential in changes:
                out = with_user_credential(out, mechanism, credential)
            return out

        zk = self._zk
        if zk is None:
            config = edit(self._local.get(user, {}))
            users = {**self._local, user: config}
            if not config:
                users.pop(user)
            atomic_write(self._path, json.dumps({"version": 1, "users": users}, indent=1, sort_keys=True).encode())
            self._local = users
            self._index(user, config)
            return
        await zk.update(sanitize(user), edit)


def _result(user: str, code: int, message: str | None) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}
