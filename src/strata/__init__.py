"""Strata: a Kafka-compatible broker with KIP-405 tiered storage.

Layers, lowest first (enforced by import-linter, see pyproject.toml):
``common``/``errors`` → ``protocol`` (sans-IO wire and record formats) → ``log`` (Kafka's on-disk
local log) → ``tiered`` → ``broker``/``spark`` → ``cli``.
"""

__version__ = "0.1.0"
