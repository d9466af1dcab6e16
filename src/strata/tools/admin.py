"""The admin requests behind ``strata topics``, ``strata configs``, ``strata consumer-groups``,
``strata share-groups`` and ``strata acls``.

:class:`KafkaAdmin` adds Kafka's admin APIs to :class:`strata.client.cluster.KafkaCluster`, one
request per method, each sent where Kafka's admin client sends it: topic changes to the controller,
a BROKER resource's configs to that broker, group requests to the group's coordinator, ListGroups
to every broker, client quotas, SCRAM credential descriptions and ACL requests to any broker, SCRAM
credential changes to the controller. Answers come back as small dataclasses (ACLs as
:mod:`strata.security.acl`'s bindings); a broker error is an :class:`AdminError` carrying Kafka's
error code, the broker's message and the name of the Java exception Kafka's tools would print. Only
the Kafka protocol is used, so the tools work against any Kafka broker too.
"""

from __future__ import annotations

import base64
import importlib
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from strata.client.cluster import KafkaClientError, KafkaCluster, PartitionInfo, TopicInfo
from strata.client.security import ClientSecurity
from strata.client.wire import WireError
from strata.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

T = TypeVar("T")

METADATA, METADATA_V = 3, 12
CREATE_TOPICS, CREATE_TOPICS_V = 19, 5
DELETE_TOPICS, DELETE_TOPICS_V = 20, 5
CREATE_PARTITIONS, CREATE_PARTITIONS_V = 37, 2
DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_V = 32, 4
ALTER_CONFIGS, ALTER_CONFIGS_V = 33, 1
INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS_V = 44, 1
FIND_COORDINATOR, FIND_COORDINATOR_V = 10, 3
LIST_GROUPS = 16  # v5 (types filter, group types) where the broker has it, else v4 (states filter)
DESCRIBE_GROUPS, DESCRIBE_GROUPS_V = 15, 5
CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_DESCRIBE_V = 69, 1  # v1 adds member_type; v0 where the broker has only that
API_VERSIONS, API_VERSIONS_V = 18, 0
OFFSET_FETCH, OFFSET_FETCH_V = 9, 7
OFFSET_COMMIT, OFFSET_COMMIT_V = 8, 8
DELETE_GROUPS, DELETE_GROUPS_V = 42, 2
OFFSET_DELETE, OFFSET_DELETE_V = 47, 0
DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS_V = 48, 1
ALTER_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS_V = 49, 1
DESCRIBE_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS_V = 50, 0
ALTER_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS_V = 51, 0
SHARE_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE_V = 77, 1
DESCRIBE_SHARE_GROUP_OFFSETS, DESCRIBE_SHARE_GROUP_OFFSETS_V = 90, 1  # v1 adds Lag; v0 where the broker has only that
ALTER_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS_V = 91, 0
DELETE_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS_V = 92, 0
DESCRIBE_ACLS, DESCRIBE_ACLS_V = 29, 3
CREATE_ACLS, CREATE_ACLS_V = 30, 3
DELETE_ACLS, DELETE_ACLS_V = 31, 3

# ClientQuotaFilterComponent match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
RESOURCE_NOT_FOUND = 91

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
NODE_RESOURCES = (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER)  # asked of the broker they name
OP_SET, OP_DELETE = 0, 1
TIMEOUT_MS = 30_000

# Kafka's error codes -> (Java exception, Errors' default message) for what the tools print.
_EXCEPTIONS: dict[int, tuple[str, str]] = {
    -1: ("UnknownServerException", "The server experienced an unexpected error when processing the request."),
    3: ("UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    5: ("LeaderNotAvailableException", "There is no leader for this topic-partition as we are in the middle of "
                                       "a leadership election."),
    7: ("TimeoutException", "The request timed out."),
    14: ("CoordinatorLoadInProgressException", "The coordinator is loading and hence can't process requests."),
    15: ("CoordinatorNotAvailableException", "The coordinator is not available."),
    16: ("NotCoordinatorException", "This is not the correct coordinator."),
    17: ("InvalidTopicException", "The request attempted to perform an operation on an invalid topic."),
    22: ("IllegalGenerationException", "Specified group generation id is not valid."),
    24: ("InvalidGroupIdException", "The configured groupId is invalid."),
    25: ("UnknownMemberIdException", "The coordinator is not aware of this member."),
    27: ("RebalanceInProgressException", "The group is rebalancing, so a rejoin is needed."),
    29: ("TopicAuthorizationException", "Topic authorization failed."),
    30: ("GroupAuthorizationException", "Group authorization failed."),
    31: ("ClusterAuthorizationException", "Cluster authorization failed."),
    33: ("UnsupportedSaslMechanismException", "The broker does not support the requested SASL mechanism."),
    35: ("UnsupportedVersionException", "The version of API is not supported."),
    36: ("TopicExistsException", "Topic with this name already exists."),
    37: ("InvalidPartitionsException", "Number of partitions is below 1."),
    38: ("InvalidReplicationFactorException", "Replication factor is below 1 or larger than the number of "
                                              "available brokers."),
    39: ("InvalidReplicaAssignmentException", "Replica assignment is invalid."),
    40: ("InvalidConfigurationException", "Configuration is invalid."),
    41: ("NotControllerException", "This is not the correct controller for this cluster."),
    42: ("InvalidRequestException", "This most likely occurs because of a request being malformed by the client "
                                    "library or the message was sent to an incompatible broker. See the broker logs "
                                    "for more details."),
    44: ("PolicyViolationException", "Request parameters do not satisfy the configured policy."),
    54: ("SecurityDisabledException", "Security features are disabled."),
    68: ("GroupNotEmptyException", "The group is not empty."),
    69: ("GroupIdNotFoundException", "The group id does not exist."),
    73: ("TopicDeletionDisabledException", "Topic deletion is disabled."),
    86: ("GroupSubscribedToTopicException", "The consumer group is actively subscribed to the topic"),
    91: ("ResourceNotFoundException", "A request illegally referred to a resource that does not exist."),
    92: ("DuplicateResourceException", "A request illegally referred to the same resource twice."),
    93: ("UnacceptableCredentialException", "Requested credential would not meet criteria for acceptability."),
}
RETRIABLE_GROUP = {14, 15, 16}  # coordinator loading, not available, moved
UNSUPPORTED_VERSION, GROUP_ID_NOT_FOUND = 35, 69


class AdminError(Exception):
    """A broker refused a request (``code`` is Kafka's error code) or could not be reached (code -1)."""

    def __init__(self, code: int, message: str | None = None) -> None:
        name, default = _EXCEPTIONS.get(code, (None, None))
        self.code = code
        self.exception = name or "KafkaException"
        super().__init__(message or default or f"error code {code}")

    def java(self) -> str:
        """How Kafka's tools print it: ``org.apache.kafka.common.errors.TopicExistsException: ...``."""
        return f"org.apache.kafka.common.errors.{self.exception}: {self}"


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


def check(code: Any, message: str | None = None) -> None:
    if _code(code) != 0:
        raise AdminError(_code(code), message)


def uuid_text(topic_id: UUID | None) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, unpadded."""
    if topic_id is None:
        return ""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


# -- answers -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    topic_id: UUID | None
    internal: bool
    partitions: tuple[PartitionState, ...]  # sorted by partition


@dataclass
class ClusterState:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicState] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    sensitive: bool
    read_only: bool
    synonyms: tuple[tuple[str, str | None, int], ...] = ()  # (name, value, source)


@dataclass(frozen=True, slots=True)
class ClientQuotaEntry:
    """One DescribeClientQuotas entity: ``(entity type, name or None for the default)`` pairs, in the broker's
    order, and its quota values."""

    entity: tuple[tuple[str, str | None], ...]
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class UserScramDescription:
    """One DescribeUserScramCredentials result: Kafka's error code (0, or 91 for an unknown user) and the
    ``(mechanism type, iterations)`` of each credential."""

    user: str
    error_code: int
    error_message: str | None
    credentials: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """What AlterUserScramCredentials carries for a new credential: never the password."""

    user: str
    mechanism: int  # the mechanism type byte: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class Member:
    """A group member as Kafka's MemberDescription: a consumer group's (KIP-848) also has its epoch, its target
    assignment and, in a group of both kinds of member, whether it runs the consumer protocol (``upgraded``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]  # (topic, partition)
    member_epoch: int | None = None  # None for a classic group's member
    target_assignment: tuple[tuple[str, int], ...] | None = None
    upgraded: bool | None = None  # member_type 1 True, 0 (a classic member) False, -1 None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str  # Kafka's names: Stable, Empty, PreparingRebalance, CompletingRebalance, Assigning, Reconciling, Dead
    protocol_type: str  # "consumer" for a consumer group
    assignor: str  # a consumer group's server-side assignor (uniform, range)
    members: tuple[Member, ...]
    coordinator: tuple[int, str, int]  # (node id, host, port)
    group_type: str = "classic"  # or "consumer" (KIP-848), as ListGroups v5 names them
    group_epoch: int | None = None  # a consumer or share group's epochs; None for a classic group
    assignment_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """A share-partition's start offset, as the admin client's SharePartitionOffsetInfo (None: unknown)."""

    start_offset: int
    leader_epoch: int | None
    lag: int | None


def decode_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """The partitions of a ConsumerProtocol assignment (``version`` int16, then the v0-v3 body); () if unreadable."""
    if len(data) < 2:
        return ()
    from kio.serial import entity_reader

    (version,) = struct.unpack_from(">h", data)
    # a newer version is read with the newest schema, as Kafka's ConsumerProtocol does
    module = importlib.import_module(f"kio.schema.consumer_protocol_assignment.v{min(max(version, 0), 3)}")
    try:
        body, _ = entity_reader(module.ConsumerProtocolAssignment)(data, 2)
    except Exception:  # noqa: BLE001 - another protocol's bytes, or a newer version we cannot read
        return ()
    return tuple((tp.topic, int(p)) for tp in body.assigned_partitions for p in tp.partitions)


# -- the client ----------------------------------------------------------------------------------

class KafkaAdmin(KafkaCluster):
    """Kafka's admin operations over the blocking wire client; ``timeout_s`` bounds every wait."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, client_id: str = "strata-admin",
                 security: ClientSecurity | None = None) -> None:
        super().__init__(bootstrap, timeout_s, client_id, security)
        self.retry_s = timeout_s  # how long group requests wait for a coordinator that moves or loads
        self._api_versions: dict[int, dict[int, int]] = {}  # node -> api key -> highest version (ApiVersions)

    def call_any(self, api_key: int, version: int, **fields: Any) -> Any:
        return self._call_any(api_key, version, **fields)

    def call_node(self, node_id: int, api_key: int, version: int, **fields: Any) -> Any:
        return self._call_node(node_id, api_key, version, **fields)

    # -- metadata --

    def cluster(self, topics: Sequence[str] | None = None) -> ClusterState:
        """Brokers, controller and the named topics (all when None) with leader, replicas and ISR."""
        body = self.call_any(METADATA, METADATA_V,
                             topics=None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                             allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        state = ClusterState(body.cluster_id, int(body.controller_id),
                             {int(b.node_id): (b.host, int(b.port)) for b in body.brokers})
        for t in body.topics:
            code = _code(t.error_code)
            if code == 3:  # unknown topic: left out, as the admin client's describe does
                continue
            parts = tuple(sorted((PartitionState(int(p.partition_index), int(p.leader_id),
                                                 tuple(int(r) for r in p.replica_nodes),
                                                 tuple(int(r) for r in p.isr_nodes),
                                                 tuple(int(r) for r in p.offline_replicas))
                                  for p in t.partitions), key=lambda p: p.partition))
            state.topics[t.name] = TopicState(t.name, t.topic_id, bool(t.is_internal), parts)
        # keep KafkaCluster's cache in step, so list_offsets finds the leaders without asking again
        self.metadata_cache.brokers.update(state.brokers)
        for t in state.topics.values():
            self.metadata_cache.topics[t.name] = TopicInfo(
                t.name, t.topic_id or UUID(int=0), {p.partition: PartitionInfo(p.partition, p.leader)
                                                    for p in t.partitions}, t.internal)
        return state

    def _controller(self) -> int | None:
        controller = self.cluster([]).controller_id
        return controller if controller >= 0 else None

    def _call_controller(self, api_key: int, version: int, **fields: Any) -> Any:
        node = self._controller()
        if node is None:
            return self.call_any(api_key, version, **fields)
        return self.call_node(node, api_key, version, **fields)

    # -- topics --

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     assignment: Mapping[int, Sequence[int]] | None, configs: Mapping[str, str]) -> None:
        topic = {"name": name, "num_partitions": -1 if assignment else partitions,
                 "replication_factor": -1 if assignment else replication_factor,
                 "assignments": [{"partition_index": p, "broker_ids": list(ids)}
                                 for p, ids in (assignment or {}).items()],
                 "configs": [{"name": k, "value": v} for k, v in configs.items()]}
        body = self._call_controller(CREATE_TOPICS, CREATE_TOPICS_V, topics=[topic], timeout=TIMEOUT_MS,
                                     validate_only=False)
        for t in body.topics:
            check(t.error_code, t.error_message)

    def delete_topics(self, names: Sequence[str]) -> None:
        if not names:
            return
        body = self._call_controller(DELETE_TOPICS, DELETE_TOPICS_V, topic_names=list(names), timeout=TIMEOUT_MS)
        for t in body.responses:
            check(t.error_code, getattr(t, "error_message", None))

    def create_partitions(self, counts: Mapping[str, int],
                          assignments: Mapping[str, Sequence[Sequence[int]]] | None = None) -> None:
        topics = [{"name": name, "count": count,
                   "assignments": None if not (assignments or {}).get(name)
                   else [{"broker_ids": list(ids)} for ids in (assignments or {})[name]]}
                  for name, count in counts.items()]
        body = self._call_controller(CREATE_PARTITIONS, CREATE_PARTITIONS_V, topics=topics, timeout=TIMEOUT_MS,
                                     validate_only=False)
        for r in body.results:
            check(r.error_code, r.error_message)

    # -- configs --

    def describe_configs(self, resource_type: int, name: str, synonyms: bool = False) -> list[ConfigEntry]:
        """One resource's configs, in the broker's order; BROKER resources are asked of that broker."""
        resource = [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}]
        fields = {"resources": resource, "include_synonyms": synonyms, "include_documentation": False}
        if resource_type in NODE_RESOURCES and name:
            body = self.call_node(self._broker(name), DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_V, **fields)
        else:
            body = self.call_any(DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_V, **fields)
        (result,) = body.results
        check(result.error_code, result.error_message)
        return [ConfigEntry(c.name, c.value, int(c.config_source), bool(c.is_sensitive), bool(c.read_only),
                            tuple((s.name, s.value, int(s.source)) for s in c.synonyms)) for c in result.configs]

    def incremental_alter_configs(self, resource_type: int, name: str, set_: Mapping[str, str],
                                  delete: Iterable[str]) -> None:
        ops = [{"name": k, "config_operation": OP_SET, "value": v} for k, v in set_.items()]
        ops += [{"name": k, "config_operation": OP_DELETE, "value": None} for k in delete]
        fields = {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": ops}],
                  "validate_only": False}
        body = self._call_resource(resource_type, name, INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS_V,
                                   **fields)
        for r in body.responses:
            check(r.error_code, r.error_message)

    def alter_configs(self, resource_type: int, name: str, configs: Mapping[str, str | None]) -> None:
        """Legacy AlterConfigs (the whole set), which Kafka's tool uses for BROKER resources."""
        fields = {"resources": [{"resource_type": resource_type, "resource_name": name,
                                 "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                  "validate_only": False}
        body = self._call_resource(resource_type, name, ALTER_CONFIGS, ALTER_CONFIGS_V, **fields)
        for r in body.responses:
            check(r.error_code, r.error_message)

    def _call_resource(self, resource_type: int, name: str, api_key: int, version: int, **fields: Any) -> Any:
        if resource_type in NODE_RESOURCES and name:
            return self.call_node(self._broker(name), api_key, version, **fields)
        return self._call_controller(api_key, version, **fields)

    def _ensure_brokers(self) -> None:
        if not self.metadata_cache.brokers:
            self.metadata([])

    def _broker(self, name: str) -> int:
        """The node id a BROKER resource names, which must be in the cluster (Kafka's client would wait for it)."""
        self._ensure_brokers()
        if int(name) not in self.metadata_cache.brokers:
            raise AdminError(-1, f"Broker {name} is not in the cluster (brokers: "
                                 f"{','.join(map(str, sorted(self.metadata_cache.brokers)))})")
        return int(name)

    # -- client quotas and SCRAM credentials --

    def describe_client_quotas(self, components: Sequence[tuple[str, int, str | None]],
                               strict: bool) -> list[ClientQuotaEntry]:
        """DescribeClientQuotas of ``(entity type, match type, match)`` filter components (any broker)."""
        body = self.call_any(DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS_V,
                             components=[{"entity_type": t, "match_type": m, "match": name}
                                         for t, m, name in components], strict=strict)
        check(body.error_code, body.error_message)
        return [ClientQuotaEntry(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                                 {v.key: float(v.value) for v in entry.values}) for entry in body.entries or ()]

    def alter_client_quotas(self, entity: Sequence[tuple[str, str | None]],
                            ops: Sequence[tuple[str, float | None]], validate_only: bool = False) -> None:
        """AlterClientQuotas of one entity (None names the default); a value of None removes the key."""
        entry = {"entity": [{"entity_type": t, "entity_name": name} for t, name in entity],
                 "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops]}
        body = self.call_any(ALTER_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS_V, entries=[entry], validate_only=validate_only)
        for e in body.entries:
            check(e.error_code, e.error_message)

    def describe_user_scram_credentials(self, users: Sequence[str] | None = None) -> list[UserScramDescription]:
        """DescribeUserScramCredentials of the named users (every user with a credential when None or empty);
        a top-level error raises, a user's own error is in its result."""
        names = [{"name": u} for u in users] if users else None
        body = self.call_any(DESCRIBE_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS_V, users=names)
        check(body.error_code, body.error_message)
        return [UserScramDescription(r.user, _code(r.error_code), r.error_message,
                                     tuple((int(c.mechanism), int(c.iterations)) for c in r.credential_infos))
                for r in body.results]

    def alter_user_scram_credentials(self, deletions: Sequence[tuple[str, int]],
                                     upsertions: Sequence[ScramUpsertion]) -> None:
        """AlterUserScramCredentials at the controller: ``(user, mechanism type)`` deletions and upsertions; the
        first user's error raises."""
        body = self._call_controller(
            ALTER_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS_V,
            deletions=[{"name": user, "mechanism": mechanism} for user, mechanism in deletions],
            upsertions=[{"name": u.user, "mechanism": u.mechanism, "iterations": u.iterations, "salt": u.salt,
                         "salted_password": u.salted_password} for u in upsertions])
        for r in body.results:
            check(r.error_code, r.error_message)

    # -- ACLs --

    def describe_acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls (any broker): the ACLs the filter matches."""
        body = self.call_any(DESCRIBE_ACLS, DESCRIBE_ACLS_V, **_filter_fields(binding_filter))
        check(body.error_code, body.error_message)
        return [_binding(r, a) for r in body.resources for a in r.acls]

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """CreateAcls (any broker, as Kafka's admin client sends it); the first binding's error raises."""
        body = self.call_any(CREATE_ACLS, CREATE_ACLS_V, creations=[
            {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
             "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
             "host": b.entry.host, "operation": int(b.entry.operation),
             "permission_type": int(b.entry.permission_type)} for b in bindings])
        for r in body.results:
            check(r.error_code, r.error_message)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """DeleteAcls (any broker): the ACLs removed; a filter's error, or one binding's, raises."""
        body = self.call_any(DELETE_ACLS, DELETE_ACLS_V, filters=[_filter_fields(f) for f in filters])
        removed = []
        for r in body.filter_results:
            check(r.error_code, r.error_message)
            for m in r.matching_acls:
                check(m.error_code, m.error_message)
                removed.append(_binding(m, m))
        return removed

    # -- offsets --

    def offsets(self, partitions: Iterable[tuple[str, int]], spec: int) -> dict[tuple[str, int], int | None]:
        """ListOffsets (-1 latest, -2 earliest, or a timestamp) per partition; None for unknown partitions."""
        keys = sorted(set(partitions))
        topics = self.cluster(sorted({t for t, _ in keys})).topics if keys else {}
        known = [(t, p) for t, p in keys if t in topics and any(ps.partition == p for ps in topics[t].partitions)]
        try:
            found: dict[tuple[str, int], int] = self.list_offsets(dict.fromkeys(known, spec)) if known else {}
        except KafkaClientError as e:
            raise AdminError(e.code, str(e)) from None
        return {k: found.get(k) for k in keys}

    # -- groups --

    def api_version(self, node: int, api_key: int) -> int | None:
        """The highest version of ``api_key`` that broker ``node`` advertises (ApiVersions v0, asked once per
        node), None when it has none."""
        versions = self._api_versions.get(node)
        if versions is None:
            body = self.call_node(node, API_VERSIONS, API_VERSIONS_V)
            check(body.error_code)
            versions = self._api_versions[node] = {int(k.api_key): int(k.max_version) for k in body.api_keys}
        return versions.get(api_key)

    def list_groups(self, states: Sequence[str] = (), types: Sequence[str] = ()) -> list[GroupListing]:
        """Every broker's groups (each coordinator knows its own), consumer groups only (protocol type
        ``consumer`` or empty, classic or KIP-848), as the admin client. ListGroups v5 gives each group's type
        (``classic``/``consumer``); a broker without v5 is asked v4, its groups being classic."""
        return self._list_groups(states, types, ("consumer", ""))

    def list_share_groups(self, states: Sequence[str] = ()) -> list[GroupListing]:
        """Every broker's share groups (KIP-932), as ``listGroups(ListGroupsOptions.forShareGroups())``:
        ListGroups v5 filtered by type ``share`` (UNSUPPORTED_VERSION from a broker without v5)."""
        return self._list_groups(states, ["share"], ("share",))

    def _list_groups(self, states: Sequence[str], types: Sequence[str],
                     protocol_types: Sequence[str]) -> list[GroupListing]:
        self._ensure_brokers()
        out: dict[str, GroupListing] = {}
        for node in sorted(self.metadata_cache.brokers):
            version = 5 if (self.api_version(node, LIST_GROUPS) or 0) >= 5 else 4
            if types and version < 5:
                raise AdminError(UNSUPPORTED_VERSION, "The broker does not support listing groups by type.")
            fields: dict[str, Any] = {"states_filter": list(states)}
            if version >= 5:
                fields["types_filter"] = list(types)
            body = self.call_node(node, LIST_GROUPS, version, **fields)
            check(body.error_code)
            for g in body.groups:
                if g.protocol_type not in protocol_types:
                    continue
                out[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state,
                                               getattr(g, "group_type", "") or "classic")
        return list(out.values())

    def coordinator(self, group_id: str) -> tuple[int, str, int]:
        body = self.call_any(FIND_COORDINATOR, FIND_COORDINATOR_V, key=group_id, key_type=0)
        check(body.error_code, body.error_message)
        node = int(body.node_id)
        self.metadata_cache.brokers.setdefault(node, (body.host, int(body.port)))
        return node, body.host, int(body.port)

    def _at_coordinator(self, group_id: str, call: Callable[[int], T]) -> T:
        """``call(coordinator)``, finding the coordinator again while it moves or loads (bounded by the timeout)."""
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                node, _, _ = self.coordinator(group_id)
                return call(node)
            except AdminError as e:
                if e.code not in RETRIABLE_GROUP or time.monotonic() >= deadline:
                    raise
            time.sleep(0.2)

    def describe_group(self, group_id: str) -> GroupDescription:
        """As the admin client's describeConsumerGroups: ConsumerGroupDescribe at the coordinator first, then
        DescribeGroups when the group is not a consumer group (GROUP_ID_NOT_FOUND) or the broker lacks the API."""
        def describe(node: int) -> GroupDescription:
            host, port = self.metadata_cache.brokers.get(node, ("", -1))
            not_found = None  # ConsumerGroupDescribe's message, which says more than DescribeGroups' does
            version = self.api_version(node, CONSUMER_GROUP_DESCRIBE)
            if version is not None:
                body = self.call_node(node, CONSUMER_GROUP_DESCRIBE, min(version, CONSUMER_GROUP_DESCRIBE_V),
                                      group_ids=[group_id], include_authorized_operations=False)
                (g,) = body.groups
                code = _code(g.error_code)
                if code == 0:
                    return _consumer_group(g, (node, host, port))
                if code not in (GROUP_ID_NOT_FOUND, UNSUPPORTED_VERSION):
                    check(code, g.error_message)
                not_found = g.error_message if code == GROUP_ID_NOT_FOUND else None
            body = self.call_node(node, DESCRIBE_GROUPS, DESCRIBE_GROUPS_V, groups=[group_id],
                                  include_authorized_operations=False)
            (g,) = body.groups
            code = _code(g.error_code)
            check(code, (not_found if code == GROUP_ID_NOT_FOUND else None) or getattr(g, "error_message", None))
            consumer = g.protocol_type in ("consumer", "")
            members = tuple(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   decode_assignment(bytes(m.member_assignment)) if consumer else ())
                            for m in g.members)
            return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members,
                                    (node, host, port))

        return self._at_coordinator(group_id, describe)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int | None]:
        """The group's committed offsets (None where a partition has none)."""
        return {tp: offset for tp, (offset, _) in self.committed_offsets_and_epochs(group_id).items()}

    def committed_offsets_and_epochs(self, group_id: str) -> dict[tuple[str, int], tuple[int | None, int | None]]:
        """The group's committed ``(offset, leader epoch)`` per partition, None where there is none."""
        def fetch(node: int) -> dict[tuple[str, int], tuple[int | None, int | None]]:
            body = self.call_node(node, OFFSET_FETCH, OFFSET_FETCH_V, group_id=group_id, topics=None,
                                  require_stable=False)
            check(body.error_code)
            out: dict[tuple[str, int], tuple[int | None, int | None]] = {}
            for t in body.topics:
                for p in t.partitions:
                    check(p.error_code)
                    offset, epoch = int(p.committed_offset), int(p.committed_leader_epoch)
                    out[(t.name, int(p.partition_index))] = (offset if offset >= 0 else None,
                                                             epoch if offset >= 0 and epoch >= 0 else None)
            return out

        return self._at_coordinator(group_id, fetch)

    def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """A commit outside any generation, as the admin client's alterConsumerGroupOffsets (inactive groups)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""})

        def commit(node: int) -> None:
            body = self.call_node(node, OFFSET_COMMIT, OFFSET_COMMIT_V, group_id=group_id,
                                  generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                                  topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
            for t in body.topics:
                for p in t.partitions:
                    check(p.error_code)

        if by_topic:
            self._at_coordinator(group_id, commit)

    def delete_group(self, group_id: str) -> None:
        def delete(node: int) -> None:
            body = self.call_node(node, DELETE_GROUPS, DELETE_GROUPS_V, groups_names=[group_id])
            for r in body.results:
                check(r.error_code)

        self._at_coordinator(group_id, delete)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """OffsetDelete: the error code per partition; a group-level error raises."""
        by_topic: dict[str, list[dict[str, int]]] = {}
        for topic, partition in sorted(set(partitions)):
            by_topic.setdefault(topic, []).append({"partition_index": partition})

        def delete(node: int) -> dict[tuple[str, int], int]:
            body = self.call_node(node, OFFSET_DELETE, OFFSET_DELETE_V, group_id=group_id,
                                  topics=[{"name": t, "partitions": ps} for t, ps in by_topic.items()])
            check(body.error_code)
            return {(t.name, int(p.partition_index)): _code(p.error_code) for t in body.topics for p in t.partitions}

        return self._at_coordinator(group_id, delete)

    # -- share groups (KIP-932) --

    def describe_share_group(self, group_id: str) -> GroupDescription:
        """ShareGroupDescribe at the coordinator; AdminError GROUP_ID_NOT_FOUND (the broker's message) for a
        group that does not exist or is not a share group."""
        def describe(node: int) -> GroupDescription:
            host, port = self.metadata_cache.brokers.get(node, ("", -1))
            body = self.call_node(node, SHARE_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE_V, group_ids=[group_id],
                                  include_authorized_operations=False)
            (g,) = body.groups
            check(g.error_code, g.error_message)
            members = tuple(Member(m.member_id, None, m.client_id, m.client_host, _partitions(m.assignment),
                                   int(m.member_epoch), rack_id=m.rack_id) for m in g.members)
            return GroupDescription(g.group_id, g.group_state, "share", g.assignor_name, members, (node, host, port),
                                    "share", int(g.group_epoch), int(g.assignment_epoch))

        return self._at_coordinator(group_id, describe)

    def share_group_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
                            ) -> dict[tuple[str, int], SharePartitionOffset | None]:
        """DescribeShareGroupOffsets of the given partitions (every initialized one when None), as the admin
        client's listShareGroupOffsets: None where a partition has no start offset; a partition answered with
        an error is left out, a group-level error raises."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for topic, partition in sorted(set(partitions)):
                topics.setdefault(topic, []).append(partition)

        def describe(node: int) -> dict[tuple[str, int], SharePartitionOffset | None]:
            version = min(self.api_version(node, DESCRIBE_SHARE_GROUP_OFFSETS) or 0, DESCRIBE_SHARE_GROUP_OFFSETS_V)
            body = self.call_node(node, DESCRIBE_SHARE_GROUP_OFFSETS, version, groups=[{
                "group_id": group_id, "topics": None if topics is None else
                [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]}])
            (g,) = body.groups
            check(g.error_code, g.error_message)
            out: dict[tuple[str, int], SharePartitionOffset | None] = {}
            for t in g.topics:
                for p in t.partitions:
                    if _code(p.error_code):
                        continue
                    start, epoch, lag = int(p.start_offset), int(p.leader_epoch), int(getattr(p, "lag", -1))
                    out[(t.topic_name, int(p.partition_index))] = None if start < 0 else SharePartitionOffset(
                        start, epoch if epoch >= 0 else None, lag if lag >= 0 else None)
            return out

        return self._at_coordinator(group_id, describe)

    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """AlterShareGroupOffsets (the group must be empty); the first error raises, as ``all()`` does."""
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append({"partition_index": partition, "start_offset": offset})

        def alter(node: int) -> None:
            body = self.call_node(node, ALTER_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS_V, group_id=group_id,
                                  topics=[{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()])
            check(body.error_code, body.error_message)
            for t in body.responses:
                for p in t.partitions:
                    check(p.error_code, p.error_message)

        self._at_coordinator(group_id, alter)

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> dict[str, AdminError | None]:
        """DeleteShareGroupOffsets of whole topics: each topic's error (None: deleted); a group-level error
        raises. A topic the broker did not answer gets the admin client's IllegalArgumentException message."""
        names = sorted(set(topics))

        def delete(node: int) -> dict[str, AdminError | None]:
            body = self.call_node(node, DELETE_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS_V, group_id=group_id,
                                  topics=[{"topic_name": t} for t in names])
            check(body.error_code, body.error_message)
            answered = {t.topic_name: None if not _code(t.error_code) else AdminError(_code(t.error_code),
                                                                                      t.error_message)
                        for t in body.responses}
            return {t: answered[t] if t in answered else AdminError(
                -1, f'Offset deletion result for topic "{t}" was not included in the response') for t in names}

        return self._at_coordinator(group_id, delete)


def _partitions(assignment: Any) -> tuple[tuple[str, int], ...]:
    """A ConsumerGroupDescribe assignment as sorted ``(topic, partition)`` pairs."""
    return tuple(sorted((t.topic_name, int(p)) for t in assignment.topic_partitions for p in t.partitions))


def _consumer_group(g: Any, coordinator: tuple[int, str, int]) -> GroupDescription:
    """A KIP-848 consumer group from its ConsumerGroupDescribe entry (v0 has no member_type)."""
    members = tuple(Member(m.member_id, m.instance_id, m.client_id, m.client_host, _partitions(m.assignment),
                           int(m.member_epoch), _partitions(m.target_assignment),
                           None if (kind := int(getattr(m, "member_type", -1))) == -1 else kind == 1, m.rack_id)
                    for m in g.members)
    return GroupDescription(g.group_id, g.group_state, "consumer", g.assignor_name, members, coordinator,
                            "consumer", int(g.group_epoch), int(g.assignment_epoch))


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    """An ACL binding filter as DescribeAcls and DeleteAcls carry it."""
    pf, ef = f.pattern_filter, f.entry_filter
    return {"resource_type_filter": int(pf.resource_type), "resource_name_filter": pf.name,
            "pattern_type_filter": int(pf.pattern_type), "principal_filter": ef.principal,
            "host_filter": ef.host, "operation": int(ef.operation), "permission_type": int(ef.permission_type)}


def _binding(resource: Any, entry: Any) -> AclBinding:
    """A binding from a response's resource fields (type, name, pattern type) and entry fields (principal,
    host, operation, permission type): DescribeAcls nests the second in the first, DeleteAcls has both in one."""
    return AclBinding(ResourcePattern(ResourceType.from_code(int(resource.resource_type)), resource.resource_name,
                                      PatternType.from_code(int(resource.pattern_type))),
                      AccessControlEntry(entry.principal, entry.host, AclOperation.from_code(int(entry.operation)),
                                         AclPermissionType.from_code(int(entry.permission_type))))


def connect(bootstrap: str, timeout_s: float = 30.0, security: ClientSecurity | None = None) -> KafkaAdmin:
    """A KafkaAdmin, or AdminError(-1) naming what is wrong with the address."""
    try:
        return KafkaAdmin(bootstrap, timeout_s, security=security)
    except WireError as e:
        raise AdminError(-1, str(e)) from None
