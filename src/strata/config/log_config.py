"""Topic-level log configuration: Kafka's ``LogConfig`` keys, defaults and validation rules.

Three deprecated spellings from Strata's original spec are accepted as aliases of Kafka's keys
(:data:`TOPIC_CONFIG_ALIASES`): they are renamed on parse, with a WARNING naming the canonical key.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from strata.config.defs import ConfigDef, ConfigKey, at_least, between, list_of, one_of
from strata.errors import InvalidConfigError

log = logging.getLogger(__name__)

DAY_MS = 24 * 60 * 60 * 1000

TOPIC_CONFIG_ALIASES: dict[str, str] = {
    "remote.log.storage.enable": "remote.storage.enable",
    "remote.log.retention.ms": "retention.ms",
    "remote.log.retention.bytes": "retention.bytes",
}
"""Deprecated topic key -> Kafka's key. Strata's original spec used these names; Kafka never had them
(with tiering, Kafka's ``retention.*`` is the total retention over both tiers, which is what the
``remote.log.retention.*`` names meant)."""

ALIAS_WARNING_INTERVAL_S = 60.0
"""One deprecation WARNING per alias at most this often. The effective config is re-parsed from the
stored overrides more than once per request (CreateTopics validates a topic three times) and again at
every start and broker-default change, so a line per parse would flood the log."""

_alias_warned: dict[str, float] = {}
_alias_lock = threading.Lock()

V = TypeVar("V")


def _throttled_replica_list(entries: list[str]) -> str | None:
    """Kafka's ``ThrottledReplicaListValidator``: ``*`` alone, or ``partitionId:brokerId`` entries."""
    if all(re.fullmatch(r"[0-9]+:[0-9]+", e.strip()) for e in entries) or "".join(entries).strip() == "*":
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")

LOG_CONFIG_DEF = ConfigDef([
    ConfigKey("segment.bytes", "int", 1024 * 1024 * 1024, at_least(14), "Roll a segment at this size"),
    ConfigKey("segment.ms", "long", 7 * DAY_MS, at_least(1), "Roll a segment this old (by batch timestamps)"),
    ConfigKey("segment.jitter.ms", "long", 0, at_least(0), "Random slack subtracted from segment.ms per segment"),
    ConfigKey("segment.index.bytes", "int", 10 * 1024 * 1024, at_least(4), "Preallocated index file size"),
    ConfigKey("index.interval.bytes", "int", 4096, at_least(0), "Bytes between offset-index entries"),
    ConfigKey("retention.ms", "long", 7 * DAY_MS, at_least(-1), "Delete segments older than this; -1 keeps all"),
    ConfigKey("retention.bytes", "long", -1, at_least(-1), "Cap on the partition size; -1 means none"),
    ConfigKey("local.retention.ms", "long", -2, at_least(-2), "Local-tier retention; -2 = retention.ms"),
    ConfigKey("local.retention.bytes", "long", -2, at_least(-2), "Local-tier size cap; -2 = retention.bytes"),
    ConfigKey("remote.storage.enable", "bool", False, None, "Tier this topic's rolled segments"),
    ConfigKey("diskless.enable", "bool", False, None,
              "KIP-1150: produce straight to the remote store, no leader-follower replication (set at creation)"),
    ConfigKey("remote.log.copy.disable", "bool", False, None, "Stop copying; remote data becomes read-only"),
    ConfigKey("remote.recovery", "bool", False, None,
              "Create the topic from the remote store's manifests (issue 29): its id, partitions, configs and "
              "every tiered record come back; only meaningful at creation"),
    ConfigKey("remote.unmount", "bool", False, None,
              "Unmount the topic into the remote store (issue 29): produce is refused, the active segments roll "
              "and upload; deleting the topic then keeps its remote data for another cluster to mount"),
    ConfigKey("remote.read.replica", "bool", False, None,
              "A read-only mirror of a topic another cluster writes to the same remote store (issue 29): set at "
              "creation; it follows the origin's uploads and refuses produce"),
    ConfigKey("remote.log.delete.on.disable", "bool", False, None, "Delete remote data when tiering is disabled"),
    ConfigKey("file.delete.delay.ms", "long", 60_000, at_least(0), "Delay before .deleted files are removed"),
    ConfigKey("max.message.bytes", "int", 1_048_588, at_least(0), "Largest record batch accepted"),
    ConfigKey("message.timestamp.type", "string", "CreateTime", one_of("CreateTime", "LogAppendTime"), ""),
    ConfigKey("message.timestamp.before.max.ms", "long", 2**63 - 1, at_least(0), ""),
    ConfigKey("message.timestamp.after.max.ms", "long", 3_600_000, at_least(0), ""),
    ConfigKey("cleanup.policy", "list", ["delete"], list_of("delete", "compact"), ""),
    ConfigKey("compression.type", "string", "producer",
              one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
              "Codec leader appends are stored with (batches of another codec re-encoded); producer keeps theirs"),
    ConfigKey("flush.messages", "long", 2**63 - 1, at_least(1), "fsync after this many messages"),
    ConfigKey("flush.ms", "long", 2**63 - 1, at_least(0), "fsync after this long"),
    ConfigKey("min.insync.replicas", "int", 1, at_least(1), ""),
    ConfigKey("preallocate", "bool", False, None, "Accepted for compatibility; segments are not preallocated"),
    ConfigKey("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1),
              "Compacted topics: clean once this share of the log is not yet cleaned"),
    ConfigKey("delete.retention.ms", "long", DAY_MS, at_least(0),
              "Compacted topics: how long tombstones and transaction markers stay after their first cleaning"),
    ConfigKey("min.compaction.lag.ms", "long", 0, at_least(0), "Compacted topics: records younger stay uncompacted"),
    ConfigKey("max.compaction.lag.ms", "long", 2**63 - 1, at_least(1),
              "Compacted topics: records older are compacted even below min.cleanable.dirty.ratio"),
    ConfigKey("unclean.leader.election.enable", "bool", False, None,
              "Cluster mode: elect an out-of-sync replica when no in-sync one is alive (loses records)"),
    # Kafka's GzipCompression.LevelValidator: Deflater's default (-1) or 1-9; 0 (stored, not deflated) is refused
    ConfigKey("compression.gzip.level", "int", -1, lambda v: None if v == -1 or 1 <= v <= 9 else
              "must be -1 (the default) or between 1 and 9", "Level of batches re-encoded with gzip"),
    ConfigKey("compression.lz4.level", "int", 9, between(1, 17), "Level of batches re-encoded with lz4"),
    ConfigKey("compression.zstd.level", "int", 3, between(-131072, 22), "Level of batches re-encoded with zstd"),
    ConfigKey("leader.replication.throttled.replicas", "list", [], _throttled_replica_list,
              "Replicas (partition:brokerId or *) whose leader side is held to leader.replication.throttled.rate"),
    ConfigKey("follower.replication.throttled.replicas", "list", [], _throttled_replica_list,
              "Replicas (partition:brokerId or *) whose follower side is held to follower.replication.throttled.rate"),
    ConfigKey("message.downconversion.enable", "bool", True, None, "Accepted for compatibility"),
    # Deprecated since Kafka 3.0 and ignored there too (message format v2 always); clients still set it.
    ConfigKey("message.format.version", "string", "3.0-IV1", None, "Deprecated; accepted and ignored"),
])


def _same_value(key: str, a: object, b: object) -> bool:
    """Whether two raw values mean the same for ``key`` (``true`` and ``TRUE``, ``100`` and ``100 ``)."""
    spec = LOG_CONFIG_DEF.keys[key]
    try:
        return bool(spec.parse(a) == spec.parse(b))
    except InvalidConfigError:
        return str(a).strip() == str(b).strip()


def _warn_alias(alias: str, canonical: str) -> None:
    now = time.monotonic()
    with _alias_lock:
        last = _alias_warned.get(alias)
        if last is not None and now - last < ALIAS_WARNING_INTERVAL_S:
            return
        _alias_warned[alias] = now
    log.warning("topic config %s is deprecated: use %s (the value is applied to %s)", alias, canonical, canonical)


def canonical_topic_configs(props: Mapping[str, V]) -> dict[str, V]:
    """``props`` with every deprecated alias (:data:`TOPIC_CONFIG_ALIASES`) renamed to Kafka's key.

    An alias given together with its canonical key is accepted when both mean the same value and
    refused with InvalidConfigError naming both otherwise: which one wins would be a guess. Logs a
    deprecation WARNING naming the canonical key (rate-limited, see ``ALIAS_WARNING_INTERVAL_S``).
    """
    if not any(k in TOPIC_CONFIG_ALIASES for k in props):
        return dict(props)
    out = {k: v for k, v in props.items() if k not in TOPIC_CONFIG_ALIASES}
    for alias, canonical in TOPIC_CONFIG_ALIASES.items():
        if alias not in props:
            continue
        value = props[alias]
        if canonical in props:
            if not _same_value(canonical, props[canonical], value):
                raise InvalidConfigError(
                    f"Conflicting values for configuration {canonical} ({props[canonical]!r}) and its deprecated "
                    f"alias {alias} ({value!r}): set only {canonical}")
        else:
            out[canonical] = value
        _warn_alias(alias, canonical)
    return out


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: bool = False
    diskless_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_recovery: bool = False
    remote_read_replica: bool = False
    remote_unmount: bool = False
    remote_log_delete_on_disable: bool = False
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = 2**63 - 1
    message_timestamp_after_max_ms: int = 3_600_000  # Kafka 4.0 default (KIP-1030)
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    min_insync_replicas: int = 1
    preallocate: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    unclean_leader_election_enable: bool = False
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()
    message_downconversion_enable: bool = True
    message_format_version: str = "3.0-IV1"

    @classmethod
    def from_props(cls, props: Mapping[str, object], *, allow_unknown: bool = False) -> LogConfig:
        """Parse Kafka topic config keys; unknown keys and invalid values raise InvalidConfigError.

        Deprecated aliases are renamed first (:func:`canonical_topic_configs`)."""
        parsed = LOG_CONFIG_DEF.parse(canonical_topic_configs(props), allow_unknown=allow_unknown)
        values: dict[str, Any] = {name.replace(".", "_"): value for name, value in parsed.items()}
        for name in ("cleanup_policy", "leader_replication_throttled_replicas",
                     "follower_replication_throttled_replicas"):
            values[name] = tuple(values[name])
        config = cls(**values)
        config.validate()
        return config

    def to_props(self) -> dict[str, str]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                value = str(value).lower()
            elif isinstance(value, tuple):
                value = ",".join(value)
            out[f.name.replace("_", ".")] = str(value)
        return out

    def with_overrides(self, props: Mapping[str, object]) -> LogConfig:
        """This config with topic overrides ``props`` over it (deprecated aliases accepted).

        The aliases are resolved on ``props`` alone, before the merge: ``self.to_props()`` holds every
        canonical key, so an alias checked against the merged dict would always "conflict" with a default.
        """
        merged = self.to_props()
        merged.update({k: str(v) if not isinstance(v, str) else v for k, v in canonical_topic_configs(props).items()})
        return LogConfig.from_props(merged)

    def validate(self) -> None:
        """Cross-key rules from Kafka's ``LogConfig.validate*``.

        As in Kafka, they apply only to tiered topics: on a topic without remote storage the local
        retention keys mean nothing, so a value left from an earlier experiment must not block edits.
        Enabling tiering later re-validates the merged config, so the rules hold whenever they matter.
        Unlike Kafka, a compacted topic may be tiered (KIP-1272): the log cleaner cleans both tiers.
        """
        if self.remote_read_replica and not self.remote_storage_enable:
            raise InvalidConfigError("remote.read.replica=true needs remote.storage.enable=true (a read replica's "
                                     "records are only in the remote store): remote.storage.enable")
        if self.remote_unmount and not self.remote_storage_enable:
            raise InvalidConfigError("remote.unmount=true needs remote.storage.enable=true (the topic is unmounted "
                                     "into the remote store): remote.unmount")
        if not self.remote_storage_enable:
            return
        self.validate_remote_storage_retention()

    def validate_remote_storage_retention(self) -> None:
        """``local.retention.*`` within ``retention.*``: for tiered topics, and for the broker defaults
        when the remote storage system is on (Kafka's ``validateBrokerLogConfigValues``)."""
        for local, total, name in (
            (self.local_retention_ms, self.retention_ms, "local.retention.ms"),
            (self.local_retention_bytes, self.retention_bytes, "local.retention.bytes"),
        ):
            if total != -1 and local != -2:
                if local == -1:
                    raise InvalidConfigError(f"Value must not be -1 as {name.replace('local.', '')} value is set "
                                             f"as {total}: {name}")
                if local > total:
                    raise InvalidConfigError(f"Value must not be more than {name.replace('local.', '')} "
                                             f"property value: {local} > {total}: {name}")

    @property
    def max_segment_ms(self) -> int:
        """Kafka's ``maxSegmentMs``: a compacted topic rolls by ``max.compaction.lag.ms`` too, so a record
        never waits in the active segment (which is never cleaned) longer than that lag."""
        if "compact" in self.cleanup_policy and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def local_retention_ms_effective(self) -> int:
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def local_retention_bytes_effective(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_index_entries(self) -> int:
        return self.segment_index_bytes // 8
