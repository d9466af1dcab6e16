"""The diskless coordinator: orders WAL-object batches and answers where each partition's offsets live.

``api`` defines the pluggable :class:`ControlPlane` and its commands; ``memory`` and ``sqlite`` are the
two implementations (the SQLite one is the state each replica of ``__diskless_metadata`` materialises);
``rules`` holds the decisions both share.
"""

from strata.diskless.coordinator.api import ControlPlane
from strata.diskless.coordinator.memory import InMemoryControlPlane
from strata.diskless.coordinator.sqlite import SqliteControlPlane

__all__ = ["ControlPlane", "InMemoryControlPlane", "SqliteControlPlane"]
