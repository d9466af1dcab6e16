"""WAL object keys that sort by creation time.

Inkless names objects ``<prefix>/<random uuid>``, so an object left behind by a crash between upload and
commit can only be found by listing the whole prefix and asking the coordinator about every key. Here
the key starts with the creation time (zero-padded milliseconds, so lexicographic order is time order)
and the uploading broker's id: an orphan sweeper lists the prefix, stops caring about keys newer than
its grace period without asking anyone, and a human can tell which broker wrote a stray object. The
random tail keeps keys unique even when one broker closes two objects in the same millisecond.
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

DEFAULT_PREFIX = "diskless/wal"
_ID = re.compile(r"^(\d{13})-(\d+)-([0-9a-f]{32})$")


def validate_prefix(prefix: str) -> str:
    """A prefix is a store path without leading or trailing ``/`` (``""`` means the store's root)."""
    if prefix.startswith("/") or prefix.endswith("/"):
        raise ValueError(f"object key prefix {prefix!r} must not start or end with '/'")
    if "//" in prefix:
        raise ValueError(f"object key prefix {prefix!r} has an empty path segment")
    return prefix


def new_object_key(prefix: str, broker_id: int, now_ms: int) -> str:
    """``<prefix>/<13-digit ms>-<broker>-<uuid hex>`` (or the id alone when the prefix is empty)."""
    if now_ms < 0 or broker_id < 0:
        raise ValueError(f"object keys need a non-negative time and broker id, got {now_ms} and {broker_id}")
    object_id = f"{now_ms:013d}-{broker_id}-{uuid.uuid4().hex}"
    return f"{prefix}/{object_id}" if prefix else object_id


class ParsedObjectKey(NamedTuple):
    created_ms: int
    broker_id: int


def parse_object_key(prefix: str, key: str) -> ParsedObjectKey | None:
    """The creation time and broker of a key this module made under ``prefix``; None for any other key
    (a sweeper must leave keys it does not recognise alone)."""
    if prefix:
        if not key.startswith(prefix + "/"):
            return None
        key = key[len(prefix) + 1 :]
    match = _ID.match(key)
    if match is None:
        return None
    return ParsedObjectKey(int(match.group(1)), int(match.group(2)))
