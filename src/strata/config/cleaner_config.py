"""The log cleaner's keys of ``server.properties`` (Kafka's ``CleanerConfig`` names and defaults).

The cleaner compacts the logs of topics with ``cleanup.policy`` containing ``compact``
(``__consumer_offsets`` and ``__transaction_state`` among them). Its per-topic knobs are topic configs
(``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms``, ``max.compaction.lag.ms``,
``delete.retention.ms``), whose broker-wide defaults are the ``log.cleaner.*`` synonyms below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strata.config.defs import ConfigKey, at_least, between

MAX_DOUBLE = 1.7976931348623157e308

CLEANER_KEYS = [
    ConfigKey("log.cleaner.enable", "bool", True, None,
              "Run the log cleaner (compacted topics, __consumer_offsets among them, grow without it)"),
    ConfigKey("log.cleaner.threads", "int", 1, at_least(0), "Cleaner threads (0: none)"),
    ConfigKey("log.cleaner.dedupe.buffer.size", "long", 128 * 1024 * 1024, at_least(0),
              "Memory for the key -> offset maps, shared by the cleaner threads"),
    ConfigKey("log.cleaner.io.buffer.load.factor", "double", 0.9, between(0, 1),
              "How full a dedupe map may get before a cleaning stops mapping keys"),
    ConfigKey("log.cleaner.io.buffer.size", "int", 512 * 1024, at_least(0),
              "Accepted for compatibility (Strata's cleaner reads in its own chunks)"),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "double", MAX_DOUBLE, None,
              "The cleaner's read plus write rate, all threads together"),
    ConfigKey("log.cleaner.backoff.ms", "long", 15_000, at_least(0),
              "How long a cleaner thread sleeps when no log needs cleaning"),
    # broker-wide defaults of the topic configs
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", 0.5, between(0, 1), "Default min.cleanable.dirty.ratio"),
    ConfigKey("log.cleaner.delete.retention.ms", "long", 86_400_000, at_least(0), "Default delete.retention.ms"),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "long", 0, at_least(0), "Default min.compaction.lag.ms"),
    ConfigKey("log.cleaner.max.compaction.lag.ms", "long", 2**63 - 1, at_least(1), "Default max.compaction.lag.ms"),
]

CLEANER_TOPIC_DEFAULTS = {
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
}


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    enable: bool = True
    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    max_io_bytes_per_second: float = MAX_DOUBLE
    backoff_ms: int = 15_000

    @classmethod
    def from_parsed(cls, p: Mapping[str, Any]) -> CleanerConfig:
        return cls(
            enable=p["log.cleaner.enable"],
            num_threads=p["log.cleaner.threads"],
            dedupe_buffer_size=p["log.cleaner.dedupe.buffer.size"],
            dedupe_buffer_load_factor=p["log.cleaner.io.buffer.load.factor"],
            io_buffer_size=p["log.cleaner.io.buffer.size"],
            max_io_bytes_per_second=p["log.cleaner.io.max.bytes.per.second"],
            backoff_ms=p["log.cleaner.backoff.ms"],
        )
