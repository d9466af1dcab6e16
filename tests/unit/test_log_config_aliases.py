"""The deprecated topic keys of Strata's original spec (``remote.log.storage.enable``,
``remote.log.retention.ms``, ``remote.log.retention.bytes``): accepted as aliases of Kafka's keys, with a
deprecation WARNING naming the canonical key, and refused when they contradict the canonical key."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from strata.config import LogConfig
from strata.config import log_config as lc
from strata.errors import ErrorCode, InvalidConfigError

LOGGER = "strata.config.log_config"


@pytest.fixture(autouse=True)
def fresh_warnings() -> Iterator[None]:
    """The deprecation WARNING is rate-limited per process: every test starts with none logged."""
    lc._alias_warned.clear()
    yield
    lc._alias_warned.clear()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("alias", "value", "field", "expected"),
    [
        ("remote.log.storage.enable", "true", "remote_storage_enable", True),
        ("remote.log.retention.ms", "3600000", "retention_ms", 3_600_000),
        ("remote.log.retention.bytes", "1048576", "retention_bytes", 1_048_576),
    ],
)
def test_each_alias_sets_its_canonical_key_and_warns(caplog, alias, value, field, expected):
    caplog.set_level(logging.WARNING, LOGGER)
    config = LogConfig.from_props({alias: value})
    assert getattr(config, field) == expected
    canonical = lc.TOPIC_CONFIG_ALIASES[alias]
    assert warnings_of(caplog) == [f"topic config {alias} is deprecated: use {canonical} "
                                   f"(the value is applied to {canonical})"]
    # what is stored and reported is the canonical key only
    assert alias not in config.to_props() and config.to_props()[canonical] == str(expected).lower()


def test_with_overrides_takes_aliases_over_defaults():
    """The defaults hold every canonical key: an alias override must replace them, not conflict with them."""
    defaults = LogConfig.from_props({"retention.ms": "86400000"})
    config = defaults.with_overrides({"remote.log.retention.ms": "1000", "remote.log.retention.bytes": 5000,
                                      "remote.log.storage.enable": "true", "local.retention.ms": "500"})
    assert (config.retention_ms, config.retention_bytes, config.remote_storage_enable) == (1000, 5000, True)
    assert config.local_retention_ms == 500  # cross-key rules see the alias's value (500 <= 1000)
    with pytest.raises(InvalidConfigError, match="local.retention.ms"):
        defaults.with_overrides({"remote.log.retention.ms": "100", "remote.log.storage.enable": "true",
                                 "local.retention.ms": "500"})


@pytest.mark.parametrize(
    ("props", "canonical", "alias"),
    [
        ({"retention.ms": "1000", "remote.log.retention.ms": "2000"}, "retention.ms", "remote.log.retention.ms"),
        ({"remote.log.retention.bytes": "10", "retention.bytes": "-1"}, "retention.bytes",
         "remote.log.retention.bytes"),
        ({"remote.storage.enable": "false", "remote.log.storage.enable": "true"}, "remote.storage.enable",
         "remote.log.storage.enable"),
    ],
)
def test_alias_and_canonical_with_different_values_are_refused_naming_both(props, canonical, alias):
    for parse in (LogConfig.from_props, LogConfig().with_overrides):
        with pytest.raises(InvalidConfigError) as info:
            parse(props)
        assert info.value.error_code == ErrorCode.INVALID_CONFIG
        assert canonical in str(info.value) and alias in str(info.value)


def test_alias_and_canonical_with_the_same_value_are_accepted():
    config = LogConfig().with_overrides({"remote.storage.enable": "true", "remote.log.storage.enable": "TRUE",
                                         "retention.ms": "1000", "remote.log.retention.ms": " 1000"})
    assert (config.remote_storage_enable, config.retention_ms) == (True, 1000)


def test_an_invalid_alias_value_names_the_canonical_key():
    with pytest.raises(InvalidConfigError, match="retention.ms: must be at least -1"):
        LogConfig.from_props({"remote.log.retention.ms": "-7"})


def test_canonical_topic_configs_keeps_other_keys_and_order_free_values():
    props = {"segment.bytes": "1000", "remote.log.retention.ms": None, "cleanup.policy": "delete"}
    assert lc.canonical_topic_configs(props) == {"segment.bytes": "1000", "retention.ms": None,
                                                 "cleanup.policy": "delete"}
    plain = {"segment.bytes": "1000"}
    assert lc.canonical_topic_configs(plain) == plain and lc.canonical_topic_configs(plain) is not plain


def test_the_warning_is_rate_limited_per_alias(caplog, monkeypatch):
    """One request parses the overrides several times (and every start re-parses the stored ones)."""
    caplog.set_level(logging.WARNING, LOGGER)
    now = [1000.0]
    monkeypatch.setattr(lc.time, "monotonic", lambda: now[0])
    for _ in range(3):
        LogConfig().with_overrides({"remote.log.retention.ms": "1000"})
    LogConfig().with_overrides({"remote.log.retention.bytes": "1000"})
    assert len(warnings_of(caplog)) == 2  # one per alias
    now[0] += lc.ALIAS_WARNING_INTERVAL_S
    LogConfig().with_overrides({"remote.log.retention.ms": "1000"})
    assert len(warnings_of(caplog)) == 3
