"""Kafka's ZooKeeper-mode znode paths and JSON, byte for byte (``kafka.zk.ZkData`` in Kafka 3.9).

Strata keeps Kafka's layout so that Kafka's documentation, ``zkCli.sh`` habits and the controller's state
machines apply unchanged, and so that golden tests can compare against the bytes a Kafka broker writes.
This module is pure: paths, codecs and the value types they decode to. No kazoo, no I/O.

**What "byte for byte" takes.** Kafka encodes with a default Jackson ``ObjectMapper`` (compact: no spaces
after ``:`` or ``,``; non-ASCII written raw as UTF-8; control characters escaped as ``\\n`` etc. or ``\\u00XX``
with upper-case hex) from Scala and Java *hash maps*, so the key order is hash-table iteration order, not the
order in the source. The partition state, for instance, is
``{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}``. Fixed key sets below use the
constant order Kafka produces; variable key sets (partition ids, config names, more than four listener names)
are ordered by emulating the JVM collection Kafka builds (``_scala_*``/``_java_*`` helpers). All of it was
checked against the real ``scala-library`` 2.13 and Jackson jars (the golden strings in the tests come from
there).

**Decoding** is lenient where Kafka is (extra keys are ignored, optional keys may be missing) and raises
:class:`ZNodeDecodeError` where Kafka would throw. One deliberate difference: Kafka treats unparsable JSON in a
topic znode as an empty assignment; here it raises, because silently dropping a topic's partitions is worse than
failing loudly.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from strata.common.hashing import java_string_hash
from strata.common.types import TopicPartition
from strata.log.checkpoints import topic_id_from_str, topic_id_to_str

__all__ = [
    "ADMIN_PATH",
    "BROKERS_PATH",
    "CONFIG_PATH",
    "CONSUMERS_PATH",
    "FEATURE_PATH",
    "ISR_CHANGE_NOTIFICATION_PATH",
    "LOG_DIR_EVENT_NOTIFICATION_PATH",
    "PERSISTENT_PATHS",
    "BrokerIdZNode",
    "BrokerIdsZNode",
    "BrokerRegistration",
    "BrokerSequenceIdZNode",
    "ClusterIdZNode",
    "ConfigEntityChangeNotificationZNode",
    "ConfigEntityZNode",
    "ConfigType",
    "ControllerEpochZNode",
    "ControllerRegistration",
    "ControllerZNode",
    "DeleteTopicsZNode",
    "Endpoint",
    "LeaderAndIsr",
    "LeaderRecoveryState",
    "PreferredReplicaElectionZNode",
    "ProducerIdBlockZNode",
    "ProducerIdsBlock",
    "ReassignPartitionsZNode",
    "ReplicaAssignment",
    "TopicAssignment",
    "TopicPartitionStateZNode",
    "TopicZNode",
    "TopicsZNode",
    "ZNodeDecodeError",
    "ZkVersion",
    "sequence_number",
]


class ZNodeDecodeError(ValueError):
    """A znode's content is not what Kafka would have written (Kafka throws KafkaException/IllegalArgument)."""


class ZkVersion:
    """Kafka's pseudo znode versions (``ZkData.ZkVersion``): what a conditional write expects."""

    MATCH_ANY_VERSION = -1  # a conditional set with -1 matches any version (ZooKeeper's own convention)
    UNKNOWN_VERSION = -2  # Kafka's marker for "the znode did not exist when read"


# -- top-level paths ---------------------------------------------------------------------------

ADMIN_PATH = "/admin"
BROKERS_PATH = "/brokers"
CLUSTER_PATH = "/cluster"
CONFIG_PATH = "/config"
CONSUMERS_PATH = "/consumers"  # the pre-0.9 consumer's path; Kafka still creates it at startup
FEATURE_PATH = "/feature"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"


class ConfigType:
    """Entity types under ``/config`` (``org.apache.kafka.server.config.ConfigType``)."""

    TOPIC = "topics"
    CLIENT = "clients"
    USER = "users"
    BROKER = "brokers"
    IP = "ips"
    # ConfigType.ALL: the types whose /config/<type> Kafka creates at startup (client-metrics is KRaft-only)
    ALL: ClassVar[tuple[str, ...]] = (TOPIC, CLIENT, USER, BROKER, IP)


# -- JSON exactly as Jackson writes it ---------------------------------------------------------

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\U00010000-\U0010ffff]')


def _escape(match: re.Match[str]) -> str:
    """Jackson's escapes: short forms, else ``\\uXXXX`` in upper-case hex. Its UTF-8 generator also writes a
    character outside the BMP as its two escaped UTF-16 surrogates instead of four UTF-8 bytes."""
    char = match.group()
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 | code >> 10:04X}\\u{0xDC00 | code & 0x3FF:04X}"
    return _SHORT_ESCAPES.get(char) or f"\\u{code:04X}"


def _json(value: Any) -> str:
    """Serialize like a default Jackson ObjectMapper. Dicts keep their (already Kafka-ordered) key order."""
    if isinstance(value, str):
        return '"' + _NEEDS_ESCAPE.sub(_escape, value) + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(_json(str(k)) + ":" + _json(v) for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__} as znode JSON")


def _encode(pairs: Mapping[str, Any]) -> bytes:
    return _json(pairs).encode("utf-8")


def _ordered(pairs: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """``pairs`` rearranged into Kafka's key order; keys absent from ``pairs`` are skipped."""
    return {key: pairs[key] for key in order if key in pairs}


# -- JVM hash-table iteration orders -------------------------------------------------------------
#
# Jackson walks the map it is given, so the key order is whatever the JVM collection iterates in. These
# emulate exactly the collections ZkData builds, for String keys. All hashes are kept as unsigned 32-bit ints.

_MASK32 = 0xFFFFFFFF


def _java_string_hash(text: str) -> int:
    """``String.hashCode`` over UTF-16 code units, as an unsigned 32-bit int."""
    return java_string_hash(text) & _MASK32


def _signed32(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def _scala_improve(h: int) -> int:
    """``scala.collection.Hashing.improve``: the hash a Scala 2.13 immutable HashMap (CHAMP) files keys by."""
    h = (h + (~(h << 9) & _MASK32)) & _MASK32
    h ^= h >> 14
    h = (h + (h << 4)) & _MASK32
    return h ^ (h >> 10)


def _scala_immutable_map_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a Scala 2.13 ``immutable.Map`` built from ``keys`` (``Map(...)``, ``.toMap``).

    Up to four distinct keys give Map1..Map4, which keep insertion order. From five on the map is a CHAMP
    trie: each node yields its inline entries in order of their 5-bit hash fragment, then descends into its
    sub-nodes (fragments shared by several keys) in fragment order.
    """
    distinct = list(dict.fromkeys(keys))
    if len(distinct) <= 4:
        return distinct

    def walk(group: list[tuple[int, str]], shift: int) -> list[str]:
        if shift >= 32:  # equal improved hashes: a collision node, which keeps insertion order
            return [key for _, key in group]
        buckets: dict[int, list[tuple[int, str]]] = {}
        for item in group:
            buckets.setdefault(item[0] >> shift & 31, []).append(item)
        inline = [b[0][1] for _, b in sorted(buckets.items()) if len(b) == 1]
        nested = [key for _, b in sorted(buckets.items()) if len(b) > 1 for key in walk(b, shift + 5)]
        return inline + nested

    return walk([(_scala_improve(_java_string_hash(k)), k) for k in distinct], 0)


def _scala_mutable_map_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a Scala 2.13 ``mutable.HashMap`` filled by ``+=`` from empty.

    Buckets are walked in index order and each bucket is kept sorted by (signed) hash, so the order only
    depends on the key set and the table size: 16, doubled whenever an insertion would reach 3/4 full.
    """
    distinct = list(dict.fromkeys(keys))
    table_size = 16
    for count in range(1, len(distinct) + 1):
        if count >= int(table_size * 0.75):
            table_size *= 2
    hashes = {}
    for key in distinct:
        h = _java_string_hash(key)
        hashes[key] = h ^ (h >> 16)
    return sorted(distinct, key=lambda k: (hashes[k] & (table_size - 1), _signed32(hashes[k])))


def _java_properties_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a ``java.util.Properties`` filled by ``setProperty`` in ``keys`` order (Java 9+).

    Since Java 9 a Properties object keeps its entries in a ``ConcurrentHashMap(8)``: 16 bins, a bin's list in
    insertion order, and a resize to twice the size once the count reaches 3/4. A resize splits each bin in two,
    reversing the nodes before the bin's last run of same-side nodes (``ConcurrentHashMap.transfer``).
    Not emulated: bins of 8+ colliding keys (treeification), which needs dozens of keys in one bin.
    (On Java 8 -- deprecated for Kafka brokers since 3.0 -- Properties was a Hashtable, with another order.)
    """
    size, size_ctl = 16, 12
    bins: list[list[tuple[int, str]]] = [[] for _ in range(size)]
    count = 0
    for key in keys:
        h = _java_string_hash(key)
        h = (h ^ (h >> 16)) & 0x7FFFFFFF
        chain = bins[h & (size - 1)]
        if any(existing == key for _, existing in chain):
            continue  # a replaced value keeps its position
        chain.append((h, key))
        count += 1
        if count >= size_ctl:
            new_bins: list[list[tuple[int, str]]] = [[] for _ in range(size * 2)]
            for index, old in enumerate(bins):
                if not old:
                    continue
                last_run = len(old) - 1  # start of the longest tail whose nodes all go to the same side
                while last_run > 0 and (old[last_run - 1][0] & size) == (old[-1][0] & size):
                    last_run -= 1
                low = [node for node in reversed(old[:last_run]) if not node[0] & size]
                high = [node for node in reversed(old[:last_run]) if node[0] & size]
                (high if old[-1][0] & size else low).extend(old[last_run:])
                new_bins[index], new_bins[index + size] = low, high
            bins, size_ctl, size = new_bins, size * 2 - size // 2, size * 2
    return [key for chain in bins for _, key in chain]


# -- decoding helpers ----------------------------------------------------------------------------


def _parse_object(data: bytes | None, what: str) -> dict[str, Any]:
    if not data:
        raise ZNodeDecodeError(f"{what}: empty znode")
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise ZNodeDecodeError(f"{what}: not JSON: {data[:200]!r}") from e
    if not isinstance(parsed, dict):
        raise ZNodeDecodeError(f"{what}: expected a JSON object, got {data[:200]!r}")
    return parsed


def _int(obj: Mapping[str, Any], key: str, what: str) -> int:
    """Kafka's ``to[Int]``: present, integral (not a bool, not a string)."""
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZNodeDecodeError(f"{what}: {key!r} must be an integer, got {value!r}")
    return value


def _str(obj: Mapping[str, Any], key: str, what: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ZNodeDecodeError(f"{what}: {key!r} must be a string, got {value!r}")
    return value


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise ZNodeDecodeError(f"{what}: expected a list of integers, got {value!r}")
    return tuple(value)


_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def _java_parse_int(text: str, what: str) -> int:
    """``Integer.parseInt``/``Long.parseLong``-strict parsing (no whitespace, no underscores)."""
    if not _JAVA_INT.fullmatch(text):
        raise ZNodeDecodeError(f"{what}: {text!r} is not an integer")
    return int(text)


def _timestamp(obj: Mapping[str, Any]) -> int | None:
    value = obj.get("timestamp")
    if isinstance(value, str) and _JAVA_INT.fullmatch(value):
        return int(value)
    return None


def sequence_number(path: str, prefix: str) -> str:
    """The 10-digit suffix ZooKeeper appended to a sequential znode (Kafka's ``sequenceNumber(path)``)."""
    index = path.rfind(prefix)
    if index < 0:
        raise ValueError(f"{path!r} is not a {prefix!r} sequential znode")
    return path[index + len(prefix):]


# -- /cluster/id ---------------------------------------------------------------------------------


class ClusterIdZNode:
    """``/cluster/id``: the cluster id, created once by the first broker (``createOrGetClusterId``)."""

    PATH = f"{CLUSTER_PATH}/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        # Note the string "1": Kafka wrote this version as a string from the start.
        return _encode({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes) -> str:
        return _str(_parse_object(data, ClusterIdZNode.PATH), "id", ClusterIdZNode.PATH)


# -- /controller and /controller_epoch ----------------------------------------------------------


@dataclass(frozen=True)
class ControllerRegistration:
    """The content of the ephemeral ``/controller`` znode.

    ``kraft_controller_epoch`` is -1 when a ZooKeeper-mode broker is controller (version 2) and None for a
    version-1 znode; a value >= 0 means a KRaft controller took over during a migration, which Strata never does.
    """

    broker_id: int
    timestamp_ms: int | None = None
    kraft_controller_epoch: int | None = -1


class ControllerZNode:
    """``/controller``: ephemeral, owned by the elected controller's session."""

    PATH = "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int, kraft_controller_epoch: int = -1) -> bytes:
        return _encode({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms),
                        "kraftControllerEpoch": kraft_controller_epoch})

    @staticmethod
    def decode(data: bytes) -> ControllerRegistration:
        what = ControllerZNode.PATH
        obj = _parse_object(data, what)
        kraft = _int(obj, "kraftControllerEpoch", what) if "kraftControllerEpoch" in obj else None
        return ControllerRegistration(_int(obj, "brokerid", what), _timestamp(obj), kraft)


class ControllerEpochZNode:
    """``/controller_epoch``: the epoch as a plain decimal string; its *znode version* is the fencing token."""

    PATH = "/controller_epoch"
    INITIAL_EPOCH = 0  # KafkaController.InitialControllerEpoch: the first elected controller gets 1
    INITIAL_EPOCH_ZK_VERSION = 0

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode("ascii")

    @staticmethod
    def decode(data: bytes) -> int:
        try:
            text = data.decode("utf-8")
        except (AttributeError, UnicodeDecodeError) as e:
            raise ZNodeDecodeError(f"{ControllerEpochZNode.PATH}: {data!r} is not an integer") from e
        return _java_parse_int(text, ControllerEpochZNode.PATH)


# -- /brokers/ids/<id> ---------------------------------------------------------------------------

_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")  # SocketServerConfigs.URI_PARSE_REGEXP


@dataclass(frozen=True)
class Endpoint:
    """One advertised listener. ``host`` None means the wildcard address (Kafka stores an empty host as null)."""

    listener: str
    host: str | None
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        """Kafka's ``EndPoint.connectionString``: ``LISTENER://host:port``, IPv6 hosts in brackets."""
        if self.host is None:
            address = f":{self.port}"
        elif ":" in self.host:
            address = f"[{self.host}]:{self.port}"
        else:
            address = f"{self.host}:{self.port}"
        return f"{self.listener}://{address}"

    @classmethod
    def parse(cls, text: str, protocols: Mapping[str, str]) -> Endpoint:
        """Parse ``LISTENER://host:port`` the way ``SocketServerConfigs.listenerListToEndPoints`` does."""
        match = _ENDPOINT.fullmatch(text.strip())
        if match is None:
            raise ZNodeDecodeError(f"unable to parse {text!r} to a broker endpoint")
        listener = match.group(1).upper()  # ListenerName.normalised
        if listener not in protocols:
            raise ZNodeDecodeError(f"no security protocol defined for listener {listener}")
        return cls(listener, match.group(2) or None, int(match.group(3)), protocols[listener])


@dataclass(frozen=True)
class BrokerRegistration:
    """A broker's ``/brokers/ids/<id>`` registration.

    ``epoch`` is the znode's ``czxid`` (Kafka's broker epoch), which is not part of the JSON: the reader passes
    it to :meth:`BrokerIdZNode.decode`. A broker that re-registers gets a new czxid, which is how the
    controller tells a bounced broker from one that never left.
    """

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int | None = None
    features: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    version: int = 5
    epoch: int = -1

    def endpoint(self, listener: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


class BrokerIdsZNode:
    """``/brokers/ids``: one ephemeral child per live broker."""

    PATH = f"{BROKERS_PATH}/ids"


class BrokerSequenceIdZNode:
    """``/brokers/seqid``: its znode version generates broker ids (``generateBrokerSequenceId``)."""

    PATH = f"{BROKERS_PATH}/seqid"


class BrokerIdZNode:
    """``/brokers/ids/<id>``: the ephemeral broker registration, JSON version 5 (IBP >= 2.7)."""

    VERSION = 5
    # mutable.HashMap iteration order of the v5 keys (table of 16), as Kafka writes them
    _KEY_ORDER = ("features", "listener_security_protocol_map", "endpoints", "rack", "jmx_port", "port", "host",
                  "version", "timestamp")

    @staticmethod
    def path(broker_id: int) -> str:
        return f"{BrokerIdsZNode.PATH}/{broker_id}"

    @staticmethod
    def encode(registration: BrokerRegistration, timestamp_ms: int | None = None) -> bytes:
        """Version-5 JSON. The top-level host/port are the first PLAINTEXT endpoint's (null/-1 if none), for
        pre-0.10 clients; ``rack`` is omitted rather than written as null when the broker has none.

        ``timestamp_ms`` (Kafka: the time of encoding) defaults to the registration's own timestamp.
        """
        timestamp_ms = registration.timestamp_ms if timestamp_ms is None else timestamp_ms
        if timestamp_ms is None:
            raise ValueError("a broker registration needs a timestamp")
        endpoints = registration.endpoints
        plaintext = next((e for e in endpoints if e.security_protocol == "PLAINTEXT"), None)
        protocol_map = {e.listener: e.security_protocol for e in endpoints}  # Scala .toMap: last wins
        pairs: dict[str, Any] = {
            "version": BrokerIdZNode.VERSION,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "endpoints": [e.connection_string for e in endpoints],
            "jmx_port": registration.jmx_port,
            "timestamp": str(timestamp_ms),
            "listener_security_protocol_map": {
                k: protocol_map[k] for k in _scala_immutable_map_order(e.listener for e in endpoints)},
            # Strata supports no KIP-584 features, so Kafka writes {} too; non-empty maps keep their given order.
            "features": {name: dict(versions) for name, versions in registration.features.items()},
        }
        if registration.rack is not None:
            pairs["rack"] = registration.rack
        return _encode(_ordered(pairs, BrokerIdZNode._KEY_ORDER))

    @staticmethod
    def decode(broker_id: int, data: bytes, epoch: int = -1) -> BrokerRegistration:
        """Any version from 1 to 5, as ``BrokerIdZNode.decode`` reads them; ``epoch`` is the znode's czxid."""
        what = BrokerIdZNode.path(broker_id)
        obj = _parse_object(data, what)
        version = _int(obj, "version", what)
        jmx_port = _int(obj, "jmx_port", what)
        if version < 1:
            raise ZNodeDecodeError(f"{what}: unsupported version of broker registration: {version}")
        if version == 1:
            host = obj.get("host")
            if not isinstance(host, str):
                raise ZNodeDecodeError(f"{what}: 'host' must be a string, got {host!r}")
            endpoints: tuple[Endpoint, ...] = (Endpoint("PLAINTEXT", host, _int(obj, "port", what)),)
        else:
            raw_map = obj.get("listener_security_protocol_map")
            if raw_map is None:
                protocols = {p: p for p in _SECURITY_PROTOCOLS}  # SocketServerConfigs.DEFAULT_NAME_TO_SECURITY_PROTO
            elif isinstance(raw_map, dict) and all(
                isinstance(v, str) and v.upper() in _SECURITY_PROTOCOLS for v in raw_map.values()
            ):
                # keys are listener names as written (Kafka does not normalise them here); protocol names go
                # through SecurityProtocol.forName, which upper-cases
                protocols = {k: v.upper() for k, v in raw_map.items()}
            else:
                raise ZNodeDecodeError(f"{what}: bad listener_security_protocol_map {raw_map!r}")
            raw_endpoints = obj.get("endpoints")
            if not isinstance(raw_endpoints, list) or not all(isinstance(e, str) for e in raw_endpoints):
                raise ZNodeDecodeError(f"{what}: 'endpoints' must be a list of strings, got {raw_endpoints!r}")
            try:
                endpoints = tuple(Endpoint.parse(e, protocols) for e in raw_endpoints)
            except ZNodeDecodeError as e:
                raise ZNodeDecodeError(f"{what}: {e}") from None
        rack = obj.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise ZNodeDecodeError(f"{what}: 'rack' must be a string, got {rack!r}")
        features = obj.get("features") or {}
        if not isinstance(features, dict) or not all(
            isinstance(v, dict) and all(isinstance(x, int) for x in v.values()) for v in features.values()
        ):
            raise ZNodeDecodeError(f"{what}: bad features {features!r}")
        return BrokerRegistration(broker_id, endpoints, rack, jmx_port, _timestamp(obj), features, version, epoch)


# -- /brokers/topics/<t> -------------------------------------------------------------------------


def _diff(items: Sequence[int], remove: Sequence[int]) -> tuple[int, ...]:
    """Scala ``Seq.diff``: multiset difference that keeps the order of ``items``."""
    pending = list(remove)
    kept = []
    for item in items:
        if item in pending:
            pending.remove(item)
        else:
            kept.append(item)
    return tuple(kept)


@dataclass(frozen=True)
class ReplicaAssignment:
    """One partition's replicas (controller's ``ReplicaAssignment``). The order is the preference order.

    During a reassignment ``replicas`` is the union of old and new replica sets, and ``adding_replicas`` /
    ``removing_replicas`` say which side each extra replica is on (KIP-455).
    """

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        """The replica set before the reassignment started."""
        return _diff(self.replicas, self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replica set once the reassignment completes (what reassign elections choose from)."""
        return _diff(self.replicas, self.removing_replicas)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The in-flight assignment that moves this partition to ``target`` (``ReplicaAssignment.reassignTo``)."""
        origin = self.origin_replicas
        full = tuple(dict.fromkeys([*target, *origin]))
        return ReplicaAssignment(full, _diff(full, origin), _diff(full, target))

    def remove_replica(self, replica: int) -> ReplicaAssignment:
        return ReplicaAssignment(tuple(r for r in self.replicas if r != replica),
                                 tuple(r for r in self.adding_replicas if r != replica),
                                 tuple(r for r in self.removing_replicas if r != replica))


@dataclass(frozen=True)
class TopicAssignment:
    """A topic's ``/brokers/topics/<t>`` content: its id and the replicas of each partition."""

    topic: str
    topic_id: uuid.UUID | None
    partitions: Mapping[int, ReplicaAssignment]

    def replicas(self, partition: int) -> tuple[int, ...]:
        assignment = self.partitions.get(partition)
        return assignment.replicas if assignment else ()


class TopicsZNode:
    """``/brokers/topics``: one child per topic; the controller's TopicChange watch is on it."""

    PATH = f"{BROKERS_PATH}/topics"


class TopicZNode:
    """``/brokers/topics/<t>``: version 3 (topic id, KIP-516) with the KIP-455 reassignment fields."""

    VERSION = 3
    _KEY_ORDER = ("partitions", "topic_id", "adding_replicas", "removing_replicas", "version")

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicsZNode.PATH}/{topic}"

    @staticmethod
    def partitions_path(topic: str) -> str:
        return f"{TopicZNode.path(topic)}/partitions"

    @staticmethod
    def partition_path(topic: str, partition: int) -> str:
        return f"{TopicZNode.partitions_path(topic)}/{partition}"

    @staticmethod
    def encode(topic_id: uuid.UUID | None, partitions: Mapping[int, ReplicaAssignment | Sequence[int]]) -> bytes:
        """``partitions`` maps partition id to its assignment (a plain sequence means no reassignment)."""
        replicas: dict[str, list[int]] = {}
        adding: dict[str, list[int]] = {}
        removing: dict[str, list[int]] = {}
        for partition, value in partitions.items():
            assignment = value if isinstance(value, ReplicaAssignment) else ReplicaAssignment(tuple(value))
            key = str(partition)
            replicas[key] = list(assignment.replicas)
            if assignment.adding_replicas:
                adding[key] = list(assignment.adding_replicas)
            if assignment.removing_replicas:
                removing[key] = list(assignment.removing_replicas)

        def hashed(m: dict[str, list[int]]) -> dict[str, list[int]]:
            return {k: m[k] for k in _scala_mutable_map_order(m)}

        pairs: dict[str, Any] = {"version": TopicZNode.VERSION, "partitions": hashed(replicas),
                                 "adding_replicas": hashed(adding), "removing_replicas": hashed(removing)}
        if topic_id is not None:
            pairs["topic_id"] = topic_id_to_str(topic_id)
        return _encode(_ordered(pairs, TopicZNode._KEY_ORDER))

    @staticmethod
    def decode(topic: str, data: bytes) -> TopicAssignment:
        """Versions 1-3. The partition keys define the partitions; adding/removing lists only count for them."""
        what = TopicZNode.path(topic)
        obj = _parse_object(data, what)
        topic_id = None
        if "topic_id" in obj:
            try:
                topic_id = topic_id_from_str(_str(obj, "topic_id", what))
            except ValueError as e:
                raise ZNodeDecodeError(f"{what}: {e}") from None

        def section(key: str) -> dict[str, Any]:
            value = obj.get(key)
            if value is None:
                return {}
            if not isinstance(value, dict):
                raise ZNodeDecodeError(f"{what}: {key!r} must be an object, got {value!r}")
            return value

        adding, removing = section("adding_replicas"), section("removing_replicas")
        partitions = {}
        for key, replicas in section("partitions").items():
            partitions[_java_parse_int(key, what)] = ReplicaAssignment(
                _int_list(replicas, what),
                _int_list(adding[key], what) if key in adding else (),
                _int_list(removing[key], what) if key in removing else (),
            )
        return TopicAssignment(topic, topic_id, dict(sorted(partitions.items())))


# -- /brokers/topics/<t>/partitions/<p>/state ---------------------------------------------------


class LeaderRecoveryState(enum.IntEnum):
    """KIP-704: RECOVERING marks a partition whose leader was elected uncleanly and has not yet shrunk the
    ISR back to itself; written to the state znode only in that case."""

    RECOVERED = 0
    RECOVERING = 1


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership state (Kafka's ``LeaderIsrAndControllerEpoch``, flattened).

    ``partition_epoch`` is the state znode's version, not part of the JSON: every successful write bumps it,
    and every conditional write expects it. ``controller_epoch`` is the epoch of the controller that last
    wrote the state (a leader's own ISR change keeps it). The ``new_*`` methods keep both; the writer stamps
    its controller epoch with :meth:`with_controller_epoch` and the new znode version with
    :meth:`with_partition_epoch`, as Kafka's ``updateLeaderAndIsr`` does.
    """

    NO_LEADER: ClassVar[int] = -1
    NO_EPOCH: ClassVar[int] = -1
    LEADER_DURING_DELETE: ClassVar[int] = -2
    EPOCH_DURING_DELETE: ClassVar[int] = -2
    INITIAL_LEADER_EPOCH: ClassVar[int] = 0
    INITIAL_PARTITION_EPOCH: ClassVar[int] = 0

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    partition_epoch: int = 0

    @classmethod
    def initial(cls, leader: int, isr: Sequence[int], controller_epoch: int) -> LeaderAndIsr:
        """A new partition's first state: leader epoch 0 (Kafka's ``LeaderAndIsr(leader, isr)``)."""
        return cls(leader, cls.INITIAL_LEADER_EPOCH, tuple(isr), controller_epoch)

    @property
    def has_leader(self) -> bool:
        return self.leader != self.NO_LEADER

    def new_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        """Every controller-made change bumps the leader epoch, keeping the recovery state."""
        return dataclasses.replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr))

    def new_leader(self, leader: int) -> LeaderAndIsr:
        """Same ISR, new leader (preferred and reassignment elections), epoch bumped."""
        return self.new_leader_and_isr(leader, self.isr)

    def new_recovering_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        """An unclean election's result: epoch bumped and the state marked RECOVERING."""
        return dataclasses.replace(self.new_leader_and_isr(leader, isr),
                                   leader_recovery_state=LeaderRecoveryState.RECOVERING)

    def new_epoch(self) -> LeaderAndIsr:
        return self.new_leader_and_isr(self.leader, self.isr)

    def with_partition_epoch(self, partition_epoch: int) -> LeaderAndIsr:
        return dataclasses.replace(self, partition_epoch=partition_epoch)

    def with_controller_epoch(self, controller_epoch: int) -> LeaderAndIsr:
        return dataclasses.replace(self, controller_epoch=controller_epoch)

    def equals_allow_stale_partition_epoch(self, other: LeaderAndIsr) -> bool:
        """Kafka's check that a pending ISR change is what the controller committed (its version may be newer)."""
        return (self.leader == other.leader and self.leader_epoch == other.leader_epoch and self.isr == other.isr
                and self.leader_recovery_state == other.leader_recovery_state
                and self.partition_epoch <= other.partition_epoch)


class TopicPartitionStateZNode:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader, leader epoch, ISR and the writer's controller epoch."""

    VERSION = 1
    # Scala immutable.HashMap (CHAMP) order of the 5 and 6 keys, as Kafka writes them
    _KEY_ORDER = ("controller_epoch", "leader", "version", "leader_recovery_state", "leader_epoch", "isr")

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicZNode.partition_path(topic, partition)}/state"

    @staticmethod
    def encode(state: LeaderAndIsr) -> bytes:
        pairs: dict[str, Any] = {"version": TopicPartitionStateZNode.VERSION, "leader": state.leader,
                                 "leader_epoch": state.leader_epoch, "controller_epoch": state.controller_epoch,
                                 "isr": list(state.isr)}
        if state.leader_recovery_state != LeaderRecoveryState.RECOVERED:
            pairs["leader_recovery_state"] = int(state.leader_recovery_state)
        return _encode(_ordered(pairs, TopicPartitionStateZNode._KEY_ORDER))

    @staticmethod
    def decode(data: bytes, zk_version: int) -> LeaderAndIsr:
        """``zk_version`` is the znode's ``stat.version``, which becomes the partition epoch."""
        what = "partition state"
        obj = _parse_object(data, what)
        recovery = LeaderRecoveryState.RECOVERED
        if "leader_recovery_state" in obj:
            value = _int(obj, "leader_recovery_state", what)
            try:
                recovery = LeaderRecoveryState(value)
            except ValueError:
                raise ZNodeDecodeError(f"value {value} is not a valid leader recovery state") from None
        return LeaderAndIsr(_int(obj, "leader", what), _int(obj, "leader_epoch", what),
                            _int_list(obj.get("isr"), what), _int(obj, "controller_epoch", what),
                            recovery, zk_version)


# -- /config -------------------------------------------------------------------------------------


class ConfigEntityZNode:
    """``/config/<entity type>/<entity name>``: an entity's dynamic config overrides (values are strings)."""

    DEFAULT_BROKER = "<default>"  # /config/brokers/<default>: the cluster-wide broker defaults

    @staticmethod
    def path(entity_type: str, entity_name: str) -> str:
        return f"{CONFIG_PATH}/{entity_type}/{entity_name}"

    @staticmethod
    def type_path(entity_type: str) -> str:
        return f"{CONFIG_PATH}/{entity_type}"

    @staticmethod
    def topic_path(topic: str) -> str:
        return ConfigEntityZNode.path(ConfigType.TOPIC, topic)

    @staticmethod
    def broker_path(broker_id: int | None) -> str:
        """A broker's overrides, or the cluster-wide defaults for ``None``."""
        name = ConfigEntityZNode.DEFAULT_BROKER if broker_id is None else str(broker_id)
        return ConfigEntityZNode.path(ConfigType.BROKER, name)

    @staticmethod
    def encode(config: Mapping[str, str]) -> bytes:
        """The bytes Kafka writes for a ``Properties`` filled in ``config``'s order (Kafka's own order depends on
        how its caller built the Properties; a fresh one filled from the request is the common case)."""
        for key, value in config.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"config entries must be strings, got {key!r}: {value!r}")
        ordered = {k: config[k] for k in _java_properties_order(config)}
        return _encode({"version": 1, "config": ordered})

    @staticmethod
    def decode(data: bytes | None) -> dict[str, str]:
        """Missing data or a missing/non-object ``config`` gives no overrides, as in Kafka."""
        if not data:
            return {}
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            return {}  # Json.parseBytes -> None: Kafka reads no overrides
        config = parsed.get("config") if isinstance(parsed, dict) else None
        if not isinstance(config, dict):
            return {}
        for key, value in config.items():
            if not isinstance(value, str):
                raise ZNodeDecodeError(f"config {key!r} must be a string, got {value!r}")
        return dict(config)


class ConfigEntityChangeNotificationZNode:
    """``/config/changes/config_change_NNNNNNNNNN``: a persistent sequential znode naming a changed entity.

    Every broker watches the folder and re-reads ``/config/<entity_path>`` for each new notification.
    """

    PATH = f"{CONFIG_PATH}/changes"
    SEQUENCE_PREFIX = "config_change_"
    CREATE_PATH = f"{PATH}/{SEQUENCE_PREFIX}"  # pass to a sequential create
    VERSION = 2

    @staticmethod
    def entity_path(entity_type: str, entity_name: str) -> str:
        return f"{entity_type}/{entity_name}"

    @staticmethod
    def encode(entity_path: str) -> bytes:
        return _encode({"version": ConfigEntityChangeNotificationZNode.VERSION, "entity_path": entity_path})

    @staticmethod
    def decode(data: bytes) -> tuple[str, str]:
        """``(entity type, entity name)`` from a version 1 or 2 notification (``ZkConfigManager``)."""
        what = ConfigEntityChangeNotificationZNode.PATH
        obj = _parse_object(data, what)
        version = _int(obj, "version", what)
        if version == 1:
            entity_type = obj.get("entity_type")
            if entity_type not in (ConfigType.TOPIC, ConfigType.CLIENT):
                raise ZNodeDecodeError(f"{what}: version 1 notification must have 'entity_type' set to "
                                       f"'clients' or 'topics', got {entity_type!r}")
            return entity_type, _str(obj, "entity_name", what)
        if version == 2:
            entity_path = _str(obj, "entity_path", what)
            entity_type, slash, name = entity_path.partition("/")
            if not slash:
                raise ZNodeDecodeError(f"{what}: entity_path {entity_path!r} has no entity type")
            return entity_type, name
        raise ZNodeDecodeError(f"{what}: unsupported version {version}, supported versions are 1 and 2")


# -- /admin --------------------------------------------------------------------------------------


class DeleteTopicsZNode:
    """``/admin/delete_topics/<t>``: an empty persistent znode per deletion request, consumed by the controller."""

    PATH = f"{ADMIN_PATH}/delete_topics"

    @staticmethod
    def path(topic: str) -> str:
        return f"{DeleteTopicsZNode.PATH}/{topic}"


def _partition_list(obj: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
    partitions = obj.get("partitions")
    if not isinstance(partitions, list) or not all(isinstance(p, dict) for p in partitions):
        raise ZNodeDecodeError(f"{what}: 'partitions' must be a list of objects, got {partitions!r}")
    return partitions


class ReassignPartitionsZNode:
    """``/admin/reassign_partitions``: the legacy (pre-2.4) reassignment request, still honoured by the
    controller. The AlterPartitionReassignments API writes ``adding/removing_replicas`` in the topic znode."""

    PATH = f"{ADMIN_PATH}/reassign_partitions"

    @staticmethod
    def encode(reassignment: Mapping[TopicPartition, Sequence[int]]) -> bytes:
        # Jackson bean of LegacyPartitionAssignment: creator properties in constructor order
        return _encode({"version": 1, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
            for tp, replicas in reassignment.items()]})

    @staticmethod
    def decode(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
        what = ReassignPartitionsZNode.PATH
        result = {}
        for entry in _partition_list(_parse_object(data, what), what):
            tp = TopicPartition(_str(entry, "topic", what), _int(entry, "partition", what))
            result[tp] = _int_list(entry.get("replicas"), what)
        return result


class PreferredReplicaElectionZNode:
    """``/admin/preferred_replica_election``: the legacy preferred-election request."""

    PATH = f"{ADMIN_PATH}/preferred_replica_election"

    @staticmethod
    def encode(partitions: Iterable[TopicPartition]) -> bytes:
        """Kafka takes a Scala ``Set``: with more than four partitions its order is the set's hash order, which
        is not emulated here (the content is a set; readers must not depend on the order)."""
        unique = list(dict.fromkeys(partitions))
        return _encode({"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition}
                                                     for tp in unique]})

    @staticmethod
    def decode(data: bytes) -> set[TopicPartition]:
        what = PreferredReplicaElectionZNode.PATH
        return {TopicPartition(_str(entry, "topic", what), _int(entry, "partition", what))
                for entry in _partition_list(_parse_object(data, what), what)}


# -- /latest_producer_id_block -------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerIdsBlock:
    """A range of producer ids handed to one broker (``org.apache.kafka.server.common.ProducerIdsBlock``)."""

    BLOCK_SIZE: ClassVar[int] = 1000  # PRODUCER_ID_BLOCK_SIZE

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


class ProducerIdBlockZNode:
    """``/latest_producer_id_block``: the last block handed out, advanced with a conditional (CAS) write."""

    PATH = "/latest_producer_id_block"
    VERSION = 1
    _MAX_LONG = (1 << 63) - 1

    @staticmethod
    def encode(block: ProducerIdsBlock) -> bytes:
        # block_start/block_end are decimal *strings* (JSON numbers would lose precision past 2^53 in JS tools)
        return _encode({"version": ProducerIdBlockZNode.VERSION, "broker": block.assigned_broker_id,
                        "block_start": str(block.first_producer_id), "block_end": str(block.last_producer_id)})

    @staticmethod
    def decode(data: bytes) -> ProducerIdsBlock:
        what = ProducerIdBlockZNode.PATH
        obj = _parse_object(data, what)
        start = _java_parse_int(_str(obj, "block_start", what), what)
        end = _java_parse_int(_str(obj, "block_end", what), what)
        if any(not -(1 << 63) <= v <= ProducerIdBlockZNode._MAX_LONG for v in (start, end)):  # String.toLong
            raise ZNodeDecodeError(f"{what}: producer ids exceed the long range: {start}..{end}")
        size = end - start + 1
        if not -(1 << 31) <= size < (1 << 31):  # Math.toIntExact
            raise ZNodeDecodeError(f"{what}: block size {size} does not fit an int")
        return ProducerIdsBlock(_int(obj, "broker", what), start, size)

    @staticmethod
    def next_block(current: ProducerIdsBlock | None, broker_id: int) -> ProducerIdsBlock:
        """The block to claim after ``current`` (None: the znode has no data yet), as
        ``ZkProducerIdManager.getNewProducerIdBlock`` computes it; raises once the long range is exhausted."""
        if current is None:
            return ProducerIdsBlock(broker_id, 0, ProducerIdsBlock.BLOCK_SIZE)
        if current.last_producer_id > ProducerIdBlockZNode._MAX_LONG - ProducerIdsBlock.BLOCK_SIZE:
            raise OverflowError("have exhausted all producerIds")
        return ProducerIdsBlock(broker_id, current.next_block_first_id, ProducerIdsBlock.BLOCK_SIZE)


# -- paths created at startup --------------------------------------------------------------------

# ZkData.PersistentZkPaths, in Kafka's order: KafkaZkClient.createTopLevelPaths makes sure each exists
# (creating parents) when a broker starts.
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH,
    BrokerIdsZNode.PATH,
    TopicsZNode.PATH,
    ConfigEntityChangeNotificationZNode.PATH,
    DeleteTopicsZNode.PATH,
    BrokerSequenceIdZNode.PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    ProducerIdBlockZNode.PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(ConfigEntityZNode.type_path(t) for t in ConfigType.ALL),
)
