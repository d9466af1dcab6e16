"""The KIP-848 / KIP-932 group coordinator keys of ``server.properties``, and the per-group configs.

Broker keys are Kafka 4.2's ``GroupCoordinatorConfig`` / ``ShareGroupConfig`` names and defaults. A
consumer-protocol member's session and heartbeat interval come from the broker
(``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``), not from the client,
and may be overridden per group through IncrementalAlterConfigs on a GROUP resource with the keys of
:data:`GROUP_CONFIG_KEYS` (``consumer.session.timeout.ms`` ...: the broker key without ``group.``),
bounded by the broker's min/max keys, as Kafka's ``GroupConfig`` validates them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigDef, ConfigKey, at_least, between, list_of, one_of
from strata.errors import InvalidConfigError

CONSUMER_ASSIGNORS = ("uniform", "range")
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")

GROUP_COORDINATOR_KEYS = [
    ConfigKey("group.consumer.session.timeout.ms", "int", 45_000, at_least(1),
              "Session timeout of consumer-protocol members (KIP-848): the broker decides it, not the client"),
    ConfigKey("group.consumer.min.session.timeout.ms", "int", 45_000, at_least(1), ""),
    ConfigKey("group.consumer.max.session.timeout.ms", "int", 60_000, at_least(1), ""),
    ConfigKey("group.consumer.heartbeat.interval.ms", "int", 5_000, at_least(1),
              "How often consumer-protocol members heartbeat (told to them in each response)"),
    ConfigKey("group.consumer.min.heartbeat.interval.ms", "int", 5_000, at_least(1), ""),
    ConfigKey("group.consumer.max.heartbeat.interval.ms", "int", 15_000, at_least(1), ""),
    ConfigKey("group.consumer.max.size", "int", 2**31 - 1, at_least(1), "Most members of one consumer group"),
    ConfigKey("group.consumer.assignors", "list", list(CONSUMER_ASSIGNORS), list_of(*CONSUMER_ASSIGNORS),
              "Server-side assignors; the first is the default"),
    ConfigKey("group.consumer.migration.policy", "string", "bidirectional", one_of(*MIGRATION_POLICIES),
              "Whether a classic group with live members converts to a consumer group online and back: "
              "not built yet, so every value behaves as disabled (empty groups convert offline, as in Kafka)"),
    ConfigKey("group.consumer.regex.refresh.interval.ms", "int", 600_000, at_least(10_000),
              "How often a consumer group's regular expressions are resolved again"),
]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = CONSUMER_ASSIGNORS
    migration_policy: str = "bidirectional"
    regex_refresh_interval_ms: int = 600_000

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any]) -> ConsumerGroupConfig:
        cfg = cls(
            session_timeout_ms=p["group.consumer.session.timeout.ms"],
            min_session_timeout_ms=p["group.consumer.min.session.timeout.ms"],
            max_session_timeout_ms=p["group.consumer.max.session.timeout.ms"],
            heartbeat_interval_ms=p["group.consumer.heartbeat.interval.ms"],
            min_heartbeat_interval_ms=p["group.consumer.min.heartbeat.interval.ms"],
            max_heartbeat_interval_ms=p["group.consumer.max.heartbeat.interval.ms"],
            max_size=p["group.consumer.max.size"],
            assignors=tuple(p["group.consumer.assignors"]) or CONSUMER_ASSIGNORS,
            migration_policy=p["group.consumer.migration.policy"],
            regex_refresh_interval_ms=p["group.consumer.regex.refresh.interval.ms"],
        )
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Kafka's ``GroupCoordinatorConfig`` cross-checks, each naming the key at fault."""
        if not self.min_session_timeout_ms <= self.session_timeout_ms <= self.max_session_timeout_ms:
            raise InvalidConfigError(
                f"Invalid value {self.session_timeout_ms} for configuration group.consumer.session.timeout.ms: "
                f"must be between group.consumer.min.session.timeout.ms ({self.min_session_timeout_ms}) and "
                f"group.consumer.max.session.timeout.ms ({self.max_session_timeout_ms})")
        if not self.min_heartbeat_interval_ms <= self.heartbeat_interval_ms <= self.max_heartbeat_interval_ms:
            raise InvalidConfigError(
                f"Invalid value {self.heartbeat_interval_ms} for configuration group.consumer.heartbeat.interval.ms: "
                f"must be between group.consumer.min.heartbeat.interval.ms ({self.min_heartbeat_interval_ms}) and "
                f"group.consumer.max.heartbeat.interval.ms ({self.max_heartbeat_interval_ms})")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidConfigError(
                f"Invalid value {self.heartbeat_interval_ms} for configuration group.consumer.heartbeat.interval.ms: "
                f"must be less than group.consumer.session.timeout.ms ({self.session_timeout_ms})")


# -- per-group configs (resource type GROUP = 32) ----------------------------------------------

GROUP_CONFIG_KEYS = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")

_INT = re.compile(r"^-?\d+$")


def group_config_def(cfg: ConsumerGroupConfig) -> ConfigDef:
    """The GROUP resource's keys, their defaults the broker's, bounded by its min/max keys."""
    return ConfigDef([
        ConfigKey("consumer.session.timeout.ms", "int", cfg.session_timeout_ms,
                  between(cfg.min_session_timeout_ms, cfg.max_session_timeout_ms),
                  "Session timeout of this consumer group's members"),
        ConfigKey("consumer.heartbeat.interval.ms", "int", cfg.heartbeat_interval_ms,
                  between(cfg.min_heartbeat_interval_ms, cfg.max_heartbeat_interval_ms),
                  "Heartbeat interval of this consumer group's members"),
    ])


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The effective per-group values: overrides over the broker's defaults."""

    session_timeout_ms: int
    heartbeat_interval_ms: int


def group_settings(cfg: ConsumerGroupConfig, overrides: Mapping[str, str]) -> GroupSettings:
    parsed = group_config_def(cfg).parse(dict(overrides))
    return GroupSettings(parsed["consumer.session.timeout.ms"], parsed["consumer.heartbeat.interval.ms"])


def validate_group_configs(cfg: ConsumerGroupConfig, overrides: Mapping[str, str]) -> None:
    """Refuse unknown keys and out-of-bounds values, naming the key (Kafka's ``GroupConfig.validate``)."""
    unknown = sorted(k for k in overrides if k not in GROUP_CONFIG_KEYS)
    if unknown:
        raise InvalidConfigError(f"Unknown group config name: {unknown[0]}")
    settings = group_settings(cfg, overrides)
    if settings.heartbeat_interval_ms >= settings.session_timeout_ms:
        raise InvalidConfigError(
            f"Invalid value {settings.heartbeat_interval_ms} for configuration consumer.heartbeat.interval.ms: "
            f"must be less than consumer.session.timeout.ms ({settings.session_timeout_ms})")
