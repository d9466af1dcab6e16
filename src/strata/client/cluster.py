"""A small blocking admin/fetch client: metadata, offsets, broker configs and raw fetches.

The Spark driver plans a read from a few answers (which partitions exist and who leads them,
their earliest/latest offsets, offsets for timestamps, where the remote store is) and executors
read raw record batches, which stay bytes until the columnar decoder turns them into Arrow.
Requests for a partition go to its leader, so the client works against a multi-broker Kafka
cluster as well as against Strata's single node. Every connection uses ``security`` (TLS and the
SASL login of a secured listener, :func:`strata.client.security.client_security`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from strata.client.security import ClientSecurity
from strata.client.wire import KafkaWire, SecurityError, WireError, parse_host_port

METADATA = 3
LIST_OFFSETS = 2
FETCH = 1
DESCRIBE_CONFIGS = 32
RESOURCE_BROKER = 4

METADATA_VERSION = 12  # the first version with topic ids that every supported broker has
LIST_OFFSETS_VERSION = 9  # -4 (earliest local) and -5 (latest tiered): KIP-1005
FETCH_VERSION = 11  # the last non-flexible version addressing topics by name

EARLIEST = -2
LATEST = -1
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# Error codes the callers act on (Kafka's numbers).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REPLICA_NOT_AVAILABLE = 9
KAFKA_STORAGE_ERROR = 56
RETRIABLE = {LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR,
             7, 13, 14, 15, 74, 75}  # + request timed out, network exception, coordinator loading, epoch fencing


class KafkaClientError(Exception):
    """A broker answered with an error the caller cannot retry away; ``code`` is Kafka's error code."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: UUID
    partitions: Mapping[int, PartitionInfo]
    internal: bool = False


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """A Fetch answer for one partition; ``records`` are the raw record batches as the broker sent them."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset), read_committed only
    records: bytes


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


class KafkaCluster:
    """Connections to a cluster's brokers, opened on demand from ``bootstrap`` (a comma list)."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, client_id: str = "strata-client",
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        if not self.bootstrap:
            raise WireError("no bootstrap servers given")
        for address in self.bootstrap:
            try:
                parse_host_port(address)
            except ValueError as e:
                raise WireError(f"bad bootstrap address {address!r}: {e}") from None
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.security = security
        self._any: KafkaWire | None = None
        self._nodes: dict[int, KafkaWire] = {}
        self.metadata_cache = ClusterMetadata()

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for wire in {id(w): w for w in [self._any, *self._nodes.values()] if w is not None}.values():
            wire.close()
        self._any = None
        self._nodes.clear()

    # -- connections --

    def _bootstrap_wire(self) -> KafkaWire:
        if self._any is not None:
            return self._any
        errors = []
        refused = False
        for address in random.sample(self.bootstrap, len(self.bootstrap)):
            try:
                self._any = self._connect(address)
                return self._any
            except SecurityError as e:
                refused = True
                errors.append(str(e))
            except WireError as e:
                errors.append(str(e))
        raise (SecurityError if refused else WireError)("; ".join(errors))

    def _connect(self, address: str) -> KafkaWire:
        return KafkaWire(address, self.timeout_s, self.client_id, security=self.security)

    def _node_wire(self, node_id: int) -> KafkaWire:
        wire = self._nodes.get(node_id)
        if wire is not None:
            return wire
        address = self.metadata_cache.brokers.get(node_id)
        if address is None:
            raise KafkaClientError(f"broker {node_id} is not in the cluster metadata", LEADER_NOT_AVAILABLE)
        any_wire = self._bootstrap_wire()
        if (any_wire.host, any_wire.port) == address:
            wire = any_wire
        else:
            wire = self._connect(f"{address[0]}:{address[1]}")
        self._nodes[node_id] = wire
        return wire

    def _call_any(self, api_key: int, version: int, **fields: Any) -> Any:
        try:
            return self._bootstrap_wire().call(api_key, version, **fields)
        except SecurityError:
            raise
        except WireError:
            self._drop(self._any)
            return self._bootstrap_wire().call(api_key, version, **fields)

    def _call_node(self, node_id: int, api_key: int, version: int, **fields: Any) -> Any:
        try:
            return self._node_wire(node_id).call(api_key, version, **fields)
        except SecurityError:
            raise
        except WireError:
            self._drop(self._nodes.get(node_id))
            return self._node_wire(node_id).call(api_key, version, **fields)

    def _drop(self, wire: KafkaWire | None) -> None:
        if wire is None:
            return
        wire.close()
        if self._any is wire:
            self._any = None
        for node, w in list(self._nodes.items()):
            if w is wire:
                del self._nodes[node]

    # -- metadata --

    def metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        """Brokers and the named topics (every topic when None); unknown names are left out."""
        body = self._call_any(METADATA, METADATA_VERSION,
                              topics=None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                              allow_auto_topic_creation=False)
        md = ClusterMetadata(brokers={b.node_id: (b.host, b.port) for b in body.brokers})
        for t in body.topics:
            code = _code(t.error_code)
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if code != NONE:
                raise KafkaClientError(f"metadata for topic {t.name!r}: error {code}", code)
            parts = {p.partition_index: PartitionInfo(p.partition_index, p.leader_id) for p in t.partitions}
            md.topics[t.name] = TopicInfo(t.name, t.topic_id, parts, bool(t.is_internal))
        self.metadata_cache.brokers.update(md.brokers)
        self.metadata_cache.topics.update(md.topics)
        return md

    def _leader(self, topic: str, partition: int) -> int:
        info = self.metadata_cache.topics.get(topic)
        if info is None or partition not in info.partitions:
            self.metadata([topic])
            info = self.metadata_cache.topics.get(topic)
        if info is None or partition not in info.partitions:
            raise KafkaClientError(f"unknown topic partition {topic}-{partition}", UNKNOWN_TOPIC_OR_PARTITION)
        return info.partitions[partition].leader

    def _by_leader(self, keys: Iterable[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        out: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in keys:
            out.setdefault(self._leader(topic, partition), []).append((topic, partition))
        return out

    # -- offsets --

    def list_offsets(self, queries: Mapping[tuple[str, int], int],
                     isolation_level: int = READ_UNCOMMITTED) -> dict[tuple[str, int], int]:
        """Offsets for timestamps (or -1/-2/-4/-5) per partition; -1 where no record has such a timestamp."""
        out: dict[tuple[str, int], int] = {}
        for leader, keys in self._by_leader(queries).items():
            topics: dict[str, list[dict[str, int]]] = {}
            for topic, partition in keys:
                topics.setdefault(topic, []).append({"partition_index": partition, "current_leader_epoch": -1,
                                                     "timestamp": queries[(topic, partition)]})
            body = self._call_node(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, replica_id=-1,
                                   isolation_level=isolation_level,
                                   topics=[{"name": t, "partitions": ps} for t, ps in topics.items()])
            for t in body.topics:
                for p in t.partitions:
                    code = _code(p.error_code)
                    if code != NONE:
                        raise KafkaClientError(f"ListOffsets {t.name}-{p.partition_index}: error {code}", code)
                    out[(t.name, p.partition_index)] = int(p.offset)
        return out

    # -- configs --

    def broker_configs(self, node_id: int | None = None) -> dict[str, str | None]:
        """A broker's configs as DescribeConfigs reports them (sensitive values are None)."""
        if node_id is None:
            if not self.metadata_cache.brokers:
                self.metadata([])
            node_id = min(self.metadata_cache.brokers)
        body = self._call_node(node_id, DESCRIBE_CONFIGS, 4, resources=[
            {"resource_type": RESOURCE_BROKER, "resource_name": str(node_id), "configuration_keys": None}],
            include_synonyms=False, include_documentation=False)
        result = body.results[0]
        code = _code(result.error_code)
        if code != NONE:
            raise KafkaClientError(f"DescribeConfigs broker {node_id}: error {code} {result.error_message}", code)
        return {c.name: c.value for c in result.configs}

    # -- fetch --

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 8 << 20,
              isolation_level: int = READ_UNCOMMITTED, max_wait_ms: int = 500) -> FetchedPartition:
        """One Fetch of one partition from its leader; errors come back in ``error_code``."""
        leader = self._leader(topic, partition)
        body = self._call_node(leader, FETCH, FETCH_VERSION, replica_id=-1, max_wait=max_wait_ms, min_bytes=1,
                               max_bytes=max_bytes, isolation_level=isolation_level, session_id=0,
                               session_epoch=-1, topics=[{"topic": topic, "partitions": [{
                                   "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                   "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
                               forgotten_topics_data=[], rack_id="")
        code = _code(body.error_code)
        if code != NONE:
            raise KafkaClientError(f"Fetch {topic}-{partition}: error {code}", code)
        p = body.responses[0].partitions[0]
        code = _code(p.error_code)
        if code in (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE):
            self.metadata_cache.topics.pop(topic, None)  # re-resolve the leader next time
        aborted = tuple((int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ()))
        return FetchedPartition(code, int(p.high_watermark), int(p.last_stable_offset), int(p.log_start_offset),
                                aborted, bytes(p.records or b""))
