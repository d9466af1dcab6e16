"""What CreateTopics asks of a ``remote.recovery=true`` topic: the bucket's plan, merged with the request.

The CreateTopics handler reaches the bucket only through this narrow service, so the handler stays a protocol
adapter: it asks for a plan (read off the event loop), applies :func:`merge` to the request, and after
validation publishes the restored segments into ``__remote_log_metadata`` before the topic exists, so that
every partition's first leader finds them (``RemoteLogManager._restore_leader_log``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from strata.common import Clock
from strata.errors import ApiError, ErrorCode
from strata.tiered.api import ObjectStore, RemoteStorageError
from strata.tiered.manager import RemoteLogManager
from strata.tiered.recovery import RecoveryError, RecoveryPlan, plan_recovery, publish

log = logging.getLogger("strata.recovery")

RECOVERY_CONFIG = "remote.recovery"
READY_WAIT_S = 30.0


READ_REPLICA_CONFIG = "remote.read.replica"
CLUSTER_LOCAL_CONFIGS = frozenset({"remote.unmount", READ_REPLICA_CONFIG, RECOVERY_CONFIG})


def _true(configs: Mapping[str, str], key: str) -> bool:
    return str(configs.get(key, "false")).strip().lower() == "true"


def wants_recovery(configs: Mapping[str, str]) -> bool:
    """Created from the bucket: restored (``remote.recovery``) or mirrored (``remote.read.replica``)."""
    return _true(configs, RECOVERY_CONFIG) or _true(configs, READ_REPLICA_CONFIG)


def is_read_replica(configs: Mapping[str, str]) -> bool:
    return _true(configs, READ_REPLICA_CONFIG)


@dataclass(frozen=True, slots=True)
class RecoveredTopic:
    """The request as the bucket completes it."""

    plan: RecoveryPlan
    partitions: int
    replication_factor: int
    configs: dict[str, str]


def merge(plan: RecoveryPlan, requested_partitions: int, requested_rf: int, default_rf: int, max_rf: int,
          configs: Mapping[str, str]) -> RecoveredTopic:
    """The topic manifest's partitions (a request naming another count is refused: the bucket's keys fix it),
    replication factor (unless the request names one; at most the registered brokers) and configs (the request's
    own win)."""
    manifest = plan.manifest
    if requested_partitions not in (-1, manifest.partitions):
        raise ApiError(ErrorCode.INVALID_PARTITIONS,
                       f"remote.recovery: the remote store's topic manifest of '{manifest.topic}' has "
                       f"{manifest.partitions} partitions, the request {requested_partitions} (use -1 or "
                       f"{manifest.partitions})")
    rf = requested_rf if requested_rf != -1 else min(manifest.replication_factor or default_rf, max_rf)
    # the origin's own state is not the topic's: an unmounted topic comes back writable, a mirror's mirror is not
    inherited = {k: v for k, v in manifest.configs.items() if k not in CLUSTER_LOCAL_CONFIGS}
    merged = {**inherited, **configs}
    merged["remote.storage.enable"] = "true"
    return RecoveredTopic(plan, manifest.partitions, rf, merged)


class TopicRecoveryService:
    def __init__(self, rlm: RemoteLogManager, broker_id: int, clock: Clock) -> None:
        self._rlm = rlm
        self._broker_id = broker_id
        self._clock = clock

    def _store(self, key: str) -> ObjectStore:
        rsm = self._rlm.rsm
        if not isinstance(rsm, ObjectStore):
            raise ApiError(ErrorCode.INVALID_CONFIG, f"{key}: the remote storage manager "
                                                     f"{type(rsm).__name__} cannot list the remote store")
        return rsm

    async def plan(self, topic: str, key: str = RECOVERY_CONFIG) -> RecoveryPlan:
        """Read the bucket (in a worker thread): INVALID_CONFIG naming remote.recovery when it has nothing of the
        topic, KAFKA_STORAGE_ERROR when it cannot be read."""
        store = self._store(key)
        try:
            plan = await asyncio.get_running_loop().run_in_executor(None, plan_recovery, store, topic)
        except RecoveryError as e:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"{key}: {e}") from None
        except RemoteStorageError as e:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"{key}: the remote store: {e}") from None
        for problem in plan.skipped:
            log.warning("%s of %s: %s", key, topic, problem)
        log.info("%s: %s", key, plan.describe())
        return plan

    async def publish(self, plan: RecoveryPlan) -> int:
        """Write the restored segments into ``__remote_log_metadata`` (before the topic exists)."""
        rlmm = self._rlm.rlmm
        segments = [md for mds in plan.segments.values() for md in mds]
        loop = asyncio.get_running_loop()
        wait = getattr(rlmm, "wait_until_ready", None)  # a broker just started may still be loading it
        if wait is not None and not await loop.run_in_executor(None, wait, READY_WAIT_S):
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, "remote.recovery: __remote_log_metadata is still loading "
                                                        "on this broker; try again")
        try:
            n = await asyncio.get_running_loop().run_in_executor(
                None, publish, rlmm, segments, self._broker_id, self._clock.milliseconds())
        except RemoteStorageError as e:
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR,
                           f"remote.recovery: writing __remote_log_metadata failed: {e}") from None
        log.info("remote.recovery: %d segments of %s written to __remote_log_metadata", n, plan.manifest.topic)
        return n
