"""The KIP-848 / KIP-932 group coordinator keys of ``server.properties``, and the per-group configs.

Broker keys are Kafka 4.2's ``GroupCoordinatorConfig`` / ``ShareGroupConfig`` names and defaults. A
consumer-protocol member's session and heartbeat interval come from the broker
(``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``), not from the client,
and may be overridden per group through IncrementalAlterConfigs on a GROUP resource with the keys of
:data:`GROUP_CONFIG_KEYS` (``consumer.session.timeout.ms`` ...: the broker key without ``group.``),
bounded by the broker's min/max keys, as Kafka's ``GroupConfig`` validates them. Share groups (KIP-932)
have the same three from ``group.share.*`` (:class:`strata.config.share_config.ShareGroupConfig`):
``share.session.timeout.ms``, ``share.heartbeat.interval.ms`` and ``share.record.lock.duration.ms``, and
two keys with no broker counterpart, ``share.auto.offset.reset`` (where a share group with no state yet
starts reading: ``latest``, ``earliest`` or ``by_duration:<ISO-8601 duration>``) and
``share.isolation.level``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigDef, ConfigKey, at_least, between, list_of, one_of
from strata.config.share_config import ShareGroupConfig
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
              "Whether a classic group with live members converts to a consumer group online (upgrade), back "
              "(downgrade), both, or neither (empty groups convert offline whatever the value, as in Kafka)"),
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

GROUP_CONFIG_KEYS = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms",
                     "share.session.timeout.ms", "share.heartbeat.interval.ms", "share.record.lock.duration.ms",
                     "share.auto.offset.reset", "share.isolation.level")

SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
DEFAULT_SHARE_GROUP_CONFIG = ShareGroupConfig()  # Kafka's group.share.* defaults, for callers without a broker

_INT = re.compile(r"^-?\d+$")
# Java's Duration.parse: PnDTnHnMn.nS, each number optionally signed, the whole optionally negated; no
# years, months or weeks (a duration is an exact length of time)
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?"
                       r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_iso_duration_ms(text: str) -> int:
    """An ISO-8601 duration (``PT1H``, ``P1DT2H30M``, ``PT0.5S``) in milliseconds, as Java's
    ``Duration.parse(text).toMillis()`` reads it (case-insensitive, no spaces); raises ValueError for anything
    else, and for a negative duration (``-PT1H``, ``PT-5S``), which no config of Kafka's takes."""
    m = _DURATION.fullmatch(text)
    if m is None or (m[2] is None and m[3] is None) or (m[3] is not None and len(m[3]) == 1):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (days, hours, minutes, seconds: PT1H, "
                         "P1DT2H30M ...)")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in (m[2], m[4], m[5], m[6]))
    nanos = int((m[7] or "").ljust(9, "0"))
    if m[6] and m[6].startswith("-"):
        nanos = -nanos  # Java: PT-1.5S is minus one and a half seconds
    total_nanos = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1_000_000_000 + nanos
    if m[1] == "-":
        total_nanos = -total_nanos
    if total_nanos < 0:
        raise ValueError(f"{text!r} is negative: a negative duration is not supported")
    return total_nanos // 1_000_000


def _share_auto_offset_reset_problem(value: str) -> tuple[str, int] | str:
    """The parsed strategy, or what is wrong with ``value`` (Kafka's ``ShareGroupAutoOffsetResetStrategy
    .fromString``: case-sensitive, ``none`` refused since a share group must start somewhere)."""
    if value in ("latest", "earliest"):
        return value, 0
    if value.startswith("by_duration:"):
        try:
            return "by_duration", parse_iso_duration_ms(value[len("by_duration:"):])
        except ValueError as e:
            return str(e)
    return "must be latest, earliest or by_duration:<ISO-8601 duration> (e.g. by_duration:PT1H)"


def parse_share_auto_offset_reset(value: str) -> tuple[str, int]:
    """``share.auto.offset.reset`` as ("latest" | "earliest" | "by_duration", duration in ms; 0 unless by_duration).

    ``by_duration:P1D`` starts a share-partition with no state at the first record of the last day. Raises
    InvalidConfigError naming the key.
    """
    parsed = _share_auto_offset_reset_problem(value)
    if isinstance(parsed, str):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {SHARE_AUTO_OFFSET_RESET}: {parsed}")
    return parsed


def _share_auto_offset_reset(value: str) -> str | None:
    parsed = _share_auto_offset_reset_problem(value)
    return parsed if isinstance(parsed, str) else None


def group_config_def(cfg: ConsumerGroupConfig, share: ShareGroupConfig = DEFAULT_SHARE_GROUP_CONFIG) -> ConfigDef:
    """The GROUP resource's keys, their defaults the broker's, bounded by its min/max keys."""
    return ConfigDef([
        ConfigKey("consumer.session.timeout.ms", "int", cfg.session_timeout_ms,
                  between(cfg.min_session_timeout_ms, cfg.max_session_timeout_ms),
                  "Session timeout of this consumer group's members"),
        ConfigKey("consumer.heartbeat.interval.ms", "int", cfg.heartbeat_interval_ms,
                  between(cfg.min_heartbeat_interval_ms, cfg.max_heartbeat_interval_ms),
                  "Heartbeat interval of this consumer group's members"),
        ConfigKey("share.session.timeout.ms", "int", share.session_timeout_ms,
                  between(share.min_session_timeout_ms, share.max_session_timeout_ms),
                  "Session timeout of this share group's members"),
        ConfigKey("share.heartbeat.interval.ms", "int", share.heartbeat_interval_ms,
                  between(share.min_heartbeat_interval_ms, share.max_heartbeat_interval_ms),
                  "Heartbeat interval of this share group's members"),
        ConfigKey("share.record.lock.duration.ms", "int", share.record_lock_duration_ms,
                  between(share.min_record_lock_duration_ms, share.max_record_lock_duration_ms),
                  "How long a record acquired by a member of this share group stays locked to it"),
        ConfigKey(SHARE_AUTO_OFFSET_RESET, "string", "latest", _share_auto_offset_reset,
                  "Where this share group starts reading a partition it has no state for: latest, earliest or "
                  "by_duration:<ISO-8601 duration>"),
        ConfigKey("share.isolation.level", "string", "read_uncommitted", one_of(*SHARE_ISOLATION_LEVELS),
                  "Whether this share group's members see records of open or aborted transactions"),
    ])


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The effective per-group values: overrides over the broker's defaults.

    The share fields default to Kafka's broker defaults so a consumer-group-only caller need not name them;
    :func:`group_settings` always fills them from the broker's ``group.share.*``.
    """

    session_timeout_ms: int
    heartbeat_interval_ms: int
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5_000
    share_record_lock_duration_ms: int = 30_000
    share_auto_offset_reset: str = "latest"  # as set; parse_share_auto_offset_reset reads it
    share_isolation_level: str = "read_uncommitted"

    def values(self) -> dict[str, int | str]:
        """GROUP key -> effective value (what DescribeConfigs reports)."""
        return {"consumer.session.timeout.ms": self.session_timeout_ms,
                "consumer.heartbeat.interval.ms": self.heartbeat_interval_ms,
                "share.session.timeout.ms": self.share_session_timeout_ms,
                "share.heartbeat.interval.ms": self.share_heartbeat_interval_ms,
                "share.record.lock.duration.ms": self.share_record_lock_duration_ms,
                SHARE_AUTO_OFFSET_RESET: self.share_auto_offset_reset,
                "share.isolation.level": self.share_isolation_level}


def group_settings(cfg: ConsumerGroupConfig, overrides: Mapping[str, str],
                   share: ShareGroupConfig = DEFAULT_SHARE_GROUP_CONFIG) -> GroupSettings:
    parsed = group_config_def(cfg, share).parse(dict(overrides))
    return GroupSettings(
        session_timeout_ms=parsed["consumer.session.timeout.ms"],
        heartbeat_interval_ms=parsed["consumer.heartbeat.interval.ms"],
        share_session_timeout_ms=parsed["share.session.timeout.ms"],
        share_heartbeat_interval_ms=parsed["share.heartbeat.interval.ms"],
        share_record_lock_duration_ms=parsed["share.record.lock.duration.ms"],
        share_auto_offset_reset=parsed[SHARE_AUTO_OFFSET_RESET],
        share_isolation_level=parsed["share.isolation.level"],
    )


def validate_group_configs(cfg: ConsumerGroupConfig, overrides: Mapping[str, str],
                           share: ShareGroupConfig = DEFAULT_SHARE_GROUP_CONFIG) -> None:
    """Refuse unknown keys and out-of-bounds values, naming the key (Kafka's ``GroupConfig.validate``)."""
    unknown = sorted(k for k in overrides if k not in GROUP_CONFIG_KEYS)
    if unknown:
        raise InvalidConfigError(f"Unknown group config name: {unknown[0]}")
    settings = group_settings(cfg, overrides, share)
    for prefix, heartbeat, session in (
            ("consumer", settings.heartbeat_interval_ms, settings.session_timeout_ms),
            ("share", settings.share_heartbeat_interval_ms, settings.share_session_timeout_ms)):
        if heartbeat >= session:
            raise InvalidConfigError(
                f"Invalid value {heartbeat} for configuration {prefix}.heartbeat.interval.ms: "
                f"must be less than {prefix}.session.timeout.ms ({session})")
