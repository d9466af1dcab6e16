"""Kafka-named configuration, parsed once into frozen dataclasses."""

from strata.config.defs import ConfigDef, ConfigKey, parse_properties
from strata.config.log_config import LogConfig

__all__ = ["ConfigDef", "ConfigKey", "LogConfig", "parse_properties"]
