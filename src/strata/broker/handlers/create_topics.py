"""CreateTopics: validate every topic of the request on its own, then create the valid ones.

Kafka checks in this order and so do we, because clients show the first error only: the name
(``Topic.validate``, internal names), existence, '.'/'_' collisions, null config values, the configs
themselves (``LogConfig`` rules, INVALID_CONFIG naming the key), then the shape (manual assignments
versus partitions and replication factor). -1 means the broker default for partitions
(``num.partitions``) and replication factor (``default.replication.factor``). A replication factor
above the registered brokers fails the way Kafka fails (a single node holds one replica), and a
manual assignment may name registered brokers only. In a cluster the replicas are spread by Kafka's
rack-unaware assignment (``strata.cluster.algorithms``) and the topic is written to ZooKeeper.

``validate_only`` answers exactly as a real creation would (v5+ includes the resulting configs,
partitions and replication factor), without creating anything.

Authorization (Kafka 3.9's ``KafkaApis.handleCreateTopicsRequest``): CREATE on the cluster allows every
topic; otherwise CREATE on each topic, a refused one failing TOPIC_AUTHORIZATION_FAILED ("Authorization
failed.") before any other check but the duplicate one. The answer's configs, partition count, replication
factor and topic id are shown only with DESCRIBE_CONFIGS on the topic; without it they stay empty/-1 and
``topic_config_error_code`` is TOPIC_AUTHORIZATION_FAILED (also on refused and duplicate entries, as in Kafka;
an entry failing validation keeps NONE there).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, cast

from kio.schema.errors import ErrorCode as KioErrorCode

from strata.broker.config_views import ConfigViews
from strata.broker.recovery.service import (
    READ_REPLICA_CONFIG,
    RECOVERY_CONFIG,
    RecoveredTopic,
    is_read_replica,
    merge,
    wants_recovery,
)
from strata.broker.topics import INTERNAL_TOPICS, validate_topic_name
from strata.broker.wire.dispatch import RequestContext, handles
from strata.config.log_config import canonical_topic_configs
from strata.errors import ApiError, ErrorCode, InvalidConfigError, KafkaError
from strata.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

CREATE_TOPICS = 19
# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: a request that would create more
# partitions is refused as a whole (each partition costs files and descriptors; a flipped byte in
# num_partitions must not make the broker try to open millions of them).
MAX_PARTITIONS_PER_BATCH = 10_000
# 39 is not in strata.errors.ErrorCode; kio's enum carries the same wire value and name.
INVALID_REPLICA_ASSIGNMENT = cast(ErrorCode, KioErrorCode.invalid_replica_assignment)


def check_assignment(broker_ids: Any, brokers: list[int], replication_factor: int | None) -> None:
    """Kafka's ``validateManualPartitionAssignment`` against the registered ``brokers``."""
    ids = sorted(broker_ids)
    if not ids:
        raise ApiError(INVALID_REPLICA_ASSIGNMENT,
                       "The manual partition assignment includes an empty replica list.")
    for i, b in enumerate(ids):
        if b not in brokers:
            raise ApiError(INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes broker {b}, but no such broker is registered "
                           f"(this cluster has {len(brokers)} broker(s): {', '.join(map(str, brokers))}).")
        if i and ids[i - 1] == b:
            raise ApiError(INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes the broker {b} more than once.")
    if replication_factor is not None and len(ids) != replication_factor:
        raise ApiError(INVALID_REPLICA_ASSIGNMENT,
                       f"The manual partition assignment includes a partition with {len(ids)} replica(s), but this "
                       f"is not consistent with previous partitions, which have {replication_factor} replica(s).")


def _plan(ctx: RequestContext, topic: Any) -> tuple[int, int, dict[str, str], dict[int, list[int]] | None]:
    """(partitions, replication factor, config overrides) of a valid topic; raises ApiError otherwise."""
    broker = ctx.broker
    name = topic.name
    validate_topic_name(name)
    if name in INTERNAL_TOPICS:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
    if name in broker.topics:
        raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    colliding = broker.topics.colliding_topic(name)
    if colliding is not None:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {colliding}")
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        raise ApiError(ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(nulls))
    try:  # deprecated aliases stored under Kafka's keys (a topic override DescribeConfigs reports as such)
        configs = canonical_topic_configs({c.name: c.value for c in topic.configs})
    except InvalidConfigError as e:
        raise ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
    # (a topic restored or mirrored from the remote store is tiered: its manifest's configs say so, merged later)
    broker.topics.check_configs({**configs, "remote.storage.enable": "true"} if wants_recovery(configs) else configs)
    if topic.assignments:
        if topic.replication_factor != -1:
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           "A manual partition assignment was specified, but replication factor was not set to -1.")
        if topic.num_partitions != -1:
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           "A manual partition assignment was specified, but numPartitions was not set to -1.")
        brokers = [b["node_id"] for b in broker.view.brokers()]
        manual: dict[int, list[int]] = {}
        first_rf: int | None = None
        for a in topic.assignments:
            if a.partition_index in manual:
                raise ApiError(INVALID_REPLICA_ASSIGNMENT,
                               f"Found multiple manual partition assignments for partition {a.partition_index}")
            check_assignment(a.broker_ids, brokers, first_rf)
            first_rf = len(a.broker_ids) if first_rf is None else first_rf
            manual[a.partition_index] = list(a.broker_ids)
        if set(manual) != set(range(len(manual))):
            raise ApiError(INVALID_REPLICA_ASSIGNMENT,
                           "partitions should be a consecutive 0-based integer sequence")
        return len(manual), first_rf or 1, configs, manual
    rf = topic.replication_factor
    if rf < -1 or rf == 0:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       "Replication factor must be larger than 0, or -1 to use the default value.")
    partitions = topic.num_partitions
    if partitions < -1 or partitions == 0:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
    rf = broker.config.default_replication_factor if rf == -1 else rf
    registered = broker.admin.max_replication_factor()
    if rf > registered:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                       f"cannot be reached because only {registered} broker(s) are registered.")
    partitions = broker.config.num_partitions if partitions == -1 else partitions
    return partitions, rf, configs, None


async def _recover(ctx: RequestContext, topic: Any, manual: dict[int, list[int]] | None, rf: int,
                   configs: dict[str, str]) -> RecoveredTopic:
    """``remote.recovery=true`` or ``remote.read.replica=true``: the topic as the remote store describes it,
    completed by the request."""
    broker = ctx.broker
    key = READ_REPLICA_CONFIG if is_read_replica(configs) else RECOVERY_CONFIG
    if broker.topic_recovery is None:
        raise ApiError(ErrorCode.INVALID_CONFIG, f"{key}=true needs remote storage on the broker "
                                                 "(remote.log.storage.system.enable=true)")
    plan = await broker.topic_recovery.plan(topic.name, key)
    if any(t.topic_id == plan.topic_id for t in broker.topics):
        raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"{key}: topic id {plan.manifest.topic_id} of "
                                                       f"'{topic.name}' in the remote store is in use already")
    requested = len(manual) if manual is not None else topic.num_partitions
    named_rf = rf if manual is not None or topic.replication_factor != -1 else -1
    recovered = merge(plan, requested, named_rf, broker.config.default_replication_factor,
                      broker.admin.max_replication_factor(), configs)
    broker.topics.check_configs(recovered.configs)
    return recovered


def _total_partitions(topics: Any, default_partitions: int) -> int:
    """Kafka's ``validateTotalNumberOfPartitions``: an upper bound of what the request creates."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default_partitions
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


def _error(name: str, code: int, message: str | None, config_error: int = ErrorCode.NONE) -> dict[str, Any]:
    return {"name": name, "topic_id": None, "error_code": code, "error_message": message,
            "topic_config_error_code": config_error, "num_partitions": -1, "replication_factor": -1, "configs": []}


def _refusals(ctx: RequestContext, names: set[str]) -> tuple[set[str], set[str]]:
    """(topics it may not create, topics whose configs it may not see) -- both empty without an authorizer."""
    if not ctx.broker.authorization.enabled:
        return set(), set()
    no_create: set[str] = set()
    if not ctx.authorize_cluster(AclOperation.CREATE):
        no_create = {n for n in names if not ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, n)}
    no_configs = {n for n in names if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, n)}
    return no_create, no_configs


@handles(CREATE_TOPICS)
async def create_topics(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    validate_only = getattr(request, "validate_only", False)
    views = ConfigViews(broker.config)
    counts = Counter(t.name for t in request.topics)
    no_create, no_configs = _refusals(ctx, set(counts))

    def config_error(name: str) -> int:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED if name in no_configs else ErrorCode.NONE

    results = []
    for dup in sorted(n for n, c in counts.items() if c > 1):
        results.append(_error(dup, ErrorCode.INVALID_REQUEST, "Duplicate topic name.", config_error(dup)))
    for topic in request.topics:
        if counts[topic.name] == 1 and topic.name in no_create:
            results.append(_error(topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.",
                                  config_error(topic.name)))
    allowed = [t for t in request.topics if counts[t.name] == 1 and t.name not in no_create]
    if _total_partitions(allowed, broker.config.num_partitions) > MAX_PARTITIONS_PER_BATCH:
        message = "Excessively large number of partitions per request."
        results += [_error(t.name, ErrorCode.POLICY_VIOLATION, message) for t in allowed]
        return ctx.respond(throttle_time=0, topics=results)
    planned = []
    for topic in allowed:
        try:
            planned.append((topic, _plan(ctx, topic)))
        except KafkaError as e:
            results.append(_error(topic.name, e.error_code, str(e)))

    async def create(topic: Any, plan: tuple[int, int, dict[str, str], Any]) -> dict[str, Any]:
        partitions, rf, configs, manual = plan
        topic_id = None
        try:
            recovered = await _recover(ctx, topic, manual, rf, configs) if wants_recovery(configs) else None
            if recovered is not None:
                partitions, rf, configs = recovered.partitions, recovered.replication_factor, recovered.configs
            if not validate_only:
                if recovered is None:
                    info = await broker.admin.create_topic(topic.name, partitions, rf, configs, manual)
                else:
                    await broker.topic_recovery.publish(recovered.plan)
                    info = await broker.admin.create_topic(
                        topic.name, partitions, rf, configs, manual, topic_id=recovered.plan.topic_id,
                        initial_leader_epoch=recovered.plan.initial_leader_epoch)
                topic_id = info.topic_id
        except KafkaError as e:
            return _error(topic.name, e.error_code, str(e))
        if topic.name in no_configs:  # created, but the answer shows nothing of it (Kafka's includeConfigsAndMetadata)
            return _error(topic.name, ErrorCode.NONE, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        effective = broker.topics.check_configs(configs)
        return {
            "name": topic.name, "topic_id": topic_id, "error_code": 0, "error_message": None,
            "topic_config_error_code": 0, "num_partitions": partitions, "replication_factor": rf,
            "configs": [v.create_topics_entry() for v in views.topic_configs(configs, effective)],
        }

    # In a cluster each creation waits until the controller's partition states reached this broker:
    # the topics of one request wait together, not one after another (100 topics: seconds, not minutes).
    results += await asyncio.gather(*(create(topic, plan) for topic, plan in planned))
    if validate_only:
        log.info("validate-only CreateTopics: %s", [(r["name"], int(r["error_code"])) for r in results])
    return ctx.respond(throttle_time=0, topics=results)
