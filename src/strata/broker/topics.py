"""Topic registry: names, ids, partition counts and per-topic config overrides.

Apache Kafka keeps this in the KRaft metadata log; a single Strata node keeps it in
``<first log dir>/strata-topics.json``, replaced atomically on every change (write, fsync,
rename, fsync dir), so a crash leaves the old or the new registry. Each partition directory
also carries Kafka's ``partition.metadata`` with the topic id, so a directory left over from a
deleted topic is never mistaken for a recreated one.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from strata.common import TopicPartition
from strata.config import LogConfig
from strata.errors import ApiError, ErrorCode, InvalidConfigError
from strata.log.checkpoints import atomic_write

log = logging.getLogger(__name__)

REGISTRY_FILE = "strata-topics.json"
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state",
                             "__remote_log_metadata", "__diskless_metadata"})


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``."""
    if not name:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                       f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                       f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
                       "alphanumerics, '.', '_' and '-'")


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only, Kafka's names

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    def __init__(self, directory: Path, defaults: LogConfig, *, remote_storage_system_enable: bool = False) -> None:
        self.path = directory / REGISTRY_FILE
        self.defaults = defaults
        self.remote_storage_system_enable = remote_storage_system_enable
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._configs: dict[str, LogConfig] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        data = json.loads(self.path.read_text())
        for t in data.get("topics", []):
            info = TopicInfo(t["name"], uuid.UUID(t["topic_id"]), int(t["partitions"]), dict(t.get("configs", {})))
            self._add(info)
        log.info("loaded %d topics from %s", len(self._topics), self.path)

    def _save(self) -> None:
        data = {"version": 1, "topics": [
            {"name": t.name, "topic_id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
            for t in sorted(self._topics.values(), key=lambda t: t.name)
        ]}
        atomic_write(self.path, json.dumps(data, indent=1).encode())

    def _add(self, info: TopicInfo) -> None:
        self._topics[info.name] = info
        self._by_id[info.topic_id] = info
        self._configs.pop(info.name, None)

    # -- queries ------------------------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(list(self._topics.values()))

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def has_partition(self, tp: TopicPartition) -> bool:
        """Kafka's ``metadataCache.contains(tp)``: the topic exists (in a cluster: anywhere in it) with that
        partition index, whether or not this broker holds a replica of it."""
        info = self._topics.get(tp.topic)
        return info is not None and 0 <= tp.partition < info.partitions

    def config(self, name: str) -> LogConfig:
        """The topic's effective config: broker defaults with its overrides (cached)."""
        cached = self._configs.get(name)
        if cached is None:
            info = self._topics.get(name)
            cached = self.defaults.with_overrides(info.configs) if info and info.configs else self.defaults
            self._configs[name] = cached
        return cached

    # -- changes ------------------------------------------------------------------------------

    def check_configs(self, configs: Mapping[str, str | None], topic: str | None = None) -> LogConfig:
        """Validate overrides (unknown keys, bad values, cross-key rules) without applying them.

        ``topic``: the existing topic being altered, for the rules about changes (KIP-950).
        """
        clean = {k: v for k, v in configs.items() if v is not None}
        try:
            config = self.defaults.with_overrides(clean)
        except InvalidConfigError as e:
            raise ApiError(ErrorCode.INVALID_CONFIG, str(e)) from None
        old = self.config(topic) if topic is not None and topic in self._topics else None
        problem = remote_config_problem(config, old, self.remote_storage_system_enable) \
            or diskless_config_problem(config, old, self.remote_storage_system_enable)
        if problem:
            raise ApiError(ErrorCode.INVALID_CONFIG, problem)
        return config

    def remote_log_enabled(self, name: str) -> bool:
        """Kafka's ``UnifiedLog.isRemoteLogEnabled``: never for internal topics. Unlike Kafka, compacted topics
        tier too (KIP-1272: the log cleaner cleans both tiers). A diskless topic is always tiered: its
        consolidated local logs are only a staging area on the way to the remote tier."""
        if not self.remote_storage_system_enable or name in INTERNAL_TOPICS:
            return False
        config = self.config(name)
        return config.remote_storage_enable or config.diskless_enable

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
               topic_id: uuid.UUID | None = None) -> TopicInfo:
        validate_topic_name(name)
        if name in self._topics:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions < 1:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        self.check_configs(configs or {})
        info = TopicInfo(name, topic_id or uuid.uuid4(), partitions, dict(configs or {}))
        self._add(info)
        self._save()
        return info

    def mirror(self, name: str, topic_id: uuid.UUID, partitions: int, configs: Mapping[str, str]) -> TopicInfo:
        """Cluster mode: record a topic as ZooKeeper has it (already validated by whoever created it).

        The registry is then this broker's persistent cache of the cluster's topics; it is written
        only when something changed."""
        info = self._topics.get(name)
        if info is not None and info.topic_id == topic_id and info.partitions == partitions \
                and info.configs == dict(configs):
            return info
        if info is not None and info.topic_id != topic_id:
            self._by_id.pop(info.topic_id, None)
        info = TopicInfo(name, topic_id, partitions, dict(configs))
        self._add(info)
        self._save()
        return info

    def forget(self, name: str) -> TopicInfo | None:
        """Cluster mode: the topic is gone from the cluster (no error if it was never mirrored)."""
        if name not in self._topics:
            return None
        return self.delete(name)

    def delete(self, name: str) -> TopicInfo:
        info = self._topics.pop(name, None)
        if info is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        self._by_id.pop(info.topic_id, None)
        self._configs.pop(name, None)
        self._save()
        return info

    def set_partitions(self, name: str, count: int) -> TopicInfo:
        info = self._topics[name]
        info.partitions = count
        self._save()
        return info

    def set_configs(self, name: str, configs: dict[str, str]) -> LogConfig:
        """Replace the topic's overrides (validated first); returns the new effective config."""
        effective = self.check_configs(configs, name)
        info = self._topics[name]
        info.configs = dict(configs)
        self._configs[name] = effective
        self._save()
        return effective

    def check_defaults(self, defaults: LogConfig) -> str | None:
        """Why ``defaults`` cannot become the broker-wide defaults (a topic's overrides over them break a
        cross-key rule, e.g. its ``local.retention.ms`` above a lowered ``log.retention.ms``), or None."""
        for info in self._topics.values():
            if info.configs:
                try:
                    defaults.with_overrides(info.configs)
                except InvalidConfigError as e:
                    return f"topic '{info.name}' overrides: {e}"
        return None

    def set_defaults(self, defaults: LogConfig) -> None:
        """New broker-wide defaults (dynamic broker configs): every topic's effective config follows, its own
        overrides kept. The caller applies them to the open logs (``ReplicaManager.apply_config``)."""
        self.defaults = defaults
        self._configs.clear()

    # -- admin --------------------------------------------------------------------------------

    def colliding_topic(self, name: str) -> str | None:
        """Another topic whose name differs only in '.' versus '_' (Kafka's ``Topic.hasCollisionChars``):
        both would map to the same metric names, so Kafka refuses the second one."""
        if "." not in name and "_" not in name:
            return None
        unified = name.replace(".", "_")
        return next((t for t in self._topics if t != name and t.replace(".", "_") == unified), None)


def diskless_config_problem(new: LogConfig, old: LogConfig | None, system_enabled: bool) -> str | None:
    """KIP-1150's rules for ``diskless.enable``; each message names the keys involved."""
    if old is not None and old.diskless_enable and not new.diskless_enable:
        return "diskless.enable cannot be turned off: a diskless topic cannot become a classic topic again."
    if not new.diskless_enable:
        return None
    if old is not None and not old.diskless_enable and new.unclean_leader_election_enable:
        return ("diskless.enable=true on an existing topic (KIP-1150's switch) needs "
                "unclean.leader.election.enable=false: an unclean leader could lose records below the seal.")
    if not system_enabled:
        return ("diskless.enable=true needs remote.log.storage.system.enable=true on the broker: a diskless "
                "topic's data lives in the remote store.")
    if "compact" in new.cleanup_policy:
        return "diskless.enable=true cannot be combined with cleanup.policy=compact (not supported yet)."
    return None


def remote_config_problem(new: LogConfig, old: LogConfig | None, system_enabled: bool) -> str | None:
    """Kafka's tiering rules (``LogConfig.validate*`` and KIP-950), worded as Kafka words them."""
    if new.remote_storage_enable and not system_enabled and (old is None or not old.remote_storage_enable):
        return ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
                "remote log storage.")
    if new.remote_log_copy_disable:
        for local, total, name in ((new.local_retention_ms, new.retention_ms, "ms"),
                                   (new.local_retention_bytes, new.retention_bytes, "bytes")):
            if local not in (-2, total):
                return (f"When `remote.log.copy.disable` is set to true, the `local.retention.{name}` and "
                        f"`retention.{name}` must be set to the identical value because there will be no more "
                        f"logs copied to the remote storage.")
    if old is not None and old.remote_storage_enable and not new.remote_storage_enable \
            and not new.remote_log_delete_on_disable:
        return ("It is invalid to disable remote storage without deleting remote data. If you want to keep the "
                "remote data and turn to read only, please set `remote.storage.enable=true,"
                "remote.log.copy.disable=true`. If you want to disable remote storage and delete all remote "
                "data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`.")
    if old is not None and old.remote_storage_enable and new.remote_storage_enable \
            and "compact" in old.cleanup_policy and "compact" not in new.cleanup_policy:
        # Its remote segments may have offset gaps, which the remote reader accepts only in compacted topics
        # (elsewhere a gap means a corrupt base offset): Strata's addition, Kafka never tiers compacted topics.
        return ("cleanup.policy cannot drop `compact` on a tiered topic: its remote segments were compacted. "
                "Use cleanup.policy=compact,delete to add time and size retention.")
    return None
